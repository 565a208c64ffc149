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
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 32;
        sym *p = realloc(w->s, cap * sizeof *p);
        if (!p) { w->oom = true; return; }
        w->s = p;
        w->cap = cap;
    }
    int32_t i = (int32_t)w->n++;
    w->s[i] = (sym){id, i - 1, -1, false};
    if (i > 0) w->s[i - 1].next = i;
}

static bool cand_less(cand a, cand b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void heap_push(word *w, cand c) {
    if (w->oom) return;
    if (w->hn == w->hcap) {
        size_t cap = w->hcap ? w->hcap * 2 : 32;
        cand *p = realloc(w->h, cap * sizeof *p);
        if (!p) { w->oom = true; return; }
        w->h = p;
        w->hcap = cap;
    }
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
static void initial_symbols(const okv_tok *tok, const char *s, size_t n, word *w, tok_buf *key) {
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
            if (!first && tok->cont_prefix) tok_buf_put(key, tok->cont_prefix, tok->cont_prefix_len);
            tok_buf_put(key, ch, cl);
            if (last && tok->eow_suffix) tok_buf_put(key, tok->eow_suffix, tok->eow_suffix_len);
            id = key->oom ? -1 : tok_map_get(&tok->vocab, key->data, key->len);
        } else {
            id = tok_map_get(&tok->vocab, ch, cl);
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

okv_status tok_bpe_word(const okv_tok *tok, const char *s, size_t n, int32_t **ids, size_t *n_ids,
                        size_t *cap, okv_error *err) {
    int32_t whole = tok->ignore_merges ? tok_map_get(&tok->vocab, s, n) : -1;
    word w = {0};
    tok_buf key = {0};
    if (whole >= 0) word_add(&w, whole);
    else {
        initial_symbols(tok, s, n, &w, &key);
        merge_all(tok, &w);
    }
    okv_status st = OKV_OK;
    if (w.oom || key.oom) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory in BPE");
    for (int32_t i = w.n ? 0 : -1; !st && i >= 0; i = w.s[i].next) {
        if (*n_ids == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            int32_t *p = realloc(*ids, nc * sizeof *p);
            if (!p) { st = okv_fail(err, OKV_ERR_NOMEM, "out of memory in BPE"); break; }
            *ids = p;
            *cap = nc;
        }
        (*ids)[(*n_ids)++] = w.s[i].id;
    }
    free(w.s);
    free(w.h);
    tok_buf_free(&key);
    return st;
}
