/*
 * Kill points (docs/parking.md, "Crash safety"): the performer of a park
 * or a wake is SIGKILLed at every step of it (CUSHARE_PARK_KILL_AT, a test
 * hook of `cushare park/wake`). Whatever the step, the two-process tenant
 * is left running or parked, never locked for good: a call of one of its
 * processes brings every process back to RUNNING with its memory on the
 * device, the ledger's charges exact, and the park lock free for the next
 * park, which then succeeds.
 */
#include "park/park_test.h"

static struct fakecuda_state *gpu;

static void check_recovered(const char *ledger, struct pt_tenant *t, uint64_t dev_bytes)
{
    const struct cs_ledger_header *h = pt_ledger(ledger);
    /* The second process calls: both come back. */
    CHECK_EQ(pt_cmd(&t[1], "c", 10000), 0);
    CHECK_EQ(pt_park_state(h), CS_PARK_RUNNING);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(pt_ckpt_state(gpu, t[i].pid), CU_PROCESS_STATE_RUNNING);
        CHECK_EQ(pt_slot_of(h, t[i].pid)->run_request, CS_RUN);
    }
    CHECK_EQ(pt_cmd(&t[0], "c", 10000), 0);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), dev_bytes);
    CHECK_EQ_U(h->dev[0].used, 96 * MIB);
    CHECK_EQ(h->park.performer_pid, 0);
    /* Nothing is held: the next park and wake work. */
    CHECK_EQ(pt_cli(NULL, "park '%s' >/dev/null", ledger), 0);
    CHECK_EQ(pt_ckpt_state(gpu, t[0].pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ(pt_cmd(&t[0], "c", 10000), 0);
    CHECK_EQ(pt_ckpt_state(gpu, t[1].pid), CU_PROCESS_STATE_RUNNING);
}

static void one(const char *op, const char *step, int n)
{
    const char *ledger = pt_path("%s-%d.ledger", op, n);
    struct pt_tenant t[2] = {pt_spawn(ledger, 1024), pt_spawn(ledger, 1024)};
    CHECK_EQ(pt_cmd(&t[0], "a 64", 10000), 0);
    CHECK_EQ(pt_cmd(&t[1], "a 32", 10000), 0);
    uint64_t dev_bytes = fakecuda_load(&gpu->dev[0].used);
    if (!strcmp(op, "wake"))
        CHECK_EQ(pt_cli(NULL, "park '%s' >/dev/null", ledger), 0);
    char env[128];
    snprintf(env, sizeof env, "CUSHARE_PARK_KILL_AT=%s", step);
    int rc = pt_cli(env, "%s '%s' >/dev/null", op, ledger);
    CHECK_EQ(rc, 128 + SIGKILL);
    printf("%s killed at %s: ", op, step);
    check_recovered(ledger, t, dev_bytes);
    puts("recovered");
    pt_quit(&t[0]);
    pt_quit(&t[1]);
}

int main(void)
{
    pt_setup("crash");
    setenv("FAKECUDA_MEM", "4g", 1);
    gpu = fakecuda_state_open(getenv("FAKECUDA_STATE"));
    CHECK(gpu != NULL);
    /* Every step a park passes, in order (park.c). */
    static const char *const park_steps[] = {"marked", "locked:0", "locked:1", "checkpointed:0",
                                             "checkpointed:1", "parked"};
    static const char *const wake_steps[] = {"waking", "restored:0", "restored:1", "unlocked:0",
                                             "unlocked:1"};
    int n = 0;
    for (size_t i = 0; i < sizeof park_steps / sizeof *park_steps; i++)
        one("park", park_steps[i], n++);
    for (size_t i = 0; i < sizeof wake_steps / sizeof *wake_steps; i++)
        one("wake", wake_steps[i], n++);
    return 0;
}
