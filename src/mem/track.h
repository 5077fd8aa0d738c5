/*
 * Process-private record of what each live allocation was charged, so a
 * free uncharges exactly that. Keyed by (kind, handle): device pointers,
 * arrays, VMM handles and external-memory objects live in different
 * namespaces. Each record also names the context that was current when it
 * was made, because the driver frees context-owned memory with its context
 * (ctx.c gives those records back when the context goes). Striped locks:
 * concurrent threads on different allocations rarely meet; no lock is held
 * across a driver call.
 */
#ifndef CS_MEM_TRACK_H
#define CS_MEM_TRACK_H

#include <stdint.h>

#include "cushare/ledger.h"

enum cs_track_kind {
    CS_TRACK_PTR = 1,      /* cuMemAlloc, pitched, managed */
    CS_TRACK_ARRAY,        /* CUarray */
    CS_TRACK_MIPMAP,       /* CUmipmappedArray */
    CS_TRACK_VMM,          /* CUmemGenericAllocationHandle from cuMemCreate */
    CS_TRACK_EXTMEM,       /* CUexternalMemory */
    CS_TRACK_POOL,         /* CUmemoryPool: bytes = reserved growth charged */
};

struct cs_tracked {
    uint64_t bytes;
    int dev;
    enum cs_mem_category cat;
    uint64_t ctx;          /* CUcontext current at allocation, 0 if none */
    int share;             /* 1 + ledger share holding the charge (exported
                            * over legacy IPC: vmm.c), 0 = bytes in our slot */
};

/* Records taken out of the table together (cs__track_take_ctx): owned by
 * the caller until it restores or frees them. */
struct cs_track_batch {
    struct cs_track_node *head;
};

/* 0, or -ENOMEM when the record cannot be stored. A record already under
 * the same key is replaced and freed. */
int cs__track_put(enum cs_track_kind kind, uint64_t key, const struct cs_tracked *t);

/* Removes and returns the record: 0, or -ENOENT for an unknown key. */
int cs__track_take(enum cs_track_kind kind, uint64_t key, struct cs_tracked *out);

/* Reads without removing: 0 or -ENOENT. */
int cs__track_get(enum cs_track_kind kind, uint64_t key, struct cs_tracked *out);

/* Calls fn for every record of `kind` (under its stripe lock: fn must not
 * call back into the table or the driver). */
void cs__track_each(enum cs_track_kind kind, void (*fn)(uint64_t key, struct cs_tracked *t, void *ctx),
                    void *ctx);

/* Takes every record of a context-owned kind (pointers, arrays, mipmapped
 * arrays, external memory: what cuCtxDestroy frees) whose ctx is `ctx` out
 * of the table into *out. Pools and VMM handles are never taken: the
 * driver keeps them when contexts go. Moves nodes, allocates nothing. */
void cs__track_take_ctx(uint64_t ctx, struct cs_track_batch *out);

/* Calls fn for each record of the batch. */
void cs__track_batch_each(const struct cs_track_batch *b,
                          void (*fn)(const struct cs_tracked *t, void *arg), void *arg);

/* Puts the batch's records back into the table (the driver refused to
 * free them), or frees them (they are gone); the batch is empty after. */
void cs__track_batch_restore(struct cs_track_batch *b);
void cs__track_batch_free(struct cs_track_batch *b);

/* Drops everything (fork child: the parent's allocations are not ours). */
void cs__track_reset(void);

#endif
