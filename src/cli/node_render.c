/*
 * Renderers of the node view model for people (`cushare top`, 80 columns
 * and up, plain ASCII so it survives any ssh and terminal) and for
 * machines (`cushare status --json` without LEDGER; keys in docs/node.md).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/node_model.h"
#include "cli/text.h"

#define MIB (1024.0 * 1024.0)
#define HIST_W_MAX 16
#define FLAGS_W 8       /* "SUSP MPS" */
/* Row width without the history: 80 columns leave it 5. */
#define ROW_W (67 + FLAGS_W)

static const char ramp[] = " .:-=+*#"; /* sparkline levels, ASCII */

static void spark(FILE *out, const struct cs_node_tenant *t, int d, int w)
{
    double h[CS_NODE_HIST];
    int n = cs_node_share_history(t, d, h, CS_NODE_HIST);
    int first = n > w ? n - w : 0;
    for (int i = 0; i < w - (n - first); i++)
        fputc(' ', out);
    for (int i = first; i < n; i++) {
        int lvl = (int)(h[i] * (double)(sizeof ramp - 2) + 0.5);
        fputc(ramp[lvl < 0 ? 0 : lvl > (int)sizeof ramp - 2 ? (int)sizeof ramp - 2 : lvl], out);
    }
}

/* The tenant's name as a terminal may show it: tenants choose their
 * ledger paths and container names, so escapes in them become '?'. */
static const char *tenant_name(const struct cs_node_tenant *t, char *out, size_t n)
{
    const char *s = strrchr(t->where.path, '/');
    return cs_text_terminal(out, n, t->where.container[0] ? t->where.container
                                    : s ? s + 1 : t->where.path);
}

static const char *best_tier(const struct cs_node_tenant *t)
{
    int best = -1;
    for (int i = 0; i < CS_IDENTITY_NTIERS; i++)
        if (t->tiers[i] && (best < 0 || t->tiers[i] > t->tiers[best]))
            best = i;
    return best < 0 ? "-" : cs__ledger_identity_name((uint32_t)best);
}

/* FLAGS of a tenant's device row: GONE alone; else SUSP (parked), STARVED
 * and MPS (some process is an MPS client of this GPU), as many as fit
 * FLAGS_W in that order (STARVED leaves MPS to the process rows); "-". */
static void flags_text(const struct cs_node_tenant *t, int d, char *out, size_t n)
{
    const char *word[] = {t->suspended ? "SUSP" : NULL, t->dev[d].starved ? "STARVED" : NULL,
                          t->dev[d].nmps ? "MPS" : NULL};
    size_t len = 0;
    snprintf(out, n, "%s", t->gone ? "GONE" : "-");
    for (size_t i = 0; i < sizeof word / sizeof word[0] && !t->gone; i++) {
        size_t w = word[i] ? strlen(word[i]) + (len ? 1 : 0) : 0;
        if (w && len + w <= FLAGS_W && len + w < n)
            len += (size_t)snprintf(out + len, n - len, "%s%s", len ? " " : "", word[i]);
    }
}

static void categories(FILE *out, const struct cs_node_tenant *t, int d)
{
    fprintf(out, "      ");
    const char *sep = "";
    for (int c = 0; c < CS_MEM_NCATEGORIES; c++)
        if (t->dev[d].bytes[c]) {
            fprintf(out, "%s%s %.1f", sep, cs__ledger_category_name(c),
                    (double)t->dev[d].bytes[c] / MIB);
            sep = "  ";
        }
    fprintf(out, "%s\n", *sep ? "" : "no memory");
}

static void processes(FILE *out, const struct cs_node_tenant *t, int d)
{
    for (int k = 0; k < t->nproc; k++) {
        const struct cs_status_process *p = &t->proc[k];
        char ident[48];
        cs_status_identity_text(p, ident, sizeof ident);
        fprintf(out, "      pid %-8" PRId32 " host %-8" PRId32 " %-5s %9.1f MiB  %-16s%s%s\n",
                p->pid, p->host_pid, p->alive ? "live" : "dead",
                (double)cs_status_process_total(p, d) / MIB, ident, p->mps ? " MPS" : "",
                p->suspended ? " SUSP" : "");
    }
}

static void tenant_row(FILE *out, const struct cs_node_tenant *t, int d, bool sel, int hist_w)
{
    const struct cs_status_device *i = &t->devinfo[d];
    const struct cs_node_tenant_dev *v = &t->dev[d];
    char lim[16], share[16], thr[8], fl[FLAGS_W + 1], name[17];
    if (i->limit)
        snprintf(lim, sizeof lim, "%.0f", (double)i->limit / MIB);
    else
        snprintf(lim, sizeof lim, "-");
    if (i->sm_limit)
        snprintf(share, sizeof share, "%3.0f/%-3" PRIu32, v->share * 100, i->sm_limit);
    else if (v->share > 0)
        snprintf(share, sizeof share, "%3.0f/-  ", v->share * 100);
    else
        snprintf(share, sizeof share, "  -/-  ");
    snprintf(thr, sizeof thr, "%3.0f", t->throttled * 100);
    flags_text(t, d, fl, sizeof fl);
    fprintf(out, "%c %-16.16s %8.1f %7s %7s ", sel ? '>' : ' ', tenant_name(t, name, sizeof name),
            (double)i->used / MIB, lim, share);
    spark(out, t, d, hist_w);
    fprintf(out, " %3s %-*s %3" PRId32 " %3d %.8s\n", thr, FLAGS_W, fl, t->priority, t->nproc,
            best_tier(t));
}

static void gpu_line(FILE *out, const struct cs_node_gpu *g, int width)
{
    char idx[16];
    if (g->nvml_index >= 0)
        snprintf(idx, sizeof idx, "%d", g->nvml_index);
    else
        snprintf(idx, sizeof idx, "?");
    char util[16];
    if (g->util >= 0)
        snprintf(util, sizeof util, "%d%%", g->util);
    else
        snprintf(util, sizeof util, "-");
    /* Fits 80 columns: name cut to what is left after the numbers. */
    int room = width - 48;
    char name[sizeof g->name], uuid[sizeof g->uuid];
    fprintf(out, "GPU %s %-*.*s util %4s  mem %7.0f / %7.0f MiB\n", idx, room < 8 ? 8 : room,
            room < 8 ? 8 : room, cs_text_terminal(name, sizeof name, g->name), util, (double)g->mem_used / MIB,
            (double)g->mem_total / MIB);
    fprintf(out, "      %s\n",
            g->uuid[0] ? cs_text_terminal(uuid, sizeof uuid, g->uuid) : "(uuid not yet known)");
}

static void header_row(FILE *out, int hist_w)
{
    fprintf(out, "  %-16s %8s %7s %7s %-*s %3s %-*s %3s %3s %s\n", "TENANT", "MEM MiB", "LIM MiB",
            "SM%/LIM", hist_w, "HISTORY", "THR", FLAGS_W, "FLAGS", "PRI", "NP", "ID");
}

/* What discovery left out, said where the administrator looks (each
 * line within 80 columns). */
static void notes(FILE *out, const struct cs_node_notes *n)
{
    if (n->hidden)
        fprintf(out, "%d ledger%s over a user's quota of %d not shown (uid %u)\n", n->hidden,
                n->hidden == 1 ? "" : "s", CS_NODE_USER_TENANTS, (unsigned)n->hidden_uid);
    if (n->squats)
        fprintf(out, "warning: %d registry file%s named for another uid, ignored (one by uid "
                "%u)\n", n->squats, n->squats == 1 ? "" : "s", (unsigned)n->squat_owner);
}

void cs_node_print_top(FILE *out, const struct cs_node_model *m, const struct cs_node_top_opts *o)
{
    char now[32];
    time_t tt = (time_t)(m->wall_ns / 1000000000u);
    struct tm tm;
    if (!localtime_r(&tt, &tm) || !strftime(now, sizeof now, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(now, sizeof now, "-");
    int live = 0;
    for (int i = 0; i < m->ntenants; i++)
        live += !m->tenant[i]->gone;
    fprintf(out, "cushare top  %s  %d tenant%s  sort %s\n", now, live, live == 1 ? "" : "s",
            o->sort == CS_NODE_SORT_SHARE ? "share" : "memory");
    fprintf(out, "keys: m/s sort  j/k move  enter expand  q quit\n\n");
    int hist_w = o->width - ROW_W;
    hist_w = hist_w < 4 ? 4 : hist_w > HIST_W_MAX ? HIST_W_MAX : hist_w;
    int *idx = malloc(((size_t)m->ntenants + 1) * sizeof *idx);
    if (!idx) {
        fprintf(out, "out of memory\n");
        return;
    }
    int n = cs_node_order(m, o->sort, idx);
    /* One section per GPU, then tenants whose device is not known yet. */
    for (int g = -1; g < m->ngpus; g++) {
        bool any = false;
        for (int r = 0; r < n; r++) {
            const struct cs_node_tenant *t = m->tenant[idx[r]];
            for (int d = 0; d < CS_MAX_DEVICES; d++) {
                if (!t->dev[d].shown || cs_node_gpu_of(m, t, d) != g)
                    continue;
                if (!any) {
                    if (g >= 0)
                        gpu_line(out, &m->gpu[g], o->width);
                    else
                        fprintf(out, "GPU not yet known (no CUDA context yet)\n");
                    header_row(out, hist_w);
                    any = true;
                }
                tenant_row(out, t, d, o->selected == r, hist_w);
                categories(out, t, d);
                if (o->expanded && o->expanded[idx[r]])
                    processes(out, t, d);
            }
        }
        if (!any && g >= 0) {
            gpu_line(out, &m->gpu[g], o->width);
            fprintf(out, "  no tenants\n");
        }
        if (any || g >= 0)
            fprintf(out, "\n");
    }
    free(idx);
    char reg[4096];
    if (!n)
        fprintf(out, "no tenants found (registry %s)\n",
                cs_text_terminal(reg, sizeof reg,
                                 m->where.registry ? m->where.registry : CS_REG_DEFAULT_PATH));
    notes(out, &m->notes);
}

/* ---- JSON ---------------------------------------------------------------- */

static void json_tenant_dev(FILE *out, const struct cs_node_tenant *t, int d, bool first)
{
    const struct cs_status_device *i = &t->devinfo[d];
    const struct cs_node_tenant_dev *v = &t->dev[d];
    fprintf(out, "%s{\"index\":%d,\"uuid\":", first ? "" : ",", d);
    if (i->uuid[0])
        cs_status_json_string(out, i->uuid);
    else
        fputs("null", out);
    fprintf(out, ",\"limit\":%" PRIu64 ",\"used\":%" PRIu64 ",\"peak\":%" PRIu64
                 ",\"bytes\":{", i->limit, i->used, i->peak);
    for (int c = 0; c < CS_MEM_NCATEGORIES; c++)
        fprintf(out, "%s\"%s\":%" PRIu64, c ? "," : "", cs__ledger_category_name(c), v->bytes[c]);
    fprintf(out, "},\"sm_limit\":%" PRIu32 ",\"share\":", i->sm_limit);
    if (v->share_known || v->share > 0)
        fprintf(out, "%.4f", v->share);
    else
        fputs("null", out);
    fprintf(out, ",\"share_source\":\"%s\"", v->share_nvml ? "nvml" : "limiter");
    fprintf(out, ",\"gpu_ns\":%" PRIu64 ",\"starved\":%s,\"history\":[", t->cum_gpu_ns[d],
            v->starved ? "true" : "false");
    double h[CS_NODE_HIST];
    int n = cs_node_share_history(t, d, h, CS_NODE_HIST);
    for (int k = 0; k < n; k++)
        fprintf(out, "%s%.4f", k ? "," : "", h[k]);
    fputs("]}", out);
}

static void json_tenant(FILE *out, const struct cs_node_tenant *t)
{
    fputs("{\"ledger\":", out);
    cs_status_json_string(out, t->where.path);
    fputs(",\"container\":", out);
    cs_status_json_string(out, t->where.container);
    fprintf(out, ",\"uid\":%u,\"state\":\"%s\",\"policy\":\"%s\",\"priority\":%" PRId32
                 ",\"processes\":%d,\"suspended\":%s,\"throttled\":%.4f,\"throttled_ns\":%" PRIu64
                 ",\"suspended_ns\":%" PRIu64 ",\"lock_waits\":%" PRIu32 ",\"identity\":{",
            (unsigned)t->where.uid, t->gone ? "gone" : "live", cs_status_policy_name(t->policy),
            t->priority, t->nproc, t->suspended ? "true" : "false", t->throttled,
            t->cum_throttled_ns, t->suspended_ns, t->lock_waits);
    for (int i = 0; i < CS_IDENTITY_NTIERS; i++)
        fprintf(out, "%s\"%s\":%d", i ? "," : "", cs__ledger_identity_name((uint32_t)i),
                t->tiers[i]);
    fputs("},\"devices\":[", out);
    bool first = true;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        if (t->dev[d].shown) {
            json_tenant_dev(out, t, d, first);
            first = false;
        }
    fputs("],\"pids\":[", out);
    for (int k = 0; k < t->nproc; k++)
        fprintf(out, "%s{\"pid\":%" PRId32 ",\"host_pid\":%" PRId32 ",\"alive\":%s,\"suspended\":%s"
                     ",\"mode\":\"%s\"}",
                k ? "," : "", t->proc[k].pid, t->proc[k].host_pid,
                t->proc[k].alive ? "true" : "false", t->proc[k].suspended ? "true" : "false",
                cs_status_mode_name(&t->proc[k]));
    fputs("]}", out);
}

void cs_node_print_json(FILE *out, const struct cs_node_model *m)
{
    fprintf(out, "{\"node_view\":1,\"time_ns\":%" PRIu64 ",\"gpus\":[", m->wall_ns);
    for (int g = 0; g < m->ngpus; g++) {
        const struct cs_node_gpu *x = &m->gpu[g];
        fprintf(out, "%s{\"uuid\":", g ? "," : "");
        cs_status_json_string(out, x->uuid);
        fputs(",\"name\":", out);
        cs_status_json_string(out, x->name);
        fprintf(out, ",\"nvml_index\":%d,\"memory_total\":%" PRIu64 ",\"memory_used\":%" PRIu64
                     ",\"utilization\":",
                x->nvml_index, x->mem_total, x->mem_used);
        if (x->util >= 0)
            fprintf(out, "%d}", x->util);
        else
            fputs("null}", out);
    }
    fputs("],\"tenants\":[", out);
    int *idx = malloc(((size_t)m->ntenants + 1) * sizeof *idx);
    int n = idx ? cs_node_order(m, CS_NODE_SORT_MEM, idx) : 0;
    for (int r = 0; r < n; r++) {
        if (r)
            fputc(',', out);
        json_tenant(out, m->tenant[idx[r]]);
    }
    free(idx);
    fprintf(out, "],\"hidden\":%d,\"squatted_registry_files\":%d}\n", m->notes.hidden,
            m->notes.squats);
}
