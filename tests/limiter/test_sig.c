/*
 * What a launch signature costs (src/limiter/sig.c) without a driver: a
 * first measurement is charged as measured, later ones at most the
 * minimum + slack, the minimum forgets after two half-windows, and a
 * launch that is not measured is charged no more than a measured one
 * would be — also right after a first measurement that spanned other
 * contexts' work (a tenant set up beside busy ones), which used to be
 * charged again for every estimated launch until the average caught up.
 */
#include "check.h"
#include "limiter/sig.h"

#define MS 1000000ll

/* A measured launch as the limiter charges it. */
static int64_t measured(struct cs_lim_sig *e, int64_t ns)
{
    int64_t c = cs__sig_measure(e, ns);
    cs__sig_note_charge(e, c);
    return c;
}

static void first_measurement_is_charged_as_measured(void)
{
    struct cs_lim_sig e = {.key = 1};
    CHECK_EQ(cs__sig_estimate(&e), 0);
    CHECK_EQ(cs__sig_min(&e), 0);
    CHECK_EQ(measured(&e, 300 * MS), 300 * MS);
    CHECK_EQ(cs__sig_min(&e), 300 * MS);
    CHECK_EQ(cs__sig_estimate(&e), 300 * MS);
}

static void slices_are_capped_at_the_minimum(void)
{
    struct cs_lim_sig e = {.key = 1};
    measured(&e, 1 * MS);
    /* Another context's slices inside the pair: charged the minimum + 5 %. */
    CHECK_EQ(measured(&e, 5 * MS), 1 * MS + 1 * MS * CS_LIM_SIG_SLACK_PCT / 100);
    CHECK_EQ(cs__sig_min(&e), 1 * MS);
    CHECK_LE(cs__sig_estimate(&e), 1 * MS + 1 * MS * CS_LIM_SIG_SLACK_PCT / 100);
}

static void minimum_forgets_after_two_half_windows(void)
{
    struct cs_lim_sig e = {.key = 1};
    measured(&e, 1 * MS);
    for (int i = 1; i < 2 * CS_LIM_SIG_WINDOW; i++) {
        measured(&e, 2 * MS);
        CHECK_EQ(cs__sig_min(&e), 1 * MS);
    }
    measured(&e, 2 * MS);
    CHECK_EQ(cs__sig_min(&e), 2 * MS);
}

/* A tenant whose first launch of a kernel was measured beside busy
 * contexts (300 ms for a 1 ms kernel), then runs it alone measuring one
 * launch in eight and estimating the rest: every estimated launch costs
 * what a measured one does from the first true measurement on. */
static void estimate_follows_a_lower_minimum(void)
{
    struct cs_lim_sig e = {.key = 1};
    measured(&e, 300 * MS);
    measured(&e, 1 * MS);
    const int64_t cap = 1 * MS + 1 * MS * CS_LIM_SIG_SLACK_PCT / 100;
    CHECK_LE(cs__sig_estimate(&e), cap);
    int64_t estimated = 0;
    for (int i = 1; i <= 64; i++) {
        if (i % 8 == 0)
            measured(&e, 1 * MS);
        else
            estimated += cs__sig_estimate(&e);
    }
    CHECK_LE(estimated, 56 * cap);
    CHECK_GE(estimated, 56 * 1 * MS);
}

int main(void)
{
    first_measurement_is_charged_as_measured();
    slices_are_capped_at_the_minimum();
    minimum_forgets_after_two_half_windows();
    estimate_follows_a_lower_minimum();
    printf("ok\n");
    return 0;
}
