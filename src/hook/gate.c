/*
 * The gate every intercepted call passes (CS_ENTER): the suspend
 * checkpoint, and waking a parked tenant on demand (docs/parking.md).
 *
 * Entry: the thread counts itself in its slot's in_call (a locked add,
 * a full barrier), stamps last_call_ns, then reads run_request. A parker
 * stores CS_PARKED in run_request before it reads in_call (park.c), so
 * either this thread sees CS_PARKED and never enters the driver, or the
 * parker sees it counted and waits until it has left: nobody is locked
 * between our gate and the driver. CS_SUSPEND holds the thread as
 * `cushare suspend` asks (suspend_hold below); CS_PARKED makes it wake the tenant:
 * one thread per process performs the wake (the driver lets a process
 * restore and unlock itself and every process of the same user), the
 * others wait for it, then everybody proceeds. The wake also finishes
 * any park or wake whose performer died (park.h).
 *
 * A tenant that is not parked pays the counted entry and exit and one
 * coarse clock read per call; nothing else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/fork.h"
#include "core/clock.h"
#include "core/log.h"
#include "hook/drv.h"
#include "hook/runtime.h"
#include "ledger/ledger.h"
#include "park/park.h"

#define SUBSYS "park"
/* How long an allocation waits for an idle tenant to park. */
#define CS_PARK_ROOM_WAIT_MS 30000

/* wake_mu: one waker per process at a time (threads share the ledger's
 * open file description, so the park lock does not exclude them). Held
 * across the wake; never taken on the fast path. */
static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;

/* hold_mu guards held and the 0<->1 transitions of our slot's run_state
 * it drives; taken by held threads only, never across the wait. */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static int held;              /* threads of this process held, under hold_mu */
static uint64_t holds;        /* suspend holds since start (atomic, relaxed) */

void cs__gate_atfork_child(void)
{
    /* Only the forking thread exists in the child, and it is not held; a
     * parent thread may have held either mutex. The child claims a slot
     * of its own, whose run_state starts at 0. */
    cs__mutex_reset(&wake_mu);
    cs__mutex_reset(&hold_mu);
    held = 0;
    __atomic_store_n(&holds, 0, __ATOMIC_RELAXED);
}

uint64_t cs__gate_suspend_holds(void)
{
    return __atomic_load_n(&holds, __ATOMIC_RELAXED);
}

static struct cs_ledger_slot *my_slot(void)
{
    return cs__ledger_my_slot(cs__ledger());
}

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

/* Holds the calling thread while a suspend request stands: FUTEX_WAIT on
 * the request word itself (a non-private futex on the MAP_SHARED ledger,
 * so `cushare resume` in another process reaches it), with a 1 s timeout
 * as a safety net against a waker that never wakes. While any thread is
 * held the slot's run_state is 1: how `cushare suspend` counts "N
 * processes parked" (docs/limiter.md, "Suspend and resume"). */
static void suspend_hold(struct cs_ledger_slot *s)
{
    pthread_mutex_lock(&hold_mu);
    if (held++ == 0)
        __atomic_store_n(&s->run_state, 1u, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&hold_mu);
    __atomic_fetch_add(&holds, 1, __ATOMIC_RELAXED);
    cs_info("limiter", "suspended by request: parked until `cushare resume`");
    while (__atomic_load_n(&s->run_request, __ATOMIC_ACQUIRE) == CS_SUSPEND) {
        struct timespec ts = {.tv_sec = 1};
        futex(&s->run_request, FUTEX_WAIT, CS_SUSPEND, &ts);
    }
    pthread_mutex_lock(&hold_mu);
    if (--held == 0)
        __atomic_store_n(&s->run_state, 0u, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&hold_mu);
}

static int64_t coarse_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The driver's checkpoint calls through our door to it; NULL when the
 * driver lacks them. Called under wake_mu, which guards the statics. Victims of make_room are parked with the same calls
 * (without make_room: parking never recurses). */
static const struct cs_ckpt_ops *driver_ops(struct cs_ledger *l)
{
    static struct cs_ckpt_ops ops, victims;
    static struct cs_park_room room;
    victims.get_state = cs_drv.cuCheckpointProcessGetState;
    victims.lock = cs_drv.cuCheckpointProcessLock;
    victims.checkpoint = cs_drv.cuCheckpointProcessCheckpoint;
    victims.restore = cs_drv.cuCheckpointProcessRestore;
    victims.unlock = cs_drv.cuCheckpointProcessUnlock;
    if (!victims.get_state || !victims.lock || !victims.checkpoint || !victims.restore ||
        !victims.unlock)
        return NULL;
    const struct cs_config *cfg = cs__config();
    struct stat st;
    room.registry = cfg->registry_path[0] ? cfg->registry_path : NULL;
    room.ops = &victims;
    room.priority = l->hdr->priority; /* as every tenant of the node reads it */
    room.idle_ns = (int64_t)cfg->park_idle_ms * 1000000;
    if (!fstat(l->fd, &st)) {
        room.self_dev = (uint64_t)st.st_dev;
        room.self_ino = (uint64_t)st.st_ino;
    }
    ops = victims;
    ops.make_room = cfg->park_pct ? cs__park_make_room : NULL;
    ops.ctx = &room;
    return &ops;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* Brings the tenant back; returns when this process may call the driver
 * again or should retry the gate. */
static void wake_tenant(struct cs_ledger_slot *s)
{
    static unsigned warned; /* under wake_mu; repeats capped */
    struct cs_ledger *l = cs__ledger();
    pthread_mutex_lock(&wake_mu);
    if (__atomic_load_n(&s->run_request, __ATOMIC_ACQUIRE) != CS_PARKED) {
        pthread_mutex_unlock(&wake_mu); /* another thread woke us meanwhile */
        return;
    }
    const struct cs_ckpt_ops *ops = l ? driver_ops(l) : NULL;
    struct cs_park_result r;
    int rc = ops ? cs__park_wake(l, ops, true, &r) : -ENOSYS;
    bool say = rc && warned++ < 3;
    pthread_mutex_unlock(&wake_mu);
    if (rc == 0) {
        cs_info(SUBSYS, "woken: %d processes, %llu MiB back on the GPU in %lld ms", r.procs,
                (unsigned long long)(r.bytes >> 20), (long long)(r.ns / 1000000));
        return;
    }
    if (say)
        cs_warn(SUBSYS, "parked, wake postponed: %s",
                rc == -ENOSYS ? "the driver lacks the checkpoint API (`cushare wake` from a "
                                "process that has it)"
                              : r.why);
    pause_ms(rc == -EAGAIN ? 100 : 1000);
}

static int make_room_once(struct cs_ledger *l, uint64_t bytes)
{
    pthread_mutex_lock(&wake_mu);
    const struct cs_ckpt_ops *ops = driver_ops(l);
    int rc = ops && ops->make_room ? ops->make_room(bytes, ops->ctx) : -ENOSYS;
    pthread_mutex_unlock(&wake_mu);
    return rc;
}

/* While no tenant is idle enough to be parked, the allocation waits (up to
 * CS_PARK_ROOM_WAIT_MS) rather than fail: the others' bursts end. Waiting
 * is outside the driver, so the thread leaves the gate meanwhile (its
 * tenant may be parked too) and passes it again before it retries, which
 * wakes its tenant if it was. */
int cs__park_make_room_for(uint64_t bytes, int64_t *deadline_ns)
{
    struct cs_ledger *l = cs__ledger();
    if (!l || !cs__config()->park_pct)
        return -ENOSYS;
    if (!*deadline_ns)
        *deadline_ns = cs__now_ns() + (int64_t)CS_PARK_ROOM_WAIT_MS * 1000000;
    for (;;) {
        int rc = make_room_once(l, bytes);
        if (rc == 0 || rc == -ENOSYS)
            return rc;
        if (cs__now_ns() >= *deadline_ns) {
            cs_warn_capped(4, SUBSYS, "out of device memory for %llu MiB: no idle tenant "
                           "could be parked for it in %d s (%s)",
                           (unsigned long long)(bytes >> 20), CS_PARK_ROOM_WAIT_MS / 1000,
                           rc == -ENOSPC ? "the idle ones hold too little" : strerror(-rc));
            return rc;
        }
        struct cs_ledger_slot *s = my_slot();
        if (s)
            __atomic_fetch_sub(&s->in_call, 1, __ATOMIC_SEQ_CST);
        pause_ms(100);
        (void)cs__gate_enter(); /* counted again: the wrapper's exit uncounts it */
    }
}

struct cs_ledger_slot *cs__gate_enter(void)
{
    struct cs_ledger_slot *s = my_slot();
    if (__builtin_expect(!s, 0))
        return NULL;
    for (;;) {
        __atomic_fetch_add(&s->in_call, 1, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->last_call_ns, (uint64_t)coarse_now(), __ATOMIC_RELAXED);
        uint32_t req = __atomic_load_n(&s->run_request, __ATOMIC_SEQ_CST);
        /* Any value but SUSPEND and PARKED (a newer writer's) means run. */
        if (__builtin_expect(req != CS_SUSPEND && req != CS_PARKED, 1))
            return s;
        __atomic_fetch_sub(&s->in_call, 1, __ATOMIC_SEQ_CST);
        if (req == CS_SUSPEND)
            suspend_hold(s);
        else
            wake_tenant(s);
    }
}

/* Only while the slot is still ours: a call that returns after the process
 * left its slot at exit must not touch a slot another process may claim. */
void cs__gate_leave(struct cs_ledger_slot **counted)
{
    if (*counted && my_slot() == *counted)
        __atomic_fetch_sub(&(*counted)->in_call, 1, __ATOMIC_RELEASE);
}

/* The entry points that only pass the gate (GATE rows of hooks.def). */
#define GATE_WRAP_GATE(sym, params, args) \
    CUresult CUDAAPI sym params           \
    {                                     \
        CS_ENTER(sym);                    \
        return cs_real.sym args;          \
    }
#define GATE_WRAP_INIT(sym, params, args)
#define GATE_WRAP_VIEW(sym, params, args)
#define GATE_WRAP_CTX(sym, params, args)
#define GATE_WRAP_MEM(sym, params, args)
#define GATE_WRAP_POOL(sym, params, args)
#define GATE_WRAP_VMM(sym, params, args)
#define GATE_WRAP_GRAPH(sym, params, args)
#define GATE_WRAP_CAPTURE(sym, params, args)
#define GATE_WRAP_KERNEL(sym, params, args)
#define GATE_WRAP_GRAPHRUN(sym, params, args)
#define GATE_WRAP_INSTANTIATE(sym, params, args)
#define GATE_WRAP_MEMSET(sym, params, args)
#define GATE_WRAP_SYNC(sym, params, args)
#define CS_CU(base, sym, since, variant, family, params, args) GATE_WRAP_##family(sym, params, args)
#define CS_NVML(sym, family, params, args)
#include "hook/hooks.def"
#undef CS_CU
#undef CS_NVML
