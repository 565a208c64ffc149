/* okv_grammar_vocab.c — the vocabulary as a byte trie, and the token mask
 * computed by walking it from a matcher's state.
 *
 * Checking each of 49k-262k tokens separately would re-walk every shared
 * prefix (most tokens share their first bytes with thousands of others).
 * The trie is stored as a preorder array: node i is followed by its
 * subtree, and skip is the index just after that subtree. The walk keeps
 * one matcher state per depth: a node's state is its parent's (the state
 * at depth-1, still in place because preorder visits a node right after
 * its ancestors) fed with the node's byte; when the byte is rejected the
 * whole subtree is skipped in one jump. Every token ending at an accepted
 * node is allowed.
 *
 * Built once per tokenizer (sorting the token byte strings puts shared
 * prefixes next to each other, so the preorder array comes out of one
 * pass) and then read-only: one vocab serves every sequence. */
#include <stdlib.h>

#include "okv_common.h"
#include "okv_grammar_internal.h"

#define GV_MAX_TOKEN_BYTES 1024   /* longer tokens are never allowed (no tokenizer has them) */

typedef struct gv_node {
    int32_t skip;     /* index just after this node's subtree */
    int32_t tok;      /* first token whose bytes end here, -1 */
    uint16_t depth;   /* 1 = a first byte */
    uint8_t byte;
} gv_node;

struct okv_grammar_vocab {
    int32_t n;
    char *bytes;          /* token i: bytes[off[i] .. off[i+1]) */
    size_t *off;          /* [n + 1] */
    gv_node *nodes;
    int32_t n_nodes;
    int32_t *tok_next;    /* [n] next token with the same bytes, -1 */
    int32_t max_len;      /* longest token in the trie, bytes */
};

typedef struct gv_entry {
    const unsigned char *p;
    size_t len;
    int32_t id;
} gv_entry;

static int entry_cmp(const void *a, const void *b) {
    const gv_entry *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static size_t common_prefix(const gv_entry *a, const gv_entry *b) {
    size_t n = a->len < b->len ? a->len : b->len, i = 0;
    while (i < n && a->p[i] == b->p[i]) i++;
    return i;
}

/* Builds the preorder trie from the entries sorted by bytes. path[d-1] is
 * the node at depth d on the current token's path; nodes popped off the
 * path get their skip (their subtree is complete). */
static okv_status build_trie(okv_grammar_vocab *v, gv_entry *e, size_t n, size_t total, okv_error *err) {
    v->nodes = malloc((total ? total : 1) * sizeof *v->nodes);
    if (!v->nodes) return okv_fail(err, OKV_ERR_NOMEM, "out of memory (token trie of %zu nodes)", total);
    int32_t path[GV_MAX_TOKEN_BYTES];
    size_t depth = 0;
    int32_t count = 0;
    for (size_t k = 0; k < n; k++) {
        size_t keep = k ? common_prefix(&e[k - 1], &e[k]) : 0;
        if (keep > depth) keep = depth;
        while (depth > keep) v->nodes[path[--depth]].skip = count;
        for (; depth < e[k].len; depth++) {
            v->nodes[count] = (gv_node){0, -1, (uint16_t)(depth + 1), e[k].p[depth]};
            path[depth] = count++;
        }
        gv_node *end = &v->nodes[path[depth - 1]];
        v->tok_next[e[k].id] = end->tok;     /* ids sorted ascending: the chain ends up descending; order is irrelevant */
        end->tok = e[k].id;
    }
    while (depth > 0) v->nodes[path[--depth]].skip = count;
    v->n_nodes = count;
    return OKV_OK;
}

okv_status okv_grammar_vocab_create(int32_t n, const char *const *bytes, const size_t *lens, okv_grammar_vocab **out,
                                    okv_error *err) {
    *out = NULL;
    if (n < 0 || (n && (!bytes || !lens))) return okv_fail(err, OKV_ERR_INVALID, "okv_grammar_vocab_create: bad arguments");
    okv_grammar_vocab *v = calloc(1, sizeof *v);
    gv_entry *e = malloc(((size_t)n + 1) * sizeof *e);
    if (v) {
        v->n = n;
        v->off = malloc(((size_t)n + 1) * sizeof *v->off);
        v->tok_next = malloc(((size_t)n + 1) * sizeof *v->tok_next);
    }
    okv_status st = v && e && v->off && v->tok_next ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    size_t total = 0, in_trie = 0, n_e = 0;
    for (int32_t i = 0; !st && i < n; i++) {
        size_t len = bytes[i] ? lens[i] : 0;
        if (len > SIZE_MAX / 2 - total) st = okv_fail(err, OKV_ERR_INVALID, "okv_grammar_vocab_create: token sizes overflow");
        else total += len;
    }
    if (!st) v->bytes = malloc(total ? total : 1);
    if (!st && !v->bytes) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory (%zu bytes of tokens)", total);
    if (!st) v->off[0] = 0;
    for (int32_t i = 0; !st && i < n; i++) {
        size_t len = bytes[i] ? lens[i] : 0;
        if (len) memcpy(v->bytes + v->off[i], bytes[i], len);
        v->off[i + 1] = v->off[i] + len;
        v->tok_next[i] = -1;
        if (len && len <= GV_MAX_TOKEN_BYTES) {
            e[n_e++] = (gv_entry){(const unsigned char *)v->bytes + v->off[i], len, i};
            in_trie += len;
            if ((int32_t)len > v->max_len) v->max_len = (int32_t)len;
        }
    }
    if (!st && in_trie > INT32_MAX) st = okv_fail(err, OKV_ERR_INVALID, "okv_grammar_vocab_create: %zu trie bytes", in_trie);
    if (!st) {
        qsort(e, n_e, sizeof *e, entry_cmp);
        st = build_trie(v, e, n_e, in_trie, err);
    }
    free(e);
    if (st) { okv_grammar_vocab_free(v); return st; }
    *out = v;
    return OKV_OK;
}

void okv_grammar_vocab_free(okv_grammar_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->nodes);
    free(v->tok_next);
    free(v);
}

int32_t okv_grammar_vocab_size(const okv_grammar_vocab *v) { return v->n; }

const char *okv_grammar_vocab_token(const okv_grammar_vocab *v, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= v->n || v->off[id + 1] == v->off[id]) return NULL;
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

bool okv_grammar_match_feed_token(okv_grammar_match *m, const okv_grammar_vocab *v, int32_t id) {
    size_t len;
    const char *p = okv_grammar_vocab_token(v, id, &len);
    return p && okv_grammar_match_feed(m, p, len);
}

/* The trie walk itself (see the file comment). */
static void walk_mask(okv_grammar_match *m, const okv_grammar_vocab *v, uint32_t *bits) {
    memset(bits, 0, ((size_t)v->n + 31) / 32 * sizeof *bits);
    gm_state *w = m->walk;
    gm_copy(&w[0], &m->cur);
    for (int32_t i = 0; i < v->n_nodes;) {
        const gv_node *nd = &v->nodes[i];
        gm_state *s = &w[nd->depth];
        gm_copy(s, &w[nd->depth - 1]);
        if (!gm_feed_byte(m->g, s, nd->byte)) {
            i = nd->skip;
            continue;
        }
        for (int32_t t = nd->tok; t >= 0; t = v->tok_next[t]) bits[t >> 5] |= 1u << (t & 31);
        i++;
    }
}

static bool same_state(const gm_state *a, const gm_state *b) {
    return a->depth == b->depth && !memcmp(a->f, b->f, (size_t)a->depth * sizeof *a->f);
}

/* The cache entry for key, or the least recently used one (bits NULL or stale) to fill. */
static gm_cached *cache_slot(okv_grammar_match *m, const gm_state *key, bool *hit) {
    gm_cached *lru = &m->cache[0];
    for (int i = 0; i < GM_CACHE; i++) {
        gm_cached *c = &m->cache[i];
        if (c->bits && same_state(&c->key, key)) { *hit = true; return c; }
        if (!c->bits || (lru->bits && c->used < lru->used)) lru = c;
    }
    *hit = false;
    return lru;
}

okv_status okv_grammar_mask(okv_grammar_match *m, const okv_grammar_vocab *v, uint32_t *bits, okv_error *err) {
    size_t words = ((size_t)v->n + 31) / 32, need = (size_t)v->max_len + 1;
    if (m->walk_cap < need) {
        gm_state *w = realloc(m->walk, need * sizeof *w);
        if (!w) return okv_fail(err, OKV_ERR_NOMEM, "out of memory (token mask scratch)");
        m->walk = w;
        m->walk_cap = need;
    }
    if (m->cache_vocab != v) {
        gm_cache_free(m);
        m->cache_vocab = v;
    }
    gm_mask_key(m->g, &m->cur, v->max_len, &m->tmp);
    bool hit;
    gm_cached *c = cache_slot(m, &m->tmp, &hit);
    c->used = ++m->tick;
    if (hit) {
        memcpy(bits, c->bits, words * sizeof *bits);
        return OKV_OK;
    }
    walk_mask(m, v, bits);
    if (!c->bits && !(c->bits = malloc((words ? words : 1) * sizeof *c->bits))) return OKV_OK;   /* no room to cache: fine */
    memcpy(c->bits, bits, words * sizeof *bits);
    gm_copy(&c->key, &m->tmp);
    return OKV_OK;
}
