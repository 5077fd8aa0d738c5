/*
 * A tenant process the memory-sharing tests drive step by step over a unix
 * socket: each command is one driver call sequence (create, map, export,
 * import, release, IPC ...), answered with its CUresult, so that the test
 * can SIGKILL any process between any two steps and compare the ledger
 * with what the fake device holds. File descriptors travel as the
 * applications send them: SCM_RIGHTS.
 */
#ifndef CS_TESTS_SHARE_WORKER_H
#define CS_TESTS_SHARE_WORKER_H

#include "mem_test.h"

#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>

#define SW_SLOTS 8

enum sw_op {
    SW_CREATE = 'C',     /* arg MiB: cuMemCreate (exportable as a POSIX fd) */
    SW_CREATE_HOST = 'H',/* arg MiB: cuMemCreate at a host location, map, unmap, release */
    SW_MAP = 'M',        /* reserve, map, set access */
    SW_UNMAP = 'U',      /* unmap, free the reservation */
    SW_RELEASE = 'R',    /* cuMemRelease of the slot's handle */
    SW_RETAIN = 'T',     /* cuMemRetainAllocationHandle of the mapping */
    SW_UNRETAIN = 'Q',   /* cuMemRelease of the retained handle */
    SW_EXPORT = 'E',     /* export as a POSIX fd, sent back */
    SW_EXPORT_FABRIC = 'B', /* export as a fabric handle (not offered here) */
    SW_IMPORT = 'I',     /* import the fd sent along, arg MiB */
    SW_IPC_ALLOC = 'A',  /* arg MiB: cuMemAlloc */
    SW_IPC_GET = 'G',    /* cuIpcGetMemHandle, the 64 bytes sent back */
    SW_IPC_OPEN = 'O',   /* cuIpcOpenMemHandle of the bytes sent along */
    SW_IPC_CLOSE = 'Z',  /* cuIpcCloseMemHandle */
    SW_FREE = 'F',       /* cuMemFree_v2 of the IPC_ALLOC pointer */
    SW_FORK = 'K',       /* fork a child that exits without CUDA */
    SW_VIEW = 'V',       /* cuMemGetInfo_v2: a view (settles, takes over) */
    SW_EXIT = 'X',
};

struct sw_cmd {
    char op;
    int slot;
    uint32_t mib;
    CUipcMemHandle ipc;
};

struct sw_reply {
    int result;          /* CUresult */
    CUipcMemHandle ipc;
};

struct sw_proc {
    pid_t pid;
    int sock;
};

static int sw_send(int sock, const void *buf, size_t n, int fd)
{
    struct iovec iov = {(void *)buf, n};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(ctl, 0, sizeof ctl);
        m.msg_control = ctl;
        m.msg_controllen = sizeof ctl;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    return sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* Receives exactly n bytes and maybe a descriptor (-1 if none). */
static int sw_recv(int sock, void *buf, size_t n, int *fd)
{
    struct iovec iov = {buf, n};
    char ctl[CMSG_SPACE(sizeof(int))];
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                       .msg_controllen = sizeof ctl};
    ssize_t got = recvmsg(sock, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
    if (fd) {
        *fd = -1;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        if (c && c->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(c), sizeof *fd);
    }
    return got == (ssize_t)n ? 0 : -1;
}

struct sw_state {
    CUmemGenericAllocationHandle h[SW_SLOTS], retained[SW_SLOTS];
    CUdeviceptr va[SW_SLOTS], dptr[SW_SLOTS];
    size_t size[SW_SLOTS];
};

static CUresult sw_map(struct sw_state *s, int i)
{
    CUresult r = cuMemAddressReserve(&s->va[i], s->size[i], 0, 0, 0);
    if (r == CUDA_SUCCESS)
        r = cuMemMap(s->va[i], s->size[i], 0, s->h[i], 0);
    CUmemAccessDesc a = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (r == CUDA_SUCCESS)
        r = cuMemSetAccess(s->va[i], s->size[i], &a, 1);
    return r;
}

static CUresult sw_unmap(struct sw_state *s, int i)
{
    CUresult r = cuMemUnmap(s->va[i], s->size[i]);
    if (r == CUDA_SUCCESS)
        r = cuMemAddressFree(s->va[i], s->size[i]);
    return r;
}

static CUresult sw_create(struct sw_state *s, int i, uint32_t mib, CUmemLocationType where)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                             .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                             .location = {where, 0}};
    s->size[i] = (size_t)mib * MiB;
    return cuMemCreate(&s->h[i], s->size[i], &p, 0);
}

static CUresult sw_host_roundtrip(struct sw_state *s, int i, uint32_t mib)
{
    CUresult r = sw_create(s, i, mib, CU_MEM_LOCATION_TYPE_HOST);
    if (r == CUDA_SUCCESS)
        r = sw_map(s, i);
    if (r == CUDA_SUCCESS)
        r = sw_unmap(s, i);
    if (r == CUDA_SUCCESS)
        r = cuMemRelease(s->h[i]);
    return r;
}

static void sw_serve(int sock)
{
    context_on_device0();
    struct sw_state s;
    memset(&s, 0, sizeof s);
    for (;;) {
        struct sw_cmd c;
        int fd = -1;
        if (sw_recv(sock, &c, sizeof c, &fd))
            _exit(0); /* the test went away */
        struct sw_reply rep = {.result = CUDA_SUCCESS};
        int out_fd = -1;
        int i = c.slot;
        switch (c.op) {
        case SW_CREATE: rep.result = sw_create(&s, i, c.mib, CU_MEM_LOCATION_TYPE_DEVICE); break;
        case SW_CREATE_HOST: rep.result = sw_host_roundtrip(&s, i, c.mib); break;
        case SW_MAP: rep.result = sw_map(&s, i); break;
        case SW_UNMAP: rep.result = sw_unmap(&s, i); break;
        case SW_RELEASE: rep.result = cuMemRelease(s.h[i]); break;
        case SW_RETAIN:
            rep.result = cuMemRetainAllocationHandle(&s.retained[i], (void *)(uintptr_t)s.va[i]);
            break;
        case SW_UNRETAIN: rep.result = cuMemRelease(s.retained[i]); break;
        case SW_EXPORT:
            rep.result = cuMemExportToShareableHandle(&out_fd, s.h[i],
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            break;
        case SW_EXPORT_FABRIC: {
            CUmemFabricHandle fh;
            rep.result = cuMemExportToShareableHandle(&fh, s.h[i], CU_MEM_HANDLE_TYPE_FABRIC, 0);
            break;
        }
        case SW_IMPORT:
            s.size[i] = (size_t)c.mib * MiB;
            rep.result = cuMemImportFromShareableHandle(&s.h[i], (void *)(intptr_t)fd,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            break;
        case SW_IPC_ALLOC: rep.result = cuMemAlloc_v2(&s.dptr[i], (size_t)c.mib * MiB); break;
        case SW_IPC_GET: rep.result = cuIpcGetMemHandle(&rep.ipc, s.dptr[i]); break;
        case SW_IPC_OPEN:
            rep.result = cuIpcOpenMemHandle_v2(&s.dptr[i], c.ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
            break;
        case SW_IPC_CLOSE: rep.result = cuIpcCloseMemHandle(s.dptr[i]); break;
        case SW_FREE: rep.result = cuMemFree_v2(s.dptr[i]); break;
        case SW_FORK: {
            pid_t k = fork();
            if (k == 0)
                _exit(0);
            int st = 0;
            rep.result = k > 0 && waitpid(k, &st, 0) == k && WIFEXITED(st) ? CUDA_SUCCESS
                                                                          : CUDA_ERROR_UNKNOWN;
            break;
        }
        case SW_VIEW: {
            size_t f, t;
            rep.result = cuMemGetInfo_v2(&f, &t);
            break;
        }
        case SW_EXIT: _exit(0);
        default: rep.result = CUDA_ERROR_INVALID_VALUE;
        }
        if (fd >= 0)
            close(fd);
        if (sw_send(sock, &rep, sizeof rep, rep.result == CUDA_SUCCESS ? out_fd : -1))
            _exit(1);
        if (out_fd >= 0)
            close(out_fd);
    }
}

/* A worker process, exec'ed (SELF --worker FD) with `ledger` as its
 * tenant's ledger: the library reads its configuration once per process
 * image. The test's main hands --worker to sw_worker_main. */
static struct sw_proc sw_start_tenant(const char *self, const char *ledger)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", sv[1]);
        fcntl(sv[1], F_SETFD, 0);
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", ledger, 1);
        execl(self, self, "--worker", fd, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    /* A worker that stops answering fails the test instead of hanging it. */
    const char *scale = getenv("CS_TEST_SCALE");
    struct timeval tv = {.tv_sec = 30 * (scale && atoi(scale) > 0 ? atoi(scale) : 1)};
    CHECK_EQ(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    return (struct sw_proc){pid, sv[0]};
}

static void sw_worker_main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--worker")) {
        sw_serve(atoi(argv[2]));
        _exit(0);
    }
}

/* A worker of this tenant: a fresh process image too, as applications
 * are (a fork after the test's own CUDA initialisation would give the
 * child a copy of the driver's state mid-use). */
static struct sw_proc sw_start(void)
{
    return sw_start_tenant("/proc/self/exe", getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE"));
}

/* One step: the CUresult, and in *fd_out (if given) a descriptor sent back. */
static CUresult sw_do(struct sw_proc *w, char op, int slot, uint32_t mib, int fd_in,
                      CUipcMemHandle *ipc, int *fd_out)
{
    struct sw_cmd c = {.op = op, .slot = slot, .mib = mib};
    if (ipc)
        c.ipc = *ipc;
    CHECK_EQ(sw_send(w->sock, &c, sizeof c, fd_in), 0);
    struct sw_reply rep;
    CHECK_EQ(sw_recv(w->sock, &rep, sizeof rep, fd_out), 0);
    if (ipc && op == SW_IPC_GET)
        *ipc = rep.ipc;
    return (CUresult)rep.result;
}

static void sw_kill(struct sw_proc *w)
{
    kill(w->pid, SIGKILL);
    CHECK_EQ(waitpid(w->pid, NULL, 0), w->pid);
    close(w->sock);
    w->pid = 0;
}

static void sw_exit(struct sw_proc *w)
{
    struct sw_cmd c = {.op = SW_EXIT};
    CHECK_EQ(sw_send(w->sock, &c, sizeof c, -1), 0);
    int st;
    CHECK_EQ(waitpid(w->pid, &st, 0), w->pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(w->sock);
    w->pid = 0;
}

#endif
