/* fuzz_chat.c — libFuzzer target: a chat template. Input starting with '{'
 * then '"' (spaces allowed; never how Jinja starts) is a tokenizer_config.json (okv_chat_template_from_config, its special
 * tokens used in the render); anything else is Jinja source
 * (okv_chat_template_parse). A parsed template is rendered twice with fixed
 * conversations: plain turns, and turns with tools and a tool call, with
 * extra kwargs. max_steps bounds loops so a slow input is a real hang. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "offkv_chat.h"

static const char *MSGS_PLAIN =
    "[{\"role\":\"system\",\"content\":\"You are terse.\"},"
    "{\"role\":\"user\",\"content\":\"Hi <b>&</b> \\\"q\\\" \\u00e9\"},"
    "{\"role\":\"assistant\",\"content\":\"Hello!\"},"
    "{\"role\":\"user\",\"content\":\"Bye\"}]";
static const char *MSGS_TOOLS =
    "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather?\"}]},"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
    "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"days\":2}}}]},"
    "{\"role\":\"tool\",\"name\":\"get_weather\",\"content\":\"{\\\"t\\\": 21.5}\"}]";
static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Forecast\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";
static const char *EXTRA = "{\"enable_thinking\":false,\"date_string\":\"26 Jul 2024\",\"n\":3,\"xs\":[1,2.5,null,true]}";

static void render(const okv_chat_template *t, const okv_chat_config *cfg) {
    for (int k = 0; k < 2; k++) {
        okv_chat_args a = {0};
        a.messages_json = k ? MSGS_TOOLS : MSGS_PLAIN;
        a.tools_json = k ? TOOLS : NULL;
        a.extra_vars_json = k ? EXTRA : NULL;
        a.add_generation_prompt = k == 0;
        a.bos_token = cfg && cfg->bos_token ? cfg->bos_token : "<s>";
        a.eos_token = cfg && cfg->eos_token ? cfg->eos_token : "</s>";
        a.unk_token = cfg ? cfg->unk_token : NULL;
        a.pad_token = cfg ? cfg->pad_token : NULL;
        a.now_unix = 1721952000;
        a.max_steps = 100000;
        char *out = NULL;
        size_t len = 0;
        okv_error err = {0};
        if (okv_chat_render(t, &a, &out, &len, &err) == OKV_OK) {
            okv_fuzz_require(out && strlen(out) <= len, "render output is NUL-terminated within len");
            free(out);
        } else {
            okv_fuzz_require(err.message[0] != 0, "a failed render carries a message");
        }
    }
}

static bool is_json_object(const char *s) {
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    if (*s++ != '{') return false;
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    return *s == '"' || *s == '}';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *src = okv_fuzz_cstr(data, size);
    okv_chat_template *t = NULL;
    okv_error err = {0};
    if (is_json_object(src)) {
        okv_chat_config cfg;
        if (okv_chat_template_from_config(src, &cfg, &t, &err) == OKV_OK) {
            render(t, &cfg);
            okv_chat_template_free(t);
            okv_chat_config_free(&cfg);
        }
    } else if (okv_chat_template_parse(src, &t, &err) == OKV_OK) {
        render(t, NULL);
        okv_chat_template_free(t);
    } else {
        okv_fuzz_require(err.message[0] != 0, "a refusal carries a message");
    }
    free(src);
    return 0;
}
