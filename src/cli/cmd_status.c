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
#include "cli/mps.h"
#include "cli/node_model.h"
#include "cli/status_model.h"

static const char usage[] =
    "usage: cushare status [--json] [--no-reap] [LEDGER]\n"
    "       cushare status --json [--registry DIR/BASE] [--scan DIR]... [--no-scan]\n"
    "  --no-reap  show the ledger as it is: do not reap dead processes' slots first\n"
    "  --json without LEDGER: every tenant of the node (the node view, docs/node.md)\n";

/* The node view as JSON: two samples a second apart, so rates exist. */
static int node_json(const struct cs_node_where *w)
{
    struct cs_node_model *m = cs_node_model_new(w);
    if (!m) {
        fprintf(stderr, "cushare: status: out of memory\n");
        return CS_EXIT_FAIL;
    }
    cs_node_model_settle(m, 1000, 2);
    cs_node_print_json(stdout, m);
    cs_node_model_free(m);
    return fflush(stdout) == 0 ? CS_EXIT_OK : CS_EXIT_FAIL;
}

int cs_cmd_status(int argc, char **argv)
{
    bool json = false, reap = true;
    const char *path = NULL;
    struct cs_node_where where;
    bool node_opts = false;
    int rc = cs_node_where_defaults("status", &where);
    if (rc)
        return rc;
    for (int i = 1; i < argc; i++) {
        int w = cs_node_where_arg("status", argc, argv, &i, &where);
        if (w < 0)
            return -w;
        if (w) {
            node_opts = true;
        } else if (!strcmp(argv[i], "--json")) {
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
    if (json && !path)
        return node_json(&where);
    if (node_opts)
        return cs_cli_usage_error("status", "--registry, --scan and --no-scan go with --json "
                                            "and no LEDGER (the node view)");
    struct cs_ledger l;
    rc = cs_status_open("status", path, reap, &l);
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
    cs_mps_annotate(st); /* the mode is the daemon's fact, not the ledger's */
    if (json)
        cs_status_print_json(stdout, st);
    else
        cs_status_print_human(stdout, st);
    free(st);
    cs__ledger_close(&l);
    return fflush(stdout) == 0 ? CS_EXIT_OK : CS_EXIT_FAIL;
}
