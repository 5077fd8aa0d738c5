/*
 * node_hostile_<case>: a hostile user (a throwaway one, tests/multiuser.h)
 * against root's node view (`cushare status --json`, `cushare top`,
 * `cushare exporter`; docs/node.md, docs/security.md).
 *
 *   quota  the attacker registers 1024 fake live ledgers, fills the
 *          registry directory with 2001 empty files named for other uids
 *          and squats root's own registry name. Root then registers a
 *          tenant (the library's own registration, which must fall back to
 *          a name of its own) and one is found by the scan of HAMi's
 *          directories: root's status, top and exporter list both, say
 *          that a registry file is squatted, and the exporter's large
 *          response reaches a client that reads slowly, whole.
 *   pod    two root "pods" (the attacker in a mount namespace of its own,
 *          the registry directory bind-mounted elsewhere, as a node
 *          directory is into every container): the attacker makes root's
 *          plain registry file and the victim pod's own one first, holds
 *          their write locks, fills the pod's file with live records of
 *          its own and write-locks its vouch byte. The victim's registration
 *          completes (before: it waited on the stranger's lock forever)
 *          and root's view lists the victim's ledger.
 *   flood  one peer (127.0.0.2) keeps 200 connections to the exporter,
 *          reopening each as it is closed; a scrape from another address
 *          is answered within the (scaled) deadline; so is one behind 40
 *          idle connections of that peer.
 *
 * Ledgers here are made by hand (header fields a reader checks, a slot
 * lock held): the node view only reads them.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cushare/ledger.h"
#include "ledger/ledger_test.h"
#include "multiuser.h"
#include "node/internal.h"
#include "node/node.h"

#define FAKES 1024
#define SQUAT_FILES 2001
#define FLOOD 200
#define IDLE 40

static char cli[4200], reg[4400];

static void more_files(void)
{
    struct rlimit r;
    CHECK(getrlimit(RLIMIT_NOFILE, &r) == 0);
    r.rlim_cur = r.rlim_max;
    CHECK(setrlimit(RLIMIT_NOFILE, &r) == 0);
}

/* A ledger a reader accepts, kept live by a slot lock on the returned
 * descriptor. */
static int make_ledger(const char *path, uint64_t created)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)CS_LEDGER_FILE_SIZE))
        return -1;
    struct cs_ledger_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CS_LEDGER_MAGIC, 8);
    h.version = CS_LEDGER_VERSION;
    h.header_size = CS_LEDGER_HEADER_SIZE;
    h.slot_size = sizeof(struct cs_ledger_slot);
    h.slot_count = CS_LEDGER_SLOTS;
    h.device_count = 1;
    h.created_ns = created;
    h.limit[0] = 1ull << 30;
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)CS_LEDGER_LOCK_BASE, .l_len = 1};
    if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || fcntl(fd, F_OFD_SETLK, &fl))
        return -1;
    return fd;
}

/* ---- the attacker ---- */

static int squat(const char *name)
{
    int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

/* As the attacker: FAKES live ledgers in `dir`, all registered in its own
 * registry file; SQUAT_FILES empty files named for other uids and one at
 * root's registry name; then `ready`, and holds it all until killed. */
static int role_fill(const char *dir, const char *registry, const char *ready)
{
    more_files();
    char path[4600];
    snprintf(path, sizeof path, "%s.%u", registry, (unsigned)geteuid());
    int rfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (rfd < 0 || ftruncate(rfd, CS_REG_SIZE))
        return 1;
    struct cs_reg_header h;
    cs__reg_init_header(&h, (uint32_t)geteuid());
    if (pwrite(rfd, &h, sizeof h, 0) != (ssize_t)sizeof h)
        return 1;
    for (unsigned i = 0; i < FAKES; i++) {
        struct cs_reg_record r;
        struct stat st;
        memset(&r, 0, sizeof r);
        snprintf(r.path, sizeof r.path, "%s/fake-%u.ledger", dir, i);
        int fd = make_ledger(r.path, i + 1);
        if (fd < 0 || fstat(fd, &st))
            return 1;
        r.dev = st.st_dev;
        r.ino = st.st_ino;
        r.created_ns = i + 1;
        r.pid = getpid();
        r.fd = fd;
        r.check = cs__reg_check(&r);
        struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET,
                           .l_start = (off_t)(CS_REG_LOCK_BASE + i), .l_len = 1};
        if (pwrite(rfd, &r, sizeof r, cs__reg_offset(i)) != (ssize_t)sizeof r ||
            fcntl(rfd, F_OFD_SETLK, &fl))
            return 1;
    }
    for (unsigned k = 0; k < SQUAT_FILES; k++) {
        snprintf(path, sizeof path, "%s.%u", registry, 100000u + k);
        if (squat(path))
            return 1;
    }
    snprintf(path, sizeof path, "%s.0", registry);
    if (squat(path) || squat(ready))
        return 1;
    for (;;)
        pause();
}

/* As a root "pod" in a mount namespace of its own: `registry`.0 and the
 * victim pod's name made first, every lock a registrant takes held on
 * them (the write lock, a vouch, and every record of the pod's file live
 * and its own); then `ready`, held until killed. */
static int role_squat_pod(const char *registry, const char *pod, const char *ready)
{
    char path[4600];
    for (int k = 0; k < 2; k++) {
        if (k == 0)
            snprintf(path, sizeof path, "%s.0", registry);
        else
            snprintf(path, sizeof path, "%s.0.%s", registry, pod);
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 || ftruncate(fd, CS_REG_SIZE))
            return 1;
        struct cs_reg_header h;
        cs__reg_init_header(&h, 0);
        struct flock w = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        struct flock v = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                          .l_start = CS_REG_VOUCH_BYTE, .l_len = 1};
        if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
            return 1;
        /* Taken already when live registrants came first (scripts/soak.sh
         * runs this beside them); here the attacker comes first. */
        if (fcntl(fd, F_OFD_SETLK, &w) || fcntl(fd, F_SETLK, &v))
            printf("attacker: a lock of %s is held already\n", path);
        for (unsigned i = 0; k == 1 && i < CS_REG_RECORDS; i++) {
            struct cs_reg_record r;
            memset(&r, 0, sizeof r);
            snprintf(r.path, sizeof r.path, "/nonexistent/forged-%u.ledger", i);
            r.dev = 1;
            r.ino = i + 1;
            r.created_ns = i + 1;
            r.pid = getpid();
            r.fd = 0;
            r.check = cs__reg_check(&r);
            struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET,
                               .l_start = (off_t)(CS_REG_LOCK_BASE + i), .l_len = 1};
            if (pwrite(fd, &r, sizeof r, cs__reg_offset(i)) != (ssize_t)sizeof r ||
                fcntl(fd, F_OFD_SETLK, &fl))
                return 1;
        }
    }
    if (squat(ready))
        return 1;
    for (;;)
        pause();
}

/* As a user whose registry name is squatted: a ledger of its own,
 * registered by the library's code; then `ready`, held until killed. */
static int role_register(const char *registry, const char *ledger, const char *ready)
{
    int fd = make_ledger(ledger, 9);
    if (fd < 0)
        return 1;
    cs__node_register(registry, ledger, fd, 9);
    if (squat(ready))
        return 1;
    for (;;)
        pause();
}

/* ---- the exporter and its clients ---- */

static pid_t exporter_pid, attacker_pid;

/* At exit, before the throwaway user is deleted (atexit runs in reverse):
 * the attacker's processes must be gone for userdel, and must not keep
 * CTest's output pipe open. */
static void stop_attacker(void)
{
    if (attacker_pid > 0) {
        kill(attacker_pid, SIGKILL);
        waitpid(attacker_pid, NULL, 0);
        attacker_pid = 0;
    }
}
static int exporter_port;

static void stop_exporter(void)
{
    if (exporter_pid > 0) {
        kill(exporter_pid, SIGKILL);
        waitpid(exporter_pid, NULL, 0);
        exporter_pid = 0;
    }
}

/* A connection from `src` to the exporter, non-blocking when asked;
 * -1 when it cannot be made now. */
static int connect_from(const char *src, bool nonblock, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    CHECK(fd >= 0);
    if (rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    a.sin_port = htons((uint16_t)exporter_port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) && !(nonblock && errno == EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* GET /metrics from `src`, read to the end within the scaled `ms` (a
 * small receive buffer when `slow`): the body when the response was whole
 * (its Content-Length), else NULL. */
static char *scrape(const char *src, bool slow, double ms)
{
    int64_t end = cs_deadline_ns(ms);
    int fd = connect_from(src, true, slow ? 4096 : 0);
    if (fd < 0)
        return NULL;
    /* The connect, too, within the deadline (a full backlog is retried by
     * the kernel for minutes). */
    struct pollfd cp = {.fd = fd, .events = POLLOUT};
    int soerr = 0;
    socklen_t elen = sizeof soerr;
    int left = (int)((end - cs_now_ns()) / 1000000);
    if (left <= 0 || poll(&cp, 1, left) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &elen) || soerr ||
        fcntl(fd, F_SETFL, 0)) {
        printf("scrape from %s: not connected within the deadline\n", src);
        close(fd);
        return NULL;
    }
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    if (write(fd, req, sizeof req - 1) != (ssize_t)sizeof req - 1) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    CHECK(buf != NULL);
    for (;;) {
        int left = (int)((end - cs_now_ns()) / 1000000);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            CHECK(buf != NULL);
        }
        ssize_t n = read(fd, buf + len, slow && cap - len > 4096 ? 4096 : cap - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    const char *cl = strstr(buf, "Content-Length: "), *body = strstr(buf, "\r\n\r\n");
    if (!cl || !body || strtoul(cl + 16, NULL, 10) != len - (size_t)(body + 4 - buf)) {
        printf("scrape from %s: %zu bytes, not a whole response\n", src, len);
        free(buf);
        return NULL;
    }
    return buf;
}

static bool serving(void *arg)
{
    (void)arg;
    int fd = connect_from("127.0.0.1", false, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

/* `cushare exporter` with `extra` options on a free loopback port. */
static void start_exporter(const char *const *extra)
{
    for (int attempt = 0; attempt < 8 && !exporter_pid; attempt++) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        socklen_t alen = sizeof a;
        CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(s, (struct sockaddr *)&a, &alen) == 0);
        exporter_port = ntohs(a.sin_port);
        close(s);
        char listen[64];
        snprintf(listen, sizeof listen, "127.0.0.1:%d", exporter_port);
        const char *argv[16] = {cli, "exporter", "--listen", listen, "--interval", "200"};
        int k = 6;
        for (int i = 0; extra[i] && k < 15; i++)
            argv[k++] = extra[i];
        argv[k] = NULL;
        exporter_pid = cs_spawn((char *const *)argv, NULL);
        if (!cs_wait_until(serving, NULL, 10000)) {
            stop_exporter(); /* the port was taken meanwhile: another */
        }
    }
    CHECK(exporter_pid > 0);
}

/* ---- the cases ---- */

/* `cushare ARGS` as root: its stdout (freed by the caller). */
static char *run_root(const char *const *args)
{
    char out[4400];
    snprintf(out, sizeof out, "%s/cmd.out", lt_dir());
    fflush(NULL);
    pid_t pid = cs_fork_tied();
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (o < 0 || dup2(o, 1) < 0)
            _exit(126);
        const char *argv[32] = {cli};
        int k = 1;
        for (int i = 0; args[i] && k < 31; i++)
            argv[k++] = args[i];
        argv[k] = NULL;
        execv(cli, (char **)argv);
        _exit(127);
    }
    CHECK_EQ(cs_exit_code(lt_wait(pid, 60)), 0);
    char *s = lt_read_file(out, NULL);
    CHECK(s != NULL);
    return s;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static bool shows_victims(void *arg)
{
    char *s = scrape("127.0.0.1", false, 10000);
    bool ok = s && strstr(s, "victim-a.ledger") && strstr(s, "pod_ctr");
    if (ok && arg)
        *(char **)arg = s;
    else
        free(s);
    return ok;
}

static bool file_exists(void *path)
{
    return access(path, F_OK) == 0;
}

static void case_quota(void)
{
    const struct cs_test_user *u = cs_test_user();
    char att[4400], scan[4400], ready[4500], path[4600];
    CHECK(chmod(lt_dir(), 0755) == 0);
    snprintf(att, sizeof att, "%s/attacker", lt_dir());
    snprintf(scan, sizeof scan, "%s/scan", lt_dir());
    snprintf(ready, sizeof ready, "%s/ready", att);
    snprintf(path, sizeof path, "%s/reg", lt_dir());
    CHECK(mkdir(att, 0777) == 0 && chmod(att, 0777) == 0);
    CHECK(mkdir(path, 0755) == 0 && chmod(path, 01777) == 0);
    snprintf(reg, sizeof reg, "%s/reg/cushare-ledgers", lt_dir());
    char *argv[] = {(char *)cs_test_self(), "fill", att, reg, ready, NULL};
    attacker_pid = cs_test_spawn_as(u, argv);
    atexit(stop_attacker);
    CHECK(cs_wait_until(file_exists, ready, 120000));

    /* Root's tenants, after the attack: one registered by the library's
     * own code, one in a HAMi container directory. */
    snprintf(path, sizeof path, "%s/victim-a.ledger", lt_dir());
    int a = make_ledger(path, 7);
    CHECK(a >= 0);
    cs__node_register(reg, path, a, 7);
    CHECK(mkdir(scan, 0755) == 0);
    snprintf(path, sizeof path, "%s/pod_ctr", scan);
    CHECK(mkdir(path, 0755) == 0);
    snprintf(path, sizeof path, "%s/pod_ctr/ledger", scan);
    CHECK(make_ledger(path, 8) >= 0);

    char *s = run_root(ARGS("status", "--json", "--registry", reg, "--scan", scan));
    CHECK_CONTAINS(s, "/victim-a.ledger\"");
    CHECK_CONTAINS(s, "\"container\":\"pod_ctr\"");
    CHECK(!strstr(s, "\"squatted_registry_files\":0"));
    int fakes = 0;
    for (const char *p = s; (p = strstr(p, "/fake-")); p++)
        fakes++;
    printf("root's view: %d of the attacker's %d ledgers, and both of root's\n", fakes, FAKES);
    free(s);

    s = run_root(ARGS("top", "--once", "--interval", "100", "--registry", reg, "--scan", scan));
    CHECK_CONTAINS(s, "victim-a.ledger");
    CHECK_CONTAINS(s, "pod_ctr");
    CHECK_CONTAINS(s, "registry files named for another uid, ignored (one by uid ");
    CHECK(!strstr(s, "no tenants found"));
    free(s);

    start_exporter(ARGS("--registry", reg, "--scan", scan));
    char *body = NULL;
    CHECK(cs_wait_until(shows_victims, &body, 30000));
    size_t whole = strlen(body);
    free(body);
    /* A client that reads slowly gets it whole (the sends are bounded by
     * a deadline, not cut when the socket's buffer is full). */
    s = scrape("127.0.0.1", true, 20000);
    CHECK(s != NULL);
    printf("exporter: %zu bytes, a slow reader got %zu\n", whole, strlen(s));
    CHECK_CONTAINS(s, "victim-a.ledger");
    free(s);
    stop_exporter();
    stop_attacker();
    close(a);

    /* The other way round: the unprivileged user's name squatted. */
    snprintf(path, sizeof path, "%s/reg2", lt_dir());
    CHECK(mkdir(path, 0755) == 0 && chmod(path, 01777) == 0);
    snprintf(reg, sizeof reg, "%s/reg2/cushare-ledgers", lt_dir());
    snprintf(path, sizeof path, "%s.%u", reg, (unsigned)u->uid);
    int sq = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    CHECK(sq >= 0);
    close(sq);
    char ledger[4500];
    snprintf(ledger, sizeof ledger, "%s/user.ledger", att);
    snprintf(ready, sizeof ready, "%s/ready2", att);
    char *argv2[] = {(char *)cs_test_self(), "register", reg, ledger, ready, NULL};
    attacker_pid = cs_test_spawn_as(u, argv2);
    CHECK(cs_wait_until(file_exists, ready, 30000));
    s = run_root(ARGS("status", "--json", "--registry", reg, "--no-scan"));
    CHECK_CONTAINS(s, "/user.ledger\"");
    CHECK_CONTAINS(s, "\"squatted_registry_files\":1");
    free(s);
    stop_attacker();
}

static void case_pod(void)
{
    cs_require_root("a second mount namespace (unshare -m) plays the attacker pod");
    char dir[4200], ready[4500], ledger[4500], pod[24];
    snprintf(dir, sizeof dir, "%s/podreg", lt_dir());
    CHECK(mkdir(dir, 0755) == 0 && chmod(dir, 01777) == 0);
    snprintf(reg, sizeof reg, "%s/cushare-ledgers", dir);
    snprintf(ready, sizeof ready, "%s/pod-ready", lt_dir());
    struct stat st;
    CHECK(stat("/proc/self/ns/mnt", &st) == 0);
    snprintf(pod, sizeof pod, "%016llx", (unsigned long long)st.st_ino);
    char script[] = "mkdir -p \"$1.pod\" && mount --bind \"$1\" \"$1.pod\" && "
                    "exec \"$0\" squat-pod \"$1.pod/cushare-ledgers\" \"$2\" \"$3\"";
    char *a[] = {"unshare", "-m", "--propagation", "private", "sh", "-c", script,
                 (char *)cs_test_self(), dir, pod, ready, NULL};
    attacker_pid = cs_fork_tied();
    if (attacker_pid == 0) {
        execvp(a[0], a);
        _exit(127);
    }
    atexit(stop_attacker);
    CHECK(cs_wait_until(file_exists, ready, 30000));

    /* The victim pod's tenant registers as the library does, in a child
     * that keeps the registration (and says so) while it lives. */
    snprintf(ledger, sizeof ledger, "%s/victim-pod.ledger", lt_dir());
    int done[2];
    CHECK(pipe2(done, O_CLOEXEC) == 0);
    pid_t v = cs_fork_tied();
    if (v == 0) {
        close(done[0]);
        int fd = make_ledger(ledger, 11);
        if (fd < 0)
            _exit(1);
        cs__node_register(reg, ledger, fd, 11);
        if (write(done[1], "r", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(done[1]);
    char c;
    /* Fails here, naming the deadline, while the registration waits on
     * the attacker's lock. */
    cs_read_full(done[0], &c, 1, 10000);
    char *s = run_root(ARGS("status", "--json", "--registry", reg, "--no-scan"));
    CHECK_CONTAINS(s, "/victim-pod.ledger\"");
    CHECK(!strstr(s, "forged-"));
    free(s);
    kill(v, SIGKILL);
    waitpid(v, NULL, 0);
    stop_attacker();
}

/* One peer's connections, each reopened as the exporter closes it, until
 * killed; a byte on `out` once FLOOD of them were made. */
static void flooder(int out)
{
    struct pollfd p[FLOOD];
    unsigned long made = 0;
    for (int i = 0; i < FLOOD; i++) {
        p[i] = (struct pollfd){.fd = connect_from("127.0.0.2", true, 0), .events = POLLIN};
        made += p[i].fd >= 0;
    }
    bool told = false;
    for (;;) {
        if (!told && made >= FLOOD) {
            CHECK(write(out, "r", 1) == 1);
            told = true;
        }
        if (poll(p, FLOOD, 100) < 0 && errno != EINTR)
            _exit(1);
        for (int i = 0; i < FLOOD; i++) {
            char b[64];
            if (p[i].fd >= 0 && !p[i].revents)
                continue;
            if (p[i].fd >= 0 && read(p[i].fd, b, sizeof b) > 0)
                continue;
            if (p[i].fd >= 0)
                close(p[i].fd);
            p[i].fd = connect_from("127.0.0.2", true, 0);
            made += p[i].fd >= 0;
        }
    }
}

static double timed_scrape(const char *what)
{
    int64_t t0 = cs_now_ns();
    char *s = scrape("127.0.0.1", false, 5000);
    double ms = cs_ms_since(t0);
    printf("scrape %s: %s in %.0f ms\n", what, s ? "whole" : "NOT answered", ms);
    CHECK(s != NULL);
    free(s);
    return ms;
}

static void case_flood(void)
{
    snprintf(reg, sizeof reg, "%s/cushare-ledgers", lt_dir());
    start_exporter(ARGS("--registry", reg, "--no-scan"));
    int pipefd[2];
    CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
    pid_t f = cs_fork_tied();
    if (f == 0) {
        close(pipefd[0]);
        flooder(pipefd[1]);
    }
    close(pipefd[1]);
    char c;
    cs_read_full(pipefd[0], &c, 1, 30000);
    for (int i = 0; i < 3; i++)
        timed_scrape("beside a peer reopening 200 connections");
    kill(f, SIGKILL);
    waitpid(f, NULL, 0);

    int idle[IDLE];
    for (int i = 0; i < IDLE; i++)
        idle[i] = connect_from("127.0.0.2", false, 0);
    timed_scrape("behind 40 idle connections of one peer");
    for (int i = 0; i < IDLE; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    stop_exporter();
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "fill"))
        return role_fill(argv[2], argv[3], argv[4]);
    if (argc == 5 && !strcmp(argv[1], "squat-pod"))
        return role_squat_pod(argv[2], argv[3], argv[4]);
    if (argc == 5 && !strcmp(argv[1], "register"))
        return role_register(argv[2], argv[3], argv[4]);
    CHECK(argc == 2);
    const char *b = getenv("CS_BUILD_DIR");
    CHECK(b != NULL);
    snprintf(cli, sizeof cli, "%s/cushare", b);
    atexit(stop_exporter);
    if (!strcmp(argv[1], "quota"))
        case_quota();
    else if (!strcmp(argv[1], "pod"))
        case_pod();
    else if (!strcmp(argv[1], "flood"))
        case_flood();
    else
        CHECK(!"unknown case");
    printf("node_hostile_%s: ok\n", argv[1]);
    return 0;
}
