/* Transformer configuration: one structure for the model families of SPEC §3,
 * §10, §14 and §17 (gpt2, llama, headscope, gpt_neox, mistral, qwen2, gemma,
 * gemma2, gemma3_text, qwen3, olmo2, phi3, bert, roberta, t5, bart, marian),
 * read from and written to config.json. */
#ifndef HS_CONFIG_H
#define HS_CONFIG_H

#include <stddef.h>

#include "attention.h"
#include "common.h"
#include "mla.h"

enum { HS_MAX_LAYERS = 256 };

/* Classification heads: at most this many labels, names of at most
 * HS_LABEL_CHARS - 1 bytes (SPEC §16). */
enum { HS_MAX_LABELS = 64, HS_LABEL_CHARS = 48 };

/* problem_type: absent (inferred from a task's labels as HF does),
 * single_label_classification, multi_label_classification, regression. */
enum { HS_PROBLEM_UNSET, HS_PROBLEM_SINGLE, HS_PROBLEM_MULTI, HS_PROBLEM_REGRESSION };

/* The most heads one layer may have: per-head buffers of every analysis are
 * indexed [l * HS_MAX_HEADS + h]. */
enum { HS_MAX_HEADS = 1024 };

/* The most heads, over all layers, that may carry windows of their own
 * (headscope's per-head `window` lists): the config is copied by value, so
 * per-head windows live in one bounded pool, not an L x HS_MAX_HEADS table. */
enum { HS_MAX_WINDOW_HEADS = 4096 };

/* The most heads config.json's pruned_heads may name (SPEC §16). */
enum { HS_MAX_PRUNED = 4096 };

typedef enum {
    HS_FAMILY_HEADSCOPE,
    HS_FAMILY_GPT2,
    HS_FAMILY_LLAMA,
    HS_FAMILY_GPT_NEOX, /* Pythia */
    HS_FAMILY_MISTRAL,  /* llama + sliding window */
    HS_FAMILY_QWEN2,    /* llama + q/k/v biases */
    HS_FAMILY_GEMMA,    /* (1 + w) RMSNorm, sqrt(d) embeddings, GeGLU */
    HS_FAMILY_GEMMA2,   /* gemma + sublayer output norms, soft-capping, sliding layers */
    HS_FAMILY_GEMMA3,   /* gemma3_text: gemma2 + q/k norms, local RoPE base, no attn capping */
    HS_FAMILY_QWEN3,    /* llama + per-head q/k norms */
    HS_FAMILY_OLMO2,    /* sublayer output norms only, q/k norms over the projections */
    HS_FAMILY_PHI3,     /* fused qkv_proj / gate_up_proj, partial rotary */
    HS_FAMILY_BERT,     /* encoder: post-LN, token types, MLM head */
    HS_FAMILY_ROBERTA,  /* bert + positions from padding_idx + 1 */
    HS_FAMILY_T5,       /* encoder-decoder: RMS norms, relative position buckets, no scale */
    HS_FAMILY_BART,     /* encoder-decoder: post-LN, learned positions (offset 2) */
    HS_FAMILY_MARIAN,   /* bart with sinusoidal positions and no embedding norm */
    HS_FAMILY_COUNT
} hs_family;
/* SINUSOID: HF's MarianSinusoidalPositionalEmbedding, computed (no tensor):
 * row p = sin(p / 10000^(2i/d)) for i < d/2, then cos of the same angles */
typedef enum { HS_POS_LEARNED, HS_POS_ROPE, HS_POS_NONE, HS_POS_SINUSOID } hs_pos_kind;
typedef enum { HS_NORM_LAYERNORM, HS_NORM_RMSNORM } hs_norm_kind;
/* GEGLU: down(gelu(gate x) * up x), GELU by the tanh formula (gelu_pytorch_tanh)
 * or, with gelu_exact, the exact erf one; SWIGLU the same with silu. */
typedef enum { HS_MLP_NONE, HS_MLP_GELU, HS_MLP_SWIGLU, HS_MLP_GEGLU } hs_mlp_kind;
/* The activation of the ungated MLP (HS_MLP_GELU: fc, activation, proj): GELU
 * (tanh, or erf with gelu_exact), ReLU (T5 v1.0, BART's "relu") or SiLU
 * (Marian's "swish") */
typedef enum { HS_ACT_GELU, HS_ACT_RELU, HS_ACT_SILU } hs_act_kind;

typedef struct {
    hs_family family;
    int vocab_size;                /* V */
    int n_layer;                   /* L */
    int d_model;                   /* d */
    int n_head[HS_MAX_LAYERS];     /* H per layer (pruned models are uneven) */
    int n_kv_head[HS_MAX_LAYERS];  /* G per layer */
    int head_dim;                  /* dh, the same in every layer */
    int n_ctx;                     /* positions (learned table size; context limit) */
    hs_pos_kind pos;
    double rope_theta;
    hs_norm_kind norm;
    int post_norm;                 /* 0: x + f(norm(x)); 1: norm(x + f(x)) */
    int no_input_norm;             /* 1: the sublayers read the residual itself (OLMo-2):
                                      x + f(x), no ln_1 / ln_2 (pre-norm layers only) */
    int out_norm;                  /* 1: each sublayer's output is normed before it is
                                      added: x + norm_out(f(...)) (Gemma 2/3, OLMo-2) */
    int norm_offset;               /* 1: every norm scales by (1 + w) (Gemma), w as stored */
    double norm_eps;
    double init_std;               /* initializer_range: std of random weights (0.02) */
    int final_norm;                /* ln_f before the unembedding */
    hs_mlp_kind mlp;
    hs_act_kind act;               /* the ungated MLP's activation */
    int d_ff;                      /* F */
    int attn_bias, mlp_bias, norm_bias, lm_head_bias;
    int qkv_bias;                  /* q/k/v biases without attn_bias's o bias (qwen2) */
    int tie_embeddings;            /* logits use wte */
    int parallel_residual;         /* gpt_neox: x + attn(ln1(x)) + mlp(ln2(x)) */
    int gelu_exact;                /* gelu/geglu MLP: exact erf GELU (gpt_neox) instead of tanh */
    int embed_scale;               /* 1: embeddings times sqrt(d_model) rounded to hs_real
                                      (Gemma's normaliser) */
    hs_qk_norm_kind qk_norm;       /* RMSNorm of q and k before RoPE: per head (Qwen3,
                                      Gemma 3) or over the whole projection (OLMo-2) */
    double attn_scalar;            /* > 0: scores scaled by attn_scalar^-1/2 (Gemma's
                                      query_pre_attn_scalar); 0: head_dim^-1/2 */
    double attn_softcap;           /* > 0: scores c tanh(s / c) before the mask (Gemma 2) */
    double final_softcap;          /* > 0: logits c tanh(l / c) (Gemma 2) */
    int rotary_dims;               /* rotated dims per head; 0: all head_dim */
    int window;                    /* sliding window W of every head (mistral; headscope's
                                      integer `window`); 0: global. 0 with per-head windows */
    int window_pattern;            /* P > 1: only layers l with (l + 1) % P != 0 use
                                      `window`, the others are global (Gemma 2: P = 2,
                                      Gemma 3: sliding_window_pattern); 0: every layer */
    /* headscope's per-layer or per-head `window`, when the heads do not all
     * share one: 0, or sum_l n_head[l], the windows of layer 0's heads, then
     * layer 1's, ... (0 = global). hs_config_set_windows keeps this canonical:
     * never set when every head has the same window (then `window` holds it). */
    int n_head_windows;
    int head_windows[HS_MAX_WINDOW_HEADS];
    int sink;                      /* a KV plan's attention sinks (SPEC §18, kv_plan.h): every
                                      head with a window also sees keys s < sink; 0: none.
                                      Never read from or written to config.json */
    hs_rope_scaling rope_scaling;  /* llama3 / linear (llama family); zero: plain */
    double rope_local_theta;       /* > 0: the RoPE base of layers whose every head has a
                                      window, there without rope_scaling (Gemma 3's
                                      rope_local_base_freq); 0: rope_theta everywhere */
    /* attention "mla" (headscope family, every layer): DeepSeek-V2's multi-head
     * latent attention (mla.h); head_dim is then v_head_dim and n_kv_head n_head */
    int mla;
    int kv_lora_rank, q_lora_rank; /* C; Q (0: a plain q_proj) */
    int qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    /* encoders (BERT, RoBERTa: SPEC §14) */
    int encoder;                   /* 1: bidirectional attention over the keys that are not
                                      padding (a token equal to pad_id is padding), and the
                                      masked-LM loss; 0: a causal LM */
    int type_vocab;                /* token-type embedding rows; row 0 (type 0) is added at
                                      every position. 0: none */
    int embed_norm;                /* a LayerNorm of the embedding sum (BERT) */
    int mlm_transform;             /* a dense layer (d, d) and the MLP's GELU before the final
                                      norm: BERT's cls.predictions.transform */
    int headless;                  /* no language-model head, so no logits (hs_config_logits):
                                      an encoder alone (BertModel, RobertaModel,
                                      sentence-embedding models), or a task head's model */
    /* a sequence-classification head (SPEC §16; n_labels 0: none): encoders
     * pool the first token through dense + tanh (BERT's pooler, RoBERTa's
     * classifier.dense) into the classifier; decoders score the final norm's
     * output at the last token that is not padding (pad_id) */
    int n_labels;                  /* num_labels: the classifier's outputs */
    int problem;                   /* HS_PROBLEM_*: problem_type */
    char label_names[HS_MAX_LABELS][HS_LABEL_CHARS]; /* id2label's names ("" where none) */
    int pos_offset;                /* > 0: RoBERTa's positions (create_position_ids_from_
                                      input_ids): the k-th real token (k = 0, 1, ..) reads row
                                      pos_offset + k of wpe, padding row pad_id; wpe holds
                                      n_ctx + pos_offset rows. Needs pad_id = pos_offset - 1 */
    int pad_id, cls_id, sep_id, mask_id, unk_id; /* encoders' special token ids (-1: none
                                      given): config.json's pad_token_id, cls_token_id (RoBERTa:
                                      bos_token_id), sep_token_id (eos_token_id), mask_token_id,
                                      unk_token_id */
    double hidden_dropout, attn_dropout; /* encoders: as config.json gives them, written back;
                                      inference ignores them and train applies none */
    unsigned given;                /* HS_GIVEN_* keys set by hs_config_override */
    /* config.json's pruned_heads (bert, roberta, gpt2: SPEC §16): heads the
     * checkpoint's tensors do not hold, each l * HS_MAX_HEADS + h (original
     * numbering), ascending. The model keeps every head: a pruned one is
     * dead (its q, k, v rows and o columns 0), and the loader and writer
     * move between that and the file's smaller tensors (pruned.h). */
    int n_pruned;
    int pruned[HS_MAX_PRUNED];
    /* encoder-decoder models (t5, bart, marian: SPEC §17, seq2seq.h). Layers
     * 0 .. enc_layers-1 are the encoder's (bidirectional over the source's
     * real tokens), the rest the decoder's (causal), each of those with a
     * cross-attention sublayer (queries from the decoder, keys and values
     * from the encoder's output) between its self-attention and its MLP.
     * Both stacks share the embeddings, d_model, head_dim, d_ff and the
     * kinds of norm, MLP and positions; each has its own position table,
     * embedding norm and final norm. 0: one stack (every other family). */
    int enc_layers;
    int rel_buckets;               /* > 0: T5's relative attention bias, this many buckets */
    int rel_max_distance;          /* T5's relative_attention_max_distance */
    int tied_scale;                /* T5: a tied lm_head reads the decoder's output times
                                      d_model^-1/2 */
    int pos_shift;                 /* learned positions: position t reads row t + pos_shift
                                      (BART's offset 2); the tables hold n_ctx + pos_shift */
    int dec_start_id;              /* decoder_start_token_id */
    int eos_id;                    /* eos_token_id: ends every target */
} hs_model_config;

/* Keys that presets derive from others (n_kv_head from n_head, head_dim from
 * d_model / n_head, gpt2's d_ff from d_model). Once an override gives one, a
 * later override of its source no longer re-derives it. */
enum { HS_GIVEN_N_KV_HEAD = 1u << 0, HS_GIVEN_HEAD_DIM = 1u << 1, HS_GIVEN_D_FF = 1u << 2 };

/* A bound on the number of parameters c's tensors hold, computed with checked
 * arithmetic: HS_EINVAL when it (or its bytes with an optimizer's moments)
 * overflows size_t. */
int hs_config_param_count(const hs_model_config *c, size_t *n);

/* HS_OK or HS_EINVAL naming the field: every size positive, every width
 * derived from them (4 d_model, H dh, the parameter count) representable,
 * and the features' rules (MLA, windows, encoders) kept: a network
 * hs_model_init can build. What a family's file can express on top of that
 * is hs_config_check's (config_file.h). */
int hs_config_check_network(const hs_model_config *c);

/* The attention configuration of layer l. */
hs_attn_config hs_config_attn(const hs_model_config *c, int l);

/* 1 when c's family writes pruned heads as config.json's pruned_heads and
 * smaller tensors (bert, roberta, gpt2: SPEC §16). */
int hs_config_hf_pruning(const hs_model_config *c);

/* Adds head h of layer l to c->pruned (kept ascending; once). HS_EINVAL
 * when the list is full. */
int hs_config_prune_head(hs_model_config *c, int l, int h);

/* An encoder without its masked-LM head (SPEC §16): headless set, and
 * the head's transform, norm and bias gone. */
void hs_config_make_headless(hs_model_config *c);

/* HS_OK when the model computes logits; else HS_EUNSUPPORTED "a headless
 * encoder (no masked-LM head): WHAT needs the model's logits". */
int hs_config_logits(const hs_model_config *c, const char *what);

/* The window of head h of layer l (0 = global). */
int hs_config_head_window(const hs_model_config *c, int l, int h);

/* The window every head of layer l shares (0: all global), or -1 when its
 * heads differ. A layer whose heads all have a window is a local (sliding)
 * layer: rope_local_theta applies there. A decoding cache keeps a ring of W positions only for a
 * shared W > 0; a layer of mixed windows keeps every position. */
int hs_config_layer_window(const hs_model_config *c, int l);

/* Sets every head's window from w (sum_l n_head[l] entries, layer after
 * layer; 0 = global), stored compactly: one `window` when all agree, else
 * the per-head pool. HS_EINVAL for a negative window or more heads than
 * HS_MAX_WINDOW_HEADS with differing windows. Call after n_head is final. */
int hs_config_set_windows(hs_model_config *c, const int *w);

/* The MLA configuration of layer l of an attention "mla" model. */
hs_mla_config hs_config_mla(const hs_model_config *c, int l);

/* The family's model_type ("gpt2", "gemma3_text", ...; "headscope" for an
 * unknown value). */
const char *hs_family_name(hs_family f);

/* Sets the special token ids of c to -1 (none): what a fresh configuration
 * holds before a family's parser or a preset gives them. */
void hs_config_no_specials(hs_model_config *c);

/* The rows of the learned position table: n_ctx, plus RoBERTa's offset. */
static inline int hs_config_pos_rows(const hs_model_config *c)
{
    return c->n_ctx + c->pos_offset + c->pos_shift;
}

/* 1 for an encoder-decoder model (enc_layers > 0). */
static inline int hs_config_seq2seq(const hs_model_config *c)
{
    return c->enc_layers > 0;
}

/* 1 when layer l is a decoder layer of an encoder-decoder model: it has a
 * cross-attention sublayer. */
static inline int hs_config_cross(const hs_model_config *c, int l)
{
    return c->enc_layers > 0 && l >= c->enc_layers;
}

#endif
