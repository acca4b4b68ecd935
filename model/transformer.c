#include "transformer.h"
#include "memory.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "encoder.h"
#include "layers.h"
#include "linalg.h"

/* ---- activations: one size table, one allocation ------------------------
 *
 * As llm.c's fill_in_activation_sizes + malloc_and_point: top_sizes() and
 * layer_sizes() list the element count of every activation tensor for
 * (config, B, T, mode); hs_acts_bytes and hs_acts_alloc both walk that one
 * table and hs_acts_free releases the one block, so the bytes reported, the
 * bytes allocated and the pointers set cannot disagree, in float and double
 * alike. A size of 0 leaves the pointer NULL. */

/* Tensors of the whole model, in block order. */
enum {
    ACT_EMB,         /* (B,T,d) */
    ACT_SHARED_MAPS, /* (B, max H, T, T), HS_ACTS_MAPS only */
    ACT_LNF,         /* (B,T,d) */
    ACT_LNF_MEAN,    /* (B,T) */
    ACT_LNF_RSTD,    /* (B,T) */
    ACT_LOGITS,      /* (B,T,V) */
    ACT_LOSSES,      /* (B,T) */
    ACT_DRES,        /* (B,T,d), training only, as the next three */
    ACT_DRES2,
    ACT_DNORM,
    ACT_DBRANCH,
    ACT_DH,          /* (B,T,F), training with an MLP */
    ACT_DH2,         /* (B,T,F), training with an MLP */
    ACT_DH3,         /* (B,T,F), training with a gated MLP */
    ACT_LSE,         /* (B,T), training with final_softcap */
    ACT_EMB_RAW,     /* (B,T,d), embed_norm, as the next two */
    ACT_EMB_MEAN,    /* (B,T) */
    ACT_EMB_RSTD,    /* (B,T) */
    ACT_MLM_PRE,     /* (B,T,d), mlm_transform, as the next */
    ACT_MLM_ACT,     /* (B,T,d) */
    ACT_VALID,       /* (B,T) bytes, encoders (in hs_real units) */
    ACT_COUNT
};

/* Tensors of each layer, in block order after the whole-model ones. */
enum {
    LACT_Q,        /* (B,T,HD) */
    LACT_K,        /* (B,T,GD) */
    LACT_V,        /* (B,T,GD) */
    LACT_Z,        /* (B,T,HD) */
    LACT_ZG,       /* (B,T,HD) */
    LACT_ATT,      /* (B,H,T,T), training only (MAPS: the shared buffer) */
    LACT_DZ,       /* (B,T,HD), training only, as the next three */
    LACT_DQ,       /* (B,T,HD) */
    LACT_DK,       /* (B,T,GD) */
    LACT_DV,       /* (B,T,GD) */
    LACT_Q_RAW,    /* (B,T,HD), training with q/k norms */
    LACT_K_RAW,    /* (B,T,GD), training with q/k norms */
    LACT_N1,       /* (B,T,d), with an input norm or post_norm */
    LACT_N1_MEAN,  /* (B,T) */
    LACT_N1_RSTD,  /* (B,T) */
    LACT_ATTN_RAW, /* (B,T,d), out_norm, as the next two */
    LACT_ATTN_ON_MEAN, /* (B,T) */
    LACT_ATTN_ON_RSTD, /* (B,T) */
    LACT_ATTN_OUT, /* (B,T,d) */
    LACT_R1,       /* (B,T,d) */
    LACT_N2,       /* (B,T,d), with an MLP, as the rest */
    LACT_N2_MEAN,  /* (B,T) */
    LACT_N2_RSTD,  /* (B,T) */
    LACT_H_PRE,    /* (B,T,F) */
    LACT_H_UP,     /* (B,T,F), gated MLPs only */
    LACT_H_ACT,    /* (B,T,F) */
    LACT_MLP_RAW,  /* (B,T,d), out_norm, as the next two */
    LACT_MLP_ON_MEAN, /* (B,T) */
    LACT_MLP_ON_RSTD, /* (B,T) */
    LACT_MLP_OUT,  /* (B,T,d) */
    LACT_R2,       /* (B,T,d) */
    LACT_MLA,      /* attention "mla": hs_mla_acts_elems (q, k, v and dq, dk, dv are 0) */
    LACT_COUNT
};

/* Each tensor starts on a 64-byte boundary (a cache line; whole SIMD
 * vectors for the kernels), counted from the block's start, which
 * hs_calloc_kept aligns so. */
enum { ACTS_ALIGN = HS_KEPT_ALIGN };

/* a * b, or SIZE_MAX when it overflows (SIZE_MAX then stays SIZE_MAX). */
static size_t mul_sat(size_t a, size_t b)
{
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

static size_t add_sat(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* Bytes of n elements rounded up to ACTS_ALIGN (saturating). */
static size_t aligned_bytes(size_t n, size_t elem)
{
    size_t b = mul_sat(n, elem);
    return b > SIZE_MAX - (ACTS_ALIGN - 1) ? SIZE_MAX : (b + ACTS_ALIGN - 1) / ACTS_ALIGN * ACTS_ALIGN;
}

static int max_heads(const hs_model_config *c)
{
    int maxH = 0;
    for (int l = 0; l < c->n_layer; l++)
        maxH = c->n_head[l] > maxH ? c->n_head[l] : maxH;
    return maxH;
}

/* Element counts of the whole-model tensors; they saturate at SIZE_MAX. */
static void top_sizes(size_t s[ACT_COUNT], const hs_model_config *c, int B, int T, int mode)
{
    const int training = mode == HS_ACTS_TRAIN;
    const size_t N = mul_sat((size_t)B, (size_t)T), Nd = mul_sat(N, (size_t)c->d_model);
    const size_t NF = mul_sat(N, (size_t)c->d_ff);
    memset(s, 0, sizeof(size_t) * ACT_COUNT);
    s[ACT_EMB] = s[ACT_LNF] = Nd;
    if (mode == HS_ACTS_MAPS)
        s[ACT_SHARED_MAPS] = mul_sat(mul_sat(N, (size_t)T), (size_t)max_heads(c));
    s[ACT_LNF_MEAN] = s[ACT_LNF_RSTD] = s[ACT_LOSSES] = N;
    const size_t logit_rows = mode == HS_ACTS_LOSS && N > HS_LOSS_ROWS ? HS_LOSS_ROWS : N;
    /* a model without a language-model head computes no logits (hs_config_logits) */
    s[ACT_LOGITS] = c->headless ? 0 : mul_sat(logit_rows, (size_t)c->vocab_size);
    if (training) {
        s[ACT_DRES] = s[ACT_DRES2] = s[ACT_DNORM] = s[ACT_DBRANCH] = Nd;
        if (c->mlp != HS_MLP_NONE)
            s[ACT_DH] = s[ACT_DH2] = NF;
        if (c->mlp == HS_MLP_SWIGLU || c->mlp == HS_MLP_GEGLU)
            s[ACT_DH3] = NF;
        if (c->final_softcap > 0)
            s[ACT_LSE] = N;
    }
    if (c->embed_norm) {
        s[ACT_EMB_RAW] = Nd;
        s[ACT_EMB_MEAN] = s[ACT_EMB_RSTD] = N;
    }
    if (c->mlm_transform)
        s[ACT_MLM_PRE] = s[ACT_MLM_ACT] = Nd;
    if (c->encoder)
        s[ACT_VALID] = N / sizeof(hs_real) + 1;
}

/* Element counts of layer l's tensors. */
static void layer_sizes(size_t s[LACT_COUNT], const hs_model_config *c, int l, int B, int T,
                        int mode)
{
    const size_t N = mul_sat((size_t)B, (size_t)T), Nd = mul_sat(N, (size_t)c->d_model);
    const size_t NF = mul_sat(N, (size_t)c->d_ff), dh = (size_t)c->head_dim;
    const size_t NHD = mul_sat(N, (size_t)c->n_head[l] * dh);
    const size_t NGD = mul_sat(N, (size_t)c->n_kv_head[l] * dh);
    memset(s, 0, sizeof(size_t) * LACT_COUNT);
    s[LACT_Q] = s[LACT_Z] = s[LACT_ZG] = NHD;
    s[LACT_K] = s[LACT_V] = NGD;
    if (mode == HS_ACTS_TRAIN) {
        s[LACT_ATT] = mul_sat(mul_sat(N, (size_t)T), (size_t)c->n_head[l]);
        s[LACT_DZ] = s[LACT_DQ] = NHD;
        s[LACT_DK] = s[LACT_DV] = NGD;
        if (c->qk_norm) {
            s[LACT_Q_RAW] = NHD;
            s[LACT_K_RAW] = NGD;
        }
    }
    const int has_n = !c->no_input_norm || c->post_norm; /* n1, n2 exist */
    s[LACT_ATTN_OUT] = s[LACT_R1] = Nd;
    if (has_n) {
        s[LACT_N1] = Nd;
        s[LACT_N1_MEAN] = s[LACT_N1_RSTD] = N;
    }
    if (c->out_norm) {
        s[LACT_ATTN_RAW] = Nd;
        s[LACT_ATTN_ON_MEAN] = s[LACT_ATTN_ON_RSTD] = N;
    }
    if (c->mlp != HS_MLP_NONE) {
        s[LACT_MLP_OUT] = s[LACT_R2] = Nd;
        if (has_n) {
            s[LACT_N2] = Nd;
            s[LACT_N2_MEAN] = s[LACT_N2_RSTD] = N;
        }
        s[LACT_H_PRE] = s[LACT_H_ACT] = NF;
        if (c->mlp == HS_MLP_SWIGLU || c->mlp == HS_MLP_GEGLU)
            s[LACT_H_UP] = NF;
        if (c->out_norm) {
            s[LACT_MLP_RAW] = Nd;
            s[LACT_MLP_ON_MEAN] = s[LACT_MLP_ON_RSTD] = N;
        }
    }
    if (c->mla) {
        const hs_mla_config mc = hs_config_mla(c, l);
        s[LACT_Q] = s[LACT_K] = s[LACT_V] = s[LACT_DQ] = s[LACT_DK] = s[LACT_DV] = 0;
        s[LACT_MLA] = mul_sat(hs_mla_acts_elems(&mc, 1, 1, mode == HS_ACTS_TRAIN), N);
    }
}

static int acts_check(const hs_model_config *c, int B, int T, int mode)
{
    if (B < 1 || T < 1)
        return hs_fail(HS_EINVAL, "activations: B=%d, T=%d must be positive", B, T);
    if (mode != HS_ACTS_INFER && mode != HS_ACTS_TRAIN && mode != HS_ACTS_MAPS &&
        mode != HS_ACTS_LOSS)
        return hs_fail(HS_EINVAL, "activations: unknown mode %d", mode);
    if (c->n_layer < 1 || c->n_layer > HS_MAX_LAYERS)
        return hs_fail(HS_EINVAL, "activations: n_layer=%d outside 1..%d", c->n_layer,
                       HS_MAX_LAYERS);
    if (hs_config_seq2seq(c))
        return hs_fail(HS_EUNSUPPORTED, "an encoder-decoder model (%s): this computation runs "
                                        "one stack; encoder-decoders take source-target pairs "
                                        "(eval --pairs)", hs_family_name(c->family));
    if (c->d_model < 1 || c->vocab_size < 1 || c->head_dim < 1 ||
        (c->mlp != HS_MLP_NONE && c->d_ff < 1))
        return hs_fail(HS_EINVAL,
                       "activations: d_model=%d, vocab_size=%d, head_dim=%d, d_ff=%d must be "
                       "positive",
                       c->d_model, c->vocab_size, c->head_dim, c->d_ff);
    for (int l = 0; l < c->n_layer; l++) {
        hs_attn_config ac = hs_config_attn(c, l);
        if (hs_attn_config_check(&ac))
            return hs_fail(HS_EINVAL, "activations: layer %d: %s", l, hs_last_error());
    }
    return HS_OK;
}

/* The layers whose buffers the block holds: every one, or with
 * HS_ACTS_LOSS the first two, whose buffers the others use in turn (not
 * for MLA layers, whose buffers are bound by mla.c). */
static int layers_held(const hs_model_config *c, int mode)
{
    return mode == HS_ACTS_LOSS && c->n_layer > 2 && !c->mla ? 2 : c->n_layer;
}

/* The element counts of held layer l's tensors: its own, or with
 * HS_ACTS_LOSS the largest of the layers that use its buffers. */
static void held_sizes(size_t s[LACT_COUNT], const hs_model_config *c, int l, int B, int T,
                       int mode)
{
    layer_sizes(s, c, l, B, T, mode);
    for (int k = l + 2; layers_held(c, mode) == 2 && k < c->n_layer; k += 2) {
        size_t o[LACT_COUNT];
        layer_sizes(o, c, k, B, T, mode);
        for (int i = 0; i < LACT_COUNT; i++)
            s[i] = o[i] > s[i] ? o[i] : s[i];
    }
}

/* The block's size: the n_layer hs_layer_acts records, then every tensor of
 * the table, each a whole number of ACTS_ALIGN units from the aligned start. */
static int acts_plan(const hs_model_config *c, int B, int T, int mode, size_t *bytes)
{
    int rc = acts_check(c, B, T, mode);
    if (rc)
        return rc;
    size_t top[ACT_COUNT], lay[LACT_COUNT];
    size_t total = aligned_bytes((size_t)c->n_layer, sizeof(hs_layer_acts));
    top_sizes(top, c, B, T, mode);
    for (int i = 0; i < ACT_COUNT; i++)
        total = add_sat(total, aligned_bytes(top[i], sizeof(hs_real)));
    for (int l = 0; l < layers_held(c, mode); l++) {
        held_sizes(lay, c, l, B, T, mode);
        for (int i = 0; i < LACT_COUNT; i++)
            total = add_sat(total, aligned_bytes(lay[i], sizeof(hs_real)));
    }
    if (total > SIZE_MAX - ACTS_ALIGN)
        return hs_fail(HS_ENOMEM, "activations: B=%d, T=%d overflow the address space", B, T);
    *bytes = total;
    return HS_OK;
}

size_t hs_acts_bytes(const hs_model_config *c, int B, int T, int mode)
{
    size_t bytes = 0;
    return acts_plan(c, B, T, mode, &bytes) ? 0 : bytes;
}

/* The next n elements of the block (NULL when n is 0); advances *at. */
static hs_real *take(unsigned char **at, size_t n)
{
    if (!n)
        return NULL;
    hs_real *p = (hs_real *)(void *)*at;
    *at += aligned_bytes(n, sizeof(hs_real));
    return p;
}

int hs_acts_alloc(hs_acts *a, const hs_model_config *c, int B, int T, int mode)
{
    memset(a, 0, sizeof *a);
    size_t bytes = 0;
    int rc = acts_plan(c, B, T, mode, &bytes);
    if (rc)
        return rc;
    /* One zeroed block rather than aligned_alloc + memset: a fresh one comes
     * zeroed from mmap, its pages touched only when used, as with one calloc
     * per tensor; a kept one (hs_free_kept) has its pages already. */
    unsigned char *at = hs_calloc_kept(bytes, "activations");
    if (!at)
        return HS_ENOMEM;
    a->block = at;
    a->bytes = bytes;
    a->B = a->B_alloc = B;
    a->T = T;
    a->training = mode == HS_ACTS_TRAIN;
    a->mode = mode;
    a->n_layer = c->n_layer;
    a->layer = (hs_layer_acts *)(void *)at;
    at += aligned_bytes((size_t)c->n_layer, sizeof(hs_layer_acts));

    size_t top[ACT_COUNT], lay[LACT_COUNT];
    top_sizes(top, c, B, T, mode);
    hs_real **top_slot[ACT_COUNT] = {
        [ACT_EMB] = &a->emb,           [ACT_SHARED_MAPS] = &a->shared_maps,
        [ACT_LNF] = &a->lnf,           [ACT_LNF_MEAN] = &a->lnf_mean,
        [ACT_LNF_RSTD] = &a->lnf_rstd, [ACT_LOGITS] = &a->logits,
        [ACT_LOSSES] = &a->losses,     [ACT_DRES] = &a->dres,
        [ACT_DRES2] = &a->dres2,       [ACT_DNORM] = &a->dnorm,
        [ACT_DBRANCH] = &a->dbranch,   [ACT_DH] = &a->dh,
        [ACT_DH2] = &a->dh2,           [ACT_DH3] = &a->dh3,
        [ACT_LSE] = &a->lse,           [ACT_EMB_RAW] = &a->emb_raw,
        [ACT_EMB_MEAN] = &a->emb_mean, [ACT_EMB_RSTD] = &a->emb_rstd,
        [ACT_MLM_PRE] = &a->mlm_pre,   [ACT_MLM_ACT] = &a->mlm_act,
    };
    hs_real *valid = NULL;
    top_slot[ACT_VALID] = &valid;
    for (int i = 0; i < ACT_COUNT; i++)
        *top_slot[i] = take(&at, top[i]);
    a->valid = (unsigned char *)valid;
    for (int l = 0; l < c->n_layer; l++) {
        hs_layer_acts *la = &a->layer[l];
        hs_attn_acts *aa = &la->attn;
        hs_real *mla_mem = NULL;
        hs_real **slot[LACT_COUNT] = {
            [LACT_Q] = &aa->q,             [LACT_K] = &aa->k,
            [LACT_V] = &aa->v,             [LACT_Z] = &aa->z,
            [LACT_ZG] = &aa->zg,           [LACT_ATT] = &aa->att,
            [LACT_DZ] = &aa->dz,           [LACT_DQ] = &aa->dq,
            [LACT_DK] = &aa->dk,           [LACT_DV] = &aa->dv,
            [LACT_Q_RAW] = &aa->q_raw,     [LACT_K_RAW] = &aa->k_raw,
            [LACT_N1] = &la->n1,           [LACT_N1_MEAN] = &la->n1_mean,
            [LACT_N1_RSTD] = &la->n1_rstd, [LACT_ATTN_RAW] = &la->attn_raw,
            [LACT_ATTN_ON_MEAN] = &la->attn_on_mean, [LACT_ATTN_ON_RSTD] = &la->attn_on_rstd,
            [LACT_ATTN_OUT] = &la->attn_out,
            [LACT_R1] = &la->r1,           [LACT_N2] = &la->n2,
            [LACT_N2_MEAN] = &la->n2_mean, [LACT_N2_RSTD] = &la->n2_rstd,
            [LACT_H_PRE] = &la->h_pre,     [LACT_H_UP] = &la->h_up,
            [LACT_H_ACT] = &la->h_act,     [LACT_MLP_RAW] = &la->mlp_raw,
            [LACT_MLP_ON_MEAN] = &la->mlp_on_mean, [LACT_MLP_ON_RSTD] = &la->mlp_on_rstd,
            [LACT_MLP_OUT] = &la->mlp_out,
            [LACT_R2] = &la->r2,           [LACT_MLA] = &mla_mem,
        };
        if (l < layers_held(c, mode)) {
            held_sizes(lay, c, l, B, T, mode);
            for (int i = 0; i < LACT_COUNT; i++)
                *slot[i] = take(&at, lay[i]);
        } else { /* HS_ACTS_LOSS: the buffers of layer l % 2 */
            *la = a->layer[l % 2];
        }
        if (c->mla) {
            const hs_mla_config mc = hs_config_mla(c, l);
            hs_mla_acts_bind(&la->mla, &mc, B, T, mode == HS_ACTS_TRAIN, mla_mem);
        }
        /* What hs_attn_acts_alloc sets for a cache-free self-attention over
         * T positions; the buffers are the block's. */
        aa->B = B;
        aa->L = aa->S_new = aa->S = T;
        if (mode == HS_ACTS_MAPS)
            aa->att = a->shared_maps; /* each layer overwrites the last one's maps */
        if (c->post_norm)
            la->out = c->mlp != HS_MLP_NONE ? la->n2 : la->n1;
        else
            la->out = c->mlp != HS_MLP_NONE ? la->r2 : la->r1;
        la->in = l ? a->layer[l - 1].out : a->emb;
    }
    return HS_OK;
}

/* p is NULL or an address inside the block [lo, hi). */
static int inside(const void *p, const unsigned char *lo, const unsigned char *hi)
{
    return !p || ((const unsigned char *)p >= lo && (const unsigned char *)p < hi);
}

int hs_acts_sane(const hs_acts *a, const hs_model_config *c)
{
    if (!a->block || a->n_layer != c->n_layer || a->B < 1 || a->B > a->B_alloc ||
        a->bytes != hs_acts_bytes(c, a->B_alloc, a->T, a->mode))
        return 0;
    const unsigned char *lo = a->block, *hi = lo + a->bytes;
    /* (the logits may be the caller's: the flat interface points them at its
     * own array for one forward) */
    int ok = inside(a->layer, lo, hi) && inside(a->emb, lo, hi) && inside(a->lnf, lo, hi) &&
             inside(a->valid, lo, hi) && inside(a->dres, lo, hi);
    for (int l = 0; ok && l < a->n_layer; l++) {
        const hs_layer_acts *la = &a->layer[l];
        const hs_attn_acts *at = &la->attn;
        ok = at->B == a->B && at->L == a->T && inside(at->q, lo, hi) && inside(at->k, lo, hi) &&
             inside(at->v, lo, hi) && inside(at->z, lo, hi) && inside(at->att, lo, hi) &&
             la->out && inside(la->out, lo, hi) && la->in == (l ? a->layer[l - 1].out : a->emb);
    }
    return ok;
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
    if (a->block) /* every tensor and the layer records */
        hs_free_kept(a->block, a->bytes);
    memset(a, 0, sizeof *a);
}

/* The MLP activations of layer la, as block.h's MLP keeps them. */
static hs_mlp_acts mlp_acts(const hs_layer_acts *la)
{
    return (hs_mlp_acts){ la->h_pre, la->h_up, la->h_act };
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
        if (targets && targets[i] != HS_TARGET_IGNORE &&
            (targets[i] < 0 || targets[i] >= c->vocab_size))
            return hs_fail(HS_EINVAL, "forward: target %d at position %zu outside vocabulary %d",
                           targets[i], i, c->vocab_size);
    }
    return HS_OK;
}

static const hs_hooks no_hooks = { 0 };

hs_attn_mask hs_acts_attn_mask(const hs_acts *a, const hs_model_config *c)
{
    return (hs_attn_mask){ !c->encoder, c->encoder && a->padded ? a->valid : NULL, 0 };
}

void hs_acts_set_valid(hs_acts *a, const hs_model *m, const int32_t *tokens, int copies)
{
    if (!m->cfg.encoder || copies < 1)
        return;
    const size_t n = (size_t)(a->B / copies) * a->T;
    a->padded = hs_encoder_valid(a->valid, tokens, &m->cfg, n) > 0;
    for (int k = 1; k < copies; k++)
        memcpy(a->valid + k * n, a->valid, n);
}

/* Hooks that need maps need activations that keep them. */
static int check_hooks(const hs_acts *a, const hs_hooks *hooks)
{
    if (a->mode != HS_ACTS_INFER && a->mode != HS_ACTS_LOSS)
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

/* A norm to fuse into the residual add that produces its input: the add
 * writes the sum and the norm's output in one pass (add_norm_forward). */
typedef struct {
    hs_real *out, *mean, *rstd;
    const hs_real *w, *b;
} fused_norm;

/* sum = x + y, then the fused norm of sum if any. */
static void residual_add(hs_real *sum, const hs_real *x, const hs_real *y, const fused_norm *fn,
                         const hs_model_config *c, size_t N)
{
    if (fn)
        hs_block_add_norm(sum, fn->out, fn->mean, fn->rstd, x, y, fn->w, fn->b, c, N);
    else
        hs_add(sum, x, y, N * c->d_model);
}

/* The norm layer_rest starts with where it reads r1 (post-norm ln1, or a
 * sequential pre-norm model's ln2); none (out NULL) where its first norm
 * reads the layer's input or there is none. layer_attention(fuse = 1) fuses
 * it into r1's add, and layer_rest then skips it. */
static fused_norm rest_first_norm(hs_layer_acts *la, const hs_layer_weights *lw,
                                  const hs_model_config *c)
{
    if (c->post_norm)
        return (fused_norm){ la->n1, la->n1_mean, la->n1_rstd, lw->ln1_w, lw->ln1_b };
    if (c->mlp != HS_MLP_NONE && !c->parallel_residual && !c->no_input_norm)
        return (fused_norm){ la->n2, la->n2_mean, la->n2_rstd, lw->ln2_w, lw->ln2_b };
    return (fused_norm){ 0 };
}

/* Layer l up to the residual after attention: r1 = in + attention(in),
 * the attention's output through its own norm first with out_norm.
 * normed_in: the pre-norm of the input (n1) was computed with the add that
 * produced it. fuse: layer_rest follows at once (with normed = 1), so the
 * norm it starts with is computed here, fused into r1's add. */
static int layer_attention(hs_acts *a, const hs_model *m, int l, const hs_hooks *hooks,
                           int normed_in, int fuse)
{
    const hs_model_config *c = &m->cfg;
    hs_layer_acts *la = &a->layer[l];
    const hs_layer_weights *lw = &m->w.layer[l];
    const hs_attn_config ac = hs_config_attn(c, l);
    const size_t N = (size_t)a->B * a->T;
    const hs_attn_mask mask = hs_acts_attn_mask(a, c);
    int rc = resid_site(hooks, HS_SITE_RESID_PRE, l, la->in, a, c->d_model);
    if (rc)
        return rc;
    const hs_real *attn_in = la->in;
    if (!c->post_norm && !c->no_input_norm) {
        if (!normed_in)
            hs_block_norm(la->n1, la->n1_mean, la->n1_rstd, la->in, lw->ln1_w, lw->ln1_b, c, N);
        attn_in = la->n1;
    }
    la->attn.hooks = (hs_attn_hooks){ { hooks->on_rows, hooks->ctx }, hooks->site, l };
    if (c->mla) {
        const hs_mla_config mc = hs_config_mla(c, l);
        rc = hs_mla_forward_heads(&la->mla, &la->attn, &lw->mla, &mc, attn_in);
    } else {
        rc = hs_attn_forward_heads(&la->attn, &lw->attn, &ac, attn_in, NULL, &mask, NULL);
    }
    if (!rc && hooks->on_maps)
        rc = hooks->on_maps(hooks->ctx, l, la->attn.att, a->B, ac.n_heads, a->T);
    if (rc)
        return rc;
    hs_attn_forward_output(c->out_norm ? la->attn_raw : la->attn_out, &la->attn, &lw->attn, &ac,
                           hooks->gates ? hooks->gates[l] : NULL, hooks->gates_per_seq);
    if (c->out_norm)
        hs_block_norm(la->attn_out, la->attn_on_mean, la->attn_on_rstd, la->attn_raw,
                      lw->ln_attn_w, lw->ln_attn_b, c, N);
    if ((rc = resid_site(hooks, HS_SITE_ATTN_OUT, l, la->attn_out, a, c->d_model)))
        return rc;
    const fused_norm fn = fuse ? rest_first_norm(la, lw, c) : (fused_norm){ 0 };
    residual_add(la->r1, la->in, la->attn_out, fn.out ? &fn : NULL, c, N);
    return HS_OK;
}

/* Layer l from the residual after attention (r1) to its output: the
 * post-norm, the MLP and its norms. With a parallel residual (GPT-NeoX) the
 * MLP reads the norm of the layer's input, not of r1:
 * out = in + attn(ln1(in)) + mlp(ln2(in)) = r1 + mlp(ln2(in)); without
 * input norms (OLMo-2) it reads r1 itself; with out_norm its output passes
 * its own norm before the add.
 * normed: layer_attention(fuse = 1) computed the first norm of r1.
 * next: NULL, or the norm of the layer's output that comes next (the next
 * layer's ln1 or the final norm, pre-norm models), fused into the last add;
 * the caller passes it only where that add produces the layer's output. */
static int layer_rest(hs_acts *a, const hs_model *m, int l, const hs_hooks *hooks, int normed,
                      const fused_norm *next)
{
    const hs_model_config *c = &m->cfg;
    hs_layer_acts *la = &a->layer[l];
    const hs_layer_weights *lw = &m->w.layer[l];
    const size_t N = (size_t)a->B * a->T;
    normed = normed && rest_first_norm(la, lw, c).out;
    if (c->post_norm && !normed)
        hs_block_norm(la->n1, la->n1_mean, la->n1_rstd, la->r1, lw->ln1_w, lw->ln1_b, c, N);
    if (c->mlp == HS_MLP_NONE)
        return HS_OK;
    const hs_real *mid = c->post_norm ? la->n1 : la->r1; /* residual after attention */
    const hs_real *mlp_in = mid;
    if (!c->post_norm) {
        mlp_in = c->parallel_residual ? la->in : mid;
        if (!c->no_input_norm) {
            if (!normed)
                hs_block_norm(la->n2, la->n2_mean, la->n2_rstd, mlp_in, lw->ln2_w, lw->ln2_b, c,
                              N);
            mlp_in = la->n2;
        }
    }
    const hs_mlp_acts ma = mlp_acts(la);
    hs_mlp_forward(c->out_norm ? la->mlp_raw : la->mlp_out, &ma, lw, mlp_in, c, N);
    if (c->out_norm)
        hs_block_norm(la->mlp_out, la->mlp_on_mean, la->mlp_on_rstd, la->mlp_raw, lw->ln_mlp_w,
                      lw->ln_mlp_b, c, N);
    int rc = resid_site(hooks, HS_SITE_MLP_OUT, l, la->mlp_out, a, c->d_model);
    if (rc)
        return rc;
    if (c->post_norm) {
        const fused_norm fn = { la->n2, la->n2_mean, la->n2_rstd, lw->ln2_w, lw->ln2_b };
        residual_add(la->r2, mid, la->mlp_out, &fn, c, N);
    } else {
        residual_add(la->r2, mid, la->mlp_out, next, c, N);
    }
    return HS_OK;
}

/* Layers from `from` on (starting after the attention of layer `from`
 * when mid_layer), then the final norm, logits (soft-capped with
 * final_softcap) and loss. */
static int forward_rest(hs_acts *a, const hs_model *m, int from, int mid_layer,
                        const int32_t *targets, const hs_hooks *hooks)
{
    const hs_model_config *c = &m->cfg;
    const hs_weights *w = &m->w;
    const size_t N = (size_t)a->B * a->T;
    const int d = c->d_model, V = c->vocab_size;
    int rc;
    /* A pre-norm model's layer output feeds a norm next (the next layer's
     * ln1, or the final norm): fused into the add that makes the output,
     * unless a resid_pre hook may change the residual in between, or the
     * layer's output is not the last add's sum (no MLP). */
    const int fuse_out = !c->post_norm && c->mlp != HS_MLP_NONE &&
                         !hs_site_hooked(hooks->site, HS_SITE_RESID_PRE);
    int normed_in = 0; /* this layer's ln1 was fused into the last add */
    for (int l = from; l < c->n_layer; l++) {
        const int first_mid = mid_layer && l == from;
        if (!first_mid && (rc = layer_attention(a, m, l, hooks, normed_in, 1)))
            return rc;
        fused_norm fn = { 0 };
        if (fuse_out && l + 1 < c->n_layer) {
            hs_layer_acts *nx = &a->layer[l + 1];
            const hs_layer_weights *nw = &w->layer[l + 1];
            if (!c->no_input_norm)
                fn = (fused_norm){ nx->n1, nx->n1_mean, nx->n1_rstd, nw->ln1_w, nw->ln1_b };
        } else if (fuse_out && c->final_norm) {
            fn = (fused_norm){ a->lnf, a->lnf_mean, a->lnf_rstd, w->lnf_w, w->lnf_b };
        }
        if ((rc = layer_rest(a, m, l, hooks, !first_mid, fn.out ? &fn : NULL)))
            return rc;
        normed_in = fn.out != NULL;
    }
    hs_real *h = a->layer[c->n_layer - 1].out;
    if ((rc = resid_site(hooks, HS_SITE_RESID_PRE, c->n_layer, h, a, d)))
        return rc;
    if (c->headless && c->encoder) /* the encoder alone: its output is the last layer's */
        return targets ? hs_config_logits(c, "a loss") : HS_OK;
    const hs_real *u = h; /* the unembedding's input */
    if (c->mlm_transform) { /* an encoder's MLM head: dense + GELU, then the final norm */
        hs_mlm_transform_forward(a->mlm_act, a->mlm_pre, h, w, c, N);
        h = a->mlm_act;
    }
    if (c->final_norm) {
        if (!normed_in)
            hs_block_norm(a->lnf, a->lnf_mean, a->lnf_rstd, h, w->lnf_w, w->lnf_b, c, N);
        u = a->lnf;
    }
    if (c->headless) /* a decoder's task head reads the final norm's output (hs_classify) */
        return targets ? hs_config_logits(c, "a loss") : HS_OK;
    /* the logits and losses of rows r0 .. r0 + n - 1 (HS_ACTS_LOSS: a chunk
     * of HS_LOSS_ROWS at a time into the one chunk of logits) */
    const size_t chunk = a->mode == HS_ACTS_LOSS ? HS_LOSS_ROWS : N;
    for (size_t r0 = 0; r0 < N; r0 += chunk) {
        const size_t n = N - r0 < chunk ? N - r0 : chunk;
        hs_real *logits = a->logits; /* the chunk's rows */
        hs_linear_forward(logits, u + r0 * d, w->lm_w, w->lm_b, n, d, V);
        if (c->final_softcap > 0)
            hs_softcap_forward(logits, c->final_softcap, n * V);
        if (!targets)
            continue;
        /* lse = loss + the target's capped logit, once the loss is known */
        for (size_t i = 0; a->lse && i < n; i++)
            a->lse[r0 + i] = targets[r0 + i] < 0 ? 0 : logits[i * V + targets[r0 + i]];
        hs_softmax_xent_forward(logits, a->losses + r0, targets + r0, n, V);
    }
    if (targets) {
        double sum = 0;
        size_t n = 0;
        for (size_t i = 0; i < N; i++) {
            sum += a->losses[i];
            n += targets[i] >= 0;
            if (a->lse)
                a->lse[i] += a->losses[i];
        }
        a->n_targets = n;
        a->loss = n ? sum / (double)n : 0;
    }
    return HS_OK;
}

/* a->emb = the embeddings of tokens, times sqrt(d) rounded to hs_real with
 * embed_scale (Gemma's normaliser, which Hugging Face rounds to the hidden
 * states' dtype). */
static void embed(hs_acts *a, const hs_model *m, const int32_t *tokens)
{
    const int d = m->cfg.d_model;
    if (m->cfg.encoder) { /* token types, RoBERTa's positions, the norm; the padding mask */
        hs_encoder_embed_forward(a->emb, a->emb_raw ? a->emb_raw : a->emb, a->emb_mean,
                                 a->emb_rstd, tokens, a->types, &m->w, &m->cfg, a->B, a->T);
        a->padded = hs_encoder_valid(a->valid, tokens, &m->cfg, (size_t)a->B * a->T) > 0;
        return;
    }
    hs_embed_forward(a->emb, tokens, m->w.wte, m->w.wpe, a->B, a->T, d);
    if (m->cfg.embed_scale)
        hs_scale(a->emb, (hs_real)sqrt((double)d), (size_t)a->B * a->T * d);
}

int hs_forward(hs_acts *a, const hs_model *m, const int32_t *tokens, const int32_t *targets,
               const hs_hooks *hooks)
{
    assert(hs_acts_sane(a, &m->cfg));
    if (!hooks)
        hooks = &no_hooks;
    int rc = check_hooks(a, hooks);
    if (!rc)
        rc = check_inputs(a, m, tokens, targets);
    if (rc)
        return rc;
    embed(a, m, tokens);
    return forward_rest(a, m, 0, 0, targets, hooks);
}

int hs_forward_to(hs_acts *a, const hs_model *m, const int32_t *tokens, int layer,
                  const hs_hooks *hooks)
{
    assert(hs_acts_sane(a, &m->cfg));
    if (!hooks)
        hooks = &no_hooks;
    if (layer < 0 || layer >= m->cfg.n_layer)
        return hs_fail(HS_EINVAL, "forward: no layer %d", layer);
    int rc = check_hooks(a, hooks);
    if (!rc)
        rc = check_inputs(a, m, tokens, NULL);
    if (rc)
        return rc;
    embed(a, m, tokens);
    for (int l = 0; l < layer; l++)
        if ((rc = layer_attention(a, m, l, hooks, 0, 1)) ||
            (rc = layer_rest(a, m, l, hooks, 1, NULL)))
            return rc;
    return layer_attention(a, m, layer, hooks, 0, 0);
}

int hs_forward_from(hs_acts *a, const hs_model *m, int layer, const int32_t *targets)
{
    return hs_forward_from_hooks(a, m, layer, targets, NULL);
}

int hs_forward_from_hooks(hs_acts *a, const hs_model *m, int layer, const int32_t *targets,
                          const hs_hooks *hooks)
{
    assert(hs_acts_sane(a, &m->cfg));
    if (!hooks)
        hooks = &no_hooks;
    if (layer < 0 || layer >= m->cfg.n_layer)
        return hs_fail(HS_EINVAL, "forward: no layer %d", layer);
    int rc = check_hooks(a, hooks);
    return rc ? rc : forward_rest(a, m, layer, 1, targets, hooks);
}

/* Row b of x (B*T rows of w) <- row (b, T-1): the last position of each
 * sequence, in place (rows move down only). */
static void keep_last_rows(hs_real *x, int B, int T, int w)
{
    if (!x)
        return;
    for (int b = 0; b < B; b++)
        memmove(x + (size_t)b * w, x + ((size_t)b * T + T - 1) * w, sizeof(hs_real) * w);
}

int hs_forward_from_last(hs_acts *a, const hs_model *m, int layer, const hs_hooks *hooks)
{
    assert(hs_acts_sane(a, &m->cfg));
    if (!hooks)
        hooks = &no_hooks;
    const int L = m->cfg.n_layer, d = m->cfg.d_model;
    if (layer < 0 || layer >= L)
        return hs_fail(HS_EINVAL, "forward: no layer %d", layer);
    int rc = check_hooks(a, hooks);
    for (int l = layer; !rc && l < L - 1; l++) {
        if (l > layer)
            rc = layer_attention(a, m, l, hooks, 0, 1);
        if (!rc)
            rc = layer_rest(a, m, l, hooks, l > layer, NULL);
    }
    if (!rc && layer < L - 1)
        rc = layer_attention(a, m, L - 1, hooks, 0, 0);
    if (rc)
        return rc;
    /* Every position-wise buffer the rest of the last layer may read. */
    hs_layer_acts *la = &a->layer[L - 1];
    const int B = a->B, T = a->T;
    hs_real *rows[] = { la->in, la->n1, la->attn_out, la->r1, la->n2 };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        keep_last_rows(rows[i], B, T, d);
    hs_real *stats[] = { la->n1_mean, la->n1_rstd, la->n2_mean, la->n2_rstd };
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++)
        keep_last_rows(stats[i], B, T, 1);
    a->T = 1;
    rc = forward_rest(a, m, L - 1, 1, NULL, hooks);
    a->T = T;
    return rc;
}

int hs_acts_site_view(hs_site_view *v, const hs_acts *a, const hs_model_config *c, hs_site s,
                      int layer)
{
    const int L = c->n_layer, B = a->B, T = a->T, d = c->d_model;
    if (layer < 0 || layer > L || (layer == L && s != HS_SITE_RESID_PRE) || s < 0 ||
        s >= HS_N_SITES)
        return hs_fail(HS_EINVAL, "activations: no site %d of layer %d", (int)s, layer);
    if (s == HS_SITE_RESID_PRE) {
        *v = hs_site_view_btw(s, layer, layer == L ? a->layer[L - 1].out : a->layer[layer].in, B,
                              T, 1, d);
        return HS_OK;
    }
    const hs_layer_acts *la = &a->layer[layer];
    const int H = c->n_head[layer], G = c->n_kv_head[layer], dh = c->head_dim;
    const hs_mla_config mc = c->mla ? hs_config_mla(c, layer) : (hs_mla_config){ 0 };
    switch (s) {
    case HS_SITE_ATTN_OUT:
        *v = hs_site_view_btw(s, layer, la->attn_out, B, T, 1, d);
        return HS_OK;
    case HS_SITE_MLP_OUT:
        if (!la->mlp_out)
            return hs_fail(HS_EINVAL, "activations: the model has no MLP (site mlp_out)");
        *v = hs_site_view_btw(s, layer, la->mlp_out, B, T, 1, d);
        return HS_OK;
    case HS_SITE_Q:
        *v = c->mla ? hs_site_view_btw(s, layer, la->mla.q, B, T, H, mc.qk_nope + mc.qk_rope)
                    : hs_site_view_btw(s, layer, la->attn.q, B, T, H, dh);
        return HS_OK;
    case HS_SITE_K:
    case HS_SITE_V:
        *v = c->mla ? hs_site_view_btw(s, layer, la->mla.ckv, B, T, 1, mc.kv_lora_rank)
                    : hs_site_view_btw(s, layer, s == HS_SITE_K ? la->attn.k : la->attn.v, B, T,
                                       G, dh);
        return HS_OK;
    case HS_SITE_Z:
        *v = hs_site_view_btw(s, layer, la->attn.z, B, T, H, dh);
        return HS_OK;
    case HS_SITE_ATTN_SCORES:
        return hs_fail(HS_EINVAL, "activations: the attention scores are not kept (a hook on "
                                  "attn_scores sees them)");
    default: /* pattern */
        if (!a->training)
            return hs_fail(HS_EINVAL, "activations: the pattern of every layer is kept by "
                                      "training activations only");
        *v = (hs_site_view){ s, layer, la->attn.att, B, T, H, T, (size_t)H * T * T, (size_t)T,
                             (size_t)T * T };
        return HS_OK;
    }
}

int hs_acts_head_maps(hs_real *att, const hs_model *m, int l, int h, const hs_acts *q_run,
                      const hs_acts *k_run, const hs_acts *pe_run)
{
    const hs_model_config *c = &m->cfg;
    const int B = q_run->B, T = q_run->T;
    if (l < 0 || l >= c->n_layer || h < 0 || h >= c->n_head[l])
        return hs_fail(HS_EINVAL, "maps: no head %d of layer %d", h, l);
    const int H = c->n_head[l];
    if (c->mla) {
        const hs_mla_config mc = hs_config_mla(c, l);
        const int w = mc.qk_nope + mc.qk_rope, HQ = H * w;
        hs_real *q = hs_calloc((size_t)B * T * w, sizeof(hs_real), "maps");
        if (!q)
            return HS_ENOMEM;
        for (size_t i = 0; i < (size_t)B * T; i++)
            memcpy(q + i * w, q_run->layer[l].mla.q + i * HQ + (size_t)h * w, sizeof(hs_real) * w);
        int rc = hs_mla_head_maps(att, q, k_run->layer[l].mla.kvb, pe_run->layer[l].mla.kpe, &mc,
                                  B, T, h);
        free(q);
        return rc;
    }
    const hs_attn_config ac = hs_config_attn(c, l);
    const int G = c->n_kv_head[l], dh = c->head_dim, g = h / (H / G), GD = G * dh;
    hs_real *q = hs_calloc((size_t)B * T * dh, sizeof(hs_real), "maps");
    if (!q)
        return HS_ENOMEM;
    for (size_t i = 0; i < (size_t)B * T; i++)
        memcpy(q + i * dh, q_run->layer[l].attn.q + (i * H + h) * dh, sizeof(hs_real) * dh);
    const hs_attn_acts *ka = &k_run->layer[l].attn;
    const hs_kv_view kv = { ka->k + (size_t)g * dh, ka->v + (size_t)g * dh, (size_t)T * GD,
                            (size_t)dh, (size_t)GD, T };
    int rc = hs_attn_head_maps(att, q, &kv, &ac, h, B, T);
    free(q);
    return rc;
}

int hs_classify_pool(const hs_model_config *c, const int32_t *tokens, int T)
{
    if (c->encoder)
        return 0;
    if (c->pad_id < 0)
        return T - 1;
    int last = 0; /* HF: the rightmost position whose id is not pad_token_id (0 if none) */
    for (int t = 0; t < T; t++)
        if (tokens[t] != c->pad_id)
            last = t;
    return last;
}

/* The classifier's input rows: x (B, d) the pooled rows of the hidden
 * state it reads, and for an encoder y (B, d) = tanh(W_p x + b_p) (BERT's
 * pooler, RoBERTa's classifier.dense). HS_EINVAL for a model without a
 * classification head or a position outside the sequence. */
static int classifier_rows(hs_real *x, hs_real *y, const hs_acts *a, const hs_model *m,
                           const int *pool)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model, B = a->B;
    if (!c->n_labels)
        return hs_fail(HS_EINVAL, "the model has no classification head");
    const hs_real *h = c->final_norm ? a->lnf : a->layer[c->n_layer - 1].out;
    for (int b = 0; b < B; b++) {
        if (pool[b] < 0 || pool[b] >= a->T)
            return hs_fail(HS_EINVAL, "classifier: pooled position %d outside 0..%d", pool[b],
                           a->T - 1);
        memcpy(x + (size_t)b * d, h + ((size_t)b * a->T + pool[b]) * d, sizeof *x * d);
    }
    if (!c->encoder)
        return HS_OK;
    hs_linear_forward(y, x, m->w.cls_pool_w, m->w.cls_pool_b, (size_t)B, d, d);
    for (size_t i = 0; i < (size_t)B * d; i++)
        y[i] = (hs_real)tanh((double)y[i]);
    return HS_OK;
}

int hs_classify(hs_real *out, const hs_acts *a, const hs_model *m, const int *pool)
{
    const hs_model_config *c = &m->cfg;
    const size_t B = (size_t)a->B, d = (size_t)c->d_model;
    hs_real *x = hs_calloc(B * d * 2, sizeof *x, "classifier rows"), *y = x + B * d;
    int rc = x ? classifier_rows(x, y, a, m, pool) : HS_ENOMEM;
    if (!rc)
        hs_linear_forward(out, c->encoder ? y : x, m->w.cls_w, m->w.cls_b, B, (int)d, c->n_labels);
    free(x);
    return rc;
}

int hs_classify_backward(hs_real *dhidden, hs_weights *g, const hs_real *dout, const hs_acts *a,
                         const hs_model *m, const int *pool)
{
    const hs_model_config *c = &m->cfg;
    const hs_weights *w = &m->w;
    const int d = c->d_model, K = c->n_labels, B = a->B;
    hs_real *x = hs_calloc((size_t)B * d * 4, sizeof *x, "classifier rows");
    if (!x)
        return HS_ENOMEM;
    hs_real *y = x + (size_t)B * d, *dy = y + (size_t)B * d, *dx = dy + (size_t)B * d;
    const int rc = classifier_rows(x, y, a, m, pool);
    if (rc) {
        free(x);
        return rc;
    }
    if (c->encoder) { /* y = tanh(W_p x + b_p): dy through the tanh, then W_p */
        hs_linear_backward(dy, g ? g->cls_w : NULL, g ? g->cls_b : NULL, dout, y, w->cls_w,
                           (size_t)B, d, K);
        for (size_t i = 0; i < (size_t)B * d; i++)
            dy[i] *= 1 - y[i] * y[i];
        hs_linear_backward(dx, g ? g->cls_pool_w : NULL, g ? g->cls_pool_b : NULL, dy, x,
                           w->cls_pool_w, (size_t)B, d, d);
    } else {
        hs_linear_backward(dx, g ? g->cls_w : NULL, NULL, dout, x, w->cls_w, (size_t)B, d, K);
    }
    memset(dhidden, 0, sizeof *dhidden * (size_t)B * a->T * d);
    for (int b = 0; b < B; b++)
        memcpy(dhidden + ((size_t)b * a->T + pool[b]) * d, dx + (size_t)b * d, sizeof *dx * d);
    free(x);
    return HS_OK;
}
