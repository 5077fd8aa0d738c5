/*
 * `cushare run`: runs a command in a slice. It writes the environment
 * contract (HAMi's names, so the same library serves HAMi's control plane)
 * and the preload, then runs the command as a child so that a private
 * ledger it made can be removed when the command ends; signals are
 * forwarded and the child's exit status is ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/userdir.h"
#include "core/config.h"
#include "cushare/ledger.h"

static const char run_usage[] =
    "usage: cushare run [--mem SIZE[,SIZE...]] [--sm PCT[,PCT...]] [--ledger FILE]\n"
    "                   [--policy default|force|disable] [--priority N] [--exec] -- CMD [ARGS...]\n"
    "  --mem      memory budget: one size for every device, or one per visible device\n"
    "             (a k/m/g/t binary or B suffix, e.g. 4GiB or 2g,6g; 0 = none)\n"
    "  --sm       compute share in percent (1..100), one or one per device\n"
    "  --ledger   the tenant's ledger file (shared by every process of the tenant);\n"
    "             default: a private one, removed when CMD ends\n"
    "  --exec     replace cushare with CMD (no private-ledger cleanup)\n";

static pid_t child_pid;

static void forward_signal(int sig)
{
    if (child_pid > 0)
        kill(child_pid, sig);
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
        uint64_t size;
        long pct;
        if (is_size && cs__parse_size_unit(items[i], &size))
            return cs_cli_usage_error(cmd, "--mem '%s' is not a size with a unit: use a k/m/g/t "
                                      "(binary) suffix, e.g. 4GiB, or B for bytes", items[i]);
        if (!is_size && cs__parse_int(items[i], 0, 100, &pct))
            return cs_cli_usage_error(cmd, "--sm '%s' is not a percentage from 0 to 100", items[i]);
        char name[64];
        if (n == 1)
            snprintf(name, sizeof name, "%s", var);
        else
            snprintf(name, sizeof name, "%s_%d", var, i);
        setenv(name, items[i], 1);
    }
    return 0;
}


static void add_preload(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    if (old && strstr(old, lib))
        return;
    char buf[8192];
    snprintf(buf, sizeof buf, "%s%s%s", lib, old && *old ? ":" : "", old ? old : "");
    setenv("LD_PRELOAD", buf, 1);
}

/* A private ledger path in a 0700 per-user directory. */
static int private_ledger(char *out, size_t len)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    char dir[PATH_MAX];
    if (cs__user_dir("run", base && *base ? base : "/tmp", dir, sizeof dir))
        return -1;
    if ((size_t)snprintf(out, len, "%.*s/ledger-%d", (int)(len - 32), dir, (int)getpid()) >= len)
        return -1;
    unlink(out); /* a stale file from a recycled pid */
    return 0;
}

static int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return CS_EXIT_FAIL;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

int cs_cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mem", required_argument, NULL, 'm'},    {"sm", required_argument, NULL, 's'},
        {"ledger", required_argument, NULL, 'l'}, {"policy", required_argument, NULL, 'p'},
        {"priority", required_argument, NULL, 'P'}, {"exec", no_argument, NULL, 'e'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    const char *ledger = NULL;
    int do_exec = 0, c, rc;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+m:s:l:p:P:eh", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if ((rc = set_list("run", "CUDA_DEVICE_MEMORY_LIMIT", optarg, 1)))
                return rc;
            break;
        case 's':
            if ((rc = set_list("run", "CUDA_DEVICE_SM_LIMIT", optarg, 0)))
                return rc;
            break;
        case 'l':
            if (optarg[0] != '/')
                return cs_cli_usage_error("run", "--ledger needs an absolute path");
            ledger = optarg;
            break;
        case 'p':
            if (strcmp(optarg, "default") && strcmp(optarg, "force") && strcmp(optarg, "disable"))
                return cs_cli_usage_error("run", "--policy must be default, force or disable");
            setenv("GPU_CORE_UTILIZATION_POLICY", optarg, 1);
            break;
        case 'P': {
            long v;
            if (cs__parse_int(optarg, INT_MIN, INT_MAX, &v))
                return cs_cli_usage_error("run", "--priority must be an integer");
            setenv("CUDA_TASK_PRIORITY", optarg, 1);
            break;
        }
        case 'e':
            do_exec = 1;
            break;
        case 'h':
            fputs(run_usage, stdout);
            return CS_EXIT_OK;
        default:
            fputs(run_usage, stderr);
            return CS_EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        fputs(run_usage, stderr);
        return cs_cli_usage_error("run", "missing command: cushare run [OPTIONS] -- CMD [ARGS...]");
    }
    char lib[PATH_MAX];
    if (cs_cli_find_library("run", lib, sizeof lib))
        return CS_EXIT_FAIL;
    add_preload(lib);

    char priv[PATH_MAX] = "";
    if (ledger) {
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", ledger, 1);
    } else if (!getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE")) {
        if (private_ledger(priv, sizeof priv))
            return CS_EXIT_FAIL;
        setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", priv, 1);
    }
    /* Validate the whole contract now: a typo is a usage error here rather
     * than a CUDA failure later. */
    struct cs_config cfg;
    if (cs__config_from_env(&cfg))
        return CS_EXIT_USAGE;

    if (do_exec) {
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "cushare: run: cannot run %s: %s\n", argv[optind], strerror(errno));
        return errno == ENOENT ? 127 : 126;
    }
    child_pid = fork();
    if (child_pid < 0) {
        fprintf(stderr, "cushare: run: fork: %s\n", strerror(errno));
        return CS_EXIT_FAIL;
    }
    if (child_pid == 0) {
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "cushare: run: cannot run %s: %s\n", argv[optind], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    struct sigaction sa = {.sa_handler = forward_signal};
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    rc = wait_child(child_pid);
    if (priv[0])
        unlink(priv);
    return rc;
}
