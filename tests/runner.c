#include "runner.h"

#include <stdio.h>

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

int hs_run_tests(const char *suite, const hs_test *tests, size_t n)
{
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: cannot initialise the registry\n");
        return 2;
    }
    CU_pSuite s = CU_add_suite(suite, NULL, NULL);
    for (size_t i = 0; s && i < n; i++)
        if (!CU_add_test(s, tests[i].name, tests[i].fn))
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
