/*
 * The node view model: every tenant the node shows us (src/node, one
 * discovery), sampled over time, with the GPUs NVML reports. `cushare
 * top` (no LEDGER), `cushare status --json` (no LEDGER) and `cushare
 * exporter` render this one model; none of them reads a ledger itself.
 *
 * Ledgers are read with pread, never mapped: a ledger truncated or
 * replaced under the viewer is a short read, and its tenant is then shown
 * as gone (for CS_NODE_GONE_KEEP_NS) instead of faulting the viewer. Each
 * refresh reads a tenant's header; its slot table only when membership
 * changed (claim_hint, live, reaped), else only the slots last seen LIVE.
 *
 * Which processes are MPS clients (docs/mps.md) comes from NVML's MPS
 * process list of each GPU, one query per GPU per refresh, matched by host
 * pid; never from the control daemon (a process spawned per question).
 * Display only: without that NVML entry point nobody is marked.
 *
 * Rates (achieved compute share, throttled) come from per-process
 * counters in the slots (gpu_ns[d], throttled_ns), folded into per-tenant
 * cumulative counters that survive processes leaving; the share of the
 * last CS_NODE_WINDOW_NS is the rise of that counter over the time.
 *
 * Threads: one model belongs to one thread.
 */
#ifndef CS_CLI_NODE_MODEL_H
#define CS_CLI_NODE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/status_model.h"
#include "node/node.h"

#define CS_NODE_MAX_GPUS 16
#define CS_NODE_HIST 32                     /* samples kept per tenant */
#define CS_NODE_WINDOW_NS 3000000000ll      /* "achieved share" is over the last 3 s */
#define CS_NODE_GONE_KEEP_NS 5000000000ll   /* a vanished tenant stays shown as gone */

struct cs_node_sample {
    int64_t t_ns;                           /* CLOCK_MONOTONIC */
    uint64_t gpu_ns[CS_MAX_DEVICES];        /* tenant's cumulative GPU time */
    uint64_t throttled_ns;                  /* tenant's cumulative pacing sleep */
};

struct cs_node_tenant_dev {
    bool shown;
    uint64_t bytes[CS_MEM_NCATEGORIES];     /* sum over live processes */
    double share;                           /* achieved, 0..1, over the window */
    bool share_known;                       /* limiter measured (limited tenant) */
    bool share_nvml;                        /* no limit: estimated from NVML's
                                               per-process SM utilisation */
    bool starved;
    int nmps;                               /* processes NVML lists as MPS
                                               clients of this device's GPU */
};

struct cs_node_tenant {
    bool gone;                              /* vanished: last values shown */
    int64_t gone_since;
    struct cs_node_found where;             /* fd -1 once gone */
    uint32_t policy;
    int32_t priority;
    uint64_t created_ns, reaped;
    struct cs_status_device devinfo[CS_MAX_DEVICES]; /* by device index */
    struct cs_status_process *proc;         /* LIVE slots */
    int nproc, proc_cap;
    int live_idx[CS_LEDGER_SLOTS];          /* slots LIVE at the last full read */
    int nlive_idx;
    uint64_t key[3];                        /* claim_hint, live, reaped of that read */
    bool have_key;
    struct cs_node_tenant_dev dev[CS_MAX_DEVICES];
    struct cs_node_sample hist[CS_NODE_HIST];   /* ring */
    int hist_n, hist_head;                  /* head: next write */
    uint64_t cum_gpu_ns[CS_MAX_DEVICES], cum_throttled_ns;
    double throttled;                       /* 0..1 over the window */
    bool suspended;                         /* any process held by suspend */
    struct cs_status_park park;             /* parking record (docs/parking.md) */
    uint64_t suspended_ns;                  /* time seen suspended by this model */
    uint32_t lock_waits;
    int tiers[CS_IDENTITY_NTIERS];          /* processes per identity tier */
};

struct cs_node_gpu {
    char uuid[48];                          /* "GPU-...", "" unknown */
    char name[96];
    int nvml_index;                         /* -1 not from NVML */
    uint64_t mem_total, mem_used;           /* NVML, bytes; 0 unknown */
    int util;                               /* NVML percent, -1 unknown */
    /* NVML's per-process SM utilisation of the last refresh (pid = the
     * host's), for tenants the limiter does not measure. */
    struct cs_node_putil { uint32_t pid, sm; } *putil;
    int nputil, putil_cap;
    uint64_t putil_seen_us;                 /* lastSeenTimeStamp of the next query */
    /* NVML's MPS clients of the last refresh (nvmlProcessInfo_t, pid = the
     * host's): the buffer is reused, grown when NVML needs more. */
    struct nvmlProcessInfo_st *mps;
    int nmps, mps_cap;
};

struct cs_node_model {
    struct cs_node_where where;
    int64_t now_ns;                         /* CLOCK_MONOTONIC of the last refresh */
    uint64_t wall_ns;                       /* CLOCK_REALTIME of it */
    /* Every tenant discovery lists, grown as needed: no fixed table a
     * user could fill (discovery's per-owner quota bounds it). */
    int ntenants, tenant_cap;
    struct cs_node_tenant **tenant;
    struct cs_node_notes notes;             /* what the last discovery left out */
    int ngpus;
    struct cs_node_gpu gpu[CS_NODE_MAX_GPUS];
    struct cs_node_found *found;            /* discovery scratch, found_cap entries */
    int found_cap;
    char *slot_buf;                         /* slot table scratch */
    uint64_t refreshes;
};

struct cs_node_model *cs_node_model_new(const struct cs_node_where *w);
void cs_node_model_free(struct cs_node_model *m);
/* Discovers, reads every tenant, samples NVML. */
void cs_node_model_refresh(struct cs_node_model *m);

/* NVML's GPUs by NVML index (nvidia-smi's numbering): UUIDs into
 * uuid[0..max), "" for one NVML would not name. How many, or -1 when NVML
 * cannot be loaded or initialised. The one NVML loader of the command
 * (`cushare mps` uses it too). */
int cs_node_nvml_uuids(char (*uuid)[48], int max);

/* Why NVML gave no GPUs (after a refresh): "libnvidia-ml.so.1 not found",
 * "nvmlInit failed (error N)", ...; NULL when it answered. */
const char *cs_node_nvml_problem(void);

/* The GPU (index into m->gpu) a tenant's device d is on, -1 unknown. */
int cs_node_gpu_of(const struct cs_node_model *m, const struct cs_node_tenant *t, int d);
uint64_t cs_node_dev_used(const struct cs_node_tenant *t, int d);
/* The share history of device d, oldest first, into out (at most n);
 * returns how many. */
int cs_node_share_history(const struct cs_node_tenant *t, int d, double *out, int n);

/* Renderers (node_render.c, cmd_exporter.c). */
enum cs_node_sort { CS_NODE_SORT_MEM, CS_NODE_SORT_SHARE };
struct cs_node_top_opts {
    int width;
    enum cs_node_sort sort;
    int selected;                           /* row cursor (tenant rank), -1 none */
    const bool *expanded;                   /* per tenant rank in m->tenant, or NULL */
    bool keys;                              /* interactive: show the keys line */
};
/* Why a limited tenant is above its share on device d ("FREE": not
 * contended under policy default; "OFF": policy disable), NULL if held. */
const char *cs_node_unheld_reason(const struct cs_node_tenant *t, int d);
void cs_node_print_top(FILE *out, const struct cs_node_model *m,
                       const struct cs_node_top_opts *o);
void cs_node_print_json(FILE *out, const struct cs_node_model *m);
void cs_node_print_prom(FILE *out, const struct cs_node_model *m);
/* Tenant indices in display order for `sort` into idx (room for
 * m->ntenants); returns how many. */
int cs_node_order(const struct cs_node_model *m, enum cs_node_sort sort, int *idx);

/* Node-view options shared by top, status and exporter: --registry
 * DIR/BASE, --scan DIR (repeatable), --no-scan. Returns 1 when argv[*i]
 * was one (advancing *i past its value), 0 when not, or CS_EXIT_USAGE
 * negated after a message. Call cs_node_where_defaults first. */
int cs_node_where_arg(const char *cmd, int argc, char **argv, int *i, struct cs_node_where *w);
/* Registry from CUSHARE_REGISTRY (the configuration table), else the
 * default. 0, or CS_EXIT_USAGE after the configuration's message. */
int cs_node_where_defaults(const char *cmd, struct cs_node_where *w);
/* `samples` refreshes `interval_ms` apart (rates need two), for one-shot
 * views; more samples give the history a one-shot frame shows. */
void cs_node_model_sample(struct cs_node_model *m, int interval_ms, int samples);
#endif
