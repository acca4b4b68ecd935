/* Attention against independent oracles:
 *  - PyTorch fixtures (scripts/oracle/gen_attention.py): nn.MultiheadAttention
 *    for MHA with and without biases, padding and cross-attention, and a
 *    torch grouped-query reference (checked against nn.MultiheadAttention in
 *    that script) for GQA/MQA with head gates. Outputs, per-head maps and all
 *    gradients.
 *  - The same for sliding windows (attention_window.txt: the mask built with
 *    plain Python loops): MHA through nn.MultiheadAttention, GQA, MQA, W = 1,
 *    W >= L, per-head windows, padding, a sequence longer than one query
 *    block; each also decoded in chunks through the KV cache.
 *  - A per-head loop oracle written here with plain loops, sharing no code
 *    with the kernel, that reads the compact K/V the cache returns. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "attention.h"
#include "fixture.h"
#include "runner.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10;
#else
static const double TOL = 1e-4;
#endif

static const char *fixture_path(void) { return HS_FIXTURE_DIR "/attention.txt"; }
static const char *window_fixture_path(void) { return HS_FIXTURE_DIR "/attention_window.txt"; }

static void check(const char *what, const hs_real *got, const fx_case *fc, const char *name)
{
    const fx_tensor *t = fx_tensor_get(fc, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    double e = fx_max_err(got, t->v, t->n, what);
    CU_ASSERT(e <= TOL);
}

/* Entries of att (B,H,L,L) that a window hides (s <= t - W, or s > t), or
 * padding hides, and that are not exactly 0. */
static long nonzero_outside_window(const hs_real *att, const int *win, const unsigned char *valid,
                                   int B, int H, int L)
{
    long bad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < L; t++)
                for (int s = 0; s < L; s++) {
                    int seen = s <= t && (win[h] == 0 || s > t - win[h]) && valid[b * L + s];
                    bad += !seen && att[(((size_t)b * H + h) * L + t) * L + s] != 0;
                }
    return bad;
}

/* Decodes the fixture's x through the KV cache in chunks of 3, 1, 2, ...
 * queries and compares the outputs with the fixture's (full) forward. */
static void check_cached_decoding(const fx_case *fc, const hs_attn_config *c,
                                  const hs_attn_weights *w, const hs_real *x,
                                  const unsigned char *valid, const hs_real *xi)
{
    const int B = (int)fx_int(fc, "B"), T = (int)fx_int(fc, "L"), d = c->d_model;
    hs_kv_cache cache;
    CU_ASSERT_EQUAL_FATAL(
        hs_kv_cache_init(&cache, B, c->n_kv_heads, hs_attn_head_dim(c), T), HS_OK);
    hs_real *out = calloc((size_t)B * T * d, sizeof(hs_real));
    static const int sizes[4] = { 3, 1, 2, 5 };
    for (int t0 = 0, i = 0; t0 < T; i++) {
        const int n = sizes[i % 4] < T - t0 ? sizes[i % 4] : T - t0, S = t0 + n;
        hs_real *xc = malloc(sizeof(hs_real) * B * n * d), *oc = malloc(sizeof(hs_real) * B * n * d);
        unsigned char *vc = malloc((size_t)B * S);
        for (int b = 0; b < B; b++) {
            memcpy(xc + (size_t)b * n * d, x + ((size_t)b * T + t0) * d, sizeof(hs_real) * n * d);
            memcpy(vc + (size_t)b * S, valid + (size_t)b * T, (size_t)S);
        }
        hs_attn_mask mask = { 1, vc, 0 };
        hs_attn_acts a;
        CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, c, B, n, n, S, 0), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_attn_forward(oc, &a, w, c, xc, NULL, xi, &mask, &cache), HS_OK);
        for (int b = 0; b < B; b++)
            memcpy(out + ((size_t)b * T + t0) * d, oc + (size_t)b * n * d, sizeof(hs_real) * n * d);
        hs_attn_acts_free(&a);
        free(xc), free(oc), free(vc);
        t0 += n;
    }
    check("cached out", out, fc, "out");
    hs_kv_cache_free(&cache);
    free(out);
}

/* Runs one fixture case through forward and backward and compares every
 * tensor the fixture holds. A case with head_window runs with those windows:
 * through hs_attn_config.window when every head has the same one, else
 * through head_window; it is also decoded through the cache. */
static void run_case_in(const char *path, const char *name)
{
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, path, name), 0);
    printf("\n  case %s\n", name);
    const int B = (int)fx_int(&fc, "B"), L = (int)fx_int(&fc, "L"), S = (int)fx_int(&fc, "S");
    hs_attn_config c = { .d_model = (int)fx_int(&fc, "d"), .n_heads = (int)fx_int(&fc, "H"),
                         .n_kv_heads = (int)fx_int(&fc, "G"), .bias = (int)fx_int(&fc, "bias") };
    const int cross = (int)fx_int(&fc, "cross"), gates = (int)fx_int(&fc, "gates");
    const int d = c.d_model, H = c.n_heads;
    const fx_tensor *hw = fx_tensor_get(&fc, "head_window");
    int win[16] = { 0 }, same = 1;
    CU_ASSERT_FATAL(H <= 16);
    for (int h = 0; hw && h < H; h++) {
        win[h] = (int)hw->v[h];
        same = same && win[h] == win[0];
    }
    if (hw && same)
        c.window = win[0];
    else if (hw)
        c.head_window = win;
    CU_ASSERT_EQUAL_FATAL(hs_attn_config_check(&c), HS_OK);

    size_t np = hs_attn_param_count(&c);
    hs_real *params = calloc(np, sizeof(hs_real)), *grads = calloc(np, sizeof(hs_real));
    hs_attn_weights w, dw;
    hs_attn_weights_bind(&w, &c, params);
    hs_attn_weights_bind(&dw, &c, grads);
    const char *wn[8] = { "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o" };
    hs_real *wp[8] = { w.w_q, w.w_k, w.w_v, w.w_o, w.b_q, w.b_k, w.b_v, w.b_o };
    for (int i = 0; i < 8; i++) {
        if (!wp[i])
            continue;
        const fx_tensor *t = fx_tensor_get(&fc, wn[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        for (size_t k = 0; k < t->n; k++)
            wp[i][k] = (hs_real)t->v[k];
    }
    hs_real *x = fx_real(&fc, "x"), *y = cross ? fx_real(&fc, "y") : NULL;
    hs_real *gout = fx_real(&fc, "gout"), *xi = gates ? fx_real(&fc, "xi") : NULL;
    const fx_tensor *vt = fx_tensor_get(&fc, "valid");
    CU_ASSERT_PTR_NOT_NULL_FATAL(vt);
    unsigned char *valid = malloc(vt->n);
    for (size_t k = 0; k < vt->n; k++)
        valid[k] = vt->v[k] != 0;
    hs_attn_mask mask = { (int)fx_int(&fc, "causal"), valid, 0 };

    hs_attn_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &c, B, L, S, S, 1), HS_OK);
    hs_real *out = calloc((size_t)B * L * d, sizeof(hs_real));
    int rc = hs_attn_forward(out, &a, &w, &c, x, y, xi, &mask, NULL);
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    check("out", out, &fc, "out");
    if (!hw || fx_tensor_get(&fc, "att"))
        check("att", a.att, &fc, "att");
    if (hw) {
        long bad = nonzero_outside_window(a.att, win, valid, B, H, L);
        printf("    maps: %ld entries outside the window not exactly 0\n", bad);
        CU_ASSERT_EQUAL(bad, 0);
    }

    hs_real *dx = calloc((size_t)B * L * d, sizeof(hs_real));
    hs_real *dy = cross ? calloc((size_t)B * S * d, sizeof(hs_real)) : NULL;
    hs_real *dxi = gates ? calloc(H, sizeof(hs_real)) : NULL;
    rc = hs_attn_backward(dx, dy, &dw, dxi, gout, &a, &w, &c, x, y, xi, 0, &mask);
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    check("dx", dx, &fc, "dx");
    if (cross)
        check("dy", dy, &fc, "dy");
    if (gates)
        check("dxi", dxi, &fc, "dxi");
    hs_real *dp[8] = { dw.w_q, dw.w_k, dw.w_v, dw.w_o, dw.b_q, dw.b_k, dw.b_v, dw.b_o };
    for (int i = 0; i < 8; i++) {
        if (!dp[i])
            continue;
        char gname[16];
        snprintf(gname, sizeof gname, "d%s", wn[i]);
        check(gname, dp[i], &fc, gname);
    }
    if (hw)
        check_cached_decoding(&fc, &c, &w, x, valid, xi);

    hs_attn_acts_free(&a);
    free(params), free(grads), free(x), free(y), free(gout), free(xi), free(valid);
    free(out), free(dx), free(dy), free(dxi);
    fx_free(&fc);
}

static void run_fixture_case(const char *name) { run_case_in(fixture_path(), name); }

static void test_matches_torch_mha_causal(void) { run_fixture_case("mha_causal"); }
static void test_matches_torch_mha_bias_padding(void) { run_fixture_case("mha_bias_padding"); }
static void test_matches_torch_mha_cross_attention(void) { run_fixture_case("mha_cross"); }
static void test_matches_torch_gqa_with_gates(void) { run_fixture_case("gqa_gates"); }
static void test_matches_torch_mqa_with_gates(void) { run_fixture_case("mqa_gates"); }

static void run_window_case(const char *name) { run_case_in(window_fixture_path(), name); }
static void test_window_matches_torch_mha(void) { run_window_case("win_mha"); }
static void test_window_matches_torch_gqa_padding(void) { run_window_case("win_gqa"); }
static void test_window_one_matches_torch_mqa(void) { run_window_case("win_mqa_w1"); }
static void test_window_wider_than_sequence_matches_torch(void) { run_window_case("win_wide"); }
static void test_per_head_windows_match_torch(void) { run_window_case("win_heads"); }
static void test_window_across_query_blocks_matches_torch(void) { run_window_case("win_long"); }

/* ---------------------------------------------------------------------- */
/* Per-head loop oracle: plain loops over every index, no BLAS, no blocking. */

static unsigned long long rng_state = 88172645463325252ULL;
static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1;
}

/* out[n][o] = sum_i in[n][i] * w[o][i] (+ b[o]), in double. */
static void naive_linear(double *out, const hs_real *in, const hs_real *w, const hs_real *b, int N,
                         int C, int OC)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < C; i++)
                s += (double)in[n * C + i] * w[o * C + i];
            out[n * OC + o] = s;
        }
}

static void per_head_loop_case(int G)
{
    const int B = 2, T = 7, d = 24, H = 4, dh = d / H;
    hs_attn_config c = { .d_model = d, .n_heads = H, .n_kv_heads = G, .bias = 1 };
    size_t np = hs_attn_param_count(&c);
    hs_real *params = malloc(np * sizeof(hs_real));
    for (size_t i = 0; i < np; i++)
        params[i] = (hs_real)(uniform() * 0.4);
    hs_attn_weights w;
    hs_attn_weights_bind(&w, &c, params);
    hs_real *x = malloc(sizeof(hs_real) * B * T * d);
    for (int i = 0; i < B * T * d; i++)
        x[i] = (hs_real)uniform();
    unsigned char valid[2 * 7] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0 };
    hs_attn_mask mask = { 1, valid, 0 };

    hs_kv_cache cache;
    CU_ASSERT_EQUAL_FATAL(hs_kv_cache_init(&cache, B, G, dh, T), HS_OK);
    hs_attn_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &c, B, T, T, T, 1), HS_OK);
    hs_real *out = malloc(sizeof(hs_real) * B * T * d);
    CU_ASSERT_EQUAL_FATAL(hs_attn_forward(out, &a, &w, &c, x, NULL, NULL, &mask, &cache), HS_OK);
    CU_ASSERT_EQUAL(cache.len, T);

    /* The oracle: q from a naive projection, K/V read from the compact cache
     * at head h / (H/G), scores, masked softmax and the mix, head by head. */
    double *q = malloc(sizeof(double) * B * T * d), *zc = malloc(sizeof(double) * B * T * d);
    naive_linear(q, x, w.w_q, w.b_q, B * T, d, d);
    double worst_att = 0, worst_out = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int kvh = h / (H / G);
            const hs_real *K = cache.k + ((size_t)b * G + kvh) * cache.cap * dh;
            const hs_real *V = cache.v + ((size_t)b * G + kvh) * cache.cap * dh;
            for (int t = 0; t < T; t++) {
                double p[7], mx = -INFINITY, sum = 0;
                for (int s = 0; s < T; s++) {
                    int allowed = s <= t && valid[b * T + s];
                    double sc = 0;
                    for (int i = 0; i < dh; i++)
                        sc += q[(b * T + t) * d + h * dh + i] * K[s * dh + i];
                    p[s] = allowed ? sc / sqrt((double)dh) : -INFINITY;
                    if (p[s] > mx)
                        mx = p[s];
                }
                for (int s = 0; s < T; s++)
                    sum += p[s] = p[s] == -INFINITY ? 0 : exp(p[s] - mx);
                for (int s = 0; s < T; s++) {
                    p[s] /= sum;
                    double e = fabs(p[s] - a.att[(((size_t)b * H + h) * T + t) * T + s]);
                    worst_att = e > worst_att ? e : worst_att;
                }
                for (int i = 0; i < dh; i++) {
                    double acc = 0;
                    for (int s = 0; s < T; s++)
                        acc += p[s] * V[s * dh + i];
                    zc[(b * T + t) * d + h * dh + i] = acc;
                }
            }
        }
    for (int n = 0; n < B * T; n++)
        for (int o = 0; o < d; o++) {
            double s = w.b_o[o];
            for (int i = 0; i < d; i++)
                s += zc[n * d + i] * w.w_o[o * d + i];
            double e = fabs(s - out[n * d + o]) / (fabs(s) > 1 ? fabs(s) : 1);
            worst_out = e > worst_out ? e : worst_out;
        }
    printf("\n    G=%d: loop oracle max err att %.3g out %.3g\n", G, worst_att, worst_out);
    CU_ASSERT(worst_att <= TOL);
    CU_ASSERT(worst_out <= TOL);

    free(q), free(zc), free(out), free(x), free(params);
    hs_attn_acts_free(&a);
    hs_kv_cache_free(&cache);
}

static void test_per_head_loop_oracle_mha(void) { per_head_loop_case(4); }
static void test_per_head_loop_oracle_gqa(void) { per_head_loop_case(2); }
static void test_per_head_loop_oracle_mqa(void) { per_head_loop_case(1); }

int main(void)
{
    static const hs_test tests[] = {
        { "test_matches_torch_mha_causal", test_matches_torch_mha_causal },
        { "test_matches_torch_mha_bias_padding", test_matches_torch_mha_bias_padding },
        { "test_matches_torch_mha_cross_attention", test_matches_torch_mha_cross_attention },
        { "test_matches_torch_gqa_with_gates", test_matches_torch_gqa_with_gates },
        { "test_matches_torch_mqa_with_gates", test_matches_torch_mqa_with_gates },
        { "test_window_matches_torch_mha", test_window_matches_torch_mha },
        { "test_window_matches_torch_gqa_padding", test_window_matches_torch_gqa_padding },
        { "test_window_one_matches_torch_mqa", test_window_one_matches_torch_mqa },
        { "test_window_wider_than_sequence_matches_torch",
          test_window_wider_than_sequence_matches_torch },
        { "test_per_head_windows_match_torch", test_per_head_windows_match_torch },
        { "test_window_across_query_blocks_matches_torch",
          test_window_across_query_blocks_matches_torch },
        { "test_per_head_loop_oracle_mha", test_per_head_loop_oracle_mha },
        { "test_per_head_loop_oracle_gqa", test_per_head_loop_oracle_gqa },
        { "test_per_head_loop_oracle_mqa", test_per_head_loop_oracle_mqa },
    };
    return hs_run_tests("attention_oracle_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
