/* Analyses against independent references: head ablation (the fast path
 * against a naive full re-run per head, and both against PyTorch:
 * scripts/oracle/gen_ablate.py), gradient importance against PyTorch
 * autograd, pruning (counts, nested masks, lowest importance first,
 * reproducible), structural pruning (same loss as the gated model), the
 * Welford accumulator of every standard error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "ablate.h"
#include "config_file.h"
#include "checkpoint.h"
#include "eval.h"
#include "fixture.h"
#include "planted.h"
#include "importance.h"
#include "runner.h"
#include "scores.h"
#include "stats.h"
#include "patterns.h"
#include "recorder.h"
#include <unistd.h>
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

/* 1 unless t has the row (l, h, metric) with exactly these numbers. */
static int row_differs(const hs_head_table *t, int l, int h, const char *metric, double v,
                       double se, long long n)
{
    const hs_metric_row *r = hs_head_table_find(t, l, h, metric);
    return !r || r->value != v || r->stderr_value != se || r->n != n;
}

typedef struct {
    collected *c;
    hs_head_table *t;
} table_ctx;

static int collect_table(void *ctx, const hs_ablate_layer *r)
{
    table_ctx *tc = ctx;
    collect(tc->c, r);
    return hs_ablate_layer_to_table(tc->t, r);
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
                         int stack, size_t keep_bytes, double *clean)
{
    memset(out, 0, sizeof *out);
    hs_ablate_opts o = { .B = B, .T = T, .kinds = 7, .naive = naive, .stack = stack,
                         .keep_bytes = keep_bytes, .on_layer = collect, .ctx = out };
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
    static collected fast, fast1, naive, recomputed;
    double c0, c1, c2, c3;
    run_ablation(&fast, &m, &tok, 0, 0, 0, &c0);
    run_ablation(&fast1, &m, &tok, 0, 1, 0, &c1);
    run_ablation(&naive, &m, &tok, 1, 0, 0, &c2);
    /* A one-byte budget: no clean activations kept, each layer recomputes
     * its clean prefix; the same values as the kept ones. */
    run_ablation(&recomputed, &m, &tok, 0, 0, 1, &c3);
    CU_ASSERT_EQUAL(fast.L, m.cfg.n_layer);
    /* Ablated losses (clean + delta) agree to 1e-6 relative (float). */
    double worst = 0, worst1 = 0, worstr = 0, se = 0;
    for (int l = 0; l < fast.L; l++)
        for (int k = 0; k < HS_ABLATE_KINDS; k++)
            for (int h = 0; h < fast.H[l]; h++) {
                const hs_ablate_stat *a = &fast.s[l][k][h], *n = &naive.s[l][k][h];
                CU_ASSERT_EQUAL(a->n, 4);
                CU_ASSERT_EQUAL(n->n, 4);
                worst = fmax(worst, fabs(a->delta - n->delta) / (c2 + n->delta));
                worst1 = fmax(worst1, fabs(fast1.s[l][k][h].delta - a->delta) / (c2 + n->delta));
                worstr = fmax(worstr, fabs(recomputed.s[l][k][h].delta - a->delta) /
                                          (c2 + n->delta));
                se = fmax(se, fabs(a->stderr_delta - n->stderr_delta) / c2);
            }
    printf("\n    %s: fast vs naive, relative to the ablated loss: %.3g (stderr %.3g); stack 1 "
           "vs stacked %.3g; recomputed vs kept prefix %.3g",
           name, worst, se, worst1, worstr);
#ifdef HEADSCOPE_DOUBLE
    const double rel = 1e-12;
#else
    const double rel = 1e-6;
#endif
    CU_ASSERT(worst <= rel && worst1 <= rel && worstr <= rel && se <= rel);
    CU_ASSERT(fabs(c0 - c2) <= rel * c2 && fabs(c1 - c2) <= rel * c2 && c3 == c0);

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

/* resample replaces z of sequence i by that of sequence (i+1) mod B: with
 * B = 1 that is the sequence itself and every delta would be a silent 0, so
 * B < 2 is refused before any work, naming both options; zero and mean still
 * run with one sequence per batch. */
static void test_resample_with_one_sequence_per_batch_is_refused(void)
{
    hs_model m;
    hs_tokens tok;
    load(&m, &tok, "gpt2_tiny");
    static collected out;
    memset(&out, 0, sizeof out);
    hs_ablate_opts o = { .B = 1, .T = T, .kinds = 1 << HS_ABLATE_RESAMPLE, .on_layer = collect,
                         .ctx = &out };
    CU_ASSERT_EQUAL(hs_ablate(&m, &tok, &o), HS_EINVAL);
    printf("\n    %s", hs_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--batch"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "resample"));
    CU_ASSERT_EQUAL(out.L, 0); /* no layer reported */
    o.kinds = 7;
    CU_ASSERT_EQUAL(hs_ablate(&m, &tok, &o), HS_EINVAL);
    CU_ASSERT_EQUAL(out.L, 0);
    o.kinds = (1 << HS_ABLATE_ZERO) | (1 << HS_ABLATE_MEAN);
    CU_ASSERT_EQUAL(hs_ablate(&m, &tok, &o), HS_OK);
    CU_ASSERT_EQUAL(out.L, m.cfg.n_layer);
    /* with two sequences per batch resample measures a change; the layers'
     * rows (hs_ablate_layer_to_table) are the reported numbers */
    memset(&out, 0, sizeof out);
    hs_head_table tab = { 0 };
    table_ctx tc = { &out, &tab };
    o.B = 2, o.kinds = (1 << HS_ABLATE_ZERO) | (1 << HS_ABLATE_RESAMPLE);
    o.on_layer = collect_table, o.ctx = &tc;
    CU_ASSERT_EQUAL_FATAL(hs_ablate(&m, &tok, &o), HS_OK);
    double largest = 0;
    int rows = 0, differ = 0;
    for (int l = 0; l < out.L; l++)
        for (int h = 0; h < out.H[l]; h++) {
            const hs_ablate_stat *z = &out.s[l][HS_ABLATE_ZERO][h];
            const hs_ablate_stat *r = &out.s[l][HS_ABLATE_RESAMPLE][h];
            largest = fmax(largest, fabs(r->delta));
            differ += row_differs(&tab, l, h, "loss_delta_zero", z->delta, z->stderr_delta, z->n);
            differ += row_differs(&tab, l, h, "loss_delta_resample", r->delta, r->stderr_delta, r->n);
            rows += 2;
        }
    CU_ASSERT(largest > 1e-4);
    CU_ASSERT_EQUAL(tab.n, rows);
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT_PTR_NULL(hs_head_table_find(&tab, 0, 0, "loss_delta_mean"));
    hs_head_table_free(&tab);
    hs_tokens_free(&tok);
    hs_model_free(&m);
}

/* Importance against PyTorch autograd of the summed sequence loss with
 * respect to per-sequence gates, raw and layer-normalised. */
static void importance_case(const char *name)
{
    hs_model m;
    hs_tokens tok;
    load(&m, &tok, name);
    hs_importance imp;
    CU_ASSERT_EQUAL_FATAL(hs_importance_alloc(&imp, &m.cfg), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_importance_compute(&imp, &m, &tok, B, T, 0, NULL, NULL, NULL, NULL), HS_OK);
    CU_ASSERT_EQUAL(imp.n, 4);
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, HS_FIXTURE_DIR "/ablate_oracle.txt", name), 0);
    const char *names[4] = { "importance_raw", "stderr_importance_raw", "importance",
                             "stderr_importance" };
    const double *mine[4] = { imp.raw, imp.raw_stderr, imp.norm, imp.norm_stderr };
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        const fx_tensor *t = fx_tensor_get(&fc, names[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        for (int l = 0; l < m.cfg.n_layer; l++)
            for (int h = 0; h < m.cfg.n_head[l]; h++) {
                double want = t->v[l * m.cfg.n_head[l] + h];
                double got = mine[k][(size_t)l * HS_MAX_HEADS + h];
                worst = fmax(worst, fabs(got - want) / fmax(1, fabs(want)));
            }
    }
    printf("\n    %s: importance vs torch autograd, worst %.3g", name, worst);
    CU_ASSERT(worst <= TOL);
    /* Each layer's normalised vector has unit length. */
    for (int l = 0; l < m.cfg.n_layer; l++) {
        double n2 = 0;
        for (int h = 0; h < m.cfg.n_head[l]; h++)
            n2 += imp.norm[(size_t)l * HS_MAX_HEADS + h] * imp.norm[(size_t)l * HS_MAX_HEADS + h];
        CU_ASSERT(fabs(n2 - 1) <= 1e-9);
    }
    /* the rows the index gets */
    hs_head_table tab = { 0 };
    CU_ASSERT_EQUAL_FATAL(hs_importance_to_table(&tab, &imp), HS_OK);
    int rows = 0, differ = 0;
    for (int l = 0; l < m.cfg.n_layer; l++)
        for (int h = 0; h < m.cfg.n_head[l]; h++, rows += 2) {
            const size_t i = (size_t)l * HS_MAX_HEADS + h;
            differ += row_differs(&tab, l, h, "importance", imp.norm[i], imp.norm_stderr[i], 4);
            differ += row_differs(&tab, l, h, "importance_raw", imp.raw[i], imp.raw_stderr[i], 4);
        }
    CU_ASSERT_EQUAL(tab.n, rows);
    CU_ASSERT_EQUAL(differ, 0);
    hs_head_table_free(&tab);
    fx_free(&fc);
    hs_importance_free(&imp);
    hs_tokens_free(&tok);
    hs_model_free(&m);
}

static void test_importance_matches_torch_autograd_gpt2(void) { importance_case("gpt2_tiny"); }
static void test_importance_matches_torch_autograd_llama_gqa(void) { importance_case("llama_gqa"); }

typedef struct {
    int steps, pruned[64];
    double loss[64];
    size_t mask_size;    /* n_layer * HS_MAX_HEADS */
    unsigned char *mask; /* (64, mask_size): the mask after each step, or NULL */
    int mask_steps;
} curve;

static int record_step(void *ctx, int step, int pruned, double fraction, double loss, double se)
{
    curve *c = ctx;
    (void)fraction, (void)se;
    if (step < 64) {
        c->pruned[step] = pruned;
        c->loss[step] = loss;
        c->steps = step + 1;
    }
    return HS_OK;
}

static int record_mask(void *ctx, int step, const unsigned char *pruned)
{
    curve *c = ctx;
    if (c->mask && step < 64) {
        memcpy(c->mask + (size_t)step * c->mask_size, pruned, c->mask_size);
        c->mask_steps = step + 1;
    }
    return HS_OK;
}

/* A pruning run (o, recorded in cv with masks; final mask and count as
 * hs_prune returned them) checked against SPEC §5 step by step:
 * - counts: step k has min(floor(k p N / 100), the max_percent cap, what
 *   protection allows) heads pruned, so they never decrease, and the run
 *   ends at the first step that reaches the most it may prune;
 * - nested: every step's mask contains the previous step's;
 * - lowest importance first: importance recomputed here on the model gated
 *   by the previous step's mask (the unpruned model for one_shot); each
 *   head a step prunes has importance no higher than any head left in,
 *   unless that head's layer is down to min_heads_per_layer.
 * The first violations of the last rule are printed. */
static void check_pruning_steps(const hs_model *m, const hs_tokens *tok, const hs_prune_opts *o,
                               const curve *cv, const unsigned char *final, int n_final)
{
    const hs_model_config *c = &m->cfg;
    const size_t ms = cv->mask_size;
    int N = 0, prunable = 0;
    for (int l = 0; l < c->n_layer; l++) {
        N += c->n_head[l];
        prunable += c->n_head[l] > o->min_heads_per_layer ? c->n_head[l] - o->min_heads_per_layer : 0;
    }
    const double max_percent = o->max_percent > 0 ? o->max_percent : 100;
    const int cap = (int)floor(max_percent * N / 100 + 1e-9);
    const int most = cap < prunable ? cap : prunable;
    CU_ASSERT_EQUAL_FATAL(cv->mask_steps, cv->steps);
    int last_step = 0;
    while (last_step < 63 &&
           (int)fmin(fmin(floor(last_step * o->step_percent * N / 100 + 1e-9), cap), prunable) < most)
        last_step++;
    CU_ASSERT_EQUAL(cv->steps, last_step + 1);

    hs_importance imp;
    CU_ASSERT_EQUAL_FATAL(hs_importance_alloc(&imp, c), HS_OK);
    hs_real *gates[HS_MAX_LAYERS] = { 0 };
    for (int l = 0; l < c->n_layer; l++)
        gates[l] = calloc((size_t)c->n_head[l], sizeof(hs_real));
    int wrong_count = 0, not_nested = 0, out_of_order = 0;
    for (int k = 0; k < cv->steps; k++) {
        const unsigned char *now = cv->mask + k * ms, *prev = k ? now - ms : NULL;
        int count = 0, left[HS_MAX_LAYERS];
        for (int l = 0; l < c->n_layer; l++) {
            left[l] = c->n_head[l];
            for (int h = 0; h < c->n_head[l]; h++)
                count += now[(size_t)l * HS_MAX_HEADS + h], left[l] -= now[(size_t)l * HS_MAX_HEADS + h];
        }
        const int want = (int)fmin(fmin(floor(k * o->step_percent * N / 100 + 1e-9), cap), prunable);
        wrong_count += count != want || count != cv->pruned[k];
        if (!prev)
            continue;
        for (size_t i = 0; i < ms; i++)
            not_nested += prev[i] && !now[i];
        if (count == cv->pruned[k - 1])
            continue; /* nothing pruned at this step */
        /* the importance this step chose by, computed independently */
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++)
                gates[l][h] = o->one_shot ? 1 : !prev[(size_t)l * HS_MAX_HEADS + h];
        CU_ASSERT_EQUAL_FATAL(hs_importance_compute(&imp, m, tok, o->B, o->T, o->max_batches,
                                                    (const hs_real *const *)gates, NULL, NULL, NULL),
                              HS_OK);
        for (int lp = 0; lp < c->n_layer; lp++)
            for (int hp = 0; hp < c->n_head[lp]; hp++) {
                const size_t p = (size_t)lp * HS_MAX_HEADS + hp;
                if (prev[p] || !now[p])
                    continue; /* not pruned at this step */
                for (int lu = 0; lu < c->n_layer; lu++)
                    for (int hu = 0; hu < c->n_head[lu]; hu++) {
                        const size_t u = (size_t)lu * HS_MAX_HEADS + hu;
                        if (!now[u] && left[lu] > o->min_heads_per_layer &&
                            imp.norm[p] > imp.norm[u] + 1e-12 && out_of_order++ < 3)
                            printf("\n    step %d pruned L%dH%d (importance %.6f) before L%dH%d (%.6f)",
                                   k, lp, hp, imp.norm[p], lu, hu, imp.norm[u]);
                    }
            }
    }
    CU_ASSERT_EQUAL(wrong_count, 0);
    CU_ASSERT_EQUAL(not_nested, 0);
    CU_ASSERT_EQUAL(out_of_order, 0);
    CU_ASSERT(!memcmp(final, cv->mask + (size_t)(cv->steps - 1) * ms, ms));
    CU_ASSERT_EQUAL(n_final, cv->pruned[cv->steps - 1]);
    for (int l = 0; l < c->n_layer; l++)
        free(gates[l]);
    hs_importance_free(&imp);
}

/* One pruning run with its per-step masks, checked by check_pruning_steps. */
static void prune_case(const char *name, hs_prune_opts o, const int *want, int n_want)
{
    hs_model m;
    hs_tokens tok;
    load(&m, &tok, name);
    curve cv = { .mask_size = (size_t)m.cfg.n_layer * HS_MAX_HEADS };
    cv.mask = calloc(64, cv.mask_size);
    unsigned char *final = calloc(1, cv.mask_size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cv.mask);
    CU_ASSERT_PTR_NOT_NULL_FATAL(final);
    o.B = B, o.T = T, o.on_step = record_step, o.on_mask = record_mask, o.ctx = &cv;
    int n = 0;
    CU_ASSERT_EQUAL_FATAL(hs_prune(&m, &tok, &o, final, &n), HS_OK);
    printf("\n    %s, %g%% steps%s, min %d per layer: pruned", name, o.step_percent,
           o.one_shot ? " (one-shot)" : "", o.min_heads_per_layer);
    for (int k = 0; k < cv.steps; k++)
        printf(" %d", cv.pruned[k]);
    /* the counts spelled out, beside the rule check_pruning_steps derives */
    CU_ASSERT_EQUAL(cv.steps, n_want);
    for (int k = 0; k < cv.steps && k < n_want; k++)
        CU_ASSERT_EQUAL(cv.pruned[k], want[k]);
    check_pruning_steps(&m, &tok, &o, &cv, final, n);
    free(cv.mask);
    free(final);
    hs_tokens_free(&tok);
    hs_model_free(&m);
}

/* Iterative pruning: heads pruned grow step by step to the target counts,
 * masks are nested, each step prunes the least important heads left,
 * protection holds, and a second run is identical. */
static void test_pruning_curve_is_monotone_nested_and_reproducible(void)
{
    hs_model m;
    hs_tokens tok;
    load(&m, &tok, "llama_gqa");
    unsigned char a[8 * HS_MAX_HEADS] = { 0 }, b[8 * HS_MAX_HEADS] = { 0 };
    curve ca = { 0 }, cb = { 0 };
    hs_prune_opts o = { .B = B, .T = T, .step_percent = 25, .min_heads_per_layer = 1,
                        .on_step = record_step, .ctx = &ca };
    int na = 0, nb = 0;
    CU_ASSERT_EQUAL_FATAL(hs_prune(&m, &tok, &o, a, &na), HS_OK);
    o.ctx = &cb;
    CU_ASSERT_EQUAL_FATAL(hs_prune(&m, &tok, &o, b, &nb), HS_OK);
    /* 8 heads, 25% steps: 0, 2, 4, 6; a fourth step would leave a layer empty. */
    CU_ASSERT_EQUAL(ca.steps, 4);
    for (int s = 0; s < ca.steps; s++) {
        CU_ASSERT_EQUAL(ca.pruned[s], 2 * s);
        CU_ASSERT_EQUAL(cb.pruned[s], ca.pruned[s]);
        CU_ASSERT_EQUAL(cb.loss[s], ca.loss[s]);
    }
    CU_ASSERT_EQUAL(na, 6);
    CU_ASSERT(!memcmp(a, b, sizeof a));
    for (int l = 0; l < 2; l++) {
        int left = 0;
        for (int h = 0; h < 4; h++)
            left += !a[l * HS_MAX_HEADS + h];
        CU_ASSERT(left >= 1);
    }
    hs_tokens_free(&tok);
    hs_model_free(&m);
    /* the same run step by step: nested, lowest importance first */
    const int want[] = { 0, 2, 4, 6 };
    prune_case("llama_gqa", (hs_prune_opts){ .step_percent = 25, .min_heads_per_layer = 1 }, want, 4);
}

/* Steps of less than one head (10% of 8 heads, the command's default):
 * floor(0.8 k) = 0, 0, 1, 2, 3, 4, 4, 5, 6, 7, 8. A step whose count does not
 * grow prunes nothing and the curve goes on to every head. */
static void test_pruning_steps_below_one_head_follow_the_floor_counts(void)
{
    const int want[] = { 0, 0, 1, 2, 3, 4, 4, 5, 6, 7, 8 };
    prune_case("llama_gqa", (hs_prune_opts){ .step_percent = 10 }, want, 11);
}

/* --one-shot: importance of the unpruned model orders every step; with
 * 30% steps floor(2.4 k) = 0, 2, 4, 7 and protection (1 head per layer)
 * stops at 6. */
static void test_one_shot_pruning_takes_the_unpruned_order(void)
{
    const int want[] = { 0, 2, 4, 6 };
    prune_case("gpt2_tiny",
               (hs_prune_opts){ .step_percent = 30, .min_heads_per_layer = 1, .one_shot = 1 }, want,
               4);
}

/* The structurally pruned checkpoint computes the gated model's loss. */
static void structural_case(const char *name, const int *prune_list, int n)
{
    hs_model m, s;
    hs_tokens tok;
    load(&m, &tok, name);
    unsigned char pruned[8 * HS_MAX_HEADS] = { 0 };
    hs_real g0[16], g1[16];
    const hs_real *gates[2] = { g0, g1 };
    for (int h = 0; h < 16; h++)
        g0[h] = g1[h] = 1;
    for (int i = 0; i < n; i++) {
        int l = prune_list[2 * i], h = prune_list[2 * i + 1];
        pruned[l * HS_MAX_HEADS + h] = 1;
        (l ? g1 : g0)[h] = 0;
    }
    CU_ASSERT_EQUAL_FATAL(hs_prune_structural(&s, &m, pruned), HS_OK);
    hs_hooks hooks = { .gates = gates };
    hs_eval_result gated, small;
    CU_ASSERT_EQUAL_FATAL(hs_evaluate(&gated, &m, &tok, B, T, 0, &hooks, NULL, NULL), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_evaluate(&small, &s, &tok, B, T, 0, NULL, NULL, NULL), HS_OK);
    printf("\n    %s: gated %.9f structural %.9f, heads %d/%d (kv %d/%d) -> %zu of %zu params", name,
           gated.loss, small.loss, s.cfg.n_head[0], s.cfg.n_head[1], s.cfg.n_kv_head[0],
           s.cfg.n_kv_head[1], s.n_params, m.n_params);
    CU_ASSERT(fabs(gated.loss - small.loss) <= 1e-5 * gated.loss);
    CU_ASSERT(s.n_params < m.n_params);
    hs_model_free(&s);
    hs_tokens_free(&tok);
    hs_model_free(&m);
}

static void test_structural_pruning_keeps_the_gated_loss_gpt2(void)
{
    const int list[] = { 0, 1, 1, 0, 1, 3 };
    structural_case("gpt2_tiny", list, 3);
}

static void test_structural_pruning_keeps_the_gated_loss_gqa_uneven_groups(void)
{
    /* llama_gqa: 4 heads in 2 KV groups; layer 0 loses one head of group 0
     * (group sizes 1 and 2: one dead head pads), layer 1 loses group 1. */
    const int list[] = { 0, 0, 1, 2, 1, 3 };
    structural_case("llama_gqa", list, 3);
}

/* Induction, duplicate-token and previous-token scores (with stderr) and the
 * OV copying score against scripts/oracle/gen_scores.py (PyTorch maps,
 * numpy eigenvalues) on the same repeated sequences. */
static void scores_case(const char *name)
{
    hs_model m;
    hs_tokens tok;
    load(&m, &tok, name);
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, HS_FIXTURE_DIR "/scores_oracle.txt", name), 0);
    const int N = (int)fx_int(&fc, "N"), T = (int)fx_int(&fc, "T"), H = (int)fx_int(&fc, "H");
    const fx_tensor *tt = fx_tensor_get(&fc, "tokens");
    int32_t *seq = malloc(sizeof(int32_t) * tt->n);
    for (size_t i = 0; i < tt->n; i++)
        seq[i] = (int32_t)tt->v[i];
    hs_scores sc;
    CU_ASSERT_EQUAL_FATAL(hs_scores_alloc(&sc, &m.cfg), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_pattern_scores(&sc, &m, seq, N, T, 2, NULL, NULL), HS_OK);
    double *cop = calloc((size_t)m.cfg.n_layer * HS_MAX_HEADS, sizeof(double));
    CU_ASSERT_EQUAL_FATAL(hs_copying_scores(cop, &m), HS_OK);
    const char *names[HS_SCORE_KINDS] = { "induction", "duplicate_token", "prev_token" };
    double worst = 0, worst_cop = 0;
    for (int k = 0; k < HS_SCORE_KINDS; k++) {
        char se[64];
        snprintf(se, sizeof se, "stderr_%s", names[k]);
        const fx_tensor *v = fx_tensor_get(&fc, names[k]), *e = fx_tensor_get(&fc, se);
        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        for (int l = 0; l < m.cfg.n_layer; l++)
            for (int h = 0; h < H; h++) {
                size_t i = (size_t)l * HS_MAX_HEADS + h;
                worst = fmax(worst, fabs(sc.value[k][i] - v->v[l * H + h]));
                worst = fmax(worst, fabs(sc.stderr_value[k][i] - e->v[l * H + h]));
            }
    }
    const fx_tensor *c = fx_tensor_get(&fc, "copying");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    for (int l = 0; l < m.cfg.n_layer; l++)
        for (int h = 0; h < H; h++)
            worst_cop = fmax(worst_cop, fabs(cop[(size_t)l * HS_MAX_HEADS + h] - c->v[l * H + h]));
    printf("\n    %s: scores vs torch %.3g, copying vs numpy eigenvalues %.3g", name, worst, worst_cop);
    CU_ASSERT(worst <= TOL);
    CU_ASSERT(worst_cop <= TOL);
    CU_ASSERT_EQUAL(sc.n, N);
    /* the rows the index gets, here as a control's */
    hs_head_table tab = { 0 };
    CU_ASSERT_EQUAL_FATAL(hs_scores_to_table(&tab, &sc, cop, "_control"), HS_OK);
    int rows = 0, differ = 0;
    for (int l = 0; l < m.cfg.n_layer; l++)
        for (int h = 0; h < H; h++) {
            const size_t i = (size_t)l * HS_MAX_HEADS + h;
            char metric[64];
            for (int k = 0; k < HS_SCORE_KINDS; k++, rows++) {
                snprintf(metric, sizeof metric, "%s_control", names[k]);
                differ += row_differs(&tab, l, h, metric, sc.value[k][i], sc.stderr_value[k][i], N);
            }
            differ += row_differs(&tab, l, h, "copying_control", cop[i], 0, 1);
            rows++;
        }
    CU_ASSERT_EQUAL(tab.n, rows);
    CU_ASSERT_EQUAL(differ, 0);
    hs_head_table_free(&tab);
    CU_ASSERT_EQUAL_FATAL(hs_scores_to_table(&tab, &sc, NULL, ""), HS_OK);
    CU_ASSERT_EQUAL(tab.n, rows / 4 * 3);
    CU_ASSERT_PTR_NOT_NULL(hs_head_table_find(&tab, 1, 0, "induction"));
    CU_ASSERT_PTR_NULL(hs_head_table_find(&tab, 1, 0, "copying"));
    hs_head_table_free(&tab);
    free(cop), free(seq);
    hs_scores_free(&sc);
    fx_free(&fc);
    hs_tokens_free(&tok);
    hs_model_free(&m);
}

static void test_scores_match_torch_and_numpy_gpt2(void) { scores_case("gpt2_tiny"); }
static void test_scores_match_torch_and_numpy_llama_gqa(void) { scores_case("llama_gqa"); }

/* r ++ r with r of distinct tokens (no accidental repeats within r). */
static void planted_sequences(int32_t *seq, int N, int T)
{
    for (int n = 0; n < N; n++)
        for (int t = 0; t < T; t++)
            seq[n * 2 * T + t] = seq[n * 2 * T + T + t] = (n * 7 + t * 5) % PV;
}

static void test_planted_heads_are_found_and_named_by_the_causal_check(void)
{
    hs_model m;
    build_planted(&m);
    enum { N = 8, T = 8 };
    int32_t seq[N * 2 * T];
    planted_sequences(seq, N, T);
    hs_scores sc;
    CU_ASSERT_EQUAL_FATAL(hs_scores_alloc(&sc, &m.cfg), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_pattern_scores(&sc, &m, seq, N, T, 4, NULL, NULL), HS_OK);
    const double prev00 = sc.value[HS_SCORE_PREV][0], ind10 = sc.value[HS_SCORE_INDUCTION][HS_MAX_HEADS];
    printf("\n    prev_token L0H0 %.3f (L0H1 %.3f); induction L1H0 %.3f (L1H1 %.3f, L0H0 %.3f)", prev00,
           sc.value[HS_SCORE_PREV][1], ind10, sc.value[HS_SCORE_INDUCTION][HS_MAX_HEADS + 1],
           sc.value[HS_SCORE_INDUCTION][0]);
    CU_ASSERT(prev00 > 0.95);
    CU_ASSERT(ind10 > 0.9);
    CU_ASSERT(sc.value[HS_SCORE_PREV][1] < 0.5 && sc.value[HS_SCORE_INDUCTION][HS_MAX_HEADS + 1] < 0.5);
    CU_ASSERT(sc.value[HS_SCORE_INDUCTION][0] < 0.5);

    hs_causal_check cc;
    CU_ASSERT_EQUAL_FATAL(hs_induction_causal_check(&cc, &m, seq, N, T, 4, &sc, 1, 20, 5, NULL, NULL, NULL), HS_OK);
    printf("\n    causal: top head L%dH%d, loss +%.3f vs random +%.3f +- %.3f -> %s", cc.layer[0],
           cc.head[0], cc.targeted, cc.random_mean, cc.random_std, cc.beats ? "beats" : "does not");
    CU_ASSERT_EQUAL(cc.layer[0], 1);
    CU_ASSERT_EQUAL(cc.head[0], 0);
    CU_ASSERT(cc.beats);
    /* the claim also needs the score above a random-init control's */
    hs_model ctrl;
    hs_scores scc;
    build_planted(&ctrl);
    hs_model_init_random(&ctrl, 11);
    CU_ASSERT_EQUAL_FATAL(hs_scores_alloc(&scc, &ctrl.cfg), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_pattern_scores(&scc, &ctrl, seq, N, T, 8, NULL, NULL), HS_OK);
    CU_ASSERT_EQUAL(hs_induction_established(&cc, &sc, &scc, 0.4), 1);
    CU_ASSERT_EQUAL(hs_induction_established(&cc, &sc, &scc, 0.99), 0); /* ind10 is 0.93 */
    /* and the same check of the control against itself cannot establish it */
    hs_causal_check cc_ctrl;
    CU_ASSERT_EQUAL_FATAL(hs_induction_causal_check(&cc_ctrl, &ctrl, seq, N, T, 4, &scc, 1, 20, 5, NULL, NULL, NULL),
                          HS_OK);
    CU_ASSERT_EQUAL(hs_induction_established(&cc_ctrl, &scc, &scc, 0), 0);
    hs_scores_free(&scc);
    hs_model_free(&ctrl);
    hs_scores_free(&sc);
    hs_model_free(&m);
}

/* A randomly initialised model scores near chance: uniform attention puts
 * 1/(t+1) on each key of query t. */
static void test_random_init_model_scores_near_chance(void)
{
    hs_model m;
    build_planted(&m);
    hs_model_init_random(&m, 9);
    enum { N = 16, T = 8 };
    int32_t seq[N * 2 * T];
    hs_repeated_sequences(seq, N, T, NULL, PV, 3);
    hs_scores sc;
    CU_ASSERT_EQUAL_FATAL(hs_scores_alloc(&sc, &m.cfg), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_pattern_scores(&sc, &m, seq, N, T, 8, NULL, NULL), HS_OK);
    double chance_ind = 0, chance_prev = 0;
    for (int i = 0; i < T - 1; i++)
        chance_ind += 1.0 / (T + i + 1) / (T - 1);
    for (int t = 1; t < 2 * T; t++)
        chance_prev += 1.0 / (t + 1) / (2 * T - 1);
    double worst = 0;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < PH; h++) {
            size_t i = (size_t)l * HS_MAX_HEADS + h;
            worst = fmax(worst, fabs(sc.value[HS_SCORE_INDUCTION][i] - chance_ind));
            worst = fmax(worst, fabs(sc.value[HS_SCORE_PREV][i] - chance_prev));
        }
    printf("\n    chance induction %.4f, prev %.4f; worst deviation %.4f", chance_ind, chance_prev, worst);
    CU_ASSERT(worst < 0.01);
    hs_scores_free(&sc);
    hs_model_free(&m);
}

static int feed_batch(void *ctx, size_t i, int32_t *inputs)
{
    const hs_tokens *tok = ctx;
    int32_t tg[B * T];
    hs_batch_at(tok, i * B * T, B, T, inputs, tg);
    return HS_OK;
}

/* Pattern statistics three ways: one block of rows at a time during the
 * forward, from the full maps of a forward that keeps them (plain loops
 * here), and from a capture file. */
static void test_row_wise_patterns_equal_full_maps_and_capture_file(void)
{
    hs_model m;
    hs_tokens tok;
    load(&m, &tok, "llama_gqa");
    const int32_t delim[2] = { 3, 7 };
    hs_patterns rw, ff;
    CU_ASSERT_EQUAL_FATAL(hs_patterns_run(&rw, &m, &tok, B, T, 0, delim, 2, NULL, NULL), HS_OK);
    CU_ASSERT_EQUAL(rw.n, 4);

    /* full maps, statistics written out directly from the definitions */
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_TRAIN), HS_OK);
    int32_t in[B * T], tg[B * T];
    double sum[2][4][HS_PAT_KINDS] = { { { 0 } } }, sumsq[2][4][HS_PAT_KINDS] = { { { 0 } } };
    double js_l0h0_l1h2 = 0; /* mean over queries of sqrt(JSD) between two heads */
    for (int bi = 0; bi < 2; bi++) {
        hs_batch_at(&tok, (size_t)bi * B * T, B, T, in, tg);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, in, tg, NULL), HS_OK);
        for (int l = 0; l < 2; l++)
            for (int b = 0; b < B; b++)
                for (int h = 0; h < 4; h++) {
                    double v[HS_PAT_KINDS] = { 0 };
                    for (int t = 0; t < T; t++) {
                        const hs_real *row = a.layer[l].attn.att + (((size_t)b * 4 + h) * T + t) * T;
                        for (int s2 = 0; s2 <= t; s2++) {
                            double p = row[s2];
                            v[HS_PAT_ENTROPY] -= p > 0 ? p * log(p) : 0;
                            v[HS_PAT_DISTANCE] += p * (t - s2);
                            if (in[b * T + s2] == 3 || in[b * T + s2] == 7)
                                v[HS_PAT_DELIM] += p;
                        }
                        v[HS_PAT_SELF] += row[t];
                        v[HS_PAT_PREV] += t ? row[t - 1] : 0;
                        v[HS_PAT_FIRST] += row[0];
                    }
                    for (int k = 0; k < HS_PAT_KINDS; k++) {
                        sum[l][h][k] += v[k] / T;
                        sumsq[l][h][k] += (v[k] / T) * (v[k] / T);
                    }
                }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const hs_real *p = a.layer[0].attn.att + (((size_t)b * 4 + 0) * T + t) * T;
                const hs_real *q = a.layer[1].attn.att + (((size_t)b * 4 + 2) * T + t) * T;
                double jsd = 0;
                for (int s2 = 0; s2 < T; s2++) {
                    double mid = 0.5 * (p[s2] + q[s2]);
                    jsd += p[s2] > 0 ? 0.5 * p[s2] * log(p[s2] / mid) : 0;
                    jsd += q[s2] > 0 ? 0.5 * q[s2] * log(q[s2] / mid) : 0;
                }
                js_l0h0_l1h2 += sqrt(fmax(0, jsd)) / (4 * T);
            }
    }
    double worst = 0;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++)
            for (int k = 0; k < HS_PAT_KINDS; k++) {
                double mean = sum[l][h][k] / 4;
                double se = sqrt(fmax(0, (sumsq[l][h][k] - 4 * mean * mean) / 3) / 4);
                worst = fmax(worst, fabs(rw.value[k][(size_t)l * HS_MAX_HEADS + h] - mean));
                worst = fmax(worst, fabs(rw.stderr_value[k][(size_t)l * HS_MAX_HEADS + h] - se));
            }
    printf("\n    row-wise vs full maps: %.3g", worst);
    CU_ASSERT(worst <= TOL);
    CU_ASSERT(rw.value[HS_PAT_NEXT][0] == 0); /* causal: no mass on t + 1 */

    /* the same from a capture file (float32 storage) */
    char path[] = "/tmp/hs_patterns_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    hs_maps_meta meta = { "", "{}", "", "", T, 0, 0 };
    hs_maps_writer *w;
    CU_ASSERT_EQUAL_FATAL(hs_maps_create(&w, path, &meta, 1), HS_OK);
    const int heads[4] = { 0, 1, 2, 3 };
    for (int l = 0; l < 2; l++)
        CU_ASSERT_EQUAL_FATAL(hs_maps_add_layer(w, l, 4, heads, 0, T), HS_OK);
    hs_map_sink sink = hs_maps_sink(w);
    hs_record_opts ro = { .B = B, .T = T, .n_batches = 2 };
    CU_ASSERT_EQUAL_FATAL(hs_record(&m, feed_batch, &tok, &sink, &ro), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_maps_finish(w), HS_OK);
    hs_maps_reader *r;
    CU_ASSERT_EQUAL_FATAL(hs_maps_open(&r, path), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_patterns_from_maps(&ff, r, delim, 2, 0), HS_OK);
    double wf = 0;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++)
            for (int k = 0; k < HS_PAT_KINDS; k++)
                wf = fmax(wf, fabs(ff.value[k][(size_t)l * HS_MAX_HEADS + h] -
                                   rw.value[k][(size_t)l * HS_MAX_HEADS + h]));
    printf("; capture file vs row-wise: %.3g", wf);
    CU_ASSERT(wf <= 1e-5); /* float32 storage */
    CU_ASSERT_EQUAL(ff.n, 4);
    /* the rows the index gets: model layer and head ids, every statistic */
    hs_head_table tab = { 0 };
    CU_ASSERT_EQUAL_FATAL(hs_patterns_to_table(&tab, &ff, ""), HS_OK);
    int differ = 0;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++)
            for (int k = 0; k < HS_PAT_KINDS; k++) {
                const size_t i = (size_t)l * HS_MAX_HEADS + h;
                differ += row_differs(&tab, l, h, hs_pattern_name(k), ff.value[k][i],
                                      ff.stderr_value[k][i], 4);
            }
    CU_ASSERT_EQUAL(tab.n, 2 * 4 * HS_PAT_KINDS);
    CU_ASSERT_EQUAL(differ, 0);
    hs_head_table_free(&tab);
    /* Jensen-Shannon distances: symmetric, zero on the diagonal, bounded by
     * sqrt(ln 2), and layer 0 head 0 against layer 1 head 2 as computed above. */
    double *D = NULL;
    int nh = 0;
    CU_ASSERT_EQUAL_FATAL(hs_js_distances(&D, &nh, r), HS_OK);
    CU_ASSERT_EQUAL(nh, 8);
    double asym = 0, diag = 0, top = 0;
    for (int i = 0; i < nh; i++)
        for (int j = 0; j < nh; j++) {
            asym = fmax(asym, fabs(D[i * nh + j] - D[j * nh + i]));
            top = fmax(top, D[i * nh + j]);
            if (i == j)
                diag = fmax(diag, fabs(D[i * nh + j]));
        }
    printf("; JS L0H0-L1H2 %.6f (direct %.6f)", D[0 * nh + 6], js_l0h0_l1h2);
    CU_ASSERT(asym == 0 && diag == 0 && top <= sqrt(log(2.0)) + 1e-12);
    CU_ASSERT(fabs(D[0 * nh + 6] - js_l0h0_l1h2) <= 1e-5);
    free(D);
    hs_maps_close(r);
    unlink(path);
    hs_patterns_free(&ff);
    hs_patterns_free(&rw);
    hs_acts_free(&a);
    hs_tokens_free(&tok);
    hs_model_free(&m);
}

/* SPEC §5's standard error through hs_welford: equal to a two-pass
 * computation where a sum of squares cancels (values 1e9 apart from a spread
 * of 1e-3), shards merged in order equal one accumulator, and the per-head
 * table keeps its own copies of metric names. */
static void test_welford_matches_two_pass_where_sums_of_squares_cancel(void)
{
    enum { N = 1000 };
    double x[N], mean = 0, m2 = 0;
    for (int i = 0; i < N; i++) {
        x[i] = 1e9 + 1e-3 * ((i * 37) % 11);
        mean += x[i];
    }
    mean /= N;
    for (int i = 0; i < N; i++)
        m2 += (x[i] - mean) * (x[i] - mean);
    const double sd = sqrt(m2 / (N - 1)), se = sd / sqrt((double)N);
    hs_welford all = { 0 }, part[3] = { { 0 } }, merged = { 0 };
    double sum = 0, sumsq = 0;
    for (int i = 0; i < N; i++) {
        hs_welford_add(&all, x[i]);
        hs_welford_add(&part[i < 10 ? 0 : i < 700 ? 1 : 2], x[i]);
        sum += x[i], sumsq += x[i] * x[i];
    }
    for (int k = 0; k < 3; k++)
        hs_welford_merge(&merged, &part[k]);
    const double one_pass = sqrt(fmax(0, (sumsq - N * (sum / N) * (sum / N)) / (N - 1)));
    printf("\n    sd %.6g: Welford %.6g, merged %.6g, sum of squares %.6g", sd, hs_welford_sd(&all),
           hs_welford_sd(&merged), one_pass);
    CU_ASSERT_EQUAL(all.n, N);
    CU_ASSERT_EQUAL(merged.n, N);
    CU_ASSERT(fabs(all.mean - mean) <= 1e-13 * mean);
    CU_ASSERT(fabs(hs_welford_sd(&all) - sd) <= 1e-6 * sd);
    CU_ASSERT(fabs(hs_welford_stderr(&all) - se) <= 1e-6 * se);
    CU_ASSERT(fabs(merged.mean - mean) <= 1e-13 * mean);
    CU_ASSERT(fabs(hs_welford_sd(&merged) - sd) <= 1e-6 * sd);
    /* one value: no spread; merging an empty accumulator changes nothing */
    hs_welford one = { 0 }, empty = { 0 };
    hs_welford_add(&one, 3);
    hs_welford_merge(&one, &empty);
    CU_ASSERT(one.n == 1 && one.mean == 3 && hs_welford_stderr(&one) == 0);

    /* per-head accumulators and their rows */
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "attn-only"), HS_OK);
    c.n_layer = 2, c.n_head[0] = 3, c.n_head[1] = 2;
    hs_head_stats hst;
    CU_ASSERT_EQUAL_FATAL(hs_head_stats_init(&hst, &c), HS_OK);
    for (int i = 0; i < 4; i++)
        hs_welford_add(hs_head_stat(&hst, 1, 1), i);
    hs_head_table tab = { 0 };
    char name[32];
    snprintf(name, sizeof name, "metric_%d", 7);
    CU_ASSERT_EQUAL(hs_head_table_add_heads(&tab, &hst, name), HS_OK);
    strcpy(name, "overwritten");
    CU_ASSERT_EQUAL(tab.n, 5);
    const hs_metric_row *r = hs_head_table_find(&tab, 1, 1, "metric_7");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT(r->value == 1.5 && r->n == 4 && fabs(r->stderr_value - sqrt(5.0 / 3 / 4)) < 1e-15);
    CU_ASSERT_PTR_NULL(hs_head_table_find(&tab, 1, 2, "metric_7"));
    hs_head_table_free(&tab);
    hs_head_stats_free(&hst);
    c.n_head[1] = HS_MAX_HEADS + 1;
    CU_ASSERT_EQUAL(hs_head_stats_init(&hst, &c), HS_EINVAL);
    hs_head_stats_free(&hst);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_fast_ablation_equals_naive_and_torch_gpt2",
          test_fast_ablation_equals_naive_and_torch_gpt2 },
        { "test_fast_ablation_equals_naive_and_torch_llama_gqa",
          test_fast_ablation_equals_naive_and_torch_llama_gqa },
        { "test_resample_with_one_sequence_per_batch_is_refused",
          test_resample_with_one_sequence_per_batch_is_refused },
        { "test_importance_matches_torch_autograd_gpt2", test_importance_matches_torch_autograd_gpt2 },
        { "test_importance_matches_torch_autograd_llama_gqa",
          test_importance_matches_torch_autograd_llama_gqa },
        { "test_pruning_curve_is_monotone_nested_and_reproducible",
          test_pruning_curve_is_monotone_nested_and_reproducible },
        { "test_pruning_steps_below_one_head_follow_the_floor_counts",
          test_pruning_steps_below_one_head_follow_the_floor_counts },
        { "test_one_shot_pruning_takes_the_unpruned_order", test_one_shot_pruning_takes_the_unpruned_order },
        { "test_structural_pruning_keeps_the_gated_loss_gpt2",
          test_structural_pruning_keeps_the_gated_loss_gpt2 },
        { "test_structural_pruning_keeps_the_gated_loss_gqa_uneven_groups",
          test_structural_pruning_keeps_the_gated_loss_gqa_uneven_groups },
        { "test_scores_match_torch_and_numpy_gpt2", test_scores_match_torch_and_numpy_gpt2 },
        { "test_scores_match_torch_and_numpy_llama_gqa", test_scores_match_torch_and_numpy_llama_gqa },
        { "test_planted_heads_are_found_and_named_by_the_causal_check",
          test_planted_heads_are_found_and_named_by_the_causal_check },
        { "test_random_init_model_scores_near_chance", test_random_init_model_scores_near_chance },
        { "test_row_wise_patterns_equal_full_maps_and_capture_file",
          test_row_wise_patterns_equal_full_maps_and_capture_file },
        { "test_welford_matches_two_pass_where_sums_of_squares_cancel",
          test_welford_matches_two_pass_where_sums_of_squares_cancel },
    };
    return hs_run_tests("analyze_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
