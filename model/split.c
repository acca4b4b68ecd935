/* The forward in which every receiver reads a residual stream of its own
 * (transformer.h: hs_forward_split), for the faithfulness of circuits: the
 * model's own norms, projections, attention kernel and MLP, each head fed
 * its input. */
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "layers.h"
#include "linalg.h"
#include "transformer.h"

int hs_split_check(const hs_model_config *c)
{
    if (c->post_norm)
        return hs_fail(HS_EINVAL, "post-norm layers norm the residual stream after each sublayer: "
                                  "it is not a sum of the heads' and MLPs' outputs");
    if (c->out_norm)
        return hs_fail(HS_EINVAL, "each sublayer's output passes a norm before it is added "
                                  "(output norms): a head's output is not a term of the "
                                  "residual stream");
    if (c->qk_norm == HS_QK_NORM_PROJ)
        return hs_fail(HS_EINVAL, "q/k norms over the whole projection mix the heads: no head's "
                                  "query or key is a function of its own input");
    return HS_OK;
}

typedef struct {
    const hs_split_plan *p;
    const hs_model *m;
    int layer;
    size_t N;
    hs_real *x, *mean, *rstd; /* (N,d), (N), (N) */
} split;

/* out (N,d) = receiver (layer, kind, head)'s input through the norm `which`
 * reads it with (ln1 or ln2; none without input norms). */
static int normed_input(split *s, hs_recv_kind kind, int head, hs_real *out, int ln2)
{
    const hs_model_config *c = &s->m->cfg;
    const hs_layer_weights *lw = &s->m->w.layer[s->layer];
    int rc = s->p->input(s->p->ctx, s->layer, kind, head, c->no_input_norm ? out : s->x);
    if (!rc && !c->no_input_norm)
        hs_block_norm(out, s->mean, s->rstd, s->x, ln2 ? lw->ln2_w : lw->ln1_w,
                      ln2 ? lw->ln2_b : lw->ln1_b, c, s->N);
    return rc;
}

static int attn_input(void *ctx, hs_recv_kind kind, int head, hs_real *x)
{
    return normed_input(ctx, kind, head, x, 0);
}

/* Layer l's heads (GQA): each head's q, each key/value head's k and v from
 * its own normed input xn, then the kernel into z. */
static int gqa_heads(split *s, hs_layer_acts *la, hs_real *xn, hs_real *hd)
{
    const hs_model_config *c = &s->m->cfg;
    const int l = s->layer, B = la->attn.B, T = la->attn.L;
    const hs_attn_config ac = hs_config_attn(c, l);
    const hs_attn_weights *w = &s->m->w.layer[l].attn;
    const int H = ac.n_heads, G = ac.n_kv_heads, dh = hs_attn_head_dim(&ac);
    int rc = HS_OK;
    for (int kind = HS_RECV_Q; !rc && kind <= HS_RECV_V; kind++) {
        const int n = kind == HS_RECV_Q ? H : G;
        hs_real *dst = kind == HS_RECV_Q ? la->attn.q : kind == HS_RECV_K ? la->attn.k : la->attn.v;
        for (int h = 0; !rc && h < n; h++) {
            if ((rc = attn_input(s, (hs_recv_kind)kind, h, xn)) ||
                (rc = hs_attn_project_head(hd, w, &ac, (hs_recv_kind)kind, h, xn, B, T, 0)))
                break;
            for (size_t i = 0; i < s->N; i++)
                memcpy(dst + (i * n + h) * dh, hd + i * dh, sizeof(hs_real) * dh);
        }
    }
    if (rc)
        return rc;
    const int *win;
    int *owned;
    if ((rc = hs_attn_windows(&win, &owned, &ac)))
        return rc;
    const int GD = G * dh;
    const hs_kv_view kv = { la->attn.k, la->attn.v, (size_t)T * GD, (size_t)dh, (size_t)GD, T };
    const hs_attn_mask causal = { 1, NULL, 0 };
    const hs_attn_scores sc = hs_attn_config_scores(&ac);
    rc = hs_attn_heads_forward_scored(la->attn.z, NULL, la->attn.q, &kv, &causal, win, 0, B, T, H,
                                      G, dh, &sc, NULL);
    free(owned);
    return rc;
}

/* Layer l: its heads, each head's output reported, the MLP on its own input. */
static int split_layer(split *s, hs_acts *a, hs_real *xn, hs_real *y, hs_real *hd)
{
    const hs_model_config *c = &s->m->cfg;
    const int l = s->layer, d = c->d_model;
    hs_layer_acts *la = &a->layer[l];
    const hs_layer_weights *lw = &s->m->w.layer[l];
    int rc;
    if (c->mla) {
        const hs_mla_config mc = hs_config_mla(c, l);
        rc = hs_mla_forward_split(&la->mla, &la->attn, &lw->mla, &mc, attn_input, s, xn);
    } else {
        rc = gqa_heads(s, la, xn, hd);
    }
    const int H = c->n_head[l], dh = c->head_dim, HD = H * dh;
    const hs_real *w_o = c->mla ? lw->mla.w_o : lw->attn.w_o;
    for (int h = 0; !rc && h < H; h++) {
        /* y = z_h W_o^h^T: the head's columns of W_o */
        hs_gemm(0, 1, (int)s->N, d, dh, 1, la->attn.z + (size_t)h * dh, HD, w_o + (size_t)h * dh,
                HD, 0, y, d);
        rc = s->p->output(s->p->ctx, l, h, y);
    }
    if (rc || c->mlp == HS_MLP_NONE)
        return rc;
    const hs_mlp_acts ma = { la->h_pre, la->h_up, la->h_act };
    if ((rc = normed_input(s, HS_RECV_MLP, 0, xn, 1)))
        return rc;
    hs_mlp_forward(y, &ma, lw, xn, c, s->N);
    return s->p->output(s->p->ctx, l, -1, y);
}

int hs_forward_split(hs_acts *a, const hs_model *m, const hs_split_plan *p)
{
    const hs_model_config *c = &m->cfg;
    int rc = hs_split_check(c);
    if (rc)
        return rc;
    const size_t N = (size_t)a->B * a->T, nd = N * (size_t)c->d_model;
    split s = { p, m, 0, N, NULL, NULL, NULL };
    s.x = hs_calloc(nd, sizeof(hs_real), "split forward");
    hs_real *xn = hs_calloc(nd, sizeof(hs_real), "split forward");
    hs_real *y = hs_calloc(nd, sizeof(hs_real), "split forward");
    hs_real *hd = hs_calloc(N * (size_t)c->head_dim, sizeof(hs_real), "split forward");
    s.mean = hs_calloc(N, sizeof(hs_real), "split forward");
    s.rstd = hs_calloc(N, sizeof(hs_real), "split forward");
    rc = s.x && xn && y && hd && s.mean && s.rstd ? HS_OK : HS_ENOMEM;
    for (int l = 0; !rc && l < c->n_layer; l++) {
        s.layer = l;
        rc = split_layer(&s, a, xn, y, hd);
    }
    if (!rc)
        rc = p->input(p->ctx, c->n_layer, HS_RECV_LOGITS, 0, s.x);
    if (!rc) {
        const hs_real *u = s.x;
        if (c->final_norm) {
            hs_block_norm(xn, s.mean, s.rstd, s.x, m->w.lnf_w, m->w.lnf_b, c, N);
            u = xn;
        }
        hs_linear_forward(a->logits, u, m->w.lm_w, m->w.lm_b, N, c->d_model, c->vocab_size);
        if (c->final_softcap > 0)
            hs_softcap_forward(a->logits, c->final_softcap, N * c->vocab_size);
    }
    free(s.x), free(xn), free(y), free(hd), free(s.mean), free(s.rstd);
    return rc;
}
