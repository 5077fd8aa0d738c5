/*
 * limiter_board_hostile: the node board against another local user.
 * Run as root it makes a throwaway user, the
 * attacker, whose side runs through setpriv; without root it is skipped,
 * visibly. The attacker:
 *
 *   1. owns the board directory: a tenant refuses it, with one message;
 *   2. plants board files at the tenant's name (and at the layout-1 name
 *      c17f7cb used): the tenant says so in one warning and posts in a
 *      fallback file of its own, which other tenants read (before: the
 *      tenant refused the board, and so lost priority coordination);
 *   3. fills every entry it can write with far-future timestamps, then
 *      keeps posting lies (starved at a share of 1 ppm and at 25 % of a
 *      99 % limit, priority INT32_MIN) while a `--sm 50 --policy force`
 *      tenant runs: the tenant keeps its 50 % (c17f7cb: pushed toward its
 *      20 % floor), is not locked out (c17f7cb: "node board is full") and
 *      other tenants still see it;
 *   4. truncates every board file it can: the tenant keeps running and
 *      exits 0 (c17f7cb: SIGBUS, exit 135).
 *
 * The attacker's entries are written through the board code of this very
 * build (cs__board_post with lying arguments), so they land wherever that
 * build lets a user write.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>

#include "limiter/board.h"
#include "limiter/board_test.h"
#include "limiter/lim_test.h"
#include "multiuser.h"

#define SEC 1000000000ll

static char shared[64];     /* a directory both users can write, like /tmp */
static char board[128];

/* ---- the attacker's side (run as the throwaway user) -------------------- */

static void lie(struct cs_board *b, uint64_t tenant, const uint8_t uuid[16], uint32_t share,
                int64_t now)
{
    struct cs_board_post p = {.tenant = tenant, .priority = INT32_MIN, .policy = 1,
                              .sm_limit = 99, .share_ppm = share, .busy = true,
                              .starved = true};
    memcpy(p.uuid, uuid, 16);
    cs__board_post(b, &p, now);
}

static int truncate_all(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    char path[PATH_MAX + 300];
    while ((de = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (!strncmp(de->d_name, prefix, strlen(prefix)) && !truncate(path, 0))
            n++;
    }
    closedir(d);
    return n;
}

/* Fills the board, says so on `ready`, lies until `stop` closes, then
 * truncates every board file it can. */
static int attack_lie(const char *path, const char *uuid_hex, int ready, int stop)
{
    uint8_t uuid[16];
    CHECK_EQ(fakecuda_parse_uuid(uuid_hex, uuid), 0);
    struct cs_board *b = cs__board_open(path);
    const int64_t far = cs_now_ns() + 1000000ll * SEC;
    for (uint64_t t = 0; b && t < CS_BOARD_ENTRIES; t++)
        lie(b, 2 + t, uuid, 1, far);
    CHECK_EQ(write(ready, "x", 1), 1);
    for (;;) {
        struct pollfd p = {.fd = stop, .events = POLLIN};
        if (poll(&p, 1, 20) > 0)
            break; /* EOF: the test is done measuring */
        int64_t now = cs_now_ns();
        for (uint64_t t = 0; b && t < 8; t++)
            lie(b, 2 + t, uuid, 1, now);
        if (b)
            lie(b, 10, uuid, 250000, now);
    }
    cs__board_close(b);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = 0;
    printf("attacker: truncated %d board files\n", truncate_all(dir, strrchr(path, '/') + 1));
    return 0;
}

/* Plants what a tenant could mistake for its board: its own board's name
 * (and layout 1's name), 0644, holding a board the attacker made. */
static int attack_squat(const char *path, const char *victim_uid)
{
    struct cs_board *b = cs__board_open(path); /* the attacker's own board */
    cs__board_close(b);
    char mine[PATH_MAX], theirs[PATH_MAX], cmd[3 * PATH_MAX];
    board_own_file(mine, sizeof mine, path, (unsigned)geteuid());
    board_own_file(theirs, sizeof theirs, path, (unsigned)strtoul(victim_uid, NULL, 10));
    if (access(path, F_OK)) { /* layout 1: a board at the path itself */
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", mine, path);
        CHECK_EQ(system(cmd), 0);
    }
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod 644 '%s' '%s'", path, theirs, path, theirs);
    return system(cmd) ? 1 : 0;
}

static int attack_dir(const char *dir)
{
    return mkdir(dir, 01777) || chmod(dir, 01777) ? 1 : 0;
}

/* ---- the victim's side ------------------------------------------------- */

static int run_as(const struct cs_test_user *u, const char *mode, const char *a, const char *b)
{
    char *argv[] = {(char *)cs_test_self(), (char *)mode, (char *)a, (char *)b, NULL};
    return cs_test_run_as(u, argv);
}

static char *read_text(const char *file)
{
    static char buf[16384];
    int fd = open(file, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    close(fd);
    return buf;
}

static char *capture_end(int saved, const char *file)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return read_text(file);
}

static int capture_begin(const char *file)
{
    fflush(stderr);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    close(fd);
    return saved;
}

static void expect_refused(const char *path, const char *what)
{
    int saved = capture_begin(lim_path("open.err"));
    struct cs_board *b = cs__board_open(path);
    char *err = capture_end(saved, lim_path("open.err"));
    if (b) {
        fprintf(stderr, "the board at %s was accepted; expected: %s\n", path, what);
        exit(1);
    }
    int lines = 0;
    for (char *p = err; *p; p++)
        lines += *p == '\n';
    CHECK_EQ(lines, 1);
    CHECK_CONTAINS(err, "cushare: limiter: warning: node board: ");
    CHECK_CONTAINS(err, what);
    printf("  %s", err);
}

static int victim_seen_by_others(const uint8_t uuid[16]);

/* A squat at our board's name: one warning naming it and our fallback
 * file; what we post there, other tenants of ours read. */
static void posts_beside_squat(const char *what)
{
    int saved = capture_begin(lim_path("open.err"));
    struct cs_board *b = cs__board_open(board);
    char *err = capture_end(saved, lim_path("open.err"));
    CHECK(b != NULL);
    CHECK_CONTAINS(err, "cushare: limiter: warning: node board: ");
    CHECK_CONTAINS(err, what);
    printf("  %s", err);
    const uint8_t uuid[16] = {0x5e};
    struct cs_board_post p = {.tenant = 777, .priority = 0, .policy = 1, .sm_limit = 50,
                              .share_ppm = 500000, .busy = true};
    memcpy(p.uuid, uuid, 16);
    int64_t now = cs_now_ns();
    cs__board_post(b, &p, now);
    CHECK_EQ(victim_seen_by_others(uuid), 1);
    cs__board_close(b);
}

static void refuses_foreign_directory_and_files(const struct cs_test_user *u)
{
    char dir[PATH_MAX], path[PATH_MAX + 16], what[PATH_MAX + 128];
    snprintf(dir, sizeof dir, "%s/attackers", shared);
    CHECK_EQ(run_as(u, "attack-dir", dir, NULL), 0);
    snprintf(path, sizeof path, "%s/board", dir);
    snprintf(what, sizeof what, "directory %s is owned by uid %u, neither root nor us", dir,
             (unsigned)u->uid);
    expect_refused(path, what);

    char uid[16];
    snprintf(uid, sizeof uid, "%u", (unsigned)geteuid());
    CHECK_EQ(run_as(u, "attack-squat", board, uid), 0);
    snprintf(what, sizeof what, "is not ours (owned by uid %u, or not a regular file): another "
             "user took our name; posting in ", (unsigned)u->uid);
    posts_beside_squat(what);
    /* Clean up as root would, for the next part. */
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "rm -f '%s' '%s'.*", board, board);
    CHECK_EQ(system(cmd), 0);
}

/* Other tenants still see the victim busy (it is not locked out). */
static int victim_seen_by_others(const uint8_t uuid[16])
{
    struct cs_board *o = cs__board_open(board);
    CHECK(o != NULL);
    struct cs_board_view v;
    cs__board_view(o, 12345, uuid, -1, cs_now_ns(), &v); /* the victim has priority 0 > -1 */
    cs__board_close(o);
    return v.busy_lower;
}

static void lies_and_truncation(const struct cs_test_user *u, struct fakecuda_state *gpu)
{
    char hex[41];
    fakecuda_uuid_string(gpu->dev[0].uuid, hex);
    /* Only the attacker's ends cross its exec: were it to inherit stop[1]
     * (or the victim to), the attacker would never see EOF. */
    int ready[2], stop[2];
    CHECK_EQ(pipe2(ready, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(stop, O_CLOEXEC), 0);
    CHECK_EQ(fcntl(ready[1], F_SETFD, 0), 0);
    CHECK_EQ(fcntl(stop[0], F_SETFD, 0), 0);
    char *argv[] = {(char *)cs_test_self(), "attack-lie", board, hex,
                    (char *)lim_kv("%d", ready[1]), (char *)lim_kv("%d", stop[0]), NULL};
    pid_t attacker = cs_test_spawn_as(u, argv);
    close(ready[1]);
    close(stop[0]);
    char x;
    struct pollfd p = {.fd = ready[0], .events = POLLIN};
    CHECK_EQ(poll(&p, 1, (int)(30000 * cs_test_scale())), 1);
    CHECK_EQ(read(ready[0], &x, 1), 1);
    printf("attacker: board filled with far-future entries, lying on\n");

    const char *env[] = {lim_kv("FAKECUDA_STATE=%s", lim_path("gpu.state")),
                         "FAKECUDA_NS_PER_BLOCK=1000",
                         lim_kv("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s", lim_path("v.ledger")),
                         "CUDA_DEVICE_SM_LIMIT=50", "GPU_CORE_UTILIZATION_POLICY=force",
                         lim_kv("CUSHARE_BOARD=%s", board), NULL};
    const char *args[] = {"--secs", lim_kv("%.1f", 4.0 * cs_test_scale()), "--blocks", "1000",
                          "--sync", "4", NULL};
    int saved = capture_begin(lim_path("victim.err"));
    pid_t victim = lim_spawn(env, args);
    dup2(saved, 2);
    close(saved);
    static struct lim_series s;
    lim_sample(gpu, 0, &victim, 1, 3000, 200, 60, &s);
    int seen = victim_seen_by_others(gpu->dev[0].uuid);
    close(stop[1]); /* the attacker now truncates what it can */
    int ast;
    CHECK_EQ(waitpid(attacker, &ast, 0), attacker);
    int vst = lim_wait(victim);
    char *err = read_text(lim_path("victim.err"));

    double mean, sd;
    lim_print_series("victim, limit 50 % (force), share per 200 ms", &s, 0);
    lim_stats(&s, 0, 1200, 3000, &mean, &sd);
    printf("victim: mean %.1f%% from 1.2 s, seen busy by others: %d, exit %d\n%s", mean, seen,
           vst, err);
    CHECK(WIFEXITED(ast) && WEXITSTATUS(ast) == 0);
    CHECK_EQ(vst, 0);                          /* no SIGBUS */
    CHECK(!strstr(err, "is full"));            /* no lockout */
    CHECK_GE(seen, 1);
    CHECK_SHARE_STARVED(mean, 50, 5, 10, lim_starved(&s, 0, 1200, 3000)); /* not throttled */
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "attack-lie"))
        return attack_lie(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (argc == 4 && !strcmp(argv[1], "attack-squat"))
        return attack_squat(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "attack-dir"))
        return attack_dir(argv[2]);

    const struct cs_test_user *u = cs_test_user();
    lim_dir("board_hostile");
    struct fakecuda_state *gpu = lim_gpu("gpu.state");
    snprintf(shared, sizeof shared, "/tmp/cs-boardh-XXXXXX");
    CHECK(mkdtemp(shared) != NULL);
    CHECK_EQ(chmod(shared, 01777), 0);
    snprintf(board, sizeof board, "%s/board", shared);

    refuses_foreign_directory_and_files(u);
    lies_and_truncation(u, gpu);

    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", shared);
    CHECK_EQ(system(cmd), 0);
    printf("limiter_board_hostile: ok\n");
    return 0;
}
