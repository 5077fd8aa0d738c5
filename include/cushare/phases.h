/*
 * Start-up phase timestamps of the calling process, for the density
 * benchmark (`cushare bench init`) and diagnostics. libcushare.so exports
 * cushare_phases(); a worker looks it up with dlsym(RTLD_DEFAULT, ...) so
 * the same worker binary also runs without cushare.
 *
 * All times are CLOCK_MONOTONIC nanoseconds; 0 means "not reached".
 */
#ifndef CUSHARE_PHASES_H
#define CUSHARE_PHASES_H

#include <stdint.h>

#define CUSHARE_PHASES_VERSION 1u

struct cushare_phases {
    uint32_t version;            /* CUSHARE_PHASES_VERSION */
    uint32_t identity_tier;      /* enum cs_identity_tier (include/cushare/ledger.h) */
    uint64_t wrapper_enter_ns;   /* first intercepted cuInit entered */
    uint64_t ledger_ready_ns;    /* ledger opened and slot claimed */
    uint64_t real_init_done_ns;  /* the driver's cuInit returned */
    uint64_t identity_done_ns;   /* identity tier decided (may be later, lazily) */
    uint64_t lock_waits;         /* post-init lock waits (legacy probe only) */
};

/* Copies this process's phases into *out (sizeof checked by version). */
typedef void (*cushare_phases_fn)(struct cushare_phases *out);
#define CUSHARE_PHASES_SYMBOL "cushare_phases"

#endif
