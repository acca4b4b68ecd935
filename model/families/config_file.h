/* config.json of every family (SPEC §3, §10, §14), presets and overrides:
 * the configuration as files and commands give it, checked against both the
 * network's rules and what the family's checkpoint layout can express. */
#ifndef HS_CONFIG_FILE_H
#define HS_CONFIG_FILE_H

#include "config.h"

/* hs_config_check_network, then the family's own rules: per-head windows
 * and MLA are the headscope family's, and a Hugging Face family's layout
 * expresses only its own architecture (uniform layers, its norms and
 * features). HS_OK or HS_EINVAL naming the field. */
int hs_config_check(const hs_model_config *c);

/* Parses config.json text of any model_type of hs_family. `path` only names the file in messages. A key that
 * would change the computation and that is not implemented is refused,
 * naming it; the bookkeeping keys of Hugging Face configs are accepted. */
int hs_config_parse(hs_model_config *c, const char *json, const char *path);

/* config.json text for c (malloc'd; NULL with HS_ENOMEM). Every family but
 * headscope is written in its Hugging Face form. */
char *hs_config_to_json(const hs_model_config *c);

/* Presets: "gpt2", "llama", "attn-only", "tinylm" (SPEC §3), "mla" (§10), small sizes that
 * overrides then change. HS_EINVAL for an unknown name. */
int hs_config_preset(hs_model_config *c, const char *name);

/* One "key=value" override of a headscope field name (the config.json keys,
 * e.g. "n_layer=4", "n_head=8", "mlp=gelu"). Sets every layer for n_head and
 * n_kv_head. `window` takes an integer or JSON text of a per-layer or
 * per-head list ("window=[[0,32],[32,0]]"). The result is checked as a config.json would be (HS_EINVAL
 * naming the override).
 *
 * Overrides commute: a derived key follows its source (n_head sets n_kv_head
 * to n_head and head_dim to d_model / n_head; d_model sets head_dim and, for
 * gpt2, d_ff = 4 d_model) only while no override has given it (c->given), so
 * "n_kv_head=1 n_head=8" and "n_head=8 n_kv_head=1" both give 8 query heads
 * sharing one key/value head. Each step must be a valid configuration:
 * n_kv_head=8 before n_head=8 on a 4-head preset is refused (give n_head
 * first there). */
int hs_config_override(hs_model_config *c, const char *key_value);

/* A preset with its "key=value" overrides applied in order: the config of
 * `train --preset P KEY=VALUE...` and of the experiments. HS_EINVAL naming
 * the preset or the override. */
int hs_config_build(hs_model_config *c, const char *preset, const char *const *overrides,
                    int n);

/* 1 when c's family has a …ForSequenceClassification SPEC §16 reads (bert,
 * roberta, gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2). */
int hs_config_classifies(const hs_model_config *c);

#endif
