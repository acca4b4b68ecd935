/* The capture study (study.h): per-head maps of a model to an HDF5 file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "inputs.h"
#include "dist.h"
#include "pairs.h"
#include "recorder.h"
#include "seq2seq.h"
#include "sha256.h"
#include "study.h"
#include "study_capture.h"

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
    o->seq_len = hs_seq_len_or_default(c, o->seq_len);
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
    if (hs_seq_len_check(c, T, "--seq-len"))
        return HS_EINVAL;
    return HS_OK;
}

int hs_capture_batches(size_t *n_batches, const hs_capture_opts *o, const hs_tokens *tok)
{
    if (hs_batches_to_run(tok, o->batch, o->seq_len, o->max_batches, n_batches))
        return hs_fail_few_tokens(o->data_path, tok, o->batch, o->seq_len);
    return HS_OK;
}

typedef struct {
    const hs_tokens *tok;
    int B, T;
    int32_t *targets; /* unused by capture, needed by hs_batch_at */
    const hs_model *m;
} batch_src;

static int next_batch(void *ctx, size_t i, int32_t *inputs)
{
    batch_src *b = ctx;
    /* a checkpoint changed under the run fails it now, not at its end */
    const int rc = hs_model_unchanged(b->m);
    if (rc)
        return rc;
    /* under mpirun this rank's i-th batch is i * N + rank (dist.h) */
    i = i * (size_t)hs_dist_size() + (size_t)hs_dist_rank();
    hs_batch_at(b->tok, i * (size_t)b->B * b->T, b->B, b->T, inputs, b->targets);
    return HS_OK;
}

/* ---- under mpirun: gather and write ------------------------------------------
 * Batch i is captured by rank i mod N; every rank > 0 sends each batch's
 * tokens and maps to rank 0, which alone writes the file, in data order:
 * round k is batches kN .. kN+N-1, its own first, then rank 1's, ... (MPI
 * keeps the order of one sender's messages). Rank 0 captures a batch in
 * every round there is, so it drains round k-1 before it writes batch kN. */

typedef struct {
    const hs_model_config *c;
    const hs_capture_plan *p;
    hs_map_sink file; /* rank 0: the writer */
    int B, T;
    size_t nb, calls; /* rank 0's batches begun */
    hs_real *att;     /* one layer's maps of one batch */
    hs_real *pk;      /* rank 0: their selected heads and queries as received */
    int32_t *tok;
} relay;

/* The selected heads and query rows of att (B, H, T, T) of a layer, packed
 * to pk (B, nh, nq, T), or unpacked from pk back to their places in att
 * (what hs_maps_append reads of it). */
static size_t pack(const relay *r, hs_real *att, hs_real *pk, int B, int H, int unpack)
{
    const hs_capture_plan *p = r->p;
    const int nh = p->n_heads ? p->n_heads : H, nq = p->q1 - p->q0, T = r->T;
    const size_t row = (size_t)nq * T;
    for (int s = 0; s < B; s++)
        for (int hi = 0; hi < nh; hi++) {
            hs_real *a = att + (((size_t)s * H + (p->n_heads ? p->heads[hi] : hi)) * T + p->q0) * T;
            hs_real *q = pk + ((size_t)s * nh + hi) * row;
            memcpy(unpack ? a : q, unpack ? q : a, sizeof(hs_real) * row);
        }
    return sizeof(hs_real) * (size_t)B * nh * row;
}

static int send_maps(void *ctx, int layer, const hs_real *att, int B, int H)
{
    (void)layer;
    relay *r = ctx;
    return hs_dist_send0(r->att, pack(r, (hs_real *)att, r->att, B, H, 0));
}

static int send_tokens(void *ctx, const int32_t *tokens, int B)
{
    const relay *r = ctx;
    return hs_dist_send0(tokens, sizeof(int32_t) * (size_t)B * r->T);
}

/* Receives and writes round k's batches of ranks 1 .. N-1. */
static int drain(relay *r, size_t k)
{
    int rc = HS_OK;
    for (int q = 1; !rc && q < hs_dist_size() && k * hs_dist_size() + q < r->nb; q++) {
        rc = hs_dist_recv(q, r->tok, sizeof(int32_t) * (size_t)r->B * r->T);
        if (!rc)
            rc = r->file.write_tokens(r->file.ctx, r->tok, r->B);
        for (int l = 0; !rc && l < r->c->n_layer; l++) {
            const int H = r->c->n_head[l];
            if (!r->p->layer_on[l] || (rc = hs_dist_recv(q, r->pk, pack(r, r->att, r->pk, r->B,
                                                                          H, 0))))
                continue;
            pack(r, r->att, r->pk, r->B, H, 1);
            rc = r->file.write_maps(r->file.ctx, l, r->att, r->B, H);
        }
    }
    return rc;
}

static int relay_maps(void *ctx, int layer, const hs_real *att, int B, int H)
{
    relay *r = ctx;
    return r->file.write_maps(r->file.ctx, layer, att, B, H);
}

static int relay_tokens(void *ctx, const int32_t *tokens, int B)
{
    relay *r = ctx;
    /* rank 0's batch of round k > 0: the rest of round k-1 first */
    const int rc = r->calls++ ? drain(r, r->calls - 2) : HS_OK;
    return rc ? rc : r->file.write_tokens(r->file.ctx, tokens, B);
}

/* ---- padding: what a sequence's padded rows and columns are written as, 0 ----
 * Each rank's k-th batch is batch k N + rank of the data (next_batch). */

typedef struct {
    hs_map_sink inner;
    const unsigned char *mask; /* (sequences, T): 1 a token, 0 padding */
    int B, T;
    size_t calls;              /* this rank's batches begun */
    hs_real *att;              /* one layer's maps of one batch */
} pad_sink;

static int pad_tokens(void *ctx, const int32_t *tokens, int B)
{
    pad_sink *p = ctx;
    p->calls++;
    return p->inner.write_tokens(p->inner.ctx, tokens, B);
}

static int pad_maps(void *ctx, int layer, const hs_real *att, int B, int H)
{
    pad_sink *p = ctx;
    const int T = p->T;
    const size_t batch = (p->calls - 1) * (size_t)hs_dist_size() + (size_t)hs_dist_rank();
    memcpy(p->att, att, sizeof(hs_real) * (size_t)B * H * T * T);
    for (int s = 0; s < B; s++) {
        const unsigned char *real = p->mask + (batch * (size_t)p->B + (size_t)s) * T;
        for (int h = 0; h < H; h++) {
            hs_real *a = p->att + ((size_t)s * H + h) * T * T;
            for (int q = 0; q < T; q++)
                for (int k = 0; k < T; k++)
                    a[(size_t)q * T + k] = real[q] && real[k] ? a[(size_t)q * T + k] : 0;
        }
    }
    return p->inner.write_maps(p->inner.ctx, layer, p->att, B, H);
}

/* A writer with every selected layer declared, its provenance from o. */
static int create_file(hs_maps_writer **w, const hs_capture_opts *o, const hs_capture_plan *p,
                       const hs_model_config *c)
{
    char model_sha[80] = "", data_sha[80] = "", path[1100];
    hs_checkpoint_file(o->model_dir, path, sizeof path);
    int rc = o->model_sha ? HS_OK : hs_sha256_file(path, model_sha, NULL);
    if (!rc && !o->data_sha)
        rc = hs_sha256_file(o->data_path, data_sha, NULL);
    snprintf(path, sizeof path, "%s/config.json", o->model_dir);
    char *config_text = NULL;
    if (!rc)
        rc = hs_read_text(&config_text, path, 1 << 20);
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

int hs_token_table(char ***table, int *n, const hs_tokenizer *tk, const hs_tokens *tok)
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

/* An encoder's token strings without a tokenizer: its special tokens by
 * name (BERT's [CLS], [SEP], [PAD], [MASK], [UNK]; RoBERTa's <s>, </s>,
 * <pad>, <mask>, <unk>), as config.json gives their ids, and every other id
 * of the data as its number, so figures label [CLS] and [SEP]. */
static int special_table(char ***table, int *n, const hs_model_config *c, const hs_tokens *tok)
{
    int32_t max = -1;
    for (size_t i = 0; i < tok->n; i++)
        max = tok->tok[i] > max ? tok->tok[i] : max;
    *n = (int)max + 1;
    *table = hs_calloc((size_t)*n + 1, sizeof **table, "token strings");
    if (!*table)
        return HS_ENOMEM;
    const int r = c->family == HS_FAMILY_ROBERTA;
    const int32_t ids[5] = { c->cls_id, c->sep_id, c->pad_id, c->mask_id, c->unk_id };
    static const char *const names[2][5] = { { "[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]" },
                                             { "<s>", "</s>", "<pad>", "<mask>", "<unk>" } };
    char buf[16];
    for (size_t i = 0; i < tok->n; i++) {
        const int32_t id = tok->tok[i];
        if ((*table)[id])
            continue;
        snprintf(buf, sizeof buf, "%d", (int)id);
        const char *s = buf;
        for (int k = 0; k < 5; k++)
            if (ids[k] == id)
                s = names[r][k];
        if (!((*table)[id] = strdup(s)))
            return hs_fail(HS_ENOMEM, "out of memory for token strings");
    }
    return HS_OK;
}

void hs_token_table_free(char **table, int n)
{
    for (int i = 0; table && i < n; i++)
        free(table[i]);
    free(table);
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
    const int rank = hs_dist_rank(), size = hs_dist_size();
    if (!rc && rank == 0)
        rc = create_file(&w, &o, &p, &m->cfg);
    /* rank 0 alone writes the file, its token strings too */
    if (!rc && rank == 0 && o.tokenizer &&
        (rc = hs_token_table(&table, &n_table, o.tokenizer, tok))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hs_last_error());
        hs_fail(rc, "%s: %s (the tokenizer does not match the data)", o.data_path, msg);
    } else if (!rc && rank == 0 && o.tokenizer) {
        rc = hs_maps_set_token_text(w, (const char *const *)table, n_table);
    } else if (!rc && rank == 0 && m->cfg.encoder &&
               !(rc = special_table(&table, &n_table, &m->cfg, tok))) {
        rc = hs_maps_set_token_text(w, (const char *const *)table, n_table);
    }
    rc = hs_dist_agree(rc);
    volatile sig_atomic_t *stop = io ? io->stop : NULL;
    if (!rc && stop && *stop)
        rc = hs_fail(HS_EINTR, "interrupted before the first batch");
    if (rc) {
        hs_maps_abort(w);
        hs_token_table_free(table, n_table);
        return rc;
    }
    const int B = o.batch, T = o.seq_len;
    int32_t *targets = hs_calloc((size_t)B * T, sizeof(int32_t), "targets");
    batch_src src = { tok, B, T, targets, m };
    hs_map_sink sink = hs_maps_sink(w);
    hs_study_phase(io, "capture");
    /* this rank's batches: rank, rank + N, ... (all of them in one process) */
    const size_t mine = nb / (size_t)size + ((size_t)rank < nb % (size_t)size);
    hs_record_opts ro = { B, T, mine, p.layer_on, stop, io ? io->progress : NULL,
                          io ? io->ctx : NULL };
    int maxH = 0;
    for (int l = 0; l < m->cfg.n_layer; l++)
        maxH = m->cfg.n_head[l] > maxH ? m->cfg.n_head[l] : maxH;
    relay rl = { &m->cfg, &p, sink, B, T, nb, 0, NULL, NULL, NULL };
    if (size > 1) {
        sink = rank ? (hs_map_sink){ &rl, send_maps, send_tokens }
                    : (hs_map_sink){ &rl, relay_maps, relay_tokens };
        rl.att = hs_calloc((size_t)B * maxH * T * T, sizeof(hs_real), "maps of a batch");
        rl.pk = hs_calloc((size_t)B * maxH * T * T, sizeof(hs_real), "maps of a batch");
        rl.tok = hs_calloc((size_t)B * T, sizeof(int32_t), "tokens of a batch");
    }
    pad_sink pad = { sink, o.attention_mask, B, T, 0, NULL };
    if (o.attention_mask) {
        sink = (hs_map_sink){ &pad, pad_maps, pad_tokens };
        pad.att = hs_calloc((size_t)B * maxH * T * T, sizeof(hs_real), "maps of a batch");
    }
    const double t0 = hs_now();
    const int have = targets && (size == 1 || (rl.att && rl.pk && rl.tok)) &&
                     (!o.attention_mask || pad.att);
    rc = have ? hs_record(m, next_batch, &src, &sink, &ro) : HS_ENOMEM;
    if (!rc && size > 1 && rank == 0 && mine > 0)
        rc = drain(&rl, mine - 1); /* the last round */
    r->seconds = hs_now() - t0;
    free(rl.att), free(rl.pk), free(rl.tok), free(pad.att);
    if (rc && size > 1 && rank > 0) /* rank 0 waits for this rank's maps: end the job */
        hs_dist_abort(rc);
    hs_study_phase(io, NULL);
    free(targets);
    if (!rc) /* maps of a checkpoint that changed meanwhile are of neither version */
        rc = hs_model_unchanged(m);
    if (rc) {
        hs_maps_abort(w); /* nothing half-written is left behind */
        hs_token_table_free(table, n_table);
        if (rc == HS_EINTR) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", hs_last_error());
            hs_fail(HS_EINTR, "%s; %s was not written", msg, o.out);
        }
        return rc;
    }
    r->sequences = nb * (size_t)B;
    if (rank == 0 && o.attention_mask &&
        (rc = hs_maps_write_attention_mask(w, o.attention_mask, (long long)r->sequences))) {
        hs_maps_abort(w);
        hs_token_table_free(table, n_table);
        return rc;
    }
    /* the digest of the file this run moved into place, never of whatever the
     * name holds by the time the caller records it */
    rc = rank ? HS_OK : hs_maps_finish_sha(w, r->sha256, &r->bytes);
    hs_token_table_free(table, n_table);
    return rc;
}

/* A shard's tokens, all of them, as one example (--seq-len auto). */
static int shard_example(hs_task *t, const hs_source *src, const hs_capture_opts *co,
                         const hs_model_config *c)
{
    memset(t, 0, sizeof *t);
    hs_tokens tok = { 0 };
    int rc = hs_source_load(&tok, src, NULL, co->model_dir, c->vocab_size);
    if (!rc && (tok.n < 1 || tok.n > (size_t)c->n_ctx))
        rc = hs_fail(HS_EINVAL, "--seq-len auto: %s holds %zu tokens, %s", src->data, tok.n,
                     tok.n ? "more than the model's n_ctx (give --seq-len)" : "no sequence");
    t->n = 1, t->T = (int)tok.n;
    t->len = rc ? NULL : hs_calloc(1, sizeof *t->len, "tokens");
    t->ids = rc ? NULL : hs_calloc(tok.n, sizeof *t->ids, "tokens");
    if (!rc && (!t->len || !t->ids))
        rc = HS_ENOMEM;
    if (!rc) {
        t->len[0] = t->T;
        memcpy(t->ids, tok.tok, tok.n * sizeof *t->ids);
    }
    hs_tokens_free(&tok);
    if (rc)
        hs_task_free(t);
    return rc;
}

/* hs_capture_task_load and hs_capture_lines_load (o NULL: src's lines). */
static int examples_load(hs_capture_task *ct, hs_capture_opts *co, const hs_task_opts *o,
                         const hs_source *src, int whole, const hs_model *m)
{
    memset(ct, 0, sizeof *ct);
    hs_tokenizer *tk = NULL;
    int rc = !o && !src->text ? shard_example(&ct->task, src, co, &m->cfg)
                              : hs_tokenizer_resolve(&tk, src->tokenizer, co->model_dir);
    if (!rc && (o || src->text))
        rc = o ? hs_task_load(&ct->task, o, &m->cfg, tk)
               : hs_task_load_lines(&ct->task, src->text, co->seq_len, whole, &m->cfg, tk);
    if (tk)
        hs_tokenizer_free(tk);
    if (!rc)
        rc = hs_task_tokens(&ct->tokens, &ct->mask, &ct->task);
    if (rc) {
        hs_capture_task_free(ct);
        return rc;
    }
    co->seq_len = ct->task.T, co->attention_mask = ct->mask;
    while (co->batch > 1 && ct->task.n % co->batch) /* every example captured */
        co->batch--;
    return HS_OK;
}

int hs_capture_task_load(hs_capture_task *ct, hs_capture_opts *co, const hs_task_opts *o,
                         const hs_model *m, const char *tokenizer)
{
    const hs_source src = { .tokenizer = tokenizer };
    return examples_load(ct, co, o, &src, 0, m);
}

int hs_capture_lines_load(hs_capture_task *ct, hs_capture_opts *co, const hs_source *src,
                          int whole, const hs_model *m)
{
    return examples_load(ct, co, NULL, src, whole, m);
}

void hs_capture_task_free(hs_capture_task *ct)
{
    hs_task_free(&ct->task);
    hs_tokens_free(&ct->tokens);
    free(ct->mask);
    memset(ct, 0, sizeof *ct);
}

/* ---- an encoder-decoder's maps (SPEC §17) ---------------------------------- */

/* Sets what padding holds in one batch's maps to exactly 0: att (B, H,
 * rows, keys), of sequence b the first rows_real[b] rows and keys_real[b]
 * keys real. */
static void zero_padding(hs_real *att, int B, int H, int rows, int keys, const int *rows_real,
                         const int *keys_real)
{
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int q = 0; q < rows; q++) {
                hs_real *row = att + (((size_t)b * H + h) * rows + q) * keys;
                const int from = q < rows_real[b] ? keys_real[b] : 0;
                memset(row + from, 0, sizeof *row * (size_t)(keys - from));
            }
}

/* One batch of pairs i0 .. i0 + nb - 1 through the model, its maps
 * appended: bs (nb, S) and bd (nb, T) the padded sources and decoder
 * inputs, ns and nt their lengths. */
static int capture_batch(hs_maps_writer *w, hs_s2s_acts *a, const hs_model *m, const int32_t *bs,
                         const int32_t *bd, const int *ns, const int *nt)
{
    const hs_model_config *c = &m->cfg;
    const int E = c->enc_layers, L = c->n_layer, B = a->B, S = a->S, T = a->T;
    int rc = hs_s2s_encode(a, m, bs);
    if (!rc)
        rc = hs_s2s_decode(a, m, bd, NULL);
    for (int l = 0; !rc && l < L; l++) {
        const int H = c->n_head[l];
        hs_real *self = a->self[l].att;
        if (l < E) {
            zero_padding(self, B, H, S, S, ns, ns);
            rc = hs_maps_append(w, l, self, B, H);
            continue;
        }
        zero_padding(self, B, H, T, T, nt, nt);
        zero_padding(a->cross[l].att, B, H, T, S, nt, ns);
        if (!(rc = hs_maps_append(w, l, self, B, H)))
            rc = hs_maps_append(w, L + l, a->cross[l].att, B, H);
    }
    return rc ? rc : hs_maps_append_tokens(w, bd, B);
}

/* An encoder-decoder's whole tables after the last append: the ids (the
 * sources and the decoder inputs of the file's S and T), the masks of the
 * real positions (mask: the source's, written over with the target's) and,
 * with a tokenizer, the token strings. */
static int pairs_tables(hs_maps_writer *w, const int32_t *src, const int32_t *dec,
                        unsigned char *mask, const struct hs_pairs *p, const hs_tokenizer *tk)
{
    const long long n = p->n;
    const int S = p->max_src, T = p->max_tgt;
    int rc = hs_maps_write_ids(w, "source_tokens", src, n, S);
    if (!rc)
        rc = hs_maps_write_ids(w, "target_tokens", dec, n, T);
    if (!rc)
        rc = hs_maps_write_mask(w, "source_mask", mask, n, S);
    for (long long i = 0; !rc && i < n; i++)
        for (int t = 0; t < T; t++)
            mask[i * T + t] = t < p->tgt_len[i];
    if (!rc)
        rc = hs_maps_write_mask(w, "target_mask", mask, n, T);
    if (rc || !tk)
        return rc;
    /* each side's strings by its own tokenizer (Marian's target.spm for targets) */
    for (int side = 0; !rc && side < 2; side++) {
        const hs_tokens view = { .tok = (int32_t *)(side ? dec : src),
                                 .n = (size_t)n * (side ? T : S) };
        char **table = NULL;
        int n_table = 0;
        rc = hs_token_table(&table, &n_table, side ? hs_tokenizer_target(tk) : tk, &view);
        if (!rc)
            rc = hs_maps_write_text(w, side ? "target_token_text" : "source_token_text",
                                    side ? "target_tokens_text" : "source_tokens_text",
                                    side ? dec : src, n, side ? T : S,
                                    (const char *const *)table, n_table);
        hs_token_table_free(table, n_table);
    }
    return rc;
}

int hs_capture_pairs(hs_capture_result *r, const hs_model *m, const struct hs_pairs *p,
                     hs_capture_opts o, const hs_study_io *io)
{
    memset(r, 0, sizeof *r);
    const hs_model_config *c = &m->cfg;
    const int E = c->enc_layers, L = c->n_layer, S = p->max_src, T = p->max_tgt;
    const int B = o.batch > 0 ? o.batch : 1;
    if (o.layers || o.heads || o.queries)
        return hs_fail(HS_EINVAL, "--pairs: an encoder-decoder's capture takes every layer, head "
                                  "and query (no --layers, --heads or --queries)");
    if (hs_dist_size() > 1)
        return hs_fail(HS_EINVAL, "--pairs: capture under mpirun is not implemented for "
                                  "encoder-decoders (run one process)");
    o.seq_len = T; /* /tokens holds the decoder inputs, as /target_tokens */
    hs_maps_writer *w = NULL;
    const hs_capture_plan none = { 0 }; /* no one-stack layer */
    int rc = create_file(&w, &o, &none, c);
    for (int l = 0; !rc && l < L; l++) {
        const int d = hs_config_cross(c, l), ls = d ? l - E : l;
        char group[48];
        snprintf(group, sizeof group, "%s/layer_%02d", d ? "decoder" : "encoder", ls);
        rc = hs_maps_add_map(w, l, ls, group, "attn", c->n_head[l], d ? T : S, d ? T : S);
        if (!rc && d)
            rc = hs_maps_add_map(w, L + l, ls, group, "cross", c->n_head[l], T, S);
    }
    const size_t n = (size_t)p->n;
    int32_t *src = hs_calloc(n * (size_t)S, sizeof *src, "sources");
    int32_t *dec = hs_calloc(n * (size_t)T, sizeof *dec, "decoder inputs");
    unsigned char *mask = hs_calloc(n * (size_t)(S > T ? S : T), 1, "source and target masks");
    if (!rc && !(src && dec && mask))
        rc = HS_ENOMEM;
    if (!rc) /* every pair padded to the file's S and T */
        hs_pairs_fill(src, dec, NULL, p, c, 0, p->n, S, T);
    for (size_t i = 0; !rc && i < n; i++)
        for (int k = 0; k < S; k++)
            mask[i * S + k] = k < p->src_len[i];
    hs_s2s_acts a = { 0 };
    hs_study_phase(io, "capture");
    const double t0 = hs_now();
    for (int i0 = 0; !rc && i0 < p->n; i0 += B) {
        const int nb = p->n - i0 < B ? p->n - i0 : B;
        if (io && io->stop && *io->stop) {
            rc = hs_fail(HS_EINTR, "interrupted; %s was not written", o.out);
            break;
        }
        if (a.B != nb) { /* the last batch may be short */
            hs_s2s_acts_free(&a);
            if ((rc = hs_s2s_acts_alloc(&a, c, nb, S, T, 1)))
                break;
        }
        rc = capture_batch(w, &a, m, src + (size_t)i0 * S, dec + (size_t)i0 * T,
                           p->src_len + i0, p->tgt_len + i0);
        if (!rc && io && io->progress)
            io->progress(io->ctx, (size_t)(i0 + nb), n);
    }
    r->seconds = hs_now() - t0;
    hs_study_phase(io, NULL);
    hs_s2s_acts_free(&a);
    if (!rc)
        rc = hs_model_unchanged(m);
    if (!rc)
        rc = pairs_tables(w, src, dec, mask, p, o.tokenizer);
    free(src), free(dec), free(mask);
    if (rc) {
        hs_maps_abort(w); /* nothing half-written is left behind */
        return rc;
    }
    r->sequences = n;
    return hs_maps_finish_sha(w, r->sha256, &r->bytes);
}
