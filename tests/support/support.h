/*
 * The one helper library of the tests (libcs_test_support.a, linked into
 * every test executable): clocks, deadlines scaled by CS_TEST_SCALE,
 * waiting for conditions and children, start gates for processes and
 * threads, visible skips, scratch directories.
 *
 * Rules every test follows (docs/testing.md): synchronise on conditions
 * (a gate, a pipe, a counter, the ledger), never on a sleep; every
 * deadline goes through cs_deadline_ns, so CS_TEST_SCALE stretches it on a
 * slow or crowded machine; a test that cannot run says why and exits
 * CS_TEST_SKIP (CTest SKIP_RETURN_CODE 77), never 0.
 */
#ifndef CS_TESTS_SUPPORT_H
#define CS_TESTS_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/types.h>

#define CS_TEST_SKIP 77

/* CS_TEST_SCALE (default 1, must be > 0): multiplies every deadline. */
double cs_test_scale(void);

/* CLOCK_MONOTONIC. */
int64_t cs_now_ns(void);
double cs_ms_since(int64_t t0_ns);

/* Now plus `ms` milliseconds times CS_TEST_SCALE. */
int64_t cs_deadline_ns(double ms);

/* Pacing only (sampling windows, back-off): never to wait for another
 * thread or process to reach a point; use a gate or cs_wait_until. */
void cs_sleep_ms(double ms);

/* Polls cond(arg) every millisecond until it holds (returns true) or the
 * scaled deadline of `ms` passes (returns false). */
bool cs_wait_until(bool (*cond)(void *), void *arg, double ms);

/* Statement form: fails the test, naming `what`, if `cond` does not hold
 * within the scaled `ms`. */
#define CS_WAIT_FOR(cond, ms, what)                                                   \
    do {                                                                              \
        int64_t dl_ = cs_deadline_ns(ms);                                             \
        while (!(cond)) {                                                             \
            if (cs_now_ns() > dl_) {                                                  \
                fprintf(stderr, "%s:%d: waited %.0f ms (x%g) for %s: %s\n", __FILE__, \
                        __LINE__, (double)(ms), cs_test_scale(), what, #cond);        \
                exit(1);                                                              \
            }                                                                         \
            cs_sleep_ms(1);                                                           \
        }                                                                             \
    } while (0)

/* Prints "SKIPPED: <why>" and exits CS_TEST_SKIP. */
__attribute__((noreturn, format(printf, 1, 2))) void cs_skip(const char *fmt, ...);

/* Skips (visibly) unless running as root; `why` says what needs root. */
void cs_require_root(const char *why);

/* fork() whose child dies with its parent: a failing test must not leave
 * helpers blocked on locks or sockets (they would also hold CTest's
 * output pipe open until the timeout). */
pid_t cs_fork_tied(void);

/* fork + execv of `argv[0]` with `env` ("K=V", NULL-terminated, may be
 * NULL) added to the environment; stdout/stderr inherited. */
pid_t cs_spawn(char *const argv[], char *const env[]);

/* Runs argv (execvp: PATH is searched, no shell) to completion, stdout
 * sent to /dev/null if quiet; returns cs_exit_code of it (127: could not
 * run). */
int cs_run(char *const argv[], bool quiet);

/* For a process whose rate a test measures (a paced GPU worker): asks for
 * nice -10, so that CPU hogs beside the suite cannot starve it and turn
 * "the limiter held it back" into "the scheduler did". Needs root
 * (CAP_SYS_NICE); without it the process keeps its priority and says so
 * once on stderr. pid 0: the caller. */
void cs_prefer_cpu(pid_t pid);

/* Waits for `pid` at most the scaled `ms`; on expiry kills it, reaps it and
 * returns -1. Otherwise the raw wait status. */
int cs_wait_child(pid_t pid, double ms);

/* Exit code of a raw status, 128+signal if killed, -1 for cs_wait_child's
 * timeout. */
int cs_exit_code(int status);

/* Fails the test unless `pid` exits 0 within the scaled `ms`. */
void cs_wait_ok(pid_t pid, double ms);

/* Reads exactly len bytes; fails the test at EOF, on error or after the
 * scaled `ms`. */
void cs_read_full(int fd, void *buf, size_t len, double ms);

/* Anonymous shared memory, zeroed, visible to forked children. */
void *cs_shared(size_t len);

/* Removes a directory tree (not crossing mounts); missing is fine. */
void cs_rmtree(const char *dir);

/*
 * A start gate for processes: n children each call cs_gate_arrive (after
 * whatever set-up must precede the race) and block there; the parent calls
 * cs_gate_open, which first waits, bounded, until all n have arrived and
 * then releases them at once. So "they overlap" is no longer a hope: every
 * participant is at the line before any of them starts.
 * Make it before forking. A child that forks again before arriving calls
 * cs_gate_child first, so that no copy of the parent's ends outlives it.
 */
struct cs_gate {
    int arrived[2];                     /* children write one byte each */
    int go[2];                          /* parent closes go[1]: EOF releases */
};
void cs_gate_init(struct cs_gate *g);
void cs_gate_child(struct cs_gate *g);             /* drops the parent's ends */
void cs_gate_arrive(struct cs_gate *g);            /* in a child */
void cs_gate_open(struct cs_gate *g, int n, double ms);   /* in the parent */

/* Waits (scaled `ms`) until thread or process `id` sleeps in the kernel
 * (state S or D in /proc/<id>/stat): e.g. blocked on a contended lock.
 * Meaningful only where the caller knows that nothing else on the way
 * sleeps. Fails the test on expiry. */
void cs_wait_blocked(pid_t id, double ms);

#endif
