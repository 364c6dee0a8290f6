// testlib.h: the tiny test protocol every C test uses. Each check prints one line,
// "PASS name" or "FAIL name: why"; tests/run_all.sh counts them and prints the closing
// "N passed, N failed" line. A test binary exits non-zero when any check failed.
#pragma once
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static int test_failures_ = 0;
static int test_passes_ = 0;

static inline void test_result(int ok, const char *name, const char *fmt, ...) {
    if (ok) {
        printf("PASS %s\n", name);
        test_passes_++;
    } else {
        printf("FAIL %s: ", name);
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        test_failures_++;
    }
    fflush(stdout);
}

#define TEST_CHECK(cond, name, ...) test_result((cond) ? 1 : 0, name, __VA_ARGS__)
#define TEST_EXIT() return test_failures_ ? 1 : 0
