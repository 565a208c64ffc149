/* okv_grammar_internal.h — the compiled grammar's shape, shared by the
 * schema compiler (okv_grammar_schema.c, which builds it) and the matcher
 * (okv_grammar_match.c, which walks it). Nothing outside src/sampling sees
 * it: the public face is offkv_grammar.h.
 *
 * A grammar is a flat array of nodes addressed by index (no pointers, so
 * the matcher's frames are small and copyable). Nodes 0..GN_FIXED-1 are
 * the same in every grammar and describe "any JSON value", which
 * json_object and schemas without constraints use. */
#ifndef OKV_GRAMMAR_INTERNAL_H
#define OKV_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "offkv_grammar.h"

typedef enum gn_kind {
    GN_ANY,      /* any JSON value: dispatches on its first byte to the fixed nodes below */
    GN_OBJECT,   /* props[prop_off .. prop_off+n_props), or any keys (any_keys) with GN_ANY values */
    GN_ARRAY,    /* items: a node; min_items..max_items elements */
    GN_STRING,   /* min_len..max_len characters (code points; an escape is one) */
    GN_NUMBER,   /* JSON number */
    GN_INTEGER,  /* JSON number without fraction or exponent */
    GN_LITERALS, /* one of lits[lit_off .. lit_off+n_lits): canonical JSON texts (enum, const, true/false/null) */
    GN_ANYOF,    /* one of alts[alt_off .. alt_off+n_alts), chosen by the value's first byte */
    GN_FRAMED    /* min_items..max_items framed values (okv_grammar_framed): alternative i is the
                    literal lits[lit_off + 2i] (its head, which picks it), a value of node
                    alts[alt_off + i], then the literal lits[lit_off + 2i + 1] (its tail) */
} gn_kind;

/* String formats (okv_grammar_format.c). */
enum { GN_FMT_NONE, GN_FMT_DATE, GN_FMT_TIME, GN_FMT_DATE_TIME, GN_FMT_UUID };

/* The fixed nodes. */
enum { GN_FIX_ANY = 0, GN_FIX_OBJECT = 1, GN_FIX_ARRAY = 2, GN_FIX_STRING = 3, GN_FIX_NUMBER = 4,
       GN_FIX_WORDS = 5, GN_FIXED = 6 };

#define GN_MAX_PROPS 64     /* properties per object: a uint64 bit set of those seen */
#define GN_MAX_LITS 64      /* enum values: a uint64 bit set of the candidates left */
#define GN_MAX_LIT_BYTES 4096
#define GN_MAX_ALTS 16
#define GN_MAX_NODES 8192

typedef struct gn_node {
    gn_kind kind;
    bool any_keys;              /* object: keys are any strings, values any value */
    int32_t prop_off, n_props;  /* object */
    uint64_t required;          /* object: bit i = props[prop_off + i] required */
    int32_t items;              /* array: element node */
    int64_t min_items, max_items;
    int64_t min_len, max_len;   /* string */
    int format;                 /* string: GN_FMT_* (then min_len/max_len are unused) */
    int32_t lit_off, n_lits;    /* literals */
    int32_t alt_off, n_alts;    /* anyOf, framed */
    uint8_t first[32];          /* bit set of the bytes a value of this node can start with */
} gn_node;

typedef struct gn_prop {
    char *key;        /* the key as it appears between the quotes: JSON-escaped, canonical */
    size_t key_len;
    int32_t node;
} gn_prop;

typedef struct gn_lit {
    char *text;
    size_t len;
} gn_lit;

struct okv_grammar {
    gn_node *nodes;
    int32_t n_nodes;
    size_t cap_nodes;
    gn_prop *props;
    int32_t n_props;
    size_t cap_props;
    gn_lit *lits;
    int32_t n_lits;
    size_t cap_lits;
    int32_t *alts;
    int32_t n_alts;
    size_t cap_alts;
    int32_t root;
};

static inline bool gn_first_has(const gn_node *n, unsigned char c) { return (n->first[c >> 3] >> (c & 7)) & 1; }
static inline void gn_first_add(gn_node *n, unsigned char c) { n->first[c >> 3] |= (uint8_t)(1u << (c & 7)); }

/* ---- the matcher's state (okv_grammar_match.c), walked by the mask (okv_grammar_vocab.c) ----
 * A stack of frames: f[0] is the root (node -1), f[depth-1] the innermost
 * open value. A frame is plain data, so copying the first `depth` frames
 * copies the state (the mask walk does that once per trie node). */
#define GM_MAX_FRAMES (OKV_GRAMMAR_MAX_DEPTH + 4)

typedef struct gm_frame {
    int32_t node;     /* -1: the root */
    uint8_t phase;    /* gm_phase */
    uint8_t ws;       /* whitespace bytes in the current gap */
    uint8_t aux;      /* string: \u hex digits read, or UTF-8 continuation bytes still due */
    uint8_t lo, hi;   /* string: range of the next UTF-8 continuation byte */
    int32_t key;      /* object: index (in the node's properties) of the value being read; framed: the alternative */
    uint32_t count;   /* string: characters; array: elements; key/literal/head/tail: bytes matched; number: digits of the part */
    uint64_t seen;    /* object: properties present; framed: values completed */
    uint64_t cand;    /* object key being read / literal / framed head: candidates still matching */
} gm_frame;

typedef struct gm_state {
    int32_t depth;
    gm_frame f[GM_MAX_FRAMES];
} gm_state;

/* A mask computed earlier, under the state it was computed from (in the
 * normalized form gm_mask_key gives: inside a long string the characters
 * written so far stop mattering, so every step of a string hits). */
#define GM_CACHE 8
typedef struct gm_cached {
    gm_state key;
    uint32_t *bits;           /* [(vocab + 31) / 32]; NULL = unused entry */
    uint64_t used;            /* LRU stamp */
} gm_cached;

struct okv_grammar_match {
    const okv_grammar *g;
    gm_state cur;
    gm_state tmp;             /* okv_grammar_match_feed's trial copy */
    gm_state *walk;           /* [walk_cap] the mask walk's states, one per trie depth */
    size_t walk_cap;
    const void *cache_vocab;  /* the vocab the cached masks are for */
    gm_cached cache[GM_CACHE];
    uint64_t tick;
};

void gm_start(gm_state *s);
/* Copies s into key in the form masks are cached under: a string being
 * written whose length can neither reach its maxLength within one token
 * (max_token bytes) nor still be short of minLength gets one count value. */
void gm_mask_key(const okv_grammar *g, const gm_state *s, int32_t max_token, gm_state *key);
void gm_cache_free(okv_grammar_match *m);

/* okv_grammar_format.c: a formatted string's bytes between the quotes.
 * gf_start sets up the frame, gf_byte takes one byte (false: it cannot
 * come next), gf_complete says whether the closing quote may come now;
 * gf_parse maps a "format" name to GN_FMT_* (GN_FMT_NONE: not supported). */
void gf_start(int format, gm_frame *f);
bool gf_byte(int format, gm_frame *f, unsigned char c);
bool gf_complete(const gm_frame *f);
int gf_parse(const char *name);
static inline void gm_copy(gm_state *dst, const gm_state *src) {
    dst->depth = src->depth;
    memcpy(dst->f, src->f, (size_t)src->depth * sizeof *src->f);
}
/* Consumes one byte; false if it cannot follow (s is then garbage: callers
 * feed a copy). */
bool gm_feed_byte(const okv_grammar *g, gm_state *s, unsigned char c);

#endif
