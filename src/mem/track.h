/*
 * Process-private record of what each live allocation was charged, so a
 * free gives back exactly that. Keyed by (kind, handle): device pointers,
 * arrays, VMM handles and external-memory objects live in different
 * namespaces. Striped locks: concurrent threads on different allocations
 * rarely meet; no lock is held across a driver call.
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
};

/* 0, or -ENOMEM when the record cannot be stored. Replaces an old record
 * under the same key (returning the old one in *old if non-NULL, and 1). */
int cs__track_put(enum cs_track_kind kind, uint64_t key, const struct cs_tracked *t);

/* Removes and returns the record: 0, or -ENOENT for an unknown key. */
int cs__track_take(enum cs_track_kind kind, uint64_t key, struct cs_tracked *out);

/* Reads without removing: 0 or -ENOENT. */
int cs__track_get(enum cs_track_kind kind, uint64_t key, struct cs_tracked *out);

/* Calls fn for every record of `kind` (under its stripe lock: fn must not
 * call back into the table or the driver). */
void cs__track_each(enum cs_track_kind kind, void (*fn)(uint64_t key, struct cs_tracked *t, void *ctx),
                    void *ctx);

/* Drops everything (fork child: the parent's allocations are not ours). */
void cs__track_reset(void);

#endif
