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
#define FLAGS_W 8       /* "SUSP MPS", "FREE MPS" */
#define NAME_W 16       /* the tenant column at least; longer names widen it */
/* Row width without the history and beyond NAME_W: 80 columns leave the
 * history 4. */
#define ROW_W (68 + FLAGS_W)

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

/* HOSTPID: how most of the tenant's processes learnt the pid NVML knows
 * them by, in at most 7 letters (the legend says what each means). */
static const char *best_tier(const struct cs_node_tenant *t)
{
    int best = -1;
    for (int i = 0; i < CS_IDENTITY_NTIERS; i++)
        if (t->tiers[i] && (best < 0 || t->tiers[i] > t->tiers[best]))
            best = i;
    if (best == CS_IDENTITY_NVML_NS)
        return "own-ns";
    return best < 0 ? "-" : cs__ledger_identity_name((uint32_t)best);
}

/* Why a limited tenant runs above its share on device d, from what the
 * view knows (policy, pacing): "OFF" under policy disable; "FREE" under
 * the default policy while it is not paced, since that policy holds the
 * share only while another tenant wants the GPU. NULL: held, or within a
 * few points of its limit. */
const char *cs_node_unheld_reason(const struct cs_node_tenant *t, int d)
{
    const uint32_t lim = t->devinfo[d].sm_limit;
    if (!lim || t->gone || t->suspended || t->dev[d].share * 100.0 < (double)lim + 5.0)
        return NULL;
    if (t->policy == CS_POLICY_DISABLE)
        return "OFF";
    if (t->policy == CS_POLICY_DEFAULT && t->throttled < 0.01)
        return "FREE";
    return NULL;
}

/* FLAGS of a tenant's device row: GONE alone; else PARKED / PARKING /
 * WAKING (off the GPU, docs/parking.md), SUSP (suspended), why it is above
 * its share (FREE, OFF), STARVED and MPS (some process is an MPS client of
 * this GPU), as many as fit FLAGS_W in that order (STARVED leaves MPS to
 * the process rows); "-". */
static void flags_text(const struct cs_node_tenant *t, int d, char *out, size_t n)
{
    const char *word[] = {cs_status_park_word(&t->park), t->suspended ? "SUSP" : NULL,
                          cs_node_unheld_reason(t, d), t->dev[d].starved ? "STARVED" : NULL,
                          t->dev[d].nmps ? "MPS" : NULL};
    size_t len = 0;
    snprintf(out, n, "%s", t->gone ? "GONE" : "-");
    for (size_t i = 0; i < sizeof word / sizeof word[0] && !t->gone; i++) {
        size_t w = word[i] ? strlen(word[i]) + (len ? 1 : 0) : 0;
        if (w && len + w <= FLAGS_W && len + w < n)
            len += (size_t)snprintf(out + len, n - len, "%s%s", len ? " " : "", word[i]);
    }
}

/* The compute share decision a watcher of the tenant published: what
 * it would use unthrottled, its floor (the limit), what it is entitled to
 * now (floor plus what others leave), what it gets, and why it is held. */
struct compute_view {
    bool known;
    double demand, floor, entitled, gets;
    const char *held;
};

static struct compute_view compute_of(const struct cs_node_tenant *t, int d)
{
    uint64_t s = t->devinfo[d].share_state;
    struct compute_view c = {.known = t->devinfo[d].sm_limit && (s & CS_SHARE_STATE_SET)};
    if (!c.known)
        return c;
    c.demand = cs_share_state_demand_pm(s) / 1e4;
    c.entitled = cs_share_state_entitled_pm(s) / 1e4;
    c.floor = t->devinfo[d].sm_limit / 100.0;
    c.gets = t->dev[d].share;
    c.held = cs_status_held_name(s);
    return c;
}

static void compute_line(FILE *out, const struct cs_node_tenant *t, int d)
{
    struct compute_view c = compute_of(t, d);
    if (!c.known || t->gone)
        return;
    fprintf(out, "      compute: demand %.0f%%  floor %.0f%%  entitled %.0f%%  gets %.0f%%  "
                 "held: %s\n", c.demand * 100, c.floor * 100, c.entitled * 100, c.gets * 100,
            c.held);
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

/* The tenant's name in full: a name longer than the column gets a line
 * of its own (wrapped, never cut), and its row starts blank under it. */
static void tenant_row(FILE *out, const struct cs_node_tenant *t, int d, bool sel, int hist_w,
                       int name_w)
{
    const struct cs_status_device *i = &t->devinfo[d];
    const struct cs_node_tenant_dev *v = &t->dev[d];
    char lim[16], share[16], thr[8], fl[FLAGS_W + 1], name[4096];
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
    const char *shown = tenant_name(t, name, sizeof name);
    int len = (int)strlen(shown);
    if (len > name_w) {
        fprintf(out, "%c %s\n", sel ? '>' : ' ', shown);
        fprintf(out, "  %*s ", name_w, "");
    } else {
        fprintf(out, "%c %-*s ", sel ? '>' : ' ', name_w, shown);
    }
    fprintf(out, "%8.1f %7s %7s ", (double)i->used / MIB, lim, share);
    spark(out, t, d, hist_w);
    fprintf(out, " %3s %-*s %3" PRId32 " %3d %s\n", thr, FLAGS_W, fl, t->priority, t->nproc,
            best_tier(t));
}

static void gpu_line(FILE *out, const struct cs_node_gpu *g, int width)
{
    char idx[16];
    if (g->nvml_index >= 0)
        snprintf(idx, sizeof idx, "%d", g->nvml_index);
    else
        snprintf(idx, sizeof idx, "-");
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
    if (g->nvml_index < 0) {
        /* Known from tenants' ledgers only: say why NVML does not tell. */
        const char *why = cs_node_nvml_problem();
        fprintf(out, "      no index, name, utilisation or total:\n      %s\n",
                why ? why : "NVML does not list this GPU");
    }
}

static void header_row(FILE *out, int hist_w, int name_w)
{
    fprintf(out, "  %-*s %8s %7s %7s %-*s %3s %-*s %3s %3s %s\n", name_w, "TENANT", "MEM MiB",
            "LIM MiB", "SM%/LIM", hist_w, "HISTORY", "THR", FLAGS_W, "FLAGS", "PRI", "NP",
            "HOSTPID");
}

/* What every column and flag means, each line within 80 columns. */
static void legend(FILE *out)
{
    fputs("TENANT ledger file or container  MEM/LIM used and budget  SM%/LIM compute share\n"
          "achieved over 3 s / limit  HISTORY that share, oldest left  THR % of time paced\n"
          "PRI priority (lower = first)  NP processes  HOSTPID how host pids were learnt:\n"
          "own-ns (NVML sees our pid), broker, procfs, probe, failed, unknown\n"
          "FLAGS: PARKED/PARKING/WAKING off the GPU (cushare park)  SUSP suspended\n"
          "FREE above its share, not contended (policy default holds it only while\n"
          "others want the GPU)  OFF policy disable  STARVED waits for the GPU\n"
          "MPS client of the GPU's MPS daemon  GONE tenant ended\n", out);
}

/* The tenant column: as wide as the longest name, as far as the width
 * leaves room beside the smallest history; longer names wrap. */
static int name_width(const struct cs_node_model *m, int width)
{
    int want = NAME_W;
    char name[4096];
    for (int i = 0; i < m->ntenants; i++) {
        int len = (int)strlen(tenant_name(m->tenant[i], name, sizeof name));
        want = len > want ? len : want;
    }
    int room = width - ROW_W - 4 + NAME_W;
    return want < room ? want : room < NAME_W ? NAME_W : room;
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
    if (o->keys)
        fprintf(out, "keys: m/s sort  j/k move  enter expand  q quit\n");
    fputc('\n', out);
    int name_w = name_width(m, o->width);
    int hist_w = o->width - ROW_W - (name_w - NAME_W);
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
                    header_row(out, hist_w, name_w);
                    any = true;
                }
                tenant_row(out, t, d, o->selected == r, hist_w, name_w);
                compute_line(out, t, d);
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
    if (n)
        legend(out);
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
    struct compute_view c = compute_of(t, d);
    if (c.known)
        fprintf(out, ",\"demand\":%.4f,\"floor\":%.4f,\"entitled\":%.4f,\"held\":\"%s\"",
                c.demand, c.floor, c.entitled, c.held);
    else
        fputs(",\"demand\":null,\"floor\":null,\"entitled\":null,\"held\":null", out);
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
    fputs("},\"park\":", out);
    cs_status_park_json(out, &t->park);
    fputs(",\"devices\":[", out);
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
    /* The node's physical accounting: what the tenants hold on the GPUs
     * and what parking holds for them in host memory. */
    uint64_t on_gpu = 0, parked = 0;
    for (int i = 0; i < m->ntenants; i++) {
        const struct cs_node_tenant *t = m->tenant[i];
        if (t->gone)
            continue;
        parked += t->park.host_bytes;
        if (t->park.state == CS_PARK_RUNNING)
            for (int d = 0; d < CS_MAX_DEVICES; d++)
                on_gpu += cs_node_dev_used(t, d);
    }
    fprintf(out, "],\"tenants_on_gpu_bytes\":%" PRIu64 ",\"tenants_parked_bytes\":%" PRIu64,
            on_gpu, parked);
    fputs(",\"tenants\":[", out);
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
