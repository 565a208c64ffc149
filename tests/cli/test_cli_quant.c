/* The quantization and quality commands as a user runs them:
 * export --qlinear/--qembedding (and bad values of each flag), inspect
 * showing schemes and bytes per scheme, and `offkv perplexity` with a
 * byte-level tokenizer written here (256 byte tokens: every id fits the
 * fixture's 512-token vocabulary): a program against itself has KL 0 and
 * agrees everywhere, against a 4-bit program it does not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "okv_common.h"
#include "okv_test.h"

#define FIX "../shared/fixtures/models/llama32-tiny"

static char dir[] = "/tmp/okv-cli-q-XXXXXX";

static int run(const char *args, char **out) {
    char cmd[2048], path[300];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    snprintf(cmd, sizeof cmd, "%s %s > %s 2>&1", OKV_BIN, args, path);
    int rc = system(cmd);
    size_t len;
    okv_error err;
    if (out && okv_read_file(path, out, &len, &err)) *out = NULL;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void expect(const char *args, int code, const char *needle) {
    char *out = NULL;
    int rc = run(args, &out);
    CHECKF(rc == code && out && strstr(out, needle), "'%s': exit %d, output: %s", args, rc, out ? out : "");
    free(out);
}

/* GPT-2's byte -> code point map, as UTF-8. */
static void byte_token(int b, char *buf) {
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        int n = 0;
        for (int x = 0; x < b; x++) n += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
        cp = 256 + n;
    }
    if (cp == '"' || cp == '\\') snprintf(buf, 8, "\\%c", cp);
    else if (cp < 0x80) snprintf(buf, 8, "%c", cp);
    else snprintf(buf, 8, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
}

static void write_tokenizer(const char *path) {
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,"
               "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
               "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
               "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
               "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        char t[8];
        byte_token(b, t);
        fprintf(f, "%s\"%s\":%d", b ? "," : "", t, b);
    }
    fprintf(f, "},\"merges\":[]}}");
    fclose(f);
}

static double number_after(const char *s, const char *key) {
    const char *p = s ? strstr(s, key) : NULL;
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static void test_export_inspect(void) {
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "export %s -o %s/q.okv --dtype fp32 --qlinear 4w --qlinear-group-size 64 --qembedding 8w", FIX, dir);
    expect(args, 0, "wrote");
    snprintf(args, sizeof args, "inspect %s/q.okv", dir);
    CHECK(run(args, &out) == 0);
    CHECKF(out && strstr(out, "q4 g64 asym f16") && strstr(out, "q8 g32 sym f16") && strstr(out, "bytes by scheme:"), "%s", out);
    free(out);
    snprintf(args, sizeof args, "inspect %s/q.okv --json", dir);
    CHECK(run(args, &out) == 0);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(j, "bytes_by_scheme");
    CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(by, "q4 g64 asym f16")) &&
          cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(by, "q8 g32 sym f16")) && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(by, "f32")));
    cJSON_Delete(j);
    free(out);
    snprintf(args, sizeof args, "export %s -o %s/f.okv --dtype fp32", FIX, dir);
    expect(args, 0, "wrote");
    snprintf(args, sizeof args, "export %s -o %s/x.okv --qlinear 3w", FIX, dir);
    expect(args, 2, "--qlinear");
    snprintf(args, sizeof args, "export %s -o %s/x.okv --qembedding 16w", FIX, dir);
    expect(args, 2, "--qembedding");
    snprintf(args, sizeof args, "export %s -o %s/x.okv --qlinear 4w --qlinear-group-size 48", FIX, dir);
    expect(args, 2, "48");
    snprintf(args, sizeof args, "export %s -o %s/x.okv --qlinear 4w --qlinear-group-size 128", FIX, dir);
    expect(args, 1, "is not a multiple of the linear-weight group size 128 (--qlinear-group-size)");
}

static void test_perplexity(void) {
    char args[1024], path[300], tok[300], *out = NULL;
    snprintf(tok, sizeof tok, "%s/tok.json", dir);
    write_tokenizer(tok);
    snprintf(path, sizeof path, "%s/text.txt", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 6; i++) fprintf(f, "The quick brown fox jumps over the lazy dog, %d times.\n", i);
    fclose(f);
    snprintf(args, sizeof args, "perplexity %s/f.okv --file %s --tokenizer %s --ctx 64 --kl-base %s/f.okv --threads 2", dir, path, tok, dir);
    CHECK(run(args, &out) == 0);
    double ppl = number_after(out, "perplexity "), kl = number_after(out, "mean "), agree = number_after(out, "agreement ");
    CHECKF(ppl > 1 && isfinite(ppl) && kl == 0 && agree == 100, "%s", out);
    CHECKF(out && strstr(out, "5 windows of 64 tokens"), "%s", out);
    free(out);
    snprintf(args, sizeof args, "perplexity %s/q.okv --file %s --tokenizer %s --ctx 64 --kl-base %s/f.okv", dir, path, tok, dir);
    CHECK(run(args, &out) == 0);
    double qppl = number_after(out, "perplexity "), base = number_after(out, "base perplexity "), qkl = number_after(out, "mean ");
    CHECKF(qkl > 0 && fabs(base - ppl) <= 1e-4 * ppl && qppl != ppl, "%s", out);
    free(out);
    snprintf(args, sizeof args, "perplexity %s/f.okv --file %s --tokenizer %s --ctx 1", dir, path, tok);
    expect(args, 2, "--ctx");
    snprintf(args, sizeof args, "perplexity %s/f.okv --file %s --tokenizer %s --ctx 1024", dir, path, tok);
    expect(args, 1, "fewer than one window of 1024 tokens (--ctx)");
    snprintf(args, sizeof args, "perplexity %s/f.okv --file %s", dir, path);
    expect(args, 1, "no bundled tokenizer");
    snprintf(args, sizeof args, "perplexity %s/f.okv", dir);
    expect(args, 2, "usage");
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    test_export_inspect();
    test_perplexity();
    okv_test_rm_tree(dir);
    return okv_test_finish();
}
