/* Whole models against the PyTorch reference of scripts/oracle/gen_models.py
 * (GPT-2 and Llama written from the Hugging Face semantics, and our own
 * headscope family): logits, loss, gradients of every stored tensor, Adam and
 * AdamW trajectories, the seed's head-count fixture, eval loss and standard
 * error, F16/BF16 checkpoints, and the save -> load round trip. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "config_file.h"
#include "eval.h"
#include "fixture.h"
#include "memory.h"
#include "runner.h"
#include "tokens.h"
#include "trainer.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-9, TRAIN_TOL = 1e-9;
#else
static const double TOL = 1e-4, TRAIN_TOL = 1e-4;
#endif

static const char *models_txt(void) { return HS_FIXTURE_DIR "/models.txt"; }

static void model_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/models/%s", HS_FIXTURE_DIR, name);
}

static void logits_case(const char *name, int with_grads)
{
    char dir[512];
    model_dir(dir, sizeof dir, name);
    fx_oracle o;
    fx_oracle_open(&o, models_txt(), name, dir);
    fx_oracle_logits(&o, name, TOL);
    fx_oracle_loss(&o, TOL, with_grads);
    if (with_grads) {
        const hs_model g = fx_oracle_grads(&o);
        const hs_model_config *c = &o.m.cfg;
        CU_ASSERT_EQUAL(fx_compare_exported(&o.fc, "grad:", &g, TOL),
                        o.m.n_tensors - (c->family == HS_FAMILY_GPT2 ? 4 * c->n_layer : 0));
    }
    fx_oracle_close(&o);
}

static void test_gpt2_logits_loss_and_gradients_match_torch(void) { logits_case("gpt2_tiny", 1); }
static void test_llama_gqa_logits_loss_and_gradients_match_torch(void) { logits_case("llama_gqa", 1); }
static void test_llama_mqa_tied_logits_match_torch(void) { logits_case("llama_mqa_tied", 0); }
static void test_headscope_uneven_heads_rope_swiglu_match_torch(void) { logits_case("hs_mixed", 1); }
static void test_headscope_post_norm_gelu_tied_match_torch(void) { logits_case("hs_post_gelu", 1); }
static void test_f16_checkpoint_loads(void) { logits_case("llama_gqa_f16", 0); }
static void test_bf16_checkpoint_loads(void) { logits_case("llama_gqa_bf16", 0); }

/* 10 optimizer steps from the checkpoint on train.bin, wrapping batches. */
static void trajectory_case(const char *case_name, const char *dir_name, double weight_decay)
{
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, models_txt(), case_name), 0);
    char dir[512], data[600];
    model_dir(dir, sizeof dir, dir_name);
    snprintf(data, sizeof data, "%s/train.bin", dir);
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
    hs_tokens tok;
    CU_ASSERT_EQUAL_FATAL(hs_tokens_read(&tok, data), HS_OK);
    const int B = (int)fx_int(&fc, "B"), T = (int)fx_int(&fc, "T"), steps = (int)fx_int(&fc, "steps");
    const double lr = fx_tensor_get(&fc, "lr")->v[0];
    hs_trainer tr;
    CU_ASSERT_EQUAL_FATAL(hs_trainer_init(&tr, &m, B, T, lr, weight_decay, 0), HS_OK);
    int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
    double *losses = malloc(sizeof(double) * steps);
    for (int s = 0; s < steps; s++) {
        hs_batch_at(&tok, hs_batch_start_wrapped(&tok, B, T, (size_t)s), B, T, in, tg);
        CU_ASSERT_EQUAL_FATAL(hs_trainer_step(&tr, in, tg, lr, &losses[s]), HS_OK);
    }
    double e = fx_err_double(losses, fx_tensor_get(&fc, "losses")->v, (size_t)steps);
    printf("\n    %s: %d losses max err %.3g", case_name, steps, e);
    CU_ASSERT(e <= TRAIN_TOL);
    CU_ASSERT(fx_compare_exported(&fc, "final:", &m, TRAIN_TOL) > 0);
    free(in), free(tg), free(losses);
    hs_trainer_free(&tr);
    hs_tokens_free(&tok);
    hs_model_free(&m);
    fx_free(&fc);
}

static void test_gpt2_adam_trajectory_matches_torch(void)
{
    trajectory_case("gpt2_tiny_adam", "gpt2_tiny", 0);
}
static void test_llama_adam_trajectory_matches_torch(void)
{
    trajectory_case("llama_gqa_adam", "llama_gqa", 0);
}
static void test_llama_adamw_trajectory_matches_torch(void)
{
    trajectory_case("llama_gqa_adamw", "llama_gqa", 0.1);
}

/* The seed's head-count fixture: one and four heads from the same weights. */
static void test_tinylm_head_count_fixture_reproduces_torch_losses(void)
{
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, models_txt(), "tinylm_headcount"), 0);
    const int steps = (int)fx_int(&fc, "steps"), B = 2, T = 8;
    const fx_tensor *seq = fx_tensor_get(&fc, "seq");
    int32_t in[16], tg[16];
    CU_ASSERT_FATAL(seq && seq->n >= (size_t)B * (T + 1));
    fx_split_tokens(seq, B, T, in, tg);
    const char *dirs[2] = { "tinylm_h1", "tinylm_h4" }, *want[2] = { "losses_h1", "losses_h4" };
    for (int k = 0; k < 2; k++) {
        char dir[512];
        model_dir(dir, sizeof dir, dirs[k]);
        hs_model m;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
        CU_ASSERT_EQUAL(m.cfg.n_head[0], k ? 4 : 1);
        hs_trainer tr;
        CU_ASSERT_EQUAL_FATAL(hs_trainer_init(&tr, &m, B, T, 0.02, 0, 0), HS_OK);
        double losses[64];
        for (int s = 0; s < steps && s < 64; s++)
            CU_ASSERT_EQUAL_FATAL(hs_trainer_step(&tr, in, tg, 0.02, &losses[s]), HS_OK);
        double e = fx_err_double(losses, fx_tensor_get(&fc, want[k])->v, (size_t)steps);
        printf("\n    %s: first %.6f last %.6f, max err %.3g", dirs[k], losses[0],
               losses[steps - 1], e);
        CU_ASSERT(e <= TRAIN_TOL);
        hs_trainer_free(&tr);
        hs_model_free(&m);
    }
    fx_free(&fc);
}

static void test_eval_loss_and_stderr_match_reference(void)
{
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, models_txt(), "eval_gpt2_tiny"), 0);
    char dir[512], data[600];
    model_dir(dir, sizeof dir, "gpt2_tiny");
    snprintf(data, sizeof data, "%s/eval.bin", dir);
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
    hs_tokens tok;
    CU_ASSERT_EQUAL_FATAL(hs_tokens_read(&tok, data), HS_OK);
    hs_eval_result r;
    CU_ASSERT_EQUAL_FATAL(hs_evaluate(&r, &m, &tok, (int)fx_int(&fc, "B"), (int)fx_int(&fc, "T"), 0,
                                      NULL, NULL, NULL),
                          HS_OK);
    double loss = fx_tensor_get(&fc, "loss")->v[0], se = fx_tensor_get(&fc, "stderr")->v[0];
    printf("\n    loss %.10g (want %.10g), stderr %.10g (want %.10g), %zu batches", r.loss, loss,
           r.stderr_loss, se, r.batches);
    CU_ASSERT_EQUAL(r.batches, (size_t)fx_int(&fc, "batches"));
    CU_ASSERT(fabs(r.loss - loss) <= TOL);
    CU_ASSERT(fabs(r.stderr_loss - se) <= TOL);
    hs_tokens_free(&tok);
    hs_model_free(&m);
    fx_free(&fc);
}

static double sample_std(const hs_real *x, size_t n)
{
    double sum = 0, sumsq = 0;
    for (size_t i = 0; i < n; i++)
        sum += x[i], sumsq += (double)x[i] * x[i];
    return sqrt((sumsq - sum * sum / n) / (n - 1));
}

/* initializer_range sets the std of the random weights (GPT-2's scheme: the
 * projections into the residual stream scaled by 1/sqrt(2 L)), and survives
 * a config round trip; nonsense values are refused. */
static void test_initializer_range_sets_the_random_init_scale(void)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "attn-only"), HS_OK);
    CU_ASSERT_DOUBLE_EQUAL(c.init_std, 0.02, 0);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "initializer_range=0.1"), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_config_override(&c, "d_model=128"), HS_OK);
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_model_init(&m, &c), HS_OK);
    hs_model_init_random(&m, 3);
    const double wte = sample_std(m.w.wte, (size_t)c.vocab_size * c.d_model);
    const double wo = sample_std(m.w.layer[0].attn.w_o, (size_t)c.d_model * c.d_model);
    printf("\n    std wte %.4f (want 0.1), o_proj %.4f (want %.4f)", wte, wo, 0.1 / sqrt(2.0 * c.n_layer));
    CU_ASSERT(fabs(wte - 0.1) < 0.005);
    CU_ASSERT(fabs(wo - 0.1 / sqrt(2.0 * c.n_layer)) < 0.003);
    char *json = hs_config_to_json(&m.cfg);
    hs_model_config back;
    CU_ASSERT_EQUAL_FATAL(hs_config_parse(&back, json, "round trip"), HS_OK);
    CU_ASSERT_DOUBLE_EQUAL(back.init_std, 0.1, 0);
    free(json);
    hs_model_free(&m);
    CU_ASSERT_NOT_EQUAL(hs_config_override(&c, "initializer_range=0"), HS_OK);
    CU_ASSERT_NOT_EQUAL(hs_config_override(&c, "initializer_range=-1"), HS_OK);
}

static void test_save_load_round_trip_is_bit_exact(void)
{
    const char *names[] = { "gpt2_tiny", "llama_gqa", "llama_mqa_tied", "hs_mixed", "hs_post_gelu",
                            "tinylm_h4" };
    char tmpl[] = "/tmp/hs_roundtrip_XXXXXX";
    char *tmp = mkdtemp(tmpl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tmp);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char dir[512];
        model_dir(dir, sizeof dir, names[i]);
        hs_model a, b;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&a, dir), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&a, tmp), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&b, tmp), HS_OK);
        CU_ASSERT_EQUAL(a.n_params, b.n_params);
        CU_ASSERT_EQUAL(a.cfg.family, b.cfg.family);
        CU_ASSERT(a.n_params == b.n_params &&
                  !memcmp(a.params, b.params, sizeof(hs_real) * a.n_params));
        CU_ASSERT(!memcmp(&a.cfg, &b.cfg, sizeof a.cfg));
        hs_model_free(&a);
        hs_model_free(&b);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    unlink(path);
    rmdir(tmp);
}

/* ---- activations: one size table ---------------------------------------- */

/* The configurations the activation tests run over: every preset and an
 * uneven headscope model (pruned heads, GQA, head_dim != d/H, post-norm). */
static int acts_config(hs_model_config *c, int i)
{
    static const char *const presets[] = { "gpt2", "llama", "attn-only", "tinylm" };
    if (i < 4)
        return hs_config_preset(c, presets[i]) == HS_OK;
    if (hs_config_preset(c, "llama"))
        return 0;
    c->family = HS_FAMILY_HEADSCOPE;
    c->n_layer = 3;
    c->d_model = 40;
    c->head_dim = 6;
    const int H[3] = { 4, 2, 6 }, G[3] = { 2, 1, 3 };
    for (int l = 0; l < 3; l++)
        c->n_head[l] = H[l], c->n_kv_head[l] = G[l];
    c->post_norm = 1;
    c->d_ff = 52;
    return hs_config_check(c) == HS_OK;
}

typedef struct {
    hs_real *p;
    size_t n;
} acts_buf;

/* Every buffer of a with the size its shape comment in transformer.h
 * promises for the mode, worked out here and not by the library; NULL
 * buffers are listed with n = 0. Returns the count. */
static int acts_buffers(const hs_acts *a, const hs_model_config *c, acts_buf *out)
{
    const size_t N = (size_t)a->B_alloc * a->T, T = (size_t)a->T, d = (size_t)c->d_model;
    const size_t F = (size_t)c->d_ff, V = (size_t)c->vocab_size, dh = (size_t)c->head_dim;
    const int train = a->mode == HS_ACTS_TRAIN, mlp = c->mlp != HS_MLP_NONE;
    const int swiglu = c->mlp == HS_MLP_SWIGLU;
    size_t maxH = 0;
    for (int l = 0; l < c->n_layer; l++)
        maxH = (size_t)c->n_head[l] > maxH ? (size_t)c->n_head[l] : maxH;
    int n = 0;
#define BUF(ptr, count) (out[n++] = (acts_buf){ (ptr), (ptr) ? (size_t)(count) : 0 })
    BUF(a->emb, N * d);
    BUF(a->shared_maps, N * maxH * T);
    BUF(a->lnf, N * d);
    BUF(a->lnf_mean, N);
    BUF(a->lnf_rstd, N);
    BUF(a->logits, N * V);
    BUF(a->losses, N);
    BUF(a->dres, N * d);
    BUF(a->dres2, N * d);
    BUF(a->dnorm, N * d);
    BUF(a->dbranch, N * d);
    BUF(a->dh, N * F);
    BUF(a->dh2, N * F);
    BUF(a->dh3, N * F);
    for (int l = 0; l < c->n_layer; l++) {
        const hs_layer_acts *la = &a->layer[l];
        const size_t HD = (size_t)c->n_head[l] * dh, GD = (size_t)c->n_kv_head[l] * dh;
        if (a->mode != HS_ACTS_MAPS)
            BUF(la->attn.att, N * c->n_head[l] * T);
        BUF(la->attn.q, N * HD);
        BUF(la->attn.k, N * GD);
        BUF(la->attn.v, N * GD);
        BUF(la->attn.z, N * HD);
        BUF(la->attn.zg, N * HD);
        BUF(la->attn.dz, N * HD);
        BUF(la->attn.dq, N * HD);
        BUF(la->attn.dk, N * GD);
        BUF(la->attn.dv, N * GD);
        BUF(la->n1, N * d);
        BUF(la->n1_mean, N);
        BUF(la->n1_rstd, N);
        BUF(la->attn_out, N * d);
        BUF(la->r1, N * d);
        BUF(la->n2, N * d);
        BUF(la->n2_mean, N);
        BUF(la->n2_rstd, N);
        BUF(la->h_pre, N * F);
        BUF(la->h_up, N * F);
        BUF(la->h_act, N * F);
        BUF(la->mlp_out, N * d);
        BUF(la->r2, N * d);
        /* which buffers the mode must have */
        CU_ASSERT_EQUAL(la->attn.att != NULL, train || a->mode == HS_ACTS_MAPS);
        CU_ASSERT_EQUAL(la->attn.dz != NULL, train);
        CU_ASSERT_EQUAL(la->n2 != NULL, mlp);
        CU_ASSERT_EQUAL(la->h_up != NULL, swiglu);
        CU_ASSERT_PTR_EQUAL(la->in, l ? a->layer[l - 1].out : a->emb);
        if (a->mode == HS_ACTS_MAPS)
            CU_ASSERT_PTR_EQUAL(la->attn.att, a->shared_maps);
        CU_ASSERT_EQUAL(la->attn.B, a->B_alloc);
        CU_ASSERT_EQUAL(la->attn.L, a->T);
    }
    CU_ASSERT_EQUAL(a->dres != NULL, train);
    CU_ASSERT_EQUAL(a->dh3 != NULL, train && swiglu);
    CU_ASSERT_EQUAL(a->shared_maps != NULL, a->mode == HS_ACTS_MAPS);
#undef BUF
    return n;
}

/* hs_acts_bytes is what hs_acts_alloc allocates, for every preset, mode and
 * a few shapes; the buffers have their promised sizes, start on 64-byte
 * boundaries, lie inside the block and do not overlap (each is filled with
 * its own tag and all are read back); the block is the buffers plus only
 * alignment and the per-layer records. */
static void test_acts_bytes_equal_the_one_allocation(void)
{
    const int shapes[][2] = { { 1, 1 }, { 3, 7 }, { 2, 8 } };
    const int modes[] = { HS_ACTS_INFER, HS_ACTS_TRAIN, HS_ACTS_MAPS };
    hs_model_config c;
    int cases = 0;
    for (int ci = 0; ci < 5; ci++) {
        CU_ASSERT_FATAL(acts_config(&c, ci));
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int mi = 0; mi < 3; mi++) {
                const int B = shapes[s][0], T = shapes[s][1], mode = modes[mi];
                const size_t bytes = hs_acts_bytes(&c, B, T, mode);
                CU_ASSERT(bytes > 0);
                hs_acts a;
                CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &c, B, T, mode), HS_OK);
                CU_ASSERT_EQUAL(a.bytes, bytes);
                CU_ASSERT_PTR_NOT_NULL(a.block);
                acts_buf *buf = calloc(16 + 23 * (size_t)c.n_layer, sizeof *buf);
                CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
                const int nbuf = acts_buffers(&a, &c, buf);
                const unsigned char *lo = (const unsigned char *)a.layer;
                CU_ASSERT(lo >= (const unsigned char *)a.block && (uintptr_t)lo % 64 == 0);
                size_t used = 0;
                int nonnull = 0;
                for (int i = 0; i < nbuf; i++) {
                    if (!buf[i].p)
                        continue;
                    const unsigned char *p = (const unsigned char *)buf[i].p;
                    CU_ASSERT((uintptr_t)p % 64 == 0);
                    CU_ASSERT(p >= lo && p + buf[i].n * sizeof(hs_real) <= lo + a.bytes);
                    for (size_t k = 0; k < buf[i].n; k++) {
                        CU_ASSERT_EQUAL_FATAL(buf[i].p[k], 0); /* zeroed */
                        buf[i].p[k] = (hs_real)(i + 1);
                    }
                    used += buf[i].n * sizeof(hs_real);
                    nonnull++;
                }
                int clobbered = 0;
                for (int i = 0; i < nbuf; i++)
                    for (size_t k = 0; k < buf[i].n; k++)
                        clobbered += buf[i].p[k] != (hs_real)(i + 1);
                CU_ASSERT_EQUAL(clobbered, 0);
                /* only padding (< 64 bytes a buffer) and the records on top */
                const size_t records = (size_t)c.n_layer * sizeof(hs_layer_acts);
                CU_ASSERT(bytes >= used + records);
                CU_ASSERT(bytes < used + records + 64 * ((size_t)nonnull + 1));
                free(buf);
                hs_acts_set_batch(&a, 1);
                hs_acts_free(&a);
                CU_ASSERT_PTR_NULL(a.block);
                CU_ASSERT_PTR_NULL(a.layer);
                cases++;
            }
    }
    printf("\n    %d configuration x shape x mode cases", cases);
    CU_ASSERT_EQUAL(hs_acts_bytes(&c, 0, 4, HS_ACTS_INFER), 0);
    hs_acts a;
    CU_ASSERT_EQUAL(hs_acts_alloc(&a, &c, 2, 0, HS_ACTS_INFER), HS_EINVAL);
    CU_ASSERT_PTR_NULL(a.block);
}

/* The bytes are hs_real bytes: with every size a multiple of 16 elements
 * (no alignment padding in either precision) one more sequence of T
 * positions costs exactly sizeof(hs_real) times its element count, worked
 * out here from the shapes; a budget written for float is wrong twice over
 * in the double build. */
static void test_acts_bytes_scale_with_hs_real(void)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "llama"), HS_OK); /* d 64, H 4, G 2, dh 16 */
    c.d_ff = 176;                                                 /* 172 is not a multiple */
    const size_t T = 16, d = 64, F = 176, V = 256, H = 4, GD = 32, HD = 64, L = 2;
    const size_t layer_infer = 3 * HD + 2 * GD + 3 * d + 2 + 3 * d + 2 + 3 * F;
    const size_t top_infer = 2 * d + 2 + V + 1;
    const size_t infer = T * (top_infer + L * layer_infer);
    const size_t train = infer + T * (4 * d + 3 * F + L * (H * T + 2 * HD + 2 * GD));
    const size_t maps = infer + T * H * T;
    const struct {
        int mode;
        size_t elems;
    } want[] = { { HS_ACTS_INFER, infer }, { HS_ACTS_TRAIN, train }, { HS_ACTS_MAPS, maps } };
    for (int i = 0; i < 3; i++) {
        const size_t one = hs_acts_bytes(&c, 1, (int)T, want[i].mode);
        const size_t three = hs_acts_bytes(&c, 3, (int)T, want[i].mode);
        printf("\n    mode %d: %zu bytes a sequence (%zu elements of %zu bytes)", want[i].mode,
               (three - one) / 2, want[i].elems, sizeof(hs_real));
        CU_ASSERT_EQUAL(three - one, 2 * want[i].elems * sizeof(hs_real));
    }
}

/* Pages of this process in memory, in bytes (/proc/self/statm); 0 under
 * AddressSanitizer, whose allocator holds freed blocks in quarantine. */
static size_t resident_bytes(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return 0;
#endif
#endif
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, pages = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &pages) != 2)
            pages = 0;
        fclose(f);
    }
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* hs_acts_free keeps a large block for the next hs_acts_alloc of its size:
 * the same memory comes back zeroed and counted as held, and not while kept;
 * a reservation that reuses it, or an allocation of another size, frees it
 * first (its pages leave the process where the allocator unmaps them). */
static void test_kept_activations_come_back_zeroed_and_only_at_their_size(void)
{
    hs_model_config c;
    CU_ASSERT_FATAL(acts_config(&c, 0));
    const int T = 128;
    int B = 1;
    while (hs_acts_bytes(&c, B, T, HS_ACTS_TRAIN) < HS_KEPT_MIN + (HS_KEPT_MIN >> 2))
        B++;
    const size_t bytes = hs_acts_bytes(&c, B, T, HS_ACTS_TRAIN);
    const size_t held = hs_mem_held();
    hs_mem_drop_kept();
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &c, B, T, HS_ACTS_TRAIN), HS_OK);
    CU_ASSERT_EQUAL(hs_mem_held() - held, bytes);
    void *block = a.block;
    memset(a.layer, 0xa5, bytes); /* every page touched */
    hs_acts_free(&a);
    CU_ASSERT_EQUAL(hs_mem_held(), held); /* kept, not held */
    CU_ASSERT_EQUAL(hs_mem_kept(), bytes);
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &c, B, T, HS_ACTS_TRAIN), HS_OK);
    CU_ASSERT_PTR_EQUAL(a.block, block);
    CU_ASSERT_EQUAL(hs_mem_held() - held, bytes);
    CU_ASSERT_EQUAL(hs_mem_kept(), 0);
    acts_buf *buf = calloc(16 + 23 * (size_t)c.n_layer, sizeof *buf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    const int nbuf = acts_buffers(&a, &c, buf);
    size_t nonzero = 0, n = 0;
    for (int i = 0; i < nbuf; i++)
        for (size_t k = 0; k < buf[i].n; k++, n++)
            nonzero += buf[i].p[k] != 0;
    free(buf);
    CU_ASSERT(n * sizeof(hs_real) > bytes / 2);
    CU_ASSERT_EQUAL(nonzero, 0);
    hs_acts_free(&a);
    const size_t kept = resident_bytes();
    CU_ASSERT_EQUAL_FATAL(hs_mem_reserve(1, "test"), HS_OK); /* reuses nothing */
    hs_mem_release(1);
    CU_ASSERT_EQUAL(hs_mem_kept(), 0);
    CU_ASSERT(!kept || resident_bytes() + bytes / 2 < kept);
    /* kept again, then an allocation of another size (its pages untouched) */
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &c, B, T, HS_ACTS_TRAIN), HS_OK);
    memset(a.layer, 0xa5, bytes);
    hs_acts_free(&a);
    const size_t before = resident_bytes();
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &c, B, T / 2, HS_ACTS_TRAIN), HS_OK);
    CU_ASSERT_EQUAL(hs_mem_kept(), 0);
    CU_ASSERT(!before || resident_bytes() + bytes / 2 < before);
    hs_acts_free(&a);
    hs_mem_drop_kept();
    CU_ASSERT_EQUAL(hs_mem_kept(), 0);
    CU_ASSERT_EQUAL(hs_mem_held(), held);
}

/* At most HS_KEPT_BLOCKS blocks and HS_KEPT_BYTES are kept, the oldest
 * freed to make room, a larger block not at all; each starts aligned. (The
 * blocks are never touched: their pages are not made.) */
static void test_kept_blocks_stay_within_their_count_and_bytes(void)
{
    hs_mem_drop_kept();
    const size_t held = hs_mem_held(), small = (size_t)HS_KEPT_MIN + 64;
    void *p[HS_KEPT_BLOCKS + 1];
    for (int i = 0; i <= HS_KEPT_BLOCKS; i++) {
        p[i] = hs_calloc_kept(small, "test");
        CU_ASSERT_PTR_NOT_NULL_FATAL(p[i]);
        CU_ASSERT_EQUAL((uintptr_t)p[i] % HS_KEPT_ALIGN, 0);
    }
    CU_ASSERT_EQUAL(hs_mem_held() - held, (HS_KEPT_BLOCKS + 1) * small);
    for (int i = 0; i <= HS_KEPT_BLOCKS; i++)
        hs_free_kept(p[i], small);
    CU_ASSERT_EQUAL(hs_mem_kept(), HS_KEPT_BLOCKS * small);
    CU_ASSERT_EQUAL(hs_mem_held(), held);
    void *again = hs_calloc_kept(small, "test"); /* the newest four were kept */
    CU_ASSERT(again == p[1] || again == p[2] || again == p[3] || again == p[4]);
    hs_free_kept(again, small);
    /* two halves of the bytes (sizes a little apart, to tell them): the
     * second pushes the first out */
    const size_t half = HS_KEPT_BYTES / 2 + 64, half2 = half + 64;
    void *a = hs_calloc_kept(half, "test"), *b = hs_calloc_kept(half2, "test");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(hs_mem_kept(), 0); /* another size: the small ones went */
    hs_free_kept(a, half);
    CU_ASSERT_EQUAL(hs_mem_kept(), half);
    hs_free_kept(b, half2);
    CU_ASSERT_EQUAL(hs_mem_kept(), half2);
    /* more than the bytes: freed at once */
    void *big = hs_calloc_kept(HS_KEPT_BYTES + 64, "test");
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    hs_free_kept(big, HS_KEPT_BYTES + 64);
    CU_ASSERT_EQUAL(hs_mem_kept(), 0);
    CU_ASSERT_EQUAL(hs_mem_held(), held);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_gpt2_logits_loss_and_gradients_match_torch",
          test_gpt2_logits_loss_and_gradients_match_torch },
        { "test_llama_gqa_logits_loss_and_gradients_match_torch",
          test_llama_gqa_logits_loss_and_gradients_match_torch },
        { "test_llama_mqa_tied_logits_match_torch", test_llama_mqa_tied_logits_match_torch },
        { "test_headscope_uneven_heads_rope_swiglu_match_torch",
          test_headscope_uneven_heads_rope_swiglu_match_torch },
        { "test_headscope_post_norm_gelu_tied_match_torch",
          test_headscope_post_norm_gelu_tied_match_torch },
        { "test_f16_checkpoint_loads", test_f16_checkpoint_loads },
        { "test_bf16_checkpoint_loads", test_bf16_checkpoint_loads },
        { "test_gpt2_adam_trajectory_matches_torch", test_gpt2_adam_trajectory_matches_torch },
        { "test_llama_adam_trajectory_matches_torch", test_llama_adam_trajectory_matches_torch },
        { "test_llama_adamw_trajectory_matches_torch", test_llama_adamw_trajectory_matches_torch },
        { "test_tinylm_head_count_fixture_reproduces_torch_losses",
          test_tinylm_head_count_fixture_reproduces_torch_losses },
        { "test_eval_loss_and_stderr_match_reference", test_eval_loss_and_stderr_match_reference },
        { "test_save_load_round_trip_is_bit_exact", test_save_load_round_trip_is_bit_exact },
        { "test_initializer_range_sets_the_random_init_scale",
          test_initializer_range_sets_the_random_init_scale },
        { "test_acts_bytes_equal_the_one_allocation", test_acts_bytes_equal_the_one_allocation },
        { "test_acts_bytes_scale_with_hs_real", test_acts_bytes_scale_with_hs_real },
        { "test_kept_activations_come_back_zeroed_and_only_at_their_size",
          test_kept_activations_come_back_zeroed_and_only_at_their_size },
        { "test_kept_blocks_stay_within_their_count_and_bytes",
          test_kept_blocks_stay_within_their_count_and_bytes },
    };
    return hs_run_tests("model_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
