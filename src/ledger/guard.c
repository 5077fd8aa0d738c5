/*
 * What happens when a ledger is truncated, or its header overwritten, under
 * a live process (docs/ledger.md, "A ledger damaged in use").
 *
 * Every process of a tenant maps the ledger MAP_SHARED: admission is a
 * compare-and-swap across processes, which needs shared memory. Whoever
 * can write the file (its owner, root) can truncate it, and then every
 * access beyond the new end raises SIGBUS, whose default action kills the
 * host program. Nothing can forbid the truncation (seals exist only for
 * memfds), so we make it survivable, the way the JVM turns SIGBUS in a
 * mapped buffer into an exception:
 *
 *   - One SIGBUS handler, installed when the first ledger is mapped. A
 *     fault inside a registered ledger mapping replaces that whole mapping
 *     with private anonymous memory holding the header as it was validated
 *     at open and every device's `used` set to its limit (views then say
 *     "nothing free", which is what admission will answer), marks the
 *     ledger lost and writes one line naming the file and the fix. The
 *     faulting instruction then completes on the private copy.
 *   - Every other SIGBUS goes to the handler the application had before
 *     ours (SA_SIGINFO or plain), else to the default action: a real fault
 *     still kills with SIGBUS and a core at the faulting instruction.
 *   - A header overwritten in place (zeros after truncate-and-extend,
 *     garbage) faults nothing; the ledger functions check the magic and
 *     lose the mapping the same way.
 *   - A lost ledger refuses every charge, claim and reap with
 *     -ENOTRECOVERABLE (so every further allocation fails: fail closed,
 *     never admitted against counters that no longer exist) and ignores
 *     releases. The process keeps running and keeps what it has.
 *
 * An application that installs its own SIGBUS handler after us replaces
 * ours: its choice wins, and a truncated ledger is then its fault to
 * handle, as before.
 *
 * Concurrency: registration and removal take guard_mu (never taken in the
 * handler). The handler reads a registration's fields only after loading
 * its `base` with acquire, which add() stores last with release. `state`
 * goes 0 -> 1 (one thread replacing) -> 2 (lost) or 3 (could not replace),
 * by compare-and-swap, so one thread replaces and one message is written;
 * others wait for 2 or 3.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/fork.h"
#include "core/log.h"
#include "ledger/ledger.h"

#define SUBSYS "ledger"
#define CS_GUARD_MAX 8          /* ledgers one process maps at once */
/* Registrations kept for shared mappings that are not ledgers (the node
 * board's launch stamps: one per open board, a process opens one), apart
 * from the ledgers': a process that maps many ledgers at once (making
 * room on a full GPU maps every tenant's) must not leave the stamps, which
 * every launch may store into, unguarded. */
#define CS_GUARD_PLAIN 4
#define CS_GUARD_SLOTS (CS_GUARD_MAX + CS_GUARD_PLAIN)
#define CS_GUARD_HEAD 1024      /* the header's immutable part: limits, sizes */

enum { GUARD_MAPPED, GUARD_REPLACING, GUARD_LOST, GUARD_FAILED };

struct cs_ledger_guard {
    uintptr_t base;                 /* 0: entry free; stored last (release) */
    size_t len;
    int state;                      /* GUARD_*, compare-and-swap */
    bool plain;                     /* not a ledger: becomes zeros */
    bool said;                      /* plain: msg written once (handler only) */
    uint8_t head[CS_GUARD_HEAD];    /* header bytes as validated at open */
    char msg[PATH_MAX + 512];       /* the line the handler writes */
    size_t msg_len;
};

static struct cs_ledger_guard guards[CS_GUARD_SLOTS];
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static bool handler_installed;      /* under guard_mu */
static struct sigaction previous;   /* the application's SIGBUS action, under guard_mu */

static struct cs_ledger_guard *guard_at(uintptr_t addr)
{
    for (int i = 0; i < CS_GUARD_SLOTS; i++) {
        uintptr_t base = __atomic_load_n(&guards[i].base, __ATOMIC_ACQUIRE);
        if (base && addr - base < guards[i].len)
            return &guards[i];
    }
    return NULL;
}

enum replaced { REPLACED_BY_US, REPLACED_ALREADY, REPLACE_FAILED };

/* Swaps the shared mapping for a private one that keeps the limits and
 * admits nothing. Async-signal-safe. Whoever finds it first replaces it
 * (and says so); the others wait until the range is usable again. */
static enum replaced replace_mapping(struct cs_ledger_guard *g)
{
    int expect = GUARD_MAPPED;
    if (!__atomic_compare_exchange_n(&g->state, &expect, GUARD_REPLACING, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        while ((expect = __atomic_load_n(&g->state, __ATOMIC_ACQUIRE)) == GUARD_REPLACING)
            sched_yield();
        return expect == GUARD_LOST ? REPLACED_ALREADY : REPLACE_FAILED;
    }
    void *m = mmap((void *)g->base, g->len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m == MAP_FAILED) {
        __atomic_store_n(&g->state, GUARD_FAILED, __ATOMIC_RELEASE);
        return REPLACE_FAILED;
    }
    if (!g->plain) {
        memcpy(m, g->head, sizeof g->head);
        struct cs_ledger_header *h = m;
        for (int d = 0; d < CS_MAX_DEVICES; d++)
            h->dev[d].used = h->limit[d];
    }
    __atomic_store_n(&g->state, GUARD_LOST, __ATOMIC_RELEASE);
    return REPLACED_BY_US;
}

/* Hands a SIGBUS that is not about a ledger to whoever had it before. */
static void chain(int sig, siginfo_t *si, void *uc)
{
    if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
        previous.sa_sigaction(sig, si, uc);
        return;
    }
    void (*h)(int) = previous.sa_handler;
    bool sent = si->si_code <= 0; /* kill(2), raise(3): not a fault */
    if (h == SIG_IGN && sent)
        return;
    if (h == SIG_DFL || h == SIG_IGN) {
        /* Default action: a fault faults again when we return, a sent
         * signal is pending until then. Either way the process dies as
         * it would have without us. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGBUS, &dfl, NULL);
        if (sent)
            raise(SIGBUS);
        return;
    }
    h(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    struct cs_ledger_guard *g = si->si_code > 0 ? guard_at((uintptr_t)si->si_addr) : NULL;
    enum replaced r = g ? replace_mapping(g) : REPLACE_FAILED;
    /* A plain mapping is mapped again by its owner and may be lost again
     * (a file truncated over and over): said once. */
    bool say = r == REPLACED_BY_US && g->msg_len && !(g->plain && g->said);
    if (say && write(STDERR_FILENO, g->msg, g->msg_len) < 0) {
        /* stderr is gone: nothing more can be said */
    }
    if (say)
        g->said = true;
    errno = saved;
    if (r == REPLACE_FAILED)
        chain(sig, si, uc);
}

static void install_handler_locked(void)
{
    if (handler_installed)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK; /* SA_ONSTACK: Go-runtime hosts require it */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &previous) == 0)
        handler_installed = true;
    else
        cs_warn(SUBSYS, "cannot install the SIGBUS guard (%s): a ledger truncated in use "
                "will kill this process", strerror(errno));
}

/* A free registration of the kind asked for (ledger or plain), with the
 * handler installed, or NULL (guard_mu held). */
static struct cs_ledger_guard *slot_locked(size_t len, bool plain)
{
    install_handler_locked();
    for (int i = plain ? CS_GUARD_MAX : 0; i < (plain ? CS_GUARD_SLOTS : CS_GUARD_MAX); i++)
        if (!guards[i].base) {
            guards[i].len = len;
            guards[i].state = GUARD_MAPPED;
            guards[i].plain = plain;
            guards[i].said = false;
            return &guards[i];
        }
    return NULL;
}

struct cs_ledger_guard *cs__ledger_guard_add_plain(void *base, size_t len, const char *msg)
{
    pthread_mutex_lock(&guard_mu);
    struct cs_ledger_guard *g = slot_locked(len, true);
    if (g) {
        int n = snprintf(g->msg, sizeof g->msg, "%s\n", msg);
        g->msg_len = n > 0 && (size_t)n < sizeof g->msg ? (size_t)n : 0;
        __atomic_store_n(&g->base, (uintptr_t)base, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&guard_mu);
    return g;
}

struct cs_ledger_guard *cs__ledger_guard_add(void *base, size_t len, const char *path)
{
    pthread_mutex_lock(&guard_mu);
    struct cs_ledger_guard *g = slot_locked(len, false);
    if (g) {
        memcpy(g->head, base, sizeof g->head);
        int n = snprintf(g->msg, sizeof g->msg,
                         "cushare: %s: error: ledger %s was truncated while in use: this "
                         "process's accounting is gone, so it refuses every further "
                         "allocation (fail closed); restart the tenant's processes, and never "
                         "truncate, replace or edit the ledger of a running tenant\n",
                         SUBSYS, path);
        g->msg_len = n > 0 && (size_t)n < sizeof g->msg ? (size_t)n : 0;
        __atomic_store_n(&g->base, (uintptr_t)base, __ATOMIC_RELEASE);
    } else {
        cs_debug(SUBSYS, "ledger %s: more than %d ledgers mapped, this one unguarded", path,
                 CS_GUARD_MAX);
    }
    pthread_mutex_unlock(&guard_mu);
    return g;
}

void cs__ledger_guard_remove(struct cs_ledger_guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&guard_mu);
    __atomic_store_n(&g->base, (uintptr_t)0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&guard_mu);
}

bool cs__ledger_guard_lost(const struct cs_ledger_guard *g)
{
    return g && __atomic_load_n(&g->state, __ATOMIC_ACQUIRE) != GUARD_MAPPED;
}

bool cs__ledger_guard_replaced(const struct cs_ledger_guard *g)
{
    return g && __atomic_load_n(&g->state, __ATOMIC_ACQUIRE) == GUARD_LOST;
}

void cs__ledger_guard_rearm(struct cs_ledger_guard *g)
{
    int lost = GUARD_LOST;
    if (g && g->plain)
        __atomic_compare_exchange_n(&g->state, &lost, GUARD_MAPPED, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
}

bool cs__ledger_usable(const struct cs_ledger *l)
{
    if (!l->hdr || cs__ledger_guard_lost(l->guard))
        return false;
    const struct cs_ledger_header *h = l->hdr;
    bool intact = !memcmp(h->magic, CS_LEDGER_MAGIC, sizeof h->magic) &&
                  h->version == CS_LEDGER_VERSION && h->header_size == CS_LEDGER_HEADER_SIZE &&
                  h->slot_count == CS_LEDGER_SLOTS;
    /* Reading the header may itself have faulted and lost the mapping. */
    if (cs__ledger_guard_lost(l->guard))
        return false;
    if (intact)
        return true;
    /* Overwritten in place: zeros after a truncate-and-extend, garbage. */
    static unsigned unguarded_said; /* a ledger beyond CS_GUARD_MAX: say it once */
    bool say = l->guard ? replace_mapping(l->guard) == REPLACED_BY_US
                        : __atomic_fetch_add(&unguarded_said, 1, __ATOMIC_RELAXED) == 0;
    if (say)
        cs_err(SUBSYS, "ledger %s was overwritten while in use (its header is no longer a "
               "ledger's): this process's accounting is gone, so it refuses every further "
               "allocation (fail closed); restart the tenant's processes, and never "
               "truncate, replace or edit the ledger of a running tenant", l->path);
    return false;
}

void cs__ledger_guard_atfork_child(void)
{
    cs__mutex_reset(&guard_mu);
}
