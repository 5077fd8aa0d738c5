/*
 * Descriptive fields published after creation: per-device UUID and size
 * in the header, the identity of a process in its slot. Monitors read them;
 * nothing in admission depends on them.
 */
#define _GNU_SOURCE
#include "ledger/ledger.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

#define SUBSYS "ledger"

int cs__ledger_set_device_info(struct cs_ledger *l, int dev, const uint8_t uuid[16],
                               uint64_t physical_total)
{
    if (!l->hdr || l->read_only)
        return -EBADF;
    if (dev < 0 || dev >= CS_MAX_DEVICES)
        return -EINVAL;
    if (!cs__ledger_usable(l))
        return -ENOTRECOVERABLE;
    struct cs_ledger_header *h = l->hdr;
    if (physical_total)
        __atomic_store_n(&h->physical_total[dev], physical_total, __ATOMIC_RELAXED);
    if (!uuid)
        return 0;
    uint32_t none = 0;
    if (__atomic_compare_exchange_n(&h->uuid_state[dev], &none, 1u, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < 16; i++)
            __atomic_store_n(&h->uuid[dev][i], uuid[i], __ATOMIC_RELAXED);
        __atomic_store_n(&h->uuid_state[dev], 2u, __ATOMIC_RELEASE);
        return 0;
    }
    if (none == 2) {
        bool same = true;
        for (int i = 0; i < 16; i++)
            same &= __atomic_load_n(&h->uuid[dev][i], __ATOMIC_RELAXED) == uuid[i];
        if (!same)
            cs_warn_capped(4, SUBSYS, "ledger %s: device %d is a different GPU in this process "
                           "than in the one that recorded it (different CUDA_VISIBLE_DEVICES "
                           "within one tenant?); the ledger keeps the first", l->path, dev);
    }
    return 0; /* 1: another process is writing it right now */
}

int cs__ledger_set_identity(struct cs_ledger *l, int32_t host_pid, uint32_t tier,
                            uint32_t reason)
{
    struct cs_ledger_slot *s = cs__ledger_my_slot(l);
    if (!s || l->owner_pid != getpid())
        return -ENOTCONN;
    if (!cs__ledger_usable(l))
        return -ENOTRECOVERABLE;
    __atomic_store_n(&s->host_pid, host_pid, __ATOMIC_RELAXED);
    __atomic_store_n(&s->identity_reason, reason, __ATOMIC_RELAXED);
    __atomic_store_n(&s->identity_tier, tier, __ATOMIC_RELEASE);
    return 0;
}
