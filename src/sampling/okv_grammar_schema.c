/* okv_grammar_schema.c — compiling a JSON Schema into the flat grammar the
 * matcher walks (okv_grammar_internal.h), the any-JSON-object grammar, and
 * runs of framed values (a literal head, a schema's value, a literal tail:
 * the shape of a model's tool calls).
 *
 * The schema is untrusted input (a request body): its text size, nesting
 * depth, node count, properties per object, enum size and literal length
 * are all bounded, $ref only reaches #/$defs or #/definitions and recursion
 * ends at the depth limit. A keyword the matcher cannot enforce is refused
 * by name with a JSON pointer to where it is, never silently dropped: a
 * caller must be able to trust that an accepted schema's output validates.
 *
 * Compilation is one recursive walk; each schema object becomes one node
 * (or a fixed "any" node), children before parents, so a node's property
 * and alternative lists are contiguous ranges appended in one go. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_grammar_internal.h"

typedef struct compiler {
    okv_grammar *g;
    const cJSON *doc;     /* the whole schema, for $ref */
    char path[512];       /* JSON pointer of the schema being compiled, for messages */
    okv_error *err;
} compiler;

/* ---- grammar storage ------------------------------------------------------------ */

static int32_t new_node(compiler *c, gn_kind kind) {
    okv_grammar *g = c->g;
    if (g->n_nodes >= GN_MAX_NODES) {
        okv_fail(c->err, OKV_ERR_UNSUPPORTED, "JSON Schema at %s: more than %d schema nodes", c->path, GN_MAX_NODES);
        return -1;
    }
    gn_node *v = okv_grow(g->nodes, &g->cap_nodes, (size_t)g->n_nodes + 1, sizeof *v);
    if (!v) { okv_fail(c->err, OKV_ERR_NOMEM, "out of memory"); return -1; }
    g->nodes = v;
    gn_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->max_items = INT64_MAX;
    return g->n_nodes++;
}

/* Appends a literal (copied); its index, or -1. */
static int32_t add_lit(compiler *c, const char *text, size_t len) {
    okv_grammar *g = c->g;
    gn_lit *v = okv_grow(g->lits, &g->cap_lits, (size_t)g->n_lits + 1, sizeof *v);
    char *copy = malloc(len + 1);
    if (!v || !copy) { free(copy); if (v) g->lits = v; okv_fail(c->err, OKV_ERR_NOMEM, "out of memory"); return -1; }
    g->lits = v;
    memcpy(copy, text, len);
    copy[len] = 0;
    g->lits[g->n_lits] = (gn_lit){copy, len};
    return g->n_lits++;
}

static void set_first_for_kind(gn_node *n) {
    switch (n->kind) {
    case GN_OBJECT: gn_first_add(n, '{'); break;
    case GN_ARRAY: gn_first_add(n, '['); break;
    case GN_STRING: gn_first_add(n, '"'); break;
    case GN_NUMBER:
    case GN_INTEGER:
        gn_first_add(n, '-');
        for (int d = '0'; d <= '9'; d++) gn_first_add(n, (unsigned char)d);
        break;
    default: break;
    }
}

/* The nodes every grammar starts with: any value, and the containers and
 * scalars it dispatches to. */
static okv_status add_fixed_nodes(compiler *c) {
    static const char *const words[] = {"true", "false", "null"};
    static const gn_kind kinds[GN_FIXED] = {GN_ANY, GN_OBJECT, GN_ARRAY, GN_STRING, GN_NUMBER, GN_LITERALS};
    for (int i = 0; i < GN_FIXED; i++)
        if (new_node(c, kinds[i]) != i) return c->err->status;
    okv_grammar *g = c->g;
    g->nodes[GN_FIX_OBJECT].any_keys = true;
    g->nodes[GN_FIX_ARRAY].items = GN_FIX_ANY;
    g->nodes[GN_FIX_STRING].max_len = OKV_GRAMMAR_MAX_STRING;
    g->nodes[GN_FIX_WORDS].lit_off = g->n_lits;
    g->nodes[GN_FIX_WORDS].n_lits = 3;
    for (int i = 0; i < 3; i++) {
        if (add_lit(c, words[i], strlen(words[i])) < 0) return c->err->status;
        gn_first_add(&g->nodes[GN_FIX_WORDS], (unsigned char)words[i][0]);
    }
    for (int i = GN_FIX_OBJECT; i <= GN_FIX_NUMBER; i++) set_first_for_kind(&g->nodes[i]);
    for (int i = GN_FIX_OBJECT; i < GN_FIXED; i++)
        for (int b = 0; b < 32; b++) g->nodes[GN_FIX_ANY].first[b] |= g->nodes[i].first[b];
    return OKV_OK;
}

void okv_grammar_free(okv_grammar *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n_props; i++) free(g->props[i].key);
    for (int32_t i = 0; i < g->n_lits; i++) free(g->lits[i].text);
    free(g->nodes);
    free(g->props);
    free(g->lits);
    free(g->alts);
    free(g);
}

/* ---- paths and keyword checks ----------------------------------------------------- */

/* Appends "/seg" to the path; returns the old length for pop_path. */
static size_t push_path(compiler *c, const char *seg) {
    size_t len = strlen(c->path);
    snprintf(c->path + len, sizeof c->path - len, "/%s", seg);
    return len;
}
static void pop_path(compiler *c, size_t len) { c->path[len] = 0; }

static int32_t fail_at(compiler *c, okv_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int32_t fail_at(compiler *c, okv_status st, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    okv_fail(c->err, st, "JSON Schema at %s: %s", c->path, detail);
    return -1;
}

static bool is_annotation(const char *k) {
    static const char *const names[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                        "$defs", "definitions"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(k, names[i])) return true;
    return false;
}

static bool is_constraint(const char *k) {
    static const char *const names[] = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                        "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "$ref",
                                        "format"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(k, names[i])) return true;
    return false;
}

/* Refuses the first keyword we do not know how to enforce. */
static bool check_keywords(compiler *c, const cJSON *s) {
    const cJSON *kv;
    cJSON_ArrayForEach(kv, s) {
        if (!is_annotation(kv->string) && !is_constraint(kv->string)) {
            okv_fail(c->err, OKV_ERR_UNSUPPORTED, "unsupported JSON Schema keyword '%s' at %s", kv->string, c->path);
            return false;
        }
    }
    return true;
}

/* An optional count keyword: absent -> dflt; else an integer in [0, 2^30]. */
static bool opt_count(compiler *c, const cJSON *s, const char *key, int64_t dflt, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    *out = dflt;
    if (!v) return true;
    if (!okv_json_item_int(v, 0, 1 << 30, out)) {
        fail_at(c, OKV_ERR_INVALID, "'%s' must be an integer in [0, 2^30]", key);
        return false;
    }
    return true;
}

/* ---- literal values (enum, const) ------------------------------------------------------ */

static bool value_has_type(const cJSON *v, const char *t) {
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    return false;
}

/* True when v is allowed by the schema's "type" (absent: any). */
static bool value_fits_type(const cJSON *v, const cJSON *type) {
    if (!type) return true;
    if (cJSON_IsString(type)) return value_has_type(v, type->valuestring);
    const cJSON *t;
    cJSON_ArrayForEach(t, type)
        if (cJSON_IsString(t) && value_has_type(v, t->valuestring)) return true;
    return false;
}

/* enum / const: the canonical (cJSON unformatted) texts of the allowed values. */
static int32_t compile_literals(compiler *c, const cJSON *s) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (en && cn) return fail_at(c, OKV_ERR_UNSUPPORTED, "'enum' together with 'const'");
    if (en && (!cJSON_IsArray(en) || cJSON_GetArraySize(en) < 1 || cJSON_GetArraySize(en) > GN_MAX_LITS))
        return fail_at(c, OKV_ERR_INVALID, "'enum' must be an array of 1 to %d values", GN_MAX_LITS);
    int32_t lit_off = c->g->n_lits, n = 0;
    const cJSON *v = en ? en->child : cn;
    for (; v; v = en ? v->next : NULL) {
        if (!value_fits_type(v, type)) continue;
        char *text = cJSON_PrintUnformatted(v);
        if (!text) return fail_at(c, OKV_ERR_NOMEM, "out of memory");
        size_t len = strlen(text);
        int32_t k = len <= GN_MAX_LIT_BYTES ? add_lit(c, text, len) : -2;
        free(text);
        if (k == -2) return fail_at(c, OKV_ERR_UNSUPPORTED, "an %s value longer than %d bytes", en ? "enum" : "const", GN_MAX_LIT_BYTES);
        if (k < 0) return -1;
        n++;
    }
    if (!n) return fail_at(c, OKV_ERR_INVALID, "no '%s' value has the schema's 'type'", en ? "enum" : "const");
    int32_t id = new_node(c, GN_LITERALS);
    if (id < 0) return -1;
    gn_node *node = &c->g->nodes[id];
    node->lit_off = lit_off;
    node->n_lits = n;
    for (int32_t i = 0; i < n; i++) gn_first_add(node, (unsigned char)c->g->lits[lit_off + i].text[0]);
    return id;
}

/* ---- the recursive walk ------------------------------------------------------------------ */

static int32_t compile(compiler *c, const cJSON *s, int depth);

/* A child schema under key (path segment seg). */
static int32_t compile_child(compiler *c, const cJSON *s, const char *seg, int depth) {
    size_t mark = push_path(c, seg);
    int32_t id = compile(c, s, depth + 1);
    if (id >= 0) pop_path(c, mark);
    return id;
}

/* The canonical escaped form of a property name (what goes between the quotes). */
static char *escaped_key(const char *key, size_t *len) {
    cJSON *str = cJSON_CreateString(key);
    char *q = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    if (!q) return NULL;
    size_t n = strlen(q);            /* "..." */
    memmove(q, q + 1, n - 2);
    q[n - 2] = 0;
    *len = n - 2;
    return q;
}

static int find_prop(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

static int32_t compile_object(compiler *c, const cJSON *s, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (add && !cJSON_IsBool(add) && !(cJSON_IsObject(add) && !add->child))
        return fail_at(c, OKV_ERR_UNSUPPORTED, "unsupported 'additionalProperties' (a schema: only true or false)");
    if (props && (!cJSON_IsObject(props) || cJSON_GetArraySize(props) > GN_MAX_PROPS))
        return fail_at(c, OKV_ERR_UNSUPPORTED, "'properties' must be an object of at most %d properties", GN_MAX_PROPS);
    if (req && !cJSON_IsArray(req)) return fail_at(c, OKV_ERR_INVALID, "'required' must be an array of strings");
    if (!props && !req && !cJSON_IsFalse(add)) return GN_FIX_OBJECT;   /* any object */
    const char *names[GN_MAX_PROPS];
    int32_t kids[GN_MAX_PROPS];
    int n = 0;
    const cJSON *p;
    size_t mark = push_path(c, "properties");
    cJSON_ArrayForEach(p, props) {
        names[n] = p->string;
        if ((kids[n] = compile_child(c, p, p->string, depth)) < 0) return -1;
        n++;
    }
    pop_path(c, mark);
    uint64_t required = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        int k = cJSON_IsString(r) ? find_prop(names, n, r->valuestring) : -2;
        if (k == -2) return fail_at(c, OKV_ERR_INVALID, "'required' must be an array of strings");
        if (k < 0) return fail_at(c, OKV_ERR_UNSUPPORTED, "'required' names '%s', which is not in 'properties'", r->valuestring);
        required |= 1ull << k;
    }
    int32_t id = new_node(c, GN_OBJECT);
    if (id < 0) return -1;
    okv_grammar *g = c->g;
    gn_prop *v = okv_grow(g->props, &g->cap_props, (size_t)g->n_props + (size_t)n + 1, sizeof *v);
    if (!v) return fail_at(c, OKV_ERR_NOMEM, "out of memory");
    g->props = v;
    gn_node *node = &g->nodes[id];
    node->prop_off = g->n_props;
    node->n_props = n;
    node->required = required;
    gn_first_add(node, '{');
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        char *key = escaped_key(names[i], &len);
        if (!key) return fail_at(c, OKV_ERR_NOMEM, "out of memory");
        g->props[g->n_props++] = (gn_prop){key, len, kids[i]};
    }
    return id;
}

static int32_t compile_array(compiler *c, const cJSON *s, int depth) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    int64_t lo, hi;
    if (!opt_count(c, s, "minItems", 0, &lo) || !opt_count(c, s, "maxItems", INT64_MAX, &hi)) return -1;
    if (lo > hi) return fail_at(c, OKV_ERR_INVALID, "'minItems' %lld is above 'maxItems' %lld", (long long)lo, (long long)hi);
    if (items && cJSON_IsArray(items)) return fail_at(c, OKV_ERR_UNSUPPORTED, "unsupported 'items' (an array of schemas)");
    int32_t kid = items ? compile_child(c, items, "items", depth) : GN_FIX_ANY;
    if (kid < 0) return -1;
    if (!items && lo == 0 && hi == INT64_MAX) return GN_FIX_ARRAY;
    int32_t id = new_node(c, GN_ARRAY);
    if (id < 0) return -1;
    gn_node *node = &c->g->nodes[id];
    node->items = kid;
    node->min_items = lo;
    node->max_items = hi;
    gn_first_add(node, '[');
    return id;
}

/* "format": one of okv_grammar_format.c's, alone (with minLength/maxLength
 * it is refused: a format fixes the length itself). */
static int32_t compile_format(compiler *c, const cJSON *s, const cJSON *fmt) {
    if (!cJSON_IsString(fmt)) return fail_at(c, OKV_ERR_INVALID, "'format' must be a string");
    int format = gf_parse(fmt->valuestring);
    if (format == GN_FMT_NONE)
        return fail_at(c, OKV_ERR_UNSUPPORTED, "unsupported 'format' \"%.64s\" (date, time, date-time and uuid are)",
                       fmt->valuestring);
    if (cJSON_GetObjectItemCaseSensitive(s, "minLength") || cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
        return fail_at(c, OKV_ERR_UNSUPPORTED, "'format' together with 'minLength' or 'maxLength'");
    int32_t id = new_node(c, GN_STRING);
    if (id < 0) return -1;
    c->g->nodes[id].format = format;
    gn_first_add(&c->g->nodes[id], '"');
    return id;
}

static int32_t compile_string(compiler *c, const cJSON *s) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    if (fmt) return compile_format(c, s, fmt);
    int64_t lo, hi;
    if (!opt_count(c, s, "minLength", 0, &lo) || !opt_count(c, s, "maxLength", OKV_GRAMMAR_MAX_STRING, &hi)) return -1;
    if (lo > hi) return fail_at(c, OKV_ERR_INVALID, "'minLength' %lld is above 'maxLength' %lld", (long long)lo, (long long)hi);
    int32_t id = new_node(c, GN_STRING);
    if (id < 0) return -1;
    c->g->nodes[id].min_len = lo;
    c->g->nodes[id].max_len = hi;
    gn_first_add(&c->g->nodes[id], '"');
    return id;
}

/* A node for the words true/false (boolean) or null. */
static int32_t compile_words(compiler *c, bool boolean) {
    int32_t off = c->g->n_lits;
    if (boolean ? add_lit(c, "true", 4) < 0 || add_lit(c, "false", 5) < 0 : add_lit(c, "null", 4) < 0) return -1;
    int32_t id = new_node(c, GN_LITERALS);
    if (id < 0) return -1;
    gn_node *node = &c->g->nodes[id];
    node->lit_off = off;
    node->n_lits = boolean ? 2 : 1;
    gn_first_add(node, boolean ? 't' : 'n');
    if (boolean) gn_first_add(node, 'f');
    return id;
}

static int32_t compile_type(compiler *c, const cJSON *s, const char *t, int depth) {
    if (!strcmp(t, "object")) return compile_object(c, s, depth);
    if (!strcmp(t, "array")) return compile_array(c, s, depth);
    if (!strcmp(t, "string")) return compile_string(c, s);
    if (!strcmp(t, "number") || !strcmp(t, "integer")) {
        int32_t id = new_node(c, t[0] == 'n' ? GN_NUMBER : GN_INTEGER);
        if (id >= 0) set_first_for_kind(&c->g->nodes[id]);
        return id;
    }
    if (!strcmp(t, "boolean")) return compile_words(c, true);
    if (!strcmp(t, "null")) return compile_words(c, false);
    return fail_at(c, OKV_ERR_INVALID, "unknown 'type' \"%s\"", t);
}

static bool firsts_overlap(const gn_node *a, const gn_node *b) {
    for (int i = 0; i < 32; i++)
        if (a->first[i] & b->first[i]) return true;
    return false;
}

/* An anyOf node over kids[0..n) (their first-byte sets must not overlap: the
 * matcher picks the alternative from the value's first byte). */
static int32_t make_anyof(compiler *c, const int32_t *kids, int n, const char *what) {
    if (n == 1) return kids[0];
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (firsts_overlap(&c->g->nodes[kids[i]], &c->g->nodes[kids[j]]))
                return fail_at(c, OKV_ERR_UNSUPPORTED,
                               "unsupported '%s': alternatives %d and %d can start with the same character "
                               "(only alternatives of different JSON types, e.g. a string or null, are supported)",
                               what, i, j);
    okv_grammar *g = c->g;
    int32_t *v = okv_grow(g->alts, &g->cap_alts, (size_t)g->n_alts + (size_t)n, sizeof *v);
    if (!v) return fail_at(c, OKV_ERR_NOMEM, "out of memory");
    g->alts = v;
    int32_t id = new_node(c, GN_ANYOF);
    if (id < 0) return -1;
    gn_node *node = &g->nodes[id];
    node->alt_off = g->n_alts;
    node->n_alts = n;
    for (int i = 0; i < n; i++) {
        g->alts[g->n_alts++] = kids[i];
        for (int b = 0; b < 32; b++) node->first[b] |= g->nodes[kids[i]].first[b];
    }
    return id;
}

/* "type": ["string", "null"]: one alternative per name (integer folded into number). */
static int32_t compile_type_list(compiler *c, const cJSON *s, const cJSON *types, int depth) {
    int32_t kids[8];
    int n = 0;
    bool number = false;
    const cJSON *t;
    cJSON_ArrayForEach(t, types) if (cJSON_IsString(t) && !strcmp(t->valuestring, "number")) number = true;
    cJSON_ArrayForEach(t, types) {
        if (!cJSON_IsString(t)) return fail_at(c, OKV_ERR_INVALID, "'type' must be a string or an array of strings");
        if (number && !strcmp(t->valuestring, "integer")) continue;
        if (n == 8) return fail_at(c, OKV_ERR_INVALID, "'type' lists more than 8 names");
        if ((kids[n++] = compile_type(c, s, t->valuestring, depth)) < 0) return -1;
    }
    if (!n) return fail_at(c, OKV_ERR_INVALID, "'type' is an empty array");
    return make_anyof(c, kids, n, "type");
}

static int32_t compile_anyof(compiler *c, const cJSON *s, int depth) {
    const cJSON *alts = cJSON_GetObjectItemCaseSensitive(s, "anyOf"), *a;
    const cJSON *kv;
    cJSON_ArrayForEach(kv, s)
        if (strcmp(kv->string, "anyOf") && is_constraint(kv->string))
            return fail_at(c, OKV_ERR_UNSUPPORTED, "unsupported '%s' beside 'anyOf' (put it inside each alternative)", kv->string);
    if (!cJSON_IsArray(alts) || cJSON_GetArraySize(alts) < 1 || cJSON_GetArraySize(alts) > GN_MAX_ALTS)
        return fail_at(c, OKV_ERR_INVALID, "'anyOf' must be an array of 1 to %d schemas", GN_MAX_ALTS);
    int32_t kids[GN_MAX_ALTS];
    int n = 0;
    size_t mark = push_path(c, "anyOf");
    cJSON_ArrayForEach(a, alts) {
        char seg[16];
        snprintf(seg, sizeof seg, "%d", n);
        if ((kids[n++] = compile_child(c, a, seg, depth)) < 0) return -1;
    }
    pop_path(c, mark);
    return make_anyof(c, kids, n, "anyOf");
}

/* $ref: "#/$defs/NAME" or "#/definitions/NAME" of the root schema. */
static int32_t compile_ref(compiler *c, const cJSON *s, int depth) {
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref"), *kv;
    cJSON_ArrayForEach(kv, s)
        if (strcmp(kv->string, "$ref") && is_constraint(kv->string))
            return fail_at(c, OKV_ERR_UNSUPPORTED, "unsupported '%s' beside '$ref'", kv->string);
    if (!cJSON_IsString(ref)) return fail_at(c, OKV_ERR_INVALID, "'$ref' must be a string");
    const char *r = ref->valuestring, *name = NULL, *where = NULL;
    if (!strncmp(r, "#/$defs/", 8)) { where = "$defs"; name = r + 8; }
    else if (!strncmp(r, "#/definitions/", 14)) { where = "definitions"; name = r + 14; }
    if (!name || !*name || strchr(name, '/') || strchr(name, '~'))
        return fail_at(c, OKV_ERR_UNSUPPORTED, "unsupported '$ref' \"%.200s\" (only #/$defs/NAME and #/definitions/NAME)", r);
    const cJSON *defs = cJSON_GetObjectItemCaseSensitive(c->doc, where);
    const cJSON *target = cJSON_IsObject(defs) ? cJSON_GetObjectItemCaseSensitive(defs, name) : NULL;
    if (!target) return fail_at(c, OKV_ERR_INVALID, "'$ref' \"%.200s\" names no definition", r);
    return compile_child(c, target, "$ref", depth);
}

static int32_t compile(compiler *c, const cJSON *s, int depth) {
    if (depth > OKV_GRAMMAR_MAX_DEPTH)
        return fail_at(c, OKV_ERR_UNSUPPORTED, "nested deeper than %d levels (a recursive $ref?)", OKV_GRAMMAR_MAX_DEPTH);
    if (cJSON_IsTrue(s)) return GN_FIX_ANY;
    if (cJSON_IsFalse(s)) return fail_at(c, OKV_ERR_INVALID, "the schema false allows no value");
    if (!cJSON_IsObject(s)) return fail_at(c, OKV_ERR_INVALID, "a schema must be an object or a boolean");
    if (!check_keywords(c, s)) return -1;
    if (cJSON_GetObjectItemCaseSensitive(s, "$ref")) return compile_ref(c, s, depth);
    if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const"))
        return compile_literals(c, s);
    if (cJSON_GetObjectItemCaseSensitive(s, "anyOf")) return compile_anyof(c, s, depth);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type)) return compile_type(c, s, type->valuestring, depth);
    if (cJSON_IsArray(type)) return compile_type_list(c, s, type, depth);
    if (type) return fail_at(c, OKV_ERR_INVALID, "'type' must be a string or an array of strings");
    if (okv_json_has(s, "properties") || okv_json_has(s, "required") || okv_json_has(s, "additionalProperties"))
        return compile_object(c, s, depth);
    if (okv_json_has(s, "items") || okv_json_has(s, "minItems") || okv_json_has(s, "maxItems"))
        return compile_array(c, s, depth);
    if (okv_json_has(s, "minLength") || okv_json_has(s, "maxLength")) return compile_string(c, s);
    return GN_FIX_ANY;
}

/* ---- entry points ------------------------------------------------------------------------ */

static okv_status grammar_start(compiler *c, okv_grammar **out, okv_error *err) {
    *out = NULL;
    memset(c, 0, sizeof *c);
    c->err = err;
    strcpy(c->path, "#");
    c->g = calloc(1, sizeof *c->g);
    if (!c->g) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = add_fixed_nodes(c);
    if (st) { okv_grammar_free(c->g); c->g = NULL; }
    return st;
}

okv_status okv_grammar_from_schema(const char *schema, size_t len, okv_grammar **out, okv_error *err) {
    *out = NULL;
    if (!schema) return okv_fail(err, OKV_ERR_INVALID, "okv_grammar_from_schema: NULL schema");
    if (len > OKV_GRAMMAR_MAX_SCHEMA)
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "JSON Schema of %zu bytes (at most %d)", len, OKV_GRAMMAR_MAX_SCHEMA);
    cJSON *doc = NULL;
    okv_status st = okv_json_parse(schema, len, &doc, "JSON Schema", err);
    if (st) return st;
    compiler c;
    st = grammar_start(&c, out, err);
    if (!st) {
        c.doc = doc;
        int32_t root = compile(&c, doc, 0);
        if (root < 0) { st = err->status ? err->status : OKV_ERR_INVALID; okv_grammar_free(c.g); }
        else { c.g->root = root; *out = c.g; }
    }
    cJSON_Delete(doc);
    return st;
}

okv_status okv_grammar_json_object(okv_grammar **out, okv_error *err) {
    compiler c;
    okv_status st = grammar_start(&c, out, err);
    if (st) return st;
    c.g->root = GN_FIX_OBJECT;
    *out = c.g;
    return OKV_OK;
}

/* Heads must be non-empty and prefix-free (the matcher picks the alternative
 * when its head ends); tails non-empty (the run's end is then visible). */
static okv_status check_frames(const okv_grammar_frame *alts, int n, okv_error *err) {
    for (int i = 0; i < n; i++) {
        if (!alts[i].head || !*alts[i].head || !alts[i].tail || !*alts[i].tail || !alts[i].schema)
            return okv_fail(err, OKV_ERR_INVALID, "framed value %d: empty head or tail, or no schema", i);
        size_t li = strlen(alts[i].head);
        if (li > GN_MAX_LIT_BYTES || strlen(alts[i].tail) > GN_MAX_LIT_BYTES)
            return okv_fail(err, OKV_ERR_UNSUPPORTED, "framed value %d: head or tail longer than %d bytes", i, GN_MAX_LIT_BYTES);
        for (int j = 0; j < n; j++) {
            size_t lj = strlen(alts[j].head);
            if (j != i && li <= lj && !memcmp(alts[i].head, alts[j].head, li))
                return okv_fail(err, OKV_ERR_INVALID, "framed value %d's head is a prefix of value %d's", i, j);
        }
    }
    return OKV_OK;
}

/* Compiles an alternative's schema (its own $ref root) into c->g: its node, or -1. */
static int32_t compile_frame_schema(compiler *c, const okv_grammar_frame *a) {
    cJSON *doc = NULL;
    size_t len = strlen(a->schema);
    if (len > OKV_GRAMMAR_MAX_SCHEMA)
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "JSON Schema of %zu bytes (at most %d)", len, OKV_GRAMMAR_MAX_SCHEMA), -1;
    if (okv_json_parse(a->schema, len, &doc, "JSON Schema", c->err)) return -1;
    c->doc = doc;
    snprintf(c->path, sizeof c->path, "#");
    int32_t id = compile(c, doc, 1);
    c->doc = NULL;
    cJSON_Delete(doc);
    return id;
}

okv_status okv_grammar_framed(const okv_grammar_frame *alts, int n, int min_count, int max_count, okv_grammar **out,
                              okv_error *err) {
    *out = NULL;
    if (!alts || n < 1 || n > GN_MAX_LITS)
        return okv_fail(err, OKV_ERR_INVALID, "framed values: %d alternatives (1 to %d)", n, GN_MAX_LITS);
    if (min_count < 1 || max_count < min_count)
        return okv_fail(err, OKV_ERR_INVALID, "framed values: count range [%d, %d]", min_count, max_count);
    okv_status st = check_frames(alts, n, err);
    if (st) return st;
    compiler c;
    if ((st = grammar_start(&c, out, err))) return st;
    int32_t kids[GN_MAX_LITS];
    for (int i = 0; i < n && !st; i++)
        if ((kids[i] = compile_frame_schema(&c, &alts[i])) < 0) st = err->status ? err->status : OKV_ERR_INVALID;
    int32_t lit_off = c.g->n_lits;   /* heads and tails, in pairs, after any enum literals of the schemas */
    for (int i = 0; i < n && !st; i++)
        if (add_lit(&c, alts[i].head, strlen(alts[i].head)) < 0 || add_lit(&c, alts[i].tail, strlen(alts[i].tail)) < 0)
            st = err->status;
    okv_grammar *g = c.g;
    int32_t *v = st ? NULL : okv_grow(g->alts, &g->cap_alts, (size_t)g->n_alts + (size_t)n, sizeof *v);
    if (!st && !v) st = okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    int32_t id = st ? -1 : new_node(&c, GN_FRAMED);
    if (!st && id < 0) st = err->status;
    if (st) { okv_grammar_free(g); return st; }
    g->alts = v;
    gn_node *node = &g->nodes[id];
    node->alt_off = g->n_alts;
    node->n_alts = n;
    node->lit_off = lit_off;
    node->min_items = min_count;
    node->max_items = max_count;
    for (int i = 0; i < n; i++) {
        g->alts[g->n_alts++] = kids[i];
        gn_first_add(node, (unsigned char)alts[i].head[0]);
    }
    g->root = id;
    *out = g;
    return OKV_OK;
}
