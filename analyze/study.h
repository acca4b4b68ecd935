/* Studies: the library's entry points behind the headscope commands, each
 * in its own header (study_NAME.h), all of one shape:
 *
 *     int hs_NAME_check(hs_NAME_opts *o, const hs_study_env *env);
 *         (hs_NAME_study_check where a lower layer has hs_NAME_check)
 *     int hs_NAME_study(hs_NAME_result *r, const hs_NAME_opts *o,
 *                       const hs_study_env *env);
 *     void hs_NAME_result_free(hs_NAME_result *r);
 *
 * The environment holds what the command read once (model, tokens, prompts,
 * tokenizer), the data's batching, where rows committed as the study goes
 * are written, and the io (progress, stop flag). The check resolves the
 * options' model-dependent defaults and refuses what cannot run, naming the
 * option, before any run is opened (bad input records nothing); a study
 * takes options its check has passed (what the check resolves, such as
 * ablate's kinds or patterns' delimiter ids, it reads as resolved), and the
 * studies whose checks resolve model-dependent defaults re-run them on a
 * copy so that they also stand alone. The result
 * begins with its rows (hs_study_rows, pointing into the result), which
 * one writer records (hs_study_rows_record; hs_run_study_rows for a run);
 * a study prints nothing. HS_STUDY_KIND(NAME, CHECK) gives a driver (cli/'s)
 * the three as one record, hs_NAME_kind.
 *
 * Everything a study knows (its controls, its metric names, the recipe of a
 * random-init baseline) lives in analyze/, once; the commands hold none of
 * it. */
#ifndef HS_STUDY_H
#define HS_STUDY_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "eval.h"
#include "index.h"
#include "prompts.h"
#include "stats.h"
#include "tokenizer.h"
#include "tokens.h"
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
    /* the causal commands (SPEC §21): 0 (the default): a prompt set whose
     * logit-difference gap is within two standard errors of 0 fails the
     * study (hs_study_premise); 1: its numbers are recorded with premise_ok 0 */
    int allow_weak_premise;
} hs_study_io;

/* io's phase (NULL: the last one ended), when io (may be NULL) has one. */
void hs_study_phase(const hs_study_io *io, const char *label);

/* An hs_progress_fn over an hs_study_io (ctx): its progress, if any. */
void hs_study_progress(void *io, size_t done, size_t total);

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

/* SPEC §21's premise of the normalised numbers of t (its model-wide rows
 * logit_diff_gap and premise_ok): 1 with the reason in why (n bytes) when
 * it fails, 0 when it holds or t has no such rows. */
int hs_premise_failed(const hs_head_table *t, char *why, size_t n);
/* The reason for a gap and its stderr over `prompts` prompts. */
void hs_premise_words(char *why, size_t n, double gap, double se, long long prompts);

/* HS_OK when the premise of t's numbers holds (hs_premise_failed) or io
 * allows a weak one; otherwise HS_EINVAL with the gap, its stderr and what
 * to do. */
int hs_study_premise(const hs_study_io *io, const hs_head_table *t);

/* hs_study_check_finite for position rows: "<metric> of layer L position P is ...". */
int hs_study_check_finite_positions(const hs_study_io *io, const hs_position_row *rows, int n);

/* The message of a non-finite value v (HS_EINVAL): "<what> is NaN|+inf|-inf:
 * the model's weights or inputs are not finite (--allow-nonfinite keeps such
 * results)". */
int hs_fail_nonfinite(double v, const char *what);

/* hs_study_rows_record of a head table and curves: what a study commits as
 * it goes (a layer's rows, a step's curve point). */
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

/* Every row a study records, pointing into its result (curves: names
 * copied, points borrowed): head_pair_metrics, head_metrics, curves,
 * position_metrics and edge_metrics rows. A study that commits rows as it
 * goes (ablate's layers, prune's steps, train's curves: env->ix) leaves
 * here what it did not commit. */
typedef struct {
    const hs_pair_row *pairs;
    int n_pairs;
    const hs_head_table *heads;
    hs_study_curve curve[2];
    int n_curves;
    const hs_position_row *pos;
    int n_pos;
    const hs_edge_row *edges;
    long n_edges;
} hs_study_rows;

/* The one writer of a study's rows: each table in one transaction, in the
 * order above (a no-op returning HS_OK when ix is NULL). */
int hs_study_rows_record(hs_index *ix, int64_t run_id, const hs_study_rows *rows);

/* What every study is handed besides its options. */
typedef struct hs_study_env {
    const hs_model *m;       /* the model (NULL where a study makes its own) */
    const hs_tokens *data;   /* token data (NULL: none) */
    const char *data_name;   /* its file, for messages (NULL: none) */
    const hs_tokens *val;    /* validation tokens (NULL: none) */
    const hs_prompt_set *ps; /* prompt pairs (NULL: none) */
    const struct hs_task *task; /* a labelled task instead of data (SPEC §16; NULL: none) */
    const struct hs_pairs *pairs; /* an encoder-decoder's pairs instead of data (SPEC §17;
                                     NULL: none) */
    const hs_tokenizer *tk;  /* the tokenizer that applies (NULL: none known) */
    int batch, seq_len;      /* the data's forwards: sequences (prompts) per batch, length */
    size_t max_batches;      /* 0: every whole batch */
    hs_index *ix;            /* where rows committed as the study goes are written (NULL: none) */
    int64_t run_id;
    int resume;              /* the run is resumed: what it holds is skipped */
    hs_study_io io;
} hs_study_env;

/* A study as a driver runs it: its check, study and free behind void
 * pointers, and the size of its result (whose first member is its
 * hs_study_rows). */
typedef struct {
    size_t result_size;
    int (*check)(void *opts, const hs_study_env *env);
    int (*study)(void *result, const void *opts, const hs_study_env *env);
    void (*free)(void *result);
} hs_study_kind;

/* Defines hs_NAME_kind from the three functions of the shape above (CHECK:
 * hs_NAME_check, or another name where a lower layer took that one). */
#define HS_STUDY_KIND(NAME, CHECK)                                                         \
    HS_STUDY_KIND_OF(NAME, hs_##NAME##_result, CHECK, hs_##NAME##_study,                   \
                     hs_##NAME##_result_free)

/* The same where the result is hs_NAME_study_result, the rows beside the
 * result of a lower layer's computation (hs_patch_result, ...). */
#define HS_STUDY_KIND_WRAPPED(NAME, CHECK)                                                 \
    HS_STUDY_KIND_OF(NAME, hs_##NAME##_study_result, CHECK, hs_##NAME##_study,             \
                     hs_##NAME##_study_result_free)

#define HS_STUDY_KIND_OF(NAME, RESULT, CHECK, STUDY, FREE)                                 \
    static int NAME##_check_any(void *o, const hs_study_env *e) { return CHECK(o, e); }    \
    static int NAME##_study_any(void *r, const void *o, const hs_study_env *e)             \
    {                                                                                      \
        return STUDY(r, o, e);                                                             \
    }                                                                                      \
    static void NAME##_free_any(void *r) { FREE(r); }                                      \
    const hs_study_kind hs_##NAME##_kind = { sizeof(RESULT), NAME##_check_any,             \
                                             NAME##_study_any, NAME##_free_any }

#endif
