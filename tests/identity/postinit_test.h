/*
 * Lock-holder processes for the post-init lock tests. Each role is a forked
 * child that opens the lock file itself (its own open file description, as
 * a real process would), takes the real lock and can be held still at any
 * hook point or in the middle of its critical section, where the test
 * SIGKILLs it. Mutual exclusion is checked with a counter in a MAP_SHARED
 * anonymous mapping; `excused` discounts a holder killed inside.
 */
#ifndef CS_TESTS_IDENTITY_POSTINIT_TEST_H
#define CS_TESTS_IDENTITY_POSTINIT_TEST_H
#include "id_test.h"
#include <sys/sysmacros.h>

#define PT_MAX_ROLES 512
#define PT_MID_WORK 100                 /* pause point after acquire returns */
#define PT_NO_PAUSE (-1)

struct pt_shared {
    int stage[PT_MAX_ROLES];            /* last hook point + 1; MID_WORK + 1 */
    int go[PT_MAX_ROLES];               /* set to let a held role continue */
    int acquired[PT_MAX_ROLES];         /* times the role entered */
    int busy[PT_MAX_ROLES];             /* saw the lock busy at least once */
    int64_t t_acquired[PT_MAX_ROLES];
    int64_t t_released[PT_MAX_ROLES];
    uint32_t waits[PT_MAX_ROLES];
    int inside;
    int excused;
    int violations;
    int nbusy;                          /* roles that saw the lock busy */
};

struct pt_role {
    int id;
    enum cs_postinit_wait mode;
    int pause_at;                       /* enum cs_postinit_point, PT_MID_WORK, PT_NO_PAUSE */
    int work_us;
};

static struct pt_shared *pt;
static char pt_path[64];

ID_HELPER void pt_setup(void)
{
    pt = cs_shared(sizeof *pt);
    snprintf(pt_path, sizeof pt_path, "/tmp/cs-postinit-XXXXXX");
    int fd = mkstemp(pt_path);
    CHECK(fd >= 0);
    close(fd);
}

ID_HELPER void pt_reset(void)
{
    memset(pt, 0, sizeof *pt);
}

ID_HELPER void pt_hold(int id)
{
    while (!__atomic_load_n(&pt->go[id], __ATOMIC_ACQUIRE))
        cs_sleep_ms(1);
}

ID_HELPER void pt_hook(enum cs_postinit_point p, void *arg)
{
    const struct pt_role *r = arg;
    if (p == CS_POSTINIT_AT_BUSY && !pt->busy[r->id]) {
        pt->busy[r->id] = 1;
        __atomic_add_fetch(&pt->nbusy, 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&pt->stage[r->id], (int)p + 1, __ATOMIC_RELEASE);
    if ((int)p == r->pause_at)
        pt_hold(r->id);
}

ID_HELPER void pt_spin_us(int us)
{
    int64_t end = cs_now_ns() + (int64_t)us * 1000;
    while (cs_now_ns() < end)
        ;
}

/* The body of every role: the real lock functions, nothing simulated. */
ID_HELPER void pt_role_main(struct pt_role r)
{
    int fd = open(pt_path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        _exit(20);
    struct cs_postinit_lock l;
    if (cs__postinit_lock_init(&l, fd, CS_POSTINIT_LOCK_OFFSET, r.mode) != 0)
        _exit(21);
    cs__postinit_set_test_hook(pt_hook, &r);
    uint32_t waits = 0;
    if (cs__postinit_lock_acquire(&l, &waits) != 0)
        _exit(22);
    pt->t_acquired[r.id] = cs_now_ns();
    pt->waits[r.id] = waits;
    int in = __atomic_add_fetch(&pt->inside, 1, __ATOMIC_ACQ_REL) -
             __atomic_load_n(&pt->excused, __ATOMIC_ACQUIRE);
    if (in != 1)
        __atomic_add_fetch(&pt->violations, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pt->acquired[r.id], 1, __ATOMIC_RELEASE);
    if (r.pause_at == PT_MID_WORK) {
        __atomic_store_n(&pt->stage[r.id], PT_MID_WORK + 1, __ATOMIC_RELEASE);
        pt_hold(r.id);
    }
    if (r.work_us)
        pt_spin_us(r.work_us);
    __atomic_sub_fetch(&pt->inside, 1, __ATOMIC_ACQ_REL);
    pt->t_released[r.id] = cs_now_ns();
    if (cs__postinit_lock_release(&l) != 0)
        _exit(23);
    _exit(in == 1 ? 0 : 24);
}

ID_HELPER pid_t pt_spawn(int id, enum cs_postinit_wait mode, int pause_at, int work_us)
{
    pid_t pid = cs_fork_tied();
    CHECK(pid >= 0);
    if (pid == 0)
        pt_role_main((struct pt_role){id, mode, pause_at, work_us});
    return pid;
}

/* Waits until role id published stage `point` (+1 encoding inside). */
ID_HELPER void pt_wait_stage(int id, int point, int timeout_ms)
{
    int64_t t0 = cs_now_ns();
    while (__atomic_load_n(&pt->stage[id], __ATOMIC_ACQUIRE) != point + 1) {
        if (cs_ms_since(t0) > timeout_ms * cs_test_scale()) {
            fprintf(stderr, "role %d: stage %d, waited for %d\n", id, pt->stage[id], point + 1);
            exit(1);
        }
        cs_sleep_ms(1);
    }
}

/* Blocked OFD requests on our lock file, from /proc/locks ("->" lines). */
ID_HELPER int pt_blocked_waiters(void)
{
    struct stat st;
    CHECK(stat(pt_path, &st) == 0);
    char needle[64];
    snprintf(needle, sizeof needle, " %02x:%02x:%lu ", major(st.st_dev), minor(st.st_dev),
             (unsigned long)st.st_ino);
    FILE *f = fopen("/proc/locks", "r");
    CHECK(f != NULL);
    /* Waiters are shown as a tree, indented by depth: lines grow long. */
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (getline(&line, &cap, f) > 0)
        if (strstr(line, "->") && strstr(line, needle))
            n++;
    free(line);
    fclose(f);
    return n;
}

/* Until at least n waiters sleep inside F_OFD_SETLKW on our file. */
ID_HELPER void pt_wait_blocked(int n, int timeout_ms)
{
    int64_t t0 = cs_now_ns();
    int got;
    while ((got = pt_blocked_waiters()) < n) {
        if (cs_ms_since(t0) > timeout_ms * cs_test_scale()) {
            fprintf(stderr, "only %d of %d waiters blocked in the kernel\n", got, n);
            exit(1);
        }
        cs_sleep_ms(1);
    }
}

ID_HELPER const char *pt_mode_name(enum cs_postinit_wait m)
{
    return m == CS_POSTINIT_WAIT_POLLING ? "polling" : "blocking";
}

#endif
