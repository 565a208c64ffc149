/* cmd_help.c — `offkv --help`, `offkv COMMAND --help` and `offkv --version`.
 *
 * One page per command, kept here rather than spread over the parsers so a
 * newcomer's first question ("what can run do?") has one answer, and so
 * main() can answer --help before any command parses its options (a parser
 * would otherwise take --help for an option missing its value). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

#ifndef OKV_VERSION
#define OKV_VERSION "0.1.0"
#endif

#define CACHE_OPTS                                                                                            \
    "cache and runner options:\n"                                                                             \
    "  --kv-storage-dtype auto|f32|f16|bf16|q8  KV cache element type (auto, the default: the program's\n"  \
    "                                    dtype for bf16/f16 programs, f32 for f32 ones; q8: 32 int8 + a scale)\n" \
    "  --kv-k-dtype DT, --kv-v-dtype DT  the same for K or V alone (e.g. --kv-v-dtype q8: V in 8 bits, K kept;\n" \
    "                                    the later flag wins)\n"                                              \
    "  --kv-max-capacity N               most tokens the caches hold (default: the program's max_ctx_len)\n"  \
    "  --kv-initial-capacity N           first allocation; caches double as they fill\n"                       \
    "  --kv-windows W[,W...]             sliding window per cache, repeating (0 = full history)\n"            \
    "  --threads N                       worker threads (default: all cores)\n"                               \
    "  --mmap                            map the program file instead of copying it into huge pages\n"       \
    "                                    (the default where the kernel grants them: faster decode, but\n"     \
    "                                    private memory the size of the file)\n"                             \
    "  --reference-attention             the simple, slow attention kernel (for checking)\n"          \
    "  --deterministic                   batch-invariant kernels: a row's logits do not depend on the\n" \
    "                                    step's other rows or size (slower)\n"

typedef struct help_page {
    const char *command;
    const char *text;
} help_page;

static const help_page PAGES[] = {
    {"export",
     "usage: offkv export CHECKPOINT -o OUT.okv [options]\n"
     "\n"
     "Turns a checkpoint into one program file: graph, weights, cache layout, tokenizer and chat template.\n"
     "CHECKPOINT is an HF directory (config.json, *.safetensors, tokenizer.json, ...) or a llama.cpp .gguf file.\n"
     "\n"
     "  -o, --output OUT.okv              where to write the program (no file is left on failure)\n"
     "  --dtype fp32|fp16|bf16            weight dtype of matrices that are not quantized (default bf16)\n"
     "  --max-ctx-len N                   longest sequence the program accepts (default 2048)\n"
     "  --prefill-chunk-size N            largest step (default min(512, smallest window, max-ctx-len))\n"
     "  --qlinear 4w|8w|BLOCK             quantize every decoder linear (4-bit asymmetric / 8-bit symmetric), or into a\n"
     "                                    GGUF block type: q4_0 q4_1 q5_0 q5_1 q8_0 q4_K q5_K q6_K (a K-quant falls back to\n"
     "                                    q4_0 / q5_0 / q5_1 where its 256 does not divide a matrix's input dimension)\n"
     "  --qlinear-group-size G            32, 64, 128 or 256 (default 32; 4w/8w only)\n"
     "  --qembedding 4w|8w|BLOCK          quantize the embedding table and LM head (the same choices)\n"
     "  --qembedding-group-size G         32, 64, 128 or 256\n"
     "  --keep-quant                      GGUF input (the default): every matrix in Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q2_K..Q6_K\n"
     "                                    keeps the file's own blocks, run by native kernels (--qlinear/--qembedding\n"
     "                                    re-quantize the tensors they cover instead)\n"
     "  --dequantize                      GGUF input: dequantize its blocks to --dtype (the oracle-exact float path)\n"
     "  --calibration TEXT                activation-aware quantization: run the float model over TEXT first and\n"
     "                                    weight each input channel's error by its mean square (not the eval text)\n"
     "  --calibration-ctx N               tokens per calibration window (default 512)\n"
     "  --threads N                       threads for quantization and calibration (default: every CPU;\n"
     "                                    the program written is the same for any N)\n"
     "\n"
     "example: offkv export SmolLM2-135M-Instruct.Q4_1.gguf -o smol.okv\n"},
    {"inspect",
     "usage: offkv inspect PROGRAM.okv|MODEL.gguf [--json]\n"
     "       offkv inspect --config DIR|config.json [--json]\n"
     "\n"
     "Shows what a program holds (model, size, cache layout, graph, tensors, tokenizer), what a GGUF file\n"
     "holds, or the cache layout a checkpoint would get without reading its weights.\n"
     "\n"
     "  --json                            a JSON document instead of text\n"},
    {"logits",
     "usage: offkv logits PROGRAM.okv --tokens FILE|\"ids\" --out LOGITS.f32 [--chunk N] [cache options]\n"
     "\n"
     "Runs the ids through the model and writes every position's logits ([n, vocab] float32).\n"
     "\n"
     "  --tokens FILE|\"ids\"               a JSON file with a \"tokens\" array, or ids separated by spaces\n"
     "  --out FILE                        where the logits go\n"
     "  --chunk N                         tokens per step (default: the program's prefill_chunk_size)\n"
     "\n" CACHE_OPTS},
    {"generate",
     "usage: offkv generate PROGRAM.okv --tokens FILE|\"ids\" [--max-new-tokens N] [cache options]\n"
     "\n"
     "Greedy generation from token ids; prints the new ids.\n"
     "\n"
     "  --tokens FILE|\"ids\"               the prompt ids\n"
     "  --max-new-tokens N                default 32; stops early at an EOS id\n"
     "\n" CACHE_OPTS},
    {"perplexity",
     "usage: offkv perplexity PROGRAM.okv --file TEXT [--ctx N] [--kl-base BASE.okv] [--kl-base-kv-storage-dtype DT]\n"
     "       [--tokenizer FILE] [cache options]\n"
     "\n"
     "Perplexity of a text file in windows of --ctx tokens (default 512); with --kl-base also the KL\n"
     "divergence from, and top-1 agreement with, another program of the same model. With\n"
     "--kl-base-kv-storage-dtype the base runs with that KV storage (alone: the base is the program\n"
     "itself), e.g. --kv-storage-dtype q8 --kl-base-kv-storage-dtype f32 measures what q8 KV costs.\n"
     "\n" CACHE_OPTS},
    {"run",
     "usage: offkv run PROGRAM.okv --prompt TEXT [options]\n"
     "       offkv run PROGRAM.okv --interactive [options]\n"
     "\n"
     "Text in, streamed text out: the prompt goes through the model's chat template, the reply is streamed\n"
     "to stdout and a stats line (prompt and generation speed, why it stopped) goes to stderr.\n"
     "\n"
     "  --prompt TEXT                     the user message\n"
     "  --system TEXT                     a system message\n"
     "  -i, --interactive                 a conversation: one user turn per stdin line (/reset, /save FILE,\n"
     "                                    /load FILE, /quit)\n"
     "  --chat auto|none|template         auto: the template if the model has one; none: the prompt as is\n"
     "  --chat-arg KEY=JSON               an extra template variable (e.g. enable_thinking=false)\n"
     "  --max-new-tokens N                default 256\n"
     "  --greedy                          always the most likely token\n"
     "  --temperature F --top-k N --top-p F --min-p F --repetition-penalty F --seed N\n"
     "                                    sampling (defaults from the model's generation_config.json)\n"
     "  --stop STRING                     stop when the text contains STRING (repeatable)\n"
     "  --tokenizer FILE                  a tokenizer.json instead of the bundled one\n"
     "  --json                            constrained sampling: the reply is a JSON object\n"
     "  --json-schema FILE                constrained sampling: the reply is a value of this JSON Schema\n"
     "                                    (type, properties, required, items, enum, const, anyOf, ...;\n"
     "                                    an unsupported keyword is refused by name)\n"
     "  --verbose                         the model's name and size, and the cache layout, first;\n"
     "                                    the kernel variants that ran, per op, last\n"
     "\n" CACHE_OPTS
     "\n"
     "example: offkv run smol.okv --prompt \"What is the capital of France?\"\n"},
    {"serve",
     "usage: offkv serve PROGRAM.okv [--host 127.0.0.1] [--port 8080] [options]\n"
     "\n"
     "An OpenAI-compatible HTTP server: POST /v1/chat/completions (the model's chat template, \"stream\": SSE),\n"
     "POST /v1/completions (a prompt string or token ids), POST /v1/responses (OpenAI's Responses API over the\n"
     "chat path, docs/responses.md), GET /v1/models, GET /health, GET /metrics (Prometheus).\n"
     "Sampling defaults come from the program; request fields (temperature, top_p, top_k, min_p, seed, stop,\n"
     "max_tokens, repetition_penalty, chat_template_kwargs) override them; logprobs, top_logprobs and n (up to\n"
     "--parallel, one prefill) are served. SIGINT/SIGTERM stop it gracefully.\n"
     "\n"
     "  --host ADDR                       IPv4 address to bind (default 127.0.0.1)\n"
     "  --port N                          TCP port (default 8080; 0 = any free port, printed at start)\n"
     "  --parallel N                      sequences generated at once, batched into one step (default 4)\n"
     "  --prefix-cache-bytes N            K/V bytes finished sequences keep as prefix cache (default: until\n"
     "                                    their cells are needed)\n"
     "  --prefix-cache-dir DIR            keep prefix-cache entries in DIR across restarts (written when evicted\n"
     "                                    and at shutdown, loaded instead of prefilled)\n"
     "  --prefix-cache-dir-bytes N        bytes DIR may hold (every server's files); least recently used go\n"
     "                                    first (default 1 GiB)\n"
     "  --prefix-cache-dir-shared         several servers share DIR: write each entry as its request ends, so\n"
     "                                    the others load it instead of prefilling (docs/deploy.md)\n"
     "  --prefix-cache-redis HOST:PORT    share prefix-cache entries through a Redis server (fetched when memory\n"
     "                                    and DIR miss, written as each request ends; needs a hiredis build)\n"
     "  --prefix-cache-redis-ttl S        seconds a Redis entry lives (default 3600)\n"
     "  --prefix-cache-redis-bytes N      set the Redis server's maxmemory to N with allkeys-lru eviction\n"
     "                                    (default: leave its configuration alone)\n"
     "  --ctx-per-seq N                   positions per sequence (default and most: the program's max_ctx_len)\n"
     "  --chat-template FILE              render chats with this Jinja template instead of the program's own\n"
     "                                    (e.g. one that renders `tools`; docs/tools.md)\n"
     "  --api-key KEY                     require \"Authorization: Bearer KEY\" on /v1/* and /metrics\n"
     "  --cors-origin ORIGIN|*            allow browsers of ORIGIN (or any): Access-Control-Allow-Origin on\n"
     "                                    every response, OPTIONS preflights answered before the key check\n"
     "  --max-queue N                     requests waiting for a free sequence before 429 (default 64)\n"
     "  --max-body BYTES                  larger request bodies get 413 (default 1048576)\n"
     "  --prefill-chunk N                 prompt tokens per step between other sequences' tokens (default 64)\n"
     "  --max-tokens N                    limit when a request sets none (default: the context)\n"
     "  --model-name NAME                 the model id in responses (default: the file name)\n"
     "  --shutdown-grace S                seconds running requests may finish on shutdown (default 5); then\n"
     "                                    each returns what it generated (finish_reason \"length\"), or 503\n"
     "                                    before its first token\n"
     "  --max-connections N               open client connections (default 256; more wait in the backlog)\n"
     "  --max-connections-per-ip N        open connections from one client address, more are closed at once\n"
     "                                    (default 64; 0 = only --max-connections; raise it behind a proxy)\n"
     "  --idle-timeout S                  seconds a connection may stay silent while the client is to act:\n"
     "                                    sending its request, reading a finished reply, keep-alive (default\n"
     "                                    15); not while the server is still producing the reply\n"
     "\n"
     CACHE_OPTS
     "\n"
     "example: offkv serve smol.okv --port 8080 --parallel 4 --ctx-per-seq 2048\n"},
    {"tokenize",
     "usage: offkv tokenize PROGRAM.okv|--tokenizer tokenizer.json (--text TEXT [--json] | --jsonl IN.jsonl)\n"
     "                      [--no-special] [--out FILE]\n"
     "\n"
     "Text to token ids with the program's tokenizer (or a tokenizer.json): one id per line, a JSON array\n"
     "with --json, or {\"ids\": [...]} lines for each {\"text\": ...} line of --jsonl. --no-special: no BOS.\n"},
    {"detokenize",
     "usage: offkv detokenize PROGRAM.okv|--tokenizer tokenizer.json (--ids \"ids\" | --jsonl IN.jsonl)\n"
     "                        [--skip-special] [--out FILE]\n"
     "\n"
     "Token ids to text; --skip-special drops special tokens.\n"},
    {"chat-render",
     "usage: offkv chat-render --tokenizer-config tokenizer_config.json [--template FILE.jinja] --jsonl IN.jsonl\n"
     "\n"
     "Renders conversations ({\"messages\": [...], \"add_generation_prompt\": bool, ...} lines) with a chat\n"
     "template exactly as HF's apply_chat_template does.\n"},
};

static const char OVERVIEW[] =
    "offkv — run HuggingFace and GGUF language models on CPUs, KV cache owned by the runtime\n"
    "\n"
    "usage: offkv COMMAND [options]      (offkv COMMAND --help for one command)\n"
    "\n"
    "  export       checkpoint (HF directory or .gguf) -> program file\n"
    "  run          chat with a program: prompt in, streamed text out\n"
    "  inspect      what a program, GGUF file or checkpoint config holds\n"
    "  generate     greedy generation from token ids\n"
    "  logits       logits of token ids, to a file\n"
    "  perplexity   perplexity (and KL against another program) on a text file\n"
    "  serve        OpenAI-compatible HTTP server (chat/completions, streaming)\n"
    "  tokenize     text -> ids with a program's tokenizer\n"
    "  detokenize   ids -> text\n"
    "  chat-render  render conversations with a chat template\n"
    "\n"
    "first steps:\n"
    "  offkv export SmolLM2-135M-Instruct.Q4_1.gguf -o smol.okv\n"
    "  offkv run smol.okv --prompt \"What is the capital of France?\"\n"
    "\n"
    "  --version    the version\n";

int okv_cli_overview(FILE *to) {
    fputs(OVERVIEW, to);
    return 0;
}

int okv_cli_version(void) {
    printf("offkv %s\n", OKV_VERSION);
    return 0;
}

int okv_cli_help(const char *command) {
    for (size_t i = 0; i < sizeof PAGES / sizeof *PAGES; i++)
        if (!strcmp(PAGES[i].command, command)) {
            fputs(PAGES[i].text, stdout);
            return 0;
        }
    return okv_cli_overview(stdout);
}

/* True if the command line asks for help: --help or -h anywhere after the
 * command, unless it is the value of an option that takes text. */
bool okv_cli_wants_help(int argc, char **argv) {
    static const char *const text_opts[] = {"--prompt", "--system", "--text", "--stop", "--chat-arg", "--ids"};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") && strcmp(argv[i], "-h")) continue;
        bool is_value = false;
        for (size_t k = 0; k < sizeof text_opts / sizeof *text_opts && i > 1; k++) is_value |= !strcmp(argv[i - 1], text_opts[k]);
        if (!is_value) return true;
    }
    return false;
}

/* Library errors say what is wrong in the library's words ("prefill chunk
 * size 0 is outside [1, 8]"); they cannot know which flag set the value. This
 * table is where the CLI knows it: each entry is a phrase the library's
 * messages use and the flag that sets that value. tests/cli checks that the
 * flag reaches the user for each such error. */
typedef struct flag_hint {
    const char *phrase;
    const char *flag;
} flag_hint;

static const flag_hint FLAG_HINTS[] = {
    {"prefill chunk size", "--prefill-chunk-size"},
    {"linear-weight group size", "--qlinear-group-size"},
    {"embedding group size", "--qembedding-group-size"},
    {"linear-weight quantization", "--qlinear"},
    {"embedding quantization", "--qembedding"},
    {"eval: a window of", "--ctx"},
    {"fewer than one window", "--ctx"},
    {"no chat template", "--chat none"},
    {"drop the oldest turns", "--drop-old-turns"},
    {"tokenizer.json given separately", "--tokenizer"},
};

const char *okv_cli_flag_hint(const char *message) {
    for (size_t i = 0; i < sizeof FLAG_HINTS / sizeof FLAG_HINTS[0]; i++)
        if (strstr(message, FLAG_HINTS[i].phrase)) return FLAG_HINTS[i].flag;
    return NULL;
}

void okv_cli_report(const char *kind, const char *message) {
    const char *flag = okv_cli_flag_hint(message);
    if (flag) fprintf(stderr, "offkv: %s: %s (%s)\n", kind, message, flag);
    else fprintf(stderr, "offkv: %s: %s\n", kind, message);
}
