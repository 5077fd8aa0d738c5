/*
 * HAMi v1 region: create/open, projection of the ledger, feedback
 * (src/hami/hami.h has the contract; docs/kubernetes.md the why).
 *
 * Created like the ledger: filled in an unnamed temporary file and linked
 * at the path, so HAMi's monitor (which takes the first "*.cache" name of
 * the directory and refuses a directory of more than two files) never
 * sees a half-made region nor a second file. The region's bytes are
 * writable by the monitor, and the file by whoever owns the directory: the
 * mapping is SIGBUS-guarded like the ledger's, and nothing read from it
 * changes a budget or a share: it can only hold launches back, as HAMi's
 * monitor is meant to.
 */
#define _GNU_SOURCE
#include "hami/hami.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "core/path.h"
#include "core/uuid.h"
#include "cushare/hami_v1.h"
#include "ledger/ledger.h"

#define SUBSYS "hami"

static struct cs_hami_region *R;      /* set once in cs__hami_open */
static const struct cs_ledger *L;     /* the process's ledger, idem */
static struct cs_ledger_guard *R_guard;

/* Launch tick state of this process: touched by launching threads with
 * relaxed atomics; only the thread that moves last_tick_s to a new second
 * refreshes, and two refreshes racing across a second boundary at worst
 * report one sample's SM use twice. */
static int64_t last_tick_s;
static uint64_t last_gpu_ns[CS_MAX_DEVICES];
static uint64_t last_tick_ns;

bool cs__hami_active(void)
{
    return R != NULL && !(R_guard && cs__ledger_guard_lost(R_guard));
}

static void fill_header(struct cs_hami_region *r, const struct cs_config *cfg)
{
    memset(r, 0, sizeof *r);
    r->major_version = CS_HAMI_MAJOR;
    r->minor_version = CS_HAMI_MINOR;
    r->owner_pid = 0;
    r->device_num = 1;
    for (int d = 0; d < CS_HAMI_DEVICES; d++) {
        r->limit[d] = cs__config_mem_limit(cfg, d);
        r->sm_limit[d] = cs__config_sm_limit(cfg, d);
        if (cfg->mem_limit_set[d] || cfg->sm_limit_set[d])
            r->device_num = (uint64_t)d + 1;
    }
    /* HAMi-core's initial values: limited until the monitor says
     * otherwise, active, low priority unless CUDA_TASK_PRIORITY says. */
    r->utilization_switch = 1;
    r->recent_kernel = 2;
    r->priority = cfg->priority_set ? cfg->priority : 1;
    r->last_kernel_time = (int64_t)time(NULL);
    r->initialized_flag = CS_HAMI_MAGIC; /* last: the file is not linked yet */
}

static int fail(const char *path, const char *what, int e)
{
    cs_err(SUBSYS, "HAMi region %s: %s (%s): remove the file, or unset "
           "CUDA_DEVICE_MEMORY_SHARED_CACHE's \".cache\" name to keep no HAMi region",
           path, what, strerror(e));
    return -e;
}

/* -EEXIST when another process linked its region first. */
static int create(const char *path, const struct cs_config *cfg)
{
    char dir[PATH_MAX];
    const char *base;
    cs__path_dir(path, dir, sizeof dir, &base);
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail(path, "cannot create it in its directory", errno);
    struct cs_hami_region *tmp = NULL;
    int e = 0;
    if (ftruncate(fd, sizeof *tmp) != 0)
        e = errno;
    if (!e) {
        tmp = mmap(NULL, sizeof *tmp, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (tmp == MAP_FAILED)
            e = errno;
    }
    if (!e) {
        fill_header(tmp, cfg);
        munmap(tmp, sizeof *tmp);
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0)
            e = errno;
    }
    close(fd);
    if (e == EEXIST)
        return -EEXIST;
    return e ? fail(path, "cannot create it", e) : 0;
}

static int map_existing(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? -ENOENT : fail(path, "cannot open it", errno);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size < sizeof(struct cs_hami_region)) {
        close(fd);
        return fail(path, "not a HAMi v1 region (too small or not a file)", EPROTO);
    }
    void *m = mmap(NULL, sizeof *R, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return fail(path, "cannot map it", errno);
    struct cs_hami_region *r = m;
    if (r->initialized_flag != CS_HAMI_MAGIC || r->major_version != CS_HAMI_MAJOR) {
        munmap(m, sizeof *R);
        return fail(path, "not a HAMi v1 region (marker or version differ)", EPROTO);
    }
    R_guard = cs__ledger_guard_add(m, sizeof *R, path);
    R = r;
    return 0;
}

int cs__hami_open(const struct cs_config *cfg, const struct cs_ledger *ledger)
{
    L = ledger;
    if (!cfg->hami_path[0] || R)
        return 0;
    for (int attempt = 0; attempt < 100; attempt++) {
        int rc = map_existing(cfg->hami_path);
        if (rc != -ENOENT)
            return rc;
        rc = create(cfg->hami_path, cfg);
        if (rc && rc != -EEXIST)
            return rc;
        sched_yield();
    }
    return fail(cfg->hami_path, "it keeps disappearing while opened", EAGAIN);
}

/* Store helpers: the monitor reads these with plain loads; relaxed atomic
 * stores keep each 64-bit value whole. */
#define PUT(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)

void cs__hami_sync_slot(int idx)
{
    if (!cs__hami_active() || idx < 0 || idx >= CS_HAMI_PROCS)
        return;
    const struct cs_ledger_slot *s = cs__ledger_slot(L, idx);
    struct cs_hami_proc *p = &R->procs[idx];
    bool live = s && __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == CS_SLOT_LIVE;
    for (int d = 0; d < CS_HAMI_DEVICES; d++) {
        uint64_t ctx = 0, all = 0;
        for (int c = 0; live && c < CS_MEM_NCATEGORIES; c++) {
            uint64_t b = __atomic_load_n(&s->bytes[d][c], __ATOMIC_RELAXED);
            all += b;
            if (c == CS_MEM_CONTEXT)
                ctx = b;
        }
        PUT(p->used[d].context_size, ctx);
        PUT(p->used[d].buffer_size, all - ctx);
        PUT(p->used[d].total, all);
        if (!live)
            PUT(p->device_util[d].sm_util, 0);
    }
    PUT(p->hostpid, live ? __atomic_load_n(&s->host_pid, __ATOMIC_RELAXED) : 0);
    PUT(p->status, live ? 1 : 0);
    PUT(p->pid, live ? s->pid : 0);
    if (live) {
        int32_t n = __atomic_load_n(&R->proc_num, __ATOMIC_RELAXED);
        while (n < idx + 1 && !__atomic_compare_exchange_n(&R->proc_num, &n, idx + 1, true,
                                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
    }
}

void cs__hami_sync_all(void)
{
    if (!cs__hami_active())
        return;
    int top = 0;
    for (int i = 0; i < CS_HAMI_PROCS; i++) {
        cs__hami_sync_slot(i);
        if (__atomic_load_n(&R->procs[i].pid, __ATOMIC_RELAXED))
            top = i + 1;
    }
    /* Trimming races a claim that raises it: that claimer syncs again on
     * its next admission, and a slot beyond proc_num only hides its bytes
     * from the newest monitors until then. */
    PUT(R->proc_num, top);
}

void cs__hami_set_devices(int n)
{
    if (!cs__hami_active())
        return;
    for (int d = 0; d < n && d < CS_HAMI_DEVICES; d++) {
        if (__atomic_load_n(&L->hdr->uuid_state[d], __ATOMIC_ACQUIRE) != 2)
            continue;
        char s[sizeof R->uuids[d]] = "";
        cs__format_uuid(L->hdr->uuid[d], s);
        memcpy(R->uuids[d], s, sizeof s);
    }
    if (n > 0)
        PUT(R->device_num, (uint64_t)(n > CS_HAMI_DEVICES ? CS_HAMI_DEVICES : n));
}

/* Our slot's SM use since the last tick: measured GPU time over wall time. */
static void refresh_sm_util(void)
{
    int idx = L->slot;
    const struct cs_ledger_slot *s = cs__ledger_slot(L, idx);
    if (!s || idx >= CS_HAMI_PROCS)
        return;
    uint64_t now = (uint64_t)cs__now_ns();
    uint64_t then = __atomic_exchange_n(&last_tick_ns, now, __ATOMIC_RELAXED);
    uint64_t dt = now - then;
    for (int d = 0; d < CS_HAMI_DEVICES; d++) {
        uint64_t g = __atomic_load_n(&s->gpu_ns[d], __ATOMIC_RELAXED);
        uint64_t g0 = __atomic_exchange_n(&last_gpu_ns[d], g, __ATOMIC_RELAXED);
        if (then && dt && g >= g0) {
            uint64_t pct = (g - g0) * 100 / dt;
            PUT(R->procs[idx].device_util[d].sm_util, pct > 100 ? 100 : pct);
        }
    }
}

bool cs__hami_launch_tick(void)
{
    if (!cs__hami_active())
        return false;
    int32_t rk = __atomic_load_n(&R->recent_kernel, __ATOMIC_ACQUIRE);
    if (rk < 0)
        return true;
    int64_t now = (int64_t)time(NULL);
    if (__atomic_exchange_n(&last_tick_s, now, __ATOMIC_RELAXED) == now)
        return false;
    /* 2 = active, as HAMi-core marks it; a block the monitor wrote since
     * our load stays (compare-and-swap, never a plain store). */
    while (rk >= 0 && rk != 2 &&
           !__atomic_compare_exchange_n(&R->recent_kernel, &rk, 2, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
    PUT(R->last_kernel_time, now);
    refresh_sm_util();
    cs__hami_sync_slot(L->slot);
    return rk < 0;
}

int cs__hami_util_switch(void)
{
    if (!cs__hami_active())
        return -1;
    return __atomic_load_n(&R->utilization_switch, __ATOMIC_RELAXED) != 0;
}
