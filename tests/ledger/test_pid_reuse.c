/*
 * ledger_pid_reuse: liveness is the slot lock, never the PID. A LIVE slot
 * nobody holds is reaped even though its pid field names a living process
 * (PID reused, or the same number in another PID namespace); a held slot
 * is never reaped even though its pid field names a dead process.
 */
#include "ledger_test.h"

/* Child claims, charges `bytes`, reports its slot, then either exits
 * without leaving (a crash as far as the ledger can tell) or sleeps. */
static pid_t child(struct cs_ledger *l, uint64_t bytes, bool stay, int *slot)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        CHECK_EQ(cs__ledger_after_fork(l), 0);
        CHECK_EQ(cs__ledger_claim(l), 0);
        CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, bytes), 0);
        lt_write_full(fds[1], &l->slot, sizeof l->slot);
        if (!stay)
            _exit(0);
        for (;;)
            pause();
    }
    close(fds[1]);
    cs_read_full(fds[0], slot, sizeof *slot, 10000);
    close(fds[0]);
    return pid;
}

int main(void)
{
    struct cs_ledger_params p = lt_params(0);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(lt_path("pids"), &p, false, &l), 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);

    /* A dead slot whose pid field names a living process (us). */
    int dead_slot;
    pid_t dead_pid = child(&l, 10 * MiB, false, &dead_slot);
    cs_wait_ok(dead_pid, 10000);
    struct cs_ledger_slot *ds = cs__ledger_slot(&l, dead_slot);
    CHECK_EQ(ds->state, CS_SLOT_LIVE);
    __atomic_store_n(&ds->pid, (int32_t)getpid(), __ATOMIC_RELAXED);
    CHECK(!cs__ledger_slot_alive(&l, dead_slot));
    CHECK_EQ(cs__ledger_reap(&l), 1);
    CHECK_EQ(ds->state, CS_SLOT_FREE);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);

    /* A held slot whose pid field names a dead process. */
    int live_slot;
    pid_t live_pid = child(&l, 5 * MiB, true, &live_slot);
    struct cs_ledger_slot *ls = cs__ledger_slot(&l, live_slot);
    __atomic_store_n(&ls->pid, (int32_t)dead_pid, __ATOMIC_RELAXED);
    CHECK(kill(dead_pid, 0) != 0 && errno == ESRCH);
    CHECK(cs__ledger_slot_alive(&l, live_slot));
    CHECK_EQ(cs__ledger_reap(&l), 0);
    CHECK_EQ(ls->state, CS_SLOT_LIVE);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 5 * MiB);
    /* A monitor's read-only view agrees. */
    struct cs_ledger ro;
    CHECK_EQ(cs__ledger_open(l.path, NULL, true, &ro), 0);
    CHECK(cs__ledger_slot_alive(&ro, live_slot));
    CHECK(cs__ledger_slot_alive(&ro, l.slot));
    CHECK(!cs__ledger_slot_alive(&ro, dead_slot));

    CHECK(kill(live_pid, SIGKILL) == 0);
    lt_wait(live_pid, 10);
    CHECK(!cs__ledger_slot_alive(&ro, live_slot));
    CHECK_EQ(cs__ledger_reap(&l), 1);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    CHECK_EQ_U(l.hdr->reaped, 2);
    cs__ledger_close(&ro);
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
    printf("ledger_pid_reuse: ok\n");
    return 0;
}
