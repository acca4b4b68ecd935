#include "task.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "inputs.h"
#include "json.h"
#include "memory.h"
#include "metrics.h"
#include "prompts.h"
#include "stats.h"

/* The longest task file read whole. */
enum { TASK_FILE_LIMIT = 1 << 30 };

/* Where an error is: "PATH:LINE". */
typedef struct {
    const char *path;
    long line;
} where;

static int bad(where w, const char *what)
{
    return hs_fail(HS_EINVAL, "%s:%ld: %s", w.path, w.line, what);
}

int hs_task_label_map_parse(hs_task_opts *o, const char *s)
{
    o->n_map = 0;
    for (const char *p = s; *p;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= HS_MAX_LABELS || o->n_map == HS_MAX_LABELS ||
            (*end && *end != ','))
            return hs_fail(HS_EINVAL, "--label-map: \"%s\" is not a list of label indices "
                                      "i0,i1,... (0 to %d)",
                           s, HS_MAX_LABELS - 1);
        o->label_map[o->n_map++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return o->n_map ? HS_OK : hs_fail(HS_EINVAL, "--label-map: empty");
}

/* The kind of the task's labels: the model's problem_type, or HF's
 * inference from the first label. */
static int kind_of(hs_task *t, const hs_model_config *c, const cJSON *label, where w)
{
    if (c->problem)
        t->kind = c->problem == HS_PROBLEM_SINGLE  ? HS_TASK_SINGLE_LABEL
                  : c->problem == HS_PROBLEM_MULTI ? HS_TASK_MULTI_LABEL
                                                   : HS_TASK_REGRESSION;
    else if (c->n_labels == 1)
        t->kind = HS_TASK_REGRESSION;
    else if (cJSON_IsArray(label))
        t->kind = HS_TASK_MULTI_LABEL;
    else if (cJSON_IsString(label) ||
             (cJSON_IsNumber(label) && label->valuedouble == floor(label->valuedouble)))
        t->kind = HS_TASK_SINGLE_LABEL;
    else
        return bad(w, "a regression label (a number that is not a class) for a classifier of "
                      "several labels");
    return HS_OK;
}

/* Line i's label into t. */
static int read_label(hs_task *t, int i, const cJSON *label, const hs_model_config *c, where w)
{
    char msg[256];
    if (!label)
        return bad(w, "no \"label\"");
    if (t->kind == HS_TASK_REGRESSION) {
        if (!cJSON_IsNumber(label) || !isfinite(label->valuedouble))
            return bad(w, "a regression task's \"label\" is a number");
        t->target[i] = label->valuedouble;
        return HS_OK;
    }
    if (t->kind == HS_TASK_MULTI_LABEL) {
        if (!cJSON_IsArray(label) || cJSON_GetArraySize(label) != t->k) {
            snprintf(msg, sizeof msg, "a multi-label task's \"label\" is a list of %d 0/1 values",
                     t->k);
            return bad(w, msg);
        }
        int j = 0;
        for (const cJSON *e = label->child; e; e = e->next, j++) {
            if (!cJSON_IsNumber(e) || (e->valuedouble != 0 && e->valuedouble != 1))
                return bad(w, "a multi-label task's \"label\" holds only 0 and 1");
            t->target[(size_t)i * t->k + j] = e->valuedouble;
        }
        return HS_OK;
    }
    int cls = -1;
    if (cJSON_IsString(label)) {
        for (int k = 0; k < c->n_labels && cls < 0; k++)
            if (!strcmp(label->valuestring, c->label_names[k]))
                cls = k;
        if (cls < 0) {
            int n = snprintf(msg, sizeof msg, "label \"%.40s\" is none of id2label's names (",
                             label->valuestring);
            for (int k = 0; k < c->n_labels && n < (int)sizeof msg - 48; k++)
                n += snprintf(msg + n, sizeof msg - (size_t)n, "%s\"%s\"", k ? ", " : "",
                              c->label_names[k]);
            snprintf(msg + n, sizeof msg - (size_t)n, ")");
            return bad(w, msg);
        }
    } else if (cJSON_IsNumber(label) && label->valuedouble == floor(label->valuedouble) &&
               label->valuedouble >= 0 && label->valuedouble < t->k) {
        cls = (int)label->valuedouble;
    } else {
        snprintf(msg, sizeof msg, "\"label\" must be a class 0 .. %d or one of id2label's names%s",
                 t->k - 1, cJSON_IsArray(label) ? " (a list is a multi-label task's)" : "");
        return bad(w, msg);
    }
    t->label[i] = cls;
    return HS_OK;
}

/* ids of a text line: the tokenizer's with its special tokens; longer than
 * T, with truncate, the text's own tokens dropped from the end. */
static int text_ids(int32_t **ids, size_t *n, const cJSON *text, const hs_tokenizer *tk, int T,
                    int truncate, where w)
{
    if (!tk)
        return bad(w, "a \"text\" line needs a tokenizer (--tokenizer, or the model directory's "
                      "tokenizer.json)");
    const size_t len = strlen(text->valuestring);
    if (hs_tokenizer_encode(tk, text->valuestring, len, 1, ids, n))
        return bad(w, hs_last_error());
    if (*n <= (size_t)T || !truncate)
        return HS_OK;
    int32_t *plain;
    size_t m;
    if (hs_tokenizer_encode(tk, text->valuestring, len, 0, &plain, &m))
        return bad(w, hs_last_error());
    size_t at = 0; /* the text's tokens inside the template's: pre + text + post */
    while (at + m <= *n && memcmp(*ids + at, plain, m * sizeof *plain))
        at++;
    const size_t special = *n - m;
    int rc = HS_OK;
    if (at + m > *n || special >= (size_t)T)
        rc = bad(w, "--truncate: the text's tokens are not one run inside the special tokens' "
                    "template, or the template alone is longer than --seq-len");
    else {
        const size_t keep = (size_t)T - special;
        memmove(*ids + at + keep, *ids + at + m, (*n - at - m) * sizeof **ids);
        *n = (size_t)T;
    }
    free(plain);
    return rc;
}

/* An ids line's "token_type_ids" (n values, each a type the model has)
 * into *types (malloc'd; NULL when absent). */
static int read_types(unsigned char **types, const cJSON *list, int n, const hs_model_config *c,
                      where w)
{
    if (!list)
        return HS_OK;
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != n)
        return bad(w, "\"token_type_ids\" must be a list as long as \"ids\"");
    if (!(*types = malloc((size_t)n + 1)))
        return hs_fail(HS_ENOMEM, "out of memory for token types");
    int k = 0;
    for (const cJSON *e = list->child; e; e = e->next, k++) {
        const int most = c->encoder && c->type_vocab ? c->type_vocab - 1 : 0;
        if (!cJSON_IsNumber(e) || e->valuedouble != (int)e->valuedouble || e->valuedouble < 0 ||
            e->valuedouble > most) {
            char msg[160];
            snprintf(msg, sizeof msg, "\"token_type_ids\"[%d]: the model's token types are 0 .. %d",
                     k, most);
            return bad(w, msg);
        }
        (*types)[k] = (unsigned char)e->valuedouble;
    }
    return HS_OK;
}

/* A text pair's ids and token types through the tokenizer's pair template
 * (truncated to T with truncate). */
static int pair_ids(int32_t **ids, unsigned char **types, size_t *n, const cJSON *text,
                    const cJSON *pair, const hs_tokenizer *tk, const hs_model_config *c, int T,
                    int truncate, where w)
{
    if (!tk)
        return bad(w, "a \"text_pair\" line needs a tokenizer (--tokenizer, or the model "
                      "directory's tokenizer.json)");
    if (!cJSON_IsString(pair))
        return bad(w, "\"text_pair\" must be a string");
    if (hs_tokenizer_encode_pair(tk, text->valuestring, strlen(text->valuestring),
                                 pair->valuestring, strlen(pair->valuestring),
                                 truncate ? (size_t)T : 0, ids, types, n))
        return bad(w, hs_last_error());
    const int most = c->encoder && c->type_vocab ? c->type_vocab - 1 : 0;
    for (size_t k = 0; k < *n; k++)
        if ((*types)[k] > most)
            return bad(w, "the pair template's token type is one the model does not have");
    return HS_OK;
}

/* One line (object o) into example i: its ids and token types (malloc'd;
 * types NULL where every one is 0) and label. */
static int read_line(hs_task *t, int i, const cJSON *o, const hs_task_opts *opt,
                     const hs_model_config *c, const hs_tokenizer *tk, int32_t **ids,
                     unsigned char **types, int *n, where w)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(o, "text");
    const cJSON *pair = cJSON_GetObjectItemCaseSensitive(o, "text_pair");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "ids");
    const cJSON *tlist = cJSON_GetObjectItemCaseSensitive(o, "token_type_ids");
    const cJSON *label = cJSON_GetObjectItemCaseSensitive(o, "label");
    if (!cJSON_IsString(text) == !cJSON_IsArray(list))
        return bad(w, "a line has \"text\" (a string) or \"ids\" (a list), one of them");
    if ((pair && list) || (tlist && text))
        return bad(w, "\"text_pair\" goes with \"text\", \"token_type_ids\" with \"ids\"");
    if (!i && kind_of(t, c, label, w))
        return HS_EINVAL;
    int rc = read_label(t, i, label, c, w);
    size_t len = 0;
    if (!rc && list && !(rc = hs_json_ids(list, "ids", w.path, (int)w.line, c->vocab_size, ids, n)))
        rc = read_types(types, tlist, *n, c, w);
    else if (!rc && pair && !(rc = pair_ids(ids, types, &len, text, pair, tk, c, opt->seq_len,
                                           opt->truncate, w)))
        *n = len > INT32_MAX ? INT32_MAX : (int)len;
    else if (!rc && !pair && !list &&
             !(rc = text_ids(ids, &len, text, tk, opt->seq_len, opt->truncate, w)))
        *n = len > INT32_MAX ? INT32_MAX : (int)len;
    if (!rc && !*n)
        rc = bad(w, "an empty sequence");
    if (!rc && *n > opt->seq_len) {
        char msg[160];
        snprintf(msg, sizeof msg, "%d tokens, longer than --seq-len %d%s", *n, opt->seq_len,
                 list ? " (an ids line is never truncated)" : " (--truncate shortens texts)");
        rc = bad(w, msg);
    }
    return rc;
}

/* The label map: identity, or o's checked as a permutation of 0..k-1. */
static int label_map(hs_task *t, const hs_task_opts *o)
{
    unsigned char seen[HS_MAX_LABELS] = { 0 };
    for (int j = 0; j < t->k; j++)
        t->label_map[j] = o->n_map ? o->label_map[j] : j;
    if (!o->n_map)
        return HS_OK;
    int ok = o->n_map == t->k;
    for (int j = 0; ok && j < t->k; j++)
        ok = o->label_map[j] < t->k && !seen[o->label_map[j]]++;
    return ok ? HS_OK
              : hs_fail(HS_EINVAL, "--label-map: a permutation of 0..%d (the model's %d "
                                   "outputs), each once",
                        t->k - 1, t->k);
}

/* t's headline metric: `name`, or the kind's (accuracy; pearson for
 * regression); HS_EINVAL naming --metric where the kind has no such metric. */
static int headline(hs_task *t, const char *name)
{
    const int want = name ? hs_task_metric_of(name) : (int)hs_task_headline(t->kind);
    if (want < 0 || !hs_task_metric_applies(t->kind, want))
        return hs_fail(HS_EINVAL, "--metric %s: not a metric of this task (%s)", name,
                       t->kind == HS_TASK_REGRESSION    ? "pearson, spearman"
                       : t->kind == HS_TASK_MULTI_LABEL ? "accuracy, f1"
                                                        : "accuracy, f1, mcc");
    t->headline = (hs_task_metric)want;
    return HS_OK;
}

/* The examples read (ids[i], types[i] or NULL, t->len[i] of each) into
 * t->ids right-padded to t->T with the pad id (a decoder without one: 0,
 * read by length), and t->types where any type is not 0. */
static int pad_examples(hs_task *t, int32_t **ids, unsigned char **types,
                        const hs_model_config *c, const char *path)
{
    const int pad = c->pad_id >= 0 ? c->pad_id : 0;
    for (int i = 0; i < t->n && c->encoder && c->pad_id < 0; i++)
        if (t->len[i] < t->T)
            return hs_fail(HS_EINVAL, "%s: sequences of different lengths need padding, and "
                                      "config.json gives no pad_token_id", path);
    if (!(t->ids = hs_calloc((size_t)t->n * t->T, sizeof *t->ids, "task ids")))
        return HS_ENOMEM;
    for (int i = 0; i < t->n; i++)
        for (int j = 0; j < t->T; j++)
            t->ids[(size_t)i * t->T + j] = j < t->len[i] ? ids[i][j] : pad;
    int typed = 0; /* token types other than 0 anywhere: kept (padding type 0) */
    for (int i = 0; i < t->n; i++)
        for (int j = 0; types[i] && j < t->len[i]; j++)
            typed |= types[i][j] != 0;
    if (typed && !(t->types = hs_calloc((size_t)t->n * t->T, 1, "task token types")))
        return HS_ENOMEM;
    for (int i = 0; typed && i < t->n; i++)
        if (types[i])
            memcpy(t->types + (size_t)i * t->T, types[i], (size_t)t->len[i]);
    return HS_OK;
}

/* The end of a load: the per-line ids and types read (n slots of each,
 * NULL entries allowed) and the file's text freed, t freed on failure; rc. */
static int loaded(hs_task *t, int rc, int32_t **ids, unsigned char **types, size_t n, char *text)
{
    for (size_t i = 0; ids && i < n; i++)
        free(ids[i]), free(types ? types[i] : NULL);
    free(ids);
    free(types);
    free(text);
    if (rc)
        hs_task_free(t);
    return rc;
}

int hs_task_load(hs_task *t, const hs_task_opts *o, const hs_model_config *c,
                 const hs_tokenizer *tk)
{
    memset(t, 0, sizeof *t);
    if (!c->n_labels)
        return hs_fail(HS_EUNSUPPORTED, "--task needs a sequence classifier (config.json's "
                                        "architectures[0] …ForSequenceClassification): this "
                                        "model has no classification head");
    t->k = c->n_labels;
    hs_task_opts opt = *o; /* the sequence length: the default where none is given */
    opt.seq_len = hs_seq_len_or_default(c, o->seq_len);
    o = &opt;
    int rc = hs_seq_len_check(c, o->seq_len, "--seq-len");
    if (!rc)
        rc = label_map(t, o);
    char *text = NULL;
    size_t len = 0;
    if (rc)
        return rc;
    if ((rc = hs_read_file(&text, &len, o->path, TASK_FILE_LIMIT, 0)))
        return rc == HS_EINVAL ? hs_fail(HS_EINVAL, "%s: larger than 1 GiB", o->path) : rc;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    int32_t **ids = hs_calloc(lines, sizeof *ids, "task");
    unsigned char **types = hs_calloc(lines, sizeof *types, "task");
    t->len = hs_calloc(lines, sizeof *t->len, "task");
    t->label = hs_calloc(lines, sizeof *t->label, "task");
    t->target = hs_calloc(lines * (size_t)t->k, sizeof *t->target, "task");
    rc = ids && types && t->len && t->label && t->target ? HS_OK : HS_ENOMEM;
    where w = { o->path, 0 };
    for (char *p = text, *end = text + len; !rc && p < end; p++) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *stop = nl ? nl : end;
        const char *q = p;
        w.line++;
        while (q < stop && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < stop) { /* a blank line is no example */
            char what[600];
            snprintf(what, sizeof what, "%s:%ld", o->path, w.line);
            cJSON *obj = NULL;
            rc = hs_json_parse(&obj, p, (size_t)(stop - p), what);
            if (!rc && !cJSON_IsObject(obj))
                rc = bad(w, "not a JSON object");
            if (!rc)
                rc = read_line(t, t->n, obj, o, c, tk, &ids[t->n], &types[t->n], &t->len[t->n],
                               w);
            cJSON_Delete(obj);
            if (!rc) {
                t->T = t->len[t->n] > t->T ? t->len[t->n] : t->T;
                t->n++;
            }
        }
        p = stop;
    }
    if (!rc && !t->n)
        rc = hs_fail(HS_EINVAL, "%s: no examples", o->path);
    if (!rc)
        rc = headline(t, o->metric);
    if (!rc)
        rc = pad_examples(t, ids, types, c, o->path);
    return loaded(t, rc, ids, types, lines, text);
}

int hs_task_load_lines(hs_task *t, const char *path, int seq_len, int whole,
                       const hs_model_config *c, const hs_tokenizer *tk)
{
    memset(t, 0, sizeof *t);
    if (!tk)
        return hs_fail(HS_EINVAL, "%s: --lines needs a tokenizer (--tokenizer, or the model "
                                  "directory's tokenizer.json)", path);
    int rc = hs_seq_len_check(c, seq_len, "--seq-len");
    char *text = NULL;
    size_t len = 0, lines = 1;
    if (!rc && (rc = hs_read_file(&text, &len, path, TASK_FILE_LIMIT, 0)))
        return rc == HS_EINVAL ? hs_fail(HS_EINVAL, "%s: larger than 1 GiB", path) : rc;
    if (rc)
        return rc;
    for (size_t i = 0; i < len && !whole; i++)
        lines += text[i] == '\n';
    int32_t **ids = hs_calloc(lines, sizeof *ids, "text lines");
    unsigned char **types = hs_calloc(lines, sizeof *types, "text lines");
    t->len = hs_calloc(lines, sizeof *t->len, "text lines");
    rc = ids && types && t->len ? HS_OK : HS_ENOMEM;
    /* a line as long as the context at most, or --seq-len when given */
    const int most = seq_len > 0 ? seq_len : c->n_ctx;
    where w = { path, 0 };
    for (char *p = text, *end = text + len; !rc && p < end; p++) {
        char *nl = whole ? NULL : memchr(p, '\n', (size_t)(end - p)), *stop = nl ? nl : end;
        const char *q = p;
        w.line++;
        while (q < stop && isspace((unsigned char)*q))
            q++;
        size_t n = 0, bytes = (size_t)(stop - p);
        bytes -= !whole && bytes && p[bytes - 1] == '\r'; /* a CRLF file's line ends with its LF */
        if (q < stop && hs_tokenizer_encode(tk, p, bytes, 1, &ids[t->n], &n))
            rc = bad(w, hs_last_error());
        else if (q < stop && n > (size_t)most) {
            char msg[160];
            snprintf(msg, sizeof msg, "%zu tokens, longer than %s %d", n,
                     seq_len > 0 ? "--seq-len" : "the model's n_ctx", most);
            rc = bad(w, msg);
        } else if (q < stop && n) { /* a blank line is no sequence */
            t->len[t->n] = (int)n;
            t->T = t->len[t->n] > t->T ? t->len[t->n] : t->T;
            t->n++;
        } else if (q < stop) { /* one that encodes to no token neither */
            free(ids[t->n]);
            ids[t->n] = NULL;
        }
        p = stop;
    }
    if (!rc && !t->n)
        rc = hs_fail(HS_EINVAL, "%s: no %s", path, whole ? "tokens" : "lines with tokens");
    t->T = seq_len > 0 ? seq_len : t->T;
    if (!rc)
        rc = pad_examples(t, ids, types, c, path);
    return loaded(t, rc, ids, types, lines, text);
}

void hs_task_free(hs_task *t)
{
    free(t->ids);
    free(t->types);
    free(t->len);
    free(t->label);
    free(t->target);
    memset(t, 0, sizeof *t);
}

int hs_task_forward(hs_acts *a, double *out, int *pool, int32_t *ids, unsigned char *types,
                    const hs_model *m, const hs_task *t, const int *ex, int nb,
                    const hs_hooks *hooks)
{
    const hs_model_config *c = &m->cfg;
    const int K = t->k, T = t->T;
    hs_real *logits = hs_calloc((size_t)nb * K, sizeof *logits, "task outputs");
    int rc = logits ? hs_acts_set_batch(a, nb) : HS_ENOMEM;
    for (int b = 0; !rc && b < nb; b++) {
        memcpy(ids + (size_t)b * T, t->ids + (size_t)ex[b] * T, sizeof *ids * T);
        if (t->types)
            memcpy(types + (size_t)b * T, t->types + (size_t)ex[b] * T, (size_t)T);
    }
    a->types = t->types ? types : NULL;
    if (!rc)
        rc = hs_forward(a, m, ids, NULL, hooks);
    for (int b = 0; !rc && b < nb; b++)
        pool[b] = !c->encoder && c->pad_id < 0 ? t->len[ex[b]] - 1
                                               : hs_classify_pool(c, ids + (size_t)b * T, T);
    if (!rc)
        rc = hs_classify(logits, a, m, pool);
    for (int b = 0; !rc && b < nb; b++) /* output j scores the task's label label_map[j] */
        for (int j = 0; j < K; j++)
            out[(size_t)b * K + t->label_map[j]] = (double)logits[(size_t)b * K + j];
    free(logits);
    return rc;
}

int hs_task_run(double *out, const hs_model *m, const hs_task *t, int batch,
                const hs_hooks *hooks)
{
    hs_acts a;
    int rc = hs_acts_alloc(&a, &m->cfg, batch, t->T, HS_ACTS_LOSS);
    if (rc)
        return rc;
    int *ex = hs_calloc((size_t)batch * 2, sizeof *ex, "task batch"), *pool = ex + batch;
    int32_t *ids = hs_calloc((size_t)batch * t->T, sizeof *ids, "task batch");
    unsigned char *types = hs_calloc((size_t)batch * t->T, 1, "task batch");
    if (!ex || !ids || !types)
        rc = HS_ENOMEM;
    for (int i0 = 0; !rc && i0 < t->n; i0 += batch) {
        const int nb = t->n - i0 < batch ? t->n - i0 : batch;
        for (int b = 0; b < nb; b++)
            ex[b] = i0 + b;
        rc = hs_task_forward(&a, out + (size_t)i0 * t->k, pool, ids, types, m, t, ex, nb,
                             hooks);
    }
    free(ex);
    free(ids);
    free(types);
    hs_acts_free(&a);
    return rc;
}

int hs_task_tokens(hs_tokens *out, unsigned char **mask, const hs_task *t)
{
    memset(out, 0, sizeof *out);
    const size_t n = (size_t)t->n * t->T;
    int32_t *ids = malloc(sizeof *ids * (n + 1));
    if (mask && ids && !(*mask = malloc(n + 1))) {
        free(ids);
        ids = NULL;
    }
    if (!ids)
        return hs_fail(HS_ENOMEM, "out of memory for the task's tokens");
    for (size_t i = 0; i < n; i++) {
        ids[i] = t->ids[i];
        if (mask)
            (*mask)[i] = (int)(i % t->T) < t->len[i / t->T];
    }
    ids[n] = t->ids[n - 1]; /* the +1 of SPEC §4's batches */
    if (mask)
        (*mask)[n] = 0;
    return hs_tokens_adopt(out, ids, n + 1);
}

hs_task_outputs hs_task_example(const hs_task *t, int i, const double *row)
{
    const double *target = t->kind == HS_TASK_MULTI_LABEL ? t->target + (size_t)i * t->k
                                                          : t->target + i;
    return (hs_task_outputs){ t->kind, 1, t->k, row, t->label + i, target };
}

hs_task_outputs hs_task_outputs_of(const hs_task *t, const double *out)
{
    return (hs_task_outputs){ t->kind, t->n, t->k, out, t->label, t->target };
}

/* hs_task_eval's numbers on the loaded task t. */
int hs_task_numbers(hs_task_eval_result *r, const hs_task *t, const double *out)
{
    memset(r, 0, sizeof *r);
    r->n = t->n, r->kind = t->kind;
    const int want = (int)t->headline;
    int rc = HS_OK;
    const hs_task_outputs o = hs_task_outputs_of(t, out);
    hs_welford w = { 0 };
    for (int i = 0; !rc && i < t->n; i++)
        hs_welford_add(&w, hs_task_loss(&o, i));
    r->loss = w.mean, r->loss_se = hs_welford_stderr(&w);
    for (int mi = 0; !rc && mi < HS_TASK_N_METRICS; mi++) {
        if (!hs_task_metric_applies(t->kind, mi))
            continue;
        if (mi == want)
            r->headline = r->n_metrics;
        r->metric[r->n_metrics] = mi;
        rc = hs_task_metric_se(&o, mi, &r->value[r->n_metrics], &r->se[r->n_metrics]);
        r->n_metrics++;
    }
    return rc;
}

int hs_task_numbers_to_table(hs_head_table *tb, const hs_task_eval_result *r)
{
    int rc = hs_head_table_add(tb, -1, -1, HS_METRIC(TASK_LOSS), r->loss, r->loss_se, r->n);
    for (int i = 0; !rc && i < r->n_metrics; i++)
        rc = hs_head_table_add(tb, -1, -1, hs_task_metric_name(r->metric[i]), r->value[i],
                               r->se[i], r->n);
    return rc;
}

int hs_task_eval(hs_task_eval_result *r, const hs_model *m, const hs_task *t, int batch,
                 const hs_hooks *hooks)
{
    memset(r, 0, sizeof *r);
    double *out = hs_calloc((size_t)t->n * t->k, sizeof *out, "task outputs");
    int rc = out ? hs_task_run(out, m, t, batch, hooks) : HS_ENOMEM;
    if (!rc)
        rc = hs_task_numbers(r, t, out);
    free(out);
    return rc;
}
