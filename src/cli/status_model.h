/*
 * A consistent snapshot of a ledger for `cushare status` and `cushare top`:
 * which devices to show, every LIVE slot with its liveness (lock held) and
 * its charges, and the renderers (human table, JSON, top frame). A ledger
 * is never created or claimed here. Before a snapshot the ledger's dead
 * slots are reaped and its aggregates healed (docs/ledger.md) when the
 * caller may write it and did not ask otherwise; then it is opened
 * read-write for that. Otherwise it is opened read-only and shown as it
 * is, dead slots included.
 */
#ifndef CS_CLI_STATUS_MODEL_H
#define CS_CLI_STATUS_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ledger/ledger.h"

struct cs_status_device {
    int index;
    char uuid[48];              /* "GPU-xxxxxxxx-...", "" when not yet known */
    uint64_t limit;             /* bytes, 0 = no limit */
    uint64_t used, peak, physical_total;
    uint64_t shared;            /* part of used held by shares (memory several
                                 * processes hold), in no process's bytes */
    uint32_t sm_limit;          /* percent, 0 = none */
    uint64_t share_state;       /* the compute share decision (ledger.h,
                                   cs_share_state_pack), 0 = none yet */
    int32_t mps_pid;            /* cushare's MPS daemon of this GPU, when it runs
                                 * (cs_mps_annotate; derived, not in the ledger) */
};

struct cs_status_process {
    int slot;
    int32_t pid, host_pid;
    bool alive;                 /* false: LIVE but its lock is free (not yet reaped) */
    bool suspended;             /* parked by `cushare suspend` */
    bool mps;                   /* an MPS client: of a device's mps_pid daemon
                                 * (cs_mps_annotate), or NVML lists it (node view) */
    uint32_t identity;          /* enum cs_identity_tier */
    uint32_t identity_reason;   /* errno of the last fallback, 0 none */
    uint32_t lock_waits;        /* post-init lock waits (legacy probe) */
    uint64_t start_ns;
    uint64_t throttled_ns;      /* pacing sleep of this process */
    uint64_t bytes[CS_MAX_DEVICES][CS_MEM_NCATEGORIES];
    uint64_t gpu_ns[CS_MAX_DEVICES];
};

/* A tenant's parking record (docs/parking.md), copied from the ledger. */
struct cs_status_park {
    uint32_t state;             /* enum cs_park_state */
    uint64_t host_bytes;        /* device bytes parked in host memory */
    uint64_t parks, wakes, refusals;
    uint64_t park_ns_total, wake_ns_total, last_park_ns, last_wake_ns;
    int32_t performer_pid;
    uint32_t last_error;
};

struct cs_status {
    const char *path;
    uint32_t version, policy;
    int32_t priority, creator_pid;
    uint64_t created_ns, live, reaped;
    int ndev;
    struct cs_status_device dev[CS_MAX_DEVICES];
    struct cs_status_park park;
    int nproc;
    struct cs_status_process proc[CS_LEDGER_SLOTS];
};

/* Copies the parking record of header h. */
void cs_status_park_read(const struct cs_ledger_header *h, struct cs_status_park *p);
/* "PARKED", "WAKING", ...: the word top shows; NULL while running. */
const char *cs_status_park_word(const struct cs_status_park *p);
/* Writes the "park":{...} member's value (status --json and the node view). */
void cs_status_park_json(FILE *out, const struct cs_status_park *p);

/* Resolves LEDGER (argument, else $CUDA_DEVICE_MEMORY_SHARED_CACHE) and
 * opens it: read-write when `reap` and the caller may write the file,
 * else read-only. Returns CS_EXIT_OK, CS_EXIT_USAGE (no path: message
 * names the variable) or CS_EXIT_FAIL (the ledger code said why). */
int cs_status_open(const char *cmd, const char *arg, bool reap, struct cs_ledger *l);

/* Reaps dead slots and heals the aggregates of a ledger opened read-write
 * (cs__ledger_reap); nothing for a read-only one. */
void cs_status_reap(struct cs_ledger *l);

/* Why a tenant is held, from a device's share_state: "no", "contended",
 * "capped", "priority" (docs/limiter.md, "What top shows"). */
const char *cs_status_held_name(uint64_t share_state);

/* Fills *st (large: allocate it) from the mapped ledger. */
void cs_status_snapshot(const struct cs_ledger *l, struct cs_status *st);

/* Copies slot i's fields (all but `alive`) from a slot image. */
void cs_status_from_slot(const struct cs_ledger_slot *s, int i, struct cs_status_process *p);

/* "broker(ENOENT) w3": identity tier, reason, post-init lock waits. */
void cs_status_identity_text(const struct cs_status_process *p, char *out, size_t len);
const char *cs_status_policy_name(uint32_t p);
/* "mps" for an MPS client, else "time-sliced": JSON's "mode" (docs/mps.md). */
const char *cs_status_mode_name(const struct cs_status_process *p);
void cs_status_json_string(FILE *out, const char *s);

uint64_t cs_status_process_total(const struct cs_status_process *p, int dev);

void cs_status_print_human(FILE *out, const struct cs_status *st);
void cs_status_print_json(FILE *out, const struct cs_status *st);
/* One screen of `top`, `width` columns wide (no cursor movement); `keys`:
 * keys are read, so the frame says how to quit. */
void cs_status_print_top(FILE *out, const struct cs_status *st, int width, bool keys);

#endif
