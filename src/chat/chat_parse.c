/* chat_parse.c — Jinja template source to syntax tree.
 *
 * The lexer reproduces Jinja2's tokenizer with HF's settings: trim_blocks
 * (drop the first newline after a block or comment tag), lstrip_blocks (drop
 * spaces/tabs before a block or comment tag when only whitespace precedes it
 * on its line), `-`/`+` whitespace control on every tag, newlines normalised
 * to "\n" and one trailing newline dropped (keep_trailing_newline=False).
 * The parser is a recursive-descent copy of Jinja2's grammar and precedence
 * (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary <
 * postfix/filter/test). Constructs outside the supported subset fail here
 * with their line:column.
 *
 * Templates ship inside checkpoints and are untrusted, so every recursion is
 * bounded: the descent itself counts its nesting (enter(), also for elif
 * chains), and since left-associative chains (`a+b+c`, `x|f|g`, `x[0][0]`,
 * `x.a.b`, `a or b or c`) are built by loops but give a tree as deep as the
 * chain is long, a final walk refuses any tree deeper than
 * JINJA_MAX_TREE_DEPTH before the renderer (which recurses over it) sees it.
 * The walk stops at the limit, so it is bounded too. */
#include "chat_jinja.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF
} tok_type;

typedef struct tok {
    tok_type t;
    const char *s; /* text (data, name, op, decoded string) */
    size_t n;
    int64_t i;
    double f;
    int line, col;
} tok;

typedef struct parser {
    jarena *a;
    jfail *f;
    const char *src;
    size_t n;
    size_t *line_starts;
    int nlines;
    tok *toks;
    size_t ntok, cap, pos;
    int loop_depth, depth;
} parser;

/* ---- positions -------------------------------------------------------- */

static void pos_to_linecol(const parser *p, size_t off, int *line, int *col) {
    int lo = 0, hi = p->nlines - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (p->line_starts[mid] <= off) lo = mid; else hi = mid - 1;
    }
    *line = lo + 1;
    *col = (int)(off - p->line_starts[lo]) + 1;
}

static _Noreturn void fail_off(parser *p, size_t off, const char *fmt, const char *arg) {
    int line, col;
    pos_to_linecol(p, off, &line, &col);
    jfail_at(p->f, OKV_ERR_FORMAT, line, col, fmt, arg);
}

static void push_tok(parser *p, tok_type t, size_t off, const char *s, size_t n) {
    p->toks = ja_grow(p->a, p->f, p->toks, p->ntok, &p->cap, p->ntok + 1, sizeof *p->toks);
    tok *k = &p->toks[p->ntok++];
    k->t = t;
    k->s = s;
    k->n = n;
    pos_to_linecol(p, off, &k->line, &k->col);
}

/* ---- lexer ------------------------------------------------------------ */

/* Whitespace as Python's re \s and str.strip see it (Unicode: NBSP, U+2003,
 * U+3000, ... count), which is what Jinja's `-` markers, lstrip_blocks and
 * the tag tokenizer use. Returns the byte length of the whitespace code
 * point starting at s[i] (ws_at) or ending at s[i-1] (ws_before), else 0. */
static size_t ws_at(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) return py_isspace(c) ? 1 : 0;
    int32_t cp;
    size_t k = utf8_decode(s, n, i, &cp);
    return py_isspace(cp) ? k : 0;
}

static size_t ws_before(const char *s, size_t lo, size_t i) {
    if (i <= lo) return 0;
    size_t b = i - 1;
    while (b > lo && ((unsigned char)s[b] & 0xC0) == 0x80 && i - b < 4) b--;
    size_t k = ws_at(s, i, b);
    return k == i - b ? k : 0;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    size_t k;
    while ((k = ws_at(s, n, i))) i += k;
    return i;
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

static void put_utf8(jarena *a, jfail *f, jbuf *b, uint32_t cp) {
    char o[4];
    if (cp < 0x80) { o[0] = (char)cp; jb_put(a, f, b, o, 1); }
    else if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); jb_put(a, f, b, o, 2); }
    else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        jb_put(a, f, b, o, 3);
    } else {
        o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
        o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
        jb_put(a, f, b, o, 4);
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Lexes a quoted string at p->src[*i] (the quote), decoding Python escapes
 * the way Jinja2 does (unicode-escape over the raw text). */
static void lex_string(parser *p, size_t *i) {
    size_t start = *i;
    char q = p->src[*i];
    size_t j = *i + 1;
    jbuf b = {0};
    jb_put(p->a, p->f, &b, "", 0);
    while (j < p->n && p->src[j] != q) {
        char c = p->src[j];
        if (c != '\\') { jb_putc(p->a, p->f, &b, c); j++; continue; }
        if (j + 1 >= p->n) break;
        char e = p->src[j + 1];
        j += 2;
        switch (e) {
        case '\n': break;
        case '\\': jb_putc(p->a, p->f, &b, '\\'); break;
        case '\'': jb_putc(p->a, p->f, &b, '\''); break;
        case '"': jb_putc(p->a, p->f, &b, '"'); break;
        case 'a': jb_putc(p->a, p->f, &b, '\a'); break;
        case 'b': jb_putc(p->a, p->f, &b, '\b'); break;
        case 'f': jb_putc(p->a, p->f, &b, '\f'); break;
        case 'n': jb_putc(p->a, p->f, &b, '\n'); break;
        case 'r': jb_putc(p->a, p->f, &b, '\r'); break;
        case 't': jb_putc(p->a, p->f, &b, '\t'); break;
        case 'v': jb_putc(p->a, p->f, &b, '\v'); break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++) {
                int h = j + k < p->n ? hexval(p->src[j + k]) : -1;
                if (h < 0) fail_off(p, j - 2, "truncated \\%s escape in string literal", e == 'x' ? "x" : e == 'u' ? "u" : "U");
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF) fail_off(p, j - 2, "%s", "escape beyond U+10FFFF in string literal");
            j += (size_t)nd;
            put_utf8(p->a, p->f, &b, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && j < p->n && p->src[j] >= '0' && p->src[j] <= '7'; k++, j++)
                    cp = cp * 8 + (uint32_t)(p->src[j] - '0');
                put_utf8(p->a, p->f, &b, cp);
            } else if (e == 'N') {
                fail_off(p, j - 2, "%s", "\\N{...} escapes are not supported");
            } else { /* unknown escape: kept verbatim, like Python */
                jb_putc(p->a, p->f, &b, '\\');
                jb_putc(p->a, p->f, &b, e);
            }
        }
    }
    if (j >= p->n) fail_off(p, start, "%s", "unterminated string literal");
    push_tok(p, T_STRING, start, b.p, b.n);
    *i = j + 1;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char OPS1[] = "+-/*%~[](){}<>=.:|,;";

/* Lexes the inside of a {{ }} or {% %} tag starting at i (just after the
 * opener) into tokens, and returns the offset after the closing tag plus the
 * whitespace that closing tag consumes ("-" all, plain block end one "\n"). */
static size_t lex_tag_body(parser *p, size_t i, bool block, size_t tag_off) {
    char stack[256];
    int depth = 0;
    for (;;) {
        i = skip_ws(p->src, p->n, i);
        if (i >= p->n)
            fail_off(p, tag_off, block ? "unclosed '{%%' tag (missing '%%}')%s" : "unclosed '{{' (missing '}}')%s", "");
        const char *s = p->src + i;
        size_t left = p->n - i;
        char close = block ? '%' : '}';
        if (depth == 0) {
            /* end tag: "-X}" strips following whitespace; "+%}" keeps the
             * newline; plain "%}" drops one newline (trim_blocks) */
            if (left >= 3 && (s[0] == '-' || s[0] == '+') && s[1] == close && s[2] == '}') {
                push_tok(p, block ? T_BLOCK_END : T_VAR_END, i, s, 3);
                i += 3;
                if (s[0] == '-') i = skip_ws(p->src, p->n, i);
                return i;
            }
            if (left >= 2 && s[0] == close && s[1] == '}') {
                push_tok(p, block ? T_BLOCK_END : T_VAR_END, i, s, 2);
                i += 2;
                if (block && i < p->n && p->src[i] == '\n') i++;
                return i;
            }
        }
        char c = s[0];
        if (c == '\'' || c == '"') { lex_string(p, &i); continue; }
        if (is_digit(c)) {
            size_t j = i;
            while (j < p->n && is_digit(p->src[j])) j++;
            bool is_float = false;
            bool after_dot = i > 0 && p->src[i - 1] == '.';
            if (!after_dot && j + 1 < p->n && p->src[j] == '.' && is_digit(p->src[j + 1])) {
                is_float = true;
                j++;
                while (j < p->n && is_digit(p->src[j])) j++;
            }
            if (!after_dot && j < p->n && (p->src[j] == 'e' || p->src[j] == 'E')) {
                size_t k = j + 1;
                if (k < p->n && (p->src[k] == '+' || p->src[k] == '-')) k++;
                if (k < p->n && is_digit(p->src[k])) {
                    is_float = true;
                    while (k < p->n && is_digit(p->src[k])) k++;
                    j = k;
                }
            }
            char *txt = ja_strndup(p->a, p->f, s, j - i);
            push_tok(p, is_float ? T_FLOAT : T_INT, i, txt, j - i);
            if (is_float) p->toks[p->ntok - 1].f = strtod(txt, NULL);
            else {
                if (j - i > 18) fail_off(p, i, "%s", "integer literal too large");
                p->toks[p->ntok - 1].i = strtoll(txt, NULL, 10);
            }
            i = j;
            continue;
        }
        if (is_name_start(c)) {
            size_t j = i;
            while (j < p->n && is_name_char(p->src[j])) j++;
            push_tok(p, T_NAME, i, ja_strndup(p->a, p->f, s, j - i), j - i);
            i = j;
            continue;
        }
        size_t oplen = 0;
        for (size_t k = 0; k < sizeof OPS2 / sizeof *OPS2; k++)
            if (left >= 2 && s[0] == OPS2[k][0] && s[1] == OPS2[k][1]) oplen = 2;
        if (!oplen && strchr(OPS1, c) && c) oplen = 1;
        if (!oplen) {
            char ch[2] = {c, 0};
            fail_off(p, i, "unexpected character '%s' in tag", ch);
        }
        if (oplen == 1 && (c == '(' || c == '[' || c == '{')) {
            if (depth == (int)sizeof stack) fail_off(p, i, "%s", "brackets nested too deeply");
            stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (oplen == 1 && (c == ')' || c == ']' || c == '}')) {
            char ch[2] = {c, 0};
            if (depth == 0) fail_off(p, i, "unexpected '%s'", ch);
            if (stack[depth - 1] != c) fail_off(p, i, "unexpected '%s' (bracket mismatch)", ch);
            depth--;
        }
        push_tok(p, T_OP, i, s, oplen);
        i += oplen;
    }
}

static void lex(parser *p) {
    size_t i = 0;
    bool line_starting = true;
    while (i < p->n) {
        /* find the next tag opener */
        size_t k = i;
        while (k + 1 < p->n && !(p->src[k] == '{' && (p->src[k + 1] == '{' || p->src[k + 1] == '%' || p->src[k + 1] == '#'))) k++;
        if (k + 1 >= p->n) {
            push_tok(p, T_DATA, i, p->src + i, p->n - i);
            break;
        }
        char kind = p->src[k + 1];
        char mod = k + 2 < p->n && (p->src[k + 2] == '-' || p->src[k + 2] == '+') ? p->src[k + 2] : 0;
        size_t text_end = k;
        if (mod == '-') {
            size_t k;
            while ((k = ws_before(p->src, i, text_end))) text_end -= k;
        } else if (mod != '+' && kind != '{') { /* lstrip_blocks */
            size_t l = text_end;
            while (l > i && p->src[l - 1] != '\n') l--;
            bool at_line_start = l > i || line_starting;
            bool only_ws = l < text_end && skip_ws(p->src, text_end, l) == text_end;
            if (at_line_start && only_ws) text_end = l;
        }
        if (text_end > i) push_tok(p, T_DATA, i, p->src + i, text_end - i);
        size_t body = k + 2 + (mod ? 1 : 0);
        if (kind == '#') {
            size_t e = body;
            while (e + 1 < p->n && !(p->src[e] == '#' && p->src[e + 1] == '}')) e++;
            if (e + 1 >= p->n) fail_off(p, k, "%s", "unclosed comment (missing '#}')");
            bool strip = e > body && p->src[e - 1] == '-';
            bool keep = e > body && p->src[e - 1] == '+';
            i = e + 2;
            if (strip) i = skip_ws(p->src, p->n, i);
            else if (!keep && i < p->n && p->src[i] == '\n') i++;
        } else {
            push_tok(p, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, k, p->src + k, body - k);
            i = lex_tag_body(p, body, kind == '%', k);
        }
        line_starting = i > 0 && p->src[i - 1] == '\n';
    }
    push_tok(p, T_EOF, p->n, "", 0);
}

/* ---- parser helpers --------------------------------------------------- */

static tok *cur(parser *p) { return &p->toks[p->pos]; }
static tok *peek(parser *p, size_t ahead) {
    size_t k = p->pos + ahead;
    return &p->toks[k < p->ntok ? k : p->ntok - 1];
}
static bool is_op(const tok *t, const char *op) { return t->t == T_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }
static bool is_name(const tok *t, const char *name) { return t->t == T_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n); }

static const char *tok_desc(parser *p, const tok *t) {
    switch (t->t) {
    case T_EOF: return "end of template";
    case T_VAR_END: return "end of print statement '}}'";
    case T_BLOCK_END: return "end of statement block '%}'";
    case T_DATA: return "template text";
    default: {
        size_t n = t->n > 40 ? 40 : t->n;
        char *s = ja_alloc(p->a, p->f, n + 3);
        s[0] = '\'';
        memcpy(s + 1, t->s, n);
        s[n + 1] = '\'';
        return s;
    }
    }
}

static _Noreturn void fail_tok(parser *p, const tok *t, const char *fmt, const char *arg) {
    jfail_at(p->f, OKV_ERR_FORMAT, t->line, t->col, fmt, arg);
}

static void expect_op(parser *p, const char *op) {
    if (!is_op(cur(p), op)) {
        char msg[128];
        snprintf(msg, sizeof msg, "expected '%s', got %s", op, tok_desc(p, cur(p)));
        fail_tok(p, cur(p), "%s", msg);
    }
    p->pos++;
}

static const char *expect_name(parser *p) {
    if (cur(p)->t != T_NAME) fail_tok(p, cur(p), "expected a name, got %s", tok_desc(p, cur(p)));
    return cur(p)->s;
}

static jnode *new_node(parser *p, jnode_kind k, const tok *at) {
    jnode *n = ja_alloc(p->a, p->f, sizeof *n);
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static void nodes_push(parser *p, jnodes *l, jnode *x) {
    l->v = ja_grow(p->a, p->f, l->v, (size_t)l->n, &l->cap, (size_t)l->n + 1, sizeof *l->v);
    l->v[l->n++] = x;
}

static void enter(parser *p) {
    if (++p->depth > 200) fail_tok(p, cur(p), "%s", "template nested too deeply");
}

/* ---- expressions ------------------------------------------------------ */

static jnode *parse_expression(parser *p);
static jnode *parse_or(parser *p);
static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_primary(parser *p);
static jnode *parse_postfix(parser *p, jnode *n);
static jnode *parse_filter_expr(parser *p, jnode *n);


/* Parses "(a, b, k=v)" into args/knames/kvals of n. */
static void parse_call_args(parser *p, jnode *n) {
    expect_op(p, "(");
    int nk = 0, capk = 0;
    while (!is_op(cur(p), ")")) {
        if (n->args.n || nk) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        if (is_op(cur(p), "*") || is_op(cur(p), "**"))
            fail_tok(p, cur(p), "%s", "*args / **kwargs in calls are not supported");
        if (cur(p)->t == T_NAME && is_op(peek(p, 1), "=")) {
            const char *k = cur(p)->s;
            p->pos += 2;
            if (nk == capk) {
                capk = capk ? capk * 2 : 4;
                const char **kn = ja_alloc(p->a, p->f, (size_t)capk * sizeof *kn);
                if (nk) memcpy(kn, n->knames, (size_t)nk * sizeof *kn);
                n->knames = kn;
            }
            n->knames[nk++] = k;
            nodes_push(p, &n->kvals, parse_expression(p));
        } else {
            if (nk) fail_tok(p, cur(p), "%s", "positional argument after keyword argument");
            nodes_push(p, &n->args, parse_expression(p));
        }
    }
    p->pos++;
}

static jnode *parse_tuple(parser *p, bool with_condexpr) {
    tok *start = cur(p);
    jnode *first = with_condexpr ? parse_expression(p) : parse_or(p);
    if (!is_op(cur(p), ",")) return first;
    jnode *t = new_node(p, JN_TUPLE_LIT, start);
    nodes_push(p, &t->args, first);
    while (is_op(cur(p), ",")) {
        p->pos++;
        tok *c = cur(p);
        if (c->t == T_VAR_END || c->t == T_BLOCK_END || is_op(c, ")") || is_name(c, "in")) break;
        nodes_push(p, &t->args, with_condexpr ? parse_expression(p) : parse_or(p));
    }
    return t;
}


/* The comma-separated items of a list or dict literal (key: value pairs,
 * keys in args and values in kvals), a trailing comma allowed, through the
 * closing bracket. */
static void parse_literal_items(parser *p, jnode *n, const char *close, bool dict) {
    while (!is_op(cur(p), close)) {
        if (n->args.n) expect_op(p, ",");
        if (is_op(cur(p), close)) break;
        nodes_push(p, &n->args, parse_expression(p));
        if (dict) {
            expect_op(p, ":");
            nodes_push(p, &n->kvals, parse_expression(p));
        }
    }
    p->pos++;
}
static jnode *parse_primary(parser *p) {
    tok *t = cur(p);
    enter(p);
    jnode *n;
    if (t->t == T_NAME) {
        p->pos++;
        n = new_node(p, JN_CONST, t);
        if (is_name(t, "true") || is_name(t, "True")) n->value = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) n->value = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) n->value = jv_none();
        else { n->kind = JN_NAME; n->name = t->s; }
    } else if (t->t == T_STRING) {
        jbuf b = {0};
        jb_put(p->a, p->f, &b, "", 0);
        while (cur(p)->t == T_STRING) { jb_put(p->a, p->f, &b, cur(p)->s, cur(p)->n); p->pos++; }
        n = new_node(p, JN_CONST, t);
        n->value = jv_str(b.p, b.n);
    } else if (t->t == T_INT || t->t == T_FLOAT) {
        p->pos++;
        n = new_node(p, JN_CONST, t);
        n->value = t->t == T_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (is_op(t, "(")) {
        p->pos++;
        if (is_op(cur(p), ")")) {
            p->pos++;
            n = new_node(p, JN_TUPLE_LIT, t);
        } else {
            n = parse_tuple(p, true);
            expect_op(p, ")");
        }
    } else if (is_op(t, "[")) {
        p->pos++;
        n = new_node(p, JN_LIST_LIT, t);
        parse_literal_items(p, n, "]", false);
    } else if (is_op(t, "{")) {
        p->pos++;
        n = new_node(p, JN_DICT_LIT, t);
        parse_literal_items(p, n, "}", true);
    } else {
        fail_tok(p, t, "unexpected %s in expression", tok_desc(p, t));
    }
    p->depth--;
    return n;
}

static jnode *parse_subscript(parser *p, jnode *obj) {
    tok *t = cur(p);
    if (is_op(t, ".")) {
        p->pos++;
        tok *a = cur(p);
        if (a->t == T_NAME) {
            p->pos++;
            jnode *n = new_node(p, JN_GETATTR, a);
            n->a = obj;
            n->name = a->s;
            return n;
        }
        if (a->t == T_INT) {
            p->pos++;
            jnode *n = new_node(p, JN_GETITEM, a);
            n->a = obj;
            n->b = new_node(p, JN_CONST, a);
            n->b->value = jv_int(a->i);
            return n;
        }
        fail_tok(p, a, "expected an attribute name after '.', got %s", tok_desc(p, a));
    }
    /* '[' */
    p->pos++;
    jnode *parts[3] = {NULL, NULL, NULL};
    bool is_slice = false;
    if (!is_op(cur(p), ":")) parts[0] = parse_expression(p);
    if (is_op(cur(p), ":")) {
        is_slice = true;
        p->pos++;
        if (!is_op(cur(p), "]") && !is_op(cur(p), ":")) parts[1] = parse_expression(p);
        if (is_op(cur(p), ":")) {
            p->pos++;
            if (!is_op(cur(p), "]")) parts[2] = parse_expression(p);
        }
    }
    if (is_op(cur(p), ",")) fail_tok(p, cur(p), "%s", "tuple subscripts are not supported");
    expect_op(p, "]");
    jnode *n = new_node(p, is_slice ? JN_SLICE : JN_GETITEM, t);
    n->a = obj;
    if (is_slice) { n->b = parts[0]; n->c = parts[1]; n->body.n = 0; nodes_push(p, &n->args, parts[2]); }
    else n->b = parts[0];
    return n;
}

static jnode *parse_postfix(parser *p, jnode *n) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(t, ".") || is_op(t, "[")) n = parse_subscript(p, n);
        else if (is_op(t, "(")) {
            jnode *c = new_node(p, JN_CALL, t);
            c->line = n->line;
            c->col = n->col;
            c->a = n;
            parse_call_args(p, c);
            n = c;
        } else return n;
    }
}

static const char *parse_dotted_name(parser *p) {
    const char *name = expect_name(p);
    p->pos++;
    while (is_op(cur(p), ".") && peek(p, 1)->t == T_NAME) {
        size_t l1 = strlen(name), l2 = peek(p, 1)->n;
        char *s = ja_alloc(p->a, p->f, l1 + l2 + 2);
        memcpy(s, name, l1);
        s[l1] = '.';
        memcpy(s + l1 + 1, peek(p, 1)->s, l2);
        name = s;
        p->pos += 2;
    }
    return name;
}

static jnode *parse_filter_expr(parser *p, jnode *n) {
    for (;;) {
        tok *t = cur(p);
        if (is_op(t, "|")) {
            p->pos++;
            tok *nt = cur(p);
            const char *name = parse_dotted_name(p);
            if (!jinja_filter_known(name)) fail_tok(p, nt, "unknown or unsupported filter '%s'", name);
            jnode *f = new_node(p, JN_FILTER, nt);
            f->a = n;
            f->name = name;
            if (is_op(cur(p), "(")) parse_call_args(p, f);
            n = f;
        } else if (is_name(t, "is")) {
            p->pos++;
            jnode *x = new_node(p, JN_TEST, t);
            if (is_name(cur(p), "not")) { x->negated = true; p->pos++; }
            tok *nt = cur(p);
            x->name = parse_dotted_name(p);
            if (!jinja_test_known(x->name)) fail_tok(p, nt, "unknown or unsupported test '%s'", x->name);
            x->a = n;
            tok *c = cur(p);
            if (is_op(c, "(")) parse_call_args(p, x);
            else if ((c->t == T_NAME || c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT ||
                      is_op(c, "[") || is_op(c, "{")) &&
                     !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is")) fail_tok(p, c, "%s", "you cannot chain multiple tests with 'is'");
                nodes_push(p, &x->args, parse_postfix(p, parse_primary(p)));
            }
            n = x;
        } else if (is_op(t, "(")) {
            jnode *c = new_node(p, JN_CALL, t);
            c->a = n;
            parse_call_args(p, c);
            n = c;
        } else return n;
    }
}

static jnode *parse_unary(parser *p, bool with_filter) {
    tok *t = cur(p);
    enter(p);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        p->pos++;
        n = new_node(p, is_op(t, "-") ? JN_NEG : JN_POS, t);
        n->a = parse_unary(p, false);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *binop(parser *p, const tok *t, int op, jnode *l, jnode *r) {
    jnode *n = new_node(p, JN_BINOP, t);
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static jnode *parse_pow(parser *p) {
    jnode *l = parse_unary(p, true);
    while (is_op(cur(p), "**")) {
        tok *t = cur(p);
        p->pos++;
        l = binop(p, t, JOP_POW, l, parse_unary(p, true));
    }
    return l;
}

static jnode *parse_math2(parser *p) {
    jnode *l = parse_pow(p);
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "*") ? JOP_MUL : is_op(t, "/") ? JOP_DIV : is_op(t, "//") ? JOP_FLOORDIV
               : is_op(t, "%") ? JOP_MOD : 0;
        if (!op) return l;
        p->pos++;
        l = binop(p, t, op, l, parse_pow(p));
    }
}

static jnode *parse_concat(parser *p) {
    jnode *l = parse_math2(p);
    while (is_op(cur(p), "~")) {
        tok *t = cur(p);
        p->pos++;
        l = binop(p, t, JOP_CONCAT, l, parse_math2(p));
    }
    return l;
}

static jnode *parse_math1(parser *p) {
    jnode *l = parse_concat(p);
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : 0;
        if (!op) return l;
        p->pos++;
        l = binop(p, t, op, l, parse_concat(p));
    }
}

static jnode *parse_compare(parser *p) {
    tok *start = cur(p);
    jnode *first = parse_math1(p);
    jnode *n = NULL;
    size_t nops = 0, cap = 0;
    for (;;) {
        tok *t = cur(p);
        int op = is_op(t, "==") ? JOP_EQ : is_op(t, "!=") ? JOP_NE : is_op(t, "<") ? JOP_LT
               : is_op(t, "<=") ? JOP_LE : is_op(t, ">") ? JOP_GT : is_op(t, ">=") ? JOP_GE : 0;
        if (op) p->pos++;
        else if (is_name(t, "in")) { op = JOP_IN; p->pos++; }
        else if (is_name(t, "not") && is_name(peek(p, 1), "in")) { op = JOP_NOTIN; p->pos += 2; }
        else break;
        if (!n) {
            n = new_node(p, JN_COMPARE, start);
            n->a = first;
        }
        n->ops = ja_grow(p->a, p->f, n->ops, nops, &cap, nops + 1, sizeof *n->ops);
        n->ops[nops++] = op;
        nodes_push(p, &n->args, parse_math1(p));
    }
    return n ? n : first;
}

static jnode *parse_not(parser *p) {
    if (is_name(cur(p), "not")) {
        tok *t = cur(p);
        p->pos++;
        enter(p);
        jnode *n = new_node(p, JN_NOT, t);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

/* A left-associative chain `x word y word z` (and, or). */
static jnode *parse_chain(parser *p, const char *word, jnode_kind kind, jnode *(*operand)(parser *)) {
    jnode *l = operand(p);
    while (is_name(cur(p), word)) {
        tok *t = cur(p);
        p->pos++;
        jnode *n = new_node(p, kind, t);
        n->a = l;
        n->b = operand(p);
        l = n;
    }
    return l;
}

static jnode *parse_and(parser *p) { return parse_chain(p, "and", JN_AND, parse_not); }

static jnode *parse_or(parser *p) { return parse_chain(p, "or", JN_OR, parse_and); }

static jnode *parse_expression(parser *p) {
    enter(p);
    jnode *e = parse_or(p);
    while (is_name(cur(p), "if")) {
        tok *t = cur(p);
        p->pos++;
        jnode *n = new_node(p, JN_COND, t);
        n->a = e;              /* value if true */
        n->c = parse_or(p);    /* condition */
        if (is_name(cur(p), "else")) {
            p->pos++;
            n->b = parse_expression(p);
        }
        e = n;
    }
    p->depth--;
    return e;
}

/* ---- statements ------------------------------------------------------- */

static void expect_block_end(parser *p, const char *tag) {
    if (cur(p)->t != T_BLOCK_END) {
        char msg[160];
        snprintf(msg, sizeof msg, "expected end of '%s' tag ('%%}'), got %s", tag, tok_desc(p, cur(p)));
        fail_tok(p, cur(p), "%s", msg);
    }
    p->pos++;
}

static bool in_list(const char *s, const char *const *list) {
    for (; list && *list; list++)
        if (!strcmp(s, *list)) return true;
    return false;
}

/* Parses statements until a block tag whose name is in `ends`; leaves pos
 * at that name token. `opener` names the statement being closed. */
static jnodes parse_body(parser *p, const char *const *ends, const tok *opener, const char *opener_name);

static const char **parse_targets(parser *p, int *n, bool allow_attr, const char **attr) {
    const char **v = NULL;
    int cnt = 0;
    size_t cap = 0;
    bool paren = is_op(cur(p), "(");
    if (paren) p->pos++;
    for (;;) {
        const char *name = expect_name(p);
        if (is_name(cur(p), "true") || is_name(cur(p), "false") || is_name(cur(p), "none"))
            fail_tok(p, cur(p), "cannot assign to %s", tok_desc(p, cur(p)));
        p->pos++;
        if (allow_attr && cnt == 0 && is_op(cur(p), ".")) {
            p->pos++;
            *attr = expect_name(p);
            p->pos++;
        }
        v = ja_grow(p->a, p->f, v, (size_t)cnt, &cap, (size_t)cnt + 1, sizeof *v);
        v[cnt++] = name;
        if (!is_op(cur(p), ",")) break;
        p->pos++;
        if (attr && *attr) fail_tok(p, cur(p), "%s", "cannot unpack into a namespace attribute");
    }
    if (paren) expect_op(p, ")");
    *n = cnt;
    return v;
}

/* The optional `{% else %}` body of a for/if opened at t, then its end tag
 * (end_only[0]), consumed. */
static void parse_else_and_end(parser *p, jnode *n, const tok *t, const char *opener, const char *const *end_only) {
    if (is_name(cur(p), "else")) {
        p->pos++;
        expect_block_end(p, "else");
        n->else_body = parse_body(p, end_only, t, opener);
    }
    p->pos++; /* the end tag */
    expect_block_end(p, end_only[0]);
}

static jnode *parse_for(parser *p, const tok *t) {
    jnode *n = new_node(p, JN_FOR, t);
    n->targets = parse_targets(p, &n->ntargets, false, NULL);
    if (!is_name(cur(p), "in")) fail_tok(p, cur(p), "expected 'in' in for loop, got %s", tok_desc(p, cur(p)));
    p->pos++;
    n->a = parse_tuple(p, false);
    if (is_name(cur(p), "if")) { p->pos++; n->c = parse_expression(p); }
    if (is_name(cur(p), "recursive")) fail_tok(p, cur(p), "%s", "recursive for loops are not supported");
    expect_block_end(p, "for");
    static const char *const ends[] = {"endfor", "else", NULL};
    p->loop_depth++;
    n->body = parse_body(p, ends, t, "for");
    p->loop_depth--;
    static const char *const end_only[] = {"endfor", NULL};
    parse_else_and_end(p, n, t, "for", end_only);
    return n;
}

static jnode *parse_if(parser *p, const tok *t) {
    jnode *n = new_node(p, JN_IF, t);
    n->a = parse_tuple(p, false);
    expect_block_end(p, "if");
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    n->body = parse_body(p, ends, t, "if");
    tok *e = cur(p);
    if (is_name(e, "elif")) {
        p->pos++;
        enter(p); /* an elif chain recurses once per branch */
        jnode *sub = parse_if(p, &p->toks[p->pos - 2]); /* consumes through endif */
        p->depth--;
        nodes_push(p, &n->else_body, sub);
        return n;
    }
    static const char *const end_only[] = {"endif", NULL};
    parse_else_and_end(p, n, t, "if", end_only);
    return n;
}

static jnode *parse_set(parser *p, const tok *t) {
    jnode *n = new_node(p, JN_SET, t);
    const char *attr = NULL;
    n->targets = parse_targets(p, &n->ntargets, true, &attr);
    n->attr = attr;
    if (is_op(cur(p), "=")) {
        p->pos++;
        n->a = parse_tuple(p, true);
        expect_block_end(p, "set");
        return n;
    }
    if (is_op(cur(p), "|")) fail_tok(p, cur(p), "%s", "filtered block set is not supported");
    expect_block_end(p, "set");
    if (n->ntargets != 1 || attr) fail_tok(p, t, "%s", "block set needs a single name");
    n->kind = JN_SET_BLOCK;
    static const char *const ends[] = {"endset", NULL};
    n->body = parse_body(p, ends, t, "set");
    p->pos++;
    expect_block_end(p, "endset");
    return n;
}

static jnode *parse_macro(parser *p, const tok *t) {
    jnode *n = new_node(p, JN_MACRO, t);
    n->name = expect_name(p);
    p->pos++;
    expect_op(p, "(");
    int cnt = 0;
    size_t cap = 0;
    while (!is_op(cur(p), ")")) {
        if (cnt) expect_op(p, ",");
        if (is_op(cur(p), ")")) break;
        const char *name = expect_name(p);
        p->pos++;
        n->knames = ja_grow(p->a, p->f, n->knames, (size_t)cnt, &cap, (size_t)cnt + 1, sizeof *n->knames);
        n->knames[cnt++] = name;
        jnode *dflt = NULL;
        if (is_op(cur(p), "=")) { p->pos++; dflt = parse_expression(p); }
        else if (n->kvals.n && n->kvals.v[n->kvals.n - 1])
            fail_tok(p, cur(p), "%s", "non-default macro argument follows default argument");
        nodes_push(p, &n->kvals, dflt);
    }
    p->pos++;
    n->ntargets = cnt;
    expect_block_end(p, "macro");
    int saved = p->loop_depth;
    p->loop_depth = 0;
    static const char *const ends[] = {"endmacro", NULL};
    n->body = parse_body(p, ends, t, "macro");
    p->loop_depth = saved;
    p->pos++;
    expect_block_end(p, "endmacro");
    return n;
}

/* Statements are positioned at their '{%'; tag-name errors at the name. */
static jnode *parse_statement(parser *p) {
    tok *begin = &p->toks[p->pos - 1];
    tok *t = cur(p);
    const char *name = expect_name(p);
    p->pos++;
    if (!strcmp(name, "for")) return parse_for(p, begin);
    if (!strcmp(name, "if")) return parse_if(p, begin);
    if (!strcmp(name, "set")) return parse_set(p, begin);
    if (!strcmp(name, "macro")) return parse_macro(p, begin);
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (p->loop_depth == 0) fail_tok(p, begin, "'%s' outside of a loop", name);
        jnode *n = new_node(p, name[0] == 'b' ? JN_BREAK : JN_CONTINUE, begin);
        expect_block_end(p, name);
        return n;
    }
    if (!strcmp(name, "generation")) {
        jnode *n = new_node(p, JN_GENERATION, begin);
        expect_block_end(p, name);
        static const char *const ends[] = {"endgeneration", NULL};
        n->body = parse_body(p, ends, begin, "generation");
        p->pos++;
        expect_block_end(p, "endgeneration");
        return n;
    }
    static const char *const known_unsupported[] = {
        "call", "filter", "with", "include", "import", "from", "extends", "block", "raw",
        "do", "autoescape", "trans", NULL};
    if (in_list(name, known_unsupported)) fail_tok(p, t, "unsupported tag '%s'", name);
    fail_tok(p, t, "unknown tag '%s'", name);
}

static jnodes parse_body(parser *p, const char *const *ends, const tok *opener, const char *opener_name) {
    jnodes body = {0};
    enter(p);
    for (;;) {
        tok *t = cur(p);
        if (t->t == T_EOF) {
            if (ends) {
                char msg[128];
                snprintf(msg, sizeof msg, "unclosed '%s' block: reached end of template looking for '%s'",
                         opener_name, ends[0][0] == 'e' && !strcmp(ends[0], "elif") ? "endif" : ends[0]);
                fail_tok(p, opener, "%s", msg);
            }
            break;
        }
        if (t->t == T_DATA) {
            jnode *n = new_node(p, JN_TEXT, t);
            n->value = jv_str(t->s, t->n);
            nodes_push(p, &body, n);
            p->pos++;
        } else if (t->t == T_VAR_BEGIN) {
            p->pos++;
            jnode *n = new_node(p, JN_OUTPUT, t);
            n->a = parse_tuple(p, true);
            if (cur(p)->t != T_VAR_END)
                fail_tok(p, cur(p), "expected end of print statement '}}', got %s", tok_desc(p, cur(p)));
            p->pos++;
            nodes_push(p, &body, n);
        } else if (t->t == T_BLOCK_BEGIN) {
            p->pos++;
            tok *nt = cur(p);
            if (nt->t == T_NAME && in_list(nt->s, ends)) break;
            static const char *const closers[] = {"endfor", "endif", "elif", "else", "endset", "endmacro",
                                                  "endgeneration", NULL};
            if (nt->t == T_NAME && in_list(nt->s, closers)) {
                if (ends) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "unexpected '%s' inside '%s' block opened at %d:%d",
                             nt->s, opener_name, opener->line, opener->col);
                    fail_tok(p, nt, "%s", msg);
                }
                fail_tok(p, nt, "unexpected '%s' with no open block", nt->s);
            }
            nodes_push(p, &body, parse_statement(p));
        } else {
            fail_tok(p, t, "unexpected %s", tok_desc(p, t));
        }
    }
    p->depth--;
    return body;
}

/* ---- depth check ------------------------------------------------------ */

static void check_depth(parser *p, const jnode *n, int depth);

static void check_list_depth(parser *p, const jnodes *l, int depth) {
    for (int i = 0; i < l->n; i++)
        if (l->v[i]) check_depth(p, l->v[i], depth);
}

/* Refuses a tree deeper than JINJA_MAX_TREE_DEPTH; recursion stops there. */
static void check_depth(parser *p, const jnode *n, int depth) {
    if (depth > JINJA_MAX_TREE_DEPTH)
        jfail_at(p->f, OKV_ERR_FORMAT, n->line, n->col,
                 "expressions and blocks nested deeper than %d (a chain like a+b+c, x|f|g, x[0][0], x.a.b or "
                 "a or b counts one level per link)", JINJA_MAX_TREE_DEPTH);
    const jnode *kids[3] = {n->a, n->b, n->c};
    for (int i = 0; i < 3; i++)
        if (kids[i]) check_depth(p, kids[i], depth + 1);
    check_list_depth(p, &n->args, depth + 1);
    check_list_depth(p, &n->kvals, depth + 1);
    check_list_depth(p, &n->body, depth + 1);
    check_list_depth(p, &n->else_body, depth + 1);
}

/* ---- entry ------------------------------------------------------------ */

static char *normalize_source(jarena *a, jfail *f, const char *src, size_t *n) {
    size_t len = strlen(src);
    char *s = ja_alloc(a, f, len + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[o++] = src[i];
        }
    }
    if (o && s[o - 1] == '\n') o--; /* keep_trailing_newline=False */
    s[o] = 0;
    *n = o;
    return s;
}

jnodes jinja_parse(jarena *a, jfail *f, const char *src) {
    parser p;
    memset(&p, 0, sizeof p);
    p.a = a;
    p.f = f;
    p.src = normalize_source(a, f, src, &p.n);
    int nl = 1;
    for (size_t i = 0; i < p.n; i++)
        if (p.src[i] == '\n') nl++;
    p.line_starts = ja_alloc(a, f, (size_t)nl * sizeof *p.line_starts);
    p.nlines = 0;
    p.line_starts[p.nlines++] = 0;
    for (size_t i = 0; i < p.n; i++)
        if (p.src[i] == '\n') p.line_starts[p.nlines++] = i + 1;
    lex(&p);
    jnodes body = parse_body(&p, NULL, NULL, NULL);
    check_list_depth(&p, &body, 1);
    return body;
}
