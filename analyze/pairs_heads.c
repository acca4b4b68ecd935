#include "pairs_heads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "memory.h"
#include "metrics.h"
#include "optim.h"
#include "stats.h"

int hs_pairs_units_init(hs_pairs_units *u, const hs_model_config *c, unsigned types)
{
    memset(u, 0, sizeof *u);
    u->cfg = *c;
    const int E = c->enc_layers, L = c->n_layer;
    for (int ty = HS_ATTN_ENC; ty <= HS_ATTN_CROSS; ty++) {
        if (!(types >> ty & 1))
            continue;
        for (int l = ty == HS_ATTN_ENC ? 0 : E; l < (ty == HS_ATTN_ENC ? E : L); l++) {
            if (u->n == HS_MAX_LAYERS)
                return hs_fail(HS_EINVAL, "the model's layers of the types asked for are more "
                                          "than %d", HS_MAX_LAYERS);
            u->type[u->n] = (hs_attn_type)ty;
            u->layer[u->n] = l;
            u->cfg.n_head[u->n] = c->n_head[l];
            u->cfg.n_kv_head[u->n] = c->n_kv_head[l];
            u->n++;
        }
    }
    if (!u->n)
        return hs_fail(HS_EINVAL, "--attn: no attention type selected");
    u->cfg.n_layer = u->n;
    return HS_OK;
}

int hs_attn_types_parse(unsigned *types, const char *list)
{
    *types = 0;
    const char *s = list;
    while (*s) {
        const size_t n = strcspn(s, ",");
        int ty = -1;
        for (int k = HS_ATTN_ENC; k <= HS_ATTN_CROSS; k++)
            if (n == strlen(hs_attn_type_name((hs_attn_type)k)) &&
                !strncmp(s, hs_attn_type_name((hs_attn_type)k), n))
                ty = k;
        if (ty < 0)
            return hs_fail(HS_EINVAL, "--attn %s: \"%.*s\" is not an attention type (enc, dec, "
                                      "cross, separated by commas)", list, (int)n, s);
        *types |= 1u << ty;
        s += n + (s[n] == ',');
    }
    if (!*types)
        return hs_fail(HS_EINVAL, "--attn: enc, dec or cross, separated by commas");
    return HS_OK;
}

void hs_pairs_units_gates(const hs_real **self, const hs_real **cross, const hs_pairs_units *u,
                          const hs_real *const *g, int n_layer)
{
    memset(self, 0, sizeof *self * (size_t)n_layer);
    memset(cross, 0, sizeof *cross * (size_t)n_layer);
    for (int k = 0; g && k < u->n; k++)
        (u->type[k] == HS_ATTN_CROSS ? cross : self)[u->layer[k]] = g[k];
}

/* Per-pair gates and their gradients for one batch of B pairs: (B, H) for
 * every layer's self-attention and every decoder layer's cross-attention. */
typedef struct {
    hs_real *self[HS_MAX_LAYERS], *cross[HS_MAX_LAYERS];
    hs_real *dself[HS_MAX_LAYERS], *dcross[HS_MAX_LAYERS];
} pair_gates;

static void pair_gates_free(pair_gates *g, int L)
{
    for (int l = 0; l < L; l++)
        free(g->self[l]), free(g->cross[l]), free(g->dself[l]), free(g->dcross[l]);
}

static int pair_gates_alloc(pair_gates *g, const hs_model_config *c, int B)
{
    memset(g, 0, sizeof *g);
    int ok = 1;
    for (int l = 0; l < c->n_layer; l++) {
        const size_t n = (size_t)B * c->n_head[l];
        ok &= (g->self[l] = hs_calloc(n, sizeof(hs_real), "gates")) != NULL;
        ok &= (g->dself[l] = hs_calloc(n, sizeof(hs_real), "gate gradients")) != NULL;
        if (hs_config_cross(c, l)) {
            ok &= (g->cross[l] = hs_calloc(n, sizeof(hs_real), "gates")) != NULL;
            ok &= (g->dcross[l] = hs_calloc(n, sizeof(hs_real), "gate gradients")) != NULL;
        }
    }
    if (!ok)
        pair_gates_free(g, c->n_layer);
    return ok ? HS_OK : HS_ENOMEM;
}

/* Sets every pair's gates to the units' (1 elsewhere) and zeroes the
 * gradients, for B pairs. */
static void pair_gates_set(pair_gates *g, const hs_model_config *c, const hs_pairs_units *u,
                           const hs_real *const *gates, int B)
{
    const hs_real *self[HS_MAX_LAYERS], *cross[HS_MAX_LAYERS];
    hs_pairs_units_gates(self, cross, u, gates, c->n_layer);
    for (int l = 0; l < c->n_layer; l++) {
        const int H = c->n_head[l];
        for (int k = 0; k < 2; k++) {
            hs_real *x = k ? g->cross[l] : g->self[l], *dx = k ? g->dcross[l] : g->dself[l];
            const hs_real *from = k ? cross[l] : self[l];
            for (int b = 0; x && b < B; b++)
                for (int h = 0; h < H; h++)
                    x[b * H + h] = from ? from[h] : 1;
            if (dx)
                memset(dx, 0, sizeof(hs_real) * B * H);
        }
    }
}

/* A batch of pairs for a backward: its ids and the training activations
 * (HS_S2S_TRAIN) of its shape, kept from batch to batch. */
typedef struct {
    hs_s2s_acts a;
    int32_t *buf;            /* room for the ids of B pairs of the file's longest */
    int32_t *src, *dec, *tgt; /* into buf: the batch's (n, S), (n, T), (n, T) */
} pairs_batch;

static int batch_init(pairs_batch *pb, const hs_pairs *p, int B)
{
    memset(pb, 0, sizeof *pb);
    pb->buf = hs_calloc((size_t)B * (p->max_src + 2 * (size_t)p->max_tgt), sizeof *pb->buf,
                        "pairs batch");
    return pb->buf ? HS_OK : HS_ENOMEM;
}

static void batch_free(pairs_batch *pb)
{
    hs_s2s_acts_free(&pb->a);
    free(pb->buf);
}

/* Pairs i0 .. i0 + n - 1, padded to their batch's shape, and activations for it. */
static int batch_load(pairs_batch *pb, const hs_pairs *p, const hs_model_config *c, int i0, int n)
{
    int S, T;
    hs_pairs_batch_shape(p, i0, n, &S, &T);
    pb->src = pb->buf, pb->dec = pb->src + (size_t)n * S, pb->tgt = pb->dec + (size_t)n * T;
    hs_pairs_fill(pb->src, pb->dec, pb->tgt, p, c, i0, n, S, T);
    return hs_pairs_acts_for(&pb->a, c, n, S, T, HS_S2S_TRAIN);
}

/* Batch k of passes over the pairs in file order, each pass's last batch
 * what is left: its first pair and its size. */
static void batch_at(const hs_pairs *p, int B, long k, int *i0, int *n)
{
    *i0 = (int)(k % ((p->n + B - 1) / B)) * B;
    *n = p->n - *i0 < B ? p->n - *i0 : B;
}

/* One batch's pairs i0 .. i0 + n - 1: forward, the backward of each pair's
 * summed loss to its gates, |g| of every unit's head into g_abs. */
static int importance_batch(hs_head_stats *g_abs, pairs_batch *pb, pair_gates *pg,
                            const hs_model *m, const hs_pairs *p, const hs_pairs_units *u,
                            const hs_real *const *gates, int i0, int n)
{
    const hs_model_config *c = &m->cfg;
    hs_s2s_acts *a = &pb->a;
    int rc = batch_load(pb, p, c, i0, n);
    if (rc)
        return rc;
    pair_gates_set(pg, c, u, gates, n);
    a->gates = (const hs_real *const *)pg->self, a->cross_gates = (const hs_real *const *)pg->cross;
    a->gates_per_seq = 1;
    if ((rc = hs_s2s_encode(a, m, pb->src)) || (rc = hs_s2s_decode(a, m, pb->dec, pb->tgt)) ||
        (rc = hs_s2s_backward(NULL, pg->dself, pg->dcross, a, m, pb->src, pb->dec, pb->tgt, 1)))
        return rc;
    for (int k = 0; k < u->n; k++) {
        const int l = u->layer[k], H = c->n_head[l];
        const hs_real *d = u->type[k] == HS_ATTN_CROSS ? pg->dcross[l] : pg->dself[l];
        for (int b = 0; b < n; b++)
            for (int h = 0; h < H; h++)
                hs_welford_add(hs_head_stat(g_abs, k, h), fabs((double)d[b * H + h]));
    }
    return HS_OK;
}

int hs_pairs_importance(hs_importance *r, const hs_model *m, const hs_pairs *p,
                        const hs_pairs_units *u, int B, const hs_real *const *gates,
                        volatile sig_atomic_t *stop, hs_progress_fn progress, void *ctx)
{
    const hs_model_config *c = &m->cfg;
    if (B < 1)
        return hs_fail(HS_EINVAL, "batch %d must be positive", B);
    hs_head_stats g_abs;
    int rc = hs_head_stats_init(&g_abs, &u->cfg);
    if (rc)
        return rc;
    pair_gates pg;
    if ((rc = pair_gates_alloc(&pg, c, B))) {
        hs_head_stats_free(&g_abs);
        return rc;
    }
    pairs_batch pb;
    rc = batch_init(&pb, p, B);
    const size_t nb = ((size_t)p->n + (size_t)B - 1) / (size_t)B;
    for (size_t k = 0; !rc && k < nb; k++) {
        if (stop && *stop) {
            rc = hs_fail(HS_EINTR, "interrupted after %zu of %zu batches", k, nb);
            break;
        }
        int i0, n;
        batch_at(p, B, (long)k, &i0, &n);
        rc = importance_batch(&g_abs, &pb, &pg, m, p, u, gates, i0, n);
        if (!rc && progress)
            progress(ctx, k + 1, nb);
    }
    if (!rc)
        hs_importance_of(r, &g_abs);
    batch_free(&pb);
    pair_gates_free(&pg, c->n_layer);
    hs_head_stats_free(&g_abs);
    return rc;
}

int hs_pairs_importance_to_table(hs_head_table *t, const hs_importance *r,
                                 const hs_pairs_units *u, const hs_model_config *c)
{
    const int n0 = t->n;
    int rc = hs_importance_to_table(t, r);
    for (int i = n0; !rc && i < t->n; i++) {
        hs_metric_row *w = &t->rows[i];
        const int k = w->layer;
        w->attn = hs_attn_type_name(u->type[k]);
        w->layer = u->type[k] == HS_ATTN_ENC ? u->layer[k] : u->layer[k] - c->enc_layers;
    }
    return rc;
}

int hs_pairs_objective_importance(void *obj, hs_importance *imp, const hs_real *const *gates)
{
    const hs_pairs_objective *o = obj;
    return hs_pairs_importance(imp, o->m, o->p, o->u, o->B, gates, o->stop, NULL, NULL);
}

int hs_pairs_objective_evaluate(void *obj, const hs_hooks *hooks, double *loss,
                                double *stderr_loss)
{
    const hs_pairs_objective *o = obj;
    const int L = o->m->cfg.n_layer;
    const hs_real *self[HS_MAX_LAYERS], *cross[HS_MAX_LAYERS];
    hs_pairs_units_gates(self, cross, o->u, hooks ? hooks->gates : NULL, L);
    hs_eval_result r;
    const int rc = hs_pairs_eval_gated(&r, o->m, o->p, o->B, self, cross);
    *loss = r.loss, *stderr_loss = r.stderr_loss;
    return rc;
}

/* ---- training ------------------------------------------------------------- */

int hs_pairs_train(hs_model *m, const hs_pairs *p, const hs_pairs *val, const hs_train_opts *o)
{
    if (o->steps < 1 || !(o->lr > 0) || o->B < 1)
        return hs_fail(HS_EINVAL, "steps %ld, learning rate %g and batch %d must be positive",
                       o->steps, o->lr, o->B);
    const hs_model_config *c = &m->cfg;
    const int B = o->B;
    hs_real *g = hs_calloc_held(m->n_params, sizeof(hs_real), "gradients");
    hs_adam opt = { 0 };
    pairs_batch pb;
    int rc = batch_init(&pb, p, B);
    if (!rc)
        rc = g ? hs_adam_init(&opt, m->n_params, o->lr, o->weight_decay) : HS_ENOMEM;
    hs_weights gw;
    if (!rc)
        hs_weights_bind(&gw, c, g);
    hs_s2s_acts *a = &pb.a;
    for (long step = 0; !rc && step < o->steps; step++) {
        if (o->stop && *o->stop) {
            rc = hs_fail(HS_EINTR, "interrupted after %ld steps", step);
            break;
        }
        int i0, n;
        batch_at(p, B, step, &i0, &n);
        if ((rc = batch_load(&pb, p, c, i0, n)) || (rc = hs_s2s_encode(a, m, pb.src)) ||
            (rc = hs_s2s_decode(a, m, pb.dec, pb.tgt)))
            break;
        const double loss = a->loss;
        if (!isfinite(loss)) {
            rc = hs_fail(HS_EINVAL, "training: loss is %g at step %ld (diverged)", loss, step + 1);
            break;
        }
        if ((rc = hs_s2s_backward(&gw, NULL, NULL, a, m, pb.src, pb.dec, pb.tgt,
                                  (hs_real)(1.0 / (double)a->n_targets))))
            break;
        const double lr = o->warmup > 0 && step < o->warmup
                              ? o->lr * (double)(step + 1) / (double)o->warmup
                              : o->lr;
        hs_clip_grad_norm(g, m->n_params, o->clip);
        opt.lr = lr;
        hs_adam_step_zero(&opt, m->params, g); /* zeroes g for the next step */
        if (o->on_step)
            o->on_step(o->ctx, step + 1, loss, lr);
        const int last = step + 1 == o->steps;
        if (val && o->val_every > 0 && ((step + 1) % o->val_every == 0 || last)) {
            hs_eval_result r;
            if (!(rc = hs_pairs_eval(&r, m, val, B, o->val_batches, NULL, NULL)) && o->on_val)
                o->on_val(o->ctx, step + 1, r.loss, r.stderr_loss);
        }
    }
    batch_free(&pb);
    hs_adam_free(&opt);
    hs_free_held(g, m->n_params, sizeof(hs_real));
    return rc;
}

/* ---- L0 gates (Voita et al.) ------------------------------------------------ */

/* The pairs' objective of hs_l0_gates: the next batch of pairs (file order,
 * each pass's last batch what is left), its mean target-token loss. */
typedef struct {
    const hs_pairs *p;
    const hs_pairs_units *u;
    int B;
    long next;
    pairs_batch pb;
} pairs_l0;

static int pairs_l0_step(void *ctx, const hs_model *m, const hs_hooks *hooks,
                         hs_real *const *dgates, hs_weights *grads)
{
    pairs_l0 *q = ctx;
    const hs_model_config *c = &m->cfg;
    int i0, n;
    batch_at(q->p, q->B, q->next++, &i0, &n);
    int rc = batch_load(&q->pb, q->p, c, i0, n);
    if (rc)
        return rc;
    const hs_real *self[HS_MAX_LAYERS], *cross[HS_MAX_LAYERS];
    hs_real *dself[HS_MAX_LAYERS] = { 0 }, *dcross[HS_MAX_LAYERS] = { 0 };
    hs_pairs_units_gates(self, cross, q->u, hooks->gates, c->n_layer);
    for (int k = 0; k < q->u->n; k++)
        (q->u->type[k] == HS_ATTN_CROSS ? dcross : dself)[q->u->layer[k]] = dgates[k];
    hs_s2s_acts *a = &q->pb.a;
    a->gates = self, a->cross_gates = cross, a->gates_per_seq = 0;
    if ((rc = hs_s2s_encode(a, m, q->pb.src)) || (rc = hs_s2s_decode(a, m, q->pb.dec, q->pb.tgt)))
        return rc;
    return hs_s2s_backward(grads, dself, dcross, a, m, q->pb.src, q->pb.dec, q->pb.tgt,
                           (hs_real)(1.0 / (double)(a->n_targets ? a->n_targets : 1)));
}

static int pairs_l0_finish(void *ctx, const hs_model *m, const hs_hooks *hooks,
                           hs_l0_result *r)
{
    const pairs_l0 *q = ctx;
    const hs_real *self[HS_MAX_LAYERS], *cross[HS_MAX_LAYERS];
    hs_pairs_units_gates(self, cross, q->u, hooks->gates, m->cfg.n_layer);
    hs_eval_result er;
    const int rc = hs_pairs_eval_gated(&er, m, q->p, q->B, self, cross);
    r->eval.loss = er.loss, r->eval.loss_se = er.stderr_loss, r->eval.n = (int)er.sequences;
    r->lm = 1;
    return rc;
}

int hs_pairs_l0(hs_l0_result *r, const hs_model *m, const hs_pairs *p, const hs_pairs_units *u,
                const hs_l0_opts *o)
{
    memset(r, 0, sizeof *r);
    if (o->batch < 1)
        return hs_fail(HS_EINVAL, "batch %d must be positive", o->batch);
    pairs_l0 q = { .p = p, .u = u, .B = o->batch };
    const hs_l0_objective obj = { pairs_l0_step, pairs_l0_finish, &q, &u->cfg };
    int rc = batch_init(&q.pb, p, q.B);
    if (!rc)
        rc = hs_l0_gates(r, m, o, &obj);
    batch_free(&q.pb);
    return rc;
}
