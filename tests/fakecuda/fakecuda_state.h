/*
 * TEST TOOL (tests/fakecuda), never shipped with cushare.
 *
 * Layout of the simulated device state that the fake libcuda.so.1 and
 * libnvidia-ml.so.1 share between every process of a test: a file mapped
 * MAP_SHARED (FAKECUDA_STATE=<path>) or, without it, an anonymous shared
 * mapping (shared with fork() children, and between the two fake libraries
 * of one process). Tests include this header to read the counters:
 *
 *     struct fakecuda_state *s = fakecuda_state_open(getenv("FAKECUDA_STATE"));
 *     uint64_t used = fakecuda_load(&s->dev[0].used);
 *     uint64_t n = fakecuda_hook_calls(s, FAKECUDA_HOOK_cuMemAlloc_v2);
 *     const struct fakecuda_proc *p = fakecuda_proc_find(s, child_pid);
 *
 * Everything is indexed by PHYSICAL device (what NVML sees), never by CUDA
 * ordinal (which CUDA_VISIBLE_DEVICES remaps). Counters are updated with
 * atomics; read them with fakecuda_load(). The layout is versioned: a
 * change of any struct below bumps FAKECUDA_STATE_VERSION.
 *
 * Invariant kept by the fake: dev[d].used == sum over live process entries
 * of proc[i].used[d], and proc[i].used[d] == sum of proc[i].kind_used[d][k].
 */
#ifndef FAKECUDA_STATE_H
#define FAKECUDA_STATE_H

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAKECUDA_STATE_MAGIC 0x3154534144554346ULL /* "FCUDAST1" */
#define FAKECUDA_STATE_VERSION 7u
#define FAKECUDA_MAX_DEVICES 16
#define FAKECUDA_MAX_PROCS 128
#define FAKECUDA_MAX_HOOKS 256
#define FAKECUDA_MAX_CALLS 512
#define FAKECUDA_MAX_EXPORTS 256
#define FAKECUDA_RING 4096
#define FAKECUDA_CAPSEGS 2048 /* breakpoints of a device's MPS capacity profile */
#define FAKECUDA_SLICE_ITEMS 4096 /* work queued on a time-slicing device (FAKECUDA_TIMESLICE_US) */
#define FAKECUDA_DEFAULT_MEM (16ULL << 30)
#define FAKECUDA_DEFAULT_SMS 132 /* the H200's (and H100 SXM's) multiprocessors */
#define FAKECUDA_MAX_SMS 1024

/* What a charge of device memory is for (kind_used / used_by_kind). */
enum fakecuda_kind {
    FAKECUDA_KIND_ALLOC = 0,    /* cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged */
    FAKECUDA_KIND_ARRAY = 1,    /* CUDA arrays and mipmapped arrays */
    FAKECUDA_KIND_POOL = 2,     /* memory reserved by stream-ordered pools */
    FAKECUDA_KIND_VMM = 3,      /* cuMemCreate physical allocations */
    FAKECUDA_KIND_EXTERNAL = 4, /* cuImportExternalMemory */
    FAKECUDA_KIND_GRAPH = 5,    /* graph memory reserved by launched graphs */
    FAKECUDA_KIND_CONTEXT = 6,  /* FAKECUDA_CTX_BYTES per process and device */
    FAKECUDA_KIND_COUNT = 8
};

/* Index of each row of src/hook/hooks.def, in table order. */
enum fakecuda_hook {
#define CS_CU(base, sym, ...) FAKECUDA_HOOK_##sym,
#define CS_NVML(sym, ...) FAKECUDA_HOOK_##sym,
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
    FAKECUDA_HOOK_COUNT
};

/* Index of each function the fake exports (fake_exports.def order). */
enum fakecuda_call {
#define FAKE_CU(sym) FAKECUDA_CALL_##sym,
#define FAKE_NVML(sym) FAKECUDA_CALL_##sym,
#include "fake_exports.def"
#undef FAKE_CU
#undef FAKE_NVML
    FAKECUDA_CALL_COUNT
};

_Static_assert(FAKECUDA_HOOK_COUNT <= FAKECUDA_MAX_HOOKS, "raise FAKECUDA_MAX_HOOKS");
_Static_assert(FAKECUDA_CALL_COUNT <= FAKECUDA_MAX_CALLS, "raise FAKECUDA_MAX_CALLS");

/* One scheduled stretch of the device timeline (CLOCK_MONOTONIC ns).
 * Consecutive work of one pid is merged into one interval. */
struct fakecuda_interval {
    uint64_t start_ns;
    uint64_t end_ns;
    int32_t pid;
    uint32_t pad;
};

/* A breakpoint of the capacity MPS work holds: from t (CLOCK_MONOTONIC ns)
 * to the next breakpoint, used_ppm of the device's SMs are taken. */
struct fakecuda_capseg {
    uint64_t t;
    uint32_t used_ppm;
    uint32_t pad;
};

/* A piece of work queued on a time-slicing device (FAKECUDA_TIMESLICE_US,
 * fake_slice.c): kernels, graph launches, memsets and event records (the
 * last take no time, but their context must get the device to write
 * them). Slot = seq % FAKECUDA_SLICE_ITEMS. */
struct fakecuda_slice_item {
    uint64_t seq;           /* 0: never used */
    uint64_t left_ns;       /* device time still to run */
    uint64_t end_ns;        /* when it completed (valid once done) */
    int32_t pid;            /* whose context it runs in */
    uint32_t done;
};

/* last_owner of a device whose queued work ends with MPS clients' work:
 * the MPS server's one context. */
#define FAKECUDA_OWNER_MPS (-2)

struct fakecuda_device {
    uint64_t total;         /* physical bytes, fixed when the state is created */
    uint8_t uuid[16];       /* NVML "GPU-..." and cuDeviceGetUuid bytes */
    uint64_t used;          /* physical bytes in use, all processes, all kinds */
    uint64_t peak_used;     /* high-water mark of used */
    uint64_t used_by_kind[FAKECUDA_KIND_COUNT];
    uint64_t allocs;        /* successful physical charges (any kind) */
    uint64_t frees;         /* physical releases */
    uint64_t failed_allocs; /* charges refused: would exceed total (OOM) */
    uint64_t imported_bytes;/* bytes currently imported (VMM fd, IPC): not physical */
    uint64_t imports;       /* successful imports, cumulative */
    uint64_t launches;      /* kernels + graph launches, cumulative */
    uint64_t busy_until_ns; /* CLOCK_MONOTONIC ns at which queued work ends */
    uint64_t busy_ns;       /* accumulated scheduled GPU time (MPS work:
                             * only the time it made the device busy) */
    uint32_t sms;           /* multiprocessors (FAKECUDA_SMS at creation) */
    int32_t last_owner;     /* whose work ends at busy_until_ns: a pid,
                             * FAKECUDA_OWNER_MPS, or 0 (never used) */
    pthread_mutex_t lock;   /* robust, process-shared: timeline, ring, profile */
    uint64_t mps_from_ns;   /* the MPS server's current turn on the device
                             * began here (valid while last_owner is MPS) */
    uint32_t nseg;          /* breakpoints in seg[] */
    uint32_t mps_faults;    /* atomic: fatal faults of MPS clients on the
                             * device, cumulative (every client of the
                             * server gets the error) */
    /* Capacity held by MPS work of the current turn, sorted by t; the last
     * breakpoint's used_ppm is 0 (nothing is held for ever). */
    struct fakecuda_capseg seg[FAKECUDA_CAPSEGS];
    uint64_t ring_head;     /* intervals appended; slot = index % FAKECUDA_RING */
    struct fakecuda_interval ring[FAKECUDA_RING];
    /* The time-slicing model (fake_slice.c; under lock): nothing is timed
     * at submit, the device is simulated lazily up to slice_now. */
    uint64_t slice_seq;     /* last item queued */
    uint64_t slice_low;     /* every item below it is done */
    uint64_t slice_now;     /* the device has been simulated up to here */
    uint64_t slice_from;    /* the owner's time slice began here */
    uint64_t slice_last_end;/* end of the last work that ran */
    int32_t slice_owner;    /* pid whose context holds the device, 0 none */
    uint32_t slice_pad;
    struct fakecuda_slice_item slice[FAKECUDA_SLICE_ITEMS];
};

/* A process that has (or had) a context. pid 0 = free slot. An entry whose
 * pid is dead (kill(pid, 0) fails with ESRCH) is stale: NVML ignores it and
 * the fake reclaims its memory (as the driver does at process teardown). */
struct fakecuda_proc {
    int32_t pid;            /* real pid (NVML reports pid + FAKECUDA_NVML_PID_OFFSET) */
    uint32_t ctx_mask;      /* bit d: has a context on physical device d (NVML list) */
    uint64_t used[FAKECUDA_MAX_DEVICES];     /* physical bytes charged to it */
    uint64_t kind_used[FAKECUDA_MAX_DEVICES][FAKECUDA_KIND_COUNT];
    uint64_t imported[FAKECUDA_MAX_DEVICES]; /* bytes it imported (owned by others) */
    uint64_t busy_ns[FAKECUDA_MAX_DEVICES];  /* GPU time its work was scheduled for */
    uint64_t launches[FAKECUDA_MAX_DEVICES];
    uint32_t mps_mask;      /* bit d: an MPS client on physical device d (its own
                             * fake libcuda sets it when it claims the entry) */
    uint32_t mps_cap_ppm;   /* its active thread percentage, in ppm of the SMs */
    int32_t mps_server_pid; /* the daemon it connected to, which stands for the
                             * MPS server in NVML's compute list; 0 = none */
    /* Checkpoint model (fake_checkpoint.c). ckpt_state is a CUprocessState
     * and the futex word the process's blocked calls wait on. */
    uint32_t ckpt_state;
    uint32_t in_driver;     /* its threads inside a blocking driver call */
    uint64_t checkpointed[FAKECUDA_MAX_DEVICES][FAKECUDA_KIND_COUNT]; /* bytes moved
                             * to host memory by cuCheckpointProcessCheckpoint */
    uint64_t checkpoints, restores; /* cumulative */
};

/* A VMM allocation exported as a POSIX fd, or a legacy IPC handle. */
enum { FAKECUDA_EXPORT_FREE = 0, FAKECUDA_EXPORT_VMM = 1, FAKECUDA_EXPORT_IPC = 2 };
struct fakecuda_export {
    uint32_t kind;          /* FAKECUDA_EXPORT_*; FREE once the exporter released it */
    int32_t pid;            /* exporter (owner of the physical bytes) */
    uint32_t device;        /* physical device */
    uint32_t pad;
    uint64_t size;
    uint64_t ptr;           /* IPC: exporter's device pointer */
    uint64_t generation;    /* bumped on every reuse of the slot */
    uint64_t importers;     /* handles currently imported from it */
    uint64_t imports;       /* cumulative imports */
    uint32_t charge_kind;   /* enum fakecuda_kind its physical bytes count as */
    uint32_t pad2;
    uint64_t orphan_bytes;  /* exporter gone (freed or dead) while imported:
                             * the physical bytes, held by the importers
                             * (pid is then 0); freed with the last import */
    int32_t holds[FAKECUDA_MAX_PROCS]; /* importer handles/opens per proc[] entry */
};

struct fakecuda_state {
    uint64_t magic;         /* FAKECUDA_STATE_MAGIC once initialised */
    uint32_t version;       /* FAKECUDA_STATE_VERSION */
    uint32_t size;          /* sizeof(struct fakecuda_state) */
    uint32_t ndevices;      /* physical devices (FAKECUDA_DEVICES at creation) */
    uint32_t nhooks;        /* FAKECUDA_HOOK_COUNT of the creator */
    uint32_t ncalls;        /* FAKECUDA_CALL_COUNT of the creator */
    uint32_t pad;
    pthread_mutex_t lock;   /* robust, process-shared: proc[] and exports[] */
    uint64_t hook_calls[FAKECUDA_MAX_HOOKS]; /* enum fakecuda_hook */
    uint64_t calls[FAKECUDA_MAX_CALLS];      /* enum fakecuda_call */
    struct fakecuda_device dev[FAKECUDA_MAX_DEVICES];
    struct fakecuda_proc proc[FAKECUDA_MAX_PROCS];
    struct fakecuda_export exports[FAKECUDA_MAX_EXPORTS];
};

/* The mapping a fake library of this process uses (anonymous or file), or
 * NULL before its first call. Exported by the fake libcuda.so.1 and
 * libnvidia-ml.so.1 (for tests that link them or dlsym them). */
struct fakecuda_state *fakecuda_driver_state(void);
struct fakecuda_state *fakecuda_nvml_state(void);

/* ---- reading ------------------------------------------------------------ */

static inline uint64_t fakecuda_load(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline uint64_t fakecuda_hook_calls(const struct fakecuda_state *s, enum fakecuda_hook h)
{
    return fakecuda_load(&s->hook_calls[h]);
}

static inline uint64_t fakecuda_calls(const struct fakecuda_state *s, enum fakecuda_call c)
{
    return fakecuda_load(&s->calls[c]);
}

/* The entry of a (real) pid, or NULL. */
static inline const struct fakecuda_proc *fakecuda_proc_find(const struct fakecuda_state *s, int pid)
{
    for (int i = 0; i < FAKECUDA_MAX_PROCS; i++)
        if (__atomic_load_n(&s->proc[i].pid, __ATOMIC_ACQUIRE) == pid)
            return &s->proc[i];
    return NULL;
}

static inline const char *fakecuda_hook_name(int h)
{
    static const char *const names[] = {
#define CS_CU(base, sym, ...) #sym,
#define CS_NVML(sym, ...) #sym,
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
    };
    return h >= 0 && h < FAKECUDA_HOOK_COUNT ? names[h] : NULL;
}

static inline const char *fakecuda_call_name(int c)
{
    static const char *const names[] = {
#define FAKE_CU(sym) #sym,
#define FAKE_NVML(sym) #sym,
#include "fake_exports.def"
#undef FAKE_CU
#undef FAKE_NVML
    };
    return c >= 0 && c < FAKECUDA_CALL_COUNT ? names[c] : NULL;
}

/* ---- locking (robust, process-shared mutexes inside the mapping) -------- */

static inline void fakecuda_lock(pthread_mutex_t *m)
{
    if (pthread_mutex_lock(m) == EOWNERDEAD)
        pthread_mutex_consistent(m); /* a process died holding it: data is
                                        counters and small records, usable */
}

static inline void fakecuda_unlock(pthread_mutex_t *m)
{
    pthread_mutex_unlock(m);
}

static inline int fakecuda_interval_cmp_(const void *a, const void *b)
{
    uint64_t x = ((const struct fakecuda_interval *)a)->start_ns;
    uint64_t y = ((const struct fakecuda_interval *)b)->start_ns;
    return x < y ? -1 : x > y;
}

/* Busy time of device `dev`'s timeline in [from, to) (CLOCK_MONOTONIC ns):
 * of process `pid`, or of everything (context switches included) when pid
 * is 0. The time covered by at least one interval: MPS clients' intervals
 * overlap, and busy means "some work runs". Reads the recent-interval
 * ring, so only the last FAKECUDA_RING intervals count. 0 if out of memory. */
static inline uint64_t fakecuda_busy_in_window(struct fakecuda_state *s, int dev, int pid,
                                               uint64_t from, uint64_t to)
{
    struct fakecuda_device *D = &s->dev[dev];
    /* The DVFS clock asks this at every launch: a short window holds few
     * intervals, so no allocation of the whole ring unless it needs it
     * (under ASan that allocation alone was 60 us inside an event pair). */
    struct fakecuda_interval few[64];
    struct fakecuda_interval *v = few;
    size_t n = 0;
    fakecuda_lock(&D->lock);
    uint64_t h0 = D->ring_head;
    for (uint64_t k = 0; k < FAKECUDA_RING && k < h0; k++) {
        const struct fakecuda_interval *iv = &D->ring[(h0 - 1 - k) % FAKECUDA_RING];
        n += (!pid || iv->pid == pid) && iv->start_ns < to && iv->end_ns > from;
    }
    if (n > sizeof few / sizeof few[0] &&
        !(v = (struct fakecuda_interval *)malloc(sizeof(*v) * FAKECUDA_RING))) {
        fakecuda_unlock(&D->lock);
        return 0;
    }
    n = 0;
    for (uint64_t k = 0; k < FAKECUDA_RING && k < h0; k++) {
        const struct fakecuda_interval *iv = &D->ring[(h0 - 1 - k) % FAKECUDA_RING];
        if (pid && iv->pid != pid)
            continue;
        uint64_t a = iv->start_ns > from ? iv->start_ns : from;
        uint64_t b = iv->end_ns < to ? iv->end_ns : to;
        if (b > a)
            v[n++] = (struct fakecuda_interval){.start_ns = a, .end_ns = b};
    }
    fakecuda_unlock(&D->lock);
    qsort(v, n, sizeof(*v), fakecuda_interval_cmp_);
    uint64_t sum = 0, a = 0, b = 0;
    for (size_t k = 0; k < n; k++) {
        if (k && v[k].start_ns <= b) {
            if (v[k].end_ns > b)
                b = v[k].end_ns;
            continue;
        }
        sum += b - a;
        a = v[k].start_ns;
        b = v[k].end_ns;
    }
    if (v != few)
        free(v);
    return sum + (b - a);
}

/* ---- creation ----------------------------------------------------------- */

/* "16g", "512M", "1048576", "4GiB": binary suffixes k, m, g, t. 0 if bad. */
static inline uint64_t fakecuda_parse_bytes(const char *s)
{
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return 0;
    unsigned shift = 0;
    switch (tolower((unsigned char)*end)) {
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    case 't': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end)
        return 0;
    if (shift && v > (UINT64_MAX >> shift))
        return 0;
    return (uint64_t)v << shift;
}

/* 32 hex digits, dashes ignored, optional "GPU-" prefix. 0 on success. */
static inline int fakecuda_parse_uuid(const char *s, uint8_t out[16])
{
    if (!strncmp(s, "GPU-", 4))
        s += 4;
    int n = 0;
    for (; *s && n < 32; s++) {
        if (*s == '-')
            continue;
        int c = tolower((unsigned char)*s), v;
        if (c >= '0' && c <= '9')
            v = c - '0';
        else if (c >= 'a' && c <= 'f')
            v = c - 'a' + 10;
        else
            return -1;
        if (n % 2 == 0)
            out[n / 2] = (uint8_t)(v << 4);
        else
            out[n / 2] |= (uint8_t)v;
        n++;
    }
    return n == 32 && !*s ? 0 : -1;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (41 bytes with the NUL). */
static inline void fakecuda_uuid_string(const uint8_t u[16], char out[41])
{
    snprintf(out, 41,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
             u[11], u[12], u[13], u[14], u[15]);
}

/* Default UUID of physical device i: deterministic, distinct first bytes. */
static inline void fakecuda_default_uuid(unsigned i, uint8_t out[16])
{
    uint64_t x = 0xfa4ec0da00000000ULL + i;
    for (int k = 0; k < 2; k++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        memcpy(out + 8 * k, &z, 8);
    }
    out[6] = (uint8_t)((out[6] & 0x0f) | 0x40); /* looks like a v4 UUID */
    out[8] = (uint8_t)((out[8] & 0x3f) | 0x80);
}

static inline void fakecuda_mutex_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

/* Fills a zeroed mapping from FAKECUDA_DEVICES / FAKECUDA_MEM[_<i>] /
 * FAKECUDA_UUID_<i>; publishes the magic last. */
static inline void fakecuda_state_init(struct fakecuda_state *s)
{
    const char *e = getenv("FAKECUDA_DEVICES");
    long n = e && *e ? strtol(e, NULL, 10) : 1;
    if (n < 0)
        n = 0;
    if (n > FAKECUDA_MAX_DEVICES)
        n = FAKECUDA_MAX_DEVICES;
    uint64_t mem = fakecuda_parse_bytes(getenv("FAKECUDA_MEM"));
    e = getenv("FAKECUDA_SMS");
    long sms = e && *e ? strtol(e, NULL, 10) : FAKECUDA_DEFAULT_SMS;
    if (sms < 1 || sms > FAKECUDA_MAX_SMS)
        sms = FAKECUDA_DEFAULT_SMS;
    if (!mem)
        mem = FAKECUDA_DEFAULT_MEM;
    s->version = FAKECUDA_STATE_VERSION;
    s->size = (uint32_t)sizeof(*s);
    s->ndevices = (uint32_t)n;
    s->nhooks = FAKECUDA_HOOK_COUNT;
    s->ncalls = FAKECUDA_CALL_COUNT;
    fakecuda_mutex_init(&s->lock);
    for (unsigned i = 0; i < FAKECUDA_MAX_DEVICES; i++) {
        struct fakecuda_device *d = &s->dev[i];
        char name[32];
        snprintf(name, sizeof(name), "FAKECUDA_MEM_%u", i);
        uint64_t m = fakecuda_parse_bytes(getenv(name));
        d->total = m ? m : mem;
        d->sms = (uint32_t)sms;
        snprintf(name, sizeof(name), "FAKECUDA_UUID_%u", i);
        const char *u = getenv(name);
        if (!u || fakecuda_parse_uuid(u, d->uuid))
            fakecuda_default_uuid(i, d->uuid);
        fakecuda_mutex_init(&d->lock);
    }
    __atomic_store_n(&s->magic, FAKECUDA_STATE_MAGIC, __ATOMIC_RELEASE);
}

/* Maps the state file at `path`, creating and initialising it (from the
 * environment) when it does not exist or is empty. Returns NULL with errno
 * set on failure (EPROTO: a file of another layout version). The first
 * creator's device count, sizes and UUIDs win. */
static inline struct fakecuda_state *fakecuda_state_open(const char *path)
{
    if (!path || !*path) {
        errno = EINVAL;
        return NULL;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return NULL;
    struct fakecuda_state *s = NULL;
    struct stat st;
    int err = 0;
    while (flock(fd, LOCK_EX) && errno == EINTR) {
    }
    if (fstat(fd, &st)) {
        err = errno;
        goto out;
    }
    if (st.st_size == 0 && ftruncate(fd, (off_t)sizeof(*s))) {
        err = errno;
        goto out;
    }
    if (st.st_size != 0 && st.st_size != (off_t)sizeof(*s)) {
        err = EPROTO;
        goto out;
    }
    void *p = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        err = errno;
        goto out;
    }
    s = (struct fakecuda_state *)p;
    if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != FAKECUDA_STATE_MAGIC) {
        memset(s, 0, sizeof(*s));
        fakecuda_state_init(s);
    } else if (s->version != FAKECUDA_STATE_VERSION || s->size != sizeof(*s)) {
        munmap(s, sizeof(*s));
        s = NULL;
        err = EPROTO;
    }
out:
    flock(fd, LOCK_UN);
    close(fd);
    if (!s)
        errno = err;
    return s;
}

/* A fresh anonymous shared state (shared with later fork() children). */
static inline struct fakecuda_state *fakecuda_state_create_anon(void)
{
    void *p = mmap(NULL, sizeof(struct fakecuda_state), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    fakecuda_state_init((struct fakecuda_state *)p);
    return (struct fakecuda_state *)p;
}

static inline void fakecuda_state_close(struct fakecuda_state *s)
{
    if (s)
        munmap(s, sizeof(*s));
}

#endif
