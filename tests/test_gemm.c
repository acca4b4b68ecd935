/* The packed GEMMs (model/kernels/gemm.c, model/kernels/gemm_amx.c) on every path this CPU
 * runs, against a deliberately naive triple loop accumulating in double: all four
 * transposes, alpha and beta, leading dimensions above the minimum, sizes
 * at and around the microkernel's tile (MR 12/6, NR 32/16) and the cache
 * blocks (K past KC 256, N past NC 3072, M past MC 144), beta 0 over NaN,
 * threaded outside a parallel region and single-threaded inside one.
 *
 * Tolerance, per entry: |got - ref| <= 1e-6 * (|alpha| sum_k |a_ik b_kj| +
 * |beta c_ij|) + 1e-30. A float sum of K products has a rounding error of
 * about sqrt(K) * 2^-24 of that scale when errors are random (K <= 257 here:
 * at most ~1e-6), and OpenBLAS's sgemm is held to the same bound, which
 * shows that the bound is not tighter than what a good sgemm meets. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "gemm.h"
#include "dtype.h"
#include "runner.h"
#include "safetensors.h"

typedef struct {
    int M, N, K;
} shape;

static const shape SHAPES[] = {
    { 1, 1, 1 },    { 7, 7, 7 },     { 11, 31, 1 },   { 13, 33, 33 },  { 12, 32, 257 },
    { 5, 17, 100 }, { 6, 16, 7 },    { 33, 100, 257 }, { 100, 33, 33 }, { 257, 7, 100 },
    { 7, 257, 257 }, { 1, 257, 33 }, { 257, 1, 33 },  { 257, 33, 257 }, { 3, 3100, 5 },
    { 100, 257, 257 },
    /* the AMX path's blocks: rows past MC 1024 (split over M on 2 threads) */
    { 1100, 40, 130 },
    /* lda K + 3 = 1024: A's rows 4 KB apart, copied into panels first */
    { 29, 45, 1021 },
    /* at most 4 rows (decoding's path): partial column blocks, K not a
     * multiple of 16, and two shapes large enough to split over threads */
    { 2, 70, 37 },  { 4, 130, 19 },  { 1, 1000, 2100 }, { 4, 1100, 1000 },
    /* M K past 4096: four rows of B at a time instead of one (one row of A
     * among them: decoding's down projection) */
    { 3, 50, 2000 }, { 1, 70, 9000 },
};
static const float ALPHAS[] = { 1, 0.5f }, BETAS[] = { 0, 1, 0.25f };

/* Deterministic values in [-1, 1). */
static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
}

/* The oracle: written out element by element, nothing shared with gemm.c.
 * ref = alpha op(A) op(B) + beta C in double; scale = the error scale. */
static void naive(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, const float *C, int ldc, double *ref,
                  double *scale)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, abs = 0;
            for (int k = 0; k < K; k++) {
                const double a = ta ? A[k * lda + i] : A[i * lda + k];
                const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b, abs += fabs(a * b);
            }
            const double c = beta == 0 ? 0 : (double)beta * C[i * ldc + j];
            ref[i * N + j] = alpha * s + c;
            scale[i * N + j] = fabs((double)alpha) * abs + fabs(c);
        }
}

typedef struct {
    int ta, tb, lda, ldb, ldc;
    float alpha, beta;
    const shape *s;
    float *A, *B, *C0;
    double *ref, *scale;
} gemm_case;

/* Number of entries of path's result outside the tolerance (C0 copied into
 * a fresh C; NaN garbage where beta is 0; entries past N in each row must
 * stay untouched). */
static int count_bad(const gemm_case *g, hs_gemm_path path)
{
    const int M = g->s->M, N = g->s->N;
    float *C = malloc(sizeof(float) * (size_t)M * g->ldc);
    for (size_t i = 0; i < (size_t)M * g->ldc; i++)
        C[i] = g->beta == 0 ? NAN : g->C0[i];
    hs_sgemm(path, g->ta, g->tb, M, N, g->s->K, g->alpha, g->A, g->lda, g->B, g->ldb, g->beta, C,
             g->ldc);
    int bad = 0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            const double e = fabs((double)C[i * g->ldc + j] - g->ref[i * N + j]);
            bad += !(e <= 1e-6 * g->scale[i * N + j] + 1e-30);
        }
        for (int j = N; j < g->ldc; j++) { /* padding of the row */
            const float c = C[i * g->ldc + j];
            bad += g->beta == 0 ? !isnan(c) : c != g->C0[i * g->ldc + j];
        }
    }
    free(C);
    return bad;
}

/* Runs fn(case) over the shapes, every transpose pair, and every alpha and
 * beta (or, with one_scalar, only alpha 0.5 with beta 0 and 0.25); the
 * naive loop's reference only where fn compares with it (with_ref). */
static void for_each_case_in(const shape *shapes, size_t n_shapes, int one_scalar, int with_ref,
                             void (*fn)(const gemm_case *))
{
    for (size_t si = 0; si < n_shapes; si++) {
        const shape *s = &shapes[si];
        for (int t = 0; t < 4; t++) {
            gemm_case g = { .ta = t & 1, .tb = t >> 1, .s = s };
            g.lda = (g.ta ? s->M : s->K) + 3, g.ldb = (g.tb ? s->K : s->N) + 5, g.ldc = s->N + 2;
            const size_t na = (size_t)(g.ta ? s->K : s->M) * g.lda,
                         nb = (size_t)(g.tb ? s->N : s->K) * g.ldb, nc = (size_t)s->M * g.ldc;
            g.A = malloc(sizeof(float) * na), g.B = malloc(sizeof(float) * nb);
            g.C0 = malloc(sizeof(float) * nc);
            g.ref = malloc(sizeof(double) * (size_t)s->M * s->N);
            g.scale = malloc(sizeof(double) * (size_t)s->M * s->N);
            fill(g.A, na, 1 + (unsigned)si), fill(g.B, nb, 100 + (unsigned)t),
                fill(g.C0, nc, 7);
            for (int ai = one_scalar; ai < 2; ai++)
                for (int bi = 0; bi < 3; bi += 1 + one_scalar) {
                    g.alpha = ALPHAS[ai], g.beta = BETAS[bi];
                    if (with_ref)
                        naive(g.ta, g.tb, s->M, s->N, s->K, g.alpha, g.A, g.lda, g.B, g.ldb,
                              g.beta, g.C0, g.ldc, g.ref, g.scale);
                    fn(&g);
                }
            free(g.A), free(g.B), free(g.C0), free(g.ref), free(g.scale);
        }
    }
}

static void for_each_case(void (*fn)(const gemm_case *))
{
    for_each_case_in(SHAPES, sizeof(SHAPES) / sizeof(SHAPES[0]), 0, 1, fn);
}

static void report(const gemm_case *g, const char *path, int bad)
{
    if (bad)
        printf("\n  %s: %d entries off at M,N,K %d,%d,%d ta %d tb %d alpha %g beta %g", path,
               bad, g->s->M, g->s->N, g->s->K, g->ta, g->tb, g->alpha, g->beta);
    CU_ASSERT_EQUAL(bad, 0);
}

static void check_every_path(const gemm_case *g)
{
    static const hs_gemm_path paths[] = { HS_GEMM_OPENBLAS, HS_GEMM_AVX2, HS_GEMM_AVX512,
                                          HS_GEMM_AMX, HS_GEMM_AUTO };
    static const char *names[] = { "openblas", "avx2", "avx512", "amx", "auto" };
    for (int p = 0; p < 5; p++)
        if (hs_gemm_path_runs(paths[p]))
            report(g, names[p], count_bad(g, paths[p]));
}

/* Outside a parallel region: with 2 threads the larger shapes split over N
 * or over M. */
static void test_every_path_matches_naive_loop(void)
{
    omp_set_num_threads(2);
    for_each_case(check_every_path);
}

static void check_amx(const gemm_case *g)
{
    report(g, "amx", count_bad(g, HS_GEMM_AMX));
}

/* The AMX path's other loop order: a C of more than 2 MB (here 2.2 MB on
 * one thread) is computed block by block with k inside, from A packed for
 * all of K (two k blocks here, the second 2 deep; a 12-row last panel). */
static void test_amx_large_c_matches_naive_loop(void)
{
    if (!hs_gemm_path_runs(HS_GEMM_AMX)) {
        printf("\n  skipped: this CPU (or kernel) gives no AMX");
        return;
    }
    static const shape large_c[] = { { 300, 1800, 130 } };
    omp_set_num_threads(1);
    for_each_case_in(large_c, 1, 1, 1, check_amx);
    omp_set_num_threads(2);
}

/* An infinite or NaN entry of A reaches every entry of its row of C, which
 * float arithmetic makes infinite or NaN (the AMX path makes them NaN:
 * gemm_amx.h); rows without one stay finite and accurate. */
static void test_amx_non_finite_entries_stay_non_finite(void)
{
    if (!hs_gemm_path_runs(HS_GEMM_AMX)) {
        printf("\n  skipped: this CPU (or kernel) gives no AMX");
        return;
    }
    enum { M = 40, N = 70, K = 300 };
    static float A[M * K], B[K * N], C[M * N];
    fill(A, M * K, 3), fill(B, K * N, 4);
    A[3 * K + 5] = INFINITY, A[7 * K + 9] = NAN, A[11 * K + 200] = -INFINITY;
    hs_sgemm(HS_GEMM_AMX, 0, 0, M, N, K, 1, A, K, B, N, 0, C, N);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const int poisoned = i == 3 || i == 7 || i == 11;
            double ref = 0, scale = 0;
            for (int k = 0; k < K && !poisoned; k++)
                ref += (double)A[i * K + k] * B[k * N + j],
                    scale += fabs((double)A[i * K + k] * B[k * N + j]);
            bad += poisoned ? isfinite(C[i * N + j]) != 0
                            : !(fabs(C[i * N + j] - ref) <= 1e-6 * scale + 1e-30);
        }
    if (bad)
        printf("\n  amx: %d entries wrong around non-finite inputs", bad);
    CU_ASSERT_EQUAL(bad, 0);
}

/* hs_sgemm_bias: C = alpha op(A) op(B) + the bias row in every row, over a
 * C holding NaN (only written), on every path: edge blocks, a C past 2 MB
 * (the AMX path's rows-outer order, starting each block from the bias)
 * and a threaded split. */
static void test_bias_rows_match_naive_loop(void)
{
    static const hs_gemm_path paths[] = { HS_GEMM_OPENBLAS, HS_GEMM_AVX2, HS_GEMM_AVX512,
                                          HS_GEMM_AMX, HS_GEMM_AUTO };
    static const char *names[] = { "openblas", "avx2", "avx512", "amx", "auto" };
    static const shape shapes[] = { { 7, 7, 7 }, { 33, 100, 257 }, { 257, 300, 64 },
                                    { 300, 1800, 130 } };
    for (int si = 0; si < 4; si++) {
        const int M = shapes[si].M, N = shapes[si].N, K = shapes[si].K;
        const int tb = si != 1, large = si == 3; /* one upright B; the large C: AMX only */
        if (large && !hs_gemm_path_runs(HS_GEMM_AMX))
            continue;
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
        float *bias = malloc(sizeof(float) * N), *C = malloc(sizeof(float) * M * N);
        double *ref = malloc(sizeof(double) * M * N), *scale = malloc(sizeof(double) * M * N);
        fill(A, (size_t)M * K, 11), fill(B, (size_t)K * N, 12), fill(bias, N, 13);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double r = 0, sc = 0;
                for (int k = 0; k < K; k++) {
                    const double ab = (double)A[i * K + k] * (tb ? B[j * K + k] : B[k * N + j]);
                    r += ab, sc += fabs(ab);
                }
                ref[i * N + j] = 0.5 * r + bias[j], scale[i * N + j] = 0.5 * sc + fabs(bias[j]);
            }
        omp_set_num_threads(large ? 1 : 2);
        for (int p = 0; p < 5; p++) {
            if (!hs_gemm_path_runs(paths[p]) || (large && paths[p] != HS_GEMM_AMX))
                continue;
            for (size_t i = 0; i < (size_t)M * N; i++)
                C[i] = NAN;
            hs_sgemm_bias(paths[p], 0, tb, M, N, K, 0.5f, A, K, B, tb ? K : N, bias, C, N);
            int bad = 0;
            for (size_t i = 0; i < (size_t)M * N; i++)
                bad += !(fabs(C[i] - ref[i]) <= 1e-6 * scale[i] + 1e-30);
            if (bad)
                printf("\n  %s: %d entries off with a bias at M,N,K %d,%d,%d", names[p], bad, M,
                       N, K);
            CU_ASSERT_EQUAL(bad, 0);
        }
        free(A), free(B), free(bias), free(C), free(ref), free(scale);
    }
    omp_set_num_threads(2);
}

/* The same calls from inside a parallel region, as the attention kernels
 * make them: each thread's call runs on that thread alone. */
static void check_in_parallel(const gemm_case *g)
{
    if ((double)g->s->M * g->s->N * g->s->K > 1e6 || g->alpha != 1)
        return; /* the small per-head shapes are the ones called there */
    int bad[2] = { 0, 0 };
#pragma omp parallel num_threads(2)
    {
        const int t = omp_get_thread_num();
        bad[t] = count_bad(g, t ? HS_GEMM_AVX2 : HS_GEMM_AVX512);
    }
    report(g, "avx512 / avx2 in a parallel region", bad[0] + bad[1]);
}

static void test_calls_inside_parallel_region_match_naive_loop(void)
{
    if (!hs_gemm_path_runs(HS_GEMM_AVX2)) {
        printf("\n  skipped: this CPU has no AVX2");
        return;
    }
    for_each_case(check_in_parallel);
}

/* B held as BF16 or F16 (a model's weights as stored): on every path, at 1
 * and 2 threads, with and without a bias, the result equals the same call's
 * on B's float copy bit for bit. The 16-bit values are made from the case's
 * floats and widened here by the checkpoint reader's conversions
 * (hs_bf16_to_float, hs_half_to_float), not by gemm.c's. */
static int typed_differs(const gemm_case *g, hs_gemm_path path, const uint16_t *b16, hs_dtype bt,
                         const float *bf, const float *bias)
{
    const int M = g->s->M, N = g->s->N, K = g->s->K;
    const size_t nc = (size_t)M * g->ldc;
    float *c1 = malloc(sizeof(float) * nc), *c2 = malloc(sizeof(float) * nc);
    for (size_t i = 0; i < nc; i++)
        c1[i] = c2[i] = g->beta == 0 && !bias ? NAN : g->C0[i];
    if (bias)
        hs_sgemm_bias(path, g->ta, g->tb, M, N, K, g->alpha, g->A, g->lda, bf, g->ldb, bias, c1,
                      g->ldc);
    else
        hs_sgemm(path, g->ta, g->tb, M, N, K, g->alpha, g->A, g->lda, bf, g->ldb, g->beta, c1,
                 g->ldc);
    hs_sgemm_typed(path, g->ta, g->tb, M, N, K, g->alpha, g->A, g->lda, b16, bt, g->ldb, g->beta,
                   bias, c2, g->ldc);
    int differ = 0;
    for (int i = 0; i < M; i++)
        differ += memcmp(&c1[(size_t)i * g->ldc], &c2[(size_t)i * g->ldc],
                         sizeof(float) * (size_t)N) != 0;
    free(c1), free(c2);
    return differ;
}

static void check_typed(const gemm_case *g)
{
    static const hs_gemm_path paths[] = { HS_GEMM_OPENBLAS, HS_GEMM_AVX2, HS_GEMM_AVX512,
                                          HS_GEMM_AMX, HS_GEMM_AUTO };
    static const char *names[] = { "openblas", "avx2", "avx512", "amx", "auto" };
    const int N = g->s->N;
    /* beta 0 and 2 threads on a product too small to split (gemm.c: below
     * 4e6 flops) read B as beta 0.25 and one thread do */
    if (g->beta == 0 || (omp_get_max_threads() > 1 && 2.0 * g->s->M * N * g->s->K < 4e6))
        return;
    const size_t nb = (size_t)(g->tb ? N : g->s->K) * g->ldb;
    uint16_t *b16 = malloc(sizeof(uint16_t) * nb);
    float *bf = malloc(sizeof(float) * nb), *bias = malloc(sizeof(float) * (size_t)N);
    for (int j = 0; j < N; j++)
        bias[j] = 0.125f * (float)(j % 7) - 0.25f;
    for (hs_dtype bt = HS_DT_BF16; bt <= HS_DT_F16; bt++) {
        for (size_t i = 0; i < nb; i++) {
            uint32_t u;
            memcpy(&u, &g->B[i], sizeof u);
            b16[i] = bt == HS_DT_BF16 ? (uint16_t)(u >> 16) : hs_float_to_half(g->B[i]);
            bf[i] = bt == HS_DT_BF16 ? hs_bf16_to_float(b16[i]) : hs_half_to_float(b16[i]);
        }
        /* bf16 on every path; f16 and the bias (added before B is read, by
         * every path but AMX alike) on AUTO's */
        for (int p = 0; p < 5; p++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                if (!hs_gemm_path_runs(paths[p]) ||
                    ((bt == HS_DT_F16 || with_bias) && paths[p] != HS_GEMM_AUTO))
                    continue;
                const int differ =
                    typed_differs(g, paths[p], b16, bt, bf, with_bias ? bias : NULL);
                if (differ)
                    printf("\n  %s %s%s: %d rows differ from the float copy's at M,N,K "
                           "%d,%d,%d ta %d tb %d alpha %g beta %g",
                           names[p], bt == HS_DT_BF16 ? "bf16" : "f16", with_bias ? " + bias" : "",
                           differ, g->s->M, N, g->s->K, g->ta, g->tb, g->alpha, g->beta);
                CU_ASSERT_EQUAL(differ, 0);
            }
    }
    free(b16), free(bf), free(bias);
}

static void test_16_bit_weights_equal_their_float_copy(void)
{
#ifdef HEADSCOPE_DOUBLE /* the fast tier's -O0 sanitizer build: 2 threads (1 and 2 in the
                           float build, under valgrind and in the slow tier's clang ASan) */
    for (int nt = 2; nt <= 2; nt++) {
#else
    for (int nt = 1; nt <= 2; nt++) {
#endif
        omp_set_num_threads(nt);
        for_each_case_in(SHAPES, sizeof(SHAPES) / sizeof(SHAPES[0]), 1, 0, check_typed);
    }
}

/* x rounded to 8 significant bits, to nearest with ties to even, in
 * double arithmetic (rint in the default rounding mode); bfloat16's
 * subnormals are flushed to zero as the instruction does */
static double bf16_oracle(float x)
{
    if (!isfinite(x))
        return x;
    int e;
    const double m = frexp((double)x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    if (e < -125)                         /* below bfloat16's normal range */
        return 0;
    return ldexp(rint(ldexp(m, 8)), e - 8);
}

typedef struct {
    int M, N, K, ta, tb, bias;
} bf16_case;

/* C = A B^T in bfloat16 products: within float's summation error of the
 * same sum over A rounded to bfloat16 (the oracle's own rounding) and
 * within the stated 2^-8 sum |a b| of the float32 product; calls the
 * products do not take equal the F32 mode's bit for bit. */
static void test_bf16_products_are_within_their_stated_error(void)
{
    if (hs_gemm_set_compute(HS_COMPUTE_BF16)) {
        CU_ASSERT_FALSE(hs_gemm_bf16_runs());
        printf("\n  (no AVX512-BF16 on this CPU: HS_COMPUTE_BF16 refused, as documented)");
        return;
    }
    CU_ASSERT_EQUAL(hs_gemm_compute(), HS_COMPUTE_BF16);
    static const bf16_case cases[] = {
        { 5, 1, 2, 0, 1, 0 },     { 12, 32, 384, 0, 1, 0 }, { 13, 33, 770, 0, 1, 1 },
        { 100, 257, 64, 0, 1, 0 }, { 300, 100, 30, 0, 1, 1 }, { 7, 3100, 8, 0, 1, 0 },
        { 144, 64, 1000, 0, 1, 0 }, { 20, 40, 2100, 0, 1, 1 }, /* K in three blocks */
        /* not taken: odd K, A transposed, B not transposed, at most 4 rows */
        { 13, 7, 33, 0, 1, 0 },   { 30, 40, 64, 1, 1, 0 },  { 30, 40, 64, 0, 0, 0 },
        { 4, 300, 64, 0, 1, 0 },
    };
    for (int nt = 1; nt <= 2; nt++) {
        omp_set_num_threads(nt);
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const bf16_case *t = &cases[ci];
            const int M = t->M, N = t->N, K = t->K, ldc = N + 3;
            const int lda = (t->ta ? M : K) + 2, ldb = (t->tb ? K : N) + 4; /* even */
            const size_t na = (size_t)(t->ta ? K : M) * lda, nb = (size_t)(t->tb ? N : K) * ldb;
            float *A = malloc(sizeof(float) * na), *Bf = malloc(sizeof(float) * nb);
            uint16_t *B = malloc(sizeof(uint16_t) * nb);
            float *bias = malloc(sizeof(float) * N), *C = malloc(sizeof(float) * M * ldc);
            float *C32 = malloc(sizeof(float) * M * ldc);
            fill(A, na, 3 + (unsigned)ci), fill(Bf, nb, 40 + (unsigned)ci);
            fill(bias, N, 9);
            for (size_t i = 0; i < nb; i++) { /* B held as bfloat16; Bf its exact value */
                uint32_t u;
                memcpy(&u, &Bf[i], sizeof u);
                B[i] = (uint16_t)(u >> 16), u = (uint32_t)B[i] << 16;
                memcpy(&Bf[i], &u, sizeof u);
            }
            if (ci == 2)
                A[5] = NAN; /* row 0 of C becomes NaN */
            const float alpha = ci % 2 ? 0.5f : 1, beta = t->bias ? 1 : ci % 3 == 1 ? 0.25f : 0;
            for (int i = 0; i < M * ldc; i++)
                C[i] = C32[i] = beta == 0 ? NAN : 0.0625f * (float)(i % 11);
            hs_sgemm_typed(HS_GEMM_AUTO, t->ta, t->tb, M, N, K, alpha, A, lda, B, HS_DT_BF16,
                           ldb, beta, t->bias ? bias : NULL, C, ldc);
            hs_gemm_set_compute(HS_COMPUTE_F32);
            hs_sgemm_typed(HS_GEMM_AUTO, t->ta, t->tb, M, N, K, alpha, A, lda, B, HS_DT_BF16,
                           ldb, beta, t->bias ? bias : NULL, C32, ldc);
            hs_gemm_set_compute(HS_COMPUTE_BF16);
            const int taken = ci < 8;
            int bad = 0, nan_rows = 0;
            double worst = 0; /* the largest error over the stated bound's 2^-8 sum |a b| */
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    const float got = C[i * ldc + j];
                    if (!taken) {
                        bad += memcmp(&got, &C32[i * ldc + j], sizeof got) != 0;
                        continue;
                    }
                    double s16 = 0, a16 = 0, s32 = 0, a32 = 0;
                    for (int k = 0; k < K; k++) {
                        const float a = A[i * lda + k];
                        const double b = Bf[j * ldb + k], ar = bf16_oracle(a);
                        s16 += ar * b, a16 += fabs(ar * b), s32 += a * b, a32 += fabs(a * b);
                    }
                    const double c_in = 0.0625 * ((i * ldc + j) % 11); /* C as filled */
                    const double c0 = t->bias ? bias[j] : beta == 0 ? 0 : beta * c_in;
                    const double r16 = alpha * s16 + c0, r32 = alpha * s32 + c0;
                    if (ci == 2 && i == 0) {
                        nan_rows += isnan(got);
                        continue;
                    }
                    const double scale = fabs(alpha) * a32 + fabs(c0);
                    bad += !(fabs(got - r16) <= 1e-6 * (fabs(alpha) * a16 + fabs(c0)) + 1e-30);
                    bad += !(fabs(got - r32) <= 0x1p-8 * fabs(alpha) * a32 + 1e-6 * scale);
                    if (a32 > 0)
                        worst = fmax(worst, fabs(got - r32) / (0x1p-8 * fabs(alpha) * a32));
                }
            if (bad)
                printf("\n  bf16 products: %d entries off at M,N,K %d,%d,%d ta %d tb %d, %d "
                       "threads", bad, M, N, K, t->ta, t->tb, nt);
            CU_ASSERT_EQUAL(bad, 0);
            if (ci == 2)
                CU_ASSERT_EQUAL(nan_rows, N);
            if (taken && ci == 6 && nt == 1)
                printf("\n  (M,N,K %d,%d,%d: largest error %.3f of the stated bound)", M, N, K,
                       worst);
            free(A), free(Bf), free(B), free(bias), free(C), free(C32);
        }
    }
    omp_set_num_threads(1);
    hs_gemm_set_compute(HS_COMPUTE_F32);
}

/* The worst |C - ref| / (tol * scale) of C = 0.5 op(A) B^T + bias (bias
 * NULL: none), ref and scale from naive in double */
static double worst_error(int ta, int M, int N, int K, const float *A, const float *B,
                          const float *bias, const float *C, double tol)
{
    double *ref = malloc(sizeof(double) * (size_t)M * N),
           *scale = malloc(sizeof(double) * (size_t)M * N), worst = 0;
    naive(ta, 1, M, N, K, 0.5f, A, ta ? M : K, B, K, 0, NULL, N, ref, scale);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const size_t ij = (size_t)i * N + j;
            const double r = ref[ij] + (bias ? bias[j] : 0),
                         sc = scale[ij] + (bias ? fabs(bias[j]) : 0),
                         e = fabs(C[ij] - r) / (sc * tol + 1e-30);
            worst = e > worst ? e : worst;
        }
    free(ref), free(scale);
    return worst;
}

/* Weights pre-packed once (hs_pack_weight) give what our kernel gives on
 * the same call packing them itself: bit for bit, F32 and BF16, with and
 * without a bias, op(A) plain and transposed, K in several blocks, N past
 * NC (each thread's share of the panels), 1 and 2 threads; a few rows go
 * the unpacked way (equal too); every result within the naive loop's
 * bound of the widened weights. And op(B) = B (tb 0, the backward's input
 * gradients) packed from B's transpose: the same panels, so the same
 * products as op(B) = B^T's, bit for bit, and as the kernel packing it. */
static void test_prepacked_weights_equal_the_kernel_packing_them(void)
{
    const int nr = hs_packed_bytes(HS_DT_F32, 32, 32) ? 1 : 0;
    if (!nr) {
        printf("\n  (no AVX2 kernel on this CPU: nothing is pre-packed) ");
        return;
    }
    const hs_gemm_path path = hs_gemm_path_runs(HS_GEMM_AVX512) ? HS_GEMM_AVX512 : HS_GEMM_AVX2;
    /* K 800: three K blocks; N 3200: past NC; M 150: two MC blocks, an edge tile */
    static const shape S[] = { { 13, 33, 33 }, { 40, 70, 800 }, { 30, 3200, 12 },
                               { 4, 70, 37 }, { 150, 40, 20 }, { 5, 31, 7 } };
    for (int nt = 1; nt <= 2; nt++) {
        omp_set_num_threads(nt);
        for (size_t si = 0; si < sizeof S / sizeof S[0]; si++)
            for (int t = 0; t < 2; t++)
                for (int v = 0; v < 4; v++) {
                    const int M = S[si].M, N = S[si].N, K = S[si].K, ta = v & 1, bias = v >> 1;
                    const hs_dtype dt = t ? HS_DT_BF16 : HS_DT_F32;
                    float *A = malloc(sizeof(float) * (size_t)M * K),
                          *Bf = malloc(sizeof(float) * (size_t)N * K),
                          *b = malloc(sizeof(float) * (size_t)N),
                          *C1 = malloc(sizeof(float) * (size_t)M * N),
                          *C2 = malloc(sizeof(float) * (size_t)M * N);
                    uint16_t *Bh = malloc(sizeof(uint16_t) * (size_t)N * K);
                    fill(A, (size_t)M * K, 11 + (unsigned)si), fill(Bf, (size_t)N * K, 23);
                    fill(b, (size_t)N, 5);
                    for (size_t i = 0; i < (size_t)N * K; i++) { /* B's bfloat16 values */
                        uint32_t u;
                        memcpy(&u, &Bf[i], 4);
                        Bh[i] = (uint16_t)(u >> 16);
                        if (t) {
                            u &= 0xffff0000u;
                            memcpy(&Bf[i], &u, 4);
                        }
                    }
                    const void *B = t ? (const void *)Bh : (const void *)Bf;
                    hs_packed *pk = hs_pack_weight(B, dt, 1, N, K);
                    CU_ASSERT_PTR_NOT_NULL_FATAL(pk);
                    for (size_t i = 0; i < (size_t)M * N; i++)
                        C1[i] = C2[i] = NAN; /* beta 0 (or a bias): never read */
                    hs_sgemm_packed(HS_GEMM_AUTO, ta, M, N, K, 0.5f, A, ta ? M : K, pk, 0, bias ? b : NULL,
                                    C1, N);
                    hs_sgemm_typed(path, ta, 1, M, N, K, 0.5f, A, ta ? M : K, B, dt, K, 0,
                                   bias ? b : NULL, C2, N);
                    if (M <= 4) /* the few-row path reads B in place, whichever path */
                        hs_sgemm_typed(HS_GEMM_AUTO, ta, 1, M, N, K, 0.5f, A, ta ? M : K, B, dt,
                                       K, 0, bias ? b : NULL, C2, N);
                    int same = !memcmp(C1, C2, sizeof(float) * (size_t)M * N);
                    if (!same)
                        printf("\n  %d x %d x %d %s ta %d bias %d, %d threads: packed differs ", M, N,
                               K, t ? "bf16" : "f32", ta, bias, nt);
                    CU_ASSERT(same);
                    CU_ASSERT(worst_error(ta, M, N, K, A, Bf, bias ? b : NULL, C1, 1e-6) <= 1);
                    hs_packed_free(pk);
                    /* op(B) = B of B's transpose (K, N) */
                    const size_t es = t ? sizeof(uint16_t) : sizeof(float);
                    unsigned char *Bt = malloc(es * (size_t)N * K);
                    for (int n = 0; n < N; n++)
                        for (int k = 0; k < K; k++)
                            memcpy(Bt + es * ((size_t)k * N + n),
                                   (const unsigned char *)B + es * ((size_t)n * K + k), es);
                    pk = hs_pack_weight(Bt, dt, 0, N, K);
                    CU_ASSERT_PTR_NOT_NULL_FATAL(pk);
                    for (size_t i = 0; i < (size_t)M * N; i++)
                        C2[i] = NAN;
                    hs_sgemm_packed(HS_GEMM_AUTO, ta, M, N, K, 0.5f, A, ta ? M : K, pk, 0,
                                    bias ? b : NULL, C2, N);
                    /* a few rows read B in place, rows of B (not dot products): their own sums */
                    same = M <= 4 || !memcmp(C1, C2, sizeof(float) * (size_t)M * N);
                    memcpy(C1, C2, sizeof(float) * (size_t)M * N);
                    hs_sgemm_typed(M <= 4 ? HS_GEMM_AUTO : path, ta, 0, M, N, K, 0.5f, A,
                                   ta ? M : K, Bt, dt, N, 0, bias ? b : NULL, C2, N);
                    same &= !memcmp(C1, C2, sizeof(float) * (size_t)M * N);
                    if (!same)
                        printf("\n  %d x %d x %d %s ta %d bias %d, %d threads: op(B) = B packed "
                               "differs ", M, N, K, t ? "bf16" : "f32", ta, bias, nt);
                    CU_ASSERT(same);
                    hs_packed_free(pk);
                    free(Bt);
                    free(A), free(Bf), free(Bh), free(b), free(C1), free(C2);
                }
    }
}

/* One case of the test below: C = 0.5 A B^T (+ bias) over B's panels
 * packed under F32 (packed_f32) or BF16, computed under BF16 and then F32,
 * against the same calls packing B per call; and against float64. */
static void bf16_pairs_case(int M, int N, int K, int ta, int bias, int packed_f32, int nt)
{
    const size_t mk = (size_t)M * K, nk = (size_t)N * K, mn = (size_t)M * N;
    float *A = malloc(sizeof(float) * mk), *Bf = malloc(sizeof(float) * nk),
          *b = malloc(sizeof(float) * (size_t)N), *C1 = malloc(sizeof(float) * mn),
          *C2 = malloc(sizeof(float) * mn), *C3 = malloc(sizeof(float) * mn);
    uint16_t *Bh = malloc(sizeof(uint16_t) * nk);
    fill(A, mk, 31 + (unsigned)K), fill(Bf, nk, 7), fill(b, (size_t)N, 3);
    for (size_t i = 0; i < nk; i++) { /* B's bfloat16 values, in Bf too */
        uint32_t u;
        memcpy(&u, &Bf[i], 4);
        Bh[i] = (uint16_t)(u >> 16);
        u &= 0xffff0000u;
        memcpy(&Bf[i], &u, 4);
    }
    hs_gemm_set_compute(packed_f32 ? HS_COMPUTE_F32 : HS_COMPUTE_BF16);
    hs_packed *pk = hs_pack_weight(Bh, HS_DT_BF16, 1, N, K);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pk);
    const int lda = ta ? M : K;
    const float *bv = bias ? b : NULL;
    for (int mode = 0; mode < 2; mode++) { /* BF16, then F32: the panels no longer match */
        hs_gemm_set_compute(mode ? HS_COMPUTE_F32 : HS_COMPUTE_BF16);
        float *ref = mode ? C3 : C2;
        for (size_t i = 0; i < mn; i++)
            C1[i] = ref[i] = NAN; /* beta 0 (or a bias): never read */
        hs_sgemm_packed(HS_GEMM_AUTO, ta, M, N, K, 0.5f, A, lda, pk, 0, bv, C1, N);
        hs_sgemm_typed(HS_GEMM_AUTO, ta, 1, M, N, K, 0.5f, A, lda, Bh, HS_DT_BF16, K, 0, bv, ref,
                       N);
        const int same = !memcmp(C1, ref, sizeof(float) * mn);
        if (!same)
            printf("\n  %d x %d x %d ta %d bias %d packed %s, %d threads: differs under %s ", M,
                   N, K, ta, bias, packed_f32 ? "f32" : "pairs", nt, mode ? "F32" : "BF16");
        CU_ASSERT(same);
    }
    /* the products under BF16 against float64 of the same bfloat16 B: A's
     * rounding to bfloat16 moves each term by at most 2^-8 of it */
    CU_ASSERT(worst_error(ta, M, N, K, A, Bf, bv, C2, 0x1p-8 + 1e-6) <= 1);
    hs_packed_free(pk);
    free(A), free(Bf), free(Bh), free(b), free(C1), free(C2), free(C3);
}

/* Weights packed while --compute bf16 holds are packed as the bfloat16
 * products' pairs: those products on the panels equal the same products
 * packing B per call bit for bit (K in three blocks, N past NC and split
 * over the threads' panels, edge tiles); a call the products do not take
 * (op(A) = A^T, or the mode back at F32) reads B the unpacked way, and
 * panels packed under F32 serve no bfloat16 product. */
static void test_prepacked_bf16_pairs_equal_the_products_packing_them(void)
{
    if (!hs_gemm_bf16_runs() || !hs_packed_bytes(HS_DT_BF16, 32, 32)) {
        printf("\n  (no AVX512-BF16 on this CPU: no bfloat16 products) ");
        return;
    }
    /* 2MNK past 4e6 (two threads): the first two, splitting N into panel ranges */
    static const shape S[] = { { 13, 70, 2400 }, { 30, 3200, 40 }, { 150, 40, 20 }, { 5, 64, 48 } };
    for (int nt = 1; nt <= 2; nt++) {
        omp_set_num_threads(nt);
        for (size_t si = 0; si < sizeof S / sizeof S[0]; si++)
            for (int v = 0; v < 8; v++)
                bf16_pairs_case(S[si].M, S[si].N, S[si].K, v & 1, (v >> 1) & 1, v >> 2, nt);
    }
    hs_gemm_set_compute(HS_COMPUTE_F32);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_every_path_matches_naive_loop", test_every_path_matches_naive_loop },
        { "test_amx_large_c_matches_naive_loop", test_amx_large_c_matches_naive_loop },
        { "test_amx_non_finite_entries_stay_non_finite",
          test_amx_non_finite_entries_stay_non_finite },
        { "test_bias_rows_match_naive_loop", test_bias_rows_match_naive_loop },
        { "test_calls_inside_parallel_region_match_naive_loop",
          test_calls_inside_parallel_region_match_naive_loop },
        { "test_16_bit_weights_equal_their_float_copy",
          test_16_bit_weights_equal_their_float_copy },
        { "test_bf16_products_are_within_their_stated_error",
          test_bf16_products_are_within_their_stated_error },
        { "test_prepacked_weights_equal_the_kernel_packing_them",
          test_prepacked_weights_equal_the_kernel_packing_them },
        { "test_prepacked_bf16_pairs_equal_the_products_packing_them",
          test_prepacked_bf16_pairs_equal_the_products_packing_them },
    };
    return hs_run_tests("gemm", tests, HS_NTESTS(tests));
}
