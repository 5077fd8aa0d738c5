/*
 * The node view model (node_model.h): discovery, pread-based sampling of
 * every tenant, rates over a window, NVML for the GPUs themselves.
 */
#define _GNU_SOURCE
#include "cli/node_model.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/io.h"
#include "core/uuid.h"
#include "nvml/nvml.h"

#define SLOTS_BYTES ((size_t)CS_LEDGER_SLOTS * sizeof(struct cs_ledger_slot))
#define STARVED_FRACTION 0.97   /* the limiter's own rule (docs/limiter.md) */
#define SATURATED_UTIL 90       /* percent NVML utilisation: the GPU is full */

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- NVML: the GPUs themselves ----------------------------------------- */

struct nvml_api {
    bool tried, ok;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*putil)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *,
                          unsigned long long);
    nvmlReturn_t (*mps)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
};
static struct nvml_api nv; /* the model's thread only */

static bool nvml_load(void)
{
    if (nv.tried)
        return nv.ok;
    nv.tried = true;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return false;
    nv.init = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    nv.count = (nvmlReturn_t(*)(unsigned int *))dlsym(h, "nvmlDeviceGetCount_v2");
    nv.handle = (nvmlReturn_t(*)(unsigned int, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nv.uuid = (nvmlReturn_t(*)(nvmlDevice_t, char *, unsigned int))dlsym(h, "nvmlDeviceGetUUID");
    nv.name = (nvmlReturn_t(*)(nvmlDevice_t, char *, unsigned int))dlsym(h, "nvmlDeviceGetName");
    nv.mem = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    nv.util = (nvmlReturn_t(*)(nvmlDevice_t, nvmlUtilization_t *))dlsym(h,
                                                                      "nvmlDeviceGetUtilizationRates");
    nv.putil = (nvmlReturn_t(*)(nvmlDevice_t, nvmlProcessUtilizationSample_t *, unsigned int *,
                                unsigned long long))dlsym(h, "nvmlDeviceGetProcessUtilization");
    nv.mps = (nvmlReturn_t(*)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *))dlsym(
        h, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
    nv.ok = nv.init && nv.count && nv.handle && nv.uuid && nv.init() == NVML_SUCCESS;
    return nv.ok;
}

/* Grows the reusable array *arr (*cap elements of `size` bytes) to hold at
 * least n. False when memory is short: the array stays as it was. */
static bool reserve(void **arr, int *cap, unsigned n, size_t size)
{
    if ((int)n <= *cap)
        return true;
    void *p = realloc(*arr, n * size);
    if (!p)
        return false;
    *arr = p;
    *cap = (int)n;
    return true;
}

/* Adds one process's sample, averaging several samples of one pid (the
 * driver may return one per sampling period since lastSeenTimeStamp). */
static void putil_add(struct cs_node_gpu *g, const nvmlProcessUtilizationSample_t *s,
                      uint32_t *nsamples)
{
    for (int k = 0; k < g->nputil; k++)
        if (g->putil[k].pid == s->pid) {
            g->putil[k].sm = (g->putil[k].sm * nsamples[k] + s->smUtil) / (nsamples[k] + 1);
            nsamples[k]++;
            return;
        }
    g->putil[g->nputil] = (struct cs_node_putil){s->pid, s->smUtil};
    nsamples[g->nputil++] = 1;
}

/* NVML's per-process SM utilisation since the last refresh. Sized by
 * what the driver reports: no fixed cap to overflow. */
static void sample_process_util(struct cs_node_gpu *g, nvmlDevice_t d)
{
    g->nputil = 0;
    unsigned n = 0;
    if (!nv.putil || nv.putil(d, NULL, &n, g->putil_seen_us) != NVML_ERROR_INSUFFICIENT_SIZE)
        return;
    n += 8; /* processes may arrive between the two calls */
    nvmlProcessUtilizationSample_t *buf = calloc(n, sizeof *buf);
    uint32_t *nsamples = calloc(n, sizeof *nsamples);
    if (buf && nsamples && reserve((void **)&g->putil, &g->putil_cap, n, sizeof *g->putil) &&
        nv.putil(d, buf, &n, g->putil_seen_us) == NVML_SUCCESS) {
        for (unsigned i = 0; i < n; i++) {
            putil_add(g, &buf[i], nsamples);
            if (buf[i].timeStamp > g->putil_seen_us)
                g->putil_seen_us = buf[i].timeStamp;
        }
    }
    free(buf);
    free(nsamples);
}

/* NVML's MPS clients of the GPU, into its reusable buffer: one query when
 * the buffer is big enough, else one more after growing it to what NVML
 * said it needs (and a little: clients may arrive in between). Any failure
 * (no such entry point, an old driver) leaves the list empty: the mode is
 * display only. */
static void sample_mps(struct cs_node_gpu *g, nvmlDevice_t d)
{
    g->nmps = 0;
    for (int tries = 0; nv.mps && tries < 2; tries++) {
        unsigned n = (unsigned)g->mps_cap;
        nvmlReturn_t r = nv.mps(d, &n, g->mps);
        if (r == NVML_SUCCESS && n <= (unsigned)g->mps_cap) {
            g->nmps = (int)n;
            return;
        }
        if (r != NVML_ERROR_INSUFFICIENT_SIZE ||
            !reserve((void **)&g->mps, &g->mps_cap, n + 8, sizeof *g->mps))
            return;
    }
}

/* Clears a GPU's facts for a new refresh, keeping its reusable buffers. */
static void gpu_clear(struct cs_node_gpu *g)
{
    struct cs_node_gpu keep = *g;
    memset(g, 0, sizeof *g);
    g->putil = keep.putil;
    g->putil_cap = keep.putil_cap;
    g->mps = keep.mps;
    g->mps_cap = keep.mps_cap;
    g->nvml_index = -1;
    g->util = -1;
}

static void sample_gpus(struct cs_node_model *m)
{
    m->ngpus = 0;
    unsigned n = 0;
    if (!nvml_load() || nv.count(&n) != NVML_SUCCESS)
        return;
    for (unsigned i = 0; i < n && m->ngpus < CS_NODE_MAX_GPUS; i++) {
        nvmlDevice_t d;
        if (nv.handle(i, &d) != NVML_SUCCESS)
            continue;
        struct cs_node_gpu *g = &m->gpu[m->ngpus];
        uint64_t seen = g->putil_seen_us;
        gpu_clear(g);
        g->putil_seen_us = seen;
        g->nvml_index = (int)i;
        if (nv.uuid(d, g->uuid, sizeof g->uuid) != NVML_SUCCESS)
            continue;
        if (nv.name)
            nv.name(d, g->name, sizeof g->name);
        nvmlMemory_t mi;
        if (nv.mem && nv.mem(d, &mi) == NVML_SUCCESS) {
            g->mem_total = mi.total;
            g->mem_used = mi.used;
        }
        nvmlUtilization_t u;
        if (nv.util && nv.util(d, &u) == NVML_SUCCESS)
            g->util = (int)u.gpu;
        sample_process_util(g, d);
        sample_mps(g, d);
        m->ngpus++;
    }
}

int cs_node_nvml_uuids(char (*uuid)[48], int max)
{
    unsigned n = 0;
    if (!nvml_load() || nv.count(&n) != NVML_SUCCESS)
        return -1;
    int k = 0;
    for (; k < (int)n && k < max; k++) {
        nvmlDevice_t d;
        if (nv.handle((unsigned)k, &d) != NVML_SUCCESS || nv.uuid(d, uuid[k], 48) != NVML_SUCCESS)
            uuid[k][0] = '\0';
    }
    return k;
}

/* A GPU only the ledgers know of (no NVML): added by UUID. */
static int gpu_by_uuid(struct cs_node_model *m, const char *uuid, uint64_t total)
{
    for (int i = 0; i < m->ngpus; i++)
        if (!strcmp(m->gpu[i].uuid, uuid))
            return i;
    if (m->ngpus == CS_NODE_MAX_GPUS)
        return -1;
    struct cs_node_gpu *g = &m->gpu[m->ngpus];
    gpu_clear(g);
    snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
    g->mem_total = total;
    return m->ngpus++;
}

int cs_node_gpu_of(const struct cs_node_model *m, const struct cs_node_tenant *t, int d)
{
    for (int i = 0; i < m->ngpus; i++)
        if (t->devinfo[d].uuid[0] && !strcmp(m->gpu[i].uuid, t->devinfo[d].uuid))
            return i;
    return -1;
}

/* ---- reading one tenant ------------------------------------------------ */

static bool header_valid(const struct cs_ledger_header *h)
{
    return !memcmp(h->magic, CS_LEDGER_MAGIC, 8) && h->version == CS_LEDGER_VERSION &&
           h->header_size == CS_LEDGER_HEADER_SIZE &&
           h->slot_size == sizeof(struct cs_ledger_slot) && h->slot_count == CS_LEDGER_SLOTS &&
           h->device_count <= CS_MAX_DEVICES;
}

static bool slot_alive(int fd, int i)
{
    return cs_node_lock_held(fd, CS_LEDGER_LOCK_BASE + (uint64_t)i);
}

static bool push_proc(struct cs_node_tenant *t, const struct cs_ledger_slot *s, int i)
{
    if (t->nproc == t->proc_cap) {
        int cap = t->proc_cap ? 2 * t->proc_cap : 8;
        struct cs_status_process *p = realloc(t->proc, (size_t)cap * sizeof *p);
        if (!p)
            return false;
        t->proc = p;
        t->proc_cap = cap;
    }
    struct cs_status_process *p = &t->proc[t->nproc];
    cs_status_from_slot(s, i, p);
    p->alive = slot_alive(t->where.fd, i);
    t->nproc++;
    return true;
}

/* Reads the LIVE slots: all of them when membership changed since the
 * last full read, else only those seen LIVE then. False: short read. */
static bool read_slots(struct cs_node_model *m, struct cs_node_tenant *t,
                       const struct cs_ledger_header *h)
{
    const uint64_t key[3] = {h->claim_hint, h->live, h->reaped};
    const int fd = t->where.fd;
    t->nproc = 0;
    if (!t->have_key || memcmp(key, t->key, sizeof key)) {
        if (!cs__pread_full(fd, m->slot_buf, SLOTS_BYTES, CS_LEDGER_HEADER_SIZE))
            return false;
        t->nlive_idx = 0;
        for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
            const struct cs_ledger_slot *s =
                (const void *)(m->slot_buf + (size_t)i * sizeof(struct cs_ledger_slot));
            if (s->state == CS_SLOT_LIVE) {
                t->live_idx[t->nlive_idx++] = i;
                push_proc(t, s, i);
            }
        }
        memcpy(t->key, key, sizeof key);
        t->have_key = true;
        return true;
    }
    struct cs_ledger_slot s;
    for (int k = 0; k < t->nlive_idx; k++) {
        int i = t->live_idx[k];
        off_t off = (off_t)CS_LEDGER_HEADER_SIZE + (off_t)i * (off_t)sizeof s;
        if (!cs__pread_full(fd, &s, sizeof s, off))
            return false;
        if (s.state == CS_SLOT_LIVE)
            push_proc(t, &s, i);
    }
    return true;
}

static void copy_header(struct cs_node_tenant *t, const struct cs_ledger_header *h)
{
    t->policy = h->policy;
    t->priority = h->priority;
    t->created_ns = h->created_ns;
    t->reaped = h->reaped;
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        struct cs_status_device *v = &t->devinfo[d];
        memset(v, 0, sizeof *v);
        v->index = d;
        if (h->uuid_state[d] == 2)
            cs__format_uuid(h->uuid[d], v->uuid);
        v->limit = h->limit[d];
        v->used = h->dev[d].used;
        v->peak = h->dev[d].peak;
        v->physical_total = h->physical_total[d];
        v->sm_limit = h->sm_limit[d];
    }
}

/* The previous frame's value of a per-process counter, matched by slot
 * and claim time; 0 for a process new since then. */
static const struct cs_status_process *previous(const struct cs_status_process *prev, int n,
                                                const struct cs_status_process *p)
{
    for (int i = 0; i < n; i++)
        if (prev[i].slot == p->slot && prev[i].start_ns == p->start_ns && prev[i].pid == p->pid)
            return &prev[i];
    return NULL;
}

static uint64_t rise(uint64_t now, uint64_t before)
{
    return now > before ? now - before : 0;
}

/* The pid NVML lists a process under: the host's, else its own (no
 * namespace between them, or not yet resolved). */
static uint32_t nvml_pid(const struct cs_status_process *p)
{
    return (uint32_t)(p->host_pid > 0 ? p->host_pid : p->pid);
}

/* The NVML SM utilisation (0..1) of the tenant's live processes on
 * device d; -1 when NVML has no sample of that GPU. */
static double nvml_busy(const struct cs_node_model *m, const struct cs_node_tenant *t, int d)
{
    int g = cs_node_gpu_of(m, t, d);
    if (g < 0 || m->gpu[g].nvml_index < 0 || !nv.putil)
        return -1;
    const struct cs_node_gpu *gpu = &m->gpu[g];
    unsigned sm = 0;
    for (int k = 0; k < t->nproc; k++) {
        uint32_t pid = nvml_pid(&t->proc[k]);
        for (int j = 0; j < gpu->nputil; j++)
            if (gpu->putil[j].pid == pid)
                sm += gpu->putil[j].sm;
    }
    return sm > 100 ? 1.0 : sm / 100.0;
}

static bool lists_mps(const struct cs_node_gpu *g, uint32_t pid)
{
    for (int j = 0; j < g->nmps; j++)
        if (g->mps[j].pid == pid)
            return true;
    return false;
}

/* Marks the processes NVML lists as MPS clients of the GPU one of the
 * tenant's devices is on, and counts them per device. */
static void mark_mps(const struct cs_node_model *m, struct cs_node_tenant *t)
{
    int gpu[CS_MAX_DEVICES];
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        gpu[d] = cs_node_gpu_of(m, t, d);
        t->dev[d].nmps = 0;
    }
    for (int k = 0; k < t->nproc; k++) {
        struct cs_status_process *p = &t->proc[k];
        p->mps = false;
        for (int d = 0; d < CS_MAX_DEVICES; d++)
            if (gpu[d] >= 0 && lists_mps(&m->gpu[gpu[d]], nvml_pid(p))) {
                p->mps = true;
                t->dev[d].nmps++;
            }
    }
}

/* A tenant without a compute limit is not timed by the limiter; its GPU
 * time is estimated from NVML instead, so the node view still answers
 * "who uses this GPU" for it. */
static void add_nvml_time(const struct cs_node_model *m, struct cs_node_tenant *t, int64_t dt)
{
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        t->dev[d].share_nvml = false;
        if (t->devinfo[d].sm_limit || !t->devinfo[d].uuid[0])
            continue;
        double busy = nvml_busy(m, t, d);
        if (busy < 0)
            continue;
        t->dev[d].share_nvml = true;
        if (dt > 0)
            t->cum_gpu_ns[d] += (uint64_t)(busy * (double)dt);
    }
}

/* Folds this frame's per-process counters into the tenant's cumulative
 * ones (a process that left keeps what it added) and pushes a sample. */
static void accumulate(struct cs_node_tenant *t, const struct cs_status_process *prev, int nprev,
                       int64_t now)
{
    for (int k = 0; k < t->nproc; k++) {
        const struct cs_status_process *p = &t->proc[k];
        const struct cs_status_process *q = previous(prev, nprev, p);
        for (int d = 0; d < CS_MAX_DEVICES; d++)
            t->cum_gpu_ns[d] += rise(p->gpu_ns[d], q ? q->gpu_ns[d] : 0);
        t->cum_throttled_ns += rise(p->throttled_ns, q ? q->throttled_ns : 0);
    }
    struct cs_node_sample *s = &t->hist[t->hist_head];
    s->t_ns = now;
    memcpy(s->gpu_ns, t->cum_gpu_ns, sizeof s->gpu_ns);
    s->throttled_ns = t->cum_throttled_ns;
    t->hist_head = (t->hist_head + 1) % CS_NODE_HIST;
    if (t->hist_n < CS_NODE_HIST)
        t->hist_n++;
}

static const struct cs_node_sample *sample_at(const struct cs_node_tenant *t, int back)
{
    return &t->hist[(t->hist_head - 1 - back + 2 * CS_NODE_HIST) % CS_NODE_HIST];
}

/* The oldest sample within the window (at least one step back). */
static const struct cs_node_sample *window_start(const struct cs_node_tenant *t)
{
    const struct cs_node_sample *now = sample_at(t, 0), *w = NULL;
    for (int b = 1; b < t->hist_n; b++) {
        const struct cs_node_sample *s = sample_at(t, b);
        if (w && now->t_ns - s->t_ns > CS_NODE_WINDOW_NS)
            break;
        w = s;
    }
    return w;
}

int cs_node_share_history(const struct cs_node_tenant *t, int d, double *out, int n)
{
    int k = 0;
    for (int b = t->hist_n - 2; b >= 0 && k < n; b--) {
        const struct cs_node_sample *a = sample_at(t, b + 1), *z = sample_at(t, b);
        double dt = (double)(z->t_ns - a->t_ns);
        out[k++] = dt > 0 ? (double)rise(z->gpu_ns[d], a->gpu_ns[d]) / dt : 0;
    }
    if (k > n)
        k = n;
    return k;
}

uint64_t cs_node_dev_used(const struct cs_node_tenant *t, int d)
{
    return t->devinfo[d].used;
}

static void derive(struct cs_node_model *m, struct cs_node_tenant *t, int64_t dt_ns)
{
    const struct cs_node_sample *now = sample_at(t, 0), *w = window_start(t);
    double span = w ? (double)(now->t_ns - w->t_ns) : 0;
    t->throttled = span > 0 ? (double)rise(now->throttled_ns, w->throttled_ns) / span : 0;
    if (t->throttled > 1)
        t->throttled = 1;
    t->suspended = false;
    t->lock_waits = 0;
    memset(t->tiers, 0, sizeof t->tiers);
    for (int k = 0; k < t->nproc; k++) {
        const struct cs_status_process *p = &t->proc[k];
        t->suspended |= p->suspended;
        t->lock_waits += p->lock_waits;
        t->tiers[p->identity < CS_IDENTITY_NTIERS ? p->identity : 0]++;
    }
    if (t->suspended && dt_ns > 0)
        t->suspended_ns += (uint64_t)dt_ns;
    for (int d = 0; d < CS_MAX_DEVICES; d++) {
        struct cs_node_tenant_dev *v = &t->dev[d];
        const struct cs_status_device *i = &t->devinfo[d];
        memset(v->bytes, 0, sizeof v->bytes);
        bool any = false;
        for (int k = 0; k < t->nproc; k++)
            for (int c = 0; c < CS_MEM_NCATEGORIES; c++) {
                v->bytes[c] += t->proc[k].bytes[d][c];
                any |= t->proc[k].bytes[d][c] || t->proc[k].gpu_ns[d];
            }
        v->shown = any || i->uuid[0] || i->used || t->cum_gpu_ns[d] || d == 0;
        v->share_known = (i->sm_limit || v->share_nvml) && span > 0;
        v->share = span > 0 ? (double)rise(now->gpu_ns[d], w->gpu_ns[d]) / span : 0;
        int g = cs_node_gpu_of(m, t, d);
        bool saturated = g >= 0 && m->gpu[g].util >= SATURATED_UTIL;
        v->starved = v->share_known && !t->suspended && saturated && t->throttled < 0.01 &&
                     v->share < STARVED_FRACTION * i->sm_limit / 100.0;
    }
}

static void tenant_gone(struct cs_node_tenant *t, int64_t now)
{
    if (t->where.fd >= 0)
        close(t->where.fd);
    t->where.fd = -1;
    if (!t->gone) {
        t->gone = true;
        t->gone_since = now;
        for (int k = 0; k < t->nproc; k++)
            t->proc[k].alive = false;
    }
}

/* One tenant's frame. False: it is gone (truncated, replaced, unusable). */
static bool read_tenant(struct cs_node_model *m, struct cs_node_tenant *t, int64_t dt)
{
    struct cs_ledger_header h;
    struct stat st;
    if (t->where.fd < 0 || fstat(t->where.fd, &st) ||
        (uint64_t)st.st_size < CS_LEDGER_FILE_SIZE ||
        !cs__pread_full(t->where.fd, &h, sizeof h, 0) || !header_valid(&h))
        return false;
    /* Last frame's processes, all of them: one missing would count its
     * whole counter again as new. */
    int nprev = t->nproc;
    struct cs_status_process *prev = nprev ? malloc((size_t)nprev * sizeof *prev) : NULL;
    if (nprev && !prev)
        return true; /* keep the last frame; try again at the next refresh */
    if (nprev)
        memcpy(prev, t->proc, (size_t)nprev * sizeof *prev);
    bool ok = read_slots(m, t, &h);
    if (ok) {
        copy_header(t, &h);
        mark_mps(m, t);
        add_nvml_time(m, t, dt);
        accumulate(t, prev, nprev, m->now_ns);
    }
    free(prev);
    if (!ok)
        return false;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        if (t->devinfo[d].uuid[0])
            gpu_by_uuid(m, t->devinfo[d].uuid, t->devinfo[d].physical_total);
    derive(m, t, dt);
    return true;
}

/* ---- the model ---------------------------------------------------------- */

/* The model keeps one descriptor per tenant open: the soft limit goes up
 * to the hard one, so how many tenants are shown is bounded by
 * discovery's per-user quota, not by a login shell's default. */
static void more_descriptors(void)
{
    struct rlimit r;
    if (!getrlimit(RLIMIT_NOFILE, &r) && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

struct cs_node_model *cs_node_model_new(const struct cs_node_where *w)
{
    more_descriptors();
    struct cs_node_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->where = *w;
    m->slot_buf = malloc(SLOTS_BYTES);
    if (!m->slot_buf) {
        cs_node_model_free(m);
        return NULL;
    }
    return m;
}

static void tenant_free(struct cs_node_tenant *t)
{
    if (t->where.fd >= 0)
        close(t->where.fd);
    free(t->proc);
    free(t);
}

void cs_node_model_free(struct cs_node_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->ntenants; i++)
        tenant_free(m->tenant[i]);
    for (int g = 0; g < CS_NODE_MAX_GPUS; g++) {
        free(m->gpu[g].putil);
        free(m->gpu[g].mps);
    }
    free(m->found);
    free(m->tenant);
    free(m->slot_buf);
    free(m);
}

/* Room for one more tenant. */
static bool tenant_room(struct cs_node_model *m)
{
    if (m->ntenants < m->tenant_cap)
        return true;
    int cap = m->tenant_cap ? 2 * m->tenant_cap : 64;
    struct cs_node_tenant **v = realloc(m->tenant, (size_t)cap * sizeof *v);
    if (!v)
        return false;
    m->tenant = v;
    m->tenant_cap = cap;
    return true;
}

static struct cs_node_tenant *find_tenant(struct cs_node_model *m, const struct cs_node_found *f)
{
    for (int i = 0; i < m->ntenants; i++) {
        struct cs_node_tenant *t = m->tenant[i];
        if (!t->gone && t->where.dev == f->dev && t->where.ino == f->ino)
            return t;
    }
    return NULL;
}

/* Adds newly discovered tenants; closes the descriptors of known ones. */
static void merge_found(struct cs_node_model *m, int n)
{
    for (int i = 0; i < n; i++) {
        struct cs_node_found *f = &m->found[i];
        struct cs_node_tenant *t = NULL;
        if (!find_tenant(m, f) && tenant_room(m))
            t = calloc(1, sizeof *t);
        if (!t) {
            close(f->fd);
            continue;
        }
        t->where = *f;
        m->tenant[m->ntenants++] = t;
    }
}

void cs_node_model_refresh(struct cs_node_model *m)
{
    int64_t before = m->now_ns;
    m->now_ns = cs__now_ns();
    m->wall_ns = wall_ns();
    int64_t dt = m->refreshes ? m->now_ns - before : 0;
    sample_gpus(m);
    merge_found(m, cs_node_discover(&m->where, &m->found, &m->found_cap, &m->notes));
    int keep = 0;
    for (int i = 0; i < m->ntenants; i++) {
        struct cs_node_tenant *t = m->tenant[i];
        /* A tenant whose last process ended is gone, like a truncated one. */
        if (!t->gone && (!read_tenant(m, t, dt) || !cs_node_ledger_live(t->where.fd)))
            tenant_gone(t, m->now_ns);
        if (t->gone && m->now_ns - t->gone_since > CS_NODE_GONE_KEEP_NS) {
            tenant_free(t);
            continue;
        }
        m->tenant[keep++] = t;
    }
    m->ntenants = keep;
    m->refreshes++;
}

static double tenant_share(const struct cs_node_tenant *t)
{
    double s = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        s += t->dev[d].share;
    return s;
}

static uint64_t tenant_used(const struct cs_node_tenant *t)
{
    uint64_t u = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        u += t->devinfo[d].used;
    return u;
}

static const struct cs_node_model *sort_model;
static enum cs_node_sort sort_key;

static int cmp_tenant(const void *a, const void *b)
{
    const struct cs_node_tenant *x = sort_model->tenant[*(const int *)a];
    const struct cs_node_tenant *y = sort_model->tenant[*(const int *)b];
    if (x->gone != y->gone)
        return x->gone ? 1 : -1;
    if (sort_key == CS_NODE_SORT_SHARE) {
        double sx = tenant_share(x), sy = tenant_share(y);
        if (sx != sy)
            return sx > sy ? -1 : 1;
    }
    uint64_t ux = tenant_used(x), uy = tenant_used(y);
    if (ux != uy)
        return ux > uy ? -1 : 1;
    return strcmp(x->where.path, y->where.path);
}

int cs_node_order(const struct cs_node_model *m, enum cs_node_sort sort, int *idx)
{
    for (int i = 0; i < m->ntenants; i++)
        idx[i] = i;
    sort_model = m;
    sort_key = sort;
    qsort(idx, (size_t)m->ntenants, sizeof *idx, cmp_tenant);
    return m->ntenants;
}
