/* The head-count experiment: the same budget trained at several head counts. */
#ifndef HS_STUDY_HEADCOUNT_H
#define HS_STUDY_HEADCOUNT_H

#include "study.h"
#include "train.h"
#include "study_prune.h"

enum { HS_HEADCOUNT_MAX = 16 }; /* head counts, and seeds */

typedef struct {
    hs_model_config base;      /* the architecture; n_head is set per head count */
    int heads[HS_HEADCOUNT_MAX], n_heads;
    int seeds[HS_HEADCOUNT_MAX], n_seeds;
    long steps;                /* the equal step budget of every run */
    int batch, seq_len;
    double lr;
    const hs_tokens *train, *val;
    /* each run's curve train_loss_heads_H_seed_S goes to this run as it
     * trains (ix NULL: not recorded) */
    hs_index *ix;
    int64_t run_id;
    volatile sig_atomic_t *stop;
    /* progress: steps done over the whole experiment, the current curve */
    void (*on_step)(void *ctx, long done, const char *curve);
    /* after each run: its validation loss */
    void (*on_run)(void *ctx, int heads, int seed, double val_loss);
    void *ctx;
} hs_headcount_opts;

typedef struct {
    /* val_loss_heads_H (mean, stderr over seeds, n = seeds) and
     * forward_ms_heads_H (hs_forward_ms of the first seed's model), per H */
    hs_head_table table;
    double mean[HS_HEADCOUNT_MAX], sd[HS_HEADCOUNT_MAX], ms[HS_HEADCOUNT_MAX];
} hs_headcount_result;

/* The configuration of each head count (cfg[i]: base with n_head =
 * heads[i]), checked: HS_EINVAL naming --heads or --seq-len. */
int hs_headcount_check(hs_model_config cfg[HS_HEADCOUNT_MAX], const hs_headcount_opts *o);

/* The held-out split of the experiment when no validation shard is given:
 * the last 10% of all's tokens (views into all, not copies). */
void hs_headcount_split(const hs_tokens *all, hs_tokens *train, hs_tokens *val);

/* The head-count experiment: per seed one random initialisation, shared by
 * every head count (with head_dim = d/H no tensor changes shape with H),
 * trained the same steps on the same data and evaluated on the validation
 * tokens. Why shared weights: a difference between head counts is then not
 * a difference of initial weights. Costs n_seeds * n_heads training runs.
 * r is initialised here; free it with hs_headcount_result_free. */
int hs_headcount_experiment(hs_headcount_result *r, const hs_headcount_opts *o);
void hs_headcount_result_free(hs_headcount_result *r);

#endif
