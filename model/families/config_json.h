/* config.json's keys, read and written: the helpers every family's parser
 * and writer (model/family_*.c) is made of. The readers Each names the file and the key in
 * its error; each remembers the key as read, since a key some parser reads
 * is implemented and the check of unknown keys (config.c) leaves it alone.
 *
 * JSON null: Hugging Face configs carry null where a Python default of None
 * means something ("derive it", "no window"), and nowhere else. A null is
 * therefore refused unless the caller passes HS_CFG_NULL_DEFAULT (null is
 * the default, as None is in the HF config class); booleans of HF families
 * take HS_CFG_NULL_FALSE, since HF's modeling code tests them for truth
 * (`if config.use_parallel_residual:`) and None is false there. */
#ifndef HS_CONFIG_JSON_H
#define HS_CONFIG_JSON_H

#include <cjson/cJSON.h>

#include "config.h"

typedef struct hs_cfg_reader {
    const cJSON *root;
    const char *path;     /* names the file in messages */
    const char *seen[96]; /* keys a parser read (implemented) */
    int nseen;
} hs_cfg_reader;

enum {
    HS_CFG_REQUIRED = 1u << 0,     /* absent (or null) is an error */
    HS_CFG_NULL_DEFAULT = 1u << 1, /* null takes the default */
    HS_CFG_NULL_FALSE = 1u << 2,   /* booleans: null is false */
};

/* The value of key (NULL when absent), remembered as read. */
const cJSON *hs_cfg_lookup(hs_cfg_reader *r, const char *key);

/* 1 when some parser looked key up. */
int hs_cfg_was_read(const hs_cfg_reader *r, const char *key);

/* A non-negative integer (at most 1e9), dflt when absent. */
int hs_cfg_int(hs_cfg_reader *r, const char *key, unsigned flags, int dflt, int *out);

/* A finite number, dflt when absent. */
int hs_cfg_double(hs_cfg_reader *r, const char *key, unsigned flags, double dflt, double *out);

/* true or false, dflt when absent. */
int hs_cfg_bool(hs_cfg_reader *r, const char *key, unsigned flags, int dflt, int *out);

/* A string among names[0..n): *out its index, dflt when absent. */
int hs_cfg_choice(hs_cfg_reader *r, const char *key, const char *const *names, int n, int dflt,
                  int *out);

/* A token id (encoders' pad_token_id, ...): a non-negative integer, dflt
 * when absent, -1 (none) when null. */
int hs_cfg_token_id(hs_cfg_reader *r, const char *key, int dflt, int *out);

/* n_head / n_kv_head: one integer for every layer or a list of n_layer, each
 * in 1..HS_MAX_HEADS; a single 0 only where zero_ok. */
int hs_cfg_per_layer(hs_cfg_reader *r, const char *key, int n_layer, unsigned flags, int dflt,
                     int zero_ok, int *out);

/* n_layer read from key lies in 1..HS_MAX_LAYERS (named by key). */
int hs_cfg_layers_ok(const hs_cfg_reader *r, const char *key, int n_layer);

/* pruned_heads ({"layer": [head, ...]}, HF's form) into c->pruned, after
 * n_layer and n_head are read: null, {} or absent is none; a layer or
 * head out of range, or a head twice, is HS_EFORMAT naming the key. */
int hs_cfg_pruned_heads(hs_cfg_reader *r, hs_model_config *c);

/* Query heads share key/value heads in equal groups: H_l % G_l == 0, named
 * with the family's keys. */
int hs_cfg_check_groups(const hs_cfg_reader *r, const hs_model_config *c, const char *hkey,
                        const char *gkey);

/* hs_cfg_rope_object for a value v already in hand (a member of another
 * object), named `name` in messages. */
int hs_cfg_rope_value(hs_cfg_reader *r, const char *name, const cJSON *v, double partial,
                      double *theta, hs_rope_scaling *s);

/* A rope_scaling / rope_parameters object at key: null or absent (plain),
 * plain RoPE spelled as an object, or "linear" / "llama3"; any other type or
 * key is refused, naming it. *theta: the object's rope_theta (0: none);
 * partial: the rotary fraction the family implies. */
int hs_cfg_rope_object(hs_cfg_reader *r, const char *key, double partial, double *theta,
                       hs_rope_scaling *s);

/* RoPE of the HF families: the base (theta_key at the top level, or inside
 * rope_parameters / rope_scaling; where two are given they must agree, dflt
 * when none is) and the scaling of either object. */
int hs_cfg_rope(hs_cfg_reader *r, const char *theta_key, double dflt, double partial,
                hs_model_config *c);

/* The sizes every Hugging Face family after GPT-2 spells the same way:
 * hidden_size, num_hidden_layers, vocab_size, intermediate_size,
 * max_position_embeddings, initializer_range. */
int hs_cfg_hf_sizes(hs_cfg_reader *r, hs_model_config *c);

/* A Hugging Face config class's defaults (its __init__'s) for the keys of
 * hs_cfg_hf_decoder, taken where config.json leaves a key out (SPEC §14). */
typedef struct {
    int vocab_size, hidden_size, intermediate_size, num_hidden_layers, max_position_embeddings;
    int num_attention_heads;
    int num_key_value_heads; /* 0: num_attention_heads (HF's None) */
    int head_dim;            /* 0: hidden_size / num_attention_heads (HF's None) */
    double rms_norm_eps, rope_theta;
    int tie_word_embeddings;
} hs_hf_defaults;

/* The keys a Llama-like decoder's config (gemma, qwen3, olmo2, phi3) spells
 * the same way, each from d where absent: the sizes above,
 * num_attention_heads, num_key_value_heads (null: num_attention_heads),
 * head_dim (null: hidden_size / num_attention_heads), rms_norm_eps,
 * tie_word_embeddings. Sets RoPE positions, RMSNorm and the final norm; the
 * family reads its RoPE keys (hs_cfg_rope, with the rotary fraction and
 * defaults it implies), its MLP and the rest. */
int hs_cfg_hf_decoder(hs_cfg_reader *r, hs_model_config *c, const hs_hf_defaults *d);

/* head_dim after num_attention_heads: absent, dflt (0: derived); null,
 * derived as HF's None is, hidden_size / num_attention_heads, which must
 * then divide. */
int hs_cfg_head_dim(hs_cfg_reader *r, hs_model_config *c, int dflt);

/* ---- writing ---- */

/* key as one number when every layer has the same v[l], else a list. */
void hs_cfg_add_per_layer(cJSON *o, const char *key, const hs_model_config *c, const int *v);

/* c->pruned as config.json's pruned_heads ({"layer": [heads]}), when any. */
void hs_cfg_add_pruned_heads(cJSON *o, const hs_model_config *c);

/* key: id, or null for -1 (none). */
void hs_cfg_add_token_id(cJSON *o, const char *key, int id);

/* rope_scaling as Hugging Face writes it (nothing for plain RoPE). */
void hs_cfg_add_rope_scaling(cJSON *o, const hs_rope_scaling *s);

/* The keys of hs_cfg_hf_sizes, and "architectures": [arch]. */
void hs_cfg_add_hf_sizes(cJSON *o, const hs_model_config *c, const char *arch);

/* A Llama-style decoder's: hs_cfg_add_hf_sizes, num_attention_heads,
 * num_key_value_heads, head_dim, rms_norm_eps, rope_theta, rope_scaling. */
void hs_cfg_add_hf_decoder(cJSON *o, const hs_model_config *c, const char *arch);

#endif
