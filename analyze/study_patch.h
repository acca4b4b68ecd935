/* Activation and path patching (SPEC §11). */
#ifndef HS_STUDY_PATCH_H
#define HS_STUDY_PATCH_H

#include "patch.h"
#include "study.h"

/* The prompts file path (SPEC §11) for model m of directory model_dir:
 * text lines are encoded with the tokenizer at `tokenizer` (NULL: the
 * model directory's own, when hs_tokenizer_present finds one; else none,
 * and only *_ids lines are accepted); ids are checked against the
 * vocabulary and, with learned positions, lengths against n_ctx. Errors
 * name the file and line. */
int hs_causal_prompts_load(hs_prompt_set *ps, const char *path, const char *tokenizer,
                           const char *model_dir, const hs_model_config *c);

/* --site LIST ("z,pattern,resid_pre,attn_out,mlp_out") into the bit set
 * of hs_patch_opts; NULL: the default, z plus, when every prompt has one
 * length, resid_pre, attn_out and mlp_out (the last with an MLP).
 * HS_EINVAL naming an unknown site. */
int hs_patch_sites(int *sites, const char *list, const hs_model_config *c,
                   const hs_prompt_set *ps);

/* Runs hs_patch and records its rows into run_id of ix (NULL: nothing
 * recorded): head rows in head_metrics, position rows in position_metrics,
 * each table in one transaction, only after every value was found finite
 * (hs_study_check_finite). r is initialised here; free it with
 * hs_patch_result_free. Costs what hs_patch costs. */
int hs_patch_study(hs_patch_result *r, const hs_model *m, const hs_prompt_set *ps,
                   hs_patch_opts o, hs_index *ix, int64_t run_id, const hs_study_io *io);

/* --senders "L.H,..." or "all" (every head) into *sender (malloc'd, layer *
 * HS_MAX_HEADS + head), and --receivers "L.H:q|k|v,..." (NULL: none, the
 * path to the logits) into *recv (malloc'd); HS_EINVAL naming the entry. */
int hs_path_parse(int **sender, int *n_senders, hs_receiver **recv, int *n_recv,
                  const char *senders, const char *receivers, const hs_model_config *c);

/* Runs hs_path_patch and records its rows as hs_patch_study does. t is
 * initialised here; free it with hs_head_table_free. */
int hs_path_patch_study(hs_head_table *t, const hs_model *m, const hs_prompt_set *ps,
                        hs_path_opts o, hs_index *ix, int64_t run_id, const hs_study_io *io);

#endif
