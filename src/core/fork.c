/*
 * The table of fork-child resets (fork.h). Written only by constructors,
 * which run one at a time before the library can be called; read only by
 * the fork handler. No lock.
 */
#include "core/fork.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_RESETS 8

static struct {
    cs_fork_child_fn fn;
    enum cs_fork_order order;
} resets[MAX_RESETS];
static int nresets;

void cs__fork_child_register(cs_fork_child_fn fn, enum cs_fork_order order)
{
    if (nresets == MAX_RESETS) {
        /* A build error in effect: a reset that cannot run would leave a
         * lock held in every fork child. */
        fputs("cushare: fork: too many fork-child resets (raise MAX_RESETS)\n", stderr);
        abort();
    }
    int i = nresets++;
    for (; i > 0 && resets[i - 1].order > order; i--)
        resets[i] = resets[i - 1];
    resets[i].fn = fn;
    resets[i].order = order;
}

void cs__fork_child_run(void)
{
    for (int i = 0; i < nresets; i++)
        resets[i].fn();
}
