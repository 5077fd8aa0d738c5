/*
 * Start-up phase timestamps of the calling process, for the density
 * benchmark (`cushare bench init`) and diagnostics. libcushare.so exports
 * cushare_phases(); a worker looks it up with dlsym(RTLD_DEFAULT, ...) so
 * the same worker binary also runs without cushare.
 *
 * All times are CLOCK_MONOTONIC nanoseconds; 0 means "not reached".
 *
 * What the first intercepted cuInit does, and which stamp ends each part:
 *
 *   wrapper_enter   the wrapper entered
 *   driver_enter    the real driver resolved and the set-up started: the
 *                   driver's cuInit is called now
 *   real_init_done  the driver's cuInit returned
 *   joined          the set-up's outcome is in (waited for if it was still
 *                   running); then devices are learnt and cuInit returns
 *
 * The set-up (configuration, ledger, node registry, HAMi region) runs on a
 * thread of its own beside the driver's cuInit, so its stamps come after
 * wrapper_enter and before joined, in any order with driver_enter and
 * real_init_done:
 *
 *   setup_begin     the set-up thread began
 *   ledger_ready    ledger opened and slot claimed (or failed)
 *   setup_end       set-up finished: node registry and HAMi region too
 *                   (or failed)
 *
 * When the first intercepted call is not cuInit, or no thread can be
 * started, the set-up runs on the calling thread and the driver is called
 * after it: setup_end <= driver_enter. Before version 2 the set-up always
 * ran so, and only wrapper_enter, ledger_ready (then stamped after the
 * node registry too), real_init_done and the identity were stamped.
 */
#ifndef CUSHARE_PHASES_H
#define CUSHARE_PHASES_H

#include <stddef.h>
#include <stdint.h>

#define CUSHARE_PHASES_VERSION 2u
#define CUSHARE_PHASES_V1_SIZE 48u   /* sizeof version 1: up to lock_waits */

struct cushare_phases {
    uint32_t version;            /*  0 CUSHARE_PHASES_VERSION */
    uint32_t identity_tier;      /*  4 enum cs_identity_tier (include/cushare/ledger.h) */
    uint64_t wrapper_enter_ns;   /*  8 first intercepted cuInit entered */
    uint64_t ledger_ready_ns;    /* 16 ledger opened and slot claimed */
    uint64_t real_init_done_ns;  /* 24 the driver's cuInit returned */
    uint64_t identity_done_ns;   /* 32 identity tier decided (may be later, lazily) */
    uint64_t lock_waits;         /* 40 post-init lock waits (legacy probe only) */
    /* version 2 */
    uint64_t driver_enter_ns;    /* 48 the driver's cuInit called */
    uint64_t setup_begin_ns;     /* 56 set-up began */
    uint64_t setup_end_ns;       /* 64 set-up finished */
    uint64_t joined_ns;          /* 72 cuInit has the set-up's outcome */
};

_Static_assert(offsetof(struct cushare_phases, driver_enter_ns) == CUSHARE_PHASES_V1_SIZE,
               "version 2 only appends");
_Static_assert(sizeof(struct cushare_phases) == 80, "phases ABI");

/* Copies this process's phases into *out. The caller sets out->version to
 * the CUSHARE_PHASES_VERSION it was built with; the library fills in that
 * version's fields at most (0, as a version 1 caller left it, counts as 1)
 * and sets out->version to the version it filled in. */
typedef void (*cushare_phases_fn)(struct cushare_phases *out);
#define CUSHARE_PHASES_SYMBOL "cushare_phases"

#endif
