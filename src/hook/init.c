/*
 * Lazy, once-per-process initialisation. Nothing runs in a constructor: the
 * first intercepted CUDA call pays for parsing the environment, opening the
 * driver and claiming a ledger slot. The path takes no cross-process lock:
 * the ledger is created by link() and slots are claimed with per-slot OFD
 * locks (src/ledger). Within the process a mutex orders the first callers.
 *
 * The first call is nearly always cuInit, and the driver's own cuInit is
 * slow (~97 ms on the H200) while ours is a few milliseconds of file work
 * that does not need the driver. So cuInit runs the set-up on a thread of
 * its own while it calls the driver, and waits for it before returning:
 * start-up costs the longer of the two instead of their sum. Fail closed
 * all the same: a set-up that fails leaves the sticky error every
 * intercepted entry point returns (cuInit included), so the driver is then
 * initialised but no context and no allocation is ever made through us
 * without a ledger; a caller that comes while the set-up runs waits for
 * it. include/cushare/phases.h names the stamps of each part.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "account/account.h"
#include "core/fork.h"
#include "core/log.h"
#include "core/userdir.h"
#include "hami/hami.h"
#include "cushare/phases.h"
#include "hook/runtime.h"
#include "ledger/ledger.h"
#include "node/node.h"

/* The state runtime.h describes: written under init_mutex by first_init,
 * reinit_after_fork and cs__init_devices, and by on_fork_child. */
static struct {
    struct cs_config cfg;
    struct cs_ledger ledger;
    int device_count;
    struct cs_device_info dev[CS_MAX_DEVICES];
} cs_rt;

const struct cs_config *cs__config(void)
{
    return &cs_rt.cfg;
}

struct cs_ledger *cs__ledger(void)
{
    return &cs_rt.ledger;
}

int cs__device_count(void)
{
    return __atomic_load_n(&cs_rt.device_count, __ATOMIC_ACQUIRE);
}

const struct cs_device_info *cs__device_info(int d)
{
    return &cs_rt.dev[d];
}

/* Written by the thread that performs each phase; read by the benchmark
 * after start-up. Plain stores of aligned 64-bit values. */
static struct cushare_phases phases = {.version = CUSHARE_PHASES_VERSION};

void cs__phase_mark(enum cs_phase p)
{
    uint64_t *field[] = {
        [CS_PHASE_WRAPPER_ENTER] = &phases.wrapper_enter_ns,
        [CS_PHASE_DRIVER_ENTER] = &phases.driver_enter_ns,
        [CS_PHASE_SETUP_BEGIN] = &phases.setup_begin_ns,
        [CS_PHASE_LEDGER_READY] = &phases.ledger_ready_ns,
        [CS_PHASE_SETUP_END] = &phases.setup_end_ns,
        [CS_PHASE_REAL_INIT_DONE] = &phases.real_init_done_ns,
        [CS_PHASE_JOINED] = &phases.joined_ns,
        [CS_PHASE_IDENTITY_DONE] = &phases.identity_done_ns,
    };
    uint64_t zero = 0;
    __atomic_compare_exchange_n(field[p], &zero, cs__now_ns(), false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}

void cs__phase_identity(uint32_t tier, uint64_t lock_waits)
{
    __atomic_store_n(&phases.identity_tier, tier, __ATOMIC_RELAXED);
    __atomic_store_n(&phases.lock_waits, lock_waits, __ATOMIC_RELAXED);
    cs__phase_mark(CS_PHASE_IDENTITY_DONE);
}

CS_EXPORT void cushare_phases(struct cushare_phases *out)
{
    if (!out)
        return;
    /* A caller of version 1 has room for version 1 only. */
    bool v1 = out->version < CUSHARE_PHASES_VERSION;
    struct cushare_phases p = phases;
    p.version = v1 ? 1 : CUSHARE_PHASES_VERSION;
    memcpy(out, &p, v1 ? CUSHARE_PHASES_V1_SIZE : sizeof p);
}

/* init_state: where initialisation stands, or a sticky failure (<0, the
 * -errno of the failed set-up). Published with release after cs_rt is
 * complete; hot paths read it with acquire and take no lock. Written only
 * under init_mutex (and in the fork child handler). */
enum {
    INIT_NONE = 0,       /* not started */
    INIT_READY = 1,
    INIT_AFTER_FORK = 2, /* a fork child of a ready process: claim a slot of its own */
    INIT_RUNNING = 3,    /* the set-up thread is at it */
};
static int init_state;
static int running_from;  /* under init_mutex: INIT_NONE or INIT_AFTER_FORK, while RUNNING */
/* Orders the first callers of cs__init; also serialises cs__init_devices
 * (cs_rt.device_count, cs_rt.dev[]). */
static pthread_mutex_t init_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t init_settled = PTHREAD_COND_INITIALIZER; /* RUNNING ended */
static bool exit_handler_installed; /* under init_mutex; atexit survives fork */

/* Without CUDA_DEVICE_MEMORY_SHARED_CACHE the tenant is this process and
 * its fork children: a private ledger in a per-user 0700 directory of
 * /dev/shm. (A shared default path would let a stale ledger's limits apply
 * to unrelated later programs.) Once our slot is claimed its name is
 * removed: fork children reach the file through /proc/self/fd (see
 * on_fork_child), nothing else needs the name, and a file without a name
 * is gone with its last process however that ends (SIGKILL, exec). Dead
 * files older builds or a kill in the instant before the unlink left
 * behind are swept then. docs/ledger.md, "Private ledgers". */
#define PRIVATE_PREFIX "private-"

static bool private_ledger;        /* set once in first_init */
static bool private_named;         /* its name could not be removed (no /proc) */
static char private_dir[64];       /* where private ledgers of our uid live */

static void on_exit_leave(void)
{
    if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) != 1)
        return;
    cs__account_leave(&cs_rt.ledger);
    /* Still named: the last process of the tree removes it. */
    if (private_ledger && private_named)
        cs__ledger_remove_if_unused(&cs_rt.ledger);
}

/* ---- fork ------------------------------------------------------------------
 * The one fork handler of the library. In the child only the forking thread
 * exists: a lock another thread of the parent held stays locked in the
 * child's copy, and whatever that thread was doing is lost. So every
 * module's locks and per-process state are reset here, in this order, and
 * the handler is registered before the first lock of the library can be
 * taken (first thing on cs__init's slow path, which every entry point
 * passes before any lock), so no thread can hold a lock whose reset is not
 * registered yet. What stays: the configuration, the driver handles and
 * symbols, the devices learnt (same process image, same devices), the
 * signal dispositions (the kernel keeps them across fork), pthread_once
 * controls (glibc restarts one left in progress), and postinit_lock.c's
 * registry, which has handlers of its own. */

/* The child shares the parent's open file description, hence the parent's
 * slot lock: trade it at once for a description of our own (so the
 * parent's death stays visible, and an unnamed private ledger stays
 * reachable: async-signal-safe, through /proc/self/fd), and re-initialise
 * lazily. Without /proc the descriptor is dropped and the path opened
 * later. An initialisation the parent had in progress (init_state 0, or
 * RUNNING on a set-up thread the child does not have) is the child's to
 * do again from where it started. */
static void on_fork_child(void)
{
    cs__mutex_reset(&init_mutex);
    cs__cond_reset(&init_settled);
    if (cs_rt.ledger.fd >= 0) {
        int own = cs__ledger_reopen_fd(cs_rt.ledger.fd, cs_rt.ledger.read_only ? O_RDONLY
                                                                               : O_RDWR);
        close(cs_rt.ledger.fd);
        cs_rt.ledger.fd = own;
    }
    cs_rt.ledger.slot = -1;
    if (init_state == INIT_READY)
        init_state = INIT_AFTER_FORK;
    else if (init_state == INIT_RUNNING)
        init_state = running_from;
    phases = (struct cushare_phases){.version = CUSHARE_PHASES_VERSION};
    cs__ledger_atfork_child();
    cs__gate_atfork_child();
    cs__fork_child_run();
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

static int private_ledger_path(char *out, size_t len)
{
    int rc = cs__user_dir("init", "/dev/shm", private_dir, sizeof private_dir);
    if (rc)
        return rc;
    snprintf(out, len, "%s/" PRIVATE_PREFIX "%d-%llx.ledger", private_dir, (int)getpid(),
             (unsigned long long)cs__now_ns());
    private_ledger = true;
    return 0;
}

/* Our slot is claimed: drop the name, then remove what dead processes
 * left in the directory (cheap: live private ledgers have no name). */
static void unname_private_ledger(void)
{
    int rc = cs__ledger_unname(&cs_rt.ledger);
    if (rc) {
        private_named = true;
        cs_debug("init", "private ledger %s keeps its name (%s): removed at exit",
                 cs_rt.ledger.path, strerror(-rc));
    }
    cs__ledger_sweep(private_dir, PRIVATE_PREFIX);
}

/* A ledger found by name (CUDA_DEVICE_MEMORY_SHARED_CACHE) is kept by us
 * for as long as this process has it open: no sweep may remove its name
 * between our open and our claim and let later processes of the tenant
 * make a second ledger beside ours (cushare run's ledgers are swept). A
 * remover that came first makes us open the name again (it then creates
 * the file anew); one at work right now holds the keep byte for a moment. */
static int open_shared_ledger(const char *path, const struct cs_ledger_params *params)
{
    for (int attempt = 0; attempt < 100; attempt++) {
        int rc = cs__ledger_open(path, params, false, &cs_rt.ledger);
        if (rc)
            return rc;
        rc = cs__ledger_keep(&cs_rt.ledger);
        if (rc == 0)
            return 0;
        cs__ledger_close(&cs_rt.ledger);
        if (rc != -EAGAIN && rc != -ESTALE) {
            cs_err("init", "cannot lock ledger %s: %s", path, strerror(-rc));
            return rc;
        }
        sched_yield();
    }
    cs_err("init", "ledger %s keeps being removed while it is opened", path);
    return -EAGAIN;
}

static int open_ledger(void)
{
    struct cs_ledger_params params;
    cs__ledger_params_from_config(&cs_rt.cfg, &params);
    char priv[128];
    const char *path = cs_rt.cfg.ledger_path;
    int rc;
    if (path[0]) {
        rc = open_shared_ledger(path, &params);
    } else {
        rc = private_ledger_path(priv, sizeof priv);
        if (!rc)
            rc = cs__ledger_open(priv, &params, false, &cs_rt.ledger);
    }
    if (rc)
        return rc;
    return cs__account_claim(&cs_rt.ledger);
}

/* Our slot is claimed: let the node view find the ledger, and drop a
 * private ledger's name. */
static void announce_ledger(void)
{
    cs__node_register(cs_rt.cfg.registry_path, cs_rt.ledger.path, cs_rt.ledger.fd,
                      cs_rt.ledger.hdr->created_ns);
    if (private_ledger)
        unname_private_ledger();
}

static int first_init(void)
{
    int rc = cs__config_from_env(&cs_rt.cfg);
    if (rc) {
        cs_err("init", "refusing to initialise CUDA with an invalid configuration (see above)");
        return rc;
    }
    rc = cs__real_load();
    if (rc)
        return rc;
    cs_rt.ledger.fd = -1;
    cs_rt.ledger.slot = -1;
    rc = open_ledger();
    cs__phase_mark(CS_PHASE_LEDGER_READY);
    if (rc) {
        cs_err("init", "no ledger, so no accounting: CUDA initialisation fails (fail closed)");
        return rc;
    }
    announce_ledger();
    /* HAMi's monitor must see every tenant it limits: no region, no CUDA. */
    rc = cs__account_open_region(&cs_rt.cfg, &cs_rt.ledger);
    if (rc) {
        cs_err("init", "HAMi region missing: CUDA initialisation fails (fail closed)");
        return rc;
    }
    return 0;
}

static int reinit_after_fork(void)
{
    int rc = cs__ledger_after_fork(&cs_rt.ledger);
    if (!rc)
        rc = cs__account_claim(&cs_rt.ledger);
    cs__phase_mark(CS_PHASE_LEDGER_READY);
    if (rc)
        cs_err("init", "fork child could not claim its own ledger slot: %s", strerror(-rc));
    return rc;
}

/* The set-up from state `from` (INIT_NONE or INIT_AFTER_FORK), by
 * whichever thread runs it; 0 or -errno. */
static int run_setup(int from)
{
    cs__phase_mark(CS_PHASE_SETUP_BEGIN);
    int rc = from == INIT_NONE ? first_init() : reinit_after_fork();
    cs__phase_mark(CS_PHASE_SETUP_END);
    return rc;
}

/* Makes a set-up's outcome the state every caller sees and wakes those
 * waiting for it. init_mutex held; returns the new state. */
static int publish(int rc)
{
    if (!rc && !exit_handler_installed) {
        exit_handler_installed = true;
        atexit(on_exit_leave);
    }
    int s = rc ? rc : INIT_READY;
    __atomic_store_n(&init_state, s, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&init_settled);
    return s;
}

/* The state once no set-up thread is at work. init_mutex held. */
static int settled_state(void)
{
    while (init_state == INIT_RUNNING)
        pthread_cond_wait(&init_settled, &init_mutex);
    return init_state;
}

int cs__init(void)
{
    int s = __atomic_load_n(&init_state, __ATOMIC_ACQUIRE);
    if (s == INIT_READY || s < 0)
        return s < 0 ? s : 0;
    pthread_once(&fork_once, register_fork_handler);
    pthread_mutex_lock(&init_mutex);
    s = settled_state();
    if (s == INIT_NONE || s == INIT_AFTER_FORK)
        s = publish(run_setup(s));
    pthread_mutex_unlock(&init_mutex);
    return s < 0 ? s : 0;
}

static void *setup_thread(void *arg)
{
    int rc = run_setup((int)(intptr_t)arg);
    pthread_mutex_lock(&init_mutex);
    publish(rc);
    pthread_mutex_unlock(&init_mutex);
    return NULL;
}

/* The set-up thread takes no signal but those its own instructions raise
 * (the ledger's SIGBUS guard among them; a blocked one would kill the
 * process): the application's handlers keep running on the application's
 * own threads, as they did before this thread existed. */
static bool spawn_setup(pthread_t *t, int from)
{
    static const int synchronous[] = {SIGBUS, SIGSEGV, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    sigset_t mask, old;
    sigfillset(&mask);
    for (size_t i = 0; i < sizeof synchronous / sizeof synchronous[0]; i++)
        sigdelset(&mask, synchronous[i]);
    pthread_sigmask(SIG_SETMASK, &mask, &old);
    int e = pthread_create(t, NULL, setup_thread, (void *)(intptr_t)from);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e)
        cs_debug("init", "no set-up thread (%s): setting up before the driver's cuInit",
                 strerror(e));
    return e == 0;
}

int cs__init_start(struct cs_init_job *job)
{
    job->started = false;
    int s = __atomic_load_n(&init_state, __ATOMIC_ACQUIRE);
    if (s == INIT_READY || s < 0)
        return s < 0 ? s : 0;
    pthread_once(&fork_once, register_fork_handler);
    /* The caller is about to call the driver. Without one, cs__init
     * fails the way it always has (configuration checked first). */
    if (cs__real_load())
        return cs__init();
    pthread_mutex_lock(&init_mutex);
    s = settled_state();
    if (s == INIT_NONE || s == INIT_AFTER_FORK) {
        running_from = s;
        __atomic_store_n(&init_state, INIT_RUNNING, __ATOMIC_RELAXED);
        job->started = spawn_setup(&job->thread, s);
        if (!job->started)
            s = publish(run_setup(s));
    }
    pthread_mutex_unlock(&init_mutex);
    return job->started || s >= 0 ? 0 : s;
}

int cs__init_finish(struct cs_init_job *job)
{
    if (job->started)
        pthread_join(job->thread, NULL);
    job->started = false;
    int s = __atomic_load_n(&init_state, __ATOMIC_ACQUIRE);
    return s < 0 ? s : 0;
}

CUresult cs__init_error(int err)
{
    (void)err;
    return CUDA_ERROR_NOT_INITIALIZED;
}

static void learn_device(int d, CUdevice dev)
{
    struct cs_device_info *di = &cs_rt.dev[d];
    size_t total = 0;
    if (cs_drv.cuDeviceGetUuid_v2 && cs_drv.cuDeviceGetUuid_v2(&di->uuid, dev) != CUDA_SUCCESS)
        return;
    if (cs_real.cuDeviceTotalMem_v2 && cs_real.cuDeviceTotalMem_v2(&total, dev) != CUDA_SUCCESS)
        return;
    di->physical_total = total;
    di->known = true;

    /* The first process to learn it publishes it for `cushare status`
     * and NVML views; a different device at the same index is warned. */
    cs__ledger_set_device_info(&cs_rt.ledger, d, (const uint8_t *)di->uuid.bytes, total);
}

void cs__init_devices(void)
{
    pthread_mutex_lock(&init_mutex);
    int n = 0;
    if (cs_rt.device_count == 0 && cs_drv.cuDeviceGetCount &&
        cs_drv.cuDeviceGetCount(&n) == CUDA_SUCCESS) {
        if (n > CS_MAX_DEVICES) {
            cs_warn("init", "%d devices visible; cushare manages the first %d", n, CS_MAX_DEVICES);
            n = CS_MAX_DEVICES;
        }
        for (int d = 0; d < n; d++) {
            CUdevice dev;
            if (cs_drv.cuDeviceGet && cs_drv.cuDeviceGet(&dev, d) == CUDA_SUCCESS)
                learn_device(d, dev);
        }
        __atomic_store_n(&cs_rt.device_count, n, __ATOMIC_RELEASE);
        cs__hami_set_devices(n);
    }
    pthread_mutex_unlock(&init_mutex);
}

int cs__current_device(void)
{
    CUdevice dev;
    if (!cs_drv.cuCtxGetDevice || cs_drv.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -1;
    return dev >= 0 && dev < CS_MAX_DEVICES ? (int)dev : -1;
}

uint64_t cs__current_context(void)
{
    CUcontext ctx = NULL;
    if (!cs_drv.cuCtxGetCurrent || cs_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return 0;
    return (uint64_t)(uintptr_t)ctx;
}

uint64_t cs__device_limit(int dev)
{
    return cs__ledger_limit(&cs_rt.ledger, dev);
}
