/* Training a model, its curves recorded as it goes, its checkpoint written. */
#ifndef HS_STUDY_TRAIN_H
#define HS_STUDY_TRAIN_H

#include "inputs.h"
#include "study.h"
#include "train.h"

typedef struct {
    /* B, T, steps, lr, weight_decay, clip, warmup, val, val_every (0: a
     * tenth of the steps), val_batches and stop as hs_train takes them (its
     * on_step, on_val and ctx are the study's own) */
    hs_train_opts train;
    const struct hs_task *task; /* train --task: fine-tune the classifier on it (hs_task_train);
                                   NULL: the token data */
    /* train --pairs: an encoder-decoder on its pairs, validated on val_pairs
     * (NULL: none) (hs_pairs_train); curves' x counts target tokens at the
     * pairs' mean length */
    const struct hs_pairs *pairs, *val_pairs;
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

/* `train`'s data, read and checked before anything trains: the training and
 * validation shards, or texts tokenized by their --tokenizer or the --init
 * checkpoint's (init NULL: none), at least one batch of B x T (+1) each;
 * an encoder's masked-LM recipe seeded by seed; the memory training will
 * hold; then the output folder made. HS_OK, or the status with the message
 * set (HS_EINVAL for the data, HS_ENOMEM, HS_EIO). */
int hs_train_data_load(hs_tokens *tok, hs_tokens *vtok, const hs_model *m, const hs_source *src,
                       const hs_source *vsrc, const char *init, int B, int T, const char *out,
                       long seed);

/* The model `train` starts from: the checkpoint init, or a configuration
 * -- config.json at `config` (any family's keys) or else c (a preset's,
 * hs_config_build) -- randomly initialised from seed. HS_OK or the status
 * with the message set. */
int hs_train_model_open(hs_model *m, const hs_model_config *c, const char *config,
                        const char *init, unsigned long long seed);

/* `train --pairs`'s data, read and checked before anything trains: the
 * pairs at path and (val not NULL) at val into p and vp, text tokenized by
 * tokenizer or the --init checkpoint's (init NULL: none); then the output
 * folder made. HS_OK or the status with the message set. */
int hs_train_pairs_load(struct hs_pairs *p, struct hs_pairs *vp, const hs_model *m,
                        const char *path, const char *val, const char *tokenizer,
                        const char *init, const char *out);

#endif
