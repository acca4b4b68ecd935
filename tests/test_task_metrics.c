/* SPEC §16's task numbers (analyze/task_metrics.c) against
 * tests/fixtures/task_metrics.txt, which scripts/oracle/gen_task_metrics.py
 * writes from definitions of its own (every leave-one-out value recomputed
 * from scratch, Matthews' coefficient as a covariance of one-hot rows, ranks
 * by sorting): per-example losses, each metric, its jackknife standard
 * error, and the paired jackknife of a difference between two runs. Cases:
 * binary, three classes, four classes with one never true, a perfect
 * classifier on five examples (a class vanishes from leave-one-out sets),
 * multi-label, and regression with ties in both outputs and targets. And
 * SPEC §17's corpus BLEU on a small corpus. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "bleu.h"
#include "runner.h"
#include "task_metrics.h"

#define FIXTURE HS_FIXTURE_DIR "/task_metrics.txt"

static int close_to(double a, double b)
{
    return (isnan(a) && isnan(b)) || fabs(a - b) <= 1e-12 * fmax(1, fabs(b));
}

static void read_numbers(FILE *f, const char *tag, double *x, int n)
{
    char word[32];
    CU_ASSERT_FATAL(fscanf(f, "%31s", word) == 1 && !strcmp(word, tag));
    for (int i = 0; i < n; i++)
        CU_ASSERT_FATAL(fscanf(f, "%lf", &x[i]) == 1);
}

static void test_metrics_match_the_oracle(void)
{
    FILE *f = fopen(FIXTURE, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char word[32], name[32];
    int kind, n, k, cases = 0, checked = 0;
    while (fscanf(f, "%31s", word) == 1) {
        CU_ASSERT_FATAL(!strcmp(word, "case"));
        CU_ASSERT_FATAL(fscanf(f, "%31s %d %d %d", name, &kind, &n, &k) == 4);
        const int nt = kind == HS_TASK_MULTI_LABEL ? n * k : n;
        double *out = calloc((size_t)n * k, sizeof *out), *out2 = calloc((size_t)n * k, sizeof *out);
        double *target = calloc((size_t)nt, sizeof *target), *loss = calloc((size_t)n, sizeof *loss);
        int *label = calloc((size_t)n, sizeof *label);
        read_numbers(f, "out", out, n * k);
        read_numbers(f, "out2", out2, n * k);
        read_numbers(f, kind == HS_TASK_SINGLE_LABEL ? "label" : "target", target, nt);
        for (int i = 0; i < n && kind == HS_TASK_SINGLE_LABEL; i++)
            label[i] = (int)target[i];
        read_numbers(f, "loss", loss, n);
        hs_task_outputs a = { kind, n, k, out, label, target }, b = { kind, n, k, out2, label, target };
        for (int i = 0; i < n; i++)
            CU_ASSERT(close_to(hs_task_loss(&a, i), loss[i]));
        long at = ftell(f);
        while (fscanf(f, "%31s", word) == 1 && !strcmp(word, "metric")) {
            double v, se, d, dse, got_v, got_se, got_d, got_dse;
            char metric[32];
            CU_ASSERT_FATAL(fscanf(f, "%31s %lf %lf %lf %lf", metric, &v, &se, &d, &dse) == 5);
            const int m = hs_task_metric_of(metric);
            CU_ASSERT_FATAL(m >= 0 && hs_task_metric_applies(kind, m));
            CU_ASSERT_EQUAL(hs_task_metric_se(&a, m, &got_v, &got_se), HS_OK);
            CU_ASSERT_EQUAL(hs_task_metric_delta_se(&a, &b, m, &got_d, &got_dse), HS_OK);
            CU_ASSERT(close_to(got_v, v) && close_to(got_se, se) && close_to(got_d, d) &&
                      close_to(got_dse, dse));
            CU_ASSERT(close_to(hs_task_metric_value(&a, m, n - 1),
                               hs_task_metric_value(&(hs_task_outputs){ kind, n - 1, k, out, label,
                                                                        target },
                                                    m, -1)));
            if (!close_to(got_v, v) || !close_to(got_se, se) || !close_to(got_d, d) ||
                !close_to(got_dse, dse))
                printf("\n  %s %s: %.17g %.17g %.17g %.17g, oracle %.17g %.17g %.17g %.17g\n", name,
                       metric, got_v, got_se, got_d, got_dse, v, se, d, dse);
            checked++;
            at = ftell(f);
        }
        fseek(f, at, SEEK_SET);
        free(out), free(out2), free(target), free(loss), free(label);
        cases++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(cases, 6);
    CU_ASSERT_EQUAL(checked, 16);
}

/* Names, the metrics each problem type has, the headline, a metric that
 * does not apply refused. */
static void test_metrics_per_problem_type(void)
{
    CU_ASSERT_EQUAL(hs_task_metric_of("mcc"), HS_TASK_MCC);
    CU_ASSERT_EQUAL(hs_task_metric_of("auc"), -1);
    CU_ASSERT_EQUAL(hs_task_headline(HS_TASK_REGRESSION), HS_TASK_PEARSON);
    CU_ASSERT_EQUAL(hs_task_headline(HS_TASK_MULTI_LABEL), HS_TASK_ACCURACY);
    CU_ASSERT(!hs_task_metric_applies(HS_TASK_MULTI_LABEL, HS_TASK_MCC));
    CU_ASSERT(!hs_task_metric_applies(HS_TASK_SINGLE_LABEL, HS_TASK_SPEARMAN));
    const double out[] = { 1, 2 };
    const double target[] = { 1, 2 };
    hs_task_outputs o = { HS_TASK_REGRESSION, 2, 1, out, NULL, target };
    double v, se;
    CU_ASSERT_EQUAL(hs_task_metric_se(&o, HS_TASK_ACCURACY, &v, &se), HS_EINVAL);
    CU_ASSERT_EQUAL(hs_task_metric_se(&o, HS_TASK_PEARSON, &v, &se), HS_OK);
    CU_ASSERT(close_to(v, 1) && isnan(se)); /* one example left: no correlation */
}

/* Corpus BLEU (bleu.h) under the sanitizers: the 13a tokens and the
 * statistics of a small corpus, as the plain-Python reimplementation of
 * sacreBLEU in python/tests/test_bleu.py computes them (its oracle(), run on
 * these three pairs: 32.07318193985871 from these counts; that suite
 * compares to the last bit on random corpora). */
static void test_bleu_of_a_small_corpus(void)
{
    const char *hyps[] = { "The cat, e.g. 3.14 sat-on the mat.",
                           "&amp; 10-20 \xe6\x9d\xb1\xe4\xba\xac na\xc3\xafve end.", "q" };
    const char *refs[] = { "The cat 3.14 sat on the mat .",
                           "&amp; 10-20 \xe6\x9d\xb1\xe4\xba\xac naive end.", "q r" };
    char *t = hs_bleu_tokenize(hyps[0]);
    CU_ASSERT_STRING_EQUAL(t, "The cat , e . g . 3.14 sat-on the mat .");
    free(t);
    t = hs_bleu_tokenize(hyps[1]);
    CU_ASSERT_STRING_EQUAL(t, "& 10 - 20 \xe6\x9d\xb1\xe4\xba\xac na\xc3\xafve end .");
    free(t);
    hs_bleu b;
    CU_ASSERT_EQUAL_FATAL(hs_bleu_corpus(hyps, refs, 3, &b), HS_OK);
    const long long correct[] = { 14, 8, 4, 2 }, total[] = { 21, 18, 16, 14 };
    for (int k = 0; k < HS_BLEU_ORDER; k++)
        CU_ASSERT(b.correct[k] == correct[k] && b.total[k] == total[k]);
    CU_ASSERT(b.sys_len == 21 && b.ref_len == 18);
    CU_ASSERT(fabs(b.score - 32.07318193985871) < 1e-12);
    const char *bad[] = { "\xff" };
    CU_ASSERT_EQUAL(hs_bleu_corpus(bad, refs, 1, &b), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "segment 0's hypothesis"));
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_metrics_match_the_oracle", test_metrics_match_the_oracle },
        { "test_metrics_per_problem_type", test_metrics_per_problem_type },
        { "test_bleu_of_a_small_corpus", test_bleu_of_a_small_corpus },
    };
    return hs_run_tests("task_metrics_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
