/*
 * ledger_crash_window: a process killed between the two steps of a charge
 * (aggregate raised, slot not yet) or of an uncharge (slot lowered, aggregate
 * not yet) leaves the aggregate over-counted. Reaping cannot find those
 * bytes (no slot holds them). Before, they stayed counted for as long as
 * any process of the tenant lived. Now the
 * reap that follows heals them while other processes stay live and keep
 * their own charges; and the last process dying still leaves nothing.
 *
 * Only the ledger API and fields of layout version 1 are used, so that the
 * same test shows the old behaviour.
 */
#include "ledger_test.h"

#define LIMIT (100 * MiB)

enum window { CHARGE_HALF, RELEASE_HALF };

/* A child that claims, charges 20 MiB, then dies inside a window: after
 * raising the aggregate by 30 MiB for a charge it never records, or after
 * taking 8 of its 20 MiB out of its slot but not out of the aggregate. */
static pid_t die_in_window(struct cs_ledger *l, enum window w, int *slot)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        CHECK_EQ(cs__ledger_after_fork(l), 0);
        CHECK_EQ(cs__ledger_claim(l), 0);
        CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, 20 * MiB), 0);
        if (w == CHARGE_HALF)
            __atomic_fetch_add(&l->hdr->dev[0].used, 30 * MiB, __ATOMIC_SEQ_CST);
        else
            __atomic_fetch_sub(&cs__ledger_my_slot(l)->bytes[0][CS_MEM_DATA], 8 * MiB,
                               __ATOMIC_SEQ_CST);
        lt_write_full(fds[1], &l->slot, sizeof l->slot);
        for (;;)
            pause();
    }
    close(fds[1]);
    cs_read_full(fds[0], slot, sizeof *slot, 10000);
    close(fds[0]);
    CHECK(kill(pid, SIGKILL) == 0);
    int st = lt_wait(pid, 10);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    return pid;
}

/* A live process of the tenant holding `bytes` until told to go. */
static pid_t live_holder(struct cs_ledger *l, uint64_t bytes, int *go_fd)
{
    int ready[2], go[2];
    pid_t pid = lt_helper_fork(l, ready, go);
    if (pid == 0) {
        CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, bytes), 0);
        lt_write_full(ready[1], "r", 1);
        char c;
        cs_read_full(go[0], &c, 1, 60000);
        CHECK_EQ_U(cs__ledger_my_slot(l)->bytes[0][CS_MEM_DATA], bytes);
        cs__ledger_uncharge(l, 0, CS_MEM_DATA, bytes);
        cs__ledger_leave(l);
        _exit(0);
    }
    return lt_helper_ready(pid, ready, go, go_fd);
}

/* The reap after a death in `w` returns the slot's bytes and heals the
 * rest, while this process (10 MiB) and a holder (5 MiB) stay live. */
static void heal_while_live(struct cs_ledger *l, enum window w)
{
    int go;
    pid_t holder = live_holder(l, 5 * MiB, &go);
    int slot;
    die_in_window(l, w, &slot);
    struct cs_ledger_slot *dead = cs__ledger_slot(l, slot);
    CHECK_EQ(dead->state, CS_SLOT_LIVE);
    CHECK(!cs__ledger_slot_alive(l, slot));
    const uint64_t over = w == CHARGE_HALF ? 30 * MiB : 8 * MiB;
    CHECK_EQ_U(cs__ledger_used(l, 0), 10 * MiB + 5 * MiB + 20 * MiB + (w == CHARGE_HALF ? over : 0));

    lt_capture_begin();
    int reaped = cs__ledger_reap(l);
    char *err = lt_capture_end();
    printf("%s", err);
    CHECK_EQ(reaped, 1);
    CHECK_EQ(dead->state, CS_SLOT_FREE);
    /* Only what the two live processes hold is still charged. */
    CHECK_EQ_U(cs__ledger_used(l, 0), 15 * MiB);
    CHECK_CONTAINS(err, "returned them");
    free(err);
    CHECK(cs__ledger_slot_alive(l, l->slot));
    CHECK_EQ_U(cs__ledger_my_slot(l)->bytes[0][CS_MEM_DATA], 10 * MiB);
    /* Admission is exact again: the whole rest of the budget fits. */
    CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, LIMIT - 15 * MiB), 0);
    CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, 1), -ENOMEM);
    cs__ledger_uncharge(l, 0, CS_MEM_DATA, LIMIT - 15 * MiB);

    /* The holder's charge was never touched: it releases it whole. */
    lt_write_full(go, "g", 1);
    close(go);
    cs_wait_ok(holder, 10000);
    CHECK_EQ_U(cs__ledger_used(l, 0), 10 * MiB);
}

int main(void)
{
    const char *path = lt_path("window");
    struct cs_ledger_params p = lt_params(LIMIT);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 10 * MiB), 0);

    heal_while_live(&l, CHARGE_HALF);
    heal_while_live(&l, RELEASE_HALF);
    cs__ledger_uncharge(&l, 0, CS_MEM_DATA, 10 * MiB);
    cs__ledger_leave(&l);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    CHECK_EQ_U(l.hdr->live, 0);

    /* The window when the last process dies instead of leaving: its slot
     * stays LIVE until reaped. A reaper without a slot of its own (a
     * monitor) reaps it and leaves nothing charged. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(cs__ledger_after_fork(&l), 0);
        CHECK_EQ(cs__ledger_claim(&l), 0);
        __atomic_fetch_add(&l.hdr->dev[0].used, 5 * MiB, __ATOMIC_SEQ_CST);
        _exit(0); /* no leave: a crash */
    }
    cs_wait_ok(pid, 10000);
    CHECK_EQ_U(l.hdr->live, 1);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 5 * MiB);
    lt_capture_begin();
    CHECK_EQ(cs__ledger_reap(&l), 1);
    char *err = lt_capture_end();
    CHECK(strstr(err, "5242880 bytes") != NULL);
    free(err);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    CHECK_EQ_U(l.hdr->live, 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, LIMIT), 0);
    cs__ledger_uncharge(&l, 0, CS_MEM_DATA, LIMIT);
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
    printf("ledger_crash_window: ok\n");
    return 0;
}
