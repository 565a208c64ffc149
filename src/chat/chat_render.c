/* chat_render.c — walks a parsed template and produces the prompt text.
 *
 * Semantics follow Jinja2 3.1 as HF runs it (ImmutableSandboxedEnvironment,
 * default Undefined): scopes (a for-loop iteration, a for-else branch, a
 * block-set body and a macro call each get their own, `set` writes to the
 * innermost one, `if` makes none; a macro sees the scope it was defined in
 * plus its arguments), Python operators, `a.b` trying the attribute
 * (method) before the item and `a[b]` the item before the attribute,
 * undefined values that render as "" and only fail when used. The builtin
 * tests, filters, methods and globals live in chat_builtins.c, which calls
 * back into the jr_ helpers here (chat_eval.h). Errors name the construct
 * and its line:column. */
#include "chat_eval.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static void count_step(rctx *c, const struct jnode *n);

static jv eval(rctx *c, const jnode *n);
static void render_body(rctx *c, const jnodes *body);


void jr_fail(rctx *c, const jnode *n, const char *fmt, ...) {
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jfail_at(c->f, OKV_ERR_INVALID, n ? n->line : 0, n ? n->col : 0, "%s", msg);
}

/* Templates come from model files and are untrusted: a render may take at
 * most max_steps loop iterations plus macro calls, so nested range() loops
 * cannot hang the caller. */
static void count_step(rctx *c, const jnode *n) {
    if (++c->steps > c->max_steps)
        jr_fail(c, n, "render exceeded %lld loop iterations and macro calls", (long long)c->max_steps);
}

/* One level deeper into the render; every recursion of the renderer passes
 * here, so a crafted template fails cleanly instead of overflowing the stack. */
void jr_enter(rctx *c, const jnode *n) {
    if (++c->depth > JINJA_MAX_RENDER_DEPTH)
        jr_fail(c, n, "render nested deeper than %d (expressions, blocks, filters and macro calls together)",
             JINJA_MAX_RENDER_DEPTH);
}

void jr_fail_undefined(rctx *c, const jnode *n, jv v) {
    jr_fail(c, n, "%s", v.u.undef ? v.u.undef : "value is undefined");
}

const char *jr_fmtstr(rctx *c, const char *fmt, const char *a, const char *b) {
    size_t n = strlen(fmt) + strlen(a) + (b ? strlen(b) : 0) + 1;
    char *s = ja_alloc(c->a, c->f, n);
    snprintf(s, n, fmt, a, b ? b : "");
    return s;
}

static jv undef_name(rctx *c, const char *name) { return jv_undef(jr_fmtstr(c, "'%s' is undefined", name, NULL)); }

jv jr_undef_attr(rctx *c, jv obj, const char *name) {
    if (obj.t == JV_DICT) return jv_undef(jr_fmtstr(c, "'dict object' has no attribute '%s'%s", name, NULL));
    const char *tn = jv_type_name(obj);
    return jv_undef(jr_fmtstr(c, "'%s object' has no attribute '%s'", tn, name));
}

/* ---- small helpers ----------------------------------------------------- */

jv jr_to_str(rctx *c, jv x) {
    if (x.t == JV_STR) return x;
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    jv_str_into(c->a, c->f, &b, x);
    return jv_str(b.p, b.n);
}

const char *jr_cstr(rctx *c, jv s) { /* NUL-terminated copy of a string value */
    return ja_strndup(c->a, c->f, s.u.s.p, s.u.s.n);
}


/* Items of an iterable as a list: list/tuple items, dict keys, string code
 * points; undefined iterates as empty. */
jlist *jr_iter_items(rctx *c, const jnode *n, jv x) {
    jlist *l = jlist_new(c->a, c->f);
    switch (x.t) {
    case JV_UNDEF: return l;
    case JV_LIST: return x.u.l;
    case JV_DICT:
        for (size_t i = 0; i < x.u.d->n; i++) jlist_push(c->a, c->f, l, x.u.d->k[i]);
        return l;
    case JV_STR:
        for (size_t i = 0; i < x.u.s.n;) {
            int32_t cp;
            size_t k = utf8_decode(x.u.s.p, x.u.s.n, i, &cp);
            jlist_push(c->a, c->f, l, jv_str(x.u.s.p + i, k));
            i += k;
        }
        return l;
    default:
        jr_fail(c, n, "'%s' object is not iterable", jv_type_name(x));
    }
}

int64_t jr_py_len(rctx *c, const jnode *n, jv x) {
    switch (x.t) {
    case JV_UNDEF: return 0;
    case JV_STR: return (int64_t)utf8_count(x.u.s.p, x.u.s.n);
    case JV_LIST: return (int64_t)x.u.l->n;
    case JV_DICT: return (int64_t)x.u.d->n;
    default: jr_fail(c, n, "object of type '%s' has no len()", jv_type_name(x));
    }
}

/* ---- scopes ------------------------------------------------------------ */

static jscope *scope_push(rctx *c, jscope *parent) {
    jscope *s = ja_alloc(c->a, c->f, sizeof *s);
    s->parent = parent;
    s->vars = jdict_new(c->a, c->f);
    return s;
}

static void scope_set(rctx *c, const char *name, jv v) {
    jdict_set(c->a, c->f, c->scope->vars, jv_str(name, strlen(name)), v);
}

/* A callable value: a global function, or a method bound to self. */
static jv func_value(rctx *c, jfunc_kind kind, const char *name, jv self) {
    jfunc *fn = ja_alloc(c->a, c->f, sizeof *fn);
    fn->kind = kind;
    fn->name = name;
    fn->self = self;
    jv v;
    v.t = JV_FUNC;
    v.u.fn = fn;
    return v;
}

static jv lookup(rctx *c, const char *name) {
    for (jscope *s = c->scope; s; s = s->parent) {
        jv v;
        if (jdict_get_str(s->vars, name, &v)) return v;
    }
    const char *global = jinja_global_name(name);
    return global ? func_value(c, JF_GLOBAL, global, jv_none()) : undef_name(c, name);
}

/* ---- attribute / item access ------------------------------------------ */

static jv bound_method(rctx *c, jv self, const char *name) { return func_value(c, JF_METHOD, name, self); }

/* Python getattr(obj, name); missing -> undefined (an error only if used). */
bool jr_py_getattr(rctx *c, jv obj, const char *name, jv *out) {
    if (jinja_has_method(obj, name)) {
        *out = bound_method(c, obj, name);
        return true;
    }
    if (obj.t == JV_NS) return jdict_get_str(obj.u.d, name, out);
    return false;
}

/* Python obj[key]; false when missing / not subscriptable. */
static bool py_getitem(rctx *c, jv obj, jv key, jv *out) {
    if (obj.t == JV_DICT) return jdict_get(obj.u.d, key, out);
    if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i = key.t == JV_BOOL ? key.u.b : key.u.i;
        int64_t len = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)utf8_count(obj.u.s.p, obj.u.s.n);
        if (i < 0) i += len;
        if (i < 0 || i >= len) return false;
        if (obj.t == JV_LIST) { *out = obj.u.l->v[i]; return true; }
        size_t b = utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i);
        size_t e = utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
        *out = jv_str(obj.u.s.p + b, e - b);
        return true;
    }
    (void)c;
    return false;
}

/* Jinja's environment.getattr: attribute first, then item. */
static jv get_attr(rctx *c, const jnode *n, jv obj, const char *name) {
    if (obj.t == JV_UNDEF) jr_fail_undefined(c, n, obj);
    jv out;
    if (jr_py_getattr(c, obj, name, &out)) return out;
    if (py_getitem(c, obj, jv_str(name, strlen(name)), &out)) return out;
    return jr_undef_attr(c, obj, name);
}

/* Jinja's environment.getitem: item first, then attribute for string keys. */
jv jr_get_item(rctx *c, const jnode *n, jv obj, jv key) {
    if (obj.t == JV_UNDEF) jr_fail_undefined(c, n, obj);
    jv out;
    if (py_getitem(c, obj, key, &out)) return out;
    if (key.t == JV_STR) {
        const char *name = jr_cstr(c, key);
        if (jr_py_getattr(c, obj, name, &out)) return out;
        return jr_undef_attr(c, obj, name);
    }
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    jv_repr_into(c->a, c->f, &b, key);
    return jv_undef(jr_fmtstr(c, "'%s object' has no element %s", jv_type_name(obj), b.p));
}

/* Python slice.indices + gather, over list items or string code points. */
jv jr_do_slice(rctx *c, const jnode *n, jv obj, jv start, jv stop, jv step) {
    if (obj.t == JV_UNDEF) jr_fail_undefined(c, n, obj);
    if (obj.t != JV_LIST && obj.t != JV_STR) jr_fail(c, n, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t len = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)utf8_count(obj.u.s.p, obj.u.s.n);
    int64_t st = 1;
    jv parts[3] = {start, stop, step};
    for (int i = 0; i < 3; i++)
        if (parts[i].t != JV_NONE && parts[i].t != JV_UNDEF && parts[i].t != JV_INT && parts[i].t != JV_BOOL)
            jr_fail(c, n, "slice indices must be integers or None");
    if (step.t == JV_INT || step.t == JV_BOOL) st = step.t == JV_INT ? step.u.i : step.u.b;
    if (st == 0) jr_fail(c, n, "slice step cannot be zero");
    int64_t lo, hi;
    bool has_start = start.t == JV_INT || start.t == JV_BOOL, has_stop = stop.t == JV_INT || stop.t == JV_BOOL;
    int64_t s0 = has_start ? (start.t == JV_INT ? start.u.i : start.u.b) : 0;
    int64_t s1 = has_stop ? (stop.t == JV_INT ? stop.u.i : stop.u.b) : 0;
    if (st > 0) {
        lo = has_start ? (s0 < 0 ? (s0 + len < 0 ? 0 : s0 + len) : (s0 > len ? len : s0)) : 0;
        hi = has_stop ? (s1 < 0 ? (s1 + len < 0 ? 0 : s1 + len) : (s1 > len ? len : s1)) : len;
    } else {
        lo = has_start ? (s0 < 0 ? (s0 + len < 0 ? -1 : s0 + len) : (s0 >= len ? len - 1 : s0)) : len - 1;
        hi = has_stop ? (s1 < 0 ? (s1 + len < 0 ? -1 : s1 + len) : (s1 >= len ? len - 1 : s1)) : -1;
    }
    if (obj.t == JV_LIST) {
        jlist *l = jlist_new(c->a, c->f);
        l->tuple = obj.u.l->tuple;
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) jlist_push(c->a, c->f, l, obj.u.l->v[i]);
        return jv_list(l);
    }
    jlist *chars = jr_iter_items(c, n, obj);
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
        jb_put(c->a, c->f, &b, chars->v[i].u.s.p, chars->v[i].u.s.n);
    return jv_str(b.p, b.n);
}

/* ---- arguments ---------------------------------------------------------- */

static jargs eval_args(rctx *c, const jnode *n) {
    jargs a;
    memset(&a, 0, sizeof a);
    a.npos = n->args.n;
    a.nk = n->kvals.n;
    a.knames = n->knames;
    if (a.npos) a.pos = ja_alloc(c->a, c->f, (size_t)a.npos * sizeof *a.pos);
    if (a.nk) a.kvals = ja_alloc(c->a, c->f, (size_t)a.nk * sizeof *a.kvals);
    for (int i = 0; i < a.npos; i++) a.pos[i] = eval(c, n->args.v[i]);
    for (int i = 0; i < a.nk; i++) a.kvals[i] = eval(c, n->kvals.v[i]);
    return a;
}

/* Binds args to a Python-style signature: names[i] positional-or-keyword.
 * Unset slots get JV_UNDEF with u.undef NULL ("missing"). */
void jr_bind_args(rctx *c, const jnode *n, const char *what, const jargs *a,
                      const char *const *names, int nnames, jv *slots) {
    for (int i = 0; i < nnames; i++) slots[i] = jv_undef(NULL);
    if (a->npos > nnames) jr_fail(c, n, "%s takes at most %d argument(s) (%d given)", what, nnames, a->npos);
    for (int i = 0; i < a->npos; i++) slots[i] = a->pos[i];
    for (int k = 0; k < a->nk; k++) {
        int i;
        for (i = 0; i < nnames; i++)
            if (!strcmp(names[i], a->knames[k])) break;
        if (i == nnames) jr_fail(c, n, "%s got an unexpected keyword argument '%s'", what, a->knames[k]);
        if (i < a->npos) jr_fail(c, n, "%s got multiple values for argument '%s'", what, a->knames[k]);
        slots[i] = a->kvals[k];
    }
}


jv jr_need_str(rctx *c, const jnode *n, jv x, const char *what) {
    if (x.t != JV_STR) jr_fail(c, n, "%s must be a string, not '%s'", what, jv_type_name(x));
    return x;
}

int64_t jr_need_int(rctx *c, const jnode *n, jv x, const char *what) {
    if (x.t == JV_INT) return x.u.i;
    if (x.t == JV_BOOL) return x.u.b;
    jr_fail(c, n, "%s must be an integer, not '%s'", what, jv_type_name(x));
}

const char *jr_find_sub(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

/* ---- operators -------------------------------------------------------------- */

static int cmp_order_at(rctx *c, const jnode *n, jv a, jv b, const char *opname, int depth);

int jr_cmp_order(rctx *c, const jnode *n, jv a, jv b, const char *opname) {
    return cmp_order_at(c, n, a, b, opname, 0);
}

static int cmp_order_at(rctx *c, const jnode *n, jv a, jv b, const char *opname, int depth) {
    if (depth > JINJA_MAX_VALUE_DEPTH)
        jr_fail(c, n, "'%s' on lists nested deeper than %d (or containing themselves)", opname, JINJA_MAX_VALUE_DEPTH);
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
            return x < y ? -1 : x > y;
        }
        double x = jv_as_double(a), y = jv_as_double(b);
        if (isnan(x) || isnan(y)) return 2; /* unordered */
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = memcmp(a.u.s.p, b.u.s.p, m);
        if (r) return r < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
        size_t m = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < m; i++) {
            if (jv_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return cmp_order_at(c, n, a.u.l->v[i], b.u.l->v[i], opname, depth + 1);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == JV_UNDEF) jr_fail_undefined(c, n, a);
    if (b.t == JV_UNDEF) jr_fail_undefined(c, n, b);
    jr_fail(c, n, "'%s' not supported between instances of '%s' and '%s'", opname, jv_type_name(a), jv_type_name(b));
}

static bool contains(rctx *c, const jnode *n, jv hay, jv needle) {
    switch (hay.t) {
    case JV_UNDEF: return false;
    case JV_STR:
        if (needle.t != JV_STR) jr_fail(c, n, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        return jr_find_sub(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_eq(hay.u.l->v[i], needle)) return true;
        return false;
    case JV_DICT: {
        jv dummy;
        if ((needle.t == JV_LIST && !needle.u.l->tuple) || needle.t == JV_DICT)
            jr_fail(c, n, "unhashable type: '%s'", jv_type_name(needle));
        return jdict_get(hay.u.d, needle, &dummy);
    }
    default:
        jr_fail(c, n, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

bool jr_compare_values(rctx *c, const jnode *n, int op, jv a, jv b) {
    switch (op) {
    case JOP_EQ: return jv_eq(a, b);
    case JOP_NE: return !jv_eq(a, b);
    case JOP_IN: return contains(c, n, b, a);
    case JOP_NOTIN: return !contains(c, n, b, a);
    default: break;
    }
    const char *nm = op == JOP_LT ? "<" : op == JOP_LE ? "<=" : op == JOP_GT ? ">" : ">=";
    int r = jr_cmp_order(c, n, a, b, nm);
    if (r == 2) return false;
    switch (op) {
    case JOP_LT: return r < 0;
    case JOP_LE: return r <= 0;
    case JOP_GT: return r > 0;
    default: return r >= 0;
    }
}

/* Appends s padded to `width` code points (left-justified with '-'). */
static void put_padded(rctx *c, jbuf *b, jv s, int width, bool left) {
    int64_t pad = (int64_t)width - (int64_t)utf8_count(s.u.s.p, s.u.s.n);
    if (!left) for (int64_t i = 0; i < pad; i++) jb_putc(c->a, c->f, b, ' ');
    jb_put(c->a, c->f, b, s.u.s.p, s.u.s.n);
    if (left) for (int64_t i = 0; i < pad; i++) jb_putc(c->a, c->f, b, ' ');
}

/* Python's printf-style `fmt % args`: args is a tuple (positional), a dict
 * (for %(key)s) or one value. Conversions s r d i u o x X e E f F g G c %. */
jv jr_percent_format(rctx *c, const jnode *n, jv fmt, jv args) {
    jv one[1] = {args};
    const jv *pos = one;
    size_t npos = 1, next = 0;
    bool mapping = args.t == JV_DICT;
    if (args.t == JV_LIST && args.u.l->tuple) { pos = args.u.l->v; npos = args.u.l->n; }
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    const char *p = fmt.u.s.p, *end = p + fmt.u.s.n;
    while (p < end) {
        const char *pct = memchr(p, '%', (size_t)(end - p));
        if (!pct) { jb_put(c->a, c->f, &b, p, (size_t)(end - p)); break; }
        jb_put(c->a, c->f, &b, p, (size_t)(pct - p));
        p = pct + 1;
        if (p >= end) jr_fail(c, n, "incomplete format");
        jv val;
        bool have = false;
        if (*p == '(') {
            const char *close = memchr(p, ')', (size_t)(end - p));
            if (!close) jr_fail(c, n, "incomplete format key");
            if (!mapping) jr_fail(c, n, "format requires a mapping");
            jv key = jv_str(p + 1, (size_t)(close - p - 1));
            if (!jdict_get(args.u.d, key, &val)) jr_fail(c, n, "KeyError: '%.*s'", (int)key.u.s.n, key.u.s.p);
            have = true;
            p = close + 1;
        }
        char flags[8];
        int nf = 0;
        while (p < end && strchr("-+ #0", *p) && nf < 6) flags[nf++] = *p++;
        flags[nf] = 0;
        int width = -1, prec = -1;
        while (p < end && *p >= '0' && *p <= '9') { width = (width < 0 ? 0 : width) * 10 + (*p++ - '0'); if (width > 10000) jr_fail(c, n, "format width too large"); }
        if (p < end && *p == '.') {
            p++;
            prec = 0;
            while (p < end && *p >= '0' && *p <= '9') { prec = prec * 10 + (*p++ - '0'); if (prec > 1000) jr_fail(c, n, "format precision too large"); }
        }
        while (p < end && (*p == 'h' || *p == 'l' || *p == 'L')) p++;
        if (p >= end) jr_fail(c, n, "incomplete format");
        char conv = *p++;
        if (conv == '%') { jb_putc(c->a, c->f, &b, '%'); continue; }
        if (!have) {
            if (next >= npos) jr_fail(c, n, "not enough arguments for format string");
            val = pos[next++];
        }
        bool left = strchr(flags, '-') != NULL;
        char spec[32], out[1200];
        switch (conv) {
        case 's': case 'r': case 'a': {
            jbuf t = {0};
            jb_put(c->a, c->f, &t, "", 0);
            if (conv == 's') jv_str_into(c->a, c->f, &t, val); else jv_repr_into(c->a, c->f, &t, val);
            jv sv = jv_str(t.p, t.n);
            if (prec >= 0 && (size_t)prec < utf8_count(sv.u.s.p, sv.u.s.n))
                sv.u.s.n = utf8_offset(sv.u.s.p, sv.u.s.n, (size_t)prec);
            put_padded(c, &b, sv, width, left);
            break;
        }
        case 'c': {
            jv ch = val;
            if (val.t == JV_INT || val.t == JV_BOOL) {
                int64_t code = val.t == JV_INT ? val.u.i : val.u.b;
                if (code < 0 || code > 0x10FFFF) jr_fail(c, n, "%%c arg not in range(0x110000)");
                utf8proc_uint8_t enc[4];
                utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)code, enc);
                ch = jv_str(ja_strndup(c->a, c->f, (const char *)enc, (size_t)k), (size_t)k);
            } else if (val.t != JV_STR || utf8_count(val.u.s.p, val.u.s.n) != 1) {
                jr_fail(c, n, "%%c requires int or char");
            }
            put_padded(c, &b, ch, width, left);
            break;
        }
        case 'd': case 'i': case 'u': case 'o': case 'x': case 'X': {
            if (!jv_is_number(val) || (val.t == JV_FLOAT && conv != 'd' && conv != 'i' && conv != 'u'))
                jr_fail(c, n, "%%%c format: %s is required, not %s", conv,
                     conv == 'd' || conv == 'i' || conv == 'u' ? "a real number" : "an integer", jv_type_name(val));
            if (val.t == JV_FLOAT && !(fabs(val.u.f) < 9.2e18)) jr_fail(c, n, "%%%c format: number out of range", conv);
            int64_t v = val.t == JV_FLOAT ? (int64_t)val.u.f : val.t == JV_INT ? val.u.i : val.u.b;
            /* Python: sign, then 0x/0X/0o with '#', then digits (at least
             * `prec` of them); '0' pads between prefix and digits. */
            uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
            int base = conv == 'o' ? 8 : (conv == 'x' || conv == 'X') ? 16 : 10;
            const char *digs = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
            char dig[80];
            int nd = 0;
            do { dig[nd++] = digs[mag % (uint64_t)base]; mag /= (uint64_t)base; } while (mag && nd < 70);
            while (nd < prec && nd < 70) dig[nd++] = '0';
            char head[4] = {0};
            int nh = 0;
            if (v < 0) head[nh++] = '-';
            else if (strchr(flags, '+')) head[nh++] = '+';
            else if (strchr(flags, ' ')) head[nh++] = ' ';
            if (strchr(flags, '#') && base != 10) { head[nh++] = '0'; head[nh++] = conv == 'o' ? 'o' : conv; }
            int body = nh + nd, padn = width > body ? width - body : 0;
            bool zero = strchr(flags, '0') && !left;
            if (!left && !zero) for (int k = 0; k < padn; k++) jb_putc(c->a, c->f, &b, ' ');
            jb_put(c->a, c->f, &b, head, (size_t)nh);
            if (zero) for (int k = 0; k < padn; k++) jb_putc(c->a, c->f, &b, '0');
            while (nd > 0) jb_putc(c->a, c->f, &b, dig[--nd]);
            if (left) for (int k = 0; k < padn; k++) jb_putc(c->a, c->f, &b, ' ');
            break;
        }
        case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
            if (!jv_is_number(val)) jr_fail(c, n, "must be real number, not %s", jv_type_name(val));
            snprintf(spec, sizeof spec, "%%%s%s%s%s%c", flags, width >= 0 ? "*" : "", prec >= 0 ? "." : "", prec >= 0 ? "*" : "", conv);
            double d = jv_as_double(val);
            if (width >= 0 && prec >= 0) snprintf(out, sizeof out, spec, width, prec, d);
            else if (width >= 0) snprintf(out, sizeof out, spec, width, d);
            else if (prec >= 0) snprintf(out, sizeof out, spec, prec, d);
            else snprintf(out, sizeof out, spec, d);
            jb_puts(c->a, c->f, &b, out);
            break;
        }
        default:
            jr_fail(c, n, "unsupported format character '%c'", conv);
        }
    }
    /* Python skips this check for mapping-like arguments (dicts, and lists,
     * which CPython also treats as mappings here) */
    bool mapping_like = mapping || (args.t == JV_LIST && !args.u.l->tuple);
    if (!mapping_like && next < npos) jr_fail(c, n, "not all arguments converted during string formatting");
    return jv_str(b.p, b.n);
}

jv jr_arith(rctx *c, const jnode *n, int op, jv a, jv b) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (op == JOP_CONCAT) {
        jbuf s = {0};
        jb_put(c->a, c->f, &s, "", 0);
        jv_str_into(c->a, c->f, &s, a);
        jv_str_into(c->a, c->f, &s, b);
        return jv_str(s.p, s.n);
    }
    if (a.t == JV_UNDEF) jr_fail_undefined(c, n, a);
    if (b.t == JV_UNDEF) jr_fail_undefined(c, n, b);
    if (jv_is_number(a) && jv_is_number(b)) {
        bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
        int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
        double fx = jv_as_double(a), fy = jv_as_double(b);
        int64_t r;
        switch (op) {
        case JOP_ADD:
            if (ints) { if (__builtin_add_overflow(x, y, &r)) jr_fail(c, n, "integer overflow"); return jv_int(r); }
            return jv_float(fx + fy);
        case JOP_SUB:
            if (ints) { if (__builtin_sub_overflow(x, y, &r)) jr_fail(c, n, "integer overflow"); return jv_int(r); }
            return jv_float(fx - fy);
        case JOP_MUL:
            if (ints) { if (__builtin_mul_overflow(x, y, &r)) jr_fail(c, n, "integer overflow"); return jv_int(r); }
            return jv_float(fx * fy);
        case JOP_DIV:
            if (fy == 0) jr_fail(c, n, "division by zero");
            return jv_float(fx / fy);
        case JOP_FLOORDIV:
            if (fy == 0) jr_fail(c, n, "integer division or modulo by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1) jr_fail(c, n, "integer overflow");
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                return jv_int(q);
            }
            return jv_float(floor(fx / fy));
        case JOP_MOD:
            if (fy == 0) jr_fail(c, n, "integer division or modulo by zero");
            if (ints) {
                if (y == -1) return jv_int(0);
                int64_t m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                return jv_int(m);
            } else {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return jv_float(m);
            }
        case JOP_POW:
            if (ints && y >= 0) { /* square-and-multiply, overflow-checked */
                int64_t acc = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) jr_fail(c, n, "integer overflow");
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) jr_fail(c, n, "integer overflow");
                }
                return jv_int(acc);
            }
            if (fx == 0 && fy < 0) jr_fail(c, n, "0.0 cannot be raised to a negative power");
            return jv_float(pow(fx, fy));
        }
    }
    if (op == JOP_ADD && a.t == JV_STR && b.t == JV_STR) {
        char *p = ja_alloc(c->a, c->f, a.u.s.n + b.u.s.n + 1);
        memcpy(p, a.u.s.p, a.u.s.n);
        memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
        return jv_str(p, a.u.s.n + b.u.s.n);
    }
    if (op == JOP_ADD && a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
        jlist *l = jlist_new(c->a, c->f);
        l->tuple = a.u.l->tuple;
        for (size_t i = 0; i < a.u.l->n; i++) jlist_push(c->a, c->f, l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jlist_push(c->a, c->f, l, b.u.l->v[i]);
        return jv_list(l);
    }
    if (op == JOP_MUL && (b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL)) {
        jv t = a; /* n * seq == seq * n */
        a = b;
        b = t;
    }
    if (op == JOP_MUL && ((a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL))) {
        int64_t k = b.t == JV_INT ? b.u.i : b.u.b;
        if (k > 100000) jr_fail(c, n, "repetition count too large");
        if (a.t == JV_STR) {
            jbuf s = {0};
            jb_put(c->a, c->f, &s, "", 0);
            for (int64_t i = 0; i < k; i++) jb_put(c->a, c->f, &s, a.u.s.p, a.u.s.n);
            return jv_str(s.p, s.n);
        }
        jlist *l = jlist_new(c->a, c->f);
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < a.u.l->n; j++) jlist_push(c->a, c->f, l, a.u.l->v[j]);
        return jv_list(l);
    }
    if (op == JOP_MOD && a.t == JV_STR) return jr_percent_format(c, n, a, b);
    jr_fail(c, n, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], jv_type_name(a), jv_type_name(b));
}

static jv call_macro(rctx *c, const jnode *n, const jfunc *fn, const jargs *a) {
    const jnode *m = fn->macro;
    count_step(c, n);
    if (++c->macro_depth > 100) jr_fail(c, n, "macro recursion too deep (calling '%s')", m->name);
    jv *slots = ja_alloc(c->a, c->f, (size_t)(m->ntargets ? m->ntargets : 1) * sizeof *slots);
    char what[160];
    snprintf(what, sizeof what, "macro '%s'", m->name);
    jr_bind_args(c, n, what, a, m->knames, m->ntargets, slots);
    jscope *saved_scope = c->scope;
    jbuf *saved_out = c->out;
    c->scope = scope_push(c, fn->closure);
    for (int i = 0; i < m->ntargets; i++) {
        jv v = slots[i];
        if (!jr_given(v)) v = m->kvals.v[i] ? eval(c, m->kvals.v[i]) : undef_name(c, m->knames[i]);
        scope_set(c, m->knames[i], v);
    }
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    c->out = &b;
    render_body(c, &m->body);
    c->out = saved_out;
    c->scope = saved_scope;
    c->macro_depth--;
    return jv_str(b.p, b.n);
}

static jv call_value(rctx *c, const jnode *n, jv callee, const jargs *a) {
    if (callee.t == JV_UNDEF) jr_fail_undefined(c, n, callee);
    if (callee.t != JV_FUNC) jr_fail(c, n, "'%s' object is not callable", jv_type_name(callee));
    const jfunc *fn = callee.u.fn;
    switch (fn->kind) {
    case JF_GLOBAL: return jinja_call_global(c, n, fn->name, a);
    case JF_METHOD: return jinja_call_method(c, n, fn, a);
    case JF_MACRO: return call_macro(c, n, fn, a);
    }
    jr_fail(c, n, "bad callable");
}

/* ---- expressions ------------------------------------------------------------------ */

static jv eval_node(rctx *c, const jnode *n);

static jv eval(rctx *c, const jnode *n) {
    jr_enter(c, n);
    jv v = eval_node(c, n);
    c->depth--;
    return v;
}

static jv eval_node(rctx *c, const jnode *n) {
    switch (n->kind) {
    case JN_CONST: return n->value;
    case JN_NAME: return lookup(c, n->name);
    case JN_GETATTR: return get_attr(c, n, eval(c, n->a), n->name);
    case JN_GETITEM: {
        jv obj = eval(c, n->a);
        return jr_get_item(c, n, obj, eval(c, n->b));
    }
    case JN_SLICE: {
        jv obj = eval(c, n->a);
        jv s0 = n->b ? eval(c, n->b) : jv_none();
        jv s1 = n->c ? eval(c, n->c) : jv_none();
        jv s2 = n->args.n && n->args.v[0] ? eval(c, n->args.v[0]) : jv_none();
        return jr_do_slice(c, n, obj, s0, s1, s2);
    }
    case JN_CALL: {
        jv callee = eval(c, n->a);
        jargs a = eval_args(c, n);
        return call_value(c, n, callee, &a);
    }
    case JN_FILTER: {
        jv x = eval(c, n->a);
        jargs a = eval_args(c, n);
        return jinja_apply_filter(c, n, n->name, x, &a);
    }
    case JN_TEST: {
        jv x = eval(c, n->a);
        jargs a = eval_args(c, n);
        bool r = jinja_apply_test(c, n, n->name, x, &a);
        return jv_bool(n->negated ? !r : r);
    }
    case JN_NEG: case JN_POS: {
        jv x = eval(c, n->a);
        if (x.t == JV_UNDEF) jr_fail_undefined(c, n, x);
        if (!jv_is_number(x)) jr_fail(c, n, "bad operand type for unary %s: '%s'", n->kind == JN_NEG ? "-" : "+", jv_type_name(x));
        if (n->kind == JN_POS) return x.t == JV_BOOL ? jv_int(x.u.b) : x;
        if (x.t == JV_FLOAT) return jv_float(-x.u.f);
        int64_t v = x.t == JV_BOOL ? x.u.b : x.u.i;
        if (v == INT64_MIN) jr_fail(c, n, "integer overflow");
        return jv_int(-v);
    }
    case JN_NOT: return jv_bool(!jv_truthy(eval(c, n->a)));
    case JN_AND: {
        jv l = eval(c, n->a);
        return jv_truthy(l) ? eval(c, n->b) : l;
    }
    case JN_OR: {
        jv l = eval(c, n->a);
        return jv_truthy(l) ? l : eval(c, n->b);
    }
    case JN_BINOP: {
        jv l = eval(c, n->a);
        jv r = eval(c, n->b);
        return jr_arith(c, n, n->op, l, r);
    }
    case JN_COMPARE: {
        jv l = eval(c, n->a);
        for (int i = 0; i < n->args.n; i++) {
            jv r = eval(c, n->args.v[i]);
            if (!jr_compare_values(c, n, n->ops[i], l, r)) return jv_bool(false);
            l = r;
        }
        return jv_bool(true);
    }
    case JN_COND:
        if (jv_truthy(eval(c, n->c))) return eval(c, n->a);
        return n->b ? eval(c, n->b) : jv_undef("the inline if expression evaluated to false and no else section was defined");
    case JN_LIST_LIT: case JN_TUPLE_LIT: {
        jlist *l = jlist_new(c->a, c->f);
        l->tuple = n->kind == JN_TUPLE_LIT;
        for (int i = 0; i < n->args.n; i++) jlist_push(c->a, c->f, l, eval(c, n->args.v[i]));
        return jv_list(l);
    }
    case JN_DICT_LIT: {
        jdict *d = jdict_new(c->a, c->f);
        for (int i = 0; i < n->args.n; i++) {
            jv k = eval(c, n->args.v[i]);
            if (k.t == JV_LIST && !k.u.l->tuple) jr_fail(c, n, "unhashable type: 'list'");
            if (k.t == JV_DICT || k.t == JV_NS) jr_fail(c, n, "unhashable type: '%s'", jv_type_name(k));
            jdict_set(c->a, c->f, d, k, eval(c, n->kvals.v[i]));
        }
        return jv_dict(d);
    }
    default:
        jr_fail(c, n, "internal error: statement used as expression");
    }
}

/* ---- statements ------------------------------------------------------------------ */

static void bind_targets(rctx *c, const jnode *n, jv v) {
    if (n->ntargets == 1) { scope_set(c, n->targets[0], v); return; }
    if (v.t == JV_UNDEF) jr_fail_undefined(c, n, v);
    jlist *items = jr_iter_items(c, n, v);
    if ((int)items->n != n->ntargets)
        jr_fail(c, n, "%s values to unpack (expected %d, got %zu)", (int)items->n > n->ntargets ? "too many" : "not enough",
             n->ntargets, items->n);
    for (int i = 0; i < n->ntargets; i++) scope_set(c, n->targets[i], items->v[i]);
}

/* The scope for the next iteration (or filter test) of a loop: the previous
 * one emptied for reuse, unless a macro defined in it still refers to it.
 * Reuse keeps long loops (Gemma-4's backward scans are quadratic in the
 * number of messages) from growing the render arena per iteration. */
static jscope *iteration_scope(rctx *c, jscope *prev, jscope *outer) {
    if (prev && !prev->captured) {
        prev->vars->n = 0;
        return prev;
    }
    return scope_push(c, outer);
}

/* The loop object's fields, in the order loop_create lays them out. */
enum { LOOP_CYCLE, LOOP_INDEX, LOOP_INDEX0, LOOP_REVINDEX, LOOP_REVINDEX0, LOOP_FIRST, LOOP_LAST,
       LOOP_LENGTH, LOOP_DEPTH, LOOP_DEPTH0, LOOP_PREVITEM, LOOP_NEXTITEM, LOOP_NFIELDS };

/* Jinja's `loop` is one object per for statement that advances; its fields
 * are laid out once and then updated in place by loop_advance. */
static jdict *loop_create(rctx *c, jv *as_value) {
    static const char *const names[LOOP_NFIELDS] = {
        "cycle", "index", "index0", "revindex", "revindex0", "first", "last",
        "length", "depth", "depth0", "previtem", "nextitem"};
    jdict *loop = jdict_new(c->a, c->f);
    jv lv = jv_dict(loop);
    lv.t = JV_NS; /* attribute access reads its fields; it is no mapping */
    for (int k = 0; k < LOOP_NFIELDS; k++) jdict_set(c->a, c->f, loop, jv_str(names[k], strlen(names[k])), jv_none());
    loop->v[LOOP_CYCLE] = bound_method(c, lv, "cycle");
    loop->v[LOOP_DEPTH] = jv_int(1);
    loop->v[LOOP_DEPTH0] = jv_int(0);
    *as_value = lv;
    return loop;
}

static void loop_advance(jdict *loop, const jlist *items, size_t i) {
    size_t len = items->n;
    jv *v = loop->v;
    v[LOOP_INDEX] = jv_int((int64_t)i + 1);
    v[LOOP_INDEX0] = jv_int((int64_t)i);
    v[LOOP_REVINDEX] = jv_int((int64_t)(len - i));
    v[LOOP_REVINDEX0] = jv_int((int64_t)(len - i - 1));
    v[LOOP_FIRST] = jv_bool(i == 0);
    v[LOOP_LAST] = jv_bool(i + 1 == len);
    v[LOOP_LENGTH] = jv_int((int64_t)len);
    v[LOOP_PREVITEM] = i > 0 ? items->v[i - 1] : jv_undef("there is no previous item");
    v[LOOP_NEXTITEM] = i + 1 < len ? items->v[i + 1] : jv_undef("there is no next item");
}

static void render_for(rctx *c, const jnode *n) {
    jv seq = eval(c, n->a);
    jlist *items = jr_iter_items(c, n, seq);
    jscope *outer = c->scope, *it = NULL;
    if (n->c) { /* loop filter: `for x in xs if cond` */
        jlist *kept = jlist_new(c->a, c->f);
        for (size_t i = 0; i < items->n; i++) {
            c->scope = it = iteration_scope(c, it, outer);
            bind_targets(c, n, items->v[i]);
            bool keep = jv_truthy(eval(c, n->c));
            c->scope = outer;
            if (keep) jlist_push(c->a, c->f, kept, items->v[i]);
        }
        items = kept;
    }
    size_t len = items->n;
    jv lv;
    jdict *loop = loop_create(c, &lv);
    /* Jinja marks the loop as having iterated only when a body run reaches
     * its end, so a body that always `continue`s or `break`s still gets the
     * else branch. */
    bool iterated = false;
    for (size_t i = 0; i < len; i++) {
        count_step(c, n);
        c->scope = it = iteration_scope(c, it, outer);
        loop_advance(loop, items, i);
        scope_set(c, "loop", lv);
        bind_targets(c, n, items->v[i]);
        render_body(c, &n->body);
        c->scope = outer;
        int ctl = c->ctl;
        c->ctl = 0;
        if (!ctl) iterated = true;
        if (ctl == JN_BREAK) break;
    }
    if (!iterated && n->else_body.n) { /* the else branch has a scope of its own too */
        c->scope = scope_push(c, outer);
        render_body(c, &n->else_body);
        c->scope = outer;
    }
}

static void render_stmt(rctx *c, const jnode *n) {
    switch (n->kind) {
    case JN_TEXT: jb_put(c->a, c->f, c->out, n->value.u.s.p, n->value.u.s.n); return;
    case JN_OUTPUT: jv_str_into(c->a, c->f, c->out, eval(c, n->a)); return;
    case JN_IF:
        if (jv_truthy(eval(c, n->a))) render_body(c, &n->body);
        else render_body(c, &n->else_body);
        return;
    case JN_FOR: render_for(c, n); return;
    case JN_SET: {
        jv v = eval(c, n->a);
        if (n->attr) {
            jv ns = lookup(c, n->targets[0]);
            if (ns.t != JV_NS) jr_fail(c, n, "cannot assign attribute '%s' on non-namespace object '%s'", n->attr, n->targets[0]);
            jdict_set(c->a, c->f, ns.u.d, jv_str(n->attr, strlen(n->attr)), v); /* key lives in the template */
            return;
        }
        bind_targets(c, n, v);
        return;
    }
    case JN_SET_BLOCK: { /* the body renders in a scope of its own */
        jbuf *saved = c->out;
        jscope *outer = c->scope;
        jbuf b = {0};
        jb_put(c->a, c->f, &b, "", 0);
        c->out = &b;
        c->scope = scope_push(c, outer);
        render_body(c, &n->body);
        c->scope = outer;
        c->out = saved;
        scope_set(c, n->targets[0], jv_str(b.p, b.n));
        return;
    }
    case JN_MACRO: {
        jfunc *fn = ja_alloc(c->a, c->f, sizeof *fn);
        fn->kind = JF_MACRO;
        fn->name = n->name;
        fn->macro = n;
        fn->closure = c->scope;
        c->scope->captured = true;
        jv v;
        v.t = JV_FUNC;
        v.u.fn = fn;
        scope_set(c, n->name, v);
        return;
    }
    case JN_GENERATION: render_body(c, &n->body); return;
    case JN_BREAK: case JN_CONTINUE: c->ctl = n->kind; return;
    default: jr_fail(c, n, "internal error: expression used as statement");
    }
}

static void render_body(rctx *c, const jnodes *body) {
    jr_enter(c, body->n ? body->v[0] : NULL);
    for (int i = 0; i < body->n && !c->ctl; i++) render_stmt(c, body->v[i]);
    c->depth--;
}

const char *jinja_render(jarena *a, jfail *f, const jnodes *body, jdict *context, int64_t now,
                         int64_t max_steps, size_t *len) {
    rctx c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.f = f;
    c.now = now;
    c.max_steps = max_steps;
    jbuf out = {0};
    jb_put(a, f, &out, "", 0);
    c.out = &out;
    jscope root = {NULL, context, false};
    c.scope = &root;
    render_body(&c, body);
    *len = out.n;
    return out.p;
}
