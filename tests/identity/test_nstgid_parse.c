/*
 * Strict NStgid parser: every rejection rule has a case that asserts the
 * exact error, and every accepted case asserts the exact levels. A parser
 * that accepted "12a" or a private one-level view as "the host PID" would
 * bill the wrong process.
 */
#include "id_test.h"
#include <limits.h>

struct tcase {
    const char *name;
    const char *text;
    size_t cap;
    int rc;
    size_t n;
    pid_t levels[4];
};

#define STATUS_HEAD "Name:\tpython3\nUmask:\t0022\nState:\tR (running)\nTgid:\t37\nNgid:\t0\nPid:\t37\n"
#define STATUS_TAIL "NSpid:\t8011\t37\nNSpgid:\t8011\t37\nNSsid:\t8011\t37\nThreads:\t1\n"

static const struct tcase cases[] = {
    /* Accepted. */
    {"real two levels", STATUS_HEAD "NStgid:\t8011\t37\n" STATUS_TAIL, 4, 0, 2, {8011, 37}},
    {"one level", "NStgid:\t6\n", 4, 0, 1, {6}},
    {"three levels", "NStgid:\t9\t8\t1\n", 4, 0, 3, {9, 8, 1}},
    {"spaces and tabs", "NStgid: \t 5  \t 4\n", 4, 0, 2, {5, 4}},
    {"trailing blanks", "NStgid:\t5\t4 \t\n", 4, 0, 2, {5, 4}},
    {"no final newline", "NStgid:\t5\t4", 4, 0, 2, {5, 4}},
    {"INT_MAX", "NStgid:\t2147483647\n", 4, 0, 1, {INT_MAX}},
    {"exactly cap", "NStgid:\t1\t2\t3\t4\n", 4, 0, 4, {1, 2, 3, 4}},
    {"field on first line", "NStgid:\t3\nTgid:\t3\n", 4, 0, 1, {3}},
    /* Field name must match exactly, at the start of a line. */
    {"wrong field NStgidX", "NStgidX:\t5\n", 4, -ENOENT, 0, {0}},
    {"only Tgid", "Tgid:\t5\nPid:\t5\n", 4, -ENOENT, 0, {0}},
    {"lowercase", "nstgid:\t5\n", 4, -ENOENT, 0, {0}},
    {"not at line start", "X NStgid:\t5\n", 4, -ENOENT, 0, {0}},
    {"no colon", "NStgid\t5\n", 4, -ENOENT, 0, {0}},
    {"missing", STATUS_HEAD STATUS_TAIL, 4, -ENOENT, 0, {0}},
    {"empty text", "", 4, -ENOENT, 0, {0}},
    {"duplicate field", "NStgid:\t5\nNStgid:\t6\n", 4, -EBADMSG, 0, {0}},
    /* Empty list. */
    {"empty list", "NStgid:\n", 4, -ENODATA, 0, {0}},
    {"blank list", "NStgid:\t \t\n", 4, -ENODATA, 0, {0}},
    {"ends after colon", "NStgid:", 4, -ENODATA, 0, {0}},
    /* Numbers. */
    {"negative", "NStgid:\t-5\n", 4, -EBADMSG, 0, {0}},
    {"negative later", "NStgid:\t5\t-1\n", 4, -EBADMSG, 0, {0}},
    {"plus sign", "NStgid:\t+5\n", 4, -EBADMSG, 0, {0}},
    {"zero", "NStgid:\t0\n", 4, -ERANGE, 0, {0}},
    {"zero later", "NStgid:\t5\t0\n", 4, -ERANGE, 0, {0}},
    {"leading zero", "NStgid:\t05\n", 4, -EBADMSG, 0, {0}},
    {"INT_MAX+1", "NStgid:\t2147483648\n", 4, -ERANGE, 0, {0}},
    {"huge", "NStgid:\t99999999999999999999999\n", 4, -ERANGE, 0, {0}},
    {"junk attached", "NStgid:\t12a\n", 4, -EBADMSG, 0, {0}},
    {"junk before", "NStgid:\ta12\n", 4, -EBADMSG, 0, {0}},
    {"hex", "NStgid:\t0x10\n", 4, -EBADMSG, 0, {0}},
    {"no separator after colon", "NStgid:5\n", 4, -EBADMSG, 0, {0}},
    /* Separators other than tabs/spaces. */
    {"comma", "NStgid:\t5,4\n", 4, -EBADMSG, 0, {0}},
    {"carriage return", "NStgid:\t5\t4\r\n", 4, -EBADMSG, 0, {0}},
    {"vertical tab", "NStgid:\t5\v4\n", 4, -EBADMSG, 0, {0}},
    {"decimal point", "NStgid:\t5.0\n", 4, -EBADMSG, 0, {0}},
    /* Capacity. */
    {"more levels than cap", "NStgid:\t1\t2\t3\t4\t5\n", 4, -E2BIG, 0, {0}},
    {"cap one, two levels", "NStgid:\t1\t2\n", 1, -E2BIG, 0, {0}},
    {"zero capacity", "NStgid:\t1\n", 0, -EINVAL, 0, {0}},
};

static void run_case(const struct tcase *c)
{
    pid_t levels[8];
    for (int i = 0; i < 8; i++)
        levels[i] = -7;
    size_t n = 999;
    int rc = cs__parse_nstgid(c->text, strlen(c->text), levels, c->cap, &n);
    if (rc != c->rc) {
        fprintf(stderr, "case '%s': rc %d, want %d\n", c->name, rc, c->rc);
        exit(1);
    }
    if (rc != 0) {
        if (n != 999) {
            fprintf(stderr, "case '%s': nlevels written on failure\n", c->name);
            exit(1);
        }
        return;
    }
    CHECK_EQ(n, c->n);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(levels[i], c->levels[i]);
    CHECK_EQ(levels[n], -7);            /* nothing written past n */
}

static void test_not_nul_terminated(void)
{
    /* The length bounds the parse: "NStgid:\t12" followed by a digit that
     * lies outside len must parse as 12, not 123. */
    const char text[] = "NStgid:\t123\n";
    pid_t lv[2];
    size_t n = 0;
    CHECK_EQ(cs__parse_nstgid(text, 10, lv, 2, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(lv[0], 12);
    /* An embedded NUL is junk, not a terminator. */
    const char nul[] = "NStgid:\t5\0" "4\n";
    CHECK_EQ(cs__parse_nstgid(nul, sizeof nul - 1, lv, 2, &n), -EBADMSG);
}

static void test_null_args(void)
{
    pid_t lv[2];
    size_t n;
    CHECK_EQ(cs__parse_nstgid(NULL, 5, lv, 2, &n), -EINVAL);
    CHECK_EQ(cs__parse_nstgid("NStgid:\t1\n", 10, NULL, 2, &n), -EINVAL);
    CHECK_EQ(cs__parse_nstgid("NStgid:\t1\n", 10, lv, 2, NULL), -EINVAL);
}

static void test_own_status(void)
{
    /* The live kernel format parses, and the rightmost level is getpid(). */
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char buf[8192];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    pid_t lv[CS_NSTGID_MAX_LEVELS];
    size_t n = 0;
    CHECK_EQ(cs__parse_nstgid(buf, len, lv, CS_NSTGID_MAX_LEVELS, &n), 0);
    CHECK_GE(n, 1);
    CHECK_EQ(lv[n - 1], getpid());
}

int main(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    test_not_nul_terminated();
    test_null_args();
    test_own_status();
    printf("nstgid parser: %zu cases ok\n", sizeof cases / sizeof cases[0]);
    return 0;
}
