/* The offkv binary as a user runs it: export -> inspect -> logits ->
 * generate on the llama32-tiny fixture, checked against the oracle, and
 * bad invocations that must fail with a message and the right exit code.
 * OKV_BIN is the built binary (set by CMake). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "okv_common.h"
#include "okv_test.h"

#define FIX "../shared/fixtures/models/llama32-tiny"

static char dir[] = "/tmp/okv-cli-XXXXXX";

/* Runs a shell command line; returns the exit status, stdout (and, with
 * with_stderr, stderr) in *out. */
static int run_to(const char *cmdline, char **out, bool with_stderr) {
    char cmd[2048], path[300];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    snprintf(cmd, sizeof cmd, "%s > %s %s", cmdline, path, with_stderr ? "2>&1" : "2>/dev/null");
    int rc = system(cmd);
    size_t len;
    okv_error err;
    if (out && okv_read_file(path, out, &len, &err)) *out = NULL;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int run(const char *cmdline, char **out) { return run_to(cmdline, out, true); }

static float *read_f32(const char *path, size_t *n) {
    char *data;
    size_t len;
    okv_error err;
    if (okv_read_file(path, &data, &len, &err)) return NULL;
    *n = len / 4;
    return (float *)data;
}

static void test_pipeline(void) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s export %s -o %s/m.okv --dtype fp32", OKV_BIN, FIX, dir);
    CHECK(run(cmd, &out) == 0 && out && strstr(out, "wrote"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s inspect %s/m.okv --json", OKV_BIN, dir);
    CHECK(run(cmd, &out) == 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECK(j && cJSON_GetObjectItemCaseSensitive(j, "n_caches") && !strcmp(okv_json_str(j, "architecture"), "LlamaForCausalLM"));
    cJSON_Delete(j);
    free(out);
    snprintf(cmd, sizeof cmd, "%s logits %s/m.okv --tokens %s/reference.json --out %s/l.f32 --chunk 5", OKV_BIN, dir, FIX, dir);
    CHECK(run(cmd, NULL) == 0);
    char path[300], rpath[300];
    snprintf(path, sizeof path, "%s/l.f32", dir);
    snprintf(rpath, sizeof rpath, "%s/logits.f32", FIX);
    size_t n = 0, rn = 0;
    float *got = read_f32(path, &n), *ref = read_f32(rpath, &rn);
    CHECK(got && ref && n == rn && n == 40 * 512);
    double worst = 0;
    for (size_t i = 0; got && ref && i < n && n == rn; i++) worst = fmax(worst, fabs((double)got[i] - ref[i]));
    CHECKF(worst <= 1e-4, "cli logits max diff %.3g", worst);
    /* greedy generation: the first new token is the oracle's argmax after the prompt */
    cJSON *r;
    okv_error err;
    snprintf(rpath, sizeof rpath, "%s/reference.json", FIX);
    if (!okv_json_load(rpath, &r, &err)) {
        const cJSON *toks = cJSON_GetObjectItemCaseSensitive(r, "tokens");
        char ids[256] = "";
        for (int i = 0; i < 10; i++)
            snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? " " : "", (int)cJSON_GetArrayItem(toks, i)->valuedouble);
        int best = 0;
        for (int v = 1; ref && v < 512; v++) if (ref[9 * 512 + v] > ref[9 * 512 + best]) best = v;
        snprintf(cmd, sizeof cmd, "%s generate %s/m.okv --tokens \"%s\" --max-new-tokens 4 --kv-storage-dtype bf16",
                 OKV_BIN, dir, ids);
        CHECK(run_to(cmd, &out, false) == 0);
        CHECKF(out && atoi(out) == best, "first generated id %s, oracle argmax %d", out ? out : "(none)", best);
        free(out);
        cJSON_Delete(r);
    }
    free(got);
    free(ref);
}

/* The KV storage the CLI picks when not told (--kv-storage-dtype auto): the
 * program's own dtype for a bf16 export, f32 for an fp32 one; an explicit
 * dtype wins. generate prints the cache summary ("| kv DT |") to stderr. */
static void expect_kv(const char *program, const char *flag, const char *want) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s generate %s/%s --tokens \"1 2 3\" --max-new-tokens 1 %s", OKV_BIN, dir, program, flag);
    CHECK(run(cmd, &out) == 0);
    CHECKF(out && strstr(out, want), "%s %s: wanted '%s' in: %s", program, flag, want, out ? out : "(none)");
    free(out);
}

static void test_kv_auto(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s export %s -o %s/m16.okv --dtype bf16", OKV_BIN, FIX, dir);
    CHECK(run(cmd, NULL) == 0);
    expect_kv("m16.okv", "", "| kv bf16 |");
    expect_kv("m16.okv", "--kv-storage-dtype auto", "| kv bf16 |");
    expect_kv("m16.okv", "--kv-storage-dtype f32", "| kv f32 |");
    expect_kv("m.okv", "", "| kv f32 |");
    expect_kv("m.okv", "--kv-storage-dtype f16", "| kv f16 |");
    /* one side alone; the later flag wins, side by side */
    expect_kv("m16.okv", "--kv-v-dtype f16", "| kv K bf16 / V f16 |");
    expect_kv("m16.okv", "--kv-storage-dtype f32 --kv-k-dtype bf16", "| kv K bf16 / V f32 |");
    expect_kv("m16.okv", "--kv-k-dtype f16 --kv-storage-dtype f32", "| kv f32 |");
    expect_kv("m.okv", "--kv-k-dtype f16 --kv-v-dtype auto", "| kv K f16 / V f32 |");
}

static void expect_fail(const char *args, int code, const char *needle) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s", OKV_BIN, args);
    int rc = run(cmd, &out);
    CHECKF(rc == code && out && strstr(out, needle), "'%s': exit %d, output: %s", args, rc, out ? out : "");
    free(out);
}

static void test_errors(void) {
    char args[512];
    expect_fail("frobnicate", 2, "unknown command");
    snprintf(args, sizeof args, "export %s -o %s/x.okv --dtype fp8", FIX, dir);
    expect_fail(args, 2, "--dtype");
    snprintf(args, sizeof args, "export %s -o %s/x.okv --prefill-chunk-size 0", FIX, dir);
    expect_fail(args, 2, "--prefill-chunk-size");
    /* in range for the parser, refused by the library, which does not know flags: the CLI names it */
    snprintf(args, sizeof args, "export ../shared/fixtures/models/gemma3-tiny -o %s/x.okv --prefill-chunk-size 9", dir);
    expect_fail(args, 1, "prefill chunk size 9 is outside [1, 8]: a step may not exceed the smallest sliding window (8) "
                         "(--prefill-chunk-size)");
    snprintf(args, sizeof args, "export /nonexistent-ckpt -o %s/none.okv", dir);
    expect_fail(args, 1, "/nonexistent-ckpt/config.json");
    snprintf(args, sizeof args, "%s/none.okv", dir);
    CHECK(!okv_file_exists(args));
    expect_fail("logits /nonexistent.okv --tokens \"1 2\" --out /tmp/x", 1, "/nonexistent.okv");
    snprintf(args, sizeof args, "generate %s/m.okv --tokens \"1 2 x\"", dir);
    expect_fail(args, 2, "--tokens");
    snprintf(args, sizeof args, "generate %s/m.okv --tokens \"1 2\" --kv-windows 4,-2", dir);
    expect_fail(args, 2, "--kv-windows");
    snprintf(args, sizeof args, "generate %s/m.okv --tokens \"1 99999\"", dir);
    expect_fail(args, 1, "99999");
    snprintf(args, sizeof args, "run %s/m.okv --prompt hi", dir);
    expect_fail(args, 1, "no bundled tokenizer");
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    test_pipeline();
    test_kv_auto();
    test_errors();
    okv_test_rm_tree(dir);
    return okv_test_finish();
}
