/* Model-level decoding (model/decode.h) against full recomputation: after
 * a prefill and after each one-token step, the logits of the cached
 * decoder equal those of a fresh full forward over the whole prefix, and
 * greedy choices agree, for MHA, GQA, MQA, a sliding window shorter than
 * the sequence (a ring cache), a parallel-residual partial-rotary model
 * and a post-norm one; cache bytes; sampling rules; and the conversion's
 * group means and unchanged model at G = H (model/convert.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "convert.h"
#include "decode.h"
#include "runner.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10;
#else
static const double TOL = 1e-5;
#endif

/* A preset with overrides, randomly initialised and scaled up (x3) so the
 * logits are far from uniform and greedy choices are not near-ties. */
static void make_model(hs_model *m, const char *preset, const char *const *over, int nover,
                       unsigned long long seed)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, preset), HS_OK);
    for (int i = 0; i < nover; i++) {
        int rc = hs_config_override(&c, over[i]);
        if (rc)
            printf("\n    %s: %s", over[i], hs_last_error());
        CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    }
    CU_ASSERT_EQUAL_FATAL(hs_model_init(m, &c), HS_OK);
    hs_model_init_random(m, seed);
    for (size_t i = 0; i < m->n_params; i++)
        m->params[i] *= 3;
}

/* The reference's sliding window, applied to the full forward's maps
 * independently of the attention kernel: entries of keys s <= t - W are
 * set to 0 and each row renormalised over its window, which is the softmax
 * restricted to the window (a no-op once the kernel masks the window). */
static int window_pattern(void *ctx, const hs_site_view *v)
{
    const int W = *(const int *)ctx;
    for (int b = 0; b < v->B; b++)
        for (int h = 0; h < v->heads; h++)
            for (int t = 0; t < v->T; t++) {
                hs_real *row = v->x + b * v->sb + t * v->st + h * v->sh;
                double sum = 0;
                for (int s = 0; s < v->width; s++)
                    if (s <= t - W || s > t)
                        row[s] = 0;
                    else
                        sum += row[s];
                for (int s = 0; s < v->width; s++)
                    row[s] = (hs_real)(row[s] / sum);
            }
    return HS_OK;
}

/* Logits of the last position of a full forward over tok[0..T) (with the
 * model's sliding window applied to its maps, when it has one). */
static void full_logits(hs_real *out, const hs_model *m, const int32_t *tok, int T)
{
    hs_acts a;
    int W = m->cfg.window;
    hs_hooks hooks = { 0 };
    hooks.site[HS_SITE_PATTERN] = (hs_site_hook){ window_pattern, &W };
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m->cfg, 1, T, W ? HS_ACTS_MAPS : HS_ACTS_INFER),
                          HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, tok, NULL, W ? &hooks : NULL), HS_OK);
    memcpy(out, a.logits + (size_t)(T - 1) * m->cfg.vocab_size,
           sizeof(hs_real) * m->cfg.vocab_size);
    hs_acts_free(&a);
}

static int32_t argmax(const hs_real *x, int n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Prefill of `prompt` tokens, then greedy steps up to `total` positions:
 * every step's logits within TOL (relative to max(1, |logit|)) of the full
 * forward's and the same greedy id. */
static void check_cached_equals_full(const hs_model *m, int prompt, int total, const char *what)
{
    const int V = m->cfg.vocab_size;
    int32_t *tok = calloc((size_t)total, sizeof *tok);
    hs_real *ref = calloc((size_t)V, sizeof *ref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    for (int i = 0; i < prompt; i++)
        tok[i] = (int32_t)((i * 37 + 11) % V);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, m, total), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_decoder_feed(&dec, tok, prompt), HS_OK);
    double worst = 0;
    int id_mismatch = 0;
    for (int t = prompt;; t++) {
        full_logits(ref, m, tok, t);
        for (int v = 0; v < V; v++) {
            double e = fabs((double)dec.logits[v] - ref[v]) / fmax(1.0, fabs((double)ref[v]));
            worst = e > worst ? e : worst;
        }
        id_mismatch += argmax(dec.logits, V) != argmax(ref, V);
        if (t == total)
            break;
        tok[t] = argmax(dec.logits, V);
        CU_ASSERT_EQUAL_FATAL(hs_decoder_feed(&dec, &tok[t], 1), HS_OK);
    }
    if (worst > TOL || id_mismatch)
        printf("\n    %s: largest logit difference %.3g, %d greedy ids differ", what, worst,
               id_mismatch);
    CU_ASSERT(worst <= TOL);
    CU_ASSERT_EQUAL(id_mismatch, 0);
    /* feeding past the decoder's length is refused */
    CU_ASSERT_EQUAL(hs_decoder_feed(&dec, tok, 1), HS_EINVAL);
    hs_decoder_free(&dec);
    free(tok);
    free(ref);
}

static void test_mha_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_ctx=40" };
    make_model(&m, "gpt2", over, 2, 1);
    CU_ASSERT_EQUAL(m.cfg.n_kv_head[0], m.cfg.n_head[0]);
    check_cached_equals_full(&m, 5, 24, "gpt2 MHA");
    hs_model_free(&m);
}

static void test_gqa_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_head=4", "n_kv_head=2", "n_ctx=40" };
    make_model(&m, "llama", over, 4, 2);
    check_cached_equals_full(&m, 7, 24, "llama GQA");
    hs_model_free(&m);
}

static void test_mqa_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_head=4", "n_kv_head=1", "n_ctx=40" };
    make_model(&m, "qwen2", over, 4, 3);
    check_cached_equals_full(&m, 1, 20, "qwen2 MQA");
    hs_model_free(&m);
}

/* A window of 4 over 24 positions: the ring cache (4 slots) wraps several
 * times, and the prefill itself is longer than the window. The reference is
 * the full forward with the window applied to its maps by a pattern hook
 * (window_pattern), so it holds with or without the window kernel. */
static void test_window_ring_cache_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_ctx=40", "window=4" };
    make_model(&m, "mistral", over, 3, 4);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 24), HS_OK);
    CU_ASSERT_EQUAL(dec.layer[0].window, 4);
    CU_ASSERT_EQUAL(dec.layer[0].kv.cap, 4);
    hs_decoder_free(&dec);
    check_cached_equals_full(&m, 6, 24, "mistral window 4");
    hs_model_free(&m);
}

static void test_neox_and_post_norm_cached_decoding_equal_recomputation(void)
{
    hs_model m;
    const char *neox[] = { "d_model=32", "n_ctx=40" };
    make_model(&m, "gpt_neox", neox, 2, 5);
    CU_ASSERT(m.cfg.parallel_residual && m.cfg.rotary_dims < m.cfg.head_dim);
    check_cached_equals_full(&m, 3, 16, "gpt_neox");
    hs_model_free(&m);
    const char *tiny[] = { "n_ctx=16" };
    make_model(&m, "tinylm", tiny, 1, 6);
    check_cached_equals_full(&m, 2, 16, "tinylm (post-norm)");
    hs_model_free(&m);
}

/* 2 G cap dh sizeof(hs_real) per layer; a window caches W positions. */
static void test_cache_bytes_hold_kv_heads_only(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_head=4", "n_kv_head=1", "n_ctx=64", "window=8" };
    make_model(&m, "mistral", over, 5, 7);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 50), HS_OK);
    CU_ASSERT_EQUAL(hs_decoder_cache_bytes(&dec),
                    (size_t)m.cfg.n_layer * 2 * 1 * 8 * 8 * sizeof(hs_real));
    hs_decoder_free(&dec);
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 6), HS_OK);
    CU_ASSERT_EQUAL(hs_decoder_cache_bytes(&dec),
                    (size_t)m.cfg.n_layer * 2 * 1 * 6 * 8 * sizeof(hs_real));
    hs_decoder_free(&dec);
    /* beyond the context */
    CU_ASSERT_EQUAL(hs_decoder_init(&dec, &m, 65), HS_EINVAL);
    hs_model_free(&m);
}

static void test_generate_refuses_out_of_vocabulary_and_too_long(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_ctx=16" };
    make_model(&m, "gpt2", over, 2, 8);
    int32_t out[32], bad[2] = { 3, 256 }, ok[2] = { 3, 4 };
    hs_generate_stats st;
    hs_sample_opts so = { 0 };
    CU_ASSERT_EQUAL(hs_generate(out, &st, &m, bad, 2, 4, &so), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "256"));
    CU_ASSERT_EQUAL(hs_generate(out, &st, &m, ok, 2, 15, &so), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "context of 16"));
    CU_ASSERT_EQUAL(hs_generate(out, &st, &m, ok, 2, 14, &so), HS_OK);
    CU_ASSERT_EQUAL(out[0], 3);
    CU_ASSERT_EQUAL(out[1], 4);
    hs_model_free(&m);
}

/* Greedy: argmax with ties to the lowest id. Sampling: top-k keeps only
 * the k largest, a seed repeats its draws, temperature -> 0 tends to greedy. */
static void test_sampling_rules(void)
{
    hs_real logits[6] = { 1, 5, 5, 2, 4, 0 };
    hs_rng rng;
    hs_sample_opts greedy = { 0 }, top2 = { 1.0, 2, 9 }, all = { 100.0, 0, 9 };
    hs_rng_seed(&rng, 1);
    CU_ASSERT_EQUAL(hs_sample_token(logits, 6, &greedy, &rng), 1);
    int seen[6] = { 0 };
    for (int i = 0; i < 400; i++)
        seen[hs_sample_token(logits, 6, &top2, &rng)]++;
    CU_ASSERT(seen[1] > 100 && seen[2] > 100);
    CU_ASSERT_EQUAL(seen[0] + seen[3] + seen[4] + seen[5], 0);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 600; i++)
        seen[hs_sample_token(logits, 6, &all, &rng)]++;
    for (int v = 0; v < 6; v++)
        CU_ASSERT(seen[v] > 50); /* nearly uniform at temperature 100 */
    hs_rng a, b;
    hs_rng_seed(&a, 42), hs_rng_seed(&b, 42);
    for (int i = 0; i < 50; i++)
        CU_ASSERT_EQUAL(hs_sample_token(logits, 6, &all, &a), hs_sample_token(logits, 6, &all, &b));
}

/* ---- convert ------------------------------------------------------------ */

/* New head j's rows are the means of old heads j*r .. j*r+r-1, computed
 * here independently (row by row, in double); other tensors unchanged. */
static void test_convert_pools_group_means(void)
{
    hs_model m, g;
    const char *over[] = { "d_model=32", "n_head=4", "n_ctx=16" };
    make_model(&m, "qwen2", over, 3, 9);
    for (int l = 0; l < m.cfg.n_layer; l++) /* biases are zero after init: make them count */
        for (int i = 0; i < m.cfg.n_kv_head[l] * m.cfg.head_dim; i++)
            m.w.layer[l].attn.b_k[i] = (hs_real)(0.1 * i), m.w.layer[l].attn.b_v[i] = (hs_real)(-0.05 * i);
    CU_ASSERT_EQUAL_FATAL(m.cfg.n_kv_head[0], 4);
    CU_ASSERT_EQUAL_FATAL(hs_convert_kv_heads(&g, &m, 2), HS_OK);
    CU_ASSERT_EQUAL(g.cfg.family, HS_FAMILY_QWEN2);
    const int d = m.cfg.d_model, dh = m.cfg.head_dim;
    double worst = 0;
    for (int l = 0; l < m.cfg.n_layer; l++) {
        CU_ASSERT_EQUAL(g.cfg.n_kv_head[l], 2);
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < dh; i++) {
                for (int c = 0; c < d; c++) {
                    const hs_real *wk = m.w.layer[l].attn.w_k, *wv = m.w.layer[l].attn.w_v;
                    double mk = ((double)wk[((2 * j) * dh + i) * d + c] +
                                 wk[((2 * j + 1) * dh + i) * d + c]) / 2;
                    double mv = ((double)wv[((2 * j) * dh + i) * d + c] +
                                 wv[((2 * j + 1) * dh + i) * d + c]) / 2;
                    worst = fmax(worst, fabs(g.w.layer[l].attn.w_k[(j * dh + i) * d + c] - mk));
                    worst = fmax(worst, fabs(g.w.layer[l].attn.w_v[(j * dh + i) * d + c] - mv));
                }
                double bk = ((double)m.w.layer[l].attn.b_k[2 * j * dh + i] +
                             m.w.layer[l].attn.b_k[(2 * j + 1) * dh + i]) / 2;
                worst = fmax(worst, fabs(g.w.layer[l].attn.b_k[j * dh + i] - bk));
            }
        CU_ASSERT_EQUAL(memcmp(g.w.layer[l].attn.w_q, m.w.layer[l].attn.w_q,
                               sizeof(hs_real) * (size_t)d * d), 0);
    }
    CU_ASSERT(worst < 1e-6);
    hs_model_free(&g);
    CU_ASSERT_EQUAL(hs_convert_kv_heads(&g, &m, 3), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--kv-heads 3"));
    hs_model_free(&m);
}

/* G = H: the same model (bit-identical loss); gpt2 and gpt_neox become the
 * headscope family, the others keep theirs. */
static void test_convert_to_all_heads_keeps_the_loss(void)
{
    static const char *const presets[] = { "gpt2", "gpt_neox", "llama", "mistral", "qwen2" };
    for (int p = 0; p < 5; p++) {
        hs_model m, g;
        const char *over[] = { "d_model=32", "n_head=4", "n_ctx=16" };
        make_model(&m, presets[p], over, 3, 10 + p);
        CU_ASSERT_EQUAL_FATAL(hs_convert_kv_heads(&g, &m, 4), HS_OK);
        CU_ASSERT_EQUAL(g.cfg.family, p < 2 ? HS_FAMILY_HEADSCOPE : m.cfg.family);
        int32_t tok[32];
        for (int i = 0; i < 32; i++)
            tok[i] = (i * 29 + 5) % 256;
        hs_acts a, b;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, 2, 15, HS_ACTS_INFER), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&b, &g.cfg, 2, 15, HS_ACTS_INFER), HS_OK);
        int32_t in[30], tg[30];
        for (int i = 0; i < 30; i++)
            in[i] = tok[i], tg[i] = tok[i + 1];
        CU_ASSERT_EQUAL(hs_forward(&a, &m, in, tg, NULL), HS_OK);
        CU_ASSERT_EQUAL(hs_forward(&b, &g, in, tg, NULL), HS_OK);
        CU_ASSERT_EQUAL(a.loss, b.loss);
        hs_acts_free(&a);
        hs_acts_free(&b);
        hs_model_free(&g);
        hs_model_free(&m);
    }
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_mha_cached_decoding_equals_recomputation",
          test_mha_cached_decoding_equals_recomputation },
        { "test_gqa_cached_decoding_equals_recomputation",
          test_gqa_cached_decoding_equals_recomputation },
        { "test_mqa_cached_decoding_equals_recomputation",
          test_mqa_cached_decoding_equals_recomputation },
        { "test_window_ring_cache_decoding_equals_recomputation",
          test_window_ring_cache_decoding_equals_recomputation },
        { "test_neox_and_post_norm_cached_decoding_equal_recomputation",
          test_neox_and_post_norm_cached_decoding_equal_recomputation },
        { "test_cache_bytes_hold_kv_heads_only", test_cache_bytes_hold_kv_heads_only },
        { "test_generate_refuses_out_of_vocabulary_and_too_long",
          test_generate_refuses_out_of_vocabulary_and_too_long },
        { "test_sampling_rules", test_sampling_rules },
        { "test_convert_pools_group_means", test_convert_pools_group_means },
        { "test_convert_to_all_heads_keeps_the_loss", test_convert_to_all_heads_keeps_the_loss },
    };
    return hs_run_tests("generate", tests, HS_NTESTS(tests));
}
