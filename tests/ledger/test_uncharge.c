/*
 * ledger_uncharge_no_underflow: uncharging more than was charged clamps at
 * zero (slot and aggregate), warns a bounded number of times, and never
 * eats another process's charges. Bad arguments are -EINVAL and charge
 * nothing; an overflowing charge is refused.
 */
#include "ledger_test.h"

int main(void)
{
    const char *path = lt_path("uncharge");
    struct cs_ledger_params p = lt_params(0);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);

    /* Not claimed: nothing can be charged. */
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 1), -ENOTCONN);
    CHECK_EQ(cs__ledger_claim(&l), 0);

    /* Another process holds 1000 bytes. */
    int fds[2], go[2];
    CHECK(pipe(fds) == 0 && pipe(go) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        CHECK_EQ(cs__ledger_after_fork(&l), 0);
        CHECK_EQ(cs__ledger_claim(&l), 0);
        CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 1000), 0);
        char c = 'r';
        lt_write_full(fds[1], &c, 1);
        CHECK_EQ(read(go[0], &c, 1), 0);
        cs__ledger_uncharge(&l, 0, CS_MEM_DATA, 1000);
        cs__ledger_leave(&l);
        _exit(0);
    }
    close(go[0]);
    char c;
    cs_read_full(fds[0], &c, 1, 10000);

    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 100), 0);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 1100);
    lt_capture_begin();
    cs__ledger_uncharge(&l, 0, CS_MEM_DATA, 150);
    char *err = lt_capture_end();
    CHECK_CONTAINS(err, "uncharge of 150 bytes on device 0 (data) exceeds the 100 charged");
    CHECK_EQ(lt_count_lines(err), 1);
    free(err);
    CHECK_EQ_U(cs__ledger_my_slot(&l)->bytes[0][CS_MEM_DATA], 0);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 1000); /* the other process's bytes stay */

    /* A category never charged; repeated: warnings are capped. */
    lt_capture_begin();
    for (int i = 0; i < 100; i++)
        cs__ledger_uncharge(&l, 0, CS_MEM_POOL, 1ull << 40);
    err = lt_capture_end();
    CHECK_LE(lt_count_lines(err), 8);
    free(err);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 1000);
    CHECK_EQ_U(cs__ledger_my_slot(&l)->bytes[0][CS_MEM_POOL], 0);

    /* Bad device or category: refused, nothing charged or returned. */
    CHECK_EQ(cs__ledger_charge(&l, -1, CS_MEM_DATA, 1), -EINVAL);
    CHECK_EQ(cs__ledger_charge(&l, CS_MAX_DEVICES, CS_MEM_DATA, 1), -EINVAL);
    CHECK_EQ(cs__ledger_charge(&l, 0, (enum cs_mem_category)CS_MEM_NCATEGORIES, 1), -EINVAL);
    lt_capture_begin();
    cs__ledger_uncharge(&l, CS_MAX_DEVICES, CS_MEM_DATA, 1);
    err = lt_capture_end();
    free(err);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 1000);
    CHECK_EQ_U(cs__ledger_used(&l, CS_MAX_DEVICES), 0);

    /* Overflow guard (no limit on this device). */
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, UINT64_MAX), -EOVERFLOW);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 1000);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 0), 0);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 1000);

    close(go[1]);
    cs_wait_ok(pid, 10000);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    cs__ledger_leave(&l);
    CHECK_EQ_U(l.hdr->live, 0);
    cs__ledger_close(&l);
    printf("ledger_uncharge_no_underflow: ok\n");
    return 0;
}
