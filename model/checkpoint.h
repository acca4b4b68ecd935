/* Checkpoints in the Hugging Face layout: DIR/config.json and
 * DIR/model.safetensors -- or, for a sharded checkpoint,
 * DIR/model.safetensors.index.json whose "weight_map" names the shard file
 * of every tensor -- for every model_type of hs_family (SPEC §3, §10, §14).
 * Loading maps every file, validates every
 * tensor against the configuration and converts F32/F16/BF16 into the
 * model's one parameter allocation, releasing each tensor's pages once
 * copied. Saving writes one F32 model.safetensors in the family's own names
 * and layout (GPT-2's fused Conv1D c_attn, GPT-NeoX's per-head
 * interleaved query_key_value and Phi-3's fused qkv_proj / gate_up_proj
 * included). */
#ifndef HS_CHECKPOINT_H
#define HS_CHECKPOINT_H

#include "weights.h"

/* Reads DIR/config.json into c. */
int hs_config_load(hs_model_config *c, const char *dir);

/* Loads DIR into m (initialised here; free with hs_model_free). A
 * model.safetensors in DIR is read in preference to a shard index. */
int hs_checkpoint_load(hs_model *m, const char *dir);

/* What `info` reads (SPEC §13: headers only): m's configuration, table and
 * n_params, every tensor checked against the files' headers as
 * hs_checkpoint_load checks them, and no parameters (m->params NULL; free
 * with hs_model_free). dead (n_layer * HS_MAX_HEADS bytes) and *n_dead as
 * hs_dead_heads gives them, from W_o's elements read in place: one read a
 * live head; *stored the bytes of the tensors in the files. */
int hs_checkpoint_probe(hs_model *m, const char *dir, unsigned char *dead, int *n_dead,
                        size_t *stored);

/* Writes m into DIR (created if missing): config.json and model.safetensors,
 * each written under a temporary name and renamed. */
int hs_checkpoint_save(const hs_model *m, const char *dir);

/* The tensor named file_name as model.safetensors stores it (Hugging Face
 * name and layout of m's family, e.g. GPT-2's fused c_attn), into out
 * (capacity cap elements); *n gets the element count. HS_EINVAL when the
 * family's files have no such tensor. Used to compare against references
 * and to export gradients bound like parameters. */
int hs_checkpoint_export(const hs_model *m, const char *file_name, double *out, size_t cap,
                         size_t *n);

/* Reads a whole small text file (config.json) of at most limit bytes into
 * *out (malloc'd, NUL-terminated). The status, *out NULL and the message
 * naming the file when it cannot be read (HS_EIO), is larger or holds a NUL
 * byte (HS_EFORMAT, naming its offset). */
int hs_read_text(char **out, const char *path, size_t limit);

#endif
