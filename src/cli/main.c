/*
 * `cushare`: dispatch from src/cli/commands.def, help and version.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const struct command {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} commands[] = {
#define CS_CMD(name, fn, summary) {#name, fn, summary},
#include "cli/commands.def"
#undef CS_CMD
};

static void print_help(FILE *out)
{
    fprintf(out, "usage: cushare COMMAND [ARGS...]\n\n"
                 "Share one NVIDIA GPU between processes: memory budgets, compute shares and\n"
                 "truthful views for unmodified CUDA programs.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n  help CMD   the help of one command (also: cushare CMD --help)\n"
                 "  --help     this text\n  --version  print the version\n\n"
                 "examples:\n  cushare run --mem 4GiB --sm 50 -- python3 train.py\n"
                 "  cushare status          every tenant of this node\n"
                 "  cushare top             the same, live\n\n"
                 "Usage errors exit with status 2 (docs/cli.md lists them).\n");
}

static const struct command *find(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name))
            return &commands[i];
    return NULL;
}

/* An unknown command: the nearest one by edit distance, if any is near. */
static int unknown_command(const char *name)
{
    const char *known[sizeof commands / sizeof commands[0]];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        known[i] = commands[i].name;
    const char *s = cs_cli_suggest(name, known, sizeof commands / sizeof commands[0]);
    if (s)
        fprintf(stderr, "cushare: unknown command '%s'; did you mean '%s'? (cushare help)\n",
                name, s);
    else
        fprintf(stderr, "cushare: unknown command '%s'; see cushare help\n", name);
    return CS_EXIT_USAGE;
}

/* `cushare help [CMD]`: CMD's own --help, so that there is one text. */
static int help(int argc, char **argv)
{
    if (argc < 3 || !strcmp(argv[2], "help")) {
        print_help(stdout);
        return CS_EXIT_OK;
    }
    if (argc > 3) {
        fprintf(stderr, "cushare: help: one COMMAND at most; e.g. cushare help run\n");
        return CS_EXIT_USAGE;
    }
    const struct command *c = find(argv[2]);
    if (!c)
        return unknown_command(argv[2]);
    char *args[] = {argv[2], "--help", NULL};
    return c->fn(2, args);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_help(stderr);
        return CS_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return help(1, argv);
    if (!strcmp(argv[1], "help"))
        return help(argc, argv);
    if (!strcmp(argv[1], "--version")) {
        printf("cushare %s\n", CUSHARE_VERSION);
        return CS_EXIT_OK;
    }
    const struct command *c = find(argv[1]);
    if (c)
        return c->fn(argc - 1, argv + 1);
    if (argv[1][0] == '-') {
        fprintf(stderr, "cushare: unknown option '%s'; the options are --help and --version, "
                        "then a COMMAND (cushare help)\n", argv[1]);
        return CS_EXIT_USAGE;
    }
    return unknown_command(argv[1]);
}
