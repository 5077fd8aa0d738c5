/*
 * Two processes share one VMM allocation over a unix socket,
 * written against the real driver API (cuda.h); runs on the H200 and, in
 * CTest, on tests/fakecuda (which keeps no data: the data check then says
 * "unchecked").
 *
 *   vmm_share creator SOCKET MIB [late]
 *       listens on SOCKET; creates MIB MiB (POSIX-fd shareable), maps it,
 *       fills it with a pattern, exports it and sends the fd (SCM_RIGHTS).
 *       Normally waits until the importer has mapped it; with `late` it
 *       lets go of everything before sending. Then exits.
 *   vmm_share importer SOCKET MIB [--hold]
 *       connects; imports and maps the fd, tells the creator; waits for the
 *       creator to exit (EOF); checks the data; prints what its tenant's
 *       view (cuMemGetInfo) counts; with --hold waits for a line on stdin;
 *       unmaps and releases; prints the view again; with --hold waits for
 *       another line; exits 0 if the view dropped by MIB MiB.
 *
 * Lines start with CREATOR / IMPORTER for the scripts that drive it.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define PATTERN 0x5eed1e55u

static void die(const char *who, const char *what, CUresult r)
{
    const char *name = "?";
    cuGetErrorName(r, &name);
    printf("%s FAIL %s: %s\n", who, what, name);
    exit(1);
}

#define CU(who, call)                     \
    do {                                  \
        CUresult r_ = (call);             \
        if (r_ != CUDA_SUCCESS)           \
            die(who, #call, r_);          \
    } while (0)

static CUcontext context(const char *who)
{
    CUdevice dev;
    CUcontext ctx;
    CU(who, cuInit(0));
    CU(who, cuDeviceGet(&dev, 0));
    CU(who, cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(who, cuCtxSetCurrent(ctx));
    return ctx;
}

static unsigned long long view_used_mib(const char *who)
{
    size_t free_b, total;
    CU(who, cuMemGetInfo(&free_b, &total));
    return (unsigned long long)((total - free_b) / MiB);
}

static CUdeviceptr map_handle(const char *who, CUmemGenericAllocationHandle h, size_t size)
{
    CUdeviceptr va;
    CU(who, cuMemAddressReserve(&va, size, 0, 0, 0));
    CU(who, cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc a = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU(who, cuMemSetAccess(va, size, &a, 1));
    return va;
}

static void unmap(const char *who, CUdeviceptr va, size_t size)
{
    CU(who, cuMemUnmap(va, size));
    CU(who, cuMemAddressFree(va, size));
}

/* 1 MiB at the start, the middle and the end all hold PATTERN: 1; some
 * word differs: 0. */
static int pattern_ok(const char *who, CUdeviceptr va, size_t size)
{
    static uint32_t buf[MiB / 4];
    size_t at[3] = {0, size / 2, size - MiB};
    for (int k = 0; k < 3; k++) {
        memset(buf, 0, sizeof buf);
        CU(who, cuMemcpyDtoH(buf, va + at[k], MiB));
        for (size_t i = 0; i < MiB / 4; i++)
            if (buf[i] != PATTERN)
                return 0;
    }
    return 1;
}

static int sock_listen(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    unlink(path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 1)) {
        printf("CREATOR FAIL listen %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return s;
}

static int sock_connect(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    for (int i = 0; i < 600; i++) { /* the creator may not listen yet: up to 60 s */
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0)
            return s;
        if (s >= 0)
            close(s);
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    printf("IMPORTER FAIL connect %s: %s\n", path, strerror(errno));
    exit(1);
}

static void send_fd(int s, int fd)
{
    char byte = 'f', ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof ctl};
    memset(ctl, 0, sizeof ctl);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(s, &m, MSG_NOSIGNAL) != 1) {
        printf("CREATOR FAIL sendmsg: %s\n", strerror(errno));
        exit(1);
    }
}

static int recv_fd(int s)
{
    char byte, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof ctl};
    int fd = -1;
    if (recvmsg(s, &m, MSG_CMSG_CLOEXEC) == 1) {
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        if (c && c->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(c), sizeof fd);
    }
    if (fd < 0) {
        printf("IMPORTER FAIL no descriptor received\n");
        exit(1);
    }
    return fd;
}

/* The (device, inode) of exported descriptors, for a second export of the
 * same allocation and for another allocation. The H200 (driver 580) said:
 * one inode (/dev/nvidiactl) for all, so cushare keys the open file
 * description instead (src/mem/vmm_fdid.c); printed to keep watching. */
static void fd_identity(const char *W, CUmemGenericAllocationHandle h, int fd,
                        const CUmemAllocationProp *p, size_t gran)
{
    int fd2 = -1, fd3 = -1;
    CUmemGenericAllocationHandle other;
    CU(W, cuMemExportToShareableHandle(&fd2, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU(W, cuMemCreate(&other, gran, p, 0));
    CU(W, cuMemExportToShareableHandle(&fd3, other, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    struct stat a, b, c;
    char link[256] = "?";
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, link, sizeof link - 1);
    link[n > 0 ? n : 1] = 0;
    if (fstat(fd, &a) == 0 && fstat(fd2, &b) == 0 && fstat(fd3, &c) == 0)
        printf("CREATOR FDID %s: export 1 %llx:%llu, export 2 of the same %llx:%llu (%s), "
               "another allocation %llx:%llu (%s)\n", link,
               (unsigned long long)a.st_dev, (unsigned long long)a.st_ino,
               (unsigned long long)b.st_dev, (unsigned long long)b.st_ino,
               a.st_ino == b.st_ino ? "same" : "differs",
               (unsigned long long)c.st_dev, (unsigned long long)c.st_ino,
               a.st_ino == c.st_ino && a.st_dev == c.st_dev ? "same: the inode names nothing" : "differs");
    close(fd2);
    close(fd3);
    CU(W, cuMemRelease(other));
}

static int creator(const char *path, size_t size, int late)
{
    const char *W = "CREATOR";
    int ls = sock_listen(path);
    context(W);
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                             .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    size_t gran = 0;
    CU(W, cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (gran && size % gran) {
        printf("CREATOR FAIL %zu bytes is not a multiple of the granularity %zu\n", size, gran);
        return 1;
    }
    CUmemGenericAllocationHandle h;
    CU(W, cuMemCreate(&h, size, &p, 0));
    CUdeviceptr va = map_handle(W, h, size);
    CU(W, cuMemsetD32(va, PATTERN, size / 4));
    CU(W, cuCtxSynchronize());
    int own = pattern_ok(W, va, size);
    int fd = -1;
    CU(W, cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    printf("CREATOR created and mapped %zu MiB, exported as fd %d, view %llu MiB, data %s\n",
           (size_t)(size / MiB), fd, view_used_mib(W), own ? "readable" : "not kept (no backing store)");
    fflush(stdout);
    if (!late)
        fd_identity(W, h, fd, &p, gran ? gran : 2 * MiB);
    if (late) { /* every reference of ours goes before the importer sees the fd */
        unmap(W, va, size);
        CU(W, cuMemRelease(h));
        printf("CREATOR released everything before sending\n");
    }
    int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0) {
        printf("CREATOR FAIL accept: %s\n", strerror(errno));
        return 1;
    }
    send_fd(s, fd);
    close(fd);
    if (!late) {
        char ack;
        if (read(s, &ack, 1) != 1) {
            printf("CREATOR FAIL the importer hung up before mapping\n");
            return 1;
        }
        unmap(W, va, size);
        CU(W, cuMemRelease(h));
    }
    printf("CREATOR EXIT\n");
    fflush(stdout);
    close(s);
    unlink(path);
    return 0;
}

static void wait_line(void)
{
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        exit(1);
}

static int importer(const char *path, size_t size, int hold)
{
    const char *W = "IMPORTER";
    context(W);
    unsigned long long base = view_used_mib(W);
    int s = sock_connect(path);
    int fd = recv_fd(s);
    CUmemGenericAllocationHandle h;
    CUresult r = cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    const char *rn = "?";
    cuGetErrorName(r, &rn);
    printf("IMPORTER import %s\n", rn);
    if (r != CUDA_SUCCESS)
        return 3; /* (late mode on a driver where the fd is no reference) */
    CUdeviceptr va = map_handle(W, h, size);
    if (send(s, "m", 1, MSG_NOSIGNAL) != 1) /* (late: the creator is gone: no SIGPIPE) */
        printf("IMPORTER note: the creator had gone already\n");
    char eof;
    while (read(s, &eof, 1) > 0) { /* EOF: the creator has exited */
    }
    close(s);
    int data = pattern_ok(W, va, size);
    unsigned long long held = view_used_mib(W);
    printf("IMPORTER DATA %s\n", data ? "ok" : "unchecked-or-bad");
    printf("IMPORTER HOLDING view %llu MiB (before import %llu MiB)\n", held, base);
    fflush(stdout);
    if (hold)
        wait_line();
    unmap(W, va, size);
    CU(W, cuMemRelease(h));
    unsigned long long after = view_used_mib(W);
    printf("IMPORTER RELEASED view %llu MiB\n", after);
    fflush(stdout);
    if (hold)
        wait_line();
    int ok = held >= after + size / MiB;
    printf("IMPORTER %s: the view held %llu MiB more while the shared memory lived\n",
           ok ? "PASS" : "FAIL", held - after);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 4) {
        fprintf(stderr, "usage: %s creator|importer SOCKET MIB [late|--hold]\n", argv[0]);
        return 2;
    }
    size_t size = (size_t)strtoull(argv[3], NULL, 10) * MiB;
    if (!size) {
        fprintf(stderr, "vmm_share: MIB must be a positive number, not '%s'\n", argv[3]);
        return 2;
    }
    int flag = argc > 4;
    if (!strcmp(argv[1], "creator"))
        return creator(argv[2], size, flag && !strcmp(argv[4], "late"));
    if (!strcmp(argv[1], "importer"))
        return importer(argv[2], size, flag && !strcmp(argv[4], "--hold"));
    fprintf(stderr, "vmm_share: unknown role '%s' (creator or importer)\n", argv[1]);
    return 2;
}
