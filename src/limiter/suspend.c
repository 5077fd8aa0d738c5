/*
 * Suspend and resume (docs/limiter.md, "Suspend and resume"): the HAMi
 * signals that ask for them.
 *
 * Protocol: `cushare suspend LEDGER` stores CS_SUSPEND in run_request of
 * every live slot; `cushare resume` stores CS_RUN there and FUTEX_WAKEs
 * the word. Every intercepted call passes the gate (CS_ENTER,
 * src/hook/gate.c), which holds the thread while CS_SUSPEND stands. Work
 * already queued on the GPU finishes; nothing new is submitted.
 *
 * HAMi compatibility (opt-in, CUSHARE_HAMI_SIGNALS=1): SIGUSR2 suspends
 * and SIGUSR1 resumes the receiving process, as HAMi-core's handlers do.
 * The handlers are installed lazily at the first launch (never in a
 * constructor) with sigaction and chain to whatever the application had
 * installed before, keeping its sa_flags and sa_mask (the kernel applies
 * the installed handler's, ours): its SA_SIGINFO or plain handler is called
 * after ours;
 * SIG_IGN and SIG_DFL are never called as functions (in this mode the
 * signals are control signals, so they are consumed, not fatal). An
 * application that installs its own handler later replaces ours: its
 * choice wins. Without the opt-in, cushare installs no signal handler.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "limiter/internal.h"

#define SUBSYS "limiter"

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

/* ---- HAMi signals (opt-in) --------------------------------------------- */

static struct sigaction prev_usr1, prev_usr2;

static void chain(const struct sigaction *p, int sig, siginfo_t *si, void *uc)
{
    if (p->sa_flags & SA_SIGINFO) {
        if (p->sa_sigaction)
            p->sa_sigaction(sig, si, uc);
    } else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN && p->sa_handler) {
        p->sa_handler(sig);
    }
}

/* Async-signal-safe: atomic stores and the futex syscall only. */
static void on_signal(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    struct cs_ledger_slot *s = cs__lim_my_slot();
    if (s && sig == SIGUSR2) {
        __atomic_store_n(&s->run_request, (uint32_t)CS_SUSPEND, __ATOMIC_SEQ_CST);
    } else if (s && sig == SIGUSR1) {
        __atomic_store_n(&s->run_request, (uint32_t)CS_RUN, __ATOMIC_SEQ_CST);
        futex(&s->run_request, FUTEX_WAKE, INT32_MAX, NULL);
    }
    errno = saved;
    chain(sig == SIGUSR1 ? &prev_usr1 : &prev_usr2, sig, si, uc);
    errno = saved;
}

static bool is_function(const struct sigaction *a)
{
    return (a->sa_flags & SA_SIGINFO) ? a->sa_sigaction != NULL
                                      : a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

/* The kernel delivers with the installed handler's flags and mask, so ours
 * must carry the application's: SA_RESTART or not (whether its blocking
 * calls see EINTR), SA_ONSTACK, SA_NODEFER, SA_RESETHAND, and the signals
 * its handler runs with blocked. We add only SA_SIGINFO, which on_signal
 * needs (chain() calls the application's handler the way it asked). With
 * no application handler: SA_RESTART and an empty mask, so that a control
 * signal disturbs nothing. */
static void ours_over(const struct sigaction *app, struct sigaction *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sa_sigaction = on_signal;
    if (is_function(app)) {
        sa->sa_flags = app->sa_flags | SA_SIGINFO;
        sa->sa_mask = app->sa_mask;
    } else {
        sa->sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa->sa_mask);
    }
}

/* *prev is complete before our handler can run. If another thread changed
 * the disposition between the read and our install, what we replaced is
 * that newer one: chain to it and take its settings instead. */
static void install(int sig, struct sigaction *prev)
{
    struct sigaction sa, replaced;
    sigaction(sig, NULL, prev);
    ours_over(prev, &sa);
    sigaction(sig, &sa, &replaced);
    if (replaced.sa_sigaction != prev->sa_sigaction || replaced.sa_flags != prev->sa_flags) {
        *prev = replaced;
        ours_over(prev, &sa);
        sigaction(sig, &sa, NULL);
    }
}

void cs__suspend_install_signals(void)
{
    static int done; /* once per process image: handlers survive fork */
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    if (!cs__config()->hami_signals)
        return;
    install(SIGUSR1, &prev_usr1);
    install(SIGUSR2, &prev_usr2);
    cs_info(SUBSYS, "HAMi signals on: SIGUSR2 suspends, SIGUSR1 resumes (chained to the "
            "application's handlers)");
}
