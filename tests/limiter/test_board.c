/*
 * The node board (src/limiter/board.c): its file layout (other tenants'
 * libraries read it, so the offsets and the check are an ABI, pinned here
 * as golden bytes) and what a tenant learns from it: busy tenants by
 * priority, and the fulfilment of starved limited tenants it yields to
 * (docs/limiter.md, "Fulfilment"); and that a tenant stays on the board
 * while another process of its pod holds the file's lock. Hostile files:
 * limiter_board_files and limiter_board_hostile.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "limiter/board.h"
#include "limiter/board_test.h"

#define SEC 1000000000ll

static void layout(void)
{
    CHECK_EQ(offsetof(struct cs_board_header, magic), 0);
    CHECK_EQ(offsetof(struct cs_board_header, version), 8);
    CHECK_EQ(offsetof(struct cs_board_header, header_size), 12);
    CHECK_EQ(offsetof(struct cs_board_header, entry_size), 16);
    CHECK_EQ(offsetof(struct cs_board_header, entries), 20);
    CHECK_EQ(offsetof(struct cs_board_header, uid), 24);
    CHECK_EQ(offsetof(struct cs_board_entry, tenant), 0);
    CHECK_EQ(offsetof(struct cs_board_entry, seen_ns), 8);
    CHECK_EQ(offsetof(struct cs_board_entry, busy_until_ns), 16);
    CHECK_EQ(offsetof(struct cs_board_entry, uuid), 24);
    CHECK_EQ(offsetof(struct cs_board_entry, priority), 40);
    CHECK_EQ(offsetof(struct cs_board_entry, policy), 44);
    CHECK_EQ(offsetof(struct cs_board_entry, sm_limit), 48);
    CHECK_EQ(offsetof(struct cs_board_entry, share_ppm), 52);
    CHECK_EQ(offsetof(struct cs_board_entry, flags), 56);
    CHECK_EQ(offsetof(struct cs_board_entry, check), 60);
    CHECK_EQ(CS_BOARD_F_STARVED, 1);
    /* Layout 3: the launch stamps, one uint64_t per entry, start on the
     * page after the entries (page-aligned: the writer maps them alone). */
    CHECK_EQ(CS_BOARD_STAMPS_OFF, 36864);
    CHECK_EQ(CS_BOARD_SIZE, 36864 + 512 * 8);
}

/* The bytes a writer produces, pinned: a header for uid 1000, and an
 * entry (tenant 0x1122334455667788, seen 5 s, busy until 5.3 s, device
 * 01 02 .. 10, priority -1, policy force, 75 %, share 640000 ppm,
 * starved) with its FNV-1a check. A reader in another language must
 * produce and accept exactly these. */
static void golden_bytes(const char *file, const uint8_t uuid[16])
{
    static const uint8_t header[64] = {
        'C', 'U', 'S', 'H', 'B', 'R', 'D', '3', 3, 0, 0, 0, 64, 0, 0, 0,
        64, 0, 0, 0, 0, 2, 0, 0, 0xe8, 0x03, 0, 0};
    static const uint8_t entry[64] = {
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* tenant */
        0x00, 0xf2, 0x05, 0x2a, 0x01, 0x00, 0x00, 0x00, /* seen 5e9 */
        0x00, 0x95, 0xe7, 0x3b, 0x01, 0x00, 0x00, 0x00, /* busy until 5.3e9 */
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
        0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 75, 0, 0, 0, /* priority, policy, limit */
        0x00, 0xc4, 0x09, 0x00, 1, 0, 0, 0,              /* share, flags */
        0xdb, 0x0b, 0xf7, 0x2f};                         /* check */
    int fd = open(file, O_RDONLY);
    CHECK(fd >= 0);
    uint8_t got[64];
    CHECK_EQ(pread(fd, got, 64, 0), 64);
    if (getuid() == 1000)
        CHECK(!memcmp(got, header, 64));
    else
        CHECK(!memcmp(got, header, 24)); /* the uid is ours, not 1000 */
    uint8_t e[64];
    struct cs_board_entry want;
    memcpy(&want, entry, 64);
    CHECK(!memcmp(want.uuid, uuid, 16));
    bool found = false;
    for (unsigned i = 0; i < CS_BOARD_ENTRIES && !found; i++) {
        CHECK_EQ(pread(fd, e, 64, 64 + 64 * (off_t)i), 64);
        found = !memcmp(e, entry, 64);
    }
    close(fd);
    if (!found) {
        fprintf(stderr, "the golden entry is not in %s\n", file);
        exit(1);
    }
}

static enum cs_board_posted post(struct cs_board *b, uint64_t tenant, const uint8_t *uuid,
                                 int prio, unsigned limit, unsigned share_ppm, bool starved,
                                 int64_t now)
{
    struct cs_board_post p = {.tenant = tenant, .priority = prio, .sm_limit = limit,
                              .share_ppm = share_ppm, .busy = share_ppm >= 20000,
                              .starved = starved};
    memcpy(p.uuid, uuid, 16);
    return cs__board_post(b, &p, now);
}

/* Another process of our pod holds our file's write lock (as it does for
 * a moment at each of its claims; tenants started together keep their
 * ticks' phase, so the moment can fall on ours every tick). A tenant that
 * holds an entry still posts; a newcomer's claim waits for the lock and
 * says so, and goes through once it is free. */
static void posts_past_a_busy_lock(struct cs_board *b, const char *file, const uint8_t *gpu,
                                   int64_t now)
{
    CHECK_EQ(post(b, 20, gpu, 0, 75, 100000, false, now), CS_BOARD_POSTED);
    int held[2], done[2];
    CHECK(pipe(held) == 0 && pipe(done) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(done[1]); /* so that the parent's close ends our read */
        int fd = open(file, O_RDWR);
        struct flock w = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
        char c = 1;
        if (fd < 0 || fcntl(fd, F_SETLK, &w) || write(held[1], &c, 1) != 1)
            _exit(1);
        _exit(read(done[0], &c, 1) == 0 ? 0 : 1); /* holds it until the parent is done */
    }
    char c;
    CHECK_EQ(read(held[0], &c, 1), 1);
    int64_t t = now + 10 * SEC; /* every earlier post no longer busy */
    struct cs_board_view v;
    CHECK_EQ(post(b, 20, gpu, 0, 75, 500000, false, t), CS_BOARD_POSTED);
    cs__board_view(b, 12, gpu, 0, t, &v);
    CHECK_EQ(v.busy_higher_or_equal, 1);
    CHECK_EQ(v.busy_share_ppm, 500000);
    CHECK_EQ(post(b, 21, gpu, 0, 25, 200000, false, t), CS_BOARD_POST_BUSY);
    cs__board_view(b, 12, gpu, 0, t, &v);
    CHECK_EQ(v.busy_share_ppm, 500000);
    close(done[1]);
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(held[0]);
    close(held[1]);
    close(done[0]);
    CHECK_EQ(post(b, 21, gpu, 0, 25, 200000, false, t), CS_BOARD_POSTED);
    cs__board_view(b, 12, gpu, 0, t, &v);
    CHECK_EQ(v.busy_higher_or_equal, 2);
    CHECK_EQ(v.busy_share_ppm, 700000);
}

/* Launch stamps: our entry's stamp is a shared mapping of the stamps
 * page, a store there is what any reader's pread sees at 36864 + 8 i, and
 * a reader believes a stamp only up to CS_BOARD_FUTURE_NS ahead. */
static void launch_stamps(struct cs_board *b, const char *file, const uint8_t uuid[16])
{
    const uint8_t unposted[16] = {0xee};
    CHECK(cs__board_stamp(b, unposted) == NULL);
    uint64_t *st = cs__board_stamp(b, uuid);
    CHECK(st != NULL);
    __atomic_store_n(st, 0x0102030405060708ull, __ATOMIC_RELAXED);
    int fd = open(file, O_RDONLY);
    CHECK(fd >= 0);
    bool found = false;
    for (uint32_t i = 0; i < 512 && !found; i++) {
        uint64_t v = 0;
        CHECK_EQ(pread(fd, &v, 8, 36864 + 8 * (off_t)i), 8);
        if (v == 0x0102030405060708ull) {
            found = true;
            int64_t now = 0x0102030405060708ll;
            CHECK_EQ(cs__board_read_stamp(fd, NULL, i, now), now);
            CHECK_EQ(cs__board_read_stamp(fd, NULL, i, now - SEC), now);
            CHECK_EQ(cs__board_read_stamp(fd, NULL, i, now - SEC - 1), 0); /* too far ahead */
            CHECK_EQ(cs__board_read_stamp(fd, NULL, 512, now), 0);          /* no such entry */
            CHECK_EQ(cs__board_read_stamp(-1, NULL, i, now), 0);
            CHECK_EQ(cs__board_read_stamp(-1, st - i, i, now), now);        /* own mapping */
        }
    }
    close(fd);
    CHECK(found);
    __atomic_store_n(st, 0, __ATOMIC_RELAXED);
}

int main(void)
{
    layout();
    char dir[] = "/tmp/cs-board-XXXXXX", path[128], file[200];
    struct cs_board *b = board_open_fresh(dir, path, sizeof path, file, sizeof file);
    /* Our own file, ours alone to write, readable by every tenant. */
    struct stat st;
    CHECK_EQ(lstat(file, &st), 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK_EQ(st.st_mode & 07777, 0644);
    CHECK_EQ(st.st_size, CS_BOARD_SIZE);

    const uint8_t gpu0[16] = {1}, gpu1[16] = {2};
    const uint8_t golden_gpu[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    struct cs_board_post g = {.tenant = 0x1122334455667788ull, .priority = -1, .policy = 1,
                              .sm_limit = 75, .share_ppm = 640000, .busy = true,
                              .starved = true};
    memcpy(g.uuid, golden_gpu, 16);
    cs__board_post(b, &g, 5 * SEC);
    golden_bytes(file, golden_gpu);
    launch_stamps(b, file, golden_gpu);

    int64_t now = 100 * SEC;
    struct cs_board_view v;

    /* Nobody else: no busy tenant, nobody to yield to. */
    cs__board_view(b, 12, gpu0, 0, now, &v);
    CHECK_EQ(v.busy_higher_or_equal + v.busy_lower, 0);
    CHECK_EQ(v.starved_fulfil_ppm, 1000000);

    /* Tenant 10: 75 % limit, 64 % achieved, starved. Tenant 11: 50 %,
     * 30 %, not starved. Tenant 13 on another GPU: starved at 10 %. */
    post(b, 10, gpu0, 0, 75, 640000, true, now);
    post(b, 11, gpu0, 1, 50, 300000, false, now);
    post(b, 13, gpu1, 0, 50, 50000, true, now);
    cs__board_view(b, 12, gpu0, 0, now, &v);
    CHECK_EQ(v.busy_higher_or_equal, 1);
    CHECK_EQ(v.busy_lower, 1);
    CHECK_EQ(v.lower_share_ppm, 300000);
    CHECK_EQ(v.busy_share_ppm, 940000);
    CHECK_EQ(v.starved_fulfil_ppm, 853333); /* 64 / 75 */
    CHECK_EQ(v.starved_limit, 75);

    /* A tenant does not yield to itself, nor to lower priority. */
    cs__board_view(b, 10, gpu0, 0, now, &v);
    CHECK_EQ(v.starved_fulfil_ppm, 1000000);
    cs__board_view(b, 12, gpu0, -1, now, &v);
    CHECK_EQ(v.busy_higher_or_equal, 0);
    CHECK_EQ(v.starved_fulfil_ppm, 1000000);

    /* No longer starved, or no longer busy: nobody to yield to. */
    post(b, 10, gpu0, 0, 75, 700000, false, now);
    cs__board_view(b, 12, gpu0, 0, now, &v);
    CHECK_EQ(v.starved_fulfil_ppm, 1000000);
    post(b, 10, gpu0, 0, 75, 640000, true, now);
    cs__board_view(b, 12, gpu0, 0, now + SEC, &v);
    CHECK_EQ(v.busy_higher_or_equal, 0);
    CHECK_EQ(v.starved_fulfil_ppm, 1000000);

    /* A second handle of the same user (another process) sees the same
     * entries, and shares the file. */
    struct cs_board *b2 = cs__board_open(path);
    CHECK(b2 != NULL);
    post(b2, 14, gpu0, 0, 50, 400000, false, now + 2 * SEC);
    cs__board_view(b, 12, gpu0, 0, now + 2 * SEC, &v);
    CHECK_EQ(v.busy_higher_or_equal, 1);
    cs__board_close(b2);

    /* A tenant its pacing holds is busy whatever it uses (one yielding to
     * a higher priority uses nothing while it waits); one that is not
     * held is busy only from a 2 % share, whatever its post says. */
    struct cs_board_post w = {.tenant = 15, .priority = 1, .sm_limit = 50, .share_ppm = 0,
                              .busy = true, .held = true};
    memcpy(w.uuid, gpu0, 16);
    cs__board_post(b, &w, now + 2 * SEC);
    cs__board_view(b, 12, gpu0, 0, now + 2 * SEC, &v);
    CHECK_EQ(v.busy_lower, 1);
    CHECK_EQ(v.lower_share_ppm, 0);
    CHECK(v.npeers == 2 && v.peers[1].held && v.peers[1].share_ppm == 0);
    w.held = false;
    w.share_ppm = 19999;
    cs__board_post(b, &w, now + 2 * SEC);
    cs__board_view(b, 12, gpu0, 0, now + 2 * SEC, &v);
    CHECK_EQ(v.busy_lower, 0);

    posts_past_a_busy_lock(b, file, gpu0, now + 3 * SEC);

    cs__board_close(b);
    unlink(file);

    /* A missing directory (a fresh node without HAMi's /tmp/vgpulock) is
     * created, shared like /tmp. */
    char sub[128], subpath[150];
    snprintf(sub, sizeof sub, "%s/vgpulock", dir);
    snprintf(subpath, sizeof subpath, "%s/board", sub);
    b = cs__board_open(subpath);
    CHECK(b != NULL);
    CHECK_EQ(stat(sub, &st), 0);
    CHECK_EQ(st.st_mode & 07777, 01777);
    board_own_file(file, sizeof file, subpath, (unsigned)geteuid());
    CHECK_EQ(stat(file, &st), 0);
    CHECK_EQ(st.st_mode & 07777, 0644);
    cs__board_close(b);
    unlink(file);
    rmdir(sub);
    rmdir(dir);
    printf("board layout and views as documented\n");
    return 0;
}
