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
    fprintf(out, "\n  --help     this text\n  --version  print the version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_help(stderr);
        return CS_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_help(stdout);
        return CS_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("cushare %s\n", CUSHARE_VERSION);
        return CS_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "cushare: unknown command '%s' (see cushare --help)\n", argv[1]);
    return CS_EXIT_USAGE;
}
