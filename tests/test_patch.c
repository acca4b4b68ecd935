/* Activation patching (analyze/patch.h) on a planted circuit, and the
 * stacked interventions it runs on (capture/stack.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "patch.h"
#include "planted.h"
#include "runner.h"
#include "checkpoint.h"
#include "stack.h"
#include "transformer.h"

enum { NP = 6, TT = 8 };

/* Prompts x0 A B x3 x4 x5 x6 A (distinct tokens): the planted induction head
 * (layer 1, head 0) attends from the last A to the token after the first A
 * and copies it to the logits, so the answer is B. The corrupt prompt puts
 * C where B was; wrong = C. Only that head moves the answer's logit. */
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
            c[t] = (int32_t)((3 * i + 5 * t + 1) % PV); /* distinct within a prompt */
        c[TT - 1] = c[1];                               /* the second A */
        memcpy(k, c, sizeof(int32_t) * TT);
        k[2] = (int32_t)((c[2] + 7 * TT) % PV);         /* C: not in the prompt */
        g->answer[i] = c[2], g->wrong[i] = k[2], g->line[i] = i + 1;
    }
    *ps = (hs_prompt_set){ g, 1, NP };
}

/* patch_z singles out the head that copies the answer: patching its clean
 * z into the corrupt run restores the whole logit difference (value 1),
 * every other head does nothing (the planted model's other heads write
 * nothing the logits read). */
static void test_patch_z_singles_out_the_planted_copying_head(void)
{
    hs_model m;
    build_planted(&m);
    hs_prompt_set ps;
    planted_prompts(&ps);
    hs_patch_opts o = { .sites = 1 << HS_PATCH_Z };
    hs_patch_result r;
    CU_ASSERT_EQUAL_FATAL(hs_patch(&r, &m, &ps, &o), HS_OK);
    printf("\n    LD clean %.3f corrupt %.3f", r.ld_clean, r.ld_corrupt);
    CU_ASSERT(r.ld_clean > 1 && r.ld_corrupt < -1);
    int best_l = -1, best_h = -1;
    double best = -INFINITY, others = 0;
    for (int i = 0; i < r.heads.n; i++) {
        const hs_metric_row *row = &r.heads.rows[i];
        if (strcmp(row->metric, "patch_z"))
            continue;
        CU_ASSERT_EQUAL(row->n, NP);
        if (row->value > best)
            best = row->value, best_l = row->layer, best_h = row->head;
    }
    for (int i = 0; i < r.heads.n; i++) {
        const hs_metric_row *row = &r.heads.rows[i];
        if (!strcmp(row->metric, "patch_z") && !(row->layer == 1 && row->head == 0))
            others = fmax(others, fabs(row->value));
    }
    printf(", patch_z L%dH%d %.4f, others at most %.2g", best_l, best_h, best, others);
    CU_ASSERT_EQUAL(best_l, 1);
    CU_ASSERT_EQUAL(best_h, 0);
    CU_ASSERT(fabs(best - 1) < 1e-4);
    CU_ASSERT(others < 1e-3);
    hs_patch_result_free(&r);

    /* noising: the same head carries the whole change the other way */
    o.noising = 1;
    CU_ASSERT_EQUAL_FATAL(hs_patch(&r, &m, &ps, &o), HS_OK);
    const hs_metric_row *row = hs_head_table_find(&r.heads, 1, 0, "patch_z");
    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
    CU_ASSERT(fabs(row->value - 1) < 1e-4);
    hs_patch_result_free(&r);
    hs_prompt_set_free(&ps);
    hs_model_free(&m);
}

/* clean = corrupt: 0/0 is refused with a message, and no rows. */
static void test_patch_refuses_zero_over_zero(void)
{
    hs_model m;
    build_planted(&m);
    hs_prompt_set ps;
    planted_prompts(&ps);
    memcpy(ps.group[0].corrupt, ps.group[0].clean, sizeof(int32_t) * NP * TT);
    hs_patch_opts o = { .sites = 1 << HS_PATCH_Z | 1 << HS_PATCH_RESID_PRE };
    hs_patch_result r;
    CU_ASSERT_EQUAL(hs_patch(&r, &m, &ps, &o), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "0/0"));
    CU_ASSERT_EQUAL(r.heads.n, 0);
    CU_ASSERT_EQUAL(r.n_pos, 0);
    hs_prompt_set_free(&ps);
    hs_model_free(&m);
}

/* SPEC §21's stderr from the running moments equals the two-pass
 * residuals sd(dP_i - v D_i) / sqrt(n) / |G| written out here, for either
 * sign of towards; with every gap equal it is §11's sd(dP) / sqrt(n) / |G|;
 * and the premise row says whether |G| >= 2 stderr of the gaps. */
static void test_delta_method_stderr_and_the_premise(void)
{
    enum { N = 9 };
    double dp[N], dg[N], g = 0;
    for (int i = 0; i < N; i++) {
        dg[i] = 0.2 + 0.05 * ((i * 7) % 5);
        dp[i] = 0.8 * dg[i] + 0.01 * ((i * 3) % 4) - 0.3 * (i == 4);
        g += dg[i] / N;
    }
    for (int sign = -1; sign <= 1; sign += 2) {
        hs_welford2 w = { 0 };
        for (int i = 0; i < N; i++)
            hs_welford2_add(&w, dp[i], dg[i]);
        double v, e;
        hs_patch_ratio(&v, &e, &w, sign * g, g);
        double mp = 0, mr = 0, ss = 0;
        for (int i = 0; i < N; i++)
            mp += dp[i] / N;
        const double want_v = mp / (sign * g);
        for (int i = 0; i < N; i++)
            mr += (dp[i] - want_v * sign * dg[i]) / N;
        for (int i = 0; i < N; i++) {
            const double r = dp[i] - want_v * sign * dg[i] - mr;
            ss += r * r;
        }
        CU_ASSERT_DOUBLE_EQUAL(v, want_v, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(e, sqrt(ss / (N - 1) / N) / fabs(g), 1e-12);
    }
    hs_welford2 same = { 0 };
    hs_welford plain = { 0 };
    for (int i = 0; i < N; i++)
        hs_welford2_add(&same, dp[i], 0.5), hs_welford_add(&plain, dp[i]);
    double v, e;
    hs_patch_ratio(&v, &e, &same, 0.5, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(e, hs_welford_stderr(&plain) / 0.5, 1e-12);
    /* the premise: gaps of +-0.3 about 0.01 (mean -0.02, stderr 0.1) fail,
     * dg (mean 0.29, stderr 0.02) holds */
    for (int k = 0; k < 2; k++) {
        hs_ld_baseline b = { 0 };
        for (int i = 0; i < N; i++)
            hs_ld_baseline_add(&b, 1.0 + (k ? dg[i] : 0.01 + 0.3 * (i % 2 ? 1 : -1)), 1.0);
        hs_head_table t = { 0 };
        double span;
        CU_ASSERT_EQUAL_FATAL(hs_patch_baseline(&t, &span, &b), HS_OK);
        const hs_metric_row *ok = hs_head_table_find(&t, -1, -1, "premise_ok");
        const hs_metric_row *gap = hs_head_table_find(&t, -1, -1, "logit_diff_gap");
        CU_ASSERT_FATAL(ok && gap);
        CU_ASSERT_DOUBLE_EQUAL(gap->value, span, 1e-15);
        CU_ASSERT_DOUBLE_EQUAL(gap->stderr_value, hs_welford_stderr(&b.gap), 1e-15);
        CU_ASSERT_EQUAL(ok->value, fabs(gap->value) >= 2 * gap->stderr_value);
        CU_ASSERT_EQUAL(ok->value, k);
        hs_head_table_free(&t);
    }
}

/* A stacked forward of n copies, copy j with intervention j, equals n
 * forwards each with its own intervention (capture/stack.h). */
static void test_stacked_interventions_equal_separate_forwards(void)
{
    hs_model m;
    build_planted(&m);
    const hs_model_config *c = &m.cfg;
    enum { B = 2, N = 3 };
    int32_t tok[B * TT], stk[N * B * TT];
    for (int i = 0; i < B * TT; i++)
        tok[i] = (int32_t)((i * 7 + 3) % PV);
    for (int j = 0; j < N; j++)
        memcpy(stk + j * B * TT, tok, sizeof tok);
    hs_acts one, all;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&one, c, B, TT, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&all, c, N * B, TT, HS_ACTS_INFER), HS_OK);
    const hs_intervention iv[N] = {
        { HS_SITE_Z, 1, 0, -1, HS_IV_ZERO, NULL, 0 },
        { .layer = -1 }, /* copy 1 untouched */
        { HS_SITE_RESID_PRE, 1, 0, 3, HS_IV_ZERO, NULL, 0 },
    };
    hs_stack_plan plan = { iv, N, B };
    hs_hooks hooks = { 0 };
    CU_ASSERT_EQUAL_FATAL(hs_stack_hooks_attach(&hooks, c, &plan), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&all, &m, stk, NULL, &hooks), HS_OK);
    const size_t per = (size_t)B * TT * c->vocab_size;
    for (int j = 0; j < N; j++) {
        hs_hook_plan p = { &iv[j], iv[j].layer >= 0, NULL };
        hs_hooks h = { 0 };
        CU_ASSERT_EQUAL_FATAL(hs_hooks_attach(&h, c, &p), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&one, &m, tok, NULL, &h), HS_OK);
        double worst = 0;
        for (size_t i = 0; i < per; i++)
            worst = fmax(worst, fabs((double)one.logits[i] - all.logits[j * per + i]));
        CU_ASSERT(worst < 1e-5);
    }
    hs_acts_free(&one);
    hs_acts_free(&all);
    hs_model_free(&m);
}

/* The last-position continuation gives the full continuation's logits at
 * the last position, for every family and layout of the fixtures (pre and
 * post norms, no final norm, GELU, SwiGLU, attention-only, GQA, RoPE, GPT-NeoX's
 * parallel and sequential residuals with partial rotary), from every layer. */
static void test_forward_from_last_equals_the_last_position(void)
{
    static const char *const dirs[] = { "gpt2_tiny", "llama_gqa", "hs_post_gelu", "hs_mixed",
                                        "tinylm_h4", "../families/neox_par",
                                        "../families/neox_seq" };
    enum { B = 3, T = 7 };
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s", HS_FIXTURE_DIR, dirs[k]);
        hs_model m;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, path), HS_OK);
        const int V = m.cfg.vocab_size, L = m.cfg.n_layer;
        int32_t tok[B * T];
        for (int i = 0; i < B * T; i++)
            tok[i] = (int32_t)((i * 11 + 5) % V);
        hs_acts full, last;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&full, &m.cfg, B, T, HS_ACTS_INFER), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&last, &m.cfg, B, T, HS_ACTS_INFER), HS_OK);
        for (int l = 0; l < L; l++) {
            CU_ASSERT_EQUAL_FATAL(hs_forward_to(&full, &m, tok, l, NULL), HS_OK);
            CU_ASSERT_EQUAL_FATAL(hs_forward_to(&last, &m, tok, l, NULL), HS_OK);
            CU_ASSERT_EQUAL_FATAL(hs_forward_from(&full, &m, l, NULL), HS_OK);
            CU_ASSERT_EQUAL_FATAL(hs_forward_from_last(&last, &m, l, NULL), HS_OK);
            CU_ASSERT_EQUAL(last.T, T);
            double worst = 0;
            for (int b = 0; b < B; b++)
                for (int v = 0; v < V; v++)
                    worst = fmax(worst, fabs((double)full.logits[((size_t)b * T + T - 1) * V + v] -
                                             last.logits[(size_t)b * V + v]));
            if (worst > 1e-5)
                printf("\n    %s from layer %d: max difference %.3g", dirs[k], l, worst);
            CU_ASSERT(worst <= 1e-5);
        }
        hs_acts_free(&full);
        hs_acts_free(&last);
        hs_model_free(&m);
    }
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_patch_z_singles_out_the_planted_copying_head",
          test_patch_z_singles_out_the_planted_copying_head },
        { "test_patch_refuses_zero_over_zero", test_patch_refuses_zero_over_zero },
        { "test_delta_method_stderr_and_the_premise", test_delta_method_stderr_and_the_premise },
        { "test_stacked_interventions_equal_separate_forwards",
          test_stacked_interventions_equal_separate_forwards },
        { "test_forward_from_last_equals_the_last_position",
          test_forward_from_last_equals_the_last_position },
    };
    return hs_run_tests("patch_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
