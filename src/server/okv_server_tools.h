/* okv_server_tools.h — OpenAI function tools, independent of the endpoint
 * that carries them (chat completions today, the Responses API can reuse
 * it): the request's tools / tool_choice / parallel_tool_calls checked
 * into srv_tools, conversation messages with tool calls and tool results
 * made ready for a chat template, the grammar that forces a call, and the
 * reply's text split into content and tool calls, incrementally
 * (srv_tool_stream) so streamed text that may be a call is held back until
 * it is decided, as stop strings are.
 *
 * Call syntaxes (the model family's, from its chat template):
 *   tagged   <tool_call>{"name": N, "arguments": {...}}</tool_call>, one block
 *            per call (Qwen2.5, Qwen3, Hermes); text may come before
 *   llama    the whole reply one object {"name": N, "parameters": {...}},
 *            possibly after <|python_tag|> (Llama-3.1/3.2/3.3)
 *   generic  the whole reply one object {"name": N, "arguments": {...}}
 *            (templates that know no tools: the tools are then described
 *            in a system message, srv_tools_system_note)
 * The parser accepts every syntax whatever the template (a bare object or
 * array of objects with "arguments" or "parameters", also inside a ```json
 * fence); a call must name an offered function, else it stays text. */
#ifndef OKV_SERVER_TOOLS_H
#define OKV_SERVER_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "offkv_grammar.h"

#define SRV_MAX_TOOLS 64            /* functions per request (a forced call's grammar alternatives) */
#define SRV_TOOL_NAME_MAX 64        /* OpenAI: [a-zA-Z0-9_-]{1,64} */
#define SRV_MAX_FORCED_CALLS 4      /* calls a forced parallel reply may hold */

typedef enum srv_tool_choice {
    SRV_TOOLS_AUTO = 0,   /* the model decides; calls are parsed out of its reply */
    SRV_TOOLS_NONE,       /* tools not shown to the template, nothing parsed */
    SRV_TOOLS_REQUIRED,   /* the reply is forced (constrained sampling) to be calls */
    SRV_TOOLS_NAMED       /* the reply is forced to be one call of tools.fns[named] */
} srv_tool_choice;

typedef enum srv_tool_syntax { SRV_SYNTAX_GENERIC = 0, SRV_SYNTAX_TAGGED, SRV_SYNTAX_LLAMA } srv_tool_syntax;

typedef struct srv_tool {
    char *name;
    char *parameters;     /* JSON Schema text of the arguments ("{}" when absent) */
} srv_tool;

/* A request's tools. `srv_tools t = {0};` is "no tools". */
typedef struct srv_tools {
    char param[48];       /* the field a srv_tools_parse failure names (*param points here) */
    srv_tool *fns;
    int n;
    cJSON *list;          /* the tools as sent, in the chat shape (what the template's `tools` sees) */
    srv_tool_choice choice;
    int named;            /* SRV_TOOLS_NAMED: index into fns */
    bool parallel;        /* parallel_tool_calls (default true): more than one call allowed */
} srv_tools;

/* Reads "tools", "tool_choice" and "parallel_tool_calls" of a request body
 * into *t. Tools come in the chat shape {"type": "function", "function":
 * {"name", ...}} or the Responses API's flat {"type": "function", "name",
 * ...} (list holds the chat shape either way); tool_choice likewise. 0, or 400 with msg naming the field and *param set to it
 * (e.g. "tools[1].function.name", "tool_choice"). *t is freed on failure. */
int srv_tools_parse(const cJSON *body, srv_tools *t, char *msg, size_t msg_len, const char **param);
void srv_tools_free(srv_tools *t);
/* Tools are offered (and the reply parsed for calls): some tools, choice not none. */
bool srv_tools_active(const srv_tools *t);
/* The forced call's grammar (choice required or named): the family's call
 * syntax, arguments valid under the function's parameters schema; at most
 * one call unless parallel (then up to SRV_MAX_FORCED_CALLS, tagged syntax only). A schema
 * the grammar cannot enforce fails with err naming the function. */
okv_status srv_tools_grammar(const srv_tools *t, srv_tool_syntax syn, okv_grammar **out, okv_error *err);

/* The syntax a chat template's source asks for (NULL: generic), and
 * whether the template renders `tools` itself. */
srv_tool_syntax srv_tools_syntax(const char *chat_template);
bool srv_tools_template_renders(const char *chat_template);

/* One conversation message made ready for a chat template: role, content
 * (text parts joined, null -> ""), and where present name, tool_call_id,
 * reasoning_content and tool_calls (each call's function.arguments JSON
 * string turned into the object it encodes, as templates index it, e.g.
 * Llama's `arguments | tojson`). NULL with why[] filled when malformed. */
cJSON *srv_tools_message(const cJSON *m, char *why, size_t why_len);
/* For a template that does not render tools: a system note listing them
 * and the generic call format, put first in messages (merged into a
 * leading system message). False on out of memory. */
bool srv_tools_system_note(const srv_tools *t, cJSON *messages);

/* ---- the reply ------------------------------------------------------------------ */

typedef struct srv_tool_call {
    char id[32];          /* "call_" + 24 characters */
    char *name;
    char *arguments;      /* compact JSON text of the arguments object */
} srv_tool_call;

/* Where the split reply goes: text (content) and each call, in order. */
typedef struct srv_tool_sink {
    void (*text)(void *ctx, const char *text, size_t len);
    void (*call)(void *ctx, int index, const srv_tool_call *call);
    void *ctx;
} srv_tool_sink;

/* One reply's incremental split. Whitespace next to a call is dropped;
 * text that may still become a call is held; everything else passes on
 * at once. `seed` makes the call ids (distinct seeds: distinct ids). */
typedef struct srv_tool_stream {
    const srv_tools *t;
    int mode;             /* internal: start / text / block / whole-reply JSON */
    char *held;           /* undecided text */
    size_t n_held, cap_held;
    bool skip_ws;         /* text mode right after a call: leading whitespace is dropped */
    int n_calls;          /* calls passed on */
    uint64_t seed;
    bool oom;
} srv_tool_stream;

void srv_tool_stream_init(srv_tool_stream *s, const srv_tools *t, uint64_t seed);
void srv_tool_stream_push(srv_tool_stream *s, const char *text, size_t len, const srv_tool_sink *sink);
/* The reply ended: held text decided (a call, or text). */
void srv_tool_stream_end(srv_tool_stream *s, const srv_tool_sink *sink);
void srv_tool_stream_free(srv_tool_stream *s);

#endif
