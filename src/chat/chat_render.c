/* chat_render.c — walks a parsed template and produces the prompt text.
 *
 * Semantics follow Jinja2 3.1 as HF runs it (ImmutableSandboxedEnvironment,
 * default Undefined): scopes (a for-loop iteration, a for-else branch, a
 * block-set body and a macro call each get their own, `set` writes to the
 * innermost one, `if` makes none; a macro sees the scope it was defined in
 * plus its arguments), Python
 * operators, `a.b` trying the attribute (method) before the item and `a[b]`
 * the item before the attribute, undefined values that render as "" and only
 * fail when used, the builtin filters/tests the templates use, Python string
 * and dict methods, and the globals range, namespace, dict, raise_exception
 * and strftime_now. Errors name the construct and its line:column. */
#include "chat_jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

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

static void count_step(rctx *c, const struct jnode *n);

typedef struct jargs { /* evaluated call arguments */
    jv *pos;
    int npos;
    const char **knames;
    jv *kvals;
    int nk;
} jargs;

static jv eval(rctx *c, const jnode *n);
static void render_body(rctx *c, const jnodes *body);

static _Noreturn void fail(rctx *c, const jnode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail_undefined(rctx *c, const jnode *n, jv v) __attribute__((noreturn));

static void fail(rctx *c, const jnode *n, const char *fmt, ...) {
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
        fail(c, n, "render exceeded %lld loop iterations and macro calls", (long long)c->max_steps);
}

/* One level deeper into the render; every recursion of the renderer passes
 * here, so a crafted template fails cleanly instead of overflowing the stack. */
static void enter(rctx *c, const jnode *n) {
    if (++c->depth > JINJA_MAX_RENDER_DEPTH)
        fail(c, n, "render nested deeper than %d (expressions, blocks, filters and macro calls together)",
             JINJA_MAX_RENDER_DEPTH);
}

static void fail_undefined(rctx *c, const jnode *n, jv v) {
    fail(c, n, "%s", v.u.undef ? v.u.undef : "value is undefined");
}

static const char *fmtstr(rctx *c, const char *fmt, const char *a, const char *b) {
    size_t n = strlen(fmt) + strlen(a) + (b ? strlen(b) : 0) + 1;
    char *s = ja_alloc(c->a, c->f, n);
    snprintf(s, n, fmt, a, b ? b : "");
    return s;
}

static jv undef_name(rctx *c, const char *name) { return jv_undef(fmtstr(c, "'%s' is undefined", name, NULL)); }

static jv undef_attr(rctx *c, jv obj, const char *name) {
    if (obj.t == JV_DICT) return jv_undef(fmtstr(c, "'dict object' has no attribute '%s'%s", name, NULL));
    const char *tn = jv_type_name(obj);
    return jv_undef(fmtstr(c, "'%s object' has no attribute '%s'", tn, name));
}

/* ---- small helpers ----------------------------------------------------- */

static jv to_str(rctx *c, jv x) {
    if (x.t == JV_STR) return x;
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    jv_str_into(c->a, c->f, &b, x);
    return jv_str(b.p, b.n);
}

static const char *cstr(rctx *c, jv s) { /* NUL-terminated copy of a string value */
    return ja_strndup(c->a, c->f, s.u.s.p, s.u.s.n);
}

static bool str_eq(jv s, const char *lit) { return s.t == JV_STR && s.u.s.n == strlen(lit) && !memcmp(s.u.s.p, lit, s.u.s.n); }

static bool py_space(int32_t cp) { return py_isspace(cp); }

static size_t cp_at(const char *s, size_t n, size_t i, int32_t *cp) { return utf8_decode(s, n, i, cp); }

/* Previous code point boundary before byte i. */
static size_t prev_boundary(const char *s, size_t i) {
    if (i == 0) return 0;
    i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

static bool cp_in(int32_t cp, jv chars) {
    for (size_t i = 0; i < chars.u.s.n;) {
        int32_t x;
        i += cp_at(chars.u.s.p, chars.u.s.n, i, &x);
        if (x == cp) return true;
    }
    return false;
}

static bool strip_match(int32_t cp, const jv *chars) { return chars ? cp_in(cp, *chars) : py_space(cp); }

/* Python str.strip/lstrip/rstrip; chars NULL = whitespace. */
static jv str_strip(jv s, const jv *chars, bool left, bool right) {
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n;
    if (left) {
        while (b < e) {
            int32_t cp;
            size_t k = cp_at(p, e, b, &cp);
            if (!strip_match(cp, chars)) break;
            b += k;
        }
    }
    if (right) {
        while (e > b) {
            size_t pb = prev_boundary(p, e);
            if (pb < b) pb = b;
            int32_t cp;
            cp_at(p, e, pb, &cp);
            if (!strip_match(cp, chars)) break;
            e = pb;
        }
    }
    return jv_str(p + b, e - b);
}

static jv str_case(rctx *c, jv s, int mode) { /* 0 lower, 1 upper, 2 capitalize, 3 title */
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    bool first = true, prev_cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        int32_t cp;
        size_t k = cp_at(s.u.s.p, s.u.s.n, i, &cp);
        int32_t o;
        if (mode == 0) o = utf8proc_tolower(cp);
        else if (mode == 1) o = utf8proc_toupper(cp);
        else if (mode == 2) o = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
        else o = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
        if (mode == 3) {
            utf8proc_category_t cat = utf8proc_category(cp);
            prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
        }
        first = false;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t en = utf8proc_encode_char(o, enc);
        jb_put(c->a, c->f, &b, (const char *)enc, (size_t)en);
        i += k;
    }
    return jv_str(b.p, b.n);
}

static const char *find_sub(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static jv str_replace(rctx *c, jv s, jv old, jv new_, int64_t count) {
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    if (old.u.s.n == 0) { /* Python inserts between every code point */
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            if (count < 0 || done < count) { jb_put(c->a, c->f, &b, new_.u.s.p, new_.u.s.n); done++; }
            if (i >= s.u.s.n) break;
            int32_t cp;
            size_t k = cp_at(s.u.s.p, s.u.s.n, i, &cp);
            jb_put(c->a, c->f, &b, s.u.s.p + i, k);
            i += k;
        }
        return jv_str(b.p, b.n);
    }
    const char *p = s.u.s.p, *end = p + s.u.s.n;
    int64_t done = 0;
    while (p < end) {
        const char *hit = (count < 0 || done < count) ? find_sub(p, (size_t)(end - p), old.u.s.p, old.u.s.n) : NULL;
        if (!hit) break;
        jb_put(c->a, c->f, &b, p, (size_t)(hit - p));
        jb_put(c->a, c->f, &b, new_.u.s.p, new_.u.s.n);
        p = hit + old.u.s.n;
        done++;
    }
    jb_put(c->a, c->f, &b, p, (size_t)(end - p));
    return jv_str(b.p, b.n);
}

/* Python str.split(sep, maxsplit); sep NULL = runs of whitespace. */
static jv str_split(rctx *c, const jnode *n, jv s, const jv *sep, int64_t maxsplit) {
    jlist *l = jlist_new(c->a, c->f);
    const char *p = s.u.s.p;
    size_t len = s.u.s.n;
    if (sep) {
        if (sep->u.s.n == 0) fail(c, n, "split(): empty separator");
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) ? find_sub(p + i, len - i, sep->u.s.p, sep->u.s.n) : NULL;
            if (!hit) { jlist_push(c->a, c->f, l, jv_str(p + i, len - i)); break; }
            jlist_push(c->a, c->f, l, jv_str(p + i, (size_t)(hit - (p + i))));
            i = (size_t)(hit - p) + sep->u.s.n;
            done++;
        }
        return jv_list(l);
    }
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        while (i < len) { /* skip whitespace */
            int32_t cp;
            size_t k = cp_at(p, len, i, &cp);
            if (!py_space(cp)) break;
            i += k;
        }
        if (i >= len) break;
        if (maxsplit >= 0 && done >= maxsplit) {
            jv rest = str_strip(jv_str(p + i, len - i), NULL, false, true);
            jlist_push(c->a, c->f, l, rest);
            break;
        }
        size_t start = i;
        while (i < len) {
            int32_t cp;
            size_t k = cp_at(p, len, i, &cp);
            if (py_space(cp)) break;
            i += k;
        }
        jlist_push(c->a, c->f, l, jv_str(p + start, i - start));
        done++;
    }
    return jv_list(l);
}

/* Items of an iterable as a list: list/tuple items, dict keys, string code
 * points; undefined iterates as empty. */
static jlist *iter_items(rctx *c, const jnode *n, jv x) {
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
            size_t k = cp_at(x.u.s.p, x.u.s.n, i, &cp);
            jlist_push(c->a, c->f, l, jv_str(x.u.s.p + i, k));
            i += k;
        }
        return l;
    default:
        fail(c, n, "'%s' object is not iterable", jv_type_name(x));
    }
}

static int64_t py_len(rctx *c, const jnode *n, jv x) {
    switch (x.t) {
    case JV_UNDEF: return 0;
    case JV_STR: return (int64_t)utf8_count(x.u.s.p, x.u.s.n);
    case JV_LIST: return (int64_t)x.u.l->n;
    case JV_DICT: return (int64_t)x.u.d->n;
    default: fail(c, n, "object of type '%s' has no len()", jv_type_name(x));
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

static const char *const GLOBALS[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

static jv lookup(rctx *c, const char *name) {
    for (jscope *s = c->scope; s; s = s->parent) {
        jv v;
        if (jdict_get_str(s->vars, name, &v)) return v;
    }
    for (int i = 0; GLOBALS[i]; i++) {
        if (!strcmp(name, GLOBALS[i])) {
            jfunc *fn = ja_alloc(c->a, c->f, sizeof *fn);
            fn->kind = JF_GLOBAL;
            fn->name = GLOBALS[i];
            jv v;
            v.t = JV_FUNC;
            v.u.fn = fn;
            return v;
        }
    }
    return undef_name(c, name);
}

/* ---- attribute / item access ------------------------------------------ */

static const char *const STR_METHODS[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find",
    "format", "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
    "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
    "join", "ljust", "lower", "lstrip", "maketrans", "partition", "removeprefix", "removesuffix",
    "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
    "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill", NULL};
static const char *const DICT_METHODS[] = {
    "clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem", "setdefault",
    "update", "values", NULL};
static const char *const LIST_METHODS[] = {
    "append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove",
    "reverse", "sort", NULL};

static bool in_names(const char *s, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(s, *names)) return true;
    return false;
}

static jv bound_method(rctx *c, jv self, const char *name) {
    jfunc *fn = ja_alloc(c->a, c->f, sizeof *fn);
    fn->kind = JF_METHOD;
    fn->name = name;
    fn->self = self;
    jv v;
    v.t = JV_FUNC;
    v.u.fn = fn;
    return v;
}

/* Python getattr(obj, name); missing -> undefined (an error only if used). */
static bool py_getattr(rctx *c, jv obj, const char *name, jv *out) {
    if (obj.t == JV_STR && in_names(name, STR_METHODS)) { *out = bound_method(c, obj, name); return true; }
    if (obj.t == JV_DICT && in_names(name, DICT_METHODS)) { *out = bound_method(c, obj, name); return true; }
    if (obj.t == JV_LIST && !obj.u.l->tuple && in_names(name, LIST_METHODS)) { *out = bound_method(c, obj, name); return true; }
    if (obj.t == JV_LIST && obj.u.l->tuple && (!strcmp(name, "count") || !strcmp(name, "index"))) {
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
    if (obj.t == JV_UNDEF) fail_undefined(c, n, obj);
    jv out;
    if (py_getattr(c, obj, name, &out)) return out;
    if (py_getitem(c, obj, jv_str(name, strlen(name)), &out)) return out;
    return undef_attr(c, obj, name);
}

/* Jinja's environment.getitem: item first, then attribute for string keys. */
static jv get_item(rctx *c, const jnode *n, jv obj, jv key) {
    if (obj.t == JV_UNDEF) fail_undefined(c, n, obj);
    jv out;
    if (py_getitem(c, obj, key, &out)) return out;
    if (key.t == JV_STR) {
        const char *name = cstr(c, key);
        if (py_getattr(c, obj, name, &out)) return out;
        return undef_attr(c, obj, name);
    }
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    jv_repr_into(c->a, c->f, &b, key);
    return jv_undef(fmtstr(c, "'%s object' has no element %s", jv_type_name(obj), b.p));
}

/* Python slice.indices + gather, over list items or string code points. */
static jv do_slice(rctx *c, const jnode *n, jv obj, jv start, jv stop, jv step) {
    if (obj.t == JV_UNDEF) fail_undefined(c, n, obj);
    if (obj.t != JV_LIST && obj.t != JV_STR) fail(c, n, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t len = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)utf8_count(obj.u.s.p, obj.u.s.n);
    int64_t st = 1;
    jv parts[3] = {start, stop, step};
    for (int i = 0; i < 3; i++)
        if (parts[i].t != JV_NONE && parts[i].t != JV_UNDEF && parts[i].t != JV_INT && parts[i].t != JV_BOOL)
            fail(c, n, "slice indices must be integers or None");
    if (step.t == JV_INT || step.t == JV_BOOL) st = step.t == JV_INT ? step.u.i : step.u.b;
    if (st == 0) fail(c, n, "slice step cannot be zero");
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
    jlist *chars = iter_items(c, n, obj);
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
static void bind_args(rctx *c, const jnode *n, const char *what, const jargs *a,
                      const char *const *names, int nnames, jv *slots) {
    for (int i = 0; i < nnames; i++) slots[i] = jv_undef(NULL);
    if (a->npos > nnames) fail(c, n, "%s takes at most %d argument(s) (%d given)", what, nnames, a->npos);
    for (int i = 0; i < a->npos; i++) slots[i] = a->pos[i];
    for (int k = 0; k < a->nk; k++) {
        int i;
        for (i = 0; i < nnames; i++)
            if (!strcmp(names[i], a->knames[k])) break;
        if (i == nnames) fail(c, n, "%s got an unexpected keyword argument '%s'", what, a->knames[k]);
        if (i < a->npos) fail(c, n, "%s got multiple values for argument '%s'", what, a->knames[k]);
        slots[i] = a->kvals[k];
    }
}

static bool given(jv x) { return !(x.t == JV_UNDEF && x.u.undef == NULL); }

static jv need_str(rctx *c, const jnode *n, jv x, const char *what) {
    if (x.t != JV_STR) fail(c, n, "%s must be a string, not '%s'", what, jv_type_name(x));
    return x;
}

static int64_t need_int(rctx *c, const jnode *n, jv x, const char *what) {
    if (x.t == JV_INT) return x.u.i;
    if (x.t == JV_BOOL) return x.u.b;
    fail(c, n, "%s must be an integer, not '%s'", what, jv_type_name(x));
}

/* ---- tests ---------------------------------------------------------------- */

static const char *const TESTS[] = {
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "sameas", "odd", "even",
    "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
    "greaterthan", ">", "ge", ">=", "in", "lower", "upper", "escaped", NULL};

bool jinja_test_known(const char *name) { return in_names(name, TESTS); }

static bool compare_values(rctx *c, const jnode *n, int op, jv a, jv b);
static jv arith(rctx *c, const jnode *n, int op, jv a, jv b);

static bool apply_test(rctx *c, const jnode *n, const char *name, jv x, const jargs *a) {
    jv arg = a->npos > 0 ? a->pos[0] : jv_undef(NULL);
#define NEED_ARG() do { if (a->npos < 1) fail(c, n, "test '%s' needs an argument", name); } while (0)
    if (!strcmp(name, "defined")) return x.t != JV_UNDEF;
    if (!strcmp(name, "undefined")) return x.t == JV_UNDEF;
    if (!strcmp(name, "none")) return x.t == JV_NONE;
    if (!strcmp(name, "boolean")) return x.t == JV_BOOL;
    if (!strcmp(name, "false")) return x.t == JV_BOOL && !x.u.b;
    if (!strcmp(name, "true")) return x.t == JV_BOOL && x.u.b;
    if (!strcmp(name, "integer")) return x.t == JV_INT;
    if (!strcmp(name, "float")) return x.t == JV_FLOAT;
    if (!strcmp(name, "number")) return jv_is_number(x);
    if (!strcmp(name, "string")) return x.t == JV_STR;
    if (!strcmp(name, "mapping")) return x.t == JV_DICT;
    if (!strcmp(name, "iterable")) return x.t == JV_UNDEF || x.t == JV_STR || x.t == JV_LIST || x.t == JV_DICT;
    if (!strcmp(name, "sequence")) return x.t == JV_STR || x.t == JV_LIST || x.t == JV_DICT;
    if (!strcmp(name, "callable")) return x.t == JV_FUNC;
    if (!strcmp(name, "escaped")) return false;
    if (!strcmp(name, "sameas")) {
        NEED_ARG();
        if (x.t != arg.t) return false;
        if (x.t == JV_NONE || x.t == JV_UNDEF) return true;
        if (x.t == JV_BOOL || x.t == JV_INT) return jv_eq(x, arg);
        if (x.t == JV_LIST) return x.u.l == arg.u.l;
        if (x.t == JV_DICT || x.t == JV_NS) return x.u.d == arg.u.d;
        return jv_eq(x, arg);
    }
    if (!strcmp(name, "odd") || !strcmp(name, "even")) { /* value % 2 == 1 / == 0 */
        if (!jv_is_number(x)) fail(c, n, "%s test needs a number, not '%s'", name, jv_type_name(x));
        jv m = arith(c, n, JOP_MOD, x, jv_int(2));
        return jv_eq(m, jv_int(name[0] == 'o' ? 1 : 0));
    }
    if (!strcmp(name, "divisibleby")) {
        NEED_ARG();
        return jv_eq(arith(c, n, JOP_MOD, x, arg), jv_int(0)); /* value % num == 0 */
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        jv s = to_str(c, x);
        jv t = str_case(c, s, name[0] == 'l' ? 0 : 1);
        /* Python: cased and equal to its own case mapping */
        bool cased = false;
        for (size_t i = 0; i < s.u.s.n;) {
            int32_t cp;
            i += cp_at(s.u.s.p, s.u.s.n, i, &cp);
            if (utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp) cased = true;
        }
        return cased && jv_eq(s, t);
    }
    NEED_ARG();
    int op = 0;
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) op = JOP_EQ;
    else if (!strcmp(name, "ne") || !strcmp(name, "!=")) op = JOP_NE;
    else if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<")) op = JOP_LT;
    else if (!strcmp(name, "le") || !strcmp(name, "<=")) op = JOP_LE;
    else if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">")) op = JOP_GT;
    else if (!strcmp(name, "ge") || !strcmp(name, ">=")) op = JOP_GE;
    else if (!strcmp(name, "in")) op = JOP_IN;
    else fail(c, n, "unknown test '%s'", name);
    return compare_values(c, n, op, x, arg);
#undef NEED_ARG
}

/* ---- operators -------------------------------------------------------------- */

static int cmp_order_at(rctx *c, const jnode *n, jv a, jv b, const char *opname, int depth);

static int cmp_order(rctx *c, const jnode *n, jv a, jv b, const char *opname) {
    return cmp_order_at(c, n, a, b, opname, 0);
}

static int cmp_order_at(rctx *c, const jnode *n, jv a, jv b, const char *opname, int depth) {
    if (depth > JINJA_MAX_VALUE_DEPTH)
        fail(c, n, "'%s' on lists nested deeper than %d (or containing themselves)", opname, JINJA_MAX_VALUE_DEPTH);
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
    if (a.t == JV_UNDEF) fail_undefined(c, n, a);
    if (b.t == JV_UNDEF) fail_undefined(c, n, b);
    fail(c, n, "'%s' not supported between instances of '%s' and '%s'", opname, jv_type_name(a), jv_type_name(b));
}

static bool contains(rctx *c, const jnode *n, jv hay, jv needle) {
    switch (hay.t) {
    case JV_UNDEF: return false;
    case JV_STR:
        if (needle.t != JV_STR) fail(c, n, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        return find_sub(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_eq(hay.u.l->v[i], needle)) return true;
        return false;
    case JV_DICT: {
        jv dummy;
        if ((needle.t == JV_LIST && !needle.u.l->tuple) || needle.t == JV_DICT)
            fail(c, n, "unhashable type: '%s'", jv_type_name(needle));
        return jdict_get(hay.u.d, needle, &dummy);
    }
    default:
        fail(c, n, "argument of type '%s' is not iterable", jv_type_name(hay));
    }
}

static bool compare_values(rctx *c, const jnode *n, int op, jv a, jv b) {
    switch (op) {
    case JOP_EQ: return jv_eq(a, b);
    case JOP_NE: return !jv_eq(a, b);
    case JOP_IN: return contains(c, n, b, a);
    case JOP_NOTIN: return !contains(c, n, b, a);
    default: break;
    }
    const char *nm = op == JOP_LT ? "<" : op == JOP_LE ? "<=" : op == JOP_GT ? ">" : ">=";
    int r = cmp_order(c, n, a, b, nm);
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
static jv percent_format(rctx *c, const jnode *n, jv fmt, jv args) {
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
        if (p >= end) fail(c, n, "incomplete format");
        jv val;
        bool have = false;
        if (*p == '(') {
            const char *close = memchr(p, ')', (size_t)(end - p));
            if (!close) fail(c, n, "incomplete format key");
            if (!mapping) fail(c, n, "format requires a mapping");
            jv key = jv_str(p + 1, (size_t)(close - p - 1));
            if (!jdict_get(args.u.d, key, &val)) fail(c, n, "KeyError: '%.*s'", (int)key.u.s.n, key.u.s.p);
            have = true;
            p = close + 1;
        }
        char flags[8];
        int nf = 0;
        while (p < end && strchr("-+ #0", *p) && nf < 6) flags[nf++] = *p++;
        flags[nf] = 0;
        int width = -1, prec = -1;
        while (p < end && *p >= '0' && *p <= '9') { width = (width < 0 ? 0 : width) * 10 + (*p++ - '0'); if (width > 10000) fail(c, n, "format width too large"); }
        if (p < end && *p == '.') {
            p++;
            prec = 0;
            while (p < end && *p >= '0' && *p <= '9') { prec = prec * 10 + (*p++ - '0'); if (prec > 1000) fail(c, n, "format precision too large"); }
        }
        while (p < end && (*p == 'h' || *p == 'l' || *p == 'L')) p++;
        if (p >= end) fail(c, n, "incomplete format");
        char conv = *p++;
        if (conv == '%') { jb_putc(c->a, c->f, &b, '%'); continue; }
        if (!have) {
            if (next >= npos) fail(c, n, "not enough arguments for format string");
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
                if (code < 0 || code > 0x10FFFF) fail(c, n, "%%c arg not in range(0x110000)");
                utf8proc_uint8_t enc[4];
                utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)code, enc);
                ch = jv_str(ja_strndup(c->a, c->f, (const char *)enc, (size_t)k), (size_t)k);
            } else if (val.t != JV_STR || utf8_count(val.u.s.p, val.u.s.n) != 1) {
                fail(c, n, "%%c requires int or char");
            }
            put_padded(c, &b, ch, width, left);
            break;
        }
        case 'd': case 'i': case 'u': case 'o': case 'x': case 'X': {
            if (!jv_is_number(val) || (val.t == JV_FLOAT && conv != 'd' && conv != 'i' && conv != 'u'))
                fail(c, n, "%%%c format: %s is required, not %s", conv,
                     conv == 'd' || conv == 'i' || conv == 'u' ? "a real number" : "an integer", jv_type_name(val));
            if (val.t == JV_FLOAT && !(fabs(val.u.f) < 9.2e18)) fail(c, n, "%%%c format: number out of range", conv);
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
            if (!jv_is_number(val)) fail(c, n, "must be real number, not %s", jv_type_name(val));
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
            fail(c, n, "unsupported format character '%c'", conv);
        }
    }
    /* Python skips this check for mapping-like arguments (dicts, and lists,
     * which CPython also treats as mappings here) */
    bool mapping_like = mapping || (args.t == JV_LIST && !args.u.l->tuple);
    if (!mapping_like && next < npos) fail(c, n, "not all arguments converted during string formatting");
    return jv_str(b.p, b.n);
}

static jv arith(rctx *c, const jnode *n, int op, jv a, jv b) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (op == JOP_CONCAT) {
        jbuf s = {0};
        jb_put(c->a, c->f, &s, "", 0);
        jv_str_into(c->a, c->f, &s, a);
        jv_str_into(c->a, c->f, &s, b);
        return jv_str(s.p, s.n);
    }
    if (a.t == JV_UNDEF) fail_undefined(c, n, a);
    if (b.t == JV_UNDEF) fail_undefined(c, n, b);
    if (jv_is_number(a) && jv_is_number(b)) {
        bool ints = a.t != JV_FLOAT && b.t != JV_FLOAT;
        int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
        double fx = jv_as_double(a), fy = jv_as_double(b);
        int64_t r;
        switch (op) {
        case JOP_ADD:
            if (ints) { if (__builtin_add_overflow(x, y, &r)) fail(c, n, "integer overflow"); return jv_int(r); }
            return jv_float(fx + fy);
        case JOP_SUB:
            if (ints) { if (__builtin_sub_overflow(x, y, &r)) fail(c, n, "integer overflow"); return jv_int(r); }
            return jv_float(fx - fy);
        case JOP_MUL:
            if (ints) { if (__builtin_mul_overflow(x, y, &r)) fail(c, n, "integer overflow"); return jv_int(r); }
            return jv_float(fx * fy);
        case JOP_DIV:
            if (fy == 0) fail(c, n, "division by zero");
            return jv_float(fx / fy);
        case JOP_FLOORDIV:
            if (fy == 0) fail(c, n, "integer division or modulo by zero");
            if (ints) {
                if (x == INT64_MIN && y == -1) fail(c, n, "integer overflow");
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                return jv_int(q);
            }
            return jv_float(floor(fx / fy));
        case JOP_MOD:
            if (fy == 0) fail(c, n, "integer division or modulo by zero");
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
                    if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) fail(c, n, "integer overflow");
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) fail(c, n, "integer overflow");
                }
                return jv_int(acc);
            }
            if (fx == 0 && fy < 0) fail(c, n, "0.0 cannot be raised to a negative power");
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
        if (k > 100000) fail(c, n, "repetition count too large");
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
    if (op == JOP_MOD && a.t == JV_STR) return percent_format(c, n, a, b);
    fail(c, n, "unsupported operand type(s) for %s: '%s' and '%s'", names[op], jv_type_name(a), jv_type_name(b));
}

/* ---- filters ------------------------------------------------------------------ */

static const char *const FILTERS[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "first", "float", "int",
    "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort",
    "string", "sum", "title", "tojson", "trim", "unique", "upper", "indent", "wordcount", "format", NULL};

bool jinja_filter_known(const char *name) { return in_names(name, FILTERS); }

static jv apply_filter(rctx *c, const jnode *n, const char *name, jv x, const jargs *a);

/* A value's attribute by a dotted path ("a.b" or "0"), as jinja's make_attrgetter. */
static jv attr_path(rctx *c, const jnode *n, jv x, jv path) {
    const char *s = cstr(c, need_str(c, n, path, "attribute"));
    for (;;) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        char *part = ja_strndup(c->a, c->f, s, len);
        bool numeric = len > 0;
        for (size_t i = 0; i < len; i++)
            if (part[i] < '0' || part[i] > '9') numeric = false;
        x = numeric ? get_item(c, n, x, jv_int(strtoll(part, NULL, 10))) : get_item(c, n, x, jv_str(part, len));
        if (!dot) return x;
        s = dot + 1;
    }
}

/* select/reject/selectattr/rejectattr/map share argument shapes. */
static bool select_one(rctx *c, const jnode *n, jv item, const jargs *a, int first_test_arg) {
    if (a->npos <= first_test_arg) return jv_truthy(item);
    const char *test = cstr(c, need_str(c, n, a->pos[first_test_arg], "test name"));
    if (!jinja_test_known(test)) fail(c, n, "unknown test '%s'", test);
    jargs ta;
    memset(&ta, 0, sizeof ta);
    ta.npos = a->npos - first_test_arg - 1;
    ta.pos = a->pos + first_test_arg + 1;
    return apply_test(c, n, test, item, &ta);
}

typedef struct sort_item { jv key; jv val; size_t idx; } sort_item;

static int sort_cmp(rctx *c, const jnode *n, jv a, jv b, bool ci) {
    if (ci && a.t == JV_STR && b.t == JV_STR) {
        a = str_case(c, a, 0);
        b = str_case(c, b, 0);
    }
    return cmp_order(c, n, a, b, "<");
}

/* Stable insertion-merge sort (inputs are small) honouring Python order. */
static void sort_items(rctx *c, const jnode *n, sort_item *v, size_t cnt, bool ci, bool reverse) {
    for (size_t i = 1; i < cnt; i++) {
        sort_item t = v[i];
        size_t j = i;
        while (j > 0) {
            int r = sort_cmp(c, n, v[j - 1].key, t.key, ci);
            if (reverse ? r < 0 : r > 0) { v[j] = v[j - 1]; j--; }
            else break;
        }
        v[j] = t;
    }
}

/* HF's tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) with those keyword arguments. */
static jv filter_tojson(rctx *c, const jnode *n, jv x, const jargs *a) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    jv s[4];
    bind_args(c, n, "tojson()", a, names, 4, s);
    jjson_opts o = {-1, false, false, ", ", ": "};
    o.ensure_ascii = given(s[0]) && jv_truthy(s[0]);
    o.sort_keys = given(s[3]) && jv_truthy(s[3]);
    if (given(s[1]) && s[1].t != JV_NONE) {
        if (s[1].t == JV_STR) fail(c, n, "tojson(indent=<string>) is not supported");
        int64_t ind = need_int(c, n, s[1], "indent");
        if (ind > 64) fail(c, n, "tojson indent too large");
        o.indent = ind < 0 ? 0 : (int)ind;
        o.item_sep = ",";
    }
    if (given(s[2]) && s[2].t != JV_NONE) {
        jv sep = s[2];
        if (sep.t != JV_LIST || sep.u.l->n != 2 || sep.u.l->v[0].t != JV_STR || sep.u.l->v[1].t != JV_STR)
            fail(c, n, "tojson(separators=...) needs a pair of strings");
        o.item_sep = cstr(c, sep.u.l->v[0]);
        o.key_sep = cstr(c, sep.u.l->v[1]);
    }
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    const char *bad = NULL;
    if (!jv_tojson_into(c->a, c->f, &b, x, &o, &bad)) fail(c, n, "Object of type %s is not JSON serializable", bad);
    return jv_str(b.p, b.n);
}

/* Jinja's `title` filter (not str.title): split before runs of
 * [-\s({[<]; each piece gets its first code point upper-cased and the rest
 * lower-cased. */
static jv jinja_title(rctx *c, jv s) {
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    bool in_sep = false, piece_start = true;
    for (size_t i = 0; i < s.u.s.n;) {
        int32_t cp;
        size_t k = cp_at(s.u.s.p, s.u.s.n, i, &cp);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_space(cp);
        if (sep != in_sep) piece_start = true;
        in_sep = sep;
        int32_t o = piece_start ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
        piece_start = false;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t en = utf8proc_encode_char(o, enc);
        jb_put(c->a, c->f, &b, (const char *)enc, (size_t)en);
        i += k;
    }
    return jv_str(b.p, b.n);
}

/* Python's re \w for one code point (letters, numbers, underscore). */
static bool word_char(int32_t cp) {
    if (cp == '_') return true;
    utf8proc_category_t cat = utf8proc_category(cp);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

static jv apply_filter(rctx *c, const jnode *n, const char *name, jv x, const jargs *a) {
    jv arg0 = a->npos > 0 ? a->pos[0] : jv_undef(NULL);
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        static const char *const names[] = {"default_value", "boolean"};
        jv s[2];
        bind_args(c, n, "default()", a, names, 2, s);
        jv dflt = given(s[0]) ? s[0] : jv_str("", 0);
        bool boolean = given(s[1]) && jv_truthy(s[1]);
        if (x.t == JV_UNDEF || (boolean && !jv_truthy(x))) return dflt;
        return x;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) return jv_int(py_len(c, n, x));
    if (!strcmp(name, "string")) return to_str(c, x);
    if (!strcmp(name, "safe")) return to_str(c, x);
    if (!strcmp(name, "trim")) {
        static const char *const names[] = {"chars"};
        jv s[1];
        bind_args(c, n, "trim()", a, names, 1, s);
        jv chars;
        bool has = given(s[0]) && s[0].t != JV_NONE;
        if (has) chars = need_str(c, n, s[0], "trim chars");
        return str_strip(to_str(c, x), has ? &chars : NULL, true, true);
    }
    if (!strcmp(name, "upper")) return str_case(c, to_str(c, x), 1);
    if (!strcmp(name, "lower")) return str_case(c, to_str(c, x), 0);
    if (!strcmp(name, "capitalize")) return str_case(c, to_str(c, x), 2);
    if (!strcmp(name, "title")) return jinja_title(c, to_str(c, x));
    if (!strcmp(name, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        jv s[3];
        bind_args(c, n, "replace()", a, names, 3, s);
        if (!given(s[0]) || !given(s[1])) fail(c, n, "replace() needs old and new");
        int64_t count = given(s[2]) && s[2].t != JV_NONE ? need_int(c, n, s[2], "count") : -1;
        return str_replace(c, to_str(c, x), to_str(c, s[0]), to_str(c, s[1]), count);
    }
    if (!strcmp(name, "tojson")) return filter_tojson(c, n, x, a);
    if (!strcmp(name, "items")) {
        if (x.t == JV_UNDEF) return jv_list(jlist_new(c->a, c->f));
        if (x.t != JV_DICT) fail(c, n, "items filter: can only get item pairs from a mapping, not '%s'", jv_type_name(x));
        jlist *l = jlist_new(c->a, c->f);
        for (size_t i = 0; i < x.u.d->n; i++) {
            jlist *pair = jlist_new(c->a, c->f);
            pair->tuple = true;
            jlist_push(c->a, c->f, pair, x.u.d->k[i]);
            jlist_push(c->a, c->f, pair, x.u.d->v[i]);
            jlist_push(c->a, c->f, l, jv_list(pair));
        }
        return jv_list(l);
    }
    if (!strcmp(name, "dictsort")) {
        static const char *const names[] = {"case_sensitive", "by", "reverse"};
        jv s[3];
        bind_args(c, n, "dictsort()", a, names, 3, s);
        if (x.t != JV_DICT) fail(c, n, "dictsort: can only sort a mapping, not '%s'", jv_type_name(x));
        bool ci = !(given(s[0]) && jv_truthy(s[0]));
        bool by_value = given(s[1]) && str_eq(s[1], "value");
        if (given(s[1]) && !by_value && !str_eq(s[1], "key")) fail(c, n, "dictsort: 'by' must be 'key' or 'value'");
        size_t cnt = x.u.d->n;
        sort_item *v = ja_alloc(c->a, c->f, (cnt ? cnt : 1) * sizeof *v);
        for (size_t i = 0; i < cnt; i++) {
            v[i].key = by_value ? x.u.d->v[i] : x.u.d->k[i];
            v[i].idx = i;
        }
        sort_items(c, n, v, cnt, ci, given(s[2]) && jv_truthy(s[2]));
        jlist *l = jlist_new(c->a, c->f);
        for (size_t i = 0; i < cnt; i++) {
            jlist *pair = jlist_new(c->a, c->f);
            pair->tuple = true;
            jlist_push(c->a, c->f, pair, x.u.d->k[v[i].idx]);
            jlist_push(c->a, c->f, pair, x.u.d->v[v[i].idx]);
            jlist_push(c->a, c->f, l, jv_list(pair));
        }
        return jv_list(l);
    }
    if (!strcmp(name, "list")) {
        jlist *src = iter_items(c, n, x), *l = jlist_new(c->a, c->f);
        for (size_t i = 0; i < src->n; i++) jlist_push(c->a, c->f, l, src->v[i]);
        return jv_list(l);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        jlist *src = iter_items(c, n, x);
        if (src->n == 0) return jv_undef(fmtstr(c, "%s(): sequence is empty%s", name, NULL));
        return name[0] == 'f' ? src->v[0] : src->v[src->n - 1];
    }
    if (!strcmp(name, "reverse")) {
        if (x.t == JV_STR) return do_slice(c, n, x, jv_none(), jv_none(), jv_int(-1));
        jlist *src = iter_items(c, n, x), *l = jlist_new(c->a, c->f);
        for (size_t i = src->n; i > 0; i--) jlist_push(c->a, c->f, l, src->v[i - 1]);
        return jv_list(l);
    }
    if (!strcmp(name, "join")) {
        static const char *const names[] = {"d", "attribute"};
        jv s[2];
        bind_args(c, n, "join()", a, names, 2, s);
        jv sep = given(s[0]) ? to_str(c, s[0]) : jv_str("", 0);
        jlist *src = iter_items(c, n, x);
        jbuf b = {0};
        jb_put(c->a, c->f, &b, "", 0);
        for (size_t i = 0; i < src->n; i++) {
            if (i) jb_put(c->a, c->f, &b, sep.u.s.p, sep.u.s.n);
            jv item = given(s[1]) && s[1].t != JV_NONE ? attr_path(c, n, src->v[i], s[1]) : src->v[i];
            jv_str_into(c->a, c->f, &b, item);
        }
        return jv_str(b.p, b.n);
    }
    /* map/select/reject/selectattr/rejectattr yield nothing for a falsy
     * input (Jinja checks `if value:` before iterating) */
    if ((!strcmp(name, "map") || !strcmp(name, "select") || !strcmp(name, "reject") ||
         !strcmp(name, "selectattr") || !strcmp(name, "rejectattr")) && !jv_truthy(x))
        return jv_list(jlist_new(c->a, c->f));
    if (!strcmp(name, "map")) {
        jlist *src = iter_items(c, n, x), *l = jlist_new(c->a, c->f);
        int ka = -1, kd = -1;
        for (int k = 0; k < a->nk; k++) {
            if (!strcmp(a->knames[k], "attribute")) ka = k;
            else if (!strcmp(a->knames[k], "default")) kd = k;
            else fail(c, n, "map(): unexpected keyword argument '%s'", a->knames[k]);
        }
        if (ka >= 0) {
            for (size_t i = 0; i < src->n; i++) {
                jv v = attr_path(c, n, src->v[i], a->kvals[ka]);
                if (v.t == JV_UNDEF && kd >= 0) v = a->kvals[kd];
                jlist_push(c->a, c->f, l, v);
            }
            return jv_list(l);
        }
        if (a->npos < 1) fail(c, n, "map() needs a filter name or attribute=");
        const char *fname = cstr(c, need_str(c, n, arg0, "filter name"));
        if (!jinja_filter_known(fname)) fail(c, n, "unknown filter '%s'", fname);
        jargs fa;
        memset(&fa, 0, sizeof fa);
        fa.npos = a->npos - 1;
        fa.pos = a->pos + 1;
        enter(c, n); /* map('map', ...) recurses */
        for (size_t i = 0; i < src->n; i++) jlist_push(c->a, c->f, l, apply_filter(c, n, fname, src->v[i], &fa));
        c->depth--;
        return jv_list(l);
    }
    if (!strcmp(name, "select") || !strcmp(name, "reject")) {
        jlist *src = iter_items(c, n, x), *l = jlist_new(c->a, c->f);
        bool want = name[0] == 's';
        for (size_t i = 0; i < src->n; i++)
            if (select_one(c, n, src->v[i], a, 0) == want) jlist_push(c->a, c->f, l, src->v[i]);
        return jv_list(l);
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr")) {
        if (a->npos < 1) fail(c, n, "%s() needs an attribute name", name);
        jlist *src = iter_items(c, n, x), *l = jlist_new(c->a, c->f);
        bool want = name[0] == 's';
        for (size_t i = 0; i < src->n; i++)
            if (select_one(c, n, attr_path(c, n, src->v[i], arg0), a, 1) == want) jlist_push(c->a, c->f, l, src->v[i]);
        return jv_list(l);
    }
    if (!strcmp(name, "sort") || !strcmp(name, "unique") || !strcmp(name, "min") || !strcmp(name, "max")) {
        static const char *const names_sort[] = {"reverse", "case_sensitive", "attribute"};
        static const char *const names_other[] = {"case_sensitive", "attribute"};
        bool is_sort = !strcmp(name, "sort");
        jv s[3];
        if (is_sort) bind_args(c, n, "sort()", a, names_sort, 3, s);
        else { bind_args(c, n, name, a, names_other, 2, s + 1); s[0] = jv_undef(NULL); }
        bool ci = !(given(s[1]) && jv_truthy(s[1]));
        jlist *src = iter_items(c, n, x);
        sort_item *v = ja_alloc(c->a, c->f, (src->n ? src->n : 1) * sizeof *v);
        for (size_t i = 0; i < src->n; i++) {
            v[i].val = src->v[i];
            v[i].key = given(s[2]) && s[2].t != JV_NONE ? attr_path(c, n, src->v[i], s[2]) : src->v[i];
            v[i].idx = i;
        }
        if (!strcmp(name, "unique")) {
            jlist *l = jlist_new(c->a, c->f);
            jlist *seen = jlist_new(c->a, c->f);
            for (size_t i = 0; i < src->n; i++) {
                jv k = ci && v[i].key.t == JV_STR ? str_case(c, v[i].key, 0) : v[i].key;
                bool dup = false;
                for (size_t j = 0; j < seen->n && !dup; j++) dup = jv_eq(seen->v[j], k);
                if (!dup) { jlist_push(c->a, c->f, seen, k); jlist_push(c->a, c->f, l, v[i].val); }
            }
            return jv_list(l);
        }
        sort_items(c, n, v, src->n, ci, is_sort && given(s[0]) && jv_truthy(s[0]));
        if (!is_sort) {
            if (src->n == 0) return jv_undef("No aggregated item, sequence was empty.");
            return !strcmp(name, "min") ? v[0].val : v[src->n - 1].val;
        }
        jlist *l = jlist_new(c->a, c->f);
        for (size_t i = 0; i < src->n; i++) jlist_push(c->a, c->f, l, v[i].val);
        return jv_list(l);
    }
    if (!strcmp(name, "sum")) {
        jlist *src = iter_items(c, n, x);
        jv acc = a->npos > 1 ? a->pos[1] : jv_int(0);
        for (size_t i = 0; i < src->n; i++) {
            jv item = a->npos > 0 ? attr_path(c, n, src->v[i], arg0) : src->v[i];
            acc = arith(c, n, JOP_ADD, acc, item);
        }
        return acc;
    }
    if (!strcmp(name, "abs")) {
        if (x.t == JV_INT) return jv_int(x.u.i < 0 ? -x.u.i : x.u.i);
        if (x.t == JV_BOOL) return jv_int(x.u.b);
        if (x.t == JV_FLOAT) return jv_float(fabs(x.u.f));
        fail(c, n, "bad operand type for abs(): '%s'", jv_type_name(x));
    }
    if (!strcmp(name, "int")) {
        static const char *const names[] = {"default", "base"};
        jv s[2];
        bind_args(c, n, "int()", a, names, 2, s);
        jv dflt = given(s[0]) ? s[0] : jv_int(0);
        if (x.t == JV_UNDEF) fail_undefined(c, n, x);
        if (x.t == JV_INT) return x;
        if (x.t == JV_BOOL) return jv_int(x.u.b);
        if (x.t == JV_FLOAT) return fabs(x.u.f) < 9.2e18 ? jv_int((int64_t)x.u.f) : dflt;
        if (x.t == JV_STR) {
            jv t = str_strip(x, NULL, true, true);
            const char *z = cstr(c, t);
            char *end;
            long long v = strtoll(z, &end, given(s[1]) ? (int)need_int(c, n, s[1], "base") : 10);
            if (*z && !*end) return jv_int(v);
            double d = strtod(z, &end);
            if (*z && !*end && fabs(d) < 9.2e18) return jv_int((int64_t)d);
        }
        return dflt;
    }
    if (!strcmp(name, "float")) {
        jv dflt = a->npos > 0 ? arg0 : jv_float(0.0);
        if (x.t == JV_UNDEF) fail_undefined(c, n, x);
        if (x.t == JV_FLOAT) return x;
        if (x.t == JV_INT || x.t == JV_BOOL) return jv_float(jv_as_double(x));
        if (x.t == JV_STR) {
            const char *z = cstr(c, str_strip(x, NULL, true, true));
            char *end;
            double d = strtod(z, &end);
            if (*z && !*end) return jv_float(d);
        }
        return dflt;
    }
    if (!strcmp(name, "round")) {
        static const char *const names[] = {"precision", "method"};
        jv s[2];
        bind_args(c, n, "round()", a, names, 2, s);
        int64_t prec = given(s[0]) ? need_int(c, n, s[0], "precision") : 0;
        const char *method = given(s[1]) ? cstr(c, need_str(c, n, s[1], "method")) : "common";
        if (!jv_is_number(x)) fail(c, n, "round(): not a number: '%s'", jv_type_name(x));
        if (x.t != JV_FLOAT && !strcmp(method, "common")) return jv_int(x.t == JV_INT ? x.u.i : x.u.b); /* round(int) is int */
        double v = jv_as_double(x);
        double m = pow(10.0, (double)prec);
        double r;
        if (!strcmp(method, "common")) r = nearbyint(v * m) / m; /* Python rounds half to even */
        else if (!strcmp(method, "ceil")) r = ceil(v * m) / m;
        else if (!strcmp(method, "floor")) r = floor(v * m) / m;
        else fail(c, n, "round(): method must be common, ceil or floor");
        return jv_float(r);
    }
    if (!strcmp(name, "attr")) {
        if (a->npos < 1) fail(c, n, "attr() needs a name");
        jv out;
        const char *nm = cstr(c, need_str(c, n, arg0, "attribute name"));
        if (py_getattr(c, x, nm, &out)) return out;
        return undef_attr(c, x, nm);
    }
    if (!strcmp(name, "indent")) {
        static const char *const names[] = {"width", "first", "blank"};
        jv s[3];
        bind_args(c, n, "indent()", a, names, 3, s);
        jv pad = !given(s[0]) ? jv_str("    ", 4) : s[0].t == JV_STR ? s[0] : jv_undef(NULL);
        if (pad.t != JV_STR) {
            int64_t w = need_int(c, n, s[0], "width");
            if (w < 0 || w > 1000) fail(c, n, "indent width out of range");
            char *sp = ja_alloc(c->a, c->f, (size_t)w + 1);
            memset(sp, ' ', (size_t)w);
            pad = jv_str(sp, (size_t)w);
        }
        bool first = given(s[1]) && jv_truthy(s[1]), blank = given(s[2]) && jv_truthy(s[2]);
        if (x.t != JV_STR && x.t != JV_UNDEF) fail(c, n, "indent filter needs a string, not '%s'", jv_type_name(x));
        jv src = to_str(c, x);
        jbuf b = {0};
        jb_put(c->a, c->f, &b, "", 0);
        size_t i = 0;
        bool line0 = true;
        while (i <= src.u.s.n) {
            const char *nl = memchr(src.u.s.p + i, '\n', src.u.s.n - i);
            size_t e = nl ? (size_t)(nl - src.u.s.p) : src.u.s.n;
            bool empty = e == i;
            if ((!line0 || first) && (blank || !empty)) jb_put(c->a, c->f, &b, pad.u.s.p, pad.u.s.n);
            jb_put(c->a, c->f, &b, src.u.s.p + i, e - i);
            if (!nl) break;
            jb_putc(c->a, c->f, &b, '\n');
            i = e + 1;
            line0 = false;
        }
        return jv_str(b.p, b.n);
    }
    if (!strcmp(name, "format")) { /* str(value) % (kwargs or args) */
        if (a->npos && a->nk) fail(c, n, "format(): can't handle positional and keyword arguments at the same time");
        jv fargs;
        if (a->nk) {
            jdict *d = jdict_new(c->a, c->f);
            for (int k = 0; k < a->nk; k++) jdict_set(c->a, c->f, d, jv_cstr(c->a, c->f, a->knames[k]), a->kvals[k]);
            fargs = jv_dict(d);
        } else {
            jlist *l = jlist_new(c->a, c->f);
            l->tuple = true;
            for (int k = 0; k < a->npos; k++) jlist_push(c->a, c->f, l, a->pos[k]);
            fargs = jv_list(l);
        }
        return percent_format(c, n, to_str(c, x), fargs);
    }
    if (!strcmp(name, "wordcount")) { /* number of \w+ runs */
        jv str = to_str(c, x);
        int64_t words = 0;
        bool in_word = false;
        for (size_t i = 0; i < str.u.s.n;) {
            int32_t cp;
            i += cp_at(str.u.s.p, str.u.s.n, i, &cp);
            bool w = word_char(cp);
            if (w && !in_word) words++;
            in_word = w;
        }
        return jv_int(words);
    }
    fail(c, n, "unknown filter '%s'", name);
}

/* ---- methods and globals --------------------------------------------------------- */

static jv call_str_method(rctx *c, const jnode *n, jv self, const char *m, const jargs *a) {
    jv s[3];
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        static const char *const names[] = {"chars"};
        bind_args(c, n, m, a, names, 1, s);
        jv chars;
        bool has = given(s[0]) && s[0].t != JV_NONE;
        if (has) chars = need_str(c, n, s[0], "strip chars");
        return str_strip(self, has ? &chars : NULL, m[0] != 'r', m[0] != 'l');
    }
    if (!strcmp(m, "split")) {
        static const char *const names[] = {"sep", "maxsplit"};
        bind_args(c, n, m, a, names, 2, s);
        jv sep;
        bool has = given(s[0]) && s[0].t != JV_NONE;
        if (has) sep = need_str(c, n, s[0], "split separator");
        int64_t maxsplit = given(s[1]) ? need_int(c, n, s[1], "maxsplit") : -1;
        return str_split(c, n, self, has ? &sep : NULL, maxsplit);
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        static const char *const names[] = {"prefix"};
        bind_args(c, n, m, a, names, 1, s);
        if (!given(s[0])) fail(c, n, "%s() needs an argument", m);
        jlist one = {1, 1, &s[0], false};
        jlist *cands = s[0].t == JV_LIST && s[0].u.l->tuple ? s[0].u.l : &one;
        for (size_t i = 0; i < cands->n; i++) {
            jv p = need_str(c, n, cands->v[i], m);
            if (p.u.s.n > self.u.s.n) continue;
            const char *at = m[0] == 's' ? self.u.s.p : self.u.s.p + self.u.s.n - p.u.s.n;
            if (!memcmp(at, p.u.s.p, p.u.s.n)) return jv_bool(true);
        }
        return jv_bool(false);
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "capitalize") || !strcmp(m, "title")) {
        bind_args(c, n, m, a, NULL, 0, s);
        int mode = m[0] == 'l' ? 0 : m[0] == 'u' ? 1 : m[0] == 'c' ? 2 : 3;
        return str_case(c, self, mode);
    }
    if (!strcmp(m, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        bind_args(c, n, m, a, names, 3, s);
        if (!given(s[0]) || !given(s[1])) fail(c, n, "replace() needs old and new");
        int64_t count = given(s[2]) ? need_int(c, n, s[2], "count") : -1;
        return str_replace(c, self, need_str(c, n, s[0], "old"), need_str(c, n, s[1], "new"), count);
    }
    if (!strcmp(m, "find") || !strcmp(m, "count") || !strcmp(m, "index") || !strcmp(m, "rfind")) {
        static const char *const names[] = {"sub"};
        bind_args(c, n, m, a, names, 1, s);
        if (!given(s[0])) fail(c, n, "%s() needs an argument", m);
        jv sub = need_str(c, n, s[0], m);
        if (!strcmp(m, "count")) {
            if (sub.u.s.n == 0) return jv_int((int64_t)utf8_count(self.u.s.p, self.u.s.n) + 1);
            int64_t k = 0;
            const char *p = self.u.s.p, *end = p + self.u.s.n, *hit;
            while ((hit = find_sub(p, (size_t)(end - p), sub.u.s.p, sub.u.s.n))) { k++; p = hit + sub.u.s.n; }
            return jv_int(k);
        }
        const char *hit = NULL;
        if (!strcmp(m, "rfind")) {
            for (size_t i = self.u.s.n + 1; i-- > 0;)
                if (i + sub.u.s.n <= self.u.s.n && !memcmp(self.u.s.p + i, sub.u.s.p, sub.u.s.n)) { hit = self.u.s.p + i; break; }
        } else {
            hit = find_sub(self.u.s.p, self.u.s.n, sub.u.s.p, sub.u.s.n);
        }
        if (!hit) {
            if (!strcmp(m, "index")) fail(c, n, "substring not found");
            return jv_int(-1);
        }
        return jv_int((int64_t)utf8_count(self.u.s.p, (size_t)(hit - self.u.s.p)));
    }
    if (!strcmp(m, "join")) {
        static const char *const names[] = {"iterable"};
        bind_args(c, n, m, a, names, 1, s);
        jlist *items = iter_items(c, n, s[0]);
        jbuf b = {0};
        jb_put(c->a, c->f, &b, "", 0);
        for (size_t i = 0; i < items->n; i++) {
            if (i) jb_put(c->a, c->f, &b, self.u.s.p, self.u.s.n);
            jv it = need_str(c, n, items->v[i], "join item");
            jb_put(c->a, c->f, &b, it.u.s.p, it.u.s.n);
        }
        return jv_str(b.p, b.n);
    }
    if (!strcmp(m, "isdigit") || !strcmp(m, "isspace") || !strcmp(m, "isalpha") || !strcmp(m, "isalnum")) {
        bind_args(c, n, m, a, NULL, 0, s);
        if (self.u.s.n == 0) return jv_bool(false);
        for (size_t i = 0; i < self.u.s.n;) {
            int32_t cp;
            i += cp_at(self.u.s.p, self.u.s.n, i, &cp);
            utf8proc_category_t cat = utf8proc_category(cp);
            bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            bool digit = cat == UTF8PROC_CATEGORY_ND;
            bool ok = !strcmp(m, "isdigit") ? digit : !strcmp(m, "isspace") ? py_space(cp)
                    : !strcmp(m, "isalpha") ? letter : (letter || digit);
            if (!ok) return jv_bool(false);
        }
        return jv_bool(true);
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        static const char *const names[] = {"affix"};
        bind_args(c, n, m, a, names, 1, s);
        jv p = need_str(c, n, s[0], m);
        if (p.u.s.n <= self.u.s.n) {
            if (m[6] == 'p' && !memcmp(self.u.s.p, p.u.s.p, p.u.s.n)) return jv_str(self.u.s.p + p.u.s.n, self.u.s.n - p.u.s.n);
            if (m[6] == 's' && !memcmp(self.u.s.p + self.u.s.n - p.u.s.n, p.u.s.p, p.u.s.n)) return jv_str(self.u.s.p, self.u.s.n - p.u.s.n);
        }
        return self;
    }
    fail(c, n, "string method '%s' is not supported", m);
}

static jv call_method(rctx *c, const jnode *n, const jfunc *fn, const jargs *a) {
    jv self = fn->self;
    const char *m = fn->name;
    if (self.t == JV_STR) return call_str_method(c, n, self, m, a);
    if (self.t == JV_NS && !strcmp(m, "cycle")) { /* loop.cycle(a, b, ...) */
        jv index0;
        if (a->npos < 1 || a->nk) fail(c, n, "loop.cycle() needs at least one positional argument");
        if (!jdict_get_str(self.u.d, "index0", &index0) || index0.t != JV_INT) fail(c, n, "loop.cycle() outside a loop");
        return a->pos[index0.u.i % a->npos];
    }
    jv s[2];
    if (self.t == JV_DICT) {
        if (!strcmp(m, "get")) {
            static const char *const names[] = {"key", "default"};
            bind_args(c, n, "get()", a, names, 2, s);
            if (!given(s[0])) fail(c, n, "get() needs a key");
            jv out;
            if (jdict_get(self.u.d, s[0], &out)) return out;
            return given(s[1]) ? s[1] : jv_none();
        }
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            bind_args(c, n, m, a, NULL, 0, s);
            jlist *l = jlist_new(c->a, c->f);
            for (size_t i = 0; i < self.u.d->n; i++) {
                if (m[0] == 'k') jlist_push(c->a, c->f, l, self.u.d->k[i]);
                else if (m[0] == 'v') jlist_push(c->a, c->f, l, self.u.d->v[i]);
                else {
                    jlist *pair = jlist_new(c->a, c->f);
                    pair->tuple = true;
                    jlist_push(c->a, c->f, pair, self.u.d->k[i]);
                    jlist_push(c->a, c->f, pair, self.u.d->v[i]);
                    jlist_push(c->a, c->f, l, jv_list(pair));
                }
            }
            return jv_list(l);
        }
        if (!strcmp(m, "copy")) {
            jdict *d = jdict_new(c->a, c->f);
            for (size_t i = 0; i < self.u.d->n; i++) jdict_set(c->a, c->f, d, self.u.d->k[i], self.u.d->v[i]);
            return jv_dict(d);
        }
    }
    if (self.t == JV_LIST && (!strcmp(m, "count") || !strcmp(m, "index"))) {
        if (a->npos != 1) fail(c, n, "%s() takes exactly one argument", m);
        int64_t k = 0;
        for (size_t i = 0; i < self.u.l->n; i++) {
            if (jv_eq(self.u.l->v[i], a->pos[0])) {
                if (m[0] == 'i') return jv_int((int64_t)i);
                k++;
            }
        }
        if (m[0] == 'i') fail(c, n, "value is not in list");
        return jv_int(k);
    }
    fail(c, n, "method '%s' of '%s' is not supported (templates cannot modify their inputs)", m, jv_type_name(self));
}

static jv call_global(rctx *c, const jnode *n, const char *name, const jargs *a) {
    if (!strcmp(name, "range")) {
        if (a->nk) fail(c, n, "range() takes no keyword arguments");
        if (a->npos < 1 || a->npos > 3) fail(c, n, "range expected 1 to 3 arguments, got %d", a->npos);
        int64_t start = 0, stop, step = 1;
        if (a->npos == 1) stop = need_int(c, n, a->pos[0], "range argument");
        else {
            start = need_int(c, n, a->pos[0], "range argument");
            stop = need_int(c, n, a->pos[1], "range argument");
            if (a->npos == 3) step = need_int(c, n, a->pos[2], "range argument");
        }
        if (step == 0) fail(c, n, "range() arg 3 must not be zero");
        double count = step > 0 ? ceil(((double)stop - (double)start) / (double)step)
                                : ceil(((double)start - (double)stop) / (double)-step);
        if (count > 100000) fail(c, n, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jlist *l = jlist_new(c->a, c->f);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jlist_push(c->a, c->f, l, jv_int(i));
        return jv_list(l);
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        jdict *d = jdict_new(c->a, c->f);
        if (a->npos > 1) fail(c, n, "%s() takes at most one positional argument", name);
        if (a->npos == 1) {
            jv init = a->pos[0];
            if (init.t == JV_DICT || init.t == JV_NS) {
                for (size_t i = 0; i < init.u.d->n; i++) jdict_set(c->a, c->f, d, init.u.d->k[i], init.u.d->v[i]);
            } else if (init.t == JV_LIST) {
                for (size_t i = 0; i < init.u.l->n; i++) {
                    jv pair = init.u.l->v[i];
                    if (pair.t != JV_LIST || pair.u.l->n != 2) fail(c, n, "%s(): sequence items must be pairs", name);
                    jdict_set(c->a, c->f, d, pair.u.l->v[0], pair.u.l->v[1]);
                }
            } else {
                fail(c, n, "%s(): cannot build from '%s'", name, jv_type_name(init));
            }
        }
        for (int k = 0; k < a->nk; k++) jdict_set(c->a, c->f, d, jv_cstr(c->a, c->f, a->knames[k]), a->kvals[k]);
        jv v = jv_dict(d);
        if (name[0] == 'n') v.t = JV_NS;
        return v;
    }
    if (!strcmp(name, "raise_exception")) {
        jv msg = a->npos > 0 ? to_str(c, a->pos[0]) : jv_str("", 0);
        fail(c, n, "raise_exception: %.*s", (int)(msg.u.s.n > 700 ? 700 : msg.u.s.n), msg.u.s.p);
    }
    if (!strcmp(name, "strftime_now")) {
        if (a->npos != 1) fail(c, n, "strftime_now() takes exactly one argument");
        const char *fmt = cstr(c, need_str(c, n, a->pos[0], "strftime_now format"));
        struct tm tm;
        if (c->now) {
            time_t t = (time_t)c->now;
            gmtime_r(&t, &tm);
        } else {
            time_t t = time(NULL);
            localtime_r(&t, &tm);
        }
        char out[256];
        size_t k = strftime(out, sizeof out, fmt, &tm);
        return jv_str(ja_strndup(c->a, c->f, out, k), k);
    }
    fail(c, n, "unknown function '%s'", name);
}

static jv call_macro(rctx *c, const jnode *n, const jfunc *fn, const jargs *a) {
    const jnode *m = fn->macro;
    count_step(c, n);
    if (++c->macro_depth > 100) fail(c, n, "macro recursion too deep (calling '%s')", m->name);
    jv *slots = ja_alloc(c->a, c->f, (size_t)(m->ntargets ? m->ntargets : 1) * sizeof *slots);
    char what[160];
    snprintf(what, sizeof what, "macro '%s'", m->name);
    bind_args(c, n, what, a, m->knames, m->ntargets, slots);
    jscope *saved_scope = c->scope;
    jbuf *saved_out = c->out;
    c->scope = scope_push(c, fn->closure);
    for (int i = 0; i < m->ntargets; i++) {
        jv v = slots[i];
        if (!given(v)) v = m->kvals.v[i] ? eval(c, m->kvals.v[i]) : undef_name(c, m->knames[i]);
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
    if (callee.t == JV_UNDEF) fail_undefined(c, n, callee);
    if (callee.t != JV_FUNC) fail(c, n, "'%s' object is not callable", jv_type_name(callee));
    const jfunc *fn = callee.u.fn;
    switch (fn->kind) {
    case JF_GLOBAL: return call_global(c, n, fn->name, a);
    case JF_METHOD: return call_method(c, n, fn, a);
    case JF_MACRO: return call_macro(c, n, fn, a);
    }
    fail(c, n, "bad callable");
}

/* ---- expressions ------------------------------------------------------------------ */

static jv eval_node(rctx *c, const jnode *n);

static jv eval(rctx *c, const jnode *n) {
    enter(c, n);
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
        return get_item(c, n, obj, eval(c, n->b));
    }
    case JN_SLICE: {
        jv obj = eval(c, n->a);
        jv s0 = n->b ? eval(c, n->b) : jv_none();
        jv s1 = n->c ? eval(c, n->c) : jv_none();
        jv s2 = n->args.n && n->args.v[0] ? eval(c, n->args.v[0]) : jv_none();
        return do_slice(c, n, obj, s0, s1, s2);
    }
    case JN_CALL: {
        jv callee = eval(c, n->a);
        jargs a = eval_args(c, n);
        return call_value(c, n, callee, &a);
    }
    case JN_FILTER: {
        jv x = eval(c, n->a);
        jargs a = eval_args(c, n);
        return apply_filter(c, n, n->name, x, &a);
    }
    case JN_TEST: {
        jv x = eval(c, n->a);
        jargs a = eval_args(c, n);
        bool r = apply_test(c, n, n->name, x, &a);
        return jv_bool(n->negated ? !r : r);
    }
    case JN_NEG: case JN_POS: {
        jv x = eval(c, n->a);
        if (x.t == JV_UNDEF) fail_undefined(c, n, x);
        if (!jv_is_number(x)) fail(c, n, "bad operand type for unary %s: '%s'", n->kind == JN_NEG ? "-" : "+", jv_type_name(x));
        if (n->kind == JN_POS) return x.t == JV_BOOL ? jv_int(x.u.b) : x;
        if (x.t == JV_FLOAT) return jv_float(-x.u.f);
        int64_t v = x.t == JV_BOOL ? x.u.b : x.u.i;
        if (v == INT64_MIN) fail(c, n, "integer overflow");
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
        return arith(c, n, n->op, l, r);
    }
    case JN_COMPARE: {
        jv l = eval(c, n->a);
        for (int i = 0; i < n->args.n; i++) {
            jv r = eval(c, n->args.v[i]);
            if (!compare_values(c, n, n->ops[i], l, r)) return jv_bool(false);
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
            if (k.t == JV_LIST && !k.u.l->tuple) fail(c, n, "unhashable type: 'list'");
            if (k.t == JV_DICT || k.t == JV_NS) fail(c, n, "unhashable type: '%s'", jv_type_name(k));
            jdict_set(c->a, c->f, d, k, eval(c, n->kvals.v[i]));
        }
        return jv_dict(d);
    }
    default:
        fail(c, n, "internal error: statement used as expression");
    }
}

/* ---- statements ------------------------------------------------------------------ */

static void bind_targets(rctx *c, const jnode *n, jv v) {
    if (n->ntargets == 1) { scope_set(c, n->targets[0], v); return; }
    if (v.t == JV_UNDEF) fail_undefined(c, n, v);
    jlist *items = iter_items(c, n, v);
    if ((int)items->n != n->ntargets)
        fail(c, n, "%s values to unpack (expected %d, got %zu)", (int)items->n > n->ntargets ? "too many" : "not enough",
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
    jlist *items = iter_items(c, n, seq);
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
            if (ns.t != JV_NS) fail(c, n, "cannot assign attribute '%s' on non-namespace object '%s'", n->attr, n->targets[0]);
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
    default: fail(c, n, "internal error: expression used as statement");
    }
}

static void render_body(rctx *c, const jnodes *body) {
    enter(c, body->n ? body->v[0] : NULL);
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
