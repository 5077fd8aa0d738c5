/*
 * Helpers every subcommand may use (declared in cli.h); kept apart from
 * main.c so unit tests can link them without the dispatcher.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/path.h"

int cs_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "cushare: %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CS_EXIT_USAGE;
}

int cs_cli_open_ledger_rw(const char *cmd, int argc, char **argv, int optind,
                          struct cs_ledger *l)
{
    if (argc - optind > 1)
        return cs_cli_usage_error(cmd, "one LEDGER at most (see --help)");
    const char *path = optind < argc ? argv[optind] : getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (!path || !*path)
        return cs_cli_usage_error(cmd, "no ledger: pass LEDGER or set "
                                       "CUDA_DEVICE_MEMORY_SHARED_CACHE");
    return cs__ledger_open(path, NULL, false, l) ? CS_EXIT_FAIL : CS_EXIT_OK;
}

const char *cs_cli_self_dir(void)
{
    static char dir[PATH_MAX];
    if (!dir[0]) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0)
            return ".";
        exe[n] = '\0';
        cs__path_dir(exe, dir, sizeof dir, NULL);
    }
    return dir;
}

/* Where the library is looked for, in order: next to the command (the
 * build tree), ../lib beside it (an installed tree, wherever it was moved),
 * and the library directory it was installed to (the command copied
 * elsewhere on its own). CUSHARE_LIBRARY, when set, is the only place. */
#ifndef CS_INSTALL_LIBDIR
#define CS_INSTALL_LIBDIR "/usr/local/lib"
#endif

int cs_cli_find_library(const char *cmd, char *out, size_t len)
{
    const char *env = getenv("CUSHARE_LIBRARY");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        if (access(out, R_OK)) {
            fprintf(stderr, "cushare: %s: CUSHARE_LIBRARY=%s: %s\n", cmd, out, strerror(errno));
            return -1;
        }
    } else {
        const char *dir = cs_cli_self_dir();
        snprintf(out, len, "%s/libcushare.so", dir);
        if (access(out, R_OK))
            snprintf(out, len, "%s/../lib/libcushare.so", dir);
        if (access(out, R_OK))
            snprintf(out, len, "%s/libcushare.so", CS_INSTALL_LIBDIR);
        if (access(out, R_OK)) {
            fprintf(stderr, "cushare: %s: cannot find libcushare.so (tried %s, %s/../lib and %s); "
                            "install it with `make install`, or set CUSHARE_LIBRARY to its path\n",
                    cmd, dir, dir, CS_INSTALL_LIBDIR);
            return -1;
        }
    }
    char *real = realpath(out, NULL);
    if (real) {
        snprintf(out, len, "%s", real);
        free(real);
    }
    return 0;
}

