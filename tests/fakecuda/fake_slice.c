/*
 * TEST TOOL (tests/fakecuda), never shipped: a time-slicing GPU
 * (FAKECUDA_TIMESLICE_US), in the fake libcuda.so.1 and libnvidia-ml.so.1.
 *
 * A real GPU without MPS runs one context at a time. A context that holds
 * the device keeps it while it has work, until its time slice expires and
 * another context has work waiting; then the device switches (paying
 * FAKECUDA_CTX_SWITCH_US) to the context whose oldest waiting work is
 * oldest. So two contexts that both keep work queued get about half the
 * device each, whatever their queue depths, and when a piece of work
 * completes depends on what the others submit after it. The first-come,
 * first-served timeline (fake_common.c) fixes every completion time at
 * submit and cannot show that.
 *
 * Model: each device keeps the queued work of every process in one ring
 * (struct fakecuda_slice_item; a process's work runs in submission order,
 * all its streams together, as the FIFO timeline does too). Nothing is
 * timed at submit: whoever needs a time (a query, a synchronisation, a
 * new submission, NVML) first simulates the device up to now
 * (fc_slice_advance_locked), deterministically, so the outcome does not
 * depend on when anybody looks. A submission returns a token, not a time
 * (FC_SLICE_TOKEN | seq): a stream's tail and an event's timestamp hold
 * it until the item completed, and a token compares greater than any
 * time, so "still running" needs no special case in the callers.
 *
 * An event record is an item of no length: it completes when its context
 * next holds the device, so a start marker recorded behind another
 * context's slice is written when ours begins, and a pair around a kernel
 * that a slice boundary cuts spans the other context's slice, as on the
 * GPU. The device holds at most FAKECUDA_SLICE_ITEMS queued items; a
 * submission beyond that waits, as a full push buffer does.
 *
 * Not modelled: MPS clients (their devices keep the FIFO timeline; a
 * device must not mix both), the power model's clock (work is timed at
 * the clock of its submission, as in the FIFO model).
 */
#define _GNU_SOURCE
#include <stdint.h>

#include "fake_internal.h"

#define SLOT(D, seq) (&(D)->slice[(seq) % FAKECUDA_SLICE_ITEMS])

int fc_slice_on(int dev)
{
    return fc_cfg.timeslice_ns && !((__atomic_load_n(&fc_mps_mask, __ATOMIC_RELAXED) >> dev) & 1u);
}

static uint64_t low_of(struct fakecuda_device *D)
{
    uint64_t low = D->slice_low ? D->slice_low : 1;
    while (low <= D->slice_seq && SLOT(D, low)->done)
        low++;
    D->slice_low = low;
    return low;
}

/* The oldest waiting item of `pid` (pid > 0), or of anyone but `-pid`
 * (pid < 0); NULL if none. */
static struct fakecuda_slice_item *oldest(struct fakecuda_device *D, uint64_t low, int pid)
{
    for (uint64_t s = low; s <= D->slice_seq; s++) {
        struct fakecuda_slice_item *it = SLOT(D, s);
        if (!it->done && (pid > 0 ? it->pid == pid : it->pid != -pid))
            return it;
    }
    return NULL;
}

static void account(struct fakecuda_device *D, int dev, int pid, uint64_t from, uint64_t ns)
{
    fc_ring_add_locked(D, from, from + ns, pid);
    __atomic_fetch_add(&D->busy_ns, ns, __ATOMIC_RELAXED);
    struct fakecuda_proc *p = NULL;
    for (int i = 0; i < FAKECUDA_MAX_PROCS && !p; i++)
        if (fc_S->proc[i].pid == pid)
            p = &fc_S->proc[i];
    if (p)
        __atomic_fetch_add(&p->busy_ns[dev], ns, __ATOMIC_RELAXED);
    if (from + ns > D->busy_until_ns)
        __atomic_store_n(&D->busy_until_ns, from + ns, __ATOMIC_RELEASE);
}

/* The device hands itself to `pid` at slice_now: a switch from another
 * context costs FAKECUDA_CTX_SWITCH_US after that context's last work
 * (hidden by an idle gap at least as long). */
static void switch_to(struct fakecuda_device *D, int pid)
{
    uint64_t sw = fc_cfg.ctx_switch_ns, t = D->slice_now;
    if (sw && D->last_owner && D->last_owner != pid && t < D->slice_last_end + sw) {
        fc_ring_add_locked(D, t, D->slice_last_end + sw, -1);
        D->slice_now = D->slice_last_end + sw;
    }
    D->slice_owner = pid;
    D->last_owner = pid;
    D->slice_from = D->slice_now;
}

void fc_slice_advance_locked(int dev, uint64_t to)
{
    struct fakecuda_device *D = &fc_S->dev[dev];
    const uint64_t slice = fc_cfg.timeslice_ns;
    while (D->slice_now < to) {
        uint64_t low = low_of(D);
        if (low > D->slice_seq) { /* nothing queued: idle until `to` */
            D->slice_now = to;
            D->slice_owner = 0;
            return;
        }
        int owner = D->slice_owner;
        struct fakecuda_slice_item *own = owner ? oldest(D, low, owner) : NULL;
        struct fakecuda_slice_item *other = oldest(D, low, owner ? -owner : 0);
        int expired = own && D->slice_now >= D->slice_from + slice;
        if (!own || (expired && other)) {
            switch_to(D, other->pid);
            continue;
        }
        if (expired) /* nobody else waits: a new slice */
            D->slice_from = D->slice_now;
        uint64_t run = D->slice_from + slice - D->slice_now;
        if (own->left_ns < run)
            run = own->left_ns;
        if (to - D->slice_now < run)
            run = to - D->slice_now;
        if (run) {
            account(D, dev, owner, D->slice_now, run);
            D->slice_now += run;
            D->slice_last_end = D->slice_now;
            own->left_ns -= run;
        }
        if (!own->left_ns) {
            own->end_ns = D->slice_now;
            own->done = 1;
        }
    }
}

uint64_t fc_slice_submit(int dev, int pid, uint64_t dur)
{
    struct fakecuda_device *D = &fc_S->dev[dev];
    for (;;) {
        fakecuda_lock(&D->lock);
        fc_slice_advance_locked(dev, fc_now_ns());
        uint64_t seq = D->slice_seq + 1;
        struct fakecuda_slice_item *it = SLOT(D, seq);
        if (!it->seq || it->done) {
            *it = (struct fakecuda_slice_item){.seq = seq, .left_ns = dur, .pid = pid};
            D->slice_seq = seq;
            fakecuda_unlock(&D->lock);
            return FC_SLICE_TOKEN | seq;
        }
        uint64_t wait = D->slice_now + it->left_ns;
        fakecuda_unlock(&D->lock);
        fc_sleep_until(wait); /* the queue is full: wait for its oldest */
    }
}

/* Completion time of a token's item (or of a plain time), the token while
 * it runs, 1 for an item so old that its slot was reused (long done).
 * *bound: a time before which it cannot complete (its context's work up
 * to it, from now on). */
static uint64_t resolve_locked(int dev, uint64_t v, uint64_t *bound)
{
    struct fakecuda_device *D = &fc_S->dev[dev];
    if (!(v & FC_SLICE_TOKEN))
        return v;
    uint64_t seq = v & ~FC_SLICE_TOKEN;
    fc_slice_advance_locked(dev, fc_now_ns());
    struct fakecuda_slice_item *it = SLOT(D, seq);
    if (it->seq != seq || seq > D->slice_seq)
        return 1;
    if (it->done)
        return it->end_ns;
    if (bound) {
        uint64_t left = 0;
        for (uint64_t s = low_of(D); s <= seq; s++)
            if (!SLOT(D, s)->done && SLOT(D, s)->pid == it->pid)
                left += SLOT(D, s)->left_ns;
        *bound = D->slice_now + left;
    }
    return v;
}

uint64_t fc_slice_resolve(int dev, uint64_t v, uint64_t *bound)
{
    if (!(v & FC_SLICE_TOKEN) || dev < 0)
        return v;
    struct fakecuda_device *D = &fc_S->dev[dev];
    fakecuda_lock(&D->lock);
    uint64_t t = resolve_locked(dev, v, bound);
    fakecuda_unlock(&D->lock);
    return t;
}
