/*
 * `cushare status [--json] [--no-reap] [LEDGER]`: devices and processes of
 * a ledger (never creates, never claims a slot). Without LEDGER: the node
 * view (every tenant), except that a person inside a tenant
 * ($CUDA_DEVICE_MEMORY_SHARED_CACHE set, no --json) sees that tenant's
 * ledger, the one they mean. Before it is shown, slots of dead
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
    "usage: cushare status [--json] [--registry DIR/BASE] [--scan DIR]... [--no-scan]\n"
    "       cushare status [--json] [--no-reap] LEDGER\n"
    "  without LEDGER: every tenant of the node (the node view, docs/node.md), as\n"
    "  `cushare top --once`; inside a tenant ($CUDA_DEVICE_MEMORY_SHARED_CACHE set)\n"
    "  without --json: that tenant's ledger\n"
    "  --json     one JSON object (integer bytes, stable keys)\n"
    "  --no-reap  show the ledger as it is: do not reap dead processes' slots first\n"
    "  --registry, --scan, --no-scan  where tenants are found, as for `cushare top`\n"
    "examples:\n"
    "  cushare status\n"
    "  cushare status /tmp/team-a.ledger\n"
    "  cushare status --json | python3 -m json.tool\n";

/* The node view, two samples a second apart so that rates exist: as
 * JSON, or as `cushare top --once` prints it (80 columns, no keys line). */
static int node_view(const struct cs_node_where *w, bool json)
{
    struct cs_node_model *m = cs_node_model_new(w);
    if (!m) {
        fprintf(stderr, "cushare: status: out of memory\n");
        return CS_EXIT_FAIL;
    }
    cs_node_model_sample(m, 1000, 2);
    if (json) {
        cs_node_print_json(stdout, m);
    } else {
        struct cs_node_top_opts o = {.width = 80, .sort = CS_NODE_SORT_MEM, .selected = -1};
        cs_node_print_top(stdout, m, &o);
    }
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
                return cs_cli_usage_error("status", "one LEDGER at most after --; see cushare "
                                          "help status");
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cs_cli_unknown_option("status", argv[i], usage);
        } else if (path) {
            return cs_cli_usage_error("status", "one LEDGER at most, got '%s' after '%s'; see "
                                      "cushare help status", argv[i], path);
        } else {
            path = argv[i];
        }
    }
    if (!path && (json || node_opts || !getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE")))
        return node_view(&where, json);
    if (node_opts)
        return cs_cli_usage_error("status", "--registry, --scan and --no-scan choose the node "
                                            "view; drop them or the LEDGER");
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
    cs_status_reap(&l);
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
