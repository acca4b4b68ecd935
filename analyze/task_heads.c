#include "task_heads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ablate.h"
#include "config_file.h"
#include "eval.h"
#include "memory.h"
#include "optim.h"
#include "rng.h"
#include "transformer.h"

static size_t at(int l, int h) { return (size_t)l * HS_MAX_HEADS + h; }

/* ---- passes over the task ------------------------------------------------- */

/* One pass's buffers and the batch in flight (examples ex[0..nb), the
 * hooks read it). */
typedef struct {
    const hs_model *m;
    const hs_task *t;
    int batch, nb;
    hs_acts a;
    int *ex, *pool;
    int32_t *ids;
    unsigned char *types;
    double *out;    /* (batch x k) a backward's outputs */
    double *g;      /* (k) one example's loss gradient */
    hs_real *dlog;  /* (batch x k) the model's outputs' gradient */
    hs_real *dhid;  /* (batch x T x d) the head's input's */
} pass;

static void pass_free(pass *p)
{
    if (p->a.block)
        hs_acts_free(&p->a);
    free(p->ex), free(p->pool), free(p->ids), free(p->types), free(p->out), free(p->g);
    free(p->dlog), free(p->dhid);
    memset(p, 0, sizeof *p);
}

/* mode: HS_ACTS_LOSS (a forward: two layers' buffers in turn), or HS_ACTS_TRAIN
 * for backwards. */
static int pass_init(pass *p, const hs_model *m, const hs_task *t, int batch, int mode)
{
    memset(p, 0, sizeof *p);
    if (batch < 1)
        return hs_fail(HS_EINVAL, "--batch must be at least 1");
    p->m = m, p->t = t, p->batch = batch = batch < t->n ? batch : t->n;
    const size_t K = (size_t)t->k, T = (size_t)t->T, d = (size_t)m->cfg.d_model;
    int rc = hs_acts_alloc(&p->a, &m->cfg, batch, t->T, mode);
    if (rc)
        return rc;
    p->ex = hs_calloc((size_t)batch, sizeof *p->ex, "task batch");
    p->pool = hs_calloc((size_t)batch, sizeof *p->pool, "task batch");
    p->ids = hs_calloc((size_t)batch * T, sizeof *p->ids, "task batch");
    p->types = hs_calloc((size_t)batch * T, 1, "task batch");
    p->out = hs_calloc((size_t)batch * K, sizeof *p->out, "task outputs");
    p->g = hs_calloc(K, sizeof *p->g, "task gradient");
    p->dlog = hs_calloc((size_t)batch * K, sizeof *p->dlog, "task gradient");
    if (mode == HS_ACTS_TRAIN)
        p->dhid = hs_calloc((size_t)batch * T * d, sizeof *p->dhid, "task gradient");
    if (!p->ex || !p->pool || !p->ids || !p->types || !p->out || !p->g || !p->dlog ||
        (mode == HS_ACTS_TRAIN && !p->dhid)) {
        pass_free(p);
        return HS_ENOMEM;
    }
    return HS_OK;
}

/* Every example's outputs into out (n x k), batch after batch, with hooks. */
static int pass_run(pass *p, double *out, const hs_hooks *hooks)
{
    const hs_task *t = p->t;
    int rc = HS_OK;
    for (int i0 = 0; !rc && i0 < t->n; i0 += p->batch) {
        p->nb = t->n - i0 < p->batch ? t->n - i0 : p->batch;
        for (int b = 0; b < p->nb; b++)
            p->ex[b] = i0 + b;
        rc = hs_task_forward(&p->a, out + (size_t)i0 * t->k, p->pool, p->ids, p->types, p->m, t,
                             p->ex, p->nb, hooks);
    }
    return rc;
}

/* The forward and backward of sum_b scale * L(example ex[b]) over the
 * batch p->ex[0..nb): gate gradients into dgates, weight gradients into
 * grads (each may be NULL); p->out holds the outputs and loss (may be
 * NULL) the batch's summed loss. */
static int pass_backward(pass *p, int nb, const hs_hooks *hooks, hs_real *const *dgates,
                         hs_weights *grads, double scale, double *loss)
{
    const hs_task *t = p->t;
    const int K = t->k;
    p->nb = nb;
    int rc = hs_task_forward(&p->a, p->out, p->pool, p->ids, p->types, p->m, t, p->ex, nb,
                             hooks);
    double sum = 0;
    for (int b = 0; !rc && b < nb; b++) {
        const hs_task_outputs o = hs_task_example(t, p->ex[b], p->out + (size_t)b * K);
        sum += hs_task_loss(&o, 0);
        hs_task_loss_grad(&o, 0, p->g);
        for (int j = 0; j < K; j++) /* the model's output j is the task's label_map[j] */
            p->dlog[(size_t)b * K + j] = (hs_real)(scale * p->g[t->label_map[j]]);
    }
    if (loss)
        *loss = sum;
    if (!rc)
        rc = hs_classify_backward(p->dhid, grads, p->dlog, &p->a, p->m, p->pool);
    if (!rc)
        rc = hs_backward_hidden(grads, dgates, &p->a, p->m, p->ids, p->dhid, hooks);
    return rc;
}

/* Per-layer gate arrays of `rows` x H_l each, set to v (NULL: 1) per head. */
static int gates_alloc(hs_real **x, const hs_model_config *c, int rows, const hs_real *const *v)
{
    for (int l = 0; l < c->n_layer; l++) {
        if (!(x[l] = hs_calloc((size_t)rows * c->n_head[l], sizeof(hs_real), "gates")))
            return HS_ENOMEM;
        for (int b = 0; b < rows; b++)
            for (int h = 0; h < c->n_head[l]; h++)
                x[l][(size_t)b * c->n_head[l] + h] = v && v[l] ? v[l][h] : 1;
    }
    return HS_OK;
}

static void gates_free(hs_real **x, int n_layer)
{
    for (int l = 0; l < n_layer; l++)
        free(x[l]);
}

int hs_task_objective_importance(void *obj, hs_importance *imp, const hs_real *const *gates)
{
    const hs_task_objective *o = obj;
    return hs_task_importance(imp, NULL, o->m, o->t, o->batch, gates, o->stop, NULL, NULL);
}

int hs_task_objective_evaluate(void *obj, const hs_hooks *hooks, double *loss, double *stderr_loss)
{
    hs_task_objective *o = obj;
    const int rc = hs_task_eval(&o->last, o->m, o->t, o->batch, hooks);
    *loss = o->last.loss, *stderr_loss = o->last.loss_se;
    return rc;
}

/* ---- ablation -------------------------------------------------------------- */

/* The mean of every head's z over the non-padding positions of a pass. */
typedef struct {
    const pass *p;
    double *sum[HS_MAX_LAYERS]; /* (H_l x dh) */
    long count;                 /* positions */
} z_sum;

static int z_sum_hook(void *ctx, const hs_site_view *v)
{
    z_sum *s = ctx;
    const pass *p = s->p;
    double *sum = s->sum[v->layer];
    for (int b = 0; b < v->B; b++) {
        const int len = p->t->len[p->ex[b]];
        for (int t = 0; t < len; t++)
            for (int h = 0; h < v->heads; h++) {
                const hs_real *x = v->x + b * v->sb + t * v->st + h * v->sh;
                for (int i = 0; i < v->width; i++)
                    sum[(size_t)h * v->width + i] += x[i];
            }
        if (v->layer == 0)
            s->count += len;
    }
    return HS_OK;
}

/* One ablation of head `head` of layer `layer` (SPEC §16's task forms). */
typedef struct {
    const pass *p;
    int layer, head, kind;
    const double *zmean; /* the head's (dh): mean ablation */
    hs_real *donor;      /* (batch x T x dh): the batch's z of the head, resample */
} z_ablation;

static int z_ablation_hook(void *ctx, const hs_site_view *v)
{
    const z_ablation *z = ctx;
    if (v->layer != z->layer)
        return HS_OK;
    const int dh = v->width, B = v->B, T = v->T;
#define Z(b, t) (v->x + (size_t)(b) * v->sb + (size_t)(t) * v->st + (size_t)z->head * v->sh)
    for (int b = 0; b < B && z->kind == HS_ABLATE_RESAMPLE; b++)
        for (int t = 0; t < T; t++)
            memcpy(z->donor + ((size_t)b * T + t) * dh, Z(b, t), sizeof(hs_real) * dh);
    for (int b = 0; b < B; b++) {
        const int partner = (b + 1) % B, have = z->p->t->len[z->p->ex[partner]];
        for (int t = 0; t < T; t++) {
            hs_real *x = Z(b, t);
            if (z->kind == HS_ABLATE_ZERO)
                memset(x, 0, sizeof(hs_real) * dh);
            else if (z->kind == HS_ABLATE_MEAN)
                for (int i = 0; i < dh; i++)
                    x[i] = (hs_real)z->zmean[i];
            else if (t < have)
                memcpy(x, z->donor + ((size_t)partner * T + t) * dh, sizeof(hs_real) * dh);
        }
    }
#undef Z
    return HS_OK;
}

/* The rows of one ablation: its loss delta and headline metric delta. */
static int ablation_rows(hs_head_table *tb, const hs_task *t, int l, int h, int kind,
                         const double *clean, const double *abl)
{
    hs_welford w = { 0 };
    for (int i = 0; i < t->n; i++) {
        const hs_task_outputs a = hs_task_example(t, i, abl + (size_t)i * t->k);
        const hs_task_outputs c = hs_task_example(t, i, clean + (size_t)i * t->k);
        hs_welford_add(&w, hs_task_loss(&a, 0) - hs_task_loss(&c, 0));
    }
    char name[64];
    snprintf(name, sizeof name, "loss_delta_%s", hs_ablate_kind_name(kind));
    int rc = hs_head_table_add(tb, l, h, name, w.mean, hs_welford_stderr(&w), t->n);
    double delta, se;
    const hs_task_outputs a = hs_task_outputs_of(t, abl), c = hs_task_outputs_of(t, clean);
    if (!rc)
        rc = hs_task_metric_delta_se(&a, &c, t->headline, &delta, &se);
    snprintf(name, sizeof name, "%s_delta_%s", hs_task_metric_name(t->headline),
             hs_ablate_kind_name(kind));
    return rc ? rc : hs_head_table_add(tb, l, h, name, delta, se, t->n);
}

/* The clean outputs into out and, with `means`, the mean z of every head
 * over the task's non-padding positions into zmean[l] (H_l x dh), from
 * the same pass. */
static int clean_pass(double **zmean, pass *p, double *out, int means)
{
    const hs_model_config *c = &p->m->cfg;
    z_sum s = { p, { 0 }, 0 };
    for (int l = 0; l < c->n_layer; l++)
        s.sum[l] = zmean[l];
    hs_hooks hooks = { 0 };
    if (means) /* an observer: z is left as it is */
        hooks.site[HS_SITE_Z] = (hs_site_hook){ z_sum_hook, &s };
    const int rc = pass_run(p, out, &hooks);
    for (int l = 0; !rc && means && l < c->n_layer; l++)
        for (size_t i = 0; i < (size_t)c->n_head[l] * c->head_dim; i++)
            zmean[l][i] /= (double)s.count;
    return rc;
}

int hs_task_ablate(hs_head_table *tb, const hs_model *m, const hs_task *t,
                   const hs_task_ablate_opts *o)
{
    const hs_model_config *c = &m->cfg;
    if (!(o->kinds & 7))
        return hs_fail(HS_EINVAL, "ablate: a method is required");
    if (c->mla)
        return hs_fail(HS_EUNSUPPORTED, "ablate --task: attention \"mla\" is not measured on "
                                        "tasks yet");
    pass p;
    int rc = pass_init(&p, m, t, o->batch, HS_ACTS_LOSS);
    if (rc)
        return rc;
    const size_t nk = (size_t)t->n * t->k;
    double *clean = hs_calloc(nk, sizeof *clean, "task outputs");
    double *abl = hs_calloc(nk, sizeof *abl, "task outputs");
    double *zmean[HS_MAX_LAYERS] = { 0 };
    hs_real *donor = hs_calloc((size_t)p.batch * t->T * c->head_dim, sizeof *donor, "donor z");
    rc = clean && abl && donor ? HS_OK : HS_ENOMEM;
    for (int l = 0; !rc && (o->kinds & (1 << HS_ABLATE_MEAN)) && l < c->n_layer; l++)
        if (!(zmean[l] = hs_calloc((size_t)c->n_head[l] * c->head_dim, sizeof(double), "mean z")))
            rc = HS_ENOMEM;
    if (!rc) /* the clean outputs, and for mean ablation every head's mean z */
        rc = clean_pass(zmean, &p, clean, (o->kinds & (1 << HS_ABLATE_MEAN)) != 0);
    hs_task_eval_result er;
    if (!rc && !(rc = hs_task_numbers(&er, t, clean)))
        rc = hs_task_numbers_to_table(tb, &er);
    size_t total = 0, done = 0;
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            for (int k = 0; k < HS_ABLATE_KINDS; k++)
                total += (!o->head_on || o->head_on[at(l, h)]) && (o->kinds & (1 << k));
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int k = 0; !rc && k < HS_ABLATE_KINDS; k++)
            for (int h = 0; !rc && h < c->n_head[l]; h++) {
                if ((o->head_on && !o->head_on[at(l, h)]) || !(o->kinds & (1 << k)))
                    continue;
                if (o->stop && *o->stop) {
                    rc = hs_fail(HS_EINTR, "interrupted at layer %d head %d", l, h);
                    break;
                }
                z_ablation z = { &p, l, h, k, zmean[l] ? zmean[l] + (size_t)h * c->head_dim : NULL,
                                 donor };
                hs_hooks hooks = { 0 };
                hooks.site[HS_SITE_Z] = (hs_site_hook){ z_ablation_hook, &z };
                if (!(rc = pass_run(&p, abl, &hooks)))
                    rc = ablation_rows(tb, t, l, h, k, clean, abl);
                if (o->progress)
                    o->progress(o->ctx, ++done, total);
            }
    for (int l = 0; l < c->n_layer; l++)
        free(zmean[l]);
    free(clean), free(abl), free(donor);
    pass_free(&p);
    return rc;
}

/* ---- importance ------------------------------------------------------------ */

int hs_task_importance(hs_importance *r, double *out, const hs_model *m, const hs_task *t,
                       int batch, const hs_real *const *gates, volatile sig_atomic_t *stop,
                       hs_progress_fn progress, void *progress_ctx)
{
    const hs_model_config *c = &m->cfg;
    pass p;
    int rc = pass_init(&p, m, t, batch, HS_ACTS_TRAIN);
    if (rc)
        return rc;
    hs_real *xi[HS_MAX_LAYERS] = { 0 }, *dxi[HS_MAX_LAYERS] = { 0 };
    hs_head_stats g_abs;
    rc = hs_head_stats_init(&g_abs, c);
    if (!rc)
        rc = gates_alloc(xi, c, p.batch, gates);
    if (!rc)
        rc = gates_alloc(dxi, c, p.batch, NULL);
    const hs_hooks hooks = { .gates = (const hs_real *const *)xi, .gates_per_seq = 1 };
    const size_t nb_total = ((size_t)t->n + p.batch - 1) / p.batch;
    for (int i0 = 0; !rc && i0 < t->n; i0 += p.batch) {
        if (stop && *stop) {
            rc = hs_fail(HS_EINTR, "interrupted after %d of %d examples", i0, t->n);
            break;
        }
        const int nb = t->n - i0 < p.batch ? t->n - i0 : p.batch;
        for (int b = 0; b < nb; b++)
            p.ex[b] = i0 + b;
        for (int l = 0; l < c->n_layer; l++)
            memset(dxi[l], 0, sizeof(hs_real) * p.batch * c->n_head[l]);
        /* scale 1: each example's gate gradient is that of its own loss */
        rc = pass_backward(&p, nb, &hooks, dxi, NULL, 1, NULL);
        if (!rc && out)
            memcpy(out + (size_t)i0 * t->k, p.out, sizeof *out * (size_t)nb * t->k);
        for (int l = 0; !rc && l < c->n_layer; l++)
            for (int b = 0; b < nb; b++)
                for (int h = 0; h < c->n_head[l]; h++)
                    hs_welford_add(hs_head_stat(&g_abs, l, h),
                                   fabs((double)dxi[l][(size_t)b * c->n_head[l] + h]));
        if (!rc && progress)
            progress(progress_ctx, (size_t)(i0 / p.batch) + 1, nb_total);
    }
    if (!rc)
        hs_importance_of(r, &g_abs);
    gates_free(xi, c->n_layer);
    gates_free(dxi, c->n_layer);
    hs_head_stats_free(&g_abs);
    pass_free(&p);
    return rc;
}

/* ---- L0 gates ----------------------------------------------------------------- */

/* Louizos et al.'s hard-concrete constants, as Voita et al. use them. */
#define L0_BETA (1.0 / 3)
#define L0_LO (-0.1)
#define L0_HI 1.1

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

void hs_l0_result_free(hs_l0_result *r)
{
    free(r->log_alpha);
    free(r->gate);
    memset(r, 0, sizeof *r);
}

/* One step's gates (stochastic: u drawn per head, layer order) into xi,
 * and what their gradient needs: s and the pre-clip gate per head. */
static void l0_draw(hs_real **xi, double *s, double *pre, const hs_real *log_alpha, hs_rng *rng,
                    const hs_model_config *c)
{
    for (int l = 0, k = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++, k++) {
            const double u = fmin(fmax(hs_rng_uniform(rng), 1e-6), 1 - 1e-6);
            s[k] = sigmoid((log(u) - log(1 - u) + log_alpha[k]) / L0_BETA);
            pre[k] = s[k] * (L0_HI - L0_LO) + L0_LO;
            xi[l][h] = (hs_real)fmin(fmax(pre[k], 0), 1);
        }
}

/* The deterministic gates of log_alpha into xi and r. */
static void l0_final(hs_l0_result *r, hs_real **xi, const hs_real *log_alpha,
                     const hs_model_config *c)
{
    r->open = 0;
    for (int l = 0, k = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++, k++) {
            const double g = fmin(fmax(sigmoid(log_alpha[k]) * (L0_HI - L0_LO) + L0_LO, 0), 1);
            xi[l][h] = (hs_real)g;
            r->gate[at(l, h)] = g;
            r->log_alpha[at(l, h)] = log_alpha[k];
            r->open += g > 0;
        }
}

/* --train-model: a float copy of m trained with the gates, its gradients
 * and Adam (the gates' learning rate). */
typedef struct {
    hs_model m;
    hs_real *buf;
    hs_weights g;
    hs_adam adam;
} l0_weights;

static int l0_weights_init(l0_weights *w, const hs_model *m, double lr)
{
    memset(w, 0, sizeof *w);
    int rc = hs_model_widen(m);
    if (!rc)
        rc = hs_model_init(&w->m, &m->cfg);
    if (rc)
        return rc;
    memcpy(w->m.params, m->params, sizeof(hs_real) * m->n_params);
    if (!(w->buf = hs_calloc_held(m->n_params, sizeof *w->buf, "gradients")))
        return HS_ENOMEM;
    hs_weights_bind(&w->g, &w->m.cfg, w->buf);
    return hs_adam_init(&w->adam, m->n_params, lr, 0);
}

static void l0_weights_free(l0_weights *w)
{
    if (w->buf)
        hs_free_held(w->buf, w->m.n_params, sizeof *w->buf);
    hs_adam_free(&w->adam);
    if (w->m.params)
        hs_model_free(&w->m);
    memset(w, 0, sizeof *w);
}

int hs_l0_gates(hs_l0_result *r, const hs_model *m, const hs_l0_opts *o,
                const hs_l0_objective *obj)
{
    const hs_model_config *c = obj->heads ? obj->heads : &m->cfg;
    if (!(o->lambda >= 0) || o->steps < 0 || o->lr < 0)
        return hs_fail(HS_EINVAL, "--lambda, --steps and --lr must not be negative");
    const int steps = o->steps ? o->steps : 500;
    int nh = 0, rc = HS_OK;
    for (int l = 0; l < c->n_layer; l++)
        nh += c->n_head[l];
    r->log_alpha = hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, sizeof(double), "l0 gates");
    r->gate = hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, sizeof(double), "l0 gates");
    hs_real *la = hs_calloc((size_t)nh, sizeof *la, "log alpha");
    hs_real *gla = hs_calloc((size_t)nh, sizeof *gla, "log alpha");
    double *s = hs_calloc((size_t)nh * 2, sizeof *s, "l0 gates"), *pre = s + nh;
    hs_real *xi[HS_MAX_LAYERS] = { 0 }, *dxi[HS_MAX_LAYERS] = { 0 };
    hs_adam adam = { 0 };
    l0_weights w = { 0 };
    const double lr = o->lr > 0 ? o->lr : 0.1;
    if (!r->log_alpha || !r->gate || !la || !gla || !s)
        rc = HS_ENOMEM;
    if (!rc)
        rc = gates_alloc(xi, c, 1, NULL);
    if (!rc)
        rc = gates_alloc(dxi, c, 1, NULL);
    if (!rc)
        rc = hs_adam_init(&adam, (size_t)nh, lr, 0);
    if (!rc && o->train_model)
        rc = l0_weights_init(&w, m, lr);
    const hs_model *mm = o->train_model ? &w.m : m;
    for (int k = 0; k < nh && la; k++)
        la[k] = 3;
    hs_rng rng;
    hs_rng_seed(&rng, o->seed);
    const hs_hooks hooks = { .gates = (const hs_real *const *)xi };
    const double shift = L0_BETA * log(-L0_LO / L0_HI); /* the penalty's sigma(log_alpha - shift) */
    for (int step = 0; !rc && step < steps; step++) {
        if (o->stop && *o->stop) {
            rc = hs_fail(HS_EINTR, "interrupted after %d of %d steps", step, steps);
            break;
        }
        l0_draw(xi, s, pre, la, &rng, c);
        for (int l = 0; l < c->n_layer; l++)
            memset(dxi[l], 0, sizeof(hs_real) * c->n_head[l]);
        if ((rc = obj->step(obj->ctx, mm, &hooks, dxi, o->train_model ? &w.g : NULL)))
            break;
        if (o->train_model) /* the weights' step, their gradients zeroed as read */
            hs_adam_step_zero(&w.adam, w.m.params, w.buf);
        for (int l = 0, k = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++, k++) {
                const double dpre = pre[k] > 0 && pre[k] < 1 ? L0_HI - L0_LO : 0;
                const double q = sigmoid(la[k] - shift);
                gla[k] = (hs_real)((double)dxi[l][h] * dpre * s[k] * (1 - s[k]) / L0_BETA +
                                   o->lambda * q * (1 - q));
            }
        hs_adam_step(&adam, la, gla);
        if (o->progress)
            o->progress(o->ctx, (size_t)step + 1, (size_t)steps);
    }
    if (!rc) {
        l0_final(r, xi, la, c);
        rc = obj->finish(obj->ctx, mm, &hooks, r);
    }
    l0_weights_free(&w);
    hs_adam_free(&adam);
    gates_free(xi, c->n_layer);
    gates_free(dxi, c->n_layer);
    free(la), free(gla), free(s);
    if (rc)
        hs_l0_result_free(r);
    return rc;
}

/* The task's objective: the next batch of examples (file order, wrapping). */
typedef struct {
    pass p;
    int next;
} task_l0;

static int task_l0_step(void *ctx, const hs_model *m, const hs_hooks *hooks,
                        hs_real *const *dgates, hs_weights *grads)
{
    task_l0 *q = ctx;
    q->p.m = m;
    for (int b = 0; b < q->p.batch; b++)
        q->p.ex[b] = (q->next + b) % q->p.t->n;
    q->next = (q->next + q->p.batch) % q->p.t->n;
    return pass_backward(&q->p, q->p.batch, hooks, dgates, grads, 1.0 / q->p.batch, NULL);
}

static int task_l0_finish(void *ctx, const hs_model *m, const hs_hooks *hooks, hs_l0_result *r)
{
    const task_l0 *q = ctx;
    return hs_task_eval(&r->eval, m, q->p.t, q->p.batch, hooks);
}

int hs_task_l0(hs_l0_result *r, const hs_model *m, const hs_task *t, const hs_l0_opts *o)
{
    memset(r, 0, sizeof *r);
    task_l0 q = { .next = 0 };
    int rc = pass_init(&q.p, m, t, o->batch, HS_ACTS_TRAIN);
    if (rc)
        return rc;
    const hs_l0_objective obj = { task_l0_step, task_l0_finish, &q, NULL };
    rc = hs_l0_gates(r, m, o, &obj);
    pass_free(&q.p);
    return rc;
}

/* The language-model objective: the next batch of the data (SPEC §4's, in
 * order, wrapping), the mean token loss; the loss over the data after. */
typedef struct {
    const hs_model *m;
    const hs_tokens *data;
    int B, T;
    size_t nb, next, max_batches;
    hs_acts a;
    int32_t *in, *tg;
} lm_l0;

static int lm_l0_step(void *ctx, const hs_model *m, const hs_hooks *hooks,
                      hs_real *const *dgates, hs_weights *grads)
{
    lm_l0 *q = ctx;
    hs_batch_at(q->data, q->next * (size_t)q->B * q->T, q->B, q->T, q->in, q->tg);
    q->next = (q->next + 1) % q->nb;
    int rc = hs_forward(&q->a, m, q->in, q->tg, hooks);
    const double scale = 1.0 / (double)(q->a.n_targets ? q->a.n_targets : 1);
    return rc ? rc : hs_backward(grads, dgates, &q->a, m, q->in, q->tg, hooks, (hs_real)scale);
}

static int lm_l0_finish(void *ctx, const hs_model *m, const hs_hooks *hooks, hs_l0_result *r)
{
    lm_l0 *q = ctx;
    hs_eval_result er;
    const int rc = hs_evaluate(&er, m, q->data, q->B, q->T, q->max_batches, hooks, NULL, NULL);
    r->eval.loss = er.loss, r->eval.loss_se = er.stderr_loss, r->eval.n = (int)er.sequences;
    r->lm = 1;
    return rc;
}

int hs_lm_l0(hs_l0_result *r, const hs_model *m, const hs_tokens *data, int T, size_t max_batches,
             const hs_l0_opts *o)
{
    memset(r, 0, sizeof *r);
    lm_l0 q = { m, data, o->batch, T, 0, 0, max_batches, { 0 }, NULL, NULL };
    if (hs_batches_to_run(data, q.B, T, 0, &q.nb))
        return HS_EINVAL;
    int rc = hs_acts_alloc(&q.a, &m->cfg, q.B, T, HS_ACTS_TRAIN);
    if (rc)
        return rc;
    q.in = hs_calloc((size_t)q.B * T, sizeof *q.in, "inputs");
    q.tg = hs_calloc((size_t)q.B * T, sizeof *q.tg, "targets");
    const hs_l0_objective obj = { lm_l0_step, lm_l0_finish, &q, NULL };
    rc = q.in && q.tg ? hs_l0_gates(r, m, o, &obj) : HS_ENOMEM;
    free(q.in), free(q.tg);
    hs_acts_free(&q.a);
    return rc;
}

/* ---- fine-tuning ------------------------------------------------------------ */

int hs_task_train(hs_model *m, const hs_task *t, const hs_train_opts *o)
{
    if (o->steps < 1 || !(o->lr > 0))
        return hs_fail(HS_EINVAL, "train --task: --steps and --lr must be positive");
    pass p;
    int rc = pass_init(&p, m, t, o->B, HS_ACTS_TRAIN);
    if (rc)
        return rc;
    const size_t n = m->n_params;
    hs_real *buf = hs_calloc_held(n, sizeof *buf, "gradients");
    hs_adam adam = { 0 };
    hs_weights g;
    rc = buf ? hs_adam_init(&adam, n, o->lr, o->weight_decay) : HS_ENOMEM;
    if (!rc)
        hs_weights_bind(&g, &m->cfg, buf);
    for (long step = 0, next = 0; !rc && step < o->steps; step++) {
        if (o->stop && *o->stop) {
            rc = hs_fail(HS_EINTR, "interrupted after %ld of %ld steps", step, o->steps);
            break;
        }
        for (int b = 0; b < p.batch; b++)
            p.ex[b] = (int)((next + b) % t->n);
        next = (next + p.batch) % t->n;
        double loss;
        if ((rc = pass_backward(&p, p.batch, NULL, NULL, &g, 1.0 / p.batch, &loss)))
            break;
        loss /= p.batch;
        if (!isfinite(loss)) {
            rc = hs_fail(HS_EINVAL, "train --task: the task loss is %g at step %ld (diverged)",
                         loss, step);
            break;
        }
        hs_clip_grad_norm(buf, n, o->clip);
        adam.lr = o->lr;
        if (o->warmup > 0 && step < o->warmup)
            adam.lr = o->lr * (double)(step + 1) / (double)o->warmup;
        hs_adam_step_zero(&adam, m->params, buf);
        if (o->on_step)
            o->on_step(o->ctx, step, loss, adam.lr);
    }
    hs_adam_free(&adam);
    hs_free_held(buf, n, sizeof *buf);
    pass_free(&p);
    return rc;
}

int hs_task_add_head(hs_model *out, const hs_model *m, int k, unsigned long long seed)
{
    hs_model_config c = m->cfg;
    if (k < 1 || k > HS_MAX_LABELS)
        return hs_fail(HS_EINVAL, "--num-labels %d: 1 to %d labels", k, HS_MAX_LABELS);
    if (!hs_config_classifies(&c))
        return hs_fail(HS_EUNSUPPORTED, "--num-labels: %s has no sequence-classification head "
                                        "(SPEC §16: bert, roberta, gpt2, llama, mistral, qwen2, "
                                        "qwen3, gemma, gemma2)",
                       hs_family_name(c.family));
    c.n_labels = k, c.problem = 0, c.headless = 1, c.lm_head_bias = 0;
    if (c.encoder)
        c.mlm_transform = c.final_norm = 0;
    for (int j = 0; j < k; j++) /* transformers' default id2label */
        snprintf(c.label_names[j], HS_LABEL_CHARS, "LABEL_%d", j);
    int rc = hs_model_widen(m);
    if (!rc)
        rc = hs_model_init(out, &c);
    if (rc)
        return rc;
    hs_rng rng;
    hs_rng_seed(&rng, seed);
    for (int i = 0; i < out->n_tensors; i++) { /* the body by name; a new head N(0, init_std) */
        const hs_tensor_info *ti = &out->tensors[i];
        const int src = hs_model_find(m, ti->name);
        hs_real *dst = out->params + ti->offset;
        const int replaced = !strncmp(ti->name, "cls.out.", 8) && m->cfg.n_labels != k;
        if (src >= 0 && !replaced) {
            memcpy(dst, m->params + m->tensors[src].offset, sizeof(hs_real) * ti->size);
            continue;
        }
        const int bias = ti->ndim == 1;
        for (size_t e = 0; e < ti->size; e++)
            dst[e] = bias ? 0 : (hs_real)(hs_rng_normal(&rng) * c.init_std);
    }
    return HS_OK;
}
