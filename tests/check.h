/*
 * Minimal assertions for cushare tests: each failure prints the expression,
 * both operands and the location, then exits 1 so CTest reports it. Tests
 * are separate executables (one process each); helpers are children they
 * fork or exec themselves. Clocks, deadlines (scaled by CS_TEST_SCALE),
 * gates and skips come from tests/support/support.h.
 */
#ifndef CS_TESTS_CHECK_H
#define CS_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/support.h"

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, \
                    #cond);                                                 \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define CHECK_OP_(a, op, b, fmt, type)                                        \
    do {                                                                      \
        type a_ = (type)(a), b_ = (type)(b);                                  \
        if (!(a_ op b_)) {                                                    \
            fprintf(stderr, "%s:%d: CHECK(%s %s %s) failed: " fmt " vs " fmt \
                    "\n", __FILE__, __LINE__, #a, #op, #b, a_, b_);           \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define CHECK_EQ(a, b) CHECK_OP_(a, ==, b, "%" PRId64, int64_t)
#define CHECK_NE(a, b) CHECK_OP_(a, !=, b, "%" PRId64, int64_t)
#define CHECK_LE(a, b) CHECK_OP_(a, <=, b, "%" PRId64, int64_t)
#define CHECK_LT(a, b) CHECK_OP_(a, <, b, "%" PRId64, int64_t)
#define CHECK_GE(a, b) CHECK_OP_(a, >=, b, "%" PRId64, int64_t)
#define CHECK_GT(a, b) CHECK_OP_(a, >, b, "%" PRId64, int64_t)
#define CHECK_EQ_U(a, b) CHECK_OP_(a, ==, b, "%" PRIu64, uint64_t)
#define CHECK_LE_U(a, b) CHECK_OP_(a, <=, b, "%" PRIu64, uint64_t)
#define CHECK_STREQ(a, b)                                                     \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        if (!a_ || !b_ || strcmp(a_, b_)) {                                   \
            fprintf(stderr, "%s:%d: CHECK_STREQ(%s, %s) failed: \"%s\" vs \"%s\"\n", \
                    __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)",           \
                    b_ ? b_ : "(null)");                                      \
            exit(1);                                                          \
        }                                                                     \
    } while (0)
#define CHECK_CONTAINS(hay, needle)                                           \
    do {                                                                      \
        const char *h_ = (hay), *n_ = (needle);                               \
        if (!h_ || !strstr(h_, n_)) {                                         \
            fprintf(stderr, "%s:%d: \"%s\" not found in: %s\n", __FILE__,     \
                    __LINE__, n_, h_ ? h_ : "(null)");                        \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#endif
