/* The blocked GEMM (GotoBLAS/BLIS loops): op(B) is copied, one K block at a
 * time, into panels NR columns wide (k-major), so the microkernel reads B
 * contiguously; each panel is copied just before its first use, while it is
 * in cache. op(A) is read where it lies when its rows are contiguous in k
 * (no copy: copying A cost ~16% of the time at our shapes), and copied into
 * MR-row panels when transposed or for the last partial panel. One KC x NR
 * panel of B stays in L1 while the MR-row panels of an MC-row block of A (in
 * L2) stream past it. The microkernel keeps an MR x NR tile of C in
 * registers for the whole K block (24 of 32 zmm registers, 12 of 16 ymm),
 * so each k step is 2 B loads, MR broadcasts and 2*MR FMAs. */
#include "gemm.h"
#include "common.h"
#include "gemm_amx.h"
#include "dtype.h"
#include "memory.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HS_GEMM_X86 1
#endif

/* Blocking: K in blocks of at most KC (split evenly: no short tail block),
 * MC x KC of A (216 KB) well inside L2 (2 MB on the machine measured), MC a
 * multiple of both MR (12 and 6). KC 256, NC 512-1024 and A packed for every
 * layout measured no faster (docs/perf.md, designs dropped). */
enum { KC = 384, MC = 144, NC = 3072, MR_MAX = 12, NR_MAX = 32 };

/* op(X) as a view: element (r, c) without copying the transpose. */
typedef struct {
    const float *p;
    int ld, trans;
} hs_view;

/* op(B) as a view, B held as t (float, or 16-bit weights widened where they
 * are read); with pk, op(B) = B^T is read from its pre-packed panels
 * instead, from panel pan0 on (a thread's share of N). */
typedef struct {
    const void *p;
    int ld, trans;
    hs_dtype t;
    const hs_packed *pk;
    int pan0;
} hs_bview;

/* A weight's panels (hs_pack_weight): for K block b (kstep elements of K,
 * the last what is left) and panel p (nr columns of op(B), the last
 * zero-padded), kc x nr elements [k][c] of type t at
 * ((b * npan * kstep) + p * kc) * nr -- or, with pairs, the same kc x nr
 * bfloat16 as [k/2][c] pairs (k, k+1), the bfloat16 products' panels. */
struct hs_packed {
    const void *src; /* the weight, type t: tb 1, (N, K) rows of K elements; tb 0, (K, N) */
    hs_dtype t;
    int tb, N, K, nr, kstep, npan;
    int pairs; /* 1: packed for bfloat16 products (K blocks of KC_BF) */
    void *data;
    size_t bytes;
};

static inline size_t wt_size(hs_dtype t) { return t == HS_DT_F32 ? sizeof(float) : 2; }

/* B's element at offset i (elements) from b, widened: exact */
static inline float wt_get(const void *b, hs_dtype t, size_t i)
{
    if (t == HS_DT_F32)
        return ((const float *)b)[i];
    const uint16_t h = ((const uint16_t *)b)[i];
    if (t == HS_DT_F16)
        return hs_half_to_float(h);
    union { uint32_t u; float f; } x = { .u = (uint32_t)h << 16 };
    return x.f;
}

/* dst[0..n) = the n elements of b from offset i, widened */
static void wt_row(float *dst, const void *b, hs_dtype t, size_t i, int n)
{
    if (t == HS_DT_F32) {
        memcpy(dst, (const float *)b + i, sizeof(float) * (size_t)n);
    } else if (t == HS_DT_BF16) {
        const uint16_t *h = (const uint16_t *)b + i;
        for (int k = 0; k < n; k++) { /* a vector loop: the top halves of floats */
            const uint32_t u = (uint32_t)h[k] << 16;
            memcpy(dst + k, &u, sizeof u);
        }
    } else {
        const uint16_t *h = (const uint16_t *)b + i;
        for (int k = 0; k < n; k++)
            dst[k] = hs_half_to_float(h[k]);
    }
}

/* the view moved by off elements of B */
static inline hs_bview bview_at(hs_bview B, size_t off)
{
    B.p = (const char *)B.p + off * wt_size(B.t);
    return B;
}

/* The microkernel: c (mr,nr; ldc) = alpha * sum_k A(i,k) b[k*nr+j] +
 * beta * c, with A(i,k) = a[i*rs + k*cs]: A is read where it lies (row
 * panels when rs is lda, column panels when cs is lda, a packed edge panel
 * when cs is mr), so only B is packed. beta 0 stores without reading c.
 * b holds floats, or (the *16 kernels) bfloat16 widened as it is loaded --
 * exactly, so the two give the same c from the same values. */
typedef void (*hs_kernel_fn)(int kc, const float *a, long rs, long cs, const void *b, float *c,
                             long ldc, float alpha, float beta);

typedef struct {
    int mr, nr;
    hs_kernel_fn rows, cols;     /* rs = lda, cs = 1; rs = 1, cs = lda */
    hs_kernel_fn rows16, cols16; /* the same over bfloat16 panels (pre-packed weights) */
} hs_kernel;

#ifdef HS_GEMM_X86
/* 16 columns of a panel row: floats, or bfloat16 widened (the top halves) */
__attribute__((target("avx512f"), always_inline)) static inline __m512 load_b512(const void *b,
                                                                                 int h, int b16)
{
    if (b16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)b + h)), 16));
    return _mm512_load_ps((const float *)b + 16 * h);
}

/* One body per ISA, inlined into a row-strided and a column-strided
 * variant so that the constant stride folds into the addressing, each over
 * float or bfloat16 panels (b16). */
__attribute__((target("avx512f"), always_inline)) static inline void
body_avx512(int kc, const float *a, long rs, long cs, const void *bv, float *c, long ldc,
            float alpha, float beta, int b16)
{
    const char *b = bv;
    const long bstep = b16 ? 64 : 128; /* 32 columns */
    __m512 acc[12][2];
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    }
    /* C's tile (12 rows of 128 bytes): loaded one line per k step, early,
     * spread out so that the misses overlap the arithmetic instead of
     * queueing at the store (C is often larger than L2) */
    int k = 0;
    for (; k < kc && k < 24; k++, a += cs, b += bstep) {
        _mm_prefetch((const char *)(c + (k >> 1) * ldc + 16 * (k & 1)), _MM_HINT_T0);
        const __m512 b0 = load_b512(b, 0, b16), b1 = load_b512(b, 1, b16);
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            const __m512 ai = _mm512_set1_ps(a[i * rs]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    for (; k < kc; k++, a += cs, b += bstep) {
        const __m512 b0 = load_b512(b, 0, b16), b1 = load_b512(b, 1, b16);
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            const __m512 ai = _mm512_set1_ps(a[i * rs]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
        float *ci = c + i * ldc;
        for (int h = 0; h < 2; h++) {
            __m512 r = _mm512_mul_ps(va, acc[i][h]);
            if (beta != 0)
                r = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci + 16 * h), r);
            _mm512_storeu_ps(ci + 16 * h, r);
        }
    }
}

/* One variant of an ISA's body: A strided by (RS, CS) -- a row-strided
 * (rs, 1) or column-strided (1, cs) panel, the constant folded into the
 * addressing -- over float or bfloat16 (b16) panels of B */
#define HS_KERNEL(name, isa, tgt, RS, CS, b16)                                                  \
    __attribute__((target(tgt))) static void name##_##isa(int kc, const float *a, long rs,      \
                                                          long cs, const void *b, float *c,     \
                                                          long ldc, float alpha, float beta)    \
    {                                                                                           \
        (void)rs, (void)cs;                                                                     \
        body_##isa(kc, a, RS, CS, b, c, ldc, alpha, beta, b16);                                 \
    }
#define HS_KERNELS(isa, tgt)                                                                    \
    HS_KERNEL(rows, isa, tgt, rs, 1, 0)                                                         \
    HS_KERNEL(cols, isa, tgt, 1, cs, 0)                                                         \
    HS_KERNEL(rows16, isa, tgt, rs, 1, 1)                                                       \
    HS_KERNEL(cols16, isa, tgt, 1, cs, 1)

HS_KERNELS(avx512, "avx512f")

__attribute__((target("avx2,fma"), always_inline)) static inline __m256 load_b256(const void *b,
                                                                                  int h, int b16)
{
    if (b16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_load_si128((const __m128i *)b + h)), 16));
    return _mm256_load_ps((const float *)b + 8 * h);
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
body_avx2(int kc, const float *a, long rs, long cs, const void *bv, float *c, long ldc,
          float alpha, float beta, int b16)
{
    const char *b = bv;
    const long bstep = b16 ? 32 : 64; /* 16 columns */
    __m256 acc[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int k = 0; k < kc; k++, a += cs, b += bstep) {
        const __m256 b0 = load_b256(b, 0, b16), b1 = load_b256(b, 1, b16);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + i * rs);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        float *ci = c + i * ldc;
        for (int h = 0; h < 2; h++) {
            __m256 r = _mm256_mul_ps(va, acc[i][h]);
            if (beta != 0)
                r = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8 * h), r);
            _mm256_storeu_ps(ci + 8 * h, r);
        }
    }
}

HS_KERNELS(avx2, "avx2,fma")
#endif

/* ---- packing ---- */

#ifdef HS_GEMM_X86
/* dst[k*nr + c] = r[c][k] for an 8 x 8 block, the rows of B in r: B's rows
 * become the packed panel's columns (the NT forward's weights) with 8-wide
 * stores instead of 64 scalar moves. */
__attribute__((target("avx2"), always_inline)) static inline void
store_transposed8(float *dst, int nr, __m256 r[8])
{
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; h++) {
            r[i + h] = _mm256_shuffle_ps(t[i + h], t[i + h + 2], _MM_SHUFFLE(1, 0, 1, 0));
            r[i + h + 2] = _mm256_shuffle_ps(t[i + h], t[i + h + 2], _MM_SHUFFLE(3, 2, 3, 2));
        }
    /* r[0..3]: rows 0-3 of columns {0,4},{2,6},{1,5},{3,7}; r[4..7] rows 4-7 */
    static const int col[4] = { 0, 2, 1, 3 };
    for (int q = 0; q < 4; q++) {
        _mm256_storeu_ps(dst + col[q] * nr, _mm256_permute2f128_ps(r[q], r[q + 4], 0x20));
        _mm256_storeu_ps(dst + (col[q] + 4) * nr, _mm256_permute2f128_ps(r[q], r[q + 4], 0x31));
    }
}

/* dst[k*nr + c] = src[c*ld + k] for an 8 x 8 block of floats */
__attribute__((target("avx2"))) static void transpose8(float *dst, int nr, const float *src,
                                                        long ld)
{
    __m256 r[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + i * ld);
    store_transposed8(dst, nr, r);
}

/* the same of bfloat16, each widened by shifting it into a float's top half */
__attribute__((target("avx2"))) static void transpose8_bf16(float *dst, int nr,
                                                             const uint16_t *src, long ld)
{
    __m256 r[8];
    for (int i = 0; i < 8; i++) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + i * ld));
        r[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    store_transposed8(dst, nr, r);
}
#endif

/* dst ([k][r], kc x mr) = op(A)[i0.., k0..] for rows (<= mr) rows, the
 * rest zero: the kernel may then read a full panel. */
static void pack_a_panel(float *dst, hs_view A, int i0, int k0, int rows, int kc, int mr)
{
    int r0 = 0;
#ifdef HS_GEMM_X86
    if (!A.trans) /* rows contiguous in k: eight at a time, 8 x 8 blocks */
        for (; r0 + 8 <= rows; r0 += 8) {
            const float *src = A.p + (size_t)(i0 + r0) * A.ld + k0;
            int k = 0;
            for (; k + 8 <= kc; k += 8)
                transpose8(dst + k * mr + r0, mr, src + k, A.ld);
            for (; k < kc; k++)
                for (int r = 0; r < 8; r++)
                    dst[k * mr + r0 + r] = src[(size_t)r * A.ld + k];
        }
#endif
    for (int k = 0; k < kc; k++)
        for (int r = r0; r < mr; r++)
            dst[k * mr + r] = r >= rows      ? 0
                              : A.trans ? A.p[(size_t)(k0 + k) * A.ld + i0 + r]
                                        : A.p[(size_t)(i0 + r) * A.ld + k0 + k];
}

/* One full panel (nr columns) of op(B) = B^T: 8 x 8 blocks, scalar tail. */
static void pack_bt_panel(float *dst, const float *src, long ld, int kc, int nr)
{
    int k = 0;
#ifdef HS_GEMM_X86
    for (; k + 8 <= kc; k += 8)
        for (int c = 0; c < nr; c += 8)
            transpose8(dst + k * nr + c, nr, src + c * ld + k, ld);
#endif
    for (; k < kc; k++)
        for (int c = 0; c < nr; c++)
            dst[k * nr + c] = src[c * ld + k];
}

/* The same of bfloat16 or float16, widened */
static void pack_bt_panel_16(float *dst, const uint16_t *src, hs_dtype t, long ld, int kc, int nr)
{
    int k = 0;
#ifdef HS_GEMM_X86
    if (t == HS_DT_BF16)
        for (; k + 8 <= kc; k += 8)
            for (int c = 0; c < nr; c += 8)
                transpose8_bf16(dst + k * nr + c, nr, src + c * ld + k, ld);
#endif
    for (; k < kc; k++)
        for (int c = 0; c < nr; c++)
            dst[k * nr + c] = wt_get(src, t, (size_t)c * ld + k);
}

/* dst ([k][c], kc x nr) = op(B)[k0.., j0..] for cols (<= nr) columns, the
 * rest zero; B's 16-bit weights widened. */
static void pack_b_panel(float *dst, hs_bview B, int k0, int j0, int kc, int cols, int nr)
{
    const float *Bf = B.t == HS_DT_F32 ? B.p : NULL;
    if (B.trans && cols == nr && Bf) {
        pack_bt_panel(dst, Bf + (size_t)j0 * B.ld + k0, B.ld, kc, nr);
    } else if (B.trans && cols == nr) {
        pack_bt_panel_16(dst, (const uint16_t *)B.p + (size_t)j0 * B.ld + k0, B.t, B.ld, kc, nr);
    } else if (B.trans) { /* op(B)[k][j] = B[j][k]: a row of B is a column here */
        for (int c = 0; c < cols; c++) {
            const size_t at = (size_t)(j0 + c) * B.ld + k0;
            for (int k = 0; k < kc; k++)
                dst[k * nr + c] = wt_get(B.p, B.t, at + (size_t)k);
        }
    } else if (cols == nr && nr == 32 && Bf) { /* constant sizes: the copies become vector moves */
        for (int k = 0; k < kc; k++)
            memcpy(dst + k * 32, Bf + (size_t)(k0 + k) * B.ld + j0, 32 * sizeof(float));
    } else if (cols == nr && nr == 16 && Bf) {
        for (int k = 0; k < kc; k++)
            memcpy(dst + k * 16, Bf + (size_t)(k0 + k) * B.ld + j0, 16 * sizeof(float));
    } else {
        for (int k = 0; k < kc; k++)
            wt_row(dst + k * nr, B.p, B.t, (size_t)(k0 + k) * B.ld + j0, cols);
    }
    if (cols < nr)
        for (int k = 0; k < kc; k++)
            memset(dst + k * nr + cols, 0, sizeof(float) * (nr - cols));
}

/* ---- the blocked loops ---- */

/* One MR x NR tile of C from the A panel at a (strides rs, cs) and the
 * packed B panel b; an edge tile (cols < nr) goes through a full-size
 * scratch tile so the kernel never writes outside C. */
static void run_tile(hs_kernel_fn fn, const hs_kernel *kd, int kc, const float *a, long rs,
                     long cs, const void *b, float *c, int ldc, int rows, int cols, float alpha,
                     float beta)
{
    if (rows == kd->mr && cols == kd->nr) {
        fn(kc, a, rs, cs, b, c, ldc, alpha, beta);
        return;
    }
    float tile[MR_MAX * NR_MAX];
    fn(kc, a, rs, cs, b, tile, kd->nr, alpha, 0);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float *cij = c + (size_t)i * ldc + j;
            *cij = tile[i * kd->nr + j] + (beta != 0 ? beta * *cij : 0);
        }
}

/* Thread-private space, kept between calls (no allocation or page clearing
 * on the hot path); grows only. */
typedef struct {
    float *p;
    size_t cap;
} hs_space;

static float *grow(hs_space *s, size_t n)
{
    if (n <= s->cap)
        return s->p;
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p)
        return NULL;
    free(s->p);
    s->p = p, s->cap = n;
    return p;
}

/* the packed panels (and a few rows' transposed A) */
static _Thread_local hs_space ws_pack;
static float *workspace(size_t n) { return grow(&ws_pack, n); }

/* a few rows' block of widened 16-bit B */
static _Thread_local hs_space ws_widened;

/* C = alpha op(A) op(B) + beta C element by element: only where no memory
 * could be had for packing or widening */
static void gemm_naive(int M, int N, int K, float alpha, hs_view A, hs_bview B, float beta,
                       float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float sum = 0;
            for (int k = 0; k < K; k++)
                sum += (A.trans ? A.p[(size_t)k * A.ld + i] : A.p[(size_t)i * A.ld + k]) *
                       wt_get(B.p, B.t, B.trans ? (size_t)j * B.ld + k : (size_t)k * B.ld + j);
            float *c = C + (size_t)i * ldc + j;
            *c = alpha * sum + (beta != 0 ? beta * *c : 0);
        }
}

/* K block pc.. (kc) of panel p of a pre-packed weight */
static const void *packed_panel(const hs_packed *pk, int pc, int kc, int p)
{
    const size_t el = ((size_t)(pc / pk->kstep) * pk->npan * pk->kstep + (size_t)p * kc) * pk->nr;
    return (const char *)pk->data + el * (pk->t == HS_DT_F32 ? 4 : 2);
}

/* The MC-row blocks of C columns jc.. (nc) for K block pc.. (kc). Each
 * panel of B is packed (into bpack) just before the first MC block uses it,
 * while it is still in cache; later MC blocks reuse it. op(A) = A (rows
 * contiguous in k): full MR-row panels are read in place, a partial last
 * one from a zero-padded copy, unless A's rows lie a multiple of 4 KB apart
 * (lda a multiple of 1024: d 1024, 2048, 4096 and their d_ff): then the MR
 * lines the kernel reads at each k share one L1 set, more than an 8-way L1
 * (Zen 4's) holds, and every panel is copied first (the 1B shape's forward
 * 12.6-12.8 s against 14.3 on Zen 4; at other strides the copy costs 2-8%).
 * op(A) = A^T: every panel is copied first (in place, the kernel would
 * stride by lda per k, and at lda a multiple of 2 KB those lines share two
 * L1 sets). */
static void gemm_kblock(const hs_kernel *kd, int M, int jc, int nc, int pc, int kc, float alpha,
                        hs_view A, hs_bview B, float *bpack, float beta, float *C, int ldc,
                        float *apack)
{
    const int mr = kd->mr, mfull = A.trans || A.ld % 1024 == 0 ? 0 : M / mr * mr;
    /* bfloat16 panels: widened by the kernel as it loads them, or where
     * more than one MC block reads each panel, once into bpack, a
     * sequential copy (Zen 4, one thread, medians of 15: (512, 8192, 2048)
     * 165 ms widened once, 177 widened in the kernel, 168 packing floats
     * per call; at 144 rows and fewer the kernel's widening as fast or
     * faster: (48, 8192, 2048) 17.9 against 19.6 ms) */
    const int b16 = B.pk && B.pk->t == HS_DT_BF16, widen = b16 && M > MC;
    const hs_kernel_fn rows_fn = b16 && !widen ? kd->rows16 : kd->rows,
                       cols_fn = b16 && !widen ? kd->cols16 : kd->cols;
    for (int ic = 0; ic < M; ic += MC) {
        const int mc = M - ic < MC ? M - ic : MC;
        for (int ir = ic; ir < ic + mc; ir += mr)
            if (ir >= mfull)
                pack_a_panel(apack + (size_t)(ir - ic) * kc, A, ir,
                             pc, ic + mc - ir < mr ? ic + mc - ir : mr, kc, mr);
        for (int jr = 0; jr < nc; jr += kd->nr) {
            const int cols = nc - jr < kd->nr ? nc - jr : kd->nr;
            const void *pan = B.pk ? packed_panel(B.pk, pc, kc, B.pan0 + (jc + jr) / kd->nr) : NULL;
            const void *b = pan && !widen ? pan : bpack + (size_t)jr * kc;
            if (ic == 0 && !B.pk)
                pack_b_panel(bpack + (size_t)jr * kc, B, pc, jc + jr, kc, cols, kd->nr);
            else if (ic == 0 && widen)
                wt_row(bpack + (size_t)jr * kc, pan, HS_DT_BF16, 0, kc * kd->nr);
            for (int ir = ic; ir < ic + mc; ir += mr) {
                float *c = C + (size_t)ir * ldc + jc + jr;
                const int rows = ic + mc - ir < mr ? ic + mc - ir : mr;
                if (ir < mfull)
                    run_tile(rows_fn, kd, kc, A.p + (size_t)ir * A.ld + pc, A.ld, 1, b, c, ldc,
                             mr, cols, alpha, beta);
                else
                    run_tile(cols_fn, kd, kc, apack + (size_t)(ir - ic) * kc, 1, mr, b, c, ldc,
                             rows, cols, alpha, beta);
            }
        }
    }
}

/* The K blocks' size: K split evenly (no short tail block) into blocks of
 * at most kmax (KC; KC_BF for bfloat16 products), a multiple of 8 (the last
 * what is left) */
static int k_step(int K, int kmax)
{
    const int nk = (K + kmax - 1) / kmax;
    return ((K + nk - 1) / nk + 7) / 8 * 8;
}

/* C (M,N) of one thread, packing into ws (KC*NC + MC*KC floats). */
static void gemm_serial(const hs_kernel *kd, int M, int N, int K, float alpha, hs_view A,
                        hs_bview B, float beta, float *C, int ldc, float *ws)
{
    float *bpack = ws, *apack = ws + (size_t)KC * NC;
    for (int jc = 0; jc < N; jc += NC) {
        const int nc = N - jc < NC ? N - jc : NC;
        const int kstep = k_step(K, KC);
        for (int pc = 0; pc < K; pc += kstep) {
            const int kc = K - pc < kstep ? K - pc : kstep;
            /* later K blocks accumulate onto the first one's result */
            gemm_kblock(kd, M, jc, nc, pc, kc, alpha, A, B, bpack, pc == 0 ? beta : 1, C, ldc,
                        apack);
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

/* C (M,N) by the kernel, or where there is no memory to pack into by
 * OpenBLAS (it needs none of ours; B float) or element by element. */
static void gemm_block(const hs_kernel *kd, int M, int N, int K, float alpha, hs_view A,
                       hs_bview B, float beta, float *C, int ldc)
{
    float *ws = workspace((size_t)KC * NC + (size_t)MC * KC);
    if (ws)
        gemm_serial(kd, M, N, K, alpha, A, B, beta, C, ldc, ws);
    else if (B.t == HS_DT_F32)
        openblas(A.trans, B.trans, M, N, K, alpha, A.p, A.ld, B.p, B.ld, beta, C, ldc);
    else
        gemm_naive(M, N, K, alpha, A, B, beta, C, ldc);
}

typedef void (*hs_block_fn)(const hs_kernel *kd, int M, int N, int K, float alpha, hs_view A,
                            hs_bview B, float beta, float *C, int ldc);

/* Sub-problem of thread t of nt, by block (gemm_block, or the bfloat16
 * products' own): a contiguous range of N (whole NR panels) when N has
 * enough panels, else of M. Each thread packs its own operands: no barrier
 * inside the call, at the price of packing the shared operand once per
 * thread (O(MK) or O(KN) against O(MNK) of arithmetic). */
static void gemm_part(hs_block_fn block, const hs_kernel *kd, int t, int nt, int M, int N, int K,
                      float alpha, hs_view A, hs_bview B, float beta, float *C, int ldc)
{
    const int npan = (N + kd->nr - 1) / kd->nr, mpan = (M + kd->mr - 1) / kd->mr;
    if (npan >= 4 * nt || npan >= mpan) {
        const int p0 = npan * t / nt, p1 = npan * (t + 1) / nt;
        const int j0 = p0 * kd->nr, j1 = p1 * kd->nr < N ? p1 * kd->nr : N;
        hs_bview Bj = bview_at(B, B.trans ? (size_t)j0 * B.ld : (size_t)j0);
        Bj.pan0 += p0; /* a pre-packed weight's panels: from the thread's first */
        if (j1 > j0)
            block(kd, M, j1 - j0, K, alpha, A, Bj, beta, C + j0, ldc);
    } else {
        const int p0 = mpan * t / nt, p1 = mpan * (t + 1) / nt;
        const int i0 = p0 * kd->mr, i1 = p1 * kd->mr < M ? p1 * kd->mr : M;
        if (i1 > i0) {
            hs_view At = A;
            At.p += A.trans ? (size_t)i0 : (size_t)i0 * A.ld;
            block(kd, i1 - i0, N, K, alpha, At, B, beta, C + (size_t)i0 * ldc, ldc);
        }
    }
}

/* ---- a few rows: decoding ---- */

/* Products of at most SMALL_M rows (one per sequence when decoding) are
 * bound by reading op(B) once; the blocked path would first copy all of it
 * into panels for a single row of C. Here op(B) is read where it lies:
 * with op(B) = B^T (the forward's weights, k contiguous) one dot product per
 * entry of C, four columns at a time; otherwise rows of B scaled and added
 * into SMALL_NB accumulators per row of C. op(A) is contiguous in k
 * (copied first when transposed). */
enum { SMALL_M = 4, SMALL_NB = 64 };

static inline void small_store(float *c, float v, float alpha, float beta)
{
    *c = alpha * v + (beta != 0 ? beta * *c : 0);
}

/* 16 floats: one zmm, two ymm (GCC's vector extension, any alignment). */
typedef float hs_v16 __attribute__((vector_size(64), aligned(4)));

static inline float small_hsum(const hs_v16 *v) /* by pointer: no 64-byte ABI argument */
{
    float s = 0;
    for (int l = 0; l < 16; l++)
        s += (*v)[l];
    return s;
}

/* 16 bfloat16 (any alignment), and their widening: each shifted into the
 * top half of a float */
typedef uint16_t hs_h16 __attribute__((vector_size(32), aligned(2)));
typedef uint32_t hs_w16 __attribute__((vector_size(64)));

/* *v = 16 entries of a row of B from k: floats, or (bf16) bfloat16 widened
 * (by pointer: no 64-byte ABI return) */
__attribute__((always_inline)) static inline void row16(hs_v16 *v, const void *b, int k, int bf16)
{
    if (!bf16) {
        *v = *(const hs_v16 *)((const float *)b + k);
        return;
    }
    const hs_w16 u = __builtin_convertvector(*(const hs_h16 *)((const uint16_t *)b + k), hs_w16);
    *v = (hs_v16)(u << 16);
}

/* t + the products of a[k] and row b's entries k0..K-1 (floats or
 * bfloat16), each added with one rounding, whatever the compiler contracts */
__attribute__((always_inline)) static inline float small_tail(float t, const float *a,
                                                              const void *b, int k0, int K,
                                                              int bf16)
{
    for (int k = k0; k < K; k++)
        t = fmaf(a[k], bf16 ? wt_get(b, HS_DT_BF16, (size_t)k) : ((const float *)b)[k], t);
    return t;
}

/* Columns j0..j1 of C = alpha A B^T + beta C for M (a constant, 1..4) rows
 * of A (lda), B (N,K; ldb) of floats or (bf16) bfloat16: one row of B at a
 * time, read from start to end, so that B (the forward's weights, rows
 * contiguous) is one sequential stream, as the hardware's prefetchers take
 * it best (four rows read side by side streamed the 1B's weights at half
 * the read bandwidth of Zen 4's core); four 16-lane sums per row of A keep
 * the adds from waiting on each other. The same products in the same order
 * either way. */
__attribute__((always_inline)) static inline void
small_dots_m(const int M, int j0, int j1, int K, float alpha, const float *A, int lda,
             const void *B, int ldb, float beta, float *C, int ldc, int bf16)
{
    const int K64 = K / 64 * 64, K16 = K / 16 * 16;
    const size_t es = bf16 ? 2 : sizeof(float);
    for (int j = j0; j < j1; j++) {
        const char *bj = (const char *)B + (size_t)j * ldb * es;
        hs_v16 s[4][4] = { 0 };
        for (int k = 0; k < K64; k += 64) {
            /* ahead in the stream: across 4 KiB pages (a mapped file) the
             * hardware's prefetchers stop at each page's end */
            __builtin_prefetch(bj + (size_t)k * es + 2048);
            __builtin_prefetch(bj + (size_t)k * es + 2048 + 64);
            if (!bf16) {
                __builtin_prefetch(bj + (size_t)k * es + 2048 + 128);
                __builtin_prefetch(bj + (size_t)k * es + 2048 + 192);
            }
            hs_v16 vb[4];
            for (int u = 0; u < 4; u++)
                row16(&vb[u], bj, k + 16 * u, bf16);
            for (int i = 0; i < M; i++)
                for (int u = 0; u < 4; u++)
                    s[i][u] += *(const hs_v16 *)(A + (size_t)i * lda + k + 16 * u) * vb[u];
        }
        for (int k = K64; k < K16; k += 16) {
            hs_v16 vb;
            row16(&vb, bj, k, bf16);
            for (int i = 0; i < M; i++)
                s[i][0] += *(const hs_v16 *)(A + (size_t)i * lda + k) * vb;
        }
        for (int i = 0; i < M; i++) {
            const hs_v16 v = (s[i][0] + s[i][1]) + (s[i][2] + s[i][3]);
            small_store(C + (size_t)i * ldc + j,
                        small_tail(small_hsum(&v), A + (size_t)i * lda, bj, K16, K, bf16), alpha,
                        beta);
        }
    }
}

/* The same, four rows of B at a time (each read by every row of A while
 * in L1), 16 lanes each: where A outgrows a quarter of L1, read again for
 * every row of B it would stream from L2 beside B (the 1B's down
 * projection, K 8192, 12 against 20 GB/s on Zen 4). */
__attribute__((always_inline)) static inline void
small_dots4(int M, int j0, int j1, int K, float alpha, const float *A, int lda, const void *B,
           int ldb, float beta, float *C, int ldc, int bf16)
{
    const int K16 = K / 16 * 16;
    const size_t es = bf16 ? 2 : sizeof(float);
    for (int j = j0; j < j1; j += 4) {
        const int nj = j1 - j < 4 ? j1 - j : 4;
        const void *b[4];
        for (int q = 0; q < 4; q++) /* past the end: repeat the last column */
            b[q] = (const char *)B + (size_t)(j + (q < nj ? q : nj - 1)) * ldb * es;
        /* the next four rows, fetched while these are read: B streams from
         * memory once, and where it lies in 4 KiB pages (a mapped file) the
         * hardware's prefetchers stop at each page's end */
        const uintptr_t next = (uintptr_t)B + (size_t)(j + 4 < j1 ? j + 4 : j) * ldb * es;
        for (int i = 0; i < M; i++) { /* the four rows of B stay in L1 */
            const float *a = A + (size_t)i * lda;
            hs_v16 s[4] = { 0 };
            for (int k = 0; k < K16; k += 16) {
                if (i == 0 && (k * es) % 64 == 0)
                    for (int q = 0; q < 4; q++)
                        __builtin_prefetch((const void *)(next + ((size_t)q * ldb + k) * es));
                const hs_v16 va = *(const hs_v16 *)(a + k);
                for (int q = 0; q < 4; q++) {
                    hs_v16 vb;
                    row16(&vb, b[q], k, bf16);
                    s[q] += va * vb;
                }
            }
            for (int q = 0; q < nj; q++)
                small_store(C + (size_t)i * ldc + j + q,
                            small_tail(small_hsum(&s[q]), a, b[q], K16, K, bf16), alpha, beta);
        }
    }
}

__attribute__((always_inline)) static inline void
small_dots(int M, int j0, int j1, int K, float alpha, const float *A, int lda, const void *B,
           int ldb, float beta, float *C, int ldc, int bf16)
{
    if ((size_t)M * K > 4096) {
        small_dots4(M, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
        return;
    }
    switch (M) { /* M constant in each: the sums stay in registers */
    case 1:
        small_dots_m(1, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
        break;
    case 2:
        small_dots_m(2, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
        break;
    case 3:
        small_dots_m(3, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
        break;
    default:
        small_dots_m(4, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, bf16);
    }
}

/* Columns j0..j1 of C = alpha A B + beta C, A (M,K; lda), B (K,N; ldb) of
 * floats or (bf16) bfloat16: each row of C in blocks of SMALL_NB columns held
 * in registers, the same products in the same order either way. */
__attribute__((always_inline)) static inline void
small_axpys(int M, int j0, int j1, int K, float alpha, const float *A, int lda, const void *B,
            int ldb, float beta, float *C, int ldc, int bf16)
{
    const size_t es = bf16 ? 2 : sizeof(float);
    for (int i = 0; i < M; i++) {
        const float *a = A + (size_t)i * lda;
        float *c = C + (size_t)i * ldc;
        int jb = j0;
        for (; jb + SMALL_NB <= j1; jb += SMALL_NB) {
            hs_v16 acc[SMALL_NB / 16] = { 0 };
            for (int k = 0; k < K; k++) {
                const void *b = (const char *)B + ((size_t)k * ldb + jb) * es;
                for (int q = 0; q < SMALL_NB / 16; q++) {
                    hs_v16 vb;
                    row16(&vb, b, 16 * q, bf16);
                    acc[q] += a[k] * vb;
                }
            }
            for (int q = 0; q < SMALL_NB / 16; q++)
                for (int j = 0; j < 16; j++)
                    small_store(c + jb + 16 * q + j, acc[q][j], alpha, beta);
        }
        if (jb < j1) { /* the last, partial block */
            float acc[SMALL_NB] = { 0 };
            for (int k = 0; k < K; k++) {
                const void *b = (const char *)B + (size_t)k * ldb * es;
#pragma omp simd
                for (int j = jb; j < j1; j++) /* one rounding, whatever the compiler contracts */
                    acc[j - jb] = fmaf(a[k], wt_get(b, bf16 ? HS_DT_BF16 : HS_DT_F32, (size_t)j),
                                       acc[j - jb]);
            }
            for (int j = jb; j < j1; j++)
                small_store(c + j, acc[j - jb], alpha, beta);
        }
    }
}

typedef void (*hs_small_fn)(int tb, int bf16, int M, int j0, int j1, int K, float alpha,
                            const float *A, int lda, const void *B, int ldb, float beta, float *C,
                            int ldc);

/* small_dots (tb) or small_axpys on B of floats or (bf16) bfloat16: each of
 * the four inlined with its constants, once per ISA below */
__attribute__((always_inline)) static inline void
small_any(int tb, int bf16, int M, int j0, int j1, int K, float alpha, const float *A, int lda,
          const void *B, int ldb, float beta, float *C, int ldc)
{
    if (tb && bf16)
        small_dots(M, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, 1);
    else if (tb)
        small_dots(M, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, 0);
    else if (bf16)
        small_axpys(M, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, 1);
    else
        small_axpys(M, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc, 0);
}

#ifdef HS_GEMM_X86
__attribute__((target("avx512f"))) static void
small_avx512(int tb, int bf16, int M, int j0, int j1, int K, float alpha, const float *A,
             int lda, const void *B, int ldb, float beta, float *C, int ldc)
{
    small_any(tb, bf16, M, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

__attribute__((target("avx2,fma"))) static void
small_avx2(int tb, int bf16, int M, int j0, int j1, int K, float alpha, const float *A, int lda,
           const void *B, int ldb, float beta, float *C, int ldc)
{
    small_any(tb, bf16, M, j0, j1, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#endif

/* Columns j0..j1 of C by fn: floats and bfloat16 read where they lie; F16
 * widened into the thread's space first (rows j0..j1 of B^T, columns of B),
 * then the same products in the same order as on a float copy of B. */
static void small_block(hs_small_fn fn, int M, int j0, int j1, int K, float alpha,
                        const float *A, int lda, hs_bview B, float beta, float *C, int ldc)
{
    if (B.t != HS_DT_F16) {
        fn(B.trans, B.t == HS_DT_BF16, M, j0, j1, K, alpha, A, lda, B.p, B.ld, beta, C, ldc);
        return;
    }
    const int nb = j1 - j0;
    float *b = grow(&ws_widened, (size_t)nb * K);
    if (!b) {
        const hs_view Av = { A, lda, 0 };
        gemm_naive(M, nb, K, alpha, Av, bview_at(B, B.trans ? (size_t)j0 * B.ld : (size_t)j0),
                   beta, C + j0, ldc);
        return;
    }
    if (B.trans)
        for (int j = 0; j < nb; j++)
            wt_row(b + (size_t)j * K, B.p, B.t, (size_t)(j0 + j) * B.ld, K);
    else
        for (int k = 0; k < K; k++)
            wt_row(b + (size_t)k * nb, B.p, B.t, (size_t)k * B.ld + j0, nb);
    fn(B.trans, 0, M, 0, nb, K, alpha, A, lda, b, B.trans ? K : nb, beta, C + j0, ldc);
}

/* C (M <= SMALL_M rows) by fn in blocks of SMALL_NB columns; nt threads take
 * them in turn (dynamic: a thread whose core is taken leaves its share to the
 * others). Returns 0 where there is no memory to copy a transposed A into. */
static int gemm_small(hs_small_fn fn, int nt, int ta, int M, int N, int K, float alpha,
                      const float *A, int lda, hs_bview B, float beta, float *C, int ldc)
{
    if (ta) { /* op(A) rows contiguous: A^T (K,M) copied to (M,K) */
        float *a = workspace((size_t)M * K);
        if (!a)
            return 0;
        for (int i = 0; i < M; i++)
            for (int k = 0; k < K; k++)
                a[(size_t)i * K + k] = A[(size_t)k * lda + i];
        A = a, lda = K;
    }
    const int nb = (N + SMALL_NB - 1) / SMALL_NB;
    /* One thread: a loop, not a region with if (nt > 1). In the clang build
     * (LLVM's libomp) that serialised region left OpenBLAS's next threaded
     * call waiting for ever on a worker that never came (test_gemm). */
    if (nt == 1) {
        for (int q = 0; q < nb; q++)
            small_block(fn, M, q * SMALL_NB, q == nb - 1 ? N : (q + 1) * SMALL_NB, K, alpha, A,
                        lda, B, beta, C, ldc);
        return 1;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int q = 0; q < nb; q++)
        small_block(fn, M, q * SMALL_NB, q == nb - 1 ? N : (q + 1) * SMALL_NB, K, alpha, A, lda,
                    B, beta, C, ldc);
    return 1;
}

/* ---- bfloat16 products (HS_COMPUTE_BF16) ---- */

/* The blocked loops of the float path with pairs of bfloat16 in place of
 * floats: A's MC x KC block rounded into rows of pairs (k, k+1) in 32 bits,
 * the low half k; each panel of B^T as [k/2][32] pairs, read from B's rows
 * where each pair lies in 32 bits already (the float path's 8 x 8 transpose
 * moves them unchanged); the 12 x 32 microkernel adds two products a lane
 * per instruction, vdpbf16ps. K and B's ld even, B 4-byte aligned. K in
 * blocks of up to KC_BF (a B panel of 64 KB, A's MC block 288 KB, both in
 * L2): packing B^T then reads each weight row 2 KB at a time instead of
 * 0.7 (KC), which the hardware's prefetch streams better (the 1B shape's
 * bf16 forward of 512 tokens 7.0 s against 8.4 on Zen 4, 1 thread). */
enum { BF_MR = 12, BF_NR = 32, KC_BF = 1024 };

static int compute_mode = -1; /* -1: HEADSCOPE_COMPUTE not read yet */
static pthread_once_t compute_once = PTHREAD_ONCE_INIT;

int hs_gemm_bf16_runs(void)
{
#ifdef HS_GEMM_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

static void read_compute(void)
{
    const char *v = getenv("HEADSCOPE_COMPUTE");
    if (__atomic_load_n(&compute_mode, __ATOMIC_ACQUIRE) < 0)
        __atomic_store_n(&compute_mode,
                         v && !strcmp(v, "bf16") && hs_gemm_bf16_runs() ? HS_COMPUTE_BF16
                                                                        : HS_COMPUTE_F32,
                         __ATOMIC_RELEASE);
}

hs_compute hs_gemm_compute(void)
{
    pthread_once(&compute_once, read_compute);
    return (hs_compute)__atomic_load_n(&compute_mode, __ATOMIC_ACQUIRE);
}

int hs_gemm_set_compute(hs_compute c)
{
    if (c == HS_COMPUTE_BF16 && !hs_gemm_bf16_runs())
        return -1;
    pthread_once(&compute_once, read_compute);
    __atomic_store_n(&compute_mode, (int)c, __ATOMIC_RELEASE);
    return 0;
}

int hs_gemm_set_compute_name(const char *name)
{
    const int bf16 = !strcmp(name, "bf16");
    if (!bf16 && strcmp(name, "f32"))
        return hs_fail(HS_EINVAL, "'%s' is not f32 or bf16", name);
    if (hs_gemm_set_compute(bf16 ? HS_COMPUTE_BF16 : HS_COMPUTE_F32))
        return hs_fail(HS_EINVAL, "bf16: this CPU has no AVX512-BF16 (vdpbf16ps)");
    return HS_OK;
}

#ifdef HS_GEMM_X86
/* the first n (clamped to 0..16) lanes */
static inline __mmask16 lanes(int n)
{
    return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* rows (<= BF_MR, the rest zero) of A from row i0, columns k0..k0+kc (kc
 * even), as rows of kc/2 pairs at dst: every entry rounded by the
 * instruction (to nearest even), 32 at a time, the tail through masks */
__attribute__((target("avx512f,avx512bf16"))) static void
pack_a_bf16(uint32_t *dst, const float *A, int lda, int i0, int rows, int k0, int kc)
{
    const int kp = kc / 2;
    for (int r = 0; r < BF_MR; r++) {
        uint32_t *d = dst + (size_t)r * kp;
        if (r >= rows) {
            memset(d, 0, sizeof *d * (size_t)kp);
            continue;
        }
        const float *a = A + (size_t)(i0 + r) * lda + k0;
        for (int k = 0; k < kc; k += 32) {
            const int n = kc - k; /* > 32 past the last block: full masks */
            const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(lanes(n - 16), a + k + 16),
                                                   _mm512_maskz_loadu_ps(lanes(n), a + k));
            _mm512_mask_storeu_epi32(d + k / 2, lanes(n / 2), (__m512i)h);
        }
    }
}

/* dst[p][c] = the pair (k0 + 2p, k0 + 2p + 1) of row j0 + c of B (ld
 * elements), p < kc/2, c < cols, the rest of the BF_NR columns zero */
static void pack_b_bf16(uint32_t *dst, const uint16_t *B, int ld, int k0, int j0, int kc,
                        int cols)
{
    const int kp = kc / 2;
    const uint32_t *src = (const uint32_t *)(const void *)(B + (size_t)j0 * ld + k0);
    const long ld2 = ld / 2;
    int p = 0;
    if (cols == BF_NR)
        for (; p + 8 <= kp; p += 8)
            for (int c = 0; c < BF_NR; c += 8) /* moves 32 bits unchanged */
                transpose8((float *)(void *)(dst + (size_t)p * BF_NR + c), BF_NR,
                           (const float *)(const void *)(src + c * ld2 + p), ld2);
    for (; p < kp; p++) /* the tail, and every pair of a partial panel */
        for (int c = 0; c < BF_NR; c++)
            dst[(size_t)p * BF_NR + c] = c < cols ? src[c * ld2 + p] : 0;
}

/* c (12 x 32; ldc) = alpha * sum_p a[i*kp + p] . b[p][j] + beta * c, pairs
 * of bfloat16 in each 32 bits; beta 0 stores without reading c */
__attribute__((target("avx512f,avx512bf16"))) static void
kernel_bf16(int kp, const uint32_t *a, const uint32_t *b, float *c, long ldc, float alpha,
            float beta)
{
    __m512 acc[BF_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < BF_MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++, a++, b += BF_NR) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)b);
        const __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(b + 16));
#pragma GCC unroll 12
        for (int i = 0; i < BF_MR; i++) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[(size_t)i * kp]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < BF_MR; i++)
        for (int h = 0; h < 2; h++) {
            float *ci = c + i * ldc + 16 * h;
            __m512 r = _mm512_mul_ps(va, acc[i][h]);
            if (beta != 0)
                r = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), r);
            _mm512_storeu_ps(ci, r);
        }
}

/* C (M,N) of one thread = alpha A B^T + beta C, B (N,K) bfloat16, packing
 * into ws (KC_BF/2 x NC + BF_MR x KC_BF/2 pairs per row panel of an MC
 * block); B's panels read from B.pk instead where it was packed in pairs */
static void gemm_bf16_serial(int M, int N, int K, float alpha, const float *A, int lda,
                             hs_bview B, float beta, float *C, int ldc, uint32_t *ws)
{
    uint32_t *bpack = ws, *apack = ws + (size_t)KC_BF / 2 * NC;
    float tile[BF_MR * BF_NR];
    for (int jc = 0; jc < N; jc += NC) {
        const int nc = N - jc < NC ? N - jc : NC;
        const int kstep = k_step(K, KC_BF);
        for (int pc = 0; pc < K; pc += kstep) {
            const int kc = K - pc < kstep ? K - pc : kstep, kp = kc / 2;
            const float bk = pc == 0 ? beta : 1; /* later K blocks add onto the first's */
            for (int ic = 0; ic < M; ic += MC) {
                const int mc = M - ic < MC ? M - ic : MC;
                for (int ir = 0; ir < mc; ir += BF_MR)
                    pack_a_bf16(apack + (size_t)ir * kp, A, lda, ic + ir,
                                mc - ir < BF_MR ? mc - ir : BF_MR, pc, kc);
                for (int jr = 0; jr < nc; jr += BF_NR) {
                    const int cols = nc - jr < BF_NR ? nc - jr : BF_NR;
                    const uint32_t *b =
                        B.pk ? packed_panel(B.pk, pc, kc, B.pan0 + (jc + jr) / BF_NR)
                             : bpack + (size_t)jr * kp;
                    if (ic == 0 && !B.pk)
                        pack_b_bf16(bpack + (size_t)jr * kp, B.p, B.ld, pc, jc + jr, kc, cols);
                    for (int ir = 0; ir < mc; ir += BF_MR) {
                        const int rows = mc - ir < BF_MR ? mc - ir : BF_MR;
                        float *c = C + (size_t)(ic + ir) * ldc + jc + jr;
                        if (rows == BF_MR && cols == BF_NR) {
                            kernel_bf16(kp, apack + (size_t)ir * kp, b, c, ldc, alpha, bk);
                            continue;
                        }
                        kernel_bf16(kp, apack + (size_t)ir * kp, b, tile, BF_NR, alpha, 0);
                        for (int i = 0; i < rows; i++)
                            for (int j = 0; j < cols; j++) {
                                float *cij = c + (size_t)i * ldc + j;
                                *cij = tile[i * BF_NR + j] + (bk != 0 ? bk * *cij : 0);
                            }
                    }
                }
            }
        }
    }
}

/* C (M,N) of one thread (gemm_part's block; kd the 12 x 32 tiles it splits
 * by, op(A) = A); element by element in floats where there is no memory to
 * pack into */
static void gemm_bf16_block(const hs_kernel *kd, int M, int N, int K, float alpha, hs_view A,
                            hs_bview B, float beta, float *C, int ldc)
{
    (void)kd;
    uint32_t *ws = (uint32_t *)(void *)workspace((size_t)KC_BF * NC / 2 + (size_t)MC * KC_BF / 2);
    if (ws)
        gemm_bf16_serial(M, N, K, alpha, A.p, A.ld, B, beta, C, ldc, ws);
    else
        gemm_naive(M, N, K, alpha, A, B, beta, C, ldc);
}

/* 1 if bfloat16 products (hs_compute) take C = alpha op(A) op(B) + beta C */
static int bf16_takes(int ta, int M, int K, hs_bview B)
{
    return !ta && B.trans && B.t == HS_DT_BF16 && M > SMALL_M && K > 0 && K % 2 == 0 &&
           B.ld % 2 == 0 && ((uintptr_t)B.p & 3) == 0 && hs_gemm_compute() == HS_COMPUTE_BF16;
}

/* C = alpha A B^T + beta C in bfloat16 products, a call bf16_takes */
static void gemm_bf16(int nt, int M, int N, int K, float alpha, const float *A, int lda,
                      hs_bview B, float beta, float *C, int ldc)
{
    static const hs_kernel kd = { BF_MR, BF_NR, NULL, NULL, NULL, NULL };
    const hs_view Av = { A, lda, 0 };
    if (nt == 1) { /* a loop, not a one-thread region: see gemm_small */
        gemm_bf16_block(&kd, M, N, K, alpha, Av, B, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    gemm_part(gemm_bf16_block, &kd, omp_get_thread_num(), omp_get_num_threads(), M, N, K, alpha,
              Av, B, beta, C, ldc);
}
#endif

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
    else if (v && !strcmp(v, "amx"))
        p = HS_GEMM_AMX;
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
    case HS_GEMM_AMX:
        return hs_amx_runs();
#endif
    default:
        return 0;
    }
}

/* 1 if OpenBLAS runs its AVX-512 kernels (not when OPENBLAS_CORETYPE
 * forces Haswell's, nor on a CPU without AVX-512). */
static int blas_avx512;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void read_blas_core(void)
{
    const char *core = openblas_get_corename(); /* "SkylakeX", "Haswell", ... */
    char low[32] = "";
    for (int i = 0; core && core[i] && i < 31; i++)
        low[i] = (char)(core[i] | 0x20); /* ASCII lower case */
    blas_avx512 = strstr(low, "skylakex") || strstr(low, "cooperlake") ||
                  strstr(low, "sapphire");
}

/* AUTO's choice, from docs/library.md's GEMM paths measured ("Own GEMM",
 * "Few-row GEMMs, regions that do not pay, narrow linears"). Against
 * OpenBLAS's AVX-512 kernels ours won on the attention's per-head score
 * products (B transposed, M <= 128, N <= 1024: 1.1-1.3x) and, on one thread,
 * at M > 128, N <= 512 with A not transposed (the forward and dinp of a
 * small model's d-wide outputs: 1.03-1.27x); it lost 5-25% on the wider
 * linears and the logits: OpenBLAS there. Against OpenBLAS on AVX2 kernels
 * (OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU) ours won every shape
 * measured (1.0-1.6x). On AVX2-only CPUs our AVX2 kernel only matched
 * OpenBLAS's: OpenBLAS. */
static hs_gemm_path auto_path(int ta, int tb, int M, int N, int K, int threads)
{
    pthread_once(&blas_once, read_blas_core);
    if (M <= SMALL_M) {
        /* A few rows (docs/library.md, "Few-row GEMMs"): ours read op(B) 1.0-3.5x
         * faster than OpenBLAS on its AVX-512 kernels once op(B) outgrows L2
         * (N K >= 2^20), and 1.0-6x on its AVX2 kernels at every shape; below
         * that OpenBLAS's small-matrix kernels were up to 20% faster. */
        if (blas_avx512 && (double)N * K < 1 << 20)
            return HS_GEMM_OPENBLAS;
        return hs_gemm_path_runs(HS_GEMM_AVX512) ? HS_GEMM_AVX512
               : hs_gemm_path_runs(HS_GEMM_AVX2) ? HS_GEMM_AVX2
                                                  : HS_GEMM_OPENBLAS;
    }
    /* AMX (docs/library.md, "AMX"): 1.1-1.6x OpenBLAS's AVX-512 kernels once
     * both operands are reused enough to pay for splitting them into bf16
     * parts; below 256 rows or 128 columns the packing outweighed it. Not
     * for the attention's per-head products inside its parallel loops: there
     * it made the 2-thread forward slower. */
    const int amx = M >= 256 && N >= 128 && K >= 64 && !omp_in_parallel();
    if (amx && hs_gemm_path_runs(HS_GEMM_AMX))
        return HS_GEMM_AMX;
    if (!hs_gemm_path_runs(HS_GEMM_AVX512))
        return HS_GEMM_OPENBLAS;
    const int per_head = tb && M <= 128 && N <= 1024;
    const int narrow = threads == 1 && !ta && M > 128 && N <= 512;
    if (blas_avx512 && !per_head && !narrow)
        return HS_GEMM_OPENBLAS;
    return HS_GEMM_AVX512;
}

/* B's rows (of cols elements) widened into a float copy with ld = cols, for
 * the paths that take floats (OpenBLAS, AMX); NULL without memory. */
static float *widened_copy(hs_bview B, int rows, int cols)
{
    float *f = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    for (int r = 0; f && r < rows; r++)
        wt_row(f + (size_t)r * cols, B.p, B.t, (size_t)r * B.ld, cols);
    return f;
}

#ifdef HS_GEMM_X86
#define KERNEL_AVX512 ((hs_kernel){ 12, 32, rows_avx512, cols_avx512, rows16_avx512, cols16_avx512 })
#define KERNEL_AVX2 ((hs_kernel){ 6, 16, rows_avx2, cols_avx2, rows16_avx2, cols16_avx2 })
#endif

/* hs_sgemm_typed, op(B) = Bv: with bias (N) non-NULL a linear layer's
 * forward (hs_sgemm_bias). */
static void sgemm(hs_gemm_path path, int ta, int M, int N, int K, float alpha, const float *A,
                  int lda, hs_bview Bv, float beta, const float *bias, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    const int tb = Bv.trans;
    if (!hs_gemm_path_runs(path))
        path = HS_GEMM_AUTO;
    /* Threads only where the work outweighs waking them (passive waits). */
    const int nt = omp_in_parallel() || 2.0 * M * N * K < 4e6 ? 1 : omp_get_max_threads();
    if (path == HS_GEMM_AUTO) {
        path = auto_path(ta, tb, M, N, K, nt);
        /* OpenBLAS would need a float copy of a 16-bit B, made on every
         * call (2 GB for an 8B model's unembedding); ours widens B as it
         * packs it: the 1B shape's eval of 512 tokens on a Zen 4 with
         * OpenBLAS's AVX-512 kernels 8.2 s against 9.3 at 2 threads, 15.5
         * against 15.7-16.2 at 1 (docs/perf.md) */
        if (Bv.t != HS_DT_F32 && path == HS_GEMM_OPENBLAS &&
            (M > SMALL_M || (double)N * K * sizeof(float) > 64.0 * (1 << 20)) &&
            hs_gemm_path_runs(HS_GEMM_AVX512))
            path = HS_GEMM_AVX512;
    }
#ifdef HS_GEMM_X86
    if (alpha != 0 && bf16_takes(ta, M, K, Bv)) {
        if (bias)
            for (int i = 0; i < M; i++)
                memcpy(C + (size_t)i * ldc, bias, sizeof(float) * (size_t)N);
        gemm_bf16(nt, M, N, K, alpha, A, lda, Bv, bias ? 1 : beta, C, ldc);
        return;
    }
#endif
    if (Bv.t != HS_DT_F32 && K > 0 && alpha != 0 &&
        (path == HS_GEMM_OPENBLAS || (path == HS_GEMM_AMX && M > SMALL_M) ||
         !hs_gemm_path_runs(HS_GEMM_AVX2))) {
        /* a path that reads floats only: the same call on B's float copy */
        const int rows = tb ? N : K, cols = tb ? K : N;
        float *f = widened_copy(Bv, rows, cols);
        if (f) {
            sgemm(path, ta, M, N, K, alpha, A, lda, (hs_bview){ f, cols, tb, HS_DT_F32, NULL, 0 }, beta,
                  bias, C, ldc);
            free(f);
            return;
        }
        path = HS_GEMM_AVX2; /* no memory for it: element by element below */
    }
    const float *B = Bv.t == HS_DT_F32 ? Bv.p : NULL;
    const int ldb = Bv.ld;
    if (path == HS_GEMM_AMX && M > SMALL_M && K > 0 && alpha != 0) {
        /* the AMX path starts C from zero or from the bias itself (no pass
         * over C); any other beta scales C first */
        float *ws = workspace(hs_amx_work_floats(nt));
        if (ws) {
            if (!bias && beta != 0 && beta != 1)
                scale_c(M, N, beta, C, ldc);
            hs_sgemm_amx(nt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta == 0, bias, C, ldc, ws);
            return;
        }
        path = HS_GEMM_OPENBLAS; /* no memory to pack into */
    }
    if (bias) {
        for (int i = 0; i < M; i++)
            memcpy(C + (size_t)i * ldc, bias, sizeof(float) * (size_t)N);
        beta = 1;
    }
    if (K <= 0 || alpha == 0) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    hs_kernel kd = { 0, 0, NULL, NULL, NULL, NULL };
    hs_small_fn small = NULL;
#ifdef HS_GEMM_X86
    if (path == HS_GEMM_AVX512 || path == HS_GEMM_AMX) /* AMX: few rows */
        kd = KERNEL_AVX512, small = small_avx512;
    else if (path == HS_GEMM_AVX2)
        kd = KERNEL_AVX2, small = small_avx2;
#endif
    if (!kd.rows) {
        if (B)
            openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        else
            gemm_naive(M, N, K, alpha, (hs_view){ A, lda, ta }, Bv, beta, C, ldc);
        return;
    }
    if (M <= SMALL_M && gemm_small(small, nt, ta, M, N, K, alpha, A, lda, Bv, beta, C, ldc))
        return;
    const hs_view Av = { A, lda, ta };
    if (nt == 1) {
        gemm_block(&kd, M, N, K, alpha, Av, Bv, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    gemm_part(gemm_block, &kd, omp_get_thread_num(), omp_get_num_threads(), M, N, K, alpha, Av,
              Bv, beta, C, ldc);
}

/* ---- pre-packed weights ---- */

/* Panels of 2 MiB or more go into 2 MiB pages (hs_huge_pages), smaller
 * ones 64-byte aligned. */
#define HUGE_PAGE ((size_t)2 << 20)

/* The panel width of the kernel this CPU runs (0: none of ours) */
static int packed_nr(void)
{
#ifdef HS_GEMM_X86
    if (hs_gemm_path_runs(HS_GEMM_AVX512))
        return 32;
    if (hs_gemm_path_runs(HS_GEMM_AVX2))
        return 16;
#endif
    return 0;
}

size_t hs_packed_bytes(hs_dtype t, int N, int K)
{
    const int nr = packed_nr();
    if ((t != HS_DT_F32 && t != HS_DT_BF16) || !nr || N <= 0 || K <= 0)
        return 0;
    const size_t raw = (size_t)(N + nr - 1) / nr * nr * (size_t)K * (t == HS_DT_F32 ? 4 : 2),
                 align = raw < HUGE_PAGE ? 64 : HUGE_PAGE;
    return (raw + align - 1) / align * align;
}

/* Panel p of K block pc.. (kc) of pk from its weight: columns j0.. of
 * op(B), those past N zero -- as the per-call packing makes it
 * (pack_b_panel), 16-bit weights through floats and back (exact; full
 * panels of B^T through the widening 8 x 8 transposes, 2.9x an element
 * loop's speed: (8192, 2048) 10.4 against 30.3 ms on Zen 4) */
static void pack_panel(const hs_packed *pk, int pc, int kc, int p)
{
    const int nr = pk->nr, j0 = p * nr, cols = pk->N - j0 < nr ? pk->N - j0 : nr;
    void *dst = (void *)(uintptr_t)packed_panel(pk, pc, kc, p);
#ifdef HS_GEMM_X86
    if (pk->pairs) {
        pack_b_bf16(dst, pk->src, pk->K, pc, j0, kc, cols);
        return;
    }
#endif
    const hs_bview B = { pk->src, pk->tb ? pk->K : pk->N, pk->tb, pk->t, NULL, 0 };
    if (pk->t == HS_DT_F32) {
        pack_b_panel(dst, B, pc, j0, kc, cols, nr);
        return;
    }
    float wide[KC * NR_MAX];
    uint16_t *d = dst;
    pack_b_panel(wide, B, pc, j0, kc, cols, nr);
    for (int i = 0; i < kc * nr; i++) {
        uint32_t u;
        memcpy(&u, &wide[i], sizeof u);
        d[i] = (uint16_t)(u >> 16);
    }
}

hs_packed *hs_pack_weight(const void *B, hs_dtype t, int tb, int N, int K)
{
    const size_t bytes = hs_packed_bytes(t, N, K);
    if (!bytes) {
        hs_fail(HS_EINVAL, "a weight of this type or on this CPU is not packed");
        return NULL;
    }
    hs_packed *pk = calloc(1, sizeof *pk);
    if (!pk || hs_mem_reserve(bytes, "pre-packed weights")) {
        free(pk);
        return NULL;
    }
    /* packed for the products the process computes now (hs_compute) */
    const int pairs =
        tb && t == HS_DT_BF16 && K % 2 == 0 && hs_gemm_compute() == HS_COMPUTE_BF16;
    *pk = (hs_packed){ .src = B, .t = t, .tb = tb != 0, .N = N, .K = K, .nr = packed_nr(),
                       .kstep = k_step(K, pairs ? KC_BF : KC), .pairs = pairs, .bytes = bytes };
    pk->npan = (N + pk->nr - 1) / pk->nr;
    pk->data = aligned_alloc(bytes < HUGE_PAGE ? 64 : HUGE_PAGE, bytes);
    if (!pk->data) {
        hs_mem_release(bytes);
        free(pk);
        hs_fail(HS_ENOMEM, "pre-packed weights: %zu bytes", bytes);
        return NULL;
    }
    hs_huge_pages(pk->data, bytes);
    const long nb = (K + pk->kstep - 1) / pk->kstep, n = nb * pk->npan;
#pragma omp parallel for schedule(dynamic, 8) if (n > 64)
    for (long q = 0; q < n; q++) {
        const int pc = (int)(q / pk->npan) * pk->kstep;
        pack_panel(pk, pc, K - pc < pk->kstep ? K - pc : pk->kstep, (int)(q % pk->npan));
    }
    return pk;
}

void hs_packed_free(hs_packed *pk)
{
    if (!pk)
        return;
    free(pk->data);
    hs_mem_release(pk->bytes);
    free(pk);
}

const void *hs_packed_source(const hs_packed *pk, int *N, int *K)
{
    *N = pk->N, *K = pk->K;
    return pk->src;
}

void hs_sgemm_packed(hs_gemm_path path, int ta, int M, int N, int K, float alpha, const float *A,
                     int lda, const hs_packed *pk, float beta, const float *bias, float *C, int ldc)
{
    hs_bview Bv = { pk->src, pk->tb ? pk->K : pk->N, pk->tb, pk->t, NULL, 0 };
    const hs_gemm_path mine = pk->nr == 32 ? HS_GEMM_AVX512 : HS_GEMM_AVX2;
#ifdef HS_GEMM_X86
    const int whole = M > SMALL_M && K > 0 && alpha != 0 && N == pk->N && K == pk->K,
              bf = bf16_takes(ta, M, K, Bv);
    if (bf || pk->pairs) { /* bfloat16 products read pairs' panels only */
        if (bf && pk->pairs && whole)
            Bv.pk = pk;
        sgemm(path, ta, M, N, K, alpha, A, lda, Bv, bias ? 1 : beta, bias, C, ldc);
        return;
    }
    const int ours = whole && (path == HS_GEMM_AUTO || path == mine);
#else
    const int ours = 0;
#endif
    if (!ours) {
        sgemm(path, ta, M, N, K, alpha, A, lda, Bv, bias ? 1 : beta, bias, C, ldc);
        return;
    }
#ifdef HS_GEMM_X86
    if (bias) {
        for (int i = 0; i < M; i++)
            memcpy(C + (size_t)i * ldc, bias, sizeof(float) * (size_t)N);
        beta = 1;
    }
    const hs_kernel kd = pk->nr == 32 ? KERNEL_AVX512 : KERNEL_AVX2;
    const int nt = omp_in_parallel() || 2.0 * M * N * K < 4e6 ? 1 : omp_get_max_threads();
    const hs_view Av = { A, lda, ta };
    Bv.pk = pk;
    if (nt == 1) {
        gemm_block(&kd, M, N, K, alpha, Av, Bv, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    gemm_part(gemm_block, &kd, omp_get_thread_num(), omp_get_num_threads(), M, N, K, alpha, Av,
              Bv, beta, C, ldc);
#endif
}

void hs_sgemm(hs_gemm_path path, int ta, int tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    sgemm(path, ta, M, N, K, alpha, A, lda, (hs_bview){ B, ldb, tb, HS_DT_F32, NULL, 0 }, beta, NULL, C,
          ldc);
}

void hs_sgemm_bias(hs_gemm_path path, int ta, int tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, const float *bias, float *C,
                   int ldc)
{
    sgemm(path, ta, M, N, K, alpha, A, lda, (hs_bview){ B, ldb, tb, HS_DT_F32, NULL, 0 }, 1, bias, C,
          ldc);
}

void hs_sgemm_typed(hs_gemm_path path, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const void *B, hs_dtype bt, int ldb, float beta,
                    const float *bias, float *C, int ldc)
{
    sgemm(path, ta, M, N, K, alpha, A, lda, (hs_bview){ B, ldb, tb, bt, NULL, 0 }, bias ? 1 : beta, bias,
          C, ldc);
}
