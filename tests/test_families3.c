/* The decoder families of SPEC §14 -- gemma, gemma2, gemma3_text, qwen3,
 * olmo2, phi3 -- against the float64 PyTorch reference of
 * scripts/oracle/gen_families3.py (written from the Hugging Face model
 * definitions): logits, loss, every per-head attention map and the gradient
 * of every stored tensor of a checkpoint in each family's real names and
 * config keys; for each family-specific feature, headscope's logits differ
 * from the reference's with that feature switched off (and config.json
 * switches reproduce those references where HF gives the switch); cached
 * decoding of each checkpoint equals recomputation; HF's defaults for absent
 * keys, on the Hub's own config.json files; refusals that name the key;
 * save and reload in each family and in the headscope form; the headscope
 * keys of every feature. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "config_file.h"
#include "decode.h"
#include "fixture.h"
#include "runner.h"
#include "safetensors.h"
#include "trainer.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10, GRAD_TOL = 1e-6; /* gradients are stored as F32 */
#else
static const double TOL = 1e-5, GRAD_TOL = 1e-4;
#endif
/* A switched-off feature moves the reference's last logits by more than
 * 2e-4 (the generator asserts it): ours must be that far from it too. */
static const double FEATURE_GAP = 1e-4;

static const char *families3_txt(void) { return HS_FIXTURE_DIR "/families3.txt"; }

static void case_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/families3/%s", HS_FIXTURE_DIR, name);
}

/* ---- the oracle --------------------------------------------------------- */

typedef struct {
    const fx_tensor *want; /* (L, B, H, T, T) */
    double worst;
    int layers;
} maps_check;

static int compare_maps(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    maps_check *mc = ctx;
    const size_t n = (size_t)B * H * T * T;
    if (mc->want && (size_t)(layer + 1) * n <= mc->want->n) {
        const double e = fx_err(att, mc->want->v + (size_t)layer * n, n);
        mc->worst = e > mc->worst ? e : mc->worst;
        mc->layers++;
    }
    return HS_OK;
}

/* The last position's logits of a (B, T, V) forward against the reference
 * with one feature off: the largest |ours - off| / max(1, |off|). */
static double gap_to(const hs_real *logits, const fx_tensor *off, int B, int T, int V)
{
    double worst = 0;
    for (int b = 0; b < B; b++) {
        const double e = fx_err(logits + ((size_t)b * T + T - 1) * V, off->v + (size_t)b * V,
                                (size_t)V);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Case `name`: logits and loss within TOL, every layer's maps within TOL,
 * each off_* reference at least FEATURE_GAP away, and (grads) every
 * gradient within GRAD_TOL. */
static void oracle_case(const char *name, int grads)
{
    char dir[512], path[600];
    case_dir(dir, sizeof dir, name);
    fx_oracle o;
    fx_oracle_open(&o, families3_txt(), name, dir);
    fx_oracle_logits(&o, name, TOL);
    maps_check mc = { fx_tensor_get(&o.fc, "maps"), 0, 0 };
    CU_ASSERT_PTR_NOT_NULL_FATAL(mc.want);
    hs_hooks hooks = { .ctx = &mc, .on_maps = compare_maps };
    CU_ASSERT_EQUAL_FATAL(hs_forward(&o.tr.acts, &o.m, o.in, NULL, &hooks), HS_OK);
    printf("; maps of %d layers max err %.3g", mc.layers, mc.worst);
    CU_ASSERT_EQUAL(mc.layers, (int)fx_int(&o.fc, "L"));
    CU_ASSERT(mc.worst <= TOL);
    const int V = o.m.cfg.vocab_size;
    int features = 0;
    for (int i = 0; i < o.fc.ntensor; i++) {
        const fx_tensor *t = &o.fc.t[i];
        if (strncmp(t->name, "off_", 4))
            continue;
        const double gap = gap_to(o.tr.acts.logits, t, o.B, o.T, V);
        printf("\n    without %s: %.3g away", t->name + 4, gap);
        CU_ASSERT(gap > FEATURE_GAP);
        features++;
    }
    CU_ASSERT(features > 0);
    fx_oracle_loss(&o, TOL, grads);
    if (grads) {
        snprintf(path, sizeof path, "%s/grad.safetensors", dir);
        const hs_model g = fx_oracle_grads(&o);
        CU_ASSERT(fx_compare_safetensors(path, &g, GRAD_TOL) > 0);
    }
    fx_oracle_close(&o);
}

static void test_gemma_norm_embedding_scale_geglu_match_torch(void)
{
    oracle_case("gemma", 1);
}

static void test_gemma2_sandwich_norms_softcaps_sliding_layers_match_torch(void)
{
    oracle_case("gemma2", 1);
}

static void test_gemma3_qk_norms_local_rope_sliding_pattern_match_torch(void)
{
    oracle_case("gemma3", 1);
}

static void test_qwen3_per_head_qk_norms_match_torch(void) { oracle_case("qwen3", 1); }

static void test_qwen3_attention_bias_on_qkvo_matches_torch(void)
{
    oracle_case("qwen3_bias", 0);
}

static void test_olmo2_output_norms_whole_projection_qk_norms_match_torch(void)
{
    oracle_case("olmo2", 1);
}

static void test_phi3_fused_projections_partial_rotary_window_match_torch(void)
{
    oracle_case("phi3", 1);
}

/* ---- edited copies of the fixtures ---------------------------------------- */

/* A fresh copy of fixture checkpoint `name` in a temporary directory. */
static char *copy_case(const char *name)
{
    char tmpl[] = "/tmp/hs_families3_XXXXXX", src[512], cmd[1400];
    if (!mkdtemp(tmpl))
        return NULL;
    case_dir(src, sizeof src, name);
    snprintf(cmd, sizeof cmd, "cp '%s'/* '%s'/", src, tmpl);
    if (system(cmd))
        return NULL;
    return strdup(tmpl);
}

static void remove_dir(char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    free(dir);
}

/* Replaces the first `from` in dir/config.json by `to`; 0 when it was there. */
static int edit_config(const char *dir, const char *from, const char *to)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    if (hs_read_text(&text, path, 1 << 20))
        return -1;
    char *at = strstr(text, from);
    FILE *f = at ? fopen(path, "w") : NULL;
    if (f) {
        fprintf(f, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
        fclose(f);
    }
    free(text);
    return f ? 0 : -1;
}

/* Loading case `name` edited (from -> to) fails with a message holding
 * every needle. */
static void refused(const char *what, const char *name, const char *from, const char *to,
                    const char *const *needles)
{
    char *dir = copy_case(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    CU_ASSERT_EQUAL_FATAL(edit_config(dir, from, to), 0);
    hs_model m;
    const int rc = hs_checkpoint_load(&m, dir);
    printf("\n    %s: rc=%d: %s", what, rc, rc ? hs_last_error() : "(loaded)");
    CU_ASSERT_NOT_EQUAL(rc, HS_OK);
    for (int i = 0; rc && needles[i]; i++) {
        const int found = strstr(hs_last_error(), needles[i]) != NULL;
        if (!found)
            printf("\n      message lacks \"%s\"", needles[i]);
        CU_ASSERT(found);
    }
    if (!rc)
        hs_model_free(&m);
    remove_dir(dir);
}

#define NEEDLES(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Case `name` edited (from -> to) loads, and its last-position logits equal
 * the reference tensor `want` of the case ("logits": unchanged; "off_F":
 * the reference with feature F off) within TOL. */
static void edited_equals(const char *name, const char *from, const char *to, const char *want)
{
    char *dir = copy_case(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    CU_ASSERT_EQUAL_FATAL(edit_config(dir, from, to), 0);
    fx_oracle o;
    fx_oracle_open(&o, families3_txt(), name, dir);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&o.tr.acts, &o.m, o.in, NULL, NULL), HS_OK);
    const fx_tensor *t = fx_tensor_get(&o.fc, want);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const int V = o.m.cfg.vocab_size;
    double e;
    if (!strcmp(want, "logits")) {
        e = fx_err(o.tr.acts.logits, t->v, t->n);
    } else {
        e = 0;
        for (int b = 0; b < o.B; b++) {
            const double eb = fx_err(o.tr.acts.logits + ((size_t)b * o.T + o.T - 1) * V,
                                     t->v + (size_t)b * V, (size_t)V);
            e = eb > e ? eb : e;
        }
    }
    printf("\n    %s with %s: %s max err %.3g", name, to, want, e);
    CU_ASSERT(e <= TOL);
    fx_oracle_close(&o);
    remove_dir(dir);
}

/* Hugging Face's switches reproduce its reference with the feature off:
 * null soft-caps (`if cap is not None`), layer_types overriding the
 * pattern; gemma3 does not read attn_logit_softcapping. */
static void test_config_switches_reproduce_the_reference_without_the_feature(void)
{
    edited_equals("gemma2", "\"attn_logit_softcapping\": 50.0", "\"attn_logit_softcapping\": null",
                  "off_attn_softcap");
    edited_equals("gemma2", "\"final_logit_softcapping\": 30.0",
                  "\"final_logit_softcapping\": null", "off_final_softcap");
    edited_equals("gemma3", "\"attn_logit_softcapping\": null", "\"attn_logit_softcapping\": 5.0",
                  "logits");
    edited_equals("gemma3", "\"sliding_window_pattern\": 3",
                  "\"sliding_window_pattern\": 3, \"layer_types\": [\"sliding_attention\", "
                  "\"sliding_attention\", \"full_attention\"]",
                  "logits");
    edited_equals("gemma3", "\"sliding_window_pattern\": 3",
                  "\"sliding_window_pattern\": 3, \"layer_types\": [\"full_attention\", "
                  "\"full_attention\", \"full_attention\"]",
                  "off_sliding");
    edited_equals("gemma3", "\"sliding_window_pattern\": 3", "\"sliding_window_pattern\": 1",
                  "off_sliding");
    edited_equals("gemma3", "\"rope_local_base_freq\": 10000", "\"rope_local_base_freq\": 1000000",
                  "off_rope_local_base_freq");
    edited_equals("phi3", "\"sliding_window\": 3", "\"sliding_window\": null", "off_sliding");
    edited_equals("phi3", "\"partial_rotary_factor\": 0.5", "\"partial_rotary_factor\": 1.0",
                  "off_partial_rotary");
    edited_equals("gemma", "\"hidden_act\": \"gelu\"",
                  "\"hidden_act\": \"gelu\", \"hidden_activation\": \"gelu\"", "off_gelu_tanh");
}

/* gemma3 with a layer_types list that is no sliding_window_pattern keeps
 * windows per layer: layer 1 global, layers 0 and 2 sliding. */
static void test_gemma3_layer_types_beyond_the_pattern_are_per_layer(void)
{
    char *dir = copy_case("gemma3");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    CU_ASSERT_EQUAL_FATAL(edit_config(dir, "\"sliding_window_pattern\": 3",
                                      "\"sliding_window_pattern\": 3, \"layer_types\": "
                                      "[\"sliding_attention\", \"full_attention\", "
                                      "\"sliding_attention\"]"),
                          0);
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
    CU_ASSERT_EQUAL(hs_config_layer_window(&m.cfg, 0), 3);
    CU_ASSERT_EQUAL(hs_config_layer_window(&m.cfg, 1), 0);
    CU_ASSERT_EQUAL(hs_config_layer_window(&m.cfg, 2), 3);
    /* the local RoPE base follows the sliding layers */
    CU_ASSERT_EQUAL(hs_config_attn(&m.cfg, 1).rope_theta, 1e6);
    CU_ASSERT_EQUAL(hs_config_attn(&m.cfg, 2).rope_theta, 1e4);
    CU_ASSERT_EQUAL(hs_config_attn(&m.cfg, 2).rope_scaling.kind, HS_ROPE_DEFAULT);
    CU_ASSERT_EQUAL(hs_config_attn(&m.cfg, 1).rope_scaling.kind, HS_ROPE_LINEAR);
    fx_check_decoding(&m, 2, 12, TOL, "gemma3 layer_types");
    hs_model_free(&m);
    remove_dir(dir);
}

static void test_unimplemented_keys_are_refused_naming_them(void)
{
    refused("phi3 longrope", "phi3", "\"rope_scaling\": null",
            "\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1.0], "
            "\"long_factor\": [1.0]}",
            NEEDLES("config.json", "rope_scaling", "longrope"));
    refused("phi3 su", "phi3", "\"rope_scaling\": null",
            "\"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1.0], \"long_factor\": [1.0]}",
            NEEDLES("rope_scaling", "su"));
    refused("phi3 partial rotary of odd dims", "phi3", "\"partial_rotary_factor\": 0.5",
            "\"partial_rotary_factor\": 0.25", NEEDLES("partial_rotary_factor"));
    refused("gemma3 vision_config", "gemma3", "\"use_cache\": true",
            "\"use_cache\": true, \"vision_config\": {\"hidden_size\": 1152}",
            NEEDLES("config.json", "vision_config"));
    refused("gemma3 mm_tokens_per_image", "gemma3", "\"use_cache\": true",
            "\"use_cache\": true, \"mm_tokens_per_image\": 256",
            NEEDLES("mm_tokens_per_image"));
    refused("gemma3 bidirectional", "gemma3", "\"use_cache\": true",
            "\"use_cache\": true, \"use_bidirectional_attention\": true",
            NEEDLES("use_bidirectional_attention"));
    refused("gemma3 chunked layers", "gemma3", "\"sliding_window_pattern\": 3",
            "\"sliding_window_pattern\": 3, \"layer_types\": [\"chunked_attention\", "
            "\"full_attention\", \"full_attention\"]",
            NEEDLES("layer_types"));
    refused("gemma3 yarn", "gemma3", "\"rope_type\": \"linear\"", "\"rope_type\": \"yarn\"",
            NEEDLES("rope_scaling", "yarn"));
    refused("gemma activation", "gemma", "\"hidden_act\": \"gelu\"",
            "\"hidden_act\": \"gelu\", \"hidden_activation\": \"relu\"",
            NEEDLES("hidden_activation"));
    refused("gemma sliding window", "gemma", "\"use_cache\": true",
            "\"use_cache\": true, \"sliding_window\": 4096", NEEDLES("sliding_window"));
    refused("gemma2 scalar null", "gemma2", "\"query_pre_attn_scalar\": 6",
            "\"query_pre_attn_scalar\": null", NEEDLES("query_pre_attn_scalar"));
    refused("gemma2 window null", "gemma2", "\"sliding_window\": 3", "\"sliding_window\": null",
            NEEDLES("sliding_window"));
    refused("qwen3 sliding layers", "qwen3", "\"use_sliding_window\": false",
            "\"use_sliding_window\": true", NEEDLES("use_sliding_window"));
    refused("qwen3 sliding layer_types", "qwen3", "\"use_cache\": true",
            "\"use_cache\": true, \"layer_types\": [\"sliding_attention\", \"full_attention\"]",
            NEEDLES("layer_types"));
    refused("olmo2 activation", "olmo2", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
            NEEDLES("hidden_act"));
    refused("olmo2 clip_qkv", "olmo2", "\"use_cache\": true",
            "\"use_cache\": true, \"clip_qkv\": 8.0", NEEDLES("clip_qkv"));
}

/* ---- Hugging Face's defaults, on the Hub's config.json files -------------- */

static void parse_ok(hs_model_config *c, const char *json, const char *what)
{
    const int rc = hs_config_parse(c, json, what);
    if (rc)
        printf("\n    %s: %s", what, hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
}

/* gemma-3-4b's text_config: six keys, every other from Gemma3TextConfig. */
static void test_gemma3_4b_text_config_takes_hf_defaults(void)
{
    hs_model_config c;
    parse_ok(&c,
             "{\"hidden_size\": 2560, \"intermediate_size\": 10240, \"model_type\": "
             "\"gemma3_text\", \"num_hidden_layers\": 34, \"rope_scaling\": {\"factor\": 8.0, "
             "\"rope_type\": \"linear\"}, \"sliding_window\": 1024}",
             "gemma-3-4b text_config");
    CU_ASSERT_EQUAL(c.family, HS_FAMILY_GEMMA3);
    CU_ASSERT_EQUAL(c.vocab_size, 262208);
    CU_ASSERT_EQUAL(c.n_head[0], 8);
    CU_ASSERT_EQUAL(c.n_kv_head[0], 4);
    CU_ASSERT_EQUAL(c.head_dim, 256);
    CU_ASSERT_EQUAL(c.attn_scalar, 256);
    CU_ASSERT_EQUAL(c.window, 1024);
    CU_ASSERT_EQUAL(c.window_pattern, 6);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 4), 1024);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 5), 0);
    CU_ASSERT_EQUAL(c.rope_theta, 1e6);
    CU_ASSERT_EQUAL(c.rope_local_theta, 1e4);
    CU_ASSERT_EQUAL(c.rope_scaling.kind, HS_ROPE_LINEAR);
    CU_ASSERT_EQUAL(c.rope_scaling.factor, 8.0);
    CU_ASSERT_EQUAL(c.norm_eps, 1e-6);
    CU_ASSERT(c.tie_embeddings && c.norm_offset && c.embed_scale && c.out_norm);
    CU_ASSERT_EQUAL(c.qk_norm, HS_QK_NORM_HEAD);
    CU_ASSERT_EQUAL(c.mlp, HS_MLP_GEGLU);
    CU_ASSERT_EQUAL(c.gelu_exact, 0);
    CU_ASSERT_EQUAL(c.attn_softcap, 0);
    CU_ASSERT_EQUAL(c.final_softcap, 0);
    CU_ASSERT_EQUAL(c.n_ctx, 131072);
}

/* transformers 5 writes gemma3_text's RoPE as rope_parameters per layer
 * type; the sliding layers' must be unscaled. */
static void test_gemma3_rope_parameters_per_layer_type(void)
{
    hs_model_config c;
    parse_ok(&c,
             "{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"num_hidden_layers\": 6, "
             "\"vocab_size\": 32, \"intermediate_size\": 96, \"head_dim\": 16, "
             "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
             "\"sliding_attention\", \"sliding_attention\", \"sliding_attention\", "
             "\"full_attention\"], \"rope_parameters\": {\"full_attention\": {\"rope_type\": "
             "\"linear\", \"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\": "
             "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}}}",
             "gemma3_text (transformers 5)");
    CU_ASSERT_EQUAL(c.rope_theta, 1e6);
    CU_ASSERT_EQUAL(c.rope_local_theta, 1e4);
    CU_ASSERT_EQUAL(c.rope_scaling.kind, HS_ROPE_LINEAR);
    CU_ASSERT_EQUAL(c.window_pattern, 6);
    CU_ASSERT_EQUAL(hs_config_attn(&c, 5).rope_theta, 1e6);
    CU_ASSERT_EQUAL(hs_config_attn(&c, 0).rope_theta, 1e4);
    const char *scaled_local =
        "{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"num_hidden_layers\": 6, "
        "\"vocab_size\": 32, \"intermediate_size\": 96, \"rope_parameters\": "
        "{\"full_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0}, "
        "\"sliding_attention\": {\"rope_type\": \"linear\", \"factor\": 2.0}}}";
    CU_ASSERT_EQUAL(hs_config_parse(&c, scaled_local, "config.json"), HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "rope_parameters.sliding_attention"));
}

/* gemma2 keys left out take Gemma2Config's defaults (SPEC §14), never
 * "off"; gemma-2-9b's config.json (with its sliding_window_size) loads. */
static void test_gemma2_absent_keys_take_hf_defaults(void)
{
    hs_model_config c;
    parse_ok(&c,
             "{\"model_type\": \"gemma2\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
             "\"vocab_size\": 32, \"intermediate_size\": 96}",
             "gemma2 with defaults");
    CU_ASSERT_EQUAL(c.attn_softcap, 50);
    CU_ASSERT_EQUAL(c.final_softcap, 30);
    CU_ASSERT_EQUAL(c.attn_scalar, 256);
    CU_ASSERT_EQUAL(c.window, 4096);
    CU_ASSERT_EQUAL(c.window_pattern, 2);
    CU_ASSERT_EQUAL(c.head_dim, 256);
    CU_ASSERT_EQUAL(c.n_head[0], 8);
    CU_ASSERT_EQUAL(c.n_kv_head[0], 4);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 0), 4096);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 1), 0);
    parse_ok(&c,
             "{\"architectures\": [\"Gemma2ForCausalLM\"], \"attention_bias\": false, "
             "\"attention_dropout\": 0.0, \"attn_logit_softcapping\": 50.0, \"bos_token_id\": 2, "
             "\"cache_implementation\": \"hybrid\", \"eos_token_id\": 1, "
             "\"final_logit_softcapping\": 30.0, \"head_dim\": 256, \"hidden_act\": "
             "\"gelu_pytorch_tanh\", \"hidden_activation\": \"gelu_pytorch_tanh\", "
             "\"hidden_size\": 3584, \"initializer_range\": 0.02, \"intermediate_size\": 14336, "
             "\"max_position_embeddings\": 8192, \"model_type\": \"gemma2\", "
             "\"num_attention_heads\": 16, \"num_hidden_layers\": 42, \"num_key_value_heads\": 8, "
             "\"pad_token_id\": 0, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, "
             "\"rope_theta\": 10000.0, \"sliding_window\": 4096, \"sliding_window_size\": 4096, "
             "\"torch_dtype\": \"float32\", \"transformers_version\": \"4.42.0.dev0\", "
             "\"use_cache\": true, \"vocab_size\": 256000}",
             "gemma-2-9b");
    CU_ASSERT_EQUAL(c.n_layer, 42);
    CU_ASSERT_EQUAL(c.n_head[0] * c.head_dim, 4096);
}

/* The other families' real files (sizes as shipped) and their defaults:
 * qwen3's head_dim 128, gemma's hidden_act not read, phi3's window on every
 * layer, olmo2's MHA. */
static void test_hub_configs_load_with_their_defaults(void)
{
    hs_model_config c;
    parse_ok(&c,
             "{\"architectures\": [\"GemmaForCausalLM\"], \"bos_token_id\": 2, "
             "\"eos_token_id\": 1, \"head_dim\": 256, \"hidden_act\": \"gelu\", \"hidden_size\": "
             "2048, \"initializer_range\": 0.02, \"intermediate_size\": 16384, "
             "\"max_position_embeddings\": 8192, \"model_type\": \"gemma\", "
             "\"num_attention_heads\": 8, \"num_hidden_layers\": 18, \"num_key_value_heads\": 1, "
             "\"pad_token_id\": 0, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, "
             "\"rope_theta\": 10000.0, \"torch_dtype\": \"bfloat16\", \"transformers_version\": "
             "\"4.38.0.dev0\", \"use_cache\": true, \"vocab_size\": 256000}",
             "gemma-2b");
    CU_ASSERT(c.mlp == HS_MLP_GEGLU && !c.gelu_exact && c.tie_embeddings && !c.out_norm);
    parse_ok(&c,
             "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
             "\"vocab_size\": 32, \"intermediate_size\": 96, \"num_attention_heads\": 4, "
             "\"num_key_value_heads\": 2}",
             "qwen3 with defaults");
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_EQUAL(c.qk_norm, HS_QK_NORM_HEAD);
    CU_ASSERT_EQUAL(c.tie_embeddings, 0);
    parse_ok(&c,
             "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, "
             "\"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645, "
             "\"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 1024, "
             "\"initializer_range\": 0.02, \"intermediate_size\": 3072, "
             "\"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": "
             "\"qwen3\", \"num_attention_heads\": 16, \"num_hidden_layers\": 28, "
             "\"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, "
             "\"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true, "
             "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", "
             "\"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}",
             "Qwen3-0.6B");
    CU_ASSERT_EQUAL(c.n_head[0] * c.head_dim, 2048);
    parse_ok(&c,
             "{\"architectures\": [\"Olmo2ForCausalLM\"], \"attention_bias\": false, "
             "\"attention_dropout\": 0.0, \"bos_token_id\": null, \"eos_token_id\": 100257, "
             "\"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02, "
             "\"intermediate_size\": 8192, \"max_position_embeddings\": 4096, \"model_type\": "
             "\"olmo2\", \"num_attention_heads\": 16, \"num_hidden_layers\": 16, "
             "\"num_key_value_heads\": 16, \"pad_token_id\": 100277, \"rms_norm_eps\": 1e-06, "
             "\"rope_scaling\": null, \"rope_theta\": 500000, \"tie_word_embeddings\": false, "
             "\"torch_dtype\": \"float32\", \"transformers_version\": \"4.48.3\", "
             "\"use_cache\": true, \"vocab_size\": 100352}",
             "OLMo-2-1B");
    CU_ASSERT(c.no_input_norm && c.out_norm && c.qk_norm == HS_QK_NORM_PROJ);
    parse_ok(&c,
             "{\"_name_or_path\": \"Phi-3-mini-4k-instruct\", \"architectures\": "
             "[\"Phi3ForCausalLM\"], \"attention_dropout\": 0.0, \"auto_map\": {\"AutoConfig\": "
             "\"configuration_phi3.Phi3Config\", \"AutoModelForCausalLM\": "
             "\"modeling_phi3.Phi3ForCausalLM\"}, \"bos_token_id\": 1, \"embd_pdrop\": 0.0, "
             "\"eos_token_id\": 32000, \"hidden_act\": \"silu\", \"hidden_size\": 3072, "
             "\"initializer_range\": 0.02, \"intermediate_size\": 8192, "
             "\"max_position_embeddings\": 4096, \"model_type\": \"phi3\", "
             "\"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": "
             "32, \"original_max_position_embeddings\": 4096, \"pad_token_id\": 32000, "
             "\"resid_pdrop\": 0.0, \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, "
             "\"rope_theta\": 10000.0, \"sliding_window\": 2047, \"tie_word_embeddings\": false, "
             "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.2\", "
             "\"use_cache\": true, \"attention_bias\": false, \"vocab_size\": 32064}",
             "Phi-3-mini-4k-instruct");
    CU_ASSERT_EQUAL(c.window, 2047);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 31), 2047);
    CU_ASSERT_EQUAL(c.rotary_dims, 0);
}

/* ---- decoding, save and reload ------------------------------------------- */

static const char *const CASES[] = { "gemma", "gemma2", "gemma3", "qwen3", "qwen3_bias",
                                     "olmo2", "phi3" };

/* The fixtures' windows of 3 make ring caches in their sliding layers. */
static void test_cached_decoding_of_each_checkpoint_equals_recomputation(void)
{
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char dir[512];
        case_dir(dir, sizeof dir, CASES[i]);
        hs_model m;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
        fx_check_decoding(&m, 3, 14, TOL, CASES[i]);
        hs_model_free(&m);
    }
}

/* Each checkpoint written by save loads again as its family with the same
 * configuration and parameters, under the family's own tensor names; as the
 * headscope family (structural pruning writes it) every feature comes back
 * and the logits are bit-identical. */
static void test_saved_checkpoints_keep_family_and_features(void)
{
    static const struct {
        const char *name, *tensor;
    } cases[] = {
        { "gemma", "model.layers.1.post_attention_layernorm.weight" },
        { "gemma2", "model.layers.1.pre_feedforward_layernorm.weight" },
        { "gemma3", "model.layers.2.self_attn.k_norm.weight" },
        { "qwen3", "model.layers.0.self_attn.q_norm.weight" },
        { "qwen3_bias", "model.layers.1.self_attn.o_proj.bias" },
        { "olmo2", "model.layers.1.post_feedforward_layernorm.weight" },
        { "phi3", "model.layers.1.self_attn.qkv_proj.weight" },
        { "phi3", "model.layers.0.mlp.gate_up_proj.weight" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int as_headscope = 0; as_headscope < 2; as_headscope++) {
            char dir[512], out[] = "/tmp/hs_families3_save_XXXXXX", path[600];
            case_dir(dir, sizeof dir, cases[i].name);
            CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(out));
            hs_model a, b;
            CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&a, dir), HS_OK);
            if (as_headscope)
                a.cfg.family = HS_FAMILY_HEADSCOPE;
            CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&a, out), HS_OK);
            const int rc = hs_checkpoint_load(&b, out);
            if (rc)
                printf("\n    %s: reload: %s", cases[i].name, hs_last_error());
            CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
            CU_ASSERT_EQUAL(memcmp(&b.cfg, &a.cfg, sizeof a.cfg), 0);
            CU_ASSERT(b.n_params == a.n_params &&
                      !memcmp(a.params, b.params, sizeof(hs_real) * a.n_params));
            if (!as_headscope) {
                snprintf(path, sizeof path, "%s/model.safetensors", out);
                hs_safetensors st;
                CU_ASSERT_EQUAL_FATAL(hs_st_open(&st, path), HS_OK);
                CU_ASSERT_PTR_NOT_NULL(hs_st_find(&st, cases[i].tensor));
                hs_st_close(&st);
            } else {
                int32_t tok[8] = { 1, 5, 9, 2, 7, 3, 3, 11 };
                hs_acts x, y;
                CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&x, &a.cfg, 1, 8, HS_ACTS_INFER), HS_OK);
                CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&y, &b.cfg, 1, 8, HS_ACTS_INFER), HS_OK);
                CU_ASSERT_EQUAL(hs_forward(&x, &a, tok, NULL, NULL), HS_OK);
                CU_ASSERT_EQUAL(hs_forward(&y, &b, tok, NULL, NULL), HS_OK);
                CU_ASSERT_EQUAL(
                    memcmp(x.logits, y.logits, sizeof(hs_real) * 8 * a.cfg.vocab_size), 0);
                hs_acts_free(&x);
                hs_acts_free(&y);
            }
            hs_model_free(&a);
            hs_model_free(&b);
            char cmd[600];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
            CU_ASSERT_EQUAL(system(cmd), 0);
        }
}

/* ---- the headscope family's keys ----------------------------------------- */

/* Every feature is a headscope key (and an override of any preset); a
 * family that cannot express one refuses the result. */
static void test_headscope_keys_express_every_feature(void)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "attn-only"), HS_OK);
    static const char *const over[] = {
        "norm=rmsnorm",         "norm_offset=true", "embed_scale=true",  "d_ff=96",
        "mlp=geglu",            "output_norm=true", "input_norm=false",  "qk_norm=proj",
        "positional=rope",      "attn_scalar=12",   "attn_softcap=20",   "final_softcap=15",
        "window=8",             "window_pattern=3", "rope_local_theta=500", "n_layer=4",
    };
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
        const int rc = hs_config_override(&c, over[i]);
        if (rc)
            printf("\n    %s: %s", over[i], hs_last_error());
        CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    }
    CU_ASSERT(c.norm_offset && c.embed_scale && c.out_norm && c.no_input_norm);
    CU_ASSERT_EQUAL(c.mlp, HS_MLP_GEGLU);
    CU_ASSERT_EQUAL(c.qk_norm, HS_QK_NORM_PROJ);
    CU_ASSERT(c.attn_scalar == 12 && c.attn_softcap == 20 && c.final_softcap == 15);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 1), 8);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 2), 0);
    CU_ASSERT_EQUAL(hs_config_attn(&c, 0).rope_theta, 500);
    CU_ASSERT_EQUAL(hs_config_attn(&c, 2).rope_theta, 10000);
    /* through config.json and back */
    char *json = hs_config_to_json(&c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    hs_model_config back;
    CU_ASSERT_EQUAL(hs_config_parse(&back, json, "headscope"), HS_OK);
    back.given = c.given;
    CU_ASSERT_EQUAL(memcmp(&back, &c, sizeof c), 0);
    free(json);
    /* it trains: one step of forward and backward */
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_model_init(&m, &c), HS_OK);
    hs_model_init_random(&m, 3);
    hs_trainer tr;
    CU_ASSERT_EQUAL_FATAL(hs_trainer_init(&tr, &m, 2, 16, 1e-3, 0, 0), HS_OK);
    int32_t in[32], tg[32];
    for (int i = 0; i < 32; i++)
        in[i] = (i * 7 + 1) % 256, tg[i] = (i * 5 + 2) % 256;
    CU_ASSERT_EQUAL(hs_forward(&tr.acts, &m, in, tg, NULL), HS_OK);
    CU_ASSERT(isfinite(tr.acts.loss));
    CU_ASSERT_EQUAL(hs_backward(&tr.grads, NULL, &tr.acts, &m, in, tg, NULL, 1.0f / 32), HS_OK);
    hs_trainer_free(&tr);
    hs_model_free(&m);
    /* a family that cannot express a feature refuses the configuration */
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "llama"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "qk_norm=head"), HS_OK);
    CU_ASSERT_EQUAL(hs_config_check(&c), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "Llama"));
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "qwen3"), HS_OK);
    CU_ASSERT_EQUAL(hs_config_check(&c), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "attn_softcap=30"), HS_OK);
    CU_ASSERT_EQUAL(hs_config_check(&c), HS_EINVAL);
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "gemma2"), HS_OK);
    CU_ASSERT_EQUAL(hs_config_override(&c, "n_layer=5"), HS_OK);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 4), 64);
    CU_ASSERT_EQUAL(hs_config_layer_window(&c, 3), 0);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_gemma_norm_embedding_scale_geglu_match_torch",
          test_gemma_norm_embedding_scale_geglu_match_torch },
        { "test_gemma2_sandwich_norms_softcaps_sliding_layers_match_torch",
          test_gemma2_sandwich_norms_softcaps_sliding_layers_match_torch },
        { "test_gemma3_qk_norms_local_rope_sliding_pattern_match_torch",
          test_gemma3_qk_norms_local_rope_sliding_pattern_match_torch },
        { "test_qwen3_per_head_qk_norms_match_torch", test_qwen3_per_head_qk_norms_match_torch },
        { "test_qwen3_attention_bias_on_qkvo_matches_torch",
          test_qwen3_attention_bias_on_qkvo_matches_torch },
        { "test_olmo2_output_norms_whole_projection_qk_norms_match_torch",
          test_olmo2_output_norms_whole_projection_qk_norms_match_torch },
        { "test_phi3_fused_projections_partial_rotary_window_match_torch",
          test_phi3_fused_projections_partial_rotary_window_match_torch },
        { "test_config_switches_reproduce_the_reference_without_the_feature",
          test_config_switches_reproduce_the_reference_without_the_feature },
        { "test_gemma3_layer_types_beyond_the_pattern_are_per_layer",
          test_gemma3_layer_types_beyond_the_pattern_are_per_layer },
        { "test_unimplemented_keys_are_refused_naming_them",
          test_unimplemented_keys_are_refused_naming_them },
        { "test_gemma3_4b_text_config_takes_hf_defaults",
          test_gemma3_4b_text_config_takes_hf_defaults },
        { "test_gemma3_rope_parameters_per_layer_type",
          test_gemma3_rope_parameters_per_layer_type },
        { "test_gemma2_absent_keys_take_hf_defaults", test_gemma2_absent_keys_take_hf_defaults },
        { "test_hub_configs_load_with_their_defaults", test_hub_configs_load_with_their_defaults },
        { "test_cached_decoding_of_each_checkpoint_equals_recomputation",
          test_cached_decoding_of_each_checkpoint_equals_recomputation },
        { "test_saved_checkpoints_keep_family_and_features",
          test_saved_checkpoints_keep_family_and_features },
        { "test_headscope_keys_express_every_feature", test_headscope_keys_express_every_feature },
    };
    return hs_run_tests("families3", tests, HS_NTESTS(tests));
}
