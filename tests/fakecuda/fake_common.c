/*
 * TEST TOOL (tests/fakecuda), never shipped: the part of the fake CUDA
 * driver and fake NVML that both libraries compile in: configuration from
 * the environment, the shared state mapping, call counters and injected
 * failures, memory accounting in the process table, the GPU timeline and
 * its power / DVFS model.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake_internal.h"

struct fc_config fc_cfg;
struct fakecuda_state *fc_S;
uint32_t fc_mps_mask;
uint32_t fc_mps_cap_ppm;
int32_t fc_mps_server_pid;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Which fake library this copy of the file is compiled into. */
#ifdef FAKECUDA_NVML
static const enum fc_lib g_lib = FC_LIB_NVML;
#else
static const enum fc_lib g_lib = FC_LIB_DRIVER;
#endif
static int g_init_rc;

static uint64_t env_u64(const char *name, uint64_t def, int bytes)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    if (bytes) {
        if (!strcmp(s, "0"))
            return 0;
        uint64_t v = fakecuda_parse_bytes(s);
        return v ? v : def;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    return errno || *end ? def : v;
}

static void read_config(void)
{
    fc_cfg.init_cost_us = env_u64("FAKECUDA_INIT_COST_US", 0, 0);
    fc_cfg.ctx_cost_us = env_u64("FAKECUDA_CTX_COST_US", 0, 0);
    fc_cfg.ctx_bytes = env_u64("FAKECUDA_CTX_BYTES", 0, 1);
    fc_cfg.ctx_extra_bytes = env_u64("FAKECUDA_CTX_EXTRA_BYTES", 0, 1);
    /* What one MPS client context takes: not measured on the H200 yet, so
     * by default the same as an ordinary context. */
    fc_cfg.mps_ctx_bytes = env_u64("FAKECUDA_MPS_CTX_BYTES", fc_cfg.ctx_bytes, 1);
    fc_cfg.ns_per_block = env_u64("FAKECUDA_NS_PER_BLOCK", 1000, 0);
    fc_cfg.memset_ns_per_mib = env_u64("FAKECUDA_MEMSET_NS_PER_MIB", 1000, 0);
    fc_cfg.graph_ns = env_u64("FAKECUDA_GRAPH_US", 100, 0) * 1000;
    fc_cfg.util_window_ns = env_u64("FAKECUDA_UTIL_WINDOW_MS", 1000, 0) * 1000000ULL;
    if (!fc_cfg.util_window_ns)
        fc_cfg.util_window_ns = 1000000000ULL;
    fc_cfg.ctx_switch_ns = env_u64("FAKECUDA_CTX_SWITCH_US", 0, 0) * 1000ULL;
    fc_cfg.submit_ns = env_u64("FAKECUDA_SUBMIT_US", 0, 0) * 1000ULL;
    fc_cfg.timeslice_ns = env_u64("FAKECUDA_TIMESLICE_US", 0, 0) * 1000ULL;
    fc_cfg.power_busy_w = env_u64("FAKECUDA_POWER_BUSY_W", 0, 0);
    fc_cfg.power_idle_w = env_u64("FAKECUDA_POWER_IDLE_W", 100, 0);
    fc_cfg.power_cap_w = env_u64("FAKECUDA_POWER_CAP_W", 700, 0);
    fc_cfg.dvfs_window_ns = env_u64("FAKECUDA_DVFS_WINDOW_MS", 200, 0) * 1000000ULL;
    if (!fc_cfg.dvfs_window_ns)
        fc_cfg.dvfs_window_ns = 200000000ULL;
    const char *s = getenv("FAKECUDA_NVML_PID_OFFSET");
    fc_cfg.nvml_pid_offset = s ? strtol(s, NULL, 10) : 0;
    fc_cfg.nvml_extra_procs = (unsigned)env_u64("FAKECUDA_NVML_EXTRA_PROCS", 0, 0);
    fc_cfg.nvml_sample_ns = env_u64("FAKECUDA_NVML_SAMPLE_MS", 0, 0) * 1000000ULL;
    fc_cfg.driver_version = (int)env_u64("FAKECUDA_DRIVER_VERSION", 13000, 0);
    s = getenv("FAKECUDA_NVML_DRIVER_VERSION");
    snprintf(fc_cfg.nvml_driver_version, sizeof(fc_cfg.nvml_driver_version), "%s",
             s && *s ? s : "580.159.04");
    for (int c = 0; c < FAKECUDA_CALL_COUNT; c++) {
        char name[128];
        const char *cn = fakecuda_call_name(c);
        snprintf(name, sizeof(name), "FAKECUDA_FAIL_%s", cn);
        s = getenv(name);
        char *end = NULL;
        fc_cfg.fail[c] = s && *s ? (int)strtol(s, &end, 0) : 0;
        fc_cfg.fail_times[c] = end && *end == ':' ? (unsigned)strtoul(end + 1, NULL, 0) : 0;
        fc_cfg.hook_of_call[c] = -1;
        for (int h = 0; h < FAKECUDA_HOOK_COUNT; h++)
            if (!strcmp(cn, fakecuda_hook_name(h)))
                fc_cfg.hook_of_call[c] = h;
    }
}

/* Without FAKECUDA_STATE, the two fake libraries of one process share one
 * anonymous mapping: ask the other one (if loaded) for its mapping. */
static struct fakecuda_state *peer_state(void)
{
    const char *lib = g_lib == FC_LIB_DRIVER ? "libnvidia-ml.so.1" : "libcuda.so.1";
    const char *fn = g_lib == FC_LIB_DRIVER ? "fakecuda_nvml_state" : "fakecuda_driver_state";
    void *h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return NULL;
    struct fakecuda_state *(*get)(void) = (struct fakecuda_state * (*)(void)) dlsym(h, fn);
    struct fakecuda_state *s = get ? get() : NULL;
    dlclose(h);
    return s;
}

static void init_once(void)
{
    read_config();
    const char *path = getenv("FAKECUDA_STATE");
    struct fakecuda_state *s;
    if (path && *path) {
        s = fakecuda_state_open(path);
        if (!s)
            fprintf(stderr, "fakecuda: cannot use FAKECUDA_STATE=%s: %s\n", path,
                    strerror(errno));
    } else {
        s = peer_state();
        if (!s)
            s = fakecuda_state_create_anon();
        if (!s)
            fprintf(stderr, "fakecuda: cannot map the device state: %s\n", strerror(errno));
    }
    if (s && (s->nhooks != FAKECUDA_HOOK_COUNT || s->ncalls != FAKECUDA_CALL_COUNT)) {
        fprintf(stderr, "fakecuda: state %s was created by another build of the fake\n",
                path ? path : "(anonymous)");
        s = NULL;
    }
    __atomic_store_n(&fc_S, s, __ATOMIC_RELEASE);
    g_init_rc = s ? 0 : -1;
}

int fc_common_init(enum fc_lib lib)
{
    (void)lib; /* fixed at compile time: g_lib */
    pthread_once(&g_once, init_once);
    return g_init_rc;
}

struct fakecuda_state *fc_state_peek(void)
{
    return __atomic_load_n(&fc_S, __ATOMIC_ACQUIRE);
}

int fc_count(enum fakecuda_call c)
{
    __atomic_fetch_add(&fc_S->calls[c], 1, __ATOMIC_RELAXED);
    int h = fc_cfg.hook_of_call[c];
    if (h >= 0)
        __atomic_fetch_add(&fc_S->hook_calls[h], 1, __ATOMIC_RELAXED);
    if (fc_cfg.fail[c] && fc_cfg.fail_times[c] &&
        __atomic_fetch_add(&fc_cfg.fail_seen[c], 1, __ATOMIC_RELAXED) >= fc_cfg.fail_times[c])
        return 0;
    return fc_cfg.fail[c];
}

uint64_t fc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* A synchronisation on the real driver returns within microseconds of the
 * work's end (it spins or yields by default); a sleep with the thread's
 * timer slack (50 us by default) woke every sync that much late, time in
 * which a tenant taking turns had nothing queued in its own window. */
void fc_sleep_until(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack > 1)
        prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    if (slack > 1)
        prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
}

/* ---- process table ------------------------------------------------------ */

static int g_slot = -1;  /* index of this process's entry */
static int g_slot_pid;   /* pid that claimed g_slot (fork resets by mismatch) */

int fc_pid_alive(int pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

static void sub64(uint64_t *p, uint64_t v)
{
    if (v)
        __atomic_fetch_sub(p, v, __ATOMIC_ACQ_REL);
}

/* ---- the control file: every exported fd is an open of it ---------------
 * As the real driver's exports are each a new open of /dev/nvidiactl (one
 * inode for every export of every allocation), ours are each a new open
 * file description of one file per state (FAKECUDA_STATE + ".ctl"; a
 * memfd of the process without it). Which export a description names is
 * its file offset (SCM_RIGHTS carries it: one description), a trick of the
 * fake that the library must not use. Each description holds an OFD read
 * lock on byte `slot` of the file, which the kernel drops when the last fd
 * of it closes: an exported fd keeps the memory alive, as on the driver. */

/* g_ctl_mu guards both descriptors, set once per process (a fork child
 * shares them: the memfd is the same file, the probe still never locks). */
static pthread_mutex_t g_ctl_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_ctl_anon = -1; /* the memfd without FAKECUDA_STATE */
static int g_ctl_probe = -1; /* our description that never locks: asks */

static int ctl_open_new(void)
{
    const char *state = getenv("FAKECUDA_STATE");
    char path[4200];
    if (state && *state) {
        snprintf(path, sizeof path, "%s.ctl", state);
        return open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    }
    pthread_mutex_lock(&g_ctl_mu);
    if (g_ctl_anon < 0)
        g_ctl_anon = memfd_create("fakecuda-nvidiactl", MFD_CLOEXEC);
    int anon = g_ctl_anon;
    pthread_mutex_unlock(&g_ctl_mu);
    if (anon < 0)
        return -1;
    snprintf(path, sizeof path, "/proc/self/fd/%d", anon);
    return open(path, O_RDWR | O_CLOEXEC); /* a new description of the memfd */
}

static int ctl_probe(void)
{
    pthread_mutex_lock(&g_ctl_mu);
    int fd = g_ctl_probe;
    pthread_mutex_unlock(&g_ctl_mu);
    if (fd >= 0)
        return fd;
    fd = ctl_open_new();
    pthread_mutex_lock(&g_ctl_mu);
    if (g_ctl_probe < 0)
        g_ctl_probe = fd;
    else if (fd >= 0)
        close(fd);
    fd = g_ctl_probe;
    pthread_mutex_unlock(&g_ctl_mu);
    return fd;
}

int fc_ctl_export(int slot, uint64_t gen)
{
    int fd = ctl_open_new();
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1};
    if (fd < 0 || lseek(fd, (off_t)(gen << FC_CTL_SLOT_BITS | (uint64_t)slot), SEEK_SET) < 0 ||
        fcntl(fd, F_OFD_SETLK, &fl)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int fc_ctl_which(int fd, int *slot, uint64_t *gen)
{
    struct stat a, b;
    int probe = ctl_probe();
    if (fd < 0 || probe < 0 || fstat(fd, &a) || fstat(probe, &b) || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino)
        return -1;
    off_t off = lseek(fd, 0, SEEK_CUR);
    if (off < 0)
        return -1;
    *slot = (int)((uint64_t)off & ((1u << FC_CTL_SLOT_BITS) - 1));
    *gen = (uint64_t)off >> FC_CTL_SLOT_BITS;
    return 0;
}

/* Whether some description exported for slot is still open anywhere. */
static int ctl_slot_open(int slot)
{
    int probe = ctl_probe();
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1};
    if (probe < 0 || fcntl(probe, F_OFD_GETLK, &fl))
        return 0;
    return fl.l_type != F_UNLCK;
}

/* ---- reference counting of shared physical memory ------------------------
 * As the driver does: memory exported (VMM shareable handle, legacy IPC)
 * stays on the device until the last reference in any process goes. While
 * its exporter holds it, its bytes are charged to the exporter's entry;
 * when the exporter lets go (or dies) with imports alive, the bytes stay in
 * the device's `used` and move to the export (orphan_bytes, pid 0) until
 * the last importer lets go or dies. Caller holds fc_S->lock. */

static void export_free_locked(struct fakecuda_export *e)
{
    if (e->orphan_bytes) {
        struct fakecuda_device *D = &fc_S->dev[e->device];
        sub64(&D->used_by_kind[e->charge_kind], e->orphan_bytes);
        sub64(&D->used, e->orphan_bytes);
        __atomic_fetch_add(&D->frees, 1, __ATOMIC_RELAXED);
        e->orphan_bytes = 0;
    }
    memset(e->holds, 0, sizeof(e->holds));
    __atomic_store_n(&e->kind, FAKECUDA_EXPORT_FREE, __ATOMIC_RELEASE);
}

/* The exporter's entry p lets go of e: keeps the bytes on the device if
 * imports remain (returns 1; p's charge drops without the device's). */
static int export_owner_gone_locked(struct fakecuda_export *e, struct fakecuda_proc *p)
{
    if (!e->importers && !ctl_slot_open((int)(e - fc_S->exports))) {
        export_free_locked(e);
        return 0;
    }
    int d = (int)e->device;
    sub64(&p->used[d], e->size);
    sub64(&p->kind_used[d][e->charge_kind], e->size);
    e->orphan_bytes = e->size;
    e->pid = 0;
    return 1;
}

static void export_unhold_locked(struct fakecuda_export *e, int proc_idx, int n)
{
    if (n > e->holds[proc_idx])
        n = e->holds[proc_idx];
    e->holds[proc_idx] -= n;
    e->importers = e->importers > (uint64_t)n ? e->importers - (uint64_t)n : 0;
    if (!e->importers && !e->pid && !ctl_slot_open((int)(e - fc_S->exports)))
        export_free_locked(e);
}

/* A process ends: its imports go, and what it exported moves to its
 * importers or is freed. */
static void exports_drop_proc_locked(struct fakecuda_proc *p)
{
    int idx = (int)(p - fc_S->proc);
    for (int i = 0; i < FAKECUDA_MAX_EXPORTS; i++) {
        struct fakecuda_export *e = &fc_S->exports[i];
        if (e->kind == FAKECUDA_EXPORT_FREE)
            continue;
        if (e->holds[idx])
            export_unhold_locked(e, idx, e->holds[idx]);
        if (e->kind != FAKECUDA_EXPORT_FREE && e->pid == p->pid)
            export_owner_gone_locked(e, p);
    }
}

/* Uncharges everything of entry p and frees it. Caller holds fc_S->lock. */
static void proc_drop_locked(struct fakecuda_proc *p)
{
    exports_drop_proc_locked(p);
    for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++) {
        struct fakecuda_device *D = &fc_S->dev[d];
        for (int k = 0; k < FAKECUDA_KIND_COUNT; k++)
            sub64(&D->used_by_kind[k], __atomic_exchange_n(&p->kind_used[d][k], 0, __ATOMIC_ACQ_REL));
        uint64_t u = __atomic_exchange_n(&p->used[d], 0, __ATOMIC_ACQ_REL);
        if (u) {
            sub64(&D->used, u);
            __atomic_fetch_add(&D->frees, 1, __ATOMIC_RELAXED);
        }
        sub64(&D->imported_bytes, __atomic_exchange_n(&p->imported[d], 0, __ATOMIC_ACQ_REL));
    }
    memset(p->busy_ns, 0, sizeof(p->busy_ns));
    memset(p->launches, 0, sizeof(p->launches));
    __atomic_store_n(&p->ctx_mask, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
}

static void reap_locked(int self)
{
    for (int i = 0; i < FAKECUDA_MAX_PROCS; i++) {
        struct fakecuda_proc *p = &fc_S->proc[i];
        if (p->pid && p->pid != self && !fc_pid_alive(p->pid))
            proc_drop_locked(p);
    }
    /* Memory only exported fds kept: freed once the last one closed. */
    for (int i = 0; i < FAKECUDA_MAX_EXPORTS; i++) {
        struct fakecuda_export *e = &fc_S->exports[i];
        if (e->kind == FAKECUDA_EXPORT_VMM && !e->pid && !e->importers && !ctl_slot_open(i))
            export_free_locked(e);
    }
}

void fc_reap_dead(void)
{
    fakecuda_lock(&fc_S->lock);
    reap_locked(getpid());
    fakecuda_unlock(&fc_S->lock);
}

struct fakecuda_proc *fc_proc_peek(void)
{
    int slot = __atomic_load_n(&g_slot, __ATOMIC_ACQUIRE);
    if (!fc_S || slot < 0 || __atomic_load_n(&g_slot_pid, __ATOMIC_ACQUIRE) != getpid() ||
        __atomic_load_n(&fc_S->proc[slot].pid, __ATOMIC_ACQUIRE) != getpid())
        return NULL;
    return &fc_S->proc[slot];
}

struct fakecuda_proc *fc_proc_self(void)
{
    int pid = getpid();
    int slot = __atomic_load_n(&g_slot, __ATOMIC_ACQUIRE);
    if (slot >= 0 && __atomic_load_n(&g_slot_pid, __ATOMIC_ACQUIRE) == pid &&
        fc_S->proc[slot].pid == pid)
        return &fc_S->proc[slot];
    fakecuda_lock(&fc_S->lock);
    reap_locked(pid);
    struct fakecuda_proc *p = NULL;
    for (int i = 0; i < FAKECUDA_MAX_PROCS && !p; i++)
        if (fc_S->proc[i].pid == pid) {
            /* Ours if we claimed it (another thread raced us); a stale
             * entry of a dead process with a reused pid otherwise. */
            if (slot == i && g_slot_pid == pid)
                p = &fc_S->proc[i];
            else
                proc_drop_locked(&fc_S->proc[i]);
        }
    for (int i = 0; i < FAKECUDA_MAX_PROCS && !p; i++)
        if (!fc_S->proc[i].pid) {
            p = &fc_S->proc[i];
            memset(p, 0, sizeof(*p));
            p->mps_mask = __atomic_load_n(&fc_mps_mask, __ATOMIC_RELAXED);
            p->mps_cap_ppm = __atomic_load_n(&fc_mps_cap_ppm, __ATOMIC_RELAXED);
            p->mps_server_pid = __atomic_load_n(&fc_mps_server_pid, __ATOMIC_RELAXED);
            __atomic_store_n(&p->pid, pid, __ATOMIC_RELEASE);
            __atomic_store_n(&g_slot_pid, pid, __ATOMIC_RELEASE);
            __atomic_store_n(&g_slot, i, __ATOMIC_RELEASE);
        }
    fakecuda_unlock(&fc_S->lock);
    if (!p)
        fprintf(stderr, "fakecuda: process table full (%d entries)\n", FAKECUDA_MAX_PROCS);
    return p;
}

void fc_proc_ctx(int dev, int on)
{
    struct fakecuda_proc *p = fc_proc_self();
    if (!p)
        return;
    if (on) {
        __atomic_fetch_or(&p->ctx_mask, 1u << dev, __ATOMIC_ACQ_REL);
        return;
    }
    uint32_t left = __atomic_and_fetch(&p->ctx_mask, ~(1u << dev), __ATOMIC_ACQ_REL);
    if (left)
        return;
    /* No context left: the entry goes, unless memory is still charged to
     * (or imported by) it, which later releases must find. */
    for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++)
        if (__atomic_load_n(&p->used[d], __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&p->imported[d], __ATOMIC_ACQUIRE))
            return;
    fc_proc_drop_self();
}

void fc_proc_drop_self(void)
{
    if (!fc_S)
        return;
    int pid = getpid();
    fakecuda_lock(&fc_S->lock);
    for (int i = 0; i < FAKECUDA_MAX_PROCS; i++)
        if (fc_S->proc[i].pid == pid)
            proc_drop_locked(&fc_S->proc[i]);
    __atomic_store_n(&g_slot, -1, __ATOMIC_RELEASE);
    fakecuda_unlock(&fc_S->lock);
}

static void atomic_max(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    }
}

int fc_charge(int dev, uint64_t bytes, enum fakecuda_kind kind)
{
    if (!bytes)
        return 0;
    struct fakecuda_device *D = &fc_S->dev[dev];
    struct fakecuda_proc *p = fc_proc_self();
    if (!p)
        return -1;
    uint64_t cur = __atomic_load_n(&D->used, __ATOMIC_ACQUIRE), next;
    do {
        next = cur + bytes;
        if (next < cur || next > D->total) {
            __atomic_fetch_add(&D->failed_allocs, 1, __ATOMIC_RELAXED);
            return -1;
        }
    } while (!__atomic_compare_exchange_n(&D->used, &cur, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    atomic_max(&D->peak_used, next);
    __atomic_fetch_add(&D->used_by_kind[kind], bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&D->allocs, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&p->used[dev], bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&p->kind_used[dev][kind], bytes, __ATOMIC_RELAXED);
    return 0;
}

void fc_uncharge(int dev, uint64_t bytes, enum fakecuda_kind kind)
{
    if (!bytes)
        return;
    struct fakecuda_device *D = &fc_S->dev[dev];
    int pid = getpid();
    int slot = g_slot;
    /* Only while our entry still exists: a dropped entry was uncharged. */
    if (slot < 0 || g_slot_pid != pid || fc_S->proc[slot].pid != pid)
        return;
    struct fakecuda_proc *p = &fc_S->proc[slot];
    sub64(&p->used[dev], bytes);
    sub64(&p->kind_used[dev][kind], bytes);
    sub64(&D->used_by_kind[kind], bytes);
    sub64(&D->used, bytes);
    __atomic_fetch_add(&D->frees, 1, __ATOMIC_RELAXED);
}

void fc_import_add(int dev, int64_t bytes)
{
    struct fakecuda_proc *p = fc_proc_self();
    if (!p || !bytes)
        return;
    struct fakecuda_device *D = &fc_S->dev[dev];
    if (bytes > 0) {
        __atomic_fetch_add(&p->imported[dev], (uint64_t)bytes, __ATOMIC_RELAXED);
        __atomic_fetch_add(&D->imported_bytes, (uint64_t)bytes, __ATOMIC_RELAXED);
        __atomic_fetch_add(&D->imports, 1, __ATOMIC_RELAXED);
    } else {
        sub64(&p->imported[dev], (uint64_t)-bytes);
        sub64(&D->imported_bytes, (uint64_t)-bytes);
    }
}

/* ---- export slots ------------------------------------------------------- */

int fc_export_new(int kind, int dev, uint64_t size, uint64_t ptr, uint64_t *gen)
{
    int slot = -1;
    fakecuda_lock(&fc_S->lock);
    for (int i = 0; i < FAKECUDA_MAX_EXPORTS; i++) {
        struct fakecuda_export *e = &fc_S->exports[i];
        if (e->kind == FAKECUDA_EXPORT_FREE) {
            e->pid = getpid();
            e->device = (uint32_t)dev;
            e->size = size;
            e->ptr = ptr;
            e->importers = 0;
            e->imports = 0;
            e->orphan_bytes = 0;
            e->charge_kind = kind == FAKECUDA_EXPORT_VMM ? FAKECUDA_KIND_VMM : FAKECUDA_KIND_ALLOC;
            memset(e->holds, 0, sizeof(e->holds));
            *gen = ++e->generation;
            __atomic_store_n(&e->kind, (uint32_t)kind, __ATOMIC_RELEASE);
            slot = i;
            break;
        }
    }
    fakecuda_unlock(&fc_S->lock);
    return slot;
}

int fc_export_owner_gone(int slot, uint64_t gen)
{
    if (slot < 0 || slot >= FAKECUDA_MAX_EXPORTS)
        return 0;
    struct fakecuda_proc *p = fc_proc_self();
    int kept = 0;
    fakecuda_lock(&fc_S->lock);
    struct fakecuda_export *e = &fc_S->exports[slot];
    if (p && e->kind != FAKECUDA_EXPORT_FREE && e->generation == gen && e->pid == getpid())
        kept = export_owner_gone_locked(e, p);
    fakecuda_unlock(&fc_S->lock);
    return kept;
}

int fc_export_get(int slot, uint64_t gen, struct fakecuda_export *out)
{
    if (slot < 0 || slot >= FAKECUDA_MAX_EXPORTS)
        return -1;
    int rc = -1;
    fakecuda_lock(&fc_S->lock);
    reap_locked(getpid());
    struct fakecuda_export *e = &fc_S->exports[slot];
    if (e->kind != FAKECUDA_EXPORT_FREE && e->generation == gen) {
        *out = *e;
        rc = 0;
    }
    fakecuda_unlock(&fc_S->lock);
    return rc;
}

void fc_export_importers(int slot, uint64_t gen, int delta)
{
    if (slot < 0 || slot >= FAKECUDA_MAX_EXPORTS)
        return;
    struct fakecuda_proc *p = fc_proc_self();
    if (!p)
        return;
    int idx = (int)(p - fc_S->proc);
    fakecuda_lock(&fc_S->lock);
    struct fakecuda_export *e = &fc_S->exports[slot];
    if (e->kind != FAKECUDA_EXPORT_FREE && e->generation == gen) {
        if (delta > 0) {
            e->importers++;
            e->imports++;
            e->holds[idx]++;
        } else {
            export_unhold_locked(e, idx, 1);
        }
    }
    fakecuda_unlock(&fc_S->lock);
}

/* ---- timeline ------------------------------------------------------------
 * One timeline per physical device, shared by every process (D->lock).
 *
 * Time-sliced work (ordinary processes) forms one queue: it starts at
 * max(now, stream tail, busy_until_ns) and holds the whole device.
 *
 * MPS clients' work runs in the MPS server's one context (last_owner
 * FAKECUDA_OWNER_MPS, since mps_from_ns): each piece holds only the share
 * of the SMs its grid occupies (w = min(occupancy, the client's thread
 * percentage)) and must get occupancy x duration of SM time, so pieces of
 * any clients run side by side while their shares fit and a newcomer that
 * finds less free gets what is left and stretches. Pieces are placed
 * first come, first served on the capacity profile seg[] and never slow
 * what is already placed: every time handed out (stream tails, events)
 * stays true. A piece starts at max(now, stream tail, mps_from_ns); its
 * ring interval runs from the first moment it gets SMs to its end.
 *
 * Switching the device between two owners (ordinary processes, the MPS
 * server) costs FAKECUDA_CTX_SWITCH_US of device time after the previous
 * owner's work: busy for NVML's device utilisation, nobody's work (an
 * interval of pid -1). Clients among themselves pay nothing. */

/* Appends an interval to the ring, merged with the last one when that is
 * the same pid's and ends where this starts (pid -1 is never merged). */
void fc_ring_add_locked(struct fakecuda_device *D, uint64_t start, uint64_t end, int pid)
{
    uint64_t h = D->ring_head;
    struct fakecuda_interval *last = h ? &D->ring[(h - 1) % FAKECUDA_RING] : NULL;
    if (pid != -1 && last && last->pid == pid && last->end_ns == start) {
        last->end_ns = end;
        return;
    }
    struct fakecuda_interval *iv = &D->ring[h % FAKECUDA_RING];
    iv->start_ns = start;
    iv->end_ns = end;
    iv->pid = pid;
    __atomic_store_n(&D->ring_head, h + 1, __ATOMIC_RELEASE);
}

/* Work of `owner` ready at t gets the device after all queued work and,
 * when the device changes owner, after the switch (which it appends). */
static uint64_t take_turn_locked(struct fakecuda_device *D, int owner, uint64_t t)
{
    uint64_t busy = D->busy_until_ns, sw = fc_cfg.ctx_switch_ns;
    if (t < busy)
        t = busy;
    if (sw && D->last_owner && D->last_owner != owner && t < busy + sw) {
        fc_ring_add_locked(D, t, busy + sw, -1);
        t = busy + sw;
    }
    return t;
}

/* Where MPS work ready at t could start, without placing anything. */
static uint64_t mps_start_locked(const struct fakecuda_device *D, uint64_t t)
{
    if (D->last_owner == FAKECUDA_OWNER_MPS)
        return t > D->mps_from_ns ? t : D->mps_from_ns;
    if (!D->last_owner)
        return t;
    uint64_t busy = D->busy_until_ns, sw = fc_cfg.ctx_switch_ns;
    if (t < busy)
        t = busy;
    return sw && t < busy + sw ? busy + sw : t;
}

/* ---- the MPS capacity profile (caller holds D->lock) -------------------- */

/* End of segment i (i = -1: the idle stretch before the first breakpoint). */
static uint64_t seg_end(const struct fakecuda_device *D, int i)
{
    return i + 1 < (int)D->nseg ? D->seg[i + 1].t : UINT64_MAX;
}

static uint32_t seg_used(const struct fakecuda_device *D, int i)
{
    return i < 0 ? 0 : D->seg[i].used_ppm;
}

/* The segment holding t: the last breakpoint <= t, or -1 before them all. */
static int seg_find(const struct fakecuda_device *D, uint64_t t)
{
    int lo = 0, hi = (int)D->nseg; /* first breakpoint > t is in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (D->seg[mid].t <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

/* Forgets the segments that ended by `now`. */
static void prof_prune(struct fakecuda_device *D, uint64_t now)
{
    uint32_t k = 0;
    while (k + 1 < D->nseg && D->seg[k + 1].t <= now)
        k++;
    if (k) {
        memmove(D->seg, D->seg + k, (D->nseg - k) * sizeof(D->seg[0]));
        D->nseg -= k;
    }
}

/* Frees one breakpoint when the profile is full: merges the neighbours
 * (never the idle tail) whose merge reserves the least unused capacity,
 * at the higher of their two shares. Work already placed keeps its times;
 * later work only finds less room (never more than the device has). */
static void prof_coarsen(struct fakecuda_device *D)
{
    int best = -1;
    unsigned __int128 best_cost = 0;
    for (int i = 0; i + 2 < (int)D->nseg; i++) {
        uint32_t a = D->seg[i].used_ppm, b = D->seg[i + 1].used_ppm;
        int low = a < b ? i : i + 1;
        unsigned __int128 cost = (unsigned __int128)(a < b ? b - a : a - b) * (seg_end(D, low) - D->seg[low].t);
        if (best < 0 || cost < best_cost) {
            best = i;
            best_cost = cost;
        }
    }
    if (best < 0)
        return;
    if (D->seg[best + 1].used_ppm > D->seg[best].used_ppm)
        D->seg[best].used_ppm = D->seg[best + 1].used_ppm;
    memmove(&D->seg[best + 1], &D->seg[best + 2], (D->nseg - best - 2) * sizeof(D->seg[0]));
    D->nseg--;
}

/* Makes t a breakpoint (room ensured by the caller); returns its index. */
static int prof_split(struct fakecuda_device *D, uint64_t t)
{
    int i = seg_find(D, t);
    if (i >= 0 && D->seg[i].t == t)
        return i;
    uint32_t used = seg_used(D, i);
    memmove(&D->seg[i + 2], &D->seg[i + 1], (D->nseg - (uint32_t)(i + 1)) * sizeof(D->seg[0]));
    D->seg[i + 1] = (struct fakecuda_capseg){.t = t, .used_ppm = used};
    D->nseg++;
    return i + 1;
}

/* Joins neighbours that hold the same share. */
static void prof_merge(struct fakecuda_device *D)
{
    uint32_t j = 0;
    for (uint32_t i = 0; i < D->nseg; i++)
        if (!j || D->seg[i].used_ppm != D->seg[j - 1].used_ppm)
            D->seg[j++] = D->seg[i];
    D->nseg = j;
}

/* Placing `area` ppm x ns at up to `w` ppm from s: the first moment it
 * gets SMs, its end, and how much of that was idle device time before. */
struct fit {
    uint64_t first, end, fresh;
};

static struct fit prof_fit(const struct fakecuda_device *D, uint64_t s, uint32_t w, unsigned __int128 area)
{
    struct fit f = {0, 0, 0};
    uint64_t t = s;
    for (int i = seg_find(D, s);; i++) {
        uint64_t e = seg_end(D, i);
        uint32_t used = seg_used(D, i);
        uint32_t r = FC_PPM - used < w ? FC_PPM - used : w;
        if (r) {
            if (!f.first)
                f.first = t;
            unsigned __int128 room = e == UINT64_MAX ? area : (unsigned __int128)r * (e - t);
            if (area <= room) {
                f.end = t + (uint64_t)((area + r - 1) / r);
                if (!used)
                    f.fresh += f.end - t;
                return f;
            }
            area -= room;
            if (!used)
                f.fresh += e - t;
        }
        t = e;
    }
}

/* Takes min(w, what is free) of every segment in [first, end). */
static void prof_take(struct fakecuda_device *D, const struct fit *f, uint32_t w)
{
    int a = prof_split(D, f->first);
    int b = prof_split(D, f->end);
    for (int i = a; i < b; i++) {
        uint32_t r = FC_PPM - D->seg[i].used_ppm;
        D->seg[i].used_ppm += r < w ? r : w;
    }
    prof_merge(D);
}

/* ---- scheduling ----------------------------------------------------------- */

/* MPS client work: [*first, end) on the profile; returns end. */
static uint64_t schedule_mps_locked(struct fakecuda_device *D, int pid, uint64_t now, uint64_t ready,
                                    const struct fc_work *w, uint64_t *first, uint64_t *fresh)
{
    uint64_t start;
    if (D->last_owner == FAKECUDA_OWNER_MPS) {
        start = ready > D->mps_from_ns ? ready : D->mps_from_ns;
    } else { /* the server's turn begins: a new profile */
        start = take_turn_locked(D, FAKECUDA_OWNER_MPS, ready);
        D->last_owner = FAKECUDA_OWNER_MPS;
        D->mps_from_ns = start;
        D->nseg = 0;
    }
    prof_prune(D, now);
    while (D->nseg + 2 > FAKECUDA_CAPSEGS)
        prof_coarsen(D);
    uint32_t cap = __atomic_load_n(&fc_mps_cap_ppm, __ATOMIC_RELAXED);
    uint32_t occ = w->occ_ppm ? w->occ_ppm : FC_PPM;
    uint32_t width = cap && cap < occ ? cap : occ;
    struct fit f = prof_fit(D, start, width, (unsigned __int128)occ * w->dur);
    prof_take(D, &f, width);
    fc_ring_add_locked(D, f.first, f.end, pid);
    if (f.end > D->busy_until_ns)
        __atomic_store_n(&D->busy_until_ns, f.end, __ATOMIC_RELEASE);
    *first = f.first;
    *fresh = f.fresh;
    return f.end;
}

uint64_t fc_schedule(int dev, const struct fc_work *w)
{
    struct fakecuda_device *D = &fc_S->dev[dev];
    int pid = getpid();
    int mps = (__atomic_load_n(&fc_mps_mask, __ATOMIC_RELAXED) >> dev) & 1u;
    /* Work reaches the device fc_cfg.submit_ns after it is submitted. */
    uint64_t now = fc_now_ns() + fc_cfg.submit_ns;
    uint64_t ready = w->not_before > now ? w->not_before : now;
    uint64_t start = ready, end, mine = w->dur, fresh = w->dur;
    if (fc_slice_on(dev)) { /* timed later, as the device runs it */
        if (w->launch) {
            __atomic_fetch_add(&D->launches, 1, __ATOMIC_RELAXED);
            struct fakecuda_proc *p = fc_proc_self();
            if (p)
                __atomic_fetch_add(&p->launches[dev], 1, __ATOMIC_RELAXED);
        }
        return fc_slice_submit(dev, pid, w->dur);
    }
    fakecuda_lock(&D->lock);
    if (!w->dur) {
        end = mps ? mps_start_locked(D, ready) : ready > D->busy_until_ns ? ready : D->busy_until_ns;
    } else if (mps) {
        end = schedule_mps_locked(D, pid, now, ready, w, &start, &fresh);
        mine = end - start;
    } else {
        start = take_turn_locked(D, pid, ready);
        end = start + w->dur;
        D->last_owner = pid;
        __atomic_store_n(&D->busy_until_ns, end, __ATOMIC_RELEASE);
        fc_ring_add_locked(D, start, end, pid);
    }
    fakecuda_unlock(&D->lock);
    if (w->launch)
        __atomic_fetch_add(&D->launches, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&D->busy_ns, fresh, __ATOMIC_RELAXED);
    struct fakecuda_proc *p = fc_proc_self();
    if (p) {
        __atomic_fetch_add(&p->busy_ns[dev], mine, __ATOMIC_RELAXED);
        if (w->launch)
            __atomic_fetch_add(&p->launches[dev], 1, __ATOMIC_RELAXED);
    }
    return end;
}

uint64_t fc_event_ns(int dev, uint64_t tail, int timeslice)
{
    struct fakecuda_device *D = &fc_S->dev[dev];
    uint64_t now = fc_now_ns() + fc_cfg.submit_ns;
    uint64_t t = tail > now ? tail : now;
    fakecuda_lock(&D->lock);
    if ((__atomic_load_n(&fc_mps_mask, __ATOMIC_RELAXED) >> dev) & 1u)
        t = mps_start_locked(D, t);
    else if (!timeslice && D->busy_until_ns > t)
        t = D->busy_until_ns;
    fakecuda_unlock(&D->lock);
    return t;
}

uint64_t fc_busy_in_window(int dev, int pid, uint64_t from, uint64_t to)
{
    if (fc_slice_on(dev)) { /* the timeline is written as the device runs */
        fakecuda_lock(&fc_S->dev[dev].lock);
        fc_slice_advance_locked(dev, fc_now_ns());
        fakecuda_unlock(&fc_S->dev[dev].lock);
    }
    return fakecuda_busy_in_window(fc_S, dev, pid, from, to);
}

/* ---- power and DVFS ------------------------------------------------------
 * A power-capped board: dynamic power scales with the clock squared, and the
 * clock controller keeps the average power at or under the cap. With duty D
 * (busy share of the timeline, all processes, over the last DVFS window,
 * clamped to [0.01, 1]) the relative clock is
 *     c = min(1, sqrt((CAP - IDLE) / (D * (BUSY - IDLE))))
 * (1 when BUSY <= IDLE or BUSY <= CAP; never below FC_CLOCK_MIN). Compute
 * work enqueued at clock c lasts nominal / c. Reported power is
 * IDLE + D1s * (BUSY - IDLE) * c1s^2, D1s the busy share of the last second
 * and c1s the clock that duty allows (NVML's power is a 1 s average). */

#define FC_CLOCK_MIN 0.1
#define FC_POWER_WINDOW_NS 1000000000ULL /* NVML's power is a 1 s average */
#define FC_CLOCK_CACHE_NS 1000000ULL

static int power_model_on(void)
{
    return fc_cfg.power_busy_w > 0;
}

/* Busy share of device d's timeline over the last `w` ns, in [0, 1]. */
static double busy_share(int dev, uint64_t w, uint64_t now)
{
    uint64_t busy = fc_busy_in_window(dev, 0, now > w ? now - w : 0, now);
    double d = (double)busy / (double)w;
    return d > 1.0 ? 1.0 : d;
}

static double clock_of_duty(double d)
{
    double busy = (double)fc_cfg.power_busy_w, idle = (double)fc_cfg.power_idle_w;
    double cap = (double)fc_cfg.power_cap_w;
    if (busy <= idle || busy <= cap)
        return 1.0;
    if (cap <= idle)
        return FC_CLOCK_MIN;
    if (d < 0.01)
        d = 0.01;
    double c = sqrt((cap - idle) / (d * (busy - idle)));
    return c > 1.0 ? 1.0 : c < FC_CLOCK_MIN ? FC_CLOCK_MIN : c;
}

/* Per process: the clock of each device computed at most FC_CLOCK_CACHE_NS
 * ago (relaxed atomics: a torn pair only mixes two neighbouring values). */
static uint64_t g_clock_at[FAKECUDA_MAX_DEVICES];
static uint64_t g_clock_ppm[FAKECUDA_MAX_DEVICES];

double fc_clock_rel(int dev)
{
    if (!power_model_on() || dev < 0 || dev >= FAKECUDA_MAX_DEVICES)
        return 1.0;
    uint64_t now = fc_now_ns();
    uint64_t at = __atomic_load_n(&g_clock_at[dev], __ATOMIC_ACQUIRE);
    if (at && now >= at && now - at < FC_CLOCK_CACHE_NS)
        return (double)__atomic_load_n(&g_clock_ppm[dev], __ATOMIC_RELAXED) / 1e6;
    double c = clock_of_duty(busy_share(dev, fc_cfg.dvfs_window_ns, now));
    __atomic_store_n(&g_clock_ppm[dev], (uint64_t)(c * 1e6 + 0.5), __ATOMIC_RELAXED);
    __atomic_store_n(&g_clock_at[dev], now, __ATOMIC_RELEASE);
    return (double)(uint64_t)(c * 1e6 + 0.5) / 1e6;
}

uint64_t fc_dvfs_dur(int dev, uint64_t nominal)
{
    if (!power_model_on() || !nominal)
        return nominal;
    return (uint64_t)((double)nominal / fc_clock_rel(dev) + 0.5);
}

uint64_t fc_power_mw(int dev)
{
    double idle = (double)fc_cfg.power_idle_w;
    double dyn = (double)fc_cfg.power_busy_w - idle;
    if (!power_model_on() || dyn <= 0)
        return fc_cfg.power_idle_w * 1000;
    /* The clock over the same second as the duty (not the instant's,
     * which a short stall can reset): the controller holds the average
     * at the cap, so this is min(CAP, IDLE + D1s * (BUSY - IDLE)). */
    double d = busy_share(dev, FC_POWER_WINDOW_NS, fc_now_ns());
    double c = clock_of_duty(d);
    return (uint64_t)((idle + d * dyn * c * c) * 1000.0 + 0.5);
}
