/*
 * ledger_sigkill_reap: a process SIGKILLed while holding bytes is detected
 * by its free slot lock; one attempt of the ledger is refused while its
 * bytes count, the next charge (src/account) that needs them reaps it and
 * succeeds; a slot is reaped exactly once, even by racing reapers.
 */
#include "ledger_test.h"

#include "account/account.h"

#define LIMIT (100 * MiB)

/* Forks a child that claims a slot, charges data+context bytes, reports
 * its slot and sleeps until killed. */
static pid_t spawn_holder(struct cs_ledger *l, uint64_t data, uint64_t ctx, int *slot)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        CHECK_EQ(cs__ledger_after_fork(l), 0);
        CHECK_EQ(cs__ledger_claim(l), 0);
        CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, data), 0);
        CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_CONTEXT, ctx), 0);
        lt_write_full(fds[1], &l->slot, sizeof l->slot);
        for (;;)
            pause();
    }
    close(fds[1]);
    cs_read_full(fds[0], slot, sizeof *slot, 10000);
    close(fds[0]);
    return pid;
}

static void kill_and_wait(pid_t pid)
{
    CHECK(kill(pid, SIGKILL) == 0);
    int st = lt_wait(pid, 10);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

int main(void)
{
    const char *path = lt_path("kill");
    struct cs_ledger_params p = lt_params(LIMIT);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);

    int victim;
    pid_t pid = spawn_holder(&l, 80 * MiB, 10 * MiB, &victim);
    CHECK_NE(victim, l.slot);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 90 * MiB);
    CHECK_EQ_U(l.hdr->live, 2);
    CHECK(cs__ledger_slot_alive(&l, victim));
    CHECK(cs__ledger_slot_alive(&l, l.slot));
    /* The holder is alive: a reap takes nothing and a charge that needs
     * its bytes is refused (with nothing charged). */
    CHECK_EQ(cs__ledger_reap(&l), 0);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 50 * MiB), -ENOMEM);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 90 * MiB);

    kill_and_wait(pid);
    struct cs_ledger_slot *vs = cs__ledger_slot(&l, victim);
    CHECK_EQ(vs->state, CS_SLOT_LIVE); /* nothing ran at its death */
    CHECK(!cs__ledger_slot_alive(&l, victim));
    CHECK_EQ_U(cs__ledger_used(&l, 0), 90 * MiB);

    /* One attempt of the ledger is refused: the dead bytes still count. */
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 50 * MiB), -ENOMEM);
    CHECK_EQ_U(l.hdr->reaped, 0);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 90 * MiB);
    /* The charge that needs the dead bytes reaps, then succeeds. */
    CHECK_EQ(cs__account_charge(&l, 0, CS_MEM_DATA, 50 * MiB, NULL), 0);
    CHECK_EQ_U(l.hdr->reaped, 1);
    CHECK_EQ_U(l.hdr->live, 1);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 50 * MiB);
    CHECK_EQ(vs->state, CS_SLOT_FREE);
    CHECK_EQ_U(vs->bytes[0][CS_MEM_DATA], 0);
    CHECK_EQ_U(vs->bytes[0][CS_MEM_CONTEXT], 0);
    /* Exactly once: another reap finds nothing and subtracts nothing. */
    CHECK_EQ(cs__ledger_reap(&l), 0);
    CHECK_EQ_U(l.hdr->reaped, 1);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 50 * MiB);

    /* Racing reapers in 4 processes: one of them reaps the next victim. */
    pid = spawn_holder(&l, 30 * MiB, 0, &victim);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 80 * MiB);
    kill_and_wait(pid);
    int go[2], res[2];
    CHECK(pipe(go) == 0 && pipe(res) == 0);
    pid_t reapers[4];
    for (int i = 0; i < 4; i++) {
        reapers[i] = fork();
        CHECK(reapers[i] >= 0);
        if (reapers[i] == 0) {
            close(go[1]);
            struct cs_ledger r;
            CHECK_EQ(cs__ledger_open(path, NULL, false, &r), 0);
            char c;
            CHECK_EQ(read(go[0], &c, 1), 0);
            int n = cs__ledger_reap(&r);
            lt_write_full(res[1], &n, sizeof n);
            _exit(0);
        }
    }
    close(go[0]);
    close(res[1]);
    close(go[1]);
    int sum = 0;
    for (int i = 0; i < 4; i++) {
        int n;
        cs_read_full(res[0], &n, sizeof n, 10000);
        CHECK_GE(n, 0);
        sum += n;
    }
    for (int i = 0; i < 4; i++)
        cs_wait_ok(reapers[i], 10000);
    CHECK_EQ(sum, 1);
    CHECK_EQ_U(l.hdr->reaped, 2);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 50 * MiB);
    CHECK_EQ_U(l.hdr->live, 1);

    cs__ledger_uncharge(&l, 0, CS_MEM_DATA, 50 * MiB);
    cs__ledger_leave(&l);
    cs__ledger_leave(&l); /* idempotent */
    CHECK_EQ_U(l.hdr->live, 0);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    cs__ledger_close(&l);
    printf("ledger_sigkill_reap: ok\n");
    return 0;
}
