/*
 * ledger_creator_killed: a creator SIGKILLed after writing its temporary
 * file but before linking it at the path leaves no file at the path, so
 * the next opener creates the ledger itself within a bounded time instead
 * of waiting for anybody. Checked for O_TMPFILE and for the named-temporary
 * fallback.
 */
#include "ledger_test.h"

static int hook_fd = -1;

static void pause_before_link(void)
{
    char c = 'p';
    lt_write_full(hook_fd, &c, 1);
    for (;;)
        pause();
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void run(const char *name, bool named)
{
    const char *path = lt_path(name);
    struct cs_ledger_params p = lt_params(1 * MiB);
    int before = count_entries(lt_dir());
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        hook_fd = fds[1];
        cs__ledger_test_hooks.before_link = pause_before_link;
        cs__ledger_test_hooks.force_named_temp = named;
        struct cs_ledger l;
        cs__ledger_open(path, &p, false, &l);
        _exit(7); /* not reached */
    }
    close(fds[1]);
    char c;
    cs_read_full(fds[0], &c, 1, 10000); /* the creator is paused before link */
    close(fds[0]);
    CHECK(access(path, F_OK) != 0 && errno == ENOENT);
    CHECK(kill(pid, SIGKILL) == 0);
    int st = lt_wait(pid, 10);
    CHECK(WIFSIGNALED(st));
    CHECK(access(path, F_OK) != 0 && errno == ENOENT);
    /* O_TMPFILE leaves nothing; the fallback leaves its named temporary
     * (never at the path). */
    CHECK_EQ(count_entries(lt_dir()), before + (named ? 1 : 0));

    int64_t t0 = cs_now_ns();
    struct cs_ledger l;
    cs__ledger_test_hooks.force_named_temp = named;
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    cs__ledger_test_hooks.force_named_temp = false;
    double took = cs_ms_since(t0) / 1000;
    CHECK(l.created);
    CHECK_EQ(cs__ledger_claim(&l), 0);
    CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 1 * MiB), 0);
    CHECK(took < 1.0 * cs_test_scale());
    cs__ledger_leave(&l);
    cs__ledger_close(&l);
    printf("ledger_creator_killed (%s): next opener created the ledger in %.2f ms\n",
           named ? "named temporary" : "O_TMPFILE", took * 1e3);
}

int main(void)
{
    run("tmpfile", false);
    run("named", true);
    return 0;
}
