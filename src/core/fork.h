/*
 * Fork-child helpers. In a fork child only the forking thread exists: a
 * lock another thread of the parent held stays locked in the child's copy.
 * hook/init.c's one fork handler resets the ledger handle, then calls the
 * resets the modules above it registered (CS_FORK_CHILD_RESET), in their
 * stated order; each reset uses cs__mutex_reset to start its locks over.
 * Registration happens in a constructor, before any thread or lock of the
 * library exists (it touches nothing but a static table), so no lock can
 * be taken whose reset is not registered yet; and src/hook needs no
 * knowledge of the modules built on it.
 */
#ifndef CS_CORE_FORK_H
#define CS_CORE_FORK_H

#include <pthread.h>
#include <string.h>

/* Puts `m` back in its initial, unlocked state by copying a fresh
 * initialiser: nothing a fork handler should not call, whatever state the
 * parent's threads left it in. Also fine for a mutex never used. */
static inline void cs__mutex_reset(pthread_mutex_t *m)
{
    static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(m, &fresh, sizeof fresh);
}

/* The same for a condition variable: waiters of the parent are not the
 * child's (only the forking thread exists there). */
static inline void cs__cond_reset(pthread_cond_t *c)
{
    static const pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
    memcpy(c, &fresh, sizeof fresh);
}

/* Order of the registered resets: mem's before the limiter's, as they ran
 * when init.c named them (neither reads the other's state). */
enum cs_fork_order { CS_FORK_MEM = 1, CS_FORK_LIMITER = 2 };

typedef void (*cs_fork_child_fn)(void);

/* Registers `fn` to run in a fork child. Constructor time only. */
void cs__fork_child_register(cs_fork_child_fn fn, enum cs_fork_order order);

/* Runs the registered resets in order (hook/init.c's handler, in the child). */
void cs__fork_child_run(void);

/* In the module's file that defines `fn`: registers it at load time. */
#define CS_FORK_CHILD_RESET(fn, order)                                            \
    __attribute__((constructor)) static void cs_fork_register_##fn(void)          \
    {                                                                             \
        cs__fork_child_register(fn, order);                                       \
    }

#endif
