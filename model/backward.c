/* The backward through a whole model (transformer.h): of the training loss
 * (hs_backward), or of any objective from its gradient on the logits
 * (hs_backward_from), with the gradient observers, the receivers' input
 * gradients and the stopped layers of hs_grad_hooks. One layer loop serves
 * both, so every family's backward -- pre and post norms, output norms, a
 * parallel residual, MLA, soft-caps -- is written once. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "encoder.h"
#include "layers.h"
#include "linalg.h"
#include "transformer.h"

static void swap(hs_real **x, hs_real **y)
{
    hs_real *t = *x;
    *x = *y;
    *y = t;
}

static hs_mlp_acts mlp_acts(const hs_layer_acts *la)
{
    return (hs_mlp_acts){ la->h_pre, la->h_up, la->h_act };
}

/* One backward's state: what it reports, its layer, its scratch. */
typedef struct {
    const hs_grad_hooks *gh; /* never NULL here: a zero instance when none */
    hs_acts *a;
    const hs_model *m;
    int layer;
    hs_real *scratch; /* (N,d): a receiver's residual gradient (with gh->receiver) */
    hs_real *zero;    /* (N,d) zeros: a stopped output's gradient (with gh->stop) */
} bw;

static int observe(const bw *b, hs_site s, int layer, const hs_real *g)
{
    if (!b->gh->site[s])
        return HS_OK;
    const hs_site_view v =
        hs_site_view_btw(s, layer, (hs_real *)g, b->a->B, b->a->T, 1, b->m->cfg.d_model);
    return b->gh->site[s](b->gh->ctx, &v);
}

static int receiver(const bw *b, int layer, hs_recv_kind kind, int head, const hs_real *dx)
{
    return b->gh->receiver ? b->gh->receiver(b->gh->ctx, layer, kind, head, dx) : HS_OK;
}

/* An attention path's share of the gradient of the attention's input, as a
 * gradient of the residual stream: through the layer's input norm when the
 * attention reads one (pre-norm), else as it is. */
static int on_path(void *ctx, hs_recv_kind kind, int head, const hs_real *dx)
{
    const bw *b = ctx;
    const hs_model_config *c = &b->m->cfg;
    const hs_layer_acts *la = &b->a->layer[b->layer];
    const hs_layer_weights *lw = &b->m->w.layer[b->layer];
    if (c->post_norm || c->no_input_norm)
        return receiver(b, b->layer, kind, head, dx);
    hs_block_norm_backward(b->scratch, NULL, NULL, NULL, dx, la->in, lw->ln1_w, la->n1_mean,
                           la->n1_rstd, c, (size_t)b->a->B * b->a->T);
    return receiver(b, b->layer, kind, head, b->scratch);
}

/* dx += the attention backward of layer l (GQA or MLA) from dout, with the
 * layer's sites observed and, with receivers, each path reported. */
static int attn_backward(bw *b, hs_real *dx, hs_layer_weights *gw, hs_real *dxi,
                         const hs_real *dout, const hs_real *x, const hs_real *xi, int per_seq)
{
    const hs_model_config *c = &b->m->cfg;
    const int l = b->layer;
    hs_layer_acts *la = &b->a->layer[l];
    const hs_layer_weights *lw = &b->m->w.layer[l];
    la->attn.grad = (hs_attn_grad_hooks){ b->gh->site, b->gh->ctx, l,
                                          b->gh->receiver ? on_path : NULL, b };
    int rc;
    if (c->mla) {
        const hs_mla_config mc = hs_config_mla(c, l);
        rc = hs_mla_backward(dx, &gw->mla, dxi, dout, &la->mla, &la->attn, &lw->mla, &mc, x, xi,
                             per_seq);
    } else {
        const hs_attn_config ac = hs_config_attn(c, l);
        const hs_attn_mask mask = hs_acts_attn_mask(b->a, c);
        rc = hs_attn_backward(dx, NULL, &gw->attn, dxi, dout, &la->attn, &lw->attn, &ac, x, NULL,
                              xi, per_seq, &mask);
    }
    la->attn.grad = (hs_attn_grad_hooks){ 0 };
    return rc;
}

/* The MLP's backward from dm into dinp = base + the gradient through the
 * MLP (and its input norm ln2 when it has one, read at mlp_x), with the
 * MLP's receiver reported. */
static int mlp_backward(bw *b, hs_real *dinp, const hs_real *base, hs_layer_weights *gw,
                        const hs_real *dm, const hs_real *mlp_x, int normed)
{
    const hs_model_config *c = &b->m->cfg;
    hs_acts *a = b->a;
    hs_layer_acts *la = &a->layer[b->layer];
    const hs_layer_weights *lw = &b->m->w.layer[b->layer];
    const size_t N = (size_t)a->B * a->T, nd = N * (size_t)c->d_model;
    hs_real *const scratch[3] = { a->dh, a->dh2, a->dh3 };
    const hs_mlp_acts ma = mlp_acts(la);
    hs_real *own = b->gh->receiver ? b->scratch : NULL; /* the receiver's gradient alone */
    if (!normed) {
        hs_real *into = own ? own : dinp;
        if (own)
            memset(own, 0, sizeof(hs_real) * nd);
        else if (dinp != base)
            memcpy(dinp, base, sizeof(hs_real) * nd);
        hs_mlp_backward(into, gw, scratch, &ma, lw, dm, mlp_x, c, N);
    } else {
        memset(a->dnorm, 0, sizeof(hs_real) * nd);
        hs_mlp_backward(a->dnorm, gw, scratch, &ma, lw, dm, la->n2, c, N);
        hs_block_norm_backward(own ? own : dinp, own ? NULL : base, gw->ln2_w, gw->ln2_b,
                               a->dnorm, mlp_x, lw->ln2_w, la->n2_mean, la->n2_rstd, c, N);
    }
    if (!own)
        return HS_OK;
    int rc = receiver(b, b->layer, HS_RECV_MLP, 0, own);
    hs_add(dinp, base, own, nd);
    return rc;
}

/* The layers from the last to the first: *dres holds the gradient of the
 * last layer's output (the final residual) on entry and of the embeddings
 * (before their sqrt(d) scale) on return; *dres2 is scratch. */
static int backward_layers(bw *b, hs_weights *g, hs_real *const *dgates, const hs_hooks *hooks,
                           hs_real **dres_p, hs_real **dres2_p)
{
    hs_acts *a = b->a;
    const hs_model *m = b->m;
    const hs_model_config *c = &m->cfg;
    const hs_weights *w = &m->w;
    const hs_real *const *gates = hooks->gates;
    const size_t N = (size_t)a->B * a->T, nd = N * (size_t)c->d_model;
    hs_real *dres = *dres_p, *dres2 = *dres2_p;
    int rc = observe(b, HS_SITE_RESID_PRE, c->n_layer, dres);
    if (!rc)
        rc = receiver(b, c->n_layer, HS_RECV_LOGITS, 0, dres);
    for (int l = c->n_layer - 1; !rc && l >= 0; l--) {
        hs_layer_acts *la = &a->layer[l];
        const hs_layer_weights *lw = &w->layer[l];
        hs_layer_weights *gw = &g->layer[l];
        const hs_real *xi = gates ? gates[l] : NULL;
        hs_real *dxi = dgates && xi ? dgates[l] : NULL;
        const int stop = b->gh->stop && b->gh->stop[l];
        b->layer = l;
        if (!c->post_norm) {
            /* dres: gradient of the layer output */
            const int parallel = c->parallel_residual, bare = c->no_input_norm;
            if (c->mlp != HS_MLP_NONE) {
                const hs_real *dm = stop ? b->zero : dres; /* of the MLP's output */
                if ((rc = observe(b, HS_SITE_MLP_OUT, l, dm)))
                    break;
                if (c->out_norm && !stop) { /* of its output before the out-norm */
                    hs_block_norm_backward(a->dbranch, NULL, gw->ln_mlp_w, gw->ln_mlp_b, dres,
                                           la->mlp_raw, lw->ln_mlp_w, la->mlp_on_mean,
                                           la->mlp_on_rstd, c, N);
                    dm = a->dbranch;
                }
                /* dres2 = dres (the residual) + the MLP's backward (through ln2) */
                if ((rc = mlp_backward(b, dres2, dres, gw, dm, bare ? la->r1
                                                               : parallel ? la->in : la->r1,
                                       !bare)))
                    break;
                /* sequential: dres2 is now the gradient of r1; parallel: the
                 * input's share through the MLP (plus the residual), while
                 * r1's gradient stays dres */
                if (!parallel)
                    swap(&dres, &dres2);
            }
            const hs_real *da = stop ? b->zero : dres; /* of the attention's output */
            if ((rc = observe(b, HS_SITE_ATTN_OUT, l, da)))
                break;
            if (c->out_norm && !stop) { /* of its output before the out-norm */
                hs_block_norm_backward(a->dbranch, NULL, gw->ln_attn_w, gw->ln_attn_b, dres,
                                       la->attn_raw, lw->ln_attn_w, la->attn_on_mean,
                                       la->attn_on_rstd, c, N);
                da = a->dbranch;
            }
            /* the residual's share: dres (sequential), or the input's share
             * through the MLP already in dres2 (parallel) */
            const hs_real *base = parallel && c->mlp != HS_MLP_NONE ? dres2 : dres;
            if (bare) {
                if (base != dres2)
                    memcpy(dres2, base, sizeof(hs_real) * nd);
                rc = attn_backward(b, dres2, gw, dxi, da, la->in, xi, hooks->gates_per_seq);
            } else {
                memset(a->dnorm, 0, sizeof(hs_real) * nd);
                rc = attn_backward(b, a->dnorm, gw, dxi, da, la->n1, xi, hooks->gates_per_seq);
                if (!rc)
                    hs_block_norm_backward(dres2, base, gw->ln1_w, gw->ln1_b, a->dnorm, la->in,
                                           lw->ln1_w, la->n1_mean, la->n1_rstd, c, N);
            }
            swap(&dres, &dres2); /* the gradient of the layer input */
        } else {
            /* out = ln2(n1 + mlp(n1)), n1 = ln1(in + attn(in)) */
            if (c->mlp != HS_MLP_NONE) {
                hs_block_norm_backward(a->dbranch, NULL, gw->ln2_w, gw->ln2_b, dres, la->r2,
                                       lw->ln2_w, la->n2_mean, la->n2_rstd, c, N);
                const hs_real *dm = stop ? b->zero : a->dbranch;
                if ((rc = observe(b, HS_SITE_MLP_OUT, l, dm)) ||
                    (rc = mlp_backward(b, dres2, a->dbranch, gw, dm, la->n1, 0)))
                    break;
                swap(&dres, &dres2); /* the gradient of n1 */
            }
            hs_block_norm_backward(a->dbranch, NULL, gw->ln1_w, gw->ln1_b, dres, la->r1,
                                   lw->ln1_w, la->n1_mean, la->n1_rstd, c, N);
            const hs_real *da = stop ? b->zero : a->dbranch;
            if ((rc = observe(b, HS_SITE_ATTN_OUT, l, da)))
                break;
            memcpy(dres2, a->dbranch, sizeof(hs_real) * nd);
            rc = attn_backward(b, dres2, gw, dxi, da, la->in, xi, hooks->gates_per_seq);
            swap(&dres, &dres2);
        }
        if (!rc)
            rc = observe(b, HS_SITE_RESID_PRE, l, dres);
    }
    *dres_p = dres, *dres2_p = dres2;
    return rc;
}

/* The backward's scratch for what gh asks (receivers, stops), then the
 * layers, the embedding scale and (with weight gradients) the embeddings. */
static int backward_body(hs_weights *g, hs_real *const *dgates, hs_acts *a, const hs_model *m,
                         const int32_t *tokens, const hs_hooks *hooks, const hs_grad_hooks *gh,
                         hs_real *dres, hs_real *dres2)
{
    static const hs_grad_hooks none;
    const size_t nd = (size_t)a->B * a->T * m->cfg.d_model;
    bw b = { gh ? gh : &none, a, m, 0, NULL, NULL };
    if (b.gh->receiver && !(b.scratch = hs_calloc(nd, sizeof(hs_real), "receiver gradient")))
        return HS_ENOMEM;
    if (b.gh->stop && !(b.zero = hs_calloc(nd, sizeof(hs_real), "stopped gradient"))) {
        free(b.scratch);
        return HS_ENOMEM;
    }
    int rc = backward_layers(&b, g, dgates, hooks, &dres, &dres2);
    free(b.scratch);
    free(b.zero);
    if (rc)
        return rc;
    const int d = m->cfg.d_model;
    if (m->cfg.embed_scale) /* the embeddings entered the residual times sqrt(d) */
        hs_scale(dres, (hs_real)sqrt((double)d), nd);
    if (g->wte && m->cfg.encoder)
        hs_encoder_embed_backward(g, a->dbranch, dres, a->emb_raw, a->emb_mean, a->emb_rstd,
                                  tokens, a->types, &m->w, &m->cfg, a->B, a->T);
    else if (g->wte)
        hs_embed_backward(g->wte, g->wpe, dres, tokens, a->B, a->T, d);
    return HS_OK;
}

/* a->dres (N,d) = the gradient of the final residual from a->dnorm, the
 * gradient of the unembedding's input: through the final norm when there
 * is one, and an encoder's MLM transform (dense, GELU) before it. */
static void final_norm_backward(hs_weights *g, hs_acts *a, const hs_model *m)
{
    const hs_model_config *c = &m->cfg;
    const size_t N = (size_t)a->B * a->T;
    const hs_real *out = a->layer[c->n_layer - 1].out;
    if (!c->final_norm) {
        memcpy(a->dres, a->dnorm, sizeof(hs_real) * N * c->d_model);
        return;
    }
    hs_block_norm_backward(c->mlm_transform ? a->dbranch : a->dres, NULL, g->lnf_w, g->lnf_b,
                           a->dnorm, c->mlm_transform ? a->mlm_act : out, m->w.lnf_w,
                           a->lnf_mean, a->lnf_rstd, c, N);
    if (c->mlm_transform)
        hs_mlm_transform_backward(a->dres, g, a->dnorm, a->dbranch, a->mlm_pre, out, &m->w, c, N);
}

static hs_weights no_grads; /* every gradient NULL: never written */

int hs_backward(hs_weights *g, hs_real *const *dgates, hs_acts *a, const hs_model *m,
                const int32_t *tokens, const int32_t *targets, const hs_hooks *hooks,
                hs_real loss_scale)
{
    assert(hs_acts_sane(a, &m->cfg));
    static const hs_hooks no_hooks;
    if (!a->training)
        return hs_fail(HS_EINVAL, "backward: activations were allocated for inference");
    hs_model_prepack_backward(m); /* once: the input gradients' panels beside the activations */
    if (!hooks)
        hooks = &no_hooks;
    if (!g)
        g = &no_grads;
    const hs_model_config *c = &m->cfg;
    const size_t N = (size_t)a->B * a->T, nd = N * (size_t)c->d_model;
    const int d = c->d_model, V = c->vocab_size;

    /* Unembedding: logits hold the probabilities; dlogits overwrite them
     * (through the soft-cap's tanh with final_softcap). */
    hs_real *dlogits = a->logits;
    if (c->final_softcap > 0)
        hs_softcap_xent_backward(dlogits, a->logits, a->lse, targets, N, V, loss_scale,
                                 c->final_softcap);
    else
        hs_softmax_xent_backward(dlogits, a->logits, targets, N, V, loss_scale);
    const hs_real *h = c->final_norm ? a->lnf : a->layer[c->n_layer - 1].out;
    memset(a->dnorm, 0, sizeof(hs_real) * nd);
    hs_linear_backward(a->dnorm, g->lm_w, g->lm_b, dlogits, h, m->w.lm_w, N, d, V);
    final_norm_backward(g, a, m);
    return backward_body(g, dgates, a, m, tokens, hooks, NULL, a->dres, a->dres2);
}

int hs_backward_hidden(hs_weights *g, hs_real *const *dgates, hs_acts *a, const hs_model *m,
                       const int32_t *tokens, const hs_real *dhidden, const hs_hooks *hooks)
{
    assert(hs_acts_sane(a, &m->cfg));
    static const hs_hooks no_hooks;
    if (!a->training)
        return hs_fail(HS_EINVAL, "backward: activations were allocated for inference");
    hs_model_prepack_backward(m); /* once: the input gradients' panels beside the activations */
    if (m->cfg.mlm_transform)
        return hs_fail(HS_EINVAL, "backward: a classifier's model has no masked-LM transform");
    memcpy(a->dnorm, dhidden, sizeof(hs_real) * a->B * a->T * m->cfg.d_model);
    if (!g)
        g = &no_grads;
    final_norm_backward(g, a, m);
    return backward_body(g, dgates, a, m, tokens, hooks ? hooks : &no_hooks, NULL, a->dres,
                         a->dres2);
}

int hs_backward_from(hs_acts *a, const hs_model *m, const hs_real *dlogits, const hs_hooks *hooks,
                     const hs_grad_hooks *gh)
{
    assert(hs_acts_sane(a, &m->cfg));
    static const hs_hooks no_hooks;
    if (!a->training)
        return hs_fail(HS_EINVAL, "backward: activations were allocated for inference");
    hs_model_prepack_backward(m); /* once: the input gradients' panels beside the activations */
    if (!hooks)
        hooks = &no_hooks;
    const hs_model_config *c = &m->cfg;
    const size_t N = (size_t)a->B * a->T, nd = N * (size_t)c->d_model;
    const int d = c->d_model, V = c->vocab_size;
    /* Only the rows of dlogits that hold a non-zero go through the
     * unembedding (a logit difference at the last position: B of B*T),
     * gathered through the soft-cap's derivative 1 - (capped / cap)^2 at
     * the forward's capped logits, and their gradients scattered back. */
    size_t k = 0;
    for (size_t r = 0; r < N; r++)
        for (int v = 0; v < V; v++)
            if (dlogits[r * V + v] != 0) {
                k++;
                break;
            }
    size_t *idx = hs_calloc(k ? k : 1, sizeof *idx, "gradient rows");
    hs_real *rows = hs_calloc((k ? k : 1) * (size_t)V, sizeof(hs_real), "gradient rows");
    hs_real *dn = hs_calloc((k ? k : 1) * (size_t)d, sizeof(hs_real), "gradient rows");
    if (!idx || !rows || !dn) {
        free(idx), free(rows), free(dn);
        return HS_ENOMEM;
    }
    const double cap = c->final_softcap;
    for (size_t r = 0, j = 0; r < N && j < k; r++) {
        const hs_real *row = dlogits + r * V, *capped = a->logits + r * V;
        int any = 0;
        for (int v = 0; v < V && !any; v++)
            any = row[v] != 0;
        if (!any)
            continue;
        for (int v = 0; v < V; v++) {
            const double t = cap > 0 ? (double)capped[v] / cap : 0;
            rows[j * V + v] = (hs_real)(row[v] * (1 - t * t));
        }
        idx[j++] = r;
    }
    if (k)
        hs_linear_backward(dn, NULL, NULL, rows, NULL, m->w.lm_w, k, d, V);
    memset(a->dnorm, 0, sizeof(hs_real) * nd);
    for (size_t j = 0; j < k; j++)
        memcpy(a->dnorm + idx[j] * d, dn + j * d, sizeof(hs_real) * d);
    free(idx), free(rows), free(dn);
    final_norm_backward(&no_grads, a, m);
    return backward_body(&no_grads, NULL, a, m, NULL, hooks, gh, a->dres, a->dres2);
}
