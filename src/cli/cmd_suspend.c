/*
 * `cushare suspend LEDGER` and `cushare resume LEDGER` (docs/limiter.md,
 * "Suspend and resume"). suspend stores CS_SUSPEND in run_request of every
 * live slot; each process parks at its next intercepted CUDA call and sets
 * run_state while parked. The command then waits (--timeout, default 5 s)
 * until every live process is parked and reports how many are. resume
 * stores CS_RUN and wakes the parked threads with FUTEX_WAKE on the word
 * they wait on (the ledger is MAP_SHARED, so the futex is shared).
 *
 * Exit status: 0 when every live process reached the requested state, 1
 * when the timeout passed first (the request stays in place: a process
 * busy on the CPU parks at its next CUDA call), 2 on usage errors.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/clock.h"
#include "core/config.h"
#include "ledger/ledger.h"

static const char suspend_usage[] =
    "usage: cushare suspend [--timeout SEC] [--no-wait] [LEDGER]\n"
    "       cushare resume [--timeout SEC] [--no-wait] [LEDGER]\n"
    "  Pauses (resumes) every process of the tenant at its next GPU call.\n"
    "  LEDGER defaults to $CUDA_DEVICE_MEMORY_SHARED_CACHE.\n"
    "  --timeout  how long to wait for the processes (default 5)\n"
    "  --no-wait  set the request and return at once\n"
    "examples:\n"
    "  cushare suspend /tmp/team-a.ledger   (each process stops at its next GPU call)\n"
    "  cushare resume /tmp/team-a.ledger\n";

static int64_t now_ms(void)
{
    return cs__now_ns() / 1000000;
}

/* Live slots (owner alive) and how many of them are parked. */
static void count(const struct cs_ledger *l, int *live, int *parked)
{
    *live = *parked = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        if (!cs__ledger_slot_alive(l, i))
            continue;
        (*live)++;
        if (__atomic_load_n(&cs__ledger_slot(l, i)->run_state, __ATOMIC_ACQUIRE) == 1)
            (*parked)++;
    }
}

static int set_all(struct cs_ledger *l, uint32_t req)
{
    int n = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++) {
        struct cs_ledger_slot *s = cs__ledger_slot(l, i);
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != CS_SLOT_LIVE)
            continue;
        __atomic_store_n(&s->run_request, req, __ATOMIC_SEQ_CST);
        if (req == CS_RUN)
            syscall(SYS_futex, &s->run_request, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
        n++;
    }
    return n;
}

static int run(int argc, char **argv, bool suspend)
{
    const char *cmd = suspend ? "suspend" : "resume";
    static const struct option opts[] = {
        {"timeout", required_argument, NULL, 't'},
        {"no-wait", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long timeout = 5;
    bool wait = true;
    int c;
    optind = 1;
    opterr = 0; /* our messages, with "did you mean" */
    while ((c = getopt_long(argc, argv, "+t:nh", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (cs__parse_int(optarg, 0, 86400, &timeout))
                return cs_cli_usage_error(cmd, "--timeout '%s' is not whole seconds from 0 to "
                                          "86400; e.g. --timeout 10", optarg);
            break;
        case 'n':
            wait = false;
            break;
        case 'h':
            fputs(suspend_usage, stdout);
            return CS_EXIT_OK;
        default:
            return cs_cli_unknown_option(cmd, argv[optind - 1], suspend_usage);
        }
    }
    struct cs_ledger l;
    int orc = cs_cli_open_ledger_rw(cmd, argc, argv, optind, &l);
    if (orc != CS_EXIT_OK)
        return orc;
    const char *path = l.path;
    int n = set_all(&l, suspend ? CS_SUSPEND : CS_RUN);
    int live = 0, parked = 0, rc = CS_EXIT_OK;
    const int64_t deadline = now_ms() + timeout * 1000;
    for (;;) {
        count(&l, &live, &parked);
        bool done = suspend ? parked >= live : parked == 0;
        if (done || !wait || now_ms() >= deadline) {
            if (!done && wait)
                rc = CS_EXIT_FAIL;
            break;
        }
        /* A process that joined since: give it the request too. */
        if (suspend)
            set_all(&l, CS_SUSPEND);
        struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (suspend)
        printf("suspend %s: %d of %d processes parked%s\n", path, parked, live,
               rc ? " (the rest park at their next GPU call; the request stays)" : "");
    else
        printf("resume %s: %d processes released, %d still parked\n", path, n, parked);
    cs__ledger_close(&l);
    return rc;
}

int cs_cmd_suspend(int argc, char **argv)
{
    return run(argc, argv, true);
}

int cs_cmd_resume(int argc, char **argv)
{
    return run(argc, argv, false);
}
