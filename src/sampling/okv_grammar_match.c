/* okv_grammar_match.c — the character-level pushdown automaton that tells
 * whether a byte string is a prefix of a JSON value the grammar allows.
 *
 * The state is a stack of frames (okv_grammar_internal.h): the root, then
 * one frame per value still open. Each frame walks its node's little
 * machine (the gm_phase values below); a container pushes a child frame
 * at a value's first byte (anyOf and "any" resolve to a concrete node on
 * that byte), a string or container pops itself on its closing byte, and a
 * number or a literal that can be followed by more characters ("1" vs
 * "12") stays open until a byte that cannot continue it, which it passes
 * on to its parent. A run of framed values (tool calls) is a container
 * whose frame matches each head and tail itself and pushes the value
 * between them. A byte either is taken or rejected; rejection leaves
 * the frames garbage, so every caller feeds a copy: the mask walk copies
 * the state once per trie node anyway, and okv_grammar_match_feed commits
 * a trial copy only when every byte was taken.
 *
 * Frames hold indices and counters only (no pointers), so a copy is a
 * memcpy of depth * sizeof(gm_frame) bytes. */
#include <stdlib.h>

#include "okv_common.h"
#include "okv_grammar_internal.h"

#define NUM_INT_DIGITS 16
#define NUM_FRAC_DIGITS 16
#define NUM_EXP_DIGITS 3

typedef enum gm_phase {
    R_BEFORE, R_AFTER,                                        /* root: before / after the value started */
    O_START, O_OPEN, O_KEY, O_COLON, O_VALUE, O_NEXT, O_COMMA, /* object: '{' ... '}' */
    A_START, A_OPEN, A_NEXT, A_COMMA,                         /* array: '[' ... ']' */
    S_START, S_BODY, S_ESC, S_HEX, S_UTF8, S_FORMAT,          /* string (S_FORMAT: okv_grammar_format.c's) */
    N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_EXP, N_EXPSIGN, N_EXPDIG, /* number */
    L_BODY,                                                   /* literal set */
    F_HEAD, F_VALUE, F_TAIL, F_NEXT                           /* framed values: head, value, tail, between */
} gm_phase;

typedef enum gm_result {
    GM_TAKE,    /* byte consumed, frame stays */
    GM_END,     /* byte consumed and it closed the frame: pop */
    GM_PASS,    /* the frame was complete before this byte: pop, the parent gets it */
    GM_PUSH,    /* a child frame was pushed: it gets the byte */
    GM_REJECT
} gm_result;

static bool is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static void set_phase(gm_frame *f, gm_phase p) {
    f->phase = (uint8_t)p;
    f->ws = 0;
}

/* A whitespace byte in a gap: taken while the gap's budget lasts. */
static gm_result gap_ws(gm_frame *f) {
    if (f->ws >= OKV_GRAMMAR_MAX_WS) return GM_REJECT;
    f->ws++;
    return GM_TAKE;
}

static uint64_t low_bits(int32_t n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

/* The concrete node a value of `node` starting with byte c is, or -1. */
static int32_t resolve(const okv_grammar *g, int32_t node, unsigned char c) {
    for (int hop = 0; hop <= GM_MAX_FRAMES; hop++) {
        const gn_node *n = &g->nodes[node];
        if (!gn_first_has(n, c)) return -1;
        if (n->kind == GN_ANY) {
            if (c == '{') return GN_FIX_OBJECT;
            if (c == '[') return GN_FIX_ARRAY;
            if (c == '"') return GN_FIX_STRING;
            if (c == '-' || is_digit(c)) return GN_FIX_NUMBER;
            return GN_FIX_WORDS;
        }
        if (n->kind != GN_ANYOF) return node;
        int32_t next = -1;
        for (int32_t i = 0; i < n->n_alts && next < 0; i++)
            if (gn_first_has(&g->nodes[g->alts[n->alt_off + i]], c)) next = g->alts[n->alt_off + i];
        if (next < 0) return -1;
        node = next;
    }
    return -1;
}

/* Pushes the frame of a value of `node` that starts with byte c (which the
 * new frame then receives). Containers need a spare frame above them (an
 * object's key string, an array's scalar), so nesting ends gracefully. */
static gm_result push_value(const okv_grammar *g, gm_state *s, int32_t node, unsigned char c) {
    int32_t id = resolve(g, node, c);
    if (id < 0) return GM_REJECT;
    const gn_node *n = &g->nodes[id];
    bool container = n->kind == GN_OBJECT || n->kind == GN_ARRAY || n->kind == GN_FRAMED;
    if (s->depth + (container ? 1 : 0) >= GM_MAX_FRAMES) return GM_REJECT;
    gm_frame *f = &s->f[s->depth++];
    memset(f, 0, sizeof *f);
    f->node = id;
    switch (n->kind) {
    case GN_OBJECT: f->phase = O_START; break;
    case GN_ARRAY: f->phase = A_START; break;
    case GN_STRING: f->phase = S_START; break;
    case GN_NUMBER:
    case GN_INTEGER: f->phase = N_START; break;
    case GN_FRAMED: f->phase = F_HEAD; f->cand = low_bits(n->n_alts); break;
    default: f->phase = L_BODY; f->cand = low_bits(n->n_lits); break;
    }
    return GM_PUSH;
}

/* ---- objects ------------------------------------------------------------------------ */

/* The properties not yet present. */
static uint64_t props_left(const gn_node *n, const gm_frame *f) { return low_bits(n->n_props) & ~f->seen; }
static bool required_met(const gn_node *n, const gm_frame *f) { return (n->required & ~f->seen) == 0; }

/* '"' opening a key. */
static gm_result begin_key(const okv_grammar *g, gm_state *s, const gn_node *n, gm_frame *f, unsigned char c) {
    if (n->any_keys) {
        set_phase(f, O_COLON);
        return push_value(g, s, GN_FIX_STRING, c);
    }
    uint64_t left = props_left(n, f);
    if (!left) return GM_REJECT;
    f->cand = left;
    f->count = 0;
    set_phase(f, O_KEY);
    return GM_TAKE;
}

/* A byte of a declared key: narrows the candidates, or closes the key when
 * it is '"' and a candidate ends here (a '"' continuing a candidate is the
 * second byte of an escape, so continuing is tried first). */
static gm_result key_byte(const okv_grammar *g, const gn_node *n, gm_frame *f, unsigned char c) {
    uint64_t next = 0;
    for (uint64_t m = f->cand; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        const gn_prop *p = &g->props[n->prop_off + i];
        if (f->count < p->key_len && (unsigned char)p->key[f->count] == c) next |= 1ull << i;
    }
    if (next) {
        f->cand = next;
        f->count++;
        return GM_TAKE;
    }
    if (c != '"') return GM_REJECT;
    for (uint64_t m = f->cand; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        if (g->props[n->prop_off + i].key_len == f->count) {
            f->key = i;
            f->seen |= 1ull << i;
            set_phase(f, O_COLON);
            return GM_TAKE;
        }
    }
    return GM_REJECT;
}

static gm_result step_object(const okv_grammar *g, gm_state *s, gm_frame *f, unsigned char c) {
    const gn_node *n = &g->nodes[f->node];
    bool ws = is_ws(c);
    switch ((gm_phase)f->phase) {
    case O_START:
        if (c != '{') return GM_REJECT;
        set_phase(f, O_OPEN);
        return GM_TAKE;
    case O_OPEN:
        if (ws) return gap_ws(f);
        if (c == '}') return required_met(n, f) ? GM_END : GM_REJECT;
        return c == '"' ? begin_key(g, s, n, f, c) : GM_REJECT;
    case O_KEY: return key_byte(g, n, f, c);
    case O_COLON:
        if (ws) return gap_ws(f);
        if (c != ':') return GM_REJECT;
        set_phase(f, O_VALUE);
        return GM_TAKE;
    case O_VALUE: {
        if (ws) return gap_ws(f);
        int32_t node = n->any_keys ? GN_FIX_ANY : g->props[n->prop_off + f->key].node;
        set_phase(f, O_NEXT);
        return push_value(g, s, node, c);
    }
    case O_NEXT:
        if (ws) return gap_ws(f);
        if (c == '}') return required_met(n, f) ? GM_END : GM_REJECT;
        if (c != ',' || (!n->any_keys && !props_left(n, f))) return GM_REJECT;
        set_phase(f, O_COMMA);
        return GM_TAKE;
    case O_COMMA:
        if (ws) return gap_ws(f);
        return c == '"' ? begin_key(g, s, n, f, c) : GM_REJECT;
    default: return GM_REJECT;
    }
}

/* ---- arrays ------------------------------------------------------------------------- */

static gm_result step_array(const okv_grammar *g, gm_state *s, gm_frame *f, unsigned char c) {
    const gn_node *n = &g->nodes[f->node];
    bool ws = is_ws(c);
    switch ((gm_phase)f->phase) {
    case A_START:
        if (c != '[') return GM_REJECT;
        set_phase(f, A_OPEN);
        return GM_TAKE;
    case A_OPEN:
        if (ws) return gap_ws(f);
        if (c == ']') return n->min_items == 0 ? GM_END : GM_REJECT;
        if (n->max_items == 0) return GM_REJECT;
        f->count = 1;
        set_phase(f, A_NEXT);
        return push_value(g, s, n->items, c);
    case A_NEXT:
        if (ws) return gap_ws(f);
        if (c == ']') return (int64_t)f->count >= n->min_items ? GM_END : GM_REJECT;
        if (c != ',' || (int64_t)f->count >= n->max_items) return GM_REJECT;
        set_phase(f, A_COMMA);
        return GM_TAKE;
    case A_COMMA:
        if (ws) return gap_ws(f);
        if (f->count < UINT32_MAX) f->count++;
        set_phase(f, A_NEXT);
        return push_value(g, s, n->items, c);
    default: return GM_REJECT;
    }
}

/* ---- strings ------------------------------------------------------------------------ */

/* A UTF-8 lead byte: sets the continuation count and the range of the
 * next byte (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). */
static bool utf8_lead(gm_frame *f, unsigned char c) {
    f->lo = 0x80;
    f->hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) f->aux = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        f->aux = 2;
        if (c == 0xE0) f->lo = 0xA0;
        if (c == 0xED) f->hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        f->aux = 3;
        if (c == 0xF0) f->lo = 0x90;
        if (c == 0xF4) f->hi = 0x8F;
    } else return false;
    return true;
}

static gm_result step_string(const okv_grammar *g, gm_frame *f, unsigned char c) {
    const gn_node *n = &g->nodes[f->node];
    switch ((gm_phase)f->phase) {
    case S_START:
        if (c != '"') return GM_REJECT;
        set_phase(f, n->format ? S_FORMAT : S_BODY);
        if (n->format) gf_start(n->format, f);
        return GM_TAKE;
    case S_FORMAT:
        if (c == '"') return gf_complete(f) ? GM_END : GM_REJECT;
        return gf_byte(n->format, f, c) ? GM_TAKE : GM_REJECT;
    case S_BODY:
        if (c == '"') return (int64_t)f->count >= n->min_len ? GM_END : GM_REJECT;
        if ((int64_t)f->count >= n->max_len || c < 0x20) return GM_REJECT;
        if (c == '\\') f->phase = S_ESC;
        else if (c >= 0x80) {
            if (!utf8_lead(f, c)) return GM_REJECT;
            f->phase = S_UTF8;
        }
        f->count++;
        return GM_TAKE;
    case S_ESC:
        if (c == 'u') { f->aux = 0; f->phase = S_HEX; return GM_TAKE; }
        if (!c || !strchr("\"\\/bfnrt", c)) return GM_REJECT;
        f->phase = S_BODY;
        return GM_TAKE;
    case S_HEX:
        if (!is_hex(c)) return GM_REJECT;
        if (++f->aux == 4) f->phase = S_BODY;
        return GM_TAKE;
    case S_UTF8:
        if (c < f->lo || c > f->hi) return GM_REJECT;
        f->lo = 0x80;
        f->hi = 0xBF;
        if (--f->aux == 0) f->phase = S_BODY;
        return GM_TAKE;
    default: return GM_REJECT;
    }
}

/* ---- numbers ------------------------------------------------------------------------ */

static gm_result number_to(gm_frame *f, gm_phase p, uint32_t count) {
    f->phase = (uint8_t)p;
    f->count = count;
    return GM_TAKE;
}

/* '.', 'e' or 'E' after a complete integer or fraction part (numbers only). */
static gm_result number_tail(gm_frame *f, bool integer, unsigned char c, bool dot_ok) {
    if (integer) return GM_PASS;
    if (c == '.' && dot_ok) return number_to(f, N_DOT, 0);
    if (c == 'e' || c == 'E') return number_to(f, N_EXP, 0);
    return GM_PASS;
}

static gm_result step_number(const okv_grammar *g, gm_frame *f, unsigned char c) {
    bool integer = g->nodes[f->node].kind == GN_INTEGER, d = is_digit(c);
    switch ((gm_phase)f->phase) {
    case N_START:
        if (c == '-') return number_to(f, N_MINUS, 0);
        /* fall through */
    case N_MINUS:
        if (c == '0') return number_to(f, N_ZERO, 1);
        return d ? number_to(f, N_INT, 1) : GM_REJECT;
    case N_ZERO: return number_tail(f, integer, c, true);
    case N_INT:
        if (d) return f->count < NUM_INT_DIGITS ? number_to(f, N_INT, f->count + 1) : GM_PASS;
        return number_tail(f, integer, c, true);
    case N_DOT: return d ? number_to(f, N_FRAC, 1) : GM_REJECT;
    case N_FRAC:
        if (d) return f->count < NUM_FRAC_DIGITS ? number_to(f, N_FRAC, f->count + 1) : GM_PASS;
        return number_tail(f, integer, c, false);
    case N_EXP:
        if (c == '+' || c == '-') return number_to(f, N_EXPSIGN, 0);
        /* fall through */
    case N_EXPSIGN: return d ? number_to(f, N_EXPDIG, 1) : GM_REJECT;
    case N_EXPDIG: return d && f->count < NUM_EXP_DIGITS ? number_to(f, N_EXPDIG, f->count + 1) : GM_PASS;
    default: return GM_REJECT;
    }
}

static bool number_complete(const gm_frame *f) {
    return f->phase == N_ZERO || f->phase == N_INT || f->phase == N_FRAC || f->phase == N_EXPDIG;
}

/* ---- literal sets ------------------------------------------------------------------- */

/* The candidates that end exactly at the bytes matched so far. */
static uint64_t lits_complete(const okv_grammar *g, const gn_node *n, const gm_frame *f) {
    uint64_t done = 0;
    for (uint64_t m = f->cand; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        if (g->lits[n->lit_off + i].len == f->count) done |= 1ull << i;
    }
    return done;
}

static gm_result step_literal(const okv_grammar *g, gm_frame *f, unsigned char c) {
    const gn_node *n = &g->nodes[f->node];
    uint64_t next = 0;
    for (uint64_t m = f->cand; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        const gn_lit *l = &g->lits[n->lit_off + i];
        if (f->count < l->len && (unsigned char)l->text[f->count] == c) next |= 1ull << i;
    }
    if (!next) return lits_complete(g, n, f) ? GM_PASS : GM_REJECT;
    f->cand = next;
    f->count++;
    return lits_complete(g, n, f) == next ? GM_END : GM_TAKE;
}

/* ---- framed values ------------------------------------------------------------------ */

/* A byte of a head: narrows the candidates; the head that ends here (heads
 * are prefix-free, so at most one) picks the alternative. */
static gm_result head_byte(const okv_grammar *g, const gn_node *n, gm_frame *f, unsigned char c) {
    uint64_t next = 0;
    for (uint64_t m = f->cand; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        const gn_lit *h = &g->lits[n->lit_off + 2 * i];
        if (f->count < h->len && (unsigned char)h->text[f->count] == c) next |= 1ull << i;
    }
    if (!next) return GM_REJECT;
    f->cand = next;
    f->count++;
    for (uint64_t m = next; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        if (g->lits[n->lit_off + 2 * i].len == f->count) {
            f->key = i;
            set_phase(f, F_VALUE);
            break;
        }
    }
    return GM_TAKE;
}

static gm_result step_framed(const okv_grammar *g, gm_state *s, gm_frame *f, unsigned char c) {
    const gn_node *n = &g->nodes[f->node];
    switch ((gm_phase)f->phase) {
    case F_HEAD: return head_byte(g, n, f, c);
    case F_VALUE:
        f->count = 0;
        set_phase(f, F_TAIL);
        return push_value(g, s, g->alts[n->alt_off + f->key], c);
    case F_TAIL: {
        const gn_lit *t = &g->lits[n->lit_off + 2 * f->key + 1];
        if (f->count >= t->len || (unsigned char)t->text[f->count] != c) return GM_REJECT;
        if (++f->count < t->len) return GM_TAKE;
        f->seen++;
        if ((int64_t)f->seen >= n->max_items) return GM_END;
        set_phase(f, F_NEXT);
        return GM_TAKE;
    }
    case F_NEXT:
        if (is_ws(c)) return gap_ws(f);
        if (gn_first_has(n, c)) {
            f->cand = low_bits(n->n_alts);
            f->count = 0;
            set_phase(f, F_HEAD);
            return head_byte(g, n, f, c);
        }
        return (int64_t)f->seen >= n->min_items ? GM_PASS : GM_REJECT;
    default: return GM_REJECT;
    }
}

/* ---- the stack ---------------------------------------------------------------------- */

static gm_result step(const okv_grammar *g, gm_state *s, gm_frame *f, unsigned char c) {
    if (f->node < 0) {
        if (f->phase != R_BEFORE) return GM_REJECT;
        f->phase = R_AFTER;
        return push_value(g, s, g->root, c);
    }
    switch (g->nodes[f->node].kind) {
    case GN_OBJECT: return step_object(g, s, f, c);
    case GN_ARRAY: return step_array(g, s, f, c);
    case GN_STRING: return step_string(g, f, c);
    case GN_NUMBER:
    case GN_INTEGER: return step_number(g, f, c);
    case GN_LITERALS: return step_literal(g, f, c);
    case GN_FRAMED: return step_framed(g, s, f, c);
    default: return GM_REJECT;   /* GN_ANY / GN_ANYOF never get a frame: resolve() replaced them */
    }
}

void gm_start(gm_state *s) {
    memset(&s->f[0], 0, sizeof s->f[0]);
    s->f[0].node = -1;
    s->f[0].phase = R_BEFORE;
    s->depth = 1;
}

void gm_mask_key(const okv_grammar *g, const gm_state *s, int32_t max_token, gm_state *key) {
    gm_copy(key, s);
    gm_frame *f = &key->f[key->depth - 1];
    if (f->node < 0 || g->nodes[f->node].kind != GN_STRING || f->phase != S_BODY) return;
    const gn_node *n = &g->nodes[f->node];
    f->aux = f->lo = f->hi = 0;   /* left over from the last escape / UTF-8 character */
    if ((int64_t)f->count >= n->min_len && (int64_t)f->count + max_token <= n->max_len) f->count = UINT32_MAX;
}

void gm_cache_free(okv_grammar_match *m) {
    for (int i = 0; i < GM_CACHE; i++) {
        free(m->cache[i].bits);
        m->cache[i].bits = NULL;
    }
    m->cache_vocab = NULL;
}

bool gm_feed_byte(const okv_grammar *g, gm_state *s, unsigned char c) {
    /* each PASS pops a frame and each PUSH adds one that then takes or
     * rejects, so the loop ends within 2 * GM_MAX_FRAMES rounds */
    for (int round = 0; round < 2 * GM_MAX_FRAMES + 2; round++) {
        gm_result r = step(g, s, &s->f[s->depth - 1], c);
        switch (r) {
        case GM_TAKE: return true;
        case GM_END: s->depth--; return true;
        case GM_PASS: if (s->depth <= 1) return false; s->depth--; break;
        case GM_PUSH: break;
        case GM_REJECT: return false;
        }
    }
    return false;
}

/* True when the value may end here: the root's value is closed, or the only
 * open frame is a number or literal that is complete as it stands, or a run
 * of framed values between two values with enough of them. */
static bool state_accepting(const okv_grammar *g, const gm_state *s) {
    if (s->f[0].phase != R_AFTER) return false;
    if (s->depth == 1) return true;
    if (s->depth != 2) return false;
    const gm_frame *f = &s->f[1];
    const gn_node *n = &g->nodes[f->node];
    if (n->kind == GN_NUMBER || n->kind == GN_INTEGER) return number_complete(f);
    if (n->kind == GN_FRAMED) return f->phase == F_NEXT && (int64_t)f->seen >= n->min_items;
    return n->kind == GN_LITERALS && lits_complete(g, n, f) != 0;
}

/* ---- public API --------------------------------------------------------------------- */

okv_status okv_grammar_match_create(const okv_grammar *g, okv_grammar_match **out, okv_error *err) {
    *out = NULL;
    if (!g) return okv_fail(err, OKV_ERR_INVALID, "okv_grammar_match_create: NULL grammar");
    okv_grammar_match *m = calloc(1, sizeof *m);
    if (!m) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    m->g = g;
    gm_start(&m->cur);
    *out = m;
    return OKV_OK;
}

void okv_grammar_match_free(okv_grammar_match *m) {
    if (!m) return;
    gm_cache_free(m);
    free(m->walk);
    free(m);
}

void okv_grammar_match_reset(okv_grammar_match *m) { gm_start(&m->cur); }

bool okv_grammar_match_feed(okv_grammar_match *m, const char *bytes, size_t n) {
    gm_copy(&m->tmp, &m->cur);
    for (size_t i = 0; i < n; i++)
        if (!gm_feed_byte(m->g, &m->tmp, (unsigned char)bytes[i])) return false;
    gm_copy(&m->cur, &m->tmp);
    return true;
}

bool okv_grammar_match_accepting(const okv_grammar_match *m) { return state_accepting(m->g, &m->cur); }

bool okv_grammar_match_finished(const okv_grammar_match *m) { return m->cur.depth == 1 && m->cur.f[0].phase == R_AFTER; }
