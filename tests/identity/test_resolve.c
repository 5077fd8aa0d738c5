/*
 * Tier order and fallback bookkeeping of cs__identity_resolve, with
 * callbacks standing in for NVML and the legacy probe. Asserts which tiers
 * ran (call counters), which answered, and which reason was recorded.
 */
#include "id_test.h"

struct ctx {
    int nvml_answer;                    /* 1 yes, 0 no, <0 error */
    int probe_rc;
    pid_t probe_pid;
    int nvml_calls, probe_calls;
};

static int nvml_cb(void *p)
{
    struct ctx *c = p;
    c->nvml_calls++;
    return c->nvml_answer;
}

static int probe_cb(void *p, pid_t *out)
{
    struct ctx *c = p;
    c->probe_calls++;
    if (c->probe_rc == 0)
        *out = c->probe_pid;
    return c->probe_rc;
}

static const char *missing_sock = "/nonexistent-cushare-test/hostpid/broker.sock";

static void test_tier0_short_circuits(void)
{
    struct ctx c = {.nvml_answer = 1, .probe_pid = 77};
    struct cs_broker_query_opts bo = {.socket_path = missing_sock};
    struct cs_identity_config cfg = {.broker = true, .procfs_root = "/proc", .nvml_sees_self = nvml_cb,
                                     .probe = probe_cb, .ctx = &c, .broker_test = &bo};
    struct cs_identity_result r;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), 0);
    CHECK_EQ(r.tier, CS_IDENTITY_NVML_NS);
    CHECK_EQ(r.host_pid, getpid());
    CHECK_EQ(r.reason, 0);
    CHECK_EQ(c.nvml_calls, 1);
    CHECK_EQ(c.probe_calls, 0);          /* nothing after tier 0 ran */
    CHECK_EQ(r.err[CS_IDENTITY_BROKER], 0);
}

static void test_broker_failure_falls_to_probe(void)
{
    struct ctx c = {.nvml_answer = 0, .probe_pid = 8011};
    struct cs_broker_query_opts bo = {.socket_path = missing_sock};
    struct cs_identity_config cfg = {.broker = true, .nvml_sees_self = nvml_cb, .probe = probe_cb,
                                     .ctx = &c, .broker_test = &bo};
    struct cs_identity_result r;
    int64_t t0 = cs_now_ns();
    CHECK_EQ(cs__identity_resolve(&cfg, &r), 0);
    CHECK_LT(cs_ms_since(t0), 100 * cs_test_scale());   /* a missing broker costs ~nothing */
    CHECK_EQ(r.tier, CS_IDENTITY_PROBE);
    CHECK_EQ(r.host_pid, 8011);
    CHECK_EQ(r.reason, -ENOENT);
    CHECK_EQ(r.reason_tier, CS_IDENTITY_BROKER);
    CHECK_EQ(r.err[CS_IDENTITY_BROKER], -ENOENT);
    CHECK_EQ(r.err[CS_IDENTITY_PROBE], 0);
    CHECK_EQ(c.probe_calls, 1);
    CHECK_STREQ(cs__identity_reason(r.reason_tier, r.reason), "missing");
}

static void test_disabled_tiers_not_tried(void)
{
    struct ctx c = {.nvml_answer = 0, .probe_pid = 9};
    struct cs_identity_config cfg = {.broker = false, .procfs_root = "", .nvml_sees_self = nvml_cb,
                                     .probe = probe_cb, .ctx = &c};
    struct cs_identity_result r;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), 0);
    CHECK_EQ(r.tier, CS_IDENTITY_PROBE);
    CHECK_EQ(r.reason, 0);               /* no host-PID tier failed */
    CHECK_EQ(r.err[CS_IDENTITY_BROKER], 0);
    CHECK_EQ(r.err[CS_IDENTITY_PROCFS], 0);
}

static void test_first_failure_is_kept(void)
{
    /* broker fails (-ENOENT), procfs fails (not a procfs), probe fails. */
    char dir[64];
    id_mkdtemp(dir, sizeof dir);
    struct ctx c = {.nvml_answer = -EIO, .probe_rc = -EAGAIN};
    struct cs_broker_query_opts bo = {.socket_path = missing_sock};
    struct cs_identity_config cfg = {.broker = true, .procfs_root = dir, .nvml_sees_self = nvml_cb,
                                     .probe = probe_cb, .ctx = &c, .broker_test = &bo};
    struct cs_identity_result r;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), -ENOENT);
    CHECK_EQ(r.tier, CS_IDENTITY_FAILED);
    CHECK_EQ(r.host_pid, 0);
    CHECK_EQ(r.reason, -ENOENT);
    CHECK_EQ(r.reason_tier, CS_IDENTITY_BROKER);
    CHECK_EQ(r.err[CS_IDENTITY_NVML_NS], -EIO);
    CHECK_EQ(r.err[CS_IDENTITY_PROCFS], -EMEDIUMTYPE);
    CHECK_EQ(r.err[CS_IDENTITY_PROBE], -EAGAIN);
    cs_rmtree(dir);
}

static void test_bad_callback_answers(void)
{
    /* A probe "succeeding" with PID 0 or a negative PID is a failure. */
    struct ctx c = {.probe_rc = 0, .probe_pid = 0};
    struct cs_identity_config cfg = {.probe = probe_cb, .ctx = &c};
    struct cs_identity_result r;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), -ERANGE);
    CHECK_EQ(r.tier, CS_IDENTITY_FAILED);
    CHECK_EQ(r.host_pid, 0);
    c.probe_pid = -5;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), -ERANGE);
    /* A positive return is a contract violation, not success. */
    c.probe_rc = 3;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), -EPROTO);
    CHECK_EQ(r.tier, CS_IDENTITY_FAILED);
}

static void test_nothing_enabled(void)
{
    struct cs_identity_config cfg = {0};
    struct cs_identity_result r;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), -ENOENT);
    CHECK_EQ(r.tier, CS_IDENTITY_FAILED);
    CHECK_EQ(cs__identity_resolve(NULL, &r), -EINVAL);
    CHECK_EQ(cs__identity_resolve(&cfg, NULL), -EINVAL);
    CHECK_STREQ(cs__identity_tier_name(CS_IDENTITY_BROKER), "broker");
    CHECK_STREQ(cs__identity_tier_name(CS_IDENTITY_NVML_NS), "nvml-namespace");
    CHECK_STREQ(cs__identity_tier_name(CS_IDENTITY_NTIERS), "invalid");
}

static void test_production_path_is_pinned(void)
{
    /* Production entry point: any other path is refused before any file
     * system access, even one that exists. */
    pid_t p = ID_SENTINEL;
    CHECK_EQ(cs__broker_query("/tmp", &p), -EXDEV);
    CHECK_EQ(cs__broker_query("/tmp/vgpulock/hostpid/broker.sock/", &p), -EXDEV);
    CHECK_EQ(p, ID_SENTINEL);
    CHECK_EQ(cs__broker_query_opts(NULL, &p), -EINVAL);
    struct cs_broker_query_opts rel = {.socket_path = "relative.sock"};
    CHECK_EQ(cs__broker_query_opts(&rel, &p), -EINVAL);
    char longp[200];
    memset(longp, 'a', sizeof longp);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    struct cs_broker_query_opts lo = {.socket_path = longp};
    CHECK_EQ(cs__broker_query_opts(&lo, &p), -ENAMETOOLONG);
    CHECK_EQ(p, ID_SENTINEL);
}

int main(void)
{
    test_tier0_short_circuits();
    test_broker_failure_falls_to_probe();
    test_disabled_tiers_not_tried();
    test_first_failure_is_kept();
    test_bad_callback_answers();
    test_nothing_enabled();
    test_production_path_is_pinned();
    printf("identity resolution ok\n");
    return 0;
}
