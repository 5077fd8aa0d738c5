/*
 * `cushare park LEDGER` and `cushare wake LEDGER` (docs/parking.md): an
 * operator moves a tenant's GPU state to host memory and back by hand,
 * beside the automatic policy. The command performs the driver's
 * checkpoint calls itself: it loads libcuda.so.1 (no cuInit needed) and
 * needs the right the driver asks for: the tenant's user or root, in a
 * PID namespace that sees the tenant's processes.
 *
 * Exit status: 0 done (or nothing to do), 1 refused or failed (the reason
 * on stderr; the tenant is left running, or parked and woken by its next
 * call), 2 usage errors.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/config.h"
#include "ledger/ledger.h"
#include "park/park.h"

static const char park_usage[] =
    "usage: cushare park [--timeout MS] [LEDGER]\n"
    "       cushare wake [LEDGER]\n"
    "  park: moves every process of the tenant off the GPU into host memory;\n"
    "  its next GPU call (or `cushare wake`) brings it back.\n"
    "  LEDGER defaults to $CUDA_DEVICE_MEMORY_SHARED_CACHE.\n"
    "  --timeout  how long calls in flight may take to finish, ms (default 5000)\n"
    "examples:\n"
    "  cushare park /tmp/team-a.ledger     (its GPU memory moves to host memory)\n"
    "  cushare wake /tmp/team-a.ledger\n";

/* Test hook of the crash tests: CUSHARE_PARK_KILL_AT=STEP[:INDEX] makes
 * this command SIGKILL itself at that step of the park or wake. */
static const char *kill_at;

static void kill_point(const char *name, int index)
{
    if (!kill_at)
        return;
    char here[64];
    snprintf(here, sizeof here, "%s:%d", name, index);
    if (!strcmp(kill_at, name) || !strcmp(kill_at, here))
        raise(SIGKILL);
}

static int load_ops(struct cs_ckpt_ops *ops)
{
    memset(ops, 0, sizeof *ops);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cushare: park: cannot load libcuda.so.1: %s\n", dlerror());
        return -1;
    }
    ops->get_state = (CUresult(*)(int, CUprocessState *))dlsym(h, "cuCheckpointProcessGetState");
    ops->lock = (CUresult(*)(int, CUcheckpointLockArgs *))dlsym(h, "cuCheckpointProcessLock");
    ops->checkpoint =
        (CUresult(*)(int, CUcheckpointCheckpointArgs *))dlsym(h, "cuCheckpointProcessCheckpoint");
    ops->restore = (CUresult(*)(int, CUcheckpointRestoreArgs *))dlsym(h, "cuCheckpointProcessRestore");
    ops->unlock = (CUresult(*)(int, CUcheckpointUnlockArgs *))dlsym(h, "cuCheckpointProcessUnlock");
    if (!ops->get_state || !ops->lock || !ops->checkpoint || !ops->restore || !ops->unlock) {
        fprintf(stderr, "cushare: park: this driver has no checkpoint API "
                        "(cuCheckpointProcess*, driver 550 or newer)\n");
        return -1;
    }
    kill_at = getenv("CUSHARE_PARK_KILL_AT");
    ops->step = kill_point;
    return 0;
}

static int run(int argc, char **argv, bool park)
{
    const char *cmd = park ? "park" : "wake";
    static const struct option opts[] = {
        {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    long timeout = 5000;
    int c;
    optind = 1;
    opterr = 0; /* our messages, with "did you mean" */
    while ((c = getopt_long(argc, argv, "+t:h", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (!park || cs__parse_int(optarg, 1, 600000, &timeout))
                return cs_cli_usage_error(cmd, "--timeout is for park: milliseconds, 1..600000");
            break;
        case 'h':
            fputs(park_usage, stdout);
            return CS_EXIT_OK;
        default:
            return cs_cli_unknown_option(cmd, argv[optind - 1], park_usage);
        }
    }
    struct cs_ledger l;
    int orc = cs_cli_open_ledger_rw(cmd, argc, argv, optind, &l);
    if (orc != CS_EXIT_OK)
        return orc;
    const char *path = l.path;
    struct cs_ckpt_ops ops;
    if (load_ops(&ops)) {
        cs__ledger_close(&l);
        return CS_EXIT_FAIL;
    }
    struct cs_park_result r;
    int rc;
    if (park) {
        struct cs_park_opts o = {.lock_timeout_ms = (unsigned)timeout};
        rc = cs__park_tenant(&l, &ops, &o, &r);
    } else {
        rc = cs__park_wake(&l, &ops, false, &r);
    }
    if (rc)
        fprintf(stderr, "cushare: %s: %s: %s\n", cmd, path, r.why[0] ? r.why : strerror(-rc));
    else if (r.why[0])
        printf("%s %s: %s\n", cmd, path, r.why);
    else if (park)
        printf("park %s: %d processes, %llu MiB moved to host memory in %lld ms\n", path, r.procs,
               (unsigned long long)(r.bytes >> 20), (long long)(r.ns / 1000000));
    else
        printf("wake %s: %d processes, %llu MiB back on the GPU in %lld ms\n", path, r.procs,
               (unsigned long long)(r.bytes >> 20), (long long)(r.ns / 1000000));
    cs__ledger_close(&l);
    return rc ? CS_EXIT_FAIL : CS_EXIT_OK;
}

int cs_cmd_park(int argc, char **argv)
{
    return run(argc, argv, true);
}

int cs_cmd_wake(int argc, char **argv)
{
    return run(argc, argv, false);
}
