#define _GNU_SOURCE
#include "cli/status_model.h"
#include "core/uuid.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/text.h"
#include "park/park.h"

#define MIB (1024.0 * 1024.0)
#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

int cs_status_open(const char *cmd, const char *arg, bool reap, struct cs_ledger *l)
{
    const char *path = arg;
    if (!path || !*path)
        path = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (!path || !*path)
        return cs_cli_usage_error(cmd, "no ledger: pass LEDGER or set "
                                       "CUDA_DEVICE_MEMORY_SHARED_CACHE");
    /* Asked first, so that a ledger we may only read (another user's, a
     * read-only mount) is shown without an error about writing it. */
    const bool read_only = !reap || access(path, R_OK | W_OK) != 0;
    return cs__ledger_open(path, NULL, read_only, l) == 0 ? CS_EXIT_OK : CS_EXIT_FAIL;
}

void cs_status_reap(struct cs_ledger *l)
{
    if (!l->read_only)
        cs__ledger_reap(l);
}


/* Devices worth a row: those the creator configured (device_count), those
 * a process has seen (UUID recorded) and any with a charge. A limit for
 * "all devices" alone does not make 16 rows. */
static bool device_shown(const struct cs_ledger_header *h, int d)
{
    return (uint64_t)d < LD(&h->device_count) ||
           __atomic_load_n(&h->uuid_state[d], __ATOMIC_ACQUIRE) == 2 || LD(&h->dev[d].used) ||
           LD(&h->dev[d].peak);
}

/* "probe", "failed(ENOENT)", "broker w3": the tier, the errno of the
 * last fallback when there was one, and post-init lock waits if any. */
void cs_status_identity_text(const struct cs_status_process *p, char *out, size_t len)
{
    int n = snprintf(out, len, "%s", cs__ledger_identity_name(p->identity));
    if (p->identity_reason && n > 0 && (size_t)n < len) {
        const char *e = strerrorname_np((int)p->identity_reason);
        n += snprintf(out + n, len - (size_t)n, "(%s)", e ? e : "?");
    }
    if (p->lock_waits && n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, " w%" PRIu32, p->lock_waits);
}

void cs_status_from_slot(const struct cs_ledger_slot *s, int i, struct cs_status_process *p)
{
    memset(p, 0, sizeof *p);
    p->slot = i;
    p->pid = LD(&s->pid);
    p->host_pid = LD(&s->host_pid);
    p->identity = LD(&s->identity_tier);
    p->identity_reason = LD(&s->identity_reason);
    p->lock_waits = LD(&s->lock_waits);
    p->suspended = LD(&s->run_state) == 1;
    p->start_ns = LD(&s->start_ns);
    p->throttled_ns = LD(&s->throttled_ns);
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        for (int c = 0; c < CS_MEM_NCATEGORIES; c++)
            p->bytes[d][c] = LD(&s->bytes[d][c]);
        p->gpu_ns[d] = LD(&s->gpu_ns[d]);
    }
}

/* Copies a LIVE slot; false if it is not LIVE or keeps changing owner. */
static bool read_slot(const struct cs_ledger *l, int i, struct cs_status_process *p)
{
    const struct cs_ledger_slot *s = cs__ledger_slot(l, i);
    for (int attempt = 0; attempt < 4; attempt++) {
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != CS_SLOT_LIVE)
            return false;
        uint64_t gen = __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE);
        cs_status_from_slot(s, i, p);
        p->alive = cs__ledger_slot_alive(l, i);
        if (__atomic_load_n(&s->generation, __ATOMIC_ACQUIRE) == gen &&
            __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == CS_SLOT_LIVE)
            return true;
    }
    return false;
}

void cs_status_snapshot(const struct cs_ledger *l, struct cs_status *st)
{
    const struct cs_ledger_header *h = l->hdr;
    st->path = l->path;
    st->version = h->version;
    st->policy = h->policy;
    st->priority = h->priority;
    st->creator_pid = h->creator_pid;
    st->created_ns = h->created_ns;
    st->live = LD(&h->live);
    st->reaped = LD(&h->reaped);
    st->ndev = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        if (!device_shown(h, d))
            continue;
        struct cs_status_device *v = &st->dev[st->ndev++];
        memset(v, 0, sizeof *v);
        v->index = d;
        if (__atomic_load_n(&h->uuid_state[d], __ATOMIC_ACQUIRE) == 2)
            cs__format_uuid(h->uuid[d], v->uuid);
        v->limit = LD(&h->limit[d]);
        v->used = LD(&h->dev[d].used);
        v->peak = LD(&h->dev[d].peak);
        v->physical_total = LD(&h->physical_total[d]);
        v->sm_limit = LD(&h->sm_limit[d]);
        v->share_state = LD(&h->dev[d].share_state);
        for (int j = 0; j < CS_LEDGER_SHARES; j++) {
            const struct cs_ledger_share *sh = cs__ledger_share(l, j);
            if (LD(&sh->dev) == (uint32_t)d)
                v->shared += LD(&sh->charged);
        }
    }
    cs_status_park_read(h, &st->park);
    st->nproc = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++)
        if (read_slot(l, i, &st->proc[st->nproc]))
            st->nproc++;
}

void cs_status_park_read(const struct cs_ledger_header *h, struct cs_status_park *p)
{
    const struct cs_ledger_park *k = &h->park;
    p->state = LD(&k->state);
    p->host_bytes = LD(&k->host_bytes);
    p->parks = LD(&k->parks);
    p->wakes = LD(&k->wakes);
    p->refusals = LD(&k->refusals);
    p->park_ns_total = LD(&k->park_ns_total);
    p->wake_ns_total = LD(&k->wake_ns_total);
    p->last_park_ns = LD(&k->last_park_ns);
    p->last_wake_ns = LD(&k->last_wake_ns);
    p->performer_pid = LD(&k->performer_pid);
    p->last_error = LD(&k->last_error);
}

const char *cs_status_park_word(const struct cs_status_park *p)
{
    static const char *const words[] = {NULL, "PARKING", "PARKED", "WAKING"};
    return p->state < sizeof words / sizeof *words ? words[p->state] : "PARK?";
}

void cs_status_park_json(FILE *out, const struct cs_status_park *p)
{
    fprintf(out, "{\"state\":\"%s\",\"host_bytes\":%" PRIu64 ",\"parks\":%" PRIu64
                 ",\"wakes\":%" PRIu64 ",\"refusals\":%" PRIu64 ",\"park_ns_total\":%" PRIu64
                 ",\"wake_ns_total\":%" PRIu64 ",\"last_park_ns\":%" PRIu64
                 ",\"last_wake_ns\":%" PRIu64 ",\"performer_pid\":%" PRId32
                 ",\"last_error\":%" PRId32 "}",
            cs__park_state_name(p->state), p->host_bytes, p->parks, p->wakes, p->refusals,
            p->park_ns_total, p->wake_ns_total, p->last_park_ns, p->last_wake_ns,
            p->performer_pid, (int32_t)p->last_error);
}

uint64_t cs_status_process_total(const struct cs_status_process *p, int dev)
{
    uint64_t t = 0;
    for (int c = 0; c < CS_MEM_NCATEGORIES; c++)
        t += p->bytes[dev][c];
    return t;
}

const char *cs_status_policy_name(uint32_t p)
{
    switch (p) {
    case CS_POLICY_DEFAULT: return "default";
    case CS_POLICY_FORCE: return "force";
    case CS_POLICY_DISABLE: return "disable";
    default: return "?";
    }
}

const char *cs_status_mode_name(const struct cs_status_process *p)
{
    return p->mps ? "mps" : "time-sliced";
}

static uint64_t dev_free(const struct cs_status_device *d)
{
    return d->used >= d->limit ? 0 : d->limit - d->used;
}

static void format_time(uint64_t ns, char *out, size_t n)
{
    time_t t = (time_t)(ns / 1000000000u);
    struct tm tm;
    if (!ns || !localtime_r(&t, &tm) || !strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(out, n, "-");
}

static void mib_or_dash(char *out, size_t n, bool have, uint64_t bytes)
{
    if (have)
        snprintf(out, n, "%.1f", (double)bytes / MIB);
    else
        snprintf(out, n, "-");
}

void cs_status_print_human(FILE *out, const struct cs_status *st)
{
    char created[32], path[4096];
    format_time(st->created_ns, created, sizeof created);
    fprintf(out, "ledger %s (layout v%" PRIu32 ", policy %s, priority %" PRId32 ")\n",
            cs_text_terminal(path, sizeof path, st->path),
            st->version, cs_status_policy_name(st->policy), st->priority);
    int dead = 0;
    for (int i = 0; i < st->nproc; i++)
        dead += !st->proc[i].alive;
    fprintf(out, "created %s by pid %" PRId32 "; %d processes (%d dead, not yet reaped); "
            "%" PRIu64 " reaped so far\n\n", created, st->creator_pid, st->nproc, dead,
            st->reaped);

    fprintf(out, "%3s  %-40s %11s %11s %11s %11s %4s\n", "DEV", "UUID", "LIMIT MiB",
            "USED MiB", "FREE MiB", "PEAK MiB", "SM%");
    for (int i = 0; i < st->ndev; i++) {
        const struct cs_status_device *d = &st->dev[i];
        char lim[24], used[24], fr[24], peak[24], sm[16];
        mib_or_dash(lim, sizeof lim, d->limit != 0, d->limit);
        mib_or_dash(used, sizeof used, true, d->used);
        mib_or_dash(fr, sizeof fr, d->limit != 0, dev_free(d));
        mib_or_dash(peak, sizeof peak, true, d->peak);
        if (d->sm_limit)
            snprintf(sm, sizeof sm, "%" PRIu32, d->sm_limit);
        else
            snprintf(sm, sizeof sm, "-");
        fprintf(out, "%3d  %-40s %11s %11s %11s %11s %4s\n", d->index, d->uuid[0] ? d->uuid : "-",
                lim, used, fr, peak, sm);
    }
    for (int i = 0; i < st->ndev; i++)
        if (st->dev[i].mps_pid)
            fprintf(out, "device %d: concurrent: cushare's MPS control daemon (pid %" PRId32
                    ") runs for this GPU; processes marked MPS are its clients, the others "
                    "time-sliced\n", st->dev[i].index, st->dev[i].mps_pid);
    for (int i = 0; i < st->ndev; i++)
        if (st->dev[i].shared)
            fprintf(out, "device %d: %.1f MiB of USED is memory processes share (VMM exports, "
                    "IPC), charged once and in no process below\n", st->dev[i].index,
                    (double)st->dev[i].shared / (1024.0 * 1024.0));
    if (st->park.state != CS_PARK_RUNNING || st->park.parks)
        fprintf(out, "parking: %s, %.1f MiB in host memory; %" PRIu64 " parks (last %.0f ms), %"
                PRIu64 " wakes (last %.0f ms), %" PRIu64 " refused (docs/parking.md)\n",
                cs__park_state_name(st->park.state), (double)st->park.host_bytes / MIB,
                st->park.parks, (double)st->park.last_park_ns / 1e6, st->park.wakes,
                (double)st->park.last_wake_ns / 1e6, st->park.refusals);
    fprintf(out, "\n");
    if (!st->nproc) {
        fprintf(out, "no processes\n");
        return;
    }
    fprintf(out, "%5s %8s %8s %-5s %-15s %3s %11s %9s %-4s %-3s %s\n", "SLOT", "PID",
            "HOST_PID", "STATE", "IDENTITY", "DEV", "TOTAL MiB", "GPU s", "SUSP", "MPS",
            "BY CATEGORY (MiB)");
    for (int i = 0; i < st->nproc; i++) {
        const struct cs_status_process *p = &st->proc[i];
        char ident[48];
        cs_status_identity_text(p, ident, sizeof ident);
        char hp[16];
        if (p->host_pid)
            snprintf(hp, sizeof hp, "%" PRId32, p->host_pid);
        else
            snprintf(hp, sizeof hp, "-");
        int rows = 0;
        for (int d = 0; d < CS_MAX_DEVICES; d++) {
            uint64_t total = cs_status_process_total(p, d);
            if (!total && !p->gpu_ns[d])
                continue;
            if (rows++ == 0)
                fprintf(out, "%5d %8" PRId32 " %8s %-5s %-15s", p->slot, p->pid, hp,
                        p->alive ? "live" : "dead", ident);
            else
                fprintf(out, "%5s %8s %8s %-5s %-15s", "", "", "", "", "");
            fprintf(out, " %3d %11.1f %9.3f %-4s %-3s ", d, (double)total / MIB,
                    (double)p->gpu_ns[d] * 1e-9, p->suspended ? "yes" : "no",
                    p->mps ? "yes" : "no");
            const char *sep = "";
            for (int c = 0; c < CS_MEM_NCATEGORIES; c++)
                if (p->bytes[d][c]) {
                    fprintf(out, "%s%s=%.1f", sep, cs__ledger_category_name(c),
                            (double)p->bytes[d][c] / MIB);
                    sep = " ";
                }
            fprintf(out, "\n");
        }
        if (!rows)
            fprintf(out, "%5d %8" PRId32 " %8s %-5s %-15s %3s %11.1f %9.3f %-4s %-3s -\n",
                    p->slot, p->pid, hp, p->alive ? "live" : "dead", ident, "-", 0.0, 0.0,
                    p->suspended ? "yes" : "no", p->mps ? "yes" : "no");
    }
}

void cs_status_json_string(FILE *out, const char *s)
{
    cs_text_json(out, s);
}

/* The compute share decision (ledger.h, share_state): demand and
 * entitlement as fractions of the device, why the tenant is held. */
const char *cs_status_held_name(uint64_t share_state)
{
    static const char *why[] = {"no", "contended", "capped", "priority"};
    uint32_t w = cs_share_state_why(share_state);
    return w < sizeof why / sizeof why[0] ? why[w] : "unknown";
}

static void json_share_state(FILE *out, const struct cs_status_device *d)
{
    uint64_t s = d->share_state;
    if (!d->sm_limit || !(s & CS_SHARE_STATE_SET)) {
        fputs(",\"demand\":null,\"entitled\":null,\"held\":null", out);
        return;
    }
    fprintf(out, ",\"demand\":%.4f,\"entitled\":%.4f,\"held\":\"%s\"",
            cs_share_state_demand_pm(s) / 1e4, cs_share_state_entitled_pm(s) / 1e4,
            cs_status_held_name(s));
}

void cs_status_print_json(FILE *out, const struct cs_status *st)
{
    fprintf(out, "{\"ledger\":");
    cs_status_json_string(out, st->path);
    fprintf(out, ",\"version\":%" PRIu32 ",\"policy\":\"%s\",\"priority\":%" PRId32
                 ",\"created_ns\":%" PRIu64 ",\"creator_pid\":%" PRId32 ",\"live\":%" PRIu64
                 ",\"reaped\":%" PRIu64 ",\"devices\":[",
            st->version, cs_status_policy_name(st->policy), st->priority, st->created_ns,
            st->creator_pid, st->live, st->reaped);
    for (int i = 0; i < st->ndev; i++) {
        const struct cs_status_device *d = &st->dev[i];
        fprintf(out, "%s{\"index\":%d,\"uuid\":", i ? "," : "", d->index);
        if (d->uuid[0])
            cs_status_json_string(out, d->uuid);
        else
            fprintf(out, "null");
        fprintf(out, ",\"limit\":%" PRIu64 ",\"used\":%" PRIu64 ",\"free\":", d->limit,
                d->used);
        if (d->limit)
            fprintf(out, "%" PRIu64, dev_free(d));
        else
            fprintf(out, "null");
        fprintf(out, ",\"peak\":%" PRIu64 ",\"physical_total\":%" PRIu64
                     ",\"sm_limit\":%" PRIu32 ",\"mps_daemon\":",
                d->peak, d->physical_total, d->sm_limit);
        if (d->mps_pid)
            fprintf(out, "%" PRId32, d->mps_pid);
        else
            fprintf(out, "null");
        json_share_state(out, d);
        fprintf(out, ",\"shared\":%" PRIu64 "}", d->shared);
    }
    fprintf(out, "],\"park\":");
    cs_status_park_json(out, &st->park);
    fprintf(out, ",\"processes\":[");
    for (int i = 0; i < st->nproc; i++) {
        const struct cs_status_process *p = &st->proc[i];
        fprintf(out, "%s{\"slot\":%d,\"pid\":%" PRId32 ",\"host_pid\":%" PRId32
                     ",\"state\":\"%s\",\"identity\":\"%s\",\"identity_reason\":%" PRIu32
                     ",\"lock_waits\":%" PRIu32 ",\"suspended\":%s,\"mode\":\"%s\","
                     "\"start_ns\":%" PRIu64 ",\"bytes\":{",
                i ? "," : "", p->slot, p->pid, p->host_pid, p->alive ? "live" : "dead",
                cs__ledger_identity_name(p->identity), p->identity_reason, p->lock_waits,
                p->suspended ? "true" : "false", cs_status_mode_name(p), p->start_ns);
        for (int k = 0; k < st->ndev; k++) {
            int d = st->dev[k].index;
            fprintf(out, "%s\"dev%d\":{", k ? "," : "", d);
            for (int c = 0; c < CS_MEM_NCATEGORIES; c++)
                fprintf(out, "%s\"%s\":%" PRIu64, c ? "," : "", cs__ledger_category_name(c),
                        p->bytes[d][c]);
            fprintf(out, "}");
        }
        fprintf(out, "},\"gpu_ns\":{");
        for (int k = 0; k < st->ndev; k++)
            fprintf(out, "%s\"dev%d\":%" PRIu64, k ? "," : "", st->dev[k].index,
                    p->gpu_ns[st->dev[k].index]);
        fprintf(out, "}}");
    }
    fprintf(out, "]}\n");
}

/* "[#####.....]" of `w` cells inside the brackets. */
static void bar(FILE *out, double frac, int w)
{
    if (frac < 0)
        frac = 0;
    if (frac > 1)
        frac = 1;
    int full = (int)(frac * w + 0.5);
    fputc('[', out);
    for (int i = 0; i < w; i++)
        fputc(i < full ? '#' : '.', out);
    fputc(']', out);
}

void cs_status_print_top(FILE *out, const struct cs_status *st, int width, bool keys)
{
    char now[32];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    format_time((uint64_t)ts.tv_sec * 1000000000u, now, sizeof now);
    char path[4096];
    fprintf(out, "cushare top  %s  %s%s\n", cs_text_terminal(path, sizeof path, st->path), now,
            keys ? "  (q quits)" : "");
    fprintf(out, "policy %s, %d processes, %" PRIu64 " reaped so far\n\n",
            cs_status_policy_name(st->policy), st->nproc, st->reaped);
    int bw = width - 48;
    if (bw < 10)
        bw = 10;
    if (bw > 60)
        bw = 60;
    for (int i = 0; i < st->ndev; i++) {
        const struct cs_status_device *d = &st->dev[i];
        /* Bars are relative to the budget, else the device, else use. */
        uint64_t scale = d->limit ? d->limit : d->physical_total;
        fprintf(out, "GPU %-2d ", d->index);
        if (scale)
            bar(out, (double)d->used / (double)scale, bw);
        else
            fprintf(out, "[%-*s]", bw, " no limit");
        /* Without a budget or a known size, processes show their share. */
        if (!scale)
            scale = d->used;
        fprintf(out, " %9.1f / ", (double)d->used / MIB);
        if (d->limit)
            fprintf(out, "%.1f MiB", (double)d->limit / MIB);
        else
            fprintf(out, "- MiB");
        if (d->sm_limit)
            fprintf(out, "  sm %" PRIu32 "%%", d->sm_limit);
        fprintf(out, "\n");
        if (d->uuid[0])
            fprintf(out, "       %s\n", d->uuid);
        for (int k = 0; k < st->nproc; k++) {
            const struct cs_status_process *p = &st->proc[k];
            uint64_t t = cs_status_process_total(p, d->index);
            if (!t && !p->gpu_ns[d->index])
                continue;
            fprintf(out, "  %5" PRId32 " ", p->pid);
            bar(out, scale ? (double)t / (double)scale : 0, bw - 2);
            fprintf(out, " %9.1f MiB  slot %d %s%s\n", (double)t / MIB, p->slot,
                    p->alive ? "live" : "dead", p->suspended ? " suspended" : "");
        }
        fprintf(out, "\n");
    }
    int idle = 0;
    for (int k = 0; k < st->nproc; k++) {
        bool any = false;
        for (int d = 0; d < CS_MAX_DEVICES && !any; d++)
            any = cs_status_process_total(&st->proc[k], d) || st->proc[k].gpu_ns[d];
        idle += !any;
    }
    if (idle)
        fprintf(out, "%d process%s holding no device memory\n", idle, idle == 1 ? "" : "es");
}
