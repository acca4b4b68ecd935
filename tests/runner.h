/* CUnit runner shared by the test executables: registers one suite, runs it
 * in verbose basic mode (printing CUnit's Run Summary) and returns non-zero
 * when any assertion or test failed, so CTest sees the failure. */
#ifndef HS_TEST_RUNNER_H
#define HS_TEST_RUNNER_H

#include <stddef.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} hs_test;

int hs_run_tests(const char *suite, const hs_test *tests, size_t n);

#define HS_NTESTS(arr) (sizeof(arr) / sizeof((arr)[0]))

#endif
