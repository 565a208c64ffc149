/* tok_bpe.c — the BPE model: one pre-token (word) in, ids out.
 *
 * Same algorithm as HF tokenizers' Word::merge_all: the word starts as one
 * symbol per character (unknown characters become <0xXX> byte tokens with
 * byte_fallback, else unk, fused if fuse_unk); symbols form a doubly linked
 * list; a binary min-heap holds candidate merges ordered by (rank, position);
 * popping applies a merge if it is still current and pushes the two new
 * neighbouring pairs. O(n log n) in the word length, never quadratic. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    bool dead;          /* merged into its left neighbour */
} sym;

typedef struct cand {
    int32_t rank, pos, new_id;
} cand;

typedef struct word {
    sym *s;
    size_t n, cap;
    cand *h;
    size_t hn, hcap;
    bool oom;
} word;

static void word_add(word *w, int32_t id) {
    if (w->oom) return;
    sym *p = okv_grow(w->s, &w->cap, w->n + 1, sizeof *p);
    if (!p) { w->oom = true; return; }
    w->s = p;
    int32_t i = (int32_t)w->n++;
    w->s[i] = (sym){id, i - 1, -1, false};
    if (i > 0) w->s[i - 1].next = i;
}

static bool cand_less(cand a, cand b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(word *w, cand c) {
    if (w->oom) return;
    cand *p = okv_grow(w->h, &w->hcap, w->hn + 1, sizeof *p);
    if (!p) { w->oom = true; return; }
    w->h = p;
    size_t i = w->hn++;
    while (i > 0 && cand_less(c, w->h[(i - 1) / 2])) {
        w->h[i] = w->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->h[i] = c;
}

static cand heap_pop(word *w) {
    cand top = w->h[0], last = w->h[--w->hn];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        cand best = last;
        if (l < w->hn && cand_less(w->h[l], best)) { m = l; best = w->h[l]; }
        if (r < w->hn && cand_less(w->h[r], best)) m = r;
        if (m == i) break;
        w->h[i] = w->h[m];
        i = m;
    }
    if (w->hn) w->h[i] = last;
    return top;
}

static void push_pair(const okv_tok *tok, word *w, int32_t left) {
    int32_t right = w->s[left].next, rank, new_id;
    if (right < 0) return;
    if (tok_merges_get(&tok->merges, w->s[left].id, w->s[right].id, &rank, &new_id))
        heap_push(w, (cand){rank, left, new_id});
}

static void merge_all(const okv_tok *tok, word *w) {
    for (size_t i = 0; i + 1 < w->n; i++) push_pair(tok, w, (int32_t)i);
    while (w->hn && !w->oom) {
        cand c = heap_pop(w);
        sym *l = &w->s[c.pos];
        if (l->dead || l->next < 0) continue;
        sym *r = &w->s[l->next];
        int32_t rank, new_id;
        /* stale entry: the pair at pos changed since it was pushed */
        if (!tok_merges_get(&tok->merges, l->id, r->id, &rank, &new_id) || new_id != c.new_id) continue;
        l->id = new_id;
        r->dead = true;
        l->next = r->next;
        if (r->next >= 0) w->s[r->next].prev = c.pos;
        if (l->prev >= 0) push_pair(tok, w, l->prev);
        push_pair(tok, w, c.pos);
    }
}

/* Splits s into per-character symbols, as HF's BPE::merge_word. */
static void initial_symbols(const okv_tok *tok, const char *s, size_t n, word *w, okv_buf *key) {
    int32_t unk = -1;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = tok_utf8_next(s + i, n - i, &cp);
        const char *ch = s + i;
        bool first = i == 0, last = i + cl == n;
        i += cl;
        int32_t id;
        if ((!first && tok->cont_prefix) || (last && tok->eow_suffix)) {
            key->len = 0;
            if (!first && tok->cont_prefix) okv_buf_put(key, tok->cont_prefix, tok->cont_prefix_len);
            okv_buf_put(key, ch, cl);
            if (last && tok->eow_suffix) okv_buf_put(key, tok->eow_suffix, tok->eow_suffix_len);
            id = key->oom ? -1 : tok_map_get(&tok->vocab, key->data, key->len);
        } else {
            id = cp < 0x10000 ? tok->bmp_ids[cp] : tok_map_get(&tok->vocab, ch, cl);
        }
        if (id >= 0) {
            if (unk >= 0) { word_add(w, unk); unk = -1; }
            word_add(w, id);
            continue;
        }
        if (tok->byte_fallback) {
            bool all = true;
            for (size_t k = 0; k < cl; k++) all = all && tok->byte_ids[(unsigned char)ch[k]] >= 0;
            if (all) { /* HF adds these without flushing a pending unk */
                for (size_t k = 0; k < cl; k++) word_add(w, tok->byte_ids[(unsigned char)ch[k]]);
                continue;
            }
        }
        if (tok->unk_id >= 0) {
            if (unk >= 0 && !tok->fuse_unk) word_add(w, unk);
            unk = tok->unk_id;
        }
        /* no byte fallback and no unk: the character is dropped, like HF */
    }
    if (unk >= 0) word_add(w, unk);
}

#define CACHE_MAX_WORD 64     /* longer words are not cached */
#define CACHE_MAX_ENTRIES 65536

static uint64_t word_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h | 1; /* never 0 (the empty mark) */
}

/* Slot of word s in the cache: its entry, or the empty slot for it. */
static size_t cache_slot(const tok_bpe_scratch *b, const char *s, size_t n, uint64_t h) {
    size_t j = h & (b->c_cap - 1);
    while (b->c_hash[j]) {
        if (b->c_hash[j] == h && b->c_klen[j] == n && memcmp(b->c_keys.data + b->c_koff[j], s, n) == 0) break;
        j = (j + 1) & (b->c_cap - 1);
    }
    return j;
}

static bool cache_init(tok_bpe_scratch *b) {
    if (b->c_cap) return true;
    size_t cap = 256; /* grows with the text */
    b->c_hash = calloc(cap, sizeof *b->c_hash);
    b->c_koff = malloc(cap * sizeof *b->c_koff);
    b->c_klen = malloc(cap * sizeof *b->c_klen);
    b->c_voff = malloc(cap * sizeof *b->c_voff);
    b->c_vlen = malloc(cap * sizeof *b->c_vlen);
    if (!b->c_hash || !b->c_koff || !b->c_klen || !b->c_voff || !b->c_vlen) {
        free(b->c_hash); free(b->c_koff); free(b->c_klen); free(b->c_voff); free(b->c_vlen);
        b->c_hash = NULL; b->c_koff = b->c_klen = b->c_voff = b->c_vlen = NULL;
        return false;
    }
    b->c_cap = cap;
    return true;
}

static bool cache_grow(tok_bpe_scratch *b) {
    tok_bpe_scratch nb = {0};
    size_t cap = b->c_cap * 2;
    nb.c_hash = calloc(cap, sizeof *nb.c_hash);
    nb.c_koff = malloc(cap * sizeof *nb.c_koff);
    nb.c_klen = malloc(cap * sizeof *nb.c_klen);
    nb.c_voff = malloc(cap * sizeof *nb.c_voff);
    nb.c_vlen = malloc(cap * sizeof *nb.c_vlen);
    bool ok = nb.c_hash && nb.c_koff && nb.c_klen && nb.c_voff && nb.c_vlen;
    for (size_t i = 0; ok && i < b->c_cap; i++) {
        if (!b->c_hash[i]) continue;
        size_t j = b->c_hash[i] & (cap - 1);
        while (nb.c_hash[j]) j = (j + 1) & (cap - 1);
        nb.c_hash[j] = b->c_hash[i];
        nb.c_koff[j] = b->c_koff[i];
        nb.c_klen[j] = b->c_klen[i];
        nb.c_voff[j] = b->c_voff[i];
        nb.c_vlen[j] = b->c_vlen[i];
    }
    if (ok) {
        free(b->c_hash); free(b->c_koff); free(b->c_klen); free(b->c_voff); free(b->c_vlen);
        b->c_hash = nb.c_hash; b->c_koff = nb.c_koff; b->c_klen = nb.c_klen;
        b->c_voff = nb.c_voff; b->c_vlen = nb.c_vlen;
        b->c_cap = cap;
    } else {
        free(nb.c_hash); free(nb.c_koff); free(nb.c_klen); free(nb.c_voff); free(nb.c_vlen);
    }
    return ok;
}

/* Remembers ids[0..n) for word s; failure only means no caching. */
static void cache_put(tok_bpe_scratch *b, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t m) {
    /* keep the table at most half full, so probing always ends */
    if (b->c_n >= CACHE_MAX_ENTRIES || ((b->c_n + 1) * 2 > b->c_cap && !cache_grow(b))) return;
    size_t slot = cache_slot(b, s, n, h);
    int32_t *v = okv_grow(b->c_vals, &b->c_capvals, b->c_nvals + m, sizeof *v);
    if (!v) return;
    b->c_vals = v;
    size_t koff = b->c_keys.len;
    okv_buf_put(&b->c_keys, s, n);
    if (b->c_keys.oom) return;
    if (m) memcpy(b->c_vals + b->c_nvals, ids, m * sizeof *ids); /* m = 0: a word with no ids, c_vals may be NULL */
    b->c_hash[slot] = h;
    b->c_koff[slot] = (uint32_t)koff;
    b->c_klen[slot] = (uint32_t)n;
    b->c_voff[slot] = (uint32_t)b->c_nvals;
    b->c_vlen[slot] = (uint32_t)m;
    b->c_nvals += m;
    b->c_n++;
}

static bool ids_reserve(int32_t **ids, size_t *cap, size_t need) {
    int32_t *p = okv_grow(*ids, cap, need, sizeof *p);
    if (!p) return false;
    *ids = p;
    return true;
}

okv_status tok_bpe_word(const okv_tok *tok, tok_bpe_scratch *b, const char *s, size_t n, int32_t **ids,
                        size_t *n_ids, size_t *cap, okv_error *err) {
    uint64_t h = 0;
    bool cacheable = n <= CACHE_MAX_WORD && cache_init(b);
    if (cacheable) {
        h = word_hash(s, n);
        size_t slot = cache_slot(b, s, n, h);
        if (b->c_hash[slot]) {
            size_t m = b->c_vlen[slot];
            if (!ids_reserve(ids, cap, *n_ids + m)) return okv_fail(err, OKV_ERR_NOMEM, "out of memory in BPE");
            if (m) memcpy(*ids + *n_ids, b->c_vals + b->c_voff[slot], m * sizeof **ids);
            *n_ids += m;
            return OKV_OK;
        }
    }
    int32_t whole = tok->ignore_merges ? tok_map_get(&tok->vocab, s, n) : -1;
    word w = {b->syms, 0, b->syms_cap, b->heap, 0, b->heap_cap, false};
    if (whole >= 0) word_add(&w, whole);
    else {
        initial_symbols(tok, s, n, &w, &b->key);
        merge_all(tok, &w);
    }
    b->syms = w.s;
    b->syms_cap = w.cap;
    b->heap = w.h;
    b->heap_cap = w.hcap;
    if (w.oom || b->key.oom) return okv_fail(err, OKV_ERR_NOMEM, "out of memory in BPE");
    size_t start = *n_ids;
    for (int32_t i = w.n ? 0 : -1; i >= 0; i = w.s[i].next) {
        if (!ids_reserve(ids, cap, *n_ids + 1)) return okv_fail(err, OKV_ERR_NOMEM, "out of memory in BPE");
        (*ids)[(*n_ids)++] = w.s[i].id;
    }
    if (cacheable) cache_put(b, s, n, h, *n_ids > start ? *ids + start : NULL, *n_ids - start);
    return OKV_OK;
}

void tok_bpe_scratch_free(tok_bpe_scratch *b) {
    free(b->syms);
    free(b->heap);
    okv_buf_free(&b->key);
    free(b->c_hash); free(b->c_koff); free(b->c_klen); free(b->c_voff); free(b->c_vlen);
    okv_buf_free(&b->c_keys);
    free(b->c_vals);
    memset(b, 0, sizeof *b);
}
