/*
 * mem_hostile_share: memory shared through POSIX fds stays charged while
 * it exists, whatever other parties write into the share directory
 * (docs/security.md, "Share markers", "Payer files"; docs/accounting.md,
 * "Shared memory").
 *
 *   fd_keeps    create 512 MiB, export it as a POSIX fd, release it, keep
 *               the fd, again and again under a 1 GiB budget: the fd keeps
 *               the memory alive (the fake driver counts it, as the H200
 *               does), so the third create is refused; closing the fds
 *               gives the charge back.
 *   pid1        a throwaway user plants a marker of its own naming pid 1
 *               (which it may not kcmp) and imports its own released
 *               export: the import is charged, never hidden.
 *   forged      a marker naming the exporter's process and exported fd
 *               with the key of another live share of the tenant, planted
 *               by another user, and by a root "pod" in another mount
 *               namespace (canonical and padded names): the importer is
 *               not fooled into joining that share, so when the exporter
 *               exits the ledger still shows what the importer maps.
 *   pod_payer   tenant A exports memory that tenant B imports and maps (A
 *               pays, B stands by); a root "pod" in another mount namespace
 *               holds the payer file's paying byte (and a POSIX lock on its
 *               vouch byte); A exits: B takes the charge over (before: the
 *               stranger's lock said "paid" and 512 MiB went uncharged).
 *   leased      another user pre-creates a payer file at the victim's
 *               name pattern and holds a read lease on it: the victim's
 *               first export never breaks the lease (it does not open
 *               the file in a way that waits for it).
 *
 * Multi-user cases need root (tests/multiuser.h); otherwise they are
 * skipped with the reason, never passed.
 */
#include "mem_test.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "multiuser.h"

#define OK(call) CHECK_EQ((call), CUDA_SUCCESS)
#define HALF_GIB (512 * MiB)

static CUmemAllocationProp posix_prop(void)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* create + export + release: the fd alone keeps the memory. */
static CUresult create_export_release(uint64_t bytes, int *fd)
{
    CUmemAllocationProp p = posix_prop();
    CUmemGenericAllocationHandle h;
    CUresult r = cuMemCreate(&h, bytes, &p, 0);
    if (r != CUDA_SUCCESS)
        return r;
    OK(cuMemExportToShareableHandle(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    OK(cuMemRelease(h));
    return CUDA_SUCCESS;
}

/* Imports fd and maps it whole; returns the handle. */
static CUmemGenericAllocationHandle import_map(int fd, uint64_t bytes, CUdeviceptr *va)
{
    CUmemGenericAllocationHandle h;
    OK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    OK(cuMemAddressReserve(va, bytes, 0, 0, 0));
    OK(cuMemMap(*va, bytes, 0, h, 0));
    return h;
}

static uint64_t used_after_view(struct cs_ledger_header *L)
{
    size_t f, t;
    OK(cuMemGetInfo_v2(&f, &t)); /* a view reaps first */
    return ledger_used(L, 0);
}

/* The ledger never shows less than the device holds (nothing of this test
 * but the tenant's VMM memory is on the fake device: contexts are free). */
static void never_under(struct fakecuda_state *S, struct cs_ledger_header *L, const char *step)
{
    uint64_t led = used_after_view(L), dev = fakecuda_load(&S->dev[0].used);
    printf("%s: ledger %llu MiB, device %llu MiB\n", step, (unsigned long long)(led / MiB),
           (unsigned long long)(dev / MiB));
    CHECK_GE(led, dev);
}

static int fd_keeps(void)
{
    context_on_device0();
    struct cs_ledger_header *L = ledger_map();
    struct fakecuda_state *S = fake_state();
    int fds[3];
    OK(create_export_release(HALF_GIB, &fds[0]));
    OK(create_export_release(HALF_GIB, &fds[1]));
    printf("two rounds: ledger %llu MiB, device %llu MiB\n",
           (unsigned long long)(used_after_view(L) / MiB),
           (unsigned long long)(fakecuda_load(&S->dev[0].used) / MiB));
    CHECK_EQ_U(used_after_view(L), 2 * HALF_GIB);
    CHECK_EQ_U(fakecuda_load(&S->dev[0].used), 2 * HALF_GIB);
    CHECK_EQ(create_export_release(HALF_GIB, &fds[2]), CUDA_ERROR_OUT_OF_MEMORY);
    /* Re-imported and mapped, the memory is charged at least once. */
    CUdeviceptr va;
    CUmemGenericAllocationHandle h = import_map(fds[0], HALF_GIB, &va);
    never_under(S, L, "re-imported and mapped");
    OK(cuMemUnmap(va, HALF_GIB));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, HALF_GIB));
    close(fds[0]);
    close(fds[1]);
    CHECK_EQ_U(used_after_view(L), 0);
    CHECK_EQ_U(fakecuda_load(&S->dev[0].used), 0);
    OK(create_export_release(HALF_GIB, &fds[2]));
    close(fds[2]);
    CHECK_EQ_U(used_after_view(L), 0);
    return 0;
}

static void plant(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    close(fd);
    printf("planted %s (uid %u)\n", name, (unsigned)geteuid());
}

/* The throwaway user's own tenant: pid 1 is not kcmp-able for it. */
static int pid1(void)
{
    context_on_device0();
    struct cs_ledger_header *L = ledger_map();
    struct fakecuda_state *S = fake_state();
    char name[128];
    snprintf(name, sizeof name, "cushare-fdid-%u-%016" PRIx64 "-1-3", (unsigned)geteuid(),
             (uint64_t)0x1234);
    plant(getenv("CUSHARE_SHARE_DIR"), name);
    int fd;
    OK(create_export_release(HALF_GIB, &fd));
    CUdeviceptr va;
    CUmemGenericAllocationHandle h = import_map(fd, HALF_GIB, &va);
    never_under(S, L, "pid-1 marker, own export imported and mapped");
    OK(cuMemUnmap(va, HALF_GIB));
    OK(cuMemRelease(h));
    close(fd);
    return 0;
}

/* The key of this process's live share (from its own marker's name). */
static uint64_t my_share_key(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "cushare-fdid-%u-", (unsigned)geteuid());
    uint64_t key = 0;
    int pid;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)) &&
            sscanf(e->d_name + strlen(prefix), "%" SCNx64 "-%d", &key, &pid) == 2 &&
            pid == getpid())
            break;
    closedir(d);
    CHECK(key != 0);
    return key;
}

/* The exporter of `forged`: a live share X (64 MiB, its key public in its
 * marker's name) and an export of Y (512 MiB), released unless `keep`
 * (pod_payer: its creator holds it and pays); sends Y's fd with
 * "X's key, its pid, Y's fd number" over sock, then exits when told. */
static int exporter(int sock, bool keep)
{
    context_on_device0();
    CUmemAllocationProp p = posix_prop();
    CUmemGenericAllocationHandle x, y;
    int xfd, yfd;
    OK(cuMemCreate(&x, 64 * MiB, &p, 0));
    OK(cuMemExportToShareableHandle(&xfd, x, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (keep) { /* Y stays ours (mapped or not): we pay for it */
        OK(cuMemCreate(&y, HALF_GIB, &p, 0));
        OK(cuMemExportToShareableHandle(&yfd, y, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    } else {
        OK(create_export_release(HALF_GIB, &yfd));
    }
    char text[96];
    int n = snprintf(text, sizeof text, "%016" PRIx64 " %d %d",
                     my_share_key(getenv("CUSHARE_SHARE_DIR")), (int)getpid(), yfd);
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct iovec iov = {.iov_base = text, .iov_len = (size_t)n + 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &yfd, sizeof yfd);
    CHECK_EQ(sendmsg(sock, &msg, 0), n + 1);
    char b;
    CHECK_EQ(read(sock, &b, 1), 1);
    return 0; /* exits: X, Y's fd and its shares go with it */
}

static int receive_fd(int sock, char *text, size_t n)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct iovec iov = {.iov_base = text, .iov_len = n - 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf};
    ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    CHECK(r > 0);
    text[r] = 0;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    CHECK(c != NULL && c->cmsg_type == SCM_RIGHTS);
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* The victim tenant imports Y's fd from its exporter after an attacker
 * named the exporter's descriptor with X's key: once the exporter exits,
 * only our mapping keeps Y, and the ledger must show it (joining X's
 * share instead would hide 512 MiB). */
/* Starts `self exporter` on a socket pair (keep: its Y stays its
 * creator's; ledger: a ledger of its own, NULL: ours). *sock: our end,
 * *yfd: Y's fd it sent, text: its words. Its pid. */
static pid_t start_exporter(const char *ledger, bool keep, int *sock, int *yfd, char *text,
                            size_t n)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        if (ledger)
            setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", ledger, 1);
        char num[16];
        snprintf(num, sizeof num, "%d", sv[1]);
        char *a[] = {(char *)cs_test_self(), "exporter", num, keep ? "keep" : NULL, NULL};
        execv(a[0], a);
        _exit(127);
    }
    close(sv[1]);
    *sock = sv[0];
    *yfd = receive_fd(sv[0], text, n);
    return pid;
}

static int forged(char **attacker_argv, bool as_user)
{
    const char *dir = getenv("CUSHARE_SHARE_DIR");
    int sock, yfd;
    char text[96];
    pid_t pid = start_exporter(NULL, false, &sock, &yfd, text, sizeof text);
    char xkey[17];
    int epid, efd;
    CHECK_EQ(sscanf(text, "%16s %d %d", xkey, &epid, &efd), 3);
    char canon[128], padded[128];
    snprintf(canon, sizeof canon, "cushare-fdid-%u-%s-%d-%d", (unsigned)geteuid(), xkey, epid,
             efd);
    snprintf(padded, sizeof padded, "cushare-fdid-%u-%s-0%d-%d", (unsigned)geteuid(), xkey,
             epid, efd);
    char *argv[8];
    int n = 0;
    for (; attacker_argv[n]; n++)
        argv[n] = attacker_argv[n];
    argv[n++] = (char *)dir;
    argv[n++] = canon;
    argv[n++] = padded;
    argv[n] = NULL;
    if (as_user) {
        CHECK_EQ(cs_test_run_as(cs_test_user(), argv), 0);
    } else {
        CHECK_EQ(cs_run(argv, false), 0);
    }
    context_on_device0();
    struct cs_ledger_header *L = ledger_map();
    struct fakecuda_state *S = fake_state();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h = import_map(yfd, HALF_GIB, &va);
    close(yfd);
    never_under(S, L, "imported and mapped beside the forged markers");
    CHECK_EQ(write(sock, "x", 1), 1);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    never_under(S, L, "the exporter exited: only our mapping keeps it");
    CHECK_EQ_U(fakecuda_load(&S->dev[0].used), HALF_GIB);
    OK(cuMemUnmap(va, HALF_GIB));
    OK(cuMemRelease(h));
    CHECK_EQ_U(used_after_view(L), 0);
    return 0;
}

/* The attacker's side of `forged`: plants both names (a root "pod" that
 * is another mount namespace sees the directory at another path). */
static int plant_markers(int argc, char **argv)
{
    CHECK_EQ(argc, 5);
    plant(argv[2], argv[3]);
    plant(argv[2], argv[4]);
    return 0;
}

/* ---- leased payer file ------------------------------------------------------ */

static volatile sig_atomic_t lease_broken;

static void on_lease_break(int sig)
{
    (void)sig;
    lease_broken = 1;
}

/* Attacker: a 0666 file at the victim's payer prefix, read-leased; reports
 * on fd 1 whether the lease was ever broken once told the victim is done
 * (stdin closes). */
static int lease_holder(int argc, char **argv)
{
    CHECK_EQ(argc, 4);
    char path[4200];
    snprintf(path, sizeof path, "%s/cushare-share-%s-00000000deadbeef", argv[2], argv[3]);
    int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
    CHECK(fd >= 0);
    CHECK_EQ(fchmod(fd, 0666), 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_lease_break; /* no SA_RESTART: the read below returns */
    CHECK_EQ(sigaction(SIGIO, &sa, NULL), 0);
    CHECK_EQ(fcntl(fd, F_SETLEASE, F_RDLCK), 0);
    printf("ready\n");
    fflush(stdout);
    char c;
    while (!lease_broken && read(0, &c, 1) > 0)
        ;
    if (lease_broken)
        fcntl(fd, F_SETLEASE, F_UNLCK); /* let the victim go on */
    printf("%s\n", lease_broken ? "broken" : "held");
    fflush(stdout);
    unlink(path);
    return 0;
}

/* Starts argv (as u; as we are when u is NULL) with its stdin and stdout
 * on pipes: *to writes to its stdin, *from reads its stdout. Its pid. */
static pid_t spawn_piped(char **argv, const struct cs_test_user *u, int *to, int *from)
{
    int in[2], out[2];
    CHECK_EQ(pipe(in), 0);
    CHECK_EQ(pipe(out), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        if (u)
            _exit(cs_test_run_as(u, argv));
        execvp(argv[0], argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    *to = in[1];
    *from = out[0];
    return pid;
}

/* One line (at most n - 1 bytes) from fd, NUL-terminated. */
static void read_line(int fd, char *buf, size_t n)
{
    size_t got = 0;
    ssize_t r;
    buf[0] = 0;
    while (!strchr(buf, '\n') && (r = read(fd, buf + got, n - 1 - got)) > 0)
        buf[got += (size_t)r] = 0;
}

static int leased(void)
{
    const char *dir = getenv("CUSHARE_SHARE_DIR");
    char uid[16];
    snprintf(uid, sizeof uid, "%u", (unsigned)geteuid());
    char *argv[] = {(char *)cs_test_self(), "lease-holder", (char *)dir, uid, NULL};
    int to, from;
    pid_t pid = spawn_piped(argv, cs_test_user(), &to, &from);
    char buf[64];
    read_line(from, buf, sizeof buf);
    CHECK_STREQ(buf, "ready\n");
    context_on_device0();
    int fd;
    OK(create_export_release(64 * MiB, &fd)); /* the first export sweeps payer files */
    close(fd);
    close(to);
    ssize_t n = 0, r;
    buf[0] = 0;
    while ((r = read(from, buf + n, sizeof buf - 1 - (size_t)n)) > 0)
        buf[n += r] = 0;
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    printf("attacker's lease: %s", buf);
    CHECK_STREQ(buf, "held\n");
    return 0;
}

/* ---- a root pod holds the paying byte -------------------------------------- */

/* Attacker: every payer file in argv[2] held as a payer would hold it
 * (OFD read lock on the paying byte, POSIX read lock on the vouch byte);
 * says "ready N" on fd 1, lets go when stdin closes. */
static int hold_paying(int argc, char **argv)
{
    CHECK_EQ(argc, 3);
    DIR *d = opendir(argv[2]);
    CHECK(d != NULL);
    struct dirent *e;
    int held = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "cushare-share-", 14))
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        struct flock paying = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        struct flock vouch = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 3, .l_len = 1};
        if (fd >= 0 && fcntl(fd, F_OFD_SETLK, &paying) == 0 && fcntl(fd, F_SETLK, &vouch) == 0)
            held++; /* the descriptor stays open: the locks with it */
    }
    closedir(d);
    printf("ready %d\n", held);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}

/* Starts the attacker pod (a root process in its own mount namespace, the
 * share directory bind-mounted elsewhere); returns its pid once it holds
 * what it found, *to the pipe that lets it go. */
static pid_t start_pod_holder(const char *dir, int *to)
{
    char script[] = "mkdir -p \"$1.pod\" && mount --bind \"$1\" \"$1.pod\" && "
                    "exec \"$0\" hold-paying \"$1.pod\"";
    char *a[] = {"unshare", "-m", "--propagation", "private", "sh", "-c", script,
                 (char *)cs_test_self(), (char *)dir, NULL};
    int from;
    pid_t pid = spawn_piped(a, NULL, to, &from);
    char buf[64];
    read_line(from, buf, sizeof buf);
    close(from);
    printf("attacker pod: %s", buf);
    int held = 0;
    CHECK_EQ(sscanf(buf, "ready %d", &held), 1);
    CHECK_GE(held, 1);
    return pid;
}

static int pod_payer(void)
{
    const char *dir = getenv("CUSHARE_SHARE_DIR");
    char other[4300];
    snprintf(other, sizeof other, "%s.A", getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
    int sock, yfd;
    char text[96];
    pid_t pid = start_exporter(other, true, &sock, &yfd, text, sizeof text); /* tenant A */
    context_on_device0();
    struct cs_ledger_header *L = ledger_map();
    struct fakecuda_state *S = fake_state();
    CUdeviceptr va;
    CUmemGenericAllocationHandle h = import_map(yfd, HALF_GIB, &va);
    close(yfd);
    printf("tenant B maps A's 512 MiB, standing by: ledger %llu MiB\n",
           (unsigned long long)(used_after_view(L) / MiB));
    CHECK_EQ_U(used_after_view(L), 0); /* A pays: the case this test is about */
    int to;
    pid_t holder = start_pod_holder(dir, &to);
    CHECK_EQ(write(sock, "x", 1), 1);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    never_under(S, L, "A exited while a root pod holds the paying byte");
    CHECK_EQ_U(fakecuda_load(&S->dev[0].used), HALF_GIB);
    CHECK_EQ_U(used_after_view(L), HALF_GIB);
    close(to);
    CHECK_EQ(waitpid(holder, &st, 0), holder);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    OK(cuMemUnmap(va, HALF_GIB));
    OK(cuMemRelease(h));
    CHECK_EQ_U(used_after_view(L), 0);
    return 0;
}

/* ---- the soak's attacker ---------------------------------------------------- */

/* scripts/soak.sh runs this under `cushare run --mem 1GiB`: export,
 * release, keep the fd, as many times as are let through, then close them
 * all, again and again until `stop` exists. More than two 512 MiB rounds
 * held at once is an escape from the budget: exit 3. */
static int soak_fd(const char *stop)
{
    context_on_device0();
    unsigned long rounds = 0, most = 0;
    while (access(stop, F_OK) != 0) {
        int fds[8], n = 0;
        while (n < 8 && create_export_release(HALF_GIB, &fds[n]) == CUDA_SUCCESS)
            n++;
        if ((unsigned long)n > most)
            most = (unsigned long)n;
        for (int i = 0; i < n; i++)
            close(fds[i]);
        rounds++;
        if (n > 2) {
            printf("fd-loop ESCAPE: %d rounds of 512 MiB held under a 1 GiB budget\n", n);
            return 3;
        }
        usleep(20000); /* an attacker's pace; the soak's CPU is shared */
    }
    printf("fd-loop rounds %lu, at most %lu held at once\n", rounds, most);
    return 0;
}

/* ---- driver ---------------------------------------------------------------- */

/* Runs this executable in `mode`, with a fresh ledger, device and share
 * directory of its own, as root or as the throwaway user; its status. */
static int run_mode(const char *mode, bool as_user)
{
    char base[4000], share[4100], ledger[4200], state[4200];
    snprintf(base, sizeof base, "%s/tmp/mem_hostile_share.%s", getenv("CS_BUILD_DIR"), mode);
    snprintf(share, sizeof share, "%s.share", base);
    snprintf(ledger, sizeof ledger, "%s/ledger", share);
    snprintf(state, sizeof state, "%s/fake", share);
    char *rm[] = {"rm", "-rf", share, NULL};
    CHECK_EQ(cs_run(rm, true), 0);
    CHECK_EQ(mkdir(share, 01777), 0);
    CHECK_EQ(chmod(share, 01777), 0);
    setenv("CUSHARE_SHARE_DIR", share, 1);
    setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", ledger, 1);
    setenv("FAKECUDA_STATE", state, 1);
    setenv("FAKECUDA_MEM", "16g", 1);
    setenv("CUDA_DEVICE_MEMORY_LIMIT", "1g", 1);
    char *argv[] = {(char *)cs_test_self(), (char *)mode, NULL};
    printf("== %s%s\n", mode, as_user ? " (as the throwaway user)" : "");
    fflush(NULL);
    return as_user ? cs_test_run_as(cs_test_user(), argv) : cs_run(argv, false);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "case")) {
        const char *m = argv[1];
        if (!strcmp(m, "fd_keeps"))
            return fd_keeps();
        if (!strcmp(m, "pid1"))
            return pid1();
        if (!strcmp(m, "exporter") && argc == 3)
            return exporter(atoi(argv[2]), false);
        if (!strcmp(m, "exporter") && argc == 4)
            return exporter(atoi(argv[2]), true);
        if (!strcmp(m, "plant"))
            return plant_markers(argc, argv);
        if (!strcmp(m, "forged_user")) {
            char *a[] = {(char *)cs_test_self(), "plant", NULL};
            return forged(a, true);
        }
        if (!strcmp(m, "forged_pod")) {
            /* Another root "pod": its own mount namespace, the directory
             * bind-mounted elsewhere, as a node directory is into every
             * container. */
            char script[] = "mkdir -p \"$1.pod\" && mount --bind \"$1\" \"$1.pod\" && "
                            "exec \"$0\" plant \"$1.pod\" \"$2\" \"$3\"";
            char *a[] = {"unshare", "-m", "--propagation", "private", "sh", "-c", script,
                         (char *)cs_test_self(), NULL};
            return forged(a, false);
        }
        if (!strcmp(m, "soak-fd") && argc == 3)
            return soak_fd(argv[2]);
        if (!strcmp(m, "hold-paying"))
            return hold_paying(argc, argv);
        if (!strcmp(m, "pod_payer"))
            return pod_payer();
        if (!strcmp(m, "lease-holder"))
            return lease_holder(argc, argv);
        if (!strcmp(m, "leased"))
            return leased();
        fprintf(stderr, "unknown mode %s\n", m);
        return 2;
    }
    /* `case NAME`: one case of the header, in a fresh directory (CTest
     * runs each as a test of its own); no argument: fd_keeps. */
    if (argc != 1 && (argc != 3 || strcmp(argv[1], "case"))) {
        fprintf(stderr, "usage: %s [case fd_keeps|forged_user|forged_pod|pod_payer|leased|pid1]\n",
                argv[0]);
        return 2;
    }
    const char *c = argc == 3 ? argv[2] : "fd_keeps";
    bool root_only = strcmp(c, "fd_keeps") != 0;
    if (root_only && geteuid() != 0)
        cs_skip("needs root: a throwaway user or a second mount namespace plays the attacker");
    if (!strcmp(c, "pid1"))
        cs_test_user(); /* made here, deleted at our exit */
    CHECK_EQ(run_mode(c, !strcmp(c, "pid1")), 0);
    printf("PASS\n");
    return 0;
}
