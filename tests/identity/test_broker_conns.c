/*
 * The broker's connection table (src/identity/broker_conns.h) on its own:
 * argument checks, the per-uid cap, a full table, deadline order, and a
 * long random run against a plain reference model, with uids chosen to
 * collide in the hash so that backward-shift deletion is exercised.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "identity/broker_conns.h"

static void test_args(void)
{
    struct cs__bconns t;
    CHECK_EQ(cs__bconns_init(&t, 0, 1), -EINVAL);
    CHECK_EQ(cs__bconns_init(&t, 4, 0), -EINVAL);
    CHECK_EQ(cs__bconns_init(&t, 4, 5), -EINVAL);
    CHECK_EQ(cs__bconns_init(&t, 4, 4), 0);
    cs__bconns_fini(&t);
}

static void test_caps(void)
{
    struct cs__bconns t;
    CHECK_EQ(cs__bconns_init(&t, 4, 2), 0);
    int a = cs__bconns_admit(&t, 1000, 10);
    int b = cs__bconns_admit(&t, 1000, 20);
    CHECK(a >= 0 && b >= 0 && a != b);
    CHECK_EQ(cs__bconns_admit(&t, 1000, 30), -EUSERS);
    CHECK_EQ(cs__bconns_of_uid(&t, 1000), 2);
    CHECK_EQ(cs__bconns_admit(&t, 0, 40), 2);
    CHECK_EQ(cs__bconns_admit(&t, 0, 50), 3);
    CHECK(cs__bconns_full(&t));
    CHECK_EQ(cs__bconns_admit(&t, 7, 60), -ENFILE);     /* under its cap, no slot */
    CHECK_EQ(cs__bconns_admit(&t, 0, 60), -EUSERS);     /* the cap is checked first */
    cs__bconns_release(&t, (uint32_t)a);
    CHECK_EQ(cs__bconns_of_uid(&t, 1000), 1);
    CHECK_EQ(cs__bconns_admit(&t, 1000, 70), a);        /* the freed slot */
    cs__bconns_fini(&t);
}

static void test_deadline_order(void)
{
    struct cs__bconns t;
    CHECK_EQ(cs__bconns_init(&t, 8, 8), 0);
    CHECK_EQ(cs__bconns_oldest(&t), CS_BCONNS_NONE);
    int s[5];
    for (int i = 0; i < 5; i++)
        s[i] = cs__bconns_admit(&t, 1, 100 * (i + 1));
    CHECK_EQ(cs__bconns_oldest(&t), s[0]);
    cs__bconns_release(&t, (uint32_t)s[2]);             /* from the middle */
    cs__bconns_release(&t, (uint32_t)s[0]);             /* the head */
    CHECK_EQ(cs__bconns_oldest(&t), s[1]);
    cs__bconns_release(&t, (uint32_t)s[4]);             /* the tail */
    int late = cs__bconns_admit(&t, 1, 50);             /* earlier than the tail's 400 */
    CHECK_EQ(t.node[late].deadline_ns, 400);            /* raised: order kept */
    cs__bconns_release(&t, (uint32_t)s[1]);
    CHECK_EQ(cs__bconns_oldest(&t), s[3]);
    cs__bconns_release(&t, (uint32_t)s[3]);
    CHECK_EQ(cs__bconns_oldest(&t), late);
    cs__bconns_release(&t, (uint32_t)late);
    CHECK_EQ(cs__bconns_oldest(&t), CS_BCONNS_NONE);
    CHECK_EQ(t.used, 0);
    cs__bconns_fini(&t);
}

/* Reference model: which uid holds each slot, and when it was admitted. */
enum { CAP = 64, PER_UID = 5, NUIDS = 40, STEPS = 200000 };

static uint32_t xorshift(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static void check_model(const struct cs__bconns *t, const uid_t *uids, const int *held_uid,
                        const int64_t *dl)
{
    uint32_t used = 0, oldest = CS_BCONNS_NONE;
    for (uint32_t i = 0; i < CAP; i++) {
        if (held_uid[i] < 0)
            continue;
        used++;
        if (oldest == CS_BCONNS_NONE || dl[i] < dl[oldest])
            oldest = i;
    }
    CHECK_EQ(t->used, used);
    CHECK_EQ(cs__bconns_oldest(t), oldest);
    for (int u = 0; u < NUIDS; u++) {
        uint32_t n = 0;
        for (uint32_t i = 0; i < CAP; i++)
            n += held_uid[i] == u;
        CHECK_EQ(cs__bconns_of_uid(t, uids[u]), n);
    }
}

static void test_random_against_model(void)
{
    struct cs__bconns t;
    CHECK_EQ(cs__bconns_init(&t, CAP, PER_UID), 0);
    uid_t uids[NUIDS];
    for (int u = 0; u < NUIDS; u++)
        uids[u] = (uid_t)u << 20;       /* multiples of 2^20: crowd few home slots */
    uids[NUIDS - 1] = (uid_t)-1;        /* the broker's "no credentials" bucket */
    int held_uid[CAP];
    int64_t dl[CAP];
    for (int i = 0; i < CAP; i++)
        held_uid[i] = -1;
    uint32_t x = 2463534242u;
    int64_t now = 0;
    for (int step = 0; step < STEPS; step++) {
        uint32_t r = xorshift(&x);
        if (r % 3) {                    /* admit, twice as often as release */
            int u = (int)((r >> 8) % NUIDS);
            int n = 0;
            for (int i = 0; i < CAP; i++)
                n += held_uid[i] == u;
            int got = cs__bconns_admit(&t, uids[u], ++now);
            if (n >= PER_UID) {
                CHECK_EQ(got, -EUSERS);
            } else if (t.used == CAP && got < 0) {
                CHECK_EQ(got, -ENFILE);
            } else {
                CHECK(got >= 0 && got < CAP);
                CHECK_EQ(held_uid[got], -1);
                held_uid[got] = u;
                dl[got] = now;
            }
        } else {
            int i = (int)((r >> 8) % CAP);
            if (held_uid[i] >= 0) {
                cs__bconns_release(&t, (uint32_t)i);
                held_uid[i] = -1;
            }
        }
        if (step % 97 == 0)
            check_model(&t, uids, held_uid, dl);
    }
    check_model(&t, uids, held_uid, dl);
    cs__bconns_fini(&t);
}

int main(void)
{
    test_args();
    test_caps();
    test_deadline_order();
    test_random_against_model();
    printf("broker connection table ok\n");
    return 0;
}
