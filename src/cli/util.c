/*
 * Helpers every subcommand may use (declared in cli.h); kept apart from
 * main.c so unit tests can link them without the dispatcher.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/config.h"
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


size_t cs_cli_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return SIZE_MAX; /* nobody mistypes a word that long into another */
    unsigned char d[65][65];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (unsigned char)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (unsigned char)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            unsigned best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1u < best)
                best = d[i - 1][j] + 1u;
            if (d[i][j - 1] + 1u < best)
                best = d[i][j - 1] + 1u;
            /* Two neighbours swapped ("stauts") is one slip, not two. */
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1u < best)
                best = d[i - 2][j - 2] + 1u;
            d[i][j] = (unsigned char)best;
        }
    return d[la][lb];
}

/* Close enough to be the word meant: one slip in a word of up to four
 * letters, two up to eight, a third of its letters beyond; or one word a
 * prefix of the other ("--memory" for "--mem"). */
static bool near(const char *typed, const char *known, size_t dist)
{
    size_t lk = strlen(known), lt = strlen(typed);
    size_t allowed = lk <= 4 ? 1 : lk <= 8 ? 2 : lk / 3;
    if (dist <= allowed)
        return true;
    size_t shorter = lk < lt ? lk : lt;
    return shorter >= 4 && !strncmp(typed, known, shorter);
}

const char *cs_cli_suggest(const char *typed, const char *const *known, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t d = cs_cli_edit_distance(typed, known[i]);
        if (d < best_d && near(typed, known[i], d)) {
            best = known[i];
            best_d = d;
        }
    }
    return best;
}

/* The options a command's help names: each "--word" in it, once. */
static size_t options_in(const char *help, char words[][32], size_t max)
{
    size_t n = 0;
    for (const char *p = strstr(help, "--"); p && n < max; p = strstr(p + 2, "--")) {
        size_t len = 2;
        while (p[len] == '-' || (p[len] >= 'a' && p[len] <= 'z') || (p[len] >= '0' && p[len] <= '9'))
            len++;
        if (len == 2 || len >= sizeof words[0] || (p > help && p[-1] != ' ' && p[-1] != '['))
            continue;
        memcpy(words[n], p, len);
        words[n][len] = '\0';
        bool seen = false;
        for (size_t i = 0; i < n && !seen; i++)
            seen = !strcmp(words[i], words[n]);
        n += !seen;
    }
    return n;
}

int cs_cli_unknown_option(const char *cmd, const char *arg, const char *help)
{
    char words[64][32];
    const char *known[64];
    size_t n = options_in(help, words, 64);
    for (size_t i = 0; i < n; i++)
        known[i] = words[i];
    char typed[64];
    snprintf(typed, sizeof typed, "%.*s", (int)strcspn(arg, "="), arg);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(typed, known[i]))
            return cs_cli_usage_error(cmd, "%s needs a value; see cushare help %s", typed, cmd);
    const char *s = cs_cli_suggest(typed, known, n);
    if (s)
        return cs_cli_usage_error(cmd, "unknown option '%s'; did you mean '%s'? (cushare help %s)",
                                  arg, s, cmd);
    return cs_cli_usage_error(cmd, "unknown option '%s'; see cushare help %s", arg, cmd);
}

int cs_cli_size(const char *cmd, const char *opt, const char *text, uint64_t *out)
{
    switch (cs__parse_size_typed(text, out)) {
    case CS_SIZE_OK:
        return 0;
    case CS_SIZE_NEGATIVE:
        return cs_cli_usage_error(cmd, "%s '%s' is negative; give a size of 0 (no limit) or "
                                  "more, e.g. %s 4GiB", opt, text, opt);
    case CS_SIZE_NO_UNIT:
        return cs_cli_usage_error(cmd, "%s '%s' has no unit; write e.g. %s %sGiB (or %sB for "
                                  "bytes)", opt, text, opt, text, text);
    case CS_SIZE_SI_UNIT: {
        int digits = (int)strlen(text) - 2; /* "4gb": "4", then the unit letter */
        char unit = (char)(text[digits] & ~0x20);
        return cs_cli_usage_error(cmd, "%s '%s' is ambiguous: %cB may mean 10^%d or 2^%d bytes, "
                                  "and units here are binary; write %s %.*s%ciB (or the exact "
                                  "byte count, e.g. %s 4000000000B)", opt, text, unit,
                                  unit == 'K' ? 3 : unit == 'M' ? 6 : unit == 'G' ? 9 : 12,
                                  unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 40,
                                  opt, digits, text, unit, opt);
    }
    case CS_SIZE_FRACTION:
        return cs_cli_usage_error(cmd, "%s '%s' is not a whole number of bytes; use a larger "
                                  "unit, e.g. %s 1.5GiB", opt, text, opt);
    case CS_SIZE_TOO_LARGE:
        return cs_cli_usage_error(cmd, "%s '%s' is too large (at most 16 EiB); e.g. %s 4GiB",
                                  opt, text, opt);
    case CS_SIZE_NOT_A_SIZE:
        break;
    }
    return cs_cli_usage_error(cmd, "%s '%s' is not a size; write a number with a binary unit "
                              "k/m/g/t (KiB..TiB), e.g. %s 4GiB, 1.5GiB or 512MiB", opt, text,
                              opt);
}

int cs_cli_percent(const char *cmd, const char *opt, const char *text, long *out)
{
    if (cs__parse_int(text, 1, 100, out))
        return cs_cli_usage_error(cmd, "%s '%s' is not a compute share from 1 to 100 (percent); "
                                  "e.g. %s 50, or leave %s out for no limit", opt, text, opt, opt);
    return 0;
}

int cs_cli_limit_value(const char *cmd, bool is_size, const char *item, char *val, size_t len)
{
    uint64_t size;
    long pct;
    int rc = is_size ? cs_cli_size(cmd, "--mem", item, &size)
                     : cs_cli_percent(cmd, "--sm", item, &pct);
    if (rc)
        return rc;
    /* A fraction becomes bytes: the environment's readers (HAMi's too)
     * take whole numbers only. */
    if (is_size && strchr(item, '.'))
        snprintf(val, len, "%" PRIu64, size);
    else
        snprintf(val, len, "%s", item);
    return 0;
}
