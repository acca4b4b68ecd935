#include "sae_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linalg.h"
#include "rng.h"
#include "stats.h"

int hs_sae_init_topk(hs_sae *s, const char *hook, int d_in, int d_sae, int k,
                     unsigned long long seed)
{
    memset(s, 0, sizeof *s);
    if (d_in < 1 || d_sae < 1 || k < 1 || k > d_sae)
        return hs_fail(HS_EINVAL, "--k %d: 1 .. --d-sae (%d)", k, d_sae);
    const size_t din = (size_t)d_in, dsae = (size_t)d_sae;
    s->W_enc = hs_calloc(2 * din * dsae + 2 * dsae + din, sizeof(hs_real), "SAE weights");
    if (!s->W_enc)
        return HS_ENOMEM;
    s->W_dec = s->W_enc + din * dsae;
    s->b_enc = s->W_dec + din * dsae;
    s->b_dec = s->b_enc + dsae;
    s->arch = HS_SAE_TOPK, s->k = k, s->d_in = d_in, s->d_sae = d_sae, s->apply_b_dec = 1;
    snprintf(s->hook, sizeof s->hook, "%s", hook);
    hs_rng r;
    hs_rng_seed(&r, seed);
    for (size_t j = 0; j < dsae; j++) {
        hs_real *w = s->W_dec + j * din;
        double q = 0;
        for (size_t i = 0; i < din; i++) {
            w[i] = (hs_real)hs_rng_normal(&r);
            q += (double)w[i] * w[i];
        }
        const double inv = 1 / sqrt(q > 0 ? q : 1);
        for (size_t i = 0; i < din; i++) {
            w[i] = (hs_real)(w[i] * inv);
            s->W_enc[i * dsae + j] = w[i];
        }
    }
    return HS_OK;
}

void hs_geometric_median(hs_real *b, const hs_real *x, long n, int d, int iters)
{
    double *m = calloc((size_t)d, sizeof *m), *next = calloc((size_t)d, sizeof *next);
    if (!m || !next) {
        free(m), free(next);
        memset(b, 0, sizeof *b * (size_t)d);
        return;
    }
    for (long t = 0; t < n; t++)
        for (int i = 0; i < d; i++)
            m[i] += x[t * d + i] / (double)n;
    for (int it = 0; it < iters; it++) { /* Weiszfeld: weights 1 / distance */
        double wsum = 0;
        memset(next, 0, sizeof *next * (size_t)d);
        for (long t = 0; t < n; t++) {
            double q = 0;
            for (int i = 0; i < d; i++) {
                const double e = x[t * d + i] - m[i];
                q += e * e;
            }
            const double w = 1 / fmax(sqrt(q), 1e-8);
            wsum += w;
            for (int i = 0; i < d; i++)
                next[i] += w * x[t * d + i];
        }
        for (int i = 0; i < d; i++)
            m[i] = next[i] / wsum;
    }
    for (int i = 0; i < d; i++)
        b[i] = (hs_real)m[i];
    free(m), free(next);
}

int hs_sae_trainer_init(hs_sae_trainer *t, const hs_sae *s, const hs_sae_train_opts *o)
{
    memset(t, 0, sizeof *t);
    t->o = *o;
    t->n_params = 2 * (size_t)s->d_in * s->d_sae + (size_t)s->d_sae + (size_t)s->d_in;
    t->grad = hs_calloc(3 * t->n_params, sizeof(hs_real), "SAE gradients and Adam moments");
    t->since = hs_calloc((size_t)s->d_sae, sizeof *t->since, "dead latents");
    if (!t->grad || !t->since) {
        hs_sae_trainer_free(t);
        return HS_ENOMEM;
    }
    t->m = t->grad + t->n_params;
    t->v = t->m + t->n_params;
    return HS_OK;
}

void hs_sae_trainer_free(hs_sae_trainer *t)
{
    free(t->grad), free(t->since), free(t->scratch);
    memset(t, 0, sizeof *t);
}

/* The kk largest of vals + bias (the pre-activations, b_enc added here)
 * over the candidate latents cand (nc of them; NULL: all nc), ties to the
 * lower index, positive ones only: their latents into idx and values into
 * out, by value descending; the count. */
static int top_positive(int *idx, hs_real *out, const hs_real *vals, const hs_real *bias,
                        const int *cand, int nc, int kk)
{
    int m = 0;
    for (int c = 0; c < nc; c++) {
        const int j = cand ? cand[c] : c;
        const hs_real v = vals[j] + bias[j];
        if (!(v > 0) || (m == kk && !(v > out[m - 1])))
            continue;
        int p = m < kk ? m++ : kk - 1;
        while (p > 0 && v > out[p - 1]) {
            out[p] = out[p - 1], idx[p] = idx[p - 1];
            p--;
        }
        out[p] = v, idx[p] = j;
    }
    return m;
}

/* A step's scratch (kept by the trainer from step to step: a fresh
 * allocation's pages fault on first use) and what its phases hand on. */
typedef struct {
    int n_dead, K;     /* dead latents; slots a row: k, then up to aux_k */
    int *dead;         /* (M) the dead latents */
    hs_real *xc, *pre; /* (n, d) x - b_dec; (n, M) its product with W_enc */
    hs_real *g, *ga;   /* (n, d) the loss's gradient at x_hat; AuxK's at e_hat */
    int *idx;          /* (n, K) each row's selected latents, main then aux */
    hs_real *val;      /* (n, K) their activations */
    hs_real *dpre;     /* (n, K) the loss's gradient at their pre-activations */
    int *cnt, *aux;    /* (n) main selected, aux selected */
    hs_real *gWeT;     /* (M, d) W_enc's gradient, transposed */
    int *start, *fill; /* (M + 1), (M) the pairs' counting sort by latent */
    long *list;        /* (n K) the (row, slot) pairs by latent */
} step;

static int step_scratch(step *p, hs_sae_trainer *t, const hs_sae *s, long n)
{
    const int d = s->d_in, M = s->d_sae;
    const long K = p->K;
    const size_t sizes[] = { sizeof(int) * M, sizeof(hs_real) * n * d, sizeof(hs_real) * n * M,
                             sizeof(hs_real) * n * d * 2, sizeof(int) * n * K,
                             sizeof(hs_real) * n * K, sizeof(hs_real) * n * K, sizeof(int) * n * 2,
                             sizeof(hs_real) * M * d, sizeof(int) * (M + 1),
                             sizeof(long) * (n * K + 1), sizeof(int) * M };
    enum { DEAD, XC, PRE, GX, IDX, VAL, DPRE, CNT, GWET, START, LIST, FILL, PARTS };
    size_t need = 0, at[PARTS];
    for (int i = 0; i < PARTS; i++)
        at[i] = need, need += (sizes[i] + 63) / 64 * 64;
    if (need > t->scratch_bytes) {
        free(t->scratch);
        t->scratch_bytes = 0;
        if (!(t->scratch = hs_calloc(need, 1, "SAE step")))
            return hs_fail(HS_ENOMEM, "out of memory for an SAE step of %ld tokens", n);
        t->scratch_bytes = need;
    }
    char *base = t->scratch;
    p->dead = (int *)(base + at[DEAD]);
    p->xc = (hs_real *)(base + at[XC]), p->pre = (hs_real *)(base + at[PRE]);
    p->g = (hs_real *)(base + at[GX]), p->ga = p->g + (size_t)n * d;
    p->idx = (int *)(base + at[IDX]), p->val = (hs_real *)(base + at[VAL]);
    p->dpre = (hs_real *)(base + at[DPRE]);
    p->cnt = (int *)(base + at[CNT]), p->aux = p->cnt + n;
    p->gWeT = (hs_real *)(base + at[GWET]);
    p->start = (int *)(base + at[START]), p->fill = (int *)(base + at[FILL]);
    p->list = (long *)(base + at[LIST]);
    memset(p->gWeT, 0, sizes[GWET]), memset(p->start, 0, sizes[START]);
    memset(p->fill, 0, sizes[FILL]);
    return HS_OK;
}

/* Row r's selection, residual e = x_hat - x (and AuxK's), the gradients
 * there (scale: each row one of the batch's) and at the selected
 * pre-activations; its squared errors into se[0] (main), se[1] (AuxK). */
static void select_row(step *p, const hs_sae *s, const hs_sae_train_opts *o, const hs_real *x,
                       long r, double scale, double *se)
{
    const int d = s->d_in, M = s->d_sae, k = s->k, ak = p->K - k;
    const hs_real *pre = p->pre + r * M;
    hs_real *e = p->g + r * d, *ea = p->ga + r * d, *val = p->val + r * p->K;
    hs_real *dp = p->dpre + r * p->K;
    int *idx = p->idx + r * p->K;
    const int c = p->cnt[r] = top_positive(idx, val, pre, s->b_enc, NULL, M, k);
    for (int i = 0; i < d; i++)
        e[i] = s->b_dec[i] - x[r * d + i];
    for (int q = 0; q < c; q++)
        for (int i = 0; i < d; i++)
            e[i] += val[q] * s->W_dec[(size_t)idx[q] * d + i];
    se[0] = se[1] = 0;
    for (int i = 0; i < d; i++)
        se[0] += (double)e[i] * e[i];
    /* AuxK: the residual -e from the dead latents' top ak, without b_dec */
    const int ca = p->aux[r] =
        p->n_dead && ak ? top_positive(idx + c, val + c, pre, s->b_enc, p->dead, p->n_dead, ak)
                        : 0;
    if (ca) {
        for (int i = 0; i < d; i++)
            ea[i] = e[i]; /* e_hat - (x - x_hat) = e_hat + e */
        for (int q = c; q < c + ca; q++)
            for (int i = 0; i < d; i++)
                ea[i] += val[q] * s->W_dec[(size_t)idx[q] * d + i];
        for (int i = 0; i < d; i++) {
            se[1] += (double)ea[i] * ea[i];
            ea[i] = (hs_real)(ea[i] * scale * o->aux_coef);
        }
    }
    for (int i = 0; i < d; i++)
        e[i] = (hs_real)(e[i] * scale);
    /* the selected latents' pre-activation gradients (each > 0: relu passes) */
    for (int q = 0; q < c + ca; q++) {
        const hs_real *w = s->W_dec + (size_t)idx[q] * d, *gg = q < c ? e : ea;
        double v = 0;
        for (int i = 0; i < d; i++)
            v += (double)gg[i] * w[i];
        dp[q] = (hs_real)v;
    }
}

/* The weights' gradients into t->grad, latent by latent over the (row,
 * slot) pairs in row order (one writer a latent's rows), then b_dec's. */
static void latent_grads(step *p, hs_sae_trainer *t, const hs_sae *s, long n)
{
    const int d = s->d_in, M = s->d_sae, K = p->K;
    hs_real *gWe = t->grad, *gWd = gWe + (size_t)d * M, *gbe = gWd + (size_t)d * M,
            *gbd = gbe + M;
    memset(t->grad, 0, sizeof *t->grad * t->n_params);
    for (long r = 0; r < n; r++) /* counting sort of the pairs by latent */
        for (int q = 0; q < p->cnt[r] + p->aux[r]; q++)
            p->start[p->idx[r * K + q] + 1]++;
    for (int j = 0; j < M; j++)
        p->start[j + 1] += p->start[j];
    for (long r = 0; r < n; r++)
        for (int q = 0; q < p->cnt[r] + p->aux[r]; q++) {
            const int j = p->idx[r * K + q];
            p->list[p->start[j] + p->fill[j]++] = r * K + q;
        }
#pragma omp parallel for schedule(dynamic, 64)
    for (int j = 0; j < M; j++) {
        hs_real *wd = gWd + (size_t)j * d, *we = p->gWeT + (size_t)j * d;
        double be = 0;
        for (int l = p->start[j]; l < p->start[j + 1]; l++) {
            const long rq = p->list[l], r = rq / K;
            const hs_real a = p->val[rq], dp = p->dpre[rq];
            const hs_real *gg = ((int)(rq % K) < p->cnt[r] ? p->g : p->ga) + r * d;
            const hs_real *xr = p->xc + r * d;
            for (int i = 0; i < d; i++) {
                wd[i] += a * gg[i];
                we[i] += dp * xr[i];
            }
            be += dp;
        }
        gbe[j] = (hs_real)be;
    }
    for (int j = 0; j < M; j++)
        for (int i = 0; i < d; i++)
            gWe[(size_t)i * M + j] = p->gWeT[(size_t)j * d + i];
    /* b_dec: through x_hat (the sum of g) and through x - b_dec: minus
     * sum_t dpre_t W_enc^T = W_enc (sum_t dpre_t) = W_enc gb_enc */
    for (long r = 0; r < n; r++)
        for (int i = 0; i < d; i++)
            gbd[i] += p->g[r * d + i];
    for (int i = 0; i < d; i++) {
        const hs_real *w = s->W_enc + (size_t)i * M;
        double acc = 0;
        for (int j = 0; j < M; j++)
            acc += (double)w[j] * gbe[j];
        gbd[i] -= (hs_real)acc;
    }
}

int hs_sae_train_grad(hs_sae_trainer *t, const hs_sae *s, const hs_real *x, long n, long lo,
                      long hi, hs_sae_step_stats *st, unsigned char *fired)
{
    const double scale = 2.0 / (double)n; /* each row one of the batch's n */
    const hs_real *batch = x;
    const long total = n;
    x += lo * s->d_in, n = hi - lo;
    const int d = s->d_in, M = s->d_sae;
    step p = { .K = s->k + (t->o.aux_k < M ? t->o.aux_k : M) };
    int rc = step_scratch(&p, t, s, n);
    if (rc)
        return rc;
    for (int j = 0; j < M; j++)
        if (t->since[j] >= t->o.dead_tokens)
            p.dead[p.n_dead++] = j;
    for (long r = 0; r < n; r++)
        for (int i = 0; i < d; i++)
            p.xc[r * d + i] = x[r * d + i] - s->b_dec[i];
    hs_gemm(0, 0, (int)n, M, d, 1, p.xc, d, s->W_enc, M, 0, p.pre, M);
    double mse = 0, aux = 0;
#pragma omp parallel for schedule(static) reduction(+ : mse, aux)
    for (long r = 0; r < n; r++) {
        double se[2];
        select_row(&p, s, &t->o, x, r, scale, se);
        mse += se[0], aux += se[1];
    }
    latent_grads(&p, t, s, n);
    if (st) {
        st->mse = mse * scale / 2;
        st->aux = aux * scale / 2;
        st->explained_variance = lo == 0 && hi == total
                                     ? hs_sae_explained_variance(batch, total, d, mse) : NAN;
        st->dead = p.n_dead;
    }
    if (fired) {
        memset(fired, 0, (size_t)M);
        for (long r = 0; r < n; r++)
            for (int q = 0; q < p.cnt[r]; q++)
                fired[p.idx[r * p.K + q]] = 1;
    }
    return HS_OK;
}

void hs_sae_trainer_count(hs_sae_trainer *t, const unsigned char *fired, long n, int d_sae)
{
    for (int j = 0; j < d_sae; j++)
        t->since[j] = fired[j] ? 0 : t->since[j] + n;
}

double hs_sae_explained_variance(const hs_real *x, long n, int d, double sq_err)
{
    double var = 0;
    for (int i = 0; i < d; i++) {
        hs_welford w = { 0 };
        for (long r = 0; r < n; r++)
            hs_welford_add(&w, x[r * d + i]);
        var += w.m2;
    }
    return var > 0 ? 1 - sq_err / var : NAN;
}

void hs_sae_trainer_update(hs_sae_trainer *t, hs_sae *s)
{
    const int d = s->d_in, M = s->d_sae;
    hs_real *gWd = t->grad + (size_t)d * M;
    /* the decoder rows' gradients made orthogonal to the rows */
    for (int j = 0; j < M; j++) {
        hs_real *gr = gWd + (size_t)j * d;
        const hs_real *w = s->W_dec + (size_t)j * d;
        double dot = 0;
        for (int i = 0; i < d; i++)
            dot += (double)gr[i] * w[i];
        for (int i = 0; i < d; i++)
            gr[i] -= (hs_real)(dot * w[i]);
    }
    t->step++;
    const double b1 = t->o.beta1, b2 = t->o.beta2;
    const double c1 = 1 - pow(b1, (double)t->step), c2 = 1 - pow(b2, (double)t->step);
    const double lr = t->o.lr, eps = t->o.eps;
    hs_real *p = s->W_enc; /* the block: W_enc, W_dec, b_enc, b_dec */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < t->n_params; i++) {
        const double gi = t->grad[i];
        const double m = b1 * t->m[i] + (1 - b1) * gi, v = b2 * t->v[i] + (1 - b2) * gi * gi;
        t->m[i] = (hs_real)m, t->v[i] = (hs_real)v;
        p[i] -= (hs_real)(lr * (m / c1) / (sqrt(v / c2) + eps));
    }
    for (int j = 0; j < M; j++) {
        hs_real *w = s->W_dec + (size_t)j * d;
        double q = 0;
        for (int i = 0; i < d; i++)
            q += (double)w[i] * w[i];
        const double inv = q > 0 ? 1 / sqrt(q) : 0;
        for (int i = 0; i < d; i++)
            w[i] = (hs_real)(w[i] * inv);
    }
}
