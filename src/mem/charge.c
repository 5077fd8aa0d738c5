#include "mem/charge.h"

#include <errno.h>
#include <stdbool.h>

#include "account/account.h"
#include "core/log.h"

CUresult cs__charge(int dev, enum cs_mem_category cat, uint64_t bytes)
{
    if (dev < 0)
        return CUDA_SUCCESS; /* no context: the driver will refuse the call */
    cs__vmm_take_over_unpaid();
    int rc = cs__account_charge(cs__ledger(), dev, cat, bytes, cs__pools_recharge);
    if (rc == 0)
        return CUDA_SUCCESS;
    if (rc == -ENOTRECOVERABLE)
        return CUDA_ERROR_OUT_OF_MEMORY; /* the ledger was damaged in use; it said so */
    if (rc == -ENOMEM) {
        cs_info("mem", "device %d: %llu bytes refused: %llu of %llu in use", dev,
                (unsigned long long)bytes,
                (unsigned long long)cs__ledger_used(cs__ledger(), dev),
                (unsigned long long)cs__device_limit(dev));
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    cs_warn_capped(8, "mem", "device %d: cannot charge %llu bytes: %d", dev,
                   (unsigned long long)bytes, rc);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

void cs__uncharge(int dev, enum cs_mem_category cat, uint64_t bytes)
{
    if (dev >= 0)
        cs__account_uncharge(cs__ledger(), dev, cat, bytes);
}

void cs__uncharge_tracked(const struct cs_tracked *t)
{
    if (t->share)
        cs__vmm_share_release(t->share - 1);
    else
        cs__uncharge(t->dev, t->cat, t->bytes);
}

int cs__record_charge(enum cs_track_kind kind, uint64_t key, int dev, enum cs_mem_category cat,
                      uint64_t bytes)
{
    struct cs_tracked t = {.bytes = bytes, .dev = dev, .cat = cat, .ctx = cs__current_context()};
    int rc = cs__track_put(kind, key, &t);
    if (rc) {
        cs__uncharge(dev, cat, bytes);
        cs_warn_capped(8, "mem", "out of host memory for allocation records");
    }
    return rc;
}

CUresult cs__free_tracked(enum cs_track_kind kind, uint64_t key,
                          CUresult (*destroy)(uint64_t key, void *ctx), void *ctx)
{
    struct cs_tracked t;
    bool known = cs__track_take(kind, key, &t) == 0;
    CUresult r = destroy(key, ctx);
    if (known) {
        if (r == CUDA_SUCCESS)
            cs__uncharge_tracked(&t);
        else
            cs__track_put(kind, key, &t);
    }
    return r;
}

int cs__uncharge_record(enum cs_track_kind kind, uint64_t key)
{
    struct cs_tracked t;
    int rc = cs__track_take(kind, key, &t);
    if (!rc)
        cs__uncharge_tracked(&t);
    return rc;
}

CUresult cs__recharge(int dev, enum cs_mem_category cat, uint64_t have, uint64_t want)
{
    if (want > have)
        return cs__charge(dev, cat, want - have);
    cs__uncharge(dev, cat, have - want);
    return CUDA_SUCCESS;
}
