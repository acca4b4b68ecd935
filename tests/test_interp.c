/* Direct logit attribution, the logit lens and composition scores
 * (analyze/dla.h, logit_lens.h, composition.h, their studies): the parts sum
 * to each prompt's logit difference, a planted copying head is singled out,
 * the lens's last entry is the model's output, and the composition scores
 * equal an independent dense computation (uneven heads, GQA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "eval.h"
#include "planted.h"
#include "runner.h"
#include "study.h"
#include "study_interp.h"

/* The fifth and sixth are gpt2_tiny altered in memory: its final LayerNorm
 * without its bias, and no final norm at all (the scale is then 1); the last
 * two GPT-NeoX, parallel and sequential residual. */
static const char *const MODELS[] = { "gpt2_tiny", "llama_gqa", "hs_mixed", "llama_mqa_tied",
                                      "gpt2_tiny", "gpt2_tiny", "../families/neox_par",
                                      "../families/neox_seq" };

static int load(hs_model *m, const char *name)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", HS_FIXTURE_DIR, name);
    return hs_checkpoint_load(m, dir);
}

/* The prompts over 48 tokens, or (the NeoX checkpoints) over 32. */
static int load_prompts(hs_prompt_set *ps, int vocab)
{
    return hs_prompts_load(ps,
                           vocab >= 48 ? HS_FIXTURE_DIR "/interp/prompts.jsonl"
                                       : HS_FIXTURE_DIR "/interp/prompts_neox.jsonl",
                           NULL, vocab, 16);
}

/* Every prompt's parts add up to its logit difference from the model's own
 * logits, on five families of model (biases, learned or rotary positions,
 * LayerNorm and RMSNorm, tied and untied unembeddings, uneven heads, GPT-NeoX's
 * parallel residual and partial rotary). */
static void test_dla_parts_sum_to_each_prompts_logit_difference(void)
{
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        hs_model m;
        hs_prompt_set ps;
        CU_ASSERT_EQUAL_FATAL(load(&m, MODELS[i]), HS_OK);
        CU_ASSERT_EQUAL_FATAL(load_prompts(&ps, m.cfg.vocab_size), HS_OK);
        if (i == 4)
            m.cfg.norm_bias = 0, m.w.lnf_b = NULL;
        if (i == 5)
            m.cfg.final_norm = 0;
        hs_dla_result r;
        CU_ASSERT_EQUAL_FATAL(hs_dla_study(&r, &(hs_dla_opts){ 0 }, &(hs_study_env){ .m = &m, .ps = &ps, .batch = 3 }), HS_OK);
        const hs_dla *p = &r.parts;
        CU_ASSERT_EQUAL(p->n, 7);
        double worst = 0, mean_sum = 0;
        for (int k = 0; k < p->n; k++) {
            double sum = 0;
            for (int j = 0; j < p->n_terms; j++)
                sum += p->value[(size_t)k * p->n_terms + j];
            const double ld = p->logit_diff[k];
            worst = fmax(worst, fabs(sum - ld) / fmax(fabs(ld), 1e-3));
            CU_ASSERT(fabs(ld) > 1e-3); /* the check is not 0 = 0 */
        }
        for (int j = 0; j < r.table.n; j++)
            if (strcmp(r.table.rows[j].metric, "logit_diff_clean"))
                mean_sum += r.table.rows[j].value;
        printf("\n    %s%s: %d parts, worst relative gap %.2g", MODELS[i],
               i == 4 ? " (final norm without bias)" : i == 5 ? " (no final norm)" : "",
               p->n_terms, worst);
        CU_ASSERT_EQUAL(hs_head_table_find(&r.table, -1, -1, "dla_final_norm_bias") != NULL,
                        i == 0 || i >= 6);
        CU_ASSERT(worst <= 1e-4);
        CU_ASSERT(fabs(mean_sum - r.logit_diff) <= 1e-4 * fmax(1, fabs(r.logit_diff)));
        CU_ASSERT(r.max_gap <= 1e-4);
        hs_dla_result_free(&r);
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* The rows name the parts the model has: per head, per MLP, and only the
 * model-wide terms of its architecture. */
static void test_dla_rows_follow_the_architecture(void)
{
    hs_model m;
    hs_prompt_set ps;
    CU_ASSERT_EQUAL_FATAL(load(&m, "hs_mixed"), HS_OK); /* rope, rmsnorm, biases, 4 + 2 heads */
    CU_ASSERT_EQUAL_FATAL(load_prompts(&ps, m.cfg.vocab_size), HS_OK);
    hs_dla_result r;
    CU_ASSERT_EQUAL_FATAL(hs_dla_study(&r, &(hs_dla_opts){ 0 }, &(hs_study_env){ .m = &m, .ps = &ps, .batch = 8 }), HS_OK);
    CU_ASSERT_PTR_NOT_NULL(hs_head_table_find(&r.table, 0, 3, "dla"));
    CU_ASSERT_PTR_NULL(hs_head_table_find(&r.table, 1, 2, "dla"));
    CU_ASSERT_PTR_NOT_NULL(hs_head_table_find(&r.table, 1, -1, "dla"));
    CU_ASSERT_PTR_NOT_NULL(hs_head_table_find(&r.table, -1, -1, "dla_attn_bias"));
    CU_ASSERT_PTR_NOT_NULL(hs_head_table_find(&r.table, -1, -1, "dla_lm_head_bias"));
    CU_ASSERT_PTR_NULL(hs_head_table_find(&r.table, -1, -1, "dla_pos_embed"));
    CU_ASSERT_PTR_NULL(hs_head_table_find(&r.table, -1, -1, "dla_final_norm_bias"));
    const hs_metric_row *ld = hs_head_table_find(&r.table, -1, -1, "logit_diff_clean");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ld);
    CU_ASSERT_EQUAL(ld->n, 7);
    CU_ASSERT(ld->stderr_value > 0);
    hs_dla_result_free(&r);
    hs_prompt_set_free(&ps);
    hs_model_free(&m);
}

/* A post-norm model's residual stream is not a sum of parts: refused. */
static void test_dla_refuses_post_norm(void)
{
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(load(&m, "hs_post_gelu"), HS_OK);
    CU_ASSERT_EQUAL(hs_dla_check(&m.cfg), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "post-norm"));
    hs_model_free(&m);
}

/* n prompts of the planted model: random distinct tokens r (6) then r's
 * first 3 again; the induction head (layer 1, head 0) copies the token
 * after the earlier occurrence of the last one, r[3]: the answer; the wrong
 * token appears nowhere in the prompt. */
static void planted_prompts(hs_prompt_set *ps, hs_prompt_group *g, int n)
{
    const int T = 9;
    memset(ps, 0, sizeof *ps);
    memset(g, 0, sizeof *g);
    g->T = T, g->n = n;
    g->clean = calloc((size_t)n * T, sizeof(int32_t));
    g->corrupt = calloc((size_t)n * T, sizeof(int32_t));
    g->answer = calloc((size_t)n, sizeof(int32_t));
    g->wrong = calloc((size_t)n, sizeof(int32_t));
    g->line = calloc((size_t)n, sizeof(int));
    unsigned s = 12345;
    for (int i = 0; i < n; i++) {
        int used[PV] = { 0 }, r[6];
        for (int k = 0; k < 6; k++) {
            do
                s = s * 1103515245u + 12345u, r[k] = (int)((s >> 16) % PV);
            while (used[r[k]]);
            used[r[k]] = 1;
        }
        int32_t *c = g->clean + (size_t)i * T;
        for (int t = 0; t < T; t++)
            c[t] = r[t % 6];
        memcpy(g->corrupt + (size_t)i * T, c, sizeof(int32_t) * T);
        g->answer[i] = r[3];
        int w = 0;
        while (used[w])
            w++;
        g->wrong[i] = w;
        g->line[i] = i + 1;
    }
    ps->group = g, ps->n_group = 1, ps->n = n;
}

static void free_planted_prompts(hs_prompt_group *g)
{
    free(g->clean), free(g->corrupt), free(g->answer), free(g->wrong), free(g->line);
}

/* Must-show 3: on the planted circuit the head that copies the answer into
 * the logits carries the logit difference; every other part is ~0. */
static void test_dla_singles_out_the_planted_copying_head(void)
{
    hs_model m;
    build_planted(&m);
    hs_prompt_set ps;
    hs_prompt_group g;
    planted_prompts(&ps, &g, 12);
    hs_dla_result r;
    CU_ASSERT_EQUAL_FATAL(hs_dla_study(&r, &(hs_dla_opts){ 0 }, &(hs_study_env){ .m = &m, .ps = &ps, .batch = 4 }), HS_OK);
    printf("\n    top L%dH%d %.3f of logit difference %.3f", r.top_layer, r.top_head, r.top,
           r.logit_diff);
    CU_ASSERT_EQUAL(r.top_layer, 1);
    CU_ASSERT_EQUAL(r.top_head, 0);
    CU_ASSERT(r.logit_diff > 1);
    CU_ASSERT(r.top > 0.9 * r.logit_diff);
    for (int i = 0; i < r.table.n; i++) {
        const hs_metric_row *w = &r.table.rows[i];
        if (!strcmp(w->metric, "dla") && !(w->layer == 1 && w->head == 0))
            CU_ASSERT(fabs(w->value) < 0.05 * r.top);
    }
    hs_dla_result_free(&r);
    free_planted_prompts(&g);
    hs_model_free(&m);
}

/* The lens's last entry is the model's own output: the evaluation loss on a
 * shard, the logit difference dla measures on prompts. */
static void test_lens_final_entry_is_the_models_output(void)
{
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(load(&m, "gpt2_tiny"), HS_OK);
    hs_tokens tok;
    CU_ASSERT_EQUAL_FATAL(hs_tokens_read(&tok, HS_FIXTURE_DIR "/models/gpt2_tiny/eval.bin"), HS_OK);
    const hs_study_env env = { .m = &m, .data = &tok, .batch = 2, .seq_len = 8, .max_batches = 2 };
    hs_logit_lens_result r;
    CU_ASSERT_EQUAL_FATAL(hs_logit_lens_study(&r, &(hs_logit_lens_opts){ 0 }, &env), HS_OK);
    hs_eval_result ev;
    CU_ASSERT_EQUAL_FATAL(hs_evaluate(&ev, &m, &tok, 2, 8, 2, NULL, NULL, NULL), HS_OK);
    CU_ASSERT_DOUBLE_EQUAL(r.final_loss, ev.loss, 1e-9);
    const hs_metric_row *fin = hs_head_table_find(&r.table, 2, -1, "logit_lens_loss");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fin);
    CU_ASSERT_DOUBLE_EQUAL(fin->stderr_value, ev.stderr_loss, 1e-9);
    CU_ASSERT_EQUAL(fin->n, 4);
    CU_ASSERT_PTR_NULL(hs_head_table_find(&r.table, 2, -1, "logit_lens_logit_diff"));
    hs_logit_lens_result_free(&r);

    hs_prompt_set ps;
    CU_ASSERT_EQUAL_FATAL(load_prompts(&ps, m.cfg.vocab_size), HS_OK);
    const hs_study_env envp = { .m = &m, .ps = &ps, .batch = 2 };
    CU_ASSERT_EQUAL_FATAL(hs_logit_lens_study(&r, &(hs_logit_lens_opts){ 0 }, &envp), HS_OK);
    hs_dla_result d;
    CU_ASSERT_EQUAL_FATAL(hs_dla_study(&d, &(hs_dla_opts){ 0 }, &(hs_study_env){ .m = &m, .ps = &ps, .batch = 5 }), HS_OK);
    CU_ASSERT_DOUBLE_EQUAL(r.final_logit_diff, d.logit_diff, 1e-6);
    CU_ASSERT_PTR_NOT_NULL(hs_head_table_find(&r.table, 0, -1, "logit_lens_logit_diff"));
    hs_dla_result_free(&d);
    hs_logit_lens_result_free(&r);
    hs_prompt_set_free(&ps);
    hs_tokens_free(&tok);
    hs_model_free(&m);
}

/* |A|_F of a dense (n x n) matrix. */
static double fro(const double *a, int n)
{
    double s = 0;
    for (int i = 0; i < n * n; i++)
        s += a[i] * a[i];
    return sqrt(s);
}

/* out (d x d) = X (d x dh) Y (dh x d), X's element (i, j) from x(i, j). */
static void dense(double *out, int d, int dh, double (*x)(const hs_model *, int, int, int, int),
                  double (*y)(const hs_model *, int, int, int, int), const hs_model *m, int l,
                  int h)
{
    for (int i = 0; i < d; i++)
        for (int k = 0; k < d; k++) {
            double s = 0;
            for (int j = 0; j < dh; j++)
                s += x(m, l, h, i, j) * y(m, l, h, j, k);
            out[i * d + k] = s;
        }
}

static int kvh(const hs_model *m, int l, int h)
{
    return h / (m->cfg.n_head[l] / m->cfg.n_kv_head[l]);
}
/* TransformerLens's W_V (d, dh), W_O (dh, d), W_Q (d, dh), W_K^T (dh, d). */
static double wv(const hs_model *m, int l, int h, int i, int j)
{
    return m->w.layer[l].attn.w_v[((size_t)kvh(m, l, h) * m->cfg.head_dim + j) * m->cfg.d_model + i];
}
static double wo(const hs_model *m, int l, int h, int j, int k)
{
    return m->w.layer[l].attn.w_o[(size_t)k * m->cfg.n_head[l] * m->cfg.head_dim +
                                  (size_t)h * m->cfg.head_dim + j];
}
static double wq(const hs_model *m, int l, int h, int i, int j)
{
    return m->w.layer[l].attn.w_q[((size_t)h * m->cfg.head_dim + j) * m->cfg.d_model + i];
}
static double wkt(const hs_model *m, int l, int h, int j, int k)
{
    return m->w.layer[l].attn.w_k[((size_t)kvh(m, l, h) * m->cfg.head_dim + j) * m->cfg.d_model + k];
}

static void matmul(double *out, const double *a, const double *b, int n, int tb)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            double s = 0;
            for (int j = 0; j < n; j++)
                s += a[i * n + j] * (tb ? b[k * n + j] : b[j * n + k]);
            out[i * n + k] = s;
        }
}

/* Every score equals the dense d x d computation of its definition, on a
 * model with 4 heads on 2 key/value heads in layer 0 and 2 on 1 in layer 1. */
static void test_composition_equals_the_dense_definition(void)
{
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(load(&m, "hs_mixed"), HS_OK);
    hs_pair_row *rows;
    int n;
    CU_ASSERT_EQUAL_FATAL(hs_composition_scores(&rows, &n, &m, 0), HS_OK);
    CU_ASSERT_EQUAL(n, 3 * 4 * 2);
    const int d = m.cfg.d_model, dh = m.cfg.head_dim;
    double *ova = malloc(sizeof(double) * d * d), *qk = malloc(sizeof(double) * d * d);
    double *ovb = malloc(sizeof(double) * d * d), *prod = malloc(sizeof(double) * d * d);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const hs_pair_row *p = &rows[i];
        CU_ASSERT(p->layer_a < p->layer_b);
        dense(ova, d, dh, wv, wo, &m, p->layer_a, p->head_a);
        dense(qk, d, dh, wq, wkt, &m, p->layer_b, p->head_b);
        dense(ovb, d, dh, wv, wo, &m, p->layer_b, p->head_b);
        double want;
        if (!strcmp(p->metric, "v_composition")) {
            matmul(prod, ova, ovb, d, 0);
            want = fro(prod, d) / (fro(ova, d) * fro(ovb, d));
        } else {
            matmul(prod, ova, qk, d, p->metric[0] == 'k'); /* K: QK^T on the key side */
            want = fro(prod, d) / (fro(ova, d) * fro(qk, d));
        }
        worst = fmax(worst, fabs(p->value - want));
        CU_ASSERT(p->value >= 0 && p->value <= 1);
    }
    printf("\n    %d scores, largest difference %.2g", n, worst);
    CU_ASSERT(worst < 1e-10);
    free(ova), free(qk), free(ovb), free(prod), free(rows);
    hs_model_free(&m);
}

/* On the planted model: the induction head's keys read what the
 * previous-token head writes, so K-composition L0H0 -> L1H0 is the highest
 * score; heads whose weights are zero get no score (0/0), and the control
 * rows carry the _control suffix. */
static void test_composition_finds_the_planted_k_composition(void)
{
    hs_model m;
    build_planted(&m);
    hs_composition_result r;
    CU_ASSERT_EQUAL_FATAL(hs_composition_study(&r, &(hs_composition_opts){ .seed = 3 }, &(hs_study_env){ .m = &m }), HS_OK);
    int model_rows = 0, control_rows = 0;
    for (int i = 0; i < r.n_pairs; i++) {
        const int ctrl = strstr(r.pairs[i].metric, "_control") != NULL;
        control_rows += ctrl, model_rows += !ctrl;
        if (!ctrl)
            CU_ASSERT(r.pairs[i].head_a == 0 && r.pairs[i].head_b == 0);
    }
    CU_ASSERT_EQUAL(model_rows, 3); /* only L0H0 -> L1H0 has both circuits non-zero */
    CU_ASSERT_EQUAL(control_rows, 3 * PH * PH);
    CU_ASSERT_EQUAL(r.best[1][0], 0);
    CU_ASSERT_EQUAL(r.best[1][2], 1);
    printf("\n    K L0H0->L1H0 %.3f (control mean %.3f), Q %.3f, V %.3f", r.best_value[1],
           r.control_mean[1], r.best_value[0], r.best_value[2]);
    /* OV^A maps the 32 token directions onto the 32 PREV ones (x 0.2) and
     * (QK^B)^T maps those back (x 10): rank-32 multiples of an identity, so
     * |OV^A (QK^B)^T|_F / (|OV^A|_F |QK^B|_F) = 2 sqrt(32) / (0.2 sqrt(32) 10 sqrt(32)) */
    CU_ASSERT_DOUBLE_EQUAL(r.best_value[1], 1 / sqrt(PV), 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.best_value[0], 0, 1e-12); /* queries read tokens, not PREV */
    CU_ASSERT_DOUBLE_EQUAL(r.best_value[2], 0, 1e-12);
    CU_ASSERT(r.best_value[1] > 1.5 * r.control_mean[1]);
    CU_ASSERT_PTR_NOT_NULL(hs_head_table_find(&r.table, -1, -1, "k_composition_control_mean"));
    hs_composition_result_free(&r);
    hs_model_free(&m);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_dla_parts_sum_to_each_prompts_logit_difference",
          test_dla_parts_sum_to_each_prompts_logit_difference },
        { "test_dla_rows_follow_the_architecture", test_dla_rows_follow_the_architecture },
        { "test_dla_refuses_post_norm", test_dla_refuses_post_norm },
        { "test_dla_singles_out_the_planted_copying_head",
          test_dla_singles_out_the_planted_copying_head },
        { "test_lens_final_entry_is_the_models_output", test_lens_final_entry_is_the_models_output },
        { "test_composition_equals_the_dense_definition",
          test_composition_equals_the_dense_definition },
        { "test_composition_finds_the_planted_k_composition",
          test_composition_finds_the_planted_k_composition },
    };
    return hs_run_tests("interp_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
