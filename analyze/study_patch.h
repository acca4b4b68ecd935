/* Activation and path patching (SPEC §11). */
#ifndef HS_STUDY_PATCH_H
#define HS_STUDY_PATCH_H

#include "patch.h"
#include "study.h"

/* --site LIST ("z,pattern,resid_pre,attn_out,mlp_out") into the bit set
 * of hs_patch_opts; NULL: the default, z plus, when every prompt has one
 * length, resid_pre, attn_out and mlp_out (the last with an MLP).
 * HS_EINVAL naming an unknown site. */
int hs_patch_sites(int *sites, const char *list, const hs_model_config *c,
                   const hs_prompt_set *ps);

/* --senders "L.H,..." or "all" (every head) into *sender (malloc'd, layer *
 * HS_MAX_HEADS + head), and --receivers "L.H:q|k|v,..." (NULL: none, the
 * path to the logits) into *recv (malloc'd); HS_EINVAL naming the entry. */
int hs_path_parse(int **sender, int *n_senders, hs_receiver **recv, int *n_recv,
                  const char *senders, const char *receivers, const hs_model_config *c);

/* ---- patch: env's prompt pairs, env->batch prompts per forward (0: 64) ---------------- */

typedef struct {
    const char *site;  /* --site LIST (NULL: z and, prompts of one length, the position sites) */
    hs_patch_opts patch; /* noising, stack, naive as hs_patch takes them; sites resolved by
                            the check; batch, stop and progress are env's */
} hs_patch_study_opts;

typedef struct {
    hs_study_rows rows; /* the head rows and the position rows */
    hs_patch_result patch;
} hs_patch_study_result;

/* --site into o->patch.sites and hs_patch_check's checks against env's model
 * and prompts: HS_EINVAL naming the option. */
int hs_patch_study_check(hs_patch_study_opts *o, const hs_study_env *env);

/* hs_patch of env's prompts with the study's phases, progress and stop, every
 * value checked finite. Costs what hs_patch costs. r is initialised here;
 * free it with hs_patch_study_result_free. */
int hs_patch_study(hs_patch_study_result *r, const hs_patch_study_opts *o,
                   const hs_study_env *env);
void hs_patch_study_result_free(hs_patch_study_result *r);

extern const hs_study_kind hs_patch_kind;

/* ---- path-patch ------------------------------------------------------------------- */

typedef struct {
    const char *senders;   /* --senders "L.H,..." or "all" */
    const char *receivers; /* --receivers "L.H:q|k|v,..." (NULL: the logits) */
} hs_path_patch_opts;

typedef struct {
    hs_study_rows rows;
    hs_head_table heads; /* path_patch at each sender head */
    int n_senders;
} hs_path_patch_result;

/* The senders and receivers against env's model (HS_EINVAL naming the
 * option). */
int hs_path_patch_check(hs_path_patch_opts *o, const hs_study_env *env);

/* hs_path_patch of every sender of o on env's prompts, env->batch per
 * forward (0: 64). r is initialised here; free it with
 * hs_path_patch_result_free. */
int hs_path_patch_study(hs_path_patch_result *r, const hs_path_patch_opts *o,
                        const hs_study_env *env);
void hs_path_patch_result_free(hs_path_patch_result *r);

extern const hs_study_kind hs_path_patch_kind;

#endif
