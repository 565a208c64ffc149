/* okv_session.c — okv_session (offkv.h): a program, its caches and a runner
 * as one owned object.
 *
 * Built from the public verbs in the order every caller used to repeat
 * (open -> install -> runner) and torn down in reverse, so a session is
 * exactly what those callers built by hand. Its caches are registered under
 * "okv-session-<address of the session>": unique among live sessions (the
 * address is theirs until okv_session_free, which removes the key first),
 * and a registered key keeps every key-based verb (cache length, sequences,
 * state files) working on a session's caches without a second API. */
#include <stdio.h>
#include <stdlib.h>

#include "offkv.h"
#include "okv_common.h"

struct okv_session {
    okv_program *owned;      /* the program okv_session_create opened; NULL when borrowed */
    const okv_program *p;
    okv_runner *runner;
    bool installed;          /* key holds this session's caches */
    char key[48];
};

void okv_session_options_default(okv_session_options *o) {
    memset(o, 0, sizeof *o);
    okv_program_options_default(&o->program);
    okv_cache_options_default(&o->cache);
    okv_runner_options_default(&o->runner);
}

/* Installs s->p's caches under the session's key and creates the runner. */
static okv_status session_build(okv_session *s, const okv_session_options *o, okv_error *err) {
    snprintf(s->key, sizeof s->key, "okv-session-%p", (void *)s);
    okv_status st = okv_cache_install(s->key, s->p, &o->cache, err);
    if (st) return st;
    s->installed = true;
    return okv_runner_create(s->p, s->key, &o->runner, &s->runner, err);
}

/* A session over p (owned: p is the session's to free, also on failure). */
static okv_status session_new(const okv_program *p, okv_program *owned, const okv_session_options *o,
                              okv_session **out, okv_error *err) {
    okv_session *s = calloc(1, sizeof *s);
    if (!s) {
        okv_program_free(owned);
        return okv_fail(err, OKV_ERR_NOMEM, "out of memory for a session");
    }
    s->p = p;
    s->owned = owned;
    okv_status st = session_build(s, o, err);
    if (st) { okv_session_free(s); return st; }
    *out = s;
    return OKV_OK;
}

okv_status okv_session_create(const char *path, const okv_session_options *o, okv_session **out, okv_error *err) {
    *out = NULL;
    okv_session_options d;
    if (!o) { okv_session_options_default(&d); o = &d; }
    if (!path) return okv_fail(err, OKV_ERR_INVALID, "session: no program path given");
    okv_program *p = NULL;
    okv_status st = okv_program_open_with(path, &o->program, &p, err);
    if (st) return st;
    return session_new(p, p, o, out, err);
}

okv_status okv_session_create_for(const okv_program *p, const okv_session_options *o, okv_session **out,
                                  okv_error *err) {
    *out = NULL;
    okv_session_options d;
    if (!o) { okv_session_options_default(&d); o = &d; }
    if (!p) return okv_fail(err, OKV_ERR_INVALID, "session: no program given");
    return session_new(p, NULL, o, out, err);
}

void okv_session_free(okv_session *s) {
    if (!s) return;
    okv_runner_free(s->runner);
    okv_error ignored;
    if (s->installed) okv_cache_remove(s->key, &ignored);
    okv_program_free(s->owned);
    free(s);
}

const okv_program *okv_session_program(const okv_session *s) { return s->p; }

okv_runner *okv_session_runner(const okv_session *s) { return s->runner; }

const char *okv_session_cache_key(const okv_session *s) { return s->key; }
