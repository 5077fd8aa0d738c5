/*
 * Misbehaving brokers behind a fully trusted socket (root-owned, 0755
 * directory, root listener): only the bytes on the wire are wrong. Each
 * must be refused with its own errno, return no PID, and leave the
 * resolver on the probe; a silent broker must cost the deadline (~500 ms),
 * not more.
 */
#include "id_test.h"

static int probe_4242(void *ctx, pid_t *out)
{
    (void)ctx;
    *out = 4242;
    return 0;
}

static void expect(enum id_fake mode, int want, const char *what)
{
    struct id_fake_server f;
    id_fake_start(&f, mode);
    pid_t p;
    int64_t t0 = cs_now_ns();
    int rc = id_query(f.sock, &p);
    double ms = cs_ms_since(t0);
    if (rc != want) {
        fprintf(stderr, "%s: got %d (%s), want %d (%s)\n", what, rc, cs__broker_reason(rc),
                want, cs__broker_reason(want));
        exit(1);
    }
    CHECK_EQ(p, ID_SENTINEL);
    printf("  %-30s -> %-12s in %7.2f ms\n", what, cs__broker_reason(rc), ms);
    if (want == -ETIMEDOUT) {
        CHECK_GE(ms, 450);
        CHECK_LT(ms, 1500 * cs_test_scale());
    } else {
        CHECK_LT(ms, 450 * cs_test_scale());
    }

    struct cs_broker_query_opts bo = {.socket_path = f.sock};
    struct cs_identity_config cfg = {.broker = true, .probe = probe_4242, .broker_test = &bo};
    struct cs_identity_result r;
    CHECK_EQ(cs__identity_resolve(&cfg, &r), 0);
    CHECK_EQ(r.tier, CS_IDENTITY_PROBE);
    CHECK_EQ(r.host_pid, 4242);
    CHECK_EQ(r.reason, want);
    CHECK_EQ(r.reason_tier, CS_IDENTITY_BROKER);
    id_fake_stop(&f);
}

int main(void)
{
    cs_require_root("it chowns files, changes uid and makes PID namespaces");
    /* The harness itself works: a fake that answers correctly is accepted. */
    struct id_fake_server f;
    id_fake_start(&f, FAKE_VALID);
    pid_t p;
    CHECK_EQ(id_query(f.sock, &p), 0);
    CHECK_EQ(p, 8011);
    id_fake_stop(&f);

    printf("fake brokers:\n");
    expect(FAKE_PID0, -ERANGE, "OK reply with PID 0");
    expect(FAKE_PID_HUGE, -ERANGE, "OK reply with PID 2^31");
    expect(FAKE_TRUNCATED, -ENODATA, "6 bytes then close");
    expect(FAKE_GARBAGE, -EBADMSG, "64 bytes of garbage");
    expect(FAKE_OVERSIZED, -EMSGSIZE, "valid reply + 4 extra bytes");
    expect(FAKE_ERROR_STATUS, -EREMOTEIO, "credential-failure status");
    expect(FAKE_SILENT, -ETIMEDOUT, "never answers");
    printf("fake broker rejections ok\n");
    return 0;
}
