/*
 * ledger_reap_at_claim: dead slots left by SIGKILL churn must not keep
 * holding the budget with nothing running, as they did while they were
 * reaped only when an admission was refused. A process that claims a
 * slot now reaps them (and heals what they left beyond their slots), with
 * or without live processes around, before it has charged or viewed
 * anything. A claim that lands on a dead process's own slot reaps that
 * slot before taking it (counted as reaped, never as a second live slot).
 *
 * Only the ledger API of layout version 1 is used, so that the same test
 * shows the old behaviour.
 */
#include "ledger_test.h"

#define LIMIT (12288 * MiB)
#define DEAD 38
#define EACH (256 * MiB)

/* DEAD children claim and charge EACH, all before any of them dies (a
 * claim reaps, so they must not die one by one), then are SIGKILLed; the
 * aggregate is first raised by `window` bytes no slot records, as a child
 * killed inside a charge leaves it (raised only once every claim is done,
 * so that no claim heals it early). */
static void kill_a_crowd(struct cs_ledger *l, uint64_t window)
{
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t kids[DEAD];
    for (int i = 0; i < DEAD; i++) {
        kids[i] = fork();
        CHECK(kids[i] >= 0);
        if (kids[i] == 0) {
            close(ready[0]);
            CHECK_EQ(cs__ledger_after_fork(l), 0);
            CHECK_EQ(cs__ledger_claim(l), 0);
            CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, EACH), 0);
            lt_write_full(ready[1], "r", 1);
            for (;;)
                pause();
        }
    }
    close(ready[1]);
    for (int i = 0; i < DEAD; i++) {
        char c;
        cs_read_full(ready[0], &c, 1, 30000);
    }
    close(ready[0]);
    __atomic_fetch_add(&l->hdr->dev[0].used, window, __ATOMIC_SEQ_CST);
    for (int i = 0; i < DEAD; i++)
        CHECK(kill(kids[i], SIGKILL) == 0);
    for (int i = 0; i < DEAD; i++) {
        int st = lt_wait(kids[i], 30);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    }
}

static int dead_slots(const struct cs_ledger *l)
{
    int n = 0;
    for (int i = 0; i < CS_LEDGER_SLOTS; i++)
        n += cs__ledger_slot(l, i)->state == CS_SLOT_LIVE && !cs__ledger_slot_alive(l, i);
    return n;
}

/* A live holder of 100 MiB that stays until told. */
static pid_t holder(struct cs_ledger *l, int *go_fd)
{
    int ready[2], go[2];
    pid_t pid = lt_helper_fork(l, ready, go);
    if (pid == 0) {
        CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, 100 * MiB), 0);
        lt_write_full(ready[1], "r", 1);
        char c;
        cs_read_full(go[0], &c, 1, 120000);
        cs__ledger_uncharge(l, 0, CS_MEM_DATA, 100 * MiB);
        cs__ledger_leave(l);
        _exit(0);
    }
    return lt_helper_ready(pid, ready, go, go_fd);
}

/* A claim that lands on a dead process's slot reaps it before taking it:
 * the dead process's bytes go back and it counts as reaped, not as a
 * second live slot. The claim is steered onto that slot by rewinding the
 * rotating hint to where the dead process's own claim started. */
static void claim_on_a_dead_slot(struct cs_ledger *l)
{
    const uint64_t reaped = l->hdr->reaped, live = l->hdr->live;
    const uint64_t hint = __atomic_load_n(&l->hdr->claim_hint, __ATOMIC_SEQ_CST);
    const int idx = (int)(hint % CS_LEDGER_SLOTS);
    int ready[2], go[2], go_fd;
    pid_t pid = lt_helper_fork(l, ready, go);
    if (pid == 0) {
        CHECK_EQ(l->slot, idx);
        CHECK_EQ(cs__ledger_charge(l, 0, CS_MEM_DATA, EACH), 0);
        lt_write_full(ready[1], "r", 1);
        for (;;)
            pause();
    }
    lt_helper_ready(pid, ready, go, &go_fd);
    CHECK(kill(pid, SIGKILL) == 0);
    int st = lt_wait(pid, 30);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    close(go_fd);
    CHECK_EQ(cs__ledger_slot(l, idx)->pid, pid);
    CHECK_EQ_U(l->hdr->live, live + 1);
    CHECK_EQ_U(cs__ledger_used(l, 0), EACH);

    __atomic_store_n(&l->hdr->claim_hint, hint, __ATOMIC_SEQ_CST);
    CHECK_EQ(cs__ledger_claim(l), 0);
    CHECK_EQ(l->slot, idx);
    CHECK_EQ_U(l->hdr->reaped, reaped + 1);
    CHECK_EQ_U(l->hdr->live, live + 1);
    CHECK_EQ_U(cs__ledger_used(l, 0), 0);
    cs__ledger_leave(l);
    CHECK_EQ_U(l->hdr->live, live);
}

int main(void)
{
    struct cs_ledger_params p = lt_params(LIMIT);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(lt_path("claim"), &p, false, &l), 0);

    /* Everybody gone: the next process's claim alone reaps them all. */
    kill_a_crowd(&l, 0);
    CHECK_EQ(dead_slots(&l), DEAD);
    CHECK_EQ_U(l.hdr->live, DEAD);
    CHECK_EQ_U(cs__ledger_used(&l, 0), DEAD * EACH);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    CHECK_EQ(dead_slots(&l), 0);
    CHECK_EQ_U(l.hdr->reaped, DEAD);
    CHECK_EQ_U(l.hdr->live, 1);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    cs__ledger_leave(&l);

    /* A live process stays; one of the dead left 30 MiB beyond its slot.
     * The next claim reaps the dead, heals the 30 MiB and leaves the live
     * holder's 100 MiB alone. */
    int go;
    pid_t h = holder(&l, &go);
    kill_a_crowd(&l, 30 * MiB);
    CHECK_EQ(dead_slots(&l), DEAD);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 100 * MiB + DEAD * EACH + 30 * MiB);
    lt_capture_begin();
    CHECK_EQ(cs__ledger_claim(&l), 0);
    char *err = lt_capture_end();
    printf("%s", err);
    free(err);
    CHECK_EQ(dead_slots(&l), 0);
    CHECK_EQ_U(l.hdr->reaped, 2 * DEAD);
    CHECK_EQ_U(l.hdr->live, 2);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 100 * MiB);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, LIMIT - 100 * MiB), 0);
    cs__ledger_uncharge(&l, 0, CS_MEM_DATA, LIMIT - 100 * MiB);

    lt_write_full(go, "g", 1);
    close(go);
    cs_wait_ok(h, 10000);
    cs__ledger_leave(&l);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);

    claim_on_a_dead_slot(&l);
    cs__ledger_close(&l);
    printf("ledger_reap_at_claim: ok\n");
    return 0;
}
