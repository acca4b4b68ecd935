/* Model-level decoding (model/decode.h) against full recomputation: after
 * a prefill and after each one-token step, the logits of the cached
 * decoder equal those of a fresh full forward over the whole prefix, and
 * greedy choices agree, for MHA, GQA, MQA, a sliding window shorter than
 * the sequence (a ring cache), a parallel-residual partial-rotary model,
 * a post-norm one, multi-head latent attention (the latent cache, with
 * and without q_lora_rank) and the families of SPEC §14 (soft-capping,
 * sliding layers by pattern, q/k norms, sublayer output norms); cache bytes; sampling rules; and the conversion's
 * group means and unchanged model at G = H (model/convert.h); the
 * decoder's watched argmax (SPEC §18's copy rule) against the maps. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "convert.h"
#include "rng.h"
#include "decode.h"
#include "fixture.h"
#include "mla.h"
#include "runner.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10;
#else
static const double TOL = 1e-5;
#endif

static void test_mha_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_ctx=40" };
    fx_make_model(&m, "gpt2", over, 2, 1);
    CU_ASSERT_EQUAL(m.cfg.n_kv_head[0], m.cfg.n_head[0]);
    fx_check_decoding(&m, 5, 24, TOL, "gpt2 MHA");
    hs_model_free(&m);
}

static void test_gqa_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_head=4", "n_kv_head=2", "n_ctx=40" };
    fx_make_model(&m, "llama", over, 4, 2);
    fx_check_decoding(&m, 7, 24, TOL, "llama GQA");
    hs_model_free(&m);
}

static void test_mqa_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_head=4", "n_kv_head=1", "n_ctx=40" };
    fx_make_model(&m, "qwen2", over, 4, 3);
    fx_check_decoding(&m, 1, 20, TOL, "qwen2 MQA");
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
    fx_make_model(&m, "mistral", over, 3, 4);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 24), HS_OK);
    CU_ASSERT_EQUAL(dec.layer[0].window, 4);
    CU_ASSERT_EQUAL(dec.layer[0].kv.cap, 4);
    hs_decoder_free(&dec);
    fx_check_decoding(&m, 6, 24, TOL, "mistral window 4");
    hs_model_free(&m);
}

/* Queries and keys scaled by k: rows peaked instead of near uniform. */
static void sharpen(hs_model *m, hs_real k)
{
    const hs_model_config *c = &m->cfg;
    for (int l = 0; l < c->n_layer; l++) {
        const hs_attn_config ac = hs_config_attn(c, l);
        const size_t dh = (size_t)hs_attn_head_dim(&ac), d = (size_t)c->d_model;
        hs_attn_weights *w = &m->w.layer[l].attn;
        for (size_t i = 0; i < (size_t)ac.n_heads * dh * d; i++)
            w->w_q[i] *= k;
        for (size_t i = 0; i < (size_t)ac.n_kv_heads * dh * d; i++)
            w->w_k[i] *= k;
    }
}

/* SPEC §18's copy rule reads, after each feed, the position of each head's
 * largest weight in the last row (hs_decoder_watch): equal to the full
 * forward's maps on MHA, GQA, a ring cache (window 4 over 24 positions:
 * slots are not positions) and layers of mixed windows, with attention
 * peaked enough that nearly every row is compared. */
static void test_watched_argmax_equals_the_maps(void)
{
    static const struct {
        const char *family, *over[4];
        int n;
    } cases[] = {
        { "gpt2", { "d_model=32", "n_ctx=40" }, 2 },
        { "llama", { "d_model=32", "n_head=4", "n_kv_head=2", "n_ctx=40" }, 4 },
        { "mistral", { "d_model=32", "n_ctx=40", "window=4" }, 3 },
        { "gemma3", { "d_model=32", "n_ctx=40", "n_layer=3", "window=4" }, 4 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hs_model m;
        fx_make_model(&m, cases[i].family, cases[i].over, cases[i].n, (int)i + 11);
        sharpen(&m, 40);
        int heads = 0;
        for (int l = 0; l < m.cfg.n_layer; l++)
            heads += m.cfg.n_head[l];
        const int rows = heads * (24 - 6 + 1), compared = fx_check_decoding(&m, 6, 24, 1e-3,
                                                                             cases[i].family);
        if (compared < rows * 9 / 10)
            printf("\n    %s: %d of %d rows compared", cases[i].family, compared, rows);
        CU_ASSERT(compared >= rows * 9 / 10);
        hs_model_free(&m);
    }
}

/* A prefill longer than HS_DECODE_ROWS runs in several forwards: the same
 * logits and watched rows as one full forward, under GQA and under a KV
 * plan's per-head caches (sinks and a ring that wraps). */
static void test_long_prefill_runs_in_chunks(void)
{
    const char *over[] = { "d_model=32", "n_head=4", "n_kv_head=2", "n_ctx=700" };
    hs_model m;
    fx_make_model(&m, "llama", over, 4, 21);
    sharpen(&m, 10);
    fx_check_decoding(&m, HS_DECODE_ROWS + 90, HS_DECODE_ROWS + 94, 1e-4, "llama, long prefill");
    int w[8] = { 7, 7, 0, 0, 0, 0, 7, 7 }; /* kv heads (0, 0) and (1, 1) streaming */
    CU_ASSERT_EQUAL_FATAL(hs_config_set_windows(&m.cfg, w), HS_OK);
    m.cfg.sink = 3;
    fx_check_decoding(&m, HS_DECODE_ROWS + 90, HS_DECODE_ROWS + 94, 1e-4, "llama, long prefill, plan");
    /* the streaming heads hold S + W = 10 positions, the others all 604 */
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 604), HS_OK);
    const size_t want = 2 * (size_t)(604 + 10) * 2 * 8 * sizeof(hs_real);
    CU_ASSERT_EQUAL(hs_decoder_cache_bytes(&dec), want);
    CU_ASSERT_EQUAL((size_t)hs_kv_cache_bytes(&m.cfg, 1, 604, sizeof(hs_real)), want);
    hs_decoder_free(&dec);
    hs_model_free(&m);
}

static void test_neox_and_post_norm_cached_decoding_equal_recomputation(void)
{
    hs_model m;
    const char *neox[] = { "d_model=32", "n_ctx=40" };
    fx_make_model(&m, "gpt_neox", neox, 2, 5);
    CU_ASSERT(m.cfg.parallel_residual && m.cfg.rotary_dims < m.cfg.head_dim);
    fx_check_decoding(&m, 3, 16, TOL, "gpt_neox");
    hs_model_free(&m);
    const char *tiny[] = { "n_ctx=16" };
    fx_make_model(&m, "tinylm", tiny, 1, 6);
    fx_check_decoding(&m, 2, 16, TOL, "tinylm (post-norm)");
    hs_model_free(&m);
}

/* The Gemma family from its presets: GeGLU, (1 + w) norms and the sqrt(d)
 * embedding (gemma); sublayer output norms, both soft-caps (small enough
 * to act) and a ring cache on the sliding (even) layers only (gemma2,
 * window 4); per-head q/k norms,
 * a global layer every third and the local RoPE base on the sliding ones
 * (gemma3). */
static void test_gemma_families_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *g1[] = { "d_model=32", "n_ctx=40" };
    fx_make_model(&m, "gemma", g1, 2, 21);
    CU_ASSERT_FATAL(m.cfg.family == HS_FAMILY_GEMMA && m.cfg.mlp == HS_MLP_GEGLU &&
                    m.cfg.norm_offset && m.cfg.embed_scale);
    fx_check_decoding(&m, 4, 20, TOL, "gemma");
    hs_model_free(&m);
    /* caps small enough to bend these small scores and logits */
    const char *g2[] = { "d_model=32", "n_ctx=40", "window=4", "attn_softcap=0.05",
                         "final_softcap=0.5" };
    fx_make_model(&m, "gemma2", g2, 5, 22);
    CU_ASSERT_FATAL(m.cfg.out_norm && m.cfg.attn_softcap > 0 && m.cfg.final_softcap > 0);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 24), HS_OK);
    CU_ASSERT_EQUAL(dec.layer[0].window, 4); /* a ring on the sliding layer */
    CU_ASSERT_EQUAL(dec.layer[0].kv.cap, 4);
    CU_ASSERT_EQUAL(dec.layer[1].window, 0); /* every position on the global one */
    CU_ASSERT_EQUAL(dec.layer[1].kv.cap, 24);
    hs_decoder_free(&dec);
    fx_check_decoding(&m, 6, 24, TOL, "gemma2 (window 4 on layer 0, soft-caps)");
    hs_model_free(&m);
    const char *g3[] = { "d_model=32", "n_ctx=40", "n_layer=3", "window=4", "window_pattern=3" };
    fx_make_model(&m, "gemma3", g3, 5, 23);
    CU_ASSERT_FATAL(m.cfg.qk_norm == HS_QK_NORM_HEAD && m.cfg.rope_local_theta > 0);
    CU_ASSERT_EQUAL(hs_config_layer_window(&m.cfg, 1), 4);
    CU_ASSERT_EQUAL(hs_config_layer_window(&m.cfg, 2), 0);
    fx_check_decoding(&m, 5, 24, TOL, "gemma3 (two sliding layers, one global)");
    hs_model_free(&m);
}

/* qwen3's per-head q/k norms; olmo2's norms after the sublayers and over
 * the whole projections; phi3's partial rotary and a window (ring) on
 * every layer. */
static void test_qwen3_olmo2_phi3_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *q3[] = { "d_model=32", "n_ctx=40", "head_dim=16" };
    fx_make_model(&m, "qwen3", q3, 3, 24);
    CU_ASSERT_FATAL(m.cfg.family == HS_FAMILY_QWEN3 && m.cfg.qk_norm == HS_QK_NORM_HEAD);
    fx_check_decoding(&m, 3, 20, TOL, "qwen3");
    hs_model_free(&m);
    const char *o2[] = { "d_model=32", "n_ctx=40" };
    fx_make_model(&m, "olmo2", o2, 2, 25);
    CU_ASSERT_FATAL(m.cfg.no_input_norm && m.cfg.out_norm && m.cfg.qk_norm == HS_QK_NORM_PROJ);
    /* float: its norms over whole projections and after each sublayer rescale
     * the rounding of the decoder's one-row products (1.0e-5 in the AVX2
     * build); the double build holds it to TOL */
    fx_check_decoding(&m, 1, 20, sizeof(hs_real) == 8 ? TOL : 3e-5, "olmo2");
    hs_model_free(&m);
    const char *p3[] = { "d_model=32", "n_ctx=40", "n_kv_head=2", "rotary_dims=4", "window=5" };
    fx_make_model(&m, "phi3", p3, 5, 26);
    CU_ASSERT_FATAL(m.cfg.family == HS_FAMILY_PHI3 && m.cfg.rotary_dims == 4);
    fx_check_decoding(&m, 7, 24, TOL, "phi3 (partial rotary, window 5)");
    hs_model_free(&m);
}

/* Multi-head latent attention: every layer's cache is its latent cache
 * only (kv_lora_rank + qk_rope_head_dim values per position), read through
 * the absorbed step; with a plain q_proj and with q_lora_rank, a prefill
 * longer than one token and a single-token one. v_head_dim differs from
 * qk_nope_head_dim, as in the fixtures of test_mla. */
static void test_mla_cached_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *plain[] = { "d_model=32", "n_ctx=40", "v_head_dim=12" };
    fx_make_model(&m, "mla", plain, 3, 11);
    CU_ASSERT_FATAL(m.cfg.mla && m.cfg.q_lora_rank == 0);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 24), HS_OK);
    for (int l = 0; l < m.cfg.n_layer; l++) {
        CU_ASSERT_EQUAL(dec.layer[l].kind, HS_LAYER_CACHE_OTHER);
        CU_ASSERT_PTR_NULL(dec.layer[l].kv.k); /* no per-head keys or values */
    }
    hs_decoder_free(&dec);
    fx_check_decoding(&m, 6, 24, TOL, "mla (q_proj)");
    hs_model_free(&m);
    const char *qlora[] = { "d_model=32", "n_ctx=40", "q_lora_rank=12", "kv_lora_rank=16" };
    fx_make_model(&m, "mla", qlora, 4, 12);
    CU_ASSERT_FATAL(m.cfg.q_lora_rank == 12);
    fx_check_decoding(&m, 1, 20, TOL, "mla (q_lora_rank 12)");
    hs_model_free(&m);
}

/* An MLA decoder holds (kv_lora_rank + qk_rope_head_dim) sizeof(hs_real)
 * per position and layer, hs_mla_cache_bytes per layer (the kv-bytes
 * --mla-latent/--mla-rope figure); reset forgets the latents, so the same
 * prompt gives the same logits again. */
static void test_mla_cache_bytes_and_reset(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_ctx=64", "n_layer=3" };
    fx_make_model(&m, "mla", over, 3, 13);
    const hs_model_config *c = &m.cfg;
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 50), HS_OK);
    const size_t want = (size_t)3 * (c->kv_lora_rank + c->qk_rope_head_dim) * 50 * sizeof(hs_real);
    CU_ASSERT_EQUAL(hs_decoder_cache_bytes(&dec), want);
    CU_ASSERT_EQUAL(hs_decoder_cache_bytes(&dec),
                    3 * hs_mla_cache_bytes(1, c->kv_lora_rank, c->qk_rope_head_dim, 50));
    const int32_t prompt[4] = { 7, 200, 31, 7 };
    const int V = c->vocab_size;
    hs_real *first = calloc((size_t)V, sizeof *first);
    CU_ASSERT_PTR_NOT_NULL_FATAL(first);
    CU_ASSERT_EQUAL_FATAL(hs_decoder_feed(&dec, prompt, 4), HS_OK);
    memcpy(first, dec.logits, sizeof(hs_real) * V);
    CU_ASSERT_EQUAL_FATAL(hs_decoder_feed(&dec, prompt, 2), HS_OK);
    hs_decoder_reset(&dec);
    CU_ASSERT_EQUAL(((const hs_mla_cache *)dec.layer[0].other)->len, 0);
    CU_ASSERT_EQUAL_FATAL(hs_decoder_feed(&dec, prompt, 4), HS_OK);
    CU_ASSERT_EQUAL(memcmp(first, dec.logits, sizeof(hs_real) * V), 0);
    free(first);
    hs_decoder_free(&dec);
    hs_model_free(&m);
}

/* 2 G cap dh sizeof(hs_real) per layer; a window caches W positions. */
static void test_cache_bytes_hold_kv_heads_only(void)
{
    hs_model m;
    const char *over[] = { "d_model=32", "n_head=4", "n_kv_head=1", "n_ctx=64", "window=8" };
    fx_make_model(&m, "mistral", over, 5, 7);
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
    fx_make_model(&m, "gpt2", over, 2, 8);
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
    fx_make_model(&m, "qwen2", over, 3, 9);
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

/* OLMo-2's k norm spans the whole projection, a weight per key head's
 * dims: pooled with the heads (a per-head norm's weight is shared, kept). */
static void test_convert_pools_a_whole_projection_k_norm(void)
{
    hs_model m, g;
    const char *over[] = { "d_model=32", "n_head=4", "n_ctx=16" };
    fx_make_model(&m, "olmo2", over, 3, 20);
    const int dh = m.cfg.head_dim;
    for (int l = 0; l < m.cfg.n_layer; l++)
        for (int i = 0; i < 4 * dh; i++)
            m.w.layer[l].attn.k_norm[i] = (hs_real)(1 + 0.01 * i);
    CU_ASSERT_EQUAL_FATAL(hs_convert_kv_heads(&g, &m, 2), HS_OK);
    double worst = 0;
    for (int l = 0; l < m.cfg.n_layer; l++)
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < dh; i++) {
                const double want = ((double)m.w.layer[l].attn.k_norm[2 * j * dh + i] +
                                     m.w.layer[l].attn.k_norm[(2 * j + 1) * dh + i]) / 2;
                worst = fmax(worst, fabs(g.w.layer[l].attn.k_norm[j * dh + i] - want));
            }
    CU_ASSERT(worst < 1e-6);
    CU_ASSERT_EQUAL(g.cfg.family, HS_FAMILY_OLMO2);
    hs_model_free(&g);
    hs_model_free(&m);
}

/* G = H: the same model (bit-identical loss); gpt2 and gpt_neox become the
 * headscope family, the others keep theirs. */
static void test_convert_to_all_heads_keeps_the_loss(void)
{
    static const char *const presets[] = { "gpt2",   "gpt_neox", "llama",  "mistral", "qwen2",
                                           "gemma2", "gemma3",   "qwen3",  "olmo2",   "phi3" };
    for (int p = 0; p < 10; p++) {
        hs_model m, g;
        const char *over[] = { "d_model=32", "n_head=4", "n_ctx=16" };
        fx_make_model(&m, presets[p], over, 3, 10 + p);
        for (size_t i = 0; i < m.n_params; i++) /* off their initial values: a tensor */
            m.params[i] += (hs_real)(0.01 * (double)(i % 7)); /* left uncopied shows */
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
        { "test_mla_cached_decoding_equals_recomputation",
          test_mla_cached_decoding_equals_recomputation },
        { "test_gemma_families_cached_decoding_equals_recomputation",
          test_gemma_families_cached_decoding_equals_recomputation },
        { "test_qwen3_olmo2_phi3_cached_decoding_equals_recomputation",
          test_qwen3_olmo2_phi3_cached_decoding_equals_recomputation },
        { "test_watched_argmax_equals_the_maps", test_watched_argmax_equals_the_maps },
        { "test_long_prefill_runs_in_chunks", test_long_prefill_runs_in_chunks },
        { "test_mla_cache_bytes_and_reset", test_mla_cache_bytes_and_reset },
        { "test_cache_bytes_hold_kv_heads_only", test_cache_bytes_hold_kv_heads_only },
        { "test_generate_refuses_out_of_vocabulary_and_too_long",
          test_generate_refuses_out_of_vocabulary_and_too_long },
        { "test_sampling_rules", test_sampling_rules },
        { "test_convert_pools_group_means", test_convert_pools_group_means },
        { "test_convert_pools_a_whole_projection_k_norm",
          test_convert_pools_a_whole_projection_k_norm },
        { "test_convert_to_all_heads_keeps_the_loss", test_convert_to_all_heads_keeps_the_loss },
    };
    return hs_run_tests("generate", tests, HS_NTESTS(tests));
}
