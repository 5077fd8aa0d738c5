/*
 * Parking end to end over the fake driver (docs/parking.md): `cushare
 * park` moves every process of a tenant off the GPU while its ledger
 * charges stay as they were; the tenant's next intercepted call, from any
 * of its processes, brings all of them back; `cushare wake` does the same
 * by hand; memory the driver cannot checkpoint (IPC) is refused with a
 * reason and the tenant keeps running, and so is a tenant with a thread
 * inside a call that outlasts the park's timeout (busy); a parked tenant
 * killed with SIGKILL leaves nothing behind, and a process joining a parked
 * tenant wakes it with its first call.
 */
#include "park/park_test.h"

static struct fakecuda_state *gpu;

static void expect_running(const struct cs_ledger_header *h, struct pt_tenant *t, int n,
                           uint64_t dev_bytes)
{
    CHECK_EQ(pt_park_state(h), CS_PARK_RUNNING);
    for (int i = 0; i < n; i++) {
        CHECK_EQ(pt_ckpt_state(gpu, t[i].pid), CU_PROCESS_STATE_RUNNING);
        CHECK_EQ(pt_slot_of(h, t[i].pid)->run_request, CS_RUN);
    }
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), dev_bytes);
}

/* The output of `cushare ARGS`, which must exit 0, into buf. */
static void cli_output(char *buf, size_t size, const char *args)
{
    const char *out = pt_path("cli.out");
    CHECK_EQ(pt_cli(NULL, "%s > '%s'", args, out), 0);
    FILE *f = fopen(out, "r");
    CHECK(f != NULL);
    size_t got = fread(buf, 1, size - 1, f);
    buf[got] = '\0';
    fclose(f);
}

/* Whether the row of tenant `name` in `top --once` output carries `flag`
 * (the legend below the rows names every flag, so look at the row). */
static bool row_flagged(const char *top, const char *name, const char *flag)
{
    const char *row = strstr(top, name);
    CHECK(row != NULL);
    const char *end = strchr(row, '\n');
    const char *hit = strstr(row, flag);
    return hit && (!end || hit < end);
}

static void park_wake_on_call(void)
{
    const char *ledger = pt_path("one.ledger");
    struct pt_tenant t = pt_spawn(ledger, 1024);
    CHECK_EQ(pt_cmd(&t, "a 256", 10000), 0);
    const struct cs_ledger_header *h = pt_ledger(ledger);
    CHECK_EQ_U(h->dev[0].used, 256 * MIB);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), 256 * MIB);

    CHECK_EQ(pt_cli(NULL, "park '%s'", ledger), 0);
    /* Off the GPU, into the process's host memory; the ledger's charge
     * (the tenant's view of its budget) does not move. */
    CHECK_EQ(pt_park_state(h), CS_PARK_PARKED);
    CHECK_EQ(pt_ckpt_state(gpu, t.pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ_U(pt_checkpointed(gpu, t.pid), 256 * MIB);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), 0);
    CHECK_EQ_U(h->dev[0].used, 256 * MIB);
    CHECK_EQ_U(h->park.host_bytes, 256 * MIB);
    CHECK_EQ_U(h->park.parks, 1);
    CHECK_EQ(pt_slot_of(h, t.pid)->run_request, CS_PARKED);
    /* status --json shows it. */
    static char js[65536];
    char args[1200];
    snprintf(args, sizeof args, "status --json '%s'", ledger);
    cli_output(js, sizeof js, args);
    CHECK_CONTAINS(js, "\"park\":{\"state\":\"parked\",\"host_bytes\":268435456,\"parks\":1,");
    /* So does the node view: the bytes parked beside those on the GPU,
     * and top's flag. */
    cli_output(js, sizeof js, "status --json");
    CHECK_CONTAINS(js, "\"tenants_on_gpu_bytes\":0,\"tenants_parked_bytes\":268435456");
    cli_output(js, sizeof js, "top --once");
    CHECK(row_flagged(js, "one.ledger", "PARKED"));

    /* Its next call wakes it and proceeds. */
    CHECK_EQ(pt_cmd(&t, "c", 10000), 0);
    expect_running(h, &t, 1, 256 * MIB);
    CHECK_EQ_U(h->park.wakes, 1);
    CHECK_EQ_U(h->park.host_bytes, 0);
    CHECK_EQ_U(h->dev[0].used, 256 * MIB);
    /* An allocation after the wake is admitted and charged as before. */
    CHECK_EQ(pt_cmd(&t, "a 64", 10000), 0);
    CHECK_EQ_U(h->dev[0].used, 320 * MIB);
    cli_output(js, sizeof js, "top --once");
    CHECK(!row_flagged(js, "one.ledger", "PARKED"));
    cli_output(js, sizeof js, "status --json");
    CHECK_CONTAINS(js, "\"tenants_parked_bytes\":0");
    pt_quit(&t);
    puts("park, then the tenant's next call wakes it: ok");
}

static void every_process_together(void)
{
    const char *ledger = pt_path("two.ledger");
    struct pt_tenant t[2] = {pt_spawn(ledger, 1024), pt_spawn(ledger, 1024)};
    CHECK_EQ(pt_cmd(&t[0], "a 128", 10000), 0);
    CHECK_EQ(pt_cmd(&t[1], "a 64", 10000), 0);
    const struct cs_ledger_header *h = pt_ledger(ledger);
    uint64_t before = fakecuda_load(&gpu->dev[0].used);
    CHECK_EQ(pt_cli(NULL, "park '%s'", ledger), 0);
    CHECK_EQ(pt_ckpt_state(gpu, t[0].pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ(pt_ckpt_state(gpu, t[1].pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), before - 192 * MIB);
    /* A call in the second process brings both back. */
    CHECK_EQ(pt_cmd(&t[1], "c", 10000), 0);
    expect_running(h, t, 2, before);
    CHECK_EQ(pt_cmd(&t[0], "c", 10000), 0);
    CHECK_EQ_U(h->park.wakes, 1);
    /* By hand: park, then `cushare wake`; the next call finds it running. */
    CHECK_EQ(pt_cli(NULL, "park '%s'", ledger), 0);
    CHECK_EQ(pt_cli(NULL, "park '%s'", ledger), 0); /* already parked: nothing to do */
    CHECK_EQ_U(h->park.parks, 2);
    CHECK_EQ(pt_cli(NULL, "wake '%s'", ledger), 0);
    expect_running(h, t, 2, before);
    CHECK_EQ(pt_cmd(&t[0], "c", 10000), 0);
    CHECK_EQ_U(h->park.wakes, 2);
    pt_quit(&t[0]);
    pt_quit(&t[1]);
    puts("every process parked and woken together, by call or by `cushare wake`: ok");
}

/* Runs `cushare park OPTS LEDGER`, which must refuse (exit 1); returns
 * its message. */
static const char *refused(const char *opts, const char *ledger, const char *errfile)
{
    CHECK_EQ(pt_cli(NULL, "park %s'%s' 2>'%s'", opts, ledger, pt_path("%s", errfile)), 1);
    static char why[512];
    why[0] = '\0';
    FILE *f = fopen(pt_path("%s", errfile), "r");
    CHECK(f && fgets(why, sizeof why, f));
    fclose(f);
    printf("refusal: %s", why);
    return why;
}

static void ipc_refused(void)
{
    const char *ledger = pt_path("ipc.ledger");
    struct pt_tenant t = pt_spawn(ledger, 1024);
    CHECK_EQ(pt_cmd(&t, "a 32", 10000), 0);
    CHECK_EQ(pt_cmd(&t, "i", 10000), 0);
    const struct cs_ledger_header *h = pt_ledger(ledger);
    uint64_t before = fakecuda_load(&gpu->dev[0].used);
    const char *why = refused("", ledger, "ipc.err");
    CHECK(strstr(why, "IPC") != NULL);
    expect_running(h, &t, 1, before);
    CHECK_EQ_U(h->park.parks, 0);
    CHECK_EQ_U(h->park.refusals, 1);
    CHECK_EQ(pt_cmd(&t, "c", 10000), 0);
    pt_quit(&t);
    puts("IPC memory: refused with a reason, tenant left running: ok");
}

static void busy_refused(void)
{
    const char *ledger = pt_path("busy.ledger");
    setenv("FAKECUDA_MEMSET_NS_PER_MIB", "600000000000", 1); /* 10 minutes */
    struct pt_tenant t = pt_spawn(ledger, 1024);
    unsetenv("FAKECUDA_MEMSET_NS_PER_MIB");
    CHECK_EQ(pt_cmd(&t, "a 16", 10000), 0);
    const struct cs_ledger_header *h = pt_ledger(ledger);
    const struct cs_ledger_slot *s = pt_slot_of(h, t.pid);
    CHECK(write(t.in, "w\n", 2) == 2); /* inside cuStreamSynchronize for minutes */
    CS_WAIT_FOR(__atomic_load_n(&s->in_call, __ATOMIC_ACQUIRE) == 1, 10000,
                "the tenant's thread to be inside an intercepted call");
    const char *why = refused("--timeout 50 ", ledger, "busy.err");
    CHECK(strstr(why, "busy") != NULL);
    CHECK_EQ(pt_park_state(h), CS_PARK_RUNNING);
    CHECK_EQ(pt_ckpt_state(gpu, t.pid), CU_PROCESS_STATE_RUNNING);
    CHECK_EQ(s->run_request, CS_RUN);
    CHECK_EQ_U(h->park.refusals, 1);
    pt_kill(&t);
    puts("a tenant inside a call is busy: refused, left running: ok");
}

static void killed_while_parked(void)
{
    const char *ledger = pt_path("killed.ledger");
    struct pt_tenant t = pt_spawn(ledger, 1024);
    CHECK_EQ(pt_cmd(&t, "a 256", 10000), 0);
    const struct cs_ledger_header *h = pt_ledger(ledger);
    uint64_t base = fakecuda_load(&gpu->dev[0].used) - 256 * MIB;
    CHECK_EQ(pt_cli(NULL, "park '%s'", ledger), 0);
    pt_kill(&t);
    /* The ledger's reap returns its charge (status reaps). */
    CHECK_EQ(pt_cli(NULL, "status '%s' >/dev/null", ledger), 0);
    CHECK_EQ_U(h->dev[0].used, 0);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), base);
    /* A newcomer to the parked tenant wakes it at its first call. */
    struct pt_tenant n = pt_spawn(ledger, 1024);
    CHECK_EQ(pt_cmd(&n, "a 16", 10000), 0);
    CHECK_EQ(pt_park_state(h), CS_PARK_RUNNING);
    CHECK_EQ_U(h->dev[0].used, 16 * MIB);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), base + 16 * MIB);
    pt_quit(&n);
    puts("SIGKILL of a parked tenant frees everything; a newcomer wakes the tenant: ok");
}

int main(void)
{
    pt_setup("park");
    setenv("FAKECUDA_MEM", "2g", 1);
    gpu = fakecuda_state_open(getenv("FAKECUDA_STATE"));
    CHECK(gpu != NULL);
    park_wake_on_call();
    every_process_together();
    ipc_refused();
    killed_while_parked();
    busy_refused(); /* last: its memset keeps the simulated device busy */
    return 0;
}
