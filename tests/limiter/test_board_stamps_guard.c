/*
 * The SIGBUS guard of the launch stamps (src/limiter/board.c, "Launch
 * stamps"; src/ledger/guard.c): a tenant's board file truncated under it,
 * again and again, while its launch path stores stamps into the shared
 * mapping, costs it the stamps until its next post, never the process.
 * That holds even when the process maps as many ledgers as the guard has
 * room for (making room on a full GPU maps every tenant's ledger at once):
 * the stamps have registrations of their own. Not under the sanitizers,
 * which take SIGBUS for themselves.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ledger/ledger.h"
#include "limiter/board.h"
#include "limiter/board_test.h"

#define SEC 1000000000ll

static const uint8_t gpu[16] = {7, 7, 7};

static void post(struct cs_board *b, int64_t now)
{
    struct cs_board_post p = {.tenant = 42, .priority = 0, .policy = 0, .sm_limit = 50,
                              .share_ppm = 300000, .busy = true};
    memcpy(p.uuid, gpu, 16);
    cs__board_post(b, &p, now);
}

/* Whether `v` is one of the stamps of `file`, as any reader sees them. */
static bool published(const char *file, uint64_t v)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    uint64_t st[CS_BOARD_ENTRIES];
    bool found = false;
    if (pread(fd, st, sizeof st, CS_BOARD_STAMPS_OFF) == (ssize_t)sizeof st)
        for (unsigned i = 0; i < CS_BOARD_ENTRIES && !found; i++)
            found = st[i] == v;
    close(fd);
    return found;
}

int main(void)
{
    /* Every ledger registration taken, as by a process that maps many. */
    static uint8_t fake_ledgers[64][4096];
    int ledgers = 0;
    while (ledgers < 64 && cs__ledger_guard_add(fake_ledgers[ledgers], 4096, "fake ledger"))
        ledgers++;
    CHECK(ledgers > 0 && ledgers < 64);

    char dir[] = "/tmp/cs-stamps-XXXXXX", path[128], file[200];
    struct cs_board *b = board_open_fresh(dir, path, sizeof path, file, sizeof file);
    post(b, 10 * SEC);
    uint64_t *stamp = cs__board_stamp(b, gpu);
    CHECK(stamp != NULL);
    __atomic_store_n(stamp, 1001, __ATOMIC_RELAXED);
    CHECK(published(file, 1001));

    for (int round = 0; round < 3; round++) {
        /* Truncated under us: the next store faults, the guard turns the
         * page into private zeros and the store completes there. */
        CHECK_EQ(truncate(file, 0), 0);
        __atomic_store_n(stamp, 2000 + (uint64_t)round, __ATOMIC_RELAXED);
        CHECK_EQ(__atomic_load_n(stamp, __ATOMIC_RELAXED), 2000 + round);
        /* The next post repairs the file and maps it again at the same
         * address: stores are published again. */
        post(b, (11 + round) * SEC);
        struct stat st;
        CHECK_EQ(stat(file, &st), 0);
        CHECK_EQ(st.st_size, CS_BOARD_SIZE);
        CHECK(cs__board_stamp(b, gpu) == stamp);
        __atomic_store_n(stamp, 3000 + (uint64_t)round, __ATOMIC_RELAXED);
        CHECK(published(file, 3000 + (uint64_t)round));
    }

    cs__board_close(b);
    unlink(file);
    rmdir(dir);
    printf("ok: %d ledger registrations taken, the stamps survived 3 truncations\n", ledgers);
    return 0;
}
