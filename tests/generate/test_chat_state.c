/* test_chat_state.c — a chat session saved after two turns and loaded in a
 * fresh process gives, on the third turn, exactly the greedy reply of an
 * uninterrupted session, serving every restored token from the cache (the
 * same reused count and the same few prefilled tokens as the uninterrupted
 * third turn), for f32 and bf16 KV storage. The file is refused by another
 * program (other weights, same layout), by a key with another kv dtype, and
 * by a key with a window override. Generated Llama, real Llama-3 tokenizer.
 *
 * Processes: the test runs itself (/proc/self/exe) as "save PROGRAM FILE
 * DTYPE" (two turns, then okv_chat_session_save) and "load PROGRAM FILE DTYPE
 * OUT" (okv_chat_session_load, third turn, writes ids and counts to OUT). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen_fixture.h"
#include "offkv_gen.h"
#include "okv_common.h"
#include "okv_test.h"

#define MAX_NEW 10

static char tmpdir[] = "/tmp/okv-chatstate-XXXXXX";
static const char *turns[3] = { "Hello", "And then?", "Tell me more." };

/* A program, its tokenizer, a key and a session over it. */
typedef struct env {
    okv_program *p;
    okv_tok *tok;
    char *tok_config;
    okv_runner *r;
    okv_chat_session *s;
} env;

static bool env_open(env *e, const char *program, okv_dtype kv, int32_t window) {
    memset(e, 0, sizeof *e);
    okv_error err = {0};
    CHECK_OK(okv_program_open(program, &e->p, &err), &err);
    if (!e->p) return false;
    size_t len, cfg_len;
    const char *cfg = okv_program_blob(e->p, "tokenizer_config.json", &cfg_len);
    const char *tj = okv_program_blob(e->p, "tokenizer.json", &len);
    e->tok_config = strndup(cfg, cfg_len);
    CHECK_OK(okv_tok_load_json(tj, len, &e->tok, &err), &err);
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.k_storage_dtype = co.v_storage_dtype = kv;
    co.windows = &window;
    co.n_windows = window ? 1 : 0;
    okv_cache_remove("chat", &err);
    CHECK_OK(okv_cache_install("chat", e->p, &co, &err), &err);
    CHECK_OK(okv_runner_create(e->p, "chat", NULL, &e->r, &err), &err);
    okv_gen_prompt_args base = { OKV_CHAT_TEMPLATE, "You are terse.", NULL, NULL, e->tok_config, NULL, 128000, NULL };
    if (e->r && e->tok) CHECK_OK(okv_chat_session_create(e->r, e->tok, &base, &e->s, &err), &err);
    return e->s != NULL;
}

static void env_close(env *e) {
    okv_error err;
    okv_chat_session_free(e->s);
    okv_runner_free(e->r);
    okv_cache_remove("chat", &err);
    okv_tok_free(e->tok);
    free(e->tok_config);
    okv_program_free(e->p);
}

/* One greedy turn: its ids, reused and prefilled counts. */
typedef struct turn_result {
    int32_t ids[MAX_NEW];
    int64_t reused, prefilled, generated;
} turn_result;

static void run_turn(env *e, int k, turn_result *out) {
    okv_gen_options o = { 0 };
    o.max_new_tokens = MAX_NEW;
    o.sampling = okv_sampler_params_default();
    o.context_limit = 2048;
    okv_gen_stats st;
    size_t reused = 0;
    okv_error err = {0};
    memset(out, 0, sizeof *out);
    CHECK_OK(okv_chat_session_turn(e->s, turns[k], &o, out->ids, &st, &reused, &err), &err);
    out->reused = (int64_t)reused;
    out->prefilled = st.prompt_tokens;
    out->generated = st.generated_tokens;
}

static okv_dtype dtype_of(const char *s) {
    okv_dtype d = OKV_F32;
    okv_kv_dtype_parse(s, &d);
    return d;
}

static int child_save(const char *program, const char *file, const char *dt) {
    env e;
    if (!env_open(&e, program, dtype_of(dt), 0)) return 1;
    turn_result t;
    run_turn(&e, 0, &t);
    run_turn(&e, 1, &t);
    okv_error err = {0};
    CHECK_OK(okv_chat_session_save(e.s, file, &err), &err);
    env_close(&e);
    return okv_test_finish();
}

static int child_load(const char *program, const char *file, const char *dt, const char *out) {
    env e;
    if (!env_open(&e, program, dtype_of(dt), 0)) return 1;
    okv_error err = {0};
    CHECK_OK(okv_chat_session_load(e.s, file, &err), &err);
    turn_result t;
    run_turn(&e, 2, &t);
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(&t, sizeof t, 1, f) != 1) return 1;
    fclose(f);
    env_close(&e);
    return okv_test_finish();
}

static bool run_self(const char *const *args) {
    pid_t pid = fork();
    if (pid == 0) {
        execv("/proc/self/exe", (char *const *)args);
        _exit(127);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

static void check_dtype(const char *program, const char *other, const char *dt) {
    env e;
    if (!env_open(&e, program, dtype_of(dt), 0)) return;
    turn_result full[3];
    for (int k = 0; k < 3; k++) run_turn(&e, k, &full[k]);
    env_close(&e);
    CHECK(full[2].reused > 40 && full[2].prefilled > 0 && full[2].generated == MAX_NEW);

    char file[300], out[300];
    snprintf(file, sizeof file, "%s/session-%s.okvseq", tmpdir, dt);
    snprintf(out, sizeof out, "%s/turn3-%s.bin", tmpdir, dt);
    const char *save[] = { "test_chat_state", "save", program, file, dt, NULL };
    const char *load[] = { "test_chat_state", "load", program, file, dt, out, NULL };
    CHECKF(run_self(save), "the saving process (%s)", dt);
    CHECKF(run_self(load), "the loading process (%s)", dt);
    turn_result t = { 0 };
    FILE *f = fopen(out, "rb");
    CHECK(f && fread(&t, sizeof t, 1, f) == 1);
    if (f) fclose(f);
    CHECKF(!memcmp(t.ids, full[2].ids, sizeof t.ids) && t.generated == full[2].generated,
           "%s: the restored session's third reply equals the uninterrupted one", dt);
    CHECKF(t.reused == full[2].reused && t.prefilled == full[2].prefilled,
           "%s: restored tokens served from the cache: reused %lld (uninterrupted %lld), prefilled %lld (%lld)", dt,
           (long long)t.reused, (long long)full[2].reused, (long long)t.prefilled, (long long)full[2].prefilled);

    /* refusals, the session left as it was (a turn still works from scratch) */
    okv_error err = {0};
    if (env_open(&e, other, dtype_of(dt), 0)) {
        CHECKF(okv_chat_session_load(e.s, file, &err) == OKV_ERR_INVALID && strstr(err.message, "different program") &&
               strstr(err.message, file), "other weights refused: %s", err.message);
        turn_result x;
        run_turn(&e, 0, &x);
        CHECK(x.reused == 0 && x.generated == MAX_NEW);
        env_close(&e);
    }
    if (env_open(&e, program, strcmp(dt, "f32") ? OKV_F32 : OKV_BF16, 0)) {
        CHECK(okv_chat_session_load(e.s, file, &err) == OKV_ERR_INVALID && strstr(err.message, "kv_dtype"));
        env_close(&e);
    }
    if (env_open(&e, program, dtype_of(dt), 8)) {
        CHECK(okv_chat_session_load(e.s, file, &err) == OKV_ERR_INVALID && strstr(err.message, "window"));
        env_close(&e);
    }
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "save")) return child_save(argv[2], argv[3], argv[4]);
    if (argc == 6 && !strcmp(argv[1], "load")) return child_load(argv[2], argv[3], argv[4], argv[5]);
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    char da[300], db[300];
    snprintf(da, sizeof da, "%s/a", tmpdir);
    snprintf(db, sizeof db, "%s/b", tmpdir);
    mkdir(da, 0755);
    mkdir(db, 0755);
    char *program = gen_fixture_llama(da, 5), *other = gen_fixture_llama(db, 6);
    check_dtype(program, other, "f32");
    check_dtype(program, other, "bf16");
    free(program);
    free(other);
    okv_test_rm_tree(tmpdir);
    return okv_test_finish();
}
