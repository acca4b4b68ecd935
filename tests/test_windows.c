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
#include "config_file.h"
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
    fx_make_model(&m, "attn-only", over, 2, 7);
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

static void test_per_head_window_decoding_equals_recomputation(void)
{
    hs_model m;
    const char *over[] = { "n_ctx=24", MIXED };
    fx_make_model(&m, "attn-only", over, 2, 7);
    fx_check_decoding(&m, 3, 20, TOL, "attn-only mixed windows");
    hs_model_free(&m);
    /* GQA; layer 1's heads share W = 3 (a ring), layer 0 mixes */
    const char *over2[] = { "n_ctx=24", "n_kv_head=2", "window=[[0,4,2,0],3]" };
    fx_make_model(&m, "attn-only", over2, 3, 7);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, &m, 20), HS_OK);
    CU_ASSERT_EQUAL(dec.layer[0].window, 0); /* mixed: every position */
    CU_ASSERT_EQUAL(dec.layer[1].window, 3); /* one shared window: a ring of 3 */
    /* bytes: layer 0 keeps 20 positions, layer 1 three, 2 kv heads of 16 */
    CU_ASSERT_EQUAL(hs_decoder_cache_bytes(&dec), 2 * 2 * 16 * (20 + 3) * sizeof(hs_real));
    hs_decoder_free(&dec);
    fx_check_decoding(&m, 5, 20, TOL, "attn-only GQA mixed + ring");
    hs_model_free(&m);
}

/* Pruning heads 1 and 2 of layer 0 structurally keeps heads 0 and 3 with
 * their windows (0 and 0), and layer 1's untouched. */
static void test_structural_pruning_keeps_each_heads_window(void)
{
    hs_model m, p;
    const char *over[] = { "n_ctx=24", "window=[[0,3,4,5],[5,2,5,1]]" };
    fx_make_model(&m, "attn-only", over, 2, 7);
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
    fx_make_model(&m, "attn-only", over, 2, 7);
    CU_ASSERT_EQUAL_FATAL(hs_convert_kv_heads(&g, &m, 2), HS_OK);
    CU_ASSERT_EQUAL(g.cfg.n_kv_head[0], 2);
    CU_ASSERT_EQUAL(g.cfg.n_head_windows, 8);
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++)
            CU_ASSERT_EQUAL(hs_config_head_window(&g.cfg, l, h), hs_config_head_window(&m.cfg, l, h));
    fx_check_decoding(&g, 4, 16, TOL, "converted GQA with mixed windows");
    hs_model_free(&g);
    hs_model_free(&m);
}

/* The oracle's checkpoint (per-head windows [[0,2,3,0],[3,1,0,2]], GQA in
 * layer 1, a GELU MLP): logits, loss and every tensor's gradient within
 * ORACLE_TOL of PyTorch float64 with the explicit mask. */
static void test_gradients_match_torch_with_explicit_window_mask(void)
{
    fx_oracle o;
    fx_oracle_open(&o, HS_FIXTURE_DIR "/windows/windows.txt", "windows",
                   HS_FIXTURE_DIR "/windows/model");
    CU_ASSERT_EQUAL(o.m.cfg.n_head_windows, 8);
    fx_oracle_logits(&o, "windows", ORACLE_TOL);
    fx_oracle_loss(&o, ORACLE_TOL, 1);
    const hs_model g = fx_oracle_grads(&o);
    CU_ASSERT_EQUAL(fx_compare_exported(&o.fc, "grad:", &g, ORACLE_TOL), o.m.n_tensors);
    fx_oracle_close(&o);
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
