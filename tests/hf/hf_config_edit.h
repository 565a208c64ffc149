/* hf_config_edit.h — the config tests' one way to make a case: take a real
 * config.json, set (or delete) one field of the object the family's fields
 * live in (text_config for nested configs) through cJSON, and parse the
 * result with okv_hf_parse_config under the name "config.json". */
#ifndef OKV_HF_CONFIG_EDIT_H
#define OKV_HF_CONFIG_EDIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_common.h"
#include "okv_hf.h"

/* The object a family's fields live in (text_config for nested configs). */
static inline cJSON *hf_text_obj(cJSON *root) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    return cJSON_IsObject(t) ? t : root;
}

/* Loads config_path, sets hf_text_obj()[key] = value (JSON text; NULL value:
 * delete the key; NULL key: no edit), parses it. */
static inline okv_status hf_parse_edited(const char *config_path, const char *key, const char *value, okv_hf_model *m,
                                         okv_error *err) {
    cJSON *root;
    if (okv_json_load(config_path, &root, err)) { fprintf(stderr, "%s\n", err->message); exit(1); }
    if (key) {
        cJSON *t = hf_text_obj(root);
        cJSON_DeleteItemFromObjectCaseSensitive(t, key);
        if (value) {
            cJSON *v = cJSON_Parse(value);
            if (!v) { fprintf(stderr, "bad test JSON %s\n", value); exit(1); }
            cJSON_AddItemToObject(t, key, v);
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    okv_status st = okv_hf_parse_config(text, strlen(text), "config.json", m, err);
    free(text);
    return st;
}

#endif
