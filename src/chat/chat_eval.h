/* chat_eval.h — the seam between the Jinja renderer (chat_render.c: scopes,
 * operators, expression evaluation, statements) and its builtin library
 * (chat_builtins.c: tests, filters, methods, globals, each found in a sorted
 * table). The render context and the renderer's helpers that builtins call
 * back into (failing with a line:column, str(), iteration, comparison,
 * arithmetic, argument binding) are declared here; jr_ marks them. Private
 * to the chat layer. */
#ifndef OKV_CHAT_EVAL_H
#define OKV_CHAT_EVAL_H

#include <string.h>

#include "chat_jinja.h"

typedef struct jscope {
    struct jscope *parent;
    jdict *vars;
    bool captured; /* a macro closes over it, so it must outlive its use */
} jscope;

typedef struct rctx {
    jarena *a;
    jfail *f;
    jbuf *out;
    jscope *scope;
    int ctl;   /* 0, or a pending JN_BREAK / JN_CONTINUE */
    int depth;       /* render nesting (eval, blocks, filters), <= JINJA_MAX_RENDER_DEPTH */
    int macro_depth; /* macro calls in progress */
    int64_t now; /* strftime_now's clock: 0 = local time now, else UTC seconds */
    int64_t steps, max_steps; /* loop iterations + macro calls so far, and the cap */
} rctx;

typedef struct jargs { /* evaluated call arguments */
    jv *pos;
    int npos;
    const char **knames;
    jv *kvals;
    int nk;
} jargs;

/* ---- renderer helpers (chat_render.c) ---------------------------------- */

/* Fails the render with "chat template L:C: message" at node n. */
_Noreturn void jr_fail(rctx *c, const jnode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
_Noreturn void jr_fail_undefined(rctx *c, const jnode *n, jv v);
/* One level deeper into the render (depth-limited); leave with c->depth--. */
void jr_enter(rctx *c, const jnode *n);
/* fmt with one or two %s filled in, in the arena. */
const char *jr_fmtstr(rctx *c, const char *fmt, const char *a, const char *b);
jv jr_undef_attr(rctx *c, jv obj, const char *name);
jv jr_to_str(rctx *c, jv x);          /* Python str(x) */
const char *jr_cstr(rctx *c, jv s);   /* NUL-terminated copy of a string value */
const char *jr_find_sub(const char *h, size_t hn, const char *nd, size_t nn);
jlist *jr_iter_items(rctx *c, const jnode *n, jv x);
int64_t jr_py_len(rctx *c, const jnode *n, jv x);
bool jr_py_getattr(rctx *c, jv obj, const char *name, jv *out);
jv jr_get_item(rctx *c, const jnode *n, jv obj, jv key);
jv jr_do_slice(rctx *c, const jnode *n, jv obj, jv start, jv stop, jv step);
/* Python order of a and b: -1, 0, 1, or 2 when unordered (NaN). */
int jr_cmp_order(rctx *c, const jnode *n, jv a, jv b, const char *opname);
bool jr_compare_values(rctx *c, const jnode *n, int op, jv a, jv b);
jv jr_arith(rctx *c, const jnode *n, int op, jv a, jv b);
jv jr_percent_format(rctx *c, const jnode *n, jv fmt, jv args);
/* Binds args to a Python-style signature: names[i] positional-or-keyword.
 * Unset slots get JV_UNDEF with u.undef NULL ("missing"); `what` names the
 * callee in errors. */
void jr_bind_args(rctx *c, const jnode *n, const char *what, const jargs *a, const char *const *names, int nnames,
                  jv *slots);
jv jr_need_str(rctx *c, const jnode *n, jv x, const char *what);
int64_t jr_need_int(rctx *c, const jnode *n, jv x, const char *what);

static inline bool jr_given(jv x) { return !(x.t == JV_UNDEF && x.u.undef == NULL); }
static inline bool jr_str_eq(jv s, const char *lit) {
    return s.t == JV_STR && s.u.s.n == strlen(lit) && !memcmp(s.u.s.p, lit, s.u.s.n);
}

/* ---- builtins (chat_builtins.c) ---------------------------------------- */

jv jinja_apply_filter(rctx *c, const jnode *n, const char *name, jv x, const jargs *a);
bool jinja_apply_test(rctx *c, const jnode *n, const char *name, jv x, const jargs *a);
/* True if obj has a method called name (so `obj.name` is a bound method). */
bool jinja_has_method(jv obj, const char *name);
jv jinja_call_method(rctx *c, const jnode *n, const jfunc *fn, const jargs *a);
/* The global function called name (its table spelling), or NULL. */
const char *jinja_global_name(const char *name);
jv jinja_call_global(rctx *c, const jnode *n, const char *name, const jargs *a);

#endif
