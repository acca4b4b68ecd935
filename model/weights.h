/* The parameter table of a model: every tensor's name, shape and offset in
 * one allocation (llm.c's size table), and pointers into it. The optimizer,
 * gradient zeroing and checkpoint I/O are flat loops over the table; grads
 * and optimizer moments bind the same table to buffers of their own. */
#ifndef HS_WEIGHTS_H
#define HS_WEIGHTS_H

#include <stddef.h>

#include "attention.h"
#include "config.h"

typedef struct {
    hs_attn_weights attn;     /* MLA layers: only w_o, the same tensor as mla.w_o */
    hs_mla_weights mla;       /* attention "mla" layers (mla.h) */
    hs_real *ln1_w, *ln1_b;   /* (d) norm before (pre) or after (post) attention;
                                 NULL with no_input_norm */
    hs_real *ln2_w, *ln2_b;   /* (d) the MLP's norm (NULL with no_input_norm) */
    hs_real *ln_attn_w, *ln_attn_b; /* (d) out_norm: the attention output's norm */
    hs_real *ln_mlp_w, *ln_mlp_b;   /* (d) out_norm: the MLP output's norm */
    hs_real *fc_w, *fc_b;     /* gelu:   (F, d), (F) */
    hs_real *proj_w, *proj_b; /* gelu:   (d, F), (d) */
    hs_real *gate_w, *gate_b; /* swiglu: (F, d), (F) */
    hs_real *up_w, *up_b;     /* swiglu: (F, d), (F) */
    hs_real *down_w, *down_b; /* swiglu: (d, F), (d) */
    /* an encoder-decoder's decoder layers (hs_config_cross): cross-attention */
    hs_attn_weights xattn;    /* queries from the layer, keys/values from the encoder */
    hs_real *lnx_w, *lnx_b;   /* (d) its norm (before it: pre; after it: post) */
} hs_layer_weights;

typedef struct {
    hs_real *wte;          /* (V, d) */
    hs_real *wpe;          /* (n_ctx + pos_offset, d), learned positions only */
    hs_real *tte;          /* (type_vocab, d) encoders' token-type embeddings */
    hs_real *lne_w, *lne_b; /* (d) embed_norm: the embeddings' LayerNorm */
    hs_real *mlm_w, *mlm_b; /* (d, d), (d) mlm_transform: the dense layer before ln_f */
    hs_real *lnf_w, *lnf_b; /* (d) the final norm (with mlm_transform: the transform's) */
    hs_real *lm_w;         /* (V, d); equals wte when tied */
    hs_real *lm_b;         /* (V) */
    hs_real *cls_pool_w, *cls_pool_b; /* (d, d), (d) an encoder classifier's dense + tanh */
    hs_real *cls_w, *cls_b; /* (K, d), (K) the classifier (decoders' score: no bias) */
    /* encoder-decoders: the encoder's own tables (the ones above without
     * "enc" are the decoder's) and T5's relative attention biases, (buckets,
     * H) as HF stores them, one per stack */
    hs_real *enc_wpe, *enc_lne_w, *enc_lne_b, *enc_lnf_w, *enc_lnf_b;
    hs_real *enc_rel, *dec_rel;
    hs_layer_weights layer[HS_MAX_LAYERS];
} hs_weights;

typedef struct {
    char name[80]; /* headscope tensor name, e.g. "h.0.attn.q_proj.weight" */
    int ndim;
    int shape[2];
    size_t offset; /* elements from the start of the parameter buffer */
    size_t size;   /* elements */
} hs_tensor_info;

/* Tensor table of c in canonical order; *table is malloc'd. */
int hs_tensor_table(const hs_model_config *c, hs_tensor_info **table, int *n, size_t *total);

/* Points w's members at base + offset for every tensor of c. */
void hs_weights_bind(hs_weights *w, const hs_model_config *c, hs_real *base);

/* A model: configuration, table and the parameters in one allocation. */
typedef struct {
    hs_model_config cfg;
    hs_tensor_info *tensors;
    int n_tensors;
    size_t n_params;
    hs_real *params;
    hs_weights w;
    struct hs_stored *stored; /* weights as stored (stored.h); NULL: params holds them all */
} hs_model;

/* Widens every tensor of m held as stored (stored.h) into m->params, so
 * code that reads or copies the parameters element by element (pruning,
 * saving, the weight-only scores) finds them there. A float model: nothing
 * to do. Costs the float table's bytes for those tensors. */
int hs_model_widen(const hs_model *m);

/* Zeroed parameters for a checked configuration. */
int hs_model_init(hs_model *m, const hs_model_config *c);
/* Packs every matrix of m held as stored (F32 or BF16) once into the
 * GEMM's panels (stored.h, hs_stored_pack), for a command that runs many
 * forwards: its GEMMs then skip packing the weights on every call. tb 1:
 * the forwards' panels (op(B) = B^T); tb 0: the backwards' input
 * gradients' (op(B) = B; hs_model_prepack_backward). layers below m's
 * n_layer: only the matrices of layers 0 .. layers - 1 (forwards that stop
 * at a hook there: no unembedding, no later layer). Only when the panels
 * fit beside what is held with room left for the command's activations (a
 * quarter of the panels' bytes); otherwise nothing is packed and HS_ENOMEM
 * says why (the weights are read as stored, as without). *bytes: the
 * panels' bytes, *n: the matrices. A float model (trained in this
 * process), or the double build: nothing to pack, HS_OK. */
int hs_model_prepack(const hs_model *m, int layers, int tb, size_t *bytes, int *n);

/* At a backward (backward.c's entry points), once per model: where its
 * forwards' panels were packed (a command of many forwards), the input
 * gradients' too (hs_model_prepack, tb 0), now that the activations are
 * held, where they fit beside them (else read per call, silently). */
void hs_model_prepack_backward(const hs_model *m);

void hs_model_free(hs_model *m);

/* GPT-2-style initialisation from a seed: matrices N(0, 0.02) (residual
 * output projections N(0, 0.02/sqrt(2L))), biases 0, norm weights 1 (0
 * under norm_offset, whose norms scale by 1 + w: Gemma's initialisation). */
void hs_model_init_random(hs_model *m, unsigned long long seed);

/* Marks dead[l * HS_MAX_HEADS + h] = 1 for every head whose columns of the
 * output projection W_o are all exactly zero and whose output therefore
 * never reaches the residual stream: the heads of a model written by
 * `prune --out`, or the dead heads structural pruning keeps to make groups
 * equal. dead holds n_layer * HS_MAX_HEADS bytes. Returns how many. */
int hs_dead_heads(const hs_model *m, unsigned char *dead);

/* Element k of layer l's W_o, (d, H*dh) row-major, from wherever it lies. */
typedef hs_real (*hs_wo_get)(void *ctx, int l, size_t k);

/* hs_dead_heads over W_o elements read through get: a live head costs one
 * read, a dead one d * dh (how `info` reads them from the file). */
int hs_dead_heads_by(const hs_model_config *c, hs_wo_get get, void *ctx, unsigned char *dead);

/* HS_OK when the files m's weights are mapped from (hs_checkpoint_load_stored)
 * are as they were opened; else HS_EIO naming the file that changed (truncated
 * or rewritten in place) while m read it: whatever m computed since mixes two
 * versions, so a run must not be recorded complete. */
int hs_model_unchanged(const hs_model *m);

/* Index of a tensor by headscope name, or -1. */
int hs_model_find(const hs_model *m, const char *name);

#endif
