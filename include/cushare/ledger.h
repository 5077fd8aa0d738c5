/*
 * cushare ledger ABI, layout version 3.
 *
 * The ledger is the file named by CUDA_DEVICE_MEMORY_SHARED_CACHE. Every
 * process of one tenant maps it MAP_SHARED; monitors in other languages map
 * it read-only. This header is the whole contract: byte offsets are pinned by
 * static assertions below and by tests/ledger/test_abi.c (with the golden
 * header bytes in tests/ledger/golden_header_v3.hex), and any change to them
 * must bump CS_LEDGER_VERSION (see docs/ledger.md).
 *
 * File layout:
 *   [0, CS_LEDGER_HEADER_SIZE)                        struct cs_ledger_header
 *   [header_size + i * slot_size, ... + slot_size)    struct cs_ledger_slot i
 *   [CS_LEDGER_SHARE_BASE + j * 64, ... + 64)         struct cs_ledger_share j
 *   byte CS_LEDGER_LOCK_BASE + i                      OFD lock byte of slot i
 *                                                     (beyond EOF; never read)
 *   byte CS_LEDGER_LOCK_BASE - 1                      post-init (identity probe) lock
 *   byte CS_LEDGER_CTX_LOCK(d)                        context-measure lock of device d
 *   byte CS_LEDGER_HEAL_LOCK                          held while healing the aggregates
 *   byte CS_LEDGER_KEEP_LOCK                          shared by owners of a file, taken
 *                                                     exclusively by whoever removes it
 *   byte CS_LEDGER_SHARE_LOCK(j)                      read-locked by every process holding
 *                                                     share j; write-locked to make or free it
 *
 * All multi-byte fields are native-endian (the ledger never leaves the host).
 * Fields marked "atomic" are only touched with C11/GCC atomic operations;
 * readers in other languages must use their atomic 64-bit loads.
 *
 * Ownership rules:
 *   - The header's identity fields (magic .. sm_limit) are written once by
 *     the creator into a private temporary file that is then linked into
 *     place, so every process that can open the path sees them complete.
 *   - used[] is the per-device aggregate of every live slot's bytes: the O(1)
 *     admission counter. Writers: any process, by compare-and-swap only.
 *     Every change a slot's owner makes to used[] is announced first in its
 *     slot (pending[], then op_seq) and withdrawn after, so a healer can
 *     tell an in-flight charge from bytes a dead process left behind.
 *   - A slot belongs to the process holding the OFD write lock on its lock
 *     byte. Only the holder writes the slot (plus monitors writing the
 *     control word run_request). A slot whose lock can be taken while its
 *     state is not FREE belongs to a dead process; whoever takes the lock
 *     reaps it (returns its bytes to used[]) before doing anything else, so
 *     reaping happens exactly once.
 */
#ifndef CUSHARE_LEDGER_H
#define CUSHARE_LEDGER_H

#include <stdint.h>

#define CS_LEDGER_MAGIC "CUSHLDG1"        /* 8 bytes, no terminator stored */
#define CS_LEDGER_VERSION 3u
#define CS_MAX_DEVICES 16
#define CS_LEDGER_SLOTS 1024
#define CS_LEDGER_HEADER_SIZE 4096u
#define CS_LEDGER_LOCK_BASE (1ull << 40)  /* lock bytes live far beyond EOF */
/* Held while a context whose size nobody in the tenant has measured yet is
 * created and measured on device d (docs/ledger.md). */
#define CS_LEDGER_CTX_LOCK(d) (CS_LEDGER_LOCK_BASE - 2u - (uint64_t)(d))
/* Held (exclusive, never waited for) by the one process that heals the
 * aggregates of the tenant (docs/ledger.md, "Healing"). */
#define CS_LEDGER_HEAL_LOCK (CS_LEDGER_LOCK_BASE - 2u - CS_MAX_DEVICES)
/* Held shared by whoever keeps a ledger file in place (`cushare run` for
 * its private ledger); a sweeper removes a file only while it holds this
 * byte exclusively and no slot lock is held (docs/ledger.md, "Private
 * ledgers"). */
#define CS_LEDGER_KEEP_LOCK (CS_LEDGER_LOCK_BASE - 3u - CS_MAX_DEVICES)
/* Device memory shared between processes (VMM exports, legacy IPC):
 * docs/ledger.md, "Shares". */
#define CS_LEDGER_SHARES 256
#define CS_LEDGER_SHARE_KEYS 3
#define CS_LEDGER_SHARE_LOCK(j) (CS_LEDGER_LOCK_BASE - 1024u - (uint64_t)(j))
/* Held exclusively by whoever parks or wakes the tenant (docs/parking.md). */
#define CS_LEDGER_PARK_LOCK (CS_LEDGER_LOCK_BASE - 4u - CS_MAX_DEVICES)

/* Categories of device memory charged to a slot (docs/accounting.md). */
#define CS_MEM_CATEGORIES(X)                                                  \
    X(CONTEXT, "context")   /* context and module overhead               */ \
    X(DATA, "data")         /* cuMemAlloc, pitched                        */ \
    X(MANAGED, "managed")   /* cuMemAllocManaged                          */ \
    X(ARRAY, "array")       /* arrays, mipmapped arrays                   */ \
    X(POOL, "pool")         /* stream-ordered pools: reserved growth      */ \
    X(VMM, "vmm")           /* cuMemCreate physical handles               */ \
    X(IMPORT, "import")     /* shareable-handle imports, IPC opens        */ \
    X(EXTERNAL, "external") /* cuImportExternalMemory                     */ \
    X(GRAPH, "graph")       /* graph memory nodes                         */

enum cs_mem_category {
#define CS_X_ENUM(id, name) CS_MEM_##id,
    CS_MEM_CATEGORIES(CS_X_ENUM)
#undef CS_X_ENUM
    CS_MEM_NCATEGORIES
};
#define CS_MEM_CATEGORY_SLOTS 12 /* ABI room; >= CS_MEM_NCATEGORIES */

enum cs_slot_state {
    CS_SLOT_FREE = 0,
    CS_SLOT_LIVE = 1,
};

/* How the process learnt the PID that NVML reports for it. */
#define CS_IDENTITY_TIERS(X)                                   \
    X(UNKNOWN, "unknown")                                       \
    X(NVML_NS, "nvml-namespace") /* NVML reports our own pid */ \
    X(BROKER, "broker")                                         \
    X(PROCFS, "procfs")                                         \
    X(PROBE, "probe")                                           \
    X(FAILED, "failed")

enum cs_identity_tier {
#define CS_X_ENUM(id, name) CS_IDENTITY_##id,
    CS_IDENTITY_TIERS(CS_X_ENUM)
#undef CS_X_ENUM
    CS_IDENTITY_NTIERS
};

/* run_request values: written by `cushare suspend/resume`, read by tenants. */
enum cs_run_request {
    CS_RUN = 0,
    CS_SUSPEND = 1,
    CS_PARKED = 2,  /* the tenant is parked off the GPU: the next call wakes it
                     * (docs/parking.md) */
};

/* Where a tenant's GPU state is (docs/parking.md). PARKING and WAKING are
 * held only by the holder of CS_LEDGER_PARK_LOCK; found without a holder
 * they mean the performer died, and the next waker drives every process
 * back to running. */
#define CS_PARK_STATES(X)        \
    X(RUNNING, "running")        \
    X(PARKING, "parking")        \
    X(PARKED, "parked")          \
    X(WAKING, "waking")

enum cs_park_state {
#define CS_X_ENUM(id, name) CS_PARK_##id,
    CS_PARK_STATES(CS_X_ENUM)
#undef CS_X_ENUM
    CS_PARK_NSTATES
};

/* A tenant's parking record (header offset 2112). Written only by the
 * holder of CS_LEDGER_PARK_LOCK; read by anyone (monitors, waiters). */
struct cs_ledger_park {
    uint32_t state;             /*   0 atomic enum cs_park_state             */
    uint32_t seq;               /*   4 atomic: +1 at every state change; the
                                 *     futex word waiters sleep on           */
    uint64_t host_bytes;        /*   8 atomic: device bytes parked in host
                                 *     memory by the last park (0 running)   */
    uint64_t parks;             /*  16 atomic: completed parks               */
    uint64_t wakes;             /*  24 atomic: completed wakes               */
    uint64_t park_ns_total;     /*  32 atomic: time spent parking            */
    uint64_t wake_ns_total;     /*  40 atomic: time spent waking             */
    uint64_t last_park_ns;      /*  48 atomic: duration of the last park     */
    uint64_t last_wake_ns;      /*  56 atomic: duration of the last wake     */
    uint64_t since_ns;          /*  64 atomic CLOCK_REALTIME of the last change */
    int32_t performer_pid;      /*  72 atomic: who holds the park lock, 0 none */
    uint32_t last_error;        /*  76 atomic: CUresult of the last failure  */
    uint64_t refusals;          /*  80 atomic: parks refused (busy, shared
                                 *     memory, host memory, driver)          */
    uint64_t reserved[5];       /*  88                                       */
};

enum cs_policy {
    CS_POLICY_DEFAULT = 0,
    CS_POLICY_FORCE = 1,
    CS_POLICY_DISABLE = 2,
};

struct cs_ledger_header {
    char magic[8];              /*   0 CS_LEDGER_MAGIC                       */
    uint32_t version;           /*   8 CS_LEDGER_VERSION                     */
    uint32_t header_size;       /*  12 CS_LEDGER_HEADER_SIZE                 */
    uint32_t slot_size;         /*  16 sizeof(struct cs_ledger_slot)         */
    uint32_t slot_count;        /*  20 CS_LEDGER_SLOTS                       */
    uint32_t device_count;      /*  24 1 + highest device with its own setting */
    uint32_t policy;            /*  28 enum cs_policy                        */
    int32_t priority;           /*  32 CUDA_TASK_PRIORITY                    */
    uint32_t flags;             /*  36 reserved, 0                           */
    uint64_t created_ns;        /*  40 CLOCK_REALTIME of creation            */
    int32_t creator_pid;        /*  48 getpid() of the creator               */
    uint32_t reserved0;         /*  52                                       */
    uint64_t limit[CS_MAX_DEVICES];    /*  56 bytes, 0 = no limit            */
    uint32_t sm_limit[CS_MAX_DEVICES]; /* 184 percent 1..100, 0 = none       */
    uint8_t reserved1[256 - 248];      /* 248                                */
    /* 256: filled once after cuInit by the first process that knows it.  */
    uint8_t uuid[CS_MAX_DEVICES][16];  /* 256 driver UUID per device index  */
    uint32_t uuid_state[CS_MAX_DEVICES]; /* 512 atomic: 0 none, 1 writing, 2 set */
    uint64_t physical_total[CS_MAX_DEVICES]; /* 576 atomic: driver's total */
    uint8_t reserved2[1024 - 704];     /* 704                                */
    /* 1024: hot counters, each on its own 64-byte line.                    */
    struct {
        uint64_t used;          /* atomic: bytes charged on this device      */
        uint64_t peak;          /* atomic: highest value used ever had       */
        int64_t pace_vt_ns;     /* atomic: the tenant's compute clock (docs/limiter.md) */
        uint64_t share_state;   /* atomic: the share decision, CS_SHARE_STATE_* */
        uint64_t reserved[4];
    } dev[CS_MAX_DEVICES];      /* 1024 .. 2048                              */
    uint64_t claim_hint;        /* 2048 atomic: rotates first slot probed    */
    uint64_t reaped;            /* 2056 atomic: dead slots reaped            */
    uint64_t live;              /* 2064 atomic: slots currently LIVE         */
    uint8_t reserved3[2112 - 2072];
    struct cs_ledger_park park; /* 2112 .. 2240 parking (docs/parking.md)    */
    uint8_t reserved4[CS_LEDGER_HEADER_SIZE - 2240];
};

struct cs_ledger_slot {
    uint32_t state;             /*   0 atomic enum cs_slot_state             */
    int32_t pid;                /*   4 getpid() of the owner                 */
    int32_t host_pid;           /*   8 atomic: pid as NVML sees it, 0 unknown */
    uint32_t identity_tier;     /*  12 atomic enum cs_identity_tier          */
    uint32_t identity_reason;   /*  16 atomic: errno-style reason of fallback */
    uint32_t lock_waits;        /*  20 atomic: post-init lock waits          */
    uint32_t run_request;       /*  24 atomic enum cs_run_request (monitors) */
    uint32_t run_state;         /*  28 atomic: 1 while held by suspend       */
    uint64_t start_ns;          /*  32 CLOCK_REALTIME when claimed           */
    uint64_t pidns_ino;         /*  40 inode of /proc/self/ns/pid            */
    uint64_t generation;        /*  48 atomic: bumps at every claim          */
    uint64_t throttled_ns;      /*  56 atomic: time the tenant's pacing slept
                                 *     in this process, every device (views)  */
    uint64_t bytes[CS_MAX_DEVICES][CS_MEM_CATEGORY_SLOTS]; /* 64 atomic      */
    uint64_t gpu_ns[CS_MAX_DEVICES];     /* 1600 atomic: measured GPU time    */
    uint64_t last_launch_ns[CS_MAX_DEVICES]; /* 1728 atomic CLOCK_MONOTONIC   */
    uint64_t pending[CS_MAX_DEVICES];   /* 1856 atomic: bytes of charges and
                                         *      returns in flight per device   */
    uint64_t op_seq;                    /* 1984 atomic: +1 at every announce;
                                         *      never reset, not even at claim */
    uint32_t in_call;                   /* 1992 atomic: threads of the owner
                                         *      inside an intercepted call while
                                         *      parking is on (docs/parking.md) */
    uint32_t reserved2;                 /* 1996                              */
    uint64_t last_call_ns;              /* 2000 atomic CLOCK_MONOTONIC_COARSE of
                                         *      the owner's latest intercepted
                                         *      call while parking is on     */
    uint8_t reserved1[2048 - 2008];
};

/* dev[d].share_state: the compute share decision last made by a watcher
 * of the tenant (docs/limiter.md, "What top shows"), for viewers: bits
 * 0..15 what the tenant would use unthrottled, 16..31 what it is entitled
 * to (its floor plus what others leave), both parts per 10000; 32..39 why
 * it is held (0 free, 1 contended, 2 capped, 3 priority); 63 set once
 * written. Display only: nothing enforces by it. */
#define CS_SHARE_STATE_SET (1ull << 63)
static inline uint64_t cs_share_state_pack(uint32_t demand_pm, uint32_t entitled_pm, uint32_t why)
{
    return CS_SHARE_STATE_SET | (uint64_t)(demand_pm & 0xffff) |
           (uint64_t)(entitled_pm & 0xffff) << 16 | (uint64_t)(why & 0xff) << 32;
}
static inline uint32_t cs_share_state_demand_pm(uint64_t s) { return (uint32_t)(s & 0xffff); }
static inline uint32_t cs_share_state_entitled_pm(uint64_t s) { return (uint32_t)(s >> 16 & 0xffff); }
static inline uint32_t cs_share_state_why(uint64_t s) { return (uint32_t)(s >> 32 & 0xff); }

enum cs_share_state {
    CS_SHARE_FREE = 0,
    CS_SHARE_MAKING = 1,        /* being filled by the holder of its write lock */
    CS_SHARE_LIVE = 2,
};

/* One piece of device memory that processes of the tenant share. While it
 * is LIVE its bytes are counted in dev[dev].used and in no slot; it lives
 * as long as any process holds a read lock on CS_LEDGER_SHARE_LOCK(j). */
struct cs_ledger_share {
    uint32_t state;             /*   0 atomic enum cs_share_state            */
    uint32_t dev;               /*   4 device index                          */
    uint32_t cat;               /*   8 enum cs_mem_category it was charged as */
    uint32_t reserved0;         /*  12                                       */
    uint64_t bytes;             /*  16 size of the memory                    */
    uint64_t charged;           /*  24 atomic: bytes it holds in dev[].used  */
    uint64_t key[CS_LEDGER_SHARE_KEYS]; /* 32 atomic: identities both sides
                                 *      compute (exported fd's inode, IPC
                                 *      handle hash); 0 = unused            */
    uint64_t reserved1;         /*  56                                       */
};

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#include <stddef.h>
_Static_assert(sizeof(struct cs_ledger_header) == CS_LEDGER_HEADER_SIZE,
               "ledger header size is ABI");
_Static_assert(offsetof(struct cs_ledger_header, limit) == 56, "ABI");
_Static_assert(offsetof(struct cs_ledger_header, sm_limit) == 184, "ABI");
_Static_assert(offsetof(struct cs_ledger_header, uuid) == 256, "ABI");
_Static_assert(offsetof(struct cs_ledger_header, uuid_state) == 512, "ABI");
_Static_assert(offsetof(struct cs_ledger_header, physical_total) == 576, "ABI");
_Static_assert(offsetof(struct cs_ledger_header, dev) == 1024, "ABI");
_Static_assert(offsetof(struct cs_ledger_header, claim_hint) == 2048, "ABI");
_Static_assert(offsetof(struct cs_ledger_header, park) == 2112, "ABI");
_Static_assert(sizeof(struct cs_ledger_park) == 128, "ABI");
_Static_assert(offsetof(struct cs_ledger_slot, in_call) == 1992, "ABI");
_Static_assert(offsetof(struct cs_ledger_slot, last_call_ns) == 2000, "ABI");
_Static_assert(sizeof(struct cs_ledger_slot) == 2048, "ledger slot size is ABI");
_Static_assert(offsetof(struct cs_ledger_slot, throttled_ns) == 56, "ABI");
_Static_assert(offsetof(struct cs_ledger_slot, bytes) == 64, "ABI");
_Static_assert(offsetof(struct cs_ledger_slot, gpu_ns) == 1600, "ABI");
_Static_assert(offsetof(struct cs_ledger_slot, last_launch_ns) == 1728, "ABI");
_Static_assert(offsetof(struct cs_ledger_slot, pending) == 1856, "ABI");
_Static_assert(offsetof(struct cs_ledger_slot, op_seq) == 1984, "ABI");
_Static_assert(CS_MEM_NCATEGORIES <= CS_MEM_CATEGORY_SLOTS, "ABI room");
_Static_assert(sizeof(struct cs_ledger_share) == 64, "ledger share size is ABI");
_Static_assert(offsetof(struct cs_ledger_share, charged) == 24, "ABI");
_Static_assert(offsetof(struct cs_ledger_share, key) == 32, "ABI");
#endif

#define CS_LEDGER_SHARE_BASE \
    ((uint64_t)CS_LEDGER_HEADER_SIZE + (uint64_t)CS_LEDGER_SLOTS * 2048u)
#define CS_LEDGER_FILE_SIZE (CS_LEDGER_SHARE_BASE + (uint64_t)CS_LEDGER_SHARES * 64u)

#endif
