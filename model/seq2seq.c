/* The encoder-decoder forward (seq2seq.h): the sublayers of config.h's
 * pre- (T5) or post-norm (BART, Marian) layouts over the block's norms and
 * MLPs and the attention module, cross-attention through its second input. */
#include "seq2seq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "layers.h"
#include "linalg.h"

const char *hs_attn_type_name(hs_attn_type t)
{
    static const char *const names[] = { "self", "enc", "dec", "cross" };
    return t >= HS_ATTN_SELF && t <= HS_ATTN_CROSS ? names[t] : "self";
}

int hs_t5_bucket(int rel, int bidirectional, int buckets, int max_distance)
{
    int bucket = 0;
    if (bidirectional) {
        buckets /= 2;
        bucket = rel > 0 ? buckets : 0;
        rel = rel < 0 ? -rel : rel;
    } else {
        rel = rel < 0 ? -rel : 0; /* -min(rel, 0): keys after the query all fall in bucket 0 */
    }
    const int exact = buckets / 2;
    if (rel < exact)
        return bucket + rel;
    /* torch: log(float(rel) / exact) / log(max_distance / exact) * (buckets - exact),
     * in float, the Python scalars rounded to float, truncated to an integer */
    const float scaled = logf((float)rel / (float)exact) /
                         (float)log((double)max_distance / exact) * (float)(buckets - exact);
    const int large = exact + (int)scaled;
    return bucket + (large < buckets - 1 ? large : buckets - 1);
}

void hs_sinusoid_row(hs_real *out, int p, int d)
{
    const int half = d / 2;
    for (int i = 0; i < half; i++) {
        const double angle = p / pow(10000.0, (double)(2 * i) / d);
        out[i] = (hs_real)(float)sin(angle); /* HF's table is a FloatTensor */
        out[half + i] = (hs_real)(float)cos(angle);
    }
}

/* Every buffer of a, each from its own allocation (NULL-safe to free). */
static void acts_free_buffers(hs_s2s_acts *a, int n_self, int n_cross)
{
    for (int i = 0; a->self && i < n_self; i++)
        hs_attn_acts_free(&a->self[i]);
    for (int i = 0; a->cross && i < n_cross; i++)
        hs_attn_acts_free(&a->cross[i]);
    hs_real *const bufs[] = { a->enc,   a->x,     a->n,    a->o,     a->h_pre, a->h_up,
                              a->h_act, a->mean,  a->rstd, a->rel,   a->logits, a->losses,
                              a->tape,  a->enc_x, a->dres, a->dres2, a->dn,    a->dn2,
                              a->denc,  a->dh[0], a->dh[1], a->dh[2] };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(a->src_valid);
    free(a->self);
    free(a->cross);
}

/* The backward's buffers of a (HS_S2S_TRAIN): HS_OK or HS_ENOMEM. */
static int acts_alloc_train(hs_s2s_acts *a, const hs_model_config *c, size_t BR)
{
    const size_t d = (size_t)c->d_model, F = (size_t)c->d_ff;
    a->tape = hs_calloc((size_t)a->n_layer * 3 * BR * d, sizeof(hs_real), "sublayer inputs");
    a->enc_x = hs_calloc((size_t)a->B * a->S * d, sizeof(hs_real), "encoder residual");
    a->denc = hs_calloc((size_t)a->B * a->S * d, sizeof(hs_real), "encoder gradient");
    hs_real **const grads[] = { &a->dres, &a->dres2, &a->dn, &a->dn2 };
    int ok = a->tape && a->enc_x && a->denc;
    for (size_t i = 0; i < sizeof grads / sizeof grads[0]; i++)
        ok &= (*grads[i] = hs_calloc(BR * d, sizeof(hs_real), "residual gradient")) != NULL;
    for (int i = 0; i < 3; i++)
        ok &= (a->dh[i] = hs_calloc(BR * F, sizeof(hs_real), "MLP gradient")) != NULL;
    return ok ? HS_OK : HS_ENOMEM;
}

int hs_s2s_acts_alloc(hs_s2s_acts *a, const hs_model_config *c, int B, int S, int T, int flags)
{
    const int maps = (flags & HS_S2S_MAPS) != 0, train = (flags & HS_S2S_TRAIN) != 0;
    memset(a, 0, sizeof *a);
    if (!hs_config_seq2seq(c))
        return hs_fail(HS_EINVAL, "seq2seq: the model has one stack (not an encoder-decoder)");
    if (B < 1 || S < 1 || T < 1)
        return hs_fail(HS_EINVAL, "seq2seq: bad sizes (B=%d, S=%d, T=%d)", B, S, T);
    const int E = c->enc_layers, L = c->n_layer, R = S > T ? S : T;
    const size_t d = (size_t)c->d_model, F = (size_t)c->d_ff, V = (size_t)c->vocab_size;
    const size_t BR = (size_t)B * R;
    a->B = B, a->S = S, a->T = T, a->maps = maps, a->train = train, a->n_layer = L;
    const int n_self = maps ? L : 2, n_cross = maps ? L : 1;
    a->enc = hs_calloc((size_t)B * S * d, sizeof(hs_real), "encoder output");
    a->x = hs_calloc(BR * d, sizeof(hs_real), "residual stream");
    a->n = hs_calloc(BR * d, sizeof(hs_real), "normed residual");
    a->o = hs_calloc(BR * d, sizeof(hs_real), "sublayer output");
    a->h_pre = hs_calloc(BR * F, sizeof(hs_real), "MLP activations");
    const int gated = c->mlp == HS_MLP_SWIGLU || c->mlp == HS_MLP_GEGLU; /* an up projection */
    if (gated)
        a->h_up = hs_calloc(BR * F, sizeof(hs_real), "MLP activations");
    a->h_act = hs_calloc(BR * F, sizeof(hs_real), "MLP activations");
    a->mean = hs_calloc(BR, sizeof(hs_real), "norm statistics");
    a->rstd = hs_calloc(BR, sizeof(hs_real), "norm statistics");
    a->src_valid = hs_calloc((size_t)B * S, 1, "source mask");
    int Hmax = 1;
    for (int l = 0; l < L; l++)
        Hmax = c->n_head[l] > Hmax ? c->n_head[l] : Hmax;
    if (c->rel_buckets)
        a->rel = hs_calloc((size_t)Hmax * (2 * (size_t)R - 1), sizeof(hs_real), "position bias");
    a->logits = hs_calloc((size_t)B * T * V, sizeof(hs_real), "logits");
    a->losses = hs_calloc((size_t)B * T, sizeof(hs_real), "losses");
    a->self = hs_calloc((size_t)n_self, sizeof *a->self, "attention activations");
    a->cross = hs_calloc((size_t)n_cross, sizeof *a->cross, "attention activations");
    int rc = a->enc && a->x && a->n && a->o && a->h_pre && (a->h_up || !gated) && a->h_act && a->mean &&
                     a->rstd && a->src_valid && (a->rel || !c->rel_buckets) && a->logits && a->losses &&
                     a->self && a->cross
                 ? HS_OK
                 : HS_ENOMEM;
    if (!rc && train)
        rc = acts_alloc_train(a, c, BR);
    for (int l = 0; !rc && l < L; l++) {
        const hs_attn_config ac = hs_config_attn(c, l);
        const int dec = hs_config_cross(c, l), n = dec ? T : S;
        if (maps || l == 0 || l == E)
            rc = hs_attn_acts_alloc(&a->self[maps ? l : dec], &ac, B, n, n, n, maps || train);
        if (!rc && dec && (maps || l == E))
            rc = hs_attn_acts_alloc(&a->cross[maps ? l : 0], &ac, B, T, S, S, maps || train);
    }
    if (rc) {
        acts_free_buffers(a, n_self, n_cross);
        memset(a, 0, sizeof *a);
    }
    return rc;
}

void hs_s2s_acts_free(hs_s2s_acts *a)
{
    if (!a->B)
        return;
    /* the per-layer records: every layer's with maps, else 2 and 1 */
    acts_free_buffers(a, a->maps ? a->n_layer : 2, a->maps ? a->n_layer : 1);
    memset(a, 0, sizeof *a);
}

/* The attention activations of layer l (self-attention, or its
 * cross-attention). */
static hs_attn_acts *layer_acts(const hs_s2s_acts *a, const hs_model_config *c, int l, int cross)
{
    if (cross)
        return &a->cross[a->maps ? l : 0];
    return &a->self[a->maps ? l : hs_config_cross(c, l)];
}

/* T5's bias of one stack for n positions by offset key - query into out:
 * (H, 2n - 1), offset 0 at n - 1, from w (buckets, H). */
static hs_attn_rel stack_rel(hs_real *out, const hs_model_config *c, const hs_real *w, int H,
                             int n, int bidirectional)
{
    if (!c->rel_buckets)
        return (hs_attn_rel){ 0 };
    const int width = 2 * n - 1;
    for (int i = 0; i < width; i++) {
        const int b = hs_t5_bucket(i - (n - 1), bidirectional, c->rel_buckets,
                                   c->rel_max_distance);
        for (int h = 0; h < H; h++)
            out[(size_t)h * width + i] = w[(size_t)b * H + h];
    }
    return (hs_attn_rel){ out, width, n - 1 };
}

/* x (B,n,d) = the embeddings of tokens at positions pos0 .. pos0 + n - 1
 * with the stack's scale, positions (wpe NULL: sinusoids or none) and norm
 * (lne_w NULL: none). */
static void embed(hs_s2s_acts *a, const hs_model *m, const int32_t *tokens, int n, int pos0,
                  const hs_real *wpe, const hs_real *lne_w, const hs_real *lne_b)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model, B = a->B;
    const size_t N = (size_t)B * n;
    hs_embed_forward(a->x, tokens, m->w.wte, NULL, B, n, d);
    if (c->embed_scale) /* HF multiplies by the Python float sqrt(d), rounded to the dtype */
        hs_scale(a->x, (hs_real)sqrt((double)d), N * d);
    if (c->pos == HS_POS_LEARNED || c->pos == HS_POS_SINUSOID) {
        hs_real *row = a->o; /* scratch for a sinusoid row */
        for (int t = 0; t < n; t++) {
            const hs_real *p = wpe ? wpe + (size_t)(pos0 + t + c->pos_shift) * d : row;
            if (!wpe)
                hs_sinusoid_row(row, pos0 + t, d);
            for (int b = 0; b < B; b++) {
                hs_real *x = a->x + ((size_t)b * n + t) * d;
                for (int i = 0; i < d; i++)
                    x[i] += p[i];
            }
        }
    }
    if (lne_w) {
        hs_block_norm(a->n, a->mean, a->rstd, a->x, lne_w, lne_b, c, N);
        memcpy(a->x, a->n, sizeof(hs_real) * N * d);
    }
}

/* The residual after a sublayer whose output is a->o: pre-norm x += o;
 * post-norm x = norm(x + o) with (w, b). */
static void residual(hs_s2s_acts *a, const hs_model_config *c, size_t N, const hs_real *w,
                     const hs_real *b)
{
    if (!c->post_norm) {
        hs_add(a->x, a->x, a->o, N * c->d_model);
        return;
    }
    hs_add(a->n, a->x, a->o, N * c->d_model);
    hs_block_norm(a->x, a->mean, a->rstd, a->n, w, b, c, N);
}

/* The input of a sublayer: pre-norm its norm (w, b) of x into a->n; post-norm x. */
static const hs_real *sublayer_in(hs_s2s_acts *a, const hs_model_config *c, size_t N,
                                  const hs_real *w, const hs_real *b)
{
    if (c->post_norm)
        return a->x;
    hs_block_norm(a->n, a->mean, a->rstd, a->x, w, b, c, N);
    return a->n;
}

/* The tape's kinds of sublayer. */
enum { SUB_SELF, SUB_CROSS, SUB_MLP };

/* The input residual of sublayer `kind` of layer l (n positions) kept for
 * the backward (HS_S2S_TRAIN). */
static hs_real *tape(const hs_s2s_acts *a, const hs_model_config *c, int l, int kind)
{
    const size_t R = (size_t)(a->S > a->T ? a->S : a->T);
    return a->tape + ((size_t)l * 3 + kind) * a->B * R * c->d_model;
}

static void record(hs_s2s_acts *a, const hs_model_config *c, int l, int kind, int n)
{
    if (a->train)
        memcpy(tape(a, c, l, kind), a->x, sizeof(hs_real) * a->B * n * c->d_model);
}

/* One attention sublayer of layer l over x (n positions): self-attention
 * (y NULL) or cross-attention to y (the encoder's output). */
static int attention(hs_s2s_acts *a, const hs_model *m, int l, int n, const hs_real *y,
                     const hs_attn_mask *mask, hs_attn_rel rel, hs_kv_cache *cache)
{
    const hs_model_config *c = &m->cfg;
    const hs_layer_weights *lw = &m->w.layer[l];
    const size_t N = (size_t)a->B * n;
    const hs_attn_weights *w = y ? &lw->xattn : &lw->attn;
    const hs_real *nw = y ? lw->lnx_w : lw->ln1_w, *nb = y ? lw->lnx_b : lw->ln1_b;
    hs_attn_config ac = hs_config_attn(c, l);
    ac.rel = y ? (hs_attn_rel){ 0 } : rel;
    hs_attn_acts *aa = layer_acts(a, c, l, y != NULL);
    record(a, c, l, y ? SUB_CROSS : SUB_SELF, n);
    const hs_real *in = sublayer_in(a, c, N, nw, nb);
    int rc = hs_attn_forward_heads(aa, w, &ac, in, y, mask, cache);
    if (rc)
        return rc;
    const hs_real *const *gates = y ? a->cross_gates : a->gates;
    hs_attn_forward_output(a->o, aa, w, &ac, gates ? gates[l] : NULL, a->gates_per_seq);
    residual(a, c, N, nw, nb);
    return HS_OK;
}

static void mlp(hs_s2s_acts *a, const hs_model *m, int l, int n)
{
    const hs_model_config *c = &m->cfg;
    const hs_layer_weights *lw = &m->w.layer[l];
    const size_t N = (size_t)a->B * n;
    const hs_mlp_acts ma = { a->h_pre, a->h_up, a->h_act };
    record(a, c, l, SUB_MLP, n);
    hs_mlp_forward(a->o, &ma, lw, sublayer_in(a, c, N, lw->ln2_w, lw->ln2_b), c, N);
    residual(a, c, N, lw->ln2_w, lw->ln2_b);
}

/* Tokens (B,n) inside the vocabulary and n inside the learned positions. */
static int check_tokens(const hs_model_config *c, const int32_t *tok, int B, int n,
                        const char *what)
{
    if (c->pos == HS_POS_LEARNED && n > c->n_ctx)
        return hs_fail(HS_EINVAL, "seq2seq: a %s of %d positions exceeds the model's %d "
                                  "(max_position_embeddings)", what, n, c->n_ctx);
    for (size_t i = 0; i < (size_t)B * n; i++)
        if (tok[i] < 0 || tok[i] >= c->vocab_size)
            return hs_fail(HS_EINVAL, "seq2seq: %s token %d at position %zu of row %zu is "
                                      "outside the vocabulary of %d", what, tok[i],
                           i % (size_t)n, i / (size_t)n, c->vocab_size);
    return HS_OK;
}

/* The source's checks and padding mask into a->src_valid, a->src_padded. */
static int source_mask(hs_s2s_acts *a, const hs_model_config *c, const int32_t *src)
{
    const int B = a->B, S = a->S;
    int rc = check_tokens(c, src, B, S, "source");
    if (rc)
        return rc;
    a->src_padded = 0;
    for (int b = 0; b < B; b++) {
        int real = 0;
        for (int s = 0; s < S; s++) {
            const size_t i = (size_t)b * S + s;
            a->src_valid[i] = src[i] != c->pad_id;
            real += a->src_valid[i];
        }
        if (!real)
            return hs_fail(HS_EINVAL, "seq2seq: source row %d is all padding (pad_token_id "
                                      "%d)", b, c->pad_id);
        a->src_padded |= real < S;
    }
    return HS_OK;
}

int hs_s2s_use_encoding(hs_s2s_acts *a, const hs_model *m, const int32_t *src,
                        const hs_real *enc)
{
    const int rc = source_mask(a, &m->cfg, src);
    if (!rc)
        memcpy(a->enc, enc, sizeof(hs_real) * (size_t)a->B * a->S * m->cfg.d_model);
    return rc;
}

int hs_s2s_encode(hs_s2s_acts *a, const hs_model *m, const int32_t *src)
{
    const hs_model_config *c = &m->cfg;
    const int B = a->B, S = a->S, E = c->enc_layers;
    const size_t N = (size_t)B * S, d = (size_t)c->d_model;
    int rc = source_mask(a, c, src);
    if (rc)
        return rc;
    embed(a, m, src, S, 0, m->w.enc_wpe, m->w.enc_lne_w, m->w.enc_lne_b);
    const hs_attn_mask mask = { 0, a->src_padded ? a->src_valid : NULL, 0 };
    const hs_attn_rel rel = stack_rel(a->rel, c, m->w.enc_rel, c->n_head[0], S, 1);
    for (int l = 0; l < E; l++) {
        if ((rc = attention(a, m, l, S, NULL, &mask, rel, NULL)))
            return rc;
        mlp(a, m, l, S);
    }
    if (a->train)
        memcpy(a->enc_x, a->x, sizeof(hs_real) * N * d);
    if (c->final_norm) {
        hs_block_norm(a->enc, a->mean, a->rstd, a->x, m->w.enc_lnf_w, m->w.enc_lnf_b, c, N);
    } else {
        memcpy(a->enc, a->x, sizeof(hs_real) * N * d);
    }
    return HS_OK;
}

/* a->logits (N,V) from the decoder's last residual a->x (N rows): the
 * final norm, T5's tied-head scale, the head and its bias. */
static void unembed(hs_s2s_acts *a, const hs_model *m, size_t N)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model;
    const hs_real *h = a->x;
    if (c->final_norm) {
        hs_block_norm(a->n, a->mean, a->rstd, a->x, m->w.lnf_w, m->w.lnf_b, c, N);
        h = a->n;
    }
    if (c->tied_scale) { /* T5: sequence_output * model_dim ** -0.5, the scalar in float */
        if (h != a->n)
            memcpy(a->n, h, sizeof(hs_real) * N * d);
        hs_scale(a->n, (hs_real)pow((double)d, -0.5), N * d);
        h = a->n;
    }
    hs_linear_forward(a->logits, h, m->w.lm_w, m->w.lm_b, N, d, c->vocab_size);
}

/* Targets (B,T) inside the vocabulary or HS_TARGET_IGNORE. */
static int check_targets(const hs_model_config *c, const int32_t *targets, int B, int T)
{
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (targets[i] != HS_TARGET_IGNORE && (targets[i] < 0 || targets[i] >= c->vocab_size))
            return hs_fail(HS_EINVAL, "seq2seq: target %d at position %zu of row %zu is outside "
                                      "the vocabulary of %d", targets[i], i % (size_t)T,
                           i / (size_t)T, c->vocab_size);
    return HS_OK;
}

/* The losses of the logits a holds, and their mean (targets checked). */
static void losses(hs_s2s_acts *a, const hs_model_config *c, const int32_t *targets)
{
    const size_t N = (size_t)a->B * a->T;
    hs_softmax_xent_forward(a->logits, a->losses, targets, N, c->vocab_size);
    double sum = 0;
    size_t n = 0;
    for (size_t i = 0; i < N; i++) {
        sum += a->losses[i];
        n += targets[i] != HS_TARGET_IGNORE;
    }
    a->n_targets = n;
    a->loss = n ? sum / (double)n : 0;
}

int hs_s2s_loss(hs_s2s_acts *a, const hs_model_config *c, const int32_t *targets)
{
    const int rc = check_targets(c, targets, a->B, a->T);
    if (!rc)
        losses(a, c, targets);
    return rc;
}

int hs_s2s_decode(hs_s2s_acts *a, const hs_model *m, const int32_t *dec_in,
                  const int32_t *targets)
{
    const hs_model_config *c = &m->cfg;
    const int B = a->B, T = a->T, E = c->enc_layers;
    int rc = check_tokens(c, dec_in, B, T, "decoder input");
    if (!rc && targets)
        rc = check_targets(c, targets, B, T);
    if (rc)
        return rc;
    embed(a, m, dec_in, T, 0, m->w.wpe, m->w.lne_w, m->w.lne_b);
    const hs_attn_mask self = { 1, NULL, 0 };
    const hs_attn_mask cross = { 0, a->src_padded ? a->src_valid : NULL, 0 };
    const hs_attn_rel rel = stack_rel(a->rel, c, m->w.dec_rel, c->n_head[E], T, 0);
    for (int l = E; l < c->n_layer; l++) {
        if ((rc = attention(a, m, l, T, NULL, &self, rel, NULL)) ||
            (rc = attention(a, m, l, T, a->enc, &cross, rel, NULL)))
            return rc;
        mlp(a, m, l, T);
    }
    unembed(a, m, (size_t)B * T);
    if (targets)
        losses(a, c, targets);
    return HS_OK;
}

/* ---- the backward ---------------------------------------------------------- */

/* T5's relative bias gradient of one stack, from the scores' gradients of
 * its layers' self-attention (an observer of the attention backward). */
typedef struct {
    hs_grad_fn site[HS_N_SITES]; /* attn_scores: rel_grad_fn */
    hs_real *drel;               /* (buckets, H) accumulated */
    int *bucket;                 /* (2n - 1) the bucket of offset key - query + n - 1 */
    int n;
} rel_grad;

static int rel_grad_fn(void *ctx, const hs_site_view *v)
{
    const rel_grad *r = ctx;
    const int H = v->heads;
    for (int b = 0; b < v->B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < v->T; t++) {
                const hs_real *row = v->x + b * v->sb + h * v->sh + t * v->st;
                for (int s = 0; s < v->width; s++)
                    r->drel[(size_t)r->bucket[s - t + r->n - 1] * H + h] += row[s];
            }
    return HS_OK;
}

/* One backward's state. */
typedef struct {
    hs_s2s_acts *a;
    const hs_model *m;
    hs_weights *g;                      /* never NULL: a zero instance when none */
    hs_real *const *dgates, *const *dcross;
    rel_grad *rel;                      /* the stack's, or NULL */
} s2s_bw;

static void swap(hs_real **x, hs_real **y)
{
    hs_real *t = *x;
    *x = *y;
    *y = t;
}

/* The norm of sublayer `kind` of layer lw (its gradients in gw). */
static void sub_norm(const hs_real **w, const hs_real **b, hs_real **gw_, hs_real **gb,
                     const hs_layer_weights *lw, hs_layer_weights *gw, int kind)
{
    if (kind == SUB_SELF)
        *w = lw->ln1_w, *b = lw->ln1_b, *gw_ = gw->ln1_w, *gb = gw->ln1_b;
    else if (kind == SUB_CROSS)
        *w = lw->lnx_w, *b = lw->lnx_b, *gw_ = gw->lnx_w, *gb = gw->lnx_b;
    else
        *w = lw->ln2_w, *b = lw->ln2_b, *gw_ = gw->ln2_w, *gb = gw->ln2_b;
}

/* din += the backward of attention sublayer `kind` of layer l (its
 * function alone: projections, heads, gates) from dout, its input in. */
static int attn_backward(s2s_bw *bw, hs_real *din, const hs_real *dout, const hs_real *in, int l,
                         int kind, hs_attn_rel rel)
{
    hs_s2s_acts *a = bw->a;
    const hs_model_config *c = &bw->m->cfg;
    const hs_layer_weights *lw = &bw->m->w.layer[l];
    hs_layer_weights *gw = &bw->g->layer[l];
    const int cross = kind == SUB_CROSS, dec = hs_config_cross(c, l);
    const unsigned char *valid = a->src_padded ? a->src_valid : NULL;
    const hs_attn_mask mask = { dec && !cross, dec && !cross ? NULL : valid, 0 };
    hs_attn_config ac = hs_config_attn(c, l);
    ac.rel = cross ? (hs_attn_rel){ 0 } : rel;
    hs_attn_acts *aa = layer_acts(a, c, l, cross);
    const hs_real *const *gates = cross ? a->cross_gates : a->gates;
    hs_real *const *dg = cross ? bw->dcross : bw->dgates;
    const hs_real *xi = gates ? gates[l] : NULL;
    if (bw->rel && !cross)
        aa->grad = (hs_attn_grad_hooks){ bw->rel->site, bw->rel, l, NULL, NULL };
    const int rc = hs_attn_backward(din, cross ? a->denc : NULL, cross ? &gw->xattn : &gw->attn,
                                    dg && xi ? dg[l] : NULL, dout, aa,
                                    cross ? &lw->xattn : &lw->attn, &ac, in,
                                    cross ? a->enc : NULL, xi, a->gates_per_seq, &mask);
    aa->grad = (hs_attn_grad_hooks){ 0 };
    return rc;
}

/* The backward of sublayer `kind` of layer l over n positions: recomputed
 * from its input residual (the tape), then a->dres, the gradient of its
 * output residual, becomes that of its input. */
static int sub_backward(s2s_bw *bw, int l, int kind, int n, hs_attn_rel rel)
{
    hs_s2s_acts *a = bw->a;
    const hs_model *m = bw->m;
    const hs_model_config *c = &m->cfg;
    const size_t N = (size_t)a->B * n, nd = N * c->d_model;
    const int dec = hs_config_cross(c, l);
    const unsigned char *valid = a->src_padded ? a->src_valid : NULL;
    const hs_attn_mask self = { dec, dec ? NULL : valid, 0 }, cross = { 0, valid, 0 };
    const hs_real *x_in = tape(a, c, l, kind);
    memcpy(a->x, x_in, sizeof(hs_real) * nd);
    int rc = HS_OK;
    if (kind == SUB_MLP)
        mlp(a, m, l, n);
    else if (kind == SUB_CROSS)
        rc = attention(a, m, l, n, a->enc, &cross, rel, NULL);
    else
        rc = attention(a, m, l, n, NULL, &self, rel, NULL);
    if (rc)
        return rc;
    const hs_real *nw, *nb;
    hs_real *gnw, *gnb;
    sub_norm(&nw, &nb, &gnw, &gnb, &m->w.layer[l], &bw->g->layer[l], kind);
    const hs_real *dout = a->dres, *dsub = a->dres; /* of the output residual, of o */
    if (c->post_norm) { /* x' = norm(x + o), a->n holding x + o */
        hs_block_norm_backward(a->dn, NULL, gnw, gnb, dout, a->n, nw, a->mean, a->rstd, c, N);
        dsub = a->dn;
        memcpy(a->dres2, dsub, sizeof(hs_real) * nd); /* the residual's share */
    } else {
        memset(a->dn2, 0, sizeof(hs_real) * nd);
    }
    /* the function's input: post-norm the residual, pre-norm its norm a->n */
    hs_real *din = c->post_norm ? a->dres2 : a->dn2;
    const hs_real *in = c->post_norm ? x_in : a->n;
    if (kind == SUB_MLP) {
        const hs_mlp_acts ma = { a->h_pre, a->h_up, a->h_act };
        hs_mlp_backward(din, &bw->g->layer[l], a->dh, &ma, &m->w.layer[l], dsub, in, c, N);
    } else if ((rc = attn_backward(bw, din, dsub, in, l, kind, rel))) {
        return rc;
    }
    if (!c->post_norm) /* x' = x + f(norm(x)) */
        hs_block_norm_backward(a->dres2, dout, gnw, gnb, a->dn2, x_in, nw, a->mean, a->rstd, c,
                               N);
    swap(&a->dres, &a->dres2);
    return HS_OK;
}

/* The backward of layers l0 .. l1 - 1 (one stack, n positions) from
 * a->dres, the gradient of the last one's output; T5's relative bias
 * gradient into drel (NULL: none). */
static int stack_backward(s2s_bw *bw, int l0, int l1, int n, const hs_real *rel_w,
                          hs_real *drel, int bidirectional)
{
    const hs_model_config *c = &bw->m->cfg;
    const hs_attn_rel rel = stack_rel(bw->a->rel, c, rel_w, c->n_head[l0], n, bidirectional);
    rel_grad rg = { .drel = drel, .n = n };
    if (c->rel_buckets && drel) {
        if (!(rg.bucket = hs_calloc(2 * (size_t)n - 1, sizeof *rg.bucket, "bias buckets")))
            return HS_ENOMEM;
        for (int i = 0; i < 2 * n - 1; i++)
            rg.bucket[i] = hs_t5_bucket(i - (n - 1), bidirectional, c->rel_buckets,
                                        c->rel_max_distance);
        rg.site[HS_SITE_ATTN_SCORES] = rel_grad_fn;
        bw->rel = &rg;
    }
    int rc = HS_OK;
    for (int l = l1 - 1; !rc && l >= l0; l--) {
        rc = sub_backward(bw, l, SUB_MLP, n, rel);
        if (!rc && hs_config_cross(c, l))
            rc = sub_backward(bw, l, SUB_CROSS, n, rel);
        if (!rc)
            rc = sub_backward(bw, l, SUB_SELF, n, rel);
    }
    free(rg.bucket);
    bw->rel = NULL;
    return rc;
}

/* The embeddings' backward of one stack (tokens (B,n)) from a->dres, the
 * gradient of embed()'s output: through the embedding norm (lne_w), into
 * the learned positions' rows (gwpe; sinusoids are not trained) and the
 * token rows times the embedding scale. */
static void embed_backward(s2s_bw *bw, const int32_t *tokens, int n, const hs_real *wpe,
                           hs_real *gwpe, const hs_real *lne_w, const hs_real *lne_b,
                           hs_real *glne_w, hs_real *glne_b)
{
    hs_s2s_acts *a = bw->a;
    const hs_model_config *c = &bw->m->cfg;
    const int d = c->d_model;
    const size_t N = (size_t)a->B * n;
    const hs_real *dx = a->dres;
    if (lne_w) { /* the sum the norm read, recomputed into a->x */
        embed(a, bw->m, tokens, n, 0, wpe, NULL, NULL);
        hs_block_norm(a->n, a->mean, a->rstd, a->x, lne_w, lne_b, c, N);
        hs_block_norm_backward(a->dn, NULL, glne_w, glne_b, dx, a->x, lne_w, a->mean, a->rstd,
                               c, N);
        dx = a->dn;
    }
    const hs_real scale = c->embed_scale ? (hs_real)sqrt((double)d) : 1;
    hs_real *gwte = bw->g->wte;
    for (size_t r = 0; r < N; r++) {
        const hs_real *row = dx + r * d;
        if (gwpe && c->pos == HS_POS_LEARNED) {
            hs_real *p = gwpe + (size_t)((int)(r % (size_t)n) + c->pos_shift) * d;
            for (int i = 0; i < d; i++)
                p[i] += row[i];
        }
        if (gwte) {
            hs_real *e = gwte + (size_t)tokens[r] * d;
            for (int i = 0; i < d; i++)
                e[i] += scale * row[i];
        }
    }
}

int hs_s2s_backward(hs_weights *g, hs_real *const *dgates, hs_real *const *dcross,
                    hs_s2s_acts *a, const hs_model *m, const int32_t *src, const int32_t *dec_in,
                    const int32_t *targets, hs_real loss_scale)
{
    static hs_weights no_grads; /* every gradient NULL: never written */
    if (!a->train)
        return hs_fail(HS_EINVAL, "seq2seq backward: the activations were allocated for the "
                                  "forward alone (HS_S2S_TRAIN)");
    const hs_model_config *c = &m->cfg;
    const hs_weights *w = &m->w;
    const int d = c->d_model, V = c->vocab_size;
    const size_t NT = (size_t)a->B * a->T, NS = (size_t)a->B * a->S;
    s2s_bw bw = { a, m, g ? g : &no_grads, dgates, dcross, NULL };
    g = bw.g;
    /* the head: dlogits over the probabilities, the head's input (the
     * final norm's output, T5's scale), the final norm */
    hs_softmax_xent_backward(a->logits, a->logits, targets, NT, V, loss_scale);
    memset(a->dn, 0, sizeof(hs_real) * NT * d);
    hs_linear_backward(a->dn, g->lm_w, NULL, a->logits, c->final_norm || c->tied_scale ? a->n : a->x,
                       w->lm_w, NT, d, V);
    if (c->tied_scale)
        hs_scale(a->dn, (hs_real)pow((double)d, -0.5), NT * d);
    if (c->final_norm)
        hs_block_norm_backward(a->dres, NULL, g->lnf_w, g->lnf_b, a->dn, a->x, w->lnf_w, a->mean,
                               a->rstd, c, NT);
    else
        memcpy(a->dres, a->dn, sizeof(hs_real) * NT * d);
    memset(a->denc, 0, sizeof(hs_real) * NS * d);
    int rc = stack_backward(&bw, c->enc_layers, c->n_layer, a->T, w->dec_rel, g->dec_rel, 0);
    if (rc)
        return rc;
    embed_backward(&bw, dec_in, a->T, w->wpe, g->wpe, w->lne_w, w->lne_b, g->lne_w, g->lne_b);
    /* the encoder, from its output's gradient (every cross-attention's) */
    if (c->final_norm) {
        hs_block_norm(a->n, a->mean, a->rstd, a->enc_x, w->enc_lnf_w, w->enc_lnf_b, c, NS);
        hs_block_norm_backward(a->dres, NULL, g->enc_lnf_w, g->enc_lnf_b, a->denc, a->enc_x,
                               w->enc_lnf_w, a->mean, a->rstd, c, NS);
    } else {
        memcpy(a->dres, a->denc, sizeof(hs_real) * NS * d);
    }
    if ((rc = stack_backward(&bw, 0, c->enc_layers, a->S, w->enc_rel, g->enc_rel, 1)))
        return rc;
    embed_backward(&bw, src, a->S, w->enc_wpe, g->enc_wpe, w->enc_lne_w, w->enc_lne_b,
                   g->enc_lne_w, g->enc_lne_b);
    return HS_OK;
}

/* ---- greedy decoding ------------------------------------------------------ */

/* What decoding one source keeps: the activations of one step, each decoder
 * layer's self-attention cache, and its cross-attention keys and values,
 * computed once from the encoder's output. */
typedef struct {
    hs_s2s_acts a;      /* B 1, the source's S positions, T 1 */
    hs_kv_cache *cache; /* the decoder's layers' */
    hs_real *ck, *cv;   /* (D, S, HD) cross keys and values */
    hs_real *rel;       /* T5: the decoder's bias over max_len positions */
    hs_real *q, *z;     /* (HD) a step's cross query and head outputs */
} decoding;

static void decoding_free(decoding *g, int D)
{
    for (int i = 0; g->cache && i < D; i++)
        hs_kv_cache_free(&g->cache[i]);
    free(g->cache), free(g->ck), free(g->cv), free(g->rel), free(g->q), free(g->z);
    hs_s2s_acts_free(&g->a);
}

/* Cross-attention of decoder layer l for the step in g->a, over the cached
 * keys and values k, v (S, HD). */
static int cross_step(decoding *g, const hs_model *m, int l, const hs_real *k, const hs_real *v)
{
    hs_s2s_acts *a = &g->a;
    const hs_model_config *c = &m->cfg;
    const hs_layer_weights *lw = &m->w.layer[l];
    const hs_attn_config ac = hs_config_attn(c, l);
    const int H = c->n_head[l], dh = c->head_dim, HD = H * dh, S = a->S;
    const hs_real *in = sublayer_in(a, c, 1, lw->lnx_w, lw->lnx_b);
    hs_linear_forward(g->q, in, lw->xattn.w_q, lw->xattn.b_q, 1, c->d_model, HD);
    const hs_kv_view view = { k, v, (size_t)S * HD, (size_t)dh, (size_t)HD, S };
    const hs_attn_mask mask = { 0, a->src_padded ? a->src_valid : NULL, 0 };
    const hs_attn_scores sc = hs_attn_config_scores(&ac);
    int rc = hs_attn_heads_forward_scored(g->z, NULL, g->q, &view, &mask, NULL, 0, 1, 1, H, H,
                                          dh, &sc, NULL);
    if (rc)
        return rc;
    hs_linear_forward(a->o, g->z, lw->xattn.w_o, lw->xattn.b_o, 1, HD, c->d_model);
    residual(a, c, 1, lw->lnx_w, lw->lnx_b);
    return HS_OK;
}

/* One decoder step: token tok at position pos, its logits into g->a.logits. */
static int step(decoding *g, const hs_model *m, int32_t tok, int pos, hs_attn_rel rel)
{
    hs_s2s_acts *a = &g->a;
    const hs_model_config *c = &m->cfg;
    const int E = c->enc_layers;
    const size_t per = (size_t)a->S * c->n_head[E] * c->head_dim;
    embed(a, m, &tok, 1, pos, m->w.wpe, m->w.lne_w, m->w.lne_b);
    const hs_attn_mask self = { 1, NULL, 0 };
    int rc = HS_OK;
    for (int l = E; !rc && l < c->n_layer; l++) {
        const size_t i = (size_t)(l - E);
        if (!(rc = attention(a, m, l, 1, NULL, &self, rel, &g->cache[i])) &&
            !(rc = cross_step(g, m, l, g->ck + i * per, g->cv + i * per)))
            mlp(a, m, l, 1);
    }
    if (!rc)
        unembed(a, m, 1);
    return rc;
}

/* Sets up g for source src (S ids) and up to max_len decoder positions:
 * the encoder's pass, the cross keys and values, the caches, T5's bias. */
static int decoding_init(decoding *g, const hs_model *m, const int32_t *src, int S, int max_len,
                         hs_attn_rel *rel)
{
    const hs_model_config *c = &m->cfg;
    const int E = c->enc_layers, D = c->n_layer - E, H = c->n_head[E], dh = c->head_dim;
    const size_t HD = (size_t)H * dh, d = (size_t)c->d_model;
    memset(g, 0, sizeof *g);
    int rc = hs_s2s_acts_alloc(&g->a, c, 1, S, 1, 0);
    if (rc)
        return rc;
    g->cache = hs_calloc((size_t)D, sizeof *g->cache, "decoder caches");
    g->ck = hs_calloc((size_t)D * S * HD, sizeof(hs_real), "cross keys");
    g->cv = hs_calloc((size_t)D * S * HD, sizeof(hs_real), "cross values");
    g->q = hs_calloc(HD, sizeof(hs_real), "cross query");
    g->z = hs_calloc(HD, sizeof(hs_real), "cross head outputs");
    if (c->rel_buckets)
        g->rel = hs_calloc((size_t)H * (2 * (size_t)max_len - 1), sizeof(hs_real), "bias");
    rc = g->cache && g->ck && g->cv && g->q && g->z && (g->rel || !c->rel_buckets) ? HS_OK
                                                                                  : HS_ENOMEM;
    for (int i = 0; !rc && i < D; i++)
        rc = hs_kv_cache_init(&g->cache[i], 1, H, dh, max_len);
    if (!rc)
        rc = hs_s2s_encode(&g->a, m, src);
    for (int i = 0; !rc && i < D; i++) {
        const hs_attn_weights *w = &m->w.layer[E + i].xattn;
        hs_linear_forward(g->ck + (size_t)i * S * HD, g->a.enc, w->w_k, w->b_k, (size_t)S,
                          (int)d, (int)HD);
        hs_linear_forward(g->cv + (size_t)i * S * HD, g->a.enc, w->w_v, w->b_v, (size_t)S,
                          (int)d, (int)HD);
    }
    *rel = stack_rel(g->rel, c, m->w.dec_rel, H, max_len, 0);
    return rc;
}

int hs_s2s_max_new(const hs_model_config *c)
{
    return c->pos != HS_POS_NONE && c->n_ctx < 64 ? c->n_ctx : 64;
}

int hs_s2s_generate(int32_t *out, hs_generate_stats *st, const hs_model *m, const int32_t *src,
                    int S, int max_new, const hs_sample_opts *o)
{
    const hs_model_config *c = &m->cfg;
    memset(st, 0, sizeof *st);
    if (S < 1 || max_new < 1)
        return hs_fail(HS_EINVAL, "decoding needs a source of at least one token and "
                                  "--max-new of at least 1");
    if (c->pos != HS_POS_NONE && max_new > c->n_ctx)
        return hs_fail(HS_EINVAL, "--max-new %d exceeds the model's %d decoder positions "
                                  "(max_position_embeddings)", max_new, c->n_ctx);
    decoding g;
    hs_attn_rel rel;
    const double t0 = hs_now();
    int rc = decoding_init(&g, m, src, S, max_new, &rel);
    const double t1 = hs_now();
    hs_rng rng;
    hs_rng_seed(&rng, o->seed);
    out[0] = c->dec_start_id;
    int n = 1;
    for (int pos = 0; !rc && pos < max_new; pos++) {
        if ((rc = step(&g, m, out[pos], pos, rel)))
            break;
        for (int v = 0; v < c->vocab_size && !rc; v++)
            if (!isfinite(g.a.logits[v]))
                rc = hs_fail(HS_EINVAL, "logits not finite at step %d (id %d): the model's "
                                        "weights or inputs are not finite", pos + 1, v);
        if (!rc)
            out[n++] = hs_sample_token(g.a.logits, c->vocab_size, o, &rng);
        if (out[n - 1] == c->eos_id)
            break;
    }
    const int E = c->enc_layers, D = c->n_layer - E;
    st->n_new = n - 1;
    st->seconds = hs_now() - t0;
    st->prefill_seconds = t1 - t0; /* the encoder and the cross keys and values */
    st->tokens_per_s = st->seconds > 0 ? st->n_new / st->seconds : 0;
    st->step_tokens_per_s = st->seconds > st->prefill_seconds
                                ? st->n_new / (st->seconds - st->prefill_seconds)
                                : 0;
    st->cache_bytes = sizeof(hs_real) * 2 * (size_t)D * c->n_head[E] * c->head_dim *
                      ((size_t)max_new + (size_t)S);
    decoding_free(&g, D);
    return rc;
}
