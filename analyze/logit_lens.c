/* The logit lens (logit_lens.h). */
#include "logit_lens.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "eval.h"
#include "layers.h"
#include "linalg.h"
#include "mlm.h"
#include "transformer.h"

/* The residual stream entering layer l (l = L: the final residual). */
static const hs_real *lens_resid(const hs_acts *a, int l)
{
    return l < a->n_layer ? a->layer[l].in : a->layer[a->n_layer - 1].out;
}

/* a->logits (N, V) = unembedding of the final norm of x (N, d), soft-capped
 * with final_softcap: the model's own last step (forward_rest), its norm
 * of the configured kind (the (1 + w) scale of norm_offset included) and
 * its cap, in the buffers the forward uses. */
static void lens_logits(hs_acts *a, const hs_model *m, const hs_real *x, size_t N)
{
    const hs_model_config *c = &m->cfg;
    const hs_weights *w = &m->w;
    const hs_real *u = x;
    if (c->final_norm) {
        hs_block_norm(a->lnf, a->lnf_mean, a->lnf_rstd, x, w->lnf_w, w->lnf_b, c, N);
        u = a->lnf;
    }
    hs_linear_forward(a->logits, u, w->lm_w, w->lm_b, N, c->d_model, c->vocab_size);
    if (c->final_softcap > 0)
        hs_softcap_forward(a->logits, c->final_softcap, N * c->vocab_size);
}

static int lens_alloc(hs_lens *l, const hs_model *m, long n, int with_ld)
{
    memset(l, 0, sizeof *l);
    l->n_layer = m->cfg.n_layer;
    l->n = n;
    const size_t cells = (size_t)n * (size_t)(l->n_layer + 1);
    l->loss = hs_calloc(cells, sizeof(double), "logit lens");
    if (with_ld)
        l->logit_diff = hs_calloc(cells, sizeof(double), "logit lens");
    if (!l->loss || (with_ld && !l->logit_diff)) {
        hs_lens_free(l);
        return HS_ENOMEM;
    }
    return HS_OK;
}

/* The last rows of a batch of prompts at every lens entry, into prompt p0
 * onwards; x (B, d) scratch. */
static void lens_prompt_rows(hs_lens *l, hs_acts *a, const hs_model *m, const hs_prompt_group *g,
                             int i0, int nb, long p0, hs_real *x)
{
    const int d = m->cfg.d_model, V = m->cfg.vocab_size, T = g->T;
    for (int e = 0; e <= l->n_layer; e++) {
        const hs_real *r = lens_resid(a, e);
        for (int b = 0; b < nb; b++)
            memcpy(x + (size_t)b * d, r + ((size_t)b * T + (size_t)(T - 1)) * d,
                   sizeof(hs_real) * d);
        lens_logits(a, m, x, (size_t)nb);
        for (int b = 0; b < nb; b++) {
            const hs_real *lg = a->logits + (size_t)b * V;
            double mx = -INFINITY, s = 0;
            for (int v = 0; v < V; v++)
                mx = lg[v] > mx ? lg[v] : mx;
            for (int v = 0; v < V; v++)
                s += exp((double)lg[v] - mx);
            const size_t cell = (size_t)(p0 + b) * (size_t)(l->n_layer + 1) + (size_t)e;
            const int32_t ans = g->answer[i0 + b], wr = g->wrong[i0 + b];
            l->loss[cell] = mx + log(s) - (double)lg[ans];
            l->logit_diff[cell] = (double)lg[ans] - (double)lg[wr];
        }
    }
}

int hs_logit_lens_check(const hs_model_config *c)
{
    return hs_causal_only(c, "logit-lens", "it decodes each layer's residual into next-token "
                          "logits through the final norm, while an encoder's MLM head (a dense "
                          "layer, a GELU, then its norm) predicts masked tokens");
}

int hs_lens_prompts(hs_lens *l, const hs_model *m, const hs_prompt_set *ps, int batch)
{
    if (hs_logit_lens_check(&m->cfg))
        return HS_EINVAL;
    if (batch < 1)
        return hs_fail(HS_EINVAL, "logit-lens: --batch %d must be positive", batch);
    int rc = lens_alloc(l, m, ps->n, 1);
    hs_real *x = rc ? NULL : hs_calloc((size_t)batch * m->cfg.d_model, sizeof(hs_real), "logit lens");
    if (!rc && !x)
        rc = HS_ENOMEM;
    long p0 = 0;
    for (int gi = 0; !rc && gi < ps->n_group; gi++) {
        const hs_prompt_group *g = &ps->group[gi];
        const int B = g->n < batch ? g->n : batch;
        hs_acts a;
        rc = hs_acts_alloc(&a, &m->cfg, B, g->T, HS_ACTS_INFER);
        for (int i0 = 0; !rc && i0 < g->n; i0 += B) {
            const int nb = g->n - i0 < B ? g->n - i0 : B;
            if (!(rc = hs_acts_set_batch(&a, nb)) &&
                !(rc = hs_forward(&a, m, g->clean + (size_t)i0 * g->T, NULL, NULL)))
                lens_prompt_rows(l, &a, m, g, i0, nb, p0 + i0, x);
        }
        hs_acts_free(&a);
        p0 += g->n;
    }
    free(x);
    if (rc)
        hs_lens_free(l);
    return rc;
}

int hs_lens_data(hs_lens *l, const hs_model *m, const hs_tokens *data, int B, int T,
                 size_t max_batches)
{
    if (hs_logit_lens_check(&m->cfg))
        return HS_EINVAL;
    size_t nb = 0;
    int rc = hs_batches_to_run(data, B, T, max_batches, &nb);
    if (rc)
        return rc;
    if ((rc = lens_alloc(l, m, (long)(nb * (size_t)B), 0)))
        return rc;
    const size_t N = (size_t)B * T;
    int32_t *in = hs_calloc(N, sizeof(int32_t), "logit lens tokens");
    int32_t *tg = hs_calloc(N, sizeof(int32_t), "logit lens targets");
    hs_acts a = { 0 };
    rc = in && tg ? hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_INFER) : HS_ENOMEM;
    for (size_t k = 0; !rc && k < nb; k++) {
        hs_batch_at(data, k * N, B, T, in, tg);
        if ((rc = hs_forward(&a, m, in, NULL, NULL)))
            break;
        for (int e = 0; e <= l->n_layer; e++) {
            lens_logits(&a, m, lens_resid(&a, e), N);
            hs_softmax_xent_forward(a.logits, a.losses, tg, N, m->cfg.vocab_size);
            for (int b = 0; b < B; b++) { /* over the targets (--lines: not the padding) */
                int n;
                const double s = hs_seq_loss_sum(a.losses + (size_t)b * T, tg + (size_t)b * T, T,
                                                  &n);
                l->loss[(k * B + (size_t)b) * (size_t)(l->n_layer + 1) + (size_t)e] =
                    n ? s / n : HS_LENS_NO_TARGET;
            }
        }
    }
    hs_acts_free(&a);
    free(in);
    free(tg);
    if (rc)
        hs_lens_free(l);
    return rc;
}

void hs_lens_free(hs_lens *l)
{
    free(l->loss);
    free(l->logit_diff);
    memset(l, 0, sizeof *l);
}
