/*
 * `cushare mps start|stop|status`: the node's MPS control daemons, one per
 * GPU (mps.h, docs/mps.md). Every GPU NVML lists, or those named with
 * --gpu; each gets one line saying what was done, and the exit status is
 * the worst of them (0 ok, 1 runtime failure, 2 usage or configuration).
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/mps.h"
#include "cli/status_model.h"

static const char usage[] =
    "usage: cushare mps start  [--gpu IDX|UUID]... [--dir DIR]\n"
    "       cushare mps stop   [--gpu IDX|UUID]... [--dir DIR] [--force]\n"
    "       cushare mps status [--gpu IDX|UUID]... [--dir DIR] [--json]\n"
    "  one NVIDIA MPS control daemon per GPU (default: every GPU NVML lists)\n"
    "  --gpu    an NVML index (nvidia-smi's) or a GPU UUID (or a unique prefix)\n"
    "  --dir    where the daemons' pipe and log directories live\n"
    "           (default $CUSHARE_MPS_DIR, else " CS_MPS_DEFAULT_DIR ")\n"
    "  --force  stop: also a daemon that has clients, or that does not answer\n"
    "  --json   status: one JSON object\n"
    "The daemon is $CUSHARE_MPS_CONTROL, else " CS_MPS_CONTROL_NAME " from PATH.\n"
    "examples:\n"
    "  cushare mps start --gpu 0\n"
    "  cushare mps status --json\n"
    "  cushare mps stop --gpu 0     (refused while clients run; --force asks anyway)\n";

enum action { START, STOP, STATUS };

struct opts {
    enum action action;
    const char *dir;
    const char *gpu[CS_MPS_MAX_GPUS];
    int ngpu;
    bool force, json;
};

/* CS_EXIT_OK, or CS_EXIT_USAGE after a message; *help when --help. */
static int parse(int argc, char **argv, struct opts *o, bool *help)
{
    static const struct option lopts[] = {
        {"gpu", required_argument, NULL, 'g'}, {"dir", required_argument, NULL, 'd'},
        {"force", no_argument, NULL, 'f'},     {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    *help = false;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        *help = argc >= 2;
        return argc < 2 ? cs_cli_usage_error("mps", "no action; give start, stop or status, "
                                             "e.g. cushare mps status") : 0;
    }
    if (!strcmp(argv[1], "start"))
        o->action = START;
    else if (!strcmp(argv[1], "stop"))
        o->action = STOP;
    else if (!strcmp(argv[1], "status"))
        o->action = STATUS;
    else
    {
        static const char *const actions[] = {"start", "stop", "status"};
        const char *s = cs_cli_suggest(argv[1], actions, 3);
        return cs_cli_usage_error("mps", "unknown action '%s'; %s%s%sgive start, stop or status",
                                  argv[1], s ? "did you mean '" : "", s ? s : "",
                                  s ? "'? " : "");
    }
    int c, ac = argc - 1; /* the action is getopt's argv[0] */
    char **av = argv + 1;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(ac, av, "+h", lopts, NULL)) != -1) {
        switch (c) {
        case 'g':
            if (o->ngpu == CS_MPS_MAX_GPUS)
                return cs_cli_usage_error("mps", "at most %d --gpu", CS_MPS_MAX_GPUS);
            o->gpu[o->ngpu++] = optarg;
            break;
        case 'd':
            o->dir = optarg;
            break;
        case 'f':
            if (o->action != STOP)
                return cs_cli_usage_error("mps", "--force goes with stop");
            o->force = true;
            break;
        case 'j':
            if (o->action != STATUS)
                return cs_cli_usage_error("mps", "--json goes with status");
            o->json = true;
            break;
        case 'h':
            *help = true;
            return 0;
        default:
            return cs_cli_unknown_option("mps", av[optind - 1], usage);
        }
    }
    if (optind < ac)
        return cs_cli_usage_error("mps", "unexpected argument '%s'; GPUs are named with --gpu, "
                                  "e.g. --gpu 0", av[optind]);
    return 0;
}

/* The GPUs to act on, into sel[]: those --gpu names (each once), else
 * all. How many, or -CS_EXIT_* after a message. */
static int select_gpus(const struct opts *o, const char *cmd, struct cs_mps_gpu *sel)
{
    struct cs_mps_gpu all[CS_MPS_MAX_GPUS];
    int n = cs_mps_gpus(cmd, all, CS_MPS_MAX_GPUS);
    if (n < 0)
        return -CS_EXIT_FAIL;
    if (!o->ngpu) {
        memcpy(sel, all, (size_t)n * sizeof *all);
        return n;
    }
    bool taken[CS_MPS_MAX_GPUS] = {false};
    int k = 0;
    for (int i = 0; i < o->ngpu; i++) {
        int at = cs_mps_pick(cmd, o->gpu[i], all, n);
        if (at < 0)
            return -CS_EXIT_USAGE;
        if (!taken[at])
            sel[k++] = all[at];
        taken[at] = true;
    }
    return k;
}

static int worst(int a, int b)
{
    return a > b ? a : b;
}

static int do_start(const struct cs_mps *m, const struct cs_mps_gpu *g, int n)
{
    int rc = CS_EXIT_OK;
    for (int i = 0; i < n; i++) {
        struct cs_mps_daemon d;
        enum cs_mps_started how;
        int r = cs_mps_start(m, g[i].uuid, &d, &how);
        rc = worst(rc, r);
        if (r)
            continue;
        printf("GPU %d %s: ", g[i].index, g[i].uuid);
        if (how == CS_MPS_JOINED)
            printf("already running (pid %d)\n", (int)d.pid);
        else if (how == CS_MPS_STARTED)
            printf("started (pid %d), pipe %s\n", (int)d.pid, d.pipe);
        else if (d.stale_pid)
            printf("started (pid %d) after removing what dead pid %d left, pipe %s\n",
                   (int)d.pid, (int)d.stale_pid, d.pipe);
        else
            printf("started (pid %d) after removing a dead daemon's files, pipe %s\n",
                   (int)d.pid, d.pipe);
    }
    return rc;
}

static int do_stop(const struct cs_mps *m, const struct cs_mps_gpu *g, int n, bool force)
{
    int rc = CS_EXIT_OK;
    for (int i = 0; i < n; i++) {
        char did[768];
        int r = cs_mps_stop(m, g[i].uuid, force, did, sizeof did);
        rc = worst(rc, r);
        if (!r)
            printf("GPU %d %s: %s\n", g[i].index, g[i].uuid, did);
    }
    return rc;
}

static void json_pids(const pid_t *v, int n)
{
    putchar('[');
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? "," : "", (int)v[i]);
    putchar(']');
}

static void status_json(const struct cs_mps *m, const struct cs_mps_gpu *g,
                        const struct cs_mps_daemon *d, int n)
{
    printf("{\"dir\":");
    cs_status_json_string(stdout, m->dir);
    printf(",\"control\":");
    cs_status_json_string(stdout, m->control);
    printf(",\"gpus\":[");
    for (int i = 0; i < n; i++) {
        printf("%s{\"index\":%d,\"uuid\":", i ? "," : "", g[i].index);
        cs_status_json_string(stdout, g[i].uuid);
        printf(",\"state\":\"%s\",\"pid\":", cs_mps_state_name(d[i].state));
        if (d[i].pid)
            printf("%d", (int)d[i].pid);
        else
            printf("null");
        printf(",\"servers\":");
        json_pids(d[i].servers, d[i].nservers);
        printf(",\"clients\":");
        json_pids(d[i].clients, d[i].nclients);
        printf(",\"pipe\":");
        cs_status_json_string(stdout, d[i].pipe);
        printf(",\"log\":");
        cs_status_json_string(stdout, d[i].log);
        printf("}");
    }
    printf("]}\n");
}

static void status_human(const struct cs_mps *m, const struct cs_mps_gpu *g,
                         const struct cs_mps_daemon *d, int n)
{
    printf("MPS directory %s, control %s\n", m->dir, m->control);
    for (int i = 0; i < n; i++) {
        printf("GPU %d %s: %s", g[i].index, g[i].uuid, cs_mps_state_name(d[i].state));
        if (d[i].pid && d[i].state != CS_MPS_STALE)
            printf(", pid %d", (int)d[i].pid);
        if (d[i].state == CS_MPS_RUNNING) {
            printf(", %d client%s", d[i].nclients, d[i].nclients == 1 ? "" : "s");
            for (int c = 0; c < d[i].nclients; c++)
                printf("%s%d", c ? ", " : " (pids ", (int)d[i].clients[c]);
            printf("%s, pipe %s", d[i].nclients ? ")" : "", d[i].pipe);
        } else if (d[i].state == CS_MPS_STALE) {
            if (d[i].pid)
                printf(" (files of dead pid %d: the next start or stop removes them)",
                       (int)d[i].pid);
            else
                printf(" (files of a dead daemon: the next start or stop removes them)");
        }
        putchar('\n');
    }
}

int cs_cmd_mps(int argc, char **argv)
{
    struct opts o;
    bool help;
    int rc = parse(argc, argv, &o, &help);
    if (rc || help) {
        if (!rc)
            fputs(usage, stdout);
        return rc; /* a usage error said what is wrong in one line */
    }
    static const char *const names[] = {"mps start", "mps stop", "mps status"};
    const char *cmd = names[o.action];
    struct cs_mps m;
    if ((rc = cs_mps_setup(&m, cmd, o.dir, false)))
        return rc;
    struct cs_mps_gpu g[CS_MPS_MAX_GPUS];
    int n = select_gpus(&o, cmd, g);
    if (n < 0)
        return -n;
    if (o.action == START)
        rc = do_start(&m, g, n);
    else if (o.action == STOP)
        rc = do_stop(&m, g, n, o.force);
    else {
        struct cs_mps_daemon d[CS_MPS_MAX_GPUS];
        for (int i = 0; i < n; i++)
            cs_mps_probe(&m, g[i].uuid, &d[i]);
        if (o.json)
            status_json(&m, g, d, n);
        else
            status_human(&m, g, d, n);
    }
    return fflush(stdout) == 0 ? rc : CS_EXIT_FAIL;
}
