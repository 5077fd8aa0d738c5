/*
 * `cushare status [--json] [--no-reap] [LEDGER]`: devices and processes of
 * a ledger (never creates, never claims a slot). LEDGER defaults to
 * $CUDA_DEVICE_MEMORY_SHARED_CACHE. Before it is shown, slots of dead
 * processes are reaped and the aggregates healed, as before any view
 * (docs/ledger.md); --no-reap, or a ledger the caller may not write, shows
 * it untouched, dead slots included. Humans get MiB; --json gives one
 * object with integer bytes and stable keys (docs/ledger.md).
 */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/status_model.h"

static const char usage[] =
    "usage: cushare status [--json] [--no-reap] [LEDGER]\n"
    "  --no-reap  show the ledger as it is: do not reap dead processes' slots first\n";

int cs_cmd_status(int argc, char **argv)
{
    bool json = false, reap = true;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--no-reap")) {
            reap = false;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return CS_EXIT_OK;
        } else if (!strcmp(argv[i], "--")) {
            if (i + 1 < argc)
                path = argv[++i];
            if (i + 1 < argc)
                return cs_cli_usage_error("status", "too many arguments (see --help)");
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cs_cli_usage_error("status", "unknown option '%s' (see --help)", argv[i]);
        } else if (path) {
            return cs_cli_usage_error("status", "one LEDGER at most (see --help)");
        } else {
            path = argv[i];
        }
    }
    struct cs_ledger l;
    int rc = cs_status_open("status", path, reap, &l);
    if (rc != CS_EXIT_OK)
        return rc;
    struct cs_status *st = malloc(sizeof *st);
    if (!st) {
        cs__ledger_close(&l);
        fprintf(stderr, "cushare: status: out of memory\n");
        return CS_EXIT_FAIL;
    }
    cs_status_settle(&l);
    cs_status_snapshot(&l, st);
    if (json)
        cs_status_print_json(stdout, st);
    else
        cs_status_print_human(stdout, st);
    free(st);
    cs__ledger_close(&l);
    return fflush(stdout) == 0 ? CS_EXIT_OK : CS_EXIT_FAIL;
}
