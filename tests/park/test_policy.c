/*
 * The parking policy alone (src/park/policy.c): idleness, who may be
 * parked, victim order (lowest priority, then least recently active),
 * never more than needed, refusing when parking cannot admit the request,
 * the host-memory guard and the node's budget opt-in.
 */
#include <errno.h>
#include <stdio.h>

#include "check.h"
#include "park/policy.h"

#define S 1000000000ll
#define GIB (1ull << 30)
#define MIB (1ull << 20)

static struct cs_park_tenant idle_at(int64_t t, uint64_t bytes)
{
    return (struct cs_park_tenant){.on_gpu = bytes, .last_active_ns = t};
}

static void idleness(void)
{
    struct cs_park_tenant t = idle_at(100 * S, GIB);
    CHECK(!cs__park_idle(&t, 105 * S, 10 * S));
    CHECK(cs__park_idle(&t, 110 * S, 10 * S));
    t.in_call = 1; /* inside a call: busy however long ago it started */
    CHECK(!cs__park_idle(&t, 500 * S, 10 * S));
    t = idle_at(0, GIB); /* never called */
    CHECK(cs__park_idle(&t, 1, 10 * S));
    t = idle_at(200 * S, GIB); /* stamp in the future: not idle */
    CHECK(!cs__park_idle(&t, 100 * S, 10 * S));
}

static void eligibility(void)
{
    int64_t now = 1000 * S;
    struct cs_park_tenant t = idle_at(1, GIB);
    CHECK(cs__park_eligible(&t, 0, now, S));
    t.parked = true;
    CHECK(!cs__park_eligible(&t, 0, now, S));
    t = idle_at(1, GIB);
    t.shares = true;
    CHECK(!cs__park_eligible(&t, 0, now, S));
    t = idle_at(1, 0); /* nothing on the GPU */
    CHECK(!cs__park_eligible(&t, 0, now, S));
    t = idle_at(1, GIB);
    t.priority = 0; /* high priority: a low-priority requester may not park it */
    CHECK(!cs__park_eligible(&t, 1, now, S));
    CHECK(cs__park_eligible(&t, 0, now, S));
}

static void victim_order_and_minimality(void)
{
    int64_t now = 1000 * S;
    struct cs_park_tenant t[5] = {
        idle_at(500 * S, 8 * GIB),  /* idle, recent */
        idle_at(100 * S, 2 * GIB),  /* idle, oldest */
        idle_at(300 * S, 4 * GIB),  /* idle */
        idle_at(999 * S, 20 * GIB), /* busy: active within idle_ns */
        idle_at(200 * S, 6 * GIB),  /* idle */
    };
    uint64_t freed;
    /* 1 GiB: the least recently active alone. */
    CHECK_EQ(cs__park_choose(t, 5, GIB, 0, now, 10 * S, &freed), 1);
    CHECK(t[1].chosen);
    CHECK_EQ_U(freed, 2 * GIB);
    /* 7 GiB: LRU order takes 1 (2), 4 (6) = 8 >= 7; dropping 1 would leave
     * 6 < 7, dropping 4 leaves 2: both stay. */
    CHECK_EQ(cs__park_choose(t, 5, 7 * GIB, 0, now, 10 * S, &freed), 2);
    CHECK(t[1].chosen && t[4].chosen && !t[0].chosen && !t[2].chosen && !t[3].chosen);
    CHECK_EQ_U(freed, 8 * GIB);
    /* 17 GiB: takes 1, 4, 2, 0 (2+6+4+8 = 20); then 0 stays (12 < 17),
     * 2 can go (16 < 17: no, stays), ... check minimality: no chosen one
     * can be dropped. */
    int n = cs__park_choose(t, 5, 17 * GIB, 0, now, 10 * S, &freed);
    CHECK(n > 0);
    CHECK(!t[3].chosen); /* never the busy one */
    CHECK_GE(freed, 17 * GIB);
    for (int i = 0; i < 5; i++)
        if (t[i].chosen)
            CHECK(freed - t[i].on_gpu < 17 * GIB);
    /* 12 GiB: LRU takes 1, 4, 2 (12) exactly: all needed. */
    CHECK_EQ(cs__park_choose(t, 5, 12 * GIB, 0, now, 10 * S, &freed), 3);
    CHECK(t[1].chosen && t[4].chosen && t[2].chosen);
    /* A big oldest victim makes earlier small ones unnecessary. */
    struct cs_park_tenant u[3] = {idle_at(10 * S, GIB), idle_at(20 * S, GIB),
                                  idle_at(30 * S, 10 * GIB)};
    CHECK_EQ(cs__park_choose(u, 3, 5 * GIB, 0, now, S, &freed), 1);
    CHECK(u[2].chosen && !u[0].chosen && !u[1].chosen);
    CHECK_EQ_U(freed, 10 * GIB);
    /* Cannot be covered: nobody is parked. */
    CHECK_EQ(cs__park_choose(t, 5, 100 * GIB, 0, now, 10 * S, &freed), -ENOSPC);
    for (int i = 0; i < 5; i++)
        CHECK(!t[i].chosen);
    CHECK_EQ_U(freed, 0);
    /* Nothing needed: nobody. */
    CHECK_EQ(cs__park_choose(t, 5, 0, 0, now, 10 * S, &freed), 0);
}

static void priorities(void)
{
    int64_t now = 1000 * S;
    struct cs_park_tenant t[3] = {idle_at(10 * S, 4 * GIB), idle_at(500 * S, 4 * GIB),
                                  idle_at(20 * S, 4 * GIB)};
    t[0].priority = 0;
    t[1].priority = 1; /* low priority, though more recently active */
    t[2].priority = 0;
    uint64_t freed;
    CHECK_EQ(cs__park_choose(t, 3, GIB, 0, now, S, &freed), 1);
    CHECK(t[1].chosen);
    /* A low-priority requester can only park low-priority tenants. */
    t[1].parked = true;
    CHECK_EQ(cs__park_choose(t, 3, GIB, 1, now, S, &freed), -ENOSPC);
}

static void host_guard(void)
{
    /* 64 GiB available, no cgroup limit: 8 GiB fits, 62 GiB does not
     * (reserve 4 GiB). */
    CHECK(cs__park_host_fits(8 * GIB, 64 * GIB, 0, 0));
    CHECK(!cs__park_host_fits(62 * GIB, 64 * GIB, 0, 0));
    CHECK(cs__park_host_fits(60 * GIB, 64 * GIB, 0, 0));
    /* The cgroup's room is the smaller one. */
    CHECK(!cs__park_host_fits(8 * GIB, 64 * GIB, 16 * GIB, 10 * GIB));
    CHECK(cs__park_host_fits(5 * GIB, 64 * GIB, 16 * GIB, 10 * GIB));
    /* Usage above the limit (or equal): no room at all. */
    CHECK(!cs__park_host_fits(1, 64 * GIB, 16 * GIB, 17 * GIB));
    /* Tiny room: the 256 MiB floor of the reserve. */
    CHECK(!cs__park_host_fits(100 * MIB, 300 * MIB, 0, 0));
    CHECK(cs__park_host_fits(40 * MIB, 300 * MIB, 0, 0));
}

static void budget_opt_in(void)
{
    uint64_t card = 140 * GIB;
    /* Off (0 = 100 %): budgets may not exceed the card. */
    CHECK(cs__park_budget_admits(96 * GIB, 24 * GIB, card, 0));
    CHECK(!cs__park_budget_admits(120 * GIB, 24 * GIB, card, 0));
    /* 150 %: 210 GiB of budgets. */
    CHECK(cs__park_budget_admits(168 * GIB, 24 * GIB, card, 150));
    CHECK(cs__park_budget_admits(186 * GIB, 24 * GIB, card, 150));
    CHECK(!cs__park_budget_admits(192 * GIB, 24 * GIB, card, 150));
    /* No limit counts as the whole card. */
    CHECK(!cs__park_budget_admits(80 * GIB, 0, card, 150));
    CHECK(cs__park_budget_admits(0, 0, card, 100));
    /* Already over (operator lowered the ratio): nobody more. */
    CHECK(!cs__park_budget_admits(300 * GIB, 1, card, 150));
    CHECK_EQ_U(cs__park_need(10, 4), 6);
    CHECK_EQ_U(cs__park_need(4, 10), 0);
}

int main(void)
{
    idleness();
    eligibility();
    victim_order_and_minimality();
    priorities();
    host_guard();
    budget_opt_in();
    puts("park policy: ok");
    return 0;
}
