/*
 * cushare's NVIDIA MPS control daemons (docs/mps.md): one per GPU, owned by
 * the node command (`cushare mps start|stop|status`, `cushare run --mps`).
 *
 * Layout, under the MPS directory (--dir, else $CUSHARE_MPS_DIR, else
 * /tmp/vgpulock/cushare-mps beside the node's other shared state):
 *
 *   <dir>/<GPU-UUID>/pipe   CUDA_MPS_PIPE_DIRECTORY of the daemon and its clients
 *   <dir>/<GPU-UUID>/log    CUDA_MPS_LOG_DIRECTORY (control.log)
 *   <dir>/<GPU-UUID>/lock   flock'ed while the daemon is started or stopped,
 *                           so concurrent starters start exactly one
 *
 * The daemon runs with CUDA_VISIBLE_DEVICES=<GPU-UUID>. Its binary is
 * $CUSHARE_MPS_CONTROL, else `nvidia-cuda-mps-control` found in PATH. Every
 * question to it is a line on the stdin of a second invocation (as with
 * NVIDIA's tool); "healthy" means `get_server_list` was answered. Every wait
 * on it is bounded by CS_MPS_WAIT_MS.
 *
 * Nothing here is shared with other threads: one command, one thread.
 */
#ifndef CS_CLI_MPS_H
#define CS_CLI_MPS_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "cli/status_model.h"
#include "core/path.h"

#define CS_MPS_DEFAULT_DIR CS_NODE_DIR "/cushare-mps"
#define CS_MPS_CONTROL_NAME "nvidia-cuda-mps-control"
#define CS_MPS_PID_FILE "nvidia-cuda-mps-control.pid"
#define CS_MPS_WAIT_MS 10000    /* start, answer, quit: fixed, not scaled */
#define CS_MPS_MAX_GPUS 16
#define CS_MPS_MAX_SERVERS 8
#define CS_MPS_MAX_CLIENTS 64   /* MPS serves at most 48 per device */

/* Where the daemons live and which binary runs them: resolved once per
 * command by cs_mps_setup. */
struct cs_mps {
    const char *cmd;            /* "mps start", "run": names messages */
    char dir[PATH_MAX];         /* the MPS directory */
    char control[PATH_MAX];     /* the control binary; "" when not found (quiet setup) */
};

/* A GPU as NVML numbers it (nvidia-smi's index). */
struct cs_mps_gpu {
    int index;
    char uuid[48];
};

enum cs_mps_state {
    CS_MPS_STOPPED,             /* no pid file, no socket */
    CS_MPS_RUNNING,             /* its pid lives and it answered */
    CS_MPS_UNRESPONSIVE,        /* its pid lives (the control binary) but no answer */
    CS_MPS_STALE,               /* a pid file or socket of a dead daemon */
};

/* One GPU's daemon as probed (never changes anything). */
struct cs_mps_daemon {
    char gpu_dir[PATH_MAX + 64], pipe[PATH_MAX + 72], log[PATH_MAX + 72];
    enum cs_mps_state state;
    pid_t pid;                  /* from the pid file, 0 none */
    pid_t stale_pid;            /* cs_mps_start: the dead daemon whose state it
                                   removed (CS_MPS_RESTARTED), 0 unknown */
    int nservers, nclients;
    bool clients_unknown;       /* a server's get_client_list went unanswered */
    pid_t servers[CS_MPS_MAX_SERVERS];
    pid_t clients[CS_MPS_MAX_CLIENTS];
};

/* How a start went. */
enum cs_mps_started { CS_MPS_JOINED, CS_MPS_STARTED, CS_MPS_RESTARTED };

/* Resolves the directory (dir_arg, else $CUSHARE_MPS_DIR, else the
 * default; absolute, short enough for the daemon's socket) and the binary.
 * `quiet`: a missing binary leaves control "" and is no error (status).
 * CS_EXIT_OK, or CS_EXIT_USAGE after one message naming the fix. */
int cs_mps_setup(struct cs_mps *m, const char *cmd, const char *dir_arg, bool quiet);

/* NVML's GPUs into out[0..max): how many, or -1 after a message. */
int cs_mps_gpus(const char *cmd, struct cs_mps_gpu *out, int max);

/* `sel` (an NVML index, a UUID or a unique UUID prefix) among g[0..n):
 * its position, or -1 after a message. */
int cs_mps_pick(const char *cmd, const char *sel, const struct cs_mps_gpu *g, int n);

/* The one GPU `cushare run --mps` may use: CUDA_VISIBLE_DEVICES holds one
 * entry (index or GPU-UUID prefix), or is unset on a node of one GPU.
 * CS_EXIT_OK with *out filled, CS_EXIT_USAGE (more or fewer than one GPU,
 * an entry that names none) or CS_EXIT_FAIL (no NVML), after a message. */
int cs_mps_visible_gpu(const char *cmd, struct cs_mps_gpu *out);

/* The daemon of `uuid` as it is now (no lock taken, nothing changed):
 * state, pid and, when it answers, its servers and their clients. */
void cs_mps_probe(const struct cs_mps *m, const char *uuid, struct cs_mps_daemon *d);

/* Start-or-join under the GPU's lock: a running daemon is joined, stale
 * state is removed and the daemon started again. *d is the daemon after,
 * *how what was done. CS_EXIT_OK, or CS_EXIT_USAGE / CS_EXIT_FAIL after a
 * message. */
int cs_mps_start(const struct cs_mps *m, const char *uuid, struct cs_mps_daemon *d,
                 enum cs_mps_started *how);

/* Stops the daemon of `uuid` under its lock: `quit`, then waits for its
 * pid to exit. A daemon with clients is left alone unless `force`.
 * Writes what it did (one line, no newline) to did. CS_EXIT_OK or
 * CS_EXIT_FAIL (after a message). */
int cs_mps_stop(const struct cs_mps *m, const char *uuid, bool force, char *did, size_t len);

/* "running", "stopped", "unresponsive", "stale". */
const char *cs_mps_state_name(enum cs_mps_state s);

/* For `cushare status`: each device of st with a UUID whose cushare
 * daemon runs gets its pid (mps_pid), and each process that is one of
 * its clients mps = true. Quiet: no MPS, no binary, nothing changes. */
void cs_mps_annotate(struct cs_status *st);

#endif
