#include "inputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <stdint.h>

#include "checkpoint.h"
#include "kv_plan.h"
#include "config_json.h"
#include "mlm.h"
#include "study.h"
#include "study_headcount.h"

const char *hs_source_path(const hs_source *s) { return s->data ? s->data : s->text; }

int hs_tokenizer_for(hs_tokenizer **tk, const char *tokenizer, const char *model_dir,
                     const char **used)
{
    *tk = NULL;
    const char *path = tokenizer ? tokenizer
                       : model_dir && hs_tokenizer_present(model_dir) ? model_dir
                                                                        : NULL;
    if (used)
        *used = path;
    return path ? hs_tokenizer_open(tk, path) : HS_OK;
}

int hs_tokenizer_resolve(hs_tokenizer **tk, const char *tokenizer, const char *model_dir)
{
    return *tk ? HS_OK : hs_tokenizer_for(tk, tokenizer, model_dir, NULL);
}

int hs_source_load(hs_tokens *t, const hs_source *s, hs_tokenizer **tk, const char *model_dir,
                   int vocab)
{
    memset(t, 0, sizeof *t);
    if (s->lines) /* the studies that cut lines read them through hs_inputs_load */
        return hs_fail(HS_EINVAL, "--lines: this command reads its text as one document (lines "
                                  "are not implemented for it yet)");
    if (s->data) {
        int rc = hs_tokens_read(t, s->data);
        for (size_t i = 0; !rc && vocab > 0 && i < t->n; i++)
            if (t->tok[i] >= vocab)
                rc = hs_fail(HS_EINVAL, "%s: token %d at %zu is outside the vocabulary of %d%s%s",
                             s->data, t->tok[i], i, vocab, model_dir ? " of the model " : "",
                             model_dir ? model_dir : "");
        if (rc)
            hs_tokens_free(t);
        return rc;
    }
    int rc = hs_tokenizer_resolve(tk, s->tokenizer, model_dir);
    if (!rc && !*tk && s->bytes && vocab == 256) { /* as `tokens --in` reads a file */
        size_t n = 0;
        int32_t *ids = NULL;
        rc = hs_tokens_read_bytes(&ids, &n, s->text, 0);
        if (!rc && (rc = hs_tokens_adopt(t, ids, n)))
            free(ids);
        return rc;
    }
    if (!rc && !*tk)
        return model_dir ? hs_fail(HS_EINVAL, "--text %s needs --tokenizer PATH (%s holds no "
                                   "tokenizer.json, vocab.json + merges.txt or SentencePiece .model)", s->text, model_dir)
                         : hs_fail(HS_EINVAL, "--text %s needs --tokenizer PATH", s->text);
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    char *text = NULL; /* texts are held in memory, as their ids are */
    if (!rc)
        rc = hs_read_file(&text, &len, s->text, (size_t)1 << 30, 0);
    if (!rc && (rc = hs_tokenizer_encode(*tk, text, len, 1, &ids, &n))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hs_last_error());
        hs_fail(rc, "%s: %s", s->text, msg);
    }
    for (size_t i = 0; !rc && vocab > 0 && i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            rc = hs_fail(HS_EINVAL, "%s: token %d at %zu (from the tokenizer %s) is outside the "
                         "vocabulary of %d of the model %s", s->text, ids[i], i,
                         hs_tokenizer_path(*tk), vocab, model_dir ? model_dir : "being trained");
    if (!rc)
        rc = hs_tokens_adopt(t, ids, n);
    if (rc)
        free(ids);
    free(text);
    return rc;
}

int hs_split_load(hs_split *s, const hs_source *src, const hs_source *vsrc,
                  const char *model_dir, int vocab, int B, int T)
{
    memset(s, 0, sizeof *s);
    hs_tokenizer *tk = NULL; /* one for both texts */
    hs_source v = *vsrc;
    v.tokenizer = src->tokenizer;
    int rc = hs_source_load(&s->all, src, &tk, model_dir, vocab);
    if (!rc && hs_source_path(&v))
        rc = hs_source_load(&s->own, &v, &tk, model_dir, vocab);
    if (tk)
        hs_tokenizer_free(tk);
    if (!rc && hs_source_path(&v))
        s->train = s->all, s->val = s->own;
    else if (!rc)
        hs_headcount_split(&s->all, &s->train, &s->val);
    if (!rc && B > 0 && (!hs_batch_count(&s->train, B, T) || !hs_batch_count(&s->val, B, T)))
        rc = hs_fail(HS_EINVAL, "%s: too few tokens for a batch of %d x %d in both the training "
                     "and validation parts", hs_source_path(src), B, T);
    if (rc)
        hs_split_free(s);
    return rc;
}

void hs_split_free(hs_split *s)
{
    hs_tokens_free(&s->all);
    hs_tokens_free(&s->own);
    memset(s, 0, sizeof *s);
}

int hs_seq_len_check(const hs_model_config *c, int T, const char *option)
{
    if (T > c->n_ctx)
        return hs_fail(HS_EINVAL, "%s %d exceeds the model's n_ctx=%d", option, T, c->n_ctx);
    return HS_OK;
}

int hs_seq_len_or_default(const hs_model_config *c, int T)
{
    return T ? T : c->n_ctx < 256 ? c->n_ctx : 256;
}

void hs_inputs_free(hs_inputs *in)
{
    hs_prompt_set_free(&in->ps);
    hs_task_free(&in->task);
    hs_pairs_free(&in->pairs);
    hs_tokens_free(&in->tok);
    hs_tokens_free(&in->val);
    if (in->tk)
        hs_tokenizer_free(in->tk);
    hs_model_free(&in->m);
    memset(in, 0, sizeof *in);
}

/* --text --lines: the lines of text as padded sequences of T positions
 * (hs_task_load_lines; T 0: the longest line's) into out, their padding as
 * its valid mask. The data's (val 0) set in's length, and the batch that
 * takes every line; the validation text's are padded to the data's. */
static int load_lines(hs_inputs *in, const hs_inputs_spec *s, const char *text, hs_tokens *out,
                      int T, int val)
{
    hs_task lines = { 0 };
    int rc = hs_tokenizer_resolve(&in->tk, s->source.tokenizer, s->model);
    if (!rc)
        rc = hs_task_load_lines(&lines, text, T, 0, &in->m.cfg, in->tk);
    unsigned char *valid = NULL;
    if (!rc && !(rc = hs_task_tokens(out, &valid, &lines)))
        out->valid = valid;
    in->seq_len = val ? in->seq_len : lines.T;
    while (!rc && !val && in->batch > 1 && lines.n % in->batch)
        in->batch--;
    hs_task_free(&lines);
    return rc;
}

/* The validation tokens, with the tokenizer that applies: one whole batch at
 * least, an encoder's masked-LM recipe as the tokens'. */
static int load_val(hs_inputs *in, const hs_inputs_spec *s)
{
    hs_source src = s->val;
    src.tokenizer = s->source.tokenizer, src.lines = s->source.lines; /* read as the data is */
    int rc = src.lines && src.text
                 ? load_lines(in, s, src.text, &in->val, in->seq_len, 1)
                 : hs_source_load(&in->val, &src, &in->tk, s->model,
                                  s->model ? in->m.cfg.vocab_size : 0);
    if (!rc && s->need_batch && !hs_batch_count(&in->val, in->batch, in->seq_len))
        rc = hs_fail_few_tokens(hs_source_path(&src), &in->val, in->batch, in->seq_len);
    in->val.mlm = in->tok.mlm;
    return rc;
}

/* The prompts file, encoded with the tokenizer that applies (ids-only files
 * need none). */
static int load_prompts(hs_inputs *in, const hs_inputs_spec *s)
{
    int rc = hs_tokenizer_resolve(&in->tk, s->source.tokenizer, s->model);
    if (!rc)
        rc = hs_prompts_load(&in->ps, s->prompts, in->tk, in->m.cfg.vocab_size, in->m.cfg.n_ctx);
    return rc;
}

int hs_fail_few_tokens(const char *what, const hs_tokens *t, int B, int T)
{
    const size_t fit = t->n > 1 && B > 0 ? (t->n - 1) / (size_t)B : 0;
    if (!fit)
        return hs_fail(HS_EINVAL, "%s: fewer than one batch of %d x %d (+1) tokens: it holds %zu",
                       what, B, T, t->n);
    return hs_fail(HS_EINVAL, "%s: fewer than one batch of %d x %d (+1) tokens: it holds %zu (at "
                              "--batch %d, a --seq-len of at most %zu fits)",
                   what, B, T, t->n, B, fit);
}

/* --lines and --seq-len auto against what s reads: HS_EINVAL, a usage
 * error, where they cannot apply. */
static int check_shape(const hs_inputs *in, const hs_inputs_spec *s)
{
    const hs_source *src = &s->source;
    if (src->lines && !(src->text && s->need_batch))
        return hs_fail(HS_EINVAL, src->text ? "--lines: this command reads its text as one "
                                              "document (not implemented for lines yet)"
                                            : "--lines cuts --text into sequences: it needs --text");
    if (in->whole && !(hs_source_path(src) && s->need_batch))
        return hs_fail(HS_EINVAL, "--seq-len auto takes the whole text or shard as one "
                                  "sequence: it needs --text or --data");
    return HS_OK;
}

/* --seq-len auto: the loaded tokens one sequence, every token an input and
 * the last a target only (in->seq_len = their count - 1), within the
 * model's context. */
static int whole_sequence(hs_inputs *in, const hs_inputs_spec *s)
{
    const hs_tokens *t = &in->tok;
    const char *what = hs_source_path(&s->source);
    in->seq_len = t->n > 1 && t->n - 1 <= (size_t)INT32_MAX ? (int)(t->n - 1) : 0;
    if (!in->seq_len)
        return hs_fail(HS_EINVAL, "--seq-len auto: %s holds %zu tokens (a sequence needs 2 at "
                       "least: inputs and a target)", what, t->n);
    if (s->model && in->seq_len > in->m.cfg.n_ctx)
        return hs_fail(HS_EINVAL, "--seq-len auto: %s holds %zu tokens, a sequence of %d "
                       "positions, more than the model's n_ctx=%d (give --seq-len)", what, t->n,
                       in->seq_len, in->m.cfg.n_ctx);
    return HS_OK;
}

int hs_inputs_load(hs_inputs *in, const hs_inputs_spec *s)
{
    memset(in, 0, sizeof *in);
    const hs_source *src = &s->source;
    const int tokens = src->data || src->text;
    if (s->pairs && (!s->allow_pairs || tokens || s->task)) {
        in->usage = 1;
        return hs_fail(HS_EINVAL, !s->allow_pairs ? "--pairs: this command does not take "
                                                    "source-target pairs (eval, ablate, importance, prune, patterns and train do)"
                                                  : "--pairs: instead of --data, --text or "
                                                    "--task, not with them");
    }
    int rc = s->model ? hs_checkpoint_load_stored(&in->m, s->model, HS_WEIGHTS_MAPPED) : HS_OK;
    const hs_model_config *c = &in->m.cfg;
    if (!rc && s->model && s->kv_plan) /* SPEC §18: streaming heads, before any length check */
        rc = hs_kv_plan_load(&in->m.cfg, s->kv_plan);
    in->seq_len = s->seq_len;
    const int lines = src->lines; /* each line padded to the longest (or seq_len) */
    in->whole = s->seq_len == HS_SEQ_LEN_AUTO && !lines;
    in->batch = in->whole ? 1 : s->batch;
    if (!rc && (rc = check_shape(in, s))) {
        hs_inputs_free(in);
        in->usage = 1;
        return rc;
    }
    if (!rc && s->model && s->need_batch && !in->whole && !lines)
        in->seq_len = hs_seq_len_or_default(c, in->seq_len);
    if (!rc && s->model && s->need_batch && !in->whole && !lines &&
        (rc = hs_seq_len_check(c, in->seq_len, "--seq-len"))) {
        hs_inputs_free(in);
        in->usage = 1;
        return rc;
    }
    if (!rc && lines)
        rc = load_lines(in, s, src->text, &in->tok,
                        s->seq_len == HS_SEQ_LEN_AUTO ? 0 : s->seq_len, 0);
    else if (!rc && tokens)
        rc = hs_source_load(&in->tok, src, &in->tk, s->model, s->model ? c->vocab_size : 0);
    if (!rc && s->keep_tokenizer)
        rc = hs_tokenizer_resolve(&in->tk, src->tokenizer, s->model);
    if (!rc && in->whole)
        rc = whole_sequence(in, s);
    if (!rc && tokens && s->need_batch && !hs_batch_count(&in->tok, in->batch, in->seq_len))
        rc = hs_fail_few_tokens(hs_source_path(src), &in->tok, in->batch, in->seq_len);
    if (!rc && s->mlm && tokens) {
        /* an encoder's loss is the masked-LM loss; options for a causal LM are refused */
        if (c->encoder) /* the mask token's id */
            rc = hs_tokenizer_resolve(&in->tk, src->tokenizer, s->model);
        if (!rc)
            in->usage = (rc = hs_mlm_setup(&in->tok.mlm, c, in->tk, s->mlm)) == HS_EINVAL;
    }
    if (!rc && hs_source_path(&s->val))
        rc = load_val(in, s);
    if (!rc && s->prompts && s->model) /* every prompts study reads logit differences */
        rc = hs_config_logits(c, "a prompts study (its logit differences)");
    if (!rc && s->prompts)
        rc = load_prompts(in, s);
    if (!rc && s->task && !(rc = hs_tokenizer_resolve(&in->tk, src->tokenizer, s->model)) &&
        !(rc = hs_task_load(&in->task, s->task, c, in->tk)))
        in->seq_len = in->task.T;
    if (!rc && s->pairs)
        rc = hs_pairs_load(&in->pairs, s->pairs, c, &in->tk, src->tokenizer, s->model,
                           s->seq_len > 0 ? s->seq_len : 0);
    in->data_path = s->prompts ? s->prompts
                    : tokens   ? hs_source_path(src)
                    : s->task  ? s->task->path
                    : s->pairs ? s->pairs
                               : s->maps;
    if (rc) {
        const int usage = in->usage;
        hs_inputs_free(in);
        in->usage = usage;
    }
    return rc;
}

int hs_inputs_record(hs_run *run, const hs_inputs *in)
{
    int rc = HS_OK;
    char T[32];
    snprintf(T, sizeof T, "%d", in->seq_len);
    if (in->seq_len > 0)
        rc = hs_run_param(run, "seq_len", T);
    char heads[HS_MAX_LAYERS * 6 + 4] = "[", kv[HS_MAX_LAYERS * 6 + 4] = "[";
    for (int l = 0, k = 1, j = 1; l < in->m.cfg.n_layer; l++) {
        k += snprintf(heads + k, sizeof heads - (size_t)k, "%s%d", l ? "," : "",
                      in->m.cfg.n_head[l]);
        j += snprintf(kv + j, sizeof kv - (size_t)j, "%s%d", l ? "," : "", in->m.cfg.n_kv_head[l]);
    }
    strcat(heads, "]"), strcat(kv, "]");
    if (!rc && in->m.cfg.n_layer)
        rc = hs_run_param(run, "n_head", heads);
    if (!rc && in->m.cfg.n_layer) /* kv-plan's kv heads (SPEC §18) */
        rc = hs_run_param(run, "n_kv_head", kv);
    if (!rc && in->ps.n)
        rc = hs_run_position_labels(run, &in->ps, in->tk, in->m.cfg.vocab_size);
    if (!rc && in->m.cfg.n_pruned) { /* heads without rows (hs_study_rows_record) */
        cJSON *o = cJSON_CreateObject();
        hs_cfg_add_pruned_heads(o, &in->m.cfg);
        char *text = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o, "pruned_heads"));
        rc = text ? hs_run_param(run, "pruned_heads", text) : HS_ENOMEM;
        free(text);
        cJSON_Delete(o);
    }
    return rc;
}

int hs_prompt_ids(const char *ids_s, const char *text, const hs_tokenizer *tok, int V,
                  int32_t **ids, int *usage)
{
    *ids = NULL, *usage = 0;
    if (ids_s) {
        int n = 1;
        for (const char *p = ids_s; *p; p++)
            n += *p == ',';
        if (!(*ids = hs_calloc((size_t)n, sizeof **ids, "prompt ids")))
            return -1;
        if ((n = hs_parse_ints(ids_s, *ids, n, 0, INT32_MAX, 0)) < 1) {
            free(*ids), *ids = NULL, *usage = 1;
            hs_fail(HS_EINVAL, "--prompt-ids '%s': non-negative ids separated by commas "
                    "expected", ids_s);
            return -1;
        }
        return n;
    }
    size_t n = strlen(text);
    if (tok)
        return hs_tokenizer_encode(tok, text, n, 1, ids, &n) ? -1 : (int)n;
    if (V != 256) {
        *usage = 1;
        hs_fail(HS_EINVAL, "--prompt needs a tokenizer (--tokenizer PATH, or one in the model "
                "directory) unless the model is byte-level; or give --prompt-ids");
        return -1;
    }
    if (!(*ids = hs_calloc(n ? n : 1, sizeof **ids, "prompt ids")))
        return -1;
    for (size_t i = 0; i < n; i++)
        (*ids)[i] = (unsigned char)text[i];
    return (int)n;
}
