/*
 * Connection table of the broker (contract in broker_conns.h). Invariants:
 * a slot is either on the free list or on the deadline list, never both;
 * used counts the deadline list; the uid table holds one entry per uid
 * with held slots, its n the number of them, and sum(n) == used.
 */
#include "identity/broker_conns.h"

#include <errno.h>
#include <stdlib.h>

#define MAX_SLOTS (1u << 24)

/* Fibonacci hashing: the top bits of the product, which depend on every
 * bit of the uid (container uids often differ only above bit 16). */
static uint32_t uid_home(const struct cs__bconns *t, uid_t uid)
{
    return ((uint32_t)uid * 0x9E3779B1u) >> t->uid_shift;
}

/* The entry of uid, or the empty entry where it would go. Never loops
 * forever: the table has twice as many entries as there can be uids. */
static uint32_t uid_find(const struct cs__bconns *t, uid_t uid)
{
    uint32_t i = uid_home(t, uid);
    while (t->uids[i].n && t->uids[i].uid != uid)
        i = (i + 1) & t->uid_mask;
    return i;
}

/* Empties entry i and shifts later members of its probe run back, so
 * lookups never need tombstones. An entry at j may move to the hole at i
 * when i lies on its probe path, i.e. its home is no nearer to j than i. */
static void uid_remove_at(struct cs__bconns *t, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & t->uid_mask;
        if (!t->uids[j].n)
            break;
        uint32_t from_home = (j - uid_home(t, t->uids[j].uid)) & t->uid_mask;
        uint32_t from_hole = (j - i) & t->uid_mask;
        if (from_home >= from_hole) {
            t->uids[i] = t->uids[j];
            i = j;
        }
    }
    t->uids[i].n = 0;
}

int cs__bconns_init(struct cs__bconns *t, uint32_t cap, uint32_t per_uid)
{
    *t = (struct cs__bconns){0};
    if (cap == 0 || cap > MAX_SLOTS || per_uid == 0 || per_uid > cap)
        return -EINVAL;
    uint32_t n = 2, bits = 1;
    while (n < 2 * cap) {
        n *= 2;
        bits++;
    }
    t->node = calloc(cap, sizeof *t->node);
    t->uids = calloc(n, sizeof *t->uids);
    if (!t->node || !t->uids) {
        cs__bconns_fini(t);
        return -ENOMEM;
    }
    t->cap = cap;
    t->per_uid = per_uid;
    t->uid_mask = n - 1;
    t->uid_shift = 32 - bits;
    t->head = t->tail = CS_BCONNS_NONE;
    for (uint32_t i = 0; i < cap; i++)
        t->node[i].next = i + 1 < cap ? i + 1 : CS_BCONNS_NONE;
    t->free_head = 0;
    return 0;
}

void cs__bconns_fini(struct cs__bconns *t)
{
    free(t->node);
    free(t->uids);
    *t = (struct cs__bconns){0};
}

uint32_t cs__bconns_of_uid(const struct cs__bconns *t, uid_t uid)
{
    return t->uids[uid_find(t, uid)].n;
}

int cs__bconns_admit(struct cs__bconns *t, uid_t uid, int64_t deadline_ns)
{
    uint32_t u = uid_find(t, uid);
    if (t->uids[u].n >= t->per_uid)
        return -EUSERS;
    if (t->free_head == CS_BCONNS_NONE)
        return -ENFILE;
    uint32_t i = t->free_head;
    struct cs__bconns_node *nd = &t->node[i];
    t->free_head = nd->next;
    if (t->tail != CS_BCONNS_NONE && deadline_ns < t->node[t->tail].deadline_ns)
        deadline_ns = t->node[t->tail].deadline_ns;
    *nd = (struct cs__bconns_node){.prev = t->tail, .next = CS_BCONNS_NONE, .uid = uid,
                                   .deadline_ns = deadline_ns};
    if (t->tail != CS_BCONNS_NONE)
        t->node[t->tail].next = i;
    else
        t->head = i;
    t->tail = i;
    t->uids[u].uid = uid;
    t->uids[u].n++;
    t->used++;
    return (int)i;
}

void cs__bconns_release(struct cs__bconns *t, uint32_t i)
{
    struct cs__bconns_node *nd = &t->node[i];
    if (nd->prev != CS_BCONNS_NONE)
        t->node[nd->prev].next = nd->next;
    else
        t->head = nd->next;
    if (nd->next != CS_BCONNS_NONE)
        t->node[nd->next].prev = nd->prev;
    else
        t->tail = nd->prev;
    uint32_t u = uid_find(t, nd->uid);
    if (--t->uids[u].n == 0)
        uid_remove_at(t, u);
    t->used--;
    nd->next = t->free_head;
    t->free_head = i;
}
