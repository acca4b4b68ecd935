/* Studies: the library's entry points behind the headscope commands. A study
 * takes its inputs (a model, data), an options struct and an hs_study_io
 * (progress, stop flag); it returns a status and its results as an
 * hs_head_table of head_metrics rows plus curves, and prints nothing. The
 * command around it parses options, opens the run in the index after the
 * study's own check of its options has passed (bad input records nothing),
 * calls the study, records its results with hs_study_record and prints.
 *
 * Everything a study knows (its controls, its metric names, the recipe of a
 * random-init baseline) lives here, once; the commands hold none of it. */
#ifndef HS_STUDY_H
#define HS_STUDY_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "ablate.h"
#include "eval.h"
#include "importance.h"
#include "index.h"
#include "maps.h"
#include "scores.h"
#include "stats.h"
#include "tokenizer.h"
#include "tokens.h"
#include "train.h"
#include "weights.h"

/* How a study reports progress and is stopped; every member may be NULL.
 * phase(ctx, label) announces each phase of work ("induction: control"),
 * phase(ctx, NULL) ends the last; progress(ctx, done, total) counts within
 * the current phase. stop is polled between units of work: once it is set the
 * study returns HS_EINTR. */
typedef struct hs_study_io {
    void (*phase)(void *ctx, const char *label);
    hs_progress_fn progress;
    void *ctx;
    volatile sig_atomic_t *stop;
    /* 0 (the default): a non-finite result (NaN or infinite loss, score or
     * statistic: the model's weights or inputs are not finite) fails the
     * study with HS_EINVAL naming the first one, before it is recorded
     * (hs_study_check_finite); 1: such values are kept (the index stores
     * them as NULL, --json prints null) */
    int allow_nonfinite;
} hs_study_io;

/* A named curve of a study (owned points). */
typedef struct {
    char name[64];
    hs_curve_point *points;
    int n;
} hs_study_curve;

/* A curve written to the index in blocks of 64 points as a study produces
 * them (a long training run keeps its curve when it is stopped). After the
 * first failed write it writes nothing more and `failed` stays set, so a
 * study that cannot afford to stop for its index can report it at the end. */
typedef struct {
    hs_index *ix; /* NULL: nothing is written */
    int64_t run_id;
    char name[64];
    hs_curve_point pending[64];
    int n, failed;
} hs_curve_writer;

void hs_curve_writer_add(hs_curve_writer *w, hs_curve_point p);
/* Writes the pending points: HS_OK, or the status of the failed write. */
int hs_curve_writer_flush(hs_curve_writer *w);

/* The random-init control of every study that has one: a model of c's
 * configuration, randomly initialised from seed + 1000003 (an offset so the
 * control's weights share no stream with the sequences drawn from `seed`).
 * Defined once here so that induction's and patterns' controls are the same
 * model for the same --seed. ctrl is initialised here; free it with
 * hs_model_free. Costs one parameter allocation of the model's size. */
int hs_control_model(hs_model *ctrl, const hs_model_config *c, unsigned long long seed);

/* HS_OK when every value of t and of the curves is finite, or when io
 * allows non-finite results; otherwise HS_EINVAL naming the first one:
 * "<metric> of layer L head H is NaN: the model's weights or inputs are not
 * finite (--allow-nonfinite keeps such results)". */
int hs_study_check_finite(const hs_study_io *io, const hs_head_table *t,
                          const hs_study_curve *curves, int n_curves);

/* The message of a non-finite value v (HS_EINVAL): "<what> is NaN|+inf|-inf:
 * the model's weights or inputs are not finite (--allow-nonfinite keeps such
 * results)". */
int hs_fail_nonfinite(double v, const char *what);

/* Records a study's rows into run_id of the index in one transaction (a no-op
 * returning HS_OK when ix is NULL), then each curve. */
int hs_study_record(hs_index *ix, int64_t run_id, const hs_head_table *t,
                    const hs_study_curve *curves, int n_curves);

/* Records path as an artifact of run_id (its sha256 and size); a no-op
 * returning HS_OK when ix is NULL. Costs one read of the file. */
int hs_study_record_artifact(hs_index *ix, int64_t run_id, const char *path);

/* The median wall time in ms of a forward of the first batch (B x T) of tok,
 * over 7 runs after one warm-up, into *ms. Returns the first failing status
 * (allocation, or the forward itself: tokens outside the vocabulary, T beyond
 * n_ctx) with *ms = -1, so that a latency is never recorded for a forward
 * that did not run. Costs 8 inference forwards and one batch of
 * activations. */
int hs_forward_ms(double *ms, const hs_model *m, const hs_tokens *tok, int B, int T);

/* ---- induction (SPEC §5) ------------------------------------------------------- */

typedef struct {
    int seq_len;      /* |r| of r ++ r; 0: min(n_ctx/2, 64) */
    int samples;      /* random sequences (default 64) */
    int batch;        /* sequences per forward (default 8) */
    unsigned long long seed; /* the sequences' seed; the control's is hs_control_model's */
    int causal_k;     /* heads the causal check ablates (default 1) */
    int random_draws; /* random sets of causal_k heads (default 20) */
    double min_score; /* induction score a head needs for the claim (default 0.4) */
    /* ICL score (optional): a token shard, with the sequence length (0:
     * min(n_ctx, 1024)) and the early and late positions (default 50, 500) */
    const hs_tokens *icl_data;
    const char *icl_data_name; /* for messages */
    int icl_seq_len, early, late;
} hs_induction_opts;

/* The defaults above; seq_len and icl_seq_len stay 0 until resolved. */
hs_induction_opts hs_induction_defaults(void);

/* Resolves o's model-dependent defaults and checks o against the model:
 * HS_EINVAL with a message naming the option (--seq-len, --causal-k) when it
 * cannot be run. Cheap; a command calls it before it opens its run. */
int hs_induction_check(hs_induction_opts *o, const hs_model_config *c);

/* Checks that o->icl_data holds a sequence of icl_seq_len (+1) tokens within
 * n_ctx (HS_EINVAL naming the shard); HS_OK without ICL data. Call after
 * hs_induction_check. */
int hs_induction_check_icl(const hs_induction_opts *o, const hs_model_config *c);

typedef struct {
    /* head_metrics rows: per head induction, duplicate_token, prev_token and
     * copying, then the same with suffix _control (the random-init control);
     * model-wide second_half_loss, causal_loss_delta_top_k,
     * causal_loss_delta_random_k, causal_top_k (one row per targeted head),
     * induction_established, and with ICL data icl, icl_control */
    hs_head_table table;
    hs_study_curve draws; /* causal_random_k: each random draw's loss increase */
    hs_causal_check causal;
    int established;
    int best_layer, best_head;   /* highest induction score */
    double best, best_control;   /* its score, and the same head's in the control */
    /* "" or why there is no causal check (an encoder's: SPEC §14 defines its
     * scores on r ++ r, but the check's second-half loss is a next-token loss;
     * causal.k is then 0 and no causal row is recorded) */
    char note[160];
} hs_induction_result;

/* The induction study: the pattern scores of the model and of its random-init
 * control on the same r ++ r sequences, the OV copying scores of both, the
 * causal check (top-k induction heads against random draws), the verdict of
 * hs_induction_established, and the ICL score of both when o->icl_data is
 * given. Why one call: the claim "these are induction heads" is only as good
 * as its control and its causal check, so a caller cannot get the scores
 * without them. Costs (3 + random_draws) passes over the sequences of the
 * model, one of the control, and the control's parameters. r is initialised
 * here; free it with hs_induction_result_free (also after a failure). */
int hs_induction_study(hs_induction_result *r, const hs_model *m, hs_induction_opts o,
                       const hs_study_io *io);
void hs_induction_result_free(hs_induction_result *r);

/* ---- patterns (SPEC §5) ------------------------------------------------------------ */

typedef struct {
    int batch, seq_len;        /* the forward's batches (B, T) */
    size_t max_batches;        /* 0: every whole batch */
    const int32_t *delim;      /* token ids counted by `delim` */
    int n_delim;
    int control;               /* also <stat>_control of hs_control_model(seed) */
    unsigned long long seed;
    int js;                    /* also the head-to-head Jensen-Shannon distances */
    const hs_tokenizer *tk;    /* an encoder's: the tokenizer that gives [CLS], [SEP], "."
                                  and "," (NULL: config.json's ids, mlm.h) */
} hs_patterns_opts;

typedef struct {
    /* head_metrics rows: every statistic of hs_pattern_name per head (model
     * layer and head ids), then with suffix _control when asked */
    hs_head_table table;
    long sequences;
    int heads;          /* heads with rows (a capture file may hold a subset) */
    /* with o.js: D (js_n x js_n) and each row's model layer and head */
    double *js;
    int js_n, *js_layer, *js_head;
    char note[256];     /* "" or which encoder statistics were left out, and why */
} hs_patterns_result;

/* The pattern statistics of m on data, row by row during the forward
 * (hs_patterns_run), of the random-init control when o.control, and the
 * Jensen-Shannon matrix when o.js (which keeps one sequence's maps of every
 * head, up to 4 GiB). Costs one pass over the data per model. r is
 * initialised here; free it with hs_patterns_result_free (also after a
 * failure). */
int hs_patterns_study(hs_patterns_result *r, const hs_model *m, const hs_tokens *data,
                      hs_patterns_opts o, const hs_study_io *io);

/* The same statistics from a capture file (no control: a capture file holds
 * no weights to re-initialise; HS_EINVAL when o.control). */
int hs_patterns_study_maps(hs_patterns_result *r, hs_maps_reader *maps, hs_patterns_opts o);
void hs_patterns_result_free(hs_patterns_result *r);

/* Writes r's Jensen-Shannon matrix as a CSV with head labels (LlHh), whole
 * under a temporary name and then renamed, so a reader never sees half. */
int hs_patterns_write_js(const char *path, const hs_patterns_result *r);

/* ---- capture (SPEC §6) ------------------------------------------------------------ */

typedef struct {
    const char *out;        /* the map file: written under a temporary name, renamed when complete */
    int force;              /* overwrite an existing out */
    int half, compress;     /* f16 storage; shuffle + deflate level 1-9 (0: off) */
    int batch, seq_len;     /* seq_len 0: min(n_ctx, 256) */
    size_t max_batches;     /* 0: every whole batch */
    /* the selection as the options spell it, NULL: all. layers "L,L,..."
     * and heads "H,H,..." (the same heads of every captured layer) are
     * distinct indices; queries "A:B" the rows [A, B) */
    const char *layers, *heads, *queries;
    const char *model_dir, *data_path; /* provenance: model_dir/config.json goes into the file */
    const char *model_sha, *data_sha;  /* sha256 hex of model and data; NULL: hashed here */
    const hs_tokenizer *tokenizer;     /* the data's tokenizer: /token_text (NULL: none) */
} hs_capture_opts;

/* The resolved selection. */
typedef struct {
    unsigned char layer_on[HS_MAX_LAYERS];
    int heads[HS_MAX_HEADS], n_heads; /* n_heads 0: every head */
    int q0, q1;
} hs_capture_plan;

/* Resolves o->seq_len and the selection against the model: HS_EINVAL with
 * a message naming the option (--layers, --heads, --queries, --seq-len). */
int hs_capture_check(hs_capture_plan *p, hs_capture_opts *o, const hs_model_config *c);

/* The batches a capture of tok runs (HS_EINVAL naming data_path when there
 * is not one whole batch). */
int hs_capture_batches(size_t *n_batches, const hs_capture_opts *o, const hs_tokens *tok);

typedef struct {
    size_t sequences;
    double seconds; /* of the forwards and writes */
    char sha256[65]; /* of the file moved into place, as moved (rank 0; "" elsewhere) */
    uint64_t bytes;
} hs_capture_result;

/* Captures the selected per-head maps of m over tok into o->out (SPEC §6),
 * one batch's maps of one layer in memory at a time. Why one call: the file
 * is all or nothing: on any failure or a stop (HS_EINTR, whose message says
 * that out was not written) the temporary file is removed, and only a
 * complete file is renamed to out. Costs one inference forward per batch
 * plus the writes; hashing model and data when their sha256 is not given. */
int hs_capture(hs_capture_result *r, const hs_model *m, const hs_tokens *tok,
               hs_capture_opts o, const hs_study_io *io);

/* ---- prune ------------------------------------------------------------------------ */

typedef struct {
    /* B, T, max_batches, step_percent, max_percent, min_heads_per_layer,
     * one_shot, val and stop as hs_prune takes them (its on_step and ctx are
     * the study's own) */
    hs_prune_opts prune;
    const char *out; /* NULL, or a directory for the pruned model */
    int structural;  /* out without the pruned heads; else W_o columns zeroed (dense) */
    /* each step's curve point is committed to this run as it completes, so
     * that an interrupted run keeps its curve (ix NULL: not recorded) */
    hs_index *ix;
    int64_t run_id;
    /* after every step (step 0: unpruned), for a caller's report */
    void (*on_step)(void *ctx, int step, int pruned, double fraction, double loss,
                    double stderr_loss);
    void *ctx;
    /* 0: a non-finite validation loss fails the study (HS_EINVAL) before
     * its curve point is recorded; 1: kept (as hs_study_io's) */
    int allow_nonfinite;
} hs_prune_study_opts;

typedef struct {
    hs_head_table table;  /* pruned (0/1 per head); with out: forward_ms_unpruned, forward_ms_pruned */
    hs_study_curve curve; /* pruning: x = fraction pruned, y = validation loss */
    int n_pruned, heads;
    double ms[2];         /* with out: hs_forward_ms of the model and of the written one */
} hs_prune_result;

/* HS_EINVAL (saying why) when the written model cannot be made: --structural
 * of a model whose heads cannot be cut apart (MLA, olmo2's whole-projection
 * q/k norms). Cheap: a command calls it before it opens its run. */
int hs_prune_study_check(const hs_prune_study_opts *o, const hs_model_config *c);

/* Iterative pruning by importance (hs_prune), the final mask as rows, and
 * with o->out the pruned model written (hs_checkpoint_save) beside its
 * forward latency and the unpruned model's: gating alone makes nothing
 * faster, a structural model is smaller. Costs one importance pass (a
 * forward and backward over the data) per step, plus a validation
 * evaluation per step. r is initialised here; free it with
 * hs_prune_result_free (also after a failure). */
int hs_prune_study(hs_prune_result *r, const hs_model *m, const hs_tokens *data,
                   const hs_prune_study_opts *o);
void hs_prune_result_free(hs_prune_result *r);

/* ---- experiment head-count -------------------------------------------------------- */

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

/* ---- train ------------------------------------------------------------------------ */

typedef struct {
    /* B, T, steps, lr, weight_decay, clip, warmup, val, val_every,
     * val_batches and stop as hs_train takes them (its on_step, on_val and
     * ctx are the study's own) */
    hs_train_opts train;
    const char *out; /* the checkpoint directory written (it exists) */
    /* curves train_loss (x = tokens seen) and val_loss of this run (ix NULL:
     * not recorded), and the written model as its artifact */
    hs_index *ix;
    int64_t run_id;
    /* for a caller's report: each step (loss, tokens per second) and each validation */
    void (*on_step)(void *ctx, long step, double loss, double tokens_per_s);
    void (*on_val)(void *ctx, long step, double loss, double stderr_loss);
    void *ctx;
} hs_train_study_opts;

typedef struct {
    double final_loss; /* of the last step */
    double seconds;    /* of training */
    int saved;         /* the checkpoint was written; with an index, model_sha is its sha256 */
    char model_sha[80];
    int curve_failed;  /* some curve points could not be recorded (the run went on) */
} hs_train_result;

/* Trains m in place (hs_train), records its curves as it goes, and writes
 * the checkpoint to o->out. Why one call: a stopped run (HS_EINTR: the
 * message says so) still saves what it learned (r->saved), a failed one
 * does not; a curve or artifact the index could not take does not stop
 * training or the save, but fails the study (HS_EIO, r->curve_failed when a
 * curve: the run is incomplete). Costs steps forward-backward passes of B x T plus the
 * validations. */
int hs_train_study(hs_train_result *r, hs_model *m, const hs_tokens *data,
                   const hs_train_study_opts *o);

/* ---- ablate (SPEC §5) -------------------------------------------------------------- */

typedef struct {
    /* B, T, max_batches, kinds, stack, naive and stop as hs_ablate takes
     * them (head_on, on_layer, progress and ctx are the study's own) */
    hs_ablate_opts ablate;
    /* the selection as the options spell it, NULL: all. "L,L,..." layers,
     * "H,H,..." heads of each selected layer */
    const char *layers, *heads;
    /* each layer's rows are committed to this run in one transaction as the
     * layer completes, so a stopped run holds whole layers; with resume,
     * layers already complete in the run are skipped (ix NULL: nothing is
     * recorded and nothing skipped) */
    hs_index *ix;
    int64_t run_id;
    int resume;
} hs_ablate_study_opts;

typedef struct {
    /* loss (model-wide, the clean loss) and loss_delta_<kind> per ablated
     * head, with the standard error over sequences */
    hs_head_table table;
    double clean_loss;
    int layers_skipped;
    /* the largest loss delta of each kind (worst_layer -1: none) */
    double worst_delta[HS_ABLATE_KINDS];
    int worst_layer[HS_ABLATE_KINDS], worst_head[HS_ABLATE_KINDS];
} hs_ablate_result;

/* --method "zero,mean": the bit set of ablation kinds (1 << HS_ABLATE_ZERO
 * ...), or -1 with HS_EINVAL naming the unknown one (or an empty list). */
int hs_ablate_kinds(const char *method);

/* Checks the options against the model before anything runs or is recorded:
 * the selection (HS_EINVAL naming --layers or --heads) and hs_ablate_check's
 * checks of o->ablate (B, T and the kinds must be set). */
int hs_ablate_study_check(const hs_ablate_study_opts *o, const hs_model_config *c);

/* The ablation of every selected head by every selected kind (hs_ablate),
 * its rows recorded layer by layer (see ix above), and the largest delta of
 * each kind. Costs, on the fast path, one clean forward per batch per layer
 * and a batched continuation through the layers above per stack of
 * ablations. r is initialised here; free it with hs_ablate_result_free. */
int hs_ablate_study(hs_ablate_result *r, const hs_model *m, const hs_tokens *data,
                    const hs_ablate_study_opts *o, const hs_study_io *io);
void hs_ablate_result_free(hs_ablate_result *r);

/* ---- importance (SPEC §5) ---------------------------------------------------------- */

typedef struct {
    /* importance (each layer's vector over its L2 norm) and importance_raw
     * per head, with the standard error over sequences */
    hs_head_table table;
    long sequences;
    int least_layer, least_head; /* the lowest importance */
} hs_importance_result;

/* Gradient head importance (hs_importance_compute) of m on data as rows.
 * Costs one forward and backward per batch. Stopped by io->stop (HS_EINTR).
 * r is initialised here; free it with hs_importance_result_free. */
int hs_importance_study(hs_importance_result *r, const hs_model *m, const hs_tokens *data, int B,
                        int T, size_t max_batches, const hs_study_io *io);
void hs_importance_result_free(hs_importance_result *r);

/* ---- head output norms (Kobayashi et al. 2020) -------------------------------------- */

typedef struct {
    int batch, seq_len;      /* sequences per forward and their length */
    size_t max_batches;      /* 0: every whole batch */
    unsigned long long seed; /* the control's (hs_control_model) */
} hs_head_norms_opts;

typedef struct {
    /* head_output_norm and head_output_norm_control per head: the mean over
     * sequences of each sequence's mean over its positions (an encoder's:
     * over its real tokens) of ||z_h W_O^h||_2, the head's output as it
     * enters the residual stream before any output norm, with the standard
     * error over sequences */
    hs_head_table table;
    long sequences;
    int top_layer, top_head; /* the largest head_output_norm */
} hs_head_norms_result;

/* HS_OK when the options fit m and data (a whole batch of batch x seq_len);
 * HS_EINVAL naming the option otherwise. */
int hs_head_norms_check(const hs_model_config *c, const hs_tokens *data,
                        const hs_head_norms_opts *o);

/* The output norm of every head of m and of its random-init control on the
 * batches of data. Costs one inference forward per batch per model and, per
 * layer, one (B*T, d_head) x (d_head, d) product per head. Stopped by
 * io->stop (HS_EINTR). r is initialised here; free it with
 * hs_head_norms_result_free, whatever the status. */
int hs_head_norms_study(hs_head_norms_result *r, const hs_model *m, const hs_tokens *data,
                        const hs_head_norms_opts *o, const hs_study_io *io);
void hs_head_norms_result_free(hs_head_norms_result *r);


/* ---- dla, logit-lens, composition (SPEC §11) ---------------------------------------- */

#include "composition.h"
#include "dla.h"
#include "logit_lens.h"
#include "prompts.h"

typedef struct {
    /* head_metrics rows, each the mean over prompts with its standard error
     * (n prompts): dla per head (l, h) and per MLP (l, -1); the model-wide
     * parts dla_embed, dla_pos_embed, dla_attn_bias, dla_final_norm_bias,
     * dla_lm_head_bias that the model has (dla.h); logit_diff_clean, the
     * model's own logit difference. The parts' means sum to its mean. */
    hs_head_table table;
    hs_dla parts;          /* every prompt's parts */
    double logit_diff;     /* mean LD */
    double max_gap;        /* max over prompts of |sum of parts - LD| / max(|LD|, 1) */
    int max_gap_line;      /* that prompt's line */
    int top_layer, top_head; /* the head of largest mean dla (toward the answer) */
    double top;
} hs_dla_result;

/* Direct logit attribution (dla.h) of every prompt of ps, batch prompts per
 * forward, as rows. Refuses post-norm models (HS_EINVAL) before anything
 * runs: call hs_dla_check first to refuse before a run is opened. Costs one
 * inference forward per batch. r is initialised here; free it with
 * hs_dla_result_free (also after a failure). */
int hs_dla_study(hs_dla_result *r, const hs_model *m, const hs_prompt_set *ps, int batch,
                 const hs_study_io *io);
void hs_dla_result_free(hs_dla_result *r);

typedef struct {
    const hs_prompt_set *prompts; /* either the clean prompts ... */
    const hs_tokens *data;        /* ... or a token shard */
    int batch, seq_len;           /* forwards of batch sequences (shard: of seq_len) */
    size_t max_batches;           /* shard: 0 = every whole batch */
} hs_lens_opts;

typedef struct {
    /* head_metrics rows at (l, -1), l = 0 .. L (L: the final residual, the
     * model's own output): logit_lens_loss and, with prompts,
     * logit_lens_logit_diff, each the mean over sequences or prompts with
     * its standard error */
    hs_head_table table;
    hs_lens lens;
    double final_loss, final_logit_diff; /* entry L's means */
} hs_lens_result;

/* The logit lens (logit_lens.h) on prompts or a shard. Costs one forward
 * and L+1 unembeddings per batch. r is initialised here; free it with
 * hs_lens_result_free (also after a failure). */
int hs_logit_lens_study(hs_lens_result *r, const hs_model *m, const hs_lens_opts *o,
                        const hs_study_io *io);
void hs_lens_result_free(hs_lens_result *r);

typedef struct {
    /* head_pair_metrics rows: q_, k_, v_composition of every scored pair of
     * the model, then (with control) the same of hs_control_model(seed)
     * with suffix _control */
    hs_pair_row *pairs;
    int n_pairs;
    /* head_metrics rows (-1, -1): <kind>_composition_mean and, with control,
     * <kind>_composition_control_mean: the mean over pairs with its
     * standard error (n pairs) */
    hs_head_table table;
    /* per kind (q, k, v): the model's highest pair */
    int best[3][4];
    double best_value[3], mean[3], control_mean[3];
} hs_composition_result;

/* HS_EINVAL when c has fewer than two layers (no head reads another's
 * output); cheap, for a command to call before it opens its run. */
int hs_composition_check(const hs_model_config *c);

/* Composition scores (composition.h) of m and, when control, of its
 * random-init control. Costs O(pairs (d dh^2 + dh^3)) per model. r is
 * initialised here; free it with hs_composition_result_free. */
int hs_composition_study(hs_composition_result *r, const hs_model *m, int control,
                         unsigned long long seed, const hs_study_io *io);

/* Records r's pairs and rows into run_id (a no-op when ix is NULL). */
int hs_composition_record(hs_index *ix, int64_t run_id, const hs_composition_result *r);
void hs_composition_result_free(hs_composition_result *r);
/* ---- patch, path-patch (SPEC §11) ------------------------------------------------ */

#include "patch.h"

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

/* ---- atp, circuit (SPEC §15) ----------------------------------------------------- */

#include "atp.h"
#include "circuit.h"

/* Everything a study of SPEC §15 records: its head table, curves (names
 * copied, points borrowed), position rows and edge rows, each pointing into
 * the study's result (hs_run_study_rows writes them). */
typedef struct {
    const hs_head_table *heads;
    hs_study_curve curve[2];
    int n_curves;
    const hs_position_row *pos;
    int n_pos;
    const hs_edge_row *edges;
    long n_edges;
} hs_study_rows;

/* hs_atp with the study's phases, progress and stop, every value checked
 * finite (hs_study_check_finite; position rows alike); *rows describes r's
 * rows for hs_run_study_rows. r is initialised here; free it with
 * hs_atp_result_free. Costs what hs_atp costs. */
int hs_atp_study(hs_atp_result *r, hs_study_rows *rows, const hs_model *m,
                 const hs_prompt_set *ps, hs_atp_opts o, const hs_study_io *io);

/* hs_circuit as hs_atp_study runs hs_atp: its rows the logit differences,
 * every edge's score and the faithfulness curve. */
int hs_circuit_study(hs_circuit_result *r, hs_study_rows *rows, const hs_model *m,
                     const hs_prompt_set *ps, hs_circuit_opts o, const hs_study_io *io);

#endif
