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

/* The file that stands for DIR's weights, which a run hashes (runs'
 * model_sha256): the one hs_checkpoint_load reads, or its shards' index --
 * DIR/model.safetensors, model.safetensors.index.json, pytorch_model.bin or
 * pytorch_model.bin.index.json (model.safetensors when DIR has none). */
void hs_checkpoint_file(const char *dir, char *out, size_t n);

/* Loads DIR into m (initialised here; free with hs_model_free). A
 * model.safetensors in DIR is read in preference to a shard index. */
int hs_checkpoint_load(hs_model *m, const char *dir);

/* Where hs_checkpoint_load_stored keeps the matrices whose layout is the
 * files'. MAPPED: in place in the mapped files -- nothing read at load,
 * the page cache's pages shared; the right place for a forward over many
 * tokens, whose GEMMs pack each weight once per call. COPIED: read into
 * 2 MiB pages of the model's own -- a load that reads (and the kernel
 * zeroes) every byte first, then decoding's one pass over the weights per
 * token runs without the 4 KiB pages' TLB misses (docs/perf.md, "Weights
 * as stored": 1.6 against 0.58 tokens/s on the 8B shape). DECODING: what
 * generation wants: COPIED for a one-stack decoder, MAPPED for an
 * encoder-decoder, whose steps read the decoder's half of the weights and
 * whose answers are short, so that the copy costs more than it saves (t5-small's
 * shape, 64 new tokens: 1.2 s against 0.52 s, docs/perf.md). */
typedef enum { HS_WEIGHTS_MAPPED, HS_WEIGHTS_COPIED, HS_WEIGHTS_DECODING } hs_weights_place;

/* hs_checkpoint_load with the weights as stored (SPEC §13, stored.h): the
 * matrices in the files' dtype, placed as `place` says (the files stay
 * mapped until hs_model_free); the rest (norms, biases, position tables) as
 * floats. For every command but training (which keeps a float master
 * copy: hs_checkpoint_load). The double build, and HEADSCOPE_WEIGHTS=float
 * (a check's switch), load floats; HEADSCOPE_WEIGHTS=mapped or copied
 * overrides `place`. */
int hs_checkpoint_load_stored(hs_model *m, const char *dir, hs_weights_place place);

/* The parameters' bytes: in the files, and as hs_checkpoint_load_stored
 * holds them (what its memory plan counts); packed: the matrices' panels
 * that commands of many forwards add (hs_model_prepack; 0 in the double
 * build). */
typedef struct {
    size_t stored, loaded, packed;
} hs_checkpoint_bytes;

/* What `info` reads (SPEC §13: headers only): m's configuration, table and
 * n_params, every tensor checked against the files' headers as
 * hs_checkpoint_load checks them, and no parameters (m->params NULL; free
 * with hs_model_free). dead (n_layer * HS_MAX_HEADS bytes) and *n_dead as
 * hs_dead_heads gives them, from W_o's elements read in place: one read a
 * live head; *bytes the parameters' bytes. */
int hs_checkpoint_probe(hs_model *m, const char *dir, unsigned char *dead, int *n_dead,
                        hs_checkpoint_bytes *bytes);

/* Writes m into DIR (created if missing): config.json and model.safetensors,
 * each written under a temporary name and renamed. */
int hs_checkpoint_save(const hs_model *m, const char *dir);

/* `convert --to safetensors` (SPEC §20): every tensor of DIR's files
 * (safetensors, or else pytorch_model.bin, read as hs_checkpoint_load reads
 * them and checked as it checks them) written with the same name, dtype and
 * bytes into OUT/model.safetensors -- past max_shard bytes into
 * model-0000K-of-0000N.safetensors and model.safetensors.index.json, as
 * transformers' save_pretrained shards -- then DIR's tokenizer files, and
 * config.json last (each file under a temporary name, renamed). OUT is
 * created; OUT = DIR is refused. *n_tensors, *n_shards: what was written. */
int hs_checkpoint_convert(const char *dir, const char *out, size_t max_shard, int *n_tensors,
                          int *n_shards);

/* `convert --kv-heads G`: DIR's model with its key/value heads mean-pooled
 * into G per layer (hs_convert_kv_heads, convert.h) saved into OUT
 * (hs_checkpoint_save); *done says what was written. */
typedef struct {
    hs_family family; /* of the written model */
    int mean_of;      /* old heads per new head (layer 0) */
    size_t params_was, params_now;
} hs_kv_conversion;

int hs_checkpoint_convert_kv_heads(const char *dir, const char *out, int G,
                                   hs_kv_conversion *done);

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
