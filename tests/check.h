/* check.h: the test harness. GV_CHECK* record a failure and go on; main() ends with
 * `return gv_check_summary();` which prints a one-line summary and returns non-zero on any
 * failure. GV_SKIP(reason) exits 77, which ctest reports as Skipped (never as a pass). */
#ifndef GV_CHECK_H
#define GV_CHECK_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gv_check_failed_;
static int gv_check_passed_;

#define GV_CHECK_FAIL_(...)                                                                        \
    do {                                                                                           \
        gv_check_failed_++;                                                                        \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                       \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
    } while (0)

#define GV_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (cond)                                                                                  \
            gv_check_passed_++;                                                                    \
        else                                                                                       \
            GV_CHECK_FAIL_("%s", #cond);                                                           \
    } while (0)

#define GV_CHECK_MSG(cond, ...)                                                                    \
    do {                                                                                           \
        if (cond)                                                                                  \
            gv_check_passed_++;                                                                    \
        else                                                                                       \
            GV_CHECK_FAIL_(__VA_ARGS__);                                                           \
    } while (0)

#define GV_CHECK_EQ(a, b)                                                                          \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ == vb_)                                                                            \
            gv_check_passed_++;                                                                    \
        else                                                                                       \
            GV_CHECK_FAIL_("%s == %s (%lld vs %lld)", #a, #b, va_, vb_);                           \
    } while (0)

#define GV_CHECK_STATUS(expr, want)                                                                \
    do {                                                                                           \
        int got_ = (int)(expr), want_ = (int)(want);                                               \
        if (got_ == want_)                                                                         \
            gv_check_passed_++;                                                                    \
        else                                                                                       \
            GV_CHECK_FAIL_("%s: got %s, want %s", #expr, gv_status_str((gv_status_t)got_),         \
                           gv_status_str((gv_status_t)want_));                                     \
    } while (0)

#define GV_CHECK_OK(expr) GV_CHECK_STATUS(expr, GV_OK)

#define GV_CHECK_STREQ(a, b)                                                                       \
    do {                                                                                           \
        const char *sa_ = (a), *sb_ = (b);                                                         \
        if (sa_ && sb_ && strcmp(sa_, sb_) == 0)                                                   \
            gv_check_passed_++;                                                                    \
        else                                                                                       \
            GV_CHECK_FAIL_("%s == %s (\"%s\" vs \"%s\")", #a, #b, sa_ ? sa_ : "(null)",            \
                           sb_ ? sb_ : "(null)");                                                  \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
#define GV_CHECK_NEAR(a, b, atol, rtol)                                                            \
    do {                                                                                           \
        double da_ = (double)(a), db_ = (double)(b);                                               \
        if (fabs(da_ - db_) <= (atol) + (rtol)*fabs(db_))                                          \
            gv_check_passed_++;                                                                    \
        else                                                                                       \
            GV_CHECK_FAIL_("%s ~= %s (%.9g vs %.9g)", #a, #b, da_, db_);                           \
    } while (0)

#define GV_SKIP(...)                                                                               \
    do {                                                                                           \
        printf("SKIP: ");                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
        exit(77);                                                                                  \
    } while (0)

static inline int gv_check_summary(void)
{
    printf("%s: %d checks passed, %d failed\n", gv_check_failed_ ? "FAILED" : "OK",
           gv_check_passed_, gv_check_failed_);
    return gv_check_failed_ ? 1 : 0;
}

#endif /* GV_CHECK_H */
