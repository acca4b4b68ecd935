/* The library as one flat interface for foreign callers: Python's ctypes
 * (python/headscope), or any FFI. Opaque handles, plain C types and buffers
 * the caller owns; no struct to mirror on the other side. Results of the
 * studies and of the index come back as JSON text (numbers with 17
 * significant digits, so every double reads back exactly; NaN as null, the
 * infinities as 1e999 and -1e999), freed with hs_api_free.
 *
 * Every function that can fail returns an hs_status (HS_OK = 0) with the
 * message in hs_last_error() (common.h); nothing here exits or prints. The
 * handles are not shared between threads: one forward (hs_api_forward) is
 * used by one thread at a time; models, tokenizers, token and prompt
 * handles are read-only once made and may be shared.
 *
 * The layer above everything but the command (model -> ... -> render ->
 * api -> cli): it calls each layer's public functions only. */
#ifndef HS_API_H
#define HS_API_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "hooks.h"
#include "index.h"
#include "tokenizer.h"
#include "weights.h"

/* ---- build --------------------------------------------------------------- */

/* HS_VERSION, and sizeof(hs_real): 4 in the float build, 8 in the double one. */
const char *hs_api_version(void);
int hs_api_real_bytes(void);

/* Frees what a function below returned as malloc'd (JSON texts, ids, strings). */
void hs_api_free(void *p);

/* The sites a forward can record or hook: the hook sites of model/hooks.h
 * (0 .. HS_N_SITES-1), then HS_API_SITE_FINAL, the final norm's output
 * (B,T,d): what the unembedding reads (models with a final norm). A caller
 * finds each by its name: hs_api_site_name(i) for i < hs_api_site_count(). */
enum { HS_API_SITE_FINAL = HS_N_SITES };
int hs_api_site_count(void);
const char *hs_api_site_name(int site); /* "resid_pre", ... "attn_scores", "final"; NULL */

/* ---- models -------------------------------------------------------------- */

/* A checkpoint directory of any family (hs_checkpoint_load). */
int hs_api_model_open(hs_model **m, const char *dir);

/* A model of a preset with "key=value" overrides (hs_config_build: the
 * model of `headscope train --preset P KEY=VALUE...`), randomly initialised
 * from seed (hs_model_init_random). */
int hs_api_model_new(hs_model **m, const char *preset, const char *const *overrides, int n,
                     unsigned long long seed);

/* Writes DIR/config.json and DIR/model.safetensors (hs_checkpoint_save). */
int hs_api_model_save(const hs_model *m, const char *dir);
void hs_api_model_free(hs_model *m);

/* config.json text of the model (hs_config_to_json; malloc'd, NULL with
 * HS_ENOMEM). */
char *hs_api_model_config(const hs_model *m);

/* One number of the configuration by name into *v: n_layer, d_model,
 * head_dim, vocab_size, n_ctx, d_ff, final_norm, post_norm,
 * parallel_residual, embed_scale, mla, qk_nope_head_dim, qk_rope_head_dim,
 * n_params, learned_positions (1 with a learned position table),
 * rotary (1 when q and k are rotated), mlp (0 none, 1 gelu, 2 swiglu, 3
 * geglu), n_labels (a sequence classifier's outputs; 0: none),
 * enc_layers (an encoder-decoder's encoder layers, the first of n_layer;
 * 0: one stack), pad_id, decoder_start_id. HS_EINVAL naming an unknown key. */
int hs_api_model_int(const hs_model *m, const char *key, long long *v);

/* "gpt2", "llama", ... (hs_family_name). */
const char *hs_api_model_family(const hs_model *m);

/* Query and key/value heads of layer l. */
int hs_api_model_heads(const hs_model *m, int layer, int *H, int *G);

/* The model's parameter tensors, in the order of its table: tensor i's
 * headscope name, its data (writable: the model's own storage), its rank
 * and shape. */
int hs_api_model_tensor_count(const hs_model *m);
int hs_api_model_tensor(const hs_model *m, int i, const char **name, hs_real **data, int *ndim,
                        int *rows, int *cols);

/* The shape of site `site` of `layer` in a forward of B x T tokens, as four
 * extents of its contiguous layout: (B, T, heads, width) for every site but
 * the maps, (B, H, T, T) for pattern and attn_scores (memory order). resid_pre
 * has layers 0..n_layer (n_layer: after the last layer); the final site
 * layer 0 only. HS_EINVAL naming what the model lacks (mlp_out without an
 * MLP, k and v of an MLA model, final without a final norm). */
int hs_api_site_shape(const hs_model *m, int site, int layer, int B, int T, int shape[4]);

/* An encoder-decoder's forward (SPEC §17) of B pairs: src (B,S) padded
 * with pad_token_id (masked), dec (B,T) the decoder inputs. logits (B,T,V)
 * (NULL: not kept); with targets (B,T) (NULL: none; HS_TARGET_IGNORE, -1,
 * left out) losses (B,T) (NULL: not kept) and *loss their mean. n_rec
 * records of the forward's activations, each into dst[i] (n[i] elements,
 * its shape's): attention type attn[i] (1 encoder self, 2 decoder self, 3
 * cross), layer[i] within its stack, site[i] one of HS_SITE_Q, K, V, Z
 * ((B, rows, heads, dh); cross keys and values span the source) and
 * PATTERN ((B, H, rows, keys)). HS_EINVAL naming a record that does not
 * exist or whose size differs, or a one-stack model. */
int hs_api_s2s_forward(const hs_model *m, const int32_t *src, int S, const int32_t *dec, int T,
                       int B, const int32_t *targets, hs_real *logits, hs_real *losses,
                       double *loss, const int *attn, const int *layer, const int *site,
                       hs_real *const *dst, const size_t *n, int n_rec);

/* ---- tokens and prompts -------------------------------------------------------- */

/* Token ids a study reads (SPEC §4's batches): a shard read from path, or
 * n ids the caller holds (borrowed: they must outlive the handle). */
typedef struct hs_api_tokens hs_api_tokens;
int hs_api_tokens_read(hs_api_tokens **t, const char *path);
int hs_api_tokens_wrap(hs_api_tokens **t, const int32_t *ids, size_t n);
size_t hs_api_tokens_count(const hs_api_tokens *t);
const int32_t *hs_api_tokens_ids(const hs_api_tokens *t);
void hs_api_tokens_free(hs_api_tokens *t);

/* Writes ids as a shard (version 1 when every id fits uint16, else 7). */
int hs_api_tokens_write(const char *path, const int32_t *ids, size_t n);

/* Clean/corrupt prompt pairs (SPEC §11): a prompts file, loaded as the
 * patch command loads it (hs_causal_prompts_load: text lines encoded by
 * `tokenizer`, or NULL: the model directory's), or pairs added one by one
 * (ids; grouped by length in the order added, line = the pair's number
 * from 1). */
typedef struct hs_api_prompts hs_api_prompts;
int hs_api_prompts_load(hs_api_prompts **p, const char *path, const char *tokenizer,
                        const char *model_dir, const hs_model *m);
int hs_api_prompts_new(hs_api_prompts **p);
int hs_api_prompts_add(hs_api_prompts *p, const int32_t *clean, const int32_t *corrupt, int T,
                       int answer, int wrong);
int hs_api_prompts_count(const hs_api_prompts *p);
void hs_api_prompts_free(hs_api_prompts *p);

/* ---- hooked forwards ------------------------------------------------------------ */

/* A forward's activations (kept between calls, a set for forwards with maps
 * and one for those without, each reallocated when B grows or T changes)
 * and what the next forwards record and call at each site. */
typedef struct hs_api_forward hs_api_forward;

/* A hook of site `site` of `layer`: x is the site's tensor in the layout of
 * hs_api_site_shape (B, T, heads, width; pattern and attn_scores B, heads,
 * T, width), writable: the forward goes on with what the hook leaves.
 * Non-zero stops the forward, which returns that status. */
typedef int (*hs_api_hook_fn)(void *ctx, int site, int layer, hs_real *x, int B, int T,
                              int heads, int width);

int hs_api_forward_new(hs_api_forward **f, const hs_model *m);
void hs_api_forward_free(hs_api_forward *f);

/* Drops every record and hook (the activations stay allocated). */
void hs_api_forward_clear(hs_api_forward *f);

/* At each later forward, copies site `site` of `layer` into dst (n
 * elements: the whole tensor of hs_api_site_shape), after the hooks of that
 * site: what the forward went on with. Patterns are copied from the maps
 * observer, which leaves the attention kernel in one pass. */
int hs_api_forward_record(hs_api_forward *f, int site, int layer, hs_real *dst, size_t n);

/* Calls fn at site `site` of `layer` at each later forward; several hooks
 * of one site run in the order they were added. */
int hs_api_forward_hook(hs_api_forward *f, int site, int layer, hs_api_hook_fn fn, void *ctx);

/* Forward of ids (B,T). logits (NULL: not wanted): (B,T,V), written by the
 * unembedding itself. targets (NULL: none): the per-position losses into
 * losses (B,T; NULL: not wanted) and their mean into *loss (NULL: not
 * wanted), the model's own cross-entropy. A hook of the final site runs
 * after the forward, and the logits (and losses) are then recomputed from
 * what it leaves, by the unembedding the forward uses. The status of the
 * forward or of the first hook that stopped it. */
int hs_api_forward_run(hs_api_forward *f, const int32_t *ids, int B, int T,
                       const int32_t *targets, hs_real *logits, hs_real *losses, double *loss);

/* ---- sparse autoencoders (SPEC §19) ----------------------------------------------- */

/* An SAE directory in SAELens's format (hs_sae_open: cfg.json and
 * sae_weights.safetensors, every key and tensor checked, HS_EFORMAT or
 * HS_EIO naming the file). Read-only once opened but for hs_api_sae_bind;
 * encode and decode may run on several threads at once. */
typedef struct hs_api_sae hs_api_sae;
int hs_api_sae_open(hs_api_sae **s, const char *dir);
void hs_api_sae_free(hs_api_sae *s);

/* The directory as given, cfg.json's hook_name, and "standard",
 * "jumprelu" or "topk". */
const char *hs_api_sae_dir(const hs_api_sae *s);
const char *hs_api_sae_hook(const hs_api_sae *s);
const char *hs_api_sae_architecture(const hs_api_sae *s);

/* One number of the configuration by name into *v: d_in, d_sae, k (topk's;
 * 0 for the others), apply_b_dec_to_input (0 or 1). HS_EINVAL naming an
 * unknown key. */
int hs_api_sae_int(const hs_api_sae *s, const char *key, long long *v);

/* Tensor `name` (W_enc (d_in, d_sae), W_dec (d_sae, d_in), b_enc (d_sae),
 * b_dec (d_in), threshold (d_sae), jumprelu's) in the build's precision:
 * the handle's own storage (read it, do not write it), its rows and cols
 * (0: a vector of rows). HS_EINVAL naming an unknown name, or threshold of
 * an SAE without one. */
int hs_api_sae_tensor(const hs_api_sae *s, const char *name, const hs_real **data, int *rows,
                      int *cols);

/* The hook of s on m (hs_sae_bind): its site of hooks.h and layer
 * (blocks.L.hook_resid_post: resid_pre of L + 1). HS_EINVAL naming
 * hook_name or d_in when m has no such hook or it is not d_in wide. */
int hs_api_sae_bind(hs_api_sae *s, const hs_model *m, int *site, int *layer);

/* n rows x (n, d_in): pre (n, d_sae) the encoder's output before the
 * activation, f (n, d_sae) the features (hs_sae_encode); pre and f may not
 * alias x. x_hat (n, d_in) = f W_dec + b_dec. */
int hs_api_sae_encode(const hs_api_sae *s, const hs_real *x, long n, hs_real *pre, hs_real *f);
int hs_api_sae_decode(const hs_api_sae *s, const hs_real *f, long n, hs_real *x_hat);

/* ---- studies --------------------------------------------------------------------- */

/* What a study runs with besides its options: the index it records into (a
 * run of the study's kind with its provenance, as the command records it;
 * db NULL: nothing is recorded), the model's directory (provenance; text
 * prompts' tokenizer), the command line recorded as runs.args, a stop flag
 * (set from another thread: the study returns HS_EINTR) and whether
 * non-finite results are kept. */
typedef struct hs_api_env hs_api_env;

/* ---- labelled tasks (SPEC §16) ---- */

/* A task file read for m as `--task` reads it: the tokenizer at `tokenizer`
 * (NULL: model_dir's, if any), seq_len 0: min(n_ctx, 256), truncate,
 * label_map "i0,i1,..." and metric (the headline) or NULL. */
typedef struct hs_api_task hs_api_task;
int hs_api_task_load(hs_api_task **t, const hs_model *m, const char *model_dir, const char *path,
                     const char *tokenizer, int seq_len, int truncate, const char *label_map,
                     const char *metric);
void hs_api_task_free(hs_api_task *t);
int hs_api_task_count(const hs_api_task *t);

/* `eval --task --json`'s object: task_loss, task_loss_stderr, each metric
 * and <metric>_stderr, metric (the headline), n. */
int hs_api_eval_task(char **json, const hs_model *m, const hs_api_task *t, int batch);

/* A sequence classifier's outputs out (B, n_labels) on ids (B, T), the
 * positions where mask (B, T; NULL: none) is 0 taken as padding (the
 * model's pad_token_id: an encoder's masked keys, a decoder's pooled token
 * the last that is not padding). */
int hs_api_classify(const hs_model *m, const int32_t *ids, const unsigned char *mask, int B, int T,
                    hs_real *out);

/* predict (SPEC §21): the k most likely next ids after ids (n), most
 * likely first (ties: the lower id), their logits and probabilities. */
int hs_api_predict_top(const hs_model *m, const int32_t *ids, int n, int k, int32_t *top_ids,
                       double *logits, double *probs);

/* The studies below run on t instead of their token data (data NULL). */
void hs_api_env_task(hs_api_env *e, const hs_api_task *t);
int hs_api_env_new(hs_api_env **e);
void hs_api_env_free(hs_api_env *e);
int hs_api_env_record(hs_api_env *e, const char *db, const char *model_dir, int argc,
                      const char *const *argv);
void hs_api_env_stop(hs_api_env *e, volatile sig_atomic_t *stop);
void hs_api_env_allow_nonfinite(hs_api_env *e, int allow);
/* patch and atp (SPEC §21): record the numbers of a prompt set whose gap is
 * within two standard errors of 0 (premise_ok 0) instead of failing. */
void hs_api_env_allow_weak_premise(hs_api_env *e, int allow);

/* Each study writes its results into *json (malloc'd):
 *   {"run_id": N (0 without an index),
 *    "rows": [[layer, head, metric, value, stderr, n], ...]   (head_metrics),
 *    "positions": [[layer, position, metric, value, stderr, n], ...],
 *    "curves": {name: [[step, x, y], ...]},
 *    "scalars": {name: number}, "texts": {name: string}}
 * (members a study has nothing for are empty). The options are those of the
 * command of the same name (docs/commands/), with 0 or NULL for a default. */

/* ablate: method "zero,mean,resample" (NULL: zero), layers "L,L" and heads
 * "H,H" (NULL: all); scalars clean_loss. */
int hs_api_ablate(char **json, const hs_model *m, const hs_api_tokens *data, const hs_api_env *e,
                  int B, int T, long long max_batches, const char *method, const char *layers,
                  const char *heads, int naive);

/* importance: scalars sequences. */
int hs_api_importance(char **json, const hs_model *m, const hs_api_tokens *data,
                      const hs_api_env *e, int B, int T, long long max_batches);

/* prune: method "importance" (NULL) with step_percent, max_percent,
 * min_heads_per_layer, one_shot (curves pruning and, on a task,
 * pruning_<metric>; rows pruned), or "l0" on a task with one lambda, steps,
 * lr and seed (rows l0_gate, l0_log_alpha, l0_heads_open and the task's
 * numbers; curve l0); scalars n_pruned, heads. */
int hs_api_prune(char **json, const hs_model *m, const hs_api_tokens *data, const hs_api_env *e,
                 int B, int T, long long max_batches, double step_percent, double max_percent,
                 int min_heads_per_layer, int one_shot, const char *method, double lambda,
                 int steps, double lr, long long seed);

/* patch: sites "z,pattern,resid_pre,attn_out,mlp_out" (NULL: patch's
 * default); scalars logit_diff_clean, logit_diff_corrupt, prompts. */
int hs_api_patch(char **json, const hs_model *m, hs_api_prompts *ps, const hs_api_env *e,
                 const char *sites, int noising, int batch, int naive);

/* atp: sites "z,pattern,q,k,v,resid_pre,attn_out,mlp_out" (NULL: atp's
 * default), star (AtP*), verify K (exact patch of the top K heads); scalars
 * logit_diff_clean, logit_diff_corrupt, prompts. */
int hs_api_atp(char **json, const hs_model *m, hs_api_prompts *ps, const hs_api_env *e,
               const char *sites, int noising, int star, int verify, int batch);

/* dla: scalars logit_diff, max_gap, max_gap_line; per-prompt parts as the
 * curve-less member "parts": {"terms": [[layer, head, metric], ...],
 * "values": [[...], ...] (prompts x terms), "logit_diff": [...]}. */
int hs_api_dla(char **json, const hs_model *m, hs_api_prompts *ps, const hs_api_env *e,
               int batch);

/* induction (the study of `headscope induction`: scores of the model and of
 * its random-init control, copying, the causal check and the verdict);
 * scalars established, best_layer, best_head, best, best_control,
 * causal_clean, causal_targeted, causal_targeted_stderr, causal_random_mean,
 * causal_random_std, causal_beats, causal_k; curve causal_random_k. */
int hs_api_induction(char **json, const hs_model *m, const hs_api_env *e, int seq_len,
                     int samples, int batch, unsigned long long seed, int causal_k,
                     int random_draws, double min_score);

/* capture: the maps of the selection into the HDF5 file out (written whole
 * under a temporary name, then renamed); model_dir of e is required (the
 * file's provenance), tokenizer (NULL: none) adds the token strings.
 * Tokens the caller holds are recorded with data_path "(memory)" and the
 * sha256 of their int32 bytes. scalars sequences, seconds, bytes; texts
 * path, sha256. */
int hs_api_capture(char **json, const hs_model *m, const hs_api_tokens *data, const hs_api_env *e,
                   const char *out, int force, int half, int compress, int batch, int seq_len,
                   long long max_batches, const char *layers, const char *heads,
                   const char *queries, const char *tokenizer);

/* features (SPEC §19): the SAE of directory sae_dir (opened and bound by
 * the study's check: hs_features_check) on every token of data's B x T
 * batches; top N examples a feature (0: 10), dfa the DFA of each
 * feature's first K examples (-1: all of them; 0: none), out (NULL: none)
 * the activations in CSR. Its rows (frequency, mean_act, head_share,
 * examples, DFA) go to e's index only: feature_metrics, feature_examples,
 * feature_dfa of the run. scalars tokens, d_sae, alive, l0, examples,
 * dfa_rows, top_feature, top_frequency, bytes; texts hook, architecture
 * and, with out, path and sha256. */
int hs_api_features(char **json, const hs_model *m, const hs_api_tokens *data,
                    const hs_api_env *e, int B, int T, long long max_batches,
                    const char *sae_dir, int top, int dfa, const char *out, int force);

/* train m in place (hs_train), B x T batches wrapping around the data;
 * out (NULL: not saved) receives the checkpoint (the train study: curves
 * train_loss and, with val, val_loss into the index). curves train_loss
 * (step, tokens seen, loss); scalars final_loss, seconds. */
int hs_api_train(char **json, hs_model *m, const hs_api_tokens *data, const hs_api_env *e, int B,
                 int T, long steps, double lr, double weight_decay, double clip, long warmup,
                 const hs_api_tokens *val, long val_every, const char *out);

/* ---- the index ---------------------------------------------------------------------- */

/* Opens an index for reading (hs_index_open_read); close with hs_index_close. */
int hs_api_index_open(hs_index **ix, const char *path);
void hs_api_index_close(hs_index *ix);

/* The runs of kind (NULL: all) with status (NULL: any), oldest first:
 * [{"run_id", "kind", "status", "model_path", "model_sha256", "data_path",
 *   "data_sha256", "args" (the command line, a list), "started_at",
 *   "finished_at", "params": {key: value}}, ...]. */
int hs_api_index_runs(hs_index *ix, const char *kind, const char *status, char **json);

/* One metric of a run as {"shape": [R, C], "value": [...], "stderr": [...],
 * "n": [...], "present": [...]} (row-major, R x C): per head (kind 0, R
 * layers x C heads), per position (kind 1, layers x positions); per layer
 * (kind 2: R layers, C 1: head -1 rows); a curve (kind 3: "step", "x",
 * "y" lists). Cells without a row are absent (present 0, value null). */
int hs_api_index_metric(hs_index *ix, long long run_id, const char *metric, int kind,
                        char **json);

/* SPEC §19's rows of a features run as lists of columns: which 0, metric's
 * feature_metrics rows {"feature", "layer", "head", "value"}; 1, every
 * feature_examples row {"feature", "seq", "position", "value"} (by feature,
 * value descending); 2, feature `feature`'s feature_dfa rows {"seq",
 * "position", "layer", "head", "source", "value"} (metric unused). */
int hs_api_index_features(hs_index *ix, long long run_id, int which, const char *metric,
                          int feature, char **json);

/* A model-wide row (layer = head = -1) or any single row: *found 0 when absent. */
int hs_api_index_value(hs_index *ix, long long run_id, int layer, int head, const char *metric,
                       double *value, double *stderr_value, long long *n, int *found);

/* The latest complete run of kind (0 when none). */
int hs_api_index_latest(hs_index *ix, const char *kind, long long *run_id);

#endif
