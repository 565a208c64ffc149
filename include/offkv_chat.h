/* offkv_chat.h — rendering a conversation into a prompt with the model's own
 * chat template, exactly as HF transformers' apply_chat_template does it
 * (Jinja2 with trim_blocks, lstrip_blocks, loopcontrols, and the globals HF
 * adds: raise_exception, strftime_now, and HF's `tojson`).
 *
 * The engine implements the Jinja subset real chat templates use; anything
 * else fails at parse time (or at render time when only detectable then) with
 * a message naming the construct and its line:column in the template. */
#ifndef OFFKV_CHAT_H
#define OFFKV_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "offkv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct okv_chat_template okv_chat_template;

/* Parses a Jinja template (NUL-terminated source). A malformed or
 * unsupported construct is OKV_ERR_FORMAT with its line:column. A parsed
 * template is never modified by rendering, so one template may be rendered
 * from several threads at once. */
okv_status okv_chat_template_parse(const char *src, okv_chat_template **out, okv_error *err);
void okv_chat_template_free(okv_chat_template *tmpl);

/* What a render sees. All strings are borrowed; NULL means absent. */
typedef struct okv_chat_args {
    const char *messages_json;    /* JSON array of messages (required) */
    const char *tools_json;       /* JSON array of tools, or NULL (-> none) */
    bool add_generation_prompt;
    const char *extra_vars_json;  /* JSON object of extra kwargs, or NULL */
    const char *bos_token;        /* NULL -> undefined in the template, like
                                     HF's special_tokens_map omitting unset ones */
    const char *eos_token;
    const char *unk_token;
    const char *pad_token;
    long long now_unix;           /* strftime_now's clock: 0 = local time now,
                                     else this UTC time (reproducible renders) */
    long long max_steps;          /* cap on loop iterations + macro calls, since
                                     templates are untrusted; 0 = 20 million */
} okv_chat_args;

/* Renders the template; *out is a NUL-terminated heap string (free() it),
 * *len its length (len may be NULL). JSON inputs read as Python's json.loads
 * reads them (1 is an int, 1.0 a float, object keys keep their order).
 * Failures: OKV_ERR_INVALID for bad JSON inputs and for render-time errors
 * (using an undefined value, type errors, a template's raise_exception(msg),
 * whose msg is in err->message), each naming its template line:column;
 * OKV_ERR_NOMEM when a render needs more than 256 MiB. Exceeding max_steps
 * is OKV_ERR_INVALID. */
okv_status okv_chat_render(const okv_chat_template *tmpl, const okv_chat_args *args,
                           char **out, size_t *len, okv_error *err);

/* What tokenizer_config.json says about chat. Strings are heap-owned
 * (NULL when absent); free with okv_chat_config_free. */
typedef struct okv_chat_config {
    char *chat_template; /* the string form, or the list entry named "default" */
    char *bos_token, *eos_token, *unk_token, *pad_token;
} okv_chat_config;

/* Extracts the template and the special-token strings (each a string or a
 * {"content": ...} object) from tokenizer_config.json text. A config without
 * a usable template (none, or a list with no "default" entry) still succeeds,
 * with chat_template NULL; malformed JSON or a chat_template of another type
 * is an error. */
okv_status okv_chat_config_parse(const char *tokenizer_config_json, okv_chat_config *out,
                                 okv_error *err);
void okv_chat_config_free(okv_chat_config *cfg);

/* Convenience: okv_chat_config_parse, then okv_chat_template_parse of its
 * template (OKV_ERR_NOT_FOUND when there is none). On success the caller
 * owns both *cfg and *tmpl; on failure neither needs freeing. */
okv_status okv_chat_template_from_config(const char *tokenizer_config_json,
                                         okv_chat_config *cfg, okv_chat_template **tmpl,
                                         okv_error *err);

#ifdef __cplusplus
}
#endif
#endif
