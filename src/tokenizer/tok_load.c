/* tok_load.c — turns an untrusted tokenizer.json into an okv_tok.
 *
 * One function per JSON component (model, added_tokens, normalizer,
 * pre_tokenizer, post_processor, decoder). Every field is type-checked and
 * every id range-checked; anything we do not implement fails here, naming
 * the component type, so encode/decode never meet an unknown case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define MAX_DEPTH 16 /* nesting of Sequence components */

typedef struct loader {
    okv_tok *tok;
    const char *what; /* file name for messages */
    okv_error *err;
} loader;

static okv_status nomem(loader *L) { return okv_fail(L->err, OKV_ERR_NOMEM, "%s: out of memory", L->what); }

static char *dup_bytes(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) { memcpy(p, s, n); p[n] = 0; }
    return p;
}

/* Strings from the file end up in text that PCRE2 scans without a UTF
 * check and in decoded output, so they must be valid UTF-8. */
static okv_status check_utf8(loader *L, const char *s, size_t n, const char *where) {
    if (tok_utf8_valid_prefix(s, n) != n)
        return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s is not valid UTF-8", L->what, where);
    return OKV_OK;
}

/* The "type" of a component object, or an error naming `kind`. */
/* The "type" of a pipeline component at nesting depth (bounded). */
static okv_status component_type(loader *L, const cJSON *j, const char *kind, int depth, const char **type) {
    if (!cJSON_IsObject(j)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s must be an object or null", L->what, kind);
    *type = okv_json_str(j, "type");
    if (!*type) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s has no string \"type\"", L->what, kind);
    if (depth > MAX_DEPTH) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s nesting too deep", L->what, kind);
    return OKV_OK;
}

static okv_status unsupported(loader *L, const char *kind, const char *type) {
    return okv_fail(L->err, OKV_ERR_UNSUPPORTED, "%s: unsupported %s type \"%s\"", L->what, kind, type);
}

static okv_status opt_bool(loader *L, const cJSON *j, const char *key, bool dflt, bool *out, const char *kind) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) { *out = dflt; return OKV_OK; }
    if (!cJSON_IsBool(v)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s field \"%s\" must be true or false", L->what, kind, key);
    *out = cJSON_IsTrue(v);
    return OKV_OK;
}

static okv_status opt_count(loader *L, const cJSON *j, const char *key, size_t dflt, size_t *out, const char *kind) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) { *out = dflt; return OKV_OK; }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e6 || v->valuedouble != (double)(int)v->valuedouble)
        return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s field \"%s\" must be a small non-negative integer", L->what, kind, key);
    *out = (size_t)v->valuedouble;
    return OKV_OK;
}

static okv_status req_string(loader *L, const cJSON *j, const char *key, const char **out, const char *kind) {
    *out = okv_json_str(j, key);
    if (!*out) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s field \"%s\" must be a string", L->what, kind, key);
    return OKV_OK;
}

/* A one-character string (Metaspace replacement, Strip content). */
static okv_status req_char(loader *L, const cJSON *j, const char *key, uint32_t *cp, const char *kind) {
    const char *s;
    okv_status st = req_string(L, j, key, &s, kind);
    if (st) return st;
    size_t n = strlen(s);
    if (n == 0 || tok_utf8_valid_prefix(s, n) != n || tok_utf8_next(s, n, cp) != n)
        return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s field \"%s\" must be exactly one character", L->what, kind, key);
    return OKV_OK;
}

/* {"String": "..."} or {"Regex": "..."} */
static okv_status load_pattern(loader *L, const cJSON *j, tok_pattern *p, const char *kind) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    if (!cJSON_IsObject(pat))
        return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s field \"pattern\" must be an object", L->what, kind);
    const char *s = okv_json_str(pat, "String");
    if (s) {
        p->lit_len = strlen(s);
        okv_status st = check_utf8(L, s, p->lit_len, kind);
        if (st) return st;
        p->lit = dup_bytes(s, p->lit_len);
        return p->lit ? OKV_OK : nomem(L);
    }
    s = okv_json_str(pat, "Regex");
    if (!s) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s pattern must have a string \"String\" or \"Regex\"", L->what, kind);
    char what[256];
    snprintf(what, sizeof what, "%s: %s", L->what, kind);
    return tok_regex_compile(s, strlen(s), &p->re, what, L->err);
}

static okv_status load_prepend_scheme(loader *L, const cJSON *j, tok_prepend_scheme *out, const char *kind) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
    if (v && !cJSON_IsNull(v)) {
        const char *s = cJSON_IsString(v) ? v->valuestring : "";
        if (!strcmp(s, "first")) *out = TOK_PREPEND_FIRST;
        else if (!strcmp(s, "always")) *out = TOK_PREPEND_ALWAYS;
        else if (!strcmp(s, "never")) *out = TOK_PREPEND_NEVER;
        else return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s prepend_scheme must be \"first\", \"always\" or \"never\"", L->what, kind);
        return OKV_OK;
    }
    bool aps = true; /* legacy form */
    okv_status st = opt_bool(L, j, "add_prefix_space", true, &aps, kind);
    *out = aps ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    return st;
}

/* Loads the array j[key] into *kids by calling one(L, item, kid, depth). */
#define LOAD_KIDS(T, one, j, key, kidsp, nkidsp, kind, depth)                                        \
    do {                                                                                            \
        const cJSON *arr_ = cJSON_GetObjectItemCaseSensitive(j, key);                               \
        if (!cJSON_IsArray(arr_))                                                                   \
            return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s field \"%s\" must be an array", L->what, kind, key); \
        size_t n_ = (size_t)cJSON_GetArraySize(arr_);                                               \
        *(kidsp) = calloc(n_ ? n_ : 1, sizeof(T));                                                  \
        if (!*(kidsp)) return nomem(L);                                                             \
        const cJSON *it_;                                                                           \
        cJSON_ArrayForEach(it_, arr_) {                                                             \
            okv_status st_ = one(L, it_, &(*(kidsp))[*(nkidsp)], (depth) + 1);                      \
            (*(nkidsp))++;                                                                          \
            if (st_) return st_;                                                                    \
        }                                                                                           \
    } while (0)

/* A required string field that must be UTF-8 (`where` names it in that
 * error), copied out with its length. */
static okv_status load_text(loader *L, const cJSON *j, const char *key, const char *kind, const char *where, char **out,
                            size_t *len) {
    const char *c;
    okv_status st = req_string(L, j, key, &c, kind);
    if (st) return st;
    *len = strlen(c);
    if ((st = check_utf8(L, c, *len, where))) return st;
    if (!(*out = dup_bytes(c, *len))) return nomem(L);
    return OKV_OK;
}

/* ---- normalizer ----------------------------------------------------------- */

static okv_status load_norm(loader *L, const cJSON *j, tok_norm *nm, int depth) {
    const char *type;
    okv_status st = component_type(L, j, "normalizer", depth, &type);
    if (st) return st;
    if (!strcmp(type, "Sequence")) {
        nm->type = TOK_NORM_SEQUENCE;
        LOAD_KIDS(tok_norm, load_norm, j, "normalizers", &nm->kids, &nm->n_kids, "Sequence normalizer", depth);
    } else if (!strcmp(type, "NFC")) nm->type = TOK_NORM_NFC;
    else if (!strcmp(type, "NFKC")) nm->type = TOK_NORM_NFKC;
    else if (!strcmp(type, "NFD")) nm->type = TOK_NORM_NFD;
    else if (!strcmp(type, "NFKD")) nm->type = TOK_NORM_NFKD;
    else if (!strcmp(type, "Replace")) {
        nm->type = TOK_NORM_REPLACE;
        if ((st = load_pattern(L, j, &nm->pat, "Replace normalizer"))) return st;
        return load_text(L, j, "content", "Replace normalizer", "normalizer content", &nm->content, &nm->content_len);
    } else if (!strcmp(type, "Prepend")) {
        nm->type = TOK_NORM_PREPEND;
        return load_text(L, j, "prepend", "Prepend normalizer", "normalizer content", &nm->content, &nm->content_len);
    } else if (!strcmp(type, "Strip")) {
        nm->type = TOK_NORM_STRIP;
        if ((st = opt_bool(L, j, "strip_left", true, &nm->left, "Strip normalizer"))) return st;
        if ((st = opt_bool(L, j, "strip_right", true, &nm->right, "Strip normalizer"))) return st;
    } else return unsupported(L, "normalizer", type);
    return OKV_OK;
}

/* ---- pre-tokenizer ------------------------------------------------------ */

static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static okv_status load_pre(loader *L, const cJSON *j, tok_pre *p, int depth) {
    const char *type;
    okv_status st = component_type(L, j, "pre_tokenizer", depth, &type);
    if (st) return st;
    if (!strcmp(type, "Sequence")) {
        p->type = TOK_PRE_SEQUENCE;
        LOAD_KIDS(tok_pre, load_pre, j, "pretokenizers", &p->kids, &p->n_kids, "Sequence pre_tokenizer", depth);
    } else if (!strcmp(type, "Split")) {
        const char *b;
        p->type = TOK_PRE_SPLIT;
        if ((st = load_pattern(L, j, &p->pat, "Split pre_tokenizer"))) return st;
        if ((st = req_string(L, j, "behavior", &b, "Split pre_tokenizer"))) return st;
        if (!strcmp(b, "Removed")) p->behavior = TOK_SPLIT_REMOVED;
        else if (!strcmp(b, "Isolated")) p->behavior = TOK_SPLIT_ISOLATED;
        else if (!strcmp(b, "MergedWithPrevious")) p->behavior = TOK_SPLIT_PREV;
        else if (!strcmp(b, "MergedWithNext")) p->behavior = TOK_SPLIT_NEXT;
        else if (!strcmp(b, "Contiguous")) p->behavior = TOK_SPLIT_CONTIGUOUS;
        else return okv_fail(L->err, OKV_ERR_FORMAT, "%s: Split pre_tokenizer has unknown behavior \"%s\"", L->what, b);
        if ((st = opt_bool(L, j, "invert", false, &p->invert, "Split pre_tokenizer"))) return st;
    } else if (!strcmp(type, "ByteLevel")) {
        p->type = TOK_PRE_BYTELEVEL;
        if ((st = opt_bool(L, j, "add_prefix_space", true, &p->add_prefix_space, "ByteLevel pre_tokenizer"))) return st;
        if ((st = opt_bool(L, j, "use_regex", true, &p->use_regex, "ByteLevel pre_tokenizer"))) return st;
        if (p->use_regex && (st = tok_regex_compile(GPT2_REGEX, strlen(GPT2_REGEX), &p->pat.re, L->what, L->err)))
            return st;
    } else if (!strcmp(type, "Metaspace")) {
        p->type = TOK_PRE_METASPACE;
        if ((st = req_char(L, j, "replacement", &p->replacement, "Metaspace pre_tokenizer"))) return st;
        if ((st = load_prepend_scheme(L, j, &p->prepend, "Metaspace pre_tokenizer"))) return st;
        if ((st = opt_bool(L, j, "split", true, &p->split, "Metaspace pre_tokenizer"))) return st;
    } else if (!strcmp(type, "Digits")) {
        p->type = TOK_PRE_DIGITS;
        if ((st = opt_bool(L, j, "individual_digits", false, &p->individual_digits, "Digits pre_tokenizer"))) return st;
    } else return unsupported(L, "pre_tokenizer", type);
    return OKV_OK;
}

/* ---- decoder -------------------------------------------------------------- */

static okv_status load_dec(loader *L, const cJSON *j, tok_dec *d, int depth) {
    const char *type;
    okv_status st = component_type(L, j, "decoder", depth, &type);
    if (st) return st;
    if (!strcmp(type, "Sequence")) {
        d->type = TOK_DEC_SEQUENCE;
        LOAD_KIDS(tok_dec, load_dec, j, "decoders", &d->kids, &d->n_kids, "Sequence decoder", depth);
    } else if (!strcmp(type, "ByteLevel")) d->type = TOK_DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) {
        d->type = TOK_DEC_BYTEFALLBACK;
        L->tok->has_byte_fallback_dec = true;
    } else if (!strcmp(type, "Fuse")) d->type = TOK_DEC_FUSE;
    else if (!strcmp(type, "Strip")) {
        d->type = TOK_DEC_STRIP;
        if ((st = req_char(L, j, "content", &d->ch, "Strip decoder"))) return st;
        if ((st = opt_count(L, j, "start", 0, &d->start, "Strip decoder"))) return st;
        if ((st = opt_count(L, j, "stop", 0, &d->stop, "Strip decoder"))) return st;
    } else if (!strcmp(type, "Replace")) {
        d->type = TOK_DEC_REPLACE;
        if ((st = load_pattern(L, j, &d->pat, "Replace decoder"))) return st;
        return load_text(L, j, "content", "Replace decoder", "Replace decoder content", &d->content, &d->content_len);
    } else if (!strcmp(type, "Metaspace")) {
        d->type = TOK_DEC_METASPACE;
        if ((st = req_char(L, j, "replacement", &d->ch, "Metaspace decoder"))) return st;
        if ((st = load_prepend_scheme(L, j, &d->prepend, "Metaspace decoder"))) return st;
    } else return unsupported(L, "decoder", type);
    return OKV_OK;
}

/* ---- post-processor ------------------------------------------------------- */

/* TemplateProcessing: we keep the "single" template, resolving each
 * SpecialToken through "special_tokens" to its ids. */
static okv_status load_template(loader *L, const cJSON *j) {
    okv_tok *tok = L->tok;
    if (tok->tmpl) return okv_fail(L->err, OKV_ERR_UNSUPPORTED, "%s: more than one TemplateProcessing post_processor", L->what);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsArray(single))
        return okv_fail(L->err, OKV_ERR_FORMAT, "%s: TemplateProcessing field \"single\" must be an array", L->what);
    if (specials && !cJSON_IsNull(specials) && !cJSON_IsObject(specials))
        return okv_fail(L->err, OKV_ERR_FORMAT, "%s: TemplateProcessing field \"special_tokens\" must be an object", L->what);
    size_t n = (size_t)cJSON_GetArraySize(single);
    tok->tmpl = calloc(n ? n : 1, sizeof *tok->tmpl);
    if (!tok->tmpl) return nomem(L);
    const cJSON *it;
    cJSON_ArrayForEach(it, single) {
        tok_tmpl_item *item = &tok->tmpl[tok->n_tmpl++];
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if (cJSON_IsObject(seq)) {
            const char *id = okv_json_str(seq, "id");
            if (!id || strcmp(id, "A"))
                return okv_fail(L->err, OKV_ERR_FORMAT, "%s: TemplateProcessing single template may only use Sequence \"A\"", L->what);
            item->is_seq = true;
            continue;
        }
        const char *name = cJSON_IsObject(sp) ? okv_json_str(sp, "id") : NULL;
        if (!name) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: TemplateProcessing item must be a Sequence or a SpecialToken with a string id", L->what);
        const cJSON *def = cJSON_GetObjectItemCaseSensitive(specials, name);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids");
        if (!cJSON_IsArray(ids))
            return okv_fail(L->err, OKV_ERR_FORMAT, "%s: TemplateProcessing special token \"%s\" has no \"ids\" array in special_tokens", L->what, name);
        size_t m = (size_t)cJSON_GetArraySize(ids);
        item->ids = malloc((m ? m : 1) * sizeof *item->ids);
        if (!item->ids) return nomem(L);
        const cJSON *v;
        cJSON_ArrayForEach(v, ids) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= (double)tok->vocab_size ||
                v->valuedouble != (double)(int32_t)v->valuedouble)
                return okv_fail(L->err, OKV_ERR_FORMAT, "%s: TemplateProcessing special token \"%s\" has an id out of range", L->what, name);
            item->ids[item->n_ids++] = (int32_t)v->valuedouble;
        }
    }
    return OKV_OK;
}

static okv_status load_post(loader *L, const cJSON *j, int depth) {
    const char *type;
    okv_status st = component_type(L, j, "post_processor", depth, &type);
    if (st) return st;
    if (!strcmp(type, "ByteLevel")) return OKV_OK; /* only moves offsets */
    if (!strcmp(type, "TemplateProcessing")) return load_template(L, j);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "processors"), *it;
        if (!cJSON_IsArray(arr))
            return okv_fail(L->err, OKV_ERR_FORMAT, "%s: Sequence post_processor field \"processors\" must be an array", L->what);
        cJSON_ArrayForEach(it, arr) {
            if ((st = load_post(L, it, depth + 1))) return st;
        }
        return OKV_OK;
    }
    return unsupported(L, "post_processor", type);
}

/* ---- model (BPE) ---------------------------------------------------------- */

static okv_status json_id(loader *L, const cJSON *v, int32_t *id, const char *where) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= TOK_MAX_ID ||
        v->valuedouble != (double)(int32_t)v->valuedouble)
        return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s: id must be an integer in [0, %d)", L->what, where, TOK_MAX_ID);
    *id = (int32_t)v->valuedouble;
    return OKV_OK;
}

static okv_status opt_affix(loader *L, const cJSON *model, const char *key, char **out, size_t *len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, key);
    if (!v || cJSON_IsNull(v)) return OKV_OK;
    if (!cJSON_IsString(v)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: model field \"%s\" must be a string or null", L->what, key);
    *len = strlen(v->valuestring);
    if (*len == 0) return OKV_OK;
    return (*out = dup_bytes(v->valuestring, *len)) ? OKV_OK : nomem(L);
}

static okv_status load_vocab(loader *L, const cJSON *vocab, int32_t *max_id) {
    okv_tok *tok = L->tok;
    if (!cJSON_IsObject(vocab)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.vocab must be an object", L->what);
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        int32_t id = 0;
        const char *key = it->string ? it->string : "";
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= TOK_MAX_ID ||
            it->valuedouble != (double)(int32_t)it->valuedouble)
            return okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.vocab[\"%.40s\"]: id must be an integer in [0, %d)",
                            L->what, key, TOK_MAX_ID);
        id = (int32_t)it->valuedouble;
        okv_status st = check_utf8(L, key, strlen(key), "a model.vocab key");
        if (st) return st;
        if (!tok_map_put(&tok->vocab, key, strlen(key), id)) return nomem(L);
        if (id > *max_id) *max_id = id;
    }
    return OKV_OK;
}

/* A merge is "a b" or ["a", "b"]; both and their concatenation must be in
 * the vocab. Later duplicates overwrite earlier ones (as HF's HashMap). */
static okv_status load_merges(loader *L, const cJSON *merges) {
    okv_tok *tok = L->tok;
    if (!cJSON_IsArray(merges)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.merges must be an array", L->what);
    okv_buf cat = {0};
    int32_t rank = 0;
    const cJSON *it;
    okv_status st = OKV_OK;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t na, nb;
        if (cJSON_IsString(it)) {
            a = it->valuestring;
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.merges[%d] must be two tokens separated by one space", L->what, rank);
                break;
            }
            na = (size_t)(sp - a);
            b = sp + 1;
            nb = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            a = it->child->valuestring;
            b = it->child->next->valuestring;
            na = strlen(a);
            nb = strlen(b);
        } else {
            st = okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.merges[%d] must be a string \"a b\" or a pair of strings", L->what, rank);
            break;
        }
        int32_t ia = tok_map_get(&tok->vocab, a, na), ib = tok_map_get(&tok->vocab, b, nb);
        if (ia < 0 || ib < 0) {
            st = okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.merges[%d]: token \"%.*s\" is not in the vocab", L->what, rank,
                          (int)(ia < 0 ? na : nb), ia < 0 ? a : b);
            break;
        }
        size_t skip = tok->cont_prefix_len;
        if (nb < skip) {
            st = okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.merges[%d]: second token shorter than continuing_subword_prefix", L->what, rank);
            break;
        }
        cat.len = 0;
        okv_buf_put(&cat, a, na);
        okv_buf_put(&cat, b + skip, nb - skip);
        if (cat.oom) { st = nomem(L); break; }
        int32_t id = tok_map_get(&tok->vocab, cat.data, cat.len);
        if (id < 0) {
            st = okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.merges[%d]: merged token \"%.*s\" is not in the vocab", L->what, rank,
                          (int)cat.len, cat.data);
            break;
        }
        if (!tok_merges_put(&tok->merges, ia, ib, rank, id)) { st = nomem(L); break; }
        rank++;
    }
    okv_buf_free(&cat);
    return st;
}

static okv_status load_model(loader *L, const cJSON *model, int32_t *max_id) {
    okv_tok *tok = L->tok;
    if (!cJSON_IsObject(model)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: \"model\" must be an object", L->what);
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (tv && !cJSON_IsString(tv)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: model \"type\" must be a string", L->what);
    if (tv && strcmp(tv->valuestring, "BPE")) return unsupported(L, "model", tv->valuestring);
    okv_status st;
    double dropout;
    if ((st = okv_json_opt_double(model, "dropout", &dropout, 0.0, L->what, L->err))) return st;
    if (dropout > 0.0 && dropout < 1.0)
        return okv_fail(L->err, OKV_ERR_UNSUPPORTED, "%s: BPE dropout %g is not supported (encoding must be deterministic)", L->what, dropout);
    if ((st = opt_bool(L, model, "byte_fallback", false, &tok->byte_fallback, "model"))) return st;
    if ((st = opt_bool(L, model, "fuse_unk", false, &tok->fuse_unk, "model"))) return st;
    if ((st = opt_bool(L, model, "ignore_merges", false, &tok->ignore_merges, "model"))) return st;
    if ((st = opt_affix(L, model, "continuing_subword_prefix", &tok->cont_prefix, &tok->cont_prefix_len))) return st;
    if ((st = opt_affix(L, model, "end_of_word_suffix", &tok->eow_suffix, &tok->eow_suffix_len))) return st;
    if ((st = load_vocab(L, cJSON_GetObjectItemCaseSensitive(model, "vocab"), max_id))) return st;
    if ((st = load_merges(L, cJSON_GetObjectItemCaseSensitive(model, "merges")))) return st;

    tok->unk_id = -1;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (unk && !cJSON_IsNull(unk)) {
        if (!cJSON_IsString(unk)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.unk_token must be a string or null", L->what);
        tok->unk_id = tok_map_get(&tok->vocab, unk->valuestring, strlen(unk->valuestring));
        if (tok->unk_id < 0)
            return okv_fail(L->err, OKV_ERR_FORMAT, "%s: model.unk_token \"%s\" is not in the vocab", L->what, unk->valuestring);
    }
    /* one-character tokens, looked up directly when splitting words */
    if (!(tok->bmp_ids = malloc(0x10000 * sizeof *tok->bmp_ids))) return nomem(L);
    for (size_t i = 0; i < 0x10000; i++) tok->bmp_ids[i] = -1;
    for (size_t j = 0; j < tok->vocab.cap; j++) {
        const char *k = tok->vocab.keys[j];
        uint32_t cp;
        if (k && tok->vocab.klen[j] && tok_utf8_next(k, tok->vocab.klen[j], &cp) == tok->vocab.klen[j] && cp < 0x10000)
            tok->bmp_ids[cp] = tok->vocab.vals[j];
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tok->byte_ids[b] = tok_map_get(&tok->vocab, name, 6);
    }
    return OKV_OK;
}

/* ---- added tokens ----------------------------------------------------------- */

static okv_status load_added(loader *L, const cJSON *arr, int32_t *max_id) {
    okv_tok *tok = L->tok;
    if (!arr || cJSON_IsNull(arr)) return OKV_OK;
    if (!cJSON_IsArray(arr)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: \"added_tokens\" must be an array", L->what);
    size_t n = (size_t)cJSON_GetArraySize(arr);
    tok->added = calloc(n ? n : 1, sizeof *tok->added);
    if (!tok->added) return nomem(L);
    const cJSON *it;
    okv_status st;
    cJSON_ArrayForEach(it, arr) {
        tok_added *a = &tok->added[tok->n_added];
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", tok->n_added);
        if (!cJSON_IsObject(it)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s must be an object", L->what, where);
        if ((st = json_id(L, cJSON_GetObjectItemCaseSensitive(it, "id"), &a->id, where))) return st;
        const char *content;
        if ((st = req_string(L, it, "content", &content, where))) return st;
        a->len = strlen(content);
        if ((st = check_utf8(L, content, a->len, where))) return st;
        if (a->len == 0) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: %s has empty content", L->what, where);
        if (!(a->content = dup_bytes(content, a->len))) return nomem(L);
        tok->n_added++;
        if ((st = opt_bool(L, it, "special", false, &a->special, where))) return st;
        if ((st = opt_bool(L, it, "single_word", false, &a->single_word, where))) return st;
        if ((st = opt_bool(L, it, "lstrip", false, &a->lstrip, where))) return st;
        if ((st = opt_bool(L, it, "rstrip", false, &a->rstrip, where))) return st;
        if ((st = opt_bool(L, it, "normalized", !a->special, &a->normalized, where))) return st;
        if (!tok_map_put(&tok->added_map, a->content, a->len, a->id)) return nomem(L);
        if (a->id > *max_id) *max_id = a->id;
    }
    return OKV_OK;
}

static bool trie_add(tok_trie *t, const char *s, size_t n, int32_t added) {
    if (!t->n) {
        t->cap = 64;
        if (!(t->nodes = malloc(t->cap * sizeof *t->nodes))) return false;
        t->nodes[0] = (tok_trie_node){-1, -1, -1, 0};
        t->n = 1;
    }
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int32_t k = t->nodes[node].first_child;
        while (k >= 0 && t->nodes[k].byte != c) k = t->nodes[k].next_sibling;
        if (k < 0) {
            tok_trie_node *p = okv_grow(t->nodes, &t->cap, t->n + 1, sizeof *p);
            if (!p) return false;
            t->nodes = p;
            k = (int32_t)t->n++;
            t->nodes[k] = (tok_trie_node){-1, t->nodes[node].first_child, -1, c};
            t->nodes[node].first_child = k;
        }
        node = k;
    }
    /* a later token with the same content wins, like HF's map */
    t->nodes[node].added = added;
    return true;
}

/* Builds the two tries; normalized tokens are matched in normalized text, so
 * their content is normalized first. */
static okv_status build_tries(loader *L) {
    okv_tok *tok = L->tok;
    tok_scratch sc;
    okv_status st = tok_scratch_init(&sc, L->err);
    if (st) return st;
    okv_buf nb = {0};
    for (size_t i = 0; i < tok->n_added && !st; i++) {
        tok_added *a = &tok->added[i];
        if (a->normalized && tok->norm) {
            nb.len = 0;
            st = tok_normalize(tok->norm, &sc, a->content, a->len, &nb, L->err);
            if (!st && nb.len && !trie_add(&tok->trie_norm, nb.data, nb.len, (int32_t)i)) st = nomem(L);
        } else if (!trie_add(&tok->trie_raw, a->content, a->len, (int32_t)i)) st = nomem(L);
    }
    okv_buf_free(&nb);
    tok_scratch_free(&sc);
    tok_trie *tries[2] = {&tok->trie_raw, &tok->trie_norm};
    for (int t = 0; t < 2; t++) {
        for (int c = 0; c < 256; c++) tries[t]->root[c] = -1;
        if (!tries[t]->n) continue;
        for (int32_t k = tries[t]->nodes[0].first_child; k >= 0; k = tries[t]->nodes[k].next_sibling)
            tries[t]->root[tries[t]->nodes[k].byte] = k;
    }
    return st;
}

/* id -> string table: model vocab first, added tokens override. */
static okv_status build_id_table(loader *L, int32_t max_id) {
    okv_tok *tok = L->tok;
    tok->vocab_size = (size_t)max_id + 1;
    tok->id_str = calloc(tok->vocab_size, sizeof *tok->id_str);
    tok->id_len = calloc(tok->vocab_size, sizeof *tok->id_len);
    tok->id_flags = calloc(tok->vocab_size, 1);
    if (!tok->id_str || !tok->id_len || !tok->id_flags) return nomem(L);
    for (size_t j = 0; j < tok->vocab.cap; j++) {
        if (!tok->vocab.keys[j]) continue;
        int32_t id = tok->vocab.vals[j];
        tok->id_str[id] = tok->vocab.keys[j];
        tok->id_len[id] = tok->vocab.klen[j];
    }
    for (size_t i = 0; i < tok->n_added; i++) {
        tok_added *a = &tok->added[i];
        tok->id_str[a->id] = a->content;
        tok->id_len[a->id] = (uint32_t)a->len;
        tok->id_flags[a->id] = TOK_ID_ADDED | (a->special ? TOK_ID_SPECIAL : 0);
    }
    return OKV_OK;
}

static okv_status load_root(loader *L, const cJSON *root) {
    okv_tok *tok = L->tok;
    okv_status st;
    if (!cJSON_IsObject(root)) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: top level must be a JSON object", L->what);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: missing \"model\"", L->what);
    int32_t max_id = -1;
    if ((st = load_model(L, model, &max_id))) return st;
    if ((st = load_added(L, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &max_id))) return st;
    if (max_id < 0) return okv_fail(L->err, OKV_ERR_FORMAT, "%s: the vocab is empty", L->what);
    if ((st = build_id_table(L, max_id))) return st;

    const cJSON *j;
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "normalizer")) && !cJSON_IsNull(j)) {
        if (!(tok->norm = calloc(1, sizeof *tok->norm))) return nomem(L);
        if ((st = load_norm(L, j, tok->norm, 0))) return st;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")) && !cJSON_IsNull(j)) {
        if (!(tok->pre = calloc(1, sizeof *tok->pre))) return nomem(L);
        if ((st = load_pre(L, j, tok->pre, 0))) return st;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "post_processor")) && !cJSON_IsNull(j))
        if ((st = load_post(L, j, 0))) return st;
    if ((j = cJSON_GetObjectItemCaseSensitive(root, "decoder")) && !cJSON_IsNull(j)) {
        if (!(tok->dec = calloc(1, sizeof *tok->dec))) return nomem(L);
        if ((st = load_dec(L, j, tok->dec, 0))) return st;
    }
    const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(root, "truncation");
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(root, "padding");
    if ((trunc && !cJSON_IsNull(trunc)) || (pad && !cJSON_IsNull(pad)))
        return okv_fail(L->err, OKV_ERR_UNSUPPORTED, "%s: truncation/padding settings are not supported (must be null)", L->what);
    return build_tries(L);
}

static okv_status tok_load(const char *text, size_t len, const char *what, okv_tok **out, okv_error *err) {
    *out = NULL;
    if (!text) return okv_fail(err, OKV_ERR_INVALID, "%s: no text", what);
    cJSON *root;
    okv_status st = okv_json_parse(text, len, &root, what, err);
    if (st) return st;
    okv_tok *tok = calloc(1, sizeof *tok);
    if (!tok) { cJSON_Delete(root); return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", what); }
    tok_byte_alphabet_init(&tok->bytes);
    loader L = {tok, what, err};
    st = load_root(&L, root);
    cJSON_Delete(root);
    if (st) { okv_tok_free(tok); return st; }
    *out = tok;
    return OKV_OK;
}

okv_status okv_tok_load_json(const char *text, size_t len, okv_tok **out, okv_error *err) {
    return tok_load(text, len, "tokenizer.json", out, err);
}

okv_status okv_tok_load_file(const char *path, okv_tok **out, okv_error *err) {
    char *text;
    size_t len;
    *out = NULL;
    okv_status st = okv_read_file(path, &text, &len, err);
    if (st) return st;
    st = tok_load(text, len, path, out, err);
    free(text);
    return st;
}

/* ---- freeing ------------------------------------------------------------------ */

void tok_norm_free(tok_norm *nm) {
    for (size_t i = 0; i < nm->n_kids; i++) tok_norm_free(&nm->kids[i]);
    free(nm->kids);
    tok_pattern_free(&nm->pat);
    free(nm->content);
}

void tok_pre_free(tok_pre *p) {
    for (size_t i = 0; i < p->n_kids; i++) tok_pre_free(&p->kids[i]);
    free(p->kids);
    tok_pattern_free(&p->pat);
}

void tok_dec_free(tok_dec *d) {
    for (size_t i = 0; i < d->n_kids; i++) tok_dec_free(&d->kids[i]);
    free(d->kids);
    tok_pattern_free(&d->pat);
    free(d->content);
}

void okv_tok_free(okv_tok *tok) {
    if (!tok) return;
    tok_map_free(&tok->vocab);
    tok_merges_free(&tok->merges);
    free(tok->cont_prefix);
    free(tok->eow_suffix);
    free(tok->id_str);
    free(tok->id_len);
    free(tok->id_flags);
    free(tok->bmp_ids);
    for (size_t i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    tok_map_free(&tok->added_map);
    free(tok->trie_raw.nodes);
    free(tok->trie_norm.nodes);
    if (tok->norm) { tok_norm_free(tok->norm); free(tok->norm); }
    if (tok->pre) { tok_pre_free(tok->pre); free(tok->pre); }
    if (tok->dec) { tok_dec_free(tok->dec); free(tok->dec); }
    for (size_t i = 0; i < tok->n_tmpl; i++) free(tok->tmpl[i].ids);
    free(tok->tmpl);
    free(tok);
}
