/* The library's study entry points (analyze/study.h): the induction study's
 * control recipe and rows on a model with planted heads, its option checks,
 * the forward latency's status, and the head-norms study against a plain
 * loop. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "patterns.h"
#include "planted.h"
#include "runner.h"
#include "scores.h"
#include "study.h"
#include "tokens.h"
#include "study_induction.h"
#include "study_patterns.h"
#include "study_capture.h"
#include "study_ablate.h"
#include "study_headcount.h"
#include "study_train.h"
#include "study_head_norms.h"


static double row(const hs_head_table *t, int l, int h, const char *metric)
{
    const hs_metric_row *r = hs_head_table_find(t, l, h, metric);
    CU_ASSERT_PTR_NOT_NULL(r);
    return r ? r->value : NAN;
}

/* The study's rows: every head's four scores for the model and its control,
 * the causal check's model-wide rows, and the control is exactly the one
 * recipe (hs_control_model from the seed) scored on the same sequences. */
static void test_induction_study_rows_control_and_verdict_on_planted_heads(void)
{
    hs_model m;
    build_planted(&m);
    hs_induction_opts o = hs_induction_defaults();
    o.seq_len = 8, o.samples = 16, o.batch = 4, o.seed = 5;
    hs_induction_result r;
    CU_ASSERT_EQUAL_FATAL(hs_induction_study(&r, &o, &(hs_study_env){ .m = &m }), HS_OK);
    const int heads = 2 * PH;
    CU_ASSERT_EQUAL(r.table.n, 2 * 4 * heads + 5 + r.causal.k);
    CU_ASSERT_EQUAL(r.pool, PV);
    printf("\n    best L%dH%d %.3f (control %.3f), established %d", r.best_layer, r.best_head,
           r.best, r.best_control, r.established);
    CU_ASSERT_EQUAL(r.best_layer, 1);
    CU_ASSERT_EQUAL(r.best_head, 0);
    CU_ASSERT_EQUAL(r.causal.layer[0], 1);
    CU_ASSERT_EQUAL(r.causal.head[0], 0);
    CU_ASSERT_EQUAL(r.established, 1);
    CU_ASSERT_EQUAL(row(&r.table, -1, -1, "induction_established"), 1);
    CU_ASSERT_EQUAL(row(&r.table, 1, 0, "causal_top_k"), 1);
    CU_ASSERT_EQUAL(r.draws.n, o.random_draws);
    CU_ASSERT_STRING_EQUAL(r.draws.name, "causal_random_k");

    /* the control rows equal the control recipe's scores on the sequences */
    hs_model ctrl;
    CU_ASSERT_EQUAL_FATAL(hs_control_model(&ctrl, &m.cfg, o.seed), HS_OK);
    hs_model ref;
    CU_ASSERT_EQUAL_FATAL(hs_model_init(&ref, &m.cfg), HS_OK);
    hs_model_init_random(&ref, o.seed + 1000003ULL);
    CU_ASSERT_EQUAL(memcmp(ctrl.params, ref.params, sizeof(hs_real) * ref.n_params), 0);
    hs_model_free(&ref);
    int32_t seq[16 * 2 * 8];
    hs_repeated_sequences(seq, 16, 8, NULL, PV, o.seed);
    hs_scores sc;
    CU_ASSERT_EQUAL_FATAL(hs_scores_alloc(&sc, &ctrl.cfg), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_pattern_scores(&sc, &ctrl, seq, 16, 8, 4, NULL, NULL), HS_OK);
    double worst = 0;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < PH; h++) {
            const size_t i = (size_t)l * HS_MAX_HEADS + h;
            worst = fmax(worst, fabs(row(&r.table, l, h, "induction_control") -
                                     sc.value[HS_SCORE_INDUCTION][i]));
            worst = fmax(worst, fabs(row(&r.table, l, h, "prev_token_control") -
                                     sc.value[HS_SCORE_PREV][i]));
        }
    CU_ASSERT_EQUAL(worst, 0);
    CU_ASSERT_EQUAL(r.best_control, sc.value[HS_SCORE_INDUCTION][HS_MAX_HEADS]);
    hs_scores_free(&sc);

    /* first_half_loss: each sequence's r alone, its T-1 next-token losses
     * averaged, then over sequences (a causal model: the second half
     * changes nothing before it) */
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, 1, 7, HS_ACTS_INFER), HS_OK);
    double mean = 0;
    for (int n = 0; n < 16; n++) {
        int32_t in[7], tg[7];
        for (int t = 0; t < 7; t++)
            in[t] = seq[n * 16 + t], tg[t] = seq[n * 16 + t + 1];
        CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, in, tg, NULL), HS_OK);
        mean += a.loss / 16;
    }
    hs_acts_free(&a);
    CU_ASSERT_DOUBLE_EQUAL(row(&r.table, -1, -1, "first_half_loss"), mean, 1e-5 * (1 + mean));

    /* r drawn from a pool: its ids only; the pool 0 .. V-1 draws as NULL */
    int32_t pool[PV], from[16 * 2 * 8];
    for (int i = 0; i < PV; i++)
        pool[i] = i;
    hs_repeated_sequences(from, 16, 8, pool, PV, o.seed);
    CU_ASSERT_EQUAL(memcmp(from, seq, sizeof seq), 0);
    const int32_t few[3] = { 2, 5, 7 };
    hs_repeated_sequences(from, 16, 8, few, 3, o.seed);
    int outside = 0;
    for (int i = 0; i < 16 * 16; i++)
        outside += from[i] != 2 && from[i] != 5 && from[i] != 7;
    CU_ASSERT_EQUAL(outside, 0);
    hs_model_free(&ctrl);
    hs_induction_result_free(&r);
    hs_model_free(&m);
}

static void test_induction_check_names_the_option(void)
{
    hs_model m;
    build_planted(&m);
    hs_induction_opts o = hs_induction_defaults();
    CU_ASSERT_EQUAL(hs_induction_check(&o, &(hs_study_env){ .m = &m }), HS_OK);
    CU_ASSERT_EQUAL(o.seq_len, PP / 2); /* the default fits n_ctx */
    o.seq_len = PP / 2 + 1;
    CU_ASSERT_EQUAL(hs_induction_check(&o, &(hs_study_env){ .m = &m }), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--seq-len"));
    o = hs_induction_defaults();
    o.causal_k = PH + 1; /* 2k exceeds the 16 heads */
    CU_ASSERT_EQUAL(hs_induction_check(&o, &(hs_study_env){ .m = &m }), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--causal-k"));
    hs_induction_result r;
    CU_ASSERT_EQUAL(hs_induction_study(&r, &o, &(hs_study_env){ .m = &m }), HS_EINVAL);
    CU_ASSERT_EQUAL(r.table.n, 0);
    hs_induction_result_free(&r);
    hs_model_free(&m);
}

/* The latency of a forward that fails is no latency: the forward's status
 * comes back (a token outside the vocabulary), with ms -1. */
static void test_forward_ms_returns_the_forward_status(void)
{
    hs_model m;
    build_planted(&m);
    int32_t tok[2 * 8 + 1];
    for (int i = 0; i < 17; i++)
        tok[i] = i % PV;
    hs_tokens t = { .tok = tok, .n = 17, .version = 1 };
    double ms = 0;
    CU_ASSERT_EQUAL(hs_forward_ms(&ms, &m, &t, 2, 8), HS_OK);
    CU_ASSERT(ms >= 0);
    tok[3] = PV + 5;
    CU_ASSERT_EQUAL(hs_forward_ms(&ms, &m, &t, 2, 8), HS_EINVAL);
    CU_ASSERT_EQUAL(ms, -1);
    hs_model_free(&m);
}

/* The patterns study's control is the same recipe as induction's: its
 * _control rows equal the statistics of hs_control_model(seed). */
static void test_patterns_study_control_is_the_control_recipe(void)
{
    hs_model m;
    build_planted(&m);
    int32_t tok[4 * 8 + 1];
    for (int i = 0; i < 33; i++)
        tok[i] = (i * 7) % PV;
    hs_tokens t = { .tok = tok, .n = 33, .version = 1 };
    const hs_patterns_opts o = { .control = 1, .seed = 3 };
    const hs_study_env env = { .m = &m, .data = &t, .batch = 2, .seq_len = 8 };
    hs_patterns_result r;
    CU_ASSERT_EQUAL_FATAL(hs_patterns_study(&r, &o, &env), HS_OK);
    CU_ASSERT_EQUAL(r.heads, 2 * PH);
    /* each statistic and sink per head, and sink_rate; then their controls */
    CU_ASSERT_EQUAL(r.table.n, 2 * ((HS_PAT_KINDS + 1) * 2 * PH + 1));
    hs_model ctrl;
    hs_patterns ref = { 0 };
    CU_ASSERT_EQUAL_FATAL(hs_control_model(&ctrl, &m.cfg, o.seed), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_patterns_run(&ref, &ctrl, &t, 2, 8, 0, NULL, 0, NULL, NULL), HS_OK);
    double worst = 0;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < PH; h++)
            worst = fmax(worst, fabs(row(&r.table, l, h, "entropy_control") -
                                     ref.value[HS_PAT_ENTROPY][(size_t)l * HS_MAX_HEADS + h]));
    CU_ASSERT_EQUAL(worst, 0);
    /* the planted previous-token head attends to t-1 in the model, not in the control */
    printf("\n    prev_token L0H0 %.3f, control %.3f", row(&r.table, 0, 0, "prev_token"),
           row(&r.table, 0, 0, "prev_token_control"));
    CU_ASSERT(row(&r.table, 0, 0, "prev_token") > 0.8); /* t = 0 has no t-1: at most 7/8 */
    CU_ASSERT(row(&r.table, 0, 0, "prev_token_control") < 0.5);
    hs_patterns_free(&ref);
    hs_model_free(&ctrl);
    hs_patterns_result_free(&r);
    hs_model_free(&m);
}

/* Selections are checked against the model before any work, naming the option. */
static void test_selection_checks_name_the_option(void)
{
    hs_model m;
    build_planted(&m);
    hs_capture_opts co = { .batch = 1, .layers = "2" };
    hs_capture_plan p;
    CU_ASSERT_EQUAL(hs_capture_check(&p, &co, &m.cfg), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--layers '2'"));
    co.layers = "1", co.heads = "0,0";
    CU_ASSERT_EQUAL(hs_capture_check(&p, &co, &m.cfg), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--heads"));
    co.heads = "0,3", co.queries = "2:5";
    CU_ASSERT_EQUAL(hs_capture_check(&p, &co, &m.cfg), HS_OK);
    CU_ASSERT_EQUAL(co.seq_len, PP);
    CU_ASSERT(!p.layer_on[0] && p.layer_on[1] && p.n_heads == 2 && p.q0 == 2 && p.q1 == 5);
    hs_ablate_study_opts ao = { .layers = "0", .heads = "8" };
    hs_study_env env = { .m = &m, .batch = 1, .seq_len = 4 };
    CU_ASSERT_EQUAL(hs_ablate_study_check(&ao, &env), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--heads '8'"));
    ao.heads = "0", ao.method = "resample";
    CU_ASSERT_EQUAL(hs_ablate_study_check(&ao, &env), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--batch"));
    env.batch = 2;
    CU_ASSERT_EQUAL(hs_ablate_study_check(&ao, &env), HS_OK);
    CU_ASSERT_EQUAL(ao.kinds, 1 << HS_ABLATE_RESAMPLE);
    ao.method = "zero,bogus";
    CU_ASSERT_EQUAL(hs_ablate_study_check(&ao, &env), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "unknown method 'bogus'"));
    hs_headcount_opts ho = { .base = m.cfg, .heads = { 3 }, .n_heads = 1, .seq_len = 8 };
    hs_model_config cfg[HS_HEADCOUNT_MAX];
    CU_ASSERT_EQUAL(hs_headcount_check(cfg, &ho), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--heads 3"));
    hs_model_free(&m);
}

/* Without an index nothing records the checkpoint's hash, so train does not
 * compute it (hashing a large checkpoint cost more than the steps); the
 * checkpoint is still written. */
static void test_train_study_hashes_only_for_an_index(void)
{
    hs_model m;
    build_planted(&m);
    int32_t tok[2 * 8 + 1];
    for (int i = 0; i < 17; i++)
        tok[i] = i % PV;
    hs_tokens t = { .tok = tok, .n = 17, .version = 1 };
    char dir[] = "/tmp/hs_train_study_XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    hs_train_study_opts o = { .train = { .B = 2, .T = 8, .steps = 1, .lr = 1e-3 }, .out = dir };
    hs_train_result r;
    CU_ASSERT_EQUAL(hs_train_study(&r, &m, &t, &o), HS_OK);
    CU_ASSERT(r.saved);
    CU_ASSERT_STRING_EQUAL(r.model_sha, "");
    char path[64];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL(f);
    if (f)
        fclose(f);
    remove(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    remove(path);
    remove(dir);
    hs_model_free(&m);
}

/* head_output_norm of one head, by a plain loop apart from the study's
 * code: per sequence the mean over its positions (encoders: the real
 * tokens) of || sum_k z[b,t,h,k] W_o[:, h w + k] ||, then the mean and the
 * standard error over the sequences. */
static void naive_norm(double *mean, double *se, const hs_model *m, const int32_t *in, int B,
                       int T, int l, int h)
{
    const hs_model_config *c = &m->cfg;
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, in, NULL, NULL), HS_OK);
    hs_site_view z;
    CU_ASSERT_EQUAL_FATAL(hs_acts_site_view(&z, &a, c, HS_SITE_Z, l), HS_OK);
    const int d = c->d_model, w = z.width, HW = z.heads * w;
    double per[64], sum = 0;
    for (int b = 0; b < B; b++) {
        double acc = 0;
        int n = 0;
        for (int t = 0; t < T; t++) {
            if (c->encoder && in[b * T + t] == c->pad_id)
                continue;
            double sq = 0;
            for (int i = 0; i < d; i++) {
                double y = 0;
                for (int k = 0; k < w; k++)
                    y += (double)z.x[b * z.sb + t * z.st + h * z.sh + k] *
                         m->w.layer[l].attn.w_o[(size_t)i * HW + h * w + k];
                sq += y * y;
            }
            acc += sqrt(sq), n++;
        }
        per[b] = acc / n, sum += per[b];
    }
    *mean = sum / B;
    double v = 0;
    for (int b = 0; b < B; b++)
        v += (per[b] - *mean) * (per[b] - *mean);
    *se = sqrt(v / (B - 1) / B);
    hs_acts_free(&a);
}

/* The head-norms study against naive_norm on a GQA model, an MLA model (z
 * of width v_head_dim through o_proj) and a BERT with padded sequences, its
 * control against the same loop on hs_control_model(seed), and its option
 * checks. */
static void test_head_norms_equal_a_plain_loop(void)
{
    static const char *const dirs[] = { "models/llama_gqa", "mla/mla_qlora", "encoders/bert" };
    for (int k = 0; k < 3; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", HS_FIXTURE_DIR, dirs[k]);
        hs_model m;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, path), HS_OK);
        const hs_model_config *c = &m.cfg;
        enum { B = 3, T = 6 };
        int32_t tok[2 * B * T + 1];
        for (int i = 0; i < 2 * B * T + 1; i++)
            tok[i] = (int32_t)((i * 11 + 3) % (c->vocab_size - 8)) + 4;
        if (c->encoder) /* padding at the ends of the first and third sequences */
            tok[T - 1] = tok[T - 2] = tok[3 * T - 1] = c->pad_id;
        hs_tokens t = { .tok = tok, .n = 2 * B * T + 1, .version = 1 };
        const hs_head_norms_opts o = { 5 };
        const hs_study_env env = { .m = &m, .data = &t, .batch = B, .seq_len = T, .max_batches = 1 };
        hs_head_norms_result r;
        CU_ASSERT_EQUAL_FATAL(hs_head_norms_study(&r, &o, &env), HS_OK);
        CU_ASSERT_EQUAL(r.sequences, B);
        hs_model ctrl;
        CU_ASSERT_EQUAL_FATAL(hs_control_model(&ctrl, c, o.seed), HS_OK);
        double worst = 0;
        int rows = 0;
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++)
                for (int ctl = 0; ctl < 2; ctl++) {
                    double mean, se;
                    naive_norm(&mean, &se, ctl ? &ctrl : &m, tok, B, T, l, h);
                    const hs_metric_row *row = hs_head_table_find(
                        &r.table, l, h, ctl ? "head_output_norm_control" : "head_output_norm");
                    CU_ASSERT_PTR_NOT_NULL_FATAL(row);
                    CU_ASSERT_EQUAL(row->n, B);
                    worst = fmax(worst, fabs(row->value - mean) / mean);
                    worst = fmax(worst, fabs(row->stderr_value - se) / (se + 1e-30));
                    rows++;
                }
        printf("\n    %s: %d rows, worst relative difference %.2g", dirs[k], rows, worst);
        CU_ASSERT_EQUAL(r.table.n, rows);
        CU_ASSERT(worst < (sizeof(hs_real) == 8 ? 1e-10 : 1e-4));
        hs_head_norms_result_free(&r);
        hs_model_free(&ctrl);
        if (k == 0) { /* the checks name the option */
            const int bad[][2] = { { 0, T }, { B, c->n_ctx + 1 }, { 8, T } }; /* batch, seq_len */
            const char *const names[] = { "--batch", "--seq-len", "fewer than one batch" };
            for (int i = 0; i < 3; i++) {
                hs_study_env e = env;
                e.batch = bad[i][0], e.seq_len = bad[i][1];
                hs_head_norms_opts ob = { 1 };
                CU_ASSERT_EQUAL(hs_head_norms_check(&ob, &e), HS_EINVAL);
                CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), names[i]));
            }
        }
        hs_model_free(&m);
    }
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_induction_study_rows_control_and_verdict_on_planted_heads",
          test_induction_study_rows_control_and_verdict_on_planted_heads },
        { "test_induction_check_names_the_option", test_induction_check_names_the_option },
        { "test_forward_ms_returns_the_forward_status", test_forward_ms_returns_the_forward_status },
        { "test_patterns_study_control_is_the_control_recipe",
          test_patterns_study_control_is_the_control_recipe },
        { "test_selection_checks_name_the_option", test_selection_checks_name_the_option },
        { "test_train_study_hashes_only_for_an_index", test_train_study_hashes_only_for_an_index },
        { "test_head_norms_equal_a_plain_loop", test_head_norms_equal_a_plain_loop },
    };
    return hs_run_tests("study_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
