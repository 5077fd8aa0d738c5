/*
 * The `cushare` command. Each subcommand lives in src/cli/cmd_<name>.c and
 * has one row in src/cli/commands.def; main.c derives dispatch and help
 * from that list. Exit status: 0 ok, 1 runtime failure, 2 usage error.
 */
#ifndef CS_CLI_CLI_H
#define CS_CLI_CLI_H

#include <stddef.h>

#define CS_EXIT_OK 0
#define CS_EXIT_FAIL 1
#define CS_EXIT_USAGE 2

/* Each command gets argv with argv[0] = its own name. */
#define CS_CMD(name, fn, summary) int fn(int argc, char **argv);
#include "cli/commands.def"
#undef CS_CMD

/* Prints "cushare: <cmd>: <message>\n" to stderr; returns CS_EXIT_USAGE. */
int cs_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Directory holding the running `cushare` binary (for finding libcushare.so). */
const char *cs_cli_self_dir(void);

/* Absolute path of libcushare.so: $CUSHARE_LIBRARY, else next to the
 * `cushare` binary, else ../lib. 0, or -1 after a message naming `cmd`. */
int cs_cli_find_library(const char *cmd, char *out, size_t len);

#endif
