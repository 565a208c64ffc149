/* cmd_text.h — the text commands of the CLI (tokenizer, chat, generation),
 * as entries of main.c's command table. */
#ifndef OKV_CMD_TEXT_H
#define OKV_CMD_TEXT_H

#include "cmd_chat.h"
#include "cmd_tok.h"

int okv_cli_run(int argc, char **argv);

#define OKV_CLI_TEXT_COMMANDS                                                                                       \
    {"run", okv_cli_run, "PROGRAM.okv --prompt TEXT [--system T] [--chat auto|none] [--temperature F] ..."},         \
    {"tokenize", okv_cli_tokenize, "PROGRAM.okv | --tokenizer FILE  --text TEXT [--json] | --jsonl IN.jsonl"},      \
    {"detokenize", okv_cli_detokenize, "PROGRAM.okv | --tokenizer FILE  --ids \"ids\" | --jsonl IN.jsonl"},       \
    {"chat-render", okv_cli_chat_render, "--tokenizer-config FILE [--template FILE] --jsonl IN.jsonl"},

#endif
