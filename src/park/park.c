/*
 * Parking mechanism (park.h, docs/parking.md). Ordering of a park:
 *
 *   1. take the park lock; refuse a suspended tenant, one sharing device
 *      memory between processes, one whose checkpoint would not fit in
 *      host memory;
 *   2. PARKING, and CS_PARKED in every live slot's run_request: from here
 *      on a thread entering an intercepted call finds it and waits for a
 *      wake instead of entering the driver;
 *   3. wait until no thread is inside an intercepted call (in_call, counted
 *      before run_request is read: one of the two sides sees the other);
 *   4. lock every process (calls already inside the driver finish first,
 *      bounded by the lock timeout), then checkpoint every process;
 *   5. PARKED.
 * Any failure on the way drives every process back to running (the same
 * routine as a wake) and leaves the tenant RUNNING.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "park/park.h"
#include "park/policy.h"

#define SUBSYS "park"

static const char *const state_names[] = {
#define CS_X_NAME(id, name) name,
    CS_PARK_STATES(CS_X_NAME)
#undef CS_X_NAME
};

const char *cs__park_state_name(uint32_t state)
{
    return state < CS_PARK_NSTATES ? state_names[state] : "unknown";
}

uint32_t cs__park_state(const struct cs_ledger *l)
{
    return __atomic_load_n(&l->hdr->park.state, __ATOMIC_ACQUIRE);
}

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wake_all(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Only the park lock's holder calls this. */
static void set_state(struct cs_ledger *l, uint32_t st)
{
    struct cs_ledger_park *p = &l->hdr->park;
    __atomic_store_n(&p->since_ns, (uint64_t)realtime_ns(), __ATOMIC_RELAXED);
    __atomic_store_n(&p->state, st, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&p->seq, 1, __ATOMIC_SEQ_CST);
    futex_wake_all(&p->seq);
}

static void note_error(struct cs_ledger *l, struct cs_park_result *r, int cu, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));
static void note_error(struct cs_ledger *l, struct cs_park_result *r, int cu, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    r->cu = (CUresult)cu;
    __atomic_store_n(&l->hdr->park.last_error, (uint32_t)cu, __ATOMIC_RELAXED);
}

/* ---- the park lock ------------------------------------------------------ */

static int park_lock(struct cs_ledger *l, bool wait, struct cs_park_result *r)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)CS_LEDGER_PARK_LOCK, .l_len = 1};
    while (fcntl(l->fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl)) {
        if (errno == EINTR)
            continue;
        int rc = errno == EAGAIN || errno == EACCES ? -EBUSY : -errno;
        snprintf(r->why, sizeof r->why, "another park or wake of this tenant is in progress "
                 "(pid %d)", (int)__atomic_load_n(&l->hdr->park.performer_pid, __ATOMIC_RELAXED));
        return rc;
    }
    __atomic_store_n(&l->hdr->park.performer_pid, (int32_t)getpid(), __ATOMIC_RELAXED);
    return 0;
}

static void park_unlock(struct cs_ledger *l)
{
    __atomic_store_n(&l->hdr->park.performer_pid, 0, __ATOMIC_RELAXED);
    struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)CS_LEDGER_PARK_LOCK, .l_len = 1};
    fcntl(l->fd, F_OFD_SETLK, &fl);
}

/* ---- the tenant's processes --------------------------------------------- */

struct procs {
    int n;
    int slot[CS_LEDGER_SLOTS];
    int pid[CS_LEDGER_SLOTS];  /* as the driver knows it from here; -1 unknown */
};

static uint64_t my_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) ? 0 : (uint64_t)st.st_ino;
}

/* The pid a checkpoint call from this process names slot s's owner by:
 * its own pid in our PID namespace, else the host pid it learnt. */
static int driver_pid(const struct cs_ledger_slot *s, uint64_t ns)
{
    uint64_t theirs = __atomic_load_n(&s->pidns_ino, __ATOMIC_RELAXED);
    if (ns && theirs == ns)
        return __atomic_load_n(&s->pid, __ATOMIC_RELAXED);
    int host = __atomic_load_n(&s->host_pid, __ATOMIC_RELAXED);
    return host > 0 ? host : -1;
}

static void collect(const struct cs_ledger *l, struct procs *p)
{
    uint64_t ns = my_pidns();
    p->n = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        if (!cs__ledger_slot_alive(l, i))
            continue;
        p->slot[p->n] = i;
        p->pid[p->n] = driver_pid(cs__ledger_slot(l, i), ns);
        p->n++;
    }
}

uint64_t cs__park_tenant_bytes(const struct cs_ledger *l)
{
    uint64_t sum = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        sum += __atomic_load_n(&l->hdr->dev[d].used, __ATOMIC_ACQUIRE);
    return sum;
}

int64_t cs__park_last_active(const struct cs_ledger *l, uint32_t *in_call)
{
    int64_t last = 0;
    uint32_t n = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        if (!cs__ledger_slot_alive(l, i))
            continue;
        const struct cs_ledger_slot *s = cs__ledger_slot(l, i);
        int64_t t = (int64_t)__atomic_load_n(&s->last_call_ns, __ATOMIC_RELAXED);
        if (t > last)
            last = t;
        n += __atomic_load_n(&s->in_call, __ATOMIC_ACQUIRE);
    }
    if (in_call)
        *in_call = n;
    return last;
}

/* Sets run_request of every live slot from `from` (or any value but
 * CS_SUSPEND when from is UINT32_MAX) to `to`; wakes waiters on a change
 * to CS_RUN. */
static void set_requests(struct cs_ledger *l, uint32_t from, uint32_t to)
{
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        struct cs_ledger_slot *s = cs__ledger_slot(l, i);
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != CS_SLOT_LIVE)
            continue;
        uint32_t cur = __atomic_load_n(&s->run_request, __ATOMIC_ACQUIRE);
        if (cur == CS_SUSPEND || (from != UINT32_MAX && cur != from))
            continue;
        if (__atomic_compare_exchange_n(&s->run_request, &cur, to, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED) && to == CS_RUN)
            futex_wake_all(&s->run_request);
    }
}

static bool any_suspended(const struct cs_ledger *l)
{
    for (int i = 0; i < CS_LEDGER_SLOTS; i++)
        if (cs__ledger_slot_alive(l, i) &&
            __atomic_load_n(&cs__ledger_slot(l, i)->run_request, __ATOMIC_ACQUIRE) == CS_SUSPEND)
            return true;
    return false;
}

/* Device memory the driver cannot checkpoint: memory shared between the
 * tenant's processes (VMM exports, IPC) or imported from another tenant. */
bool cs__park_shares_memory(const struct cs_ledger *l)
{
    for (int j = 0; j < CS_LEDGER_SHARES; j++) {
        struct cs_ledger_share *sh = cs__ledger_share(l, j);
        if (sh && __atomic_load_n(&sh->state, __ATOMIC_ACQUIRE) != CS_SHARE_FREE)
            return true;
    }
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        if (!cs__ledger_slot_alive(l, i))
            continue;
        const struct cs_ledger_slot *s = cs__ledger_slot(l, i);
        for (int d = 0; d < CS_MAX_DEVICES; d++)
            if (__atomic_load_n(&s->bytes[d][CS_MEM_IMPORT], __ATOMIC_RELAXED))
                return true;
    }
    return false;
}

static void step(const struct cs_ckpt_ops *ops, const char *name, int i)
{
    if (ops->step)
        ops->step(name, i);
}

/* ---- driving processes back to running ---------------------------------- */

static bool no_room(CUresult cu)
{
    return cu == CUDA_ERROR_OUT_OF_MEMORY;
}

/* Restores every checkpointed process, then unlocks every locked one.
 * A process that died meanwhile is skipped (the driver and the ledger's
 * reap free what it held). */
static int drive_to_running(struct cs_ledger *l, const struct cs_ckpt_ops *ops,
                            const struct procs *p, struct cs_park_result *r)
{
    bool room_made = false;
    for (int k = 0; k < p->n; k++) {
        CUprocessState st;
        if (p->pid[k] < 0 || ops->get_state(p->pid[k], &st) != CUDA_SUCCESS)
            continue; /* gone, or never a CUDA process: nothing to restore */
        if (st == CU_PROCESS_STATE_FAILED) {
            note_error(l, r, CUDA_ERROR_UNKNOWN, "process %d: the driver reports its "
                       "checkpoint state FAILED", p->pid[k]);
            return -EIO;
        }
        if (st != CU_PROCESS_STATE_CHECKPOINTED)
            continue;
        CUcheckpointRestoreArgs ra;
        memset(&ra, 0, sizeof ra);
        CUresult cu = ops->restore(p->pid[k], &ra);
        if (no_room(cu) && !room_made && ops->make_room) {
            room_made = true;
            if (ops->make_room(cs__park_tenant_bytes(l), ops->ctx) == 0)
                cu = ops->restore(p->pid[k], &ra);
        }
        if (no_room(cu)) {
            note_error(l, r, cu, "process %d: no room on the GPU to restore it", p->pid[k]);
            return -EAGAIN;
        }
        if (cu != CUDA_SUCCESS) {
            note_error(l, r, cu, "process %d: restore failed (CUresult %d)", p->pid[k], cu);
            return -EIO;
        }
        step(ops, "restored", k);
    }
    for (int k = 0; k < p->n; k++) {
        CUprocessState st;
        if (p->pid[k] < 0 || ops->get_state(p->pid[k], &st) != CUDA_SUCCESS ||
            st != CU_PROCESS_STATE_LOCKED)
            continue;
        CUcheckpointUnlockArgs ua;
        memset(&ua, 0, sizeof ua);
        CUresult cu = ops->unlock(p->pid[k], &ua);
        if (cu != CUDA_SUCCESS) {
            note_error(l, r, cu, "process %d: unlock failed (CUresult %d)", p->pid[k], cu);
            return -EIO;
        }
        step(ops, "unlocked", k);
    }
    return 0;
}

/* ---- wake ---------------------------------------------------------------- */

static int wake_locked(struct cs_ledger *l, const struct cs_ckpt_ops *ops,
                       struct cs_park_result *r)
{
    struct cs_ledger_park *pk = &l->hdr->park;
    if (cs__park_state(l) == CS_PARK_RUNNING) {
        set_requests(l, CS_PARKED, CS_RUN); /* a performer that died right
                                               after its first step */
        return 0;
    }
    int64_t t0 = cs__now_ns();
    set_state(l, CS_PARK_WAKING);
    step(ops, "waking", 0);
    struct procs *p = malloc(sizeof *p);
    if (!p)
        return -ENOMEM;
    collect(l, p);
    int rc = drive_to_running(l, ops, p, r);
    if (rc == 0) {
        set_requests(l, CS_PARKED, CS_RUN);
        int64_t ns = cs__now_ns() - t0;
        r->procs = p->n;
        r->bytes = __atomic_load_n(&pk->host_bytes, __ATOMIC_RELAXED);
        r->ns = ns;
        __atomic_store_n(&pk->host_bytes, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&pk->last_wake_ns, (uint64_t)ns, __ATOMIC_RELAXED);
        __atomic_fetch_add(&pk->wake_ns_total, (uint64_t)ns, __ATOMIC_RELAXED);
        __atomic_fetch_add(&pk->wakes, 1, __ATOMIC_RELAXED);
        set_state(l, CS_PARK_RUNNING);
    } else {
        /* Still off the GPU (or partly back, locked): the next call or
         * wake resumes from the driver's states. */
        set_state(l, CS_PARK_PARKED);
    }
    free(p);
    return rc;
}

int cs__park_wake(struct cs_ledger *l, const struct cs_ckpt_ops *ops, bool wait,
                  struct cs_park_result *r)
{
    memset(r, 0, sizeof *r);
    int rc = park_lock(l, wait, r);
    if (rc)
        return rc;
    rc = wake_locked(l, ops, r);
    park_unlock(l);
    return rc;
}

/* ---- park ---------------------------------------------------------------- */

/* Undoes a park that got part of the way: everything back to running. */
static void roll_back(struct cs_ledger *l, const struct cs_ckpt_ops *ops, const struct procs *p)
{
    struct cs_park_result ignored;
    memset(&ignored, 0, sizeof ignored);
    if (drive_to_running(l, ops, p, &ignored))
        cs_err(SUBSYS, "%s: rolling back a park failed: %s; `cushare wake %s` retries", l->path,
               ignored.why, l->path);
    set_requests(l, CS_PARKED, CS_RUN);
    __atomic_fetch_add(&l->hdr->park.refusals, 1, __ATOMIC_RELAXED);
    set_state(l, CS_PARK_RUNNING);
}

static bool gate_empty_by(const struct cs_ledger *l, int64_t deadline)
{
    for (;;) {
        uint32_t in_call;
        cs__park_last_active(l, &in_call);
        if (!in_call)
            return true;
        if (cs__now_ns() >= deadline)
            return false;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static int refuse(struct cs_ledger *l, struct cs_park_result *r, int rc, int cu)
{
    __atomic_fetch_add(&l->hdr->park.refusals, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&l->hdr->park.last_error, (uint32_t)cu, __ATOMIC_RELAXED);
    r->cu = (CUresult)(cu > 0 ? cu : 0);
    return rc;
}

static int check_parkable(struct cs_ledger *l, const struct procs *p, uint64_t bytes,
                          const struct cs_park_opts *o, struct cs_park_result *r)
{
    if (!p->n) {
        snprintf(r->why, sizeof r->why, "no live process");
        return -ESRCH;
    }
    for (int k = 0; k < p->n; k++)
        if (p->pid[k] < 0) {
            snprintf(r->why, sizeof r->why, "process in slot %d lives in another PID namespace "
                     "and its host pid is unknown (run the broker, docs/identity.md)",
                     p->slot[k]);
            return refuse(l, r, -ESRCH, -ESRCH);
        }
    if (any_suspended(l)) {
        snprintf(r->why, sizeof r->why, "suspended by `cushare suspend`: resume it first");
        return refuse(l, r, -EBUSY, -EBUSY);
    }
    if (cs__park_shares_memory(l)) {
        snprintf(r->why, sizeof r->why, "its processes share device memory (VMM export or IPC), "
                 "which the driver cannot checkpoint");
        return refuse(l, r, -EXDEV, CUDA_ERROR_NOT_SUPPORTED);
    }
    if (!o->skip_host_check) {
        uint64_t avail = 0, lim = 0, use = 0;
        if (cs__park_host_memory(p->pid[0], &avail, &lim, &use) ||
            !cs__park_host_fits(bytes, avail, lim, use)) {
            snprintf(r->why, sizeof r->why, "host memory would not hold %" PRIu64 " MiB "
                     "(available %" PRIu64 " MiB, cgroup room %" PRIu64 " MiB)", bytes >> 20,
                     avail >> 20, lim ? (lim > use ? lim - use : 0) >> 20 : avail >> 20);
            return refuse(l, r, -ENOMEM, -ENOMEM);
        }
    }
    return 0;
}

static int lock_all(struct cs_ledger *l, const struct cs_ckpt_ops *ops, const struct procs *p,
                    unsigned timeout_ms, struct cs_park_result *r)
{
    for (int k = 0; k < p->n; k++) {
        CUcheckpointLockArgs la;
        memset(&la, 0, sizeof la);
        la.timeoutMs = timeout_ms ? timeout_ms : 1;
        CUresult cu = ops->lock(p->pid[k], &la);
        if (cu != CUDA_SUCCESS) {
            note_error(l, r, cu, cu == CUDA_ERROR_NOT_READY
                       ? "process %d: a call inside the driver did not finish within %u ms"
                       : "process %d: the driver refused to lock it (CUresult %d)",
                       p->pid[k], cu == CUDA_ERROR_NOT_READY ? timeout_ms : (unsigned)cu);
            return cu == CUDA_ERROR_NOT_READY ? -EBUSY : -EIO;
        }
        step(ops, "locked", k);
    }
    return 0;
}

static int checkpoint_all(struct cs_ledger *l, const struct cs_ckpt_ops *ops,
                          const struct procs *p, struct cs_park_result *r)
{
    for (int k = 0; k < p->n; k++) {
        CUcheckpointCheckpointArgs ca;
        memset(&ca, 0, sizeof ca);
        CUresult cu = ops->checkpoint(p->pid[k], &ca);
        if (cu != CUDA_SUCCESS) {
            note_error(l, r, cu, "process %d: the driver refused to checkpoint it (CUresult %d%s)",
                       p->pid[k], cu, cu == CUDA_ERROR_NOT_SUPPORTED
                       ? ": memory it cannot checkpoint, such as IPC or VMM-shared" : "");
            return cu == CUDA_ERROR_NOT_SUPPORTED ? -EXDEV : -EIO;
        }
        step(ops, "checkpointed", k);
    }
    return 0;
}

static int park_locked(struct cs_ledger *l, const struct cs_ckpt_ops *ops,
                       const struct cs_park_opts *o, struct procs *p, struct cs_park_result *r)
{
    struct cs_ledger_park *pk = &l->hdr->park;
    uint32_t st = cs__park_state(l);
    if (st == CS_PARK_PARKED) {
        snprintf(r->why, sizeof r->why, "already parked");
        return 0;
    }
    if (st != CS_PARK_RUNNING) { /* its performer died: finish the way back first */
        int rc = wake_locked(l, ops, r);
        if (rc)
            return rc;
    }
    collect(l, p);
    uint64_t bytes = cs__park_tenant_bytes(l);
    int rc = check_parkable(l, p, bytes, o, r);
    if (rc)
        return rc;
    int64_t t0 = cs__now_ns();
    set_state(l, CS_PARK_PARKING);
    set_requests(l, UINT32_MAX, CS_PARKED);
    step(ops, "marked", 0);
    unsigned tmo = o->lock_timeout_ms ? o->lock_timeout_ms : 5000;
    if (!gate_empty_by(l, t0 + (int64_t)tmo * 1000000)) {
        snprintf(r->why, sizeof r->why, "busy: a call stayed inside cushare for %u ms", tmo);
        roll_back(l, ops, p);
        return -EBUSY;
    }
    /* A process that joined meanwhile is parked too: its claim saw PARKING
     * and set its own request (slot.c), or we see its slot here. */
    collect(l, p);
    set_requests(l, UINT32_MAX, CS_PARKED);
    if (!gate_empty_by(l, t0 + (int64_t)tmo * 1000000)) {
        snprintf(r->why, sizeof r->why, "busy: a call stayed inside cushare for %u ms", tmo);
        roll_back(l, ops, p);
        return -EBUSY;
    }
    rc = lock_all(l, ops, p, tmo, r);
    if (!rc)
        rc = checkpoint_all(l, ops, p, r);
    if (rc) {
        roll_back(l, ops, p);
        return rc;
    }
    int64_t ns = cs__now_ns() - t0;
    r->procs = p->n;
    r->bytes = bytes;
    r->ns = ns;
    __atomic_store_n(&pk->host_bytes, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&pk->last_park_ns, (uint64_t)ns, __ATOMIC_RELAXED);
    __atomic_fetch_add(&pk->park_ns_total, (uint64_t)ns, __ATOMIC_RELAXED);
    __atomic_fetch_add(&pk->parks, 1, __ATOMIC_RELAXED);
    set_state(l, CS_PARK_PARKED);
    step(ops, "parked", 0);
    return 0;
}

int cs__park_tenant(struct cs_ledger *l, const struct cs_ckpt_ops *ops,
                    const struct cs_park_opts *o, struct cs_park_result *r)
{
    memset(r, 0, sizeof *r);
    int rc = park_lock(l, false, r);
    if (rc)
        return rc;
    struct procs *p = malloc(sizeof *p);
    rc = p ? park_locked(l, ops, o, p, r) : -ENOMEM;
    free(p);
    park_unlock(l);
    return rc;
}

/* ---- host memory -------------------------------------------------------- */

static int read_u64_line(const char *path, const char *key, uint64_t *out)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    char line[256];
    int rc = -ENOENT;
    size_t kl = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f)) {
        if (key && strncmp(line, key, kl))
            continue;
        char *s = line + kl, *end;
        while (*s == ' ' || *s == '\t' || *s == ':')
            s++;
        if (!strncmp(s, "max", 3)) {
            *out = 0;
            rc = 0;
            break;
        }
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s)
            break;
        *out = (uint64_t)v;
        if (key && strstr(end, "kB"))
            *out *= 1024;
        rc = 0;
        break;
    }
    fclose(f);
    return rc;
}

/* The cgroup v2 directory of pid ("0::/path" in /proc/pid/cgroup). */
static int cgroup_dir(int pid, char *out, size_t len)
{
    char path[64], line[4200];
    snprintf(path, sizeof path, "/proc/%d/cgroup", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    int rc = -ENOENT;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3))
            continue;
        line[strcspn(line, "\n")] = '\0';
        if (strstr(line + 3, ".."))
            break;
        rc = snprintf(out, len, "/sys/fs/cgroup%s", line + 3) < (int)len ? 0 : -ENAMETOOLONG;
        break;
    }
    fclose(f);
    return rc;
}

int cs__park_host_memory(int pid, uint64_t *mem_available, uint64_t *cg_limit,
                         uint64_t *cg_usage)
{
    *cg_limit = *cg_usage = 0;
    int rc = read_u64_line("/proc/meminfo", "MemAvailable", mem_available);
    if (rc)
        return rc;
    char dir[4300], path[4400];
    if (cgroup_dir(pid, dir, sizeof dir - 32))
        return 0; /* no cgroup v2: the node's figure alone */
    /* The nearest limit on the way up to the root binds. */
    for (;;) {
        uint64_t lim = 0, use = 0;
        snprintf(path, sizeof path, "%s/memory.max", dir);
        if (!read_u64_line(path, NULL, &lim) && lim) {
            snprintf(path, sizeof path, "%s/memory.current", dir);
            if (!read_u64_line(path, NULL, &use)) {
                *cg_limit = lim;
                *cg_usage = use;
                return 0;
            }
        }
        char *slash = strrchr(dir, '/');
        if (!slash || slash - dir <= (long)strlen("/sys/fs/cgroup"))
            return 0;
        *slash = '\0';
    }
}
