/* Hook sites and interventions (model/hooks.h, capture/intervene.h,
 * capture/cache.h) against oracles that do not go through them: a head gate
 * of 0, zeroed weights, another run's output, a plain-loop attention over the
 * recorded q, k, v, and hand-computed tensors. Without hooks, and with hooks
 * that write nothing, the forward is bit-identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "cache.h"
#include "config_file.h"
#include "checkpoint.h"
#include "intervene.h"
#include "runner.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-12;
#else
static const double TOL = 1e-5;
#endif

static const char *const FIXTURES[] = { "gpt2_tiny", "llama_gqa", "hs_mixed", "hs_post_gelu" };
enum { NFIX = 4 };

/* ---- helpers ---- */

static void load(hs_model *m, const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/models/%s", HS_FIXTURE_DIR, name);
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(m, dir), HS_OK);
}

/* A random Llama-style model (RoPE, GQA 4/2, SwiGLU) with weights large
 * enough for sharp maps; T up to 256 (two query blocks of the kernel at 80). */
static void random_llama(hs_model *m)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "llama"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "d_model=32"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "n_layer=3"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "vocab_size=64"), HS_OK);
    c.init_std = 0.3;
    CU_ASSERT_EQUAL_FATAL(hs_model_init(m, &c), HS_OK);
    hs_model_init_random(m, 7);
}

static void tokens(int32_t *tok, int n, int V, unsigned seed)
{
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 7u + seed * 13u + (unsigned)i * i * seed) % (unsigned)V);
}

static size_t n_logits(const hs_acts *a, const hs_model *m)
{
    return (size_t)a->B * a->T * m->cfg.vocab_size;
}

/* A malloc'd copy of the logits of a forward of tok with hooks. */
static hs_real *logits_of(hs_acts *a, const hs_model *m, const int32_t *tok, const hs_hooks *h)
{
    int rc = hs_forward(a, m, tok, NULL, h);
    if (rc)
        printf("\n    forward: %s", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    const size_t n = n_logits(a, m);
    hs_real *out = malloc(sizeof(hs_real) * n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    memcpy(out, a->logits, sizeof(hs_real) * n);
    return out;
}

static double max_diff(const hs_real *x, const hs_real *y, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)x[i] - (double)y[i]));
    return worst;
}

/* Logits of tok under one plan (interventions and/or a cache). */
static hs_real *logits_with(hs_acts *a, const hs_model *m, const int32_t *tok,
                            const hs_intervention *list, int n, hs_act_cache *cache)
{
    hs_hook_plan plan = { list, n, cache };
    hs_hooks h = { 0 };
    int rc = hs_hooks_attach(&h, &m->cfg, &plan);
    if (rc)
        printf("\n    attach: %s", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    return logits_of(a, m, tok, &h);
}

/* ---- no hooks: bit-identical ---- */

typedef struct {
    int calls[HS_N_SITES];
} site_counts;

static int count_site(void *ctx, const hs_site_view *v)
{
    site_counts *c = ctx;
    c->calls[v->site]++;
    return HS_OK;
}

static void no_hooks_case(hs_model *m, int B, int T)
{
    const hs_model_config *c = &m->cfg;
    int32_t *tok = malloc(sizeof(int32_t) * B * T);
    tokens(tok, B * T, c->vocab_size, 1);
    hs_acts a, am;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&am, c, B, T, HS_ACTS_MAPS), HS_OK);
    const size_t n = n_logits(&a, m);
    hs_real *plain = logits_of(&a, m, tok, NULL);

    /* An empty plan and a NULL plan attach nothing. */
    hs_hooks h = { 0 };
    CU_ASSERT_EQUAL(hs_hooks_attach(&h, c, NULL), HS_OK);
    hs_hook_plan empty = { NULL, 0, NULL };
    CU_ASSERT_EQUAL(hs_hooks_attach(&h, c, &empty), HS_OK);
    for (int s = 0; s < HS_N_SITES; s++)
        CU_ASSERT_PTR_NULL(h.site[s].fn);
    hs_real *with_empty = logits_of(&a, m, tok, &h);
    CU_ASSERT(!memcmp(plain, with_empty, sizeof(hs_real) * n));

    /* Maps kept, and every site hooked by an observer that writes nothing:
     * the pattern hook splits the kernel into scores, hook, mix. */
    hs_real *maps_plain = logits_of(&am, m, tok, NULL);
    site_counts cnt = { { 0 } };
    hs_hooks all = { 0 };
    for (int s = 0; s < HS_N_SITES; s++)
        all.site[s] = (hs_site_hook){ count_site, &cnt };
    hs_real *observed = logits_of(&am, m, tok, &all);
    CU_ASSERT(!memcmp(maps_plain, observed, sizeof(hs_real) * n));
    CU_ASSERT(!memcmp(plain, maps_plain, sizeof(hs_real) * n));
    if (memcmp(plain, maps_plain, sizeof(hs_real) * n) ||
        memcmp(maps_plain, observed, sizeof(hs_real) * n))
        printf("\n    T=%d: |infer - maps| %.3g, |maps - observed| %.3g", T,
               max_diff(plain, maps_plain, n), max_diff(maps_plain, observed, n));
    const int L = c->n_layer;
    CU_ASSERT_EQUAL(cnt.calls[HS_SITE_RESID_PRE], L + 1);
    CU_ASSERT_EQUAL(cnt.calls[HS_SITE_MLP_OUT], c->mlp == HS_MLP_NONE ? 0 : L);
    for (int s = HS_SITE_ATTN_OUT; s < HS_N_SITES; s++)
        if (s != HS_SITE_MLP_OUT)
            CU_ASSERT_EQUAL(cnt.calls[s], L);
    free(plain), free(with_empty), free(maps_plain), free(observed), free(tok);
    hs_acts_free(&a);
    hs_acts_free(&am);
}

static void test_no_hooks_empty_plans_and_observers_are_bit_identical(void)
{
    for (int i = 0; i < NFIX; i++) {
        hs_model m;
        load(&m, FIXTURES[i]);
        no_hooks_case(&m, 2, 16);
        hs_model_free(&m);
    }
    hs_model m;
    random_llama(&m);
    no_hooks_case(&m, 2, 80);
    hs_model_free(&m);
}

/* ---- z: zero equals a zero gate ---- */

static void test_zeroing_a_heads_z_equals_gating_it_to_zero(void)
{
    for (int i = 0; i < 2; i++) {
        hs_model m;
        load(&m, FIXTURES[i]);
        enum { B = 2, T = 12 };
        int32_t tok[B * T];
        tokens(tok, B * T, m.cfg.vocab_size, 2);
        hs_acts a;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_INFER), HS_OK);
        const size_t n = n_logits(&a, &m);
        hs_real *clean = logits_of(&a, &m, tok, NULL);
        for (int l = 0; l < m.cfg.n_layer; l++)
            for (int h = 0; h < m.cfg.n_head[l]; h += 3) {
                hs_intervention iv = { HS_SITE_Z, l, h, -1, HS_IV_ZERO, NULL, 0 };
                hs_real *zeroed = logits_with(&a, &m, tok, &iv, 1, NULL);
                hs_real gate[16];
                for (int k = 0; k < 16; k++)
                    gate[k] = k == h ? 0 : 1;
                const hs_real *gates[HS_MAX_LAYERS] = { 0 };
                gates[l] = gate;
                hs_hooks gh = { .gates = gates };
                hs_real *gated = logits_of(&a, &m, tok, &gh);
                CU_ASSERT(max_diff(zeroed, gated, n) <= TOL);
                CU_ASSERT(max_diff(zeroed, clean, n) > 1e-4);
                free(zeroed), free(gated);
            }
        free(clean);
        hs_acts_free(&a);
        hs_model_free(&m);
    }
}

/* ---- resid_pre: another run's residual gives that run's output ---- */

static void resid_case(hs_model *m, int B, int T)
{
    const hs_model_config *c = &m->cfg;
    const int L = c->n_layer, V = c->vocab_size;
    int32_t *ta = malloc(sizeof(int32_t) * B * T), *tb = malloc(sizeof(int32_t) * B * T);
    tokens(ta, B * T, V, 3);
    tokens(tb, B * T, V, 4);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
    const size_t n = n_logits(&a, m);
    hs_act_cache run_a;
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init_layers(&run_a, HS_SITE_RESID_PRE, L + 1,
                                                   HS_CACHE_COPY),
                          HS_OK);
    hs_real *la = logits_with(&a, m, ta, NULL, 0, &run_a);
    hs_real *lb = logits_of(&a, m, tb, NULL);
    CU_ASSERT(max_diff(la, lb, n) > 1e-3);
    for (int l = 0; l <= L; l++) {
        hs_site_view shape;
        const hs_real *src = hs_act_cache_get(&run_a, HS_SITE_RESID_PRE, l, &shape);
        CU_ASSERT_PTR_NOT_NULL_FATAL(src);
        CU_ASSERT_EQUAL(shape.B * shape.sb, (size_t)B * T * c->d_model);
        hs_intervention iv = { HS_SITE_RESID_PRE, l, -1, -1, HS_IV_REPLACE, src,
                               shape.B * shape.sb };
        hs_real *patched = logits_with(&a, m, tb, &iv, 1, NULL);
        double d = max_diff(patched, la, n);
        if (d > TOL)
            printf("\n    layer %d: |patched - run a| %.3g", l, d);
        CU_ASSERT(d <= TOL);
        free(patched);
        /* One position: the logits before it are run b's (causality); at it,
         * they changed. */
        const int p = T / 2;
        hs_intervention one = { HS_SITE_RESID_PRE, l, -1, p, HS_IV_REPLACE, src, 0 };
        patched = logits_with(&a, m, tb, &one, 1, NULL);
        double before = 0, at = 0;
        for (int b = 0; b < B; b++) {
            const size_t row = ((size_t)b * T) * V;
            before = fmax(before, max_diff(patched + row, lb + row, (size_t)p * V));
            at = fmax(at, max_diff(patched + row + (size_t)p * V, lb + row + (size_t)p * V, V));
        }
        CU_ASSERT(before == 0);
        CU_ASSERT(at > 1e-4);
        free(patched);
    }
    hs_act_cache_free(&run_a);
    free(la), free(lb), free(ta), free(tb);
    hs_acts_free(&a);
}

static void test_replacing_resid_pre_with_another_runs_gives_that_runs_output(void)
{
    for (int i = 0; i < NFIX; i++) {
        hs_model m;
        load(&m, FIXTURES[i]);
        resid_case(&m, 2, 16);
        hs_model_free(&m);
    }
    hs_model m;
    random_llama(&m);
    resid_case(&m, 2, 80);
    hs_model_free(&m);
}

/* Layer 0's resid_pre is the embedding (token + position) of the run. */
static void test_resid_pre_of_layer_zero_is_the_embedding(void)
{
    hs_model m;
    load(&m, "gpt2_tiny");
    enum { B = 2, T = 8 };
    int32_t tok[B * T];
    tokens(tok, B * T, m.cfg.vocab_size, 5);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_INFER), HS_OK);
    hs_act_cache cache;
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init_layers(&cache, HS_SITE_RESID_PRE, 1, HS_CACHE_COPY),
                          HS_OK);
    free(logits_with(&a, &m, tok, NULL, 0, &cache));
    const hs_real *x = hs_act_cache_get(&cache, HS_SITE_RESID_PRE, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    const int d = m.cfg.d_model;
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < d; i++) {
                double want = (double)m.w.wte[(size_t)tok[b * T + t] * d + i] +
                              (double)m.w.wpe[(size_t)t * d + i];
                worst = fmax(worst, fabs(want - x[((size_t)b * T + t) * d + i]));
            }
    CU_ASSERT(worst <= TOL);
    hs_act_cache_free(&cache);
    hs_acts_free(&a);
    hs_model_free(&m);
}

/* ---- z: patching every head of a layer gives that run's attention output ---- */

static void z_patch_case(const char *name)
{
    hs_model m;
    load(&m, name);
    const hs_model_config *c = &m.cfg;
    enum { B = 2, T = 12 };
    const int d = c->d_model, dh = c->head_dim;
    int32_t ta[B * T], tb[B * T];
    tokens(ta, B * T, c->vocab_size, 6);
    tokens(tb, B * T, c->vocab_size, 7);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
    for (int l = 0; l < c->n_layer; l++) {
        const int H = c->n_head[l];
        const hs_site_key keys[2] = { { HS_SITE_Z, l }, { HS_SITE_ATTN_OUT, l } };
        hs_act_cache ra, rb, rh;
        CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&ra, keys, 2, HS_CACHE_COPY), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&rb, keys + 1, 1, HS_CACHE_COPY), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&rh, keys + 1, 1, HS_CACHE_COPY), HS_OK);
        free(logits_with(&a, &m, ta, NULL, 0, &ra));
        const hs_real *za = hs_act_cache_get(&ra, HS_SITE_Z, l, NULL);
        const hs_real *oa = hs_act_cache_get(&ra, HS_SITE_ATTN_OUT, l, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(za);
        CU_ASSERT_PTR_NOT_NULL_FATAL(oa);
        /* The oracle: attn_out = z W_o^T + b_o, in plain loops. */
        const hs_attn_weights *w = &m.w.layer[l].attn;
        double worst = 0;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int o = 0; o < d; o++) {
                double s = w->b_o ? w->b_o[o] : 0;
                for (int k = 0; k < H * dh; k++)
                    s += (double)za[r * H * dh + k] * w->w_o[(size_t)o * H * dh + k];
                worst = fmax(worst, fabs(s - oa[r * d + o]));
            }
        CU_ASSERT(worst <= TOL);
        /* Every head of run a's z into run b, all at once and head by head. */
        hs_intervention all = { HS_SITE_Z, l, -1, -1, HS_IV_REPLACE, za, 0 };
        free(logits_with(&a, &m, tb, &all, 1, &rb));
        hs_intervention heads[16];
        for (int h = 0; h < H; h++)
            heads[h] = (hs_intervention){ HS_SITE_Z, l, h, -1, HS_IV_REPLACE, za, 0 };
        free(logits_with(&a, &m, tb, heads, H, &rh));
        const hs_real *ob = hs_act_cache_get(&rb, HS_SITE_ATTN_OUT, l, NULL);
        const hs_real *oh = hs_act_cache_get(&rh, HS_SITE_ATTN_OUT, l, NULL);
        CU_ASSERT(max_diff(ob, oa, (size_t)B * T * d) <= TOL);
        CU_ASSERT(!memcmp(ob, oh, sizeof(hs_real) * B * T * d));
        hs_act_cache_free(&ra), hs_act_cache_free(&rb), hs_act_cache_free(&rh);
    }
    hs_acts_free(&a);
    hs_model_free(&m);
}

static void test_patching_every_heads_z_gives_that_runs_attention_output(void)
{
    z_patch_case("gpt2_tiny");
    z_patch_case("hs_mixed");
}

/* ---- q, k, v: the scores use what the hooks left ---- */

/* z (B,T,H*dh) from q (B,T,H*dh), k, v (B,T,G*dh) in plain loops: causal
 * softmax of q k / sqrt(dh), mixed over v; head h reads kv-head h/(H/G). */
static void naive_attention(double *z, const hs_real *q, const hs_real *k, const hs_real *v,
                            int B, int T, int H, int G, int dh)
{
    double *p = malloc(sizeof(double) * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const int j = h / (H / G);
                const hs_real *qr = q + ((size_t)b * T + t) * H * dh + (size_t)h * dh;
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    const hs_real *kr = k + ((size_t)b * T + s) * G * dh + (size_t)j * dh;
                    double dot = 0;
                    for (int i = 0; i < dh; i++)
                        dot += (double)qr[i] * kr[i];
                    p[s] = dot / sqrt((double)dh);
                    mx = fmax(mx, p[s]);
                }
                for (int s = 0; s <= t; s++)
                    sum += p[s] = exp(p[s] - mx);
                double *zr = z + ((size_t)b * T + t) * H * dh + (size_t)h * dh;
                for (int i = 0; i < dh; i++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++)
                        acc += p[s] / sum * v[((size_t)b * T + s) * G * dh + (size_t)j * dh + i];
                    zr[i] = acc;
                }
            }
    free(p);
}

static double max_diff_d(const hs_real *x, const double *y, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)x[i] - y[i]));
    return worst;
}

static void test_q_k_v_writes_are_what_the_scores_and_mix_use(void)
{
    hs_model m;
    random_llama(&m);
    const hs_model_config *c = &m.cfg;
    enum { B = 2, T = 80, l = 1 };
    const int H = c->n_head[l], G = c->n_kv_head[l], dh = c->head_dim;
    int32_t ta[B * T], tb[B * T];
    tokens(ta, B * T, c->vocab_size, 8);
    tokens(tb, B * T, c->vocab_size, 9);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
    const hs_site_key keys[4] = { { HS_SITE_Q, l }, { HS_SITE_K, l }, { HS_SITE_V, l },
                                  { HS_SITE_Z, l } };
    hs_act_cache ra, clean, hooked;
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&ra, keys, 4, HS_CACHE_COPY), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&clean, keys, 4, HS_CACHE_COPY), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&hooked, keys, 4, HS_CACHE_COPY), HS_OK);
    free(logits_with(&a, &m, ta, NULL, 0, &ra));
    hs_real *lclean = logits_with(&a, &m, tb, NULL, 0, &clean);
    hs_real steer[64 * 4];
    for (int i = 0; i < H * dh; i++)
        steer[i] = (hs_real)(0.5 * sin(i + 1.0));
    const hs_intervention ivs[3] = {
        { HS_SITE_Q, l, 2, -1, HS_IV_ADD, steer, (size_t)H * dh },
        { HS_SITE_K, l, 1, 5, HS_IV_ZERO, NULL, 0 },
        { HS_SITE_V, l, 0, -1, HS_IV_REPLACE, hs_act_cache_get(&ra, HS_SITE_V, l, NULL), 0 },
    };
    hs_real *lhooked = logits_with(&a, &m, tb, ivs, 3, &hooked);
    const hs_real *q0 = hs_act_cache_get(&clean, HS_SITE_Q, l, NULL);
    const hs_real *k0 = hs_act_cache_get(&clean, HS_SITE_K, l, NULL);
    const hs_real *v0 = hs_act_cache_get(&clean, HS_SITE_V, l, NULL);
    const hs_real *q = hs_act_cache_get(&hooked, HS_SITE_Q, l, NULL);
    const hs_real *k = hs_act_cache_get(&hooked, HS_SITE_K, l, NULL);
    const hs_real *v = hs_act_cache_get(&hooked, HS_SITE_V, l, NULL);
    const hs_real *z = hs_act_cache_get(&hooked, HS_SITE_Z, l, NULL);
    const hs_real *va = hs_act_cache_get(&ra, HS_SITE_V, l, NULL);
    /* The cache saw the values after the interventions, element by element. */
    int wrong = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < H; h++)
                for (int i = 0; i < dh; i++) {
                    size_t o = ((size_t)b * T + t) * H * dh + (size_t)h * dh + i;
                    hs_real want = h == 2 ? q0[o] + steer[h * dh + i] : q0[o];
                    wrong += q[o] != want;
                }
            for (int j = 0; j < G; j++)
                for (int i = 0; i < dh; i++) {
                    size_t o = ((size_t)b * T + t) * G * dh + (size_t)j * dh + i;
                    wrong += k[o] != (j == 1 && t == 5 ? 0 : k0[o]);
                    wrong += v[o] != (j == 0 ? va[o] : v0[o]);
                }
        }
    CU_ASSERT_EQUAL(wrong, 0);
    /* z is the attention of exactly those q, k, v. */
    const size_t nz = (size_t)B * T * H * dh;
    double *zn = malloc(sizeof(double) * nz);
    naive_attention(zn, q, k, v, B, T, H, G, dh);
    double err = max_diff_d(z, zn, nz);
    printf("\n    |z - plain-loop attention of the hooked q, k, v| %.3g", err);
    CU_ASSERT(err <= TOL);
    CU_ASSERT(max_diff(lclean, lhooked, n_logits(&a, &m)) > 1e-4);
    free(zn), free(lclean), free(lhooked);
    hs_act_cache_free(&ra), hs_act_cache_free(&clean), hs_act_cache_free(&hooked);
    hs_acts_free(&a);
    hs_model_free(&m);
}

/* ---- pattern: z mixes what the hook left ---- */

typedef struct {
    int layer, head;
    hs_real *maps; /* (B,H,T,T) copy seen by on_maps */
} pattern_ctx;

/* Every row of one head: 1/S on every key, the masked ones included. */
static int flat_rows(void *ctx, const hs_site_view *v)
{
    const pattern_ctx *p = ctx;
    if (v->layer != p->layer)
        return HS_OK;
    for (int b = 0; b < v->B; b++)
        for (int t = 0; t < v->T; t++)
            for (int s = 0; s < v->width; s++)
                v->x[b * v->sb + p->head * v->sh + t * v->st + s] = (hs_real)1 / v->width;
    return HS_OK;
}

static int keep_maps(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    pattern_ctx *p = ctx;
    if (layer == p->layer)
        memcpy(p->maps, att, sizeof(hs_real) * B * H * T * T);
    return HS_OK;
}

static void test_pattern_writes_are_what_z_mixes(void)
{
    hs_model m;
    random_llama(&m);
    const hs_model_config *c = &m.cfg;
    enum { B = 2, T = 80, l = 2, h = 3 };
    const int H = c->n_head[l], G = c->n_kv_head[l], dh = c->head_dim, j = h / (H / G);
    int32_t ta[B * T], tb[B * T];
    tokens(ta, B * T, c->vocab_size, 10);
    tokens(tb, B * T, c->vocab_size, 11);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_MAPS), HS_OK);

    /* Run a's pattern of head h and its values into run b: head h's z is run
     * a's (z = pattern v); the other heads of the group read run a's values
     * with run b's pattern. */
    const hs_site_key keys[3] = { { HS_SITE_PATTERN, l }, { HS_SITE_V, l }, { HS_SITE_Z, l } };
    hs_act_cache ra, rb;
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&ra, keys, 3, HS_CACHE_COPY), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&rb, keys + 2, 1, HS_CACHE_COPY), HS_OK);
    free(logits_with(&a, &m, ta, NULL, 0, &ra));
    const hs_real *za = hs_act_cache_get(&ra, HS_SITE_Z, l, NULL);
    const hs_intervention ivs[2] = {
        { HS_SITE_PATTERN, l, h, -1, HS_IV_REPLACE, hs_act_cache_get(&ra, HS_SITE_PATTERN, l, NULL),
          0 },
        { HS_SITE_V, l, j, -1, HS_IV_REPLACE, hs_act_cache_get(&ra, HS_SITE_V, l, NULL), 0 },
    };
    free(logits_with(&a, &m, tb, ivs, 2, &rb));
    const hs_real *zb = hs_act_cache_get(&rb, HS_SITE_Z, l, NULL);
    double worst = 0, other = 0;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int hh = 0; hh < H; hh++)
            for (int i = 0; i < dh; i++) {
                double dif = fabs((double)za[(r * H + hh) * dh + i] - zb[(r * H + hh) * dh + i]);
                if (hh == h)
                    worst = fmax(worst, dif);
                else
                    other = fmax(other, dif);
            }
    CU_ASSERT(worst <= TOL);
    CU_ASSERT(other > 1e-4);
    hs_act_cache_free(&ra), hs_act_cache_free(&rb);

    /* A hand-written hook that puts weight on masked keys: the kernel resets
     * them to 0, the maps observer sees that, and z mixes exactly it. */
    pattern_ctx pc = { l, h, malloc(sizeof(hs_real) * B * H * T * T) };
    hs_act_cache vz;
    const hs_site_key vzk[2] = { { HS_SITE_V, l }, { HS_SITE_Z, l } };
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&vz, vzk, 2, HS_CACHE_COPY), HS_OK);
    hs_hook_plan rec = { NULL, 0, &vz };
    hs_hooks hk = { .ctx = &pc, .on_maps = keep_maps };
    CU_ASSERT_EQUAL_FATAL(hs_hooks_attach(&hk, c, &rec), HS_OK);
    hk.site[HS_SITE_PATTERN] = (hs_site_hook){ flat_rows, &pc };
    free(logits_of(&a, &m, tb, &hk));
    const hs_real *v = hs_act_cache_get(&vz, HS_SITE_V, l, NULL);
    const hs_real *z = hs_act_cache_get(&vz, HS_SITE_Z, l, NULL);
    int bad_map = 0;
    double zerr = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const hs_real *row = pc.maps + (((size_t)b * H + h) * T + t) * T;
            for (int s = 0; s < T; s++)
                bad_map += row[s] != (s <= t ? (hs_real)1 / T : 0);
            for (int i = 0; i < dh; i++) {
                double want = 0;
                for (int s = 0; s <= t; s++)
                    want += (double)((hs_real)1 / T) * v[((size_t)b * T + s) * G * dh + j * dh + i];
                zerr = fmax(zerr, fabs(want - z[((size_t)b * T + t) * H * dh + h * dh + i]));
            }
        }
    CU_ASSERT_EQUAL(bad_map, 0);
    CU_ASSERT(zerr <= TOL);
    hs_act_cache_free(&vz);
    free(pc.maps);

    /* Without maps kept there is nothing to hook. */
    hs_acts ai;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&ai, c, B, T, HS_ACTS_INFER), HS_OK);
    hs_hooks only = { 0 };
    only.site[HS_SITE_PATTERN] = (hs_site_hook){ flat_rows, &pc };
    CU_ASSERT_EQUAL(hs_forward(&ai, &m, tb, NULL, &only), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "pattern"));
    hs_acts_free(&ai);
    hs_acts_free(&a);
    hs_model_free(&m);
}

/* ---- attn_out, mlp_out: zero equals zeroed weights ---- */

static void zero_weights(hs_real *w, size_t n)
{
    if (w)
        memset(w, 0, sizeof(hs_real) * n);
}

static void test_zeroing_attn_out_and_mlp_out_equals_zeroed_weights(void)
{
    const char *names[2] = { "gpt2_tiny", "hs_mixed" };
    for (int i = 0; i < 2; i++) {
        hs_model m, z;
        load(&m, names[i]);
        load(&z, names[i]);
        const hs_model_config *c = &m.cfg;
        const int d = c->d_model, F = c->d_ff, L = c->n_layer;
        hs_intervention ivs[2 * 8];
        for (int l = 0; l < L; l++) {
            const size_t hd = (size_t)c->n_head[l] * c->head_dim;
            hs_layer_weights *lw = &z.w.layer[l];
            zero_weights(lw->attn.w_o, (size_t)d * hd);
            zero_weights(lw->attn.b_o, (size_t)d);
            zero_weights(lw->proj_w, (size_t)d * F);
            zero_weights(lw->proj_b, (size_t)d);
            zero_weights(lw->down_w, (size_t)d * F);
            zero_weights(lw->down_b, (size_t)d);
            ivs[2 * l] = (hs_intervention){ HS_SITE_ATTN_OUT, l, -1, -1, HS_IV_ZERO, NULL, 0 };
            ivs[2 * l + 1] = (hs_intervention){ HS_SITE_MLP_OUT, l, 0, -1, HS_IV_ZERO, NULL, 0 };
        }
        enum { B = 2, T = 10 };
        int32_t tok[B * T];
        tokens(tok, B * T, c->vocab_size, 12);
        hs_acts a;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
        hs_real *clean = logits_of(&a, &m, tok, NULL);
        hs_real *hooked = logits_with(&a, &m, tok, ivs, 2 * L, NULL);
        hs_real *oracle = logits_of(&a, &z, tok, NULL);
        const size_t n = n_logits(&a, &m);
        CU_ASSERT(max_diff(hooked, oracle, n) <= TOL);
        CU_ASSERT(max_diff(hooked, clean, n) > 1e-3);
        free(clean), free(hooked), free(oracle);
        hs_acts_free(&a);
        hs_model_free(&m);
        hs_model_free(&z);
    }
}

/* ---- steering, mean, resample through the forward ---- */

static void test_steering_resample_and_mean_match_their_replacements(void)
{
    hs_model m;
    load(&m, "llama_gqa");
    const hs_model_config *c = &m.cfg;
    enum { B = 3, T = 12, l = 1 };
    const int d = c->d_model, H = c->n_head[l], dh = c->head_dim;
    int32_t tok[B * T], tok2[B * T];
    tokens(tok, B * T, c->vocab_size, 13);
    tokens(tok2, B * T, c->vocab_size, 14);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
    const size_t n = n_logits(&a, &m);
    const hs_site_key keys[2] = { { HS_SITE_RESID_PRE, l }, { HS_SITE_Z, l } };
    hs_act_cache run;
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&run, keys, 2, HS_CACHE_COPY), HS_OK);
    hs_real *clean = logits_with(&a, &m, tok, NULL, 0, &run);
    const hs_real *x = hs_act_cache_get(&run, HS_SITE_RESID_PRE, l, NULL);
    const hs_real *z = hs_act_cache_get(&run, HS_SITE_Z, l, NULL);

    /* add s to the residual == replace it by the run's residual + s */
    hs_real s[64], *shifted = malloc(sizeof(hs_real) * B * T * d);
    for (int i = 0; i < d; i++)
        s[i] = (hs_real)(0.3 * cos(i));
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int i = 0; i < d; i++)
            shifted[r * d + i] = x[r * d + i] + s[i];
    hs_intervention add = { HS_SITE_RESID_PRE, l, -1, -1, HS_IV_ADD, s, (size_t)d };
    hs_intervention rep = { HS_SITE_RESID_PRE, l, -1, -1, HS_IV_REPLACE, shifted, 0 };
    hs_real *la = logits_with(&a, &m, tok, &add, 1, NULL);
    hs_real *lr = logits_with(&a, &m, tok, &rep, 1, NULL);
    CU_ASSERT(!memcmp(la, lr, sizeof(hs_real) * n));
    CU_ASSERT(max_diff(la, clean, n) > 1e-4);
    free(la), free(lr), free(shifted);

    /* resample head h == replace it by z of the next sequence (SPEC §5) */
    const int h = 2;
    hs_real *rolled = malloc(sizeof(hs_real) * B * T * H * dh);
    for (int b = 0; b < B; b++)
        memcpy(rolled + (size_t)b * T * H * dh, z + (size_t)((b + 1) % B) * T * H * dh,
               sizeof(hs_real) * T * H * dh);
    hs_intervention res = { HS_SITE_Z, l, h, -1, HS_IV_RESAMPLE, NULL, 0 };
    hs_intervention rr = { HS_SITE_Z, l, h, -1, HS_IV_REPLACE, rolled, 0 };
    hs_real *lres = logits_with(&a, &m, tok, &res, 1, NULL);
    hs_real *lrr = logits_with(&a, &m, tok, &rr, 1, NULL);
    CU_ASSERT(!memcmp(lres, lrr, sizeof(hs_real) * n));
    CU_ASSERT(max_diff(lres, clean, n) > 1e-4);
    free(lres), free(lrr), free(rolled);

    /* mean: the cache's mean over two batches equals the plain mean of the
     * two runs' copies, and the mean intervention writes it at every position */
    hs_act_cache mean, second;
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&mean, keys + 1, 1, HS_CACHE_MEAN), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&second, keys + 1, 1, HS_CACHE_COPY), HS_OK);
    free(logits_with(&a, &m, tok, NULL, 0, &mean));
    free(logits_with(&a, &m, tok2, NULL, 0, &mean));
    free(logits_with(&a, &m, tok2, NULL, 0, &second));
    const hs_real *z2 = hs_act_cache_get(&second, HS_SITE_Z, l, NULL);
    hs_real zmean[64];
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_mean(&mean, HS_SITE_Z, l, zmean), HS_OK);
    double err = 0;
    for (int k = 0; k < H * dh; k++) {
        double sum = 0;
        for (size_t r = 0; r < (size_t)B * T; r++)
            sum += (double)z[r * H * dh + k] + z2[r * H * dh + k];
        err = fmax(err, fabs(sum / (2.0 * B * T) - zmean[k]));
    }
    CU_ASSERT(err <= TOL);
    hs_act_cache after;
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&after, keys + 1, 1, HS_CACHE_COPY), HS_OK);
    hs_intervention mi = { HS_SITE_Z, l, h, -1, HS_IV_MEAN, zmean, (size_t)H * dh };
    free(logits_with(&a, &m, tok, &mi, 1, &after));
    const hs_real *zm = hs_act_cache_get(&after, HS_SITE_Z, l, NULL);
    int wrong = 0;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int hh = 0; hh < H; hh++)
            for (int i = 0; i < dh; i++) {
                size_t o = (r * H + hh) * dh + i;
                wrong += zm[o] != (hh == h ? zmean[hh * dh + i] : z[o]);
            }
    CU_ASSERT_EQUAL(wrong, 0);
    hs_act_cache_free(&mean), hs_act_cache_free(&second), hs_act_cache_free(&after);
    hs_act_cache_free(&run);
    free(clean);
    hs_acts_free(&a);
    hs_model_free(&m);
}

/* ---- the kinds on a hand-built tensor ---- */

static void test_intervention_kinds_on_a_hand_built_tensor(void)
{
    enum { B = 3, T = 4, NH = 2, W = 3, N = B * T * NH * W };
    hs_real x[N], x0[N], src[N], per_head[NH * W];
    for (int i = 0; i < N; i++)
        x0[i] = (hs_real)(i + 1), src[i] = (hs_real)(-i - 1);
    for (int i = 0; i < NH * W; i++)
        per_head[i] = (hs_real)(100 + i);
    const hs_site_view v = hs_site_view_btw(HS_SITE_Z, 0, x, B, T, NH, W);
#define AT(arr, b, t, h, i) (arr)[(((b) * T + (t)) * NH + (h)) * W + (i)]
    struct {
        hs_intervention iv;
    } cases[] = {
        { { HS_SITE_Z, 0, 1, 2, HS_IV_ZERO, NULL, 0 } },
        { { HS_SITE_Z, 0, 0, -1, HS_IV_MEAN, per_head, NH * W } },
        { { HS_SITE_Z, 0, -1, -1, HS_IV_RESAMPLE, NULL, 0 } },
        { { HS_SITE_Z, 0, -1, 1, HS_IV_REPLACE, src, N } },
        { { HS_SITE_Z, 0, 1, -1, HS_IV_ADD, per_head, 0 } },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const hs_intervention *iv = &cases[c].iv;
        memcpy(x, x0, sizeof x);
        CU_ASSERT_EQUAL_FATAL(hs_intervene(&v, iv), HS_OK);
        int wrong = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < NH; h++)
                    for (int i = 0; i < W; i++) {
                        const int hit = (iv->head < 0 || iv->head == h) &&
                                        (iv->position < 0 || iv->position == t);
                        hs_real want = AT(x0, b, t, h, i);
                        if (hit && iv->kind == HS_IV_ZERO)
                            want = 0;
                        if (hit && iv->kind == HS_IV_MEAN)
                            want = per_head[h * W + i];
                        if (hit && iv->kind == HS_IV_RESAMPLE)
                            want = AT(x0, (b + 1) % B, t, h, i);
                        if (hit && iv->kind == HS_IV_REPLACE)
                            want = AT(src, b, t, h, i);
                        if (hit && iv->kind == HS_IV_ADD)
                            want += per_head[h * W + i];
                        wrong += AT(x, b, t, h, i) != want;
                    }
        if (wrong)
            printf("\n    %s: %d wrong", hs_iv_kind_name(iv->kind), wrong);
        CU_ASSERT_EQUAL(wrong, 0);
    }
#undef AT
    /* What only the forward knows is checked when applied. */
    memcpy(x, x0, sizeof x);
    const hs_intervention bad[] = {
        { HS_SITE_Z, 0, 2, -1, HS_IV_ZERO, NULL, 0 },           /* head */
        { HS_SITE_Z, 0, -1, 4, HS_IV_ZERO, NULL, 0 },           /* position */
        { HS_SITE_Z, 0, 0, -1, HS_IV_MEAN, per_head, W },       /* short source */
        { HS_SITE_Z, 0, 0, -1, HS_IV_REPLACE, src, N - 1 },     /* short source */
        { HS_SITE_Z, 0, 0, -1, HS_IV_MEAN, NULL, 0 },           /* no source */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(hs_intervene(&v, &bad[i]), HS_EINVAL);
    CU_ASSERT(!memcmp(x, x0, sizeof x));
    const hs_site_view one = hs_site_view_btw(HS_SITE_Z, 0, x, 1, T, NH, W);
    const hs_intervention res = { HS_SITE_Z, 0, 0, -1, HS_IV_RESAMPLE, NULL, 0 };
    CU_ASSERT_EQUAL(hs_intervene(&one, &res), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "at least 2"));
}

/* Resample with a batch of one would be the identity: the forward stops. */
static void test_resample_with_one_sequence_stops_the_forward(void)
{
    hs_model m;
    load(&m, "gpt2_tiny");
    int32_t tok[8];
    tokens(tok, 8, m.cfg.vocab_size, 15);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, 1, 8, HS_ACTS_INFER), HS_OK);
    hs_intervention iv = { HS_SITE_Z, 0, 1, -1, HS_IV_RESAMPLE, NULL, 0 };
    hs_hook_plan plan = { &iv, 1, NULL };
    hs_hooks h = { 0 };
    CU_ASSERT_EQUAL_FATAL(hs_hooks_attach(&h, &m.cfg, &plan), HS_OK);
    CU_ASSERT_EQUAL(hs_forward(&a, &m, tok, NULL, &h), HS_EINVAL);
    hs_acts_free(&a);
    hs_model_free(&m);
}

static void test_interventions_are_checked_against_the_model(void)
{
    hs_model m;
    load(&m, "hs_mixed"); /* 2 layers, heads 4 and 2, kv heads 2 and 1 */
    const hs_model_config *c = &m.cfg;
    hs_real src[4] = { 0 };
    const hs_intervention good[] = {
        { HS_SITE_RESID_PRE, 2, -1, -1, HS_IV_ZERO, NULL, 0 }, /* after the last layer */
        { HS_SITE_Z, 0, 3, -1, HS_IV_ZERO, NULL, 0 },
        { HS_SITE_K, 0, 1, 3, HS_IV_MEAN, src, 0 },
        { HS_SITE_PATTERN, 1, 1, 0, HS_IV_REPLACE, src, 0 },
        { HS_SITE_MLP_OUT, 1, 0, -1, HS_IV_RESAMPLE, NULL, 0 },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc = hs_intervention_check(&good[i], c);
        if (rc)
            printf("\n    %s", hs_last_error());
        CU_ASSERT_EQUAL(rc, HS_OK);
    }
    const struct {
        hs_intervention iv;
        const char *says;
    } bad[] = {
        { { HS_SITE_Z, 2, -1, -1, HS_IV_ZERO, NULL, 0 }, "layer 2 outside 0..1" },
        { { HS_SITE_RESID_PRE, 3, -1, -1, HS_IV_ZERO, NULL, 0 }, "layer 3 outside 0..2" },
        { { HS_SITE_Z, 1, 2, -1, HS_IV_ZERO, NULL, 0 }, "head 2 outside 0..1" },
        { { HS_SITE_K, 0, 2, -1, HS_IV_ZERO, NULL, 0 }, "head 2 outside 0..1" },
        { { HS_SITE_ATTN_OUT, 0, 1, -1, HS_IV_ZERO, NULL, 0 }, "head 1 outside 0..0" },
        { { HS_SITE_Z, 0, 0, -2, HS_IV_ZERO, NULL, 0 }, "position -2" },
        { { HS_SITE_Z, 0, 0, -1, HS_IV_REPLACE, NULL, 0 }, "replace needs a source" },
        { { HS_SITE_Z, 0, 0, -1, HS_IV_KINDS, NULL, 0 }, "no kind" },
        { { HS_SITE_PATTERN, 0, 0, -1, HS_IV_MEAN, src, 0 }, "masked keys" },
        { { HS_N_SITES, 0, 0, -1, HS_IV_ZERO, NULL, 0 }, "no hook site" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(hs_intervention_check(&bad[i].iv, c), HS_EINVAL);
        if (!strstr(hs_last_error(), bad[i].says))
            printf("\n    case %zu says \"%s\", want \"%s\"", i, hs_last_error(), bad[i].says);
        CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), bad[i].says));
    }
    /* attach refuses a bad list and then touches no site */
    hs_hooks h = { 0 };
    hs_hook_plan plan = { &bad[0].iv, 1, NULL };
    CU_ASSERT_EQUAL(hs_hooks_attach(&h, c, &plan), HS_EINVAL);
    CU_ASSERT_PTR_NULL(h.site[HS_SITE_Z].fn);
    hs_model_free(&m);

    hs_model_config ao;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&ao, "attn-only"), HS_OK);
    const hs_intervention mlp = { HS_SITE_MLP_OUT, 0, -1, -1, HS_IV_ZERO, NULL, 0 };
    CU_ASSERT_EQUAL(hs_intervention_check(&mlp, &ao), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "no MLP"));

    for (int s = 0; s < HS_N_SITES; s++) {
        hs_site back = HS_N_SITES;
        CU_ASSERT_EQUAL(hs_site_parse(hs_site_name((hs_site)s), &back), HS_OK);
        CU_ASSERT_EQUAL(back, s);
    }
    hs_site none;
    CU_ASSERT_EQUAL(hs_site_parse("resid_post", &none), HS_EINVAL);
    CU_ASSERT_PTR_NULL(hs_site_name(HS_N_SITES));
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_no_hooks_empty_plans_and_observers_are_bit_identical",
          test_no_hooks_empty_plans_and_observers_are_bit_identical },
        { "test_zeroing_a_heads_z_equals_gating_it_to_zero",
          test_zeroing_a_heads_z_equals_gating_it_to_zero },
        { "test_replacing_resid_pre_with_another_runs_gives_that_runs_output",
          test_replacing_resid_pre_with_another_runs_gives_that_runs_output },
        { "test_resid_pre_of_layer_zero_is_the_embedding",
          test_resid_pre_of_layer_zero_is_the_embedding },
        { "test_patching_every_heads_z_gives_that_runs_attention_output",
          test_patching_every_heads_z_gives_that_runs_attention_output },
        { "test_q_k_v_writes_are_what_the_scores_and_mix_use",
          test_q_k_v_writes_are_what_the_scores_and_mix_use },
        { "test_pattern_writes_are_what_z_mixes", test_pattern_writes_are_what_z_mixes },
        { "test_zeroing_attn_out_and_mlp_out_equals_zeroed_weights",
          test_zeroing_attn_out_and_mlp_out_equals_zeroed_weights },
        { "test_steering_resample_and_mean_match_their_replacements",
          test_steering_resample_and_mean_match_their_replacements },
        { "test_intervention_kinds_on_a_hand_built_tensor",
          test_intervention_kinds_on_a_hand_built_tensor },
        { "test_resample_with_one_sequence_stops_the_forward",
          test_resample_with_one_sequence_stops_the_forward },
        { "test_interventions_are_checked_against_the_model",
          test_interventions_are_checked_against_the_model },
    };
    return hs_run_tests("hooks_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
