/*
 * Trusted procfs against real PID namespaces (unshare). The dangerous case
 * is a procfs mounted inside the workload's own namespace: its NStgid has a
 * single, plausible, wrong value. It must be refused and the fallback must
 * run; the host's procfs must give the PID the host sees.
 */
#include "id_test.h"
#include <sched.h>
#include <sys/mount.h>

#define INIT_PIDNS_INO 0xEFFFFFFCull

struct shared {
    int rc_private, rc_host, rc_nested, rc_nested_host, rc_fake;
    pid_t pid_private, pid_host, pid_nested_host;
    pid_t self_in_ns;
    pid_t fork_pid;                     /* what the parent saw from fork */
    pid_t b_host;
    int resolve_tier, resolve_reason, resolve_reason_tier;
    pid_t resolve_pid;
    int checked;                        /* parent verified the nested pid */
    int nested_levels;
};

static struct shared *sh;
static char procdir[64];

static bool in_init_pidns(void)
{
    struct stat st;
    CHECK(stat("/proc/self/ns/pid", &st) == 0);
    return (unsigned long long)st.st_ino == INIT_PIDNS_INO;
}

static int probe_4242(void *ctx, pid_t *out)
{
    (void)ctx;
    *out = 4242;
    return 0;
}

/* Runs in a new mount namespace: keep our mounts off the host. */
static void make_mounts_private(void)
{
    CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
}

static void mount_proc(const char *dir)
{
    if (mount("proc", dir, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
        fprintf(stderr, "mount proc on %s: %s\n", dir, strerror(errno));
        _exit(3);
    }
}

/* pid 1 of a fresh namespace, with its own procfs at procdir. */
static void private_child(void)
{
    sh->self_in_ns = getpid();
    mount_proc(procdir);
    pid_t p = ID_SENTINEL;
    sh->rc_private = cs__procfs_host_pid(procdir, &p);
    sh->pid_private = p;
    p = ID_SENTINEL;
    sh->rc_host = cs__procfs_host_pid("/proc", &p);
    sh->pid_host = p;

    struct cs_identity_config cfg = {.procfs_root = procdir, .probe = probe_4242};
    struct cs_identity_result r;
    cs__identity_resolve(&cfg, &r);
    sh->resolve_tier = r.tier;
    sh->resolve_reason = r.reason;
    sh->resolve_reason_tier = r.reason_tier;
    sh->resolve_pid = r.host_pid;
    umount(procdir);
    _exit(0);
}

static void test_private_procfs(bool init_ns)
{
    pid_t helper = cs_fork_tied();
    CHECK(helper >= 0);
    if (helper == 0) {
        if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) {
            perror("unshare");
            _exit(2);
        }
        make_mounts_private();
        pid_t c = cs_fork_tied();
        if (c < 0)
            _exit(4);
        if (c == 0)
            private_child();
        sh->fork_pid = c;
        int st;
        waitpid(c, &st, 0);
        _exit(cs_exit_code(st));
    }
    CHECK_EQ(cs_exit_code(cs_wait_child(helper, 10000)), 0);

    CHECK_EQ(sh->self_in_ns, 1);
    /* The private procfs: one level (1), refused, nothing returned. */
    CHECK_EQ(sh->rc_private, -EPERM);
    CHECK_EQ(sh->pid_private, ID_SENTINEL);
    /* The resolver fell through to the probe, naming procfs's reason. */
    CHECK_EQ(sh->resolve_tier, CS_IDENTITY_PROBE);
    CHECK_EQ(sh->resolve_pid, 4242);
    CHECK_EQ(sh->resolve_reason, -EPERM);
    CHECK_EQ(sh->resolve_reason_tier, CS_IDENTITY_PROCFS);
    if (init_ns) {
        /* The host's procfs gives the PID our parent saw from fork(). */
        CHECK_EQ(sh->rc_host, 0);
        CHECK_EQ(sh->pid_host, sh->fork_pid);
        CHECK_NE(sh->pid_host, 1);
    } else {
        /* Not in the initial namespace ourselves: our "/proc" is an
         * intermediate namespace's and must be refused too. */
        CHECK(sh->rc_host == -EXDEV || sh->rc_host == -EPERM);
        CHECK_EQ(sh->pid_host, ID_SENTINEL);
    }
}

/* C: pid 1 of ns2, a grandchild namespace; procdir is ns1's procfs. */
static void nested_grandchild(void)
{
    pid_t p = ID_SENTINEL;
    sh->rc_nested = cs__procfs_host_pid(procdir, &p);
    sh->pid_private = p;
    p = ID_SENTINEL;
    sh->rc_nested_host = cs__procfs_host_pid("/proc", &p);
    __atomic_store_n(&sh->pid_nested_host, p, __ATOMIC_RELEASE);
    /* Stay alive until the parent looked us up by the host PID. */
    int64_t deadline = cs_deadline_ns(5000);
    while (!__atomic_load_n(&sh->checked, __ATOMIC_ACQUIRE) && cs_now_ns() < deadline)
        cs_sleep_ms(1);
    _exit(0);
}

/* B: pid 1 of ns1. Mounts ns1's procfs, then makes ns2 below itself. */
static void nested_child(void)
{
    if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0)
        _exit(2);
    make_mounts_private();
    mount_proc(procdir);
    pid_t c = cs_fork_tied();
    if (c < 0)
        _exit(4);
    if (c == 0)
        nested_grandchild();
    int st;
    waitpid(c, &st, 0);
    _exit(cs_exit_code(st));
}

/* Reads "Key:\t<int>" from /proc/<pid>/status as the host sees it. */
static long status_field(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':')
            v = strtol(line + kl + 1, NULL, 10);
    fclose(f);
    return v;
}

static void test_intermediate_procfs(bool init_ns)
{
    memset(sh, 0, sizeof *sh);
    pid_t helper = cs_fork_tied();
    CHECK(helper >= 0);
    if (helper == 0) {
        if (unshare(CLONE_NEWPID) != 0)
            _exit(2);
        pid_t b = cs_fork_tied();
        if (b < 0)
            _exit(4);
        if (b == 0)
            nested_child();
        sh->b_host = b;
        int st;
        waitpid(b, &st, 0);
        _exit(cs_exit_code(st));
    }
    /* Wait for the grandchild's answers, then check them from the host. */
    CS_WAIT_FOR(__atomic_load_n(&sh->pid_nested_host, __ATOMIC_ACQUIRE), 5000,
                "the grandchild's answers");
    pid_t host_c = sh->pid_nested_host;
    if (init_ns) {
        CHECK_EQ(sh->rc_nested_host, 0);
        CHECK_GT(host_c, 1);
        /* The host's own view of that PID: parent is B, as forked. */
        CHECK_EQ(status_field(host_c, "PPid"), sh->b_host);
    }
    __atomic_store_n(&sh->checked, 1, __ATOMIC_RELEASE);
    CHECK_EQ(cs_exit_code(cs_wait_child(helper, 10000)), 0);
    /* ns1's procfs seen from ns2: two levels, but not the host's. */
    CHECK_EQ(sh->rc_nested, -EXDEV);
    CHECK_EQ(sh->pid_private, ID_SENTINEL);
}

static void test_fake_directory(void)
{
    /* A directory of crafted files that claims to be the host's view. */
    char dir[64], path[128];
    id_mkdtemp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/self", dir);
    CHECK(mkdir(path, 0755) == 0);
    snprintf(path, sizeof path, "%s/self/status", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "Name:\tx\nNStgid:\t8011\t%d\n", (int)getpid());
    fclose(f);
    pid_t p = ID_SENTINEL;
    CHECK_EQ(cs__procfs_host_pid(dir, &p), -EMEDIUMTYPE);
    CHECK_EQ(p, ID_SENTINEL);
    cs_rmtree(dir);
}

static void test_own_proc(bool init_ns)
{
    pid_t p = ID_SENTINEL;
    int rc = cs__procfs_host_pid("/proc", &p);
    if (init_ns) {
        /* One level, and we are the initial namespace: trusted. */
        CHECK_EQ(rc, 0);
        CHECK_EQ(p, getpid());
    } else {
        CHECK_EQ(rc, -EPERM);
        CHECK_EQ(p, ID_SENTINEL);
    }
    CHECK_EQ(cs__procfs_host_pid("relative/proc", &p), -EINVAL);
    CHECK_EQ(cs__procfs_host_pid("/nonexistent-cushare-procfs", &p), -ENOENT);
    CHECK_EQ(cs__procfs_host_pid(NULL, &p), -EINVAL);
    CHECK_STREQ(cs__procfs_reason(-EPERM), "private_procfs");
    CHECK_STREQ(cs__procfs_reason(-EXDEV), "intermediate_namespace");
}

int main(void)
{
    cs_require_root("it chowns files, changes uid and makes PID namespaces");
    bool init_ns = in_init_pidns();
    printf("test runs in the %s PID namespace\n", init_ns ? "initial" : "a child");
    sh = cs_shared(sizeof *sh);
    id_mkdtemp(procdir, sizeof procdir);

    test_own_proc(init_ns);
    test_fake_directory();
    test_private_procfs(init_ns);
    test_intermediate_procfs(init_ns);

    rmdir(procdir);
    printf("procfs trust ok\n");
    return 0;
}
