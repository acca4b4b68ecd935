#include "transformer.h"

#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "linalg.h"

int hs_acts_alloc(hs_acts *a, const hs_model_config *c, int B, int T, int mode)
{
    memset(a, 0, sizeof *a);
    if (B < 1 || T < 1)
        return hs_fail(HS_EINVAL, "activations: B=%d, T=%d must be positive", B, T);
    const int training = mode == HS_ACTS_TRAIN;
    const size_t N = (size_t)B * T, d = (size_t)c->d_model, F = (size_t)c->d_ff;
    const size_t V = (size_t)c->vocab_size;
    a->B = a->B_alloc = B;
    a->T = T;
    a->training = training;
    a->mode = mode;
    a->n_layer = c->n_layer;
    int ok = 1;
#define ALLOC(p, n) ok &= ((p) = hs_calloc((n), sizeof(hs_real), #p)) != NULL
    ALLOC(a->emb, N * d);
    if (mode == HS_ACTS_MAPS) {
        int maxH = 0;
        for (int l = 0; l < c->n_layer; l++)
            maxH = c->n_head[l] > maxH ? c->n_head[l] : maxH;
        ALLOC(a->shared_maps, N * (size_t)maxH * T);
    }
    a->layer = hs_calloc((size_t)c->n_layer, sizeof *a->layer, "layer activations");
    ok &= a->layer != NULL;
    for (int l = 0; ok && l < c->n_layer; l++) {
        hs_layer_acts *la = &a->layer[l];
        hs_attn_config ac = hs_config_attn(c, l);
        int rc = hs_attn_acts_alloc(&la->attn, &ac, B, T, T, T, training);
        if (rc) {
            hs_acts_free(a);
            return rc;
        }
        if (mode == HS_ACTS_MAPS)
            la->attn.att = a->shared_maps; /* each layer overwrites the last one's maps */
        ALLOC(la->n1, N * d);
        ALLOC(la->n1_mean, N);
        ALLOC(la->n1_rstd, N);
        ALLOC(la->attn_out, N * d);
        ALLOC(la->r1, N * d);
        if (c->mlp != HS_MLP_NONE) {
            ALLOC(la->n2, N * d);
            ALLOC(la->n2_mean, N);
            ALLOC(la->n2_rstd, N);
            ALLOC(la->h_pre, N * F);
            ALLOC(la->h_act, N * F);
            if (c->mlp == HS_MLP_SWIGLU)
                ALLOC(la->h_up, N * F);
            ALLOC(la->mlp_out, N * d);
            ALLOC(la->r2, N * d);
        }
        if (c->post_norm)
            la->out = c->mlp != HS_MLP_NONE ? la->n2 : la->n1;
        else
            la->out = c->mlp != HS_MLP_NONE ? la->r2 : la->r1;
        la->in = l ? a->layer[l - 1].out : a->emb;
    }
    ALLOC(a->lnf, N * d);
    ALLOC(a->lnf_mean, N);
    ALLOC(a->lnf_rstd, N);
    ALLOC(a->logits, N * V);
    ALLOC(a->losses, N);
    if (training) {
        ALLOC(a->dres, N * d);
        ALLOC(a->dres2, N * d);
        ALLOC(a->dnorm, N * d);
        ALLOC(a->dbranch, N * d);
        if (c->mlp != HS_MLP_NONE) {
            ALLOC(a->dh, N * F);
            ALLOC(a->dh2, N * F);
            if (c->mlp == HS_MLP_SWIGLU)
                ALLOC(a->dh3, N * F);
        }
    }
#undef ALLOC
    if (!ok) {
        hs_acts_free(a);
        return HS_ENOMEM;
    }
    return HS_OK;
}

int hs_acts_set_batch(hs_acts *a, int B)
{
    if (B < 1 || B > a->B_alloc)
        return hs_fail(HS_EINVAL, "activations: batch %d outside 1..%d", B, a->B_alloc);
    a->B = B;
    for (int l = 0; l < a->n_layer; l++)
        a->layer[l].attn.B = B;
    return HS_OK;
}

void hs_acts_free(hs_acts *a)
{
    for (int l = 0; a->layer && l < a->n_layer; l++) {
        hs_layer_acts *la = &a->layer[l];
        if (la->attn.att == a->shared_maps)
            la->attn.att = NULL; /* freed once below */
        hs_attn_acts_free(&la->attn);
        hs_real *bufs[] = { la->n1, la->n1_mean, la->n1_rstd, la->attn_out, la->r1, la->n2,
                            la->n2_mean, la->n2_rstd, la->h_pre, la->h_up, la->h_act,
                            la->mlp_out, la->r2 };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            free(bufs[i]);
    }
    free(a->shared_maps);
    hs_real *bufs[] = { a->emb, a->lnf, a->lnf_mean, a->lnf_rstd, a->logits, a->losses,
                        a->dres, a->dres2, a->dnorm, a->dbranch, a->dh, a->dh2, a->dh3 };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(a->layer);
    memset(a, 0, sizeof *a);
}

/* out (N,d) = norm(inp) with the configured kind; mean unused by RMSNorm. */
static void norm_forward(hs_real *out, hs_real *mean, hs_real *rstd, const hs_real *inp,
                         const hs_real *w, const hs_real *b, const hs_model_config *c, size_t N)
{
    if (c->norm == HS_NORM_LAYERNORM)
        hs_layernorm_forward(out, mean, rstd, inp, w, b, N, c->d_model, c->norm_eps);
    else
        hs_rmsnorm_forward(out, rstd, inp, w, N, c->d_model, c->norm_eps);
}

static void norm_backward(hs_real *dinp, hs_real *dw, hs_real *db, const hs_real *dout,
                          const hs_real *inp, const hs_real *w, const hs_real *mean,
                          const hs_real *rstd, const hs_model_config *c, size_t N)
{
    if (c->norm == HS_NORM_LAYERNORM)
        hs_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, c->d_model);
    else
        hs_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, c->d_model);
}

static void mlp_forward(hs_layer_acts *la, const hs_layer_weights *lw, const hs_real *inp,
                        const hs_model_config *c, size_t N)
{
    const int d = c->d_model, F = c->d_ff;
    if (c->mlp == HS_MLP_GELU) {
        hs_linear_forward(la->h_pre, inp, lw->fc_w, lw->fc_b, N, d, F);
        hs_gelu_forward(la->h_act, la->h_pre, N * F);
        hs_linear_forward(la->mlp_out, la->h_act, lw->proj_w, lw->proj_b, N, F, d);
    } else {
        hs_linear_forward(la->h_pre, inp, lw->gate_w, lw->gate_b, N, d, F);
        hs_linear_forward(la->h_up, inp, lw->up_w, lw->up_b, N, d, F);
        hs_swiglu_forward(la->h_act, la->h_pre, la->h_up, N * F);
        hs_linear_forward(la->mlp_out, la->h_act, lw->down_w, lw->down_b, N, F, d);
    }
}

/* dinp (N,d) += MLP backward of dout (N,d). */
static void mlp_backward(hs_real *dinp, hs_layer_weights *gw, hs_acts *a, const hs_layer_acts *la,
                         const hs_layer_weights *lw, const hs_real *dout, const hs_real *inp,
                         const hs_model_config *c, size_t N)
{
    const int d = c->d_model, F = c->d_ff;
    memset(a->dh, 0, sizeof(hs_real) * N * F);
    memset(a->dh2, 0, sizeof(hs_real) * N * F);
    if (c->mlp == HS_MLP_GELU) {
        hs_linear_backward(a->dh, gw->proj_w, gw->proj_b, dout, la->h_act, lw->proj_w, N, F, d);
        hs_gelu_backward(a->dh2, la->h_pre, a->dh, N * F);
        hs_linear_backward(dinp, gw->fc_w, gw->fc_b, a->dh2, inp, lw->fc_w, N, d, F);
    } else {
        hs_real *dact = a->dh, *dgate = a->dh2, *dup = a->dh3;
        memset(dup, 0, sizeof(hs_real) * N * F);
        hs_linear_backward(dact, gw->down_w, gw->down_b, dout, la->h_act, lw->down_w, N, F, d);
        hs_swiglu_backward(dgate, dup, dact, la->h_pre, la->h_up, N * F);
        hs_linear_backward(dinp, gw->gate_w, gw->gate_b, dgate, inp, lw->gate_w, N, d, F);
        hs_linear_backward(dinp, gw->up_w, gw->up_b, dup, inp, lw->up_w, N, d, F);
    }
}

static int check_inputs(const hs_acts *a, const hs_model *m, const int32_t *tokens,
                        const int32_t *targets)
{
    const hs_model_config *c = &m->cfg;
    if (c->pos == HS_POS_LEARNED && a->T > c->n_ctx)
        return hs_fail(HS_EINVAL, "forward: sequence length %d exceeds n_ctx=%d", a->T, c->n_ctx);
    for (size_t i = 0; i < (size_t)a->B * a->T; i++) {
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            return hs_fail(HS_EINVAL, "forward: token %d at position %zu outside vocabulary %d",
                           tokens[i], i, c->vocab_size);
        if (targets && (targets[i] < 0 || targets[i] >= c->vocab_size))
            return hs_fail(HS_EINVAL, "forward: target %d at position %zu outside vocabulary %d",
                           targets[i], i, c->vocab_size);
    }
    return HS_OK;
}

static const hs_hooks no_hooks = { 0 };

/* Hooks that need maps need activations that keep them. */
static int check_hooks(const hs_acts *a, const hs_hooks *hooks)
{
    if (a->mode != HS_ACTS_INFER)
        return HS_OK;
    if (hooks->on_maps)
        return hs_fail(HS_EINVAL, "forward: maps were asked for but the activations keep none");
    if (hooks->site[HS_SITE_PATTERN].fn)
        return hs_fail(HS_EINVAL, "forward: a pattern hook needs activations that keep maps "
                                  "(HS_ACTS_MAPS or HS_ACTS_TRAIN)");
    return HS_OK;
}

/* The hook of residual-width site s (if any) on x (B,T,d). */
static int resid_site(const hs_hooks *hooks, hs_site s, int layer, hs_real *x, const hs_acts *a,
                      int d)
{
    if (!hs_site_hooked(hooks->site, s))
        return HS_OK;
    const hs_site_view v = hs_site_view_btw(s, layer, x, a->B, a->T, 1, d);
    return hs_site_call(hooks->site, &v);
}

/* Layer l up to the residual after attention: r1 = in + attention(in). */
static int layer_attention(hs_acts *a, const hs_model *m, int l, const hs_hooks *hooks)
{
    const hs_model_config *c = &m->cfg;
    hs_layer_acts *la = &a->layer[l];
    const hs_layer_weights *lw = &m->w.layer[l];
    const hs_attn_config ac = hs_config_attn(c, l);
    const size_t N = (size_t)a->B * a->T;
    const hs_attn_mask causal = { 1, NULL };
    int rc = resid_site(hooks, HS_SITE_RESID_PRE, l, la->in, a, c->d_model);
    if (rc)
        return rc;
    const hs_real *attn_in = la->in;
    if (!c->post_norm) {
        norm_forward(la->n1, la->n1_mean, la->n1_rstd, la->in, lw->ln1_w, lw->ln1_b, c, N);
        attn_in = la->n1;
    }
    la->attn.hooks = (hs_attn_hooks){ { hooks->on_rows, hooks->ctx }, hooks->site, l };
    rc = hs_attn_forward_heads(&la->attn, &lw->attn, &ac, attn_in, NULL, &causal, NULL);
    if (!rc && hooks->on_maps)
        rc = hooks->on_maps(hooks->ctx, l, la->attn.att, a->B, ac.n_heads, a->T);
    if (rc)
        return rc;
    hs_attn_forward_output(la->attn_out, &la->attn, &lw->attn, &ac,
                           hooks->gates ? hooks->gates[l] : NULL, hooks->gates_per_seq);
    if ((rc = resid_site(hooks, HS_SITE_ATTN_OUT, l, la->attn_out, a, c->d_model)))
        return rc;
    hs_add(la->r1, la->in, la->attn_out, N * c->d_model);
    return HS_OK;
}

/* Layer l from the residual after attention (r1) to its output: the
 * post-norm, the MLP and its norm. */
static int layer_rest(hs_acts *a, const hs_model *m, int l, const hs_hooks *hooks)
{
    const hs_model_config *c = &m->cfg;
    hs_layer_acts *la = &a->layer[l];
    const hs_layer_weights *lw = &m->w.layer[l];
    const size_t N = (size_t)a->B * a->T;
    if (c->post_norm)
        norm_forward(la->n1, la->n1_mean, la->n1_rstd, la->r1, lw->ln1_w, lw->ln1_b, c, N);
    if (c->mlp == HS_MLP_NONE)
        return HS_OK;
    const hs_real *mid = c->post_norm ? la->n1 : la->r1; /* residual after attention */
    const hs_real *mlp_in = mid;
    if (!c->post_norm) {
        norm_forward(la->n2, la->n2_mean, la->n2_rstd, mid, lw->ln2_w, lw->ln2_b, c, N);
        mlp_in = la->n2;
    }
    mlp_forward(la, lw, mlp_in, c, N);
    int rc = resid_site(hooks, HS_SITE_MLP_OUT, l, la->mlp_out, a, c->d_model);
    if (rc)
        return rc;
    hs_add(la->r2, mid, la->mlp_out, N * c->d_model);
    if (c->post_norm)
        norm_forward(la->n2, la->n2_mean, la->n2_rstd, la->r2, lw->ln2_w, lw->ln2_b, c, N);
    return HS_OK;
}

/* Layers from `from` on (starting after the attention of layer `from`
 * when mid_layer), then the final norm, logits and loss. */
static int forward_rest(hs_acts *a, const hs_model *m, int from, int mid_layer,
                        const int32_t *targets, const hs_hooks *hooks)
{
    const hs_model_config *c = &m->cfg;
    const hs_weights *w = &m->w;
    const size_t N = (size_t)a->B * a->T;
    const int d = c->d_model, V = c->vocab_size;
    int rc;
    for (int l = from; l < c->n_layer; l++) {
        if (!(mid_layer && l == from) && (rc = layer_attention(a, m, l, hooks)))
            return rc;
        if ((rc = layer_rest(a, m, l, hooks)))
            return rc;
    }
    hs_real *h = a->layer[c->n_layer - 1].out;
    if ((rc = resid_site(hooks, HS_SITE_RESID_PRE, c->n_layer, h, a, d)))
        return rc;
    const hs_real *u = h; /* the unembedding's input */
    if (c->final_norm) {
        norm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, h, w->lnf_w, w->lnf_b, c, N);
        u = a->lnf;
    }
    hs_linear_forward(a->logits, u, w->lm_w, w->lm_b, N, d, V);
    if (targets) {
        hs_softmax_xent_forward(a->logits, a->losses, targets, N, V);
        double sum = 0;
        for (size_t i = 0; i < N; i++)
            sum += a->losses[i];
        a->loss = sum / (double)N;
    }
    return HS_OK;
}

int hs_forward(hs_acts *a, const hs_model *m, const int32_t *tokens, const int32_t *targets,
               const hs_hooks *hooks)
{
    if (!hooks)
        hooks = &no_hooks;
    int rc = check_hooks(a, hooks);
    if (!rc)
        rc = check_inputs(a, m, tokens, targets);
    if (rc)
        return rc;
    hs_embed_forward(a->emb, tokens, m->w.wte, m->w.wpe, a->B, a->T, m->cfg.d_model);
    return forward_rest(a, m, 0, 0, targets, hooks);
}

int hs_forward_to(hs_acts *a, const hs_model *m, const int32_t *tokens, int layer,
                  const hs_hooks *hooks)
{
    if (!hooks)
        hooks = &no_hooks;
    if (layer < 0 || layer >= m->cfg.n_layer)
        return hs_fail(HS_EINVAL, "forward: no layer %d", layer);
    int rc = check_hooks(a, hooks);
    if (!rc)
        rc = check_inputs(a, m, tokens, NULL);
    if (rc)
        return rc;
    hs_embed_forward(a->emb, tokens, m->w.wte, m->w.wpe, a->B, a->T, m->cfg.d_model);
    for (int l = 0; l < layer; l++)
        if ((rc = layer_attention(a, m, l, hooks)) || (rc = layer_rest(a, m, l, hooks)))
            return rc;
    return layer_attention(a, m, layer, hooks);
}

int hs_forward_from(hs_acts *a, const hs_model *m, int layer, const int32_t *targets)
{
    if (layer < 0 || layer >= m->cfg.n_layer)
        return hs_fail(HS_EINVAL, "forward: no layer %d", layer);
    return forward_rest(a, m, layer, 1, targets, &no_hooks);
}

static void swap(hs_real **x, hs_real **y)
{
    hs_real *t = *x;
    *x = *y;
    *y = t;
}

int hs_backward(hs_weights *g, hs_real *const *dgates, hs_acts *a, const hs_model *m,
                const int32_t *tokens, const int32_t *targets, const hs_hooks *hooks,
                hs_real loss_scale)
{
    /* No weight gradients: every kernel skips a NULL gradient pointer. Never
     * written, so one zeroed instance serves every call. */
    static hs_weights no_grads;
    if (!a->training)
        return hs_fail(HS_EINVAL, "backward: activations were allocated for inference");
    if (!hooks)
        hooks = &no_hooks;
    if (!g)
        g = &no_grads;
    const hs_real *const *gates = hooks->gates;
    const hs_model_config *c = &m->cfg;
    const hs_weights *w = &m->w;
    const size_t N = (size_t)a->B * a->T, nd = N * (size_t)c->d_model;
    const int d = c->d_model, V = c->vocab_size;
    hs_attn_mask causal = { 1, NULL };

    /* Unembedding: logits hold the probabilities; dlogits overwrite them. */
    hs_real *dlogits = a->logits;
    hs_softmax_xent_backward(dlogits, a->logits, targets, N, V, loss_scale);
    const hs_real *h = c->final_norm ? a->lnf : a->layer[c->n_layer - 1].out;
    hs_real *dres = a->dres, *dres2 = a->dres2;
    memset(dres, 0, sizeof(hs_real) * nd);
    if (c->final_norm) {
        memset(a->dnorm, 0, sizeof(hs_real) * nd);
        hs_linear_backward(a->dnorm, g->lm_w, g->lm_b, dlogits, h, w->lm_w, N, d, V);
        norm_backward(dres, g->lnf_w, g->lnf_b, a->dnorm, a->layer[c->n_layer - 1].out, w->lnf_w,
                      a->lnf_mean, a->lnf_rstd, c, N);
    } else {
        hs_linear_backward(dres, g->lm_w, g->lm_b, dlogits, h, w->lm_w, N, d, V);
    }

    for (int l = c->n_layer - 1; l >= 0; l--) {
        hs_layer_acts *la = &a->layer[l];
        const hs_layer_weights *lw = &w->layer[l];
        hs_layer_weights *gw = &g->layer[l];
        hs_attn_config ac = hs_config_attn(c, l);
        const hs_real *xi = gates ? gates[l] : NULL;
        hs_real *dxi = dgates && xi ? dgates[l] : NULL;
        int rc;
        if (!c->post_norm) {
            /* dres: gradient of the layer output */
            if (c->mlp != HS_MLP_NONE) {
                memset(a->dnorm, 0, sizeof(hs_real) * nd);
                mlp_backward(a->dnorm, gw, a, la, lw, dres, la->n2, c, N);
                memcpy(dres2, dres, sizeof(hs_real) * nd);
                norm_backward(dres2, gw->ln2_w, gw->ln2_b, a->dnorm, la->r1, lw->ln2_w,
                              la->n2_mean, la->n2_rstd, c, N);
                swap(&dres, &dres2); /* now the gradient of r1 */
            }
            memcpy(dres2, dres, sizeof(hs_real) * nd);
            memset(a->dnorm, 0, sizeof(hs_real) * nd);
            rc = hs_attn_backward(a->dnorm, NULL, &gw->attn, dxi, dres, &la->attn, &lw->attn, &ac,
                                  la->n1, NULL, xi, hooks->gates_per_seq, &causal);
            if (rc)
                return rc;
            norm_backward(dres2, gw->ln1_w, gw->ln1_b, a->dnorm, la->in, lw->ln1_w, la->n1_mean,
                          la->n1_rstd, c, N);
            swap(&dres, &dres2); /* the gradient of the layer input */
        } else {
            if (c->mlp != HS_MLP_NONE) {
                memset(a->dbranch, 0, sizeof(hs_real) * nd);
                norm_backward(a->dbranch, gw->ln2_w, gw->ln2_b, dres, la->r2, lw->ln2_w,
                              la->n2_mean, la->n2_rstd, c, N);
                memcpy(dres2, a->dbranch, sizeof(hs_real) * nd);
                mlp_backward(dres2, gw, a, la, lw, a->dbranch, la->n1, c, N);
                swap(&dres, &dres2); /* the gradient of n1 */
            }
            memset(a->dbranch, 0, sizeof(hs_real) * nd);
            norm_backward(a->dbranch, gw->ln1_w, gw->ln1_b, dres, la->r1, lw->ln1_w, la->n1_mean,
                          la->n1_rstd, c, N);
            memcpy(dres2, a->dbranch, sizeof(hs_real) * nd);
            rc = hs_attn_backward(dres2, NULL, &gw->attn, dxi, a->dbranch, &la->attn, &lw->attn,
                                  &ac, la->in, NULL, xi, hooks->gates_per_seq, &causal);
            if (rc)
                return rc;
            swap(&dres, &dres2);
        }
    }
    if (g->wte)
        hs_embed_backward(g->wte, g->wpe, dres, tokens, a->B, a->T, d);
    return HS_OK;
}
