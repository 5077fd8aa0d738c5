/*
 * Automatic parking (docs/parking.md, "Who is parked"): on a node with
 * parking on, two tenants whose budgets together exceed the card take
 * turns. An allocation the device cannot hold parks the idle other tenant
 * first and then succeeds; the parked tenant's next call wakes it, which
 * in turn parks the first one, now idle; a newcomer whose first context
 * does not fit parks the idle one too. Nobody sees an out-of-memory
 * error it did not ask for, and the device never holds more than it has.
 */
#include "park/park_test.h"

int main(void)
{
    pt_setup("room");
    setenv("FAKECUDA_MEM", "1g", 1);
    setenv("CUSHARE_REGISTRY", pt_path("registry"), 1);
    setenv("CUSHARE_PARK", "200", 1);
    setenv("CUSHARE_PARK_IDLE_MS", "0", 1);
    struct fakecuda_state *gpu = fakecuda_state_open(getenv("FAKECUDA_STATE"));
    CHECK(gpu != NULL);
    const char *la = pt_path("a.ledger"), *lb = pt_path("b.ledger");
    struct pt_tenant a = pt_spawn(la, 700), b = pt_spawn(lb, 700);
    const struct cs_ledger_header *ha = pt_ledger(la), *hb = pt_ledger(lb);
    CHECK_EQ(pt_cmd(&a, "a 600", 10000), 0);
    /* B's 600 MiB do not fit beside A's: A, idle, is parked for them. */
    CHECK_EQ(pt_cmd(&b, "a 600", 10000), 0);
    CHECK_EQ(pt_park_state(ha), CS_PARK_PARKED);
    CHECK_EQ(pt_ckpt_state(gpu, a.pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ(pt_park_state(hb), CS_PARK_RUNNING);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), 600 * MIB);
    /* A's next call wakes it; B, idle now, makes room. */
    CHECK_EQ(pt_cmd(&a, "c", 10000), 0);
    CHECK_EQ(pt_park_state(ha), CS_PARK_RUNNING);
    CHECK_EQ(pt_park_state(hb), CS_PARK_PARKED);
    CHECK_EQ(pt_ckpt_state(gpu, b.pid), CU_PROCESS_STATE_CHECKPOINTED);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), 600 * MIB);
    /* And back. */
    CHECK_EQ(pt_cmd(&b, "c", 10000), 0);
    CHECK_EQ(pt_park_state(hb), CS_PARK_RUNNING);
    CHECK_EQ(pt_park_state(ha), CS_PARK_PARKED);
    /* Budgets and charges never moved. */
    CHECK_EQ_U(ha->dev[0].used, 600 * MIB);
    CHECK_EQ_U(hb->dev[0].used, 600 * MIB);
    CHECK_EQ_U(ha->park.parks, 2);
    CHECK_EQ_U(ha->park.wakes, 1);
    CHECK_LE_U(fakecuda_load(&gpu->dev[0].peak_used), 1024 * MIB);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].failed_allocs) >= 1, 1); /* the refusal that parked A */
    /* A newcomer whose first context does not fit beside B's 600 MiB: B,
     * idle, is parked for it, and the newcomer starts. */
    setenv("FAKECUDA_CTX_BYTES", "512m", 1);
    const char *lc = pt_path("c.ledger");
    struct pt_tenant c = pt_spawn(lc, 700);
    unsetenv("FAKECUDA_CTX_BYTES");
    CHECK_EQ(pt_park_state(hb), CS_PARK_PARKED);
    CHECK_EQ(pt_park_state(pt_ledger(lc)), CS_PARK_RUNNING);
    CHECK_EQ_U(fakecuda_load(&gpu->dev[0].used), 512 * MIB);
    CHECK_LE_U(fakecuda_load(&gpu->dev[0].peak_used), 1024 * MIB);
    pt_quit(&c);
    pt_quit(&a);
    pt_quit(&b);
    puts("idle tenants parked for an allocation, a wake and a newcomer's context: ok");
    return 0;
}
