/* cmd_chat.h — `offkv chat-render`: renders conversations from a JSONL file
 * with a model's chat template (see cmd_chat.c). */
#ifndef OKV_CMD_CHAT_H
#define OKV_CMD_CHAT_H

/* argv[0] is the subcommand name. Returns the process exit code
 * (0 ok, 1 error, 2 usage error). */
int okv_cli_chat_render(int argc, char **argv);

#endif
