/*
 * fork() while another thread holds the post-init lock. The child inherits
 * the parent's open file description (so an OFD lock request on it would
 * "succeed" while the parent holds the lock) and a copy of a mutex that a
 * thread which does not exist in the child holds. The lock must refuse to
 * run in the child (-ESTALE) until it reopens the file; after that it must
 * wait for the parent's release, without deadlocking on the copied mutex.
 */
#include "id_test.h"

struct shared {
    int entering;                       /* the child's next step is acquire */
    int64_t parent_released;
    int64_t child_acquired;
    int stale_rc, hazard_rc, setfd_rc, acquire_rc, release_rc;
};

static struct cs_postinit_lock lock;
static struct shared *sh;
static char path[] = "/tmp/cs-postinit-fork-XXXXXX";
static int held, may_release;

static void *holder(void *arg)
{
    (void)arg;
    CHECK_EQ(cs__postinit_lock_acquire(&lock, NULL), 0);
    __atomic_store_n(&held, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&may_release, __ATOMIC_ACQUIRE))
        cs_sleep_ms(1);
    sh->parent_released = cs_now_ns();
    CHECK_EQ(cs__postinit_lock_release(&lock), 0);
    return NULL;
}

static void child(int inherited_fd)
{
    /* The atfork handler marked the inherited lock stale. */
    sh->stale_rc = cs__postinit_lock_acquire(&lock, NULL);
    /* Why: on the inherited description the kernel grants the parent's
     * lock to us too (same owner). Never unlock this one. */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET,
                       .l_start = (off_t)CS_POSTINIT_LOCK_OFFSET, .l_len = 1};
    sh->hazard_rc = fcntl(inherited_fd, F_OFD_SETLK, &fl) == 0 ? 0 : -errno;

    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        _exit(2);
    sh->setfd_rc = cs__postinit_lock_set_fd(&lock, fd);
    __atomic_store_n(&sh->entering, 1, __ATOMIC_RELEASE);
    sh->acquire_rc = cs__postinit_lock_acquire(&lock, NULL);
    sh->child_acquired = cs_now_ns();
    sh->release_rc = cs__postinit_lock_release(&lock);
    _exit(0);
}

int main(void)
{
    sh = cs_shared(sizeof *sh);
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK_EQ(cs__postinit_lock_init(&lock, fd, CS_POSTINIT_LOCK_OFFSET, CS_POSTINIT_WAIT_AUTO), 0);

    pthread_t t;
    CHECK(pthread_create(&t, NULL, holder, NULL) == 0);
    while (!__atomic_load_n(&held, __ATOMIC_ACQUIRE))
        cs_sleep_ms(1);

    pid_t pid = cs_fork_tied();
    CHECK(pid >= 0);
    if (pid == 0)
        child(fd);
    /* The child reached acquire and sleeps there (nothing else on its
     * way sleeps): it is waiting for our holder, not merely not started. */
    CS_WAIT_FOR(__atomic_load_n(&sh->entering, __ATOMIC_ACQUIRE), 10000, "the child's acquire");
    cs_wait_blocked(pid, 10000);
    CHECK_EQ(__atomic_load_n(&sh->child_acquired, __ATOMIC_ACQUIRE), 0);
    __atomic_store_n(&may_release, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK_EQ(cs_exit_code(cs_wait_child(pid, 10000)), 0);

    CHECK_EQ(sh->stale_rc, -ESTALE);
    CHECK_EQ(sh->hazard_rc, 0);
    CHECK_EQ(sh->setfd_rc, 0);
    CHECK_EQ(sh->acquire_rc, 0);
    CHECK_EQ(sh->release_rc, 0);
    CHECK_GE(sh->child_acquired, sh->parent_released);

    /* The parent's lock is still usable after all that. */
    CHECK_EQ(cs__postinit_lock_acquire(&lock, NULL), 0);
    CHECK_EQ(cs__postinit_lock_release(&lock), 0);
    cs__postinit_lock_destroy(&lock);
    close(fd);
    unlink(path);
    printf("post-init lock across fork ok\n");
    return 0;
}
