/* api/: labelled tasks (SPEC §16) for the flat interface: a task file read
 * for a model, its numbers, and a classifier's outputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "api_json.h"
#include "inputs.h"
#include "predict.h"
#include "task.h"

struct hs_api_task {
    hs_task t;
    char *path;
};

const hs_task *hs_api_task_of(const hs_api_task *t) { return &t->t; }
const char *hs_api_task_path(const hs_api_task *t) { return t->path; }

int hs_api_task_load(hs_api_task **out, const hs_model *m, const char *model_dir, const char *path,
                     const char *tokenizer, int seq_len, int truncate, const char *label_map,
                     const char *metric)
{
    *out = NULL;
    hs_task_opts o = { path, seq_len, truncate, { 0 }, 0, metric };
    if (!path)
        return hs_fail(HS_EINVAL, "task: a file is required");
    int rc = label_map ? hs_task_label_map_parse(&o, label_map) : HS_OK;
    hs_tokenizer *tk = NULL;
    if (!rc)
        rc = hs_tokenizer_resolve(&tk, tokenizer, model_dir);
    hs_api_task *t = rc ? NULL : hs_calloc(1, sizeof *t, "task");
    if (!rc && (!t || !(t->path = strdup(path))))
        rc = hs_fail(HS_ENOMEM, "out of memory for the task");
    if (!rc)
        rc = hs_task_load(&t->t, &o, &m->cfg, tk);
    if (tk)
        hs_tokenizer_free(tk);
    if (rc) {
        if (t)
            free(t->path);
        free(t);
        return rc;
    }
    *out = t;
    return HS_OK;
}

void hs_api_task_free(hs_api_task *t)
{
    if (!t)
        return;
    hs_task_free(&t->t);
    free(t->path);
    free(t);
}

int hs_api_task_count(const hs_api_task *t) { return t->t.n; }

int hs_api_eval_task(char **json, const hs_model *m, const hs_api_task *t, int batch)
{
    *json = NULL;
    if (batch < 1)
        return hs_fail(HS_EINVAL, "batch %d must be at least 1", batch);
    hs_task_eval_result r;
    const int rc = hs_task_eval(&r, m, &t->t, batch, NULL);
    if (rc)
        return rc;
    hs_jbuf b = { 0 };
    hs_jraw(&b, "{\"task_loss\":");
    hs_jnum(&b, r.loss);
    hs_jraw(&b, ",\"task_loss_stderr\":");
    hs_jnum(&b, r.loss_se);
    for (int i = 0; i < r.n_metrics; i++) {
        char key[48];
        hs_jraw(&b, ",");
        hs_jkey(&b, 1, hs_task_metric_name(r.metric[i]));
        hs_jnum(&b, r.value[i]);
        snprintf(key, sizeof key, "%s_stderr", hs_task_metric_name(r.metric[i]));
        hs_jraw(&b, ",");
        hs_jkey(&b, 1, key);
        hs_jnum(&b, r.se[i]);
    }
    hs_jraw(&b, ",\"metric\":");
    hs_jstr(&b, hs_task_metric_name(r.metric[r.headline]));
    hs_jf(&b, ",\"n\":%d}", r.n);
    return hs_jdone(&b, json);
}

int hs_api_classify(const hs_model *m, const int32_t *ids, const unsigned char *mask, int B, int T,
                    hs_real *out)
{
    const hs_model_config *c = &m->cfg;
    if (!c->n_labels)
        return hs_fail(HS_EINVAL, "the model has no classification head (a "
                                  "…ForSequenceClassification checkpoint has one)");
    if (B < 1 || T < 1)
        return hs_fail(HS_EINVAL, "classify: %d x %d ids", B, T);
    int32_t *in = hs_calloc((size_t)B * T, sizeof *in, "classifier ids");
    int *pool = hs_calloc((size_t)B, sizeof *pool, "classifier rows");
    int rc = in && pool ? HS_OK : HS_ENOMEM;
    /* a masked position is padding: pad_token_id, which an encoder's keys
     * and a decoder's pooling leave out (HF pads with it) */
    for (size_t i = 0; !rc && i < (size_t)B * T; i++) {
        in[i] = ids[i];
        if (mask && !mask[i] && c->pad_id < 0)
            rc = hs_fail(HS_EINVAL, "attention_mask masks a position, but config.json gives "
                                    "no pad_token_id to pad with");
        else if (mask && !mask[i])
            in[i] = c->pad_id;
    }
    hs_acts a = { 0 };
    if (!rc)
        rc = hs_acts_alloc(&a, c, B, T, HS_ACTS_LOSS);
    if (!rc)
        rc = hs_forward(&a, m, in, NULL, NULL);
    for (int b = 0; !rc && b < B; b++)
        pool[b] = hs_classify_pool(c, in + (size_t)b * T, T);
    if (!rc)
        rc = hs_classify(out, &a, m, pool);
    if (a.block)
        hs_acts_free(&a);
    free(in);
    free(pool);
    return rc;
}

int hs_api_predict_top(const hs_model *m, const int32_t *ids, int n, int k, int32_t *top_ids,
                       double *logits, double *probs)
{
    hs_prediction *top = hs_calloc((size_t)(k > 0 ? k : 1), sizeof *top, "predictions");
    int rc = top ? hs_predict_top(top, k, m, ids, n) : HS_ENOMEM;
    for (int i = 0; !rc && i < k; i++)
        top_ids[i] = top[i].id, logits[i] = top[i].logit, probs[i] = top[i].prob;
    free(top);
    return rc;
}
