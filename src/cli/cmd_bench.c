/*
 * `cushare bench ARGS`: runs the benchmark harness, the program
 * `cushare-bench` (src/bench/), with the same arguments. The harness is a
 * binary of its own so that the command people install carries none of
 * it; this file only finds it and execs it, so its exit status, signals
 * and help are the harness's own.
 *
 * Where it is looked for, in order: beside this binary (the build tree, or
 * an installed bin/ wherever it was moved), then the bin directory it was
 * installed to (`cushare` copied elsewhere on its own).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

#ifndef CS_INSTALL_BINDIR
#define CS_INSTALL_BINDIR "/usr/local/bin"
#endif

#define HARNESS "cushare-bench"

/* The harness's path into out: 0, or -1 when neither place has it. */
static int find_harness(char *out, size_t len)
{
    const char *dirs[] = {cs_cli_self_dir(), CS_INSTALL_BINDIR};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        if ((size_t)snprintf(out, len, "%s/" HARNESS, dirs[i]) < len && !access(out, X_OK))
            return 0;
    }
    return -1;
}

int cs_cmd_bench(int argc, char **argv)
{
    char path[PATH_MAX];
    if (find_harness(path, sizeof path)) {
        return cs_cli_usage_error("bench", "the benchmark harness " HARNESS " is neither next to "
                                  "cushare (%s) nor in %s; build it with `make` or install it "
                                  "with `make install`", cs_cli_self_dir(), CS_INSTALL_BINDIR);
    }
    (void)argc;
    argv[0] = path;
    fflush(NULL);
    execv(path, argv);
    fprintf(stderr, "cushare: bench: cannot run %s: %s\n", path, strerror(errno));
    return CS_EXIT_FAIL;
}
