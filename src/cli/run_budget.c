/*
 * The node's budget rule for a tenant `cushare run` starts (docs/parking.md,
 * "Turning it on"): with parking on (CUSHARE_PARK=P), the budgets of the
 * tenants on a GPU may sum to P % of its memory, the newcomer's included;
 * a budget of 0 (no limit) counts as the whole card. The rule itself is
 * cs__park_budget_admits (src/park/policy.c); this file gathers its inputs
 * from the node view.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/node_model.h"
#include "core/config.h"
#include "park/policy.h"

/* The newcomer's position among its visible devices on NVML GPU g (its
 * CUDA index, which its budget is given by), or -1 when CUDA_VISIBLE_DEVICES
 * hides g. Entries are NVML indices or UUIDs (or their prefixes). */
static int visible_index(const struct cs_node_gpu *g)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v)
        return g->nvml_index;
    char list[512];
    snprintf(list, sizeof list, "%s", v);
    int k = 0;
    for (char *save = NULL, *e = strtok_r(list, ",", &save); e; e = strtok_r(NULL, ",", &save), k++) {
        char *end;
        long n = strtol(e, &end, 10);
        if (*e && !*end ? n == g->nvml_index : (g->uuid[0] && !strncmp(g->uuid, e, strlen(e))))
            return k;
    }
    return -1;
}

/* The budgets of the tenants already on GPU g; a device whose GPU the
 * tenant has not named yet counts on the GPU of its index. */
static uint64_t budgets_on(const struct cs_node_model *m, int g)
{
    uint64_t card = m->gpu[g].mem_total, sum = 0;
    for (int i = 0; i < m->ntenants; i++) {
        const struct cs_node_tenant *t = m->tenant[i];
        if (t->gone || !t->nproc)
            continue;
        for (int d = 0; d < CS_MAX_DEVICES; d++) {
            int at = cs_node_gpu_of(m, t, d);
            if (at < 0 && !t->devinfo[d].uuid[0] && t->devinfo[d].index == d &&
                m->gpu[g].nvml_index == d && t->devinfo[d].physical_total)
                at = g;
            if (at == g)
                sum += cs__park_budget_on_card(t->devinfo[d].limit, card);
        }
    }
    return sum;
}

int cs_cli_check_node_budgets(const struct cs_config *cfg)
{
    if (!cfg->park_pct)
        return 0;
    struct cs_node_where w;
    if (cs_node_where_defaults("run", &w))
        return CS_EXIT_USAGE;
    struct cs_node_model *m = cs_node_model_new(&w);
    if (!m) {
        fprintf(stderr, "cushare: run: out of memory reading the node view\n");
        return CS_EXIT_FAIL;
    }
    cs_node_model_refresh(m);
    int rc = 0;
    if (!m->ngpus) {
        const char *why = cs_node_nvml_problem();
        fprintf(stderr, "cushare: run: CUSHARE_PARK=%u needs the GPUs' memory to check the "
                "node's budgets, and NVML gives none (%s); unset CUSHARE_PARK or fix NVML\n",
                cfg->park_pct, why ? why : "no GPU");
        rc = CS_EXIT_FAIL;
    }
    for (int g = 0; g < m->ngpus && !rc; g++) {
        int k = visible_index(&m->gpu[g]);
        uint64_t card = m->gpu[g].mem_total;
        if (k < 0 || k >= CS_MAX_DEVICES || !card)
            continue;
        uint64_t mine = cs__config_mem_limit(cfg, k), sum = budgets_on(m, g);
        if (cs__park_budget_admits(sum, mine, card, cfg->park_pct))
            continue;
        uint64_t counted = cs__park_budget_on_card(mine, card);
        fprintf(stderr, "cushare: run: GPU %d (%s): the tenants' budgets would sum to "
                "%.1f GiB with this one's %.1f GiB, more than CUSHARE_PARK=%u %% of its "
                "%.1f GiB; give a smaller --mem, wait for a tenant to end, or raise "
                "CUSHARE_PARK (docs/parking.md)\n",
                m->gpu[g].nvml_index, m->gpu[g].uuid,
                (double)(sum + counted) / (1 << 30), (double)counted / (1 << 30), cfg->park_pct,
                (double)card / (1 << 30));
        rc = CS_EXIT_FAIL;
    }
    cs_node_model_free(m);
    return rc;
}
