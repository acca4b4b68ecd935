/* The gpt_neox, mistral and qwen2 families and Llama's rope_scaling against
 * the float64 PyTorch reference of scripts/oracle/gen_families.py (written
 * from the Hugging Face model definitions): logits, loss and the gradient of
 * every stored tensor; BF16 and sharded checkpoints; the maps of a
 * sliding-window model; refusals that name the key, rope type, shard or
 * tensor; and checkpoints of each family written by save and loaded again. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "config_file.h"
#include "gemm.h"
#include "memory.h"
#include "fixture.h"
#include "layers.h"
#include "runner.h"
#include "safetensors.h"
#include "stored.h"
#include "trainer.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-9, GRAD_TOL = 1e-6; /* gradients are stored as F32 */
#else
static const double TOL = 1e-4, GRAD_TOL = 1e-4;
#endif

static const char *families_txt(void) { return HS_FIXTURE_DIR "/families.txt"; }

static void case_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/families/%s", HS_FIXTURE_DIR, name);
}

/* Loads checkpoint `dir_name`, compares logits and loss with case
 * `case_name` and, with grads, every parameter gradient with the oracle's
 * grad.safetensors. */
static void oracle_case(const char *case_name, const char *dir_name, int grads)
{
    char dir[512], path[600];
    case_dir(dir, sizeof dir, dir_name);
    fx_oracle o;
    fx_oracle_open(&o, families_txt(), case_name, dir);
    fx_oracle_logits(&o, dir_name, TOL);
    fx_oracle_loss(&o, TOL, grads);
    if (grads) {
        snprintf(path, sizeof path, "%s/grad.safetensors", dir);
        const hs_model g = fx_oracle_grads(&o);
        CU_ASSERT(fx_compare_safetensors(path, &g, GRAD_TOL) > 0);
    }
    fx_oracle_close(&o);
}

static void test_gpt_neox_parallel_partial_rotary_matches_torch(void)
{
    oracle_case("neox_par", "neox_par", 1);
}

static void test_gpt_neox_sequential_matches_torch(void) { oracle_case("neox_seq", "neox_seq", 1); }
static void test_gpt_neox_bf16_checkpoint_matches_torch(void)
{
    oracle_case("neox_bf16", "neox_bf16", 0);
}
static void test_mistral_window_not_shorter_than_sequence_matches_torch(void)
{
    oracle_case("mistral_w16", "mistral_w16", 1);
}

/* Needs the sliding-window kernel (hs_attn_config.window honoured). */
static void test_mistral_window_shorter_than_sequence_matches_torch(void)
{
    oracle_case("mistral_w3", "mistral_w3", 1);
}

static void test_qwen2_biases_tied_matches_torch(void) { oracle_case("qwen2", "qwen2", 1); }
static void test_llama3_rope_scaling_matches_torch(void)
{
    oracle_case("llama3_scaled", "llama3_scaled", 1);
}
static void test_llama_linear_rope_scaling_matches_torch(void)
{
    oracle_case("llama_linear", "llama_linear", 0);
}
static void test_sharded_checkpoint_matches_torch(void)
{
    oracle_case("llama3_sharded", "llama3_sharded", 0);
}

/* ---- maps of a window model --------------------------------------------- */

typedef struct {
    int W, outside_nonzero, rows_bad;
} window_check;

static int check_window_maps(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    (void)layer;
    window_check *w = ctx;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const hs_real *row = att + (((size_t)b * H + h) * T + t) * T;
                double sum = 0;
                for (int s = 0; s < T; s++) {
                    if ((s > t || s <= t - w->W) && row[s] != 0)
                        w->outside_nonzero++;
                    sum += row[s];
                }
                w->rows_bad += fabs(sum - 1) > 1e-5;
            }
    return 0;
}

/* Needs the sliding-window kernel: entries outside the window exactly 0. */
static void test_window_maps_are_exactly_zero_outside_the_window(void)
{
    char dir[512];
    case_dir(dir, sizeof dir, "mistral_w3");
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
    CU_ASSERT_EQUAL(m.cfg.window, 3);
    const int B = 2, T = 8;
    int32_t tok[16];
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 7 + 3) % m.cfg.vocab_size;
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_MAPS), HS_OK);
    window_check w = { m.cfg.window, 0, 0 };
    hs_hooks hooks = { .ctx = &w, .on_maps = check_window_maps };
    CU_ASSERT_EQUAL(hs_forward(&a, &m, tok, NULL, &hooks), HS_OK);
    printf("\n    entries outside the window not 0: %d; rows not summing to 1: %d",
           w.outside_nonzero, w.rows_bad);
    CU_ASSERT_EQUAL(w.outside_nonzero, 0);
    CU_ASSERT_EQUAL(w.rows_bad, 0);
    hs_acts_free(&a);
    hs_model_free(&m);
}

/* ---- refusals ------------------------------------------------------------ */

/* A fresh copy of fixture checkpoint `name` in a temporary directory. */
static char *copy_case(const char *name)
{
    char tmpl[] = "/tmp/hs_families_XXXXXX", src[512], cmd[1400];
    if (!mkdtemp(tmpl))
        return NULL;
    case_dir(src, sizeof src, name);
    snprintf(cmd, sizeof cmd, "cp '%s'/* '%s'/", src, tmpl);
    if (system(cmd))
        return NULL;
    return strdup(tmpl);
}

static void remove_case(char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    free(dir);
}

/* Replaces the first `from` in dir/file by `to`; 0 when it was there. */
static int edit_file(const char *dir, const char *file, const char *from, const char *to)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *text;
    hs_read_text(&text, path, 1 << 20);
    char *at = text ? strstr(text, from) : NULL;
    if (!at) {
        free(text);
        return -1;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        free(text);
        return -1;
    }
    fprintf(f, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    fclose(f);
    free(text);
    return 0;
}

/* Loading the edited copy fails with a message holding every needle. */
static void refused(const char *what, const char *name, const char *file, const char *from,
                    const char *to, const char *const *needles)
{
    char *dir = copy_case(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    if (file) {
        CU_ASSERT_EQUAL_FATAL(edit_file(dir, file, from, to), 0);
    } else {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", dir, from); /* from: a file to delete */
        CU_ASSERT_EQUAL_FATAL(unlink(path), 0);
    }
    hs_model m;
    int rc = hs_checkpoint_load(&m, dir);
    printf("\n    %s: rc=%d: %s", what, rc, rc ? hs_last_error() : "(loaded)");
    CU_ASSERT_NOT_EQUAL(rc, HS_OK);
    for (int i = 0; !rc ? 0 : needles[i] != NULL; i++) {
        const int found = strstr(hs_last_error(), needles[i]) != NULL;
        if (!found)
            printf("\n      message lacks \"%s\"", needles[i]);
        CU_ASSERT(found);
    }
    if (!rc)
        hs_model_free(&m);
    remove_case(dir);
}

#define NEEDLES(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void test_unknown_config_key_is_refused_naming_it(void)
{
    refused("gpt_neox + an unknown key", "neox_par", "config.json", "\"use_cache\": true",
            "\"use_cache\": true, \"rotary_interleaved\": true",
            NEEDLES("config.json", "rotary_interleaved"));
    refused("qwen2 + an unknown key", "qwen2", "config.json", "\"use_cache\": true",
            "\"use_cache\": true, \"attn_temperature\": 0.5",
            NEEDLES("config.json", "attn_temperature"));
    refused("mistral + attention_bias true", "mistral_w16", "config.json", "\"use_cache\": true",
            "\"use_cache\": true, \"attention_bias\": true",
            NEEDLES("config.json", "attention_bias"));
}

static void test_unknown_rope_scaling_type_is_refused_naming_it(void)
{
    refused("llama + yarn", "llama3_scaled", "config.json", "\"rope_type\": \"llama3\"",
            "\"rope_type\": \"yarn\"", NEEDLES("config.json", "rope_scaling", "yarn"));
    refused("gpt_neox + dynamic", "neox_seq", "config.json", "\"rope_scaling\": null",
            "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}",
            NEEDLES("config.json", "rope_scaling", "dynamic"));
    refused("llama3 without low_freq_factor", "llama3_scaled", "config.json",
            "\"low_freq_factor\": 1.0,", "", NEEDLES("rope_scaling", "low_freq_factor"));
    refused("llama3 with an extra key", "llama3_scaled", "config.json", "\"rope_type\": \"llama3\"",
            "\"rope_type\": \"llama3\", \"mscale\": 1.2", NEEDLES("rope_scaling", "mscale"));
}

/* null where a key changes the computation: HF gives it a meaning, which
 * we follow (use_parallel_residual None is false in `if
 * config.use_parallel_residual`: sequential), or none, and then it is
 * refused (int(head_size * None) fails for rotary_pct). Both used to read
 * as the key's default: a parallel residual and rotary_pct 0.25. */
static void test_null_values_follow_hugging_face(void)
{
    char *dir = copy_case("neox_par");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    CU_ASSERT_EQUAL_FATAL(edit_file(dir, "config.json", "\"use_parallel_residual\": true",
                                    "\"use_parallel_residual\": null"), 0);
    hs_model m;
    int rc = hs_checkpoint_load(&m, dir);
    CU_ASSERT_EQUAL(rc, HS_OK);
    if (!rc) {
        CU_ASSERT_EQUAL(m.cfg.parallel_residual, 0);
        hs_model_free(&m);
    }
    remove_case(dir);
    refused("gpt_neox rotary_pct null", "neox_par", "config.json", "\"rotary_pct\": 0.25",
            "\"rotary_pct\": null", NEEDLES("config.json", "\"rotary_pct\" is null"));
    refused("gpt_neox layer_norm_eps null", "neox_par", "config.json", "\"layer_norm_eps\": 1e-05",
            "\"layer_norm_eps\": null", NEEDLES("\"layer_norm_eps\" is null"));
    refused("qwen2 num_attention_heads null", "qwen2", "config.json", "\"num_attention_heads\": 4",
            "\"num_attention_heads\": null", NEEDLES("\"num_attention_heads\" is null"));
}

static void test_qwen2_sliding_window_layers_are_refused(void)
{
    refused("qwen2 + use_sliding_window", "qwen2", "config.json", "\"use_sliding_window\": false",
            "\"use_sliding_window\": true", NEEDLES("config.json", "use_sliding_window"));
}

static void test_missing_shard_is_refused_naming_the_file(void)
{
    refused("a shard deleted", "llama3_sharded", NULL, "model-00002-of-00003.safetensors", NULL,
            NEEDLES("model-00002-of-00003.safetensors", "model.safetensors.index.json"));
    refused("a tensor the index puts in the wrong shard", "llama3_sharded",
            "model.safetensors.index.json",
            "\"model.norm.weight\": \"model-00003-of-00003.safetensors\"",
            "\"model.norm.weight\": \"model-00001-of-00003.safetensors\"",
            NEEDLES("model.norm.weight", "model-00001-of-00003.safetensors"));
    refused("a tensor the index leaves out", "llama3_sharded", "model.safetensors.index.json",
            "\"model.norm.weight\":", "\"model.norm.weightX\":",
            NEEDLES("model.norm.weight", "weight_map"));
    refused("a shard outside the directory", "llama3_sharded", "model.safetensors.index.json",
            "\"model.norm.weight\": \"model-00003", "\"model.norm.weight\": \"../model-00003",
            NEEDLES("model.safetensors.index.json", "model.norm.weight"));
}

/* ---- save and load again ------------------------------------------------- */

/* Each family written by save loads again as the same family, with the
 * Hugging Face names, and computes the same logits. */
static void test_saved_checkpoints_keep_their_family(void)
{
    static const struct {
        const char *name, *tensor;
    } cases[] = {
        { "neox_par", "gpt_neox.layers.1.attention.query_key_value.weight" },
        { "neox_seq", "embed_out.weight" },
        { "mistral_w3", "model.layers.0.self_attn.k_proj.weight" },
        { "qwen2", "model.layers.1.self_attn.v_proj.bias" },
        { "llama3_sharded", "model.norm.weight" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512], out[] = "/tmp/hs_families_save_XXXXXX", path[600];
        case_dir(dir, sizeof dir, cases[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(out));
        hs_model a, b;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&a, dir), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&a, out), HS_OK);
        int rc = hs_checkpoint_load(&b, out);
        if (rc)
            printf("\n    %s: reload: %s", cases[i].name, hs_last_error());
        CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
        CU_ASSERT_EQUAL(b.cfg.family, a.cfg.family);
        CU_ASSERT_EQUAL(memcmp(&b.cfg, &a.cfg, sizeof a.cfg), 0);
        CU_ASSERT_EQUAL(b.n_params, a.n_params);
        CU_ASSERT(b.n_params == a.n_params &&
                  !memcmp(a.params, b.params, sizeof(hs_real) * a.n_params));
        snprintf(path, sizeof path, "%s/model.safetensors", out);
        hs_safetensors st;
        CU_ASSERT_EQUAL_FATAL(hs_st_open(&st, path), HS_OK);
        CU_ASSERT_PTR_NOT_NULL(hs_st_find(&st, cases[i].tensor));
        hs_st_close(&st);
        hs_model_free(&a);
        hs_model_free(&b);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        CU_ASSERT_EQUAL(system(cmd), 0);
    }
}

/* Loading reads the file in blocks (hs_st_read): GPT-2's Conv1D weights
 * transposed in blocks of 16 file rows, here with widths that leave a
 * partial block (d 24, d_ff 44), GPT-NeoX's fused query_key_value row by
 * row, Llama's tensors whole; saved and loaded again, every parameter comes
 * back bit for bit (as the F32 file rounds it, in the double build). (BF16
 * and F16 files: the oracle cases above.) */
static void test_blocked_reads_load_every_layout_exactly(void)
{
    static const char *const presets[] = { "gpt2", "gpt_neox", "llama" };
    for (size_t k = 0; k < sizeof presets / sizeof presets[0]; k++) {
        hs_model_config c;
        CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, presets[k]), HS_OK);
        if (!strcmp(presets[k], "gpt2")) {
            c.d_model = 24, c.d_ff = 44, c.head_dim = 6;
            for (int l = 0; l < c.n_layer; l++)
                c.n_head[l] = 4, c.n_kv_head[l] = 4;
        }
        hs_model a, b;
        const int irc = hs_model_init(&a, &c);
        if (irc)
            printf("\n    %s: %s", presets[k], hs_last_error());
        CU_ASSERT_EQUAL_FATAL(irc, HS_OK);
        hs_model_init_random(&a, 11 + k);
        char out[] = "/tmp/hs_families_blocked_XXXXXX";
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(out));
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&a, out), HS_OK);
        const int rc = hs_checkpoint_load(&b, out);
        if (rc)
            printf("\n    %s: %s", presets[k], hs_last_error());
        CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
        /* save writes F32: in the double build the file holds each value rounded once */
        size_t bad = 0;
        CU_ASSERT_EQUAL_FATAL(b.n_params, a.n_params);
        for (size_t i = 0; i < a.n_params; i++)
            bad += b.params[i] != (hs_real)(float)a.params[i];
        CU_ASSERT_EQUAL(bad, 0);
        hs_model_free(&a);
        hs_model_free(&b);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        CU_ASSERT_EQUAL(system(cmd), 0);
    }
}

/* probe(dir) against load(dir) + hs_dead_heads: the same configuration,
 * parameter count and dead heads, and no parameters; *n_dead gets them.
 * f32_bytes: the files are save's, whose stored bytes are 4 a parameter. */
static void expect_probe_equals_load(const char *dir, int f32_bytes, int *n_dead)
{
    hs_model a, p;
    unsigned char *want = calloc((size_t)HS_MAX_LAYERS * HS_MAX_HEADS, 1);
    unsigned char *got = calloc((size_t)HS_MAX_LAYERS * HS_MAX_HEADS, 1);
    CU_ASSERT_FATAL(want && got);
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&a, dir), HS_OK);
    const int n_want = hs_dead_heads(&a, want);
    int n_got = -1;
    hs_checkpoint_bytes bytes = { 0, 0, 0 };
    const int rc = hs_checkpoint_probe(&p, dir, got, &n_got, &bytes);
    if (rc)
        printf("\n    %s: %s", dir, hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    CU_ASSERT_PTR_NULL(p.params);
    CU_ASSERT_EQUAL(memcmp(&p.cfg, &a.cfg, sizeof a.cfg), 0);
    CU_ASSERT_EQUAL(p.n_params, a.n_params);
    CU_ASSERT_EQUAL(p.n_tensors, a.n_tensors);
    CU_ASSERT_EQUAL(n_got, n_want);
    /* what save writes: F32, 4 bytes a parameter */
    if (f32_bytes)
        CU_ASSERT_EQUAL(bytes.stored, 4 * a.n_params);
    CU_ASSERT_EQUAL(memcmp(got, want, (size_t)a.cfg.n_layer * HS_MAX_HEADS), 0);
    /* what the plan counts for the parameters is what loading them as
     * stored holds */
    hs_model s;
    const size_t held = hs_mem_held();
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load_stored(&s, dir, HS_WEIGHTS_MAPPED), HS_OK);
    CU_ASSERT_EQUAL(hs_mem_held() - held, bytes.loaded);
    hs_model_free(&s);
    CU_ASSERT_EQUAL(hs_mem_held(), held);
    *n_dead = n_got;
    hs_model_free(&a);
    hs_model_free(&p);
    free(want);
    free(got);
}

/* `info` reads headers only (SPEC §13): hs_checkpoint_probe gives what
 * hs_checkpoint_load and hs_dead_heads give, in every family's layout
 * (GPT-2's transposed Conv1D c_proj, GPT-NeoX's interleaved
 * query_key_value, Phi-3's fused qkv_proj, BF16 and F16 files, shards,
 * MLA, the encoders), as shipped and once saved with heads made dead: the
 * first head of layer 0, and the last head of the last layer kept live by
 * one nonzero element, the last of its columns (the last a probe reads). */
static void test_probe_reads_what_load_reads_for_every_layout(void)
{
    static const char *const dirs[] = {
        "models/gpt2_tiny", "models/llama_gqa_bf16", "models/llama_gqa_f16", "families/neox_par",
        "families/llama3_sharded", "families/qwen2", "families3/phi3", "families3/gemma2",
        "families3/olmo2", "mla/mla_q", "encoders/bert", "encoders/roberta",
    };
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
        char dir[512], out[] = "/tmp/hs_families_probe_XXXXXX";
        snprintf(dir, sizeof dir, "%s/%s", HS_FIXTURE_DIR, dirs[k]);
        int n_dead = -1;
        expect_probe_equals_load(dir, 0, &n_dead);
        CU_ASSERT_EQUAL(n_dead, 0);
        hs_model m;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
        const hs_model_config *c = &m.cfg;
        const int d = c->d_model, dh = c->head_dim, L = c->n_layer - 1;
        const int H0 = c->n_head[0], HL = c->n_head[L];
        for (int r = 0; r < d; r++)
            for (int i = 0; i < dh; i++) {
                m.w.layer[0].attn.w_o[(size_t)r * H0 * dh + i] = 0;
                m.w.layer[L].attn.w_o[(size_t)r * HL * dh + (size_t)(HL - 1) * dh + i] = 0;
            }
        m.w.layer[L].attn.w_o[(size_t)(d - 1) * HL * dh + (size_t)HL * dh - 1] = (hs_real)0.5;
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(out));
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&m, out), HS_OK);
        expect_probe_equals_load(out, 1, &n_dead);
        CU_ASSERT_EQUAL(n_dead, 1); /* (every fixture has two heads or layers) */
        hs_model_free(&m);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        CU_ASSERT_EQUAL(system(cmd), 0);
    }
}

/* A model of each family written as the headscope family (structural
 * pruning does this) keeps the family's features: parallel residual, exact
 * GELU, rotary dims, q/k/v biases, window and rope scaling come back equal
 * and the logits are bit-identical. */
/* eval's forward (HS_ACTS_LOSS: two layers' buffers in turn, the logits
 * HS_LOSS_ROWS rows at a time) gives the losses of the full forward, for
 * every family's preset (four in the double build) at 5 layers (so layers 2-4 reuse the buffers of 0
 * and 1) and 320 rows (two chunks of logits, the second partial); in the
 * headscope family with a narrower layer 3 (pruned heads), whose buffers
 * are layer 1's. Equal to 1e-6 relative, not bit for bit: the unembedding's
 * GEMM runs on 256 and 64 rows instead of 320, and a GEMM's sums may depend
 * on M (OpenBLAS's do, in the portable build; a buffer reused wrongly moves
 * the loss in its third digit). */
/* hs_model_prepack(m, layers): only the matrices of layers 0 .. layers - 1
 * packed (a features or train-sae run stopping at its hook's layer: no
 * later layer, no unembedding), their bytes what it says; every layer:
 * every matrix, the unembedding too. A first backward then packs every
 * matrix for op(B) = B as well (hs_model_prepack_backward: the input
 * gradients' panels), once, and only where the forwards' were packed. */
static void test_prepack_of_the_first_layers_leaves_the_rest(void)
{
    for (int c = 0; c < 5; c++) {
        hs_model m;
        CU_ASSERT_FATAL(hs_checkpoint_load_stored(&m, HS_FIXTURE_DIR "/models/gpt2_tiny",
                                                  HS_WEIGHTS_MAPPED) == HS_OK);
        CU_ASSERT_FATAL(m.cfg.n_layer >= 2);
        /* c 4: no forwards' panels, then a backward */
        const int layers = c & 1 ? m.cfg.n_layer : 1, backward = c >> 1, forward = c < 4;
        size_t bytes = 0, want_bytes = 0;
        int n = 0, want_n = 0;
        if (forward)
            CU_ASSERT_EQUAL_FATAL(hs_model_prepack(&m, layers, 1, &bytes, &n), HS_OK);
        if (backward) {
            hs_model_prepack_backward(&m);
            hs_model_prepack_backward(&m); /* the second does nothing */
        }
#ifndef HEADSCOPE_DOUBLE /* the double build packs nothing */
        int later = 0;
        for (int i = 0; i < m.n_tensors; i++) {
            const hs_tensor_info *t = &m.tensors[i];
            int l = -1;
            if (t->ndim != 2)
                continue;
            const int in_layers = sscanf(t->name, "h.%d.", &l) == 1 ? l < layers : 0;
            const void *data;
            hs_dtype type; /* a float copy (GPT-2's split c_attn) is not packed */
            const int stored = hs_stored_find(m.params + t->offset, &data, &type);
            const int want = forward && stored && (layers == m.cfg.n_layer || in_layers),
                      want_b = forward && stored && backward;
            const hs_real *p = m.params + t->offset;
            const int r = t->shape[0], k = t->shape[1];
            const hs_packed *fwd = hs_stored_packed(p, r, k, 1), *bwd = hs_stored_packed(p, r, k, 0);
            if (want != (fwd != NULL) || want_b != (bwd != NULL))
                printf("\n    case %d: %s %s, %s", c, t->name, fwd ? "packed" : "not packed",
                       bwd ? "packed for op(B) = B" : "not for B");
            CU_ASSERT_EQUAL(fwd != NULL, want);
            CU_ASSERT_EQUAL(bwd != NULL, want_b);
            if (want) /* op(B) = B^T is k x r */
                want_n++, want_bytes += hs_packed_bytes(type, r, k);
            if (!want && stored)
                later++;
        }
        if (forward)
            CU_ASSERT(layers == m.cfg.n_layer ? later == 0 : later > 0 && want_n > 0);
#endif
        CU_ASSERT_EQUAL(n, want_n);
        CU_ASSERT_EQUAL(bytes, want_bytes);
        hs_model_free(&m);
    }
}

static void test_loss_forward_equals_the_full_forward(void)
{
#ifdef HEADSCOPE_DOUBLE /* the fast tier runs it under the sanitizers at -O0: four kinds */
    static const char *const presets[] = { "gpt2", "llama", "bert", "attn-only" };
#else
    static const char *const presets[] = { "gpt2", "gpt_neox", "llama", "qwen2", "gemma2",
                                           "olmo2", "phi3", "bert", "attn-only", "tinylm" };
#endif
    for (size_t k = 0; k < sizeof presets / sizeof presets[0]; k++) {
        hs_model_config c;
        CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, presets[k]), HS_OK);
        for (int l = c.n_layer; l < 5; l++)
            c.n_head[l] = c.n_head[0], c.n_kv_head[l] = c.n_kv_head[0];
        c.n_layer = 5;
        if (c.family == HS_FAMILY_HEADSCOPE) /* a narrower layer (heads pruned) */
            c.n_head[3] = c.n_kv_head[3] = 1;
        hs_model m;
        const int irc = hs_model_init(&m, &c);
        if (irc)
            printf("\n    %s: %s", presets[k], hs_last_error());
        CU_ASSERT_EQUAL_FATAL(irc, HS_OK);
        hs_model_init_random(&m, 31 + k);
        const int B = 40, T = 8, N = B * T;
        int32_t *tok = malloc(sizeof *tok * N), *tg = malloc(sizeof *tg * N);
        CU_ASSERT_FATAL(tok && tg);
        for (int i = 0; i < N; i++)
            tok[i] = (i * 7 + 3) % c.vocab_size, tg[i] = i % 5 ? (i * 11 + 1) % c.vocab_size
                                                              : HS_TARGET_IGNORE;
        hs_acts full, loss;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&full, &c, B, T, HS_ACTS_INFER), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&loss, &c, B, T, HS_ACTS_LOSS), HS_OK);
        CU_ASSERT(loss.bytes < full.bytes);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&full, &m, tok, tg, NULL), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&loss, &m, tok, tg, NULL), HS_OK);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            const double d = fabs((double)loss.losses[i] - (double)full.losses[i]) /
                             (fabs((double)full.losses[i]) + 1e-30);
            worst = d > worst ? d : worst;
        }
        if (!(worst <= 1e-6))
            printf("\n    %s: losses differ by %.3g relative (%.9g against %.9g)", presets[k],
                   worst, loss.loss, full.loss);
        CU_ASSERT(worst <= 1e-6);
        CU_ASSERT_EQUAL(loss.n_targets, full.n_targets);
        hs_acts_free(&full);
        hs_acts_free(&loss);
        free(tok);
        free(tg);
        hs_model_free(&m);
    }
}

static void test_headscope_form_keeps_family_features(void)
{
    static const char *const names[] = { "neox_par", "neox_seq", "mistral_w3", "qwen2",
                                         "llama3_scaled" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char dir[512], out[] = "/tmp/hs_families_hs_XXXXXX", cmd[600];
        case_dir(dir, sizeof dir, names[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(out));
        hs_model a, b;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&a, dir), HS_OK);
        a.cfg.family = HS_FAMILY_HEADSCOPE;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&a, out), HS_OK);
        int rc = hs_checkpoint_load(&b, out);
        if (rc)
            printf("\n    %s: reload: %s", names[i], hs_last_error());
        CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
        CU_ASSERT_EQUAL(memcmp(&b.cfg, &a.cfg, sizeof a.cfg), 0);
        int32_t tok[8] = { 1, 5, 9, 2, 7, 3, 3, 11 };
        hs_acts x, y;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&x, &a.cfg, 1, 8, HS_ACTS_INFER), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&y, &b.cfg, 1, 8, HS_ACTS_INFER), HS_OK);
        CU_ASSERT_EQUAL(hs_forward(&x, &a, tok, NULL, NULL), HS_OK);
        CU_ASSERT_EQUAL(hs_forward(&y, &b, tok, NULL, NULL), HS_OK);
        CU_ASSERT_EQUAL(memcmp(x.logits, y.logits, sizeof(hs_real) * 8 * a.cfg.vocab_size), 0);
        hs_acts_free(&x);
        hs_acts_free(&y);
        hs_model_free(&a);
        hs_model_free(&b);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        CU_ASSERT_EQUAL(system(cmd), 0);
    }
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_gpt_neox_parallel_partial_rotary_matches_torch",
          test_gpt_neox_parallel_partial_rotary_matches_torch },
        { "test_gpt_neox_sequential_matches_torch", test_gpt_neox_sequential_matches_torch },
        { "test_loss_forward_equals_the_full_forward", test_loss_forward_equals_the_full_forward },
        { "test_gpt_neox_bf16_checkpoint_matches_torch", test_gpt_neox_bf16_checkpoint_matches_torch },
        { "test_mistral_window_not_shorter_than_sequence_matches_torch",
          test_mistral_window_not_shorter_than_sequence_matches_torch },
        { "test_mistral_window_shorter_than_sequence_matches_torch",
          test_mistral_window_shorter_than_sequence_matches_torch },
        { "test_window_maps_are_exactly_zero_outside_the_window",
          test_window_maps_are_exactly_zero_outside_the_window },
        { "test_qwen2_biases_tied_matches_torch", test_qwen2_biases_tied_matches_torch },
        { "test_llama3_rope_scaling_matches_torch", test_llama3_rope_scaling_matches_torch },
        { "test_llama_linear_rope_scaling_matches_torch",
          test_llama_linear_rope_scaling_matches_torch },
        { "test_sharded_checkpoint_matches_torch", test_sharded_checkpoint_matches_torch },
        { "test_unknown_config_key_is_refused_naming_it",
          test_unknown_config_key_is_refused_naming_it },
        { "test_unknown_rope_scaling_type_is_refused_naming_it",
          test_unknown_rope_scaling_type_is_refused_naming_it },
        { "test_null_values_follow_hugging_face", test_null_values_follow_hugging_face },
        { "test_qwen2_sliding_window_layers_are_refused",
          test_qwen2_sliding_window_layers_are_refused },
        { "test_missing_shard_is_refused_naming_the_file",
          test_missing_shard_is_refused_naming_the_file },
        { "test_saved_checkpoints_keep_their_family", test_saved_checkpoints_keep_their_family },
        { "test_blocked_reads_load_every_layout_exactly",
          test_blocked_reads_load_every_layout_exactly },
        { "test_probe_reads_what_load_reads_for_every_layout",
          test_probe_reads_what_load_reads_for_every_layout },
        { "test_prepack_of_the_first_layers_leaves_the_rest",
          test_prepack_of_the_first_layers_leaves_the_rest },
        { "test_headscope_form_keeps_family_features", test_headscope_form_keeps_family_features },
    };
    return hs_run_tests("families", tests, HS_NTESTS(tests));
}
