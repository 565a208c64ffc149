/* okv_describe.h — `inspect` documents: a JSON description of a program or
 * of the layout a config would get, and its text rendering. */
#ifndef OKV_DESCRIBE_H
#define OKV_DESCRIBE_H

#include <stdbool.h>
#include <cjson/cJSON.h>

#include "okv_format.h"

/* architecture, dtype (may be NULL) and the layout's fields at top level. */
cJSON *okv_describe_layout_doc(const okv_layout *l, const char *architecture, const char *dtype);
/* Layout doc plus metadata, tokenizer blobs, graph summary, tensor table. */
cJSON *okv_describe_program_doc(const okv_program_file *pf);
/* JSON text (json = true) or a human-readable rendering; caller frees. */
char *okv_describe_render(const cJSON *doc, bool json);

#endif
