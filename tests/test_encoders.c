/* The encoders of SPEC §14 -- bert and roberta -- against the float64
 * PyTorch reference of scripts/oracle/gen_encoders.py (written from Hugging
 * Face's modeling_bert.py and modeling_roberta.py): logits, every per-head
 * map (padding keys exactly 0), the masked-LM loss and the gradient of
 * every stored tensor of checkpoints in the real names and config keys;
 * each encoder feature switched off in the reference moves the logits away
 * from ours; the legacy and unprefixed tensor names read the same model;
 * --mlm-mask every:K's loss and stderr through hs_evaluate, and the seeded
 * recipe's shares; Clark et al.'s cls/sep/punct (and SPEC §5's) statistics
 * per document over real queries; refusals naming the key; save and reload;
 * the headscope form of every encoder key. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "config_file.h"
#include "encoder.h"
#include "eval.h"
#include "fixture.h"
#include "layers.h"
#include "mlm.h"
#include "patterns.h"
#include "runner.h"
#include "safetensors.h"
#include "trainer.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10, GRAD_TOL = 1e-6; /* gradients are stored as F32 */
#else
static const double TOL = 1e-5, GRAD_TOL = 1e-4;
#endif
/* A switched-off feature moves the reference's logits by more than 2e-4
 * (the generator asserts it): ours must be that far from it too. */
static const double FEATURE_GAP = 1e-4;

static const char *txt(void) { return HS_FIXTURE_DIR "/encoders.txt"; }

static void case_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/encoders/%s", HS_FIXTURE_DIR, name);
}

/* A case's checkpoint, ids and trainer acts. */
typedef struct {
    fx_case fc;
    hs_model m;
    hs_trainer tr;
    int B, T, V;
    int32_t *tokens, *input, *labels; /* (B, T) */
} enc_case;

static void ints_of(int32_t *out, const fx_case *fc, const char *name, size_t n)
{
    const fx_tensor *t = fx_tensor_get(fc, name);
    CU_ASSERT_FATAL(t && t->n == n);
    for (size_t i = 0; i < n; i++)
        out[i] = (int32_t)t->v[i];
}

static void open_case(enc_case *e, const char *name, const char *dir_name)
{
    char dir[512];
    memset(e, 0, sizeof *e);
    case_dir(dir, sizeof dir, dir_name);
    CU_ASSERT_EQUAL_FATAL(fx_load(&e->fc, txt(), name), 0);
    const int rc = hs_checkpoint_load(&e->m, dir);
    if (rc)
        printf("\n    load %s: %s", dir, hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    e->B = (int)fx_int(&e->fc, "B"), e->T = (int)fx_int(&e->fc, "T");
    e->V = (int)fx_int(&e->fc, "V");
    const size_t N = (size_t)e->B * e->T;
    e->tokens = malloc(sizeof(int32_t) * N), e->input = malloc(sizeof(int32_t) * N);
    e->labels = malloc(sizeof(int32_t) * N);
    CU_ASSERT_FATAL(e->tokens && e->input && e->labels);
    ints_of(e->tokens, &e->fc, "tokens", N);
    ints_of(e->input, &e->fc, "input_ids", N);
    ints_of(e->labels, &e->fc, "labels", N);
    CU_ASSERT_EQUAL_FATAL(hs_trainer_init(&e->tr, &e->m, e->B, e->T, 1e-3, 0, 0), HS_OK);
}

static void close_case(enc_case *e)
{
    hs_trainer_free(&e->tr);
    hs_model_free(&e->m);
    free(e->tokens), free(e->input), free(e->labels);
    fx_free(&e->fc);
}

typedef struct {
    const fx_tensor *want; /* (L, B, H, T, T) */
    double worst, pad_mass;
    int layers, B, T;
    const int32_t *tokens;
    int32_t pad;
} maps_check;

static int compare_maps(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    maps_check *mc = ctx;
    const size_t n = (size_t)B * H * T * T;
    if ((size_t)(layer + 1) * n <= mc->want->n) {
        const double e = fx_err(att, mc->want->v + (size_t)layer * n, n);
        mc->worst = e > mc->worst ? e : mc->worst;
        mc->layers++;
    }
    for (int b = 0; b < B; b++) /* a padding key holds exactly 0 */
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int s = 0; s < T; s++)
                    if (mc->tokens[b * T + s] == mc->pad)
                        mc->pad_mass += fabs((double)att[(((size_t)b * H + h) * T + t) * T + s]);
    return HS_OK;
}

/* Logits, maps, each off_* reference FEATURE_GAP away, the masked-LM loss
 * and (grads) the gradients against the reference. */
static void oracle_case(const char *name, const char *dir_name, int grads)
{
    enc_case e;
    open_case(&e, name, dir_name);
    CU_ASSERT(e.m.cfg.encoder);
    maps_check mc = { fx_tensor_get(&e.fc, "maps"), 0, 0, 0, e.B, e.T, e.input,
                      (int32_t)fx_int(&e.fc, "pad") };
    CU_ASSERT_PTR_NOT_NULL_FATAL(mc.want);
    hs_hooks hooks = { .ctx = &mc, .on_maps = compare_maps };
    CU_ASSERT_EQUAL_FATAL(hs_forward(&e.tr.acts, &e.m, e.input, NULL, &hooks), HS_OK);
    const fx_tensor *lg = fx_tensor_get(&e.fc, "logits");
    const double err = fx_err(e.tr.acts.logits, lg->v, lg->n);
    printf("\n    %s (%s): logits max err %.3g, maps of %d layers %.3g, mass on padding %g",
           dir_name, hs_family_name(e.m.cfg.family), err, mc.layers, mc.worst, mc.pad_mass);
    CU_ASSERT(err <= TOL);
    CU_ASSERT(mc.worst <= TOL);
    CU_ASSERT_EQUAL(mc.layers, (int)fx_int(&e.fc, "L"));
    CU_ASSERT_EQUAL(mc.pad_mass, 0);
    int features = 0;
    for (int i = 0; i < e.fc.ntensor; i++) {
        const fx_tensor *t = &e.fc.t[i];
        if (strncmp(t->name, "off_", 4))
            continue;
        const double gap = fx_err(e.tr.acts.logits, t->v, t->n);
        printf("\n    without %s: %.3g away", t->name + 4, gap);
        CU_ASSERT(gap > FEATURE_GAP);
        features++;
    }
    CU_ASSERT(features >= 5);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&e.tr.acts, &e.m, e.input, e.labels, NULL), HS_OK);
    const double want = fx_tensor_get(&e.fc, "loss")->v[0];
    printf("\n    masked-LM loss %.12g want %.12g over %zu positions", e.tr.acts.loss, want,
           e.tr.acts.n_targets);
    CU_ASSERT(fabs(e.tr.acts.loss - want) <= TOL * fmax(1, fabs(want)));
    CU_ASSERT_EQUAL(e.tr.acts.n_targets, 4);
    if (grads) {
        char dir[512], path[600];
        case_dir(dir, sizeof dir, dir_name);
        snprintf(path, sizeof path, "%s/grad.safetensors", dir);
        CU_ASSERT_EQUAL_FATAL(hs_backward(&e.tr.grads, NULL, &e.tr.acts, &e.m, e.input,
                                          e.labels, NULL,
                                          (hs_real)(1.0 / (double)e.tr.acts.n_targets)),
                              HS_OK);
        hs_model g = e.m;
        g.params = e.tr.grad_buf;
        CU_ASSERT(fx_compare_safetensors(path, &g, GRAD_TOL) > 0);
    }
    close_case(&e);
}

static void test_bert_post_ln_token_types_padding_mlm_head_match_torch(void)
{
    oracle_case("bert", "bert", 1);
}

static void test_bert_unprefixed_names_and_decoder_bias_read_the_same_model(void)
{
    oracle_case("bert", "bert_bare", 0);
}

static void test_roberta_positions_from_padding_idx_match_torch(void)
{
    oracle_case("roberta", "roberta", 1);
}

/* ---- the masked-LM loss through the data ---------------------------------- */

/* tokens (B,T) as a shard's tokens (one more at the end, unread by MLM). */
static hs_tokens shard_of(const enc_case *e)
{
    const size_t N = (size_t)e->B * e->T;
    int32_t *ids = malloc(sizeof(int32_t) * (N + 1));
    CU_ASSERT_FATAL(ids != NULL);
    memcpy(ids, e->tokens, sizeof(int32_t) * N);
    ids[N] = e->tokens[0];
    hs_tokens t;
    CU_ASSERT_EQUAL_FATAL(hs_tokens_adopt(&t, ids, N + 1), HS_OK);
    return t;
}

/* The specials of a case as a tokenizer would give them. */
static hs_mlm every_recipe(const enc_case *e, int K, int O)
{
    hs_mlm r = { .on = 1, .every = K, .offset = O, .mask_id = (int32_t)fx_int(&e->fc, "mask"),
                 .vocab = e->V };
    const char *names[] = { "cls", "sep", "pad", "mask", "unk" };
    for (int k = 0; k < 5; k++)
        r.special[r.n_special++] = (int32_t)fx_int(&e->fc, names[k]);
    return r;
}

static void every3(const char *name)
{
    enc_case e;
    open_case(&e, name, name);
    hs_tokens t = shard_of(&e);
    t.mlm = every_recipe(&e, 3, 0);
    hs_eval_result r;
    CU_ASSERT_EQUAL_FATAL(hs_evaluate(&r, &e.m, &t, e.B, e.T, 0, NULL, NULL, NULL), HS_OK);
    const double want = fx_tensor_get(&e.fc, "every3_loss")->v[0];
    const double want_se = fx_tensor_get(&e.fc, "every3_stderr")->v[0];
    printf("\n    %s every:3 loss %.12g want %.12g, stderr %.10g want %.10g, %zu positions", name,
           r.loss, want, r.stderr_loss, want_se, r.tokens);
    CU_ASSERT(fabs(r.loss - want) <= TOL * fmax(1, want));
    CU_ASSERT(fabs(r.stderr_loss - want_se) <= TOL * fmax(1, want_se));
    hs_tokens_free(&t);
    close_case(&e);
}

static void test_mlm_every_k_loss_and_stderr_equal_torch(void)
{
    every3("bert");
    every3("roberta");
}

/* The seeded recipe over a long stretch of plain ids: the share chosen,
 * its 80/10/10 split, no special token ever chosen, the same batch for the
 * same place whatever the batch shape. */
static void test_mlm_seeded_choice_shares_and_specials(void)
{
    enum { N = 200000, V = 50, MASK = 4 };
    int32_t *ids = malloc(sizeof(int32_t) * (N + 1));
    CU_ASSERT_FATAL(ids != NULL);
    for (size_t i = 0; i <= N; i++)
        ids[i] = (int32_t)(i % 17 == 0 ? 2 : 5 + (i * 7919) % (V - 5)); /* 2: [CLS] */
    hs_tokens t;
    CU_ASSERT_EQUAL_FATAL(hs_tokens_adopt(&t, ids, N + 1), HS_OK);
    t.mlm = (hs_mlm){ .on = 1, .prob = 0.15, .seed = 7, .mask_id = MASK, .vocab = V,
                      .n_special = 2, .special = { 2, MASK } };
    int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
    CU_ASSERT_FATAL(in && tg);
    hs_batch_at(&t, 0, 100, N / 100, in, tg);
    long chosen = 0, masked = 0, random = 0, kept = 0, special = 0, eligible = 0;
    for (size_t i = 0; i < N; i++) {
        eligible += ids[i] != 2;
        if (tg[i] == HS_TARGET_IGNORE) {
            CU_ASSERT_EQUAL(in[i], ids[i]);
            continue;
        }
        chosen++;
        special += ids[i] == 2;
        CU_ASSERT_EQUAL(tg[i], ids[i]);
        masked += in[i] == MASK;
        kept += in[i] == ids[i];
        random += in[i] != MASK && in[i] != ids[i];
    }
    const double share = (double)chosen / eligible;
    printf("\n    chosen %.4f of %ld eligible; mask %.3f, random %.3f, unchanged %.3f", share,
           eligible, (double)masked / chosen, (double)random / chosen, (double)kept / chosen);
    CU_ASSERT_EQUAL(special, 0);
    CU_ASSERT(fabs(share - 0.15) < 0.005);
    CU_ASSERT(fabs((double)masked / chosen - 0.8) < 0.01);
    /* a random id may equal the token itself (1 in V) */
    CU_ASSERT(fabs((double)(random + kept) / chosen - 0.2) < 0.01);
    int32_t *in2 = malloc(sizeof(int32_t) * 64), *tg2 = malloc(sizeof(int32_t) * 64);
    hs_batch_at(&t, 1000, 2, 32, in2, tg2); /* another shape, the same places */
    CU_ASSERT_EQUAL(memcmp(in2, in + 1000, sizeof(int32_t) * 64), 0);
    CU_ASSERT_EQUAL(memcmp(tg2, tg + 1000, sizeof(int32_t) * 64), 0);
    t.mlm.seed = 8;
    hs_batch_at(&t, 1000, 2, 32, in2, tg2);
    CU_ASSERT(memcmp(tg2, tg + 1000, sizeof(int32_t) * 64) != 0);
    free(in2), free(tg2), free(in), free(tg);
    hs_tokens_free(&t);
}

/* every:K:O chooses exactly the positions t = O mod K that are not special. */
static void test_mlm_every_k_offset_skips_special_tokens(void)
{
    const int32_t seq[12] = { 2, 10, 11, 12, 3, 13, 14, 0, 0, 15, 16, 3 };
    int32_t *ids = malloc(sizeof seq + sizeof(int32_t));
    memcpy(ids, seq, sizeof seq);
    ids[12] = 2;
    hs_tokens t;
    CU_ASSERT_EQUAL_FATAL(hs_tokens_adopt(&t, ids, 13), HS_OK);
    t.mlm = (hs_mlm){ .on = 1, .every = 2, .offset = 1, .mask_id = 4, .vocab = 20,
                      .n_special = 4, .special = { 2, 3, 0, 4 } };
    int32_t in[12], tg[12];
    hs_batch_at(&t, 0, 2, 6, in, tg);
    for (int i = 0; i < 12; i++) {
        const int special = seq[i] == 2 || seq[i] == 3 || seq[i] == 0;
        const int chosen = (i % 6) % 2 == 1 && !special;
        CU_ASSERT_EQUAL(tg[i], chosen ? seq[i] : HS_TARGET_IGNORE);
        CU_ASSERT_EQUAL(in[i], chosen ? 4 : seq[i]);
    }
    hs_tokens_free(&t);
}

/* The setup's refusals: a causal LM with MLM options, a bad probability or
 * mask spec, no mask id anywhere. */
static void test_mlm_setup_refusals_name_the_option(void)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "gpt2"), HS_OK);
    hs_mlm r;
    hs_mlm_opts o = HS_MLM_OPTS_UNSET;
    CU_ASSERT_EQUAL(hs_mlm_setup(&r, &c, NULL, &o), HS_OK);
    CU_ASSERT_EQUAL(r.on, 0);
    o.prob = 0.2;
    CU_ASSERT_EQUAL(hs_mlm_setup(&r, &c, NULL, &o), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "encoders"));
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "bert"), HS_OK);
    CU_ASSERT_EQUAL(hs_mlm_setup(&r, &c, NULL, &o), HS_OK);
    CU_ASSERT(r.on && r.mask_id == 259 && r.prob == 0.2 && r.n_special >= 3);
    o.prob = 1.5;
    CU_ASSERT_EQUAL(hs_mlm_setup(&r, &c, NULL, &o), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--mlm-prob"));
    o = (hs_mlm_opts)HS_MLM_OPTS_UNSET;
    const char *bad[] = { "every:0", "every:3:3", "every", "each:2", "every:2:x" };
    for (int i = 0; i < 5; i++) {
        o.mask = bad[i];
        CU_ASSERT_EQUAL(hs_mlm_setup(&r, &c, NULL, &o), HS_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "--mlm-mask"));
    }
    o.mask = "every:4:1";
    CU_ASSERT_EQUAL(hs_mlm_setup(&r, &c, NULL, &o), HS_OK);
    CU_ASSERT(r.every == 4 && r.offset == 1);
    c.mask_id = -1;
    CU_ASSERT_EQUAL(hs_mlm_setup(&r, &c, NULL, NULL), HS_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "mask_token_id"));
}

/* ---- Clark et al.'s statistics ----------------------------------------------- */

static void clark_case(const char *name)
{
    enc_case e;
    open_case(&e, name, name);
    hs_tokens t = shard_of(&e);
    hs_special_ids ids = { (int32_t)fx_int(&e.fc, "cls"), (int32_t)fx_int(&e.fc, "sep"),
                           (int32_t)fx_int(&e.fc, "pad"), (int32_t)fx_int(&e.fc, "mask"),
                           (int32_t)fx_int(&e.fc, "unk"),
                           { (int32_t)fx_int(&e.fc, "dot"), (int32_t)fx_int(&e.fc, "comma") } };
    hs_patterns p;
    CU_ASSERT_EQUAL_FATAL(hs_patterns_run_dist(&p, &e.m, &t, e.B, e.T, 0, NULL, 0, &ids, 0, NULL,
                                               NULL),
                          HS_OK);
    const fx_tensor *want = fx_tensor_get(&e.fc, "clark"); /* (L, H, 9) */
    CU_ASSERT_FATAL(want != NULL);
    static const int kind[9] = { HS_PAT_CLS,  HS_PAT_SEP,  HS_PAT_PUNCT, HS_PAT_ENTROPY,
                                 HS_PAT_SELF, HS_PAT_PREV, HS_PAT_NEXT,  HS_PAT_FIRST,
                                 HS_PAT_DISTANCE };
    const int L = e.m.cfg.n_layer, H = e.m.cfg.n_head[0];
    double worst = 0;
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++)
            for (int k = 0; k < 9; k++) {
                const double got = p.value[kind[k]][(size_t)l * HS_MAX_HEADS + h];
                const double e2 = fabs(got - want->v[((size_t)l * H + h) * 9 + k]);
                worst = e2 > worst ? e2 : worst;
            }
    printf("\n    %s: Clark statistics of %d heads, worst %.3g; %ld documents", name, L * H,
           worst, p.n);
    CU_ASSERT(worst <= TOL);
    CU_ASSERT_EQUAL(p.n, e.B);
    CU_ASSERT(p.recorded[HS_PAT_CLS] && p.recorded[HS_PAT_SEP] && p.recorded[HS_PAT_PUNCT]);
    hs_head_table tab = { 0 };
    CU_ASSERT_EQUAL(hs_patterns_to_table(&tab, &p, ""), HS_OK);
    CU_ASSERT_EQUAL(tab.n, L * H * HS_PAT_ALL_KINDS);
    CU_ASSERT_PTR_NOT_NULL(hs_head_table_find(&tab, 0, 0, "cls"));
    hs_head_table_free(&tab);
    hs_patterns_free(&p);
    /* config.json's ids alone: no [CLS] / [SEP] id in bert's, so those rows are left out */
    CU_ASSERT_EQUAL_FATAL(hs_patterns_run(&p, &e.m, &t, e.B, e.T, 0, NULL, 0, NULL, NULL),
                          HS_OK);
    const int roberta = e.m.cfg.family == HS_FAMILY_ROBERTA;
    CU_ASSERT_EQUAL(p.recorded[HS_PAT_CLS], roberta); /* RoBERTa's bos_token_id */
    CU_ASSERT_EQUAL(p.recorded[HS_PAT_PUNCT], 0);    /* the byte ids 46, 44: beyond V = 40 */
    hs_patterns_free(&p);
    hs_tokens_free(&t);
    close_case(&e);
}

static void test_clark_cls_sep_punct_per_document_over_real_queries(void)
{
    clark_case("bert");
    clark_case("roberta");
}

/* A causal model records SPEC §5's statistics only. */
static void test_causal_patterns_record_no_encoder_statistics(void)
{
    hs_model m;
    fx_make_model(&m, "gpt2", NULL, 0, 3);
    int32_t *ids = malloc(sizeof(int32_t) * 33);
    for (int i = 0; i < 33; i++)
        ids[i] = (i * 31) % 256;
    hs_tokens t;
    CU_ASSERT_EQUAL_FATAL(hs_tokens_adopt(&t, ids, 33), HS_OK);
    hs_patterns p;
    CU_ASSERT_EQUAL_FATAL(hs_patterns_run(&p, &m, &t, 2, 16, 0, NULL, 0, NULL, NULL), HS_OK);
    CU_ASSERT(!p.recorded[HS_PAT_CLS] && !p.recorded[HS_PAT_SEP] && !p.recorded[HS_PAT_PUNCT]);
    hs_patterns_free(&p);
    hs_tokens_free(&t);
    hs_model_free(&m);
}

/* ---- configs and checkpoints ------------------------------------------------- */

static char *copy_case(const char *name)
{
    char tmpl[] = "/tmp/hs_encoders_XXXXXX", src[512], cmd[1400];
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

/* Loading `name` with config.json edited (from -> to): refused naming
 * needle, or (needle NULL) loaded. */
static void edited(const char *name, const char *from, const char *to, const char *needle)
{
    char *dir = copy_case(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    CU_ASSERT_EQUAL_FATAL(edit_config(dir, from, to), 0);
    hs_model m;
    const int rc = hs_checkpoint_load(&m, dir);
    printf("\n    %s -> %s: %s", from, to, rc ? hs_last_error() : "(loaded)");
    if (needle) {
        CU_ASSERT_EQUAL(rc, HS_EFORMAT);
        CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), needle));
    } else {
        CU_ASSERT_EQUAL(rc, HS_OK);
        if (!rc)
            hs_model_free(&m);
    }
    remove_dir(dir);
}

static void test_encoder_keys_that_change_the_computation_are_refused(void)
{
    edited("bert", "\"position_embedding_type\": \"absolute\"",
           "\"position_embedding_type\": \"relative_key\"", "position_embedding_type");
    edited("bert", "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"gelu_new\"", "hidden_act");
    edited("bert", "\"use_cache\": true", "\"use_cache\": true, \"is_decoder\": true",
           "is_decoder");
    edited("bert", "\"use_cache\": true", "\"use_cache\": true, \"add_cross_attention\": true",
           "add_cross_attention");
    edited("bert", "\"use_cache\": true", "\"use_cache\": true, \"embedding_size\": 8",
           "embedding_size");
    edited("roberta", "\"pad_token_id\": 1", "\"pad_token_id\": null", "pad_token_id");
    edited("bert", "\"type_vocab_size\": 2", "\"type_vocab_size\": 0", "type_vocab_size");
    /* bookkeeping and dropout keys are accepted (inference ignores dropout) */
    edited("bert", "\"hidden_dropout_prob\": 0.1", "\"hidden_dropout_prob\": 0.3", NULL);
    edited("bert", "\"use_cache\": true", "\"use_cache\": true, \"classifier_dropout\": null, "
           "\"is_decoder\": false, \"chunk_size_feed_forward\": 0", NULL);
    edited("roberta", "\"use_cache\": true", "\"use_cache\": false", NULL);
}

/* Absent keys take BertConfig's defaults. */
static void test_bert_defaults_for_absent_keys(void)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_parse(&c, "{\"model_type\": \"bert\"}", "defaults"), HS_OK);
    CU_ASSERT(c.vocab_size == 30522 && c.d_model == 768 && c.n_layer == 12 &&
              c.n_head[0] == 12 && c.d_ff == 3072 && c.n_ctx == 512 && c.type_vocab == 2 &&
              c.norm_eps == 1e-12 && c.pad_id == 0 && c.hidden_dropout == 0.1 &&
              c.tie_embeddings && c.encoder && c.post_norm && c.gelu_exact);
    CU_ASSERT_EQUAL_FATAL(hs_config_parse(&c, "{\"model_type\": \"roberta\", "
                                              "\"max_position_embeddings\": 514}",
                                          "defaults"),
                          HS_OK);
    CU_ASSERT(c.pad_id == 1 && c.cls_id == 0 && c.sep_id == 2 && c.pos_offset == 2 &&
              c.n_ctx == 512);
}

/* Saving writes the family's own layout and keys; it reads back the same. */
static void saved_reads_back(const char *name)
{
    enc_case e;
    open_case(&e, name, name);
    char tmpl[] = "/tmp/hs_encoders_save_XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(tmpl));
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&e.m, tmpl), HS_OK);
    char path[600], *json = NULL;
    snprintf(path, sizeof path, "%s/config.json", tmpl);
    CU_ASSERT_EQUAL_FATAL(hs_read_text(&json, path, 1 << 20), HS_OK);
    const int roberta = !strcmp(name, "roberta");
    CU_ASSERT_PTR_NOT_NULL(strstr(json, roberta ? "RobertaForMaskedLM" : "BertForMaskedLM"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"hidden_dropout_prob\":\t0.1"));
    free(json);
    hs_model back;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&back, tmpl), HS_OK);
    CU_ASSERT_EQUAL(back.n_params, e.m.n_params);
    CU_ASSERT_EQUAL(memcmp(back.params, e.m.params, sizeof(hs_real) * e.m.n_params), 0);
    hs_safetensors st;
    snprintf(path, sizeof path, "%s/model.safetensors", tmpl);
    CU_ASSERT_EQUAL_FATAL(hs_st_open(&st, path), HS_OK);
    const char *const names[2][3] = {
        { "bert.embeddings.LayerNorm.weight", "cls.predictions.transform.dense.weight",
          "bert.encoder.layer.1.attention.output.LayerNorm.bias" },
        { "roberta.embeddings.token_type_embeddings.weight", "lm_head.layer_norm.bias",
          "roberta.encoder.layer.0.attention.self.query.weight" } };
    for (int k = 0; k < 3; k++)
        CU_ASSERT_PTR_NOT_NULL(hs_st_find(&st, names[roberta][k]));
    hs_st_close(&st);
    hs_model_free(&back);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    CU_ASSERT_EQUAL(system(cmd), 0);
    close_case(&e);
}

static void test_save_writes_the_hf_layout_and_reads_back(void)
{
    saved_reads_back("bert");
    saved_reads_back("roberta");
}

/* Every encoder field through the headscope form (the path of overrides). */
static void test_presets_and_overrides_keep_every_encoder_field(void)
{
    const char *presets[] = { "bert", "roberta" };
    for (int i = 0; i < 2; i++) {
        hs_model_config c, d;
        CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, presets[i]), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_config_check(&c), HS_OK);
        d = c;
        CU_ASSERT_EQUAL_FATAL(hs_config_override(&d, "n_layer=3"), HS_OK);
        CU_ASSERT(d.encoder && d.type_vocab == c.type_vocab && d.embed_norm && d.mlm_transform &&
                  d.pos_offset == c.pos_offset && d.pad_id == c.pad_id &&
                  d.cls_id == c.cls_id && d.sep_id == c.sep_id && d.mask_id == c.mask_id &&
                  d.family == c.family && d.n_layer == 3);
        CU_ASSERT_EQUAL(hs_config_override(&d, "pad_token_id=3"),
                        i ? HS_EINVAL : HS_OK); /* RoBERTa's offset follows pad_token_id */
    }
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "gpt2"), HS_OK);
    CU_ASSERT_EQUAL(hs_config_override(&c, "mlm_transform=true"), HS_EINVAL);
}

/* Gradients of a preset encoder with padding against central differences
 * (double build: tight; float: the same check, looser). */
static void test_encoder_backward_matches_finite_differences(void)
{
    hs_model m;
    const char *over[] = { "d_model=16", "n_head=2", "n_layer=2", "vocab_size=262",
                           "n_ctx=12" };
    fx_make_model(&m, "roberta", over, 5, 11);
    for (size_t i = 0; i < m.n_params; i++)
        m.params[i] /= 3;
    enum { B = 2, T = 6 };
    const int32_t in[B * T] = { 256, 40, 259, 41, 258, 257, 256, 42, 43, 44, 45, 258 };
    const int32_t tg[B * T] = { -1, 12, 33, -1, -1, -1, -1, -1, 50, 51, -1, -1 };
    hs_trainer tr;
    CU_ASSERT_EQUAL_FATAL(hs_trainer_init(&tr, &m, B, T, 1e-3, 0, 0), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&tr.acts, &m, in, tg, NULL), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_backward(&tr.grads, NULL, &tr.acts, &m, in, tg, NULL,
                                      (hs_real)(1.0 / (double)tr.acts.n_targets)),
                          HS_OK);
#ifdef HEADSCOPE_DOUBLE
    const double h = 1e-6, tol = 1e-6;
#else
    const double h = 3e-3, tol = 0.1; /* float: a sanity check; torch's gradients are the test */
#endif
    double worst = 0;
    int checked = 0;
    for (size_t i = 0; i < m.n_params; i += 7) {
        const hs_real keep = m.params[i];
        m.params[i] = (hs_real)(keep + h);
        hs_forward(&tr.acts, &m, in, tg, NULL);
        const double up = tr.acts.loss;
        m.params[i] = (hs_real)(keep - h);
        hs_forward(&tr.acts, &m, in, tg, NULL);
        const double down = tr.acts.loss;
        m.params[i] = keep;
        const double fd = (up - down) / (2 * h), g = tr.grad_buf[i];
        const double e = fabs(fd - g) / fmax(1e-2, fabs(fd));
        worst = e > worst ? e : worst;
        checked++;
    }
    printf("\n    %d parameters, worst relative error %.3g", checked, worst);
    CU_ASSERT(worst <= tol);
    hs_trainer_free(&tr);
    hs_model_free(&m);
}

int main(void)
{
    static const hs_test tests[] = {
        { "bert_post_ln_token_types_padding_mlm_head_match_torch",
          test_bert_post_ln_token_types_padding_mlm_head_match_torch },
        { "bert_unprefixed_names_and_decoder_bias_read_the_same_model",
          test_bert_unprefixed_names_and_decoder_bias_read_the_same_model },
        { "roberta_positions_from_padding_idx_match_torch",
          test_roberta_positions_from_padding_idx_match_torch },
        { "mlm_every_k_loss_and_stderr_equal_torch", test_mlm_every_k_loss_and_stderr_equal_torch },
        { "mlm_seeded_choice_shares_and_specials", test_mlm_seeded_choice_shares_and_specials },
        { "mlm_every_k_offset_skips_special_tokens", test_mlm_every_k_offset_skips_special_tokens },
        { "mlm_setup_refusals_name_the_option", test_mlm_setup_refusals_name_the_option },
        { "clark_cls_sep_punct_per_document_over_real_queries",
          test_clark_cls_sep_punct_per_document_over_real_queries },
        { "causal_patterns_record_no_encoder_statistics",
          test_causal_patterns_record_no_encoder_statistics },
        { "encoder_keys_that_change_the_computation_are_refused",
          test_encoder_keys_that_change_the_computation_are_refused },
        { "bert_defaults_for_absent_keys", test_bert_defaults_for_absent_keys },
        { "save_writes_the_hf_layout_and_reads_back", test_save_writes_the_hf_layout_and_reads_back },
        { "presets_and_overrides_keep_every_encoder_field",
          test_presets_and_overrides_keep_every_encoder_field },
        { "encoder_backward_matches_finite_differences",
          test_encoder_backward_matches_finite_differences },
    };
    return hs_run_tests("encoders", tests, HS_NTESTS(tests));
}
