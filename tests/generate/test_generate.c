/* Text generation end to end on a generated Llama with the real Llama-3
 * tokenizer (vocab 128256): prompt building (template, raw, single BOS),
 * greedy generation equal to an independent argmax loop, streamed text
 * equal to decode(ids), and each stop reason (stop string, EOS, token
 * limit, full context); seeded sampling is reproducible. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen_fixture.h"
#include "offkv_gen.h"
#include "okv_common.h"
#include "okv_test.h"


static char tmpdir[] = "/tmp/okv-gen-XXXXXX";

typedef struct text_buf { char data[8192]; size_t len; int pieces; } text_buf;

static void collect(void *ctx, const char *text, size_t len) {
    text_buf *b = ctx;
    if (b->len + len < sizeof b->data) { memcpy(b->data + b->len, text, len); b->len += len; b->data[b->len] = 0; }
    b->pieces++;
}

static char *make_program(void) { return gen_fixture_llama(tmpdir, 5); }

typedef struct env {
    okv_program *p;
    okv_runner *r;
    okv_tok *tok;
    char *tok_config;
} env;

static void reset_cache(env *e) {
    okv_error err;
    okv_cache_clear("gen", &err);
}

static void test_prompt(env *e) {
    okv_error err = {0};
    int32_t *ids;
    size_t n;
    bool templated;
    okv_gen_prompt_args a = {OKV_CHAT_AUTO, "You are terse.", "Hello", NULL, e->tok_config, NULL, 128000, NULL};
    CHECK_OK(okv_gen_prompt(e->tok, &a, &ids, &n, &templated, &err), &err);
    CHECK(templated);
    CHECK(n > 10 && ids[0] == 128000 && ids[1] != 128000);
    /* the rendered prompt ends with the assistant header */
    char *text;
    size_t len;
    CHECK_OK(okv_tok_decode(e->tok, ids, n, false, &text, &len, &err), &err);
    CHECKF(strstr(text, "<|start_header_id|>system<|end_header_id|>") && strstr(text, "You are terse.") &&
           len > 40 && !strcmp(text + len - strlen("<|start_header_id|>assistant<|end_header_id|>\n\n"),
                               "<|start_header_id|>assistant<|end_header_id|>\n\n"), "rendered: %s", text);
    free(text);
    free(ids);
    /* raw: the post-processor adds BOS once, even when the text starts with one */
    okv_gen_prompt_args raw = {OKV_CHAT_NONE, NULL, "<|begin_of_text|>Once upon a time", NULL, e->tok_config, NULL, 128000, NULL};
    CHECK_OK(okv_gen_prompt(e->tok, &raw, &ids, &n, &templated, &err), &err);
    CHECK(!templated && n > 2 && ids[0] == 128000 && ids[1] != 128000);
    free(ids);
    /* template requested but absent */
    okv_gen_prompt_args none = {OKV_CHAT_TEMPLATE, NULL, "x", NULL, NULL, NULL, 128000, NULL};
    CHECK(okv_gen_prompt(e->tok, &none, &ids, &n, &templated, &err) == OKV_ERR_NOT_FOUND);
}

/* Independent greedy loop over the runner. */
static void greedy_reference(env *e, const int32_t *prompt, int n, int steps, int32_t *out) {
    okv_error err = {0};
    float *logits = malloc(sizeof(float) * 128256);
    int32_t pos[64];
    for (int i = 0; i < n; i++) pos[i] = i;
    for (int t = 0; t < n; t += 16) {
        int T = n - t < 16 ? n - t : 16;
        CHECK_OK(okv_runner_step(e->r, prompt + t, pos + t, T, OKV_LOGITS_LAST, logits, &err), &err);
    }
    for (int k = 0; k < steps; k++) {
        int best = 0;
        for (int v = 1; v < 128256; v++) if (logits[v] > logits[best]) best = v;
        out[k] = best;
        int32_t p = n + k;
        CHECK_OK(okv_runner_step(e->r, &out[k], &p, 1, OKV_LOGITS_LAST, logits, &err), &err);
    }
    free(logits);
}

static okv_gen_options greedy_options(int max_new, text_buf *buf) {
    okv_gen_options o = {0};
    o.max_new_tokens = max_new;
    o.sampling = okv_sampler_params_default();
    o.context_limit = 2048;
    o.on_text = collect;
    o.ctx = buf;
    return o;
}

static void test_generation(env *e) {
    okv_error err = {0};
    int32_t *prompt;
    size_t n;
    CHECK_OK(okv_tok_encode(e->tok, "The quick brown fox", 19, true, &prompt, &n, &err), &err);
    int32_t want[24], got[24];
    greedy_reference(e, prompt, (int)n, 24, want);
    reset_cache(e);

    text_buf buf = {0};
    okv_gen_options o = greedy_options(24, &buf);
    okv_gen_stats st;
    CHECK_OK(okv_generate(e->r, e->tok, prompt, n, 0, &o, got, &st, &err), &err);
    CHECK(st.generated_tokens == 24 && st.stop == OKV_STOP_MAX_TOKENS && st.prompt_tokens == (int64_t)n);
    CHECK(memcmp(got, want, sizeof want) == 0);
    char *text;
    size_t len;
    CHECK_OK(okv_tok_decode(e->tok, want, 24, false, &text, &len, &err), &err);
    CHECKF(buf.len == len && !memcmp(buf.data, text, len), "streamed '%s' vs decoded '%s'", buf.data, text);

    /* the step machine with 3-token prefill chunks: ceil(n / 3) prefill steps, then one
     * step per token, the same ids and text as the independent argmax loop */
    {
        reset_cache(e);
        text_buf sb = {0};
        okv_gen_options so = greedy_options(24, &sb);
        so.prefill_chunk = 3;
        okv_gen_seq *g = NULL;
        CHECK_OK(okv_gen_seq_create(e->r, e->tok, prompt, n, 0, &so, &g, &err), &err);
        int prefill_steps = 0, steps = 0;
        bool done = false;
        while (g && !done && steps < 1000) {
            bool pre = okv_gen_seq_prefilling(g);
            CHECK_OK(okv_gen_seq_step(g, &done, &err), &err);
            prefill_steps += pre;
            steps++;
        }
        size_t ng = 0;
        const int32_t *ids = g ? okv_gen_seq_ids(g, &ng) : NULL;
        CHECKF(prefill_steps == (int)((n + 2) / 3) && steps == prefill_steps + 24, "%d prefill steps, %d steps", prefill_steps, steps);
        CHECK(ng == 24 && ids && !memcmp(ids, want, sizeof want));
        CHECK(g && okv_gen_seq_stats(g)->stop == OKV_STOP_MAX_TOKENS && okv_gen_seq_stats(g)->generated_tokens == 24);
        CHECK(sb.len == len && !memcmp(sb.data, text, len));
        okv_gen_seq_free(g);
    }

    /* a stop string taken from the middle of that text: output ends right before it */
    if (len > 12) {
        char stop[8];
        memcpy(stop, text + 6, 4);
        stop[4] = 0;
        const char *stops[1] = {stop};
        const char *first = strstr(text, stop);
        reset_cache(e);
        text_buf b2 = {0};
        o = greedy_options(24, &b2);
        o.stops = stops;
        o.n_stops = 1;
        CHECK_OK(okv_generate(e->r, e->tok, prompt, n, 0, &o, got, &st, &err), &err);
        CHECK(st.stop == OKV_STOP_STRING);
        CHECKF(b2.len == (size_t)(first - text) && !memcmp(b2.data, text, b2.len), "stop '%s': got '%s'", stop, b2.data);
    }
    /* EOS: generation stops before the EOS token and does not print it */
    reset_cache(e);
    text_buf b3 = {0};
    o = greedy_options(24, &b3);
    o.eos_ids = &want[5];
    o.n_eos = 1;
    CHECK_OK(okv_generate(e->r, e->tok, prompt, n, 0, &o, got, &st, &err), &err);
    int first_eos = 0;
    while (want[first_eos] != want[5]) first_eos++;
    CHECK(st.stop == OKV_STOP_EOS && st.generated_tokens == first_eos);
    /* full context */
    reset_cache(e);
    text_buf b4 = {0};
    o = greedy_options(24, &b4);
    o.context_limit = (int)n + 3;
    CHECK_OK(okv_generate(e->r, e->tok, prompt, n, 0, &o, got, &st, &err), &err);
    CHECK(st.stop == OKV_STOP_CONTEXT && st.generated_tokens == 4);
    free(text);

    /* seeded sampling: same seed, same tokens; the prompt must fit */
    int32_t a[16], b[16];
    for (int rep = 0; rep < 2; rep++) {
        reset_cache(e);
        text_buf bb = {0};
        o = greedy_options(16, &bb);
        o.sampling.do_sample = true;
        o.sampling.temperature = 1.5f;
        o.sampling.top_k = 0;
        o.sampling.seed = 99;
        CHECK_OK(okv_generate(e->r, e->tok, prompt, n, 0, &o, rep ? b : a, &st, &err), &err);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, want, sizeof a) != 0);
    reset_cache(e);
    o.context_limit = 2;
    CHECK(okv_generate(e->r, e->tok, prompt, n, 0, &o, got, &st, &err) == OKV_ERR_CAPACITY);
    free(prompt);
}

/* Two turns through a session: the second reuses the cached prefix and its
 * greedy reply equals a fresh run of the whole second-turn prompt. */
static void chat_session_case(env *e, okv_runner *r, const char *key, int max_new, bool expect_reuse) {
    okv_error err = {0};
    okv_cache_clear(key, &err);
    okv_gen_prompt_args base = {OKV_CHAT_TEMPLATE, "You are terse.", NULL, NULL, e->tok_config, NULL, 128000, NULL};
    okv_chat_session *s = NULL;
    CHECK(!strcmp(okv_runner_cache_key(r), key));
    CHECK_OK(okv_chat_session_create(r, e->tok, &base, &s, &err), &err);
    if (!s) return;
    text_buf t1 = {0}, t2 = {0};
    okv_gen_options o = greedy_options(max_new, &t1);
    okv_gen_stats st;
    int32_t out1[64], out2[64], fresh[64];
    size_t reused = 99;
    CHECK_OK(okv_chat_session_turn(s, "Hello", &o, out1, &st, &reused, &err), &err);
    CHECK(reused == 0 && st.generated_tokens == max_new);
    o = greedy_options(max_new, &t2);
    CHECK_OK(okv_chat_session_turn(s, "And then?", &o, out2, &st, &reused, &err), &err);
    int64_t prefilled = st.prompt_tokens;
    if (expect_reuse) CHECKF(reused > 20 && prefilled > 0, "reused %zu, prefilled %lld", reused, (long long)prefilled);
    else CHECKF(reused == 0, "a ring that cannot serve the prefix is cleared (reused %zu)", reused);

    /* the same conversation rendered in one go, from an empty cache */
    cJSON *msgs = cJSON_CreateArray(), *m;
    const char *turns[4][2] = {{"system", "You are terse."}, {"user", "Hello"}, {"assistant", t1.data}, {"user", "And then?"}};
    for (int k = 0; k < 4; k++) {
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", turns[k][0]);
        cJSON_AddStringToObject(m, "content", turns[k][1]);
        cJSON_AddItemToArray(msgs, m);
    }
    char *json = cJSON_PrintUnformatted(msgs);
    okv_gen_prompt_args full = base;
    full.messages_json = json;
    int32_t *ids;
    size_t n;
    CHECK_OK(okv_gen_prompt(e->tok, &full, &ids, &n, NULL, &err), &err);
    CHECK(n == reused + (size_t)prefilled);
    okv_cache_clear(key, &err);
    text_buf t3 = {0};
    o = greedy_options(max_new, &t3);
    CHECK_OK(okv_generate(r, e->tok, ids, n, 0, &o, fresh, &st, &err), &err);
    CHECK(memcmp(out2, fresh, sizeof(int32_t) * (size_t)max_new) == 0);
    CHECK(t2.len == t3.len && !memcmp(t2.data, t3.data, t2.len));
    free(ids);
    free(json);
    cJSON_Delete(msgs);
    okv_chat_session_free(s);
}

static void test_chat_session(env *e) {
    chat_session_case(e, e->r, "gen", 12, true);
    /* every cache a ring of window 4 (chunk 16: 19 slots): after a long reply
     * the shared prefix is out of reach, the session clears and re-prefills */
    int32_t w = 4;
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.windows = &w;
    co.n_windows = 1;
    okv_error err = {0};
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install("gen-ring", e->p, &co, &err), &err);
    CHECK_OK(okv_runner_create(e->p, "gen-ring", NULL, &r, &err), &err);
    if (r) chat_session_case(e, r, "gen-ring", 40, false);
    okv_runner_free(r);
    okv_cache_remove("gen-ring", &err);
}

int main(void) {
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    char *path = make_program();
    env e = {0};
    okv_error err = {0};
    CHECK_OK(okv_program_open(path, &e.p, &err), &err);
    if (e.p) {
        size_t len, cfg_len;
        const char *cfg = okv_program_blob(e.p, "tokenizer_config.json", &cfg_len);
        const char *tj = okv_program_blob(e.p, "tokenizer.json", &len);
        CHECK(cfg && tj);
        e.tok_config = cfg ? strndup(cfg, cfg_len) : NULL;
        CHECK_OK(okv_tok_load_json(tj, len, &e.tok, &err), &err);
        char *desc = NULL;
        CHECK_OK(okv_program_describe(e.p, true, &desc, &err), &err);
        CHECKF(desc && strstr(desc, "\"chat_template\":\ttrue") && strstr(desc, "\"eos_token\":\t\"<|eot_id|>\""),
               "inspect shows the bundled chat facts");
        free(desc);
        CHECK_OK(okv_cache_install("gen", e.p, NULL, &err), &err);
        CHECK_OK(okv_runner_create(e.p, "gen", NULL, &e.r, &err), &err);
        if (e.tok && e.r) {
            test_prompt(&e);
            test_generation(&e);
            test_chat_session(&e);
        }
        okv_runner_free(e.r);
        okv_cache_remove("gen", &err);
        okv_tok_free(e.tok);
        free(e.tok_config);
        okv_program_free(e.p);
    }
    free(path);
    okv_test_rm_tree(tmpdir);
    return okv_test_finish();
}
