/* tok_internal.h — the in-memory form of a tokenizer.json shared by the
 * tokenizer's files: string/pair hash maps, the pipeline components (each a
 * small tagged struct, nested for Sequence); byte buffers are okv_buf.
 *
 * Components are plain data built once by tok_load.c and only read
 * afterwards, which is what makes an okv_tok safe to share between threads. */
#ifndef OKV_TOK_INTERNAL_H
#define OKV_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_tok.h"
#include "okv_common.h"

/* Largest id we accept from a file: bounds the id -> token table. */
#define TOK_MAX_ID (1 << 22)

/* Byte buffers are okv_buf (okv_common.h); this appends cp UTF-8 encoded. */
void tok_buf_put_cp(okv_buf *b, uint32_t cp);

/* ---- UTF-8 helpers ----------------------------------------------------- */

/* Writes cp as UTF-8 into u; returns the length (1..4). */
size_t tok_utf8_encode(uint32_t cp, char u[4]);
/* Decodes the char at s[0..n) (valid UTF-8 assumed); returns its length. */
size_t tok_utf8_next(const char *s, size_t n, uint32_t *cp);
/* Length of the longest valid UTF-8 prefix of s. */
size_t tok_utf8_valid_prefix(const char *s, size_t n);
/* Appends s decoded like Rust's String::from_utf8_lossy (each maximal
 * invalid subsequence becomes U+FFFD). */
void tok_utf8_lossy(okv_buf *out, const char *s, size_t n);
bool tok_is_whitespace(uint32_t cp); /* Unicode White_Space */
bool tok_is_alnum(uint32_t cp);      /* Rust char::is_alphanumeric */
bool tok_is_numeric(uint32_t cp);    /* Rust char::is_numeric */

/* ---- string -> int32 map (open addressing; keys are copied) ------------- */

typedef struct tok_map {
    char **keys;
    uint32_t *klen;
    int32_t *vals;
    size_t cap, n; /* cap is a power of two */
} tok_map;

bool tok_map_put(tok_map *m, const char *k, size_t n, int32_t v); /* overwrites */
int32_t tok_map_get(const tok_map *m, const char *k, size_t n);   /* -1 if absent */
void tok_map_free(tok_map *m);

/* ---- (id, id) -> (rank, new id) map for BPE merges ---------------------- */

typedef struct tok_merge_slot {
    uint64_t key; /* (a << 32 | b) + 1; 0 = empty slot */
    int32_t rank, new_id;
} tok_merge_slot; /* 16 bytes: a probe touches one cache line */

typedef struct tok_merges {
    tok_merge_slot *slots;
    size_t cap, n;
} tok_merges;

bool tok_merges_put(tok_merges *m, int32_t a, int32_t b, int32_t rank, int32_t new_id);
bool tok_merges_get(const tok_merges *m, int32_t a, int32_t b, int32_t *rank, int32_t *new_id);
void tok_merges_free(tok_merges *m);

/* ---- patterns (Split/Replace): literal string or regex ----------------- */

typedef struct tok_pattern {
    char *lit; /* literal (not NUL-terminated inside data, but lit_len counts) */
    size_t lit_len;
    pcre2_code *re; /* non-NULL for {"Regex": ...} */
} tok_pattern;

/* One span of a pattern scan: [start, end) and whether it matched. */
typedef struct tok_span {
    size_t start, end;
    bool match;
} tok_span;

typedef struct tok_spans {
    tok_span *v;
    size_t n, cap;
} tok_spans;

/* Per-call scratch for regex matching (keeps okv_tok immutable). */
typedef struct tok_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    bool raw_bytes;   /* decoding: byte runs kept as raw bytes, not repaired to U+FFFD (okv_tok_token_bytes) */
} tok_scratch;

/* ---- components -------------------------------------------------------- */

typedef enum {
    TOK_NORM_SEQUENCE, TOK_NORM_NFC, TOK_NORM_NFKC, TOK_NORM_NFD, TOK_NORM_NFKD,
    TOK_NORM_REPLACE, TOK_NORM_PREPEND, TOK_NORM_STRIP
} tok_norm_type;

typedef struct tok_norm {
    tok_norm_type type;
    struct tok_norm *kids;
    size_t n_kids;
    tok_pattern pat;      /* Replace */
    char *content;        /* Replace content / Prepend text */
    size_t content_len;
    bool left, right;     /* Strip */
} tok_norm;

typedef enum { TOK_SPLIT_REMOVED, TOK_SPLIT_ISOLATED, TOK_SPLIT_PREV, TOK_SPLIT_NEXT, TOK_SPLIT_CONTIGUOUS } tok_split_behavior;
typedef enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER } tok_prepend_scheme;

typedef enum {
    TOK_PRE_SEQUENCE, TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL, TOK_PRE_METASPACE, TOK_PRE_DIGITS
} tok_pre_type;

typedef struct tok_pre {
    tok_pre_type type;
    struct tok_pre *kids;
    size_t n_kids;
    tok_pattern pat;            /* Split; ByteLevel's GPT-2 regex */
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space;      /* ByteLevel */
    bool use_regex;             /* ByteLevel */
    uint32_t replacement;       /* Metaspace */
    tok_prepend_scheme prepend; /* Metaspace */
    bool split;                 /* Metaspace */
    bool individual_digits;     /* Digits */
} tok_pre;

typedef enum {
    TOK_DEC_SEQUENCE, TOK_DEC_BYTELEVEL, TOK_DEC_BYTEFALLBACK, TOK_DEC_FUSE,
    TOK_DEC_STRIP, TOK_DEC_REPLACE, TOK_DEC_METASPACE
} tok_dec_type;

typedef struct tok_dec {
    tok_dec_type type;
    struct tok_dec *kids;
    size_t n_kids;
    tok_pattern pat;      /* Replace */
    char *content;        /* Replace */
    size_t content_len;
    uint32_t ch;          /* Strip content / Metaspace replacement */
    size_t start, stop;   /* Strip */
    tok_prepend_scheme prepend; /* Metaspace */
} tok_dec;

/* Post-processor, flattened: the template for a single sequence. */
typedef struct tok_tmpl_item {
    bool is_seq;   /* the input ids go here */
    int32_t *ids;  /* else these special ids */
    size_t n_ids;
} tok_tmpl_item;

typedef struct tok_added {
    int32_t id;
    char *content;
    size_t len;
    bool special, single_word, lstrip, rstrip, normalized;
} tok_added;

/* Byte trie over added-token contents, for leftmost-longest matching. */
typedef struct tok_trie_node {
    int32_t first_child, next_sibling;
    int32_t added; /* index into tok->added, -1 if no token ends here */
    unsigned char byte;
} tok_trie_node;

typedef struct tok_trie {
    tok_trie_node *nodes;
    size_t n, cap;
    int32_t root[256]; /* child of the root for each first byte, -1 if none */
} tok_trie;

/* GPT-2 bytes_to_unicode and its inverse (code points < 256 + 68). */
typedef struct tok_byte_alphabet {
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[256 + 68]; /* -1: not in the alphabet */
} tok_byte_alphabet;

struct okv_tok {
    /* model: BPE */
    tok_map vocab;            /* model vocab: string -> id */
    tok_merges merges;
    int32_t unk_id;           /* -1 if none */
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t byte_ids[256];    /* <0xXX> ids, -1 if absent */
    int32_t *bmp_ids;         /* [0x10000]: id of each one-character token of the BMP, -1 if none */
    char *cont_prefix, *eow_suffix; /* continuing_subword_prefix, end_of_word_suffix */
    size_t cont_prefix_len, eow_suffix_len;

    /* id -> token string (added tokens override the model vocab) */
    char **id_str;
    uint32_t *id_len;
    uint8_t *id_flags;        /* TOK_ID_* */
    size_t vocab_size;

    tok_added *added;
    size_t n_added;
    tok_map added_map;        /* content -> id */
    tok_trie trie_raw, trie_norm; /* non-normalized / normalized added tokens */

    tok_norm *norm;           /* NULL = none */
    tok_pre *pre;
    tok_dec *dec;
    tok_tmpl_item *tmpl;      /* NULL = no template */
    size_t n_tmpl;
    bool has_byte_fallback_dec; /* stream must hold open byte runs */
    tok_byte_alphabet bytes;
};

enum { TOK_ID_ADDED = 1, TOK_ID_SPECIAL = 2 };

/* ---- functions shared between files ------------------------------------ */

okv_status tok_scratch_init(tok_scratch *s, okv_error *err);
void tok_scratch_free(tok_scratch *s);
/* Sets out to the spans of pattern p over s[0..n): matches and the gaps
 * between them, in order, covering all of s (an empty literal matches
 * nothing, so it yields one span). */
okv_status tok_pattern_scan(const tok_pattern *p, tok_scratch *sc, const char *s, size_t n,
                            tok_spans *out, okv_error *err);
void tok_pattern_free(tok_pattern *p);
okv_status tok_regex_compile(const char *pattern, size_t len, pcre2_code **out, const char *what,
                             okv_error *err);

/* Components of an untrusted tokenizer.json can expand text without bound
 * (a Replace with a long content, a Sequence of them, Prepend): every
 * expanding step of encode and decode keeps its output within
 * tok_expand_max(n) bytes of the n bytes the call started from, and fails
 * naming the step otherwise. Real tokenizers stay far below: NFKC expands
 * at most ~11x (U+FDFA, 3 -> 33 bytes), Metaspace's replacement 3x. */
#define TOK_EXPAND_FACTOR 64
#define TOK_EXPAND_SLACK 4096
static inline size_t tok_expand_max(size_t n) {
    return n > (SIZE_MAX - TOK_EXPAND_SLACK) / TOK_EXPAND_FACTOR ? SIZE_MAX : n * TOK_EXPAND_FACTOR + TOK_EXPAND_SLACK;
}

/* Appends the normalization of s[0..n) to out (at most tok_expand_max(n)
 * bytes). */
okv_status tok_normalize(const tok_norm *nm, tok_scratch *sc, const char *s, size_t n,
                         okv_buf *out, okv_error *err);
void tok_norm_free(tok_norm *nm);
void tok_pre_free(tok_pre *p);
void tok_dec_free(tok_dec *d);

/* Per-encode-call BPE state: reusable symbol/heap arrays and a cache of
 * short words already encoded in this call (text repeats words a lot). */
typedef struct tok_bpe_scratch {
    void *syms, *heap;
    size_t syms_cap, heap_cap;
    okv_buf key;
    /* cache: open addressing over (key bytes -> ids), both in arenas */
    uint64_t *c_hash; /* 0 = empty */
    uint32_t *c_koff, *c_klen, *c_voff, *c_vlen;
    size_t c_cap, c_n;
    okv_buf c_keys;
    int32_t *c_vals;
    size_t c_nvals, c_capvals;
} tok_bpe_scratch;

void tok_bpe_scratch_free(tok_bpe_scratch *b);

/* BPE of one pre-token (word) s[0..n); appends ids to *ids. */
okv_status tok_bpe_word(const okv_tok *tok, tok_bpe_scratch *b, const char *s, size_t n, int32_t **ids,
                        size_t *n_ids, size_t *cap, okv_error *err);

void tok_byte_alphabet_init(tok_byte_alphabet *a);

#endif
