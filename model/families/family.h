/* A model family: what differs between GPT-2, Llama, GPT-NeoX, ... is one
 * record of this kind, defined with everything it needs in one file,
 * model/family_NAME.c: how its config.json is read and written, which of its
 * keys the family refuses, which architectures its checkpoint can express,
 * how its tensors are named (and fused) in the file, and its presets.
 *
 * Adding a family: an enumerator in config.h (hs_family), the file
 * model/family_NAME.c defining `const hs_family_ops hs_family_NAME`, its line
 * in the table of family.c, and its test. The computation itself is
 * described by hs_model_config's fields (norm kind, positions, MLP, ...), so
 * a family that combines existing features adds no kernel. */
#ifndef HS_FAMILY_H
#define HS_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "config_json.h"
#include "weights.h"

/* A tensor as the file stores it, filled from one to three of our tensors.
 * Part p covers file columns [col0, col0 + rows of ours): with transpose,
 * file[i][col0 + o] = ours[o][i] (GPT-2's Conv1D stores [in, out]);
 * otherwise row o of ours is file row hs_file_row(f, p, o): col0 + o, or
 * with group > 0, (o / group) * 3 group + col0 + o % group -- GPT-NeoX's
 * fused query_key_value, whose rows hold q, k, v of head 0, then of head 1,
 * ... (group = dh, col0 = 0, dh, 2 dh). 1-D parts index the same way. */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[2];
    int nparts;
    struct {
        int tensor; /* index into the model's table */
        int transpose;
        int col0;
        int group;
    } part[3];
} hs_file_tensor;

/* The file row of row o of a non-transposed part. */
static inline size_t hs_file_row(const hs_file_tensor *f, int p, size_t o)
{
    const size_t g = (size_t)f->part[p].group, c0 = (size_t)f->part[p].col0;
    return g ? o / g * 3 * g + c0 + o % g : c0 + o;
}

/* A key the family refuses unless its value is the one implemented. */
typedef enum {
    HS_ALLOW_NULL,  /* null (or absent) only */
    HS_ALLOW_FALSE, /* false only */
    HS_ALLOW_TRUE,  /* true only */
    HS_ALLOW_ONE,   /* the number 1 only */
    HS_ALLOW_EMPTY, /* null, {} or [] */
    HS_ALLOW_FULL,  /* a list of "full_attention" */
} hs_allowed;

typedef struct {
    const char *key;
    hs_allowed ok;
    const char *what; /* what a different value asks for */
} hs_key_rule;

/* A preset of `train --preset NAME`: applied to config.c's base (2 layers,
 * d_model 64, 4 heads, byte vocabulary); *H and *G are the heads and
 * key/value heads of every layer. */
typedef struct {
    const char *name;
    void (*apply)(hs_model_config *c, int *H, int *G);
} hs_preset;

/* What the presets of the Llama-like families share: RoPE, RMSNorm without
 * bias, a SwiGLU MLP of 172 (the base's d_model 64 by Llama's 8/3, rounded
 * up to a multiple of 4), untied embeddings. */
void hs_preset_rmsnorm_swiglu(hs_model_config *c);

typedef struct {
    hs_family id;
    const char *model_type; /* config.json's "model_type" */
    const char *title;      /* "GPT-2", in messages */
    /* Reads the family's keys into c (c->family is set); HS_EFORMAT naming
     * the key on a bad or unimplemented value. */
    int (*parse)(hs_model_config *c, hs_cfg_reader *r);
    /* Adds the family's keys to o (model_type is there already). */
    void (*write)(cJSON *o, const hs_model_config *c);
    /* 1 when c is an architecture the family's checkpoint can express
     * (before the common checks of uniform layers: config.c). */
    int (*fits)(const hs_model_config *c);
    /* The file's name (and fusion) of our tensor i, named `rest` within
     * layer `layer` ("attn.q_proj.weight"; layer -1: outside the layers);
     * f starts as our own name and shape. Returns 1 for a tensor the file
     * holds inside another one (then f is not written). NULL: our names. */
    int (*layout)(const hs_model *m, hs_file_tensor *f, int i, int layer, const char *rest);
    const char *alt_prefix; /* also accepted before each name when reading, or NULL */
    /* Other spellings of a file tensor's name accepted when reading: the
     * k-th (k < n_alt) into out, returning 0 when name has no k-th one
     * (BERT's unprefixed names, LayerNorm.gamma / .beta). NULL: none. */
    int (*alt_name)(const char *name, int k, char *out, size_t n);
    int n_alt;
    /* Refused keys of this family (beside config.c's rules for every
     * Hugging Face family); a key the parser reads never reaches them. */
    const hs_key_rule *rules;
    int nrules;
    const hs_preset *presets;
    int npresets;
    /* 1: the family's config.json can express windows per layer (Gemma's
     * layer_types), which hs_model_config holds in its per-head pool */
    int layer_windows;
} hs_family_ops;

/* The record of family f (NULL outside hs_family). */
const hs_family_ops *hs_family_ops_of(hs_family f);

/* The record whose model_type is `type`, or NULL. */
const hs_family_ops *hs_family_by_type(const char *type);

/* "gpt2, llama, ... or headscope": every model_type, for messages. */
const char *hs_family_types(void);

/* hs_model_find of the name fmt formats with layer l ("h.%d.attn.k_proj.weight"). */
int hs_family_find(const hs_model *m, const char *fmt, int l);

/* 1 when c uses none of the features that only the families of SPEC §14
 * (and headscope) express -- (1 + w) norms, the embedding scale, GeGLU,
 * q/k norms, sublayer output norms or no input norms, a score scalar,
 * soft-capping, windows by layer pattern, a local RoPE base, an encoder: what the
 * families before them require in fits(), so that a model with such a
 * feature is never written in a layout that would drop it. */
static inline int hs_family_plain(const hs_model_config *c)
{
    return !c->norm_offset && !c->embed_scale && !c->no_input_norm && !c->out_norm &&
           c->qk_norm == HS_QK_NORM_NONE && !(c->attn_scalar > 0) && !(c->attn_softcap > 0) &&
           !(c->final_softcap > 0) && !c->window_pattern && !(c->rope_local_theta > 0) &&
           c->mlp != HS_MLP_GEGLU && !c->n_head_windows && !c->encoder;
}

/* The Llama layout of our tensor i (family_llama.c), which the decoders
 * after it share: model.embed_tokens, model.layers.{l}.input_layernorm,
 * self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm
 * (the MLP's input norm, or with out_norm the attention output's norm, the
 * MLP's input norm then being pre_feedforward_layernorm),
 * post_feedforward_layernorm, mlp.*, model.norm, lm_head. */
int hs_family_llama_layout(const hs_model *m, hs_file_tensor *f, int i, int layer,
                           const char *rest);

/* For `override` (config.c): adds to o, the headscope JSON of a model, the
 * value meaning "off" of an optional headscope key that o lacks because the
 * writer leaves such keys out when unused (window 0, qkv_bias false, ...),
 * so that overriding it works like any other key. Nothing for other keys. */
void hs_headscope_add_default(cJSON *o, const char *key);

#endif
