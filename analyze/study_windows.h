/* The local/global experiment (issue 15): one architecture and budget of
 * heads trained three ways -- every head global, half the heads of each
 * layer local (a sliding window of W), every head local -- from the same
 * initial weights per seed on the same data. A study (study.h's
 * conventions): options in, head_metrics rows out, nothing printed. */
#ifndef HS_STUDY_WINDOWS_H
#define HS_STUDY_WINDOWS_H

#include "study.h"
#include "study_headcount.h"
#include "study_prune.h"

enum { HS_WINDOWS_ARMS = 3 }; /* global, half, local */

typedef struct {
    hs_model_config base;      /* the architecture; its windows are set per arm */
    int window;                /* W of the local heads (0: 32) */
    int seeds[HS_HEADCOUNT_MAX], n_seeds;
    long steps;                /* the equal step budget of every run */
    int batch, seq_len;        /* of training, evaluation and the latency and kv figures */
    double lr;
    const hs_tokens *train, *val;
    hs_index *ix;              /* each run's curve train_loss_windows_ARM_seed_S (NULL: none) */
    int64_t run_id;
    volatile sig_atomic_t *stop;
    void (*on_step)(void *ctx, long done, const char *curve); /* steps over the experiment */
    void (*on_run)(void *ctx, const char *arm, int seed, double val_loss);
    void *ctx;
} hs_windows_opts;

/* The arms' names, in order: "global", "half", "local". */
extern const char *const HS_WINDOWS_ARM[HS_WINDOWS_ARMS];

typedef struct {
    /* model-wide rows per arm A: val_loss_windows_A (mean, stderr over
     * seeds, n = seeds), kv_bytes_per_token_windows_A and
     * forward_ms_windows_A (the first seed's model) */
    hs_head_table table;
    double mean[HS_WINDOWS_ARMS], se[HS_WINDOWS_ARMS];
    double kv_bytes[HS_WINDOWS_ARMS]; /* per token at seq_len, sizeof(hs_real) per value */
    double ms[HS_WINDOWS_ARMS];       /* hs_forward_ms of a (batch, seq_len) forward */
    int window;                       /* the W used */
} hs_windows_result;

/* The configuration of arm a: base with no window (global), the first
 * ceil(H/2) heads of each layer local with W and the rest global (half), or
 * every head local (local). HS_EINVAL naming --window, the config or
 * --seq-len. */
int hs_windows_config(hs_model_config *c, const hs_windows_opts *o, int arm);

/* Checks every arm's configuration and the sizes: HS_EINVAL naming the
 * option. Cheap; call before opening a run. */
int hs_windows_check(const hs_windows_opts *o);

/* KV-cache bytes per token of c at a context of T positions, e bytes per
 * value: each key/value head keeps min(T, W) positions where every query
 * head reading it has a window (W the largest of theirs), else T. (The
 * decoder, model/decode.h, keeps every position of a layer whose heads
 * differ; this is what per-head windows allow.) */
double hs_windows_kv_bytes_per_token(const hs_model_config *c, int T, int e);

/* Runs 3 n_seeds trainings of `steps` steps, one evaluation each, and a
 * latency measurement per arm. r is initialised here; free it with
 * hs_windows_result_free (also after a failure). */
int hs_windows_experiment(hs_windows_result *r, const hs_windows_opts *o);
void hs_windows_result_free(hs_windows_result *r);

#endif
