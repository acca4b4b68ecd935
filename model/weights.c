#include "weights.h"
#include "rng.h"
#include "memory.h"
#include "stored.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One walk over the tensors of a configuration, in canonical order, serves
 * both the table (names, shapes, offsets) and the binding of pointers. */
typedef struct {
    hs_tensor_info *table; /* NULL: do not record */
    hs_real *base;         /* NULL: do not bind */
    int n;
    size_t offset;
} walker;

static void add(walker *wk, hs_real **slot, int d0, int d1, const char *fmt, int layer)
{
    size_t size = (size_t)d0 * (d1 ? d1 : 1);
    if (wk->table) {
        hs_tensor_info *t = &wk->table[wk->n];
        snprintf(t->name, sizeof t->name, fmt, layer);
        t->ndim = d1 ? 2 : 1;
        t->shape[0] = d0;
        t->shape[1] = d1;
        t->offset = wk->offset;
        t->size = size;
    }
    if (wk->base && slot)
        *slot = wk->base + wk->offset;
    wk->n++;
    wk->offset += size;
}

/* An MLA layer's attention, in Hugging Face DeepseekV2Attention's names
 * under the headscope prefix h.{l}.attn. The GQA table's w_o is the same
 * o_proj, so head-level code that reads W_o (dead heads, ablation) works
 * on MLA layers unchanged. */
static void walk_mla(const hs_model_config *c, walker *wk, hs_layer_weights *lw, int l)
{
    const int d = c->d_model, H = c->n_head[l], Q = c->q_lora_rank, C = c->kv_lora_rank;
    const int r = c->qk_rope_head_dim, HQ = H * (c->qk_nope_head_dim + r);
    const int HKV = H * (c->qk_nope_head_dim + c->v_head_dim);
    hs_mla_weights *m = &lw->mla;
    if (Q) {
        add(wk, &m->w_qa, Q, d, "h.%d.attn.q_a_proj.weight", l);
        add(wk, &m->qa_norm, Q, 0, "h.%d.attn.q_a_layernorm.weight", l);
        add(wk, &m->w_qb, HQ, Q, "h.%d.attn.q_b_proj.weight", l);
    } else {
        add(wk, &m->w_q, HQ, d, "h.%d.attn.q_proj.weight", l);
    }
    add(wk, &m->w_kva, C + r, d, "h.%d.attn.kv_a_proj_with_mqa.weight", l);
    add(wk, &m->kva_norm, C, 0, "h.%d.attn.kv_a_layernorm.weight", l);
    add(wk, &m->w_kvb, HKV, C, "h.%d.attn.kv_b_proj.weight", l);
    add(wk, &m->w_o, d, H * c->v_head_dim, "h.%d.attn.o_proj.weight", l);
    if (wk->base)
        lw->attn.w_o = m->w_o;
}

static void walk(const hs_model_config *c, walker *wk, hs_weights *w)
{
    const int d = c->d_model, V = c->vocab_size, F = c->d_ff, dh = c->head_dim;
    hs_weights none;
    if (!w)
        w = &none;
    const int s2s = hs_config_seq2seq(c);
    add(wk, &w->wte, V, d, "wte.weight", 0);
    if (c->pos == HS_POS_LEARNED && s2s)
        add(wk, &w->enc_wpe, hs_config_pos_rows(c), d, "enc.wpe.weight", 0);
    if (c->pos == HS_POS_LEARNED)
        add(wk, &w->wpe, hs_config_pos_rows(c), d, "wpe.weight", 0);
    const int ln_bias = c->norm == HS_NORM_LAYERNORM && c->norm_bias;
    if (c->type_vocab)
        add(wk, &w->tte, c->type_vocab, d, "tte.weight", 0);
    if (c->embed_norm && s2s) {
        add(wk, &w->enc_lne_w, d, 0, "enc.ln_emb.weight", 0);
        if (ln_bias)
            add(wk, &w->enc_lne_b, d, 0, "enc.ln_emb.bias", 0);
    }
    if (c->embed_norm) {
        add(wk, &w->lne_w, d, 0, "ln_emb.weight", 0);
        if (ln_bias)
            add(wk, &w->lne_b, d, 0, "ln_emb.bias", 0);
    }
    if (c->rel_buckets) { /* HF's (buckets, heads) of each stack's first layer */
        add(wk, &w->enc_rel, c->rel_buckets, c->n_head[0], "enc.rel_bias.weight", 0);
        add(wk, &w->dec_rel, c->rel_buckets, c->n_head[c->enc_layers], "rel_bias.weight", 0);
    }
    for (int l = 0; l < c->n_layer; l++) {
        hs_layer_weights *lw = &w->layer[l];
        const int HD = c->n_head[l] * dh, GD = c->n_kv_head[l] * dh;
        if (!c->no_input_norm) {
            add(wk, &lw->ln1_w, d, 0, "h.%d.ln_1.weight", l);
            if (ln_bias)
                add(wk, &lw->ln1_b, d, 0, "h.%d.ln_1.bias", l);
        }
        if (c->mla) {
            walk_mla(c, wk, lw, l);
        } else {
            add(wk, &lw->attn.w_q, HD, d, "h.%d.attn.q_proj.weight", l);
            add(wk, &lw->attn.w_k, GD, d, "h.%d.attn.k_proj.weight", l);
            add(wk, &lw->attn.w_v, GD, d, "h.%d.attn.v_proj.weight", l);
            add(wk, &lw->attn.w_o, d, HD, "h.%d.attn.o_proj.weight", l);
            if (c->attn_bias || c->qkv_bias) {
                add(wk, &lw->attn.b_q, HD, 0, "h.%d.attn.q_proj.bias", l);
                add(wk, &lw->attn.b_k, GD, 0, "h.%d.attn.k_proj.bias", l);
                add(wk, &lw->attn.b_v, GD, 0, "h.%d.attn.v_proj.bias", l);
            }
            if (c->attn_bias)
                add(wk, &lw->attn.b_o, d, 0, "h.%d.attn.o_proj.bias", l);
            /* RMSNorm weights, per head (dh, shared by the layer's heads) or
             * over the projection; named as the layer's norms are, outside
             * attn.*, since a per-head one does not depend on which heads
             * the layer has */
            if (c->qk_norm) {
                const int per_head = c->qk_norm == HS_QK_NORM_HEAD;
                add(wk, &lw->attn.q_norm, per_head ? dh : HD, 0, "h.%d.q_norm.weight", l);
                add(wk, &lw->attn.k_norm, per_head ? dh : GD, 0, "h.%d.k_norm.weight", l);
            }
        }
        if (c->out_norm) {
            add(wk, &lw->ln_attn_w, d, 0, "h.%d.ln_attn_out.weight", l);
            if (ln_bias)
                add(wk, &lw->ln_attn_b, d, 0, "h.%d.ln_attn_out.bias", l);
        }
        if (hs_config_cross(c, l)) {
            add(wk, &lw->lnx_w, d, 0, "h.%d.ln_x.weight", l);
            if (ln_bias)
                add(wk, &lw->lnx_b, d, 0, "h.%d.ln_x.bias", l);
            add(wk, &lw->xattn.w_q, HD, d, "h.%d.xattn.q_proj.weight", l);
            add(wk, &lw->xattn.w_k, HD, d, "h.%d.xattn.k_proj.weight", l);
            add(wk, &lw->xattn.w_v, HD, d, "h.%d.xattn.v_proj.weight", l);
            add(wk, &lw->xattn.w_o, d, HD, "h.%d.xattn.o_proj.weight", l);
            if (c->attn_bias) {
                add(wk, &lw->xattn.b_q, HD, 0, "h.%d.xattn.q_proj.bias", l);
                add(wk, &lw->xattn.b_k, HD, 0, "h.%d.xattn.k_proj.bias", l);
                add(wk, &lw->xattn.b_v, HD, 0, "h.%d.xattn.v_proj.bias", l);
                add(wk, &lw->xattn.b_o, d, 0, "h.%d.xattn.o_proj.bias", l);
            }
        }
        if (c->mlp == HS_MLP_NONE)
            continue;
        if (!c->no_input_norm) {
            add(wk, &lw->ln2_w, d, 0, "h.%d.ln_2.weight", l);
            if (ln_bias)
                add(wk, &lw->ln2_b, d, 0, "h.%d.ln_2.bias", l);
        }
        if (c->mlp == HS_MLP_GELU) {
            add(wk, &lw->fc_w, F, d, "h.%d.mlp.fc.weight", l);
            if (c->mlp_bias)
                add(wk, &lw->fc_b, F, 0, "h.%d.mlp.fc.bias", l);
            add(wk, &lw->proj_w, d, F, "h.%d.mlp.proj.weight", l);
            if (c->mlp_bias)
                add(wk, &lw->proj_b, d, 0, "h.%d.mlp.proj.bias", l);
        } else {
            add(wk, &lw->gate_w, F, d, "h.%d.mlp.gate_proj.weight", l);
            if (c->mlp_bias)
                add(wk, &lw->gate_b, F, 0, "h.%d.mlp.gate_proj.bias", l);
            add(wk, &lw->up_w, F, d, "h.%d.mlp.up_proj.weight", l);
            if (c->mlp_bias)
                add(wk, &lw->up_b, F, 0, "h.%d.mlp.up_proj.bias", l);
            add(wk, &lw->down_w, d, F, "h.%d.mlp.down_proj.weight", l);
            if (c->mlp_bias)
                add(wk, &lw->down_b, d, 0, "h.%d.mlp.down_proj.bias", l);
        }
        if (c->out_norm) {
            add(wk, &lw->ln_mlp_w, d, 0, "h.%d.ln_mlp_out.weight", l);
            if (ln_bias)
                add(wk, &lw->ln_mlp_b, d, 0, "h.%d.ln_mlp_out.bias", l);
        }
    }
    if (c->mlm_transform) {
        add(wk, &w->mlm_w, d, d, "mlm.dense.weight", 0);
        add(wk, &w->mlm_b, d, 0, "mlm.dense.bias", 0);
    }
    if (c->final_norm && s2s) {
        add(wk, &w->enc_lnf_w, d, 0, "enc.ln_f.weight", 0);
        if (ln_bias)
            add(wk, &w->enc_lnf_b, d, 0, "enc.ln_f.bias", 0);
    }
    if (c->final_norm) {
        add(wk, &w->lnf_w, d, 0, "ln_f.weight", 0);
        if (ln_bias)
            add(wk, &w->lnf_b, d, 0, "ln_f.bias", 0);
    }
    if (!c->tie_embeddings && !c->headless)
        add(wk, &w->lm_w, V, d, "lm_head.weight", 0);
    else if (wk->base) /* headless: no logits are computed; nothing reads it (hs_config_logits) */
        w->lm_w = w->wte;
    if (c->lm_head_bias)
        add(wk, &w->lm_b, V, 0, "lm_head.bias", 0);
    if (c->n_labels && c->encoder) { /* BERT's pooler, RoBERTa's classifier.dense */
        add(wk, &w->cls_pool_w, d, d, "cls.pool.weight", 0);
        add(wk, &w->cls_pool_b, d, 0, "cls.pool.bias", 0);
    }
    if (c->n_labels)
        add(wk, &w->cls_w, c->n_labels, d, "cls.out.weight", 0);
    if (c->n_labels && c->encoder)
        add(wk, &w->cls_b, c->n_labels, 0, "cls.out.bias", 0);
}

int hs_tensor_table(const hs_model_config *c, hs_tensor_info **table, int *n, size_t *total)
{
    walker count = { 0 };
    walk(c, &count, NULL);
    *table = hs_calloc((size_t)count.n, sizeof **table, "tensor table");
    if (!*table)
        return HS_ENOMEM;
    walker fill = { *table, NULL, 0, 0 };
    walk(c, &fill, NULL);
    *n = fill.n;
    *total = fill.offset;
    return HS_OK;
}

void hs_weights_bind(hs_weights *w, const hs_model_config *c, hs_real *base)
{
    memset(w, 0, sizeof *w);
    walker wk = { NULL, base, 0, 0 };
    walk(c, &wk, w);
}

int hs_model_init(hs_model *m, const hs_model_config *c)
{
    memset(m, 0, sizeof *m);
    int rc = hs_config_check_network(c);
    if (rc)
        return rc;
    m->cfg = *c;
    rc = hs_tensor_table(c, &m->tensors, &m->n_tensors, &m->n_params);
    if (rc)
        return rc;
    m->params = hs_calloc_held(m->n_params, sizeof(hs_real), "model parameters");
    if (!m->params) {
        hs_model_free(m);
        return HS_ENOMEM;
    }
    hs_weights_bind(&m->w, c, m->params);
    return HS_OK;
}

int hs_model_widen(const hs_model *m)
{
    int rc = HS_OK;
    for (int i = 0; !rc && m->stored && i < m->n_tensors; i++)
        rc = hs_stored_widen(m->params + m->tensors[i].offset);
    return rc;
}

#ifndef HEADSCOPE_DOUBLE
/* 1 when tensor t is one hs_model_prepack packs for forwards through
 * layers 0 .. layers - 1 (all of them: every tensor). */
static int used_below(const hs_tensor_info *t, int layers, int n_layer)
{
    int l;
    if (layers >= n_layer)
        return 1;
    return sscanf(t->name, "h.%d.", &l) == 1 && l < layers;
}
#endif

int hs_model_prepack(const hs_model *m, int layers, int tb, size_t *bytes, int *n)
{
    *bytes = 0, *n = 0;
#ifdef HEADSCOPE_DOUBLE
    (void)m, (void)layers, (void)tb;
    return HS_OK;
#else
    size_t need = 0;
    tb = tb != 0;
    for (int pass = 0; m->stored && pass < 2; pass++) { /* what it would take, then packing */
        for (int i = 0; i < m->n_tensors; i++) {
            const hs_tensor_info *t = &m->tensors[i];
            size_t b = 0;
            const int r = t->ndim == 2 && used_below(t, layers, m->cfg.n_layer)
                              ? hs_stored_pack(m->params + t->offset, t->shape[0], t->shape[1],
                                               tb, pass == 0, &b)
                              : 0;
            if (r < 0)
                return HS_ENOMEM;
            if (pass == 0)
                need += b;
            else
                *bytes += b, *n += r;
        }
        if (pass == 0 && need &&
            hs_mem_check(need + need / 4, "pre-packed weights"))
            return HS_ENOMEM;
    }
    return HS_OK;
#endif
}

void hs_model_prepack_backward(const hs_model *m)
{
#ifndef HEADSCOPE_DOUBLE
    size_t bytes;
    int n;
    if (m->stored && hs_stored_first_backward(m->stored))
        (void)hs_model_prepack(m, m->cfg.n_layer, 0, &bytes, &n); /* HS_ENOMEM: read per call */
#else
    (void)m;
#endif
}

void hs_model_free(hs_model *m)
{
    free(m->tensors);
    if (m->stored)
        hs_stored_free(m->stored); /* params is its reserved range */
    else
        hs_free_held(m->params, m->n_params, sizeof(hs_real));
    memset(m, 0, sizeof *m);
}

int hs_model_unchanged(const hs_model *m) { return hs_stored_unchanged(m->stored); }

int hs_model_find(const hs_model *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return i;
    return -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

void hs_model_init_random(hs_model *m, unsigned long long seed)
{
    hs_rng r;
    hs_rng_seed(&r, seed);
    /* GPT-2's scheme: N(0, initializer_range), the projections into the
     * residual stream scaled by 1/sqrt(2 L) */
    const double std = m->cfg.init_std, residual_std = std / sqrt(2.0 * m->cfg.n_layer);
    const hs_real unit = (hs_real)(1 - m->cfg.norm_offset); /* a norm's scale of 1 */
    for (int i = 0; i < m->n_tensors; i++) {
        const hs_tensor_info *t = &m->tensors[i];
        hs_real *p = m->params + t->offset;
        int is_norm = strstr(t->name, "ln_") || strstr(t->name, "layernorm") ||
                      strstr(t->name, "_norm.");
        for (size_t k = 0; k < t->size; k++) {
            if (t->ndim == 1)
                p[k] = is_norm && ends_with(t->name, ".weight") ? unit : 0;
            else
                p[k] = (hs_real)(hs_rng_normal(&r) * (ends_with(t->name, "o_proj.weight") ||
                                                              ends_with(t->name, "mlp.proj.weight") ||
                                                              ends_with(t->name, "down_proj.weight")
                                                          ? residual_std
                                                          : std));
        }
    }
}

int hs_dead_heads_by(const hs_model_config *c, hs_wo_get get, void *ctx, unsigned char *dead)
{
    const int d = c->d_model, dh = c->head_dim;
    int count = 0;
    for (int l = 0; l < c->n_layer; l++) {
        const int H = c->n_head[l];
        for (int h = 0; h < H; h++) {
            int zero = 1;
            for (int r = 0; r < d && zero; r++)
                for (int i = 0; i < dh && zero; i++)
                    zero = get(ctx, l, (size_t)r * H * dh + (size_t)h * dh + i) == 0;
            dead[(size_t)l * HS_MAX_HEADS + h] = (unsigned char)zero;
            count += zero;
        }
    }
    return count;
}

static hs_real wo_of_params(void *ctx, int l, size_t k)
{
    return ((const hs_model *)ctx)->w.layer[l].attn.w_o[k]; /* (d, H*dh) */
}

int hs_dead_heads(const hs_model *m, unsigned char *dead)
{
    return hs_dead_heads_by(&m->cfg, wo_of_params, (void *)m, dead);
}
