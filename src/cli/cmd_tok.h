/* cmd_tok.h — `offkv tokenize` and `offkv detokenize` (see cmd_tok.c). */
#ifndef OKV_CMD_TOK_H
#define OKV_CMD_TOK_H

#include "offkv.h"
#include "offkv_tok.h"

/* argv[0] is the subcommand name. Return the process exit code (0 ok,
 * 1 error; messages go to stderr). */
int okv_cli_tokenize(int argc, char **argv);
int okv_cli_detokenize(int argc, char **argv);

/* Where the tokenizer comes from: --tokenizer tokenizer.json, or the
 * tokenizer bundled in a program file given as the positional argument. */
typedef struct okv_cli_tok_source {
    const char *tokenizer_json; /* --tokenizer FILE */
    const char *program;        /* positional model.okv */
} okv_cli_tok_source;

/* Loads the tokenizer named by src: the tokenizer.json file when given,
 * else the one bundled in the program. */
okv_status okv_cli_open_tokenizer(const okv_cli_tok_source *src, okv_tok **out, okv_error *err);
/* The tokenizer bundled in an open program (name is used in messages). */
okv_status okv_cli_tokenizer_from_program(const okv_program *p, const char *name, okv_tok **out, okv_error *err);

#endif
