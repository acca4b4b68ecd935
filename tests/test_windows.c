/* Local/global heads in the headscope family (SPEC §10): `window` per
 * layer or per head parsed, refused with the position named, written back
 * in its shortest form and given by override; maps exactly 0 outside each
 * head's window; cached decoding equal to full recomputation with mixed
 * per-head windows; structural pruning keeps each kept head's window;
 * gradients against an independent PyTorch float64 model with the
 * explicit mask (scripts/oracle/gen_windows.py). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "convert.h"
#include "decode.h"
#include "fixture.h"
#include "importance.h"
#include "trainer.h"
#include "runner.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10, ORACLE_TOL = 1e-9;
#else
static const double TOL = 1e-5, ORACLE_TOL = 1e-4;
#endif

/* attn-only, 2 layers of 4 heads: layer 0 mixes global and local heads,
 * layer 1 has only local heads of two widths. */
static const char *const MIXED = "window=[[0,3,3,0],[5,2,5,2]]";

static void make_model(hs_model *m, const char *preset, const char *const *over, int nover)
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
    hs_model_init_random(m, 7);
    for (size_t i = 0; i < m->n_params; i++)
        m->params[i] *= 3; /* logits far from uniform: greedy ids are not near-ties */
}

static void test_window_forms_parse_and_write_back(void)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "attn-only"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, MIXED), HS_OK);
    CU_ASSERT_EQUAL(c.window, 0);
    CU_ASSERT_EQUAL(c.n_head_windows, 8);
    CU_ASSERT_EQUAL(hs_config_head_window(&c, 0, 1), 3);
    CU_ASSERT_EQUAL(hs_config_head_window(&c, 1, 3), 2);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 0), -1);
    hs_attn_config a = hs_config_attn(&c, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a.head_window);
    CU_ASSERT_EQUAL(a.head_window[0], 5);
    /* write and read back: the same windows, in the list-of-lists form */
    char *json = hs_config_to_json(&c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    hs_model_config back;
    CU_ASSERT_EQUAL(hs_config_parse(&back, json, "back"), HS_OK);
    CU_ASSERT_EQUAL(back.n_head_windows, 8);
    CU_ASSERT_EQUAL(memcmp(back.head_windows, c.head_windows, 8 * sizeof(int)), 0);
    free(json);
    /* a per-layer list; a list whose layers agree collapses to one integer */
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "window=[0,4]"), HS_OK);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 0), 0);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 1), 4);
    json = hs_config_to_json(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"window\":\t[0, 4]"));
    free(json);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "window=[[6,6,6,6],6]"), HS_OK);
    CU_ASSERT_EQUAL(c.window, 6);
    CU_ASSERT_EQUAL(c.n_head_windows, 0);
    CU_ASSERT_EQUAL(hs_config_attn(&c, 0).head_window, NULL);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "window=0"), HS_OK);
    json = hs_config_to_json(&c);
    CU_ASSERT_PTR_NULL(strstr(json, "window")); /* global: no key, as before */
    free(json);
}

/* Each refusal names the key and the position. */
static void test_bad_windows_are_refused_naming_the_position(void)
{
    static const struct {
        const char *over, *names;
    } bad[] = {
        { "window=[1,2,3]", "\"window\" has 3 entries for 2 layers" },
        { "window=[[0,3,3],[0,0,0,0]]", "\"window\"[0] has 3 entries for layer 0's 4 heads" },
        { "window=[[0,3,-1,0],0]", "\"window\"[0][2] must be a non-negative integer" },
        { "window=[0,2.5]", "\"window\"[1] must be a non-negative integer" },
        { "window=-3", "\"window\" must be a non-negative integer" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hs_model_config c;
        CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "attn-only"), HS_OK);
        CU_ASSERT_EQUAL(hs_config_override(&c, bad[i].over), HS_EINVAL);
        if (!strstr(hs_last_error(), bad[i].names))
            printf("\n    %s: %s", bad[i].over, hs_last_error());
        CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), bad[i].names));
    }
    /* per-head windows are the headscope family's; MLA attends globally */
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "mla"), HS_OK);
    CU_ASSERT_EQUAL(hs_config_override(&c, "window=[0,4]"), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "window"));
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "mistral"), HS_OK);
    int w[8] = { 0, 4, 4, 4, 4, 4, 4, 4 };
    CU_ASSERT_EQUAL(hs_config_set_windows(&c, w), HS_OK);
    CU_ASSERT_EQUAL(hs_config_check(&c), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "headscope-family"));
}

/* Maps of a full forward, as each layer makes them: exactly 0 outside each
 * head's window (keys s <= t - W, and the future), positive inside. */
typedef struct {
    const hs_model_config *c;
    int outside_nonzero, inside_zero, layers;
} map_check;

static int check_maps(void *ctx, int l, const hs_real *att, int B, int H, int T)
{
    map_check *k = ctx;
    k->layers++;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int W = hs_config_head_window(k->c, l, h);
            for (int t = 0; t < T; t++)
                for (int s = 0; s < T; s++) {
                    const hs_real p = att[(((size_t)b * H + h) * T + t) * T + s];
                    const int inside = s <= t && (!W || s > t - W);
                    k->outside_nonzero += !inside && p != 0;
                    k->inside_zero += inside && !(p > 0);
                }
        }
    return HS_OK;
}

static void test_maps_are_zero_outside_each_heads_window(void)
{
    hs_model m;
    const char *over[] = { "n_ctx=24", MIXED };
    make_model(&m, "attn-only", over, 2);
    const int T = 16, B = 2;
    int32_t tok[32];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)((i * 53 + 5) % m.cfg.vocab_size);
    hs_acts a;
    map_check k = { &m.cfg, 0, 0, 0 };
    hs_hooks hooks = { 0 };
    hooks.on_maps = check_maps;
    hooks.ctx = &k;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_MAPS), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, &hooks), HS_OK);
    CU_ASSERT_EQUAL(k.layers, 2);
    CU_ASSERT_EQUAL(k.outside_nonzero, 0);
    CU_ASSERT_EQUAL(k.inside_zero, 0);
    hs_acts_free(&a);
    hs_model_free(&m);
}

/* The reference's windows, applied to the full forward's maps independently
 * of the kernel: entries outside head h's window set to 0 and each row
 * renormalised (the softmax restricted to the window). */
static int window_pattern(void *ctx, const hs_site_view *v)
{
    const hs_model_config *c = ctx;
    for (int b = 0; b < v->B; b++)
        for (int h = 0; h < v->heads; h++) {
            const int W = hs_config_head_window(c, v->layer, h);
            for (int t = 0; t < v->T; t++) {
                hs_real *row = v->x + b * v->sb + t * v->st + h * v->sh;
                double sum = 0;
                for (int s = 0; s < v->width; s++)
                    if ((W && s <= t - W) || s > t)
                        row[s] = 0;
                    else
                        sum += row[s];
                for (int s = 0; s < v->width; s++)
                    row[s] = (hs_real)(row[s] / sum);
            }
        }
    return HS_OK;
}

static void full_logits(hs_real *out, const hs_model *m, const int32_t *tok, int T)
{
    hs_acts a;
    hs_hooks hooks = { 0 };
    hooks.site[HS_SITE_PATTERN] = (hs_site_hook){ window_pattern, (void *)&m->cfg };
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m->cfg, 1, T, HS_ACTS_MAPS), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, tok, NULL, &hooks), HS_OK);
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

/* Prefill, then greedy steps: every step's logits equal the full forward's. */
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
    hs_decoder_free(&dec);
    free(tok);
    free(ref);
}

static void test_per_head_window_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "n_ctx=24", MIXED };
    make_model(&m, "attn-only", over, 2);
    check_cached_equals_full(&m, 3, 20, "attn-only mixed windows");
    hs_model_free(&m);
    /* GQA; layer 1's heads share W = 3 (a ring), layer 0 mixes */
    const char *over2[] = { "n_ctx=24", "n_kv_head=2", "window=[[0,4,2,0],3]" };
    make_model(&m, "attn-only", over2, 3);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 20), HS_OK);
    CU_ASSERT_EQUAL(dec.layer[0].window, 0); /* mixed: every position */
    CU_ASSERT_EQUAL(dec.layer[1].window, 3); /* one shared window: a ring of 3 */
    /* bytes: layer 0 keeps 20 positions, layer 1 three, 2 kv heads of 16 */
    CU_ASSERT_EQUAL(hs_decoder_cache_bytes(&dec), 2 * 2 * 16 * (20 + 3) * sizeof(hs_real));
    hs_decoder_free(&dec);
    check_cached_equals_full(&m, 5, 20, "attn-only GQA mixed + ring");
    hs_model_free(&m);
}

/* Pruning heads 1 and 2 of layer 0 structurally keeps heads 0 and 3 with
 * their windows (0 and 0), and layer 1's untouched. */
static void test_structural_pruning_keeps_each_heads_window(void)
{
    hs_model m, p;
    const char *over[] = { "n_ctx=24", "window=[[0,3,4,5],[5,2,5,1]]" };
    make_model(&m, "attn-only", over, 2);
    unsigned char *pruned = calloc((size_t)HS_MAX_LAYERS * HS_MAX_HEADS, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pruned);
    pruned[1] = pruned[2] = 1;
    pruned[HS_MAX_HEADS + 0] = 1;
    CU_ASSERT_EQUAL_FATAL(hs_prune_structural(&p, &m, pruned), HS_OK);
    CU_ASSERT_EQUAL(p.cfg.n_head[0], 2);
    CU_ASSERT_EQUAL(p.cfg.n_head[1], 3);
    CU_ASSERT_EQUAL(hs_config_head_window(&p.cfg, 0, 0), 0);
    CU_ASSERT_EQUAL(hs_config_head_window(&p.cfg, 0, 1), 5);
    CU_ASSERT_EQUAL(hs_config_head_window(&p.cfg, 1, 0), 2);
    CU_ASSERT_EQUAL(hs_config_head_window(&p.cfg, 1, 1), 5);
    CU_ASSERT_EQUAL(hs_config_head_window(&p.cfg, 1, 2), 1);
    CU_ASSERT_EQUAL(hs_config_check(&p.cfg), HS_OK);
    free(pruned);
    hs_model_free(&p);
    hs_model_free(&m);
}

/* convert --kv-heads: windows belong to query heads, so a conversion keeps
 * every head's window (heads of one group may differ: each masks its own). */
static void test_convert_keeps_per_query_head_windows(void)
{
    hs_model m, g;
    const char *over[] = { "n_ctx=24", MIXED };
    make_model(&m, "attn-only", over, 2);
    CU_ASSERT_EQUAL_FATAL(hs_convert_kv_heads(&g, &m, 2), HS_OK);
    CU_ASSERT_EQUAL(g.cfg.n_kv_head[0], 2);
    CU_ASSERT_EQUAL(g.cfg.n_head_windows, 8);
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++)
            CU_ASSERT_EQUAL(hs_config_head_window(&g.cfg, l, h), hs_config_head_window(&m.cfg, l, h));
    check_cached_equals_full(&g, 4, 16, "converted GQA with mixed windows");
    hs_model_free(&g);
    hs_model_free(&m);
}

/* The oracle's checkpoint (per-head windows [[0,2,3,0],[3,1,0,2]], GQA in
 * layer 1, a GELU MLP): logits, loss and every tensor's gradient within
 * ORACLE_TOL of PyTorch float64 with the explicit mask. */
static void test_gradients_match_torch_with_explicit_window_mask(void)
{
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, HS_FIXTURE_DIR "/windows/windows.txt", "windows"), 0);
    hs_model m;
    int rc = hs_checkpoint_load(&m, HS_FIXTURE_DIR "/windows/model");
    if (rc)
        printf("\n    load: %s", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    CU_ASSERT_EQUAL(m.cfg.n_head_windows, 8);
    const int B = (int)fx_int(&fc, "B"), T = (int)fx_int(&fc, "T");
    const fx_tensor *tok = fx_tensor_get(&fc, "tokens");
    int32_t in[64], tg[64];
    CU_ASSERT_FATAL(B * T <= 64);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = (int32_t)tok->v[b * (T + 1) + t];
            tg[b * T + t] = (int32_t)tok->v[b * (T + 1) + t + 1];
        }
    hs_trainer tr;
    CU_ASSERT_EQUAL_FATAL(hs_trainer_init(&tr, &m, B, T, 1e-3, 0, 0), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&tr.acts, &m, in, NULL, NULL), HS_OK);
    const fx_tensor *lg = fx_tensor_get(&fc, "logits");
    CU_ASSERT(fx_max_err(tr.acts.logits, lg->v, lg->n, "logits") <= ORACLE_TOL);
    /* with targets the logits buffer becomes the loss's probabilities */
    CU_ASSERT_EQUAL_FATAL(hs_forward(&tr.acts, &m, in, tg, NULL), HS_OK);
    const double want = fx_tensor_get(&fc, "loss")->v[0];
    CU_ASSERT(fabs(tr.acts.loss - want) <= ORACLE_TOL);
    CU_ASSERT_EQUAL_FATAL(hs_backward(&tr.grads, NULL, &tr.acts, &m, in, tg, NULL,
                                      (hs_real)(1.0 / (B * T))),
                          HS_OK);
    hs_model g = m; /* the gradients seen through the model's tensor table */
    g.params = tr.grad_buf;
    int compared = 0;
    double worst = 0;
    for (int i = 0; i < fc.ntensor; i++) {
        const fx_tensor *t = &fc.t[i];
        if (strncmp(t->name, "grad:", 5))
            continue;
        double *buf = malloc(sizeof(double) * t->n);
        size_t n = 0;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_export(&g, t->name + 5, buf, t->n, &n), HS_OK);
        CU_ASSERT_EQUAL(n, t->n);
        for (size_t k = 0; k < n; k++) {
            const double e = fabs(buf[k] - t->v[k]) / fmax(1.0, fabs(t->v[k]));
            worst = e > worst ? e : worst;
        }
        free(buf);
        compared++;
    }
    printf("\n    %d gradients, worst %.3g", compared, worst);
    CU_ASSERT_EQUAL(compared, m.n_tensors);
    CU_ASSERT(worst <= ORACLE_TOL);
    hs_trainer_free(&tr);
    hs_model_free(&m);
    fx_free(&fc);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_window_forms_parse_and_write_back", test_window_forms_parse_and_write_back },
        { "test_bad_windows_are_refused_naming_the_position",
          test_bad_windows_are_refused_naming_the_position },
        { "test_maps_are_zero_outside_each_heads_window",
          test_maps_are_zero_outside_each_heads_window },
        { "test_per_head_window_decoding_equals_recomputation",
          test_per_head_window_decoding_equals_recomputation },
        { "test_structural_pruning_keeps_each_heads_window",
          test_structural_pruning_keeps_each_heads_window },
        { "test_convert_keeps_per_query_head_windows", test_convert_keeps_per_query_head_windows },
        { "test_gradients_match_torch_with_explicit_window_mask",
          test_gradients_match_torch_with_explicit_window_mask },
    };
    return hs_run_tests("windows", tests, HS_NTESTS(tests));
}
