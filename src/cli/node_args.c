/* Options and one-shot sampling shared by the node views (node_model.h). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/node_model.h"
#include "core/config.h"

static struct cs_config cfg; /* the CLI's one configuration read */

int cs_node_where_defaults(const char *cmd, struct cs_node_where *w)
{
    memset(w, 0, sizeof *w);
    if (cs__config_from_env(&cfg))
        return cs_cli_usage_error(cmd, "fix the environment variables named above");
    w->registry = cfg.registry_path[0] ? cfg.registry_path : NULL;
    return 0;
}

int cs_node_where_arg(const char *cmd, int argc, char **argv, int *i, struct cs_node_where *w)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--no-scan")) {
        w->no_scan = true;
        return 1;
    }
    if (strcmp(a, "--registry") && strcmp(a, "--scan"))
        return 0;
    if (*i + 1 >= argc || argv[*i + 1][0] != '/')
        return -cs_cli_usage_error(cmd, "%s needs an absolute path (see --help)", a);
    const char *v = argv[++*i];
    if (!strcmp(a, "--registry")) {
        w->registry = v;
        return 1;
    }
    int n = 0;
    while (n < CS_NODE_SCAN_MAX && w->scan[n])
        n++;
    if (n == CS_NODE_SCAN_MAX - 1)
        return -cs_cli_usage_error(cmd, "at most %d --scan directories", CS_NODE_SCAN_MAX - 1);
    w->scan[n] = v;
    return 1;
}

void cs_node_model_sample(struct cs_node_model *m, int interval_ms, int samples)
{
    cs_node_model_refresh(m);
    for (int i = 1; i < samples; i++) {
        struct timespec ts = {.tv_sec = interval_ms / 1000,
                              .tv_nsec = (interval_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
        cs_node_model_refresh(m);
    }
}
