/*
 * Process-wide state of the interposer, owned by src/hook/init.c (static
 * there) and handed out read-only through the accessors below: the
 * configuration, the ledger handle and what we learnt about devices.
 *   - All of it is written during initialisation (by the one thread
 *     initialising: under init.c's mutex, or on its set-up thread while
 *     the state says so, before the ready state is published with release
 *     ordering) and read-only afterwards; a caller past cs__init() may
 *     read it without a lock.
 *   - The ledger's own shared fields are changed only through src/ledger.
 *   - A fork child's handler re-opens the ledger descriptor and drops the
 *     slot; the child initialises again on its next CUDA call.
 * Contexts are src/mem/ctx.c's own state, not kept here.
 */
#ifndef CS_HOOK_RUNTIME_H
#define CS_HOOK_RUNTIME_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/config.h"
#include "hook/drv.h"

struct cs_ledger;
struct cs_ledger_slot;

struct cs_device_info {
    bool known;                  /* uuid/physical_total valid */
    CUuuid uuid;
    uint64_t physical_total;
};

/* The configuration parsed by cs__init. */
const struct cs_config *cs__config(void);

/* The process's ledger handle (opened, slot claimed, by cs__init). Pass it
 * to src/ledger's functions; do not write its fields. */
struct cs_ledger *cs__ledger(void);

/* How many devices cs__init_devices learnt (0 before it ran). */
int cs__device_count(void);

/* What cs__init_devices learnt of ledger device `d` (0 <= d <
 * CS_MAX_DEVICES); `known` false until then. */
const struct cs_device_info *cs__device_info(int d);

/* Initialises once per process (and again in a fork child): parses the
 * configuration, loads the driver, opens the ledger and claims a slot.
 * Never touches the GPU. 0, or the sticky -errno of a failed attempt.
 * Waits for a set-up another thread started (cs__init_start). */
int cs__init(void);

/* cuInit's initialisation, overlapped with the driver's cuInit. start
 * loads the driver (so cs_real.cuInit may be called as soon as it
 * returns 0) and runs the rest of cs__init on a set-up thread; finish
 * waits for that thread and answers what cs__init would have. A set-up
 * that fails leaves the sticky error, as cs__init's does, for finish and
 * for every later caller. Without a thread, start does all of it itself.
 * finish must follow every start that returned 0, on the same thread. */
struct cs_init_job {
    pthread_t thread;
    bool started;                /* thread is to be joined */
};
int cs__init_start(struct cs_init_job *job);
int cs__init_finish(struct cs_init_job *job);

/* After the real cuInit succeeded: learns device UUIDs and totals. */
void cs__init_devices(void);

/* CUresult for a failed cs__init (fail closed: CUDA stays unusable). */
CUresult cs__init_error(int err);

/* Ledger device index of the calling thread's current context, or -1. */
int cs__current_device(void);

/* The calling thread's current context as a record key, 0 if none. */
uint64_t cs__current_context(void);

/* Start-up phases (include/cushare/phases.h says what each one ends). */
enum cs_phase {
    CS_PHASE_WRAPPER_ENTER,
    CS_PHASE_DRIVER_ENTER,
    CS_PHASE_SETUP_BEGIN,
    CS_PHASE_LEDGER_READY,
    CS_PHASE_SETUP_END,
    CS_PHASE_REAL_INIT_DONE,
    CS_PHASE_JOINED,
    CS_PHASE_IDENTITY_DONE,
};
void cs__phase_mark(enum cs_phase p);
void cs__phase_identity(uint32_t tier, uint64_t lock_waits);

/* Effective budget of ledger device `dev` (0 = none). */
uint64_t cs__device_limit(int dev);

/* Common prologue of every wrapper: initialise (fail closed), then pass
 * the gate (gate.c): honour a suspend request, wake the tenant if it is
 * parked off the GPU, and count the thread as inside a call until the
 * wrapper returns (the cleanup runs after the return value is computed),
 * so a parker never locks a process while one of its threads is between
 * the gate and the driver. `real` NULL means the driver lacks the symbol.
 * A statement at the top of a wrapper's block, once per block. */
#define CS_ENTER(sym)                                                         \
    do {                                                                      \
        int cs_rc_ = cs__init();                                              \
        if (cs_rc_)                                                           \
            return cs__init_error(cs_rc_);                                    \
        if (!cs_real.sym)                                                     \
            return CUDA_ERROR_NOT_FOUND;                                      \
    } while (0);                                                              \
    struct cs_ledger_slot *cs_gate_ __attribute__((cleanup(cs__gate_leave), unused)) = \
        cs__gate_enter()

/* The gate (gate.c): returns the slot the thread is counted in (NULL when
 * the process has none); cs__gate_leave uncounts it. */
struct cs_ledger_slot *cs__gate_enter(void);
void cs__gate_leave(struct cs_ledger_slot **counted);

/* Suspend holds the gate made since start (or since fork), for the
 * limiter's counters. */
uint64_t cs__gate_suspend_holds(void);

/* Fork child: nobody is held, no waker runs (the one fork handler). */
void cs__gate_atfork_child(void);

/* The device is out of physical memory for `bytes` within the budget: with
 * parking on (CUSHARE_PARK), parks idle tenants of the node to free it
 * (gate.c, docs/parking.md). 0 when it did (retry the driver), -errno
 * once nothing more can be parked before *deadline_ns (0 on the first
 * call: set to now plus the wait). Callers retry in a loop while it says
 * 0: what it freed may be taken by another tenant before the retry. */
int cs__park_make_room_for(uint64_t bytes, int64_t *deadline_ns);

#endif
