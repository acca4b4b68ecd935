/* Multi-head latent attention (attention "mla", SPEC §10) against the
 * float64 PyTorch reference of scripts/oracle/gen_mla.py (written from
 * Hugging Face's DeepseekV2Attention): logits, loss, layer 0's maps and head
 * outputs, and the gradient of every stored tensor, with a plain q_proj and
 * with q_lora_rank. Then the absorbed cached step against the naive
 * forward, the latent cache's bytes, gates and the z hook, the config's
 * round trip and its refusals. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "config_file.h"
#include "rng.h"
#include "config.h"
#include "fixture.h"
#include "layers.h"
#include "linalg.h"
#include "mla.h"
#include "runner.h"
#include "safetensors.h"
#include "trainer.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-9, GRAD_TOL = 1e-6; /* gradients are stored as F32 */
static const double CACHE_TOL = 1e-12;
#else
static const double TOL = 1e-4, GRAD_TOL = 1e-4;
static const double CACHE_TOL = 1e-5;
#endif

static const char *expected_txt(void) { return HS_FIXTURE_DIR "/mla/expected.txt"; }

static double max_diff(const hs_real *a, const hs_real *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

static int load_case(hs_model *m, const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/mla/%s", HS_FIXTURE_DIR, name);
    int rc = hs_checkpoint_load(m, dir);
    if (rc)
        printf("\n    load: %s\n", hs_last_error());
    return rc;
}

/* Logits, loss, layer 0's maps and head outputs, and every gradient of
 * checkpoint `name` against its case. */
static void oracle_case(const char *name)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/mla/%s", HS_FIXTURE_DIR, name);
    fx_oracle o;
    fx_oracle_open(&o, expected_txt(), name, dir);
    CU_ASSERT_FATAL(o.m.cfg.mla);
    fx_oracle_logits(&o, name, TOL);
    const fx_tensor *att = fx_tensor_get(&o.fc, "att0"), *z = fx_tensor_get(&o.fc, "z0");
    const double ea = fx_err(o.tr.acts.layer[0].attn.att, att->v, att->n);
    const double ez = fx_err(o.tr.acts.layer[0].attn.z, z->v, z->n);
    printf(", maps %.3g, z %.3g", ea, ez);
    CU_ASSERT(ea <= TOL);
    CU_ASSERT(ez <= TOL);
    fx_oracle_loss(&o, TOL, 1);
    snprintf(path, sizeof path, "%s/grad.safetensors", dir);
    const hs_model g = fx_oracle_grads(&o);
    CU_ASSERT_EQUAL(fx_compare_safetensors(path, &g, GRAD_TOL), o.m.n_tensors);
    fx_oracle_close(&o);
}

static void test_mla_q_proj_matches_torch(void) { oracle_case("mla_q"); }
static void test_mla_q_lora_matches_torch(void) { oracle_case("mla_qlora"); }

/* Layer 0 of `name` over random x (B,T,d): the naive forward (every head's
 * keys and values) against the absorbed cached steps, a prefill of 3 then
 * one token at a time; with gates on the heads. */
static void absorbed_case(const char *name)
{
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(load_case(&m, name), HS_OK);
    const hs_model_config *c = &m.cfg;
    const int B = 2, T = 9, d = c->d_model, H = c->n_head[0], v = c->v_head_dim;
    const hs_mla_config mc = hs_config_mla(c, 0);
    const hs_mla_weights *w = &m.w.layer[0].mla;
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
    hs_rng rng;
    hs_rng_seed(&rng, 5);
    const size_t N = (size_t)B * T;
    hs_real *x = malloc(sizeof(hs_real) * N * d), *naive = malloc(sizeof(hs_real) * N * d);
    hs_real *step = malloc(sizeof(hs_real) * N * d), *zs = malloc(sizeof(hs_real) * N * H * v);
    hs_real *xb = malloc(sizeof(hs_real) * B * 3 * d), *ob = malloc(sizeof(hs_real) * B * 3 * d);
    hs_real *zb = malloc(sizeof(hs_real) * B * 3 * H * v);
    for (size_t i = 0; i < N * d; i++)
        x[i] = (hs_real)hs_rng_normal(&rng);
    const hs_real xi[2] = { 1, (hs_real)0.5 };
    hs_attn_acts *at = &a.layer[0].attn;
    at->hooks = (hs_attn_hooks){ { 0 }, NULL, 0 };
    CU_ASSERT_EQUAL_FATAL(hs_mla_forward_heads(&a.layer[0].mla, at, w, &mc, x), HS_OK);
    const hs_attn_config ac = hs_config_attn(c, 0);
    hs_attn_forward_output(naive, at, &m.w.layer[0].attn, &ac, H == 2 ? xi : NULL, 0);

    hs_mla_cache cache;
    CU_ASSERT_EQUAL_FATAL(hs_mla_cache_init(&cache, B, c->kv_lora_rank, c->qk_rope_head_dim, T),
                          HS_OK);
    /* the cache's rows are (B, cap, ...): a chunk of L positions of each sequence */
    for (int t0 = 0; t0 < T;) {
        const int L = t0 ? 1 : 3;
        for (int b = 0; b < B; b++)
            memcpy(xb + (size_t)b * L * d, x + ((size_t)b * T + t0) * d, sizeof(hs_real) * L * d);
        CU_ASSERT_EQUAL_FATAL(
            hs_mla_forward_cached(ob, zb, w, &mc, xb, L, H == 2 ? xi : NULL, &cache), HS_OK);
        for (int b = 0; b < B; b++) {
            memcpy(step + ((size_t)b * T + t0) * d, ob + (size_t)b * L * d,
                   sizeof(hs_real) * L * d);
            memcpy(zs + ((size_t)b * T + t0) * H * v, zb + (size_t)b * L * H * v,
                   sizeof(hs_real) * L * H * v);
        }
        t0 += L;
    }
    CU_ASSERT_EQUAL(cache.len, T);
    const double eo = max_diff(step, naive, N * d), ez = max_diff(zs, at->z, N * H * v);
    printf("\n    %s: absorbed vs naive: out max |diff| %.3g, z %.3g", name, eo, ez);
    CU_ASSERT(eo <= CACHE_TOL);
    CU_ASSERT(ez <= CACHE_TOL);
    /* a full cache refuses another step */
    CU_ASSERT_EQUAL(hs_mla_forward_cached(ob, NULL, w, &mc, xb, 1, NULL, &cache), HS_EINVAL);
    hs_mla_cache_free(&cache);
    free(x), free(naive), free(step), free(zs), free(xb), free(ob), free(zb);
    hs_acts_free(&a);
    hs_model_free(&m);
}

static void test_absorbed_cached_decoding_equals_naive_forward(void)
{
    absorbed_case("mla_q");
    absorbed_case("mla_qlora");
}

/* A whole model decoded token by token, every layer reading its latent
 * cache through the absorbed step (pre-norm RMSNorm, SwiGLU, final norm,
 * as the mla fixtures), against the logits of the full forward: what a
 * model-level `generate` does with hs_mla_forward_cached. */
static void test_model_decoding_with_latent_caches_equals_full_forward(void)
{
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(load_case(&m, "mla_qlora"), HS_OK);
    const hs_model_config *c = &m.cfg;
    const int T = 8, d = c->d_model, F = c->d_ff, V = c->vocab_size, L = c->n_layer;
    int32_t tok[8] = { 3, 17, 4, 4, 29, 0, 11, 3 };
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, 1, T, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, NULL), HS_OK);
    hs_mla_cache cache[2];
    for (int l = 0; l < L; l++)
        CU_ASSERT_EQUAL_FATAL(
            hs_mla_cache_init(&cache[l], 1, c->kv_lora_rank, c->qk_rope_head_dim, T), HS_OK);
    hs_real x[64], n[64], o[64], rstd, g[64], u[64], logits[64];
    CU_ASSERT_FATAL(d <= 64 && F <= 64 && V <= 64);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        memcpy(x, m.w.wte + (size_t)tok[t] * d, sizeof(hs_real) * d);
        for (int l = 0; l < L; l++) {
            const hs_layer_weights *lw = &m.w.layer[l];
            const hs_mla_config mc = hs_config_mla(c, l);
            hs_rmsnorm_forward(n, &rstd, x, lw->ln1_w, 1, d, c->norm_eps);
            CU_ASSERT_EQUAL_FATAL(hs_mla_forward_cached(o, NULL, &lw->mla, &mc, n, 1, NULL,
                                                        &cache[l]),
                                  HS_OK);
            hs_add(x, x, o, d);
            hs_rmsnorm_forward(n, &rstd, x, lw->ln2_w, 1, d, c->norm_eps);
            hs_linear_forward(g, n, lw->gate_w, NULL, 1, d, F);
            hs_linear_forward(u, n, lw->up_w, NULL, 1, d, F);
            hs_swiglu_forward(g, g, u, F);
            hs_linear_forward(o, g, lw->down_w, NULL, 1, F, d);
            hs_add(x, x, o, d);
        }
        hs_rmsnorm_forward(n, &rstd, x, m.w.lnf_w, 1, d, c->norm_eps);
        hs_linear_forward(logits, n, m.w.lm_w, NULL, 1, d, V);
        const double e = max_diff(logits, a.logits + (size_t)t * V, V);
        worst = e > worst ? e : worst;
    }
    printf("\n    decoded logits vs full forward: max |diff| %.3g", worst);
    CU_ASSERT(worst <= CACHE_TOL * 10); /* logits of magnitude ~10 */
    for (int l = 0; l < L; l++)
        hs_mla_cache_free(&cache[l]);
    hs_acts_free(&a);
    hs_model_free(&m);
}

/* The cache holds (C + r) values per token and sequence: what kv-bytes
 * --mla-latent C --mla-rope r --bytes sizeof(hs_real) prints for one
 * layer, N (C + r) E B T. */
static void test_cache_bytes_equal_kv_bytes_formula(void)
{
    const int B = 3, C = 32, r = 8, T = 100;
    hs_mla_cache cache;
    CU_ASSERT_EQUAL_FATAL(hs_mla_cache_init(&cache, B, C, r, T), HS_OK);
    const double kv_bytes_mla = 1.0 * (C + r) * sizeof(hs_real) * B * T; /* cmd_misc.c, N = 1 */
    CU_ASSERT_EQUAL(hs_mla_cache_bytes(B, C, r, T), (size_t)kv_bytes_mla);
    CU_ASSERT_EQUAL(hs_mla_cache_bytes(B, C, r, cache.cap),
                    sizeof(hs_real) * ((size_t)B * cache.cap * cache.C +
                                       (size_t)B * cache.cap * cache.r));
    hs_mla_cache_free(&cache);
}

/* Gate 0 on head h and a z hook that zeroes head h give the same logits. */
static int zero_head1(void *ctx, const hs_site_view *v)
{
    (void)ctx;
    for (int b = 0; b < v->B; b++)
        for (int t = 0; t < v->T; t++)
            memset(v->x + b * v->sb + t * v->st + 1 * v->sh, 0, sizeof(hs_real) * v->width);
    return HS_OK;
}

static void test_z_hook_and_gate_act_on_the_mla_head(void)
{
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(load_case(&m, "mla_qlora"), HS_OK);
    const int B = 2, T = 8;
    int32_t tok[16];
    for (int i = 0; i < 16; i++)
        tok[i] = (i * 7) % m.cfg.vocab_size;
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_MAPS), HS_OK);
    const size_t n = (size_t)B * T * m.cfg.vocab_size;
    hs_real *plain = malloc(sizeof(hs_real) * n), *gated = malloc(sizeof(hs_real) * n);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, NULL), HS_OK);
    memcpy(plain, a.logits, sizeof(hs_real) * n);
    hs_real g0[2] = { 1, 0 };
    hs_hooks gh = { 0 };
    hs_hooks zh = { 0 };
    zh.site[HS_SITE_Z] = (hs_site_hook){ zero_head1, NULL };
    /* the hook zeroes head 1 of both layers; gate it in both too */
    const hs_real *both[2] = { g0, g0 };
    gh.gates = both;
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, &gh), HS_OK);
    memcpy(gated, a.logits, sizeof(hs_real) * n);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, &zh), HS_OK);
    const double diff = max_diff(a.logits, gated, n), moved = max_diff(plain, gated, n);
    printf("\n    z hook vs gate: %.3g (the head moves the logits by %.3g)", diff, moved);
    CU_ASSERT(diff <= 1e-6);
    CU_ASSERT(moved > 1e-4);
    free(plain), free(gated);
    hs_acts_free(&a);
    hs_model_free(&m);
}

static double loss_sum(const hs_acts *a)
{
    double s = 0;
    for (int i = 0; i < a->B * a->T; i++)
        s += a->losses[i];
    return s;
}

/* Per-sequence gate gradients (importance's) of an MLA model against
 * central differences of the summed loss. */
static void test_gate_gradients_match_finite_differences(void)
{
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(load_case(&m, "mla_qlora"), HS_OK);
    const int B = 2, T = 8, H = m.cfg.n_head[0];
    int32_t in[16], tg[16];
    for (int i = 0; i < 16; i++)
        in[i] = (i * 5 + 1) % m.cfg.vocab_size, tg[i] = (i * 3 + 2) % m.cfg.vocab_size;
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_TRAIN), HS_OK);
    hs_real xi[2][4], dxi[2][4] = { { 0 } };
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < B * H; k++)
            xi[l][k] = 1;
    const hs_real *gates[2] = { xi[0], xi[1] };
    hs_real *dgates[2] = { dxi[0], dxi[1] };
    hs_hooks hk = { .gates = gates, .gates_per_seq = 1 };
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, in, tg, &hk), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_backward(NULL, dgates, &a, &m, in, tg, &hk, 1), HS_OK);
    const double eps = 1e-2;
    double worst = 0;
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < B * H; k++) {
            xi[l][k] = (hs_real)(1 + eps);
            CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, in, tg, &hk), HS_OK);
            const double up = loss_sum(&a);
            xi[l][k] = (hs_real)(1 - eps);
            CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, in, tg, &hk), HS_OK);
            const double down = loss_sum(&a);
            xi[l][k] = 1;
            const double fd = (up - down) / (2 * eps);
            const double e = fabs(fd - dxi[l][k]) / fmax(1, fabs(fd));
            worst = e > worst ? e : worst;
        }
    printf("\n    gate gradients vs central differences: worst %.3g", worst);
    CU_ASSERT(worst <= 2e-3);
    hs_acts_free(&a);
    hs_model_free(&m);
}

static void test_mla_preset_round_trips_and_inits_norms_to_one(void)
{
    hs_model_config c, back;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "mla"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "q_lora_rank=24"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "n_head=2"), HS_OK);
    char *json = hs_config_to_json(&c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"attention\""));
    int rc = hs_config_parse(&back, json, "round trip");
    if (rc)
        printf("\n    %s", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    CU_ASSERT(back.mla && back.q_lora_rank == 24 && back.kv_lora_rank == c.kv_lora_rank &&
              back.qk_nope_head_dim == c.qk_nope_head_dim &&
              back.qk_rope_head_dim == c.qk_rope_head_dim && back.v_head_dim == c.v_head_dim &&
              back.head_dim == c.v_head_dim && back.n_head[0] == 2 && back.n_kv_head[1] == 2);
    free(json);
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_model_init(&m, &c), HS_OK);
    hs_model_init_random(&m, 3);
    const int i = hs_model_find(&m, "h.1.attn.kv_a_layernorm.weight");
    const int j = hs_model_find(&m, "h.1.attn.q_a_layernorm.weight");
    CU_ASSERT_FATAL(i >= 0 && j >= 0);
    CU_ASSERT_EQUAL(m.params[m.tensors[i].offset], 1);
    CU_ASSERT_EQUAL(m.params[m.tensors[j].offset + 5], 1);
    size_t count = 0;
    CU_ASSERT_EQUAL(hs_config_param_count(&c, &count), HS_OK);
    CU_ASSERT(count >= m.n_params); /* a bound (biases and norms counted) */
    const hs_mla_config mc = hs_config_mla(&c, 0);
    size_t layer0 = 0;
    for (int k = 0; k < m.n_tensors; k++)
        if (!strncmp(m.tensors[k].name, "h.0.attn.", 9))
            layer0 += m.tensors[k].size;
    CU_ASSERT_EQUAL(layer0, hs_mla_param_count(&mc));
    hs_model_free(&m);
}

/* config.json text of the headscope MLA model with `extra` keys added. */
static int parse_with(const char *extra, const char *attention)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model_type\": \"headscope\", \"vocab_size\": 32, \"n_layer\": 2, \"d_model\": 16,"
             " \"n_head\": 2, \"n_ctx\": 64, \"norm\": \"rmsnorm\", \"mlp\": \"none\"%s%s%s}",
             attention ? ", \"attention\": " : "", attention ? attention : "", extra);
    hs_model_config c;
    return hs_config_parse(&c, json, "config.json");
}

static void expect_refused(const char *extra, const char *attention, const char *key)
{
    const int rc = parse_with(extra, attention);
    CU_ASSERT_NOT_EQUAL(rc, HS_OK);
    const int named = rc && strstr(hs_last_error(), key) != NULL;
    if (!named)
        printf("\n    %s: want a refusal naming %s, got: %s", extra, key,
               rc ? hs_last_error() : "accepted");
    CU_ASSERT(named);
}

static void test_unsupported_mla_combinations_are_refused_naming_the_key(void)
{
    const char *sizes = ", \"kv_lora_rank\": 8, \"qk_nope_head_dim\": 4, \"qk_rope_head_dim\": 4, "
                        "\"v_head_dim\": 6";
    char mla[256];
    snprintf(mla, sizeof mla, ", \"positional\": \"rope\"%s", sizes);
    char buf[512];
    CU_ASSERT_EQUAL(parse_with(mla, "\"mla\""), HS_OK);
    CU_ASSERT_EQUAL(parse_with(", \"q_lora_rank\": null", "\"gqa\""), HS_OK);
    snprintf(buf, sizeof buf, "%s, \"window\": 4", mla);
    expect_refused(buf, "\"mla\"", "window");
    snprintf(buf, sizeof buf, "%s, \"n_kv_head\": 1", mla);
    expect_refused(buf, "\"mla\"", "n_kv_head");
    snprintf(buf, sizeof buf, "%s, \"head_dim\": 8", mla);
    expect_refused(buf, "\"mla\"", "head_dim");
    snprintf(buf, sizeof buf, "%s, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}",
             mla);
    expect_refused(buf, "\"mla\"", "rope_scaling");
    snprintf(buf, sizeof buf, "%s, \"attn_bias\": true", mla);
    expect_refused(buf, "\"mla\"", "attn_bias");
    expect_refused(sizes, "\"mla\"", "positional"); /* learned positions by default */
    expect_refused(", \"kv_lora_rank\": 8", NULL, "kv_lora_rank");
    expect_refused(", \"positional\": \"rope\", \"kv_lora_rank\": 8, \"qk_nope_head_dim\": 4, "
                   "\"qk_rope_head_dim\": 3, \"v_head_dim\": 6",
                   "\"mla\"", "qk_rope_head_dim");
    expect_refused(mla, "\"latent\"", "attention");
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_mla_q_proj_matches_torch", test_mla_q_proj_matches_torch },
        { "test_mla_q_lora_matches_torch", test_mla_q_lora_matches_torch },
        { "test_absorbed_cached_decoding_equals_naive_forward",
          test_absorbed_cached_decoding_equals_naive_forward },
        { "test_model_decoding_with_latent_caches_equals_full_forward",
          test_model_decoding_with_latent_caches_equals_full_forward },
        { "test_cache_bytes_equal_kv_bytes_formula", test_cache_bytes_equal_kv_bytes_formula },
        { "test_z_hook_and_gate_act_on_the_mla_head", test_z_hook_and_gate_act_on_the_mla_head },
        { "test_gate_gradients_match_finite_differences",
          test_gate_gradients_match_finite_differences },
        { "test_mla_preset_round_trips_and_inits_norms_to_one",
          test_mla_preset_round_trips_and_inits_norms_to_one },
        { "test_unsupported_mla_combinations_are_refused_naming_the_key",
          test_unsupported_mla_combinations_are_refused_naming_the_key },
    };
    return hs_run_tests("mla", tests, HS_NTESTS(tests));
}
