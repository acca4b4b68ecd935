#include "layers.h"

#include <math.h>
#include <string.h>

#include "linalg.h"
#include "stored.h"

/* One LayerNorm row: o = (x - mean) rstd w (+ b). Two passes over x for the
 * statistics (in L1 by then), then one for the output. */
static inline void layernorm_row(hs_real *restrict o, hs_real *mean, hs_real *rstd,
                                 const hs_real *restrict x, const hs_real *restrict w,
                                 const hs_real *restrict b, int C, double eps)
{
    hs_real m = 0, v = 0;
#pragma omp simd reduction(+ : m)
    for (int i = 0; i < C; i++)
        m += x[i];
    m /= C;
#pragma omp simd reduction(+ : v)
    for (int i = 0; i < C; i++)
        v += (x[i] - m) * (x[i] - m);
    const hs_real s = (hs_real)(1 / sqrt((double)v / C + eps));
    if (b) {
#pragma omp simd
        for (int i = 0; i < C; i++)
            o[i] = (x[i] - m) * s * w[i] + b[i];
    } else {
#pragma omp simd
        for (int i = 0; i < C; i++)
            o[i] = (x[i] - m) * s * w[i];
    }
    *mean = m;
    *rstd = s;
}

void hs_layernorm_forward(hs_real *out, hs_real *mean, hs_real *rstd, const hs_real *inp,
                          const hs_real *w, const hs_real *b, size_t N, int C, double eps)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, C))
    for (size_t n = 0; n < N; n++)
        layernorm_row(out + n * C, mean + n, rstd + n, inp + n * C, w, b, C, eps);
}

/* Row n of sum = x + y (rows of C); returns the row. */
static inline hs_real *add_row(hs_real *sum, const hs_real *x, const hs_real *y, size_t n, int C)
{
    hs_real *r = sum + n * C;
    const hs_real *xr = x + n * C, *yr = y + n * C;
#pragma omp simd
    for (int i = 0; i < C; i++)
        r[i] = xr[i] + yr[i];
    return r;
}

void hs_add_layernorm_forward(hs_real *sum, hs_real *out, hs_real *mean, hs_real *rstd,
                              const hs_real *x, const hs_real *y, const hs_real *w,
                              const hs_real *b, size_t N, int C, double eps)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, C))
    for (size_t n = 0; n < N; n++) {
        hs_real *r = add_row(sum, x, y, n, C);
        layernorm_row(out + n * C, mean + n, rstd + n, r, w, b, C, eps);
    }
}

/* dx = base + the LayerNorm backward of dy, row by row; base may be dx
 * itself (accumulate) or NULL (overwrite). dw/db are column sums after. */
static void layernorm_backward(hs_real *dinp, const hs_real *base, hs_real *dw, hs_real *db,
                               const hs_real *dout, const hs_real *inp, const hs_real *w,
                               const hs_real *mean, const hs_real *rstd, size_t N, int C)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, C))
    for (size_t n = 0; n < N; n++) {
        const hs_real *x = inp + n * C, *dy = dout + n * C;
        const hs_real m = mean[n], s = rstd[n];
        hs_real mean_g = 0, mean_gx = 0;
#pragma omp simd reduction(+ : mean_g, mean_gx)
        for (int i = 0; i < C; i++) {
            hs_real g = dy[i] * w[i];
            mean_g += g;
            mean_gx += g * (x[i] - m) * s;
        }
        mean_g /= C;
        mean_gx /= C;
        hs_real *dx = dinp + n * C;
        /* omp simd: dx may be base (element i reads and writes only i) */
        if (base) {
            const hs_real *r = base + n * C;
#pragma omp simd
            for (int i = 0; i < C; i++)
                dx[i] = r[i] + (dy[i] * w[i] - mean_g - (x[i] - m) * s * mean_gx) * s;
        } else {
#pragma omp simd
            for (int i = 0; i < C; i++)
                dx[i] = (dy[i] * w[i] - mean_g - (x[i] - m) * s * mean_gx) * s;
        }
    }
    if (!dw && !db)
        return;
    enum { COLS = 64 };
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, C))
    for (int i0 = 0; i0 < C; i0 += COLS) {
        const int i1 = i0 + COLS < C ? i0 + COLS : C;
        hs_real sw[COLS] = { 0 }, sb[COLS] = { 0 };
        for (size_t n = 0; n < N; n++) {
            const hs_real *x = inp + n * C, *dy = dout + n * C;
            const hs_real m = mean[n], s = rstd[n];
            for (int i = i0; i < i1; i++) {
                sw[i - i0] += dy[i] * (x[i] - m) * s;
                sb[i - i0] += dy[i];
            }
        }
        for (int i = i0; i < i1; i++) {
            if (dw)
                dw[i] += sw[i - i0];
            if (db)
                db[i] += sb[i - i0];
        }
    }
}

void hs_layernorm_backward(hs_real *dinp, hs_real *dw, hs_real *db, const hs_real *dout,
                           const hs_real *inp, const hs_real *w, const hs_real *mean,
                           const hs_real *rstd, size_t N, int C)
{
    layernorm_backward(dinp, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

void hs_layernorm_backward_into(hs_real *dinp, const hs_real *base, hs_real *dw, hs_real *db,
                                const hs_real *dout, const hs_real *inp, const hs_real *w,
                                const hs_real *mean, const hs_real *rstd, size_t N, int C)
{
    layernorm_backward(dinp, base, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* One RMSNorm row: o = x rstd (w + offset). o may be x (element i reads
 * only x[i] once the sum is formed); rstd may be NULL. */
static inline void rmsnorm_row(hs_real *o, hs_real *rstd, const hs_real *x, const hs_real *w,
                               hs_real offset, int C, double eps)
{
    hs_real ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < C; i++)
        ss += x[i] * x[i];
    const hs_real s = (hs_real)(1 / sqrt((double)ss / C + eps));
#pragma omp simd
    for (int i = 0; i < C; i++)
        o[i] = x[i] * s * (w[i] + offset);
    if (rstd)
        *rstd = s;
}

void hs_rmsnorm_rows(hs_real *out, hs_real *rstd, const hs_real *inp, const hs_real *w,
                     hs_real offset, size_t N, int C, double eps)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, C))
    for (size_t n = 0; n < N; n++)
        rmsnorm_row(out + n * C, rstd ? rstd + n : NULL, inp + n * C, w, offset, C, eps);
}

void hs_rmsnorm_forward(hs_real *out, hs_real *rstd, const hs_real *inp, const hs_real *w,
                        size_t N, int C, double eps)
{
    hs_rmsnorm_rows(out, rstd, inp, w, 0, N, C, eps);
}

void hs_add_rmsnorm_forward_off(hs_real *sum, hs_real *out, hs_real *rstd, const hs_real *x,
                                const hs_real *y, const hs_real *w, hs_real offset, size_t N,
                                int C, double eps)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, C))
    for (size_t n = 0; n < N; n++) {
        hs_real *r = add_row(sum, x, y, n, C);
        rmsnorm_row(out + n * C, rstd + n, r, w, offset, C, eps);
    }
}

void hs_add_rmsnorm_forward(hs_real *sum, hs_real *out, hs_real *rstd, const hs_real *x,
                            const hs_real *y, const hs_real *w, size_t N, int C, double eps)
{
    hs_add_rmsnorm_forward_off(sum, out, rstd, x, y, w, 0, N, C, eps);
}

void hs_rmsnorm_backward_off(hs_real *dinp, const hs_real *base, hs_real *dw,
                             const hs_real *dout, const hs_real *inp, const hs_real *w,
                             hs_real offset, const hs_real *rstd, size_t N, int C)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, C))
    for (size_t n = 0; n < N; n++) {
        const hs_real *x = inp + n * C, *dy = dout + n * C;
        const hs_real s = rstd[n];
        hs_real mean_gx = 0;
#pragma omp simd reduction(+ : mean_gx)
        for (int i = 0; i < C; i++)
            mean_gx += dy[i] * (w[i] + offset) * x[i] * s;
        mean_gx /= C;
        hs_real *dx = dinp + n * C;
        if (base) {
            const hs_real *r = base + n * C;
#pragma omp simd
            for (int i = 0; i < C; i++)
                dx[i] = r[i] + (dy[i] * (w[i] + offset) - x[i] * s * mean_gx) * s;
        } else {
#pragma omp simd
            for (int i = 0; i < C; i++)
                dx[i] = (dy[i] * (w[i] + offset) - x[i] * s * mean_gx) * s;
        }
    }
    if (!dw)
        return;
    enum { COLS = 64 };
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, C))
    for (int i0 = 0; i0 < C; i0 += COLS) {
        const int i1 = i0 + COLS < C ? i0 + COLS : C;
        hs_real sw[COLS] = { 0 };
        for (size_t n = 0; n < N; n++)
            for (int i = i0; i < i1; i++)
                sw[i - i0] += dout[n * C + i] * inp[n * C + i] * rstd[n];
        for (int i = i0; i < i1; i++)
            dw[i] += sw[i - i0];
    }
}

void hs_rmsnorm_backward(hs_real *dinp, hs_real *dw, const hs_real *dout, const hs_real *inp,
                         const hs_real *w, const hs_real *rstd, size_t N, int C)
{
    hs_rmsnorm_backward_off(dinp, dinp, dw, dout, inp, w, 0, rstd, N, C);
}

void hs_rmsnorm_backward_into(hs_real *dinp, const hs_real *base, hs_real *dw,
                              const hs_real *dout, const hs_real *inp, const hs_real *w,
                              const hs_real *rstd, size_t N, int C)
{
    hs_rmsnorm_backward_off(dinp, base, dw, dout, inp, w, 0, rstd, N, C);
}

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_C 0.044715

/* gelu_new through the logistic function: 0.5 (1 + tanh u) = sigmoid(2u),
 * with e = exp(-2|u|) (never overflows) and sigmoid(2u) = 1/(1+e) for u >= 0,
 * e/(1+e) below: one exp and one division, a select rather than a branch, and
 * no cancellation in 1 + tanh u for large negative x. Returns sigmoid(2u). */
static inline hs_real gelu_sig(hs_real x)
{
    const hs_real u = (hs_real)GELU_K * (x + (hs_real)GELU_C * x * x * x);
    const hs_real au = u < 0 ? -u : u;
    const hs_real e = hs_exp_nonpos(-2 * au);
    const hs_real num = u < 0 ? e : 1;
    return num / (1 + e);
}

HS_WIDE void hs_gelu_forward(hs_real *restrict out, const hs_real *restrict inp, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] * gelu_sig(inp[i]);
}

/* d/dx x s(x) with s = sigmoid(2u): s + x 2 s (1 - s) u'(x), since
 * 0.5 sech^2 u = 2 s (1 - s). */
static inline hs_real gelu_grad(hs_real x)
{
    const hs_real s = gelu_sig(x);
    return s + 2 * x * s * (1 - s) * (hs_real)GELU_K * (1 + (hs_real)(3 * GELU_C) * x * x);
}

HS_WIDE void hs_gelu_backward(hs_real *dinp, const hs_real *inp, const hs_real *dout, size_t n)
{
    /* omp simd: dinp may be dout (element i reads and writes only i) */
#pragma omp parallel for simd schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        dinp[i] += gelu_grad(inp[i]) * dout[i];
}

HS_WIDE void hs_gelu_backward_inplace(hs_real *d, const hs_real *inp, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        d[i] *= gelu_grad(inp[i]);
}

#define INV_SQRT2 0.7071067811865476 /* 1/sqrt(2) */
#define INV_SQRT2PI 0.3989422804014327 /* 1/sqrt(2 pi) */

/* The float build's exact GELU loops call glibc's vector erf and exp
 * (libmvec, glibc >= 2.35): within 5e-11 relative of the scalar ones, so
 * every float result is the same (checked over 4M inputs in [-6, 6]); the
 * double build keeps the scalar calls, whose last bits it is checked on. */
#if !defined(HEADSCOPE_DOUBLE) && defined(__x86_64__) && defined(_OPENMP) && \
    defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#pragma omp declare simd notinbranch
extern double erf(double);
#pragma omp declare simd notinbranch
extern double exp(double);
#define GELU_SIMD _Pragma("omp parallel for simd schedule(static) if (n >= HS_PAR_MIN)")
#else
#define GELU_SIMD _Pragma("omp parallel for schedule(static) if (n >= HS_PAR_MIN)")
#endif

/* x Phi(x) with Phi the normal CDF through erf, and its derivative, in
 * double: an exact erf is what torch's GELU (approximate='none') computes. */
static inline double gelu_erf(double x) { return 0.5 * x * (1 + erf(x * INV_SQRT2)); }

static inline double gelu_erf_grad(double x)
{
    return 0.5 * (1 + erf(x * INV_SQRT2)) + x * INV_SQRT2PI * exp(-0.5 * x * x);
}

void hs_gelu_erf_forward(hs_real *out, const hs_real *inp, size_t n)
{
    GELU_SIMD
    for (size_t i = 0; i < n; i++)
        out[i] = (hs_real)gelu_erf(inp[i]);
}

void hs_gelu_erf_backward(hs_real *dinp, const hs_real *inp, const hs_real *dout, size_t n)
{
    GELU_SIMD
    for (size_t i = 0; i < n; i++)
        dinp[i] += (hs_real)(gelu_erf_grad(inp[i]) * dout[i]);
}

/* gelu(x) and gelu'(x), by the tanh formula or the exact erf one. */
static inline hs_real gelu_value(hs_real x, int exact)
{
    return exact ? (hs_real)gelu_erf(x) : x * gelu_sig(x);
}

static inline hs_real gelu_slope(hs_real x, int exact)
{
    return exact ? (hs_real)gelu_erf_grad(x) : gelu_grad(x);
}

void hs_geglu_forward(hs_real *out, const hs_real *gate, const hs_real *up, size_t n, int exact)
{
#pragma omp parallel for schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = gelu_value(gate[i], exact) * up[i];
}

void hs_geglu_backward(hs_real *dgate, hs_real *dup, const hs_real *dout, const hs_real *gate,
                       const hs_real *up, size_t n, int exact)
{
#pragma omp parallel for schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        dup[i] += gelu_value(gate[i], exact) * dout[i];
        dgate[i] += up[i] * dout[i] * gelu_slope(gate[i], exact);
    }
}

/* 1 / (1 + e^-g) through an exp of a non-positive argument (no overflow). */
static inline hs_real sigmoid(hs_real g)
{
    hs_real e = hs_exp_nonpos(g < 0 ? g : -g);
    return g < 0 ? e / (1 + e) : 1 / (1 + e);
}

void hs_swiglu_forward(hs_real *out, const hs_real *gate, const hs_real *up, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        out[i] = gate[i] * sigmoid(gate[i]) * up[i];
    }
}

void hs_swiglu_backward(hs_real *dgate, hs_real *dup, const hs_real *dout, const hs_real *gate,
                        const hs_real *up, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        hs_real g = gate[i], sig = sigmoid(g);
        dup[i] += g * sig * dout[i];
        dgate[i] += up[i] * dout[i] * sig * (1 + g * (1 - sig));
    }
}

void hs_embed_forward(hs_real *x, const int32_t *tokens, const hs_real *wte, const hs_real *wpe,
                      int B, int T, int C)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS((size_t)B * T, C))
    for (int bt = 0; bt < B * T; bt++) {
        const hs_real *p = wpe ? wpe + (size_t)(bt % T) * C : NULL;
        hs_real *o = x + (size_t)bt * C;
        hs_stored_read(o, wte + (size_t)tokens[bt] * C, (size_t)C); /* the row, widened */
        if (p)
            for (int i = 0; i < C; i++)
                o[i] += p[i];
    }
}

void hs_embed_backward(hs_real *dwte, hs_real *dwpe, const hs_real *dx, const int32_t *tokens,
                       int B, int T, int C)
{
    /* Parallel over channels: a token may repeat, so rows of dwte would race. */
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS((size_t)B * T, C))
    for (int i = 0; i < C; i++)
        for (int bt = 0; bt < B * T; bt++) {
            hs_real g = dx[(size_t)bt * C + i];
            dwte[(size_t)tokens[bt] * C + i] += g;
            if (dwpe)
                dwpe[(size_t)(bt % T) * C + i] += g;
        }
}

HS_WIDE void hs_softmax_xent_forward(hs_real *probs, hs_real *losses, const int32_t *targets,
                                     size_t N, int V)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, V))
    for (size_t n = 0; n < N; n++) {
        hs_real *restrict row = probs + n * V;
        const int ignored = targets[n] < 0; /* HS_TARGET_IGNORE: no loss at this row */
        const hs_real logit = ignored ? 0 : row[targets[n]];
        hs_real mx = row[0], sum = 0;
#pragma omp simd reduction(max : mx)
        for (int v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++)
            sum += row[v] = hs_exp_nonpos(row[v] - mx);
        /* The loss from the log-sum-exp rather than log(p): exact for
         * confident rows whose target probability would round to 1. */
        losses[n] = ignored ? 0 : (hs_real)(log((double)sum) + mx - logit);
        const hs_real inv = 1 / sum;
#pragma omp simd
        for (int v = 0; v < V; v++)
            row[v] *= inv;
    }
}

HS_WIDE void hs_softmax_xent_backward(hs_real *dlogits, const hs_real *probs,
                                      const int32_t *targets, size_t N, int V, hs_real scale)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, V))
    for (size_t n = 0; n < N; n++) {
        hs_real *d = dlogits + n * V;
        const hs_real *p = probs + n * V;
        const hs_real s = targets[n] < 0 ? 0 : scale; /* an ignored row: no gradient */
        /* omp simd: d may be p (in place, element v reads and writes v) */
#pragma omp simd
        for (int v = 0; v < V; v++)
            d[v] = p[v] * s;
        if (targets[n] >= 0)
            d[targets[n]] -= scale;
    }
}

void hs_softcap_forward(hs_real *x, double cap, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        x[i] = (hs_real)(cap * tanh((double)x[i] / cap));
}

void hs_softcap_xent_backward(hs_real *dlogits, const hs_real *probs, const hs_real *lse,
                              const int32_t *targets, size_t N, int V, hs_real scale, double cap)
{
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, V))
    for (size_t n = 0; n < N; n++) {
        hs_real *d = dlogits + n * V;
        const hs_real *p = probs + n * V;
        for (int v = 0; v < V; v++) {
            const double pv = p[v];
            double g = targets[n] < 0 ? 0 : (pv - (v == targets[n])) * scale;
            if (pv > 0) { /* p = 0: no gradient but the target's, whose loss is infinite */
                const double t = (log(pv) + lse[n]) / cap;
                g *= 1 - t * t;
            }
            d[v] = (hs_real)g;
        }
    }
}

void hs_scale(hs_real *x, hs_real s, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

void hs_add(hs_real *out, const hs_real *a, const hs_real *b, size_t n)
{
    /* omp simd: out may be a or b (element i reads and writes only i) */
#pragma omp parallel for simd schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* Every vector's first R dims between the pair orders: (2k, 2k + 1) to
 * (k, k + R/2) (to_half), or back. */
static void rope_permute(hs_real *x, int B, int T, int nh, size_t ld, size_t hd, int R,
                         int to_half)
{
    const size_t N = (size_t)B * T;
    const int half = R / 2;
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS(N, (size_t)nh * R))
    for (size_t i = 0; i < N; i++)
        for (int j = 0; j < nh; j++) {
            hs_real *v = x + i * ld + (size_t)j * hd, y[HS_ROPE_MAX_INTERLEAVED];
            memcpy(y, v, sizeof(hs_real) * (size_t)R);
            for (int k = 0; k < half; k++) {
                if (to_half)
                    v[k] = y[2 * k], v[half + k] = y[2 * k + 1];
                else
                    v[2 * k] = y[k], v[2 * k + 1] = y[half + k];
            }
        }
}

void hs_rope_rows(hs_real *x, int B, int T, int nh, size_t ld, size_t hd, int R, int pos0,
                  double (*inv_freq)(const void *ctx, int k), const void *ctx,
                  hs_rope_layout layout, int inverse)
{
    const int half = R / 2;
    if (layout == HS_ROPE_INTERLEAVED && !inverse)
        rope_permute(x, B, T, nh, ld, hd, R, 1);
    /* by position: each angle's cosine and sine once for every row and head */
#pragma omp parallel for schedule(static) if (HS_PAR_ROWS((size_t)T * B * nh, half))
    for (int t = 0; t < T; t++) {
        for (int k = 0; k < half; k++) {
            const double angle = (pos0 + t) * inv_freq(ctx, k);
            const hs_real c = (hs_real)cos(angle);
            const hs_real s = (hs_real)(inverse ? -sin(angle) : sin(angle));
            for (int b = 0; b < B; b++)
                for (int j = 0; j < nh; j++) {
                    hs_real *r = x + ((size_t)b * T + t) * ld + (size_t)j * hd;
                    const hs_real x1 = r[k], x2 = r[k + half];
                    r[k] = x1 * c - x2 * s;
                    r[k + half] = x2 * c + x1 * s;
                }
        }
    }
    if (layout == HS_ROPE_INTERLEAVED && inverse)
        rope_permute(x, B, T, nh, ld, hd, R, 0);
}
