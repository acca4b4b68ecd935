/* Head ablation (SPEC §5): every selected head by every selected kind. */
#ifndef HS_STUDY_ABLATE_H
#define HS_STUDY_ABLATE_H

#include "ablate.h"
#include "study.h"

typedef struct {
    const char *method; /* --method: "zero,mean,resample" or a part (NULL: zero) */
    int kinds;          /* resolved by the check: the bit set of the method's kinds */
    /* the selection as the options spell it, NULL: all. "L,L,..." layers,
     * "H,H,..." heads of each selected layer */
    const char *layers, *heads;
    int stack, naive;   /* as hs_ablate takes them */
} hs_ablate_study_opts;

typedef struct {
    hs_study_rows rows; /* empty: each layer's rows are committed as it completes */
    /* loss (model-wide, the clean loss) and loss_delta_<kind> per ablated
     * head, with the standard error over sequences */
    hs_head_table table;
    double clean_loss;
    int layers_skipped;
    /* the largest loss delta of each kind (worst_layer -1: none) */
    double worst_delta[HS_ABLATE_KINDS];
    int worst_layer[HS_ABLATE_KINDS], worst_head[HS_ABLATE_KINDS];
    const char *worst_attn; /* an encoder-decoder's (--pairs): the zero delta's attention
                               type ("enc", "dec", "cross"); NULL otherwise */
} hs_ablate_result;

/* --method "zero,mean": the bit set of ablation kinds (1 << HS_ABLATE_ZERO
 * ...), or -1 with HS_EINVAL naming the unknown one (or an empty list). */
int hs_ablate_kinds(const char *method);

/* Checks the options against env's model and batches before anything runs
 * or is recorded: the method (resolving o->kinds), the selection (HS_EINVAL
 * naming --method, --layers or --heads) and hs_ablate_check's checks. */
int hs_ablate_study_check(hs_ablate_study_opts *o, const hs_study_env *env);

/* The ablation of every selected head by every selected kind (hs_ablate),
 * its rows committed to env->ix layer by layer, one transaction each (a
 * stopped run holds whole layers; a resumed one skips the layers it
 * holds), and the largest delta of each kind. Costs, on the fast path, one clean forward per batch per layer
 * and a batched continuation through the layers above per stack of
 * ablations. r is initialised here; free it with hs_ablate_result_free. */
int hs_ablate_study(hs_ablate_result *r, const hs_ablate_study_opts *o,
                    const hs_study_env *env);
void hs_ablate_result_free(hs_ablate_result *r);

extern const hs_study_kind hs_ablate_kind;

#endif
