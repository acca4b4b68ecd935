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

int main(void)
{
    static const hs_test tests[] = {
        { "test_atp_equals_the_autograd_oracle", test_atp_equals_the_autograd_oracle },
        { "test_circuit_equals_the_autograd_oracle", test_circuit_equals_the_autograd_oracle },
    };
    int rc = hs_run_tests("atp_" HS_REAL_NAME, tests, HS_NTESTS(tests));
    cJSON_Delete(oracle());
    return rc;
}
