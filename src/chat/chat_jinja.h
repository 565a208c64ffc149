/* chat_jinja.h — the private pieces of the chat layer's Jinja engine, shared
 * by its files: the arena every template and every render allocates from, the
 * value model (none, bool, int, float, string, list, dict, namespace,
 * callable, undefined), the syntax tree, and the entry points between the
 * lexer/parser, the value helpers and the renderer.
 *
 * Why an arena and longjmp: a parse or a render allocates many small things
 * whose lifetimes all end together, and errors can surface deep inside an
 * expression. Everything lives in one arena that is dropped whole, so an
 * error can unwind straight to the API entry point (setjmp there) without
 * leaking. Nothing of this escapes the chat layer. */
#ifndef OKV_CHAT_JINJA_H
#define OKV_CHAT_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"

/* ---- arena ------------------------------------------------------------ */

typedef struct jarena_block jarena_block;
typedef struct jarena {
    jarena_block *head;
    size_t used_total; /* bytes handed out, checked against limit */
    size_t limit;
} jarena;

/* The failure sink the arena and everything else reports to. */
typedef struct jfail {
    jmp_buf jb;
    okv_error *err;
} jfail;

void ja_init(jarena *a, size_t limit);
void ja_free(jarena *a);
/* Zeroed memory; on exhaustion fails through f. */
void *ja_alloc(jarena *a, jfail *f, size_t n);
char *ja_strndup(jarena *a, jfail *f, const char *s, size_t n);
/* okv_grow for arena arrays: v holds n of *cap elements; returns an array of
 * at least need elements (v itself if it has room, else a doubled copy; the
 * old one stays in the arena until the arena is dropped). */
void *ja_grow(jarena *a, jfail *f, void *v, size_t n, size_t *cap, size_t need, size_t elem);

/* Fills f->err and longjmps to f->jb. */
_Noreturn void jfail_at(jfail *f, okv_status st, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- values ----------------------------------------------------------- */

typedef enum jv_type {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC
} jv_type;

struct jlist;
struct jdict;
struct jfunc;

typedef struct jv {
    jv_type t;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s;
        struct jlist *l;   /* JV_LIST */
        struct jdict *d;   /* JV_DICT and JV_NS */
        struct jfunc *fn;  /* JV_FUNC */
        const char *undef; /* JV_UNDEF: a description for error messages, or NULL */
    } u;
} jv;

typedef struct jlist {
    size_t n, cap;
    jv *v;
    bool tuple; /* only changes how it prints */
} jlist;

typedef struct jdict { /* insertion-ordered; keys compared with jv_eq */
    size_t n, cap;
    jv *k, *v;
} jdict;

typedef enum jfunc_kind { JF_GLOBAL, JF_METHOD, JF_MACRO } jfunc_kind;

struct jnode;
struct jscope;
typedef struct jfunc {
    jfunc_kind kind;
    const char *name;           /* global or method name, or macro name */
    jv self;                    /* JF_METHOD: the object */
    const struct jnode *macro;  /* JF_MACRO */
    struct jscope *closure;     /* JF_MACRO: scope the macro was defined in */
} jfunc;

typedef struct jbuf { /* growable byte string in an arena */
    char *p;
    size_t n, cap;
} jbuf;

void jb_put(jarena *a, jfail *f, jbuf *b, const char *s, size_t n);
void jb_puts(jarena *a, jfail *f, jbuf *b, const char *s);
void jb_putc(jarena *a, jfail *f, jbuf *b, char c);

static inline jv jv_undef(const char *why) { jv v; v.t = JV_UNDEF; v.u.undef = why; return v; }
static inline jv jv_none(void) { jv v; v.t = JV_NONE; v.u.i = 0; return v; }
static inline jv jv_bool(bool b) { jv v; v.t = JV_BOOL; v.u.i = 0; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v; v.t = JV_INT; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v; v.t = JV_FLOAT; v.u.f = f; return v; }
static inline jv jv_str(const char *p, size_t n) { jv v; v.t = JV_STR; v.u.s.p = p; v.u.s.n = n; return v; }

jlist *jlist_new(jarena *a, jfail *f);
void jlist_push(jarena *a, jfail *f, jlist *l, jv x);
jdict *jdict_new(jarena *a, jfail *f);
/* Sets (replacing an equal key in place, else appending). */
void jdict_set(jarena *a, jfail *f, jdict *d, jv key, jv val);
/* Returns true and *out if present. */
bool jdict_get(const jdict *d, jv key, jv *out);
bool jdict_get_str(const jdict *d, const char *key, jv *out);
jv jv_list(jlist *l);
jv jv_dict(jdict *d);
jv jv_cstr(jarena *a, jfail *f, const char *s); /* copies s */

const char *jv_type_name(jv x);
bool jv_truthy(jv x);
bool jv_eq(jv a, jv b);
bool jv_is_number(jv x); /* bool, int, float (Python's numbers.Number) */
double jv_as_double(jv x);
/* Python str(x) (undefined -> "") appended to b. */
void jv_str_into(jarena *a, jfail *f, jbuf *b, jv x);
/* Python repr(x) appended to b. */
void jv_repr_into(jarena *a, jfail *f, jbuf *b, jv x);
/* Python float repr (shortest round-trip): "1.0", "1e-05", "inf". */
void py_float_repr(double d, char *out, size_t cap);
/* json.dumps options, as HF's tojson passes them. */
typedef struct jjson_opts {
    int indent;           /* < 0: single line */
    bool sort_keys;
    bool ensure_ascii;    /* escape non-ASCII as \uXXXX */
    const char *item_sep; /* Python default: ", " (",") with indent */
    const char *key_sep;  /* ": " */
} jjson_opts;
/* json.dumps(x, ...) appended to b. Returns false (with *bad set to the
 * offending value's type name) for values JSON cannot hold. */
bool jv_tojson_into(jarena *a, jfail *f, jbuf *b, jv x, const jjson_opts *o, const char **bad);
/* Parses JSON text into a value. Integral numbers become ints. */
bool jv_from_json_text(jarena *a, jfail *f, const char *text, jv *out, const char **why);

/* Python's str.isspace for one code point. */
bool py_isspace(int32_t cp);
/* Decodes the code point at s[i]; returns its byte length (an invalid byte
 * counts as one byte of U+FFFD). */
size_t utf8_decode(const char *s, size_t n, size_t i, int32_t *cp);

/* UTF-8 helpers used by string indexing/slicing/iteration. */
size_t utf8_count(const char *s, size_t n);
/* Byte offset of code point index ci (ci <= count). */
size_t utf8_offset(const char *s, size_t n, size_t ci);

/* ---- syntax tree ------------------------------------------------------ */

typedef enum jnode_kind {
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_BREAK, JN_CONTINUE,
    JN_GENERATION, /* HF's {% generation %}: marks assistant text, renders its body */
    /* expressions */
    JN_CONST, JN_NAME, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_BINOP, JN_COMPARE, JN_COND, JN_LIST_LIT,
    JN_TUPLE_LIT, JN_DICT_LIT
} jnode_kind;

typedef struct jnodes {
    struct jnode **v;
    int n;
    size_t cap;
} jnodes;

typedef struct jnode {
    jnode_kind kind;
    int line, col;
    int op;            /* operator (JN_BINOP; JN_COMPARE per operand in ops) */
    bool negated;      /* JN_TEST: `is not` */
    const char *name;  /* JN_NAME, attribute, filter/test/macro name, JN_SET target */
    jv value;          /* JN_CONST */
    struct jnode *a, *b, *c; /* children: operand(s), condition, slice parts */
    jnodes args;       /* call/filter/test args, list/tuple items, dict keys, compare operands */
    jnodes kvals;      /* keyword-arg values, dict values, macro defaults */
    const char **knames; /* keyword-arg names, macro params */
    int *ops;          /* JN_COMPARE operators */
    jnodes body, else_body;
    const char **targets; /* JN_FOR/JN_SET: names to bind */
    int ntargets;
    const char *attr;  /* JN_SET: `set ns.attr = ...` */
} jnode;

/* Compare/binary operator codes. */
enum {
    JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN
};

/* Recursion bounds (templates are untrusted). A parsed tree is at most
 * JINJA_MAX_TREE_DEPTH deep; a render's nesting of expression evaluation,
 * blocks, filters and macro calls together is at most JINJA_MAX_RENDER_DEPTH
 * (macros add their bodies, so a render can nest deeper than one tree).
 * Values printed, compared or serialised are followed at most
 * JINJA_MAX_VALUE_DEPTH deep (a list can even contain itself).
 * Stack per render level is ~5.4 KiB under ASan (eval's frame), ~0.5 KiB
 * otherwise, so the render bound keeps a render under ~3.5 MiB of stack. */
enum { JINJA_MAX_TREE_DEPTH = 200, JINJA_MAX_RENDER_DEPTH = 600, JINJA_MAX_VALUE_DEPTH = 200 };

/* Parses src into a statement list allocated in a. Fails through f. */
jnodes jinja_parse(jarena *a, jfail *f, const char *src);

/* ---- rendering -------------------------------------------------------- */

/* Renders body with the given context dict (variables) into a NUL-terminated
 * arena string. `now` is strftime_now's clock (0: local time now; else UTC
 * seconds since the epoch, for reproducible renders); max_steps caps loop
 * iterations plus macro calls. Fails through f. */
const char *jinja_render(jarena *a, jfail *f, const jnodes *body, jdict *context, int64_t now,
                         int64_t max_steps, size_t *len);

/* Whether the renderer implements a filter / test (the parser rejects others). */
bool jinja_filter_known(const char *name);
bool jinja_test_known(const char *name);
/* The builtin tables are sorted by name, as their binary search needs. */
bool jinja_builtin_tables_sorted(void);

#endif
