/* The packed GEMM: op(B) is copied block by block (KC rows x NC columns) into
 * panels NR columns wide, op(A) (MC x KC, scaled by alpha) into panels MR rows
 * tall, so that the microkernel reads both contiguously: one KC x NR panel
 * of B stays in L1 while the MR-row panels of the A block (in L2) stream
 * past it. The microkernel keeps an MR x NR tile of C in registers for the
 * whole KC loop (MR/NR chosen so the tile fills most of the vector
 * registers and two FMAs issue each cycle). */
#include "gemm.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HS_GEMM_X86 1
#endif

/* Blocking: KC x NR of B (32 KB at NR 32) fits L1 (48 KB on the machines we
 * measure), MC x KC of A (144 KB) fits L2 with room to spare. MC is a
 * multiple of both MR (12 and 6). */
enum { KC = 256, MC = 144, NC = 3072, MR_MAX = 12, NR_MAX = 32 };

/* op(X) as a view: element (r, c) without copying the transpose. */
typedef struct {
    const float *p;
    int ld, trans;
} hs_view;

typedef void (*hs_kernel_fn)(int kc, const float *a, const float *b, float *c, long ldc,
                             float beta);

typedef struct {
    int mr, nr;
    hs_kernel_fn kernel;
} hs_kernel;

/* ---- microkernels: c (mr,nr; ldc) = beta*c + sum_k a[k*mr+i] b[k*nr+j];
 * beta 0 stores without reading c. ---- */
#ifdef HS_GEMM_X86
__attribute__((target("avx512f"))) static void kernel_avx512(int kc, const float *a,
                                                              const float *b, float *c, long ldc,
                                                              float beta)
{
    __m512 acc[12][2];
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
    for (int k = 0; k < kc; k++, a += 12, b += 32) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
        float *ci = c + i * ldc;
        if (beta != 0) {
            acc[i][0] = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci + 16), acc[i][1]);
        }
        _mm512_storeu_ps(ci, acc[i][0]);
        _mm512_storeu_ps(ci + 16, acc[i][1]);
    }
}

__attribute__((target("avx2,fma"))) static void kernel_avx2(int kc, const float *a,
                                                             const float *b, float *c, long ldc,
                                                             float beta)
{
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++, a += 6, b += 16) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    const __m256 vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        float *ci = c + i * ldc;
        if (beta != 0) {
            acc[i][0] = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), acc[i][1]);
        }
        _mm256_storeu_ps(ci, acc[i][0]);
        _mm256_storeu_ps(ci + 8, acc[i][1]);
    }
}
#endif

/* ---- packing ---- */

/* dst (panels of mr rows: [panel][k][r]) = alpha * op(A)[i0.., k0..], rows
 * past mc zero, so edge tiles run the same kernel. */
static void pack_a(float *dst, hs_view A, int i0, int k0, int mc, int kc, int mr, float alpha)
{
    for (int p = 0; p < mc; p += mr, dst += (size_t)mr * kc) {
        const int rows = mc - p < mr ? mc - p : mr;
        for (int r = 0; r < rows; r++) {
            const int i = i0 + p + r;
            if (A.trans) /* op(A)[i][k] = A[k][i] */
                for (int k = 0; k < kc; k++)
                    dst[k * mr + r] = alpha * A.p[(size_t)(k0 + k) * A.ld + i];
            else
                for (int k = 0; k < kc; k++)
                    dst[k * mr + r] = alpha * A.p[(size_t)i * A.ld + k0 + k];
        }
        for (int r = rows; r < mr; r++)
            for (int k = 0; k < kc; k++)
                dst[k * mr + r] = 0;
    }
}

/* dst (panels of nr columns: [panel][k][c]) = op(B)[k0.., j0..], columns past
 * nc zero. */
static void pack_b(float *dst, hs_view B, int k0, int j0, int kc, int nc, int nr)
{
    for (int p = 0; p < nc; p += nr, dst += (size_t)nr * kc) {
        const int cols = nc - p < nr ? nc - p : nr;
        if (B.trans) { /* op(B)[k][j] = B[j][k]: a row of B is a column here */
            for (int c = 0; c < cols; c++) {
                const float *src = B.p + (size_t)(j0 + p + c) * B.ld + k0;
                for (int k = 0; k < kc; k++)
                    dst[k * nr + c] = src[k];
            }
        } else {
            for (int k = 0; k < kc; k++)
                memcpy(dst + k * nr, B.p + (size_t)(k0 + k) * B.ld + j0 + p,
                       sizeof(float) * cols);
        }
        if (cols < nr)
            for (int k = 0; k < kc; k++)
                memset(dst + k * nr + cols, 0, sizeof(float) * (nr - cols));
    }
}

/* ---- the blocked loops ---- */

/* One MR x NR tile; an edge tile (rows < mr or cols < nr) goes through a
 * full-size scratch tile so the kernel never writes outside C. */
static void run_tile(const hs_kernel *kd, int kc, const float *a, const float *b, float *c,
                     int ldc, int rows, int cols, float beta)
{
    if (rows == kd->mr && cols == kd->nr) {
        kd->kernel(kc, a, b, c, ldc, beta);
        return;
    }
    float tile[MR_MAX * NR_MAX];
    kd->kernel(kc, a, b, tile, kd->nr, 0);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float *cij = c + (size_t)i * ldc + j;
            *cij = tile[i * kd->nr + j] + (beta != 0 ? beta * *cij : 0);
        }
}

/* Thread-private packing space, kept between calls (no allocation or page
 * clearing on the hot path); grows only. */
static _Thread_local float *ws_buf;
static _Thread_local size_t ws_cap;

static float *workspace(size_t n)
{
    if (n <= ws_cap)
        return ws_buf;
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p)
        return NULL;
    free(ws_buf);
    ws_buf = p, ws_cap = n;
    return p;
}

/* C (M,N) of one thread, packing into ws (MC*KC + KC*NC floats). */
static void gemm_serial(const hs_kernel *kd, int M, int N, int K, float alpha, hs_view A,
                        hs_view B, float beta, float *C, int ldc, float *ws)
{
    float *apack = ws, *bpack = ws + (size_t)MC * KC;
    for (int jc = 0; jc < N; jc += NC) {
        const int nc = N - jc < NC ? N - jc : NC;
        for (int pc = 0; pc < K; pc += KC) {
            const int kc = K - pc < KC ? K - pc : KC;
            const float b_eff = pc == 0 ? beta : 1; /* later K blocks accumulate */
            pack_b(bpack, B, pc, jc, kc, nc, kd->nr);
            for (int ic = 0; ic < M; ic += MC) {
                const int mc = M - ic < MC ? M - ic : MC;
                pack_a(apack, A, ic, pc, mc, kc, kd->mr, alpha);
                for (int jr = 0; jr < nc; jr += kd->nr)
                    for (int ir = 0; ir < mc; ir += kd->mr)
                        run_tile(kd, kc, apack + (size_t)ir * kc, bpack + (size_t)jr * kc,
                                 C + (size_t)(ic + ir) * ldc + jc + jr, ldc,
                                 mc - ir < kd->mr ? mc - ir : kd->mr,
                                 nc - jr < kd->nr ? nc - jr : kd->nr, b_eff);
            }
        }
    }
}

/* C = beta * C, the whole product when K is 0 or alpha is 0. */
static void scale_c(int M, int N, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
}

static void openblas(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* C (M,N) by the kernel, or by OpenBLAS where there is no memory to pack
 * into (it needs none of ours). */
static void gemm_block(const hs_kernel *kd, int M, int N, int K, float alpha, hs_view A,
                       hs_view B, float beta, float *C, int ldc)
{
    float *ws = workspace((size_t)MC * KC + (size_t)KC * NC);
    if (ws)
        gemm_serial(kd, M, N, K, alpha, A, B, beta, C, ldc, ws);
    else
        openblas(A.trans, B.trans, M, N, K, alpha, A.p, A.ld, B.p, B.ld, beta, C, ldc);
}

/* Sub-problem of thread t of nt: a contiguous range of N (whole NR panels)
 * when N has enough panels, else of M. Each thread packs its own operands:
 * no barrier inside the call, at the price of packing the shared operand
 * once per thread (O(MK) or O(KN) against O(MNK) of arithmetic). */
static void gemm_part(const hs_kernel *kd, int t, int nt, int M, int N, int K, float alpha,
                      hs_view A, hs_view B, float beta, float *C, int ldc)
{
    const int npan = (N + kd->nr - 1) / kd->nr, mpan = (M + kd->mr - 1) / kd->mr;
    if (npan >= 4 * nt || npan >= mpan) {
        const int p0 = npan * t / nt, p1 = npan * (t + 1) / nt;
        const int j0 = p0 * kd->nr, j1 = p1 * kd->nr < N ? p1 * kd->nr : N;
        if (j1 > j0) {
            hs_view Bt = B;
            Bt.p += B.trans ? (size_t)j0 * B.ld : (size_t)j0;
            gemm_block(kd, M, j1 - j0, K, alpha, A, Bt, beta, C + j0, ldc);
        }
    } else {
        const int p0 = mpan * t / nt, p1 = mpan * (t + 1) / nt;
        const int i0 = p0 * kd->mr, i1 = p1 * kd->mr < M ? p1 * kd->mr : M;
        if (i1 > i0) {
            hs_view At = A;
            At.p += A.trans ? (size_t)i0 : (size_t)i0 * A.ld;
            gemm_block(kd, i1 - i0, N, K, alpha, At, B, beta, C + (size_t)i0 * ldc, ldc);
        }
    }
}

/* ---- dispatch ---- */

static hs_gemm_path env_path = HS_GEMM_AUTO;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void read_env(void)
{
    const char *v = getenv("HEADSCOPE_GEMM");
    hs_gemm_path p = HS_GEMM_AUTO;
    if (v && !strcmp(v, "openblas"))
        p = HS_GEMM_OPENBLAS;
    else if (v && !strcmp(v, "avx2"))
        p = HS_GEMM_AVX2;
    else if (v && !strcmp(v, "avx512"))
        p = HS_GEMM_AVX512;
    env_path = hs_gemm_path_runs(p) ? p : HS_GEMM_AUTO;
}

hs_gemm_path hs_gemm_env_path(void)
{
    pthread_once(&env_once, read_env);
    return env_path;
}

int hs_gemm_path_runs(hs_gemm_path path)
{
    switch (path) {
    case HS_GEMM_AUTO:
    case HS_GEMM_OPENBLAS:
        return 1;
#ifdef HS_GEMM_X86
    case HS_GEMM_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case HS_GEMM_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f");
#endif
    default:
        return 0;
    }
}

/* AUTO's choice: see docs/perf.md "Own GEMM" for the measurements behind it. */
static hs_gemm_path auto_path(int M, int N, int K)
{
    (void)M, (void)N, (void)K;
    if (hs_gemm_path_runs(HS_GEMM_AVX512))
        return HS_GEMM_AVX512;
    if (hs_gemm_path_runs(HS_GEMM_AVX2))
        return HS_GEMM_AVX2;
    return HS_GEMM_OPENBLAS;
}

void hs_sgemm(hs_gemm_path path, int ta, int tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (!hs_gemm_path_runs(path))
        path = HS_GEMM_AUTO;
    if (path == HS_GEMM_AUTO)
        path = auto_path(M, N, K);
    if (K <= 0 || alpha == 0) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    hs_kernel kd = { 0, 0, NULL };
#ifdef HS_GEMM_X86
    if (path == HS_GEMM_AVX512)
        kd = (hs_kernel){ 12, 32, kernel_avx512 };
    else if (path == HS_GEMM_AVX2)
        kd = (hs_kernel){ 6, 16, kernel_avx2 };
#endif
    if (!kd.kernel) {
        openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const hs_view Av = { A, lda, ta }, Bv = { B, ldb, tb };
    /* Threads only where the work outweighs waking them (passive waits). */
    const int nt = omp_in_parallel() || 2.0 * M * N * K < 4e6 ? 1 : omp_get_max_threads();
    if (nt == 1) {
        gemm_block(&kd, M, N, K, alpha, Av, Bv, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    gemm_part(&kd, omp_get_thread_num(), omp_get_num_threads(), M, N, K, alpha, Av, Bv, beta, C,
              ldc);
}
