/* chat_value.c — the Jinja engine's memory and values: the arena, growable
 * strings, lists and insertion-ordered dicts, and the Python semantics the
 * templates observe through them (truthiness, ==, str(), repr(), json.dumps
 * as HF's `tojson` calls it, float repr). Inputs arrive as JSON text and are
 * converted here through cJSON. */
#include "chat_jinja.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <utf8proc.h>

/* ---- arena ------------------------------------------------------------ */

struct jarena_block {
    jarena_block *next;
    size_t cap, used;
    max_align_t data[];
};

enum { JA_BLOCK = 64 * 1024 };

void ja_init(jarena *a, size_t limit) {
    a->head = NULL;
    a->used_total = 0;
    a->limit = limit;
}

void ja_free(jarena *a) {
    jarena_block *b = a->head;
    while (b) {
        jarena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used_total = 0;
}

void *ja_alloc(jarena *a, jfail *f, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (n > a->limit || a->used_total > a->limit - n)
        jfail_at(f, OKV_ERR_NOMEM, 0, 0, "template memory limit (%zu bytes) exceeded", a->limit);
    jarena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > JA_BLOCK ? n : JA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b) jfail_at(f, OKV_ERR_NOMEM, 0, 0, "out of memory");
        b->cap = cap;
        b->used = 0;
        if (n > JA_BLOCK && a->head) { /* keep the current small block in front */
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    a->used_total += n;
    memset(p, 0, n);
    return p;
}

char *ja_strndup(jarena *a, jfail *f, const char *s, size_t n) {
    char *p = ja_alloc(a, f, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jfail_at(jfail *f, okv_status st, int line, int col, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (f->err) {
        if (line > 0)
            snprintf(f->err->message, sizeof f->err->message, "chat template %d:%d: %s", line, col, msg);
        else
            snprintf(f->err->message, sizeof f->err->message, "chat template: %s", msg);
        f->err->status = st;
    }
    longjmp(f->jb, 1);
}

void *ja_grow(jarena *a, jfail *f, void *v, size_t n, size_t *cap, size_t need, size_t elem) {
    if (v && need <= *cap) return v;
    size_t c = *cap ? *cap : (elem < 16 ? 64 / elem : 4), bytes; /* first: about 64 bytes */
    while (c < need) {
        if (c > SIZE_MAX / 2) jfail_at(f, OKV_ERR_NOMEM, 0, 0, "template memory limit (%zu bytes) exceeded", a->limit);
        c *= 2;
    }
    if (__builtin_mul_overflow(c, elem, &bytes))
        jfail_at(f, OKV_ERR_NOMEM, 0, 0, "template memory limit (%zu bytes) exceeded", a->limit);
    void *p = ja_alloc(a, f, bytes);
    if (n) memcpy(p, v, n * elem);
    *cap = c;
    return p;
}

/* ---- byte strings ----------------------------------------------------- */

void jb_put(jarena *a, jfail *f, jbuf *b, const char *s, size_t n) {
    if (n > SIZE_MAX - b->n - 1) jfail_at(f, OKV_ERR_NOMEM, 0, 0, "template memory limit (%zu bytes) exceeded", a->limit);
    b->p = ja_grow(a, f, b->p, b->n, &b->cap, b->n + n + 1, 1);
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_puts(jarena *a, jfail *f, jbuf *b, const char *s) { jb_put(a, f, b, s, strlen(s)); }
void jb_putc(jarena *a, jfail *f, jbuf *b, char c) { jb_put(a, f, b, &c, 1); }

/* ---- containers ------------------------------------------------------- */

jlist *jlist_new(jarena *a, jfail *f) { return ja_alloc(a, f, sizeof(jlist)); }

void jlist_push(jarena *a, jfail *f, jlist *l, jv x) {
    l->v = ja_grow(a, f, l->v, l->n, &l->cap, l->n + 1, sizeof *l->v);
    l->v[l->n++] = x;
}

jdict *jdict_new(jarena *a, jfail *f) { return ja_alloc(a, f, sizeof(jdict)); }

static long jdict_find(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key)) return (long)i;
    return -1;
}

void jdict_set(jarena *a, jfail *f, jdict *d, jv key, jv val) {
    long i = jdict_find(d, key);
    if (i >= 0) { d->v[i] = val; return; }
    if (d->n == d->cap) { /* keys and values grow together */
        size_t cap_v = d->cap;
        d->k = ja_grow(a, f, d->k, d->n, &d->cap, d->n + 1, sizeof *d->k);
        d->v = ja_grow(a, f, d->v, d->n, &cap_v, d->n + 1, sizeof *d->v);
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
}

bool jdict_get(const jdict *d, jv key, jv *out) {
    long i = jdict_find(d, key);
    if (i < 0) return false;
    *out = d->v[i];
    return true;
}

bool jdict_get_str(const jdict *d, const char *key, jv *out) {
    return jdict_get(d, jv_str(key, strlen(key)), out);
}

jv jv_list(jlist *l) { jv v; v.t = JV_LIST; v.u.l = l; return v; }
jv jv_dict(jdict *d) { jv v; v.t = JV_DICT; v.u.d = d; return v; }

jv jv_cstr(jarena *a, jfail *f, const char *s) {
    size_t n = strlen(s);
    return jv_str(ja_strndup(a, f, s, n), n);
}

/* ---- Python semantics -------------------------------------------------- */

const char *jv_type_name(jv x) {
    switch (x.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return x.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    }
    return "?";
}

bool jv_truthy(jv x) {
    switch (x.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return x.u.b;
    case JV_INT: return x.u.i != 0;
    case JV_FLOAT: return x.u.f != 0.0;
    case JV_STR: return x.u.s.n != 0;
    case JV_LIST: return x.u.l->n != 0;
    case JV_DICT: return x.u.d->n != 0;
    case JV_NS: case JV_FUNC: return true;
    }
    return false;
}

bool jv_is_number(jv x) { return x.t == JV_BOOL || x.t == JV_INT || x.t == JV_FLOAT; }

double jv_as_double(jv x) {
    if (x.t == JV_BOOL) return x.u.b;
    if (x.t == JV_INT) return (double)x.u.i;
    return x.u.f;
}

/* Beyond JINJA_MAX_VALUE_DEPTH (deep or self-containing values) two values
 * count as different: jv_eq has no failure path, and Python would raise. */
static bool jv_eq_at(jv a, jv b, int depth);

bool jv_eq(jv a, jv b) { return jv_eq_at(a, b, 0); }

static bool jv_eq_at(jv a, jv b, int depth) {
    if (depth > JINJA_MAX_VALUE_DEPTH) return false;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_BOOL ? a.u.b : a.u.i, y = b.t == JV_BOOL ? b.u.b : b.u.i;
            return x == y;
        }
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_eq_at(a.u.l->v[i], b.u.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv other;
            if (!jdict_get(b.u.d, a.u.d->k[i], &other) || !jv_eq_at(a.u.d->v[i], other, depth + 1)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

void py_float_repr(double d, char *out, size_t cap) {
    if (isnan(d)) { snprintf(out, cap, "nan"); return; }
    if (isinf(d)) { snprintf(out, cap, d < 0 ? "-inf" : "inf"); return; }
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* buf is [-]D[.DDD]e[+-]XX: pull out the digits and the exponent. */
    char digits[24];
    int nd = 0, neg = buf[0] == '-';
    const char *p = buf + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char res[64];
    size_t r = 0;
    if (neg) res[r++] = '-';
    if (exp >= -5 + 1 && exp < 16) { /* fixed notation, like Python's repr */
        if (exp < 0) {
            res[r++] = '0';
            res[r++] = '.';
            for (int i = 0; i < -exp - 1; i++) res[r++] = '0';
            for (int i = 0; i < nd; i++) res[r++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) res[r++] = i < nd ? digits[i] : '0';
            res[r++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) res[r++] = digits[i];
            else
                res[r++] = '0';
        }
        res[r] = 0;
    } else {
        res[r++] = digits[0];
        if (nd > 1) {
            res[r++] = '.';
            for (int i = 1; i < nd; i++) res[r++] = digits[i];
        }
        snprintf(res + r, sizeof res - r, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(out, cap, "%s", res);
}

/* Python's str.isprintable for one code point (space is printable). */
static bool py_printable(int32_t cp) {
    if (cp == ' ') return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

/* Python repr(str): quotes chosen like CPython, \n \r \t \\ and the quote
 * escaped, other non-printable code points as \xhh, \uhhhh or \Uhhhhhhhh. */
static void repr_string(jarena *a, jfail *f, jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_putc(a, f, b, q);
    for (size_t i = 0; i < n;) {
        int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) { cp = 0xFFFD; k = 1; }
        char esc[16];
        if (cp == '\\' || cp == q) { esc[0] = '\\'; esc[1] = (char)cp; jb_put(a, f, b, esc, 2); }
        else if (cp == '\n') jb_puts(a, f, b, "\\n");
        else if (cp == '\r') jb_puts(a, f, b, "\\r");
        else if (cp == '\t') jb_puts(a, f, b, "\\t");
        else if (!py_printable(cp)) {
            if (cp < 0x100) snprintf(esc, sizeof esc, "\\x%02x", (unsigned)cp);
            else if (cp < 0x10000) snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            else snprintf(esc, sizeof esc, "\\U%08x", (unsigned)cp);
            jb_puts(a, f, b, esc);
        } else jb_put(a, f, b, s + i, (size_t)k);
        i += (size_t)k;
    }
    jb_putc(a, f, b, q);
}

static void str_into_at(jarena *a, jfail *f, jbuf *b, jv x, int depth);

static void repr_into_at(jarena *a, jfail *f, jbuf *b, jv x, int depth) {
    if (x.t == JV_STR) { repr_string(a, f, b, x.u.s.p, x.u.s.n); return; }
    if (x.t == JV_UNDEF) { jb_puts(a, f, b, "Undefined"); return; }
    str_into_at(a, f, b, x, depth);
}

void jv_repr_into(jarena *a, jfail *f, jbuf *b, jv x) { repr_into_at(a, f, b, x, 0); }
void jv_str_into(jarena *a, jfail *f, jbuf *b, jv x) { str_into_at(a, f, b, x, 0); }

static void str_into_at(jarena *a, jfail *f, jbuf *b, jv x, int depth) {
    char num[48];
    if (depth > JINJA_MAX_VALUE_DEPTH)
        jfail_at(f, OKV_ERR_INVALID, 0, 0, "cannot print a value nested deeper than %d (or containing itself)",
                 JINJA_MAX_VALUE_DEPTH);
    switch (x.t) {
    case JV_UNDEF: return;
    case JV_NONE: jb_puts(a, f, b, "None"); return;
    case JV_BOOL: jb_puts(a, f, b, x.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)x.u.i); jb_puts(a, f, b, num); return;
    case JV_FLOAT: py_float_repr(x.u.f, num, sizeof num); jb_puts(a, f, b, num); return;
    case JV_STR: jb_put(a, f, b, x.u.s.p, x.u.s.n); return;
    case JV_LIST: {
        jlist *l = x.u.l;
        jb_putc(a, f, b, l->tuple ? '(' : '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jb_puts(a, f, b, ", ");
            repr_into_at(a, f, b, l->v[i], depth + 1);
        }
        if (l->tuple && l->n == 1) jb_putc(a, f, b, ',');
        jb_putc(a, f, b, l->tuple ? ')' : ']');
        return;
    }
    case JV_DICT: case JV_NS: {
        jdict *d = x.u.d;
        if (x.t == JV_NS) jb_puts(a, f, b, "<Namespace ");
        jb_putc(a, f, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) jb_puts(a, f, b, ", ");
            repr_into_at(a, f, b, d->k[i], depth + 1);
            jb_puts(a, f, b, ": ");
            repr_into_at(a, f, b, d->v[i], depth + 1);
        }
        jb_putc(a, f, b, '}');
        if (x.t == JV_NS) jb_putc(a, f, b, '>');
        return;
    }
    case JV_FUNC:
        jb_puts(a, f, b, "<function ");
        jb_puts(a, f, b, x.u.fn->name ? x.u.fn->name : "?");
        jb_putc(a, f, b, '>');
        return;
    }
}

/* ---- JSON out (Python json.dumps) ----------------------------------------- */

static void json_string(jarena *a, jfail *f, jbuf *b, const char *s, size_t n, bool ensure_ascii) {
    jb_putc(a, f, b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        if (c >= 0x80 && ensure_ascii) { /* \uXXXX, astral code points as surrogate pairs */
            int32_t cp;
            i += utf8_decode(s, n, i, &cp);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            }
            jb_puts(a, f, b, esc);
            continue;
        }
        i++;
        switch (c) {
        case '"': jb_puts(a, f, b, "\\\""); break;
        case '\\': jb_puts(a, f, b, "\\\\"); break;
        case '\n': jb_puts(a, f, b, "\\n"); break;
        case '\r': jb_puts(a, f, b, "\\r"); break;
        case '\t': jb_puts(a, f, b, "\\t"); break;
        case '\b': jb_puts(a, f, b, "\\b"); break;
        case '\f': jb_puts(a, f, b, "\\f"); break;
        default:
            if (c < 0x20 || (c == 0x7f && ensure_ascii)) { snprintf(esc, sizeof esc, "\\u%04x", c); jb_puts(a, f, b, esc); }
            else jb_putc(a, f, b, (char)c);
        }
    }
    jb_putc(a, f, b, '"');
}

static void json_newline(jarena *a, jfail *f, jbuf *b, int indent, int level) {
    jb_putc(a, f, b, '\n');
    for (int i = 0; i < indent * level; i++) jb_putc(a, f, b, ' ');
}

static int cmp_str_keys(const void *x, const void *y) {
    const jv *a = *(const jv *const *)x, *b = *(const jv *const *)y;
    size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    int c = memcmp(a->u.s.p, b->u.s.p, n);
    if (c) return c;
    return a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
}

static bool tojson_rec(jarena *a, jfail *f, jbuf *b, jv x, const jjson_opts *o, int level, const char **bad) {
    char num[48];
    if (level > 200) { *bad = "nesting deeper than 200"; return false; }
    switch (x.t) {
    case JV_NONE: jb_puts(a, f, b, "null"); return true;
    case JV_BOOL: jb_puts(a, f, b, x.u.b ? "true" : "false"); return true;
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)x.u.i); jb_puts(a, f, b, num); return true;
    case JV_FLOAT:
        if (isnan(x.u.f)) jb_puts(a, f, b, "NaN");
        else if (isinf(x.u.f)) jb_puts(a, f, b, x.u.f < 0 ? "-Infinity" : "Infinity");
        else { py_float_repr(x.u.f, num, sizeof num); jb_puts(a, f, b, num); }
        return true;
    case JV_STR: json_string(a, f, b, x.u.s.p, x.u.s.n, o->ensure_ascii); return true;
    case JV_LIST: {
        jlist *l = x.u.l;
        if (l->n == 0) { jb_puts(a, f, b, "[]"); return true; }
        jb_putc(a, f, b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) jb_puts(a, f, b, o->item_sep);
            if (o->indent >= 0) json_newline(a, f, b, o->indent, level + 1);
            if (!tojson_rec(a, f, b, l->v[i], o, level + 1, bad)) return false;
        }
        if (o->indent >= 0) json_newline(a, f, b, o->indent, level);
        jb_putc(a, f, b, ']');
        return true;
    }
    case JV_DICT: {
        jdict *d = x.u.d;
        if (d->n == 0) { jb_puts(a, f, b, "{}"); return true; }
        /* order: insertion, or sorted (string keys only) */
        const jv **keys = ja_alloc(a, f, d->n * sizeof *keys);
        for (size_t i = 0; i < d->n; i++) {
            if (d->k[i].t != JV_STR) { *bad = "dict with non-string key"; return false; }
            keys[i] = &d->k[i];
        }
        if (o->sort_keys) qsort(keys, d->n, sizeof *keys, cmp_str_keys);
        jb_putc(a, f, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            size_t k = (size_t)(keys[i] - d->k);
            if (i) jb_puts(a, f, b, o->item_sep);
            if (o->indent >= 0) json_newline(a, f, b, o->indent, level + 1);
            json_string(a, f, b, d->k[k].u.s.p, d->k[k].u.s.n, o->ensure_ascii);
            jb_puts(a, f, b, o->key_sep);
            if (!tojson_rec(a, f, b, d->v[k], o, level + 1, bad)) return false;
        }
        if (o->indent >= 0) json_newline(a, f, b, o->indent, level);
        jb_putc(a, f, b, '}');
        return true;
    }
    default:
        *bad = jv_type_name(x);
        return false;
    }
}

bool jv_tojson_into(jarena *a, jfail *f, jbuf *b, jv x, const jjson_opts *o, const char **bad) {
    return tojson_rec(a, f, b, x, o, 0, bad);
}

/* ---- JSON in (through cJSON) ------------------------------------------ */

/* cJSON keeps every number as a double, which loses what Python's json.loads
 * keeps: whether it was written as an int ("1") or a float ("1.0", "1e3"),
 * and ints beyond 2^53. So a pre-pass over the text records each number
 * token, in document order, which is also the order a pre-order walk of the
 * cJSON tree meets the number nodes. */
typedef struct json_num { bool is_float; bool fits; int64_t i; } json_num;
typedef struct json_nums { json_num *v; size_t n, next; } json_nums;

static json_nums scan_numbers(jarena *a, jfail *f, const char *t) {
    json_nums r = {NULL, 0, 0};
    size_t cap = 0;
    for (const char *p = t; *p;) {
        if (*p == '"') { /* skip a string */
            for (p++; *p && *p != '"'; p++)
                if (*p == '\\' && p[1]) p++;
            if (*p) p++;
            continue;
        }
        if (*p != '-' && !(*p >= '0' && *p <= '9')) { p++; continue; }
        const char *start = p;
        bool is_float = false;
        if (*p == '-') p++;
        while ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-') {
            if (*p == '.' || *p == 'e' || *p == 'E') is_float = true;
            p++;
        }
        r.v = ja_grow(a, f, r.v, r.n, &cap, r.n + 1, sizeof *r.v);
        json_num *num = &r.v[r.n++];
        num->is_float = is_float;
        num->fits = false;
        if (!is_float) {
            char *end;
            errno = 0;
            long long v = strtoll(start, &end, 10);
            num->fits = errno == 0 && end == p;
            num->i = v;
        }
    }
    return r;
}

static jv from_cjson(jarena *a, jfail *f, const cJSON *j, json_nums *nums, int depth) {
    if (depth > 200) jfail_at(f, OKV_ERR_INVALID, 0, 0, "input JSON nested deeper than 200");
    if (cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        const json_num *num = nums->next < nums->n ? &nums->v[nums->next++] : NULL;
        if (num && !num->is_float && num->fits) return jv_int(num->i);
        return jv_float(j->valuedouble); /* a float, or an int too big for int64 */
    }
    if (cJSON_IsString(j)) return jv_cstr(a, f, j->valuestring);
    if (cJSON_IsArray(j)) {
        jlist *l = jlist_new(a, f);
        for (const cJSON *c = j->child; c; c = c->next) jlist_push(a, f, l, from_cjson(a, f, c, nums, depth + 1));
        return jv_list(l);
    }
    if (cJSON_IsObject(j)) {
        jdict *d = jdict_new(a, f);
        for (const cJSON *c = j->child; c; c = c->next) {
            jv key = jv_cstr(a, f, c->string ? c->string : "");
            jdict_set(a, f, d, key, from_cjson(a, f, c, nums, depth + 1));
        }
        return jv_dict(d);
    }
    return jv_none();
}

bool jv_from_json_text(jarena *a, jfail *f, const char *text, jv *out, const char **why) {
    cJSON *j = cJSON_ParseWithOpts(text, NULL, true); /* no trailing garbage */
    if (!j) { *why = "malformed JSON"; return false; }
    /* Convert inside a nested failure frame so the cJSON tree is always freed. */
    jfail inner;
    inner.err = f->err;
    if (setjmp(inner.jb)) {
        cJSON_Delete(j);
        longjmp(f->jb, 1);
    }
    json_nums nums = scan_numbers(a, &inner, text);
    *out = from_cjson(a, &inner, j, &nums, 0);
    cJSON_Delete(j);
    return true;
}

/* ---- UTF-8 ------------------------------------------------------------ */

bool py_isspace(int32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

size_t utf8_decode(const char *s, size_t n, size_t i, int32_t *cp) {
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), cp);
    if (k <= 0) { *cp = 0xFFFD; return 1; }
    return (size_t)k;
}

static bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

size_t utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_cont((unsigned char)s[i])) c++;
    return c;
}

size_t utf8_offset(const char *s, size_t n, size_t ci) {
    size_t c = 0, i = 0;
    for (; i < n; i++) {
        if (!is_cont((unsigned char)s[i])) {
            if (c == ci) return i;
            c++;
        }
    }
    return n;
}
