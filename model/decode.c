/* Incremental decoding over the compact per-layer KV cache (decode.h). */
#include "decode.h"
#include "seq2seq.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block.h"
#include "layers.h"
#include "linalg.h"
#include "mla.h"

/* The widest layer: scratch for q, z (H dh) and k, v (G dh) serves every layer. */
static hs_attn_config widest(const hs_model_config *c)
{
    hs_attn_config ac = hs_config_attn(c, 0);
    for (int l = 1; l < c->n_layer; l++)
        if (c->n_head[l] > ac.n_heads)
            ac.n_heads = c->n_head[l];
    ac.n_kv_heads = ac.n_heads;
    ac.head_dim = c->head_dim;
    ac.head_window = NULL; /* layer 0's windows: not as many as the widest layer's heads */
    return ac;
}

static void free_scratch(hs_decoder *dec)
{
    hs_attn_acts_free(&dec->acts);
    hs_real **bufs[] = { &dec->x,    &dec->nrm,   &dec->mean, &dec->rstd,
                         &dec->attn_out, &dec->r1, &dec->n2,  &dec->h_pre,
                         &dec->h_up, &dec->h_act, &dec->mlp_out, &dec->raw,
                         &dec->qg,   &dec->zg };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
    dec->rows = 0;
}

/* Scratch for n tokens per feed (kept when it already fits). */
static int grow_scratch(hs_decoder *dec, int n)
{
    if (n <= dec->rows)
        return HS_OK;
    free_scratch(dec);
    const hs_model_config *c = &dec->m->cfg;
    const hs_attn_config ac = widest(c);
    int rc = hs_attn_acts_alloc(&dec->acts, &ac, 1, n, n, n, 0);
    if (rc)
        return rc;
    const size_t d = (size_t)c->d_model * n, r = (size_t)n, F = (size_t)(c->d_ff > 0 ? c->d_ff : 1) * n;
    const size_t hd = (size_t)n * ac.n_heads * hs_attn_head_dim(&ac);
    struct {
        hs_real **p;
        size_t n;
    } b[] = { { &dec->x, d },     { &dec->nrm, d },   { &dec->mean, r },     { &dec->rstd, r },
              { &dec->attn_out, d }, { &dec->r1, d }, { &dec->n2, d },       { &dec->h_pre, F },
              { &dec->h_up, F },  { &dec->h_act, F }, { &dec->mlp_out, d },  { &dec->raw, d },
              { &dec->qg, hd },   { &dec->zg, hd } };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if (!(*b[i].p = hs_calloc(b[i].n, sizeof(hs_real), "decoder scratch"))) {
            free_scratch(dec);
            return HS_ENOMEM;
        }
    dec->rows = n;
    return HS_OK;
}

static void mla_cache_release(void *other)
{
    hs_mla_cache_free(other);
    free(other);
}

static void mla_cache_reset(void *other)
{
    ((hs_mla_cache *)other)->len = 0;
}

/* An MLA layer's cache: its latent and rope key for max_len positions. */
static int mla_layer_cache(hs_layer_cache *lc, const hs_model_config *c, int max_len)
{
    hs_mla_cache *cache = hs_calloc(1, sizeof *cache, "decoder MLA cache");
    if (!cache)
        return HS_ENOMEM;
    int rc = hs_mla_cache_init(cache, 1, c->kv_lora_rank, c->qk_rope_head_dim, max_len);
    if (rc) {
        free(cache);
        return rc;
    }
    lc->kind = HS_LAYER_CACHE_OTHER;
    lc->other = cache;
    lc->other_bytes = hs_mla_cache_bytes(1, c->kv_lora_rank, c->qk_rope_head_dim, max_len);
    lc->other_free = mla_cache_release;
    lc->other_reset = mla_cache_reset;
    return HS_OK;
}

/* A KV plan's layer (c->sink > 0): a cache per kv head, a streaming head's
 * (window W > 0) of the sinks and a ring of W, the others' of every position. */
static int heads_layer_cache(hs_layer_cache *lc, const hs_model_config *c, int l, int max_len)
{
    const hs_attn_config ac = hs_config_attn(c, l);
    const int G = ac.n_kv_heads, group = ac.n_heads / G;
    lc->kind = HS_LAYER_CACHE_HEADS;
    lc->heads = hs_calloc((size_t)G, sizeof *lc->heads, "decoder head caches");
    lc->head_window = hs_calloc((size_t)G, sizeof *lc->head_window, "decoder head caches");
    int rc = lc->heads && lc->head_window ? HS_OK : HS_ENOMEM;
    for (int j = 0; !rc && j < G; j++) {
        const int W = hs_config_head_window(c, l, j * group);
        const long cap = W > 0 && (long)c->sink + W < max_len ? (long)c->sink + W : max_len;
        lc->head_window[j] = W;
        rc = hs_kv_cache_init(&lc->heads[j], 1, 1, hs_attn_head_dim(&ac), (int)cap);
    }
    return rc;
}

int hs_decoder_init(hs_decoder *dec, const hs_model *m, int max_len)
{
    memset(dec, 0, sizeof *dec);
    const hs_model_config *c = &m->cfg;
    if (c->encoder)
        return hs_fail(HS_EINVAL, "generation needs a causal language model, and this is an "
                       "encoder (%s): it attends both ways and predicts masked tokens, not the "
                       "next one", hs_family_name(c->family));
    if (hs_config_seq2seq(c))
        return hs_fail(HS_EUNSUPPORTED, "this generation continues a prompt of a causal "
                       "language model, and this is an encoder-decoder (%s): it decodes from a "
                       "source", hs_family_name(c->family));
    if (max_len < 1)
        return hs_fail(HS_EINVAL, "decoder: length %d must be positive", max_len);
    if (max_len > c->n_ctx)
        return hs_fail(HS_EINVAL,
                       "decoder: %d positions (prompt + new tokens) exceed the model's "
                       "context of %d (n_ctx%s)",
                       max_len, c->n_ctx,
                       c->pos == HS_POS_LEARNED ? ": the learned position table"
                                                : ", max_position_embeddings");
    dec->m = m;
    dec->max_len = max_len;
    dec->layer = hs_calloc((size_t)c->n_layer, sizeof *dec->layer, "decoder layers");
    dec->logits = hs_calloc((size_t)c->vocab_size, sizeof(hs_real), "decoder logits");
    int rc = dec->layer && dec->logits ? HS_OK : HS_ENOMEM;
    for (int l = 0; !rc && l < c->n_layer; l++) {
        hs_layer_cache *lc = &dec->layer[l];
        if (c->mla) {
            rc = mla_layer_cache(lc, c, max_len);
            continue;
        }
        if (c->sink) {
            rc = heads_layer_cache(lc, c, l, max_len);
            continue;
        }
        const hs_attn_config ac = hs_config_attn(c, l);
        /* a ring only where every head shares one window; a layer of mixed
         * windows keeps every position and masks each head by its own */
        const int W = hs_config_layer_window(c, l);
        lc->kind = HS_LAYER_CACHE_KV;
        lc->window = W > 0 && W < max_len ? W : 0;
        rc = hs_kv_cache_init(&lc->kv, 1, ac.n_kv_heads, hs_attn_head_dim(&ac),
                              lc->window ? lc->window : max_len);
    }
    if (!rc)
        rc = grow_scratch(dec, 1);
    if (rc)
        hs_decoder_free(dec);
    return rc;
}

void hs_decoder_free(hs_decoder *dec)
{
    if (dec->layer && dec->m)
        for (int l = 0; l < dec->m->cfg.n_layer; l++) {
            hs_layer_cache *lc = &dec->layer[l];
            hs_kv_cache_free(&lc->kv);
            if (lc->other && lc->other_free)
                lc->other_free(lc->other);
            for (int j = 0; lc->heads && j < dec->m->cfg.n_kv_head[l]; j++)
                hs_kv_cache_free(&lc->heads[j]);
            free(lc->heads), free(lc->head_window);
        }
    free(dec->layer);
    free(dec->logits);
    free_scratch(dec);
    memset(dec, 0, sizeof *dec);
}

void hs_decoder_reset(hs_decoder *dec)
{
    dec->pos = 0;
    for (int l = 0; l < dec->m->cfg.n_layer; l++) {
        hs_layer_cache *lc = &dec->layer[l];
        lc->kv.len = 0;
        if (lc->other && lc->other_reset)
            lc->other_reset(lc->other);
        for (int j = 0; lc->heads && j < dec->m->cfg.n_kv_head[l]; j++)
            lc->heads[j].len = 0;
    }
}

size_t hs_decoder_cache_bytes(const hs_decoder *dec)
{
    size_t bytes = 0;
    for (int l = 0; l < dec->m->cfg.n_layer; l++) {
        const hs_layer_cache *lc = &dec->layer[l];
        if (lc->kind == HS_LAYER_CACHE_OTHER)
            bytes += lc->other_bytes;
        else if (lc->kind == HS_LAYER_CACHE_HEADS)
            for (int j = 0; j < dec->m->cfg.n_kv_head[l]; j++)
                bytes += 2 * (size_t)lc->heads[j].cap * lc->heads[j].dh * sizeof(hs_real);
        else
            bytes += 2 * (size_t)lc->kv.G * lc->kv.cap * lc->kv.dh * sizeof(hs_real);
    }
    return bytes;
}

/* The copy rule's row (hs_decoder_watch.argmax): row `last` of a call's
 * query rows is the feed's last, its heads those from head0 on; its keys
 * are positions, or with a ring of `ring` slots after `sink` sink slots the
 * slots of the query at position `query` (slot s >= sink holds the latest
 * position p <= query with p = s mod ring). */
typedef struct {
    int *out;
    int last, ring, sink, query, head0;
} argmax_watch;

static int slot_position(const argmax_watch *w, int s)
{
    return w->ring && s >= w->sink ? w->query - (w->query - s) % w->ring : s;
}

/* hs_row_observer: the position of the largest weight of the last row,
 * the lowest position on ties (a ring's slots are not in position order). */
static void watch_rows(void *ctx, int layer, int thread, int b, int h, int t0, int n,
                       const hs_real *P, int ldp, int keys)
{
    (void)layer, (void)thread, (void)b;
    const argmax_watch *w = ctx;
    if (w->last < t0 || w->last >= t0 + n)
        return;
    const hs_real *row = P + (size_t)(w->last - t0) * ldp;
    int best = 0, best_pos = slot_position(w, 0);
    for (int s = 1; s < keys; s++) {
        const int p = slot_position(w, s);
        if (row[s] > row[best] || (row[s] == row[best] && p < best_pos))
            best = s, best_pos = p;
    }
    w->out[w->head0 + h] = best_pos;
}

/* Attention of n new rows `in` over a ring of the last W positions: the
 * projections of all n rows at once (hs_attn_project: norms and RoPE as the
 * full forward has them), then each query in turn writes its key and value
 * over the slot of position p - W and attends over the ring (every key there
 * is inside its window). Leaves z in dec->acts. */
static int ring_attention(hs_decoder *dec, hs_layer_cache *lc, const hs_attn_weights *w,
                          const hs_attn_config *ac, const hs_real *in, int n)
{
    hs_attn_acts *a = &dec->acts;
    hs_kv_cache *kv = &lc->kv;
    const int H = ac->n_heads, G = ac->n_kv_heads, dh = hs_attn_head_dim(ac);
    const int HD = H * dh, GD = G * dh, W = lc->window;
    hs_attn_project(a->q, a->k, a->v, NULL, NULL, w, ac, in, in, 1, n, n, dec->pos);
    const hs_attn_mask causal = { 1, NULL, 0 };
    const hs_attn_scores sc = hs_attn_config_scores(ac);
    for (int t = 0; t < n; t++) {
        const int p = dec->pos + t, slot = p % W, S = p + 1 < W ? p + 1 : W;
        for (int j = 0; j < G; j++) {
            const size_t dst = ((size_t)j * kv->cap + slot) * dh, src = (size_t)t * GD + (size_t)j * dh;
            memcpy(kv->k + dst, a->k + src, sizeof(hs_real) * dh);
            memcpy(kv->v + dst, a->v + src, sizeof(hs_real) * dh);
        }
        kv->len = S;
        const hs_kv_view view = { kv->k, kv->v, (size_t)G * kv->cap * dh, (size_t)kv->cap * dh,
                                  (size_t)dh, S };
        /* the watch's observer sees the last query alone */
        int rc = hs_attn_heads_forward_scored(a->z + (size_t)t * HD, NULL, a->q + (size_t)t * HD,
                                              &view, &causal, NULL, S - 1, 1, 1, H, G, dh, &sc,
                                              t == n - 1 ? &a->hooks : NULL);
        if (rc)
            return rc;
    }
    return HS_OK;
}

/* A KV plan's layer (HS_LAYER_CACHE_HEADS): the projections of all n rows,
 * then each kv head j over its own cache, its query heads' rows gathered
 * into dec->qg. A head of every position appends the n keys and attends
 * causally in one call; a streaming head takes one query at a time, writing
 * its key to its slot (position p < S: slot p; else S + (p - S) mod W) and
 * attending over the filled slots, which are always 0 .. len-1 and hold
 * exactly the keys it may see. Leaves z in dec->acts. */
static int heads_attention(hs_decoder *dec, hs_layer_cache *lc, const hs_attn_weights *w,
                           const hs_attn_config *ac, const hs_real *in, int n, int *argmax)
{
    hs_attn_acts *a = &dec->acts;
    const int H = ac->n_heads, G = ac->n_kv_heads, dh = hs_attn_head_dim(ac);
    const int group = H / G, gd = group * dh, HD = H * dh, GD = G * dh, S0 = ac->sink;
    hs_attn_project(a->q, a->k, a->v, NULL, NULL, w, ac, in, in, 1, n, n, dec->pos);
    const hs_attn_mask causal = { 1, NULL, 0 };
    const hs_attn_scores sc = hs_attn_config_scores(ac);
    int rc = HS_OK;
    for (int j = 0; !rc && j < G; j++) {
        hs_kv_cache *kv = &lc->heads[j];
        const int W = lc->head_window[j];
        argmax_watch aw = { argmax, W ? 0 : n - 1, W, S0, dec->pos + n - 1, j * group };
        const hs_attn_hooks watch = { { watch_rows, &aw }, NULL, 0 };
        for (int t = 0; t < (W ? n : 1); t++) {
            const int p = dec->pos + t, rows = W ? 1 : n;
            const int slot = !W ? p : p < S0 ? p : S0 + (p - S0) % W;
            for (int r = 0; r < rows; r++) {
                memcpy(kv->k + (size_t)(slot + r) * dh, a->k + (size_t)(t + r) * GD + (size_t)j * dh,
                       sizeof(hs_real) * dh);
                memcpy(kv->v + (size_t)(slot + r) * dh, a->v + (size_t)(t + r) * GD + (size_t)j * dh,
                       sizeof(hs_real) * dh);
                memcpy(dec->qg + (size_t)r * gd, a->q + (size_t)(t + r) * HD + (size_t)j * gd,
                       sizeof(hs_real) * gd);
            }
            const int len = !W ? p + n : p < S0 + W ? p + 1 : S0 + W;
            kv->len = len;
            const hs_kv_view view = { kv->k, kv->v, (size_t)kv->cap * dh, (size_t)kv->cap * dh,
                                      (size_t)dh, len };
            const int last = !W || t == n - 1;
            rc = hs_attn_heads_forward_scored(dec->zg, NULL, dec->qg, &view, &causal, NULL,
                                              len - rows, 1, rows, group, 1, dh, &sc,
                                              argmax && last ? &watch : NULL);
            for (int r = 0; !rc && r < rows; r++)
                memcpy(a->z + (size_t)(t + r) * HD + (size_t)j * gd, dec->zg + (size_t)r * gd,
                       sizeof(hs_real) * gd);
            if (rc)
                break;
        }
    }
    return rc;
}

/* The attention of layer l for the n rows `in`, through the layer's cache,
 * into out. The one place a layer's cache kind matters: an MLA
 * layer (HS_LAYER_CACHE_OTHER) takes the absorbed step over its latent
 * cache, the others attend over their kv heads (linear or ring). */
static int layer_attention(hs_decoder *dec, int l, const hs_real *in, int n, hs_real *out)
{
    const hs_model *m = dec->m;
    hs_layer_cache *lc = &dec->layer[l];
    const hs_attn_weights *w = &m->w.layer[l].attn;
    const hs_attn_config ac = hs_config_attn(&m->cfg, l);
    hs_attn_acts *a = &dec->acts;
    a->B = 1, a->L = n, a->S_new = n, a->S = n;
    const hs_real *gates = dec->watch.gates ? dec->watch.gates[l] : NULL;
    int *argmax = dec->watch.argmax ? dec->watch.argmax[l] : NULL;
    if (lc->kind == HS_LAYER_CACHE_OTHER && m->cfg.mla) {
        if (argmax)
            return hs_fail(HS_EINVAL, "decoder: layer %d's latent attention (MLA) has no "
                           "attention row to watch", l);
        const hs_mla_config mc = hs_config_mla(&m->cfg, l);
        return hs_mla_forward_cached(out, NULL, &m->w.layer[l].mla, &mc, in, n, gates, lc->other);
    }
    argmax_watch aw = { argmax, lc->window ? 0 : n - 1, lc->window, 0, dec->pos + n - 1, 0 };
    a->hooks = (hs_attn_hooks){ .layer = l };
    if (argmax)
        a->hooks.rows = (hs_row_observer){ watch_rows, &aw };
    if (lc->kind == HS_LAYER_CACHE_OTHER)
        return hs_fail(HS_EINVAL, "decoder: layer %d's attention has no decoding step", l);
    int rc;
    if (lc->kind == HS_LAYER_CACHE_HEADS)
        rc = heads_attention(dec, lc, w, &ac, in, n, argmax);
    else if (lc->window)
        rc = ring_attention(dec, lc, w, &ac, in, n);
    else {
        const hs_attn_mask causal = { 1, NULL, 0 };
        rc = hs_attn_forward_heads(a, w, &ac, in, NULL, &causal, &lc->kv);
    }
    a->hooks = (hs_attn_hooks){ 0 };
    if (!rc)
        hs_attn_forward_output(out, a, w, &ac, gates, 0);
    return rc;
}

/* One layer on the n rows of dec->x, in place: the same sequence of
 * kernels as the full forward (transformer.c), pre or post norm, parallel
 * residual or not, with or without input norms and sublayer output norms. */
static int layer_forward(hs_decoder *dec, int l, int n)
{
    const hs_model_config *c = &dec->m->cfg;
    const hs_layer_weights *lw = &dec->m->w.layer[l];
    const size_t N = (size_t)n, D = N * c->d_model;
    const int pre = !c->post_norm && !c->no_input_norm;
    const hs_real *attn_in = dec->x;
    if (pre) {
        hs_block_norm(dec->nrm, dec->mean, dec->rstd, dec->x, lw->ln1_w, lw->ln1_b, c, N);
        attn_in = dec->nrm;
    }
    int rc = layer_attention(dec, l, attn_in, n, c->out_norm ? dec->raw : dec->attn_out);
    if (rc)
        return rc;
    if (c->out_norm)
        hs_block_norm(dec->attn_out, dec->mean, dec->rstd, dec->raw, lw->ln_attn_w, lw->ln_attn_b,
                      c, N);
    hs_add(dec->r1, dec->x, dec->attn_out, D);
    hs_real *mid = dec->r1;
    if (c->post_norm) {
        hs_block_norm(dec->nrm, dec->mean, dec->rstd, dec->r1, lw->ln1_w, lw->ln1_b, c, N);
        mid = dec->nrm;
    }
    if (c->mlp == HS_MLP_NONE) {
        memcpy(dec->x, mid, sizeof(hs_real) * D);
        return HS_OK;
    }
    const hs_real *mlp_in = mid;
    if (!c->post_norm) {
        mlp_in = c->parallel_residual ? dec->x : mid;
        if (pre) {
            hs_block_norm(dec->n2, dec->mean, dec->rstd, mlp_in, lw->ln2_w, lw->ln2_b, c, N);
            mlp_in = dec->n2;
        }
    }
    const hs_mlp_acts ma = { dec->h_pre, dec->h_up, dec->h_act };
    hs_mlp_forward(c->out_norm ? dec->raw : dec->mlp_out, &ma, lw, mlp_in, c, N);
    if (c->out_norm)
        hs_block_norm(dec->mlp_out, dec->mean, dec->rstd, dec->raw, lw->ln_mlp_w, lw->ln_mlp_b, c,
                      N);
    if (c->post_norm) {
        hs_add(dec->r1, mid, dec->mlp_out, D);
        hs_block_norm(dec->x, dec->mean, dec->rstd, dec->r1, lw->ln2_w, lw->ln2_b, c, N);
    } else
        hs_add(dec->x, mid, dec->mlp_out, D);
    return HS_OK;
}

/* One forward of n rows (checked by hs_decoder_feed). */
static int feed_rows(hs_decoder *dec, const int32_t *ids, int n)
{
    const hs_model *m = dec->m;
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model;
    int rc = grow_scratch(dec, n);
    if (rc)
        return rc;
    hs_embed_forward(dec->x, ids, m->w.wte, m->w.wpe ? m->w.wpe + (size_t)dec->pos * d : NULL, 1,
                     n, d);
    if (c->embed_scale) /* as the full forward: sqrt(d) rounded to hs_real */
        hs_scale(dec->x, (hs_real)sqrt((double)d), (size_t)n * d);
    for (int l = 0; !rc && l < c->n_layer; l++)
        rc = layer_forward(dec, l, n);
    if (rc)
        return rc;
    /* logits of the last row only */
    const hs_real *last = dec->x + (size_t)(n - 1) * d;
    if (c->final_norm) {
        hs_block_norm(dec->nrm, dec->mean, dec->rstd, last, m->w.lnf_w, m->w.lnf_b, c, 1);
        last = dec->nrm;
    }
    hs_linear_forward(dec->logits, last, m->w.lm_w, m->w.lm_b, 1, d, c->vocab_size);
    if (c->final_softcap > 0)
        hs_softcap_forward(dec->logits, c->final_softcap, (size_t)c->vocab_size);
    dec->pos += n;
    return HS_OK;
}

int hs_decoder_feed(hs_decoder *dec, const int32_t *ids, int n)
{
    const hs_model_config *c = &dec->m->cfg;
    if (n < 1 || dec->pos + n > dec->max_len)
        return hs_fail(HS_EINVAL, "decoder: %d more positions after %d exceed its length %d", n,
                       dec->pos, dec->max_len);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return hs_fail(HS_EINVAL, "decoder: token %d outside the vocabulary of %d", ids[i],
                           c->vocab_size);
    int rc = HS_OK;
    for (int i = 0; !rc && i < n; i += HS_DECODE_ROWS)
        rc = feed_rows(dec, ids + i, n - i < HS_DECODE_ROWS ? n - i : HS_DECODE_ROWS);
    return rc;
}

/* ---- sampling and the generation loop ---------------------------------- */

int hs_decoder_logits_finite(const hs_decoder *dec, int step)
{
    for (int v = 0; v < dec->m->cfg.vocab_size; v++)
        if (!isfinite(dec->logits[v]))
            return hs_fail(HS_EINVAL, "logits not finite at step %d (id %d is %g): the model's "
                           "weights or inputs are not finite", step, v, (double)dec->logits[v]);
    return HS_OK;
}

int hs_generate(int32_t *out, hs_generate_stats *st, const hs_model *m, const int32_t *prompt,
                int n_prompt, int max_new, const hs_sample_opts *o)
{
    if (hs_config_seq2seq(&m->cfg))
        return hs_s2s_generate(out, st, m, prompt, n_prompt, max_new, o);
    memset(st, 0, sizeof *st);
    st->n_new = max_new;
    if (n_prompt < 1 || max_new < 0)
        return hs_fail(HS_EINVAL, "a prompt of at least one token is needed");
    if ((long)n_prompt + max_new > m->cfg.n_ctx)
        return hs_fail(HS_EINVAL,
                       "prompt (%d tokens) + --max-new %d = %ld exceeds the model's "
                       "context of %d positions",
                       n_prompt, max_new, (long)n_prompt + max_new, m->cfg.n_ctx);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= m->cfg.vocab_size)
            return hs_fail(HS_EINVAL, "prompt id %d (position %d) outside the "
                                      "vocabulary of %d",
                           prompt[i], i, m->cfg.vocab_size);
    hs_decoder dec;
    int rc = hs_decoder_init(&dec, m, n_prompt + max_new);
    if (rc)
        return rc;
    hs_rng rng;
    hs_rng_seed(&rng, o->seed);
    memcpy(out, prompt, sizeof *out * (size_t)n_prompt);
    const double t0 = hs_now();
    rc = max_new ? hs_decoder_feed(&dec, prompt, n_prompt) : HS_OK;
    const double t1 = hs_now();
    for (int i = 0; !rc && i < max_new; i++) {
        if ((rc = hs_decoder_logits_finite(&dec, i + 1)))
            break;
        out[n_prompt + i] = hs_sample_token(dec.logits, m->cfg.vocab_size, o, &rng);
        if (i + 1 < max_new)
            rc = hs_decoder_feed(&dec, &out[n_prompt + i], 1);
    }
    st->seconds = hs_now() - t0;
    st->tokens_per_s = st->seconds > 0 ? max_new / st->seconds : 0;
    st->prefill_seconds = t1 - t0;
    st->step_tokens_per_s = max_new > 1 && st->seconds > st->prefill_seconds
                                ? (max_new - 1) / (st->seconds - st->prefill_seconds)
                                : 0;
    st->cache_bytes = hs_decoder_cache_bytes(&dec);
    hs_decoder_free(&dec);
    return rc;
}

double hs_kv_cache_bytes(const hs_model_config *c, long B, long T, long E)
{
    double bytes = 0;
    for (int l = 0; l < c->n_layer; l++) {
        if (c->sink && !c->mla) { /* a KV plan: each kv head's own cache */
            const int G = c->n_kv_head[l], group = c->n_head[l] / G;
            for (int j = 0; j < G; j++) {
                const long W = hs_config_head_window(c, l, j * group);
                const long cached = W > 0 && c->sink + W < T ? c->sink + W : T;
                bytes += 2.0 * B * cached * c->head_dim * E;
            }
            continue;
        }
        const int W = hs_config_layer_window(c, l); /* a ring only for a shared window */
        const long cached = W > 0 && W < T ? W : T;
        bytes += c->mla ? 1.0 * B * cached * (c->kv_lora_rank + c->qk_rope_head_dim) * E
                        : 2.0 * B * c->n_kv_head[l] * cached * c->head_dim * E;
    }
    return bytes;
}
