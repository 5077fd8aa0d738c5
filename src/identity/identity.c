/*
 * Identity resolution: tries the enabled tiers in order and reports which
 * one answered and why earlier ones did not (docs/identity.md). The order
 * is fixed here and nowhere else: cheapest and most trustworthy first,
 * the serialised legacy probe last. A tier failing never invents a PID: it
 * hands over to the next tier, and with no tier left the result is FAILED
 * (the caller keeps limiting by getpid(), never disables it).
 */
#define _GNU_SOURCE
#include "identity/identity.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

_Static_assert(sizeof(pid_t) == 4, "HPID carries PIDs as 32 bits");

static int valid_pid(pid_t p)
{
    return p > 0; /* pid_t is 32-bit: p <= INT32_MAX by type */
}

static int try_broker(const struct cs_identity_config *c, pid_t *pid)
{
    if (c->broker_test)
        return cs__broker_query_opts(c->broker_test, pid);
    return cs__broker_query(NULL, pid);
}

static int try_procfs(const struct cs_identity_config *c, pid_t *pid)
{
    return cs__procfs_host_pid(c->procfs_root, pid);
}

static int try_probe(const struct cs_identity_config *c, pid_t *pid)
{
    return c->probe(c->ctx, pid);
}

/* Records a tier's outcome; returns 1 if it answered. */
static int settle(struct cs_identity_result *r, enum cs_identity_tier tier, int rc, pid_t pid)
{
    if (rc == 0 && !valid_pid(pid))
        rc = -ERANGE;
    if (rc > 0)
        rc = -EPROTO;                   /* a callback broke its contract */
    r->err[tier] = rc;
    if (rc == 0) {
        r->tier = tier;
        r->host_pid = pid;
        return 1;
    }
    if (!r->reason) {
        r->reason = rc;
        r->reason_tier = tier;
    }
    cs_info("identity", "%s tier failed: %s", cs__identity_tier_name(tier),
            cs__identity_reason(tier, rc));
    return 0;
}

int cs__identity_resolve(const struct cs_identity_config *cfg, struct cs_identity_result *res)
{
    if (!res)
        return -EINVAL;
    memset(res, 0, sizeof *res);
    res->tier = CS_IDENTITY_FAILED;
    if (!cfg)
        return res->reason = -EINVAL;

    if (cfg->nvml_sees_self) {
        int rc = cfg->nvml_sees_self(cfg->ctx);
        if (rc == 1) {
            res->tier = CS_IDENTITY_NVML_NS;
            res->host_pid = getpid();
            return 0;
        }
        /* "No" is the normal answer on drivers that do not translate. */
        res->err[CS_IDENTITY_NVML_NS] = rc < 0 ? rc : 0;
    }

    int tried = 0;
    pid_t pid = 0;
    if (cfg->broker) {
        tried++;
        int rc = try_broker(cfg, &pid);
        if (settle(res, CS_IDENTITY_BROKER, rc, pid))
            return 0;
    }
    if (cfg->procfs_root && cfg->procfs_root[0]) {
        tried++;
        pid = 0;
        int rc = try_procfs(cfg, &pid);
        if (settle(res, CS_IDENTITY_PROCFS, rc, pid))
            return 0;
    }
    if (cfg->probe) {
        tried++;
        pid = 0;
        int rc = try_probe(cfg, &pid);
        if (settle(res, CS_IDENTITY_PROBE, rc, pid))
            return 0;
    }
    if (!tried) {
        res->reason = -ENOENT;
        res->reason_tier = CS_IDENTITY_UNKNOWN;
    }
    return res->reason;
}

const char *cs__identity_reason(enum cs_identity_tier tier, int err)
{
    if (err == 0)
        return "ok";
    switch (tier) {
    case CS_IDENTITY_BROKER: return cs__broker_reason(err);
    case CS_IDENTITY_PROCFS: return cs__procfs_reason(err);
    default: break;
    }
    switch (-err) {
    case ERANGE: return "bad_pid";
    case ENOENT: return "not_found";
    case EPROTO: return "bad_callback";
    }
    return "error";
}

const char *cs__identity_tier_name(enum cs_identity_tier tier)
{
    static const char *const names[] = {
#define CS_X_NAME(id, name) [CS_IDENTITY_##id] = name,
        CS_IDENTITY_TIERS(CS_X_NAME)
#undef CS_X_NAME
    };
    return (unsigned)tier < CS_IDENTITY_NTIERS ? names[tier] : "invalid";
}
