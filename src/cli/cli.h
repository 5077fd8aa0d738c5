/*
 * The `cushare` command. Each subcommand lives in src/cli/cmd_<name>.c and
 * has one row in src/cli/commands.def; main.c derives dispatch and help
 * from that list. Exit status: 0 ok, 1 runtime failure, 2 usage error.
 */
#ifndef CS_CLI_CLI_H
#define CS_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ledger/ledger.h"

#define CS_EXIT_OK 0
#define CS_EXIT_FAIL 1
#define CS_EXIT_USAGE 2

/* Each command gets argv with argv[0] = its own name. */
#define CS_CMD(name, fn, summary) int fn(int argc, char **argv);
#include "cli/commands.def"
#undef CS_CMD

/* Prints "cushare: <cmd>: <message>\n" to stderr; returns CS_EXIT_USAGE. */
int cs_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Levenshtein distance of two short words (SIZE_MAX past 64 letters). */
size_t cs_cli_edit_distance(const char *a, const char *b);

/* The word of known[0..n) that `typed` most likely meant, or NULL when
 * none is close: the "did you mean" of commands and options. */
const char *cs_cli_suggest(const char *typed, const char *const *known, size_t n);

/* An option `cmd` does not know (or one missing its value): one message
 * with the nearest option its help text names, "did you mean". Returns
 * CS_EXIT_USAGE. */
int cs_cli_unknown_option(const char *cmd, const char *arg, const char *help);

/* A size or compute share a person typed after `opt` (docs/cli.md): 0, or
 * CS_EXIT_USAGE after one message saying what is wrong and how to write
 * it. Sizes: binary units, fractions rounded to bytes, "GB" refused. */
int cs_cli_size(const char *cmd, const char *opt, const char *text, uint64_t *out);
int cs_cli_percent(const char *cmd, const char *opt, const char *text, long *out);

/* One item of a --mem (is_size) or --sm list, checked as above; `val`
 * gets the value for the environment (a fraction as bytes). */
int cs_cli_limit_value(const char *cmd, bool is_size, const char *item, char *val, size_t len);

/* Directory holding the running `cushare` binary (for finding libcushare.so). */
const char *cs_cli_self_dir(void);

/* Opens the one LEDGER operand (argv[optind], else
 * $CUDA_DEVICE_MEMORY_SHARED_CACHE) read-write for a command that writes
 * control words (suspend, park). CS_EXIT_OK, CS_EXIT_USAGE (message
 * printed) or CS_EXIT_FAIL (the ledger code said why). */
int cs_cli_open_ledger_rw(const char *cmd, int argc, char **argv, int optind,
                          struct cs_ledger *l);

/* Absolute path of libcushare.so: $CUSHARE_LIBRARY, else next to the
 * `cushare` binary, else ../lib. 0, or -1 after a message naming `cmd`. */
int cs_cli_find_library(const char *cmd, char *out, size_t len);

/* With parking on (CUSHARE_PARK), whether the node's budgets on every GPU
 * the new tenant sees still fit the opt-in with its budget added
 * (run_budget.c): 0, or an exit status after one error line. */
struct cs_config;
int cs_cli_check_node_budgets(const struct cs_config *cfg);

/* ---- spawn.c: starting programs --------------------------------------- */

/* LD_PRELOAD for a child: the entries of `old` (NULL = none) without any
 * libcushare.so, with `lib` first when `with_lib`. malloc'd, NULL when out
 * of memory. */
char *cs_cli_preload(const char *old, const char *lib, bool with_lib);

/* The command's per-user 0700 directory under $XDG_RUNTIME_DIR, else
 * /tmp (core/userdir.h). 0, or -1 after a message naming `cmd`. */
int cs_cli_user_dir(const char *cmd, char *out, size_t len);

struct cs_cli_spawn {
    char *const *argv;          /* argv[0] is the program */
    char *const *envp;          /* NULL: our environment */
    bool search_path;           /* look argv[0] up in PATH (execvp rules) */
    bool quiet;                 /* no messages: the caller reports (errno) */
    int *stdout_fd;             /* non-NULL: the child's stdout is a pipe,
                                   its read end stored here (close-on-exec) */
    void (*in_child)(void *arg); /* runs in the child before exec:
                                   async-signal-safe calls only */
    void *arg;
};

/* Forks and execs (no shell). The child's pid, or -1 with errno set after
 * a message naming `cmd`. A child whose exec fails exits 127 (not found)
 * or 126. */
pid_t cs_cli_spawn(const char *cmd, const struct cs_cli_spawn *s);

/* Waits for `pid` (EINTR retried): its exit status, 128 + the signal that
 * killed it, or -1. */
int cs_cli_wait(pid_t pid);

#endif
