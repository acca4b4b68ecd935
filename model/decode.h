/* Model-level incremental decoding with the compact KV cache (SPEC §10):
 * a prompt is fed in one forward (prefill), then one token per step, each
 * step costing one row through every layer plus attention over the cache.
 *
 * The cache of each layer holds the keys and values of its G key/value
 * heads only (hs_kv_cache, never repeated per query head): 2 G dh values
 * per position and layer. A layer attending in a sliding window of W keeps
 * a ring of the last W positions (slot = position mod W), so its memory is
 * O(W) however long the generation; keys are cached after RoPE, at their
 * absolute positions, so the ring's order does not matter to the softmax.
 * A layer whose heads have different windows (headscope's per-head
 * `window`, or a mix of global and local heads) keeps every position, and
 * each head attends only inside its own window (hs_config_layer_window).
 *
 * A multi-head latent attention layer (attention "mla", mla.h) caches only
 * its normalised latent and the shared rope key per position:
 * kv_lora_rank + qk_rope_head_dim values per token and layer, never a key
 * or value per head. Its hs_layer_cache has kind = HS_LAYER_CACHE_OTHER,
 * `other` an hs_mla_cache of max_len positions, and decode.c's
 * layer_attention() -- the one place that dispatches on the kind -- runs
 * hs_mla_forward_cached, the absorbed path (W^UK folded into the query,
 * W^UV applied to the attention-mixed latent). Everything around attention
 * (norms, MLP, residuals, logits, sampling, hs_generate) is shared.
 *
 * Shapes: n new tokens, d width, V vocabulary, F MLP width. */
#ifndef HS_DECODE_H
#define HS_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "attention.h"
#include "rng.h"
#include "sample.h"
#include "weights.h"

typedef enum {
    HS_LAYER_CACHE_KV,    /* hs_kv_cache: linear (cap = max_len) or a ring (cap = W) */
    HS_LAYER_CACHE_OTHER, /* another attention's own cache (MLA: hs_mla_cache), in `other` */
    HS_LAYER_CACHE_HEADS, /* a KV plan's layer (SPEC §18): one cache per kv head, in `heads` */
} hs_layer_cache_kind;

typedef struct {
    hs_layer_cache_kind kind;
    int window;          /* ring of the last `window` positions; 0: linear */
    hs_kv_cache kv;      /* B = 1, G, dh, cap */
    /* HS_LAYER_CACHE_HEADS: kv head j's own cache (B = G = 1) and window:
     * 0, every position (cap = max_len); W > 0, a streaming head (the
     * config's sinks S: slots 0..S-1 hold positions 0..S-1, slots S..S+W-1
     * a ring of the last W positions from S on; cap = min(max_len, S + W)) */
    hs_kv_cache *heads;
    int *head_window;
    void *other;         /* HS_LAYER_CACHE_OTHER: the layer's own cache */
    size_t other_bytes;  /* its bytes, for hs_decoder_cache_bytes */
    void (*other_free)(void *other);
    void (*other_reset)(void *other); /* forgets every cached position */
} hs_layer_cache;

/* What a feed does besides the forward (hs_decoder.watch; all NULL:
 * nothing). gates (n_layer pointers, each NULL or the layer's H gates)
 * multiplies each head's output z before W_o: a gate of 0 ablates the head
 * (SPEC §18's masked heads). argmax (n_layer pointers, each NULL or H ints)
 * receives after every feed, for each query head, the position of the key
 * that the feed's last row attends to most, the lowest position on ties
 * (SPEC §18's copy rule); an MLA layer has no such row (HS_EINVAL). */
typedef struct {
    const hs_real *const *gates;
    int *const *argmax;
} hs_decoder_watch;

typedef struct {
    const hs_model *m;
    int max_len;             /* positions this decoder may hold */
    hs_decoder_watch watch;  /* zero after init: set by the caller */
    int pos;                 /* positions fed so far */
    hs_layer_cache *layer;   /* n_layer */
    /* scratch for up to `rows` tokens per feed (grown by a longer feed) */
    int rows;
    hs_attn_acts acts;       /* q, k, v, z of the widest layer */
    hs_real *x, *nrm, *mean, *rstd, *attn_out, *r1, *n2, *h_pre, *h_up, *h_act, *mlp_out;
    hs_real *raw;            /* out_norm: a sublayer's output before its norm */
    hs_real *qg, *zg;        /* HS_LAYER_CACHE_HEADS: one kv head's queries and outputs */
    hs_real *logits;         /* (V) of the last token fed */
} hs_decoder;

/* A decoder of m (which must outlive it) for sequences of up to max_len
 * positions (prompt + new tokens): HS_EINVAL when max_len exceeds the
 * model's context (n_ctx: the learned position table, or the RoPE models'
 * max_position_embeddings). Allocates every layer's cache now:
 * hs_decoder_cache_bytes bytes, plus scratch for one token. */
int hs_decoder_init(hs_decoder *dec, const hs_model *m, int max_len);
void hs_decoder_free(hs_decoder *dec);

/* Forgets every cached position (the allocation is kept). */
void hs_decoder_reset(hs_decoder *dec);

/* Bytes of every layer's cache: sum over layers of 2 G cap dh
 * sizeof(hs_real), cap = min(W, max_len) where every head of the layer
 * shares a window W, else max_len; an MLA layer's (kv_lora_rank +
 * qk_rope_head_dim) max_len sizeof(hs_real); a KV plan's layer 2 dh
 * sizeof(hs_real) times each kv head's cap (max_len, or min(max_len, S + W)
 * for a streaming head) -- the figure `kv-bytes --model DIR --seq-len
 * max_len --bytes sizeof(hs_real)` prints (for MLA also its `--mla-latent C
 * --mla-rope R` line). */
size_t hs_decoder_cache_bytes(const hs_decoder *dec);

/* The KV cache of c for B sequences of T positions at E bytes per element:
 * keys and values of every layer's key/value heads, over the last W
 * positions only where every head of a layer attends in one sliding window
 * of W (a ring; a layer of mixed windows caches every position); under a KV
 * plan (c->sink > 0) a streaming kv head min(T, S + W) positions, the others
 * T; MLA: the latent and the shared rope key. What a decoder of c holds,
 * without building one. */
double hs_kv_cache_bytes(const hs_model_config *c, long B, long T, long E);

/* The most rows one forward of a feed takes: a longer prefill runs in
 * forwards of this many, so the scratch (activations of these rows, MLP
 * included) stays bounded however long the prompt. */
enum { HS_DECODE_ROWS = 512 };

/* Feeds n tokens at positions pos .. pos+n-1 (n > 1: the prefill, in
 * forwards of at most HS_DECODE_ROWS rows) and leaves the logits of the last
 * one in dec->logits (V). Fails with HS_EINVAL, changing nothing, on a token
 * outside the vocabulary or when pos + n would exceed max_len. */
int hs_decoder_feed(hs_decoder *dec, const int32_t *ids, int n);

/* HS_OK when every logit of the last feed is finite; else HS_EINVAL naming
 * the decoding step and the first id: NaN or infinite logits (weights or
 * activations not finite) pick no token, refused as every command refuses
 * such a result. */
int hs_decoder_logits_finite(const hs_decoder *dec, int step);


/* Generates max_new tokens after the prompt (n_prompt >= 1 ids): one
 * prefill, then a step per new token; out (n_prompt + max_new) gets the
 * prompt followed by the new ids. The decoder is sized here (max_len =
 * n_prompt + max_new). Fails with HS_EINVAL naming the limit when that
 * exceeds the model's context, or naming the id outside the vocabulary.
 * An encoder-decoder (SPEC §17) decodes the prompt as its source
 * (hs_s2s_generate): out gets [decoder_start_token_id] + the new ids. */
int hs_generate(int32_t *out, hs_generate_stats *st, const hs_model *m, const int32_t *prompt,
                int n_prompt, int max_new, const hs_sample_opts *o);

#endif
