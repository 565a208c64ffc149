/* cli.h — helpers shared by the offkv subcommands (main.c and cmd_*.c):
 * option groups for caches and runners, token list parsing, and the
 * "session" every model command opens (program + caches + runner). */
#ifndef OKV_CLI_H
#define OKV_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "offkv.h"

#define OKV_CLI_MAX_WINDOWS 64

typedef struct okv_cli_run_opts {
    okv_program_options program;
    okv_cache_options cache;
    okv_runner_options runner;
    int32_t windows[OKV_CLI_MAX_WINDOWS];
    int n_windows;
} okv_cli_run_opts;

/* An okv_session and what the commands read of it (owned by session). */
typedef struct okv_cli_session {
    okv_session *session;
    const char *key;              /* its caches' key, for the okv_cache_* / okv_seq_* verbs */
    const okv_program *program;
    okv_runner *runner;
    okv_program_info info;
} okv_cli_session;

int okv_cli_die(const okv_error *err);
/* Prints "offkv: KIND: MESSAGE" and, when the message speaks of a value a flag
 * sets, that flag in parentheses (cmd_help.c keeps the table). */
void okv_cli_report(const char *kind, const char *message);
const char *okv_cli_flag_hint(const char *message);
int okv_cli_usage_error(const char *fmt, const char *arg);
bool okv_cli_parse_int(const char *s, int lo, int hi, int *out);
void okv_cli_run_opts_init(okv_cli_run_opts *o);
int okv_cli_run_opt(int argc, char **argv, int *i, okv_cli_run_opts *o);
int okv_cli_read_tokens(const char *arg, int32_t **ids, int *n);
int okv_cli_session_open(const char *path, okv_cli_run_opts *o, okv_cli_session *s, bool verbose);
void okv_cli_session_close(okv_cli_session *s);

/* --help pages and --version (cmd_help.c). okv_cli_help prints COMMAND's
 * page (the overview for an unknown one) to stdout and returns 0. */
int okv_cli_overview(FILE *to);
int okv_cli_help(const char *command);
int okv_cli_version(void);
bool okv_cli_wants_help(int argc, char **argv);

/* `offkv serve` (cmd_serve.c). */
int okv_cli_serve(int argc, char **argv);

/* `offkv perplexity` (cmd_eval.c). */
int okv_cli_perplexity(int argc, char **argv);

/* Text commands (tokenizer, chat, generation): their command-table rows. */
#include "cmd_text.h"

#endif
