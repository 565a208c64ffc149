/* okv_server.h — the server's internal types, shared by the HTTP layer
 * (okv_server.c), the OpenAI request/response shapes (okv_server_api.c),
 * the scheduler (okv_server_sched.c) and the reasoning splitter
 * (okv_think.c), the prefix-cache directory (okv_server_dir.c), the
 * token log-probabilities (okv_server_logprobs.c), the Responses API
 * (okv_server_responses.c), the Redis prefix tier (okv_server_redis.c),
 * the byte buffer (okv_server_buf.c) and, in okv_server_tools.h, function
 * tools. Below this one only public offkv headers
 * are used: the server builds against include/ alone (its include wall). */
#ifndef OKV_SERVER_H
#define OKV_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "offkv_gen.h"
#include "offkv_serve.h"
#include "okv_server_tools.h"

#define SRV_MAX_STOPS 16
/* The error of a request refused (503) because the server is stopping. */
#define SRV_SHUTTING_DOWN "the server is shutting down"
#define SRV_MAX_TOP_LOGPROBS 20   /* OpenAI's bound on top_logprobs */
/* The affinity key a load balancer hashes on (prompt_cache_key as a header). */
#define SRV_AFFINITY_HEADER "X-Prompt-Cache-Key"
#define SRV_MAX_AFFINITY 256

/* ---- bytes (okv_server_buf.c) ----------------------------------------------- */

/* A growable byte buffer: `srv_buf b = {0};` is empty; a failed append sets
 * the sticky oom flag (later appends do nothing); data[len] == 0 once
 * anything was written. */
typedef struct srv_buf {
    char *data;
    size_t len, cap;
    bool oom;
} srv_buf;

void srv_buf_put(srv_buf *b, const void *p, size_t n);
void srv_buf_puts(srv_buf *b, const char *s);
/* The heap string (free() it; "" when empty), b left empty; NULL (freed) after oom. */
char *srv_buf_detach(srv_buf *b);
void srv_buf_free(srv_buf *b);
/* Grows array p of *cap elements of elem bytes to hold need (doubling from
 * 8, checked); NULL leaves p and *cap as they were. */
void *srv_grow(void *p, size_t *cap, size_t need, size_t elem);

/* ---- reasoning: <think>...</think> split out of the streamed text ---------- */

typedef enum srv_part { SRV_CONTENT = 0, SRV_REASONING = 1 } srv_part;

/* Splits streamed text into content and reasoning: text between "<think>"
 * and "</think>" is reasoning; a tag split across pieces is held back until
 * it is known to be (or not be) a tag, so neither part ever shows a partial
 * tag. Held text never ends inside a UTF-8 character that arrived whole. */
typedef struct srv_think {
    bool enabled, inside;
    char held[16];
    size_t n_held;
} srv_think;

typedef void (*srv_part_fn)(void *ctx, srv_part part, const char *text, size_t len);
void srv_think_init(srv_think *t, bool enabled, bool start_inside);
void srv_think_push(srv_think *t, const char *text, size_t len, srv_part_fn fn, void *ctx);
void srv_think_flush(srv_think *t, srv_part_fn fn, void *ctx);

/* ---- log-probabilities (okv_server_logprobs.c) ------------------------------ */

typedef struct srv_top {
    int32_t id;
    float logprob;
} srv_top;

/* One sampled token's log-probability under the model's own distribution
 * (log-softmax of the raw logits: before temperature, penalties and
 * truncation, as OpenAI and vLLM report it) and the k most likely tokens,
 * most likely first (ties: lower id first). */
typedef struct srv_logprob {
    int32_t id;
    float logprob;
    int n_top;
    srv_top top[SRV_MAX_TOP_LOGPROBS];
} srv_logprob;

/* Fills *out for token id of a logits row of vocab floats with k (<=
 * SRV_MAX_TOP_LOGPROBS) top entries. NaN logits count as -inf. */
void srv_logprob_of(const float *row, int vocab, int32_t id, int k, srv_logprob *out);
/* Chat's choices[].logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}. */
cJSON *srv_logprobs_chat_json(const okv_tok *tok, const srv_logprob *lp, size_t n);
/* Legacy completions' {tokens, token_logprobs, top_logprobs, text_offset};
 * *offset is the completion's characters before lp[0] (advanced past lp[n-1]). */
cJSON *srv_logprobs_legacy_json(const okv_tok *tok, const srv_logprob *lp, size_t n, size_t *offset);

/* ---- requests ------------------------------------------------------------- */

/* SRV_RESPONSE: /v1/responses, parsed into a chat request (okv_server_responses.c)
 * and answered in the Responses shapes by that file's emitters. */
typedef enum srv_kind { SRV_CHAT = 0, SRV_COMPLETION = 1, SRV_RESPONSE = 2 } srv_kind;

struct srv_resp;

/* One of a request's n choices (fields guarded by the request's lock). */
typedef struct srv_choice {
    srv_buf content, reasoning;   /* non-streamed: the reply so far */
    srv_think splitter;
    bool role_sent, done;
    const char *finish_reason;
    int64_t completion_tokens;
    srv_logprob *lp;              /* one per sampled token (EOS not included), when logprobs are asked for */
    size_t n_lp, cap_lp, lp_sent; /* lp_sent: entries already streamed */
    size_t text_offset;           /* legacy logprobs: characters of the streamed entries' tokens */
    srv_tool_stream tool_split;   /* content split into text and tool calls (request's tools active) */
    srv_tool_call *calls;         /* non-streamed: the calls so far (owned strings) */
    int n_calls;                  /* calls found (streamed ones too) */
    size_t cap_calls;
} srv_choice;

/* One admitted request, shared by its connection (which waits for output)
 * and the scheduler (which produces it): reference counted, fields after
 * `lock` guarded by it. */
typedef struct srv_request {
    /* set before submission, then read-only */
    srv_kind kind;
    bool stream, include_usage;
    char id[48];
    long long created;
    const char *model;            /* borrowed from the server */
    const char *fingerprint;      /* system_fingerprint, borrowed from the server */
    const okv_tok *tok;           /* borrowed: token texts of logprobs */
    int n_vocab;
    int n_choices;                /* n: choices sharing the prompt's cells (>= 1) */
    int logprobs;                 /* top entries per token (0..SRV_MAX_TOP_LOGPROBS); -1 = no logprobs */
    int32_t *prompt;
    size_t n_prompt;
    okv_gen_options go;           /* sampling, max_new_tokens, stops (below) */
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    bool think, think_inside;     /* split reasoning; the prompt already opened <think> */
    okv_grammar *grammar;         /* response_format's constraint (go.grammar points at it), owned; NULL = free text */
    srv_tools tools;              /* tools, tool_choice, parallel_tool_calls (owned) */
    bool tools_on;                /* replies are split into text and tool calls */
    double t_submit;
    uint64_t affinity;            /* prompt_cache_key (or X-Prompt-Cache-Key, or user) hashed; 0 = none */
    const char *err_code;         /* a parse refusal's OpenAI error code ("context_length_exceeded"), or NULL */
    struct srv_resp *resp;        /* SRV_RESPONSE: the reply's items and echoed fields (guarded by lock), owned */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;
    srv_buf out;                  /* bytes ready for the client (SSE events, or the whole JSON body) */
    size_t out_sent;
    srv_choice *choices;          /* [n_choices] */
    int n_done;                   /* choices ended */
    bool done, cancelled;         /* done: every choice ended, out complete; cancelled: the client went away */
    bool failed;                  /* a choice failed: the others are cancelled */
    int64_t cached_tokens;
    double t_first;               /* first text, seconds since t_submit's clock; 0 = none yet */
    char error[512];
} srv_request;

srv_request *srv_request_new(void);
/* Allocates r's n choices (false: out of memory). */
bool srv_request_choices(srv_request *r, int n);
void srv_request_unref(srv_request *r);

/* ---- the scheduler ------------------------------------------------------ */

/* One sequence of the server's cell-pool cache key: running a request, or
 * finished and kept as a prefix-cache entry (req NULL, seq >= 0) whose
 * cells a later prompt starting with the same ids forks. seq < 0: unused. */
typedef struct srv_slot {
    int seq;
    int32_t *ids;                 /* ids its cells hold, in position order */
    size_t n_ids, cap_ids;
    srv_request *req;             /* NULL = a kept entry (or unused) */
    int choice;                   /* which of req's choices it generates */
    okv_gen_seq *gen;             /* NULL with req set: a choice waiting to fork choice 0's prompt */
    const float *row;             /* the logits row being fed (for the logprobs of the token sampled from it) */
    uint64_t affinity;            /* its request's affinity (kept with the entry), 0 = none */
    int64_t last_used;            /* admission / finish counter, for LRU */
    int64_t admitted;             /* admission order, for prefill fairness */
    bool on_disk;                 /* a kept entry loaded from (so already in) the prefix-cache directory */
    bool in_redis;                /* a kept entry loaded from, or already written to, the Redis tier */
} srv_slot;

/* One file of the prefix-cache directory: a kept entry's sequence state
 * (okv_seq_save), its ids in the extra blob. */
typedef struct srv_disk_entry {
    char *name;                   /* file name inside the directory */
    int32_t *ids;                 /* the ids its positions hold, in order */
    size_t n_ids;
    uint64_t bytes;
    int64_t stamp;                /* last use, ns since the epoch (the file's mtime) */
} srv_disk_entry;

typedef struct srv_metrics {
    int64_t requests, requests_ok, requests_cancelled, requests_rejected;
    int64_t prompt_tokens, cached_tokens, generated_tokens, prefix_hits, prefix_evictions;
    int64_t affinity_hits;        /* forks whose source had the request's affinity key */
    int64_t steps, batch_tokens;
    int64_t disk_loads, disk_writes, disk_removed;
    int disk_files;
    uint64_t disk_bytes;
    int64_t redis_loads, redis_writes, redis_misses, redis_errors;
    int last_batch_tokens, last_batch_seqs;
    int cells_used, cells_free, cells_total;
    double ttft_sum;
    int64_t ttft_count;
} srv_metrics;

struct okv_server {
    okv_server_options o;
    char *model_name;
    okv_program *program;
    okv_program_info info;
    okv_tok *tok;
    char *tok_config, *chat_template;  /* bundled texts (NUL-terminated) */
    bool think_template;               /* the template knows <think> */
    srv_tool_syntax tool_syntax;       /* the template's tool-call syntax */
    bool template_tools;               /* the template renders `tools` itself */
    okv_gen_defaults defaults;
    char fingerprint[24];              /* system_fingerprint: "fp_" + the program's digest */
    pthread_mutex_t tok_lock;          /* tokenization and template renders */
    okv_grammar_vocab *grammar_vocab;  /* token bytes for response_format, built by the first request that needs one
                                          (under tok_lock; read-only after) */

    okv_session *session;              /* the caches and runner over program */
    char key[64];                      /* the session's cell-pool cache key */
    okv_runner *runner;                /* the session's */
    int max_running;                   /* sequences decoding at once (parallel, <= the step's rows) */
    int step_tokens;                   /* most tokens one batched step takes (the program's chunk) */
    double bytes_per_cell;             /* K/V bytes of one position (all caches) */
    int n_slots;                       /* = the key's max_seqs */
    srv_slot *slots;
    int32_t *b_ids, *b_seqs, *b_pos, *b_rows;  /* [step_tokens] the step being built */
    int *b_slot, *b_n;                 /* [max_running + 1] slot and token count of each part */
    float *b_logits;                   /* [max_running, vocab] */
    pthread_mutex_t lock;              /* queue, slots' req pointers, metrics, stopping */
    pthread_cond_t wake;
    srv_request **queue;
    int n_queue;
    bool stopping, stopped;
    double stop_deadline;
    int64_t admissions;
    srv_metrics m;
    pthread_t sched;
    bool sched_started;
    struct MHD_Daemon *daemon;
    struct srv_gate *gate;             /* the listening socket, in front of the daemon */
    int http_requests;                 /* requests between their headers and their reply's end (atomic) */
    int port;
    char *dir;                         /* prefix-cache directory (NULL = none); the scheduler's alone once started */
    uint64_t dir_cap;
    srv_disk_entry *disk;
    int n_disk;
    size_t cap_disk;
    int64_t last_stamp;
    int64_t dir_seen;                  /* the directory's mtime when the index was last brought up to date */
    struct srv_redis *redis;           /* the Redis prefix tier (NULL = none); the scheduler's alone once started */
};

double srv_now(void);
/* Queues a request (takes a reference); false when the queue is full or the server is stopping. */
bool srv_submit(okv_server *s, srv_request *r, bool *stopping);
okv_status srv_sched_start(okv_server *s, okv_error *err);
void srv_sched_stop(okv_server *s);
int srv_sched_active(okv_server *s);
/* Prometheus text exposition of the server's counters and gauges (caller frees). */
char *srv_metrics_text(okv_server *s);

/* One note through the options' log callback (printf-style). */
void srv_log(okv_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the prefix-cache directory (okv_server_dir.c) ----------------------------- */

/* Fewer shared tokens than this are prefilled rather than loaded from a tier. */
#define SRV_MIN_GAIN 16
/* Entries shorter than this are not written to a shared tier as their
 * request ends (loading them would save less than a prefill step). */
#define SRV_SHARE_MIN 64
#define SRV_FNV_OFFSET 1469598103934665603ULL
/* A kept entry's ids as the extra blob of its state ("OKVSRVP1", u32 count,
 * i32 ids, little-endian; heap, *len bytes), and back: the blob's ids (heap)
 * if it is one of ours holding exactly len_seq ids within the vocabulary,
 * else NULL. */
unsigned char *srv_ids_blob(const int32_t *ids, size_t n, size_t *len);
int32_t *srv_blob_ids(const okv_server *s, const unsigned char *b, size_t len, int len_seq, size_t *n);
/* FNV-1a over the ids' little-endian bytes, from h (SRV_FNV_OFFSET: a fresh hash). */
uint64_t srv_fnv_ids_from(uint64_t h, const int32_t *ids, size_t n);
uint64_t srv_fnv_ids(const int32_t *ids, size_t n);

/* Creates the directory if missing and indexes its files (each loaded once
 * into the key to check it, then dropped): a corrupt or truncated one is
 * removed, one of another program or cache setup is left alone, both with
 * a note; then the byte cap is applied. Only an unusable directory fails. */
okv_status srv_dir_open(okv_server *s, okv_error *err);
/* Writes kept entry sl to the directory unless it (or an entry it is a
 * prefix of) is there already; drops stored entries it contains; applies
 * the byte cap. Failures are noted, never fatal. */
void srv_dir_store(okv_server *s, srv_slot *sl);
/* The stored entry sharing the most (more than `have`) leading ids with
 * prompt: its index (true), or false if none shares more. */
bool srv_dir_best(okv_server *s, const int32_t *prompt, size_t n_prompt, size_t have, int *index);
/* Brings the index up to date with files other servers sharing the
 * directory published or removed since it was last read (cheap when the
 * directory has not changed). */
void srv_dir_refresh(okv_server *s);
/* Cells loading stored entry i takes. */
int srv_dir_cells(const okv_server *s, int i);
/* Loads stored entry i into unused slot `into` as a kept entry; false if it
 * cannot be (a corrupt file is removed from the directory, with a note; one
 * gone meanwhile is dropped from the index). */
bool srv_dir_load(okv_server *s, int i, srv_slot *into);
/* At a graceful stop: every kept entry stored, least recently used first. */
void srv_dir_flush(okv_server *s);
void srv_dir_free(okv_server *s);

/* ---- the Redis prefix tier (okv_server_redis.c) -------------------------------- */

/* Connects to prefix_cache_redis when set (a server that cannot be reached
 * is noted and retried later, never fatal); fails only on a malformed
 * address or a build without hiredis. */
okv_status srv_redis_open(okv_server *s, okv_error *err);
/* Loads the stored entry sharing the most leading ids with prompt (more than
 * `have` + SRV_MIN_GAIN) into unused slot `into` as a kept entry; false on a
 * miss or any failure (noted). */
bool srv_redis_fetch(okv_server *s, const int32_t *prompt, size_t n_prompt, size_t have, srv_slot *into);
/* Writes kept entry sl (unless it came from, or already went to, Redis). */
void srv_redis_store(okv_server *s, srv_slot *sl);
void srv_redis_free(okv_server *s);

/* ---- the listening socket (okv_server_gate.c) ---------------------------------- */

struct sockaddr_in;
typedef struct srv_gate srv_gate;
/* Listens on addr and starts the thread that accepts connections, answers
 * 400 to those whose first bytes are not an HTTP request line and hands
 * the others to daemon, within o's connection limits; *port = the port bound. */
okv_status srv_gate_start(struct MHD_Daemon *daemon, const struct sockaddr_in *addr, const okv_server_options *o,
                          srv_gate **out, int *port, okv_error *err);
/* Stops accepting; connections still held are closed. NULL is fine. */
void srv_gate_stop(srv_gate *g);

/* ---- OpenAI shapes (okv_server_api.c) ----------------------------------------- */

/* Parses and checks a request body into r (prompt tokenized, options set).
 * On failure fills msg (naming the field) and *param, returns the HTTP status. */
int srv_parse_request(okv_server *s, srv_kind kind, const char *body, size_t len, srv_request *r, char *msg,
                      size_t msg_len, const char **param);
/* Called by the scheduler as a choice's tokens and text arrive and when it
 * ends (choice < 0: every choice not ended yet); all append to r->out
 * (under r->lock, held by the caller). srv_emit_end returns true when it
 * ended the request's last choice (r->done). cut_short: ended by the server
 * (the shutdown grace ran out), reported as finish_reason "length" like a
 * max_tokens limit. */
void srv_emit_token(srv_request *r, int choice, const float *row, int32_t id);
void srv_emit_text(srv_request *r, int choice, const char *text, size_t len);
bool srv_emit_end(srv_request *r, int choice, const okv_gen_stats *st, const char *error, bool cut_short);
/* "fp_" and the program's digest (okv_program_fingerprint) into out[24]. */
void srv_fingerprint(const okv_program *p, char out[24]);
/* {"error": {"message", "type", "param", "code"}} (caller frees); code NULL is JSON null. */
char *srv_error_json(const char *message, const char *type, const char *param);
char *srv_error_json_code(const char *message, const char *type, const char *param, const char *code);
/* FNV-1a of a prompt-cache affinity key (never 0; NULL or "" give 0). */
uint64_t srv_affinity_hash(const char *key);
char *srv_models_json(const okv_server *s);


/* ---- the Responses API (okv_server_responses.c) ---------------------------------- */

/* Parses a /v1/responses body into r: converted to the chat request the
 * chat path parses (srv_parse_request), r->kind then SRV_RESPONSE. Errors
 * as srv_parse_request's, naming the Responses field. */
int srv_parse_responses(okv_server *s, const char *body, size_t len, srv_request *r, char *msg, size_t msg_len,
                        const char **param);
/* Once r has its id, model and created (before submission): the id in
 * OpenAI's "resp_" form and, streamed, the response.created and
 * response.in_progress events. */
void srv_resp_begin(srv_request *r);
/* srv_emit_token / srv_emit_text / srv_emit_end for a SRV_RESPONSE request
 * (those call these): the same contract, the Responses shapes. */
void srv_resp_token(srv_request *r, int choice, int32_t id);
void srv_resp_text(srv_request *r, int choice, const char *text, size_t len);
bool srv_resp_end(srv_request *r, int choice, const okv_gen_stats *st, const char *error, bool cut_short);
void srv_resp_free(struct srv_resp *p);

#endif
