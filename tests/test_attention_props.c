/* Properties of the attention module that need no external oracle: cache
 * split, causality, parameter counts, negative controls, configuration
 * validation, padding, memory without maps, sliding windows (W >= T is the
 * causal kernel bit for bit, keys outside every window are never read, maps
 * exactly 0 outside the window, cached decoding), and (double build) finite
 * differences of every gradient. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "attention.h"
#include "runner.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-12;
#else
static const double TOL = 1e-5;
#endif

static unsigned long long rng_state = 0x9E3779B97F4A7C15ULL;
static hs_real uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (hs_real)((double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1);
}

static hs_real *random_vec(size_t n, double scale)
{
    hs_real *v = malloc(sizeof(hs_real) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        v[i] = (hs_real)(uniform() * scale);
    return v;
}

/* Largest |a-b| / max(1,|b|). */
static double max_err(const hs_real *a, const hs_real *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs((double)b[i]) > 1 ? fabs((double)b[i]) : 1;
        double e = fabs((double)a[i] - (double)b[i]) / den;
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

/* A module with random weights. */
typedef struct {
    hs_attn_config c;
    hs_real *params;
    hs_attn_weights w;
} module;

static void module_init(module *m, int d, int H, int G, int bias)
{
    m->c = (hs_attn_config){ .d_model = d, .n_heads = H, .n_kv_heads = G, .bias = bias };
    CU_ASSERT_EQUAL_FATAL(hs_attn_config_check(&m->c), HS_OK);
    m->params = random_vec(hs_attn_param_count(&m->c), 0.5);
    hs_attn_weights_bind(&m->w, &m->c, m->params);
}

/* out (B,L,d) of a cache-free forward; maps copied to att when non-NULL. */
static int forward(hs_real *out, hs_real *att, const module *m, const hs_real *x, int B, int L,
                   const hs_attn_mask *mask)
{
    hs_attn_acts a;
    int rc = hs_attn_acts_alloc(&a, &m->c, B, L, L, L, att != NULL);
    if (rc)
        return rc;
    rc = hs_attn_forward(out, &a, &m->w, &m->c, x, NULL, NULL, mask, NULL);
    if (!rc && att)
        memcpy(att, a.att, sizeof(hs_real) * B * m->c.n_heads * L * L);
    hs_attn_acts_free(&a);
    return rc;
}

/* Feeds x in chunks through the cache; out (B,T,d). */
static void forward_chunks(hs_real *out, hs_kv_cache *cache, const module *m, const hs_real *x,
                           int B, int T, const int *chunks, int nchunks,
                           const unsigned char *valid)
{
    const int d = m->c.d_model, dh = d / m->c.n_heads;
    CU_ASSERT_EQUAL_FATAL(hs_kv_cache_init(cache, B, m->c.n_kv_heads, dh, T), HS_OK);
    int t0 = 0;
    for (int i = 0; i < nchunks; i++) {
        const int n = chunks[i], S = t0 + n;
        hs_real *xc = malloc(sizeof(hs_real) * B * n * d), *oc = malloc(sizeof(hs_real) * B * n * d);
        unsigned char *vc = valid ? malloc((size_t)B * S) : NULL;
        for (int b = 0; b < B; b++) {
            memcpy(xc + (size_t)b * n * d, x + ((size_t)b * T + t0) * d, sizeof(hs_real) * n * d);
            if (vc)
                memcpy(vc + (size_t)b * S, valid + (size_t)b * T, (size_t)S);
        }
        hs_attn_mask mask = { 1, vc, 0 };
        hs_attn_acts a;
        CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &m->c, B, n, n, S, 0), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_attn_forward(oc, &a, &m->w, &m->c, xc, NULL, NULL, &mask, cache),
                              HS_OK);
        for (int b = 0; b < B; b++)
            memcpy(out + ((size_t)b * T + t0) * d, oc + (size_t)b * n * d, sizeof(hs_real) * n * d);
        hs_attn_acts_free(&a);
        free(xc), free(oc), free(vc);
        t0 += n;
    }
}

static void cache_split_case(int G)
{
    const int B = 2, T = 5, d = 12, H = 4, dh = d / H;
    module m;
    module_init(&m, d, H, G, 0);
    hs_real *x = random_vec((size_t)B * T * d, 1);
    hs_real *full = malloc(sizeof(hs_real) * B * T * d), *split = malloc(sizeof(hs_real) * B * T * d);
    hs_attn_mask causal = { 1, NULL, 0 };

    hs_attn_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &m.c, B, T, T, T, 0), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_attn_forward(full, &a, &m.w, &m.c, x, NULL, NULL, &causal, NULL), HS_OK);

    hs_kv_cache cache;
    const int chunks[2] = { 2, 3 };
    forward_chunks(split, &cache, &m, x, B, T, chunks, 2, NULL);
    double e = max_err(split, full, (size_t)B * T * d);
    printf("\n    G=%d: 2+3 cached vs full max err %.3g\n", G, e);
    CU_ASSERT(e <= TOL);

    /* The returned cache is compact, (B, G, T, dh), and holds exactly the
     * projected keys and values of the full forward. */
    CU_ASSERT_EQUAL(cache.B, B);
    CU_ASSERT_EQUAL(cache.G, G);
    CU_ASSERT_EQUAL(cache.len, T);
    CU_ASSERT_EQUAL(cache.dh, dh);
    double ek = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < G; j++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < dh; i++) {
                    size_t c_at = (((size_t)b * G + j) * cache.cap + t) * dh + i;
                    size_t p_at = ((size_t)b * T + t) * G * dh + (size_t)j * dh + i;
                    ek = fmax(ek, fabs((double)cache.k[c_at] - a.k[p_at]));
                    ek = fmax(ek, fabs((double)cache.v[c_at] - a.v[p_at]));
                }
    CU_ASSERT(ek <= TOL);

    hs_kv_cache_free(&cache);
    hs_attn_acts_free(&a);
    free(x), free(full), free(split), free(m.params);
}

static void test_cache_split_matches_full_mha(void) { cache_split_case(4); }
static void test_cache_split_matches_full_gqa(void) { cache_split_case(2); }
static void test_cache_split_matches_full_mqa(void) { cache_split_case(1); }

static void test_cache_with_padding_matches_full(void)
{
    const int B = 2, T = 5, d = 16, H = 4;
    module m;
    module_init(&m, d, H, 2, 1);
    hs_real *x = random_vec((size_t)B * T * d, 1);
    /* Batch row 1 has padding keys in the middle and at the end. */
    const unsigned char valid[2 * 5] = { 1, 1, 1, 1, 1, 1, 0, 1, 0, 0 };
    hs_attn_mask mask = { 1, valid, 0 };
    hs_real *full = malloc(sizeof(hs_real) * B * T * d), *split = malloc(sizeof(hs_real) * B * T * d);
    hs_real *att = malloc(sizeof(hs_real) * B * H * T * T);
    CU_ASSERT_EQUAL_FATAL(forward(full, att, &m, x, B, T, &mask), HS_OK);
    hs_kv_cache cache;
    const int chunks[3] = { 2, 1, 2 };
    forward_chunks(split, &cache, &m, x, B, T, chunks, 3, valid);
    double e = max_err(split, full, (size_t)B * T * d);
    printf("\n    cached with padding vs full max err %.3g\n", e);
    CU_ASSERT(e <= TOL);
    hs_kv_cache_free(&cache);
    free(x), free(full), free(split), free(att), free(m.params);
}

static void test_padded_keys_get_exactly_zero_weight(void)
{
    const int B = 2, L = 6, d = 12, H = 3;
    module m;
    module_init(&m, d, H, 3, 1);
    hs_real *x = random_vec((size_t)B * L * d, 3);
    const unsigned char valid[2 * 6] = { 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0 };
    hs_real *out = malloc(sizeof(hs_real) * B * L * d), *att = malloc(sizeof(hs_real) * B * H * L * L);
    for (int causal = 0; causal <= 1; causal++) {
        hs_attn_mask mask = { causal, valid, 0 };
        CU_ASSERT_EQUAL_FATAL(forward(out, att, &m, x, B, L, &mask), HS_OK);
        int nonzero_masked = 0;
        double worst_sum = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < L; t++) {
                    double sum = 0;
                    for (int s = 0; s < L; s++) {
                        hs_real p = att[(((size_t)b * H + h) * L + t) * L + s];
                        int allowed = valid[b * L + s] && (!causal || s <= t);
                        if (!allowed && p != 0)
                            nonzero_masked++;
                        sum += p;
                    }
                    worst_sum = fmax(worst_sum, fabs(sum - 1));
                }
        CU_ASSERT_EQUAL(nonzero_masked, 0);
        CU_ASSERT(worst_sum <= TOL);
    }
    free(x), free(out), free(att), free(m.params);
}

static void test_all_masked_query_is_rejected_and_cache_untouched(void)
{
    const int B = 2, T = 3, d = 8, H = 2;
    module m;
    module_init(&m, d, H, 1, 0);
    hs_real *x = random_vec((size_t)B * T * d, 1), *out = malloc(sizeof(hs_real) * B * T * d);
    const unsigned char none[2 * 3] = { 1, 1, 1, 0, 0, 0 };
    hs_attn_mask mask = { 0, none, 0 };
    CU_ASSERT_EQUAL(forward(out, NULL, &m, x, B, T, &mask), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "every key masked"));
    /* Causal with the first key padded: query 0 sees nothing. */
    const unsigned char first_padded[2 * 3] = { 1, 1, 1, 0, 1, 1 };
    mask = (hs_attn_mask){ 1, first_padded, 0 };
    CU_ASSERT_EQUAL(forward(out, NULL, &m, x, B, T, &mask), HS_EINVAL);

    hs_kv_cache cache;
    CU_ASSERT_EQUAL_FATAL(hs_kv_cache_init(&cache, B, 1, d / H, T), HS_OK);
    hs_attn_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &m.c, B, T, T, T, 0), HS_OK);
    CU_ASSERT_EQUAL(hs_attn_forward(out, &a, &m.w, &m.c, x, NULL, NULL, &mask, &cache), HS_EINVAL);
    CU_ASSERT_EQUAL(cache.len, 0);
    /* A cache needs causal self-attention. */
    hs_attn_mask open = { 0, NULL, 0 };
    CU_ASSERT_EQUAL(hs_attn_forward(out, &a, &m.w, &m.c, x, NULL, NULL, &open, &cache), HS_EINVAL);
    CU_ASSERT_EQUAL(cache.len, 0);
    hs_attn_acts_free(&a);
    hs_kv_cache_free(&cache);
    free(x), free(out), free(m.params);
}

static void test_changing_future_tokens_changes_no_earlier_output(void)
{
    const int B = 2, T = 5, d = 12, H = 4;
    for (int G = 4; G >= 1; G /= 2) {
        module m;
        module_init(&m, d, H, G, 1);
        hs_real *x = random_vec((size_t)B * T * d, 1);
        hs_real *o1 = malloc(sizeof(hs_real) * B * T * d), *o2 = malloc(sizeof(hs_real) * B * T * d);
        hs_attn_mask causal = { 1, NULL, 0 };
        CU_ASSERT_EQUAL_FATAL(forward(o1, NULL, &m, x, B, T, &causal), HS_OK);
        for (int b = 0; b < B; b++)
            for (int t = 3; t < T; t++)
                for (int i = 0; i < d; i++)
                    x[((size_t)b * T + t) * d + i] += 100;
        CU_ASSERT_EQUAL_FATAL(forward(o2, NULL, &m, x, B, T, &causal), HS_OK);
        double before = 0, after = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < d; i++) {
                    size_t at = ((size_t)b * T + t) * d + i;
                    double e = fabs((double)o1[at] - o2[at]);
                    if (t < 3)
                        before = fmax(before, e);
                    else
                        after = fmax(after, e);
                }
        CU_ASSERT(before <= TOL);
        CU_ASSERT(after > 1e-3); /* the control: later outputs do change */
        free(x), free(o1), free(o2), free(m.params);
    }
}

static void test_parameter_counts(void)
{
    const int d = 12, H = 4, dh = d / H;
    for (int G = 1; G <= H; G *= 2) {
        hs_attn_config c = { .d_model = d, .n_heads = H, .n_kv_heads = G };
        CU_ASSERT_EQUAL(hs_attn_param_count(&c), (size_t)(2 * d * d + 2 * d * G * dh));
    }
    const int heads[4] = { 1, 2, 3, 6 };
    for (int i = 0; i < 4; i++) {
        hs_attn_config c = { .d_model = d, .n_heads = heads[i], .n_kv_heads = heads[i] };
        CU_ASSERT_EQUAL(hs_attn_param_count(&c), (size_t)(4 * d * d));
    }
    hs_attn_config biased = { .d_model = d, .n_heads = H, .n_kv_heads = 2, .bias = 1 };
    CU_ASSERT_EQUAL(hs_attn_param_count(&biased),
                    (size_t)(2 * d * d + 2 * d * 2 * dh + 2 * d + 2 * 2 * dh));
}

static void test_invalid_configurations_are_rejected(void)
{
#define CFG(d, h, g) { .d_model = d, .n_heads = h, .n_kv_heads = g }
    const hs_attn_config bad[5] = { CFG(12, 0, 1), CFG(13, 3, 1), CFG(12, 3, 2), CFG(0, 3, 3),
                                    CFG(12, 4, -1) };
#undef CFG
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(hs_attn_config_check(&bad[i]), HS_EINVAL);
        CU_ASSERT(strstr(hs_last_error(), "attention config") != NULL);
        hs_attn_acts a;
        CU_ASSERT_EQUAL(hs_attn_acts_alloc(&a, &bad[i], 1, 2, 2, 2, 0), HS_EINVAL);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr((hs_attn_config_check(&bad[1]), hs_last_error()), "divisible"));
}

/* Reinterpreting the bytes of (B,T,d) as (B,H,T,dh) keeps a plausible shape
 * but mixes tokens and heads; the head split must transpose. The control
 * builds both views, shows they differ, and shows the kernel's maps follow
 * the transposed one: head h's scores from the correct view reproduce them,
 * those from the byte reinterpretation do not. */
static void test_wrong_reshape_gives_a_different_tensor(void)
{
    const int B = 2, T = 5, d = 12, H = 4, dh = d / H;
    const size_t n = (size_t)B * T * d;
    hs_real *raw = random_vec(n, 1), *correct = malloc(sizeof(hs_real) * n);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int i = 0; i < dh; i++)
                    correct[(((size_t)b * H + h) * T + t) * dh + i] =
                        raw[((size_t)b * T + t) * d + h * dh + i];
    const hs_real *wrong = raw; /* the same bytes read as (B,H,T,dh) */
    CU_ASSERT(max_err(correct, wrong, n) > 0.1);

    /* Self-attention of raw with q = k = v, no mask, MHA layout. */
    hs_real *z = malloc(sizeof(hs_real) * n), *att = malloc(sizeof(hs_real) * B * H * T * T);
    hs_kv_view kv = { raw, raw, (size_t)T * d, (size_t)dh, (size_t)d, T };
    CU_ASSERT_EQUAL_FATAL(hs_attn_heads_forward(z, att, raw, &kv, NULL, NULL, 0, B, T, H, H, dh, NULL), HS_OK);
    double err_correct = 0, err_wrong = 0;
    for (int view = 0; view < 2; view++) {
        const hs_real *hv = view ? wrong : correct;
        for (int bh = 0; bh < B * H; bh++)
            for (int t = 0; t < T; t++) {
                double sc[5], mx = -INFINITY, sum = 0;
                for (int s = 0; s < T; s++) {
                    double dot = 0;
                    for (int i = 0; i < dh; i++)
                        dot += (double)hv[((size_t)bh * T + t) * dh + i] * hv[((size_t)bh * T + s) * dh + i];
                    sc[s] = dot / sqrt((double)dh);
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s < T; s++)
                    sum += sc[s] = exp(sc[s] - mx);
                for (int s = 0; s < T; s++) {
                    double e = fabs(sc[s] / sum - att[((size_t)bh * T + t) * T + s]);
                    if (view)
                        err_wrong = fmax(err_wrong, e);
                    else
                        err_correct = fmax(err_correct, e);
                }
            }
    }
    printf("\n    maps vs transposed view %.3g, vs byte reinterpretation %.3g\n", err_correct,
           err_wrong);
    CU_ASSERT(err_correct <= TOL);
    CU_ASSERT(err_wrong > 1e-2);
    free(raw), free(correct), free(z), free(att);
}

static void test_same_weights_different_head_count_is_a_different_function(void)
{
    const int B = 2, T = 5, d = 12;
    module one, four;
    module_init(&four, d, 4, 4, 0);
    one.c = (hs_attn_config){ .d_model = d, .n_heads = 1, .n_kv_heads = 1 };
    one.params = four.params; /* identical projection bytes, 4d^2 either way */
    hs_attn_weights_bind(&one.w, &one.c, one.params);
    hs_real *x = random_vec((size_t)B * T * d, 1);
    hs_real *o1 = malloc(sizeof(hs_real) * B * T * d), *o4 = malloc(sizeof(hs_real) * B * T * d);
    hs_attn_mask causal = { 1, NULL, 0 };
    CU_ASSERT_EQUAL_FATAL(forward(o1, NULL, &one, x, B, T, &causal), HS_OK);
    CU_ASSERT_EQUAL_FATAL(forward(o4, NULL, &four, x, B, T, &causal), HS_OK);
    CU_ASSERT(max_err(o1, o4, (size_t)B * T * d) > 1e-4);
    free(x), free(o1), free(o4), free(four.params);
}

static long vm_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n))
            kib = atol(line + n + 1);
    if (f)
        fclose(f);
    return kib;
}

/* Without a request for maps the forward keeps one block of scores per
 * thread: peak memory stays far below the B*H*L*S maps. */
static void test_forward_without_maps_does_not_allocate_them(void)
{
    const int B = 1, L = 2048, d = 64, H = 8;
    module m;
    module_init(&m, d, H, 2, 0);
    hs_real *x = random_vec((size_t)B * L * d, 1), *out = malloc(sizeof(hs_real) * B * L * d);
    hs_attn_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &m.c, B, L, L, L, 0), HS_OK);
    hs_attn_mask causal = { 1, NULL, 0 };
    /* Warm up thread pools, then reset the peak (VmHWM) before measuring. */
    CU_ASSERT_EQUAL_FATAL(hs_attn_forward(out, &a, &m.w, &m.c, x, NULL, NULL, &causal, NULL), HS_OK);
    FILE *f = fopen("/proc/self/clear_refs", "w");
    int can_reset = f && fputs("5", f) >= 0;
    if (f)
        can_reset = (fclose(f) == 0) && can_reset;
    long rss = vm_kib("VmRSS:");
    CU_ASSERT_EQUAL_FATAL(hs_attn_forward(out, &a, &m.w, &m.c, x, NULL, NULL, &causal, NULL), HS_OK);
    long peak = vm_kib("VmHWM:");
    double maps_kib = (double)B * H * L * L * sizeof(hs_real) / 1024;
    printf("\n    maps would be %.0f KiB; peak grew %ld KiB (reset %s)\n", maps_kib, peak - rss,
           can_reset ? "ok" : "unavailable");
    CU_ASSERT_FATAL(can_reset && rss > 0 && peak > 0);
    CU_ASSERT(peak - rss < maps_kib / 8);
    hs_attn_acts_free(&a);
    free(x), free(out), free(m.params);
}

/* ---- Sliding windows ------------------------------------------------------ */

/* out, maps and every gradient of one forward + backward (self-attention,
 * causal, valid may be NULL) with m's configuration. */
typedef struct {
    hs_real *out, *att, *dx, *grads;
} fb_result;

static void fb_run(fb_result *r, const module *m, const hs_real *x, const hs_real *gout, int B,
                   int L, const unsigned char *valid)
{
    const size_t nx = (size_t)B * L * m->c.d_model, np = hs_attn_param_count(&m->c);
    r->out = calloc(nx, sizeof(hs_real));
    r->att = calloc((size_t)B * m->c.n_heads * L * L, sizeof(hs_real));
    r->dx = calloc(nx, sizeof(hs_real));
    r->grads = calloc(np, sizeof(hs_real));
    hs_attn_weights dw;
    hs_attn_weights_bind(&dw, &m->c, r->grads);
    hs_attn_mask mask = { 1, valid, 0 };
    hs_attn_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &m->c, B, L, L, L, 1), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_attn_forward(r->out, &a, &m->w, &m->c, x, NULL, NULL, &mask, NULL),
                          HS_OK);
    memcpy(r->att, a.att, sizeof(hs_real) * B * m->c.n_heads * L * L);
    CU_ASSERT_EQUAL_FATAL(hs_attn_backward(r->dx, NULL, &dw, NULL, gout, &a, &m->w, &m->c, x,
                                           NULL, NULL, 0, &mask),
                          HS_OK);
    hs_attn_acts_free(&a);
}

static void fb_free(fb_result *r) { free(r->out), free(r->att), free(r->dx), free(r->grads); }

/* A window at least as long as the sequence hides nothing the causal mask
 * does not: the same kernel path, so equal bit for bit (forward, maps and
 * gradients), across query blocks, GQA and padding, for one window and for
 * per-head windows. */
static void test_window_not_shorter_than_sequence_is_causal_bit_for_bit(void)
{
    const int B = 2, L = 150, d = 16, H = 4;
    module m;
    module_init(&m, d, H, 2, 1);
    hs_real *x = random_vec((size_t)B * L * d, 1), *gout = random_vec((size_t)B * L * d, 1);
    unsigned char *valid = malloc((size_t)B * L);
    for (int i = 0; i < B * L; i++)
        valid[i] = i % L == 0 || i % 7 != 3;
    const size_t nx = (size_t)B * L * d, np = hs_attn_param_count(&m.c);
    const size_t natt = (size_t)B * H * L * L;
    fb_result causal;
    fb_run(&causal, &m, x, gout, B, L, valid);
    const int heads[4] = { L, L + 1, 1000, 0 };
    for (int k = 0; k < 3; k++) {
        m.c.window = k < 2 ? heads[k] : 0;
        m.c.head_window = k == 2 ? heads : NULL;
        fb_result win;
        fb_run(&win, &m, x, gout, B, L, valid);
        CU_ASSERT(!memcmp(win.out, causal.out, sizeof(hs_real) * nx));
        CU_ASSERT(!memcmp(win.att, causal.att, sizeof(hs_real) * natt));
        CU_ASSERT(!memcmp(win.dx, causal.dx, sizeof(hs_real) * nx));
        CU_ASSERT(!memcmp(win.grads, causal.grads, sizeof(hs_real) * np));
        fb_free(&win);
    }
    /* The control: a window shorter than the sequence changes every tensor. */
    m.c.window = L - 1;
    m.c.head_window = NULL;
    fb_result shorter;
    fb_run(&shorter, &m, x, gout, B, L, valid);
    CU_ASSERT(memcmp(shorter.out, causal.out, sizeof(hs_real) * nx) != 0);
    CU_ASSERT(memcmp(shorter.dx, causal.dx, sizeof(hs_real) * nx) != 0);
    fb_free(&shorter);
    fb_free(&causal);
    free(x), free(gout), free(valid), free(m.params);
}

/* Visible to query t of head h (no cache)? */
static int seen(const int *win, int h, int t, int s) { return s <= t && (!win[h] || s > t - win[h]); }

/* Maps of a windowed forward hold exactly 0 outside each head's window, sum
 * to 1 inside, and a row observer of a forward without maps sees the same
 * rows, across query blocks. */
static int observed_bad; /* observer rows differing from the kept maps */
static const hs_real *observed_att;
static int observed_L, observed_S, observed_H; /* the maps' queries, keys, heads */
static void observe(void *ctx, int layer, int thread, int b, int h, int t0, int n,
                    const hs_real *P, int ldp, int keys)
{
    (void)ctx, (void)layer, (void)thread;
    for (int r = 0; r < n; r++)
        for (int s = 0; s < observed_S; s++) {
            const hs_real want =
                observed_att[(((size_t)b * observed_H + h) * observed_L + t0 + r) * observed_S + s];
            const hs_real got = s < keys ? P[(size_t)r * ldp + s] : 0;
            if (fabs((double)got - want) > TOL || (want == 0 && got != 0))
                __atomic_add_fetch(&observed_bad, 1, __ATOMIC_RELAXED);
        }
}

static void test_window_maps_are_exactly_zero_outside_it(void)
{
    const int B = 2, L = 200, d = 16, H = 4;
    const int win[4] = { 5, 0, 1, 70 };
    module m;
    module_init(&m, d, H, 2, 1);
    m.c.head_window = win;
    hs_real *x = random_vec((size_t)B * L * d, 2), *out = malloc(sizeof(hs_real) * B * L * d);
    hs_real *att = malloc(sizeof(hs_real) * B * H * L * L);
    CU_ASSERT_EQUAL_FATAL(forward(out, att, &m, x, B, L, &(hs_attn_mask){ 1, NULL, 0 }), HS_OK);
    long outside = 0;
    double worst_sum = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < L; t++) {
                double sum = 0;
                for (int s = 0; s < L; s++) {
                    hs_real p = att[(((size_t)b * H + h) * L + t) * L + s];
                    outside += !seen(win, h, t, s) && p != 0;
                    sum += p;
                }
                worst_sum = fmax(worst_sum, fabs(sum - 1));
            }
    printf("\n    %ld entries outside the windows not 0; rows sum to 1 within %.3g\n", outside,
           worst_sum);
    CU_ASSERT_EQUAL(outside, 0);
    CU_ASSERT(worst_sum <= TOL);
    /* W = 1: each query puts all its weight on itself. */
    CU_ASSERT_EQUAL(att[((size_t)2 * L + 150) * L + 150], 1);

    /* The same rows through a row observer, without maps. */
    hs_attn_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &m.c, B, L, L, L, 0), HS_OK);
    observed_bad = 0, observed_att = att, observed_L = observed_S = L, observed_H = H;
    a.hooks.rows = (hs_row_observer){ observe, NULL };
    hs_real *out2 = malloc(sizeof(hs_real) * B * L * d);
    CU_ASSERT_EQUAL_FATAL(
        hs_attn_forward(out2, &a, &m.w, &m.c, x, NULL, NULL, &(hs_attn_mask){ 1, NULL, 0 }, NULL),
        HS_OK);
    CU_ASSERT_EQUAL(observed_bad, 0);
    CU_ASSERT(max_err(out2, out, (size_t)B * L * d) <= TOL);
    hs_attn_acts_free(&a);
    free(x), free(out), free(out2), free(att), free(m.params);
}

/* Attention sinks (SPEC §18's streaming heads): a windowed head's row sees
 * keys s < S besides its window, equal to a naive double loop over that
 * set (padding too, across query blocks and with a cached prefix); global
 * heads are untouched; a row observer without maps sees the same rows; the
 * backward refuses sinks. */
static void test_sinks_equal_a_naive_loop(void)
{
    const int B = 2, P = 7, L = 150, S = P + L, H = 4, G = 2, dh = 8, SINK = 3;
    const int HD = H * dh, GD = G * dh, group = H / G, win[4] = { 5, 0, 1, 70 };
    hs_real *q = random_vec((size_t)B * L * HD, 1.5), *k = random_vec((size_t)B * S * GD, 1.5);
    hs_real *v = random_vec((size_t)B * S * GD, 1);
    unsigned char *valid = malloc((size_t)B * S);
    for (int i = 0; i < B * S; i++)
        valid[i] = i % S % 11 != 4; /* some padding, never a whole row's keys */
    hs_real *z = malloc(sizeof(hs_real) * B * L * HD), *att = malloc(sizeof(hs_real) * B * H * L * S);
    hs_kv_view kv = { k, v, (size_t)S * GD, (size_t)dh, (size_t)GD, S };
    hs_attn_mask mask = { 1, valid, SINK };
    CU_ASSERT_EQUAL_FATAL(
        hs_attn_heads_forward(z, att, q, &kv, &mask, win, P, B, L, H, G, dh, NULL), HS_OK);
    double worst_att = 0, worst_z = 0;
    double *p = malloc(sizeof(double) * S);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < L; t++) {
                const int pos = P + t, W = win[h], j = h / group;
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s < S; s++) {
                    const int sees = s <= pos && (!W || s > pos - W || s < SINK) &&
                                     valid[(size_t)b * S + s];
                    double dot = 0;
                    for (int i = 0; i < dh; i++)
                        dot += (double)q[((size_t)b * L + t) * HD + h * dh + i] *
                               k[((size_t)b * S + s) * GD + j * dh + i];
                    p[s] = sees ? dot / sqrt((double)dh) : -INFINITY;
                    mx = fmax(mx, p[s]);
                }
                for (int s = 0; s < S; s++)
                    sum += p[s] = p[s] == -INFINITY ? 0 : exp(p[s] - mx);
                for (int i = 0; i < dh; i++) {
                    double zi = 0;
                    for (int s = 0; s < S; s++)
                        zi += p[s] / sum * v[((size_t)b * S + s) * GD + j * dh + i];
                    worst_z = fmax(worst_z, fabs(zi - z[((size_t)b * L + t) * HD + h * dh + i]));
                }
                for (int s = 0; s < S; s++) {
                    const double got = att[(((size_t)b * H + h) * L + t) * S + s];
                    worst_att = fmax(worst_att, p[s] ? fabs(got - p[s] / sum) : got != 0);
                }
            }
    printf("\n    sinks %d: maps within %.3g, z within %.3g of the naive loop", SINK, worst_att,
           worst_z);
    CU_ASSERT(worst_att <= TOL);
    CU_ASSERT(worst_z <= TOL);
    /* the same rows through an observer, without maps */
    hs_real *z2 = malloc(sizeof(hs_real) * B * L * HD);
    const hs_attn_hooks hooks = { { observe, NULL }, NULL, 0 };
    observed_bad = 0, observed_att = att, observed_L = L, observed_S = S, observed_H = H;
    CU_ASSERT_EQUAL_FATAL(
        hs_attn_heads_forward(z2, NULL, q, &kv, &mask, win, P, B, L, H, G, dh, &hooks), HS_OK);
    CU_ASSERT(max_err(z2, z, (size_t)B * L * HD) <= TOL);
    CU_ASSERT_EQUAL(observed_bad, 0);
    /* the backward has no sinks */
    hs_real *dq = calloc((size_t)L * HD, sizeof(hs_real)), *dkv = calloc((size_t)L * GD * 2, sizeof(hs_real));
    hs_attn_mask self = { 1, NULL, SINK };
    CU_ASSERT_EQUAL(hs_attn_heads_backward(dq, dkv, dkv + (size_t)L * GD, z, att, q, k, v, &self,
                                           win, 1, L, L, H, G, dh),
                    HS_EINVAL);
    free(q), free(k), free(v), free(valid), free(z), free(z2), free(att), free(p), free(dq), free(dkv);
}

/* Blocks of keys wholly outside the window are never computed: NaN in every
 * cached key and value older than the first query's window leaves the
 * forward finite and equal to the one with those rows zeroed (a kernel that
 * multiplied them by a 0 weight would give NaN). The backward never reads the
 * maps more than W + 63 keys (a window and one block of queries) before a
 * query: NaN there leaves the gradients finite and unchanged. */
static void test_window_never_reads_keys_outside_it(void)
{
    const int B = 1, P = 300, L = 130, S = P + L, H = 4, G = 2, dh = 8, W = 20;
    const int HD = H * dh, GD = G * dh, win[4] = { W, W, W, W };
    hs_real *q = random_vec((size_t)B * L * HD, 1), *k = random_vec((size_t)B * S * GD, 1);
    hs_real *v = random_vec((size_t)B * S * GD, 1);
    hs_real *z0 = malloc(sizeof(hs_real) * B * L * HD), *z1 = malloc(sizeof(hs_real) * B * L * HD);
    hs_kv_view kv = { k, v, (size_t)S * GD, (size_t)dh, (size_t)GD, S };
    hs_attn_mask causal = { 1, NULL, 0 };
    for (int s = 0; s <= P - W; s++)
        for (int i = 0; i < GD; i++)
            k[(size_t)s * GD + i] = v[(size_t)s * GD + i] = 0;
    CU_ASSERT_EQUAL_FATAL(
        hs_attn_heads_forward(z0, NULL, q, &kv, &causal, win, P, B, L, H, G, dh, NULL), HS_OK);
    for (int s = 0; s <= P - W; s++)
        for (int i = 0; i < GD; i++)
            k[(size_t)s * GD + i] = v[(size_t)s * GD + i] = NAN;
    CU_ASSERT_EQUAL_FATAL(
        hs_attn_heads_forward(z1, NULL, q, &kv, &causal, win, P, B, L, H, G, dh, NULL), HS_OK);
    double e = max_err(z1, z0, (size_t)B * L * HD);
    printf("\n    forward with NaN keys/values before the window: max err %.3g\n", e);
    CU_ASSERT(e == 0);

    /* Backward, no prefix: self-attention over the L queries. */
    hs_real *att = calloc((size_t)B * H * L * L, sizeof(hs_real)), *dz = random_vec((size_t)B * L * HD, 1);
    hs_kv_view self = { k + (size_t)P * GD, v + (size_t)P * GD, (size_t)S * GD, (size_t)dh,
                        (size_t)GD, L };
    CU_ASSERT_EQUAL_FATAL(
        hs_attn_heads_forward(z0, att, q, &self, &causal, win, 0, B, L, H, G, dh, NULL), HS_OK);
    hs_real *grad[2][3];
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < L; t++)
                    for (int s = 0; s <= t - W - 64; s++)
                        att[((size_t)h * L + t) * L + s] = NAN;
        for (int i = 0; i < 3; i++)
            grad[pass][i] = calloc((size_t)L * (i ? GD : HD), sizeof(hs_real));
        CU_ASSERT_EQUAL_FATAL(hs_attn_heads_backward(grad[pass][0], grad[pass][1], grad[pass][2], dz,
                                                     att, q, self.k, self.v, &causal, win, B, L,
                                                     L, H, G, dh),
                              HS_OK);
    }
    for (int i = 0; i < 3; i++) {
        e = max_err(grad[1][i], grad[0][i], (size_t)L * (i ? GD : HD));
        printf("    backward with NaN maps far before the window: %s max err %.3g\n",
               i == 0 ? "dq" : i == 1 ? "dk" : "dv", e);
        CU_ASSERT(e == 0);
        free(grad[0][i]), free(grad[1][i]);
    }
    free(q), free(k), free(v), free(z0), free(z1), free(att), free(dz);
}

/* Incremental decoding with a window equals the full forward: chunks that
 * straddle query blocks and the window's start, GQA, padding. */
static void test_window_cache_split_matches_full(void)
{
    const int B = 2, T = 150, d = 16, H = 4;
    module m;
    module_init(&m, d, H, 2, 1);
    m.c.window = 24;
    hs_real *x = random_vec((size_t)B * T * d, 1);
    unsigned char *valid = malloc((size_t)B * T);
    for (int i = 0; i < B * T; i++)
        valid[i] = i % T == 0 || i % 5 != 2;
    hs_attn_mask mask = { 1, valid, 0 };
    hs_real *full = malloc(sizeof(hs_real) * B * T * d), *split = malloc(sizeof(hs_real) * B * T * d);
    CU_ASSERT_EQUAL_FATAL(forward(full, NULL, &m, x, B, T, &mask), HS_OK);
    hs_kv_cache cache;
    const int chunks[5] = { 70, 1, 1, 30, 48 };
    forward_chunks(split, &cache, &m, x, B, T, chunks, 5, valid);
    double e = max_err(split, full, (size_t)B * T * d);
    printf("\n    W=24: 70+1+1+30+48 cached vs full max err %.3g\n", e);
    CU_ASSERT(e <= TOL);
    /* The control: the same split without the window differs. */
    hs_kv_cache_free(&cache);
    m.c.window = 0;
    forward_chunks(split, &cache, &m, x, B, T, chunks, 5, valid);
    CU_ASSERT(max_err(split, full, (size_t)B * T * d) > 1e-3);
    hs_kv_cache_free(&cache);
    free(x), free(full), free(split), free(valid), free(m.params);
}

static void test_window_refusals(void)
{
    const int B = 1, T = 6, d = 8, H = 2;
    module m;
    module_init(&m, d, H, 1, 0);
    hs_real *x = random_vec((size_t)B * T * d, 1), *out = malloc(sizeof(hs_real) * B * T * d);
    /* A window needs the causal mask. */
    m.c.window = 3;
    CU_ASSERT_EQUAL(forward(out, NULL, &m, x, B, T, &(hs_attn_mask){ 0, NULL, 0 }), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "window=3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "causal"));
    CU_ASSERT_EQUAL(forward(out, NULL, &m, x, B, T, NULL), HS_EINVAL);
    /* Padding can empty a window: keys 2 and 3 padded, W = 2, query 3. */
    const unsigned char valid[6] = { 1, 1, 0, 0, 1, 1 };
    m.c.window = 2;
    CU_ASSERT_EQUAL(forward(out, NULL, &m, x, B, T, &(hs_attn_mask){ 1, valid, 0 }), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "query 3 of batch row 0 has every key masked"));
    m.c.window = 3; /* the control: a window reaching key 1 is fine */
    CU_ASSERT_EQUAL(forward(out, NULL, &m, x, B, T, &(hs_attn_mask){ 1, valid, 0 }), HS_OK);
    /* A per-head window of 2 on one head is enough to refuse. */
    const int heads[2] = { 0, 2 };
    m.c.window = 0;
    m.c.head_window = heads;
    CU_ASSERT_EQUAL(forward(out, NULL, &m, x, B, T, &(hs_attn_mask){ 1, valid, 0 }), HS_EINVAL);
    /* Negative windows are configuration errors. */
    const int negative[2] = { 0, -1 };
    m.c.head_window = negative;
    CU_ASSERT_EQUAL(hs_attn_config_check(&m.c), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "window=-1 of head 1"));
    m.c.head_window = NULL;
    m.c.window = -2;
    CU_ASSERT_EQUAL(hs_attn_config_check(&m.c), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "window=-2"));
    free(x), free(out), free(m.params);
}

#ifdef HEADSCOPE_DOUBLE
/* ---- Finite differences (double build) ---------------------------------- */

typedef struct {
    const char *name;
    int B, L, S, d, H, G, bias, causal, cross, gates, padded, window;
    const int *head_window;
} fd_case;

/* loss = sum(out * gout) for the case's inputs. */
static double fd_loss(const fd_case *k, const module *m, const hs_real *x, const hs_real *y,
                      const hs_real *xi, const hs_attn_mask *mask, const hs_real *gout)
{
    hs_attn_acts a;
    hs_real *out = malloc(sizeof(hs_real) * k->B * k->L * k->d);
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &m->c, k->B, k->L, k->S, k->S, 0), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_attn_forward(out, &a, &m->w, &m->c, x, y, xi, mask, NULL), HS_OK);
    double loss = 0;
    for (int i = 0; i < k->B * k->L * k->d; i++)
        loss += out[i] * gout[i];
    hs_attn_acts_free(&a);
    free(out);
    return loss;
}

/* Compares analytic and central-difference gradients for up to `samples`
 * entries of v (all of them when v is small); returns the worst error. */
static double fd_compare(const char *what, hs_real *v, const hs_real *grad, size_t n,
                         const fd_case *k, const module *m, const hs_real *x, const hs_real *y,
                         const hs_real *xi, const hs_attn_mask *mask, const hs_real *gout)
{
    const double eps = 1e-6;
    const size_t samples = 40;
    double worst = 0;
    for (size_t s = 0; s < n && s < samples; s++) {
        size_t i = n <= samples ? s : (size_t)(rng_state = rng_state * 6364136223846793005ULL + 1,
                                               (rng_state >> 33) % n);
        hs_real keep = v[i];
        v[i] = keep + eps;
        double up = fd_loss(k, m, x, y, xi, mask, gout);
        v[i] = keep - eps;
        double down = fd_loss(k, m, x, y, xi, mask, gout);
        v[i] = keep;
        double num = (up - down) / (2 * eps);
        double e = fabs(num - grad[i]) / fmax(1, fabs(num));
        worst = fmax(worst, e);
    }
    printf("    %-6s %-5s max err %.3g\n", k->name, what, worst);
    return worst;
}

static void fd_run(const fd_case *k)
{
    module m;
    module_init(&m, k->d, k->H, k->G, k->bias);
    m.c.window = k->window;
    m.c.head_window = k->head_window;
    const size_t nx = (size_t)k->B * k->L * k->d, ny = (size_t)k->B * k->S * k->d;
    hs_real *x = random_vec(nx, 1), *y = k->cross ? random_vec(ny, 1) : NULL;
    hs_real *xi = NULL;
    if (k->gates) {
        xi = random_vec(k->H, 0.5);
        for (int h = 0; h < k->H; h++)
            xi[h] += 1;
    }
    hs_real *gout = random_vec(nx, 1);
    unsigned char *valid = NULL;
    if (k->padded) {
        valid = malloc((size_t)k->B * k->S);
        for (int b = 0; b < k->B; b++)
            for (int s = 0; s < k->S; s++)
                valid[b * k->S + s] = s == 0 || (s * 7 + b * 3) % 5 != 0;
    }
    hs_attn_mask mask = { k->causal, valid, 0 };

    size_t np = hs_attn_param_count(&m.c);
    hs_real *grads = calloc(np, sizeof(hs_real));
    hs_attn_weights dw;
    hs_attn_weights_bind(&dw, &m.c, grads);
    hs_real *dx = calloc(nx, sizeof(hs_real)), *dy = y ? calloc(ny, sizeof(hs_real)) : NULL;
    hs_real *dxi = xi ? calloc(k->H, sizeof(hs_real)) : NULL;
    hs_attn_acts a;
    hs_real *out = malloc(sizeof(hs_real) * nx);
    CU_ASSERT_EQUAL_FATAL(hs_attn_acts_alloc(&a, &m.c, k->B, k->L, k->S, k->S, 1), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_attn_forward(out, &a, &m.w, &m.c, x, y, xi, &mask, NULL), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_attn_backward(dx, dy, &dw, dxi, gout, &a, &m.w, &m.c, x, y, xi, 0, &mask),
                          HS_OK);

    const double tol = 1e-6;
    printf("\n");
    CU_ASSERT(fd_compare("x", x, dx, nx, k, &m, x, y, xi, &mask, gout) <= tol);
    if (y)
        CU_ASSERT(fd_compare("y", y, dy, ny, k, &m, x, y, xi, &mask, gout) <= tol);
    if (xi)
        CU_ASSERT(fd_compare("xi", xi, dxi, k->H, k, &m, x, y, xi, &mask, gout) <= tol);
    CU_ASSERT(fd_compare("params", m.params, grads, np, k, &m, x, y, xi, &mask, gout) <= tol);
    /* Every parameter tensor separately, so a wrong bias gradient cannot hide
     * among the samples of the large weights. */
    hs_real *pw[8] = { m.w.w_q, m.w.w_k, m.w.w_v, m.w.w_o, m.w.b_q, m.w.b_k, m.w.b_v, m.w.b_o };
    hs_real *pg[8] = { dw.w_q, dw.w_k, dw.w_v, dw.w_o, dw.b_q, dw.b_k, dw.b_v, dw.b_o };
    const char *names[8] = { "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o" };
    const int d = k->d, gd = k->G * (k->d / k->H);
    const size_t sizes[8] = { (size_t)d * d, (size_t)gd * d, (size_t)gd * d, (size_t)d * d,
                              (size_t)d, (size_t)gd, (size_t)gd, (size_t)d };
    for (int i = 0; i < 8; i++)
        if (pw[i])
            CU_ASSERT(fd_compare(names[i], pw[i], pg[i], sizes[i], k, &m, x, y, xi, &mask, gout) <=
                      tol);

    hs_attn_acts_free(&a);
    free(x), free(y), free(xi), free(gout), free(valid), free(grads), free(dx), free(dy),
        free(dxi), free(out), free(m.params);
}

static void test_finite_difference_gradients(void)
{
    static const int heads[4] = { 0, 3, 70, 2 };
    static const fd_case cases[] = {
        /* name      B  L   S   d  H  G bias causal cross gates padded window head_window */
        { "mha", 2, 5, 5, 12, 3, 3, 1, 1, 0, 0, 1, 0, NULL },
        { "gqa", 2, 6, 6, 16, 4, 2, 1, 1, 0, 1, 1, 0, NULL },
        { "mqa", 1, 7, 7, 12, 6, 1, 0, 1, 0, 1, 0, 0, NULL },
        { "cross", 2, 3, 6, 8, 2, 1, 1, 0, 1, 1, 1, 0, NULL },
        { "blocks", 1, 70, 70, 8, 2, 1, 1, 1, 0, 1, 1, 0, NULL }, /* crosses a 64-query block */
        /* windows across the block boundary: the second block's band starts late */
        { "win", 1, 80, 80, 8, 2, 1, 1, 1, 0, 1, 1, 4, NULL },
        { "whead", 1, 80, 80, 16, 4, 2, 1, 1, 0, 1, 1, 0, heads },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        fd_run(&cases[i]);
}
#endif

int main(void)
{
    static const hs_test tests[] = {
        { "test_cache_split_matches_full_mha", test_cache_split_matches_full_mha },
        { "test_cache_split_matches_full_gqa", test_cache_split_matches_full_gqa },
        { "test_cache_split_matches_full_mqa", test_cache_split_matches_full_mqa },
        { "test_cache_with_padding_matches_full", test_cache_with_padding_matches_full },
        { "test_padded_keys_get_exactly_zero_weight", test_padded_keys_get_exactly_zero_weight },
        { "test_all_masked_query_is_rejected_and_cache_untouched",
          test_all_masked_query_is_rejected_and_cache_untouched },
        { "test_changing_future_tokens_changes_no_earlier_output",
          test_changing_future_tokens_changes_no_earlier_output },
        { "test_parameter_counts", test_parameter_counts },
        { "test_invalid_configurations_are_rejected", test_invalid_configurations_are_rejected },
        { "test_wrong_reshape_gives_a_different_tensor", test_wrong_reshape_gives_a_different_tensor },
        { "test_same_weights_different_head_count_is_a_different_function",
          test_same_weights_different_head_count_is_a_different_function },
        { "test_forward_without_maps_does_not_allocate_them",
          test_forward_without_maps_does_not_allocate_them },
        { "test_window_not_shorter_than_sequence_is_causal_bit_for_bit",
          test_window_not_shorter_than_sequence_is_causal_bit_for_bit },
        { "test_sinks_equal_a_naive_loop", test_sinks_equal_a_naive_loop },
        { "test_window_maps_are_exactly_zero_outside_it",
          test_window_maps_are_exactly_zero_outside_it },
        { "test_window_never_reads_keys_outside_it", test_window_never_reads_keys_outside_it },
        { "test_window_cache_split_matches_full", test_window_cache_split_matches_full },
        { "test_window_refusals", test_window_refusals },
#ifdef HEADSCOPE_DOUBLE
        { "test_finite_difference_gradients", test_finite_difference_gradients },
#endif
    };
    return hs_run_tests("attention_props_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
