/*
 * The node board: one small file every tenant on a node maps, so tenants
 * in different ledgers (different containers) can see each other's
 * priority and recent activity per device (docs/limiter.md, "Policy and
 * priority"). NVML shows that *someone* keeps a GPU busy; only the board
 * says who, and at which CUDA_TASK_PRIORITY.
 *
 * Layout version 1, native-endian, all fields after the header atomic:
 *   [0, 64)                         struct cs_board_header
 *   [64 + i * 64, ...)              struct cs_board_entry i, i < entries
 *
 * An entry is one (tenant, device) pair. It is claimed by compare-and-swap
 * of `tenant` from 0 (free) or from a stale value (seen_ns older than
 * CS_BOARD_STALE_NS) to CS_BOARD_CLAIMING, filled, then published by
 * storing the tenant id with release order. Readers skip 0 and CLAIMING.
 * Nothing needs a lock or survives a crash: entries of dead tenants go
 * stale. Several processes of one tenant may race to claim; a duplicate
 * entry is harmless (readers merge by tenant id).
 *
 * Trust: any tenant can write the board. The worst a liar can do is make
 * others be held to their own configured limits (never below them).
 */
#ifndef CS_LIMITER_BOARD_H
#define CS_LIMITER_BOARD_H

#include <stdbool.h>
#include <stdint.h>

#define CS_BOARD_MAGIC "CUSHBRD1"
#define CS_BOARD_VERSION 1u
#define CS_BOARD_ENTRIES 512u
#define CS_BOARD_DEFAULT_PATH "/tmp/vgpulock/cushare-board"
#define CS_BOARD_CLAIMING 1ull
#define CS_BOARD_STALE_NS 60000000000ll   /* unpublished for 60 s: free */

struct cs_board_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;       /* 64 */
    uint32_t entry_size;        /* 64 */
    uint32_t entries;           /* CS_BOARD_ENTRIES */
    uint8_t reserved[40];
};

struct cs_board_entry {
    uint64_t tenant;            /* 0 free, 1 claiming, else the tenant id */
    uint64_t seen_ns;           /* CLOCK_MONOTONIC of the last publish */
    uint64_t busy_until_ns;     /* the tenant counts as busy until then */
    uint8_t uuid[16];           /* the device (driver UUID bytes) */
    int32_t priority;           /* CUDA_TASK_PRIORITY (lower = higher) */
    uint32_t policy;            /* enum cs_policy */
    uint32_t sm_limit;          /* percent, 0 none */
    uint32_t share_ppm;         /* measured share of the last second */
    uint32_t flags;             /* CS_BOARD_F_* (0 from writers before they existed) */
    uint32_t reserved;
};

/* The tenant is held below its limit by the others: it is under 97 % of
 * its limit, its pacer (almost) did not sleep in the last second, and the
 * device is saturated by limited tenants on the board. Limited tenants of lower or equal priority then scale
 * their own share down to its fulfilment (docs/limiter.md, "Fulfilment"). */
#define CS_BOARD_F_STARVED 1u

_Static_assert(sizeof(struct cs_board_header) == 64, "board ABI");
_Static_assert(sizeof(struct cs_board_entry) == 64, "board ABI");

#define CS_BOARD_SIZE (64u + CS_BOARD_ENTRIES * 64u)

/* What a tenant publishes for one device. */
struct cs_board_post {
    uint64_t tenant;
    uint8_t uuid[16];
    int32_t priority;
    uint32_t policy, sm_limit, share_ppm;
    bool busy, starved;
};

/* What a tenant learns about the others on one device. */
struct cs_board_view {
    int busy_higher_or_equal;   /* busy tenants with priority <= ours */
    int busy_lower;             /* busy tenants with priority > ours */
    uint32_t lower_share_ppm;   /* sum of the shares of busy_lower */
    uint32_t busy_share_ppm;    /* sum of the shares of all busy others */
    /* Smallest share/limit (ppm) of the starved, busy, limited tenants of
     * higher or equal priority; 1000000 when there is none. */
    uint32_t starved_fulfil_ppm;
    uint32_t starved_limit;     /* that tenant's limit (percent), 0 none */
};

struct cs_board;

/* Opens (creating if missing) the board at `path`; NULL path: the default.
 * Returns NULL when unusable (logged once at info level: the limiter then
 * works from NVML alone). Read-only when the file is not writable. */
struct cs_board *cs__board_open(const char *path);
void cs__board_close(struct cs_board *b);

/* Publishes one device's entry for our tenant. */
void cs__board_post(struct cs_board *b, const struct cs_board_post *p, int64_t now);

/* Summarises the other tenants busy on device `uuid` at `now`. */
void cs__board_view(const struct cs_board *b, uint64_t self, const uint8_t uuid[16],
                    int32_t priority, int64_t now, struct cs_board_view *out);

#endif
