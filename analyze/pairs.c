#include "pairs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bleu.h"
#include "inputs.h"
#include "json.h"
#include "layers.h"
#include "metrics.h"
#include "prompts.h"
#include "seq2seq.h"
#include "stats.h"

/* The longest pairs file read whole. */
enum { PAIRS_FILE_LIMIT = 1 << 30 };

static int bad(const char *path, long line, const char *what)
{
    return hs_fail(HS_EINVAL, "%s:%ld: %s", path, line, what);
}

/* Where text lines find their tokenizer: *tk, opened on first use. */
typedef struct {
    hs_tokenizer **tk;
    const char *tokenizer, *model_dir;
} tk_source;

/* One side's ids: the list under ids_key, or the text under text_key
 * encoded as hs_source_ids does. */
static int side(int32_t **ids, int *n, const cJSON *o, const char *text_key,
                const char *ids_key, const hs_model_config *c, const tk_source *ts,
                const char *path, long line)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(o, text_key);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, ids_key);
    char msg[200];
    if (!text == !list || (text && !cJSON_IsString(text))) {
        snprintf(msg, sizeof msg, "a pair has \"%s\" (a string) or \"%s\" (a list of ids), one "
                                  "of them", text_key, ids_key);
        return bad(path, line, msg);
    }
    if (list)
        return hs_json_ids(list, ids_key, path, (int)line, c->vocab_size, ids, n);
    if (!*ts->tk && hs_tokenizer_resolve(ts->tk, ts->tokenizer, ts->model_dir)) {
        snprintf(msg, sizeof msg, "a text pair's tokenizer: %s", hs_last_error());
        return bad(path, line, msg);
    }
    /* a target with its own model where the tokenizer has one (Marian's target.spm) */
    const hs_tokenizer *tk = strcmp(text_key, "target") ? *ts->tk : hs_tokenizer_target(*ts->tk);
    if ((*n = hs_source_ids(tk, text->valuestring, c, ids)) < 0) {
        snprintf(msg, sizeof msg, "\"%s\": %s", text_key, hs_last_error());
        return bad(path, line, msg);
    }
    return HS_OK;
}

int hs_source_ids(const hs_tokenizer *tk, const char *text, const hs_model_config *c,
                  int32_t **ids)
{
    size_t len;
    *ids = NULL;
    if (!tk) {
        hs_fail(HS_EINVAL, "a source or target text needs a tokenizer (--tokenizer, or the "
                           "model directory's)");
        return -1;
    }
    if (hs_tokenizer_encode(tk, text, strlen(text), 1, ids, &len))
        return -1;
    if (!len || (*ids)[len - 1] != c->eos_id) { /* the eos every family's tokenizer ends with */
        int32_t *grown = realloc(*ids, (len + 1) * sizeof **ids);
        if (!grown) {
            hs_fail(HS_ENOMEM, "out of memory (source ids)");
            return -1;
        }
        *ids = grown;
        (*ids)[len++] = c->eos_id;
    }
    for (size_t k = 0; k < len; k++)
        if ((*ids)[k] < 0 || (*ids)[k] >= c->vocab_size) {
            hs_fail(HS_EINVAL, "the tokenizer's id %d is outside the model's vocabulary of %d",
                    (*ids)[k], c->vocab_size);
            return -1;
        }
    if (len > (size_t)INT32_MAX) {
        hs_fail(HS_EINVAL, "a text of more than 2^31 tokens");
        return -1;
    }
    return (int)len;
}

/* The positions a side may take: the learned or sinusoidal table's rows, or
 * with relative positions only memory's bound. */
static int positions(const hs_model_config *c)
{
    return c->pos == HS_POS_NONE ? INT32_MAX : c->n_ctx;
}

static int read_line(hs_pairs *p, const cJSON *o, const hs_model_config *c,
                     const tk_source *ts, int max_src, const char *path, long line)
{
    const int i = p->n;
    char msg[200];
    int rc = side(&p->src[i], &p->src_len[i], o, "source", "source_ids", c, ts, path, line);
    if (!rc)
        rc = side(&p->tgt[i], &p->tgt_len[i], o, "target", "target_ids", c, ts, path, line);
    if (rc)
        return rc;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(o, "target");
    if (cJSON_IsString(text) && !(p->tgt_text[i] = strdup(text->valuestring)))
        return hs_fail(HS_ENOMEM, "out of memory (pairs)");
    const int pos = positions(c), S = p->src_len[i], T = p->tgt_len[i];
    if (max_src && S > max_src)
        snprintf(msg, sizeof msg, "a source of %d tokens, longer than --seq-len %d", S, max_src);
    else if (S > pos || T > pos)
        snprintf(msg, sizeof msg, "a %s of %d tokens, longer than the model's %d positions "
                                  "(max_position_embeddings)", S > pos ? "source" : "target",
                 S > pos ? S : T, pos);
    else
        return HS_OK;
    return bad(path, line, msg);
}

int hs_pairs_load(hs_pairs *p, const char *path, const hs_model_config *c, hs_tokenizer **tk,
                  const char *tokenizer, const char *model_dir, int max_src)
{
    const tk_source ts = { tk, tokenizer, model_dir };
    memset(p, 0, sizeof *p);
    if (!hs_config_seq2seq(c))
        return hs_fail(HS_EUNSUPPORTED, "--pairs: source-target pairs need an encoder-decoder "
                                        "model (t5, bart, marian); this is %s",
                       hs_family_name(c->family));
    if (c->pad_id < 0)
        return hs_fail(HS_EINVAL, "--pairs: the model has no pad_token_id to pad pairs with");
    char *text = NULL;
    size_t len = 0;
    int rc = hs_read_file(&text, &len, path, PAIRS_FILE_LIMIT, 0);
    if (rc)
        return rc == HS_EINVAL ? hs_fail(HS_EINVAL, "%s: larger than 1 GiB", path) : rc;
    size_t lines = 1;
    for (size_t k = 0; k < len; k++)
        lines += text[k] == '\n';
    p->src = hs_calloc(lines, sizeof *p->src, "pairs");
    p->tgt = hs_calloc(lines, sizeof *p->tgt, "pairs");
    p->src_len = hs_calloc(lines, sizeof *p->src_len, "pairs");
    p->tgt_len = hs_calloc(lines, sizeof *p->tgt_len, "pairs");
    p->tgt_text = hs_calloc(lines, sizeof *p->tgt_text, "pairs");
    rc = p->src && p->tgt && p->src_len && p->tgt_len && p->tgt_text ? HS_OK : HS_ENOMEM;
    long line = 0;
    for (char *q = text, *end = text + len; !rc && q < end; q++) {
        char *nl = memchr(q, '\n', (size_t)(end - q)), *stop = nl ? nl : end;
        const char *s = q;
        line++;
        while (s < stop && (*s == ' ' || *s == '\t' || *s == '\r'))
            s++;
        if (s < stop) { /* a blank line is no pair */
            char what[600];
            snprintf(what, sizeof what, "%s:%ld", path, line);
            cJSON *obj = NULL;
            rc = hs_json_parse(&obj, q, (size_t)(stop - q), what);
            if (!rc && !cJSON_IsObject(obj))
                rc = bad(path, line, "not a JSON object");
            if (!rc)
                rc = read_line(p, obj, c, &ts, max_src, path, line);
            cJSON_Delete(obj);
            if (!rc) {
                p->max_src = p->src_len[p->n] > p->max_src ? p->src_len[p->n] : p->max_src;
                p->max_tgt = p->tgt_len[p->n] > p->max_tgt ? p->tgt_len[p->n] : p->max_tgt;
                p->n++;
            }
        }
        q = stop;
    }
    free(text);
    if (!rc && !p->n)
        rc = hs_fail(HS_EINVAL, "%s: no pairs", path);
    if (rc) {
        p->n = (int)lines; /* free every slot, read or not */
        hs_pairs_free(p);
    }
    return rc;
}

void hs_pairs_free(hs_pairs *p)
{
    for (int i = 0; p->src && i < p->n; i++)
        free(p->src[i]), free(p->tgt[i]), free(p->tgt_text ? p->tgt_text[i] : NULL);
    free(p->src), free(p->tgt), free(p->src_len), free(p->tgt_len), free(p->tgt_text);
    memset(p, 0, sizeof *p);
}

void hs_pairs_fill(int32_t *src, int32_t *dec, int32_t *tgt, const hs_pairs *p,
                   const hs_model_config *c, int i0, int B, int S, int T)
{
    for (int b = 0; b < B; b++) {
        const int i = i0 + b, n = p->tgt_len[i];
        for (int s = 0; s < S; s++)
            src[(size_t)b * S + s] = s < p->src_len[i] ? p->src[i][s] : c->pad_id;
        for (int t = 0; t < T; t++) {
            if (tgt)
                tgt[(size_t)b * T + t] = t < n ? p->tgt[i][t] : HS_TARGET_IGNORE;
            dec[(size_t)b * T + t] = t == 0 ? c->dec_start_id
                                     : t < n ? p->tgt[i][t - 1] : c->pad_id;
        }
    }
}

static int pairs_loss(hs_eval_result *r, const hs_model *m, const hs_pairs *p, int B,
                      size_t max_batches, const hs_real *const *gates,
                      const hs_real *const *cross_gates, double *per_pair, hs_real **encs,
                      hs_progress_fn progress, void *ctx);

int hs_pairs_eval(hs_eval_result *r, const hs_model *m, const hs_pairs *p, int B,
                  size_t max_batches, hs_progress_fn progress, void *ctx)
{
    return pairs_loss(r, m, p, B, max_batches, NULL, NULL, NULL, NULL, progress, ctx);
}

int hs_pairs_eval_gated(hs_eval_result *r, const hs_model *m, const hs_pairs *p, int B,
                        const hs_real *const *gates, const hs_real *const *cross_gates)
{
    return pairs_loss(r, m, p, B, 0, gates, cross_gates, NULL, NULL, NULL, NULL);
}

void hs_pairs_batch_shape(const hs_pairs *p, int i0, int n, int *S, int *T)
{
    *S = 1, *T = 1;
    for (int i = i0; i < i0 + n; i++) {
        *S = p->src_len[i] > *S ? p->src_len[i] : *S;
        *T = p->tgt_len[i] > *T ? p->tgt_len[i] : *T;
    }
}

int hs_pairs_acts_for(hs_s2s_acts *a, const hs_model_config *c, int B, int S, int T, int flags)
{
    if (a->B == B && a->S == S && a->T == T)
        return HS_OK;
    hs_s2s_acts_free(a);
    return hs_s2s_acts_alloc(a, c, B, S, T, flags);
}

/* encs (NULL: none): one slot a batch; a NULL slot gets a copy of the
 * batch's encoder output, a filled one replaces the encoder's pass. kept
 * holds the activations (hs_pairs_acts_for). */
static int pairs_loss_in(hs_eval_result *r, const hs_model *m, const hs_pairs *p, int B,
                         size_t max_batches, const hs_real *const *gates,
                         const hs_real *const *cross_gates, double *per_pair, hs_real **encs,
                         hs_s2s_acts *kept, hs_progress_fn progress, void *ctx);

static int pairs_loss(hs_eval_result *r, const hs_model *m, const hs_pairs *p, int B,
                      size_t max_batches, const hs_real *const *gates,
                      const hs_real *const *cross_gates, double *per_pair, hs_real **encs,
                      hs_progress_fn progress, void *ctx)
{
    hs_s2s_acts own = { 0 };
    const int rc = pairs_loss_in(r, m, p, B, max_batches, gates, cross_gates, per_pair, encs,
                                 &own, progress, ctx);
    hs_s2s_acts_free(&own);
    return rc;
}

static int pairs_loss_in(hs_eval_result *r, const hs_model *m, const hs_pairs *p, int B,
                         size_t max_batches, const hs_real *const *gates,
                         const hs_real *const *cross_gates, double *per_pair, hs_real **encs,
                         hs_s2s_acts *kept, hs_progress_fn progress, void *ctx)
{
    memset(r, 0, sizeof *r);
    r->nonfinite_seq = -1;
    if (B < 1)
        return hs_fail(HS_EINVAL, "batch %d must be positive", B);
    const hs_model_config *c = &m->cfg;
    size_t nb = ((size_t)p->n + (size_t)B - 1) / (size_t)B;
    if (max_batches && max_batches < nb)
        nb = max_batches;
    int32_t *src = hs_calloc((size_t)B * p->max_src, sizeof *src, "pairs batch");
    int32_t *dec = hs_calloc((size_t)B * p->max_tgt, sizeof *dec, "pairs batch");
    int32_t *tgt = hs_calloc((size_t)B * p->max_tgt, sizeof *tgt, "pairs batch");
    int rc = src && dec && tgt ? HS_OK : HS_ENOMEM;
    hs_welford pair = { 0 }; /* per-pair mean losses */
    double sum = 0;
    for (size_t k = 0; !rc && k < nb; k++) {
        const int i0 = (int)k * B, n = p->n - i0 < B ? p->n - i0 : B;
        int S, T;
        hs_pairs_batch_shape(p, i0, n, &S, &T);
        hs_pairs_fill(src, dec, tgt, p, c, i0, n, S, T);
        if ((rc = hs_pairs_acts_for(kept, c, n, S, T, 0)))
            break;
        hs_s2s_acts a = *kept; /* a view with this pass's gates: kept owns the buffers */
        a.gates = gates, a.cross_gates = cross_gates;
        const size_t enc_n = (size_t)n * S * c->d_model;
        rc = encs && encs[k] ? hs_s2s_use_encoding(&a, m, src, encs[k]) : hs_s2s_encode(&a, m, src);
        if (!rc && encs && !encs[k] &&
            (encs[k] = hs_calloc(enc_n, sizeof(hs_real), "encoder outputs")))
            memcpy(encs[k], a.enc, sizeof(hs_real) * enc_n);
        if (!rc && encs && !encs[k])
            rc = HS_ENOMEM;
        if (!rc && !(rc = hs_s2s_decode(&a, m, dec, tgt))) {
            for (int b = 0; b < n; b++) {
                int count;
                const double s = hs_seq_loss_sum(a.losses + (size_t)b * T, tgt + (size_t)b * T,
                                                 T, &count);
                sum += s;
                r->tokens += (size_t)count;
                hs_welford_add(&pair, s / count);
                if (per_pair)
                    per_pair[i0 + b] = s / count;
                if (!isfinite(s) && r->nonfinite_seq < 0)
                    r->nonfinite_seq = i0 + b, r->nonfinite_loss = s;
            }
            r->batches++;
        }
        if (!rc && progress)
            progress(ctx, k + 1, nb);
    }
    free(src), free(dec), free(tgt);
    if (rc)
        return rc;
    r->sequences = (size_t)pair.n;
    r->loss = sum / (double)r->tokens;
    r->stderr_loss = hs_welford_stderr(&pair);
    return HS_OK;
}

int hs_pairs_bleu(hs_eval_result *r, const hs_model *m, const hs_pairs *p,
                  const hs_tokenizer *tk)
{
    const hs_model_config *c = &m->cfg;
    if (!tk)
        return hs_fail(HS_EINVAL, "--bleu: detokenizing the outputs needs a tokenizer "
                                  "(--tokenizer, or the model directory's)");
    const int max_new = hs_s2s_max_new(c);
    char **hyp = hs_calloc((size_t)p->n, sizeof *hyp, "bleu hypotheses");
    char **ref = hs_calloc((size_t)p->n, sizeof *ref, "bleu references");
    int32_t *out = hs_calloc((size_t)max_new + 1, sizeof *out, "bleu decoding");
    int rc = hyp && ref && out ? HS_OK : HS_ENOMEM;
    const hs_sample_opts greedy = { 0 };
    for (int i = 0; !rc && i < p->n; i++) {
        hs_generate_stats st;
        if ((rc = hs_s2s_generate(out, &st, m, p->src[i], p->src_len[i], max_new, &greedy)))
            break;
        hyp[i] = hs_tokenizer_decode(hs_tokenizer_target(tk), out + 1, (size_t)st.n_new, 1);
        ref[i] = p->tgt_text[i] ? strdup(p->tgt_text[i])
                                : hs_tokenizer_decode(hs_tokenizer_target(tk), p->tgt[i],
                                                      (size_t)p->tgt_len[i], 1);
        if (!hyp[i] || !ref[i])
            rc = hs_fail(HS_ENOMEM, "--bleu: %s", hs_last_error());
    }
    hs_bleu b;
    if (!rc && !(rc = hs_bleu_corpus((const char *const *)hyp, (const char *const *)ref,
                                     (size_t)p->n, &b)))
        r->bleu = b.score, r->has_bleu = 1;
    for (int i = 0; hyp && ref && i < p->n; i++)
        free(hyp[i]), free(ref[i]);
    free(hyp), free(ref), free(out);
    return rc;
}

/* Each head in turn: its gate 0 on the self- or the cross-attention of its
 * layer, every other layer ungated; the decoder's heads decode from the
 * clean pass's encoder outputs. */
int hs_pairs_ablate(hs_head_table *t, const hs_model *m, const hs_pairs *p,
                    const hs_pairs_ablate_opts *o)
{
    const hs_model_config *c = &m->cfg;
    const int L = c->n_layer, E = c->enc_layers;
    hs_real *off = hs_calloc(HS_MAX_HEADS, sizeof *off, "gates");
    const hs_real **self = hs_calloc((size_t)L, sizeof *self, "gates");
    const hs_real **cross = hs_calloc((size_t)L, sizeof *cross, "gates");
    double *clean = hs_calloc((size_t)p->n, sizeof *clean, "pair losses");
    double *abl = hs_calloc((size_t)p->n, sizeof *abl, "pair losses");
    const size_t nb = ((size_t)p->n + (size_t)o->B - 1) / (size_t)o->B;
    hs_real **encs = hs_calloc(nb, sizeof *encs, "encoder outputs"); /* the clean pass's */
    int rc = off && self && cross && clean && abl && encs ? HS_OK : HS_ENOMEM;
    for (int h = 0; off && h < HS_MAX_HEADS; h++)
        off[h] = 1;
    hs_eval_result base, r;
    hs_s2s_acts kept = { 0 };
    if (!rc)
        rc = pairs_loss_in(&base, m, p, o->B, 0, NULL, NULL, clean, encs, &kept, NULL, NULL);
    if (!rc)
        rc = hs_head_table_add(t, -1, -1, HS_METRIC(LOSS), base.loss, base.stderr_loss, (long long)p->n);
    long total = 0, done = 0;
    for (int ty = HS_ATTN_ENC; ty <= HS_ATTN_CROSS; ty++)
        for (int l = ty == HS_ATTN_ENC ? 0 : E; (o->types >> ty & 1) && l < (ty == HS_ATTN_ENC ? E : L); l++)
            for (int h = 0; h < c->n_head[l]; h++)
                total += !o->head_on || o->head_on[(size_t)l * HS_MAX_HEADS + h];
    for (int ty = HS_ATTN_ENC; !rc && ty <= HS_ATTN_CROSS; ty++) {
        if (!(o->types >> ty & 1))
            continue;
        const int l0 = ty == HS_ATTN_ENC ? 0 : E, l1 = ty == HS_ATTN_ENC ? E : L;
        for (int l = l0; !rc && l < l1; l++)
            for (int h = 0; !rc && h < c->n_head[l]; h++) {
                if (o->head_on && !o->head_on[(size_t)l * HS_MAX_HEADS + h])
                    continue;
                if (o->stop && *o->stop) {
                    rc = hs_fail(HS_EINTR, "interrupted");
                    break;
                }
                const hs_real **g = ty == HS_ATTN_CROSS ? cross : self;
                off[h] = 0, g[l] = off;
                /* the decoder's heads leave the encoder's output as the clean pass made it */
                rc = pairs_loss_in(&r, m, p, o->B, 0, self, cross, abl,
                                   ty == HS_ATTN_ENC ? NULL : encs, &kept, NULL, NULL);
                off[h] = 1, g[l] = NULL;
                hs_welford d = { 0 };
                for (int i = 0; !rc && i < p->n; i++)
                    hs_welford_add(&d, abl[i] - clean[i]);
                if (!rc && !(rc = hs_head_table_add(t, l - l0, h, HS_METRIC(LOSS_DELTA_ZERO),
                                                    r.loss - base.loss, hs_welford_stderr(&d),
                                                    (long long)p->n)))
                    t->rows[t->n - 1].attn = hs_attn_type_name((hs_attn_type)ty);
                if (!rc && o->progress)
                    o->progress(o->ctx, (size_t)++done, (size_t)total);
            }
    }
    hs_s2s_acts_free(&kept);
    for (size_t k = 0; encs && k < nb; k++)
        free(encs[k]);
    free(off), free(self), free(cross), free(clean), free(abl), free(encs);
    return rc;
}
