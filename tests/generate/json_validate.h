/* json_validate.h — a small JSON Schema validator for tests, written
 * independently of the grammar matcher (it judges a parsed cJSON value
 * against the schema, the way jsonschema does, for the keywords the grammar
 * supports), so a constrained generation is checked by something that does
 * not share the matcher's bugs. */
#ifndef OKV_TEST_JSON_VALIDATE_H
#define OKV_TEST_JSON_VALIDATE_H

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <cjson/cJSON.h>

static bool jv_valid(const cJSON *v, const cJSON *s, const cJSON *root);

static size_t jv_utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool jv_has_type(const cJSON *v, const char *t) {
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    return false;
}

static bool jv_type_ok(const cJSON *v, const cJSON *type) {
    if (!type) return true;
    if (cJSON_IsString(type)) return jv_has_type(v, type->valuestring);
    const cJSON *t;
    cJSON_ArrayForEach(t, type) if (jv_has_type(v, t->valuestring)) return true;
    return false;
}

static bool jv_object_ok(const cJSON *v, const cJSON *s, const cJSON *root) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties"), *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"), *e;
    cJSON_ArrayForEach(e, req) if (!cJSON_GetObjectItemCaseSensitive(v, e->valuestring)) return false;
    cJSON_ArrayForEach(e, v) {
        const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, e->string) : NULL;
        if (ps && !jv_valid(e, ps, root)) return false;
        if (!ps && cJSON_IsFalse(add)) return false;
    }
    return true;
}

static bool jv_array_ok(const cJSON *v, const cJSON *s, const cJSON *root) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items"), *e;
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(s, "minItems"), *hi = cJSON_GetObjectItemCaseSensitive(s, "maxItems");
    int n = cJSON_GetArraySize(v);
    if ((lo && n < lo->valueint) || (hi && n > hi->valueint)) return false;
    cJSON_ArrayForEach(e, v) if (items && !jv_valid(e, items, root)) return false;
    return true;
}

static bool jv_valid(const cJSON *v, const cJSON *s, const cJSON *root) {
    if (cJSON_IsTrue(s)) return true;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        const char *name = strrchr(ref->valuestring, '/') + 1;
        const cJSON *defs = cJSON_GetObjectItemCaseSensitive(root, strstr(ref->valuestring, "$defs") ? "$defs" : "definitions");
        return jv_valid(v, cJSON_GetObjectItemCaseSensitive(defs, name), root);
    }
    if (!jv_type_ok(v, cJSON_GetObjectItemCaseSensitive(s, "type"))) return false;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const"), *e;
    if (cn && !cJSON_Compare(v, cn, true)) return false;
    if (en) {
        bool any = false;
        cJSON_ArrayForEach(e, en) any = any || cJSON_Compare(v, e, true);
        if (!any) return false;
    }
    const cJSON *alts = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (alts) {
        bool any = false;
        cJSON_ArrayForEach(e, alts) any = any || jv_valid(v, e, root);
        if (!any) return false;
    }
    if (cJSON_IsObject(v) && !jv_object_ok(v, s, root)) return false;
    if (cJSON_IsArray(v) && !jv_array_ok(v, s, root)) return false;
    if (cJSON_IsString(v)) {
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(s, "minLength"), *hi = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
        size_t n = jv_utf8_chars(v->valuestring);
        if ((lo && n < (size_t)lo->valueint) || (hi && n > (size_t)hi->valueint)) return false;
    }
    return true;
}

#endif
