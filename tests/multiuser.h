/*
 * A hostile local user for tests: when the test runs as root,
 * a throwaway system user is made with useradd and deleted at exit, and
 * the attacker's side runs through `setpriv --reuid --regid
 * --clear-groups`, as a real unprivileged user would. useradd and userdel
 * are retried, since tests running in parallel contend for /etc/passwd's
 * lock. When that is impossible (not root, no useradd/setpriv), the test
 * exits CS_TEST_SKIP after printing why; CTest reports it as skipped
 * (register with SKIP_RETURN_CODE 77), never as passed.
 * (tests/identity/slowloris.h has the broker's own variant, which drops
 * privileges in-process.)
 */
#ifndef CS_TESTS_MULTIUSER_H
#define CS_TESTS_MULTIUSER_H

#define _GNU_SOURCE
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

struct cs_test_user {
    uid_t uid;
    gid_t gid;
    char name[32];
};

static struct cs_test_user cs_mu_user_;
static pid_t cs_mu_owner_;

static void cs_mu_delete_(void)
{
    if (!cs_mu_user_.name[0] || getpid() != cs_mu_owner_)
        return;
    char *argv[] = {"userdel", cs_mu_user_.name, NULL};
    int rc = cs_run(argv, true);
    for (int attempt = 1; attempt < 6 && rc != 0 && rc != 6; attempt++) {
        cs_sleep_ms(100 << attempt);    /* /etc/passwd locked by another test */
        rc = cs_run(argv, true);
    }
    if (rc != 0)
        fprintf(stderr, "warning: could not delete test user %s\n", cs_mu_user_.name);
    cs_mu_user_.name[0] = 0;
}

static void cs_mu_on_signal_(int sig)
{
    cs_mu_delete_();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Users of test processes that were killed outright (a CTest timeout
 * sends SIGKILL, which no exit handler sees): cs-shared-<pid> whose
 * process is gone. Only names this header makes are touched. */
static inline void cs_mu_delete_orphans_(void)
{
    setpwent();
    struct passwd *pw;
    char names[64][32];
    int n = 0;
    while ((pw = getpwent()) && n < 64) {
        int pid;
        char tail;
        if (sscanf(pw->pw_name, "cs-shared-%d%c", &pid, &tail) == 1 && pid > 0 &&
            kill(pid, 0) && errno == ESRCH)
            snprintf(names[n++], sizeof names[0], "%s", pw->pw_name);
    }
    endpwent();
    for (int i = 0; i < n; i++) {
        char *argv[] = {"userdel", names[i], NULL};
        cs_run(argv, true);
    }
}

/* Makes the throwaway user (once per test process) or skips the test. */
static inline const struct cs_test_user *cs_test_user(void)
{
    if (cs_mu_user_.name[0])
        return &cs_mu_user_;
    if (geteuid() != 0)
        cs_skip("needs root to create a throwaway user (useradd) for the attacker");
    char *probe[] = {"setpriv", "--version", NULL};
    if (cs_run(probe, true) != 0)
        cs_skip("setpriv (util-linux) is not available to run the attacker's side");
    cs_mu_delete_orphans_();
    snprintf(cs_mu_user_.name, sizeof cs_mu_user_.name, "cs-shared-%d", (int)getpid());
    char *add[] = {"useradd", "-r", "-M", "-N", "-s", "/usr/sbin/nologin", cs_mu_user_.name,
                   NULL};
    char *del[] = {"userdel", cs_mu_user_.name, NULL};
    int rc = -1;
    for (int attempt = 0; attempt < 6 && rc != 0 && rc != 127; attempt++) {
        if (attempt)
            cs_sleep_ms(100 << attempt);    /* back off: another test's useradd holds the lock */
        rc = cs_run(add, true);
        if (rc == 9)                    /* a killed run of ours with this very pid */
            cs_run(del, true);
    }
    if (rc != 0) {
        cs_mu_user_.name[0] = 0;
        cs_skip("%s", rc == 127 ? "useradd is not installed: cannot create a throwaway user"
                               : "useradd failed: cannot create a throwaway user");
    }
    cs_mu_owner_ = getpid();
    atexit(cs_mu_delete_);
    signal(SIGTERM, cs_mu_on_signal_);
    signal(SIGINT, cs_mu_on_signal_);
    struct passwd *pw = getpwnam(cs_mu_user_.name);
    CHECK(pw != NULL);
    cs_mu_user_.uid = pw->pw_uid;
    cs_mu_user_.gid = pw->pw_gid;
    printf("attacker: throwaway user %s (uid %u)\n", cs_mu_user_.name, (unsigned)pw->pw_uid);
    return &cs_mu_user_;
}

/* Starts argv as user u through setpriv; returns the pid. argv[0] must
 * be an absolute path or a program on PATH. */
static inline pid_t cs_test_spawn_as(const struct cs_test_user *u, char *const argv[])
{
    char reuid[32], regid[32];
    snprintf(reuid, sizeof reuid, "--reuid=%u", (unsigned)u->uid);
    snprintf(regid, sizeof regid, "--regid=%u", (unsigned)u->gid);
    char *full[64] = {"setpriv", reuid, regid, "--clear-groups", "--"};
    int n = 5;
    for (int i = 0; argv[i] && n < 63; i++)
        full[n++] = argv[i];
    full[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execvp("setpriv", full);
        _exit(127);
    }
    return pid;
}

/* Runs argv as user u and returns its exit status (128 + signal). */
static inline int cs_test_run_as(const struct cs_test_user *u, char *const argv[])
{
    pid_t pid = cs_test_spawn_as(u, argv);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        CHECK(errno == EINTR);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* This test's own executable, for running its attacker mode as u. */
static inline const char *cs_test_self(void)
{
    static char self[4096];
    if (!self[0]) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        CHECK(n > 0);
        self[n] = 0;
    }
    return self;
}

#endif
