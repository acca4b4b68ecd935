/* The train study (study.h): training with its curves and its checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "config_file.h"
#include "inputs.h"
#include "memory.h"
#include "mlm.h"
#include "trainer.h"
#include "sha256.h"
#include "metrics.h"
#include "study.h"
#include "study_train.h"
#include "pairs_heads.h"
#include "task_heads.h"

typedef struct {
    const hs_train_study_opts *o;
    hs_train_result *r;
    hs_curve_writer train_loss;
    long tokens_per_step;
    double start;
    char write_error[512]; /* the first failed index write */
} train_ctx;

/* Keeps the message of the first failed curve write. */
static void note_failure(train_ctx *t)
{
    if (t->train_loss.failed && !t->write_error[0])
        snprintf(t->write_error, sizeof t->write_error, "%s", hs_last_error());
}

static void on_step(void *ctx, long step, double loss, double lr)
{
    train_ctx *t = ctx;
    (void)lr;
    t->r->final_loss = loss;
    const double el = hs_now() - t->start;
    if (t->o->on_step)
        t->o->on_step(t->o->ctx, step, loss, el > 0 ? step * t->tokens_per_step / el : 0.0);
    hs_curve_writer_add(&t->train_loss, (hs_curve_point){ step, (double)step * t->tokens_per_step,
                                                           loss });
    note_failure(t);
}

static void on_val(void *ctx, long step, double loss, double se)
{
    train_ctx *t = ctx;
    hs_curve_writer_flush(&t->train_loss);
    note_failure(t);
    if (t->o->on_val)
        t->o->on_val(t->o->ctx, step, loss, se);
    if (t->o->ix && !t->train_loss.failed) {
        hs_curve_point p = { step, (double)step * t->tokens_per_step, loss };
        if (hs_index_curve_add(t->o->ix, t->o->run_id, HS_METRIC(VAL_LOSS), &p, 1))
            t->train_loss.failed = 1;
        note_failure(t);
    }
}

int hs_train_study(hs_train_result *r, hs_model *m, const hs_tokens *data,
                   const hs_train_study_opts *o)
{
    memset(r, 0, sizeof *r);
    train_ctx t = { o, r, { .ix = o->ix, .run_id = o->run_id }, (long)o->train.B * o->train.T,
                    hs_now(), "" };
    snprintf(t.train_loss.name, sizeof t.train_loss.name, "%s", HS_METRIC(TRAIN_LOSS));
    if (o->pairs) { /* target tokens a step, at the pairs' mean length */
        long tokens = 0;
        for (int i = 0; i < o->pairs->n; i++)
            tokens += o->pairs->tgt_len[i];
        t.tokens_per_step = o->train.B * tokens / (o->pairs->n ? o->pairs->n : 1);
    }
    hs_train_opts to = o->train;
    to.on_step = on_step, to.on_val = on_val, to.ctx = &t;
    if (!to.val_every)
        to.val_every = to.steps >= 10 ? to.steps / 10 : 1;
    int rc = o->task    ? hs_task_train(m, o->task, &to)
             : o->pairs ? hs_pairs_train(m, o->pairs, o->val_pairs, &to)
                        : hs_train(m, data, &to);
    r->seconds = hs_now() - t.start;
    hs_curve_writer_flush(&t.train_loss);
    note_failure(&t);
    r->curve_failed = t.train_loss.failed;
    const int interrupted = rc == HS_EINTR;
    char interrupt_msg[128];
    snprintf(interrupt_msg, sizeof interrupt_msg, "%s", interrupted ? hs_last_error() : "");
    if (rc && !interrupted)
        return rc;
    /* An interrupted run still saves what it learned; a failed one does not. */
    char target[1100];
    snprintf(target, sizeof target, "%s/model.safetensors", o->out);
    uint64_t bytes = 0;
    int save_rc = hs_checkpoint_save(m, o->out);
    /* The checkpoint's hash is provenance: computed only when an index
     * records it (the run's model_sha256 and its artifact row). */
    if (!save_rc && o->ix)
        save_rc = hs_sha256_file(target, r->model_sha, &bytes);
    if (save_rc)
        return save_rc;
    r->saved = 1;
    if (interrupted)
        return hs_fail(HS_EINTR, "%s", interrupt_msg);
    /* The model is saved; a curve or the artifact the index lacks still fails
     * the run: its record is incomplete. */
    if (r->curve_failed)
        return hs_fail(HS_EIO, "%s (curve points were lost; the model is saved in %s)",
                       t.write_error, o->out);
    if (o->ix && hs_index_artifact_add(o->ix, o->run_id, target, r->model_sha, (int64_t)bytes, 1))
        return hs_fail(HS_EIO, "%s (the model is saved in %s)", hs_last_error(), o->out);
    return HS_OK;
}

int hs_train_data_load(hs_tokens *tok, hs_tokens *vtok, const hs_model *m, const hs_source *src,
                       const hs_source *vsrc, const char *init, int B, int T, const char *out,
                       long seed)
{
    const char *data = hs_source_path(src), *val = hs_source_path(vsrc);
    hs_tokenizer *tk = NULL; /* read once, for both texts and the mask token */
    int rc = hs_source_load(tok, src, &tk, init, m->cfg.vocab_size) ||
             (val && hs_source_load(vtok, vsrc, &tk, init, m->cfg.vocab_size));
    const char *too_short = rc || hs_batch_count(tok, B, T) ? NULL : data;
    if (!rc && !too_short && val && !hs_batch_count(vtok, B, T))
        too_short = val;
    if (too_short)
        rc = hs_fail_few_tokens(too_short, too_short == data ? tok : vtok, B, T);
    const hs_mlm_opts mo = { -1, NULL, seed }; /* an encoder's masked-LM loss, seeded by --seed */
    if (!rc && m->cfg.encoder)
        rc = hs_tokenizer_resolve(&tk, src->tokenizer, init) ||
             hs_mlm_setup(&tok->mlm, &m->cfg, tk, &mo);
    hs_tokenizer_free(tk);
    if (rc)
        return HS_EINVAL;
    vtok->mlm = tok->mlm;
    /* what training will hold beside the parameters, before the folder is made */
    if (hs_mem_check(hs_trainer_bytes(&m->cfg, m->n_params, B, T),
                     "training (activations, gradients, AdamW's moments)"))
        return HS_ENOMEM;
    return hs_mkdirs(out);
}

int hs_train_model_open(hs_model *m, const hs_model_config *c, const char *config,
                        const char *init, unsigned long long seed)
{
    if (init)
        return hs_checkpoint_load(m, init);
    hs_model_config fc;
    char *json = NULL;
    size_t len;
    int rc = config ? hs_read_file(&json, &len, config, 1 << 24, 0) : HS_OK;
    if (!rc && config)
        rc = hs_config_parse(&fc, json, config);
    free(json);
    if (!rc && !(rc = hs_model_init(m, config ? &fc : c)))
        hs_model_init_random(m, seed);
    return rc;
}

int hs_train_pairs_load(struct hs_pairs *p, struct hs_pairs *vp, const hs_model *m,
                        const char *path, const char *val, const char *tokenizer,
                        const char *init, const char *out)
{
    hs_tokenizer *tk = NULL; /* read once, for both files */
    int rc = hs_pairs_load(p, path, &m->cfg, &tk, tokenizer, init, 0);
    if (!rc && val)
        rc = hs_pairs_load(vp, val, &m->cfg, &tk, tokenizer, init, 0);
    hs_tokenizer_free(tk);
    return rc ? rc : hs_mkdirs(out);
}
