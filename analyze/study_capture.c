/* The capture study (study.h): per-head maps of a model to an HDF5 file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "recorder.h"
#include "sha256.h"
#include "study.h"

/* "0,2,5" -> distinct entries in [0, limit), nothing else in the text.
 * Returns the count or -1. */
static int parse_list(const char *s, int *out, int max, int limit)
{
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v >= limit || n == max)
            return -1;
        for (int i = 0; i < n; i++)
            if (out[i] == v)
                return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',' && s[1])
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

int hs_capture_check(hs_capture_plan *p, hs_capture_opts *o, const hs_model_config *c)
{
    memset(p, 0, sizeof *p);
    if (!o->seq_len)
        o->seq_len = c->n_ctx < 256 ? c->n_ctx : 256;
    const int T = o->seq_len;
    p->q0 = 0, p->q1 = T;
    if (o->layers) {
        int list[HS_MAX_LAYERS];
        const int n = parse_list(o->layers, list, HS_MAX_LAYERS, c->n_layer);
        for (int i = 0; i < n; i++)
            p->layer_on[list[i]] = 1;
        if (n <= 0)
            return hs_fail(HS_EINVAL, "--layers '%s': distinct indices 0..%d expected (the model "
                           "has %d layers)", o->layers, c->n_layer - 1, c->n_layer);
    } else {
        memset(p->layer_on, 1, (size_t)c->n_layer);
    }
    int min_heads = 1 << 30;
    for (int l = 0; l < c->n_layer; l++)
        if (p->layer_on[l] && c->n_head[l] < min_heads)
            min_heads = c->n_head[l];
    if (o->heads && (p->n_heads = parse_list(o->heads, p->heads, HS_MAX_HEADS, min_heads)) <= 0)
        return hs_fail(HS_EINVAL, "--heads '%s': distinct indices 0..%d expected (the smallest "
                       "captured layer has %d heads)", o->heads, min_heads - 1, min_heads);
    int used = 0;
    if (o->queries && (sscanf(o->queries, "%d:%d%n", &p->q0, &p->q1, &used) != 2 ||
                       o->queries[used] || p->q0 < 0 || p->q1 > T || p->q0 >= p->q1))
        return hs_fail(HS_EINVAL, "--queries '%s': A:B with 0 <= A < B <= %d expected",
                       o->queries, T);
    if (c->pos == HS_POS_LEARNED && T > c->n_ctx)
        return hs_fail(HS_EINVAL, "--seq-len %d exceeds the model's n_ctx=%d", T, c->n_ctx);
    return HS_OK;
}

int hs_capture_batches(size_t *n_batches, const hs_capture_opts *o, const hs_tokens *tok)
{
    if (hs_batches_to_run(tok, o->batch, o->seq_len, o->max_batches, n_batches))
        return hs_fail(HS_EINVAL, "%s: fewer than one batch of %d x %d (+1) tokens",
                       o->data_path, o->batch, o->seq_len);
    return HS_OK;
}

typedef struct {
    const hs_tokens *tok;
    int B, T;
    int32_t *targets; /* unused by capture, needed by hs_batch_at */
} batch_src;

static int next_batch(void *ctx, size_t i, int32_t *inputs)
{
    batch_src *b = ctx;
    hs_batch_at(b->tok, i * (size_t)b->B * b->T, b->B, b->T, inputs, b->targets);
    return HS_OK;
}

/* A writer with every selected layer declared, its provenance from o. */
static int create_file(hs_maps_writer **w, const hs_capture_opts *o, const hs_capture_plan *p,
                       const hs_model_config *c)
{
    char model_sha[80] = "", data_sha[80] = "", path[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", o->model_dir);
    int rc = o->model_sha ? HS_OK : hs_sha256_file(path, model_sha, NULL);
    if (!rc && !o->data_sha)
        rc = hs_sha256_file(o->data_path, data_sha, NULL);
    snprintf(path, sizeof path, "%s/config.json", o->model_dir);
    char *config_text = NULL;
    if (!rc && !(config_text = hs_read_text(path, 1 << 20)))
        rc = HS_EIO;
    hs_maps_meta meta = { o->model_sha ? o->model_sha : model_sha, config_text, o->data_path,
                          o->data_sha ? o->data_sha : data_sha, o->seq_len, o->half, o->compress };
    if (!rc)
        rc = hs_maps_create(w, o->out, &meta, o->force);
    for (int l = 0; !rc && l < c->n_layer; l++) {
        if (!p->layer_on[l])
            continue;
        int all[HS_MAX_HEADS];
        for (int h = 0; h < c->n_head[l]; h++)
            all[h] = h;
        rc = hs_maps_add_layer(*w, l, p->n_heads ? p->n_heads : c->n_head[l],
                               p->n_heads ? p->heads : all, p->q0, p->q1 - p->q0);
    }
    free(config_text);
    return rc;
}

/* The display string of every token id in tok (tokenizer's
 * hs_tokenizer_token_text), indexed by id; *n ids. NULL entries for ids
 * the data does not hold. */
static int token_table(char ***table, int *n, const hs_tokenizer *tk, const hs_tokens *tok)
{
    int32_t max = -1;
    for (size_t i = 0; i < tok->n; i++)
        max = tok->tok[i] > max ? tok->tok[i] : max;
    *n = (int)max + 1;
    *table = hs_calloc((size_t)*n + 1, sizeof **table, "token strings");
    if (!*table)
        return HS_ENOMEM;
    char buf[1024];
    for (size_t i = 0; i < tok->n; i++) {
        const int32_t id = tok->tok[i];
        if ((*table)[id])
            continue;
        int rc = hs_tokenizer_token_text(tk, id, buf, sizeof buf);
        if (rc)
            return rc;
        if (!((*table)[id] = strdup(buf)))
            return hs_fail(HS_ENOMEM, "out of memory for token strings");
    }
    return HS_OK;
}

static void free_table(char **table, int n)
{
    for (int i = 0; table && i < n; i++)
        free(table[i]);
    free(table);
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int hs_capture(hs_capture_result *r, const hs_model *m, const hs_tokens *tok,
               hs_capture_opts o, const hs_study_io *io)
{
    memset(r, 0, sizeof *r);
    hs_capture_plan p;
    size_t nb = 0;
    int rc = hs_capture_check(&p, &o, &m->cfg);
    if (!rc)
        rc = hs_capture_batches(&nb, &o, tok);
    hs_maps_writer *w = NULL;
    char **table = NULL;
    int n_table = 0;
    if (!rc)
        rc = create_file(&w, &o, &p, &m->cfg);
    if (!rc && o.tokenizer && (rc = token_table(&table, &n_table, o.tokenizer, tok))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hs_last_error());
        hs_fail(rc, "%s: %s (the tokenizer does not match the data)", o.data_path, msg);
    } else if (!rc && o.tokenizer) {
        rc = hs_maps_set_token_text(w, (const char *const *)table, n_table);
    }
    volatile sig_atomic_t *stop = io ? io->stop : NULL;
    if (!rc && stop && *stop)
        rc = hs_fail(HS_EINTR, "interrupted before the first batch");
    if (rc) {
        hs_maps_abort(w);
        free_table(table, n_table);
        return rc;
    }
    const int B = o.batch, T = o.seq_len;
    int32_t *targets = hs_calloc((size_t)B * T, sizeof(int32_t), "targets");
    batch_src src = { tok, B, T, targets };
    hs_map_sink sink = hs_maps_sink(w);
    if (io && io->phase)
        io->phase(io->ctx, "capture");
    hs_record_opts ro = { B, T, nb, p.layer_on, stop, io ? io->progress : NULL,
                          io ? io->ctx : NULL };
    const double t0 = seconds();
    rc = targets ? hs_record(m, next_batch, &src, &sink, &ro) : HS_ENOMEM;
    r->seconds = seconds() - t0;
    if (io && io->phase)
        io->phase(io->ctx, NULL);
    free(targets);
    if (rc) {
        hs_maps_abort(w); /* nothing half-written is left behind */
        free_table(table, n_table);
        if (rc == HS_EINTR) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", hs_last_error());
            hs_fail(HS_EINTR, "%s; %s was not written", msg, o.out);
        }
        return rc;
    }
    r->sequences = nb * (size_t)B;
    rc = hs_maps_finish(w);
    free_table(table, n_table);
    return rc;
}
