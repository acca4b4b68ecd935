/* The AMX path (gemm_amx.h). A tile is 16 rows of 64 bytes: an A tile
 * holds 16 rows of op(A) by 32 k as bf16; a B tile holds 16 k pairs by 16
 * columns of op(B), each 32-bit word a pair (k even in the low half), the
 * layout TDPBF16PS reads. Every tile is packed three times, once per split
 * part; a transposed operand goes through 16 x 16 transposes in registers.
 * The tile registers hold a 32 x 32 block of C (4 tiles), two A tiles (rows
 * i.. and i+16.. of one part) and two B tiles (two column blocks of one
 * part); each 32-deep k step runs the six part products as 24 tile products
 * over 16 tile loads.
 *
 * Two loop orders (GotoBLAS blocking, C accumulated in place by the tile
 * unit; measured in docs/library.md, "AMX"):
 *   k outer, for a C of at most 2 MB: k in blocks of KC; rows in blocks of
 *   MC, whose A block (3 x MC x KC bf16, 768 KB) is packed once per k block
 *   and stays in L2; columns in blocks of NB, whose B block (3 x KC x NB,
 *   192 KB) is packed once per row block; C is re-read once per k block.
 *   rows outer, for a larger C (GPT-2's logits: 51 MB): an A panel of up to
 *   512 rows for all of K (at most 4 MB), then B panels of up to NB columns
 *   for all of K (at most 1.5 MB), each 32 x 32 C block held in L2 while k
 *   runs; C is read and written once.
 * Inside both, the A tiles of 32 rows by KC (24 KB) stay in L1 while the B
 * tiles of the column block pass. Threads take contiguous column or row
 * ranges, whichever packs fewer entries per thread, each with its own
 * packing buffers: no barrier inside a call. */
#include "gemm_amx.h"

#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TARGET                                                                                 \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))

enum {
    KC = 128,   /* k per block: four 32-deep tile steps */
    MC = 1024,  /* rows per packed A block */
    NB = 256,   /* columns per packed B block */
    TILE = 512, /* bf16 per tile (16 x 64 bytes) */
    KT = KC / 32
};

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    const int tile = d >> 24 & 1, tile_bf16 = d >> 22 & 1;
    __cpuid_count(7, 1, a, b, c, d);
    const int bf16 = a >> 5 & 1;
    __builtin_cpu_init(); /* these two also ask whether the OS saves zmm */
    if (!(tile && tile_bf16 && bf16 && __builtin_cpu_supports("avx512f") &&
          __builtin_cpu_supports("avx512bw")))
        return;
    /* Linux enables tile data per process on request (ARCH_REQ_XCOMP_PERM,
     * XFEATURE_XTILEDATA); a kernel or emulator without it (valgrind) says
     * no. */
    amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

int hs_amx_runs(void)
{
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

/* The tile shapes: all eight 16 rows x 64 bytes. Loaded per call: the
 * configuration is per thread and released at the end of each call. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

static const amx_config config = {
    .palette = 1,
    .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 },
};

static inline __mmask16 first(int n)
{
    return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

static AMX_TARGET inline __m512 bf16_float(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* x0, x1 (32 consecutive values) = h[0] + h[1] + h[2], each h 32 bf16 in
 * the same order, each part rounded to nearest even from the remainder
 * (exact in float). An infinite or NaN x has NaN parts after the first
 * (Inf - Inf), so that everything it reaches is NaN. */
static AMX_TARGET inline void split32(__m512 x0, __m512 x1, __m512i h[3])
{
    for (int q = 0; q < 3; q++) {
        h[q] = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
        if (q < 2) {
            x0 = _mm512_sub_ps(x0, bf16_float(_mm512_castsi512_si256(h[q])));
            x1 = _mm512_sub_ps(x1, bf16_float(_mm512_extracti64x4_epi64(h[q], 1)));
        }
    }
}

/* 16 x 16 32-bit words, transposed in registers: four rounds that swap the
 * off-diagonal blocks of width 8, 4, 2 and 1 (round d: row i < i + d, bit d
 * of i clear, takes its entries with bit d set from row i + d). */
static const int32_t swap_lo[4][16] = {
    { 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23 },
    { 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27 },
    { 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29 },
    { 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30 },
};
static const int32_t swap_hi[4][16] = {
    { 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31 },
    { 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31 },
    { 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31 },
    { 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31 },
};

static AMX_TARGET inline __attribute__((always_inline)) void transpose16(__m512i w[16])
{
    for (int r = 0, d = 8; r < 4; r++, d /= 2) {
        const __m512i il = _mm512_loadu_si512(swap_lo[r]), ih = _mm512_loadu_si512(swap_hi[r]);
        for (int i = 0; i < 16; i++)
            if (!(i & d)) {
                const __m512i a = w[i], b = w[i + d];
                w[i] = _mm512_permutex2var_epi32(a, il, b);
                w[i + d] = _mm512_permutex2var_epi32(a, ih, b);
            }
    }
}

/* One 16 x 16-word block of tiles (the three parts, `part` bf16 apart) from
 * float source rows, scaled by s:
 *   line-major: source line r (< lines) holds 32 consecutive k (< ks):
 *     word [r][p] = (k 2p, k 2p+1);
 *   pair-major: source rows k (< ks) hold 16 consecutive entries (< lines):
 *     word [p][x] = (row 2p [x], row 2p+1 [x]);
 * then transposed if asked. Missing lines and k are zero. */
static AMX_TARGET void pack_tile(uint16_t *dst, size_t part, const float *src, long ld, int lines,
                                 int ks, int pair_major, int transpose, float s)
{
    static const short inter_idx[32] = { 0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                         21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                         11, 27, 12, 28, 13, 29, 14, 30, 15, 31 };
    const __m512i inter = _mm512_loadu_si512(inter_idx);
    const __m512 vs = _mm512_set1_ps(s);
    __m512i w[3][16];
    for (int r = 0; r < 16; r++) {
        __m512 x0, x1;
        if (!pair_major) {
            const float *p = src + (size_t)r * ld;
            const int on = r < lines;
            x0 = on ? _mm512_maskz_loadu_ps(first(ks), p) : _mm512_setzero_ps();
            x1 = on ? _mm512_maskz_loadu_ps(first(ks - 16), p + 16) : _mm512_setzero_ps();
        } else {
            const __mmask16 m = first(lines);
            x0 = 2 * r < ks ? _mm512_maskz_loadu_ps(m, src + (size_t)(2 * r) * ld)
                            : _mm512_setzero_ps();
            x1 = 2 * r + 1 < ks ? _mm512_maskz_loadu_ps(m, src + (size_t)(2 * r + 1) * ld)
                                : _mm512_setzero_ps();
        }
        __m512i h[3];
        split32(_mm512_mul_ps(x0, vs), _mm512_mul_ps(x1, vs), h);
        for (int q = 0; q < 3; q++)
            w[q][r] = pair_major ? _mm512_permutexvar_epi16(inter, h[q]) : h[q];
    }
    for (int q = 0; q < 3; q++) {
        if (transpose)
            transpose16(w[q]);
        for (int r = 0; r < 16; r++)
            _mm512_storeu_si512(dst + q * part + r * 32, w[q][r]);
    }
}

/* op(A) rows i0.. (rows of them), k0.. (ks of them) -> A tiles [it][kt],
 * kst tiles from one row tile to the next. */
static AMX_TARGET void pack_a(uint16_t *dst, size_t part, int kst, int ta, const float *A, int lda,
                              int i0, int rows, int k0, int ks, float alpha)
{
    const int kts = (ks + 31) / 32;
    for (int it = 0; it * 16 < (rows + 31) / 32 * 32; it++) /* whole 32-row pairs */
        for (int kt = 0; kt < kts; kt++) {
            const int i = i0 + it * 16, k = k0 + kt * 32;
            uint16_t *t = dst + ((size_t)it * kst + kt) * TILE;
            if (!ta) /* rows of A are contiguous in k */
                pack_tile(t, part, A + (size_t)i * lda + k, lda, rows - it * 16, ks - kt * 32, 0,
                          0, alpha);
            else /* A (K,M): rows k, contiguous in i */
                pack_tile(t, part, A + (size_t)k * lda + i, lda, rows - it * 16, ks - kt * 32, 1,
                          1, alpha);
        }
}

/* op(B) k0.. (ks), columns j0.. (cols) -> B tiles [jt][kt], kst tiles
 * from one column tile to the next. */
static AMX_TARGET void pack_b(uint16_t *dst, size_t part, int kst, int tb, const float *B, int ldb,
                              int k0, int ks, int j0, int cols)
{
    const int kts = (ks + 31) / 32;
    for (int jt = 0; jt * 16 < (cols + 31) / 32 * 32; jt++) /* whole 32-column pairs */
        for (int kt = 0; kt < kts; kt++) {
            const int j = j0 + jt * 16, k = k0 + kt * 32;
            uint16_t *t = dst + ((size_t)jt * kst + kt) * TILE;
            if (!tb) /* B (K,N): rows k, contiguous in j */
                pack_tile(t, part, B + (size_t)k * ldb + j, ldb, cols - jt * 16, ks - kt * 32, 1,
                          0, 1);
            else /* B (N,K): rows j, contiguous in k */
                pack_tile(t, part, B + (size_t)j * ldb + k, ldb, cols - jt * 16, ks - kt * 32, 0,
                          1, 1);
        }
}

/* The six part products of one 32-deep k step into C tiles 0-3:
 * a (two row tiles, rs apart; parts pa apart), b (two column tiles, cs
 * apart; parts pb apart). */
#define AMX_STEP4()                                                                                \
    do {                                                                                           \
        _tile_dpbf16ps(0, 4, 6);                                                                   \
        _tile_dpbf16ps(1, 4, 7);                                                                   \
        _tile_dpbf16ps(2, 5, 6);                                                                   \
        _tile_dpbf16ps(3, 5, 7);                                                                   \
    } while (0)

static AMX_TARGET inline __attribute__((always_inline)) void
amx_step(const uint16_t *a, size_t rs, size_t pa, const uint16_t *b, size_t cs, size_t pb)
{
    _tile_loadd(4, a, 64); /* a0 */
    _tile_loadd(5, a + rs, 64);
    _tile_loadd(6, b, 64); /* b0 */
    _tile_loadd(7, b + cs, 64);
    AMX_STEP4();
    _tile_loadd(6, b + pb, 64); /* b1 */
    _tile_loadd(7, b + pb + cs, 64);
    AMX_STEP4();
    _tile_loadd(6, b + 2 * pb, 64); /* b2 */
    _tile_loadd(7, b + 2 * pb + cs, 64);
    AMX_STEP4();
    _tile_loadd(4, a + pa, 64); /* a1 */
    _tile_loadd(5, a + pa + rs, 64);
    _tile_loadd(6, b + pb, 64); /* b1 */
    _tile_loadd(7, b + pb + cs, 64);
    AMX_STEP4();
    _tile_loadd(6, b, 64); /* b0 */
    _tile_loadd(7, b + cs, 64);
    AMX_STEP4();
    _tile_loadd(4, a + 2 * pa, 64); /* a2 */
    _tile_loadd(5, a + 2 * pa + rs, 64);
    AMX_STEP4();
}

/* Where C starts on the first k block: from zero (beta 0), from a bias row
 * repeated down every row (bias: its column j0 .. ), or as it is. */
typedef struct {
    int zero;
    const float *bias;
} c_start;

static c_start start_at(c_start st, int j)
{
    if (st.bias)
        st.bias += j;
    return st;
}

/* C rows i0.. (m <= 32), columns j0.. (n <= 32) += the packed product over
 * kts k tiles of a (row tiles ra apart, parts pa apart) and b (column tiles
 * cb apart, parts pb apart); on the first k block C starts as st says. A
 * block that is not a full 32 x 32 inside C goes through edge (32 x 32). A
 * bias row is loaded with a stride of 0: one row repeated 16 times. */
static AMX_TARGET void amx_block(const uint16_t *a, size_t ra, size_t pa, const uint16_t *b,
                                 size_t cb, size_t pb, int kts, float *C, int ldc, int m, int n,
                                 int first_k, c_start st, float *edge)
{
    const int full = m == 32 && n == 32, zero = first_k && st.zero && !st.bias;
    const float *bias = first_k ? st.bias : NULL;
    float *c = C;
    long ld = (long)ldc * 4;
    if (!full) {
        c = edge, ld = 32 * 4;
        for (int r = 0; r < 32; r++)
            for (int h = 0; h < 2; h++) {
                const __mmask16 mk = r < m ? first(n - 16 * h) : 0;
                const __m512 v = zero   ? _mm512_setzero_ps()
                                 : bias ? _mm512_maskz_loadu_ps(mk, bias + 16 * h)
                                        : _mm512_maskz_loadu_ps(mk, C + (size_t)r * ldc + 16 * h);
                _mm512_storeu_ps(edge + r * 32 + 16 * h, v);
            }
    }
    const long cr = ld / 4 * 16; /* C's rows 16 down */
    if (zero && full) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    } else if (bias && full) {
        _tile_loadd(0, bias, 0);
        _tile_loadd(1, bias + 16, 0);
        _tile_loadd(2, bias, 0);
        _tile_loadd(3, bias + 16, 0);
    } else {
        _tile_loadd(0, c, ld);
        _tile_loadd(1, c + 16, ld);
        _tile_loadd(2, c + cr, ld);
        _tile_loadd(3, c + cr + 16, ld);
    }
    for (int kt = 0; kt < kts; kt++)
        amx_step(a + (size_t)kt * TILE, ra, pa, b + (size_t)kt * TILE, cb, pb);
    _tile_stored(0, c, ld);
    _tile_stored(1, c + 16, ld);
    _tile_stored(2, c + cr, ld);
    _tile_stored(3, c + cr + 16, ld);
    if (!full)
        for (int r = 0; r < m; r++)
            for (int h = 0; h < 2; h++)
                _mm512_mask_storeu_ps(C + (size_t)r * ldc + 16 * h, first(n - 16 * h),
                                      _mm512_loadu_ps(edge + r * 32 + 16 * h));
}

/* C blocks larger than this (bytes) are not re-read once per k block: the
 * rows of A are packed for all of K first, then B's for all of K one column
 * block at a time, and each C block stays in L2 while k runs (the logits
 * and fc forward of GPT-2's shape: 51 MB and 3 MB of C). */
enum {
    C_IN_L2 = 2 << 20,
    A_PANEL = 4 << 20,       /* bytes of packed A for all K */
    B_PANEL = 3 << 19,       /* bytes of packed B for all K (1.5 MB) */
    PANEL_BF16 = (A_PANEL + B_PANEL) / 2,
    BLOCK_BF16 = 3 * (MC * KC + KC * NB)
};

/* Rows of the A panel (columns of the B panel) for all of K: a multiple
 * of 32, at most 512 (256); 0 when K is too long for 32. */
static int panel_rows(int K)
{
    const int kp = (K + 31) / 32 * 32, mc = (int)(A_PANEL / 6 / kp) / 32 * 32;
    return mc > 512 ? 512 : mc;
}

static int panel_cols(int K)
{
    const int kp = (K + 31) / 32 * 32, nc = (int)(B_PANEL / 6 / kp) / 32 * 32;
    return nc > NB ? NB : nc;
}

/* Per thread: the packed operands (three parts each) and an edge block. */
static size_t thread_floats(void)
{
    return (PANEL_BF16 > BLOCK_BF16 ? PANEL_BF16 : BLOCK_BF16) / 2 + 32 * 32 + 16;
}

/* The serial GEMM of one thread's sub-problem; C starts as st says (C
 * itself holding beta C). */
static AMX_TARGET void amx_serial(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                  int lda, const float *B, int ldb, c_start st, float *C, int ldc,
                                  float *work)
{
    uint16_t *ap = (uint16_t *)work;
    float *edge = (float *)(((uintptr_t)(work + thread_floats() - 32 * 32 - 16) + 63) &
                            ~(uintptr_t)63);
    const int kp = (K + 31) / 32 * 32, kpt = kp / 32, mc = panel_rows(K), nc = panel_cols(K);
    if ((double)M * N * 4 > C_IN_L2 && nc >= 32) {
        /* rows outer: A panel (mc rows), B panels (nc columns), k inside */
        uint16_t *bp = ap + (size_t)3 * mc * kp;
        const size_t pa = (size_t)mc * kp, pb = (size_t)nc * kp;
        for (int i0 = 0; i0 < M; i0 += mc) {
            const int m = M - i0 < mc ? M - i0 : mc;
            pack_a(ap, pa, kpt, ta, A, lda, i0, m, 0, K, alpha);
            for (int j0 = 0; j0 < N; j0 += nc) {
                const int n = N - j0 < nc ? N - j0 : nc;
                pack_b(bp, pb, kpt, tb, B, ldb, 0, K, j0, n);
                for (int k0 = 0; k0 < K; k0 += KC) {
                    const int kts = ((K - k0 < KC ? K - k0 : KC) + 31) / 32;
                    for (int i = 0; i < m; i += 32)
                        for (int j = 0; j < n; j += 32)
                            amx_block(ap + ((size_t)(i / 16) * kpt + k0 / 32) * TILE,
                                      (size_t)kpt * TILE, pa,
                                      bp + ((size_t)(j / 16) * kpt + k0 / 32) * TILE,
                                      (size_t)kpt * TILE, pb, kts,
                                      C + (size_t)(i0 + i) * ldc + j0 + j, ldc,
                                      m - i < 32 ? m - i : 32, n - j < 32 ? n - j : 32,
                                      k0 == 0, start_at(st, j0 + j), edge);
                }
            }
        }
        return;
    }
    /* k outer: C (small, or K too long for a panel) is re-read per k block */
    uint16_t *bp = ap + (size_t)3 * MC * KC;
    const size_t pa = (size_t)MC * KC, pb = (size_t)KC * NB;
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int ks = K - k0 < KC ? K - k0 : KC, kts = (ks + 31) / 32;
        for (int i0 = 0; i0 < M; i0 += MC) {
            const int m = M - i0 < MC ? M - i0 : MC;
            pack_a(ap, pa, KT, ta, A, lda, i0, m, k0, ks, alpha);
            for (int j0 = 0; j0 < N; j0 += NB) {
                const int n = N - j0 < NB ? N - j0 : NB;
                pack_b(bp, pb, KT, tb, B, ldb, k0, ks, j0, n);
                for (int i = 0; i < m; i += 32)
                    for (int j = 0; j < n; j += 32)
                        amx_block(ap + (size_t)(i / 16) * KT * TILE, (size_t)KT * TILE, pa,
                                  bp + (size_t)(j / 16) * KT * TILE, (size_t)KT * TILE, pb, kts,
                                  C + (size_t)(i0 + i) * ldc + j0 + j, ldc,
                                  m - i < 32 ? m - i : 32, n - j < 32 ? n - j : 32, k0 == 0,
                                  start_at(st, j0 + j), edge);
            }
        }
    }
}

static AMX_TARGET void amx_part(int t, int nt, int ta, int tb, int M, int N, int K, float alpha,
                                const float *A, int lda, const float *B, int ldb, c_start st,
                                float *C, int ldc, float *work)
{
    _tile_loadconfig(&config);
    /* Each thread packs all of the operand it shares: split N when that
     * packs fewer entries per thread (all of A, 1/nt of B) than splitting M
     * (1/nt of A, all of B). */
    const int nblk = (N + 31) / 32, mblk = (M + 31) / 32;
    const double by_n = (double)M * K + (double)K * N / nt;
    const double by_m = (double)M * K / nt + (double)K * N;
    if (nt == 1 || (nblk >= nt && (by_n <= by_m || mblk < nt))) {
        const int j0 = nblk * t / nt * 32, j1 = nblk * (t + 1) / nt * 32;
        const int n = (j1 < N ? j1 : N) - j0;
        if (n > 0)
            amx_serial(ta, tb, M, n, K, alpha, A, lda, tb ? B + (size_t)j0 * ldb : B + j0, ldb,
                       start_at(st, j0), C + j0, ldc, work);
    } else {
        const int i0 = mblk * t / nt * 32, i1 = mblk * (t + 1) / nt * 32;
        const int m = (i1 < M ? i1 : M) - i0;
        if (m > 0)
            amx_serial(ta, tb, m, N, K, alpha, ta ? A + i0 : A + (size_t)i0 * lda, lda, B, ldb, st,
                       C + (size_t)i0 * ldc, ldc, work);
    }
    _tile_release();
}

size_t hs_amx_work_floats(int nt)
{
    return thread_floats() * (size_t)nt;
}

void hs_sgemm_amx(int nt, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, int zero, const float *bias, float *C, int ldc,
                  float *work)
{
    const c_start st = { zero, bias };
    if (nt == 1) {
        amx_part(0, 1, ta, tb, M, N, K, alpha, A, lda, B, ldb, st, C, ldc, work);
        return;
    }
#pragma omp parallel num_threads(nt)
    amx_part(omp_get_thread_num(), omp_get_num_threads(), ta, tb, M, N, K, alpha, A, lda, B, ldb,
             st, C, ldc, work + thread_floats() * (size_t)omp_get_thread_num());
}

#else /* not x86-64 with GCC or clang: no AMX */

int hs_amx_runs(void) { return 0; }

size_t hs_amx_work_floats(int nt)
{
    (void)nt;
    return 0;
}

void hs_sgemm_amx(int nt, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, int zero, const float *bias, float *C, int ldc,
                  float *work)
{
    (void)nt, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)zero, (void)bias, (void)C, (void)ldc, (void)work;
}

#endif
