/*
 * `cushare run`: runs a command in a slice. It writes the environment
 * contract (HAMi's names, so the same library serves HAMi's control plane)
 * and the preload, then runs the command as a child, so that the private
 * ledger it made can be removed when the command ends; the child's exit
 * status is ours.
 *
 * The limits it is given are the command's limits: inherited variables of
 * the same family (NAME and NAME_<i>) are removed from the command's
 * environment, and one line names those that said something else.
 *
 * Its private ledger is made here, before the command starts, and kept
 * (docs/ledger.md, "Private ledgers") until the command ends; one that a
 * killed `cushare run` left behind is swept by the next.
 *
 * With --mps the command becomes a client of the MPS control daemon of
 * its one visible GPU (docs/mps.md), which is started first if none runs.
 *
 * Signals sent to it (INT, TERM, HUP, QUIT, USR1, USR2) go on to the
 * command, except what the kernel sends the terminal's foreground process
 * group, which the command got already. The command gets SIGKILL when
 * `cushare run` dies, so that even one killed with SIGKILL leaves no
 * orphan behind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/mps.h"
#include "core/clock.h"
#include "core/config.h"
#include "cushare/ledger.h"
#include "ledger/ledger.h"

static const char run_usage[] =
    "usage: cushare run [--mem SIZE[,SIZE...]] [--sm PCT[,PCT...]] [--ledger FILE]\n"
    "                   [--policy default|force|disable] [--priority N] [--exec]\n"
    "                   [--mps] -- CMD [ARGS...]\n"
    "  --mem       memory budget: one size for every device, or one per device;\n"
    "              binary units (KiB, MiB, GiB, TiB; k/m/g/t alone mean the same),\n"
    "              fractions allowed (1.5GiB); 0 = no limit\n"
    "  --sm        compute share in percent (1..100), one or one per device\n"
    "  --policy    when the share holds: default = only while another process wants\n"
    "              the GPU (alone, CMD may use all of it); force = always;\n"
    "              disable = never (memory budgets still hold)\n"
    "  --priority  an integer, default 0; a lower number is a higher priority (as\n"
    "              HAMi's CUDA_TASK_PRIORITY): under --policy default a tenant is\n"
    "              held to its share only while one of equal or higher priority\n"
    "              is busy (docs/limiter.md)\n"
    "  --ledger    the tenant's ledger file (shared by every process of the tenant);\n"
    "              default: a private one, removed when CMD ends\n"
    "  --exec      replace cushare with CMD (no signal relay; a private ledger is\n"
    "              removed by a later run once unused)\n"
    "  --mps       concurrent mode: CMD is a client of the MPS control daemon of its\n"
    "              one visible GPU, started if none runs (cushare mps; docs/mps.md)\n"
    "--mem and --sm replace inherited CUDA_DEVICE_MEMORY_LIMIT[_<i>] and\n"
    "CUDA_DEVICE_SM_LIMIT[_<i>] variables for CMD (a note names those that differed).\n"
    "Signals INT, TERM, HUP, QUIT, USR1 and USR2 sent to cushare go on to CMD;\n"
    "if cushare dies, CMD is killed. The exit status is CMD's; 2 for a usage error.\n"
    "examples:\n"
    "  cushare run --mem 4GiB -- python3 train.py\n"
    "  cushare run --mem 2GiB,6GiB --sm 25,50 -- ./two_gpus\n"
    "  cushare run --mem 8GiB --sm 30 --policy force -- python3 serve.py\n"
    "  cushare run --ledger /tmp/team-a.ledger --mem 10GiB -- python3 job1.py\n"
    "    (job2.py run with the same --ledger shares those 10 GiB)\n"
    "Sizes, shares and every usage error: docs/cli.md.\n";

extern char **environ;

/* Signals relayed to the command. */
static const int relayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NRELAYED (sizeof relayed / sizeof relayed[0])

/* The command's pid, for the handler. Written once, while the relayed
 * signals are blocked, before any handler can run. */
static volatile pid_t child_pid;

static void relay_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    /* SI_KERNEL: sent by the terminal to its foreground process group,
     * the command's group too; relaying it would deliver it twice. From
     * the command itself: it meant us. */
    if (child_pid <= 0 || si->si_code == SI_KERNEL || si->si_pid == child_pid)
        return;
    int saved = errno;
    kill(child_pid, sig);
    errno = saved;
}

/* "a,b,c" → one env var for all devices, or NAME_<i> per element. */
static int set_list(const char *cmd, const char *var, const char *list, int is_size)
{
    char buf[1024];
    if (strlen(list) >= sizeof buf)
        return cs_cli_usage_error(cmd, "--%s value is too long", is_size ? "mem" : "sm");
    strcpy(buf, list);
    char *items[CS_MAX_DEVICES];
    int n = cs__split_list(buf, items, CS_MAX_DEVICES);
    if (n == -E2BIG)
        return cs_cli_usage_error(cmd, "at most %d devices", CS_MAX_DEVICES);
    if (n < 0)
        return cs_cli_usage_error(cmd, "--%s '%s' has an empty value: give one value for every "
                                  "device, e.g. %s", is_size ? "mem" : "sm", list,
                                  is_size ? "2GiB,6GiB" : "25,50");
    for (int i = 0; i < n; i++) {
        char val[64];
        int rc = cs_cli_limit_value(cmd, is_size, items[i], val, sizeof val);
        if (rc)
            return rc;
        char name[64];
        if (n == 1)
            snprintf(name, sizeof name, "%s", var);
        else
            snprintf(name, sizeof name, "%s_%d", var, i);
        setenv(name, val, 1);
    }
    return 0;
}


/* Appends "NAME=value" to a ", "-separated list in buf. */
static void append_item(char *buf, size_t len, const char *item)
{
    size_t n = strlen(buf);
    if (n < len)
        snprintf(buf + n, len - n, "%s%s", n ? ", " : "", item);
}

/* Whether environment entry `e` is of the family `var`: var=... or
 * var_<anything>=... (every suffix, not only the indices we read: a
 * variable the command's library would read or refuse must not slip
 * through). */
static bool in_family(const char *e, const char *var)
{
    size_t n = strlen(var);
    return !strncmp(e, var, n) && (e[n] == '=' || e[n] == '_') && strchr(e, '=');
}

/* Takes every inherited variable of the family out of the environment;
 * `taken` gets their "NAME=value" entries (NUL-separated; what does not
 * fit is removed all the same, only not named). */
static size_t take_family(const char *var, char *taken, size_t len)
{
    size_t used = 0;
    for (bool again = true; again;) {
        again = false;
        for (char **e = environ; *e; e++) {
            if (!in_family(*e, var))
                continue;
            size_t elen = strlen(*e) + 1;
            char name[256];
            size_t nlen = (size_t)(strchr(*e, '=') - *e);
            if (nlen >= sizeof name)
                continue;
            memcpy(name, *e, nlen);
            name[nlen] = '\0';
            if (used + elen <= len) {
                memcpy(taken + used, *e, elen);
                used += elen;
            }
            unsetenv(name); /* environ changes: look again from the start */
            again = true;
            break;
        }
    }
    return used;
}

/* --mem/--sm: the command gets exactly the limits given here. Inherited
 * NAME and NAME_<i> would otherwise win over them device by device (a
 * per-device variable beats the one for all devices), so they are removed
 * and the ones that said something else are named on stderr. */
static int own_limits(const char *opt, const char *var, const char *list, int is_size)
{
    char taken[4096];
    size_t n = take_family(var, taken, sizeof taken);
    int rc = set_list("run", var, list, is_size);
    if (rc)
        return rc;
    char differing[1024] = "";
    for (size_t at = 0; at < n; at += strlen(taken + at) + 1) {
        const char *e = taken + at;
        char name[256];
        size_t nlen = (size_t)(strchr(e, '=') - e);
        snprintf(name, sizeof name, "%.*s", (int)nlen, e);
        const char *now = getenv(name);
        if (!now || strcmp(now, e + nlen + 1))
            append_item(differing, sizeof differing, e);
    }
    if (differing[0])
        fprintf(stderr, "cushare: run: %s %s replaces the inherited %s (the command gets "
                "only the limits given here)\n", opt, list, differing);
    return 0;
}

/* Our library first, once: another libcushare.so inherited (a run inside
 * a run, another build) would interpose a second time. */
static int add_preload(const char *lib)
{
    char *v = cs_cli_preload(getenv("LD_PRELOAD"), lib, true);
    if (!v || setenv("LD_PRELOAD", v, 1)) {
        free(v);
        fprintf(stderr, "cushare: run: out of memory\n");
        return -1;
    }
    free(v);
    return 0;
}

/* Makes the command's private ledger in a 0700 per-user directory, after
 * sweeping ledgers that killed runs left there, and keeps it: until we
 * close it, no sweep removes it. */
static int make_private_ledger(const struct cs_config *cfg, struct cs_ledger *l)
{
    char dir[PATH_MAX];
    if (cs_cli_user_dir("run", dir, sizeof dir))
        return -1;
    cs__ledger_sweep(dir, "ledger-");
    struct cs_ledger_params params;
    cs__ledger_params_from_config(cfg, &params);
    for (int attempt = 0; attempt < 16; attempt++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/ledger-%d-%llx", dir, (int)getpid(),
                 (unsigned long long)cs__now_ns());
        if (cs__ledger_open(path, &params, false, l))
            return -1; /* the ledger code said why */
        int r = cs__ledger_keep(l);
        if (r == 0)
            return 0;
        cs__ledger_close(l);
        if (r != -EAGAIN && r != -ESTALE) {
            fprintf(stderr, "cushare: run: cannot keep ledger %s: %s\n", path, strerror(-r));
            return -1;
        }
        /* Another run's sweep took it between creation and keep. */
    }
    fprintf(stderr, "cushare: run: ledgers in %s keep being removed as they are made\n", dir);
    return -1;
}


/* --ledger: the file, or the directory it is to be made in, must be
 * usable now; otherwise a command that never reaches CUDA would end "well"
 * and a typo would surface only as a CUDA failure of a later program. */
static int check_ledger_path(const char *path)
{
    if (access(path, F_OK) == 0) {
        if (access(path, R_OK | W_OK))
            return cs_cli_usage_error("run", "--ledger %s: %s; give a ledger file you may read "
                                      "and write", path, strerror(errno));
        return 0;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(path, '/') - path), path);
    if (!dir[0])
        strcpy(dir, "/");
    struct stat st;
    int st_rc = stat(dir, &st);
    if (st_rc || !S_ISDIR(st.st_mode))
        return cs_cli_usage_error("run", "--ledger %s: directory %s %s; create it (mkdir -p %s) "
                                  "or give a path in an existing directory", path, dir,
                                  st_rc ? "does not exist" : "is not a directory", dir);
    if (access(dir, W_OK | X_OK))
        return cs_cli_usage_error("run", "--ledger %s: cannot create a file in %s: %s; give a "
                                  "path in a directory you may write", path, dir, strerror(errno));
    return 0;
}

/* Sets `var` for the command; one line when it replaces an inherited
 * value that said something else. */
static void set_for_command(const char *var, const char *value)
{
    const char *old = getenv(var);
    if (old && strcmp(old, value))
        fprintf(stderr, "cushare: run: --mps replaces the inherited %s=%s with %s\n", var, old,
                value);
    setenv(var, value, 1);
}

/* --mps: starts or joins the MPS control daemon of the slice's one GPU
 * (mps.h) and makes the command its client: the daemon's pipe and log
 * directories, and the GPU by UUID, which names the same device whether
 * the client counts devices as the node does or as the daemon (which sees
 * only this one). One line when a daemon had to be started. */
static int join_mps(void)
{
    struct cs_mps_gpu gpu;
    struct cs_mps m;
    struct cs_mps_daemon d;
    enum cs_mps_started how;
    int rc = cs_mps_visible_gpu("run", &gpu);
    if (rc || (rc = cs_mps_setup(&m, "run", NULL, false)) ||
        (rc = cs_mps_start(&m, gpu.uuid, &d, &how)))
        return rc;
    if (how == CS_MPS_STARTED)
        fprintf(stderr, "cushare: run: %s: started the MPS control daemon (pid %d)\n", gpu.uuid,
                (int)d.pid);
    else if (how == CS_MPS_RESTARTED)
        fprintf(stderr, "cushare: run: %s: the MPS control daemon (dead pid %d) was gone: "
                "removed its files, started it again (pid %d)\n", gpu.uuid, (int)d.stale_pid,
                (int)d.pid);
    setenv("CUDA_VISIBLE_DEVICES", gpu.uuid, 1); /* the GPU it named, by UUID */
    set_for_command("CUDA_MPS_PIPE_DIRECTORY", d.pipe);
    set_for_command("CUDA_MPS_LOG_DIRECTORY", d.log);
    return CS_EXIT_OK;
}

struct child_setup {
    pid_t parent;
    const sigset_t *mask;
    const struct sigaction *actions;
};

/* In the child, between fork and exec: die with `parent` (SIGKILL: when it
 * was killed with SIGKILL nothing else would end us), unless it is gone
 * already (then getppid() is no longer it); then the signal dispositions
 * and mask the command would have inherited. */
static void setup_child(void *arg)
{
    const struct child_setup *c = arg;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != c->parent)
        _exit(CS_EXIT_FAIL);
    for (size_t i = 0; i < NRELAYED; i++)
        sigaction(relayed[i], &c->actions[i], NULL);
    sigprocmask(SIG_SETMASK, c->mask, NULL);
}

/* Runs the command as our child, relaying signals; returns its status. */
static int run_command(char **argv)
{
    sigset_t block, mask;
    sigemptyset(&block);
    for (size_t i = 0; i < NRELAYED; i++)
        sigaddset(&block, relayed[i]);
    /* Blocked from before the fork until child_pid is set: a signal in
     * between is relayed, not lost, and never handled in the child. */
    sigprocmask(SIG_BLOCK, &block, &mask);
    struct sigaction sa, actions[NRELAYED];
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = relay_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sa.sa_mask = block;
    for (size_t i = 0; i < NRELAYED; i++)
        sigaction(relayed[i], &sa, &actions[i]);
    struct child_setup setup = {.parent = getpid(), .mask = &mask, .actions = actions};
    struct cs_cli_spawn s = {
        .argv = argv, .search_path = true, .in_child = setup_child, .arg = &setup};
    pid_t pid = cs_cli_spawn("run", &s);
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &mask, NULL);
        return CS_EXIT_FAIL;
    }
    child_pid = pid;
    sigprocmask(SIG_SETMASK, &mask, NULL);
    int rc = cs_cli_wait(pid);
    return rc < 0 ? CS_EXIT_FAIL : rc;
}

int cs_cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mem", required_argument, NULL, 'm'},    {"sm", required_argument, NULL, 's'},
        {"ledger", required_argument, NULL, 'l'}, {"policy", required_argument, NULL, 'p'},
        {"priority", required_argument, NULL, 'P'}, {"exec", no_argument, NULL, 'e'},
        {"mps", no_argument, NULL, 'M'},          {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *ledger = NULL, *mem = NULL, *sm = NULL;
    int do_exec = 0, mps = 0, c, rc;
    optind = 1;
    opterr = 0; /* our messages, with "did you mean" */
    while ((c = getopt_long(argc, argv, "+m:s:l:p:P:eh", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            mem = optarg;
            break;
        case 's':
            sm = optarg;
            break;
        case 'l':
            if (optarg[0] != '/')
                return cs_cli_usage_error("run", "--ledger '%s' is relative; give an absolute "
                                          "path, e.g. --ledger $PWD/%s", optarg, optarg);
            if ((rc = check_ledger_path(optarg)))
                return rc;
            ledger = optarg;
            break;
        case 'p':
            if (strcmp(optarg, "default") && strcmp(optarg, "force") && strcmp(optarg, "disable"))
                return cs_cli_usage_error("run", "--policy '%s' is not a policy; give default, "
                                          "force or disable (cushare help run)", optarg);
            setenv("GPU_CORE_UTILIZATION_POLICY", optarg, 1);
            break;
        case 'P': {
            long v;
            if (cs__parse_int(optarg, INT_MIN, INT_MAX, &v))
                return cs_cli_usage_error("run", "--priority '%s' is not an integer; e.g. "
                                          "--priority 1", optarg);
            setenv("CUDA_TASK_PRIORITY", optarg, 1);
            break;
        }
        case 'e':
            do_exec = 1;
            break;
        case 'M':
            mps = 1;
            break;
        case 'h':
            fputs(run_usage, stdout);
            return CS_EXIT_OK;
        default:
            return cs_cli_unknown_option("run", argv[optind - 1], run_usage);
        }
    }
    if (mem && (rc = own_limits("--mem", "CUDA_DEVICE_MEMORY_LIMIT", mem, 1)))
        return rc;
    if (sm && (rc = own_limits("--sm", "CUDA_DEVICE_SM_LIMIT", sm, 0)))
        return rc;
    if (optind >= argc) {
        return cs_cli_usage_error("run", "no command to run; e.g. cushare run --mem 4GiB -- "
                                  "python3 train.py (cushare help run)");
    }
    char lib[PATH_MAX];
    if (cs_cli_find_library("run", lib, sizeof lib))
        return CS_EXIT_FAIL;
    if (add_preload(lib))
        return CS_EXIT_FAIL;

    if (ledger)
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", ledger, 1);
    /* Validate the whole contract now: a typo is a usage error here rather
     * than a CUDA failure later. */
    struct cs_config cfg;
    if (cs__config_from_env(&cfg))
        return CS_EXIT_USAGE;
    if ((rc = cs_cli_check_node_budgets(&cfg)))
        return rc;
    if (mps && (rc = join_mps()))
        return rc;

    /* Made and kept by us; closed (and removed if unused) at the end. */
    struct cs_ledger own = {.fd = -1, .slot = -1};
    if (!cfg.ledger_path[0]) {
        if (make_private_ledger(&cfg, &own))
            return CS_EXIT_FAIL;
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", own.path, 1);
    }
    if (do_exec) {
        /* Our keep lock goes with exec (O_CLOEXEC); the command's library
         * keeps the ledger itself from its first CUDA call on. */
        execvp(argv[optind], argv + optind);
        int e = errno;
        fprintf(stderr, "cushare: run: cannot run %s: %s\n", argv[optind], strerror(e));
        rc = e == ENOENT ? 127 : 126;
    } else {
        rc = run_command(argv + optind);
    }
    if (own.hdr) {
        cs__ledger_remove_if_unused(&own);
        cs__ledger_close(&own);
    }
    return rc;
}
