/* Encoders' embeddings, padding and MLM transform (encoder.h). */
#include "encoder.h"

#include <string.h>

#include "layers.h"
#include "linalg.h"
#include "stored.h"

size_t hs_encoder_valid(unsigned char *valid, const int32_t *tokens, const hs_model_config *c,
                        size_t N)
{
    size_t pads = 0;
    for (size_t i = 0; i < N; i++) {
        valid[i] = tokens[i] != c->pad_id || c->pad_id < 0;
        pads += !valid[i];
    }
    return pads;
}

/* The position row of token tok at t, after `real` real tokens (RoBERTa:
 * cumsum(mask) * mask + padding_idx, i.e. padding_idx + 1 + the real tokens
 * before t for a real token, padding_idx for padding). */
static int position(const hs_model_config *c, int32_t tok, int t, int real)
{
    if (!c->pos_offset)
        return t;
    return tok == c->pad_id ? c->pad_id : c->pos_offset + real;
}

static int is_pad(const hs_model_config *c, int32_t tok)
{
    return c->pad_id >= 0 && tok == c->pad_id;
}

void hs_encoder_positions(int *pos, const int32_t *tokens, const hs_model_config *c, int T)
{
    for (int t = 0, real = 0; t < T; real += !is_pad(c, tokens[t]), t++)
        pos[t] = position(c, tokens[t], t, real);
}

void hs_encoder_embed_forward(hs_real *emb, hs_real *raw, hs_real *mean, hs_real *rstd,
                              const int32_t *tokens, const unsigned char *types,
                              const hs_weights *w, const hs_model_config *c, int B, int T)
{
    const int d = c->d_model;
    const hs_real *tte = c->type_vocab ? w->tte : NULL;
#pragma omp parallel for schedule(static) if ((size_t)B * T * d >= 65536)
    for (int b = 0; b < B; b++) {
        const int32_t *tk = tokens + (size_t)b * T;
        for (int t = 0, real = 0; t < T; real += !is_pad(c, tk[t]), t++) {
            hs_real *x = raw + ((size_t)b * T + t) * d;
            const hs_real *pe = w->wpe ? w->wpe + (size_t)position(c, tk[t], t, real) * d : NULL;
            hs_stored_read(x, w->wte + (size_t)tk[t] * d, (size_t)d); /* the row, widened */
            const hs_real *type =
                tte ? tte + (size_t)(types ? types[(size_t)b * T + t] : 0) * d : NULL;
            for (int k = 0; k < d; k++) {
                hs_real v = x[k];
                if (type)
                    v += type[k];
                if (pe)
                    v += pe[k];
                x[k] = v;
            }
        }
    }
    const size_t N = (size_t)B * T;
    if (c->embed_norm)
        hs_layernorm_forward(emb, mean, rstd, raw, w->lne_w, w->lne_b, N, d, c->norm_eps);
    else if (emb != raw)
        memcpy(emb, raw, sizeof(hs_real) * N * d);
}

void hs_encoder_embed_backward(hs_weights *g, hs_real *scratch, const hs_real *demb,
                               const hs_real *raw, const hs_real *mean, const hs_real *rstd,
                               const int32_t *tokens, const unsigned char *types,
                               const hs_weights *w, const hs_model_config *c, int B, int T)
{
    const int d = c->d_model;
    const size_t N = (size_t)B * T;
    const hs_real *dx = demb;
    if (c->embed_norm) {
        hs_layernorm_backward_into(scratch, NULL, g->lne_w, g->lne_b, demb, raw, w->lne_w, mean,
                                   rstd, N, d);
        dx = scratch;
    }
    /* wte and the position table without their positions: hs_embed_backward
     * (parallel over channels, so that repeated tokens do not race) */
    if (g->wte)
        hs_embed_backward(g->wte, NULL, dx, tokens, B, T, d);
    if (g->tte && c->type_vocab)
        for (size_t r = 0; r < N; r++)
            for (int k = 0; k < d; k++)
                g->tte[(size_t)(types ? types[r] : 0) * d + k] += dx[r * d + k];
    if (!g->wpe || !w->wpe)
        return;
    for (int b = 0; b < B; b++) {
        const int32_t *tk = tokens + (size_t)b * T;
        for (int t = 0, real = 0; t < T; real += !is_pad(c, tk[t]), t++) {
            const hs_real *src = dx + ((size_t)b * T + t) * d;
            hs_real *dst = g->wpe + (size_t)position(c, tk[t], t, real) * d;
            for (int k = 0; k < d; k++)
                dst[k] += src[k];
        }
    }
}

void hs_mlm_transform_forward(hs_real *act, hs_real *pre, const hs_real *h, const hs_weights *w,
                              const hs_model_config *c, size_t N)
{
    const int d = c->d_model;
    hs_linear_forward(pre, h, w->mlm_w, w->mlm_b, N, d, d);
    if (c->gelu_exact)
        hs_gelu_erf_forward(act, pre, N * d);
    else
        hs_gelu_forward(act, pre, N * d);
}

void hs_mlm_transform_backward(hs_real *dh, hs_weights *g, hs_real *scratch, const hs_real *dact,
                               const hs_real *pre, const hs_real *h, const hs_weights *w,
                               const hs_model_config *c, size_t N)
{
    const int d = c->d_model;
    const size_t n = N * (size_t)d;
    memset(scratch, 0, sizeof(hs_real) * n);
    if (c->gelu_exact)
        hs_gelu_erf_backward(scratch, pre, dact, n);
    else
        hs_gelu_backward(scratch, pre, dact, n);
    memset(dh, 0, sizeof(hs_real) * n);
    hs_linear_backward(dh, g->mlm_w, g->mlm_b, scratch, h, w->mlm_w, N, d, d);
}
