/* MHA -> GQA/MQA conversion (convert.h). */
#include "convert.h"

#include <string.h>

/* dst (G*dh rows of `cols`) = group means of src (G_old*dh rows): row i
 * of new head j averages row i of old heads j*r .. j*r + r - 1. cols is 1
 * for a bias. Summed in double, in head order. */
static void pool_heads(hs_real *dst, const hs_real *src, int G, int r, int dh, int cols)
{
    for (int j = 0; j < G; j++)
        for (int i = 0; i < dh; i++)
            for (int c = 0; c < cols; c++) {
                double sum = 0;
                for (int k = 0; k < r; k++)
                    sum += src[((size_t)(j * r + k) * dh + i) * cols + c];
                dst[((size_t)j * dh + i) * cols + c] = (hs_real)(sum / r);
            }
}

int hs_convert_kv_heads(hs_model *out, const hs_model *in, int G)
{
    const hs_model_config *c = &in->cfg;
    if (G < 1)
        return hs_fail(HS_EINVAL, "--kv-heads %d: must be positive", G);
    for (int l = 0; l < c->n_layer; l++)
        if (c->n_kv_head[l] % G)
            return hs_fail(HS_EINVAL,
                           "--kv-heads %d does not divide layer %d's %d key/value heads (%d "
                           "query heads): every layer's groups must be whole",
                           G, l, c->n_kv_head[l], c->n_head[l]);
    hs_model_config cfg = *c;
    for (int l = 0; l < c->n_layer; l++)
        cfg.n_kv_head[l] = G;
    /* families whose files hold no key/value head count (an encoder's too):
     * the headscope family, which keeps every field */
    if (cfg.family == HS_FAMILY_GPT2 || cfg.family == HS_FAMILY_GPT_NEOX || cfg.encoder)
        cfg.family = HS_FAMILY_HEADSCOPE;
    int rc = hs_model_init(out, &cfg);
    if (rc)
        return rc;
    /* every tensor but k and v keeps its name, shape and values */
    for (int i = 0; i < out->n_tensors; i++) {
        const hs_tensor_info *t = &out->tensors[i];
        const int j = hs_model_find(in, t->name);
        if (j < 0) {
            hs_model_free(out);
            return hs_fail(HS_EINVAL, "convert: tensor %s has no source", t->name);
        }
        if (in->tensors[j].size == t->size)
            memcpy(out->params + t->offset, in->params + in->tensors[j].offset,
                   sizeof(hs_real) * t->size);
    }
    const int dh = c->head_dim, d = c->d_model;
    for (int l = 0; l < c->n_layer; l++) {
        const hs_attn_weights *a = &in->w.layer[l].attn;
        hs_attn_weights *b = &out->w.layer[l].attn;
        const int r = c->n_kv_head[l] / G;
        pool_heads(b->w_k, a->w_k, G, r, dh, d);
        pool_heads(b->w_v, a->w_v, G, r, dh, d);
        if (a->b_k) {
            pool_heads(b->b_k, a->b_k, G, r, dh, 1);
            pool_heads(b->b_v, a->b_v, G, r, dh, 1);
        }
        /* a k norm over the whole projection (OLMo-2) has a weight per key
         * head's dims, pooled as the heads are; a per-head one is shared */
        if (c->qk_norm == HS_QK_NORM_PROJ)
            pool_heads(b->k_norm, a->k_norm, G, r, dh, 1);
    }
    return HS_OK;
}
