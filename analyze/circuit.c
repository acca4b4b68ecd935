/* Edge attribution patching and the faithfulness of circuits (circuit.h). */
#include "circuit.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "intervene.h"
#include "linalg.h"
#include "metrics.h"
#include "transformer.h"

/* The graph: nodes input, then each layer's heads and MLP; receivers each
 * layer's q, k, v and MLP, then the logits. A receiver's senders are a
 * prefix of the nodes (n_send), its edges edge0 .. edge0 + n_send - 1. */
typedef struct {
    int layer, head; /* head -1: the MLP; layer -1: input */
} gnode;

typedef struct {
    int layer, head;
    hs_recv_kind kind;
    int n_send;
    long edge0;
} grecv;

typedef struct {
    gnode *node;
    grecv *recv;
    int n_node, n_recv;
    long n_edge;
    int head0[HS_MAX_LAYERS + 1]; /* node of layer l's head 0 */
    int recv0[HS_MAX_LAYERS + 1]; /* receiver of layer l's query head 0; [L]: the logits */
} graph;

static int kv_heads(const hs_model_config *c, int l)
{
    return c->mla ? 1 : c->n_kv_head[l];
}

static void graph_free(graph *g)
{
    free(g->node), free(g->recv);
    memset(g, 0, sizeof *g);
}

/* Lays out c's graph (g->node and g->recv NULL: counts only). */
static void graph_walk(graph *g, const hs_model_config *c)
{
    int nn = 1, nr = 0;
    long ne = 0;
    if (g->node)
        g->node[0] = (gnode){ -1, 0 };
    for (int l = 0; l < c->n_layer; l++) {
        const int H = c->n_head[l], G = kv_heads(c, l), mlp = c->mlp != HS_MLP_NONE;
        const int before = nn;
        g->head0[l] = nn, g->recv0[l] = nr;
        for (int k = 0; k < H + 2 * G; k++) {
            const hs_recv_kind kind = k < H ? HS_RECV_Q : k < H + G ? HS_RECV_K : HS_RECV_V;
            const int head = k < H ? k : k < H + G ? k - H : k - H - G;
            if (g->recv)
                g->recv[nr] = (grecv){ l, head, kind, before, ne };
            nr++, ne += before;
        }
        for (int h = 0; h < H; h++, nn++)
            if (g->node)
                g->node[nn] = (gnode){ l, h };
        if (!mlp)
            continue;
        const int send = c->parallel_residual ? before : nn;
        if (g->recv)
            g->recv[nr] = (grecv){ l, 0, HS_RECV_MLP, send, ne };
        nr++, ne += send;
        if (g->node)
            g->node[nn] = (gnode){ l, -1 };
        nn++;
    }
    g->head0[c->n_layer] = nn, g->recv0[c->n_layer] = nr;
    if (g->recv)
        g->recv[nr] = (grecv){ c->n_layer, 0, HS_RECV_LOGITS, nn, ne };
    nr++, ne += nn;
    g->n_node = nn, g->n_recv = nr, g->n_edge = ne;
}

static int graph_init(graph *g, const hs_model_config *c)
{
    memset(g, 0, sizeof *g);
    graph_walk(g, c);
    g->node = hs_calloc((size_t)g->n_node, sizeof *g->node, "circuit graph");
    g->recv = hs_calloc((size_t)g->n_recv, sizeof *g->recv, "circuit graph");
    if (!g->node || !g->recv) {
        graph_free(g);
        return HS_ENOMEM;
    }
    graph_walk(g, c);
    return HS_OK;
}

void hs_circuit_size(const hs_model_config *c, int *nodes, int *receivers, long *edges)
{
    graph g = { 0 };
    graph_walk(&g, c);
    *nodes = g.n_node, *receivers = g.n_recv, *edges = g.n_edge;
}

/* The receiver index of (layer, kind, head). */
static int recv_index(const graph *g, const hs_model_config *c, int l, hs_recv_kind kind, int h)
{
    if (kind == HS_RECV_LOGITS)
        return g->n_recv - 1;
    const int H = c->n_head[l], G = kv_heads(c, l), r0 = g->recv0[l];
    switch (kind) {
    case HS_RECV_Q: return r0 + h;
    case HS_RECV_K: return r0 + H + h;
    case HS_RECV_V: return r0 + H + G + h;
    default: return r0 + H + 2 * G;
    }
}

static void node_name(char *out, const gnode *u)
{
    if (u->layer < 0)
        snprintf(out, 24, "input");
    else if (u->head < 0)
        snprintf(out, 24, "m%d", u->layer);
    else
        snprintf(out, 24, "a%d.h%d", u->layer, u->head);
}

static void recv_name(char *out, const grecv *r)
{
    static const char kinds[] = "qkv";
    if (r->kind == HS_RECV_LOGITS)
        snprintf(out, 24, "logits");
    else if (r->kind == HS_RECV_MLP)
        snprintf(out, 24, "m%d", r->layer);
    else
        snprintf(out, 24, "a%d.h%d<%c>", r->layer, r->head, kinds[r->kind]);
}

int hs_circuit_method(int *method, const char *name)
{
    if (name && !strcmp(name, "eap"))
        *method = HS_CIRCUIT_EAP;
    else if (name && !strcmp(name, "eap-ig"))
        *method = HS_CIRCUIT_EAP_IG;
    else
        return hs_fail(HS_EINVAL, "--method: '%s' is not eap or eap-ig", name ? name : "");
    return HS_OK;
}

static int by_value(const void *a, const void *b)
{
    const long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

int hs_circuit_top_n(long **top, int *n, const char *list, const hs_model_config *c)
{
    int nodes, recvs;
    long edges;
    hs_circuit_size(c, &nodes, &recvs, &edges);
    *top = hs_calloc(list ? strlen(list) / 2 + 2 : 64, sizeof **top, "--top-n");
    *n = 0;
    if (!*top)
        return HS_ENOMEM;
    if (!list) {
        (*top)[(*n)++] = 0;
        for (long p = 1; p < edges; p *= 10)
            for (int k = 0; k < 3; k++) {
                const long v = p * (k == 0 ? 1 : k == 1 ? 2 : 5);
                if (v < edges)
                    (*top)[(*n)++] = v;
            }
        (*top)[(*n)++] = edges;
        return HS_OK;
    }
    for (const char *p = list; *p;) {
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || (*end && *end != ',')) {
            free(*top), *top = NULL, *n = 0;
            return hs_fail(HS_EINVAL, "--top-n '%s': non-negative integers N,N,... expected",
                           list);
        }
        (*top)[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    qsort(*top, (size_t)*n, sizeof **top, by_value);
    int k = 0;
    for (int i = 0; i < *n; i++)
        if (!k || (*top)[i] != (*top)[k - 1])
            (*top)[k++] = (*top)[i];
    *n = k;
    return HS_OK;
}

int hs_circuit_check(const hs_model_config *c, const hs_circuit_opts *o)
{
    if (hs_split_check(c))
        return hs_fail(HS_EINVAL, "circuit: %s (%s; atp covers this family)", hs_last_error(),
                       hs_family_name(c->family));
    if (o->method != HS_CIRCUIT_EAP && o->method != HS_CIRCUIT_EAP_IG)
        return hs_fail(HS_EINVAL, "circuit: unknown method %d", o->method);
    if (o->ig_steps < 0)
        return hs_fail(HS_EINVAL, "--ig-steps %d: at least 1 step", o->ig_steps);
    return hs_heads_fit(c) ? HS_EINVAL : HS_OK;
}

void hs_circuit_result_free(hs_circuit_result *r)
{
    hs_head_table_free(&r->heads);
    free(r->edges), free(r->names), free(r->curve);
    memset(r, 0, sizeof *r);
}

/* One study. Row p of tab: prompt p's LD clean and corrupt, its score of
 * every edge, its LD of each faithfulness point. */
typedef struct {
    const hs_model *m;
    const hs_circuit_opts *o;
    graph g;
    size_t items;
    double *tab;            /* (n, items) */
    hs_acts run, corrupt;   /* training activations (gradients, split forwards); the corrupt run */
    int B, T;
    size_t p0, Td;          /* the batch's first row; T d */
    hs_real *D;             /* (nodes, B, T d), rows Dld apart: sender output changes; or the
                               corrupt outputs */
    size_t Dld;
    hs_real *out_run;       /* (nodes, B, T d): a faithfulness run's outputs */
    hs_real *Gb;            /* (Gcap, B, T d): buffered receiver gradients */
    int *Gr, nG, Gcap;
    hs_real *prod;          /* (nodes, Gcap) */
    double *sum;            /* (B, edges) */
    hs_real *emb_clean, *dl;
    const unsigned char *in; /* faithfulness: the circuit's edges (1: in) */
    int point;               /* its index */
} circ;

static double *row_of(circ *r, int b) { return r->tab + (r->p0 + (size_t)b) * r->items; }

/* out (B, T d) = node u's output in the run of activations a. */
static void node_output(hs_real *out, const circ *r, const hs_acts *a, int u)
{
    const hs_model_config *c = &r->m->cfg;
    const gnode *n = &r->g.node[u];
    const size_t size = (size_t)r->B * r->Td;
    if (n->layer < 0) {
        memcpy(out, a->emb, sizeof(hs_real) * size);
        return;
    }
    const hs_layer_acts *la = &a->layer[n->layer];
    if (n->head < 0) {
        memcpy(out, la->mlp_out, sizeof(hs_real) * size);
        return;
    }
    const hs_layer_weights *lw = &r->m->w.layer[n->layer];
    const int d = c->d_model, dh = c->head_dim, HD = c->n_head[n->layer] * dh;
    const hs_real *w_o = c->mla ? lw->mla.w_o : lw->attn.w_o;
    hs_gemm(0, 1, r->B * r->T, d, dh, 1, la->attn.z + (size_t)n->head * dh, HD,
            w_o + (size_t)n->head * dh, HD, 0, out, d);
}

/* The buffered receivers' scores, one product per prompt: the output
 * changes of the most senders any of them has times their gradients, each
 * receiver's own senders' products into sum. */
static void flush(circ *r)
{
    if (!r->nG)
        return;
    const int R = r->nG;
    int ns = 0;
    for (int j = 0; j < R; j++)
        ns = r->g.recv[r->Gr[j]].n_send > ns ? r->g.recv[r->Gr[j]].n_send : ns;
    const int ld = (int)((size_t)r->B * r->Td), E = (int)r->g.n_edge;
    for (int b = 0; b < r->B; b++) {
        hs_gemm(0, 1, ns, R, (int)r->Td, 1, r->D + (size_t)b * r->Td, (int)r->Dld,
                r->Gb + (size_t)b * r->Td, ld, 0, r->prod, R);
        double *s = r->sum + (size_t)b * E;
        for (int j = 0; j < R; j++) {
            const grecv *v = &r->g.recv[r->Gr[j]];
            for (int u = 0; u < v->n_send; u++)
                s[v->edge0 + u] += r->prod[(size_t)u * R + j];
        }
    }
    r->nG = 0;
}

static int on_receiver(void *ctx, int layer, hs_recv_kind kind, int head, const hs_real *dx)
{
    circ *r = ctx;
    const int k = recv_index(&r->g, &r->m->cfg, layer, kind, head);
    if (r->nG == r->Gcap)
        flush(r);
    memcpy(r->Gb + (size_t)r->nG * r->B * r->Td, dx, sizeof(hs_real) * r->B * r->Td);
    r->Gr[r->nG++] = k;
    return HS_OK;
}

/* One gradient pass: the logit difference's backward from the run's
 * forward, every receiver scored. */
static int grad_pass(circ *r, const hs_hooks *hooks)
{
    hs_grad_hooks gh = { .ctx = r, .receiver = on_receiver };
    r->nG = 0;
    int rc = hs_backward_from(&r->run, r->m, r->dl, hooks, &gh);
    flush(r);
    return rc;
}

/* Prompts [i0, i0+B) of group g: both runs, the senders' output changes, the
 * gradient passes; the per-prompt scores into tab. */
static int score_batch(circ *r, const hs_prompt_group *pg, int i0, int B)
{
    const hs_model *m = r->m;
    const int T = pg->T, V = m->cfg.vocab_size, E = (int)r->g.n_edge;
    const size_t size = (size_t)B * r->Td;
    const int32_t *clean = pg->clean + (size_t)i0 * T, *corrupt = pg->corrupt + (size_t)i0 * T;
    r->B = B; /* the last batch of a group may be short */
    int rc = hs_acts_set_batch(&r->run, B);
    if (!rc)
        rc = hs_acts_set_batch(&r->corrupt, B);
    if (!rc)
        rc = hs_forward(&r->run, m, clean, NULL, NULL);
    if (!rc)
        rc = hs_forward(&r->corrupt, m, corrupt, NULL, NULL);
    if (rc)
        return rc;
    hs_real *tmp = r->out_run; /* scratch here */
    for (int u = 0; u < r->g.n_node; u++) {
        hs_real *d = r->D + (size_t)u * r->Dld;
        node_output(d, r, &r->corrupt, u);
        node_output(tmp, r, &r->run, u);
        for (size_t i = 0; i < size; i++)
            d[i] -= tmp[i];
    }
    memcpy(r->emb_clean, r->run.emb, sizeof(hs_real) * size);
    memset(r->dl, 0, sizeof(hs_real) * (size_t)B * T * V);
    for (int b = 0; b < B; b++) {
        double *row = row_of(r, b);
        row[0] = hs_logit_diff(r->run.logits, b, T, V, pg->answer[i0 + b], pg->wrong[i0 + b]);
        row[1] = hs_logit_diff(r->corrupt.logits, b, T, V, pg->answer[i0 + b], pg->wrong[i0 + b]);
        hs_real *last = r->dl + ((size_t)b * T + T - 1) * V;
        last[pg->answer[i0 + b]] += 1;
        last[pg->wrong[i0 + b]] -= 1;
    }
    memset(r->sum, 0, sizeof(double) * (size_t)B * E);
    int passes = 1;
    if (r->o->method == HS_CIRCUIT_EAP) {
        rc = grad_pass(r, NULL);
    } else {
        passes = r->o->ig_steps > 0 ? r->o->ig_steps : 5;
        hs_real *e = r->out_run; /* the interpolated embeddings */
        const hs_real *ek = r->corrupt.emb;
        for (int k = 0; !rc && k < passes; k++) {
            if (r->o->stop && *r->o->stop) { /* a pass is a forward and a backward */
                rc = hs_fail(HS_EINTR, "circuit: interrupted");
                break;
            }
            const hs_real a = (hs_real)k / (hs_real)passes;
            for (size_t i = 0; i < size; i++)
                e[i] = ek[i] + a * (r->emb_clean[i] - ek[i]);
            const hs_intervention iv = { HS_SITE_RESID_PRE, 0, 0, -1, HS_IV_REPLACE, e, size };
            hs_hook_plan plan = { &iv, 1, NULL };
            hs_hooks hooks = { 0 };
            rc = hs_hooks_attach(&hooks, &m->cfg, &plan);
            if (!rc)
                rc = hs_forward(&r->run, m, corrupt, NULL, &hooks);
            if (!rc)
                rc = grad_pass(r, &hooks);
        }
    }
    for (int b = 0; !rc && b < B; b++) {
        double *row = row_of(r, b);
        for (int i = 0; i < E; i++)
            row[2 + i] = r->sum[(size_t)b * E + i] / passes;
    }
    return rc;
}

/* ---- the faithfulness run ---------------------------------------------------------------- */

static int split_input(void *ctx, int layer, hs_recv_kind kind, int head, hs_real *x)
{
    circ *r = ctx;
    const hs_model_config *c = &r->m->cfg;
    const int k = recv_index(&r->g, c, layer, kind, head);
    const grecv *v = &r->g.recv[k];
    const size_t size = (size_t)r->B * r->Td;
    const hs_acts *a = &r->corrupt;
    const hs_real *base = kind == HS_RECV_LOGITS ? a->layer[c->n_layer - 1].out
                          : kind != HS_RECV_MLP  ? a->layer[layer].in
                          : c->parallel_residual ? a->layer[layer].in
                                                 : a->layer[layer].r1;
    memcpy(x, base, sizeof(hs_real) * size);
    for (int u = 0; u < v->n_send; u++) {
        if (!r->in[v->edge0 + u])
            continue;
        const hs_real *run = u ? r->out_run + (size_t)u * size : r->emb_clean;
        const hs_real *cor = r->D + (size_t)u * r->Dld;
        for (size_t i = 0; i < size; i++)
            x[i] += run[i] - cor[i];
    }
    return HS_OK;
}

static int split_output(void *ctx, int layer, int head, const hs_real *y)
{
    circ *r = ctx;
    const int u = r->g.head0[layer] + (head < 0 ? r->m->cfg.n_head[layer] : head);
    memcpy(r->out_run + (size_t)u * r->B * r->Td, y, sizeof(hs_real) * r->B * r->Td);
    return HS_OK;
}

/* Prompts [i0, i0+B) of group g: the corrupt run's outputs (in D), then
 * each faithfulness point's split run; LDs into tab. */
static int faith_batch(circ *r, const hs_prompt_group *pg, int i0, int B,
                       unsigned char *const *circuits)
{
    const hs_model *m = r->m;
    const int T = pg->T, V = m->cfg.vocab_size, E = (int)r->g.n_edge;
    const size_t size = (size_t)B * r->Td;
    r->B = B;
    int rc = hs_acts_set_batch(&r->run, B);
    if (!rc)
        rc = hs_acts_set_batch(&r->corrupt, B);
    if (!rc)
        rc = hs_forward_to(&r->run, m, pg->clean + (size_t)i0 * T, 0, NULL);
    if (!rc)
        rc = hs_forward(&r->corrupt, m, pg->corrupt + (size_t)i0 * T, NULL, NULL);
    if (rc)
        return rc;
    memcpy(r->emb_clean, r->run.emb, sizeof(hs_real) * size);
    for (int u = 0; u < r->g.n_node; u++)
        node_output(r->D + (size_t)u * r->Dld, r, &r->corrupt, u);
    const hs_split_plan plan = { r, split_input, split_output };
    for (int k = 0; !rc && k < r->o->n_top; k++) {
        r->in = circuits[k];
        if (!(rc = hs_forward_split(&r->run, m, &plan)))
            for (int b = 0; b < B; b++)
                row_of(r, b)[2 + E + k] = hs_logit_diff(r->run.logits, b, T, V,
                                                        pg->answer[i0 + b], pg->wrong[i0 + b]);
    }
    return rc;
}

/* ---- batches, ranks, rows ------------------------------------------------------------------ */

static void free_batch(circ *r)
{
    hs_acts_free(&r->run);
    hs_acts_free(&r->corrupt);
    free(r->D), free(r->out_run), free(r->Gb), free(r->Gr), free(r->prod), free(r->sum);
    free(r->emb_clean), free(r->dl);
    r->D = r->out_run = r->Gb = r->prod = r->emb_clean = r->dl = NULL;
    r->Gr = NULL, r->sum = NULL;
}

static int alloc_batch(circ *r, int B, int T)
{
    const hs_model_config *c = &r->m->cfg;
    r->B = B, r->T = T, r->Td = (size_t)T * c->d_model;
    const size_t size = (size_t)B * r->Td, S = (size_t)r->g.n_node;
    if (size > INT_MAX - 16)
        return hs_fail(HS_EINVAL, "circuit: %d prompts of %d positions are too many for one "
                       "product (--batch)", B, T);
    /* Receivers buffered for one product, whatever their layers: two of
     * the AVX-512 kernel's 32-column panels. A layer at a time (its q, k
     * and v receivers, then its MLP's alone) GPT-2 small's products filled
     * 37 of 96 columns (EAP-IG, Zen 4: 8.2-8.5 s against 7.6 now) */
    r->Gcap = 64;
    int rc = hs_acts_alloc(&r->run, c, B, T, HS_ACTS_TRAIN);
    if (!rc)
        rc = hs_acts_alloc(&r->corrupt, c, B, T, HS_ACTS_INFER);
    /* D's rows are the A of flush's products, which have a few panels of
     * receivers: rows 4 KB apart (B T d a multiple of 1024) would share one
     * L1 set, and the GEMM copies every panel of such rows first; a line
     * further apart it reads them in place (EAP-IG on GPT-2 small's shape,
     * Zen 4: 8.3-8.7 s against 9.3-9.6) */
    r->Dld = size % 1024 ? size : size + 16;
    r->D = hs_calloc(S * r->Dld, sizeof(hs_real), "sender output changes");
    r->out_run = hs_calloc(S * size, sizeof(hs_real), "circuit outputs");
    r->Gb = hs_calloc((size_t)r->Gcap * size, sizeof(hs_real), "receiver gradients");
    r->Gr = hs_calloc((size_t)r->Gcap, sizeof(int), "receiver gradients");
    r->prod = hs_calloc(S * r->Gcap, sizeof(hs_real), "edge scores");
    r->sum = hs_calloc((size_t)B * r->g.n_edge, sizeof(double), "edge scores");
    r->emb_clean = hs_calloc(size, sizeof(hs_real), "embeddings");
    r->dl = hs_calloc((size_t)B * T * c->vocab_size, sizeof(hs_real), "logit gradient");
    if (!rc && !(r->D && r->out_run && r->Gb && r->Gr && r->prod && r->sum && r->emb_clean &&
                 r->dl))
        rc = HS_ENOMEM;
    return rc;
}

/* Prompts per forward: o->batch, else as many (at most 16) as keep the two
 * (nodes, B, T, d) buffers within 256 MiB. */
static int group_batch(const circ *r, const hs_prompt_group *pg)
{
    int B = r->o->batch > 0 ? r->o->batch : 16;
    if (r->o->batch <= 0) {
        const double per = 2.0 * r->g.n_node * pg->T * r->m->cfg.d_model * sizeof(hs_real);
        const int fit = (int)(256.0 * (1 << 20) / per);
        B = fit < 1 ? 1 : fit < B ? fit : B;
    }
    return pg->n < B ? pg->n : B;
}

/* Every batch of every group through fn (phase 0: scores, 1: faithfulness):
 * batch i on rank i mod N; owner[p] the rank of prompt p's batch. */
static int each_batch(circ *r, const hs_prompt_set *ps, int *owner, int phase,
                      unsigned char *const *circuits, size_t *done, size_t total)
{
    int rc = HS_OK;
    size_t p0 = 0;
    long batch = 0;
    for (int g = 0; !rc && g < ps->n_group; g++) {
        const hs_prompt_group *pg = &ps->group[g];
        const int B = group_batch(r, pg);
        rc = alloc_batch(r, B, pg->T);
        for (int i0 = 0; !rc && i0 < pg->n; i0 += B, batch++) {
            const int nb = pg->n - i0 < B ? pg->n - i0 : B;
            r->p0 = p0 + (size_t)i0;
            for (int i = 0; i < nb; i++)
                owner[r->p0 + i] = (int)(batch % hs_dist_size());
            if (r->o->stop && *r->o->stop)
                rc = hs_fail(HS_EINTR, "circuit: interrupted");
            else if (batch % hs_dist_size() == hs_dist_rank())
                rc = phase ? faith_batch(r, pg, i0, nb, circuits) : score_batch(r, pg, i0, nb);
            if (r->o->progress)
                r->o->progress(r->o->ctx, ++*done, total);
        }
        p0 += (size_t)pg->n;
        free_batch(r);
    }
    return rc;
}

static hs_welford column(const circ *r, size_t n, size_t it)
{
    hs_welford w = { 0 };
    for (size_t p = 0; p < n; p++)
        hs_welford_add(&w, r->tab[p * r->items + it]);
    return w;
}

/* The edges' rows and names from the table. */
static int edge_rows(hs_circuit_result *res, const circ *r, size_t n)
{
    const graph *g = &r->g;
    res->names = hs_calloc((size_t)(g->n_node + g->n_recv), sizeof *res->names, "edge names");
    res->edges = hs_calloc((size_t)g->n_edge, sizeof *res->edges, "edge rows");
    if (!res->names || !res->edges)
        return HS_ENOMEM;
    for (int u = 0; u < g->n_node; u++)
        node_name(res->names[u], &g->node[u]);
    for (int k = 0; k < g->n_recv; k++)
        recv_name(res->names[g->n_node + k], &g->recv[k]);
    const char *metric = r->o->method == HS_CIRCUIT_EAP ? HS_METRIC(EAP) : HS_METRIC(EAP_IG);
    for (int k = 0; k < g->n_recv; k++)
        for (int u = 0; u < g->recv[k].n_send; u++) {
            const long e = g->recv[k].edge0 + u;
            const hs_welford w = column(r, n, 2 + (size_t)e);
            res->edges[e] = (hs_edge_row){ res->names[u], res->names[g->n_node + k], metric,
                                           w.mean, hs_welford_stderr(&w), w.n };
        }
    res->n_edges = g->n_edge;
    res->n_nodes = g->n_node, res->n_receivers = g->n_recv;
    return HS_OK;
}

/* |score| descending, then sender and receiver in name order. */
static int by_rank(const void *a, const void *b)
{
    const hs_edge_row *x = *(const hs_edge_row *const *)a, *y = *(const hs_edge_row *const *)b;
    const double ax = fabs(x->value), ay = fabs(y->value);
    if (ax != ay)
        return ax > ay ? -1 : 1;
    const int s = strcmp(x->sender, y->sender);
    return s ? s : strcmp(x->receiver, y->receiver);
}

int hs_circuit_rank(const hs_circuit_result *r, long *order)
{
    const hs_edge_row **p = hs_calloc((size_t)r->n_edges + 1, sizeof *p, "edge ranks");
    if (!p)
        return HS_ENOMEM;
    for (long e = 0; e < r->n_edges; e++)
        p[e] = &r->edges[e];
    qsort(p, (size_t)r->n_edges, sizeof *p, by_rank);
    for (long e = 0; e < r->n_edges; e++)
        order[e] = p[e] - r->edges;
    free(p);
    return HS_OK;
}

/* circuits[k]: the edges of the top top_n[k] edges by rank. */
static int make_circuits(unsigned char **circuits, const hs_circuit_result *res,
                         const hs_circuit_opts *o)
{
    long *order = hs_calloc((size_t)res->n_edges + 1, sizeof *order, "edge ranks");
    int rc = order ? hs_circuit_rank(res, order) : HS_ENOMEM;
    for (int k = 0; !rc && k < o->n_top; k++) {
        if (!(circuits[k] = hs_calloc((size_t)res->n_edges + 1, 1, "circuit")))
            rc = HS_ENOMEM;
        for (long i = 0; !rc && i < o->top_n[k] && i < res->n_edges; i++)
            circuits[k][order[i]] = 1;
    }
    free(order);
    return rc;
}

int hs_circuit(hs_circuit_result *res, const hs_model *m, const hs_prompt_set *ps,
               const hs_circuit_opts *o)
{
    memset(res, 0, sizeof *res);
    const hs_model_config *c = &m->cfg;
    int rc = hs_circuit_check(c, o);
    if (rc)
        return rc;
    circ r = { .m = m, .o = o };
    if ((rc = graph_init(&r.g, c)))
        return rc;
    const size_t n = (size_t)ps->n;
    r.items = 2 + (size_t)r.g.n_edge + (size_t)o->n_top;
    r.tab = hs_calloc(n * r.items, sizeof *r.tab, "circuit rows");
    int *owner = hs_calloc(n, sizeof *owner, "circuit rows");
    unsigned char **circuits = hs_calloc((size_t)o->n_top + 1, sizeof *circuits, "circuits");
    if (!r.tab || !owner || !circuits)
        rc = HS_ENOMEM;
    size_t total = 0, done = 0;
    for (int g = 0; g < ps->n_group; g++) {
        const int B = group_batch(&r, &ps->group[g]);
        total += (size_t)(ps->group[g].n + B - 1) / B * (o->n_top ? 2 : 1);
    }
    if (!rc)
        rc = each_batch(&r, ps, owner, 0, NULL, &done, total);
    if (hs_dist_size() > 1)
        rc = hs_dist_share_rows(rc, r.tab, n, r.items, owner);
    hs_ld_baseline ld = { 0 };
    for (size_t p = 0; !rc && p < n; p++)
        hs_ld_baseline_add(&ld, r.tab[p * r.items], r.tab[p * r.items + 1]);
    double span = 0;
    if (!rc)
        rc = hs_patch_baseline(&res->heads, &span, &ld);
    res->ld_clean = ld.clean.mean, res->ld_corrupt = ld.corrupt.mean, res->n = ld.clean.n;
    if (!rc)
        rc = edge_rows(res, &r, n);
    if (!rc && o->n_top)
        rc = make_circuits(circuits, res, o);
    if (!rc && o->n_top)
        rc = each_batch(&r, ps, owner, 1, circuits, &done, total);
    if (o->n_top && hs_dist_size() > 1)
        rc = hs_dist_share_rows(rc, r.tab, n, r.items, owner);
    if (!rc && o->n_top && !(res->curve = hs_calloc((size_t)o->n_top, sizeof *res->curve,
                                                    "faithfulness")))
        rc = HS_ENOMEM;
    for (int k = 0; !rc && k < o->n_top; k++) {
        const hs_welford w = column(&r, n, 2 + (size_t)r.g.n_edge + k);
        const long N = o->top_n[k] < res->n_edges ? o->top_n[k] : res->n_edges;
        res->curve[res->n_curve++] = (hs_curve_point){ k, (double)N,
                                                       (w.mean - ld.corrupt.mean) / span };
    }
    for (int k = 0; circuits && k < o->n_top; k++)
        free(circuits[k]);
    free(circuits), free(owner), free(r.tab);
    graph_free(&r.g);
    if (rc)
        hs_circuit_result_free(res);
    return rc;
}
