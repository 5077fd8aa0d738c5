/*
 * Making room on the GPU by parking idle tenants (park.h,
 * cs__park_make_room; docs/parking.md "Who is parked"). Gathers the node's
 * tenants through the one discovery mechanism (src/node), lets the pure
 * policy choose (policy.c), and parks the chosen ones. Only ledgers the
 * caller may open read-write are candidates: the same user's, or anyone's
 * for root, which is also what the driver requires of a performer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "node/node.h"
#include "park/park.h"
#include "park/policy.h"

#define SUBSYS "park"

struct candidate {
    struct cs_ledger l;
    bool open;
};

static bool open_rw(const struct cs_node_found *f, struct cs_ledger *l)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", f->fd);
    return cs__ledger_open(path, NULL, false, l) == 0;
}

static void describe(const struct cs_ledger *l, struct cs_park_tenant *t, int64_t now)
{
    memset(t, 0, sizeof *t);
    uint32_t st = cs__park_state(l);
    t->parked = st != CS_PARK_RUNNING;
    t->on_gpu = t->parked ? 0 : cs__park_tenant_bytes(l);
    t->last_active_ns = cs__park_last_active(l, &t->in_call);
    if (t->last_active_ns > now)
        t->last_active_ns = now; /* coarse clock ahead by a tick */
    t->priority = l->hdr->priority;
    t->shares = cs__park_shares_memory(l);
}

/* Physical bytes free on the GPU as the tenants' ledgers tell it: the
 * card's size less what every running tenant holds. */
static uint64_t ledger_free(const struct cs_ledger *self, const struct cs_park_tenant *t, int n)
{
    uint64_t total = 0, used = 0;
    for (int d = 0; d < CS_MAX_DEVICES; d++)
        total += __atomic_load_n(&self->hdr->physical_total[d], __ATOMIC_RELAXED);
    for (int i = 0; i < n; i++)
        used += t[i].on_gpu;
    return total > used ? total - used : 0;
}

int cs__park_make_room(uint64_t bytes, void *ctx)
{
    const struct cs_park_room *rm = ctx;
    if (!rm || !rm->ops)
        return -EINVAL;
    struct cs_node_where where = {.registry = rm->registry};
    struct cs_node_found *found = NULL;
    int found_cap = 0;
    int nf = cs_node_discover(&where, &found, &found_cap, NULL);
    if (nf < 0) {
        free(found);
        return nf;
    }
    size_t room = (size_t)nf + 1;
    struct candidate *c = calloc(room, sizeof *c);
    struct cs_park_tenant *t = calloc(room, sizeof *t);
    if (!c || !t) {
        for (int i = 0; i < nf; i++)
            close(found[i].fd);
        free(found), free(c), free(t);
        return -ENOMEM;
    }
    int64_t now = cs__now_ns();
    int n = 0, self = -1;
    for (int i = 0; i < nf; i++) {
        bool me = (uint64_t)found[i].dev == rm->self_dev && (uint64_t)found[i].ino == rm->self_ino;
        if (open_rw(&found[i], &c[n].l)) {
            c[n].open = true;
            describe(&c[n].l, &t[n], now);
            if (me) {
                self = n;
                t[n].parked = true; /* never a victim of its own wake */
            }
            n++;
        }
        close(found[i].fd);
    }
    uint64_t free_now = self >= 0 ? ledger_free(&c[self].l, t, n) : 0;
    uint64_t need = cs__park_need(bytes, free_now), freed = 0;
    if (!need)
        need = bytes; /* the driver refused although the ledgers add up: it is right */
    int chosen = cs__park_choose(t, (size_t)n, need, rm->priority, now, rm->idle_ns, &freed);
    int rc = chosen < 0 ? chosen : 0;
    struct cs_park_opts o = {.lock_timeout_ms = 1000};
    for (int i = 0; i < n && chosen > 0; i++) {
        if (!t[i].chosen)
            continue;
        struct cs_park_result r;
        int prc = cs__park_tenant(&c[i].l, rm->ops, &o, &r);
        if (prc) {
            cs_info(SUBSYS, "making room: %s not parked: %s", c[i].l.path, r.why);
            rc = prc;
        } else {
            cs_info(SUBSYS, "making room: parked %s (%llu MiB, idle)", c[i].l.path,
                    (unsigned long long)(r.bytes >> 20));
        }
    }
    for (int i = 0; i < n; i++)
        if (c[i].open)
            cs__ledger_close(&c[i].l);
    free(found), free(c), free(t);
    return rc;
}
