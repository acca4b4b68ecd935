/* Attribution patching and circuits (analyze/atp.h, analyze/circuit.h) and
 * the model's backward from a logit gradient (hs_backward_from): against the
 * PyTorch autograd oracle tests/fixtures/atp/oracle.json
 * (scripts/oracle/gen_atp.py: GPT-2, Llama-GQA, GPT-NeoX with a parallel
 * residual, two MLA models; every site denoising and noising, AtP*, every
 * edge's eap and eap_ig, faithfulness), and the identities that hold
 * exactly: AtP equals patching where the path to the logit difference is
 * linear, the edges into the logits sum to the final residual's change times
 * its gradient, the full circuit is faithful 1 and the empty one 0, and the
 * receivers' gradients are the derivatives of the split forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>

#include "atp.h"
#include "checkpoint.h"
#include "circuit.h"
#include "fixture.h"
#include "intervene.h"
#include "planted.h"
#include "runner.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-6;
#else
static const double TOL = 1e-4;
#endif

static cJSON *oracle(void)
{
    static cJSON *root;
    if (root)
        return root;
    char path[512];
    snprintf(path, sizeof path, "%s/atp/oracle.json", HS_FIXTURE_DIR);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    CU_ASSERT_FATAL(text && fread(text, 1, (size_t)n, f) == (size_t)n);
    text[n] = 0;
    fclose(f);
    root = cJSON_Parse(text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    return root;
}

/* A case's model and prompts. */
static void load_case(const cJSON *cs, hs_model *m, hs_prompt_set *ps)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", HS_FIXTURE_DIR,
             cJSON_GetObjectItem(cs, "model")->valuestring);
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(m, path), HS_OK);
    snprintf(path, sizeof path, "%s/%s", HS_FIXTURE_DIR,
             cJSON_GetObjectItem(cs, "prompts")->valuestring);
    CU_ASSERT_EQUAL_FATAL(hs_prompts_load(ps, path, NULL, m->cfg.vocab_size, 0), HS_OK);
}

/* The worst error of got against want relative to the scale of the
 * metric's values: |got - want| / (|want| + max |want|). */
typedef struct {
    double worst;
    int count, missing;
    char where[160];
} cmp;

static void cmp_add(cmp *c, double got, double want, double scale, const char *what)
{
    const double e = fabs(got - want) / (fabs(want) + scale + 1e-300);
    if (!(e <= c->worst)) {
        c->worst = isnan(e) ? INFINITY : e;
        snprintf(c->where, sizeof c->where, "%s: got %.10g want %.10g", what, got, want);
    }
    c->count++;
}

static double scale_of(const cJSON *rows, int at)
{
    double s = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, rows) s = fmax(s, fabs(cJSON_GetArrayItem(r, at)->valuedouble));
    return s;
}

/* Every oracle row of one mode against the result. */
static void compare_atp(cmp *c, const cJSON *want, const hs_atp_result *r)
{
    const cJSON *metric;
    cJSON_ArrayForEach(metric, want)
    {
        const double sv = scale_of(metric, 2), se = scale_of(metric, 3);
        const cJSON *row;
        cJSON_ArrayForEach(row, metric)
        {
            const int l = cJSON_GetArrayItem(row, 0)->valueint, i = cJSON_GetArrayItem(row, 1)->valueint;
            const double v = cJSON_GetArrayItem(row, 2)->valuedouble;
            const double e = cJSON_GetArrayItem(row, 3)->valuedouble;
            double gv = NAN, ge = NAN;
            const hs_metric_row *h = hs_head_table_find(&r->heads, l, i, metric->string);
            if (h)
                gv = h->value, ge = h->stderr_value;
            for (int k = 0; !h && k < r->n_pos; k++)
                if (r->pos[k].layer == l && r->pos[k].position == i &&
                    !strcmp(r->pos[k].metric, metric->string))
                    gv = r->pos[k].value, ge = r->pos[k].stderr_value;
            if (isnan(gv)) {
                c->missing++;
                continue;
            }
            char what[96];
            snprintf(what, sizeof what, "%s L%d %d", metric->string, l, i);
            cmp_add(c, gv, v, sv, what);
            cmp_add(c, ge, e, se, what);
        }
    }
}

static int count_rows(const cJSON *want)
{
    int n = 0;
    const cJSON *metric;
    cJSON_ArrayForEach(metric, want) n += cJSON_GetArraySize(metric);
    return n;
}

/* atp_* and atp_star_* of every site, denoising and noising, of every case. */
static void test_atp_equals_the_autograd_oracle(void)
{
    const cJSON *cases = cJSON_GetObjectItem(oracle(), "cases"), *cs;
    cJSON_ArrayForEach(cs, cases)
    {
        hs_model m;
        hs_prompt_set ps;
        load_case(cs, &m, &ps);
        for (int noising = 0; noising < 2; noising++) {
            hs_atp_opts o = { .sites = (1 << HS_ATP_SITES) - 1, .noising = noising, .star = 1,
                              .batch = 4 };
            hs_atp_result r;
            CU_ASSERT_EQUAL_FATAL(hs_atp(&r, &m, &ps, &o), HS_OK);
            const cJSON *want = cJSON_GetObjectItem(cs, noising ? "noising" : "denoising");
            cmp c = { 0 };
            compare_atp(&c, want, &r);
            const int rows = count_rows(want);
            int got = r.n_pos;
            for (int i = 0; i < r.heads.n; i++)
                got += r.heads.rows[i].layer >= 0;
            printf("\n    %s %s: %d rows, worst %.3g (%s)", cs->string,
                   noising ? "noising" : "denoising", c.count / 2, c.worst, c.where);
            CU_ASSERT_EQUAL(c.missing, 0);
            CU_ASSERT_EQUAL(got, rows);
            CU_ASSERT(c.worst <= TOL);
            const cJSON *ldc = cJSON_GetObjectItem(cs, "logit_diff_clean");
            CU_ASSERT(fabs(r.ld_clean - cJSON_GetArrayItem(ldc, 0)->valuedouble) <=
                      TOL * (1 + fabs(r.ld_clean)));
            hs_atp_result_free(&r);
        }
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* eap and eap_ig of every edge and the faithfulness curves of every case. */
static void test_circuit_equals_the_autograd_oracle(void)
{
    static const long top[] = { 0, 1, 2, 4, 8, 16, 1000000 };
    const cJSON *cases = cJSON_GetObjectItem(oracle(), "cases"), *cs;
    cJSON_ArrayForEach(cs, cases)
    {
        hs_model m;
        hs_prompt_set ps;
        load_case(cs, &m, &ps);
        for (int method = 0; method < 2; method++) {
            hs_circuit_opts o = { .method = method, .top_n = top, .n_top = 7, .batch = 4,
                                  .ig_steps = cJSON_GetObjectItem(cs, "ig_steps")->valueint };
            hs_circuit_result r;
            CU_ASSERT_EQUAL_FATAL(hs_circuit(&r, &m, &ps, &o), HS_OK);
            const cJSON *want = cJSON_GetObjectItem(cs, method ? "eap_ig" : "eap"), *row;
            const double sv = scale_of(want, 2), se = scale_of(want, 3);
            cmp c = { 0 };
            cJSON_ArrayForEach(row, want)
            {
                const char *u = cJSON_GetArrayItem(row, 0)->valuestring;
                const char *v = cJSON_GetArrayItem(row, 1)->valuestring;
                const hs_edge_row *e = NULL;
                for (long i = 0; !e && i < r.n_edges; i++)
                    if (!strcmp(r.edges[i].sender, u) && !strcmp(r.edges[i].receiver, v))
                        e = &r.edges[i];
                if (!e) {
                    c.missing++;
                    continue;
                }
                char what[96];
                snprintf(what, sizeof what, "%s -> %s", u, v);
                cmp_add(&c, e->value, cJSON_GetArrayItem(row, 2)->valuedouble, sv, what);
                cmp_add(&c, e->stderr_value, cJSON_GetArrayItem(row, 3)->valuedouble, se, what);
            }
            const cJSON *fw = cJSON_GetObjectItem(cs, method ? "faithfulness_eap_ig"
                                                             : "faithfulness_eap");
            double fworst = 0;
            CU_ASSERT_EQUAL(r.n_curve, cJSON_GetArraySize(fw));
            for (int k = 0; k < r.n_curve && k < cJSON_GetArraySize(fw); k++) {
                const cJSON *p = cJSON_GetArrayItem(fw, k);
                CU_ASSERT_EQUAL(r.curve[k].x, cJSON_GetArrayItem(p, 0)->valuedouble);
                fworst = fmax(fworst, fabs(r.curve[k].y - cJSON_GetArrayItem(p, 1)->valuedouble));
            }
            printf("\n    %s %s: %ld edges, worst %.3g (%s); faithfulness worst %.3g", cs->string,
                   method ? "eap_ig" : "eap", r.n_edges, c.worst, c.where, fworst);
            CU_ASSERT_EQUAL(c.missing, 0);
            CU_ASSERT_EQUAL(r.n_edges, cJSON_GetArraySize(want));
            CU_ASSERT(c.worst <= TOL);
            CU_ASSERT(fworst <= TOL);
            hs_circuit_result_free(&r);
        }
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* ---- identities ------------------------------------------------------------------------ */

/* n prompt pairs of length T over vocabulary V: corrupt changes positions 1
 * and T-2; answer and wrong drawn apart. */
static void random_prompts(hs_prompt_set *ps, int n, int T, int V, unsigned seed)
{
    hs_prompt_group *g = calloc(1, sizeof *g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    g->T = T, g->n = n;
    g->clean = calloc((size_t)n * T, sizeof(int32_t));
    g->corrupt = calloc((size_t)n * T, sizeof(int32_t));
    g->answer = calloc((size_t)n, sizeof(int32_t));
    g->wrong = calloc((size_t)n, sizeof(int32_t));
    g->line = calloc((size_t)n, sizeof(int));
    CU_ASSERT_FATAL(g->clean && g->corrupt && g->answer && g->wrong && g->line);
    unsigned x = seed;
    for (int i = 0; i < n * T; i++) {
        x = x * 1103515245u + 12345u;
        g->clean[i] = g->corrupt[i] = (int32_t)((x >> 8) % (unsigned)V);
    }
    for (int i = 0; i < n; i++) {
        g->corrupt[i * T + 1] = (g->clean[i * T + 1] + 1 + i) % V;
        g->corrupt[i * T + T - 2] = (g->clean[i * T + T - 2] + 3) % V;
        g->answer[i] = (int32_t)((7 * i + 1) % V), g->wrong[i] = (int32_t)((7 * i + 4) % V);
        g->line[i] = i + 1;
    }
    *ps = (hs_prompt_set){ g, 1, n };
}

/* A model whose every attention pattern is fixed (queries and keys 0: each
 * query attends uniformly) with no norm anywhere: LD is linear in every z,
 * pattern and residual, so the first-order estimate is the patch itself. */
static void test_atp_equals_patch_where_the_path_is_linear(void)
{
    static const char *const over[] = { "n_layer=2", "n_head=4", "d_model=16", "vocab_size=24",
                                        "n_ctx=16", "input_norm=false", "final_norm=false" };
    hs_model m;
    fx_make_model(&m, "attn-only", over, 7, 41);
    const hs_model_config *c = &m.cfg;
    for (int l = 0; l < c->n_layer; l++) {
        hs_attn_weights *w = &m.w.layer[l].attn;
        const size_t n = (size_t)c->n_head[l] * c->head_dim * c->d_model;
        memset(w->w_q, 0, sizeof(hs_real) * n);
        memset(w->w_k, 0, sizeof(hs_real) * (size_t)c->n_kv_head[l] * c->head_dim * c->d_model);
        if (w->b_q)
            memset(w->b_q, 0, sizeof(hs_real) * (size_t)c->n_head[l] * c->head_dim);
        if (w->b_k)
            memset(w->b_k, 0, sizeof(hs_real) * (size_t)c->n_kv_head[l] * c->head_dim);
    }
    hs_prompt_set ps;
    random_prompts(&ps, 5, 7, c->vocab_size, 3);
    const int sites[][2] = { { HS_ATP_Z, HS_PATCH_Z }, { HS_ATP_PATTERN, HS_PATCH_PATTERN },
                             { HS_ATP_RESID_PRE, HS_PATCH_RESID_PRE },
                             { HS_ATP_ATTN_OUT, HS_PATCH_ATTN_OUT } };
    for (int noising = 0; noising < 2; noising++) {
        hs_atp_opts ao = { .noising = noising };
        hs_patch_opts po = { .noising = noising };
        for (int k = 0; k < 4; k++)
            ao.sites |= 1 << sites[k][0], po.sites |= 1 << sites[k][1];
        hs_atp_result a;
        hs_patch_result p;
        CU_ASSERT_EQUAL_FATAL(hs_atp(&a, &m, &ps, &ao), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_patch(&p, &m, &ps, &po), HS_OK);
        double worst = 0;
        int n = 0;
        for (int i = 0; i < p.heads.n; i++) {
            const hs_metric_row *r = &p.heads.rows[i];
            if (r->layer < 0)
                continue;
            const char *atp = !strcmp(r->metric, hs_patch_metric(HS_PATCH_Z)) ? "atp_z" : "atp_pattern";
            const hs_metric_row *e = hs_head_table_find(&a.heads, r->layer, r->head, atp);
            CU_ASSERT_PTR_NOT_NULL_FATAL(e);
            worst = fmax(worst, fabs(e->value - r->value) + fabs(e->stderr_value - r->stderr_value));
            n++;
        }
        for (int i = 0; i < p.n_pos; i++) {
            const hs_position_row *r = &p.pos[i];
            const char *atp = strstr(r->metric, "resid_pre") ? "atp_resid_pre" : "atp_attn_out";
            int found = 0;
            for (int j = 0; j < a.n_pos; j++)
                if (a.pos[j].layer == r->layer && a.pos[j].position == r->position &&
                    !strcmp(a.pos[j].metric, atp)) {
                    worst = fmax(worst, fabs(a.pos[j].value - r->value) +
                                            fabs(a.pos[j].stderr_value - r->stderr_value));
                    found = 1;
                }
            CU_ASSERT(found);
            n++;
        }
        printf("\n    %s: %d values, atp - patch at most %.3g", noising ? "noising" : "denoising",
               n, worst);
        CU_ASSERT(n == 2 * 2 * 4 + 2 * 2 * 7);
        CU_ASSERT(worst <= 10 * TOL);
        hs_atp_result_free(&a);
        hs_patch_result_free(&p);
    }
    hs_prompt_set_free(&ps);
    hs_model_free(&m);
}

/* The final residual is the sum of every node's output and the biases:
 * the eap of the edges into the logits sums to (x_corrupt - x_clean) . g at
 * the final residual, g its gradient on the clean run. */
typedef struct {
    hs_real *g;
    size_t n;
} final_grad;

static int keep_final(void *ctx, const hs_site_view *v)
{
    final_grad *f = ctx;
    if ((size_t)v->layer == f->n) /* the final residual: layer n_layer */
        memcpy(f->g, v->x, sizeof(hs_real) * v->B * v->sb);
    return HS_OK;
}

static void test_eap_into_the_logits_sums_to_the_final_residual(void)
{
    const cJSON *cases = cJSON_GetObjectItem(oracle(), "cases"), *cs;
    cJSON_ArrayForEach(cs, cases)
    {
        hs_model m;
        hs_prompt_set ps;
        load_case(cs, &m, &ps);
        const hs_model_config *c = &m.cfg;
        const hs_prompt_group *pg = &ps.group[0];
        const int B = pg->n, T = pg->T, d = c->d_model, V = c->vocab_size, L = c->n_layer;
        hs_circuit_opts o = { .method = HS_CIRCUIT_EAP };
        hs_circuit_result r;
        CU_ASSERT_EQUAL_FATAL(hs_circuit(&r, &m, &ps, &o), HS_OK);
        double sum = 0;
        for (long e = 0; e < r.n_edges; e++)
            if (!strcmp(r.edges[e].receiver, "logits"))
                sum += r.edges[e].value;
        hs_acts clean, corrupt;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&clean, c, B, T, HS_ACTS_TRAIN), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&corrupt, c, B, T, HS_ACTS_INFER), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&clean, &m, pg->clean, NULL, NULL), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&corrupt, &m, pg->corrupt, NULL, NULL), HS_OK);
        hs_real *dl = calloc((size_t)B * T * V, sizeof *dl);
        final_grad f = { calloc((size_t)B * T * d, sizeof(hs_real)), (size_t)L };
        for (int b = 0; b < B; b++) {
            dl[((size_t)b * T + T - 1) * V + pg->answer[b]] += 1;
            dl[((size_t)b * T + T - 1) * V + pg->wrong[b]] -= 1;
        }
        hs_grad_hooks gh = { .ctx = &f };
        gh.site[HS_SITE_RESID_PRE] = keep_final;
        CU_ASSERT_EQUAL_FATAL(hs_backward_from(&clean, &m, dl, NULL, &gh), HS_OK);
        double want = 0;
        const hs_real *xc = clean.layer[L - 1].out, *xk = corrupt.layer[L - 1].out;
        for (size_t i = 0; i < (size_t)B * T * d; i++)
            want += ((double)xk[i] - xc[i]) * f.g[i] / B;
        printf("\n    %s: sum of eap into logits %.10g, (x_corrupt - x_clean) . g %.10g",
               cs->string, sum, want);
        CU_ASSERT(fabs(sum - want) <= TOL * (1 + fabs(want)));
        free(dl), free(f.g);
        hs_acts_free(&clean);
        hs_acts_free(&corrupt);
        hs_circuit_result_free(&r);
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* The senders' output changes are the A of the edge products, kept a line
 * further apart where B T d is a multiple of 1024 (rows 4 KB apart would
 * share one L1 set): each case's prompts repeated to such a batch score
 * every edge as the prompts once (the mean of copies), for EAP and EAP-IG. */
static void test_a_batch_of_rows_4_kb_apart_scores_as_its_prompts(void)
{
    const cJSON *cases = cJSON_GetObjectItem(oracle(), "cases"), *cs;
    cJSON_ArrayForEach(cs, cases)
    {
        hs_model m;
        hs_prompt_set ps;
        load_case(cs, &m, &ps);
        const hs_prompt_group *pg = &ps.group[0];
        const size_t row = (size_t)pg->T * m.cfg.d_model;
        int copies = 1;
        while ((size_t)copies * pg->n * row % 1024)
            copies *= 2;
        CU_ASSERT_FATAL(copies > 1); /* the fixtures' B T d are not multiples of 1024 */
        const int n = copies * pg->n, T = pg->T;
        hs_prompt_group g = { T, n, malloc(sizeof(int32_t) * n * T),
                              malloc(sizeof(int32_t) * n * T), malloc(sizeof(int32_t) * n),
                              malloc(sizeof(int32_t) * n), NULL };
        for (int i = 0; i < n; i++) {
            const int j = i % pg->n;
            memcpy(g.clean + (size_t)i * T, pg->clean + (size_t)j * T, sizeof(int32_t) * T);
            memcpy(g.corrupt + (size_t)i * T, pg->corrupt + (size_t)j * T, sizeof(int32_t) * T);
            g.answer[i] = pg->answer[j], g.wrong[i] = pg->wrong[j];
        }
        const hs_prompt_set big = { &g, 1, n };
        for (int method = 0; method < 2; method++) {
            hs_circuit_opts o = { .method = method, .ig_steps = 2, .batch = pg->n };
            hs_circuit_result once, rep;
            CU_ASSERT_EQUAL_FATAL(hs_circuit(&once, &m, &ps, &o), HS_OK);
            o.batch = n; /* one batch: (n_node, n T d) */
            CU_ASSERT_EQUAL_FATAL(hs_circuit(&rep, &m, &big, &o), HS_OK);
            CU_ASSERT_EQUAL_FATAL(rep.n_edges, once.n_edges);
            double worst = 0, top = 0;
            for (long e = 0; e < once.n_edges; e++) {
                top = fmax(top, fabs(once.edges[e].value));
                worst = fmax(worst, fabs(rep.edges[e].value - once.edges[e].value));
            }
            printf("\n    %s %s: %d copies, edges within %.2g of the prompts' once (top %.3g)",
                   cs->string, method ? "eap-ig" : "eap", copies, worst, top);
            CU_ASSERT(worst <= TOL * (1 + top));
            hs_circuit_result_free(&once);
            hs_circuit_result_free(&rep);
        }
        free(g.clean), free(g.corrupt), free(g.answer), free(g.wrong);
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* Every edge in the circuit: the clean run, faithfulness 1; none: the
 * corrupt run, 0 (each receiver reads the corrupt stream exactly). */
static void test_all_edges_are_faithful_and_none_are_not(void)
{
    const cJSON *cases = cJSON_GetObjectItem(oracle(), "cases"), *cs;
    cJSON_ArrayForEach(cs, cases)
    {
        hs_model m;
        hs_prompt_set ps;
        load_case(cs, &m, &ps);
        int nodes, recv;
        long edges;
        hs_circuit_size(&m.cfg, &nodes, &recv, &edges);
        const long top[] = { 0, edges };
        hs_circuit_opts o = { .method = HS_CIRCUIT_EAP_IG, .ig_steps = 2, .top_n = top,
                              .n_top = 2 };
        hs_circuit_result r;
        CU_ASSERT_EQUAL_FATAL(hs_circuit(&r, &m, &ps, &o), HS_OK);
        CU_ASSERT_EQUAL_FATAL(r.n_curve, 2);
        printf("\n    %s: %ld edges, faithfulness of none %.3g, of all %.12g", cs->string,
               r.n_edges, r.curve[0].y, r.curve[1].y);
        CU_ASSERT_EQUAL(r.n_edges, edges);
        CU_ASSERT(fabs(r.curve[0].y) <= TOL);
        CU_ASSERT(fabs(r.curve[1].y - 1) <= TOL);
        hs_circuit_result_free(&r);
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* ---- the backward against finite differences, on every family ------------------------------ */

/* Sum over prompts of LD of a forward of tokens with (optionally) site s of
 * layer l replaced by source. */
static double ld_sum(const hs_model *m, hs_acts *a, const hs_prompt_group *g,
                     const int32_t *tokens, const hs_intervention *iv)
{
    hs_hooks hooks = { 0 };
    hs_hook_plan plan = { iv, iv ? 1 : 0, NULL };
    CU_ASSERT_EQUAL_FATAL(hs_hooks_attach(&hooks, &m->cfg, &plan), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(a, m, tokens, NULL, &hooks), HS_OK);
    double s = 0;
    for (int b = 0; b < g->n; b++)
        s += hs_logit_diff(a->logits, b, g->T, m->cfg.vocab_size, g->answer[b], g->wrong[b]);
    return s;
}

/* What the gradient observers saw: for each (site, layer) the sum over
 * every element and prompt of (src - base) . g. */
typedef struct {
    const hs_model_config *c;
    const hs_acts *base, *src;
    double dot[HS_N_SITES][HS_MAX_LAYERS + 1];
} observed;

/* The direction along which the attention scores (never kept in the
 * activations, so no src - base) are moved: a fixed pseudo-random value in
 * [-1, 1] per (head, key) i = h S + s, at every query (an add
 * intervention's source). */
static hs_real score_dir(size_t i)
{
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    return (hs_real)((double)(z >> 11) / 9007199254740992.0 * 2 - 1);
}

static int observe_dot(void *ctx, const hs_site_view *g)
{
    observed *o = ctx;
    if (g->site == HS_SITE_ATTN_SCORES) {
        double acc = 0;
        for (int b = 0; b < g->B; b++)
            for (int t = 0; t < g->T; t++)
                for (int h = 0; h < g->heads; h++) {
                    const hs_real *x = g->x + b * g->sb + t * g->st + h * g->sh;
                    for (int k = 0; k < g->width; k++)
                        acc += (double)score_dir((size_t)h * g->width + k) * x[k];
                }
        o->dot[g->site][g->layer] = acc;
        return HS_OK;
    }
    hs_site_view vb, vs;
    if (hs_acts_site_view(&vb, o->base, o->c, g->site, g->layer) ||
        hs_acts_site_view(&vs, o->src, o->c, g->site, g->layer))
        return HS_OK;
    double acc = 0;
    for (size_t i = 0; i < g->B * g->sb; i++)
        acc += ((double)vs.x[i] - vb.x[i]) * g->x[i];
    o->dot[g->site][g->layer] = acc;
    return HS_OK;
}

#ifdef HEADSCOPE_DOUBLE
static const double FD_EPS = 1e-4, FD_TOL = 1e-6;
#else
static const double FD_EPS = 3e-2, FD_TOL = 0.15; /* float: a smoke check, rounding dominates */
#endif

/* The models of the families the oracle does not cover: output norms with
 * soft-caps and sliding layers (gemma2), no input norm with q/k norms over
 * the projection (olmo2), per-head q/k norms (qwen3, gemma3), post-norm
 * layers, fused projections (phi3), a sequential GPT-NeoX, windows (mistral),
 * and a headscope model with every feature at once. */
static void family_model(hs_model *m, int k, char *name, size_t n)
{
    static const char *const dirs[] = { "families3/gemma2", "families3/olmo2",
                                        "families3/qwen3", "families3/gemma3",
                                        "families3/phi3", "models/hs_post_gelu",
                                        "families/neox_seq", "families/mistral_w3",
                                        "models/hs_mixed" };
    if (k < 9) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", HS_FIXTURE_DIR, dirs[k]);
        snprintf(name, n, "%s", dirs[k]);
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(m, path), HS_OK);
        return;
    }
    static const char *const over[] = { "n_layer=2", "n_head=4", "n_kv_head=2", "d_model=16",
                                        "vocab_size=24", "n_ctx=16", "positional=rope",
                                        "d_ff=24", "mlp=geglu", "attn_softcap=4",
                                        "final_softcap=6", "window=[[0,3,0,2],3]",
                                        "qk_norm=head", "norm=rmsnorm",
                                        "norm_offset=true", "embed_scale=true" };
    snprintf(name, n, "headscope (soft-caps, windows, q/k norms, (1 + w), sqrt(d))");
    fx_make_model(m, "attn-only", over, 16, 43);
    for (size_t i = 0; i < m->n_params; i++)
        m->params[i] /= 3; /* soft-caps at their typical range, not saturated */
}

/* Each site's observed gradient against the derivative of LD along the
 * change src - base of the whole site tensor of one layer, by central
 * differences through a replace intervention; the scores' (the softmax's
 * input) along score_dir through an add intervention. */
static void test_site_gradients_equal_finite_differences_on_every_family(void)
{
    for (int k = 0; k < 10; k++) {
        hs_model m;
        char name[128];
        family_model(&m, k, name, sizeof name);
        const hs_model_config *c = &m.cfg;
        hs_prompt_set ps;
        random_prompts(&ps, 3, 6, c->vocab_size, 5 + (unsigned)k);
        const hs_prompt_group *g = &ps.group[0];
        const int B = g->n, T = g->T, V = c->vocab_size;
        hs_acts base, src, fd;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&base, c, B, T, HS_ACTS_TRAIN), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&src, c, B, T, HS_ACTS_TRAIN), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&fd, c, B, T, HS_ACTS_MAPS), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&src, &m, g->clean, NULL, NULL), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&base, &m, g->corrupt, NULL, NULL), HS_OK);
        hs_real *dl = calloc((size_t)B * T * V, sizeof *dl);
        for (int b = 0; b < B; b++) {
            dl[((size_t)b * T + T - 1) * V + g->answer[b]] += 1;
            dl[((size_t)b * T + T - 1) * V + g->wrong[b]] -= 1;
        }
        observed o = { .c = c, .base = &base, .src = &src };
        hs_grad_hooks gh = { .ctx = &o };
        for (int s = 0; s < HS_N_SITES; s++)
            gh.site[s] = observe_dot;
        CU_ASSERT_EQUAL_FATAL(hs_backward_from(&base, &m, dl, NULL, &gh), HS_OK);
        double worst = 0, scale = 0;
        char where[96] = "";
        for (int s = 0; s < HS_N_SITES; s++)
            for (int l = 0; l < c->n_layer; l++)
                scale = fmax(scale, fabs(o.dot[s][l]));
        int checked = 0;
        for (int s = 0; s < HS_N_SITES; s++)
            for (int l = 0; l < c->n_layer; l++) {
                hs_site_view vb, vs;
                const int scores = s == HS_SITE_ATTN_SCORES;
                if ((s == HS_SITE_MLP_OUT && c->mlp == HS_MLP_NONE) ||
                    (!scores && (hs_acts_site_view(&vb, &base, c, (hs_site)s, l) ||
                                 hs_acts_site_view(&vs, &src, c, (hs_site)s, l))))
                    continue;
                const size_t n = scores ? (size_t)c->n_head[l] * T : (size_t)B * vb.sb;
                hs_real *x = calloc(n, sizeof *x);
                double ld[2];
                for (int side = 0; side < 2; side++) {
                    const double e = side ? -FD_EPS : FD_EPS;
                    for (size_t i = 0; i < n; i++)
                        x[i] = scores ? (hs_real)(e * score_dir(i))
                                      : (hs_real)(vb.x[i] + e * ((double)vs.x[i] - vb.x[i]));
                    const hs_intervention iv = { (hs_site)s, l, -1, -1,
                                                 scores ? HS_IV_ADD : HS_IV_REPLACE, x, n };
                    ld[side] = ld_sum(&m, &fd, g, g->corrupt, &iv);
                }
                free(x);
                const double want = (ld[0] - ld[1]) / (2 * FD_EPS);
                const double err = fabs(o.dot[s][l] - want) / (scale + 1e-12);
                if (err > worst) {
                    worst = err;
                    snprintf(where, sizeof where, "%s of layer %d: %.8g, differences %.8g",
                             hs_site_name((hs_site)s), l, o.dot[s][l], want);
                }
                checked++;
            }
        printf("\n    %s: %d sites, worst %.2g of the largest (%s)", name, checked, worst, where);
        CU_ASSERT(checked >= 8 * c->n_layer - (c->mlp == HS_MLP_NONE ? c->n_layer : 0));
        CU_ASSERT(worst <= FD_TOL);
        free(dl);
        hs_acts_free(&base);
        hs_acts_free(&src);
        hs_acts_free(&fd);
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* The receivers' gradients against the split forward's derivative along
 * each receiver's own input (every other receiver reading the clean stream):
 * LD(x_v + e (x_v,corrupt - x_v,clean)). */
typedef struct {
    const hs_model_config *c;
    const hs_acts *clean, *corrupt;
    hs_real *g;       /* (receivers, B T d) */
    int *count, target, n_recv;
    int (*index)(const hs_model_config *c, int layer, hs_recv_kind kind, int head);
    double eps;
    size_t size;
    hs_real *out, *ref; /* (nodes, B T d): this run's and the unmoved run's node outputs */
    int node0[HS_MAX_LAYERS + 1], track;
} recv_check;

static int recv_slot(const hs_model_config *c, int layer, hs_recv_kind kind, int head)
{
    int k = 0;
    for (int l = 0; l < layer; l++)
        k += c->n_head[l] + 2 * (c->mla ? 1 : c->n_kv_head[l]) + (c->mlp != HS_MLP_NONE);
    if (kind == HS_RECV_LOGITS)
        return k;
    const int H = c->n_head[layer], G = c->mla ? 1 : c->n_kv_head[layer];
    return k + (kind == HS_RECV_Q ? head : kind == HS_RECV_K ? H + head
                                      : kind == HS_RECV_V    ? H + G + head
                                                             : H + 2 * G);
}

static int keep_recv(void *ctx, int layer, hs_recv_kind kind, int head, const hs_real *dx)
{
    recv_check *r = ctx;
    const int k = r->index(r->c, layer, kind, head);
    memcpy(r->g + (size_t)k * r->size, dx, sizeof(hs_real) * r->size);
    r->count[k]++;
    return HS_OK;
}

static const hs_real *stream(const hs_acts *a, const hs_model_config *c, int layer,
                             hs_recv_kind kind)
{
    if (kind == HS_RECV_LOGITS)
        return a->layer[c->n_layer - 1].out;
    if (kind == HS_RECV_MLP && !c->parallel_residual)
        return a->layer[layer].r1;
    return a->layer[layer].in;
}

/* Receiver (layer, kind, head)'s input: the clean stream plus the change of
 * every sender's output in this run (a head's own change reaches what reads
 * it), plus e (x_corrupt - x_clean) for the moved receiver. */
static int moved_input(void *ctx, int layer, hs_recv_kind kind, int head, hs_real *x)
{
    recv_check *r = ctx;
    const hs_model_config *c = r->c;
    const hs_real *xc = stream(r->clean, c, layer, kind), *xk = stream(r->corrupt, c, layer, kind);
    const double e = r->index(c, layer, kind, head) == r->target ? r->eps : 0;
    for (size_t i = 0; i < r->size; i++)
        x[i] = (hs_real)(xc[i] + e * ((double)xk[i] - xc[i]));
    const int senders = kind == HS_RECV_LOGITS ? r->node0[c->n_layer]
                        : kind == HS_RECV_MLP && !c->parallel_residual
                            ? r->node0[layer] + c->n_head[layer]
                            : r->node0[layer];
    for (int u = 0; r->track && u < senders; u++)
        for (size_t i = 0; i < r->size; i++)
            x[i] += r->out[(size_t)u * r->size + i] - r->ref[(size_t)u * r->size + i];
    return HS_OK;
}

static int keep_output(void *ctx, int layer, int head, const hs_real *y)
{
    recv_check *r = ctx;
    const int u = r->node0[layer] + (head < 0 ? r->c->n_head[layer] : head);
    memcpy((r->track ? r->out : r->ref) + (size_t)u * r->size, y, sizeof(hs_real) * r->size);
    return HS_OK;
}

static void test_receiver_gradients_equal_the_split_forward_derivatives(void)
{
    const int which[] = { 2, 4, 6, 7, 8, 9 }; /* the families the split forward runs */
    for (size_t w = 0; w < sizeof which / sizeof which[0]; w++) {
        hs_model m;
        char name[128];
        family_model(&m, which[w], name, sizeof name);
        const hs_model_config *c = &m.cfg;
        CU_ASSERT_EQUAL_FATAL(hs_split_check(c), HS_OK);
        hs_prompt_set ps;
        random_prompts(&ps, 3, 6, c->vocab_size, 11 + (unsigned)w);
        const hs_prompt_group *g = &ps.group[0];
        const int B = g->n, T = g->T, V = c->vocab_size;
        hs_acts clean, corrupt, run;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&clean, c, B, T, HS_ACTS_TRAIN), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&corrupt, c, B, T, HS_ACTS_INFER), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&run, c, B, T, HS_ACTS_INFER), HS_OK);
        const double ld_clean = ld_sum(&m, &clean, g, g->clean, NULL);
        ld_sum(&m, &corrupt, g, g->corrupt, NULL);
        recv_check r = { .c = c, .clean = &clean, .corrupt = &corrupt, .target = -1,
                         .index = recv_slot, .size = (size_t)B * T * c->d_model };
        r.n_recv = recv_slot(c, c->n_layer, HS_RECV_LOGITS, 0) + 1;
        for (int l = 0; l < c->n_layer; l++)
            r.node0[l + 1] = r.node0[l] + c->n_head[l] + (c->mlp != HS_MLP_NONE);
        r.out = calloc((size_t)r.node0[c->n_layer] * r.size, sizeof(hs_real));
        r.ref = calloc((size_t)r.node0[c->n_layer] * r.size, sizeof(hs_real));
        r.g = calloc((size_t)r.n_recv * r.size, sizeof(hs_real));
        r.count = calloc((size_t)r.n_recv, sizeof(int));
        hs_real *dl = calloc((size_t)B * T * V, sizeof *dl);
        for (int b = 0; b < B; b++) {
            dl[((size_t)b * T + T - 1) * V + g->answer[b]] += 1;
            dl[((size_t)b * T + T - 1) * V + g->wrong[b]] -= 1;
        }
        hs_grad_hooks gh = { .ctx = &r, .receiver = keep_recv };
        CU_ASSERT_EQUAL_FATAL(hs_backward_from(&clean, &m, dl, NULL, &gh), HS_OK);
        const hs_split_plan plan = { &r, moved_input, keep_output };
        /* with no receiver moved the split forward is the model */
        CU_ASSERT_EQUAL_FATAL(hs_forward_split(&run, &m, &plan), HS_OK);
        double s0 = 0;
        for (int b = 0; b < B; b++)
            s0 += hs_logit_diff(run.logits, b, T, V, g->answer[b], g->wrong[b]);
        CU_ASSERT(fabs(s0 - ld_clean) <= TOL * (1 + fabs(ld_clean)));
        r.track = 1;
        double worst = 0, scale = 0, dots[256] = { 0 };
        for (int k = 0; k < r.n_recv && k < 256; k++) {
            CU_ASSERT_EQUAL(r.count[k], 1);
            const hs_real *gk = r.g + (size_t)k * r.size;
            /* which stream receiver k reads */
            int layer = -1, kind = -1;
            for (int l = 0; l <= c->n_layer && layer < 0; l++)
                for (int q = 0; q <= HS_RECV_LOGITS && layer < 0; q++) {
                    const int G = l < c->n_layer ? (c->mla ? 1 : c->n_kv_head[l]) : 1;
                    const int nh = q == HS_RECV_Q ? c->n_head[l < c->n_layer ? l : 0]
                                   : q <= HS_RECV_V ? G : 1;
                    if ((q == HS_RECV_LOGITS) != (l == c->n_layer) ||
                        (q == HS_RECV_MLP && c->mlp == HS_MLP_NONE))
                        continue;
                    for (int h = 0; h < nh; h++)
                        if (recv_slot(c, l, (hs_recv_kind)q, h) == k)
                            layer = l, kind = q;
                }
            CU_ASSERT_FATAL(layer >= 0);
            const hs_real *xc = stream(&clean, c, layer, (hs_recv_kind)kind);
            const hs_real *xk = stream(&corrupt, c, layer, (hs_recv_kind)kind);
            for (size_t i = 0; i < r.size; i++)
                dots[k] += ((double)xk[i] - xc[i]) * gk[i];
            scale = fmax(scale, fabs(dots[k]));
        }
        int worst_k = -1;
        for (int k = 0; k < r.n_recv && k < 256; k++) {
            double ld[2];
            r.target = k;
            for (int side = 0; side < 2; side++) {
                r.eps = side ? -FD_EPS : FD_EPS;
                CU_ASSERT_EQUAL_FATAL(hs_forward_split(&run, &m, &plan), HS_OK);
                ld[side] = 0;
                for (int b = 0; b < B; b++)
                    ld[side] += hs_logit_diff(run.logits, b, T, V, g->answer[b], g->wrong[b]);
            }
            const double err = fabs((ld[0] - ld[1]) / (2 * FD_EPS) - dots[k]) / (scale + 1e-12);
            if (err > worst)
                worst = err, worst_k = k;
        }
        printf("\n    %s: %d receivers, worst %.2g of the largest (receiver %d)", name, r.n_recv,
               worst, worst_k);
        CU_ASSERT(worst <= FD_TOL);
        free(dl), free(r.g), free(r.count), free(r.out), free(r.ref);
        hs_acts_free(&clean);
        hs_acts_free(&corrupt);
        hs_acts_free(&run);
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* ---- recovering planted circuits ------------------------------------------------------ */

enum { NP = 8, TT = 8 };

/* Prompts x0 A B x3 .. x6 A (distinct tokens): the planted induction head
 * (layer 1, head 0) attends from the last A to the token after the first A
 * and copies it to the logits (answer B); the corrupt prompt puts C where B
 * was (wrong = C). The previous-token head (layer 0, head 0) gives the
 * induction head its keys. */
static void planted_prompts(hs_prompt_set *ps)
{
    hs_prompt_group *g = calloc(1, sizeof *g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    g->T = TT, g->n = NP;
    g->clean = calloc(NP * TT, sizeof(int32_t));
    g->corrupt = calloc(NP * TT, sizeof(int32_t));
    g->answer = calloc(NP, sizeof(int32_t));
    g->wrong = calloc(NP, sizeof(int32_t));
    g->line = calloc(NP, sizeof(int));
    CU_ASSERT_FATAL(g->clean && g->corrupt && g->answer && g->wrong && g->line);
    for (int i = 0; i < NP; i++) {
        int32_t *c = g->clean + i * TT, *k = g->corrupt + i * TT;
        for (int t = 0; t < TT; t++)
            c[t] = (int32_t)((3 * i + 5 * t + 1) % PV);
        c[TT - 1] = c[1];
        memcpy(k, c, sizeof(int32_t) * TT);
        k[2] = (int32_t)((c[2] + 7 * TT) % PV);
        g->answer[i] = c[2], g->wrong[i] = k[2], g->line[i] = i + 1;
    }
    *ps = (hs_prompt_set){ g, 1, NP };
}

/* The heads of a circuit: every head a sender or a receiver of its edges
 * names, as layer * HS_MAX_HEADS + head flags in on[]. */
static int circuit_heads(const hs_circuit_result *r, const long *order, long N, unsigned char *on)
{
    int n = 0;
    for (long i = 0; i < N; i++)
        for (int side = 0; side < 2; side++) {
            int l, h;
            const char *s = side ? r->edges[order[i]].receiver : r->edges[order[i]].sender;
            if (sscanf(s, "a%d.h%d", &l, &h) == 2 && !on[l * HS_MAX_HEADS + h])
                on[l * HS_MAX_HEADS + h] = 1, n++;
        }
    return n;
}

/* EAP-IG on the planted previous-token + induction model: the smallest
 * circuit reaching faithfulness 0.8 has at most 5% of the edges, and the
 * heads it names are those exact patching (patch_z) finds. */
static void test_eap_ig_recovers_the_planted_circuit(void)
{
    hs_model m;
    build_planted(&m);
    hs_prompt_set ps;
    planted_prompts(&ps);
    int nodes, recv;
    long edges;
    hs_circuit_size(&m.cfg, &nodes, &recv, &edges);
    const long top[] = { 1, 2, 3, 4, 6, 8, 12 };
    hs_circuit_opts o = { .method = HS_CIRCUIT_EAP_IG, .ig_steps = 5, .top_n = top, .n_top = 7 };
    hs_circuit_result r;
    CU_ASSERT_EQUAL_FATAL(hs_circuit(&r, &m, &ps, &o), HS_OK);
    long *order = calloc((size_t)r.n_edges, sizeof *order);
    CU_ASSERT_EQUAL_FATAL(hs_circuit_rank(&r, order), HS_OK);
    long N = -1;
    for (int k = 0; k < r.n_curve && N < 0; k++)
        if (r.curve[k].y >= 0.8)
            N = (long)r.curve[k].x;
    printf("\n    %ld edges; faithfulness", r.n_edges);
    for (int k = 0; k < r.n_curve; k++)
        printf(" N=%.0f %.3f", r.curve[k].x, r.curve[k].y);
    for (long i = 0; i < 4; i++)
        printf("\n    %s -> %s %+.4f", r.edges[order[i]].sender, r.edges[order[i]].receiver,
               r.edges[order[i]].value);
    CU_ASSERT(N > 0 && N <= edges / 20);
    hs_patch_opts po = { .sites = 1 << HS_PATCH_Z };
    hs_patch_result p;
    CU_ASSERT_EQUAL_FATAL(hs_patch(&p, &m, &ps, &po), HS_OK);
    unsigned char in_circuit[2 * HS_MAX_HEADS] = { 0 }, named[2 * HS_MAX_HEADS] = { 0 };
    const int nc = circuit_heads(&r, order, N > 0 ? N : 0, in_circuit);
    int np = 0;
    for (int i = 0; i < p.heads.n; i++)
        if (p.heads.rows[i].layer >= 0 && fabs(p.heads.rows[i].value) > 0.1)
            named[p.heads.rows[i].layer * HS_MAX_HEADS + p.heads.rows[i].head] = 1, np++;
    printf("\n    the top-%ld circuit names %d head(s), patch_z %d", N, nc, np);
    CU_ASSERT(np > 0);
    CU_ASSERT(!memcmp(in_circuit, named, sizeof named));
    free(order);
    hs_patch_result_free(&p);
    hs_circuit_result_free(&r);
    hs_prompt_set_free(&ps);
    hs_model_free(&m);
}

/* heads sorted by |v| largest first (ties by index): order[0..n) */
static void rank_by_size(const double *v, int n, int *order)
{
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && fabs(v[order[j]]) > fabs(v[order[j - 1]]); j--) {
            const int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
}

/* Spearman's rank correlation of x and y, written here apart from
 * render/'s: Pearson's of the ranks, ties given their mean rank */
static double spearman(const double *x, const double *y, int n)
{
    double rx[64], ry[64];
    for (int pass = 0; pass < 2; pass++) {
        const double *v = pass ? y : x;
        double *r = pass ? ry : rx;
        for (int i = 0; i < n; i++) {
            int below = 0, equal = 0;
            for (int j = 0; j < n; j++)
                below += v[j] < v[i], equal += v[j] == v[i];
            r[i] = below + (equal + 1) / 2.0;
        }
    }
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++)
        mx += rx[i] / n, my += ry[i] / n;
    for (int i = 0; i < n; i++)
        sxy += (rx[i] - mx) * (ry[i] - my), sxx += (rx[i] - mx) * (rx[i] - mx),
            syy += (ry[i] - my) * (ry[i] - my);
    return sxy / sqrt(sxx * syy);
}

/* AtP against exact patching on the planted model (docs/analyses.md's
 * table beside the indirect-object model's): atp_z and atp_star_z of the
 * 16 heads beside patch_z. Patching names the induction head alone (the
 * previous-token head's z gives the keys the same token on both prompts of
 * a pair, so patching it changes nothing); AtP and AtP* rank it first. The
 * rank correlation over the heads is printed for the table. */
static void test_atp_ranks_the_planted_heads_as_patching(void)
{
    hs_model m;
    build_planted(&m);
    hs_prompt_set ps;
    planted_prompts(&ps);
    hs_atp_opts ao = { .sites = 1 << HS_ATP_Z, .star = 1 };
    hs_patch_opts po = { .sites = 1 << HS_PATCH_Z };
    hs_atp_result a;
    hs_patch_result p;
    CU_ASSERT_EQUAL_FATAL(hs_atp(&a, &m, &ps, &ao), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_patch(&p, &m, &ps, &po), HS_OK);
    enum { NH = 2 * PH };
    double px[NH], ax[NH], sx[NH];
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < PH; h++) {
            const hs_metric_row *rp = hs_head_table_find(&p.heads, l, h, "patch_z"),
                                *ra = hs_head_table_find(&a.heads, l, h, "atp_z"),
                                *rs = hs_head_table_find(&a.heads, l, h, "atp_star_z");
            CU_ASSERT_FATAL(rp && ra && rs);
            px[l * PH + h] = rp->value, ax[l * PH + h] = ra->value, sx[l * PH + h] = rs->value;
        }
    int op[NH], oa[NH], os[NH], named = 0;
    rank_by_size(px, NH, op), rank_by_size(ax, NH, oa), rank_by_size(sx, NH, os);
    for (int i = 0; i < NH; i++)
        named += fabs(px[i]) > 0.1;
    printf("\n    patch_z names %d head(s), first L%dH%d %+.3f; AtP first L%dH%d %+.3f, AtP* "
           "first L%dH%d %.3f; Spearman(atp_z, patch_z) %.3f over %d heads", named, op[0] / PH,
           op[0] % PH, px[op[0]], oa[0] / PH, oa[0] % PH, ax[oa[0]], os[0] / PH, os[0] % PH,
           sx[os[0]], spearman(ax, px, NH), NH);
    printf("\n    the previous-token head L0H0: patch_z %+.3g, atp_z %+.3g, atp_star_z %.3g", px[0],
           ax[0], sx[0]);
    const int induction = 1 * PH + 0;
    CU_ASSERT_EQUAL(named, 1);
    CU_ASSERT_EQUAL(op[0], induction);
    CU_ASSERT_EQUAL(oa[0], induction);
    CU_ASSERT_EQUAL(os[0], induction);
    hs_patch_result_free(&p);
    hs_atp_result_free(&a);
    hs_prompt_set_free(&ps);
    hs_model_free(&m);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_atp_equals_the_autograd_oracle", test_atp_equals_the_autograd_oracle },
        { "test_circuit_equals_the_autograd_oracle", test_circuit_equals_the_autograd_oracle },
        { "test_atp_equals_patch_where_the_path_is_linear",
          test_atp_equals_patch_where_the_path_is_linear },
        { "test_eap_into_the_logits_sums_to_the_final_residual",
          test_eap_into_the_logits_sums_to_the_final_residual },
        { "test_a_batch_of_rows_4_kb_apart_scores_as_its_prompts",
          test_a_batch_of_rows_4_kb_apart_scores_as_its_prompts },
        { "test_all_edges_are_faithful_and_none_are_not",
          test_all_edges_are_faithful_and_none_are_not },
        { "test_site_gradients_equal_finite_differences_on_every_family",
          test_site_gradients_equal_finite_differences_on_every_family },
        { "test_receiver_gradients_equal_the_split_forward_derivatives",
          test_receiver_gradients_equal_the_split_forward_derivatives },
        { "test_eap_ig_recovers_the_planted_circuit", test_eap_ig_recovers_the_planted_circuit },
        { "test_atp_ranks_the_planted_heads_as_patching",
          test_atp_ranks_the_planted_heads_as_patching },
    };
    int rc = hs_run_tests("atp_" HS_REAL_NAME, tests, HS_NTESTS(tests));
    cJSON_Delete(oracle());
    return rc;
}
