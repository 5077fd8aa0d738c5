/*
 * TEST TOOL (tests/fakecuda), never shipped: the MPS client side of the
 * fake libcuda.so.1, and the occupancy model that MPS concurrency and
 * cuOccupancyMaxActiveBlocksPerMultiprocessor share.
 *
 * MPS client: at its first successful cuInit a process looks for an MPS
 * control daemon as the real driver does, through the unix stream socket
 * <pipe>/control (pipe: $CUDA_MPS_PIPE_DIRECTORY, default /tmp/nvidia-mps).
 *   - No socket, or nobody listening on it: an ordinary, time-sliced
 *     process ("if the connection attempt fails, the program continues to
 *     run as it normally would without MPS", nvidia-cuda-mps-control(1)).
 *   - A daemon that accepts: the process sends "client <pid>\n" and reads
 *     one line back. "ok <pct>\n" (the daemon's default active thread
 *     percentage) makes it an MPS client on every device it sees, for the
 *     rest of its life; it keeps the connection open, so the daemon sees it
 *     go when it dies. Its thread percentage is the lower of <pct> and its
 *     own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE ("will only further constrain
 *     the limit set by the control daemon", NVIDIA's MPS documentation).
 *   - "error too many clients" (the fake daemon's refusal past its client
 *     limit): cuInit fails with CUDA_ERROR_MPS_MAX_CLIENTS_REACHED (808).
 *     Any other answer, end of file, or no answer within FC_MPS_REPLY_MS:
 *     CUDA_ERROR_MPS_CONNECTION_FAILED (805: "the MPS client failed to
 *     connect to the MPS control daemon or the MPS server"). Either way
 *     the process is not initialised; a later cuInit tries again.
 * The fake has no MPS server: a daemon that goes away after a client
 * joined changes nothing for that client (CUDA_ERROR_MPS_SERVER_NOT_READY
 * and CUDA_ERROR_MPS_CLIENT_TERMINATED are not modelled).
 *
 * Occupancy (an H100/H200-like SM: 64 warps, 32 blocks, 228 KiB of shared
 * memory of which the driver reserves 1 KiB per block): resident blocks
 * per SM = min(32, 64 / warps per block, 233472 / (dynamic shared memory
 * + 1024)); 0 when the block cannot run at all (more than 1024 threads,
 * more than 232448 bytes of shared memory). A grid of B blocks occupies
 * min(1, B / (SMs x that)) of the device.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fake_internal.h"

#define FC_MPS_DEFAULT_PIPE "/tmp/nvidia-mps"
#define FC_MPS_REPLY_MS 5000 /* a daemon that accepted but never answers */

#define FC_SM_WARPS 64           /* 2048 threads */
#define FC_SM_BLOCKS 32
#define FC_SM_SHMEM 233472u      /* shared memory per SM */
#define FC_BLOCK_SHMEM_MAX 232448u /* per block, opt-in maximum */
#define FC_BLOCK_SHMEM_RESERVED 1024u

/* The connection to the daemon, open for the life of the process (under
 * fc_mu; a fork child closes its copy in fc_mps_forget). */
static int g_mps_fd = -1;
/* This process's sticky error (a CUresult, 0 none) and, per device, the
 * MPS faults counted there when it became a client: relaxed atomics. */
static int g_sticky;
static uint32_t g_faults_seen[FAKECUDA_MAX_DEVICES];

/* ---- the client handshake ------------------------------------------------ */

/* A connected socket to <pipe>/control, or -1 when no daemon listens there
 * (no file, nobody accepting, a path too long for a socket address). */
static int mps_dial(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path, sizeof a.sun_path, "%s/control", dir && *dir ? dir : FC_MPS_DEFAULT_PIPE);
    if (n < 0 || (size_t)n >= sizeof a.sun_path)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int r;
    while ((r = connect(fd, (struct sockaddr *)&a, sizeof a)) < 0 && errno == EINTR) {
    }
    if (r < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads one line (without its newline) within FC_MPS_REPLY_MS. 0 or -1. */
static int mps_read_line(int fd, char *buf, size_t len)
{
    size_t n = 0;
    while (n + 1 < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, FC_MPS_REPLY_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t k = read(fd, buf + n, 1); /* byte by byte: never past the line */
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        if (buf[n] == '\n') {
            buf[n] = 0;
            return 0;
        }
        n++;
    }
    return -1;
}

/* "ok <pct>" with 0 < pct <= 100 (decimals allowed): pct in ppm, else 0. */
static uint32_t parse_ok(const char *line)
{
    if (strncmp(line, "ok ", 3))
        return 0;
    char *end;
    double pct = strtod(line + 3, &end);
    if (end == line + 3 || *end || !(pct > 0.0 && pct <= 100.0))
        return 0;
    return (uint32_t)(pct * (FC_PPM / 100) + 0.5);
}

/* The client's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, in ppm (FC_PPM when
 * unset; a value that is not in (0, 100] is ignored, said once). */
static uint32_t own_cap_ppm(void)
{
    const char *s = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    if (!s || !*s)
        return FC_PPM;
    char *end;
    double pct = strtod(s, &end);
    if (end == s || *end || !(pct > 0.0 && pct <= 100.0)) {
        fprintf(stderr, "fakecuda: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s is not a percentage in (0, 100]: "
                        "ignored (set a number such as 25)\n", s);
        return FC_PPM;
    }
    return (uint32_t)(pct * (FC_PPM / 100) + 0.5);
}

/* The pid at the other end of a connected Unix socket, 0 if unknown. */
static int32_t peer_pid(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ? 0 : (int32_t)cred.pid;
}

CUresult fc_mps_connect(void)
{
    int fd = mps_dial();
    if (fd < 0)
        return CUDA_SUCCESS; /* no daemon: an ordinary process */
    char line[128];
    int n = snprintf(line, sizeof line, "client %d\n", (int)getpid());
    uint32_t pct = 0;
    int answered = send(fd, line, (size_t)n, MSG_NOSIGNAL) == n && !mps_read_line(fd, line, sizeof line);
    if (answered)
        pct = parse_ok(line);
    if (!pct) {
        close(fd);
        return answered && !strcmp(line, "error too many clients") ? CUDA_ERROR_MPS_MAX_CLIENTS_REACHED
                                                                  : CUDA_ERROR_MPS_CONNECTION_FAILED;
    }
    uint32_t own = own_cap_ppm();
    uint32_t mask = 0;
    for (int i = 0; i < fc_nvis; i++)
        mask |= 1u << fc_vis[i];
    g_mps_fd = fd;
    for (int i = 0; i < fc_nvis; i++)
        __atomic_store_n(&g_faults_seen[fc_vis[i]],
                         __atomic_load_n(&fc_S->dev[fc_vis[i]].mps_faults, __ATOMIC_ACQUIRE),
                         __ATOMIC_RELAXED);
    __atomic_store_n(&fc_mps_cap_ppm, own < pct ? own : pct, __ATOMIC_RELAXED);
    __atomic_store_n(&fc_mps_server_pid, peer_pid(fd), __ATOMIC_RELAXED);
    __atomic_store_n(&fc_mps_mask, mask, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

/* ---- faults ------------------------------------------------------------- */

void fc_fault(int phys)
{
    __atomic_store_n(&g_sticky, (int)CUDA_ERROR_ILLEGAL_ADDRESS, __ATOMIC_RELAXED);
    if (fc_mps_client(phys))
        __atomic_add_fetch(&fc_S->dev[phys].mps_faults, 1, __ATOMIC_RELEASE);
}

CUresult fc_sticky_error(void)
{
    int e = __atomic_load_n(&g_sticky, __ATOMIC_RELAXED);
    if (e)
        return (CUresult)e;
    uint32_t mask = __atomic_load_n(&fc_mps_mask, __ATOMIC_RELAXED);
    for (int d = 0; mask && d < FAKECUDA_MAX_DEVICES; d++, mask >>= 1)
        if ((mask & 1u) &&
            __atomic_load_n(&fc_S->dev[d].mps_faults, __ATOMIC_ACQUIRE) !=
                __atomic_load_n(&g_faults_seen[d], __ATOMIC_RELAXED)) {
            __atomic_store_n(&g_sticky, (int)CUDA_ERROR_ILLEGAL_ADDRESS, __ATOMIC_RELAXED);
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
    return CUDA_SUCCESS;
}

void fc_mps_forget(void)
{
    if (g_mps_fd >= 0)
        close(g_mps_fd);
    g_mps_fd = -1;
    __atomic_store_n(&fc_mps_mask, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fc_mps_cap_ppm, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fc_mps_server_pid, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_sticky, 0, __ATOMIC_RELAXED);
}

int fc_mps_client(int phys)
{
    return phys >= 0 && phys < FAKECUDA_MAX_DEVICES &&
           (__atomic_load_n(&fc_mps_mask, __ATOMIC_RELAXED) >> phys & 1u);
}

/* ---- occupancy ------------------------------------------------------------ */

int fc_blocks_per_sm(unsigned threads, size_t shmem)
{
    if (!threads || threads > 1024 || shmem > FC_BLOCK_SHMEM_MAX)
        return 0;
    unsigned warps = (threads + 31) / 32;
    unsigned n = FC_SM_WARPS / warps;
    unsigned by_shmem = FC_SM_SHMEM / ((unsigned)shmem + FC_BLOCK_SHMEM_RESERVED);
    if (n > FC_SM_BLOCKS)
        n = FC_SM_BLOCKS;
    return (int)(by_shmem < n ? by_shmem : n);
}

uint32_t fc_occupancy_ppm(int phys, uint64_t blocks, unsigned threads, size_t shmem)
{
    uint64_t slots = (uint64_t)fc_S->dev[phys].sms * (uint64_t)fc_blocks_per_sm(threads, shmem);
    if (!slots || blocks >= slots)
        return FC_PPM;
    uint64_t ppm = (blocks * FC_PPM + slots - 1) / slots;
    return ppm ? (uint32_t)ppm : 1;
}

/* The function must be live and a context current (the calculation uses
 * the current context's device, cuda.h). */
static CUresult occupancy(int *numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize,
                          unsigned flags)
{
    if (!numBlocks || blockSize <= 0 || (flags & ~(unsigned)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE))
        return CUDA_ERROR_INVALID_VALUE;
    fc_lock();
    struct fc_ctx *c;
    CUresult r = fc_cur_ctx(&c);
    if (r == CUDA_SUCCESS && !fc_obj_get(func, FC_T_FUNC) && !fc_obj_get(func, FC_T_KERNEL))
        r = CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        *numBlocks = fc_blocks_per_sm((unsigned)blockSize, dynamicSMemSize);
    fc_unlock();
    return r;
}

FC_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                                       int blockSize, size_t dynamicSMemSize)
{
    FC_BEGIN(cuOccupancyMaxActiveBlocksPerMultiprocessor);
    return occupancy(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

FC_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
                                                                                int blockSize,
                                                                                size_t dynamicSMemSize,
                                                                                unsigned int flags)
{
    FC_BEGIN(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
    return occupancy(numBlocks, func, blockSize, dynamicSMemSize, flags);
}
