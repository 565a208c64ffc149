/* chat_builtins.c — the Jinja builtin library the renderer calls: tests
 * (`x is defined`), filters (`x | tojson`), Python methods of strings, dicts
 * and lists, and the globals range, namespace, dict, raise_exception and
 * strftime_now.
 *
 * Each kind is one table sorted by name and searched with bsearch (a unit
 * test checks the order: jinja_builtin_tables_sorted). An entry carries the
 * function, a variant code for the names that share one (upper/lower,
 * select/reject, eq/ne/...), and, where the builtin takes Python-style named
 * parameters, their names: the dispatcher binds positional and keyword
 * arguments to those slots before calling, so each function reads s[i].
 * Entries without parameter names get the raw arguments. Semantics are
 * Jinja2 3.1's and Python's, as HF renders templates. */
#include "chat_eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

enum { MAX_PARAMS = 4 };

/* Every table entry starts with its name, so one comparator serves all. */
static int by_name(const void *key, const void *entry) {
    return strcmp((const char *)key, *(const char *const *)entry);
}

static const void *find_entry(const void *table, size_t n, size_t size, const char *name) {
    return bsearch(name, table, n, size, by_name);
}

static bool names_sorted(const void *table, size_t n, size_t size) {
    for (size_t i = 1; i < n; i++) {
        const char *prev = *(const char *const *)((const char *)table + (i - 1) * size);
        const char *cur = *(const char *const *)((const char *)table + i * size);
        if (strcmp(prev, cur) >= 0) return false;
    }
    return true;
}

static int count_params(const char *const *params) {
    int k = 0;
    while (k < MAX_PARAMS && params[k]) k++;
    return k;
}

#define N_OF(t) (sizeof(t) / sizeof((t)[0]))

/* ---- string helpers ---------------------------------------------------- */

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
        i += utf8_decode(chars.u.s.p, chars.u.s.n, i, &x);
        if (x == cp) return true;
    }
    return false;
}

static bool strip_match(int32_t cp, const jv *chars) { return chars ? cp_in(cp, *chars) : py_isspace(cp); }

/* Python str.strip/lstrip/rstrip; chars NULL = whitespace. */
static jv str_strip(jv s, const jv *chars, bool left, bool right) {
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n;
    if (left) {
        while (b < e) {
            int32_t cp;
            size_t k = utf8_decode(p, e, b, &cp);
            if (!strip_match(cp, chars)) break;
            b += k;
        }
    }
    if (right) {
        while (e > b) {
            size_t pb = prev_boundary(p, e);
            if (pb < b) pb = b;
            int32_t cp;
            utf8_decode(p, e, pb, &cp);
            if (!strip_match(cp, chars)) break;
            e = pb;
        }
    }
    return jv_str(p + b, e - b);
}

enum { CASE_LOWER, CASE_UPPER, CASE_CAPITALIZE, CASE_TITLE };

/* Python str.lower/upper/capitalize/title. */
static jv str_case(rctx *c, jv s, int mode) {
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    bool first = true, prev_cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        int32_t cp;
        size_t k = utf8_decode(s.u.s.p, s.u.s.n, i, &cp);
        int32_t o;
        if (mode == CASE_LOWER) o = utf8proc_tolower(cp);
        else if (mode == CASE_UPPER) o = utf8proc_toupper(cp);
        else if (mode == CASE_CAPITALIZE) o = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
        else o = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
        if (mode == CASE_TITLE) {
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
            size_t k = utf8_decode(s.u.s.p, s.u.s.n, i, &cp);
            jb_put(c->a, c->f, &b, s.u.s.p + i, k);
            i += k;
        }
        return jv_str(b.p, b.n);
    }
    const char *p = s.u.s.p, *end = p + s.u.s.n;
    int64_t done = 0;
    while (p < end) {
        const char *hit = (count < 0 || done < count) ? jr_find_sub(p, (size_t)(end - p), old.u.s.p, old.u.s.n) : NULL;
        if (!hit) break;
        jb_put(c->a, c->f, &b, p, (size_t)(hit - p));
        jb_put(c->a, c->f, &b, new_.u.s.p, new_.u.s.n);
        p = hit + old.u.s.n;
        done++;
    }
    jb_put(c->a, c->f, &b, p, (size_t)(end - p));
    return jv_str(b.p, b.n);
}

/* The end of the whitespace run (want_space) or non-whitespace run at i. */
static size_t skip_class(const char *p, size_t len, size_t i, bool want_space) {
    while (i < len) {
        int32_t cp;
        size_t k = utf8_decode(p, len, i, &cp);
        if (py_isspace(cp) != want_space) break;
        i += k;
    }
    return i;
}

/* Python str.split(sep, maxsplit); sep NULL = runs of whitespace. */
static jv str_split(rctx *c, const jnode *n, jv s, const jv *sep, int64_t maxsplit) {
    jlist *l = jlist_new(c->a, c->f);
    const char *p = s.u.s.p;
    size_t len = s.u.s.n;
    size_t i = 0;
    int64_t done = 0;
    if (sep) {
        if (sep->u.s.n == 0) jr_fail(c, n, "split(): empty separator");
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) ? jr_find_sub(p + i, len - i, sep->u.s.p, sep->u.s.n) : NULL;
            if (!hit) { jlist_push(c->a, c->f, l, jv_str(p + i, len - i)); break; }
            jlist_push(c->a, c->f, l, jv_str(p + i, (size_t)(hit - (p + i))));
            i = (size_t)(hit - p) + sep->u.s.n;
            done++;
        }
        return jv_list(l);
    }
    for (;;) {
        i = skip_class(p, len, i, true);
        if (i >= len) break;
        if (maxsplit >= 0 && done >= maxsplit) {
            jlist_push(c->a, c->f, l, str_strip(jv_str(p + i, len - i), NULL, false, true));
            break;
        }
        size_t start = i;
        i = skip_class(p, len, i, false);
        jlist_push(c->a, c->f, l, jv_str(p + start, i - start));
        done++;
    }
    return jv_list(l);
}

/* A (key, value) tuple. */
static jv pair_of(rctx *c, jv k, jv v) {
    jlist *pair = jlist_new(c->a, c->f);
    pair->tuple = true;
    jlist_push(c->a, c->f, pair, k);
    jlist_push(c->a, c->f, pair, v);
    return jv_list(pair);
}

/* ---- tests ------------------------------------------------------------- */

typedef bool (*jtest_fn)(rctx *c, const jnode *n, const char *name, jv x, jv arg, int variant);

typedef struct jtest_def {
    const char *name;
    jtest_fn fn;
    int variant;
    bool needs_arg;
} jtest_def;

static bool t_defined(rctx *c, const jnode *n, const char *name, jv x, jv arg, int v) {
    return (x.t != JV_UNDEF) == (v == 0);
}

/* Type tests: variant is the jv_type the value must have (JV_UNDEF: any). */
enum { TYPE_NUMBER = -1, TYPE_ITERABLE = -2, TYPE_SEQUENCE = -3, TYPE_FALSE = -4, TYPE_TRUE = -5, TYPE_NEVER = -6 };

static bool t_type(rctx *c, const jnode *n, const char *name, jv x, jv arg, int v) {
    switch (v) {
    case TYPE_NUMBER: return jv_is_number(x);
    case TYPE_ITERABLE: return x.t == JV_UNDEF || x.t == JV_STR || x.t == JV_LIST || x.t == JV_DICT;
    case TYPE_SEQUENCE: return x.t == JV_STR || x.t == JV_LIST || x.t == JV_DICT;
    case TYPE_FALSE: return x.t == JV_BOOL && !x.u.b;
    case TYPE_TRUE: return x.t == JV_BOOL && x.u.b;
    case TYPE_NEVER: return false;
    default: return (int)x.t == v;
    }
}

static bool t_sameas(rctx *c, const jnode *n, const char *name, jv x, jv arg, int v) {
    if (x.t != arg.t) return false;
    if (x.t == JV_NONE || x.t == JV_UNDEF) return true;
    if (x.t == JV_LIST) return x.u.l == arg.u.l;
    if (x.t == JV_DICT || x.t == JV_NS) return x.u.d == arg.u.d;
    return jv_eq(x, arg);
}

static bool t_odd_even(rctx *c, const jnode *n, const char *name, jv x, jv arg, int v) { /* value % 2 == v */
    if (!jv_is_number(x)) jr_fail(c, n, "%s test needs a number, not '%s'", name, jv_type_name(x));
    return jv_eq(jr_arith(c, n, JOP_MOD, x, jv_int(2)), jv_int(v));
}

static bool t_divisibleby(rctx *c, const jnode *n, const char *name, jv x, jv arg, int v) {
    return jv_eq(jr_arith(c, n, JOP_MOD, x, arg), jv_int(0)); /* value % num == 0 */
}

static bool t_case(rctx *c, const jnode *n, const char *name, jv x, jv arg, int mode) {
    jv s = jr_to_str(c, x);
    jv t = str_case(c, s, mode);
    /* Python: cased and equal to its own case mapping */
    bool cased = false;
    for (size_t i = 0; i < s.u.s.n;) {
        int32_t cp;
        i += utf8_decode(s.u.s.p, s.u.s.n, i, &cp);
        if (utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp) cased = true;
    }
    return cased && jv_eq(s, t);
}

static bool t_compare(rctx *c, const jnode *n, const char *name, jv x, jv arg, int op) {
    return jr_compare_values(c, n, op, x, arg);
}

static const jtest_def TESTS[] = {
    {"!=", t_compare, JOP_NE, true},
    {"<", t_compare, JOP_LT, true},
    {"<=", t_compare, JOP_LE, true},
    {"==", t_compare, JOP_EQ, true},
    {">", t_compare, JOP_GT, true},
    {">=", t_compare, JOP_GE, true},
    {"boolean", t_type, JV_BOOL, false},
    {"callable", t_type, JV_FUNC, false},
    {"defined", t_defined, 0, false},
    {"divisibleby", t_divisibleby, 0, true},
    {"eq", t_compare, JOP_EQ, true},
    {"equalto", t_compare, JOP_EQ, true},
    {"escaped", t_type, TYPE_NEVER, false},
    {"even", t_odd_even, 0, false},
    {"false", t_type, TYPE_FALSE, false},
    {"float", t_type, JV_FLOAT, false},
    {"ge", t_compare, JOP_GE, true},
    {"greaterthan", t_compare, JOP_GT, true},
    {"gt", t_compare, JOP_GT, true},
    {"in", t_compare, JOP_IN, true},
    {"integer", t_type, JV_INT, false},
    {"iterable", t_type, TYPE_ITERABLE, false},
    {"le", t_compare, JOP_LE, true},
    {"lessthan", t_compare, JOP_LT, true},
    {"lower", t_case, CASE_LOWER, false},
    {"lt", t_compare, JOP_LT, true},
    {"mapping", t_type, JV_DICT, false},
    {"ne", t_compare, JOP_NE, true},
    {"none", t_type, JV_NONE, false},
    {"number", t_type, TYPE_NUMBER, false},
    {"odd", t_odd_even, 1, false},
    {"sameas", t_sameas, 0, true},
    {"sequence", t_type, TYPE_SEQUENCE, false},
    {"string", t_type, JV_STR, false},
    {"true", t_type, TYPE_TRUE, false},
    {"undefined", t_defined, 1, false},
    {"upper", t_case, CASE_UPPER, false},
};

bool jinja_test_known(const char *name) { return find_entry(TESTS, N_OF(TESTS), sizeof TESTS[0], name) != NULL; }

bool jinja_apply_test(rctx *c, const jnode *n, const char *name, jv x, const jargs *a) {
    const jtest_def *t = find_entry(TESTS, N_OF(TESTS), sizeof TESTS[0], name);
    if (!t) jr_fail(c, n, "unknown test '%s'", name);
    if (t->needs_arg && a->npos < 1) jr_fail(c, n, "test '%s' needs an argument", name);
    return t->fn(c, n, name, x, a->npos > 0 ? a->pos[0] : jv_undef(NULL), t->variant);
}

/* ---- filters ----------------------------------------------------------- */

/* s: the arguments bound to the entry's parameter names (none: use a). */
typedef jv (*jfilter_fn)(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int variant);

typedef struct jfilter_def {
    const char *name;
    jfilter_fn fn;
    int variant;
    const char *params[MAX_PARAMS];
} jfilter_def;

static jv arg0_of(const jargs *a) { return a->npos > 0 ? a->pos[0] : jv_undef(NULL); }

/* A value's attribute by a dotted path ("a.b" or "0"), as jinja's make_attrgetter. */
static jv attr_path(rctx *c, const jnode *n, jv x, jv path) {
    const char *s = jr_cstr(c, jr_need_str(c, n, path, "attribute"));
    for (;;) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        char *part = ja_strndup(c->a, c->f, s, len);
        bool numeric = len > 0;
        for (size_t i = 0; i < len; i++)
            if (part[i] < '0' || part[i] > '9') numeric = false;
        x = numeric ? jr_get_item(c, n, x, jv_int(strtoll(part, NULL, 10))) : jr_get_item(c, n, x, jv_str(part, len));
        if (!dot) return x;
        s = dot + 1;
    }
}

/* select/reject/selectattr/rejectattr share argument shapes. */
static bool select_one(rctx *c, const jnode *n, jv item, const jargs *a, int first_test_arg) {
    if (a->npos <= first_test_arg) return jv_truthy(item);
    const char *test = jr_cstr(c, jr_need_str(c, n, a->pos[first_test_arg], "test name"));
    if (!jinja_test_known(test)) jr_fail(c, n, "unknown test '%s'", test);
    jargs ta;
    memset(&ta, 0, sizeof ta);
    ta.npos = a->npos - first_test_arg - 1;
    ta.pos = a->pos + first_test_arg + 1;
    return jinja_apply_test(c, n, test, item, &ta);
}

typedef struct sort_item { jv key; jv val; size_t idx; } sort_item;

static int sort_cmp(rctx *c, const jnode *n, jv a, jv b, bool ci) {
    if (ci && a.t == JV_STR && b.t == JV_STR) {
        a = str_case(c, a, CASE_LOWER);
        b = str_case(c, b, CASE_LOWER);
    }
    return jr_cmp_order(c, n, a, b, "<");
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

static jv f_default(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jv dflt = jr_given(s[0]) ? s[0] : jv_str("", 0);
    bool boolean = jr_given(s[1]) && jv_truthy(s[1]);
    if (x.t == JV_UNDEF || (boolean && !jv_truthy(x))) return dflt;
    return x;
}

static jv f_length(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    return jv_int(jr_py_len(c, n, x));
}

static jv f_string(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    return jr_to_str(c, x);
}

static jv f_trim(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jv chars;
    bool has = jr_given(s[0]) && s[0].t != JV_NONE;
    if (has) chars = jr_need_str(c, n, s[0], "trim chars");
    return str_strip(jr_to_str(c, x), has ? &chars : NULL, true, true);
}

static jv f_case(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int mode) {
    return str_case(c, jr_to_str(c, x), mode);
}

/* Jinja's `title` filter (not str.title): split before runs of
 * [-\s({[<]; each piece gets its first code point upper-cased and the rest
 * lower-cased. */
static jv f_title(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s_, int v) {
    jv s = jr_to_str(c, x);
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    bool in_sep = false, piece_start = true;
    for (size_t i = 0; i < s.u.s.n;) {
        int32_t cp;
        size_t k = utf8_decode(s.u.s.p, s.u.s.n, i, &cp);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
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

static jv f_replace(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    if (!jr_given(s[0]) || !jr_given(s[1])) jr_fail(c, n, "replace() needs old and new");
    int64_t count = jr_given(s[2]) && s[2].t != JV_NONE ? jr_need_int(c, n, s[2], "count") : -1;
    return str_replace(c, jr_to_str(c, x), jr_to_str(c, s[0]), jr_to_str(c, s[1]), count);
}

/* HF's tojson: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) with those keyword arguments. */
static jv f_tojson(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jjson_opts o = {-1, false, false, ", ", ": "};
    o.ensure_ascii = jr_given(s[0]) && jv_truthy(s[0]);
    o.sort_keys = jr_given(s[3]) && jv_truthy(s[3]);
    if (jr_given(s[1]) && s[1].t != JV_NONE) {
        if (s[1].t == JV_STR) jr_fail(c, n, "tojson(indent=<string>) is not supported");
        int64_t ind = jr_need_int(c, n, s[1], "indent");
        if (ind > 64) jr_fail(c, n, "tojson indent too large");
        o.indent = ind < 0 ? 0 : (int)ind;
        o.item_sep = ",";
    }
    if (jr_given(s[2]) && s[2].t != JV_NONE) {
        jv sep = s[2];
        if (sep.t != JV_LIST || sep.u.l->n != 2 || sep.u.l->v[0].t != JV_STR || sep.u.l->v[1].t != JV_STR)
            jr_fail(c, n, "tojson(separators=...) needs a pair of strings");
        o.item_sep = jr_cstr(c, sep.u.l->v[0]);
        o.key_sep = jr_cstr(c, sep.u.l->v[1]);
    }
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    const char *bad = NULL;
    if (!jv_tojson_into(c->a, c->f, &b, x, &o, &bad)) jr_fail(c, n, "Object of type %s is not JSON serializable", bad);
    return jv_str(b.p, b.n);
}

static jv f_items(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jlist *l = jlist_new(c->a, c->f);
    if (x.t == JV_UNDEF) return jv_list(l);
    if (x.t != JV_DICT) jr_fail(c, n, "items filter: can only get item pairs from a mapping, not '%s'", jv_type_name(x));
    for (size_t i = 0; i < x.u.d->n; i++) jlist_push(c->a, c->f, l, pair_of(c, x.u.d->k[i], x.u.d->v[i]));
    return jv_list(l);
}

static jv f_dictsort(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v_) {
    if (x.t != JV_DICT) jr_fail(c, n, "dictsort: can only sort a mapping, not '%s'", jv_type_name(x));
    bool ci = !(jr_given(s[0]) && jv_truthy(s[0]));
    bool by_value = jr_given(s[1]) && jr_str_eq(s[1], "value");
    if (jr_given(s[1]) && !by_value && !jr_str_eq(s[1], "key")) jr_fail(c, n, "dictsort: 'by' must be 'key' or 'value'");
    size_t cnt = x.u.d->n;
    sort_item *v = ja_alloc(c->a, c->f, (cnt ? cnt : 1) * sizeof *v);
    for (size_t i = 0; i < cnt; i++) {
        v[i].key = by_value ? x.u.d->v[i] : x.u.d->k[i];
        v[i].idx = i;
    }
    sort_items(c, n, v, cnt, ci, jr_given(s[2]) && jv_truthy(s[2]));
    jlist *l = jlist_new(c->a, c->f);
    for (size_t i = 0; i < cnt; i++) jlist_push(c->a, c->f, l, pair_of(c, x.u.d->k[v[i].idx], x.u.d->v[v[i].idx]));
    return jv_list(l);
}

static jv f_list(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jlist *src = jr_iter_items(c, n, x), *l = jlist_new(c->a, c->f);
    for (size_t i = 0; i < src->n; i++) jlist_push(c->a, c->f, l, src->v[i]);
    return jv_list(l);
}

static jv f_first_last(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int last) {
    jlist *src = jr_iter_items(c, n, x);
    if (src->n == 0) return jv_undef(jr_fmtstr(c, "%s(): sequence is empty%s", last ? "last" : "first", NULL));
    return last ? src->v[src->n - 1] : src->v[0];
}

static jv f_reverse(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    if (x.t == JV_STR) return jr_do_slice(c, n, x, jv_none(), jv_none(), jv_int(-1));
    jlist *src = jr_iter_items(c, n, x), *l = jlist_new(c->a, c->f);
    for (size_t i = src->n; i > 0; i--) jlist_push(c->a, c->f, l, src->v[i - 1]);
    return jv_list(l);
}

static jv f_join(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jv sep = jr_given(s[0]) ? jr_to_str(c, s[0]) : jv_str("", 0);
    jlist *src = jr_iter_items(c, n, x);
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    for (size_t i = 0; i < src->n; i++) {
        if (i) jb_put(c->a, c->f, &b, sep.u.s.p, sep.u.s.n);
        jv item = jr_given(s[1]) && s[1].t != JV_NONE ? attr_path(c, n, src->v[i], s[1]) : src->v[i];
        jv_str_into(c->a, c->f, &b, item);
    }
    return jv_str(b.p, b.n);
}

/* map/select/reject/selectattr/rejectattr yield nothing for a falsy input
 * (Jinja checks `if value:` before iterating). */
static jv f_map(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    if (!jv_truthy(x)) return jv_list(jlist_new(c->a, c->f));
    jlist *src = jr_iter_items(c, n, x), *l = jlist_new(c->a, c->f);
    int ka = -1, kd = -1;
    for (int k = 0; k < a->nk; k++) {
        if (!strcmp(a->knames[k], "attribute")) ka = k;
        else if (!strcmp(a->knames[k], "default")) kd = k;
        else jr_fail(c, n, "map(): unexpected keyword argument '%s'", a->knames[k]);
    }
    if (ka >= 0) {
        for (size_t i = 0; i < src->n; i++) {
            jv item = attr_path(c, n, src->v[i], a->kvals[ka]);
            if (item.t == JV_UNDEF && kd >= 0) item = a->kvals[kd];
            jlist_push(c->a, c->f, l, item);
        }
        return jv_list(l);
    }
    if (a->npos < 1) jr_fail(c, n, "map() needs a filter name or attribute=");
    const char *fname = jr_cstr(c, jr_need_str(c, n, a->pos[0], "filter name"));
    if (!jinja_filter_known(fname)) jr_fail(c, n, "unknown filter '%s'", fname);
    jargs fa;
    memset(&fa, 0, sizeof fa);
    fa.npos = a->npos - 1;
    fa.pos = a->pos + 1;
    jr_enter(c, n); /* map('map', ...) recurses */
    for (size_t i = 0; i < src->n; i++) jlist_push(c->a, c->f, l, jinja_apply_filter(c, n, fname, src->v[i], &fa));
    c->depth--;
    return jv_list(l);
}

static jv f_select(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int want) {
    jlist *l = jlist_new(c->a, c->f);
    if (!jv_truthy(x)) return jv_list(l);
    jlist *src = jr_iter_items(c, n, x);
    for (size_t i = 0; i < src->n; i++)
        if (select_one(c, n, src->v[i], a, 0) == (bool)want) jlist_push(c->a, c->f, l, src->v[i]);
    return jv_list(l);
}

static jv f_selectattr(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int want) {
    jlist *l = jlist_new(c->a, c->f);
    if (!jv_truthy(x)) return jv_list(l);
    if (a->npos < 1) jr_fail(c, n, "%s() needs an attribute name", want ? "selectattr" : "rejectattr");
    jlist *src = jr_iter_items(c, n, x);
    for (size_t i = 0; i < src->n; i++)
        if (select_one(c, n, attr_path(c, n, src->v[i], a->pos[0]), a, 1) == (bool)want)
            jlist_push(c->a, c->f, l, src->v[i]);
    return jv_list(l);
}

enum { AGG_SORT, AGG_UNIQUE, AGG_MIN, AGG_MAX };

/* sort(reverse, case_sensitive, attribute); unique/min/max(case_sensitive,
 * attribute): s is shifted so s[0] is reverse for sort only. */
static jv sort_family(rctx *c, const jnode *n, jv x, bool reverse, jv case_sensitive, jv attribute, int kind) {
    bool ci = !(jr_given(case_sensitive) && jv_truthy(case_sensitive));
    jlist *src = jr_iter_items(c, n, x);
    sort_item *v = ja_alloc(c->a, c->f, (src->n ? src->n : 1) * sizeof *v);
    for (size_t i = 0; i < src->n; i++) {
        v[i].val = src->v[i];
        v[i].key = jr_given(attribute) && attribute.t != JV_NONE ? attr_path(c, n, src->v[i], attribute) : src->v[i];
        v[i].idx = i;
    }
    jlist *l = jlist_new(c->a, c->f);
    if (kind == AGG_UNIQUE) {
        jlist *seen = jlist_new(c->a, c->f);
        for (size_t i = 0; i < src->n; i++) {
            jv k = ci && v[i].key.t == JV_STR ? str_case(c, v[i].key, CASE_LOWER) : v[i].key;
            bool dup = false;
            for (size_t j = 0; j < seen->n && !dup; j++) dup = jv_eq(seen->v[j], k);
            if (!dup) { jlist_push(c->a, c->f, seen, k); jlist_push(c->a, c->f, l, v[i].val); }
        }
        return jv_list(l);
    }
    sort_items(c, n, v, src->n, ci, reverse);
    if (kind != AGG_SORT) {
        if (src->n == 0) return jv_undef("No aggregated item, sequence was empty.");
        return kind == AGG_MIN ? v[0].val : v[src->n - 1].val;
    }
    for (size_t i = 0; i < src->n; i++) jlist_push(c->a, c->f, l, v[i].val);
    return jv_list(l);
}

static jv f_sort(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    return sort_family(c, n, x, jr_given(s[0]) && jv_truthy(s[0]), s[1], s[2], AGG_SORT);
}

static jv f_aggregate(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int kind) {
    return sort_family(c, n, x, false, s[0], s[1], kind);
}

static jv f_sum(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jlist *src = jr_iter_items(c, n, x);
    jv acc = a->npos > 1 ? a->pos[1] : jv_int(0);
    for (size_t i = 0; i < src->n; i++) {
        jv item = a->npos > 0 ? attr_path(c, n, src->v[i], a->pos[0]) : src->v[i];
        acc = jr_arith(c, n, JOP_ADD, acc, item);
    }
    return acc;
}

static jv f_abs(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    if (x.t == JV_INT) return jv_int(x.u.i < 0 ? -x.u.i : x.u.i);
    if (x.t == JV_BOOL) return jv_int(x.u.b);
    if (x.t == JV_FLOAT) return jv_float(fabs(x.u.f));
    jr_fail(c, n, "bad operand type for abs(): '%s'", jv_type_name(x));
}

static jv f_int(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jv dflt = jr_given(s[0]) ? s[0] : jv_int(0);
    if (x.t == JV_UNDEF) jr_fail_undefined(c, n, x);
    if (x.t == JV_INT) return x;
    if (x.t == JV_BOOL) return jv_int(x.u.b);
    if (x.t == JV_FLOAT) return fabs(x.u.f) < 9.2e18 ? jv_int((int64_t)x.u.f) : dflt;
    if (x.t == JV_STR) {
        jv t = str_strip(x, NULL, true, true);
        const char *z = jr_cstr(c, t);
        char *end;
        long long i = strtoll(z, &end, jr_given(s[1]) ? (int)jr_need_int(c, n, s[1], "base") : 10);
        if (*z && !*end) return jv_int(i);
        double d = strtod(z, &end);
        if (*z && !*end && fabs(d) < 9.2e18) return jv_int((int64_t)d);
    }
    return dflt;
}

static jv f_float(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jv dflt = a->npos > 0 ? a->pos[0] : jv_float(0.0);
    if (x.t == JV_UNDEF) jr_fail_undefined(c, n, x);
    if (x.t == JV_FLOAT) return x;
    if (x.t == JV_INT || x.t == JV_BOOL) return jv_float(jv_as_double(x));
    if (x.t == JV_STR) {
        const char *z = jr_cstr(c, str_strip(x, NULL, true, true));
        char *end;
        double d = strtod(z, &end);
        if (*z && !*end) return jv_float(d);
    }
    return dflt;
}

static jv f_round(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v_) {
    int64_t prec = jr_given(s[0]) ? jr_need_int(c, n, s[0], "precision") : 0;
    const char *method = jr_given(s[1]) ? jr_cstr(c, jr_need_str(c, n, s[1], "method")) : "common";
    if (!jv_is_number(x)) jr_fail(c, n, "round(): not a number: '%s'", jv_type_name(x));
    if (x.t != JV_FLOAT && !strcmp(method, "common")) return jv_int(x.t == JV_INT ? x.u.i : x.u.b); /* round(int) is int */
    double v = jv_as_double(x);
    double m = pow(10.0, (double)prec);
    double r;
    if (!strcmp(method, "common")) r = nearbyint(v * m) / m; /* Python rounds half to even */
    else if (!strcmp(method, "ceil")) r = ceil(v * m) / m;
    else if (!strcmp(method, "floor")) r = floor(v * m) / m;
    else jr_fail(c, n, "round(): method must be common, ceil or floor");
    return jv_float(r);
}

static jv f_attr(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    if (a->npos < 1) jr_fail(c, n, "attr() needs a name");
    jv out;
    const char *nm = jr_cstr(c, jr_need_str(c, n, arg0_of(a), "attribute name"));
    if (jr_py_getattr(c, x, nm, &out)) return out;
    return jr_undef_attr(c, x, nm);
}

static jv f_indent(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) {
    jv pad = !jr_given(s[0]) ? jv_str("    ", 4) : s[0].t == JV_STR ? s[0] : jv_undef(NULL);
    if (pad.t != JV_STR) {
        int64_t w = jr_need_int(c, n, s[0], "width");
        if (w < 0 || w > 1000) jr_fail(c, n, "indent width out of range");
        char *sp = ja_alloc(c->a, c->f, (size_t)w + 1);
        memset(sp, ' ', (size_t)w);
        pad = jv_str(sp, (size_t)w);
    }
    bool first = jr_given(s[1]) && jv_truthy(s[1]), blank = jr_given(s[2]) && jv_truthy(s[2]);
    if (x.t != JV_STR && x.t != JV_UNDEF) jr_fail(c, n, "indent filter needs a string, not '%s'", jv_type_name(x));
    jv src = jr_to_str(c, x);
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

static jv f_format(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) { /* str(value) % (kwargs or args) */
    if (a->npos && a->nk) jr_fail(c, n, "format(): can't handle positional and keyword arguments at the same time");
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
    return jr_percent_format(c, n, jr_to_str(c, x), fargs);
}

/* Python's re \w for one code point (letters, numbers, underscore). */
static bool word_char(int32_t cp) {
    if (cp == '_') return true;
    utf8proc_category_t cat = utf8proc_category(cp);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

static jv f_wordcount(rctx *c, const jnode *n, jv x, const jargs *a, const jv *s, int v) { /* number of \w+ runs */
    jv str = jr_to_str(c, x);
    int64_t words = 0;
    bool in_word = false;
    for (size_t i = 0; i < str.u.s.n;) {
        int32_t cp;
        i += utf8_decode(str.u.s.p, str.u.s.n, i, &cp);
        bool w = word_char(cp);
        if (w && !in_word) words++;
        in_word = w;
    }
    return jv_int(words);
}

static const jfilter_def FILTERS[] = {
    {"abs", f_abs, 0, {NULL}},
    {"attr", f_attr, 0, {NULL}},
    {"capitalize", f_case, CASE_CAPITALIZE, {NULL}},
    {"count", f_length, 0, {NULL}},
    {"d", f_default, 0, {"default_value", "boolean"}},
    {"default", f_default, 0, {"default_value", "boolean"}},
    {"dictsort", f_dictsort, 0, {"case_sensitive", "by", "reverse"}},
    {"first", f_first_last, 0, {NULL}},
    {"float", f_float, 0, {NULL}},
    {"format", f_format, 0, {NULL}},
    {"indent", f_indent, 0, {"width", "first", "blank"}},
    {"int", f_int, 0, {"default", "base"}},
    {"items", f_items, 0, {NULL}},
    {"join", f_join, 0, {"d", "attribute"}},
    {"last", f_first_last, 1, {NULL}},
    {"length", f_length, 0, {NULL}},
    {"list", f_list, 0, {NULL}},
    {"lower", f_case, CASE_LOWER, {NULL}},
    {"map", f_map, 0, {NULL}},
    {"max", f_aggregate, AGG_MAX, {"case_sensitive", "attribute"}},
    {"min", f_aggregate, AGG_MIN, {"case_sensitive", "attribute"}},
    {"reject", f_select, 0, {NULL}},
    {"rejectattr", f_selectattr, 0, {NULL}},
    {"replace", f_replace, 0, {"old", "new", "count"}},
    {"reverse", f_reverse, 0, {NULL}},
    {"round", f_round, 0, {"precision", "method"}},
    {"safe", f_string, 0, {NULL}},
    {"select", f_select, 1, {NULL}},
    {"selectattr", f_selectattr, 1, {NULL}},
    {"sort", f_sort, 0, {"reverse", "case_sensitive", "attribute"}},
    {"string", f_string, 0, {NULL}},
    {"sum", f_sum, 0, {NULL}},
    {"title", f_title, 0, {NULL}},
    {"tojson", f_tojson, 0, {"ensure_ascii", "indent", "separators", "sort_keys"}},
    {"trim", f_trim, 0, {"chars"}},
    {"unique", f_aggregate, AGG_UNIQUE, {"case_sensitive", "attribute"}},
    {"upper", f_case, CASE_UPPER, {NULL}},
    {"wordcount", f_wordcount, 0, {NULL}},
};

bool jinja_filter_known(const char *name) {
    return find_entry(FILTERS, N_OF(FILTERS), sizeof FILTERS[0], name) != NULL;
}

/* Binds a's arguments to params (if any) and calls fn; `what` names the
 * callee in binding errors. */
static void bind_params(rctx *c, const jnode *n, const char *what, const jargs *a, const char *const *params,
                        jv *slots) {
    int np = count_params(params);
    if (np) jr_bind_args(c, n, what, a, params, np, slots);
}

jv jinja_apply_filter(rctx *c, const jnode *n, const char *name, jv x, const jargs *a) {
    const jfilter_def *fd = find_entry(FILTERS, N_OF(FILTERS), sizeof FILTERS[0], name);
    if (!fd) jr_fail(c, n, "unknown filter '%s'", name);
    jv s[MAX_PARAMS];
    char what[48];
    snprintf(what, sizeof what, "%s()", fd->name);
    bind_params(c, n, what, a, fd->params, s);
    return fd->fn(c, n, x, a, s, fd->variant);
}

/* ---- methods ----------------------------------------------------------- */

/* Methods bind their arguments always (a method without parameters refuses
 * any); NULL fn: Python has it, templates may test for it, calling fails. */
typedef jv (*jmethod_fn)(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int variant);

typedef struct jmethod_def {
    const char *name;
    jmethod_fn fn;
    int variant;
    bool raw; /* no binding: fn reads a */
    const char *params[MAX_PARAMS];
} jmethod_def;

enum { STRIP_LEFT = 1, STRIP_RIGHT = 2 };

static jv m_strip(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int sides) {
    jv chars;
    bool has = jr_given(s[0]) && s[0].t != JV_NONE;
    if (has) chars = jr_need_str(c, n, s[0], "strip chars");
    return str_strip(self, has ? &chars : NULL, sides & STRIP_LEFT, sides & STRIP_RIGHT);
}

static jv m_split(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int v) {
    jv sep;
    bool has = jr_given(s[0]) && s[0].t != JV_NONE;
    if (has) sep = jr_need_str(c, n, s[0], "split separator");
    int64_t maxsplit = jr_given(s[1]) ? jr_need_int(c, n, s[1], "maxsplit") : -1;
    return str_split(c, n, self, has ? &sep : NULL, maxsplit);
}

static jv m_affix_test(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int at_end) {
    if (!jr_given(s[0])) jr_fail(c, n, "%s() needs an argument", m);
    jlist one = {1, 1, (jv *)&s[0], false};
    jlist *cands = s[0].t == JV_LIST && s[0].u.l->tuple ? s[0].u.l : &one;
    for (size_t i = 0; i < cands->n; i++) {
        jv p = jr_need_str(c, n, cands->v[i], m);
        if (p.u.s.n > self.u.s.n) continue;
        const char *at = at_end ? self.u.s.p + self.u.s.n - p.u.s.n : self.u.s.p;
        if (!memcmp(at, p.u.s.p, p.u.s.n)) return jv_bool(true);
    }
    return jv_bool(false);
}

static jv m_case(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int mode) {
    return str_case(c, self, mode);
}

static jv m_replace(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int v) {
    if (!jr_given(s[0]) || !jr_given(s[1])) jr_fail(c, n, "replace() needs old and new");
    int64_t count = jr_given(s[2]) ? jr_need_int(c, n, s[2], "count") : -1;
    return str_replace(c, self, jr_need_str(c, n, s[0], "old"), jr_need_str(c, n, s[1], "new"), count);
}

enum { FIND_FIRST, FIND_LAST, FIND_INDEX, FIND_COUNT };

static jv m_find(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int kind) {
    if (!jr_given(s[0])) jr_fail(c, n, "%s() needs an argument", m);
    jv sub = jr_need_str(c, n, s[0], m);
    if (kind == FIND_COUNT) {
        if (sub.u.s.n == 0) return jv_int((int64_t)utf8_count(self.u.s.p, self.u.s.n) + 1);
        int64_t k = 0;
        const char *p = self.u.s.p, *end = p + self.u.s.n, *hit;
        while ((hit = jr_find_sub(p, (size_t)(end - p), sub.u.s.p, sub.u.s.n))) { k++; p = hit + sub.u.s.n; }
        return jv_int(k);
    }
    const char *hit = NULL;
    if (kind == FIND_LAST) {
        for (size_t i = self.u.s.n + 1; i-- > 0;)
            if (i + sub.u.s.n <= self.u.s.n && !memcmp(self.u.s.p + i, sub.u.s.p, sub.u.s.n)) { hit = self.u.s.p + i; break; }
    } else {
        hit = jr_find_sub(self.u.s.p, self.u.s.n, sub.u.s.p, sub.u.s.n);
    }
    if (!hit) {
        if (kind == FIND_INDEX) jr_fail(c, n, "substring not found");
        return jv_int(-1);
    }
    return jv_int((int64_t)utf8_count(self.u.s.p, (size_t)(hit - self.u.s.p)));
}

static jv m_join(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int v) {
    jlist *items = jr_iter_items(c, n, s[0]);
    jbuf b = {0};
    jb_put(c->a, c->f, &b, "", 0);
    for (size_t i = 0; i < items->n; i++) {
        if (i) jb_put(c->a, c->f, &b, self.u.s.p, self.u.s.n);
        jv it = jr_need_str(c, n, items->v[i], "join item");
        jb_put(c->a, c->f, &b, it.u.s.p, it.u.s.n);
    }
    return jv_str(b.p, b.n);
}

enum { CLASS_DIGIT, CLASS_SPACE, CLASS_ALPHA, CLASS_ALNUM };

static jv m_is_class(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int cls) {
    if (self.u.s.n == 0) return jv_bool(false);
    for (size_t i = 0; i < self.u.s.n;) {
        int32_t cp;
        i += utf8_decode(self.u.s.p, self.u.s.n, i, &cp);
        utf8proc_category_t cat = utf8proc_category(cp);
        bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        bool ok = cls == CLASS_DIGIT ? digit : cls == CLASS_SPACE ? py_isspace(cp) : cls == CLASS_ALPHA ? letter : (letter || digit);
        if (!ok) return jv_bool(false);
    }
    return jv_bool(true);
}

static jv m_remove_affix(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int at_end) {
    jv p = jr_need_str(c, n, s[0], m);
    if (p.u.s.n <= self.u.s.n) {
        if (!at_end && !memcmp(self.u.s.p, p.u.s.p, p.u.s.n)) return jv_str(self.u.s.p + p.u.s.n, self.u.s.n - p.u.s.n);
        if (at_end && !memcmp(self.u.s.p + self.u.s.n - p.u.s.n, p.u.s.p, p.u.s.n)) return jv_str(self.u.s.p, self.u.s.n - p.u.s.n);
    }
    return self;
}

/* Every str method Python has (so `s.name is defined` holds); the ones with
 * a function are the ones templates use. */
static const jmethod_def STR_METHODS[] = {
    {"capitalize", m_case, CASE_CAPITALIZE, false, {NULL}},
    {"casefold", NULL, 0, false, {NULL}},
    {"center", NULL, 0, false, {NULL}},
    {"count", m_find, FIND_COUNT, false, {"sub"}},
    {"encode", NULL, 0, false, {NULL}},
    {"endswith", m_affix_test, 1, false, {"prefix"}},
    {"expandtabs", NULL, 0, false, {NULL}},
    {"find", m_find, FIND_FIRST, false, {"sub"}},
    {"format", NULL, 0, false, {NULL}},
    {"format_map", NULL, 0, false, {NULL}},
    {"index", m_find, FIND_INDEX, false, {"sub"}},
    {"isalnum", m_is_class, CLASS_ALNUM, false, {NULL}},
    {"isalpha", m_is_class, CLASS_ALPHA, false, {NULL}},
    {"isascii", NULL, 0, false, {NULL}},
    {"isdecimal", NULL, 0, false, {NULL}},
    {"isdigit", m_is_class, CLASS_DIGIT, false, {NULL}},
    {"isidentifier", NULL, 0, false, {NULL}},
    {"islower", NULL, 0, false, {NULL}},
    {"isnumeric", NULL, 0, false, {NULL}},
    {"isprintable", NULL, 0, false, {NULL}},
    {"isspace", m_is_class, CLASS_SPACE, false, {NULL}},
    {"istitle", NULL, 0, false, {NULL}},
    {"isupper", NULL, 0, false, {NULL}},
    {"join", m_join, 0, false, {"iterable"}},
    {"ljust", NULL, 0, false, {NULL}},
    {"lower", m_case, CASE_LOWER, false, {NULL}},
    {"lstrip", m_strip, STRIP_LEFT, false, {"chars"}},
    {"maketrans", NULL, 0, false, {NULL}},
    {"partition", NULL, 0, false, {NULL}},
    {"removeprefix", m_remove_affix, 0, false, {"affix"}},
    {"removesuffix", m_remove_affix, 1, false, {"affix"}},
    {"replace", m_replace, 0, false, {"old", "new", "count"}},
    {"rfind", m_find, FIND_LAST, false, {"sub"}},
    {"rindex", NULL, 0, false, {NULL}},
    {"rjust", NULL, 0, false, {NULL}},
    {"rpartition", NULL, 0, false, {NULL}},
    {"rsplit", NULL, 0, false, {NULL}},
    {"rstrip", m_strip, STRIP_RIGHT, false, {"chars"}},
    {"split", m_split, 0, false, {"sep", "maxsplit"}},
    {"splitlines", NULL, 0, false, {NULL}},
    {"startswith", m_affix_test, 0, false, {"prefix"}},
    {"strip", m_strip, STRIP_LEFT | STRIP_RIGHT, false, {"chars"}},
    {"swapcase", NULL, 0, false, {NULL}},
    {"title", m_case, CASE_TITLE, false, {NULL}},
    {"translate", NULL, 0, false, {NULL}},
    {"upper", m_case, CASE_UPPER, false, {NULL}},
    {"zfill", NULL, 0, false, {NULL}},
};

static jv m_dict_get(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int v) {
    if (!jr_given(s[0])) jr_fail(c, n, "get() needs a key");
    jv out;
    if (jdict_get(self.u.d, s[0], &out)) return out;
    return jr_given(s[1]) ? s[1] : jv_none();
}

enum { VIEW_ITEMS, VIEW_KEYS, VIEW_VALUES };

static jv m_dict_view(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int view) {
    jlist *l = jlist_new(c->a, c->f);
    for (size_t i = 0; i < self.u.d->n; i++) {
        jv k = self.u.d->k[i], v = self.u.d->v[i];
        jlist_push(c->a, c->f, l, view == VIEW_KEYS ? k : view == VIEW_VALUES ? v : pair_of(c, k, v));
    }
    return jv_list(l);
}

static jv m_dict_copy(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int v) {
    jdict *d = jdict_new(c->a, c->f);
    for (size_t i = 0; i < self.u.d->n; i++) jdict_set(c->a, c->f, d, self.u.d->k[i], self.u.d->v[i]);
    return jv_dict(d);
}

static const jmethod_def DICT_METHODS[] = {
    {"clear", NULL, 0, false, {NULL}},
    {"copy", m_dict_copy, 0, true, {NULL}},
    {"fromkeys", NULL, 0, false, {NULL}},
    {"get", m_dict_get, 0, false, {"key", "default"}},
    {"items", m_dict_view, VIEW_ITEMS, false, {NULL}},
    {"keys", m_dict_view, VIEW_KEYS, false, {NULL}},
    {"pop", NULL, 0, false, {NULL}},
    {"popitem", NULL, 0, false, {NULL}},
    {"setdefault", NULL, 0, false, {NULL}},
    {"update", NULL, 0, false, {NULL}},
    {"values", m_dict_view, VIEW_VALUES, false, {NULL}},
};

/* list/tuple .count(x) (variant 0) and .index(x) (variant 1). */
static jv m_list_find(rctx *c, const jnode *n, const char *m, jv self, const jargs *a, const jv *s, int index) {
    if (a->npos != 1) jr_fail(c, n, "%s() takes exactly one argument", m);
    int64_t k = 0;
    for (size_t i = 0; i < self.u.l->n; i++) {
        if (jv_eq(self.u.l->v[i], a->pos[0])) {
            if (index) return jv_int((int64_t)i);
            k++;
        }
    }
    if (index) jr_fail(c, n, "value is not in list");
    return jv_int(k);
}

static const jmethod_def LIST_METHODS[] = {
    {"append", NULL, 0, false, {NULL}},
    {"clear", NULL, 0, false, {NULL}},
    {"copy", NULL, 0, false, {NULL}},
    {"count", m_list_find, 0, true, {NULL}},
    {"extend", NULL, 0, false, {NULL}},
    {"index", m_list_find, 1, true, {NULL}},
    {"insert", NULL, 0, false, {NULL}},
    {"pop", NULL, 0, false, {NULL}},
    {"remove", NULL, 0, false, {NULL}},
    {"reverse", NULL, 0, false, {NULL}},
    {"sort", NULL, 0, false, {NULL}},
};

/* The method table for a receiver, or NULL (tuples: count and index only). */
static const jmethod_def *method_of(jv obj, const char *name) {
    if (obj.t == JV_STR) return find_entry(STR_METHODS, N_OF(STR_METHODS), sizeof STR_METHODS[0], name);
    if (obj.t == JV_DICT) return find_entry(DICT_METHODS, N_OF(DICT_METHODS), sizeof DICT_METHODS[0], name);
    if (obj.t == JV_LIST) {
        const jmethod_def *m = find_entry(LIST_METHODS, N_OF(LIST_METHODS), sizeof LIST_METHODS[0], name);
        if (m && obj.u.l->tuple && m->fn != m_list_find) return NULL;
        return m;
    }
    return NULL;
}

bool jinja_has_method(jv obj, const char *name) { return method_of(obj, name) != NULL; }

jv jinja_call_method(rctx *c, const jnode *n, const jfunc *fn, const jargs *a) {
    jv self = fn->self;
    const char *m = fn->name;
    if (self.t == JV_NS && !strcmp(m, "cycle")) { /* loop.cycle(a, b, ...) */
        jv index0;
        if (a->npos < 1 || a->nk) jr_fail(c, n, "loop.cycle() needs at least one positional argument");
        if (!jdict_get_str(self.u.d, "index0", &index0) || index0.t != JV_INT) jr_fail(c, n, "loop.cycle() outside a loop");
        return a->pos[index0.u.i % a->npos];
    }
    const jmethod_def *md = method_of(self, m);
    if (!md || !md->fn) {
        if (self.t == JV_STR) jr_fail(c, n, "string method '%s' is not supported", m);
        jr_fail(c, n, "method '%s' of '%s' is not supported (templates cannot modify their inputs)", m, jv_type_name(self));
    }
    jv s[MAX_PARAMS];
    if (!md->raw) {
        char what[48];
        snprintf(what, sizeof what, self.t == JV_STR ? "%s" : "%s()", md->name);
        jr_bind_args(c, n, what, a, md->params, count_params(md->params), s);
    }
    return md->fn(c, n, m, self, a, s, md->variant);
}

/* ---- globals ----------------------------------------------------------- */

typedef jv (*jglobal_fn)(rctx *c, const jnode *n, const char *name, const jargs *a);

typedef struct jglobal_def {
    const char *name;
    jglobal_fn fn;
} jglobal_def;

static jv g_range(rctx *c, const jnode *n, const char *name, const jargs *a) {
    if (a->nk) jr_fail(c, n, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3) jr_fail(c, n, "range expected 1 to 3 arguments, got %d", a->npos);
    int64_t start = 0, stop, step = 1;
    if (a->npos == 1) stop = jr_need_int(c, n, a->pos[0], "range argument");
    else {
        start = jr_need_int(c, n, a->pos[0], "range argument");
        stop = jr_need_int(c, n, a->pos[1], "range argument");
        if (a->npos == 3) step = jr_need_int(c, n, a->pos[2], "range argument");
    }
    if (step == 0) jr_fail(c, n, "range() arg 3 must not be zero");
    double count = step > 0 ? ceil(((double)stop - (double)start) / (double)step)
                            : ceil(((double)start - (double)stop) / (double)-step);
    if (count > 100000) jr_fail(c, n, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jlist *l = jlist_new(c->a, c->f);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jlist_push(c->a, c->f, l, jv_int(i));
    return jv_list(l);
}

/* namespace(...) and dict(...): from a mapping or pairs, plus keywords. */
static jv g_dict(rctx *c, const jnode *n, const char *name, const jargs *a) {
    jdict *d = jdict_new(c->a, c->f);
    if (a->npos > 1) jr_fail(c, n, "%s() takes at most one positional argument", name);
    if (a->npos == 1) {
        jv init = a->pos[0];
        if (init.t == JV_DICT || init.t == JV_NS) {
            for (size_t i = 0; i < init.u.d->n; i++) jdict_set(c->a, c->f, d, init.u.d->k[i], init.u.d->v[i]);
        } else if (init.t == JV_LIST) {
            for (size_t i = 0; i < init.u.l->n; i++) {
                jv pair = init.u.l->v[i];
                if (pair.t != JV_LIST || pair.u.l->n != 2) jr_fail(c, n, "%s(): sequence items must be pairs", name);
                jdict_set(c->a, c->f, d, pair.u.l->v[0], pair.u.l->v[1]);
            }
        } else {
            jr_fail(c, n, "%s(): cannot build from '%s'", name, jv_type_name(init));
        }
    }
    for (int k = 0; k < a->nk; k++) jdict_set(c->a, c->f, d, jv_cstr(c->a, c->f, a->knames[k]), a->kvals[k]);
    jv v = jv_dict(d);
    if (name[0] == 'n') v.t = JV_NS;
    return v;
}

static jv g_raise_exception(rctx *c, const jnode *n, const char *name, const jargs *a) {
    jv msg = a->npos > 0 ? jr_to_str(c, a->pos[0]) : jv_str("", 0);
    jr_fail(c, n, "raise_exception: %.*s", (int)(msg.u.s.n > 700 ? 700 : msg.u.s.n), msg.u.s.p);
}

static jv g_strftime_now(rctx *c, const jnode *n, const char *name, const jargs *a) {
    if (a->npos != 1) jr_fail(c, n, "strftime_now() takes exactly one argument");
    const char *fmt = jr_cstr(c, jr_need_str(c, n, a->pos[0], "strftime_now format"));
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

static const jglobal_def GLOBALS[] = {
    {"dict", g_dict},
    {"namespace", g_dict},
    {"raise_exception", g_raise_exception},
    {"range", g_range},
    {"strftime_now", g_strftime_now},
};

const char *jinja_global_name(const char *name) {
    const jglobal_def *g = find_entry(GLOBALS, N_OF(GLOBALS), sizeof GLOBALS[0], name);
    return g ? g->name : NULL;
}

jv jinja_call_global(rctx *c, const jnode *n, const char *name, const jargs *a) {
    const jglobal_def *g = find_entry(GLOBALS, N_OF(GLOBALS), sizeof GLOBALS[0], name);
    if (!g) jr_fail(c, n, "unknown function '%s'", name);
    return g->fn(c, n, g->name, a);
}

bool jinja_builtin_tables_sorted(void) {
    return names_sorted(TESTS, N_OF(TESTS), sizeof TESTS[0]) && names_sorted(FILTERS, N_OF(FILTERS), sizeof FILTERS[0]) &&
           names_sorted(STR_METHODS, N_OF(STR_METHODS), sizeof STR_METHODS[0]) &&
           names_sorted(DICT_METHODS, N_OF(DICT_METHODS), sizeof DICT_METHODS[0]) &&
           names_sorted(LIST_METHODS, N_OF(LIST_METHODS), sizeof LIST_METHODS[0]) &&
           names_sorted(GLOBALS, N_OF(GLOBALS), sizeof GLOBALS[0]);
}
