/*
 * ledger_heal_safety: the heal returns only what no process holds. A live
 * process stopped half-way through a charge (aggregate raised, slot not
 * yet) or an uncharge (slot lowered, aggregate not yet) looks, by the
 * numbers, exactly like one that died there; its announcement (pending,
 * op_seq) is what tells them apart, and the heal must leave its bytes
 * alone however long it stays stopped. The same half-done charge of a
 * process that then dies is returned.
 */
#include "ledger_test.h"

#define LIMIT (100 * MiB)
#define N (30 * MiB)

enum step { CHARGE, UNCHARGE };

/* Stops after the first half of a charge or uncharge of N bytes, done the
 * way account.c does it, reports, then finishes it when told (or is
 * killed). */
static pid_t stop_half_way(struct cs_ledger *l, enum step what, int *go_fd)
{
    int ready[2], go[2];
    pid_t pid = lt_helper_fork(l, ready, go);
    if (pid == 0) {
        struct cs_ledger_slot *s = cs__ledger_my_slot(l);
        uint64_t *used = &l->hdr->dev[0].used;
        if (what == UNCHARGE)
            CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, N), 0);
        cs__ledger_announce(s, 0, N);
        if (what == CHARGE)
            __atomic_fetch_add(used, N, __ATOMIC_SEQ_CST);
        else
            __atomic_fetch_sub(&s->bytes[0][CS_MEM_DATA], N, __ATOMIC_SEQ_CST);
        lt_write_full(ready[1], "r", 1);
        char c;
        cs_read_full(go[0], &c, 1, 60000);
        if (what == CHARGE)
            __atomic_fetch_add(&s->bytes[0][CS_MEM_DATA], N, __ATOMIC_SEQ_CST);
        else
            __atomic_fetch_sub(used, N, __ATOMIC_SEQ_CST);
        cs__ledger_withdraw(s, 0, N);
        if (what == CHARGE)
            cs__ledger_uncharge(l, 0, CS_MEM_DATA, N);
        CHECK_EQ_U(s->bytes[0][CS_MEM_DATA], 0);
        cs__ledger_leave(l);
        _exit(0);
    }
    return lt_helper_ready(pid, ready, go, go_fd);
}

/* A reap (with its heal) and a claim of another process while `pid` is
 * stopped half-way: its N bytes stay charged, nothing is "returned". */
static void heal_leaves_it_alone(struct cs_ledger *l, uint64_t expect_used)
{
    lt_capture_begin();
    CHECK_EQ(cs__ledger_reap(l), 0);
    pid_t other = fork();
    CHECK(other >= 0);
    if (other == 0) {
        CHECK_EQ(cs__ledger_after_fork(l), 0);
        CHECK_EQ(cs__ledger_claim(l), 0); /* a claim heals too */
        cs__ledger_leave(l);
        _exit(0);
    }
    cs_wait_ok(other, 10000);
    char *err = lt_capture_end();
    CHECK(strstr(err, "returned them") == NULL);
    free(err);
    CHECK_EQ_U(cs__ledger_used(l, 0), expect_used);
    /* Nor is the budget open to others beyond it. */
    CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, LIMIT - expect_used + 1), -ENOMEM);
}

static void live_half_way(struct cs_ledger *l, enum step what)
{
    int go;
    pid_t pid = stop_half_way(l, what, &go);
    /* This process holds 10 MiB; the stopped one N in the aggregate. */
    heal_leaves_it_alone(l, 10 * MiB + N);
    lt_write_full(go, "g", 1);
    close(go);
    cs_wait_ok(pid, 10000);
    CHECK_EQ_U(cs__ledger_used(l, 0), 10 * MiB);
}

static void dead_half_way(struct cs_ledger *l)
{
    int go;
    pid_t pid = stop_half_way(l, CHARGE, &go);
    CHECK(kill(pid, SIGKILL) == 0);
    lt_wait(pid, 10);
    close(go);
    CHECK_EQ_U(cs__ledger_used(l, 0), 10 * MiB + N);
    lt_capture_begin();
    CHECK_EQ(cs__ledger_reap(l), 1);
    char *err = lt_capture_end();
    CHECK_CONTAINS(err, "had 31457280 bytes charged beyond the 10485760");
    free(err);
    CHECK_EQ_U(cs__ledger_used(l, 0), 10 * MiB);
}

int main(void)
{
    struct cs_ledger_params p = lt_params(LIMIT);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(lt_path("safety"), &p, false, &l), 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 10 * MiB), 0);

    live_half_way(&l, CHARGE);
    live_half_way(&l, UNCHARGE);
    dead_half_way(&l);

    cs__ledger_uncharge(&l, 0, CS_MEM_DATA, 10 * MiB);
    cs__ledger_leave(&l);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    cs__ledger_close(&l);
    printf("ledger_heal_safety: ok\n");
    return 0;
}
