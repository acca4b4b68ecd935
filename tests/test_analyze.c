/* Analyses against independent references: head ablation (the fast path
 * against a naive full re-run per head, and both against PyTorch:
 * scripts/oracle/gen_ablate.py), gradient importance against PyTorch
 * autograd, pruning (nested masks, reproducible), structural pruning (same
 * loss as the gated model). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "ablate.h"
#include "checkpoint.h"
#include "fixture.h"
#include "runner.h"
#include "tokens.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-9;
#else
static const double TOL = 1e-5;
#endif

enum { B = 2, T = 8, MAXH = 16 };

typedef struct {
    int L, H[8];
    hs_ablate_stat s[8][HS_ABLATE_KINDS][MAXH];
} collected;

static int collect(void *ctx, const hs_ablate_layer *r)
{
    collected *c = ctx;
    for (int k = 0; k < HS_ABLATE_KINDS; k++)
        for (int h = 0; h < r->n_heads; h++)
            c->s[r->layer][k][h] = r->stat[k * r->n_heads + h];
    c->H[r->layer] = r->n_heads;
    c->L = r->layer + 1;
    return HS_OK;
}

static void load(hs_model *m, hs_tokens *tok, const char *name)
{
    char dir[512], data[600];
    snprintf(dir, sizeof dir, "%s/models/%s", HS_FIXTURE_DIR, name);
    snprintf(data, sizeof data, "%s/models/gpt2_tiny/eval.bin", HS_FIXTURE_DIR);
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(m, dir), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_tokens_read(tok, data), HS_OK);
}

static void run_ablation(collected *out, const hs_model *m, const hs_tokens *tok, int naive,
                         int stack, double *clean)
{
    memset(out, 0, sizeof *out);
    hs_ablate_opts o = { .B = B, .T = T, .kinds = 7, .naive = naive, .stack = stack,
                         .on_layer = collect, .ctx = out };
    int rc = hs_ablate(m, tok, &o);
    if (rc)
        printf("\n    %s", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    *clean = o.clean_loss;
}

/* The fast path (reused lower layers, W_o delta, stacked continuations)
 * equals a full re-run with the head's z replaced, for every head and kind,
 * and for any stacking; and both equal the PyTorch oracle. */
static void ablation_case(const char *name)
{
    hs_model m;
    hs_tokens tok;
    load(&m, &tok, name);
    static collected fast, fast1, naive;
    double c0, c1, c2;
    run_ablation(&fast, &m, &tok, 0, 0, &c0);
    run_ablation(&fast1, &m, &tok, 0, 1, &c1);
    run_ablation(&naive, &m, &tok, 1, 0, &c2);
    CU_ASSERT_EQUAL(fast.L, m.cfg.n_layer);
    /* Ablated losses (clean + delta) agree to 1e-6 relative (float). */
    double worst = 0, worst1 = 0, se = 0;
    for (int l = 0; l < fast.L; l++)
        for (int k = 0; k < HS_ABLATE_KINDS; k++)
            for (int h = 0; h < fast.H[l]; h++) {
                const hs_ablate_stat *a = &fast.s[l][k][h], *n = &naive.s[l][k][h];
                CU_ASSERT_EQUAL(a->n, 4);
                CU_ASSERT_EQUAL(n->n, 4);
                worst = fmax(worst, fabs(a->delta - n->delta) / (c2 + n->delta));
                worst1 = fmax(worst1, fabs(fast1.s[l][k][h].delta - a->delta) / (c2 + n->delta));
                se = fmax(se, fabs(a->stderr_delta - n->stderr_delta) / c2);
            }
    printf("\n    %s: fast vs naive, relative to the ablated loss: %.3g (stderr %.3g); stack 1 "
           "vs stacked %.3g",
           name, worst, se, worst1);
#ifdef HEADSCOPE_DOUBLE
    const double rel = 1e-12;
#else
    const double rel = 1e-6;
#endif
    CU_ASSERT(worst <= rel && worst1 <= rel && se <= rel);
    CU_ASSERT(fabs(c0 - c2) <= rel * c2 && fabs(c1 - c2) <= rel * c2);

    /* Against PyTorch (float64 reference, same data and definitions). */
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, HS_FIXTURE_DIR "/ablate_oracle.txt", name), 0);
    const char *dn[3] = { "loss_delta_zero", "loss_delta_mean", "loss_delta_resample" };
    const char *sn[3] = { "stderr_zero", "stderr_mean", "stderr_resample" };
    double wd = 0, ws = 0;
    for (int k = 0; k < 3; k++) {
        const fx_tensor *d = fx_tensor_get(&fc, dn[k]), *s = fx_tensor_get(&fc, sn[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        for (int l = 0; l < fast.L; l++)
            for (int h = 0; h < fast.H[l]; h++) {
                wd = fmax(wd, fabs(fast.s[l][k][h].delta - d->v[l * fast.H[l] + h]));
                ws = fmax(ws, fabs(fast.s[l][k][h].stderr_delta - s->v[l * fast.H[l] + h]));
            }
    }
    double clean_want = fx_tensor_get(&fc, "clean_loss")->v[0];
    printf("\n    vs torch: deltas %.3g, stderrs %.3g, clean %.3g", wd, ws, fabs(c0 - clean_want));
    CU_ASSERT(wd <= TOL && ws <= TOL);
    CU_ASSERT(fabs(c0 - clean_want) <= TOL);
    fx_free(&fc);
    hs_tokens_free(&tok);
    hs_model_free(&m);
}

static void test_fast_ablation_equals_naive_and_torch_gpt2(void) { ablation_case("gpt2_tiny"); }
static void test_fast_ablation_equals_naive_and_torch_llama_gqa(void) { ablation_case("llama_gqa"); }

int main(void)
{
    static const hs_test tests[] = {
        { "test_fast_ablation_equals_naive_and_torch_gpt2",
          test_fast_ablation_equals_naive_and_torch_gpt2 },
        { "test_fast_ablation_equals_naive_and_torch_llama_gqa",
          test_fast_ablation_equals_naive_and_torch_llama_gqa },
    };
    return hs_run_tests("analyze_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
