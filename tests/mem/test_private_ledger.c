/*
 * Private ledgers (no CUDA_DEVICE_MEMORY_SHARED_CACHE) leave nothing behind
 * (before, every SIGKILLed process left its ledger in /dev/shm for good,
 * and a process that exec'd leaked its own).
 *
 *   leftovers: a process killed with SIGKILL, and one that execs (its new
 *     image using CUDA too), leave no file; fork children still share
 *     their parent's ledger.
 *   sweep: files of dead processes (as older builds and a kill in the
 *     instant after creation leave them) are removed when a process makes
 *     its private ledger; a file a live process holds a slot in, one kept
 *     by its maker, and names not of our pattern stay. Once their holders
 *     are dead, the next process removes those ledgers too.
 *   foreign: a dead ledger of our pattern owned by another uid stays
 *     (root only: giving a file away needs it; SKIP otherwise).
 *
 * Each case runs in a mount namespace of its own with a fresh tmpfs on
 * /dev/shm when the system allows it, else on the real /dev/shm (only
 * files the case made itself are then looked at).
 */
#include "mem_test.h"
#include "ledger_test.h"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/mount.h>


static char dir[64]; /* /dev/shm/cushare-<uid> */
static bool isolated;

static bool write_id_map(const char *file, unsigned id)
{
    char buf[64];
    int n = snprintf(buf, sizeof buf, "%u %u 1\n", id, id);
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && write(fd, buf, (size_t)n) == n;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A mount namespace (as root, or in a user namespace mapping our own ids)
 * with a fresh tmpfs on /dev/shm. */
static void isolate_dev_shm(void)
{
    const unsigned uid = getuid(), gid = getgid();
    bool ns = unshare(CLONE_NEWNS) == 0;
    if (!ns && unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) {
        int fd = open("/proc/self/setgroups", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            CHECK(write(fd, "deny", 4) == 4);
            close(fd);
        }
        ns = write_id_map("/proc/self/uid_map", uid) && write_id_map("/proc/self/gid_map", gid);
    }
    isolated = ns && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
               mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") == 0;
    if (!isolated)
        printf("note: no private /dev/shm here (%s); using the real one\n", strerror(errno));
    snprintf(dir, sizeof dir, "/dev/shm/cushare-%u", uid);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* The inode of the private ledger this process has open (a descriptor on
 * a file of `dir`; /proc names it "#ino" when it was made with O_TMPFILE,
 * so only the inode identifies it). False if there is none. */
static bool own_ledger(ino_t *ino)
{
    char want[96];
    snprintf(want, sizeof want, "%s/", dir);
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        char link[300], target[300];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        struct stat st;
        if (strncmp(target, want, strlen(want)) != 0 || stat(link, &st) != 0)
            continue;
        *ino = st.st_ino;
        found = true;
    }
    closedir(d);
    return found;
}

/* Helpers that wait to be killed must not outlive a failed test. */
static void die_with_parent(void)
{
    CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0);
}

struct report {
    pid_t pid;
    ino_t ino;
};

/* cuInit (which makes the private ledger), then reports it. */
static void init_and_report(int out)
{
    CHECK_EQ(cuInit(0), CUDA_SUCCESS);
    struct report r = {.pid = getpid()};
    CHECK(own_ledger(&r.ino));
    lt_write_full(out, &r, sizeof r);
}

/* Whether the directory still has the ledger of r: by its inode or by a
 * name made for its pid ("private-<pid>-..."). */
static bool left_behind(const struct report *r)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "private-%d-", (int)r->pid);
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
        found = e->d_ino == r->ino || !strncmp(e->d_name, prefix, strlen(prefix));
    closedir(d);
    return found;
}

/* Forks a child that runs `body(fd)` with fd the write end of a pipe the
 * parent reads reports from; returns the read end. */
static int spawn(void (*body)(int), pid_t *pid)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    *pid = fork();
    CHECK(*pid >= 0);
    if (*pid == 0) {
        close(fds[0]);
        body(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    return fds[0];
}

static void killed_body(int out)
{
    die_with_parent();
    init_and_report(out);
    for (;;)
        pause();
}

static void exec_body(int out)
{
    init_and_report(out);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", out);
    char *args[] = {"test_private_ledger", "exec-image", dir, fd, NULL};
    execv("/proc/self/exe", args);
    _exit(127);
}

/* The exec'd image: nothing of the old image's ledger is open here; its
 * own use of CUDA makes a ledger of its own, gone at its normal exit. */
static int exec_image(char **argv)
{
    snprintf(dir, sizeof dir, "%s", argv[2]);
    ino_t ino;
    CHECK(!own_ledger(&ino));
    init_and_report(atoi(argv[3]));
    return 0;
}

static void case_leftovers(void)
{
    /* SIGKILL: nothing runs at death, and nothing is left. */
    pid_t pid;
    int in = spawn(killed_body, &pid);
    struct report r;
    cs_read_full(in, &r, sizeof r, 20000);
    close(in);
    CHECK_EQ(r.pid, pid);
    CHECK(kill(pid, SIGKILL) == 0);
    int st = lt_wait(pid, 20);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK(!left_behind(&r));

    /* exec: the old image's ledger is not left behind, nor the new one's. */
    in = spawn(exec_body, &pid);
    struct report before, after;
    cs_read_full(in, &before, sizeof before, 20000);
    cs_read_full(in, &after, sizeof after, 20000);
    close(in);
    cs_wait_ok(pid, 20000);
    CHECK(before.pid == pid && after.pid == pid);
    CHECK(before.ino != after.ino);
    CHECK(!left_behind(&before));
    CHECK(!left_behind(&after));

    /* Fork children still join their parent's ledger. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    init_and_report(fds[1]);
    struct report mine, kid;
    cs_read_full(fds[0], &mine, sizeof mine, 20000);
    in = spawn(init_and_report, &pid);
    cs_read_full(in, &kid, sizeof kid, 20000);
    close(in);
    cs_wait_ok(pid, 20000);
    CHECK_EQ((int64_t)kid.ino, (int64_t)mine.ino);

    if (isolated) {
        /* Nothing at all in the directory: even ours has no name. */
        DIR *d = opendir(dir);
        CHECK(d != NULL);
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                CHECK_STREQ(e->d_name, "(nothing)");
        closedir(d);
    }
    printf("killed, exec'd and fork children: no private ledger left behind\n");
}

/* A ledger of ours at dir/name, made by a child that claims a slot (and
 * charges) and then what `then` says: die without leaving, or stay. */
enum holder_end { DIE, STAY, KEEP_ONLY };

static pid_t plant(const char *name, enum holder_end end, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        die_with_parent();
        struct cs_ledger l;
        struct cs_ledger_params p = lt_params(64 * MiB);
        CHECK_EQ(cs__ledger_open(path, &p, false, &l), 0);
        if (end == KEEP_ONLY) {
            /* As `cushare run` keeps the ledger it makes for its command. */
            struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET,
                               .l_start = (off_t)CS_LEDGER_KEEP_LOCK, .l_len = 1};
            CHECK(fcntl(l.fd, F_OFD_SETLK, &fl) == 0);
        } else {
            CHECK_EQ(cs__ledger_claim(&l), 0);
            CHECK_EQ(cs__ledger_charge(&l, 0, CS_MEM_DATA, 8 * MiB), 0);
        }
        lt_write_full(fds[1], "r", 1);
        if (end == DIE)
            _exit(0); /* no leave: as if killed */
        for (;;)
            pause();
    }
    close(fds[1]);
    char c;
    cs_read_full(fds[0], &c, 1, 20000);
    close(fds[0]);
    if (end == DIE)
        cs_wait_ok(pid, 20000);
    CHECK(exists(path));
    return pid;
}

/* A process that makes its private ledger (and so sweeps). */
static void start_one(void)
{
    pid_t pid;
    int in = spawn(init_and_report, &pid);
    struct report r;
    cs_read_full(in, &r, sizeof r, 20000);
    close(in);
    cs_wait_ok(pid, 20000);
    CHECK_EQ(r.pid, pid);
}

static void make_dir(void)
{
    if (mkdir(dir, 0700) != 0)
        CHECK(errno == EEXIST);
}

static void case_sweep(void)
{
    make_dir();
    char dead[320], live[320], kept[320], notes[320], temp[320];
    char name[64];
    snprintf(name, sizeof name, "private-%d-dead.ledger", (int)getpid());
    plant(name, DIE, dead, sizeof dead);
    snprintf(name, sizeof name, "private-%d-a11.ledger", (int)getpid());
    pid_t holder = plant(name, STAY, live, sizeof live);
    snprintf(name, sizeof name, "private-%d-cee9.ledger", (int)getpid());
    pid_t keeper = plant(name, KEEP_ONLY, kept, sizeof kept);
    snprintf(notes, sizeof notes, "%s/private-notes.txt", dir);
    lt_write_file(notes, "x", 1);
    snprintf(temp, sizeof temp, "%s/.private-%d-1.ledger.%d.0.tmp", dir, (int)getpid(),
             (int)getpid());
    lt_write_file(temp, "x", 1);

    start_one();
    CHECK(!exists(dead));
    CHECK(exists(live));
    CHECK(exists(kept));
    CHECK(exists(notes));
    CHECK(exists(temp));

    /* Their holders gone (however), the files go with the next start. */
    CHECK(kill(holder, SIGKILL) == 0 && kill(keeper, SIGKILL) == 0);
    lt_wait(holder, 20);
    lt_wait(keeper, 20);
    CHECK(exists(live) && exists(kept));
    start_one();
    CHECK(!exists(live));
    CHECK(!exists(kept));
    CHECK(exists(notes));
    CHECK(exists(temp));
    unlink(notes);
    unlink(temp);
    printf("dead private ledgers swept; live, kept and foreign names stay\n");
}

static int case_foreign(void)
{
    cs_require_root("giving a ledger to another uid");
    make_dir();
    char path[320], name[64];
    snprintf(name, sizeof name, "private-%d-f0e1.ledger", (int)getpid());
    plant(name, DIE, path, sizeof path);
    CHECK(chown(path, 65534, 65534) == 0);
    start_one();
    CHECK(exists(path));
    CHECK(chown(path, 0, 0) == 0);
    start_one();
    CHECK(!exists(path));
    printf("a dead ledger of another uid stays\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "exec-image"))
        return exec_image(argv);
    CHECK(argc == 2);
    CHECK(getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE") == NULL);
    isolate_dev_shm();
    if (!strcmp(argv[1], "leftovers"))
        case_leftovers();
    else if (!strcmp(argv[1], "sweep"))
        case_sweep();
    else if (!strcmp(argv[1], "foreign"))
        return case_foreign();
    else
        CHECK(!"unknown case");
    return 0;
}
