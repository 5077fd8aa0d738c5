/*
 * `cushare run` refuses a bad configuration as a usage error (exit 2, one
 * message naming the option or variable and the fix) instead of running
 * the command with a limit nobody meant:
 *   - a --mem or --sm list with a missing value (`--mem 1GiB,2GiB,,3`
 *     gave device 2 a 3-byte budget),
 *   - a --mem size without a unit (3 means 3 bytes to HAMi, nobody types it),
 *   - CUSHARE_LOG_LEVEL=garbage,
 *   - a per-device variable naming no device cushare manages.
 * Well-formed equivalents still run the command.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

struct run_case {
    const char *env;        /* NAME=value added to the environment, or NULL */
    const char *args[6];    /* cushare run's options, before "--" */
    int want_rc;
    const char *want_msg;   /* in stderr, when want_rc is 2 */
};

static const struct run_case cases[] = {
    {NULL, {"--mem", "1GiB,2GiB,,3"}, 2, "--mem '1GiB,2GiB,,3' has an empty value"},
    {NULL, {"--mem", "1GiB,"}, 2, "has an empty value"},
    {NULL, {"--mem", ",1GiB"}, 2, "has an empty value"},
    {NULL, {"--sm", "10,,20"}, 2, "--sm '10,,20' has an empty value"},
    {NULL, {"--mem", "1GiB,3"}, 2, "--mem '3' has no unit"},
    {NULL, {"--mem", "4096"}, 2, "B for bytes"},
    {"CUSHARE_LOG_LEVEL=garbage", {NULL}, 2, "CUSHARE_LOG_LEVEL='garbage' is not valid"},
    {"CUDA_DEVICE_MEMORY_LIMIT_16=1GiB", {NULL}, 2, "CUDA_DEVICE_MEMORY_LIMIT_16=1GiB names no device"},
    {"CUDA_DEVICE_SM_LIMIT_x=10", {NULL}, 2, "CUDA_DEVICE_SM_LIMIT_x=10 names no device"},
    {NULL, {"--mem", "1GiB,2GiB,3B", "--sm", "10,20"}, 0, NULL},
    {NULL, {"--mem", "0"}, 0, NULL},
    {"CUSHARE_LOG_LEVEL=WARNING", {"--mem", "64MiB"}, 0, NULL},
    {"CUDA_DEVICE_MEMORY_LIMIT_15=1GiB", {NULL}, 0, NULL},
};

/* Runs `cushare run ARGS -- true`; its exit status, stderr in err. */
static int run(const struct run_case *c, char *err, size_t len)
{
    char cli[4096];
    snprintf(cli, sizeof cli, "%s/cushare", getenv("CS_BUILD_DIR"));
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        if (c->env)
            putenv((char *)c->env);
        const char *argv[12] = {cli, "run"};
        int n = 2;
        for (int i = 0; c->args[i]; i++)
            argv[n++] = c->args[i];
        argv[n++] = "--";
        argv[n++] = "true";
        argv[n] = NULL;
        execv(cli, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t r;
    while (got < len - 1 && (r = read(pipefd[0], err + got, len - 1 - got)) > 0)
        got += (size_t)r;
    err[got] = '\0';
    close(pipefd[0]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    return WEXITSTATUS(status);
}

int main(void)
{
    CHECK(getenv("CS_BUILD_DIR") != NULL);
    /* The library the command preloads must not see our own variables. */
    unsetenv("CUSHARE_LOG_LEVEL");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct run_case *c = &cases[i];
        char err[4096];
        int rc = run(c, err, sizeof err);
        if (rc != c->want_rc) {
            fprintf(stderr, "case %zu (%s %s %s): exit %d, want %d; stderr:\n%s", i,
                    c->env ? c->env : "", c->args[0] ? c->args[0] : "",
                    c->args[1] ? c->args[1] : "", rc, c->want_rc, err);
            exit(1);
        }
        if (c->want_msg)
            CHECK_CONTAINS(err, c->want_msg);
        printf("case %zu: exit %d%s%s", i, rc, c->want_msg ? ": " : "\n", c->want_msg ? err : "");
    }
    return 0;
}
