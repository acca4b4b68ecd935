/* Sparse autoencoders on a model's activations, in SAELens's format (SPEC
 * §19): a directory of cfg.json (d_in, d_sae, hook_name, architecture
 * standard | jumprelu | topk with k, apply_b_dec_to_input,
 * normalize_activations "none") and sae_weights.safetensors (W_enc
 * [d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_in], b_dec [d_in], and
 * threshold [d_sae] for jumprelu), F32, F16 or BF16 as stored.
 *
 * Hooks by TransformerLens's names, each a site of hooks.h:
 *   blocks.L.attn.hook_z      z of layer L flattened head-major (d_in = H dh)
 *   blocks.L.hook_resid_pre   the residual entering layer L
 *   blocks.L.hook_resid_post  the residual leaving it (resid_pre of L + 1)
 *   blocks.L.hook_attn_out    the attention's output before it is added
 *   blocks.L.hook_mlp_out     the MLP's output before it is added
 *
 * Encode: x' = x - b_dec when apply_b_dec_to_input, pre = x' W_enc + b_enc;
 * standard f = relu(pre); jumprelu f = relu(pre) 1[pre > threshold];
 * topk: the k largest of pre (ties to the lower index) relu'd, the rest 0.
 * Decode: x_hat = f W_dec + b_dec. */
#ifndef HS_SAE_H
#define HS_SAE_H

#include "hooks.h"
#include "weights.h"

typedef enum { HS_SAE_STANDARD, HS_SAE_JUMPRELU, HS_SAE_TOPK } hs_sae_arch;

typedef struct {
    char dir[512];
    char hook[128];        /* cfg.json's hook_name */
    hs_sae_arch arch;
    int d_in, d_sae, k;    /* k: topk's */
    int apply_b_dec;       /* apply_b_dec_to_input */
    hs_real *W_enc;        /* (d_in, d_sae) */
    hs_real *b_enc;        /* (d_sae) */
    hs_real *W_dec;        /* (d_sae, d_in) */
    hs_real *b_dec;        /* (d_in) */
    hs_real *threshold;    /* (d_sae), jumprelu's; NULL otherwise */
    /* W_enc's panels for the GEMM while a study encodes with it
     * (hs_sae_pack); NULL otherwise */
    struct hs_packed *enc_pk;
    /* the hook on a model (hs_sae_bind) */
    hs_site site;
    int layer;             /* the site's layer (resid_post: L + 1) */
    int hook_layer;        /* L of the hook's name */
    int z;                 /* a hook_z SAE: heads and dh below */
    int heads, dh;
} hs_sae;

const char *hs_sae_arch_name(hs_sae_arch a);

/* Reads dir's cfg.json and sae_weights.safetensors into s: every key
 * checked (HS_EFORMAT naming the file and the key: a missing or mistyped
 * one, an unknown architecture or normalisation, topk without k or with k
 * outside 1..d_sae), every tensor's shape against d_in and d_sae and every
 * value finite (naming the tensor), a jumprelu without threshold refused. */
int hs_sae_open(hs_sae *s, const char *dir);
void hs_sae_free(hs_sae *s);

/* Resolves s's hook on model configuration c: its site and layer, and
 * d_in against the hook's width (HS_EINVAL naming hook_name or d_in: a
 * hook the model lacks, a layer beyond it, an encoder-decoder); d_in 0
 * takes the width (an SAE to be trained). */
int hs_sae_bind(hs_sae *s, const hs_model_config *c);

/* Packs W_enc once into the GEMM's panels (gemm.h, hs_pack_weight; counted
 * as held), so that every encode after it skips the per-call packing: for
 * a caller that encodes many batches and leaves W_enc as it is until
 * hs_sae_unpack. HS_OK with nothing packed in the double build or on a CPU
 * without the kernel; HS_ENOMEM (the message set, s unchanged) when the
 * memory is not there. */
int hs_sae_pack(hs_sae *s);

/* Frees what hs_sae_pack made (hs_sae_free does too). */
void hs_sae_unpack(hs_sae *s);

/* The activations of n rows x (n, d_in): pre (n, d_sae) the encoder's
 * input to the activation and f (n, d_sae) the features. pre and f may not
 * alias x. HS_ENOMEM when the centred copy of x cannot be made. */
int hs_sae_encode(const hs_sae *s, const hs_real *x, long n, hs_real *pre, hs_real *f);

/* A TopK SAE's features of n rows x as sparse rows: idx and val (n, k) the
 * positive ones among each row's k largest pre-activations (ties to the
 * lower index), by index, count (n) of them; the same values as
 * hs_sae_encode's nonzeros, in one pass over each row of pre (n, d_sae,
 * scratch: without b_enc). HS_EINVAL for another architecture. */
int hs_sae_encode_topk(const hs_sae *s, const hs_real *x, long n, hs_real *pre, int32_t *idx,
                       hs_real *val, int32_t *count);

/* x_hat (n, d_in) = f W_dec + b_dec, over f's nonzero entries. */
void hs_sae_decode(const hs_sae *s, const hs_real *f, long n, hs_real *x_hat);

/* The forward's hook of s's site (hooks.h; hs_hooks.site[s->site] =
 * {hs_sae_site, &hook}): at s's layer it copies the site into x (B T,
 * d_in), z flattened head-major, or with write x over the site; with stop
 * it then ends the forward (HS_EDONE: the layers after the hook, the
 * unembedding, are not needed). HS_EINVAL when the site's width is not d_in. */
typedef struct {
    const hs_sae *s;
    hs_real *x;
    int write, stop;
} hs_sae_hook;
int hs_sae_site(void *ctx, const hs_site_view *v);

/* SAELens's files for s (its cfg.json and sae_weights.safetensors in F32)
 * into dir (created if missing), each written whole under a temporary name
 * and then renamed. */
int hs_sae_save(const hs_sae *s, const char *dir);

#endif
