/*
 * ledger_fork_exec: fork and exec never confuse slot ownership.
 *  - A fork child that has not run cs__ledger_after_fork refuses to reap or
 *    charge (its descriptor is the parent's, with the parent's locks).
 *  - After cs__ledger_after_fork the child claims its own slot; its charges
 *    and its leave never touch the parent's slot.
 *  - Closing the inherited descriptor in a child does not release the
 *    parent's lock (the description is still the parent's).
 *  - A caller that closed the inherited descriptor itself (fd = -1) gets
 *    a fresh one from cs__ledger_after_fork.
 *  - The descriptor is close-on-exec; an exec'd image registers afresh in
 *    another slot while the parent's stays.
 */
#include "ledger_test.h"

static int exec_helper(char **argv)
{
    const char *path = argv[2];
    int inherited = atoi(argv[3]);
    int parent_slot = atoi(argv[4]);
    int out = atoi(argv[5]);
    /* O_CLOEXEC: the parent's descriptor did not survive exec. */
    CHECK(fcntl(inherited, F_GETFD) == -1 && errno == EBADF);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, NULL, false, &l), 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    CHECK_NE(l.slot, parent_slot);
    CHECK(cs__ledger_slot_alive(&l, parent_slot));
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 3 * MiB), 0);
    CHECK_EQ(cs__ledger_reap(&l), 0);
    lt_write_full(out, &l.slot, sizeof l.slot);
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
    return 0;
}

static void check_parent(struct cs_ledger *l, uint64_t used)
{
    struct cs_ledger_slot *s = cs__ledger_my_slot(l);
    CHECK(s != NULL);
    CHECK_EQ(s->state, CS_SLOT_LIVE);
    CHECK_EQ(s->pid, getpid());
    CHECK_EQ_U(s->bytes[0][CS_MEM_DATA], 10 * MiB);
    CHECK_EQ_U(cs__ledger_used(l, 0), used);
    CHECK_EQ_U(l->hdr->live, 1);
    CHECK_EQ_U(l->hdr->reaped, 0);
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "exec-helper"))
        return exec_helper(argv);

    const char *path = lt_path("fork");
    struct cs_ledger_params p = lt_params(0);
    struct cs_ledger l;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 10 * MiB), 0);
    const int parent_slot = l.slot;

    /* Child A: refuses before after_fork; then its own slot. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(cs__ledger_reap(&l), -ECHILD);
        CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 1 * MiB), -ECHILD);
        CHECK_EQ(cs__ledger_claim(&l), -ECHILD);
        CHECK_EQ(cs__ledger_after_fork(&l), 0);
        CHECK_EQ(l.slot, -1);
        CHECK_EQ(cs__ledger_claim(&l), 0);
        CHECK_NE(l.slot, parent_slot);
        CHECK(cs__ledger_slot_alive(&l, parent_slot));
        CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 5 * MiB), 0);
        CHECK_EQ_U(cs__ledger_used(&l, 0), 15 * MiB);
        CHECK_EQ(cs__ledger_reap(&l), 0);
        cs__ledger_leave(&l);
        struct cs_ledger_slot *ps = cs__ledger_slot(&l, parent_slot);
        CHECK_EQ(ps->state, CS_SLOT_LIVE);
        CHECK_EQ_U(ps->bytes[0][CS_MEM_DATA], 10 * MiB);
        CHECK_EQ_U(cs__ledger_used(&l, 0), 10 * MiB);
        cs__ledger_close(&l);
        _exit(0);
    }
    cs_wait_ok(pid, 10000);
    check_parent(&l, 10 * MiB);

    /* Child B: closing the inherited descriptor does not release the
     * parent's lock; leave without after_fork only forgets. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        cs__ledger_leave(&l);
        CHECK_EQ(l.slot, -1);
        CHECK(close(l.fd) == 0);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        CHECK(fd >= 0);
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                           .l_start = (off_t)(CS_LEDGER_LOCK_BASE + (uint64_t)parent_slot),
                           .l_len = 1};
        CHECK(fcntl(fd, F_OFD_SETLK, &fl) == -1);
        CHECK(errno == EAGAIN || errno == EACCES);
        _exit(0);
    }
    cs_wait_ok(pid, 10000);
    check_parent(&l, 10 * MiB);
    CHECK(cs__ledger_slot_alive(&l, parent_slot));

    /* Child D: an atfork handler that drops the inherited descriptor at
     * once (fd = -1); after_fork then re-opens the path. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(l.fd);
        l.fd = -1;
        l.slot = -1;
        CHECK_EQ(cs__ledger_claim(&l), -EBADF);
        CHECK_EQ(cs__ledger_after_fork(&l), 0);
        CHECK(l.fd >= 0);
        CHECK_EQ(cs__ledger_claim(&l), 0);
        CHECK_NE(l.slot, parent_slot);
        CHECK(cs__ledger_slot_alive(&l, parent_slot));
        CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 2 * MiB), 0);
        CHECK_EQ_U(cs__ledger_used(&l, 0), 12 * MiB);
        cs__ledger_leave(&l);
        cs__ledger_close(&l);
        _exit(0);
    }
    cs_wait_ok(pid, 10000);
    check_parent(&l, 10 * MiB);

    /* Child C: exec'd image. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        char a3[16], a4[16], a5[16];
        snprintf(a3, sizeof a3, "%d", l.fd);
        snprintf(a4, sizeof a4, "%d", parent_slot);
        snprintf(a5, sizeof a5, "%d", fds[1]);
        char *args[] = {argv[0], "exec-helper", (char *)path, a3, a4, a5, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    close(fds[1]);
    int child_slot;
    cs_read_full(fds[0], &child_slot, sizeof child_slot, 10000);
    close(fds[0]);
    cs_wait_ok(pid, 10000);
    CHECK_NE(child_slot, parent_slot);
    check_parent(&l, 10 * MiB);
    CHECK_EQ(cs__ledger_slot(&l, child_slot)->state, CS_SLOT_FREE);

    cs__ledger_uncharge(&l, 0, CS_MEM_DATA, 10 * MiB);
    cs__ledger_leave(&l);
    CHECK_EQ_U(l.hdr->live, 0);
    CHECK_EQ_U(cs__ledger_used(&l, 0), 0);
    cs__ledger_close(&l);
    printf("ledger_fork_exec: ok\n");
    return 0;
}
