#include "runner.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

/* the suite being run: each test runs through timed(), which finds the
 * current test by name and prints its time when it took a while (the slow
 * tests of a suite, for whoever keeps the tiers short) */
static const hs_test *run_tests;
static size_t run_n;

static void timed(void)
{
    const CU_pTest cur = CU_get_current_test();
    for (size_t i = 0; cur && i < run_n; i++) {
        if (strcmp(run_tests[i].name, cur->pName))
            continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        run_tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (s >= 0.5)
            printf(" (%.1f s) ", s);
        return;
    }
    CU_FAIL("the runner found no test of this name to run");
}

int hs_run_tests(const char *suite, const hs_test *tests, size_t n)
{
    run_tests = tests, run_n = n;
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: cannot initialise the registry\n");
        return 2;
    }
    CU_pSuite s = CU_add_suite(suite, NULL, NULL);
    for (size_t i = 0; s && i < n; i++)
        if (!CU_add_test(s, tests[i].name, timed))
            s = NULL;
    if (!s) {
        fprintf(stderr, "CUnit: cannot register suite %s\n", suite);
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_ErrorCode err = CU_basic_run_tests();
    /* CU_basic_run_tests reports only framework errors: the failure counts
     * must be read before the registry is cleaned up. */
    unsigned failed_asserts = CU_get_number_of_failure_records();
    unsigned failed_tests = CU_get_number_of_tests_failed();
    unsigned ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    if (err != CUE_SUCCESS || failed_asserts || failed_tests || ran != n) {
        fprintf(stderr, "%s: FAILED (%u of %zu tests failed, %u failure records, ran %u)\n",
                suite, failed_tests, n, failed_asserts, ran);
        return 1;
    }
    return 0;
}
