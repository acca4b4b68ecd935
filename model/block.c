/* Norms and MLPs by the configuration (block.h). */
#include "block.h"

#include <math.h>
#include <string.h>

#include "layers.h"
#include "linalg.h"

void hs_block_norm(hs_real *out, hs_real *mean, hs_real *rstd, const hs_real *inp,
                   const hs_real *w, const hs_real *b, const hs_model_config *c, size_t N)
{
    if (c->norm == HS_NORM_LAYERNORM)
        hs_layernorm_forward(out, mean, rstd, inp, w, b, N, c->d_model, c->norm_eps);
    else
        hs_rmsnorm_rows(out, rstd, inp, w, (hs_real)c->norm_offset, N, c->d_model, c->norm_eps);
}

void hs_block_add_norm(hs_real *sum, hs_real *out, hs_real *mean, hs_real *rstd,
                       const hs_real *x, const hs_real *y, const hs_real *w, const hs_real *b,
                       const hs_model_config *c, size_t N)
{
    if (c->norm == HS_NORM_LAYERNORM)
        hs_add_layernorm_forward(sum, out, mean, rstd, x, y, w, b, N, c->d_model, c->norm_eps);
    else
        hs_add_rmsnorm_forward_off(sum, out, rstd, x, y, w, (hs_real)c->norm_offset, N,
                                   c->d_model, c->norm_eps);
}

void hs_block_norm_backward(hs_real *dinp, const hs_real *base, hs_real *dw, hs_real *db,
                            const hs_real *dout, const hs_real *inp, const hs_real *w,
                            const hs_real *mean, const hs_real *rstd, const hs_model_config *c,
                            size_t N)
{
    if (c->norm == HS_NORM_LAYERNORM)
        hs_layernorm_backward_into(dinp, base, dw, db, dout, inp, w, mean, rstd, N, c->d_model);
    else
        hs_rmsnorm_backward_off(dinp, base, dw, dout, inp, w, (hs_real)c->norm_offset, rstd, N,
                                c->d_model);
}

/* out (n) = ReLU or SiLU of inp, as torch computes them in float: x > 0 ? x
 * : 0, and x / (1 + exp(-x)). */
static void act_forward(hs_real *out, const hs_real *inp, size_t n, hs_act_kind act)
{
    for (size_t i = 0; i < n; i++) {
        const hs_real x = inp[i];
        out[i] = act == HS_ACT_RELU ? (x > 0 ? x : 0) : x / (1 + (hs_real)exp(-(double)x));
    }
}

/* d (n) *= the activation's derivative at inp. */
static void act_backward_inplace(hs_real *d, const hs_real *inp, size_t n, hs_act_kind act)
{
    for (size_t i = 0; i < n; i++) {
        const double x = inp[i], s = 1 / (1 + exp(-x));
        d[i] *= act == HS_ACT_RELU ? (x > 0) : (hs_real)(s * (1 + x * (1 - s)));
    }
}

void hs_mlp_forward(hs_real *out, const hs_mlp_acts *a, const hs_layer_weights *lw,
                    const hs_real *inp, const hs_model_config *c, size_t N)
{
    const int d = c->d_model, F = c->d_ff;
    if (c->mlp == HS_MLP_GELU) {
        hs_linear_forward(a->h_pre, inp, lw->fc_w, lw->fc_b, N, d, F);
        if (c->act != HS_ACT_GELU)
            act_forward(a->h_act, a->h_pre, N * F, c->act);
        else if (c->gelu_exact)
            hs_gelu_erf_forward(a->h_act, a->h_pre, N * F);
        else
            hs_gelu_forward(a->h_act, a->h_pre, N * F);
        hs_linear_forward(out, a->h_act, lw->proj_w, lw->proj_b, N, F, d);
        return;
    }
    hs_linear_forward(a->h_pre, inp, lw->gate_w, lw->gate_b, N, d, F);
    hs_linear_forward(a->h_up, inp, lw->up_w, lw->up_b, N, d, F);
    if (c->mlp == HS_MLP_GEGLU)
        hs_geglu_forward(a->h_act, a->h_pre, a->h_up, N * F, c->gelu_exact);
    else
        hs_swiglu_forward(a->h_act, a->h_pre, a->h_up, N * F);
    hs_linear_forward(out, a->h_act, lw->down_w, lw->down_b, N, F, d);
}

void hs_mlp_backward(hs_real *dinp, hs_layer_weights *gw, hs_real *const scratch[3],
                     const hs_mlp_acts *a, const hs_layer_weights *lw, const hs_real *dout,
                     const hs_real *inp, const hs_model_config *c, size_t N)
{
    const int d = c->d_model, F = c->d_ff;
    const size_t NF = N * (size_t)F;
    hs_real *dact = scratch[0];
    memset(dact, 0, sizeof(hs_real) * NF);
    if (c->mlp == HS_MLP_GELU) {
        hs_linear_backward(dact, gw->proj_w, gw->proj_b, dout, a->h_act, lw->proj_w, N, F, d);
        hs_real *dpre = dact; /* tanh GELU: the activation's gradient, in place */
        if (c->act != HS_ACT_GELU) {
            act_backward_inplace(dpre, a->h_pre, NF, c->act);
        } else if (c->gelu_exact) {
            dpre = scratch[1];
            memset(dpre, 0, sizeof(hs_real) * NF);
            hs_gelu_erf_backward(dpre, a->h_pre, dact, NF);
        } else {
            hs_gelu_backward_inplace(dpre, a->h_pre, NF);
        }
        hs_linear_backward(dinp, gw->fc_w, gw->fc_b, dpre, inp, lw->fc_w, N, d, F);
        return;
    }
    hs_real *dgate = scratch[1], *dup = scratch[2];
    memset(dgate, 0, sizeof(hs_real) * NF);
    memset(dup, 0, sizeof(hs_real) * NF);
    hs_linear_backward(dact, gw->down_w, gw->down_b, dout, a->h_act, lw->down_w, N, F, d);
    if (c->mlp == HS_MLP_GEGLU)
        hs_geglu_backward(dgate, dup, dact, a->h_pre, a->h_up, NF, c->gelu_exact);
    else
        hs_swiglu_backward(dgate, dup, dact, a->h_pre, a->h_up, NF);
    hs_linear_backward(dinp, gw->gate_w, gw->gate_b, dgate, inp, lw->gate_w, N, d, F);
    hs_linear_backward(dinp, gw->up_w, gw->up_b, dup, inp, lw->up_w, N, d, F);
}
