/*
 * The production path end to end, with no test override anywhere: a
 * broker on the compiled CS_BROKER_SOCKET_PATH, cs__broker_query(NULL) and
 * cs__identity_resolve with broker_test == NULL, from this process and from
 * pid 1 of a child PID namespace. If another broker already serves the
 * default directory on this machine (-EBUSY), that one is queried instead:
 * the assertions are the same.
 */
#include "id_test.h"
#include <sched.h>
#include <sys/stat.h>

struct shared {
    int rc, tier;
    pid_t got, resolved, fork_pid;
};

static void check_from_child_namespace(struct shared *sh)
{
    pid_t helper = cs_fork_tied();
    CHECK(helper >= 0);
    if (helper == 0) {
        if (unshare(CLONE_NEWPID) != 0)
            _exit(2);
        pid_t c = cs_fork_tied();
        if (c < 0)
            _exit(3);
        if (c == 0) {
            pid_t p = ID_SENTINEL;
            sh->rc = cs__broker_query(NULL, &p);
            sh->got = p;
            struct cs_identity_config cfg = {.broker = true};
            struct cs_identity_result r;
            cs__identity_resolve(&cfg, &r);
            sh->tier = r.tier;
            sh->resolved = r.host_pid;
            _exit(getpid() == 1 ? 0 : 4);
        }
        sh->fork_pid = c;
        int st;
        waitpid(c, &st, 0);
        _exit(cs_exit_code(st));
    }
    CHECK_EQ(cs_exit_code(cs_wait_child(helper, 10000)), 0);
    CHECK_EQ(sh->rc, 0);
    CHECK_EQ(sh->got, sh->fork_pid);
    CHECK_EQ(sh->tier, CS_IDENTITY_BROKER);
    CHECK_EQ(sh->resolved, sh->fork_pid);
}

int main(void)
{
    cs_require_root("it chowns files, changes uid and makes PID namespaces");
    struct shared *sh = cs_shared(sizeof *sh);
    struct stat node;
    const bool node_missing = lstat(CS_NODE_DIR, &node) != 0 && errno == ENOENT;
    struct cs_broker_server *srv = NULL;
    int rc = cs__broker_server_open(NULL, &srv);   /* all defaults */
    CHECK(rc == 0 || rc == -EBUSY);
    if (node_missing) {
        /* The broker made the node directory: every user's tenants must be
         * able to keep their board files there (1777, as HAMi makes it). */
        CHECK(lstat(CS_NODE_DIR, &node) == 0);
        CHECK_EQ(node.st_mode & 07777, CS_NODE_DIR_MODE);
    }
    int stop[2];
    pthread_t t;
    struct id_broker b = {0};
    if (rc == 0) {
        CHECK_STREQ(cs__broker_server_path(srv), CS_BROKER_SOCKET_PATH);
        CHECK(pipe2(stop, O_CLOEXEC) == 0);
        b.srv = srv;
        b.stop[0] = stop[0];
        CHECK(pthread_create(&t, NULL, id_broker_main, &b) == 0);
    } else {
        printf("another broker serves %s: querying it\n", CS_BROKER_SOCKET_PATH);
    }

    pid_t p = ID_SENTINEL;
    CHECK_EQ(cs__broker_query(NULL, &p), 0);
    CHECK_EQ(p, getpid());
    p = ID_SENTINEL;
    CHECK_EQ(cs__broker_query(CS_BROKER_SOCKET_PATH, &p), 0);
    CHECK_EQ(p, getpid());
    check_from_child_namespace(sh);

    if (rc == 0) {
        char c = 1;
        CHECK(write(stop[1], &c, 1) == 1);
        pthread_join(t, NULL);
        cs__broker_server_close(srv);
        close(stop[0]);
        close(stop[1]);
        struct stat st;
        CHECK(lstat(CS_BROKER_SOCKET_PATH, &st) != 0 && errno == ENOENT);
        /* Gone: the production client fails fast with "missing". */
        p = ID_SENTINEL;
        CHECK_EQ(cs__broker_query(NULL, &p), -ENOENT);
        CHECK_EQ(p, ID_SENTINEL);
    }
    printf("production path %s ok\n", CS_BROKER_SOCKET_PATH);
    return 0;
}
