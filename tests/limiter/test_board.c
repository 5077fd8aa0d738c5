/*
 * The node board (src/limiter/board.c): its entry layout (other tenants'
 * libraries read it, so the offsets are an ABI) and what a tenant learns
 * from it: busy tenants by priority, and the fulfilment of starved
 * limited tenants it yields to (docs/limiter.md, "Fulfilment").
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "limiter/board.h"

#define SEC 1000000000ll

static void layout(void)
{
    CHECK_EQ(offsetof(struct cs_board_entry, tenant), 0);
    CHECK_EQ(offsetof(struct cs_board_entry, seen_ns), 8);
    CHECK_EQ(offsetof(struct cs_board_entry, busy_until_ns), 16);
    CHECK_EQ(offsetof(struct cs_board_entry, uuid), 24);
    CHECK_EQ(offsetof(struct cs_board_entry, priority), 40);
    CHECK_EQ(offsetof(struct cs_board_entry, policy), 44);
    CHECK_EQ(offsetof(struct cs_board_entry, sm_limit), 48);
    CHECK_EQ(offsetof(struct cs_board_entry, share_ppm), 52);
    CHECK_EQ(offsetof(struct cs_board_entry, flags), 56);
    CHECK_EQ(CS_BOARD_F_STARVED, 1);
}

static void post(struct cs_board *b, uint64_t tenant, const uint8_t *uuid, int prio,
                 unsigned limit, unsigned share_ppm, bool starved, int64_t now)
{
    struct cs_board_post p = {.tenant = tenant, .priority = prio, .sm_limit = limit,
                              .share_ppm = share_ppm, .busy = share_ppm >= 20000,
                              .starved = starved};
    memcpy(p.uuid, uuid, 16);
    cs__board_post(b, &p, now);
}

int main(void)
{
    layout();
    char path[] = "/tmp/cs-board-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    unlink(path); /* the board creates its own file */
    struct cs_board *b = cs__board_open(path);
    CHECK(b != NULL);
    const uint8_t gpu0[16] = {1}, gpu1[16] = {2};
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

    cs__board_close(b);
    unlink(path);

    /* A missing directory (a fresh node without HAMi's /tmp/vgpulock) is
     * created, shared like /tmp. */
    char dir[] = "/tmp/cs-boarddir-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char sub[128], file[160];
    snprintf(sub, sizeof sub, "%s/vgpulock", dir);
    snprintf(file, sizeof file, "%s/board", sub);
    b = cs__board_open(file);
    CHECK(b != NULL);
    struct stat st;
    CHECK_EQ(stat(sub, &st), 0);
    CHECK_EQ(st.st_mode & 07777, 01777);
    CHECK_EQ(stat(file, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0666);
    cs__board_close(b);
    unlink(file);
    rmdir(sub);
    rmdir(dir);
    printf("board layout and views as documented\n");
    return 0;
}
