#include "patterns.h"
#include "config_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "metrics.h"
#include "pairs.h"
#include "stats.h"
#include "transformer.h"

const char *hs_pattern_name(int kind)
{
    static const hs_metric_id ids[HS_PAT_ALL_KINDS] = {
        HS_M_ENTROPY, HS_M_SELF,  HS_M_PREV_TOKEN, HS_M_NEXT_TOKEN, HS_M_FIRST_TOKEN,
        HS_M_DELIM,   HS_M_DISTANCE, HS_M_CLS,     HS_M_SEP,        HS_M_PUNCT };
    return kind >= 0 && kind < HS_PAT_ALL_KINDS ? hs_metric(ids[kind])->name : "?";
}

void hs_patterns_free(hs_patterns *p)
{
    free(p->head);
    for (int k = 0; k < HS_PAT_ALL_KINDS; k++) {
        free(p->value[k]);
        free(p->stderr_value[k]);
    }
    free(p->sink_value), free(p->sink_stderr), free(p->sink_n);
    memset(p, 0, sizeof *p);
}

int hs_patterns_to_table(hs_head_table *t, const hs_patterns *p, const char *suffix)
{
    char name[64];
    int rc = HS_OK;
    for (int k = 0; !rc && k < HS_PAT_ALL_KINDS; k++) {
        if (!p->recorded[k])
            continue;
        snprintf(name, sizeof name, "%s%s", hs_pattern_name(k), suffix);
        for (int li = 0; !rc && li < p->n_layer; li++)
            for (int hi = 0; !rc && hi < p->n_head[li]; hi++) {
                const size_t i = (size_t)li * HS_MAX_HEADS + hi;
                rc = hs_head_table_add(t, p->layer[li], p->head[i], name, p->value[k][i],
                                       p->stderr_value[k][i], p->n);
                if (!rc && p->attn != HS_ATTN_SELF)
                    t->rows[t->n - 1].attn = hs_attn_type_name(p->attn);
            }
    }
    return rc;
}

/* enc: an encoder's ids (NULL: a causal LM), which say the kinds recorded;
 * n_sink: the alpha_k kept. */
static int patterns_alloc(hs_patterns *p, int n_layer, const hs_special_ids *enc, int n_sink)
{
    if (n_sink < 0 || n_sink > HS_MAX_SINK_POSITIONS)
        return hs_fail(HS_EINVAL, "alpha_k of %d positions: 0 .. %d", n_sink,
                       HS_MAX_SINK_POSITIONS);
    const size_t n = (size_t)n_layer * HS_MAX_HEADS;
    for (int k = 0; k < HS_PAT_KINDS; k++)
        p->recorded[k] = 1;
    if (enc) {
        p->recorded[HS_PAT_CLS] = enc->cls >= 0;
        p->recorded[HS_PAT_SEP] = enc->sep >= 0;
        p->recorded[HS_PAT_PUNCT] = enc->punct[0] >= 0 || enc->punct[1] >= 0;
    }
    for (int k = 0; k < HS_PAT_ALL_KINDS; k++)
        if (!(p->value[k] = hs_calloc(n, sizeof(double), "patterns")) ||
            !(p->stderr_value[k] = hs_calloc(n, sizeof(double), "patterns"))) {
            hs_patterns_free(p);
            return HS_ENOMEM;
        }
    p->n_sink = n_sink;
    if (!(p->head = hs_calloc(n, sizeof(int), "pattern heads")) ||
        (n_sink && (!(p->sink_value = hs_calloc(n * n_sink, sizeof(double), "sinks")) ||
                    !(p->sink_stderr = hs_calloc(n * n_sink, sizeof(double), "sinks")) ||
                    !(p->sink_n = hs_calloc(n * n_sink, sizeof(long), "sinks"))))) {
        hs_patterns_free(p);
        return HS_ENOMEM;
    }
    p->n_layer = n_layer;
    return HS_OK;
}

/* The mass of row a (keys 0..keys-1) on the keys whose token is id. */
static double mass_on(const hs_real *a, int keys, const int32_t *tok, int32_t id)
{
    double m = 0;
    for (int s = 0; id >= 0 && s < keys; s++)
        if (tok[s] == id)
            m += a[s];
    return m;
}

/* Adds the statistics of query t's row a (keys 0..keys-1; later keys are
 * masked) into out. tok: the sequence's tokens, for delim; enc: an
 * encoder's ids (NULL: none), for cls, sep and punct. */
static void row_stats(double *out, const hs_real *a, int t, int keys, const int32_t *tok,
                      const int32_t *delim, int n_delim, const hs_special_ids *enc)
{
    double entropy = 0, dist = 0, dl = 0;
    for (int s = 0; s < keys; s++) {
        const double p = a[s];
        if (p > 0)
            entropy -= p * log(p);
        dist += p * abs(t - s);
        for (int k = 0; k < n_delim; k++)
            if (tok[s] == delim[k]) {
                dl += p;
                break;
            }
    }
    out[HS_PAT_ENTROPY] += entropy;
    out[HS_PAT_SELF] += t < keys ? a[t] : 0;
    out[HS_PAT_PREV] += t >= 1 && t - 1 < keys ? a[t - 1] : 0;
    out[HS_PAT_NEXT] += t + 1 < keys ? a[t + 1] : 0;
    out[HS_PAT_FIRST] += keys > 0 ? a[0] : 0;
    out[HS_PAT_DELIM] += dl;
    out[HS_PAT_DISTANCE] += dist;
    if (!enc)
        return;
    out[HS_PAT_CLS] += mass_on(a, keys, tok, enc->cls);
    out[HS_PAT_SEP] += mass_on(a, keys, tok, enc->sep);
    out[HS_PAT_PUNCT] += mass_on(a, keys, tok, enc->punct[0]) +
                         (enc->punct[1] != enc->punct[0] ? mass_on(a, keys, tok, enc->punct[1]) : 0);
}

/* 1 when token tok of an encoder is padding: no query (enc NULL: never). */
static int is_pad(const hs_special_ids *enc, int32_t tok)
{
    return enc && enc->pad >= 0 && tok == enc->pad;
}

/* The real queries of a sequence of T tokens: valid's (NULL: none given),
 * else an encoder's that are not padding. */
static int real_queries(const hs_special_ids *enc, const unsigned char *valid, const int32_t *tok,
                        int T)
{
    int n = 0;
    for (int t = 0; t < T; t++)
        n += valid ? valid[t] != 0 : !is_pad(enc, tok[t]);
    return n;
}

/* qk[k] for k < n_sink: the real queries t >= k of a sequence (alpha_k's
 * divisor), as real_queries counts them. */
static void sink_queries(int *qk, int n_sink, const hs_special_ids *enc,
                         const unsigned char *valid, const int32_t *tok, int T)
{
    for (int k = 0; k < n_sink; k++) {
        qk[k] = 0;
        for (int t = k; t < T; t++)
            qk[k] += valid ? valid[t] != 0 : !is_pad(enc, tok[t]);
    }
}

/* Per-sequence sums of one batch, kept per thread, then folded into sums
 * over sequences: per head the HS_PAT_ALL_KINDS statistics, then alpha_k's
 * n_sink sums (`stride` values a head). */
typedef struct {
    const hs_model_config *c;
    const int32_t *tok; /* (B,T) of the batch */
    const unsigned char *valid; /* (B,T) of the batch: 1 a token, 0 padding (NULL: none) */
    int B, T;
    const int32_t *delim;
    int n_delim;
    const hs_special_ids *enc; /* an encoder's ids (pad: the model's), NULL for a causal LM */
    int threads;
    int n_sink, stride;
    double *batch; /* [thread][b][layer][head][stride] */
} run_ctx;

static size_t slot(const run_ctx *r, int thread, int b, int l, int h)
{
    return ((((size_t)thread * r->B + b) * r->c->n_layer + l) * HS_MAX_HEADS + h) * r->stride;
}

/* Adds row a of query t (keys 0..keys-1) into alpha_k's sums (t >= k). */
static void sink_stats(double *out, const hs_real *a, int t, int keys, int n_sink)
{
    for (int k = 0; k < n_sink && k <= t && k < keys; k++)
        out[k] += a[k];
}

static void on_rows(void *ctx, int layer, int thread, int b, int h, int t0, int n,
                    const hs_real *P, int ldp, int keys)
{
    run_ctx *r = ctx;
    double *out = r->batch + slot(r, thread, b, layer, h);
    const int32_t *tok = r->tok + (size_t)b * r->T;
    const unsigned char *valid = r->valid ? r->valid + (size_t)b * r->T : NULL;
    for (int i = 0; i < n; i++) {
        const int t = t0 + i;
        if (valid ? !valid[t] : is_pad(r->enc, tok[t])) /* a padded query */
            continue;
        /* causal rows end at t; an encoder's span every key */
        const int k = r->enc || keys < t + 1 ? keys : t + 1;
        row_stats(out, P + (size_t)i * ldp, t, k, tok, r->delim, r->n_delim, r->enc);
        sink_stats(out + HS_PAT_ALL_KINDS, P + (size_t)i * ldp, t, k, r->n_sink);
    }
}

/* acc[(l * HS_MAX_HEADS + h) * stride + k]: the per-sequence means of
 * statistic k of head (l, h) over sequences, then alpha_k's (stride =
 * HS_PAT_ALL_KINDS + p->n_sink). */
static void finish(hs_patterns *p, const hs_welford *acc, long n)
{
    const int stride = HS_PAT_ALL_KINDS + p->n_sink;
    for (int l = 0; l < p->n_layer; l++)
        for (int h = 0; h < p->n_head[l]; h++) {
            const size_t i = (size_t)l * HS_MAX_HEADS + h;
            const hs_welford *w = &acc[i * stride];
            for (int k = 0; k < HS_PAT_ALL_KINDS; k++) {
                p->value[k][i] = w[k].mean;
                p->stderr_value[k][i] = hs_welford_stderr(&w[k]);
            }
            for (int k = 0; k < p->n_sink; k++) {
                const hs_welford *ws = &w[HS_PAT_ALL_KINDS + k];
                p->sink_value[i * p->n_sink + k] = ws->mean;
                p->sink_stderr[i * p->n_sink + k] = hs_welford_stderr(ws);
                p->sink_n[i * p->n_sink + k] = (long)ws->n;
            }
        }
    p->n = n;
}

/* One sequence's values, in (layer, head, stride) order, into v: its sums
 * over its queries as means (alpha_k's over the qk[k] queries t >= k; NaN
 * where there is none: no value). */
static void keep_sequence(double *v, const double *sums, int n_layer, const int *n_head,
                          int queries, const int *qk, int n_sink)
{
    const int stride = HS_PAT_ALL_KINDS + n_sink;
    for (int l = 0; l < n_layer; l++)
        for (int h = 0; h < n_head[l]; h++) {
            const double *s = sums + ((size_t)l * HS_MAX_HEADS + h) * stride;
            for (int k = 0; k < HS_PAT_ALL_KINDS; k++)
                *v++ = s[k] / queries;
            for (int k = 0; k < n_sink; k++)
                *v++ = qk[k] ? s[HS_PAT_ALL_KINDS + k] / qk[k] : NAN;
        }
}

/* Adds one sequence's kept values v (keep_sequence's) to acc; alpha_k only
 * where the sequence has a query t >= k. */
static void fold_sequence(hs_welford *acc, const double *v, int n_layer, const int *n_head,
                          const int *qk, int n_sink)
{
    const int stride = HS_PAT_ALL_KINDS + n_sink;
    for (int l = 0; l < n_layer; l++)
        for (int h = 0; h < n_head[l]; h++) {
            hs_welford *w = &acc[((size_t)l * HS_MAX_HEADS + h) * stride];
            for (int k = 0; k < stride; k++, v++)
                if (k < HS_PAT_ALL_KINDS || qk[k - HS_PAT_ALL_KINDS])
                    hs_welford_add(&w[k], *v);
        }
}

/* A sequence's record: its real queries, alpha_k's divisors qk (n_sink), then
 * keep_sequence's values; the record's length in doubles for these heads. */
static size_t record_len(int n_layer, const int *n_head, int n_sink)
{
    size_t n = 1 + (size_t)n_sink;
    for (int l = 0; l < n_layer; l++)
        n += (size_t)n_head[l] * (HS_PAT_ALL_KINDS + n_sink);
    return n;
}

static void keep_record(double *v, const double *sums, int n_layer, const int *n_head,
                        int queries, const int *qk, int n_sink)
{
    v[0] = queries;
    for (int k = 0; k < n_sink; k++)
        v[1 + k] = qk[k];
    if (queries)
        keep_sequence(v + 1 + n_sink, sums, n_layer, n_head, queries, qk, n_sink);
}

/* Folds a record into acc (a sequence without a real query adds nothing);
 * 1 when it added a sequence. */
static int fold_record(hs_welford *acc, const double *v, int n_layer, const int *n_head,
                       int n_sink)
{
    if (!(v[0] > 0))
        return 0;
    int qk[HS_MAX_SINK_POSITIONS];
    for (int k = 0; k < n_sink; k++)
        qk[k] = (int)v[1 + k];
    fold_sequence(acc, v + 1 + n_sink, n_layer, n_head, qk, n_sink);
    return 1;
}

/* shard (dist.h): this rank runs its batches and keeps every sequence's
 * values (heads x kinds, add_sequence's order); rank 0 folds them in
 * sequence order, as one process does. */
static int run(hs_patterns *p, const hs_model *m, const hs_tokens *data, int B, int T,
               size_t max_batches, const int32_t *delim, int n_delim,
               const hs_special_ids *ids, int n_sink, hs_progress_fn progress,
               void *progress_ctx, int shard)
{
    const hs_model_config *c = &m->cfg;
    memset(p, 0, sizeof *p);
    size_t nb;
    if (hs_heads_fit(c) || hs_batches_to_run(data, B, T, max_batches, &nb))
        return HS_EINVAL;
    /* an encoder's ids, its padding the model's own */
    hs_special_ids enc;
    if (c->encoder) {
        if (ids)
            enc = *ids;
        else
            hs_special_ids_of(&enc, c, NULL);
        enc.pad = c->pad_id;
    }
    const hs_special_ids *e = c->encoder ? &enc : NULL;
    int rc = patterns_alloc(p, c->n_layer, e, n_sink);
    if (rc)
        return rc;
    for (int l = 0; l < c->n_layer; l++) {
        p->layer[l] = l;
        p->n_head[l] = c->n_head[l];
        for (int h = 0; h < c->n_head[l]; h++)
            p->head[(size_t)l * HS_MAX_HEADS + h] = h;
    }
    hs_acts a;
    rc = hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER);
    if (rc) {
        hs_patterns_free(p);
        return rc;
    }
    hs_tokens plain = *data; /* the statistics read the text as it is: no masked-LM choice */
    plain.mlm.on = 0;
    run_ctx r = { c, NULL, NULL, B, T, delim, n_delim, e, hs_get_threads(),
                  n_sink, HS_PAT_ALL_KINDS + n_sink, NULL };
    const size_t per_seq = (size_t)c->n_layer * HS_MAX_HEADS * r.stride;
    r.batch = hs_calloc((size_t)r.threads * B * per_seq, sizeof(double), "pattern sums");
    hs_welford *acc = hs_calloc(per_seq, sizeof *acc, "patterns");
    double *seq = hs_calloc(per_seq, sizeof(double), "patterns");
    int32_t *in = hs_calloc((size_t)B * T, sizeof(int32_t), "inputs");
    int32_t *tg = hs_calloc((size_t)B * T, sizeof(int32_t), "targets");
    if (!r.batch || !acc || !seq || !in || !tg)
        rc = HS_ENOMEM;
    hs_hooks hooks = { .ctx = &r, .on_rows = on_rows };
    /* per sequence a record (keep_record): every sequence's when sharded, else one */
    size_t lo = 0, hi = nb;
    const size_t vals = record_len(c->n_layer, c->n_head, n_sink);
    long docs = 0;
    if (shard)
        hs_dist_range(nb, hs_dist_rank(), &lo, &hi);
    double *kept = rc ? NULL : hs_calloc((shard ? nb * B : 1) * vals, sizeof(double),
                                         "pattern values");
    if (!kept)
        rc = HS_ENOMEM;
    for (size_t bi = lo; !rc && bi < hi; bi++) {
        hs_batch_at(&plain, bi * (size_t)B * T, B, T, in, tg);
        r.tok = in, r.valid = data->valid ? data->valid + bi * (size_t)B * T : NULL;
        memset(r.batch, 0, sizeof(double) * (size_t)r.threads * B * per_seq);
        rc = hs_forward(&a, m, in, NULL, &hooks);
        for (int b = 0; !rc && b < B; b++) {
            memset(seq, 0, sizeof(double) * per_seq);
            for (int th = 0; th < r.threads; th++) {
                const double *src = r.batch + slot(&r, th, b, 0, 0);
                for (size_t i = 0; i < per_seq; i++)
                    seq[i] += src[i];
            }
            const unsigned char *vb = r.valid ? r.valid + (size_t)b * T : NULL;
            const int32_t *tb = in + (size_t)b * T;
            int qk[HS_MAX_SINK_POSITIONS];
            sink_queries(qk, n_sink, e, vb, tb, T);
            double *v = kept + (shard ? (bi * B + b) * vals : 0);
            keep_record(v, seq, c->n_layer, c->n_head, real_queries(e, vb, tb, T), qk, n_sink);
            if (!shard)
                docs += fold_record(acc, v, c->n_layer, c->n_head, n_sink);
        }
        if (!rc && progress)
            progress(progress_ctx, bi + 1 - lo, hi - lo);
    }
    if (shard) {
        rc = hs_dist_collect(rc, kept, B * vals * sizeof(double), nb);
        for (size_t i = 0; !rc && i < nb * B; i++)
            docs += fold_record(acc, kept + i * vals, c->n_layer, c->n_head, n_sink);
    }
    free(kept);
    if (!rc)
        finish(p, acc, docs);
    else
        hs_patterns_free(p);
    free(r.batch), free(acc), free(seq), free(in), free(tg);
    hs_acts_free(&a);
    return rc;
}

int hs_patterns_run(hs_patterns *p, const hs_model *m, const hs_tokens *data, int B, int T,
                    size_t max_batches, const int32_t *delim, int n_delim,
                    hs_progress_fn progress, void *progress_ctx)
{
    return run(p, m, data, B, T, max_batches, delim, n_delim, NULL, 0, progress, progress_ctx, 0);
}

int hs_patterns_run_dist(hs_patterns *p, const hs_model *m, const hs_tokens *data, int B, int T,
                         size_t max_batches, const int32_t *delim, int n_delim,
                         const hs_special_ids *ids, int n_sink, hs_progress_fn progress,
                         void *progress_ctx)
{
    return run(p, m, data, B, T, max_batches, delim, n_delim, ids, n_sink, progress,
               progress_ctx, 1);
}

/* Adds pair b's statistics of one map into sums (per head HS_PAT_ALL_KINDS):
 * att (B,H,rows,ld) of a forward; its real queries nq, keys the source's
 * ns (cross, enc: bidirectional) or the query's prefix (causal). */
static void pair_map_stats(double *sums, const hs_real *att, int b, int H, int rows, int ld,
                           int nq, int ns, int causal, const int32_t *tok, const int32_t *delim,
                           int n_delim)
{
    for (int h = 0; h < H; h++)
        for (int t = 0; t < nq; t++) {
            const hs_real *a = att + (((size_t)b * H + h) * rows + t) * ld;
            row_stats(sums + (size_t)h * HS_PAT_ALL_KINDS, a, t, causal ? t + 1 : ns, tok,
                      delim, n_delim, NULL);
        }
}

/* One batch's pairs folded into acc[type] (per unit and head, HS_PAT_ALL_KINDS
 * accumulators): a holds the batch's maps, src (n,S) and dec (n,T) its ids. */
static void pairs_fold(hs_welford *const acc[3], double *sums, const hs_s2s_acts *a,
                       const hs_model_config *c, const hs_pairs *p, int i0, const int32_t *src,
                       const int32_t *dec, const int32_t *delim, int n_delim)
{
    const int E = c->enc_layers, S = a->S, T = a->T;
    for (int b = 0; b < a->B; b++) {
        const int ns = p->src_len[i0 + b], nt = p->tgt_len[i0 + b];
        for (int l = 0; l < c->n_layer; l++)
            for (int cross = 0; cross <= (l >= E); cross++) {
                const int ty = l < E ? 0 : cross ? 2 : 1, H = c->n_head[l], u = l < E ? l : l - E;
                const int nq = ty ? nt : ns;
                memset(sums, 0, sizeof(double) * H * HS_PAT_ALL_KINDS);
                if (ty == 1)
                    pair_map_stats(sums, a->self[l].att, b, H, T, T, nq, 0, 1,
                                   dec + (size_t)b * T, delim, n_delim);
                else
                    pair_map_stats(sums, ty ? a->cross[l].att : a->self[l].att, b, H,
                                   ty ? T : S, S, nq, ns, 0, src + (size_t)b * S, delim, n_delim);
                for (int h = 0; h < H; h++)
                    for (int k = 0; k < HS_PAT_ALL_KINDS; k++)
                        hs_welford_add(&acc[ty][((size_t)u * HS_MAX_HEADS + h) * HS_PAT_ALL_KINDS + k],
                                       sums[(size_t)h * HS_PAT_ALL_KINDS + k] / nq);
            }
    }
}

/* out[3] and their accumulators acc[3] (per unit and head HS_PAT_ALL_KINDS)
 * for n_units[type] units of each type; the caller names the units' layers
 * and heads. */
static int pairs_alloc(hs_patterns out[3], hs_welford *acc[3], const int n_units[3])
{
    memset(out, 0, 3 * sizeof *out);
    int rc = HS_OK;
    for (int ty = 0; ty < 3; ty++)
        acc[ty] = NULL;
    for (int ty = 0; !rc && ty < 3; ty++)
        if (!(rc = patterns_alloc(&out[ty], n_units[ty], NULL, 0))) {
            out[ty].attn = (hs_attn_type)(HS_ATTN_ENC + ty);
            acc[ty] = hs_calloc((size_t)(n_units[ty] ? n_units[ty] : 1) * HS_MAX_HEADS *
                                HS_PAT_ALL_KINDS, sizeof(hs_welford), "patterns");
            rc = acc[ty] ? HS_OK : HS_ENOMEM;
        }
    return rc;
}

/* The means of acc into out (rc 0), else out freed; acc freed. */
static void pairs_finish(hs_patterns out[3], hs_welford *acc[3], int rc, long pairs)
{
    for (int ty = 0; ty < 3; ty++) {
        if (!rc)
            finish(&out[ty], acc[ty], pairs);
        else
            hs_patterns_free(&out[ty]);
        free(acc[ty]);
    }
}

int hs_pairs_patterns(hs_patterns out[3], const hs_model *m, const hs_pairs *p, int B,
                      size_t max_batches, const int32_t *delim, int n_delim,
                      hs_progress_fn progress, void *progress_ctx)
{
    const hs_model_config *c = &m->cfg;
    const int E = c->enc_layers, units[3] = { E, c->n_layer - E, c->n_layer - E };
    hs_welford *acc[3];
    int rc = pairs_alloc(out, acc, units);
    if (!rc && B < 1)
        rc = hs_fail(HS_EINVAL, "batch %d must be positive", B);
    for (int ty = 0; !rc && ty < 3; ty++)
        for (int u = 0; u < units[ty]; u++) {
            const int l = (ty ? E : 0) + u;
            out[ty].layer[u] = u;
            out[ty].n_head[u] = c->n_head[l];
            for (int h = 0; h < c->n_head[l]; h++)
                out[ty].head[(size_t)u * HS_MAX_HEADS + h] = h;
        }
    size_t nb = B > 0 ? ((size_t)p->n + (size_t)B - 1) / (size_t)B : 0;
    if (max_batches && max_batches < nb)
        nb = max_batches;
    int32_t *src = hs_calloc((size_t)(B > 0 ? B : 1) * p->max_src, sizeof *src, "pairs batch");
    int32_t *dec = hs_calloc((size_t)(B > 0 ? B : 1) * p->max_tgt, sizeof *dec, "pairs batch");
    double *sums = hs_calloc((size_t)HS_MAX_HEADS * HS_PAT_ALL_KINDS, sizeof(double), "patterns");
    if (!rc && !(src && dec && sums))
        rc = HS_ENOMEM;
    hs_s2s_acts a = { 0 };
    long pairs = 0;
    for (size_t k = 0; !rc && k < nb; k++) {
        const int i0 = (int)k * B, n = p->n - i0 < B ? p->n - i0 : B;
        int S, T;
        hs_pairs_batch_shape(p, i0, n, &S, &T);
        hs_pairs_fill(src, dec, NULL, p, c, i0, n, S, T);
        rc = hs_pairs_acts_for(&a, c, n, S, T, HS_S2S_MAPS);
        if (!rc)
            rc = hs_s2s_encode(&a, m, src);
        if (!rc)
            rc = hs_s2s_decode(&a, m, dec, NULL);
        if (!rc)
            pairs_fold(acc, sums, &a, c, p, i0, src, dec, delim, n_delim);
        pairs += n;
        if (!rc && progress)
            progress(progress_ctx, k + 1, nb);
    }
    hs_s2s_acts_free(&a);
    pairs_finish(out, acc, rc, pairs);
    free(src), free(dec), free(sums);
    return rc;
}

/* One sequence of an encoder-decoder's map file folded into acc (units
 * numbered per type in file order): a query row of exactly 0 is padding. */
static int maps_pair_fold(hs_welford *const acc[3], double *sums, hs_maps_reader *r, long long n,
                          float *map, hs_real *row, const int32_t *src, const int32_t *dec,
                          const int32_t *delim, int n_delim)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    int units[3] = { 0, 0, 0 }, rc = HS_OK;
    for (int li = 0; !rc && li < in->n_layers; li++) {
        const hs_maps_layer_info *l = &in->layers[li];
        const int ty = l->attn - HS_ATTN_ENC, u = units[ty]++;
        int queries = 0;
        memset(sums, 0, sizeof(double) * HS_MAX_HEADS * HS_PAT_ALL_KINDS);
        for (int hi = 0; !rc && hi < l->nh; hi++) {
            rc = hs_maps_read(r, li, n, hi, map);
            queries = 0;
            for (int q = 0; !rc && q < l->nq; q++) {
                double mass = 0;
                for (int s = 0; s < l->S; s++)
                    mass += row[s] = map[(size_t)q * l->S + s];
                if (!(mass > 0))
                    continue;
                const int t = l->q0 + q;
                queries++;
                row_stats(sums + (size_t)hi * HS_PAT_ALL_KINDS, row, t,
                          ty == 1 && t + 1 < l->S ? t + 1 : l->S, ty == 1 ? dec : src, delim,
                          n_delim, NULL);
            }
        }
        for (int hi = 0; !rc && queries && hi < l->nh; hi++)
            for (int k = 0; k < HS_PAT_ALL_KINDS; k++)
                hs_welford_add(&acc[ty][((size_t)u * HS_MAX_HEADS + hi) * HS_PAT_ALL_KINDS + k],
                               sums[(size_t)hi * HS_PAT_ALL_KINDS + k] / queries);
    }
    return rc;
}

int hs_pairs_patterns_from_maps(hs_patterns out[3], hs_maps_reader *r, const int32_t *delim,
                                int n_delim)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    int units[3] = { 0, 0, 0 };
    for (int li = 0; li < in->n_layers; li++)
        if (in->layers[li].attn >= HS_ATTN_ENC && in->layers[li].attn <= HS_ATTN_CROSS)
            units[in->layers[li].attn - HS_ATTN_ENC]++;
    hs_welford *acc[3];
    int rc = pairs_alloc(out, acc, units);
    if (!rc && !in->complete)
        rc = hs_fail(HS_EFORMAT, "map file is not marked complete");
    if (!rc && (!in->seq2seq || units[0] + units[1] + units[2] != in->n_layers))
        rc = hs_fail(HS_EFORMAT, "the map file is not an encoder-decoder's");
    for (int li = 0, k[3] = { 0, 0, 0 }; !rc && li < in->n_layers; li++) {
        const hs_maps_layer_info *l = &in->layers[li];
        hs_patterns *o = &out[l->attn - HS_ATTN_ENC];
        const int u = k[l->attn - HS_ATTN_ENC]++;
        o->layer[u] = l->layer;
        o->n_head[u] = l->nh;
        memcpy(o->head + (size_t)u * HS_MAX_HEADS, l->heads, sizeof(int) * l->nh);
    }
    const int S = in->src_len, T = in->seq_len, K = S > T ? S : T;
    float *map = hs_calloc((size_t)K * K, sizeof(float), "map");
    hs_real *row = hs_calloc((size_t)K, sizeof(hs_real), "map row");
    int32_t *src = hs_calloc((size_t)S + 1, sizeof(int32_t), "tokens");
    int32_t *dec = hs_calloc((size_t)T + 1, sizeof(int32_t), "tokens");
    double *sums = hs_calloc((size_t)HS_MAX_HEADS * HS_PAT_ALL_KINDS, sizeof(double), "patterns");
    if (!rc && !(map && row && src && dec && sums))
        rc = HS_ENOMEM;
    for (long long n = 0; !rc && n < in->n_seq; n++) {
        rc = hs_maps_read_tokens(r, n, dec);
        if (!rc)
            rc = hs_maps_read_source(r, n, src, NULL);
        if (!rc)
            rc = maps_pair_fold(acc, sums, r, n, map, row, src, dec, delim, n_delim);
    }
    pairs_finish(out, acc, rc, rc ? 0 : (long)in->n_seq);
    free(map), free(row), free(src), free(dec), free(sums);
    return rc;
}

/* The ids of the encoder whose maps the file holds (its model_config), or
 * NULL for a causal LM's (or a configuration that no longer parses). */
static const hs_special_ids *maps_encoder(const hs_maps_info *in, hs_special_ids *ids)
{
    hs_model_config c;
    if (!in->model_config || hs_config_parse(&c, in->model_config, "map file") || !c.encoder)
        return NULL;
    hs_special_ids_of(ids, &c, NULL);
    ids->pad = c.pad_id;
    return ids;
}

int hs_patterns_from_maps(hs_patterns *p, hs_maps_reader *r, const int32_t *delim, int n_delim,
                          int n_sink)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    memset(p, 0, sizeof *p);
    if (!in->complete)
        return hs_fail(HS_EFORMAT, "map file is not marked complete");
    hs_special_ids ids;
    const hs_special_ids *e = maps_encoder(in, &ids);
    int rc = patterns_alloc(p, in->n_layers, e, n_sink);
    if (rc)
        return rc;
    const int T = in->seq_len;
    for (int li = 0; li < in->n_layers; li++) {
        p->layer[li] = in->layers[li].layer;
        p->n_head[li] = in->layers[li].nh;
        memcpy(p->head + (size_t)li * HS_MAX_HEADS, in->layers[li].heads,
               sizeof(int) * in->layers[li].nh);
    }
    const int stride = HS_PAT_ALL_KINDS + n_sink;
    const size_t per_seq = (size_t)in->n_layers * HS_MAX_HEADS * stride;
    hs_welford *acc = hs_calloc(per_seq, sizeof *acc, "patterns");
    double *seq = hs_calloc(per_seq, sizeof(double), "patterns");
    double *rec = hs_calloc(record_len(in->n_layers, p->n_head, n_sink), sizeof(double),
                            "pattern values");
    float *map = hs_calloc((size_t)T * T, sizeof(float), "map");
    hs_real *row = hs_calloc((size_t)T, sizeof(hs_real), "map row");
    int32_t *tok = hs_calloc((size_t)T, sizeof(int32_t), "tokens");
    if (!acc || !seq || !rec || !map || !row || !tok)
        rc = HS_ENOMEM;
    long docs = 0;
    for (long long n = 0; !rc && n < in->n_seq; n++) {
        memset(seq, 0, sizeof(double) * per_seq);
        rc = hs_maps_read_tokens(r, n, tok);
        int queries = 0, qk[HS_MAX_SINK_POSITIONS]; /* the captured queries that are real */
        for (int li = 0; !rc && li < in->n_layers; li++) {
            const hs_maps_layer_info *l = &in->layers[li];
            queries = 0;
            for (int q = 0; q < l->nq; q++)
                queries += !is_pad(e, tok[l->q0 + q]);
            for (int k = 0; k < n_sink; k++) {
                qk[k] = 0;
                for (int q = 0; q < l->nq; q++)
                    qk[k] += l->q0 + q >= k && !is_pad(e, tok[l->q0 + q]);
            }
            for (int hi = 0; !rc && hi < l->nh; hi++) {
                rc = hs_maps_read(r, li, n, hi, map);
                for (int q = 0; !rc && q < l->nq; q++) {
                    const int t = l->q0 + q;
                    if (is_pad(e, tok[t]))
                        continue;
                    for (int s = 0; s < l->S; s++)
                        row[s] = map[(size_t)q * l->S + s];
                    /* a causal map's keys after t hold exactly 0: the whole row either way */
                    double *out = seq + ((size_t)li * HS_MAX_HEADS + hi) * stride;
                    const int keys = e ? l->S : t + 1 < l->S ? t + 1 : l->S;
                    row_stats(out, row, t, keys, tok, delim, n_delim, e);
                    sink_stats(out + HS_PAT_ALL_KINDS, row, t, keys, n_sink);
                }
            }
        }
        if (!rc) {
            keep_record(rec, seq, in->n_layers, p->n_head, queries, qk, n_sink);
            docs += fold_record(acc, rec, in->n_layers, p->n_head, n_sink);
        }
    }
    if (!rc)
        finish(p, acc, docs);
    else
        hs_patterns_free(p);
    free(acc), free(seq), free(rec), free(map), free(row), free(tok);
    return rc;
}

/* Adds sqrt(JSD) of every pair (i < j) of the n heads' rows into d (n x n,
 * upper triangle): maps holds one sequence's rows, head-major (n, nq, S). */
static void js_accumulate(double *d, int n, const float *maps, int nq, int S)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            for (int q = 0; q < nq; q++) {
                const float *a = maps + ((size_t)i * nq + q) * S, *b = maps + ((size_t)j * nq + q) * S;
                double js = 0;
                for (int s2 = 0; s2 < S; s2++) {
                    const double p = a[s2], qv = b[s2], m = 0.5 * (p + qv);
                    if (p > 0)
                        js += 0.5 * p * log(p / m);
                    if (qv > 0)
                        js += 0.5 * qv * log(qv / m);
                }
                d[(size_t)i * n + j] += sqrt(js > 0 ? js : 0);
            }
}

/* The means of the sums over count rows, mirrored into the lower triangle. */
static void js_finish(double *d, int n, double count)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            d[(size_t)i * n + j] /= count;
            d[(size_t)j * n + i] = d[(size_t)i * n + j];
        }
}

int hs_js_distances(double **D, int *n_heads, hs_maps_reader *r)
{
    const hs_maps_info *in = hs_maps_get_info(r);
    *D = NULL;
    int n = 0, q0 = in->n_layers ? in->layers[0].q0 : 0, nq = in->n_layers ? in->layers[0].nq : 0;
    for (int li = 0; li < in->n_layers; li++) {
        if (in->layers[li].q0 != q0 || in->layers[li].nq != nq)
            return hs_fail(HS_EINVAL, "Jensen-Shannon distances need one query range in every layer");
        n += in->layers[li].nh;
    }
    if (!n)
        return hs_fail(HS_EINVAL, "the map file holds no heads");
    const int S = in->seq_len;
    double *d = hs_calloc((size_t)n * n, sizeof(double), "distances");
    float *maps = hs_calloc((size_t)n * nq * S, sizeof(float), "maps of a sequence");
    int rc = d && maps ? HS_OK : HS_ENOMEM;
    for (long long sq = 0; !rc && sq < in->n_seq; sq++) {
        int k = 0;
        for (int li = 0; !rc && li < in->n_layers; li++)
            for (int hi = 0; !rc && hi < in->layers[li].nh; hi++, k++)
                rc = hs_maps_read(r, li, sq, hi, maps + (size_t)k * nq * S);
        if (!rc)
            js_accumulate(d, n, maps, nq, S);
    }
    if (!rc)
        js_finish(d, n, (double)in->n_seq * nq);
    free(maps);
    if (rc) {
        free(d);
        return rc;
    }
    *D = d;
    *n_heads = n;
    return HS_OK;
}

/* One sequence's maps of every layer, as float, head-major across layers. */
typedef struct {
    float *maps; /* (total heads, T, T) */
    const int *first; /* first[l]: index of layer l's head 0 */
} js_ctx;

static int keep_maps(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    js_ctx *j = ctx;
    (void)B; /* 1 */
    float *dst = j->maps + (size_t)j->first[layer] * T * T;
    for (size_t i = 0; i < (size_t)H * T * T; i++)
        dst[i] = (float)att[i];
    return HS_OK;
}

int hs_js_distances_model(double **D, int *n_heads, const hs_model *m, const hs_tokens *data,
                          int T, size_t max_batches, size_t max_bytes)
{
    const hs_model_config *c = &m->cfg;
    *D = NULL;
    size_t nb;
    if (hs_batches_to_run(data, 1, T, max_batches, &nb))
        return HS_EINVAL;
    int first[HS_MAX_LAYERS], n = 0;
    for (int l = 0; l < c->n_layer; l++)
        first[l] = n, n += c->n_head[l];
    const size_t bytes = (size_t)n * T * T * sizeof(float);
    if (bytes > max_bytes)
        return hs_fail(HS_EINVAL, "Jensen-Shannon distances from the forward keep one sequence's "
                       "maps of every head (%d x %d x %d floats, %.1f GiB > %.1f GiB): use a "
                       "shorter --seq-len, or capture the maps and pass --maps", n, T, T,
                       bytes / 1073741824.0, max_bytes / 1073741824.0);
    double *d = hs_calloc((size_t)n * n, sizeof(double), "distances");
    js_ctx j = { hs_calloc((size_t)n * T * T, sizeof(float), "maps of a sequence"), first };
    int32_t *in = hs_calloc((size_t)T, sizeof(int32_t), "inputs");
    int32_t *tg = hs_calloc((size_t)T, sizeof(int32_t), "targets");
    hs_acts a = { 0 };
    int rc = d && j.maps && in && tg ? hs_acts_alloc(&a, c, 1, T, HS_ACTS_MAPS) : HS_ENOMEM;
    hs_hooks hooks = { .ctx = &j, .on_maps = keep_maps };
    for (size_t bi = 0; !rc && bi < nb; bi++) {
        hs_batch_at(data, bi * (size_t)T, 1, T, in, tg);
        rc = hs_forward(&a, m, in, NULL, &hooks);
        if (!rc)
            js_accumulate(d, n, j.maps, T, T);
    }
    if (!rc)
        js_finish(d, n, (double)nb * T);
    hs_acts_free(&a); /* a zeroed or freed struct is fine */
    free(j.maps), free(in), free(tg);
    if (rc) {
        free(d);
        return rc;
    }
    *D = d;
    *n_heads = n;
    return HS_OK;
}
