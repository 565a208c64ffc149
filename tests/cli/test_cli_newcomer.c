/* A newcomer's first ten minutes, through the built binary: --help for the
 * tool and for every command (also after other arguments), --version, the
 * export progress summary, the model's name and size in inspect and in
 * run --verbose, and the streamed reply on stdout kept apart from the
 * stats line on stderr. The run checks use the SmolLM2 GGUF from the model
 * cache (scripts/fetch-models.sh) and are skipped without it.
 * OKV_BIN is the built binary (set by CMake). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "okv_common.h"
#include "okv_test.h"

#define FIX "../shared/fixtures/models/llama32-tiny"

static char dir[] = "/tmp/okv-newcomer-XXXXXX";

typedef struct result {
    int code;
    char *out, *err; /* stdout, stderr (NUL-terminated, "" if empty) */
} result;

static char *slurp(const char *path) {
    char *text;
    size_t len;
    okv_error e;
    return okv_read_file(path, &text, &len, &e) ? okv_strdup("") : text;
}

/* Runs `offkv ARGS` with stdout and stderr captured separately. */
static result run(const char *args) {
    char cmd[4096], o[300], e[300];
    snprintf(o, sizeof o, "%s/stdout.txt", dir);
    snprintf(e, sizeof e, "%s/stderr.txt", dir);
    snprintf(cmd, sizeof cmd, "%s %s > %s 2> %s", OKV_BIN, args, o, e);
    int rc = system(cmd);
    result r = {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(o), slurp(e)};
    return r;
}

static void result_free(result *r) {
    free(r->out);
    free(r->err);
}

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static const char *const COMMANDS[] = {"export", "inspect", "logits", "generate", "perplexity", "run", "serve",
                                       "tokenize", "detokenize", "chat-render"};

static void test_help(void) {
    result r = run("--help");
    CHECKF(r.code == 0 && strstr(r.out, "usage: offkv COMMAND"), "offkv --help: %d %s", r.code, r.out);
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        CHECKF(strstr(r.out, COMMANDS[i]) != NULL, "overview lacks %s", COMMANDS[i]);
    result_free(&r);
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++) {
        char args[128], want[64];
        snprintf(want, sizeof want, "usage: offkv %s ", COMMANDS[i]);
        /* alone, after other arguments, short form, and `offkv help CMD` */
        const char *forms[] = {"%s --help", "%s model.okv --threads 2 --help", "%s -h", "help %s"};
        for (size_t f = 0; f < 4; f++) {
            snprintf(args, sizeof args, forms[f], COMMANDS[i]);
            r = run(args);
            CHECKF(r.code == 0 && starts_with(r.out, want) && !r.err[0], "offkv %s: exit %d, stdout \"%.60s\", stderr \"%s\"", args,
                   r.code, r.out, r.err);
            result_free(&r);
        }
    }
    /* the run page names its options */
    r = run("run --help");
    CHECK(strstr(r.out, "--prompt") && strstr(r.out, "--temperature") && strstr(r.out, "--verbose") && strstr(r.out, "--kv-storage-dtype"));
    result_free(&r);
    /* --help as the text of --prompt is a prompt, not a help request */
    r = run("run /nonexistent.okv --prompt --help");
    CHECKF(r.code != 0 && !strstr(r.out, "usage:") && strstr(r.err, "/nonexistent.okv"), "prompt --help: %d %s", r.code, r.err);
    result_free(&r);
    r = run("--version");
    CHECKF(r.code == 0 && starts_with(r.out, "offkv ") && r.out[6] >= '0' && r.out[6] <= '9', "--version: %s", r.out);
    result_free(&r);
    r = run("no-such-command");
    CHECK(r.code == 2 && strstr(r.err, "unknown command 'no-such-command'"));
    result_free(&r);
}

/* Export reports its progress; inspect names the model and its size. */
static void test_export_and_inspect(void) {
    char args[1024];
    snprintf(args, sizeof args, "export %s -o %s/tiny.okv --dtype fp32", FIX, dir);
    result r = run(args);
    CHECKF(r.code == 0, "%s", r.err);
    int reported = -1;
    double mib = -1;
    const char *p = strstr(r.err, "offkv: converted ");
    CHECKF(p && sscanf(p, "offkv: converted %d tensors, %lf MiB", &reported, &mib) == 2, "no progress summary: %s", r.err);
    result_free(&r);

    snprintf(args, sizeof args, "inspect %s/tiny.okv --json", dir);
    r = run(args);
    cJSON *doc = cJSON_Parse(r.out);
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(doc, "tensors"), *t;
    double params = 0, weight_bytes = 0, all_bytes = 0;
    cJSON_ArrayForEach(t, tensors) {
        double e = 1, nb = cJSON_GetObjectItemCaseSensitive(t, "nbytes") ? cJSON_GetObjectItemCaseSensitive(t, "nbytes")->valuedouble : 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(t, "shape")) e *= d->valuedouble;
        all_bytes += nb;
        const char *dt = okv_json_str(t, "dtype");
        if (dt && !strcmp(dt, "u8")) continue; /* bundled files */
        params += e;
        weight_bytes += nb;
    }
    /* every tensor of the file was reported, with all its bytes */
    CHECKF(reported == cJSON_GetArraySize(tensors) && fabs(mib - all_bytes / 1048576.0) < 0.06, "progress %d tensors %.2f MiB vs %d, %.2f",
           reported, mib, cJSON_GetArraySize(tensors), all_bytes / 1048576.0);
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(doc, "parameters");
    const cJSON *jb = cJSON_GetObjectItemCaseSensitive(doc, "weight_bytes");
    CHECKF(!strcmp(okv_json_str(doc, "name") ? okv_json_str(doc, "name") : "", "llama32-tiny"), "name %s", okv_json_str(doc, "name"));
    CHECKF(jp && params > 0 && jp->valuedouble == params && jb && jb->valuedouble == weight_bytes, "parameters %g vs %g",
           jp ? jp->valuedouble : -1, params);
    /* fp32: four bytes per parameter */
    CHECK(weight_bytes == 4 * params);
    cJSON_Delete(doc);
    result_free(&r);

    snprintf(args, sizeof args, "inspect %s/tiny.okv", dir);
    r = run(args);
    char want[128];
    snprintf(want, sizeof want, "model: llama32-tiny | %.1fK parameters | ", params / 1e3);
    CHECKF(r.code == 0 && starts_with(r.out, want), "inspect text starts \"%.80s\", want \"%s\"", r.out, want);
    result_free(&r);
}

/* The reply on stdout ends with exactly one newline; nothing else is on
 * stdout; the stats (and with --verbose the model line) are on stderr. */
static void test_run_streams(void) {
    char model[600];
    const char *home = getenv("HOME"), *cache = getenv("OKV_CACHE");
    if (cache) snprintf(model, sizeof model, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else snprintf(model, sizeof model, "%s/.cache/offkv/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : "");
    if (!okv_file_exists(model)) {
        printf("SKIP run checks: %s is not there (scripts/fetch-models.sh)\n", model);
        return;
    }
    char args[1400];
    snprintf(args, sizeof args, "export %s -o %s/smol.okv --dtype fp32 --max-ctx-len 256", model, dir);
    result r = run(args);
    CHECKF(r.code == 0, "%s", r.err);
    result_free(&r);
    /* HF's greedy continuation of this prompt is " Paris." "\n" "\n" ...
     * (../shared/fixtures/real/smollm2-135m-instruct): after 3 tokens the
     * text already ends with a newline, so none may be added */
    snprintf(args, sizeof args, "run %s/smol.okv --chat none --prompt 'The capital of France is' --greedy --max-new-tokens 3", dir);
    r = run(args);
    CHECKF(r.code == 0 && !strcmp(r.out, " Paris.\n"), "stdout \"%s\" (stderr %s)", r.out, r.err);
    CHECKF(strstr(r.err, "generated 3 tok") && !strstr(r.err, "model "), "stderr %s", r.err);
    result_free(&r);
    /* after 2 tokens (" Paris" ".") the newline is added */
    snprintf(args, sizeof args, "run %s/smol.okv --chat none --prompt 'The capital of France is' --greedy --max-new-tokens 2 --verbose", dir);
    r = run(args);
    CHECKF(r.code == 0 && !strcmp(r.out, " Paris.\n"), "stdout \"%s\"", r.out);
    CHECKF(starts_with(r.err, "offkv: model SmolLM2-135M-Instruct.Q4_1 | LlamaForCausalLM | 134.5M parameters | ") &&
               strstr(r.err, "MiB of f32 weights") && strstr(r.err, "caches") && strstr(r.err, "generated 2 tok"),
           "stderr %s", r.err);
    /* last, the variants the kernel router ran: a matmul (dense or block) and an attention */
    const char *ran = strstr(r.err, "offkv: kernels ran: matmul");
    CHECKF(ran && strstr(ran, "; attend: ") && strchr(ran, '\n'), "stderr %s", r.err);
    result_free(&r);
    /* --mmap: the same tokens with the file mapped, and the model line says so */
    snprintf(args, sizeof args, "run %s/smol.okv --chat none --prompt 'The capital of France is' --greedy --max-new-tokens 2 --verbose --mmap", dir);
    r = run(args);
    CHECKF(r.code == 0 && !strcmp(r.out, " Paris.\n"), "stdout \"%s\"", r.out);
    CHECKF(strstr(r.err, "MiB of f32 weights mapped from the file"), "stderr %s", r.err);
    result_free(&r);
}

int main(void) {
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_help();
    test_export_and_inspect();
    test_run_streams();
    okv_test_rm_tree(dir);
    return okv_test_finish();
}
