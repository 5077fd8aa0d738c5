/*
 * ledger_trust: which existing ledger a tenant accepts (docs/ledger.md,
 * "Ownership"). A tenant never follows a symlink to its
 * ledger, and refuses a ledger others can write or another user owns, each
 * with one message naming the file and the fix; monitors (`cushare status`
 * as root) still read anything. CUSHARE_LEDGER_TRUST=directory (a directory
 * private to the tenant, as HAMi's per-container mount) accepts them, and
 * creates new ledgers 0666 so every user of the container can join.
 *
 * The foreign-owner case plays a real second user: run as root, it makes
 * a throwaway user that prepares the ledger (15 GiB budget, chmod 666) the
 * way an attacker would; without root it is skipped, visibly. On
 * c17f7cb the symlink, the 0666 file and the attacker's ledger are all
 * accepted.
 */
#include "ledger_test.h"
#include "multiuser.h"

#define GiB (1024ull * MiB)

/* A tenant's open of `path` with a 1 GiB budget: the code, the message. */
static int tenant_open(const char *path, uint32_t trust, char **err)
{
    struct cs_ledger_params p = lt_params(1 * GiB);
    p.trust = trust;
    struct cs_ledger l;
    lt_capture_begin();
    int r = cs__ledger_open(path, &p, false, &l);
    *err = lt_capture_end();
    if (r == 0)
        cs__ledger_close(&l);
    return r;
}

static void expect_refused(const char *path, int code, const char *what)
{
    char *err;
    int r = tenant_open(path, CS_LEDGER_TRUST_OWNER, &err);
    if (r != code) {
        fprintf(stderr, "tenant open of %s returned %d, expected %d; stderr: %s\n", path, r,
                code, err);
        exit(1);
    }
    CHECK_EQ(lt_count_lines(err), 1);
    CHECK_CONTAINS(err, "cushare: ledger: error: ledger ");
    CHECK_CONTAINS(err, path);
    CHECK_CONTAINS(err, what);
    CHECK_CONTAINS(err, "CUSHARE_LEDGER_TRUST=directory");
    printf("  %s", err);
    free(err);
}

static void expect_accepted(const char *path, uint32_t trust)
{
    char *err;
    int r = tenant_open(path, trust, &err);
    if (r != 0) {
        fprintf(stderr, "open of %s (trust %u) returned %d; stderr: %s\n", path, trust, r, err);
        exit(1);
    }
    free(err);
}

static void expect_monitor_reads(const char *path)
{
    struct cs_ledger m;
    CHECK_EQ(cs__ledger_open(path, NULL, true, &m), 0);
    cs__ledger_close(&m);
}

static void make_ledger(const char *path)
{
    struct cs_ledger l;
    struct cs_ledger_params p = lt_params(1 * GiB);
    CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
    cs__ledger_close(&l);
}

static void single_user(void)
{
    const char *good = lt_path("good");
    make_ledger(good);
    expect_accepted(good, CS_LEDGER_TRUST_OWNER);

    /* A symlink to a perfectly good ledger of ours: still refused. */
    char link[4200];
    snprintf(link, sizeof link, "%s", lt_path("link"));
    CHECK_EQ(symlink(good, link), 0);
    expect_refused(link, -ELOOP, "is a symbolic link: refused");
    expect_monitor_reads(link);
    expect_accepted(link, CS_LEDGER_TRUST_DIRECTORY);

    /* Ours, but anybody may write it (and so raise its budget). */
    const char *open_to_all = lt_path("mode666");
    make_ledger(open_to_all);
    CHECK_EQ(chmod(open_to_all, 0666), 0);
    expect_refused(open_to_all, -EPERM, "is writable by group or others (mode 0666)");
    CHECK_EQ(chmod(open_to_all, 0620), 0);
    expect_refused(open_to_all, -EPERM, "is writable by group or others (mode 0620)");
    expect_monitor_reads(open_to_all);
    expect_accepted(open_to_all, CS_LEDGER_TRUST_DIRECTORY);

    /* Under the opt-in a new ledger is made for every user of the
     * directory; by default it stays 0600. */
    const char *shared = lt_path("shared");
    struct cs_ledger_params p = lt_params(1 * GiB);
    p.trust = CS_LEDGER_TRUST_DIRECTORY;
    struct cs_ledger l;
    mode_t old = umask(022);
    CHECK_EQ(cs__ledger_open(shared, &p, false, &l), 0);
    umask(old);
    cs__ledger_close(&l);
    struct stat st;
    CHECK_EQ(stat(shared, &st), 0);
    CHECK_EQ(st.st_mode & 07777, 0666);
    CHECK_EQ(stat(good, &st), 0);
    CHECK_EQ(st.st_mode & 07777, 0600);
}

/* The attacker's side (run as the throwaway user): a ledger with a 15 GiB
 * budget at the victim's path, writable by everybody. */
static int attacker_prepares(const char *path)
{
    struct cs_ledger_params p = lt_params(15 * GiB);
    struct cs_ledger l;
    if (cs__ledger_open(path, &p, false, &l))
        return 1;
    cs__ledger_close(&l);
    return chmod(path, 0666) ? 2 : 0;
}

static void foreign_owner(void)
{
    const struct cs_test_user *u = cs_test_user();
    /* A directory both can write, like /tmp. */
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", lt_path("shared-dir"));
    CHECK_EQ(mkdir(dir, 0700), 0);
    CHECK_EQ(chmod(lt_dir(), 0755), 0);
    CHECK_EQ(chmod(dir, 01777), 0);
    char path[4300];
    snprintf(path, sizeof path, "%s/victim.ledger", dir);
    char *argv[] = {(char *)cs_test_self(), "attacker", path, NULL};
    CHECK_EQ(cs_test_run_as(u, argv), 0);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_uid, u->uid);

    char what[128];
    snprintf(what, sizeof what, "is owned by uid %u, not by this process's uid %u",
             (unsigned)u->uid, (unsigned)geteuid());
    expect_refused(path, -EPERM, what);
    /* Even made private again, it is still the attacker's file. */
    char *chmod600[] = {"chmod", "600", path, NULL};
    CHECK_EQ(cs_test_run_as(u, chmod600), 0);
    expect_refused(path, -EPERM, what);
    expect_monitor_reads(path);
    /* The documented deployment: a directory private to the tenant. */
    expect_accepted(path, CS_LEDGER_TRUST_DIRECTORY);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "attacker"))
        return attacker_prepares(argv[2]);
    single_user();
    foreign_owner();
    printf("ledger_trust: ok\n");
    return 0;
}
