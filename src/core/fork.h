/*
 * Fork-child helpers. In a fork child only the forking thread exists: a
 * lock another thread of the parent held stays locked in the child's copy.
 * init.c's one fork handler calls every module's reset, and each reset uses
 * this to start its locks over.
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

#endif
