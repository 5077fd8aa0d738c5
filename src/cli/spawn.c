/*
 * How the command starts other programs and edits their environment
 * (cli.h): one fork/exec, one LD_PRELOAD rule, one per-user directory.
 * `run`, `bench init` and `bench limiter` all go through here, so a path
 * with a quote or a space in it means the same thing everywhere, and no
 * command line is ever handed to a shell.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/userdir.h"

/* An LD_PRELOAD entry is ours when it is `lib` itself or any path whose
 * last component is libcushare.so (another build, an older install). */
static bool is_cushare_lib(const char *entry, size_t len, const char *lib)
{
    if (lib && len == strlen(lib) && !memcmp(entry, lib, len))
        return true;
    static const char base[] = "libcushare.so";
    size_t bl = sizeof base - 1;
    return len >= bl && !memcmp(entry + len - bl, base, bl) &&
           (len == bl || entry[len - bl - 1] == '/');
}

char *cs_cli_preload(const char *old, const char *lib, bool with_lib)
{
    if (!old)
        old = "";
    size_t cap = strlen(old) + (with_lib ? strlen(lib) + 1 : 0) + 1;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t o = 0;
    if (with_lib) {
        memcpy(out, lib, strlen(lib));
        o = strlen(lib);
    }
    /* ld.so separates entries by colons or spaces. */
    for (const char *p = old; *p;) {
        size_t len = strcspn(p, ": ");
        if (len && !is_cushare_lib(p, len, lib)) {
            if (o)
                out[o++] = ':';
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
        if (*p)
            p++;
    }
    out[o] = '\0';
    return out;
}

int cs_cli_user_dir(const char *cmd, char *out, size_t len)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    return cs__user_dir(cmd, base && *base ? base : "/tmp", out, len) ? -1 : 0;
}

pid_t cs_cli_spawn(const char *cmd, const struct cs_cli_spawn *s)
{
    int pfd[2] = {-1, -1};
    if (s->stdout_fd && pipe2(pfd, O_CLOEXEC) < 0) {
        fprintf(stderr, "cushare: %s: pipe: %s\n", cmd, strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (s->stdout_fd && dup2(pfd[1], STDOUT_FILENO) < 0)
            _exit(126);
        if (s->in_child)
            s->in_child(s->arg);
        char *const *envp = s->envp ? s->envp : environ;
        if (s->search_path)
            execvpe(s->argv[0], s->argv, envp);
        else
            execve(s->argv[0], s->argv, envp);
        int e = errno;
        if (!s->quiet)
            fprintf(stderr, "cushare: %s: cannot run %s: %s\n", cmd, s->argv[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    int e = errno;
    if (s->stdout_fd) {
        close(pfd[1]);
        if (pid > 0)
            *s->stdout_fd = pfd[0];
        else
            close(pfd[0]);
    }
    if (pid < 0 && !s->quiet)
        fprintf(stderr, "cushare: %s: fork: %s\n", cmd, strerror(e));
    errno = e;
    return pid;
}

int cs_cli_wait(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}
