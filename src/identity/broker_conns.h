/*
 * The broker's connection table: which connections the broker holds while
 * it waits for a request (or for a reply to drain), in slots allocated
 * once at start, so serving never allocates and nothing grows with the
 * number of clients. Every operation is O(1):
 *
 *   - slots come from a free list;
 *   - the deadline list orders held slots oldest first. Every connection
 *     gets the same timeout when admitted, so appending keeps the list
 *     sorted and expiry only ever looks at its head;
 *   - per-uid counts live in an open-addressing table (linear probing,
 *     backward-shift deletion) with twice as many entries as slots, so it
 *     never fills and probes stay short.
 *
 * The table only indexes: the caller keeps its per-connection state in an
 * array of its own, indexed by slot. Not thread-safe: the broker's event
 * loop is its only user.
 */
#ifndef CS_IDENTITY_BROKER_CONNS_H
#define CS_IDENTITY_BROKER_CONNS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CS_BCONNS_NONE UINT32_MAX

struct cs__bconns_node {
    uint32_t prev, next;                /* deadline list; next doubles as free list */
    uid_t uid;
    int64_t deadline_ns;
};

struct cs__bconns_uid {
    uid_t uid;
    uint32_t n;                         /* held slots of uid; 0: entry empty */
};

struct cs__bconns {
    struct cs__bconns_node *node;       /* [cap] */
    struct cs__bconns_uid *uids;        /* [uid_mask + 1] */
    uint32_t cap, per_uid, used;
    uint32_t uid_mask, uid_shift;       /* entries - 1; 32 - log2(entries) */
    uint32_t free_head;
    uint32_t head, tail;                /* deadline list: head expires first */
};

/* Allocates cap slots (1..2^24) with at most per_uid (1..cap) per uid:
 * 0 or -EINVAL / -ENOMEM. */
int cs__bconns_init(struct cs__bconns *t, uint32_t cap, uint32_t per_uid);
void cs__bconns_fini(struct cs__bconns *t);

/* Takes a slot for a connection of uid that expires at deadline_ns (an
 * earlier deadline than the last admitted one is raised to it, so the list
 * stays sorted). Returns the slot, -EUSERS if uid already holds per_uid
 * slots, -ENFILE if every slot is taken. */
int cs__bconns_admit(struct cs__bconns *t, uid_t uid, int64_t deadline_ns);

/* Gives slot i back (it must be held). */
void cs__bconns_release(struct cs__bconns *t, uint32_t i);

/* The held slot with the earliest deadline, or CS_BCONNS_NONE. */
static inline uint32_t cs__bconns_oldest(const struct cs__bconns *t)
{
    return t->head;
}

static inline bool cs__bconns_full(const struct cs__bconns *t)
{
    return t->used == t->cap;
}

/* Slots uid holds now. */
uint32_t cs__bconns_of_uid(const struct cs__bconns *t, uid_t uid);

#endif
