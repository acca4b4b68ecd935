/* The features and sae-eval studies (study_features.h). */
#include "study_features.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"
#include "maps.h"
#include "study_capture.h"
#include "metrics.h"
#include "transformer.h"

#ifdef _OPENMP
#include <omp.h>
static int thread_count(void) { return omp_get_num_threads(); }
static int thread_id(void) { return omp_get_thread_num(); }
#else
static int thread_count(void) { return 1; }
static int thread_id(void) { return 0; }
#endif

/* ---- the hooked activation -------------------------------------------------- */

/* The common checks of both studies: the SAE opened and bound, token data,
 * one process unless sharded. */
static int open_sae(hs_sae *s, const char *dir, const hs_study_env *env, int sharded)
{
    if (!dir)
        return hs_fail(HS_EINVAL, "--sae DIR is required");
    if (env->task || env->pairs)
        return hs_fail(HS_EINVAL, "--sae: SAE studies read --data or --text");
    if (!sharded && hs_dist_size() > 1)
        return hs_fail(HS_EUNSUPPORTED, "SAE studies under mpirun are not implemented (run one "
                                        "process)");
    int rc = s->W_enc ? HS_OK : hs_sae_open(s, dir);
    if (!rc && (rc = hs_sae_bind(s, &env->m->cfg)))
        hs_sae_free(s);
    return rc;
}

/* ---- features ---------------------------------------------------------------- */

typedef struct {
    double value;
    long long seq;
    int pos;
} example;

/* a ranks below b: a smaller value, or the same value at a later token */
static int ranks_below(const example *a, const example *b)
{
    return a->value < b->value ||
           (a->value == b->value && (a->seq > b->seq || (a->seq == b->seq && a->pos > b->pos)));
}

/* A feature's top N as a heap whose root is the lowest ranked. */
static void heap_offer(example *h, int *n, int N, example e)
{
    if (*n < N) {
        int c = (*n)++;
        while (c > 0 && ranks_below(&e, &h[(c - 1) / 2])) {
            h[c] = h[(c - 1) / 2];
            c = (c - 1) / 2;
        }
        h[c] = e;
        return;
    }
    if (!ranks_below(&h[0], &e))
        return;
    int c = 0;
    for (;;) {
        int l = 2 * c + 1;
        if (l >= N)
            break;
        if (l + 1 < N && ranks_below(&h[l + 1], &h[l]))
            l++;
        if (!ranks_below(&h[l], &e))
            break;
        h[c] = h[l];
        c = l;
    }
    h[c] = e;
}

static int by_rank(const void *a, const void *b)
{
    const example *x = a, *y = b;
    return ranks_below(y, x) ? -1 : ranks_below(x, y) ? 1 : 0;
}

/* A feature's activations summed in fixed point (2^-40), rounded value by
 * value: integer sums, so any split of the tokens across ranks, added in any
 * order, gives the same total. */
typedef __int128 fixed_sum;
#define FIXED_ONE 1099511627776.0 /* 2^40 */

static fixed_sum to_fixed(double v)
{
    return v < 4194304.0 ? (fixed_sum)llround(v * FIXED_ONE)
                         : (fixed_sum)llround(v * (FIXED_ONE / 1048576.0)) * 1048576;
}

/* Per feature what the first pass gathers. */
typedef struct {
    int d_sae, N;
    long long *count; /* tokens active */
    fixed_sum *sum;   /* of f over them */
    example *top;     /* [f * N ..] heap, then sorted */
    int *n_top;
} feature_stats;

/* Folds rows r0 .. r0 + n - 1 of F (n, d_sae), token i at seq i / T of
 * batch bi (B a batch): features split across the threads, each walking
 * every row over its own range. */
/* Feature j's activation v at token e's (sequence, position). */
static void fold_one(feature_stats *st, int j, hs_real v, example e)
{
    st->count[j]++;
    st->sum[j] += to_fixed(v);
    e.value = v;
    heap_offer(st->top + (size_t)j * st->N, &st->n_top[j], st->N, e);
}

/* Rows of a TopK SAE as sparse rows (hs_sae_encode_topk's idx, val, count,
 * k a row): the same folds, each thread the features of its range. */
static void fold_sparse(feature_stats *st, const int32_t *idx, const hs_real *val,
                        const int32_t *count, int k, long n, long r0, size_t bi, int B, int T)
{
    const int dsae = st->d_sae;
#pragma omp parallel
    {
        const int nt = thread_count(), me = thread_id();
        const int j0 = (int)((long)dsae * me / nt), j1 = (int)((long)dsae * (me + 1) / nt);
        for (long r = 0; r < n; r++) {
            const long tok = r0 + r;
            const example e0 = { 0, (long long)bi * B + tok / T, (int)(tok % T) };
            for (int q = 0; q < count[r]; q++) {
                const int j = idx[r * k + q];
                if (j >= j0 && j < j1)
                    fold_one(st, j, val[r * k + q], e0);
            }
        }
    }
}

static void fold_rows(feature_stats *st, const hs_real *F, long n, long r0, size_t bi, int B,
                      int T)
{
    const int dsae = st->d_sae;
#pragma omp parallel
    {
        const int nt = thread_count(), me = thread_id();
        const int j0 = (int)((long)dsae * me / nt), j1 = (int)((long)dsae * (me + 1) / nt);
        for (long r = 0; r < n; r++) {
            const hs_real *row = F + r * dsae;
            const long tok = r0 + r;
            const example e0 = { 0, (long long)bi * B + tok / T, (int)(tok % T) };
            for (int j = j0; j < j1; j++)
                if (row[j] > 0)
                    fold_one(st, j, row[j], e0);
        }
    }
}

/* CSR rows of batches not yet written: each token's count of active
 * features and its id, then their features (grown as needed). */
typedef struct {
    int32_t *row_nnz, *tokens;
    size_t rows, row_cap;
    int32_t *indices;
    float *values;
    size_t nnz, cap;
} csr_buf;

/* Room for n more rows. */
static int csr_reserve(csr_buf *c, size_t n)
{
    if (c->rows + n <= c->row_cap)
        return HS_OK;
    const size_t cap = 2 * (c->rows + n);
    int32_t *r = realloc(c->row_nnz, cap * sizeof *r);
    int32_t *t = r ? realloc(c->tokens, cap * sizeof *t) : NULL;
    if (r)
        c->row_nnz = r;
    if (!t)
        return hs_fail(HS_ENOMEM, "out of memory for the features' CSR rows");
    c->tokens = t, c->row_cap = cap;
    return HS_OK;
}

/* Room for k more features. */
static int csr_grow(csr_buf *c, size_t k)
{
    if (c->nnz + k <= c->cap)
        return HS_OK;
    const size_t cap = 2 * (c->nnz + k) > 4096 ? 2 * (c->nnz + k) : 4096;
    int32_t *i = realloc(c->indices, cap * sizeof *i);
    float *v = i ? realloc(c->values, cap * sizeof *v) : NULL;
    if (i)
        c->indices = i;
    if (!v)
        return hs_fail(HS_ENOMEM, "out of memory for the features' CSR rows");
    c->values = v, c->cap = cap;
    return HS_OK;
}

/* Sparse rows (hs_sae_encode_topk's) r0 .. r0 + n - 1 of the batch that
 * starts at row c->rows. */
static int csr_sparse(csr_buf *c, const int32_t *idx, const hs_real *val, const int32_t *count,
                      int k, long n, long r0)
{
    for (long r = 0; r < n; r++) {
        int rc = csr_grow(c, (size_t)count[r]);
        if (rc)
            return rc;
        for (int q = 0; q < count[r]; q++) {
            c->indices[c->nnz] = idx[r * k + q];
            c->values[c->nnz++] = (float)val[r * k + q];
        }
        c->row_nnz[c->rows + r0 + r] = count[r];
    }
    return HS_OK;
}

/* Rows r0 .. r0 + n - 1 of the batch that starts at row c->rows. */
static int csr_rows(csr_buf *c, const hs_real *F, long n, long r0, int dsae)
{
    for (long r = 0; r < n; r++) {
        const hs_real *row = F + r * dsae;
        int k = 0;
        for (int j = 0; j < dsae; j++) {
            if (!(row[j] > 0))
                continue;
            const int rc = csr_grow(c, 1);
            if (rc)
                return rc;
            c->indices[c->nnz] = j;
            c->values[c->nnz++] = (float)row[j];
            k++;
        }
        c->row_nnz[c->rows + r0 + r] = k;
    }
    return HS_OK;
}

/* One batch: the forward hooked at the SAE's site, then its tokens encoded
 * a block of rows at a time. */
/* A TopK SAE's scratch: each row's k features as (index, value) pairs. */
typedef struct {
    int32_t *idx, *count;
    hs_real *val;
} sparse_rows;

static int features_batch(feature_stats *st, csr_buf *csr, hs_acts *a, const hs_model *m,
                          const hs_sae *s, const int32_t *in, hs_real *X, hs_real *pre,
                          hs_real *F, const sparse_rows *sp, long block, size_t bi, int B, int T)
{
    hs_sae_hook sh = { s, X, 0, 1 }; /* the forward ends at the hook */
    hs_hooks hooks = { 0 };
    hooks.site[s->site] = (hs_site_hook){ hs_sae_site, &sh };
    int rc = hs_forward(a, m, in, NULL, &hooks);
    rc = rc == HS_EDONE ? HS_OK : rc;
    const long n = (long)B * T;
    for (long r0 = 0; !rc && r0 < n; r0 += block) {
        const long rows = n - r0 < block ? n - r0 : block;
        if (sp) { /* TopK: k features a row, never a dense row */
            rc = hs_sae_encode_topk(s, X + r0 * s->d_in, rows, pre, sp->idx, sp->val, sp->count);
            if (!rc)
                fold_sparse(st, sp->idx, sp->val, sp->count, s->k, rows, r0, bi, B, T);
            if (!rc && csr)
                rc = csr_sparse(csr, sp->idx, sp->val, sp->count, s->k, rows, r0);
            continue;
        }
        rc = hs_sae_encode(s, X + r0 * s->d_in, rows, pre, F);
        if (!rc)
            fold_rows(st, F, rows, r0, bi, B, T);
        if (!rc && csr)
            rc = csr_rows(csr, F, rows, r0, s->d_sae);
    }
    return rc;
}

void hs_features_result_free(hs_features_result *r)
{
    memset(r, 0, sizeof *r);
}

int hs_features_check(hs_features_opts *o, const hs_study_env *env)
{
    if (!o->top)
        o->top = 10;
    if (o->top < 1 || o->top > 1000)
        return hs_fail(HS_EINVAL, "--top %d: examples a feature, 1 .. 1000", o->top);
    if (o->dfa < -1 || o->dfa > o->top)
        return hs_fail(HS_EINVAL, "--dfa-examples %d: -1 (all of --top) .. --top", o->dfa);
    if (o->out && !o->force && access(o->out, F_OK) == 0)
        return hs_fail(HS_EINVAL, "--out %s exists (--force replaces it)", o->out);
    return open_sae(&o->sae, o->sae_dir, env, 1);
}

/* The feature_metrics rows of st (and head_share of a hook_z SAE). */
static int write_metrics(const feature_stats *st, const hs_sae *s, long long tokens,
                         const hs_study_env *env)
{
    const int H = s->z ? s->heads : 0, per = 2 + H;
    hs_feature_row *rows = hs_calloc((size_t)s->d_sae * per, sizeof *rows, "feature rows");
    if (!rows)
        return HS_ENOMEM;
    int n = 0;
    for (int f = 0; f < s->d_sae; f++) {
        const int L = s->hook_layer;
        rows[n++] = (hs_feature_row){ f, L, -1, HS_METRIC(FREQUENCY),
                                      tokens ? (double)st->count[f] / tokens : 0 };
        rows[n++] = (hs_feature_row){ f, L, -1, HS_METRIC(MEAN_ACT),
                                      st->count[f] ? (double)st->sum[f] / FIXED_ONE / st->count[f]
                                                   : NAN };
        double norm[HS_MAX_HEADS], total = 0;
        for (int h = 0; h < H; h++) {
            const hs_real *w = s->W_dec + (size_t)f * s->d_in + (size_t)h * s->dh;
            double q = 0;
            for (int i = 0; i < s->dh; i++)
                q += (double)w[i] * w[i];
            total += norm[h] = sqrt(q);
        }
        for (int h = 0; h < H; h++)
            rows[n++] = (hs_feature_row){ f, L, h, HS_METRIC(HEAD_SHARE),
                                          total > 0 ? norm[h] / total : NAN };
    }
    const int rc = env->ix ? hs_index_feature_metrics_add(env->ix, env->run_id, rows, n) : HS_OK;
    free(rows);
    return rc;
}

/* ---- direct feature attribution ---------------------------------------------- */

/* The second pass's capture of one batch: att rows of the example tokens
 * (slot[b T + t] >= 0: their index into att, H x T each) and every value
 * vector of the hook's layer. */
typedef struct {
    int layer, T, H, G, dh;
    const int *slot;
    hs_real *att;  /* (slots, H, T) */
    hs_real *v;    /* (B, T, G, dh) */
} dfa_capture;

static void dfa_rows(void *ctx, int layer, int thread, int b, int h, int t0, int n,
                     const hs_real *P, int ldp, int keys)
{
    dfa_capture *c = ctx;
    (void)thread;
    if (layer != c->layer)
        return;
    for (int i = 0; i < n; i++) {
        const int k = c->slot[(size_t)b * c->T + t0 + i];
        if (k < 0)
            continue;
        hs_real *dst = c->att + ((size_t)k * c->H + h) * c->T;
        const int m = keys < c->T ? keys : c->T;
        memcpy(dst, P + (size_t)i * ldp, sizeof *dst * (size_t)m);
        memset(dst + m, 0, sizeof *dst * (size_t)(c->T - m));
    }
}

/* The forward past the hook's layer is not needed: it ends at its z. */
static int dfa_stop(void *ctx, const hs_site_view *v)
{
    const dfa_capture *c = ctx;
    return v->layer == c->layer ? HS_EDONE : HS_OK;
}

static int dfa_values(void *ctx, const hs_site_view *v)
{
    dfa_capture *c = ctx;
    if (v->layer != c->layer)
        return HS_OK;
    for (int b = 0; b < v->B; b++)
        for (int t = 0; t < v->T; t++)
            for (int g = 0; g < v->heads; g++)
                memcpy(c->v + (((size_t)b * v->T + t) * c->G + g) * c->dh,
                       v->x + b * v->sb + t * v->st + g * v->sh, sizeof(hs_real) * (size_t)c->dh);
    return HS_OK;
}

/* An example to attribute: feature f's token (seq, pos). */
typedef struct {
    int f;
    long long seq;
    int pos;
} dfa_job;

static int by_seq(const void *a, const void *b)
{
    const dfa_job *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq ? 1 : x->pos - y->pos;
}

/* The DFA rows of jobs j0 .. j1 - 1, all in batch bi, into rows (growing *n). */
static int dfa_batch(hs_feature_dfa_row **rows, size_t *n, size_t *cap, const dfa_job *jobs,
                     int j0, int j1, hs_acts *a, const hs_model *m, const hs_sae *s,
                     const hs_tokens *data, size_t bi, int B, int T, int32_t *in, int32_t *tg)
{
    const hs_model_config *c = &m->cfg;
    const int L = s->hook_layer, H = s->heads, G = c->n_kv_head[L], dh = s->dh;
    int *slot = malloc(sizeof *slot * (size_t)B * T);
    int slots = 0;
    if (!slot)
        return HS_ENOMEM;
    for (int i = 0; i < B * T; i++)
        slot[i] = -1;
    for (int j = j0; j < j1; j++) {
        const size_t k = (size_t)(jobs[j].seq - (long long)bi * B) * T + jobs[j].pos;
        if (slot[k] < 0)
            slot[k] = slots++;
    }
    dfa_capture cap_ = { L, T, H, G, dh, slot,
                         hs_calloc((size_t)slots * H * T, sizeof(hs_real), "DFA maps"),
                         hs_calloc((size_t)B * T * G * dh, sizeof(hs_real), "DFA values") };
    int rc = cap_.att && cap_.v ? HS_OK : HS_ENOMEM;
    hs_hooks hooks = { .ctx = &cap_, .on_rows = dfa_rows };
    hooks.site[HS_SITE_V] = (hs_site_hook){ dfa_values, &cap_ };
    hooks.site[HS_SITE_Z] = (hs_site_hook){ dfa_stop, &cap_ };
    if (!rc) {
        hs_batch_at(data, bi * (size_t)B * T, B, T, in, tg);
        rc = hs_forward(a, m, in, NULL, &hooks);
        rc = rc == HS_EDONE ? HS_OK : rc;
    }
    for (int j = j0; !rc && j < j1; j++) {
        const int b = (int)(jobs[j].seq - (long long)bi * B), t = jobs[j].pos;
        const hs_real *att = cap_.att + (size_t)slot[(size_t)b * T + t] * H * T;
        for (int h = 0; h < H; h++)
            for (int src = 0; src < T; src++) {
                const hs_real p = att[(size_t)h * T + src];
                if (p == 0)
                    continue;
                const hs_real *v = cap_.v + (((size_t)b * T + src) * G + h / (H / G)) * dh;
                double w = 0;
                for (int i = 0; i < dh; i++)
                    w += (double)v[i] * s->W_enc[((size_t)h * dh + i) * s->d_sae + jobs[j].f];
                const double value = (double)p * w;
                if (value == 0)
                    continue;
                if (*n == *cap) {
                    const size_t nc = *cap ? 2 * *cap : 4096;
                    hs_feature_dfa_row *g = realloc(*rows, nc * sizeof *g);
                    if (!g) {
                        rc = hs_fail(HS_ENOMEM, "out of memory for the DFA rows");
                        break;
                    }
                    *rows = g, *cap = nc;
                }
                (*rows)[(*n)++] = (hs_feature_dfa_row){ jobs[j].f, jobs[j].seq, t, L, h, src,
                                                        value };
            }
    }
    free(slot), free(cap_.att), free(cap_.v);
    return rc;
}

/* The DFA of each feature's first o->dfa examples (all with -1). */
static int dfa_pass(hs_features_result *r, const feature_stats *st, const hs_features_opts *o,
                    const hs_study_env *env)
{
    const hs_sae *s = &o->sae;
    const int B = env->batch, T = env->seq_len, per = o->dfa < 0 ? st->N : o->dfa;
    const hs_model_config *c = &env->m->cfg;
    if (!s->z || !per || c->mla)
        return HS_OK;
    dfa_job *jobs = hs_calloc((size_t)s->d_sae * per + 1, sizeof *jobs, "DFA examples");
    if (!jobs)
        return HS_ENOMEM;
    int n_jobs = 0;
    for (int f = 0; f < s->d_sae; f++)
        for (int k = 0; k < st->n_top[f] && k < per; k++) {
            const example *e = &st->top[(size_t)f * st->N + k];
            jobs[n_jobs++] = (dfa_job){ f, e->seq, e->pos };
        }
    qsort(jobs, (size_t)n_jobs, sizeof *jobs, by_seq);
    hs_acts a = { 0 };
    int rc = hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER);
    int32_t *in = hs_calloc((size_t)B * T, sizeof *in, "inputs");
    int32_t *tg = hs_calloc((size_t)B * T, sizeof *tg, "targets");
    if (!rc && !(in && tg))
        rc = HS_ENOMEM;
    hs_feature_dfa_row *rows = NULL;
    size_t n = 0, cap = 0;
    hs_study_phase(&env->io, "features: attribution");
    for (int j0 = 0, j1; !rc && j0 < n_jobs; j0 = j1) {
        const size_t bi = (size_t)(jobs[j0].seq / B);
        for (j1 = j0; j1 < n_jobs && (size_t)(jobs[j1].seq / B) == bi; j1++)
            ;
        if (env->io.stop && *env->io.stop)
            rc = hs_fail(HS_EINTR, "interrupted");
        if (!rc)
            rc = dfa_batch(&rows, &n, &cap, jobs, j0, j1, &a, env->m, s, env->data, bi, B, T,
                           in, tg);
        if (!rc && env->io.progress)
            env->io.progress(env->io.ctx, (size_t)j1, (size_t)n_jobs);
    }
    for (size_t i = 0; !rc && env->ix && i < n; i += 1 << 20) {
        const size_t k = n - i < ((size_t)1 << 20) ? n - i : (size_t)1 << 20;
        rc = hs_index_feature_dfa_add(env->ix, env->run_id, rows + i, (int)k);
    }
    r->n_dfa = (long)n;
    free(rows), free(jobs), free(in), free(tg);
    hs_acts_free(&a);
    return rc;
}

/* ---- the study ----------------------------------------------------------------- */

static int write_examples(hs_features_result *r, feature_stats *st, const hs_study_env *env)
{
    hs_feature_example_row *rows = hs_calloc((size_t)st->d_sae * st->N + 1, sizeof *rows,
                                             "example rows");
    if (!rows)
        return HS_ENOMEM;
    int n = 0;
    for (int f = 0; f < st->d_sae; f++) {
        example *h = st->top + (size_t)f * st->N;
        qsort(h, (size_t)st->n_top[f], sizeof *h, by_rank);
        for (int k = 0; k < st->n_top[f]; k++)
            rows[n++] = (hs_feature_example_row){ f, h[k].seq, h[k].pos, h[k].value };
    }
    r->n_examples = n;
    const int rc = env->ix ? hs_index_feature_examples_add(env->ix, env->run_id, rows, n) : HS_OK;
    free(rows);
    return rc;
}

static void stats_free(feature_stats *st)
{
    free(st->count), free(st->sum), free(st->top), free(st->n_top);
}

/* The buffered rows (whole batches of B T) appended to w, then dropped. */
static int csr_flush(csr_buf *c, hs_maps_writer *w, const hs_sae *s, const hs_study_env *env,
                     int B)
{
    const size_t n = (size_t)B * env->seq_len;
    size_t at = 0;
    int rc = HS_OK;
    for (size_t r = 0; !rc && r + n <= c->rows; r += n) {
        size_t k = 0;
        for (size_t i = r; i < r + n; i++)
            k += (size_t)c->row_nnz[i];
        const hs_maps_csr rows = { s->d_sae, env->m->cfg.vocab_size, env->run_id, s->hook,
                                   s->dir, c->row_nnz + r, c->indices + at, c->values + at };
        rc = hs_maps_append_csr(w, &rows, c->tokens + r, B);
        at += k;
    }
    c->rows = c->nnz = 0;
    return rc;
}

/* Under mpirun: the ranks' counts, fixed-point sums and top examples folded
 * on rank 0 (integer sums, and the top N under a total order: the same as
 * one process); with want_csr each rank's buffered rows sent to rank 0 in
 * rank order and appended to w there. */
static int merge_ranks(int rc, feature_stats *st, csr_buf *csr, hs_maps_writer *w, int want_csr,
                       const hs_sae *s, const hs_study_env *env)
{
    const int P = hs_dist_size(), me = hs_dist_rank(), M = st->d_sae, N = st->N;
    if (P == 1)
        return rc;
    const size_t tops = (size_t)M * N;
    long long *counts = me ? NULL : hs_calloc((size_t)P * M, sizeof *counts, "rank counts");
    fixed_sum *sums = me ? NULL : hs_calloc((size_t)P * M, sizeof *sums, "rank sums");
    example *top = me ? NULL : hs_calloc((size_t)P * tops, sizeof *top, "rank examples");
    int *n_top = me ? NULL : hs_calloc((size_t)P * M, sizeof *n_top, "rank examples");
    if (!rc && !me && !(counts && sums && top && n_top))
        rc = HS_ENOMEM;
    rc = hs_dist_gather(rc, st->count, counts, sizeof *counts * M);
    rc = hs_dist_gather(rc, st->sum, sums, sizeof *sums * M);
    rc = hs_dist_gather(rc, st->top, top, sizeof *top * tops);
    rc = hs_dist_gather(rc, st->n_top, n_top, sizeof *n_top * M);
    for (int q = 1; !rc && !me && q < P; q++)
        for (int f = 0; f < M; f++) {
            st->count[f] += counts[(size_t)q * M + f];
            st->sum[f] += sums[(size_t)q * M + f];
            for (int k = 0; k < n_top[(size_t)q * M + f]; k++)
                heap_offer(st->top + (size_t)f * N, &st->n_top[f], N,
                           top[(size_t)q * tops + (size_t)f * N + k]);
        }
    free(counts), free(sums), free(top), free(n_top);
    for (int q = 1; !rc && want_csr && q < P; q++) {
        unsigned long long size[2] = { csr->rows, csr->nnz };
        if (me == q) {
            rc = hs_dist_send0(size, sizeof size);
            rc = rc ? rc : hs_dist_send0(csr->row_nnz, sizeof *csr->row_nnz * csr->rows);
            rc = rc ? rc : hs_dist_send0(csr->tokens, sizeof *csr->tokens * csr->rows);
            rc = rc ? rc : hs_dist_send0(csr->indices, sizeof *csr->indices * csr->nnz);
            rc = rc ? rc : hs_dist_send0(csr->values, sizeof *csr->values * csr->nnz);
        } else if (!me) {
            csr->rows = csr->nnz = 0;
            rc = hs_dist_recv(q, size, sizeof size);
            rc = rc ? rc : csr_reserve(csr, size[0]);
            rc = rc ? rc : csr_grow(csr, size[1]); /* room for the rank's features */
            rc = rc ? rc : hs_dist_recv(q, csr->row_nnz, sizeof *csr->row_nnz * size[0]);
            rc = rc ? rc : hs_dist_recv(q, csr->tokens, sizeof *csr->tokens * size[0]);
            rc = rc ? rc : hs_dist_recv(q, csr->indices, sizeof *csr->indices * size[1]);
            rc = rc ? rc : hs_dist_recv(q, csr->values, sizeof *csr->values * size[1]);
            csr->rows = size[0], csr->nnz = size[1];
            if (!rc)
                rc = csr_flush(csr, w, s, env, env->batch);
        }
    }
    return hs_dist_agree(rc);
}

/* The first pass over the batches, each rank its share (hs_dist_range);
 * with want_csr the CSR rows, appended to w as they come on rank 0 and
 * sent to it from the others. */
static int features_pass(feature_stats *st, hs_maps_writer *w, int want_csr,
                         const hs_features_opts *o, const hs_study_env *env, long long *tokens)
{
    hs_sae packed = o->sae; /* W_enc packed for this pass's encodes, when there is room */
    const hs_sae *s = &packed;
    const int B = env->batch, T = env->seq_len;
    size_t nb, lo, hi;
    int rc = hs_batches_to_run(env->data, B, T, env->max_batches, &nb);
    if (rc)
        return rc;
    (void)hs_sae_pack(&packed); /* HS_ENOMEM: the unpacked encode, as it needs no more */
    hs_dist_range(nb, hs_dist_rank(), &lo, &hi);
    const long n = (long)B * T;
    long block = (long)((1 << 25) / s->d_sae); /* rows an encode: W_enc packed once a block */
    block = block < 1 ? 1 : block > n ? n : block;
    hs_acts a = { 0 };
    rc = hs_acts_alloc(&a, &env->m->cfg, B, T, HS_ACTS_INFER);
    hs_real *X = hs_calloc((size_t)n * s->d_in, sizeof *X, "SAE inputs");
    hs_real *pre = hs_calloc((size_t)block * s->d_sae, sizeof *pre, "SAE pre-activations");
    const int topk = s->arch == HS_SAE_TOPK;
    hs_real *F = topk ? NULL : hs_calloc((size_t)block * s->d_sae, sizeof *F, "SAE features");
    sparse_rows sp = { topk ? hs_calloc((size_t)block * s->k, sizeof(int32_t), "TopK rows") : NULL,
                       topk ? hs_calloc((size_t)block, sizeof(int32_t), "TopK rows") : NULL,
                       topk ? hs_calloc((size_t)block * s->k, sizeof(hs_real), "TopK rows") : NULL };
    int32_t *in = hs_calloc((size_t)n, sizeof *in, "inputs");
    int32_t *tg = hs_calloc((size_t)n, sizeof *tg, "targets");
    csr_buf csr = { 0 };
    if (!rc && !(X && pre && (topk ? sp.idx && sp.count && sp.val : F != NULL) && in && tg))
        rc = HS_ENOMEM;
    hs_study_phase(&env->io, "features");
    for (size_t bi = lo; !rc && bi < hi; bi++) {
        if (env->io.stop && *env->io.stop) {
            rc = hs_fail(HS_EINTR, "interrupted%s%s", o->out ? "; nothing was written to " : "",
                         o->out ? o->out : "");
            break;
        }
        hs_batch_at(env->data, bi * (size_t)n, B, T, in, tg);
        if (want_csr && !(rc = csr_reserve(&csr, (size_t)n)))
            memcpy(csr.tokens + csr.rows, in, sizeof *in * (size_t)n);
        if (!rc)
            rc = features_batch(st, want_csr ? &csr : NULL, &a, env->m, s, in, X, pre, F,
                                topk ? &sp : NULL, block, bi, B, T);
        if (!rc && want_csr)
            csr.rows += (size_t)n;
        if (!rc && w) /* rank 0's rows go out at once, the others' at the end */
            rc = csr_flush(&csr, w, s, env, B);
        if (!rc && env->io.progress)
            env->io.progress(env->io.ctx, bi + 1 - lo, hi - lo);
    }
    hs_study_phase(&env->io, NULL);
    rc = merge_ranks(rc, st, &csr, w, want_csr, s, env);
    *tokens = (long long)nb * n;
    hs_acts_free(&a);
    hs_sae_unpack(&packed);
    free(X), free(pre), free(F), free(in), free(tg), free(sp.idx), free(sp.count), free(sp.val);
    free(csr.row_nnz), free(csr.tokens), free(csr.indices), free(csr.values);
    return rc;
}

int hs_features_study(hs_features_result *r, const hs_features_opts *o, const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    const hs_sae *s = &o->sae;
    hs_features_opts own = *o; /* the check, run here too where a caller did not */
    if (!s->W_enc) {
        int rc = hs_features_check(&own, env);
        if (rc)
            return rc;
        o = &own, s = &own.sae;
    }
    const int N = o->top ? o->top : 10;
    feature_stats st = { s->d_sae, N, hs_calloc((size_t)s->d_sae, sizeof(long long), "counts"),
                         hs_calloc((size_t)s->d_sae, sizeof(fixed_sum), "sums"),
                         hs_calloc((size_t)s->d_sae * N, sizeof(example), "top examples"),
                         hs_calloc((size_t)s->d_sae, sizeof(int), "top examples") };
    int rc = st.count && st.sum && st.top && st.n_top ? HS_OK : HS_ENOMEM;
    hs_maps_writer *w = NULL;
    char kind[80], model_sha[80] = "", data_sha[80] = "", status[16], args[2];
    if (env->ix) /* the run's provenance for the file's */
        hs_index_run_get(env->ix, env->run_id, kind, model_sha, data_sha, status, args,
                         sizeof args);
    const hs_maps_meta meta = { model_sha, NULL, env->data_name, data_sha, env->seq_len, 0, 0 };
    char **text = NULL; /* the tokens' strings, when a tokenizer is known */
    int n_text = 0;
    if (!rc && o->out && hs_dist_rank() == 0) /* rank 0 alone writes (dist.h) */
        rc = hs_maps_create(&w, o->out, &meta, o->force);
    if (!rc && w && env->tk && !(rc = hs_token_table(&text, &n_text, env->tk, env->data)))
        rc = hs_maps_set_token_text(w, (const char *const *)text, n_text);
    rc = hs_dist_agree(rc); /* every rank runs the pass's collectives, or none */
    if (!rc)
        rc = features_pass(&st, w, o->out != NULL, o, env, &r->tokens);
    if (!rc && w)
        rc = hs_maps_finish_sha(w, r->sha256, &r->bytes);
    else if (w)
        hs_maps_abort(w);
    hs_token_table_free(text, n_text);
    if (hs_dist_rank() > 0) { /* rank 0 alone writes the rows and attributes */
        stats_free(&st);
        if (s == &own.sae)
            hs_sae_free(&own.sae);
        return rc;
    }
    r->d_sae = s->d_sae;
    r->top_feature = -1;
    double nnz = 0;
    for (int f = 0; !rc && f < s->d_sae; f++) {
        nnz += (double)st.count[f];
        r->alive += st.count[f] > 0;
        if (r->top_feature < 0 || st.count[f] > st.count[r->top_feature])
            r->top_feature = f;
    }
    r->l0 = r->tokens ? nnz / (double)r->tokens : 0;
    if (r->top_feature >= 0 && r->tokens)
        r->top_frequency = (double)st.count[r->top_feature] / (double)r->tokens;
    if (!rc)
        rc = write_metrics(&st, s, r->tokens, env);
    if (!rc)
        rc = write_examples(r, &st, env);
    if (!rc)
        rc = dfa_pass(r, &st, o, env);
    if (!rc && o->out)
        rc = hs_study_record_artifact(env->ix, env->run_id, o->out);
    stats_free(&st);
    if (s == &own.sae)
        hs_sae_free(&own.sae);
    return rc;
}

HS_STUDY_KIND(features, hs_features_check);

/* ---- sae-eval ------------------------------------------------------------------ */

int hs_sae_eval_check(hs_sae_eval_opts *o, const hs_study_env *env)
{
    return open_sae(&o->sae, o->sae_dir, env, 0);
}

void hs_sae_eval_result_free(hs_sae_eval_result *r)
{
    hs_head_table_free(&r->table);
    memset(r, 0, sizeof *r);
}

/* Per-sequence sums of one batch's forward (B sequences). */
static void sequence_losses(double *out, const hs_acts *a, int B, int T)
{
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int t = 0; t < T; t++)
            s += a->losses[(size_t)b * T + t];
        out[b] = s / T;
    }
}

/* What the batches add up to. */
typedef struct {
    double sq_err, nnz;          /* sum ||x - x_hat||^2, active features */
    hs_welford *x;               /* (d_in) each dimension of x over the tokens */
    hs_welford l0, mse, loss_c, loss_s, loss_z;
    hs_welford2 score;           /* per sequence (L_zero - L_sae, L_zero - L_clean) */
    double *lc, *ls, *lz;        /* (B) a batch's per-sequence losses */
} eval_sums;

/* The clean forward's x of one batch, its reconstruction into Xh and
 * the sums; then the forwards with x_hat and with 0 at the hook. */
static int eval_batch(eval_sums *e, hs_acts *a, const hs_model *m, const hs_sae *s,
                      const int32_t *in, const int32_t *tg, hs_real *X, hs_real *Xh, hs_real *pre,
                      hs_real *F, int B, int T)
{
    hs_sae_hook sh = { s, X, 0, 0 };
    hs_hooks hooks = { 0 };
    hooks.site[s->site] = (hs_site_hook){ hs_sae_site, &sh };
    int rc = hs_forward(a, m, in, tg, &hooks);
    double *lc = e->lc, *ls = e->ls, *lz = e->lz;
    if (!rc) {
        sequence_losses(lc, a, B, T);
        rc = hs_sae_encode(s, X, (long)B * T, pre, F);
    }
    if (rc)
        return rc;
    hs_sae_decode(s, F, (long)B * T, Xh);
    for (int b = 0; b < B; b++) {
        double se = 0, nz = 0;
        for (int t = 0; t < T; t++) {
            const size_t r = (size_t)b * T + t;
            for (int i = 0; i < s->d_in; i++) {
                const double x = X[r * s->d_in + i], d = x - Xh[r * s->d_in + i];
                se += d * d;
                hs_welford_add(&e->x[i], x);
            }
            for (int j = 0; j < s->d_sae; j++)
                nz += F[r * s->d_sae + j] > 0;
        }
        e->sq_err += se, e->nnz += nz;
        hs_welford_add(&e->l0, nz / T);
        hs_welford_add(&e->mse, se / ((double)T * s->d_in));
    }
    sh.x = Xh, sh.write = 1;
    rc = hs_forward(a, m, in, tg, &hooks);
    if (!rc)
        sequence_losses(ls, a, B, T);
    memset(X, 0, sizeof *X * (size_t)B * T * s->d_in);
    sh.x = X;
    if (!rc && !(rc = hs_forward(a, m, in, tg, &hooks)))
        sequence_losses(lz, a, B, T);
    for (int b = 0; !rc && b < B; b++) {
        hs_welford_add(&e->loss_c, lc[b]);
        hs_welford_add(&e->loss_s, ls[b]);
        hs_welford_add(&e->loss_z, lz[b]);
        hs_welford2_add(&e->score, lz[b] - ls[b], lz[b] - lc[b]);
    }
    return rc;
}

/* The rows of r: feature -1 at the hook's layer. */
static int eval_rows(const hs_sae_eval_result *r, const hs_sae *s, const hs_study_env *env)
{
    const int L = s->hook_layer;
    const hs_feature_row rows[] = {
        { -1, L, -1, HS_METRIC(SAE_L0), r->l0 },
        { -1, L, -1, HS_METRIC(EXPLAINED_VARIANCE), r->explained_variance },
        { -1, L, -1, HS_METRIC(MSE), r->mse },
        { -1, L, -1, HS_METRIC(CE_LOSS_SCORE), r->ce_loss_score },
        { -1, L, -1, HS_METRIC(LOSS_CLEAN), r->loss_clean },
        { -1, L, -1, HS_METRIC(LOSS_SAE), r->loss_sae },
        { -1, L, -1, HS_METRIC(LOSS_ZERO), r->loss_zero },
    };
    return env->ix ? hs_index_feature_metrics_add(env->ix, env->run_id, rows,
                                                  (int)(sizeof rows / sizeof rows[0]))
                   : HS_OK;
}

static void eval_finish(hs_sae_eval_result *r, const eval_sums *e, const hs_sae *s)
{
    const double N = (double)r->tokens;
    double var = 0; /* sum over tokens of ||x - mean x||^2 */
    for (int i = 0; i < s->d_in; i++)
        var += e->x[i].m2;
    r->l0 = e->nnz / N;
    r->mse = e->sq_err / (N * s->d_in);
    r->explained_variance = var > 0 ? 1 - e->sq_err / var : NAN;
    r->loss_clean = e->loss_c.mean, r->loss_sae = e->loss_s.mean, r->loss_zero = e->loss_z.mean;
    const hs_welford2 *w = &e->score;
    const double R = w->my != 0 ? w->mx / w->my : NAN;
    r->ce_loss_score = R;
    r->se_l0 = hs_welford_stderr(&e->l0);
    r->se_mse = hs_welford_stderr(&e->mse);
    const double v = w->n > 1 ? (w->m2x - 2 * R * w->cxy + R * R * w->m2y) / (double)(w->n - 1)
                              : NAN;
    r->se_score = sqrt(v > 0 ? v : 0) / sqrt((double)w->n) / fabs(w->my);
    r->gap = w->my;
    r->se_gap = w->n > 1 ? sqrt(w->m2y / (double)(w->n - 1)) / sqrt((double)w->n) : NAN;
}

int hs_sae_eval_study(hs_sae_eval_result *r, const hs_sae_eval_opts *o, const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    hs_sae_eval_opts own = *o;
    const hs_sae *s = &o->sae;
    if (!s->W_enc) {
        int rc = hs_sae_eval_check(&own, env);
        if (rc)
            return rc;
        s = &own.sae;
    }
    const int B = env->batch, T = env->seq_len;
    size_t nb;
    int rc = hs_batches_to_run(env->data, B, T, env->max_batches, &nb);
    const size_t n = (size_t)B * T;
    hs_acts a = { 0 };
    if (!rc)
        rc = hs_acts_alloc(&a, &env->m->cfg, B, T, HS_ACTS_LOSS);
    eval_sums e = { .x = hs_calloc((size_t)s->d_in, sizeof(hs_welford), "SAE sums"),
                    .lc = hs_calloc((size_t)B * 3, sizeof(double), "losses") };
    e.ls = e.lc ? e.lc + B : NULL, e.lz = e.lc ? e.lc + 2 * B : NULL;
    hs_real *X = hs_calloc(n * s->d_in, sizeof *X, "SAE inputs");
    hs_real *Xh = hs_calloc(n * s->d_in, sizeof *Xh, "SAE reconstructions");
    hs_real *pre = hs_calloc(n * s->d_sae, sizeof *pre, "SAE pre-activations");
    hs_real *F = hs_calloc(n * s->d_sae, sizeof *F, "SAE features");
    int32_t *in = hs_calloc(n, sizeof *in, "inputs"), *tg = hs_calloc(n, sizeof *tg, "targets");
    if (!rc && !(e.x && e.lc && X && Xh && pre && F && in && tg))
        rc = HS_ENOMEM;
    hs_study_phase(&env->io, "sae-eval");
    for (size_t bi = 0; !rc && bi < nb; bi++) {
        if (env->io.stop && *env->io.stop) {
            rc = hs_fail(HS_EINTR, "interrupted");
            break;
        }
        hs_batch_at(env->data, bi * n, B, T, in, tg);
        rc = eval_batch(&e, &a, env->m, s, in, tg, X, Xh, pre, F, B, T);
        r->tokens += (long long)n;
        r->sequences += B;
        if (!rc && env->io.progress)
            env->io.progress(env->io.ctx, bi + 1, nb);
    }
    hs_study_phase(&env->io, NULL);
    if (!rc)
        eval_finish(r, &e, s);
    if (!rc)
        rc = eval_rows(r, s, env);
    hs_acts_free(&a);
    free(e.x), free(e.lc), free(X), free(Xh), free(pre), free(F), free(in), free(tg);
    if (s == &own.sae)
        hs_sae_free(&own.sae);
    return rc;
}

HS_STUDY_KIND(sae_eval, hs_sae_eval_check);
