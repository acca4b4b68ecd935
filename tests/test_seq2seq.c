/* The encoder-decoder families of SPEC §17 -- t5 (v1.0 and Flan's gated
 * v1.1), bart, marian -- against the float64 PyTorch reference of
 * scripts/oracle/gen_seq2seq.py (written from the Hugging Face model
 * definitions): logits, the pooled loss and its stderr, every map of every
 * attention type, checkpoints in each family's real names and config keys;
 * each family-specific feature switched off in the reference moves the
 * logits away from ours; greedy decoding with the caches; the pairs file
 * through hs_pairs_eval; a head of each attention type zero-ablated; the
 * backward (gates of every type, weights, T5's bias tables); T5's buckets
 * against HF's own points; save and reload; refusals naming the key, the
 * file and line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "config_file.h"
#include "fixture.h"
#include "pairs.h"
#include "pairs_heads.h"
#include "runner.h"
#include "seq2seq.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10;
#else
/* T5's scores are not scaled by 1/sqrt(dh): float rounding reaches the
 * logits larger than in the decoder-only families */
static const double TOL = 5e-5;
#endif
/* A switched-off feature moves the reference's last logits by more than
 * 2e-4 (the generator asserts it): ours must be that far from it too. */
static const double FEATURE_GAP = 1e-4;
/* Gradients: the largest error over the tensor's largest entry. */
#ifdef HEADSCOPE_DOUBLE
static const double GRAD_TOL = 1e-9;
#else
static const double GRAD_TOL = 2e-4;
#endif

static const char *fixture_txt(void) { return HS_FIXTURE_DIR "/seq2seq.txt"; }

static void case_dir(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/seq2seq/%s", HS_FIXTURE_DIR, name);
}

/* Case `name`'s fixture values and checkpoint (its directory into dir). */
static void open_case(const char *name, char *dir, size_t n, fx_case *fc, hs_model *m)
{
    case_dir(dir, n, name);
    CU_ASSERT_EQUAL_FATAL(fx_load(fc, fixture_txt(), name), 0);
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(m, dir), HS_OK);
}

/* The ids of fixture tensor `name` (B, n) as int32. */
static int32_t *ids_of(const fx_case *fc, const char *name)
{
    const fx_tensor *t = fx_tensor_get(fc, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    int32_t *ids = malloc(t->n * sizeof *ids);
    for (size_t i = 0; i < t->n; i++)
        ids[i] = (int32_t)t->v[i];
    return ids;
}

/* The maps of one attention type of every layer of its stack against the
 * fixture's (layers, B, H, rows, cols). */
static double maps_err(const hs_s2s_acts *a, int l0, int layers, int cross,
                       const fx_tensor *want, size_t per_layer)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    CU_ASSERT_EQUAL_FATAL(want->n, (size_t)layers * per_layer);
    double worst = 0;
    for (int k = 0; k < layers; k++) {
        const hs_attn_acts *aa = cross ? &a->cross[l0 + k] : &a->self[l0 + k];
        const double e = fx_err(aa->att, want->v + (size_t)k * per_layer, per_layer);
        worst = e > worst ? e : worst;
    }
    return worst;
}

/* Case `name`: logits, loss and maps within TOL, each off_* reference at
 * least FEATURE_GAP away, and the pairs file's loss and stderr. */
static void oracle_case(const char *name, int features)
{
    char dir[512], path[600];
    fx_case fc;
    hs_model m;
    open_case(name, dir, sizeof dir, &fc, &m);
    const int B = (int)fx_int(&fc, "B"), S = (int)fx_int(&fc, "S"), T = (int)fx_int(&fc, "T");
    const int E = (int)fx_int(&fc, "E"), D = (int)fx_int(&fc, "D"), H = (int)fx_int(&fc, "H");
    const int V = (int)fx_int(&fc, "V");
    CU_ASSERT_EQUAL(m.cfg.enc_layers, E);
    CU_ASSERT_EQUAL(m.cfg.n_layer, E + D);
    int32_t *src = ids_of(&fc, "src"), *dec = ids_of(&fc, "dec"), *tgt = ids_of(&fc, "tgt");
    hs_s2s_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_s2s_acts_alloc(&a, &m.cfg, B, S, T, 1), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_s2s_encode(&a, &m, src), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_s2s_decode(&a, &m, dec, NULL), HS_OK);
    const fx_tensor *logits = fx_tensor_get(&fc, "logits");
    const double e_logits = fx_err(a.logits, logits->v, logits->n);
    const double e_enc = maps_err(&a, 0, E, 0, fx_tensor_get(&fc, "enc_maps"),
                                  (size_t)B * H * S * S);
    const double e_dec = maps_err(&a, E, D, 0, fx_tensor_get(&fc, "dec_maps"),
                                  (size_t)B * H * T * T);
    const double e_cross = maps_err(&a, E, D, 1, fx_tensor_get(&fc, "cross_maps"),
                                    (size_t)B * H * T * S);
    printf("; logits %.3g, maps enc %.3g dec %.3g cross %.3g", e_logits, e_enc, e_dec, e_cross);
    CU_ASSERT(e_logits <= TOL && e_enc <= TOL && e_dec <= TOL && e_cross <= TOL);
    int seen = 0;
    for (int i = 0; i < fc.ntensor; i++) {
        const fx_tensor *t = &fc.t[i];
        if (strncmp(t->name, "off_", 4))
            continue;
        double gap = 0;
        for (int b = 0; b < B; b++) {
            const double e = fx_err(a.logits + ((size_t)b * T + T - 1) * V, t->v + (size_t)b * V,
                                    (size_t)V);
            gap = e > gap ? e : gap;
        }
        printf("\n    without %s: %.3g away", t->name + 4, gap);
        CU_ASSERT(gap > FEATURE_GAP);
        seen++;
    }
    CU_ASSERT_EQUAL(seen, features);
    CU_ASSERT_EQUAL(hs_s2s_decode(&a, &m, dec, tgt), HS_OK);
    const double want = fx_tensor_get(&fc, "loss")->v[0];
    CU_ASSERT(fabs(a.loss - want) <= TOL * fabs(want));
    hs_s2s_acts_free(&a);

    /* greedy decoding of each source alone, with the caches, = torch's by
     * recomputation */
    for (int b = 0; b < B; b++) {
        char key[16];
        snprintf(key, sizeof key, "gen%d", b);
        const fx_tensor *g = fx_tensor_get(&fc, key);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        int n = S;
        while (n > 1 && src[(size_t)b * S + n - 1] == m.cfg.pad_id)
            n--;
        int32_t out[8];
        hs_generate_stats st;
        CU_ASSERT_EQUAL_FATAL(hs_s2s_generate(out, &st, &m, src + (size_t)b * S, n, 6,
                                              &(hs_sample_opts){ 0 }), HS_OK);
        CU_ASSERT_EQUAL_FATAL((size_t)st.n_new + 1, g->n);
        for (size_t i = 0; i < g->n; i++)
            CU_ASSERT_EQUAL(out[i], (int32_t)g->v[i]);
    }

    hs_pairs p;
    hs_tokenizer *tk = NULL;
    snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
    CU_ASSERT_EQUAL_FATAL(hs_pairs_load(&p, path, &m.cfg, &tk, NULL, dir, 0), HS_OK);
    CU_ASSERT_PTR_NULL(tk); /* ids: no tokenizer opened */
    for (int batch = 1; batch <= 2; batch++) { /* the pooled loss does not see the batching */
        hs_eval_result r;
        CU_ASSERT_EQUAL_FATAL(hs_pairs_eval(&r, &m, &p, batch, 0, NULL, NULL), HS_OK);
        const double se = fx_tensor_get(&fc, "stderr")->v[0];
        CU_ASSERT(fabs(r.loss - want) <= TOL * fabs(want));
        CU_ASSERT(fabs(r.stderr_loss - se) <= 10 * TOL * fabs(se));
        CU_ASSERT_EQUAL(r.sequences, (size_t)B);
        CU_ASSERT_EQUAL((long)r.batches, (B + batch - 1) / batch);
    }
    /* one head of each attention type zeroed: the loss delta = torch's */
    hs_head_table t = { 0 };
    const hs_pairs_ablate_opts po = {
        .B = 2, .types = 1u << HS_ATTN_ENC | 1u << HS_ATTN_DEC | 1u << HS_ATTN_CROSS };
    CU_ASSERT_EQUAL_FATAL(hs_pairs_ablate(&t, &m, &p, &po), HS_OK);
    int heads = 0;
    for (int l = 0; l < m.cfg.n_layer; l++)
        heads += m.cfg.n_head[l] * (hs_config_cross(&m.cfg, l) ? 2 : 1);
    CU_ASSERT_EQUAL(t.n, 1 + heads); /* the clean loss, then every head of every type */
    CU_ASSERT(fabs(t.rows[0].value - want) <= TOL * fabs(want));
    static const struct { const char *attn; int layer, head; } ablated[] = {
        { "enc", 1, 2 }, { "dec", 0, 3 }, { "cross", 1, 1 } };
    for (size_t k = 0; k < sizeof ablated / sizeof ablated[0]; k++) {
        char key[64];
        snprintf(key, sizeof key, "ablate_%s_%d_%d", ablated[k].attn, ablated[k].layer,
                 ablated[k].head);
        const fx_tensor *w = fx_tensor_get(&fc, key);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        const hs_metric_row *row = NULL;
        for (int i = 0; i < t.n; i++)
            if (t.rows[i].attn && !strcmp(t.rows[i].attn, ablated[k].attn) &&
                t.rows[i].layer == ablated[k].layer && t.rows[i].head == ablated[k].head)
                row = &t.rows[i];
        CU_ASSERT_PTR_NOT_NULL_FATAL(row);
        printf("\n    %s: %.9g, torch %.9g", key, row->value, w->v[0]);
        CU_ASSERT(fabs(row->value - w->v[0]) <= 10 * TOL * (1 + fabs(want)));
    }
    hs_head_table_free(&t);
    hs_pairs_free(&p);
    free(src), free(dec), free(tgt);
    hs_model_free(&m);
    fx_free(&fc);
}

static void test_t5_relative_buckets_unscaled_scores_relu_tied_scale_match_torch(void)
{
    oracle_case("t5", 2);
}

static void test_flan_t5_gated_gelu_untied_head_wide_heads_match_torch(void)
{
    oracle_case("flan_t5", 1);
}

static void test_bart_learned_offset_positions_post_norm_logits_bias_match_torch(void)
{
    oracle_case("bart", 1);
}

static void test_marian_sinusoids_scaled_embeddings_swish_match_torch(void)
{
    oracle_case("marian", 0);
}

/* max |got - want| over max |want|: an error relative to the tensor's scale
 * (a gradient's entries span orders of magnitude). */
static double scaled_err(const hs_real *got, const fx_tensor *want)
{
    double top = 0, worst = 0;
    for (size_t i = 0; i < want->n; i++)
        top = fmax(top, fabs(want->v[i]));
    for (size_t i = 0; i < want->n; i++) {
        const double e = fabs((double)got[i] - want->v[i]);
        worst = e > worst || isnan(e) ? (isnan(e) ? INFINITY : e) : worst;
    }
    return top > 0 ? worst / top : worst;
}

/* Case `name`'s backward: the pooled loss's gradients by every head's gate
 * of each type and by the fixture's tensors (grad:NAME) = torch.autograd's. */
static void gradient_case(const char *name)
{
    char dir[512];
    fx_case fc;
    hs_model m;
    open_case(name, dir, sizeof dir, &fc, &m);
    const int B = (int)fx_int(&fc, "B"), S = (int)fx_int(&fc, "S"), T = (int)fx_int(&fc, "T");
    const int E = (int)fx_int(&fc, "E"), L = m.cfg.n_layer, H = (int)fx_int(&fc, "H");
    int32_t *src = ids_of(&fc, "src"), *dec = ids_of(&fc, "dec"), *tgt = ids_of(&fc, "tgt");
    /* gates at 1 on every head: self of every layer, cross of the decoder's */
    hs_real *ones = calloc((size_t)L * H, sizeof *ones), *dg = calloc((size_t)L * H, sizeof *dg);
    hs_real *dx = calloc((size_t)L * H, sizeof *dx);
    const hs_real *gates[HS_MAX_LAYERS] = { 0 }, *cross[HS_MAX_LAYERS] = { 0 };
    hs_real *dgates[HS_MAX_LAYERS] = { 0 }, *dcross[HS_MAX_LAYERS] = { 0 };
    for (int i = 0; i < L * H; i++)
        ones[i] = 1;
    for (int l = 0; l < L; l++) {
        gates[l] = ones + (size_t)l * H, dgates[l] = dg + (size_t)l * H;
        if (l >= E)
            cross[l] = ones + (size_t)l * H, dcross[l] = dx + (size_t)l * H;
    }
    hs_real *buf = calloc(m.n_params, sizeof *buf);
    hs_weights g;
    hs_weights_bind(&g, &m.cfg, buf);
    hs_s2s_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_s2s_acts_alloc(&a, &m.cfg, B, S, T, HS_S2S_TRAIN), HS_OK);
    a.gates = gates, a.cross_gates = cross;
    CU_ASSERT_EQUAL_FATAL(hs_s2s_encode(&a, &m, src), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_s2s_decode(&a, &m, dec, tgt), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_s2s_backward(&g, dgates, dcross, &a, &m, src, dec, tgt,
                                          (hs_real)(1.0 / (double)a.n_targets)), HS_OK);
    static const char *const types[] = { "enc", "dec", "cross" };
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        char key[32];
        snprintf(key, sizeof key, "dgate_%s", types[k]);
        const fx_tensor *w = fx_tensor_get(&fc, key);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        const hs_real *got = k == 0 ? dg : k == 1 ? dg + (size_t)E * H : dx + (size_t)E * H;
        const double e = scaled_err(got, w);
        printf("\n    %-28s %.3g", key, e);
        worst = fmax(worst, e);
    }
    int seen = 0;
    for (int i = 0; i < fc.ntensor; i++) {
        const fx_tensor *w = &fc.t[i];
        if (strncmp(w->name, "grad:", 5))
            continue;
        const hs_tensor_info *ti = NULL;
        for (int j = 0; j < m.n_tensors; j++)
            if (!strcmp(m.tensors[j].name, w->name + 5))
                ti = &m.tensors[j];
        CU_ASSERT_PTR_NOT_NULL_FATAL(ti);
        CU_ASSERT_EQUAL_FATAL(ti->size, w->n);
        const double e = scaled_err(buf + ti->offset, w);
        printf("\n    %-28s %.3g", w->name + 5, e);
        worst = fmax(worst, e);
        seen++;
    }
    CU_ASSERT(seen >= 5);
    CU_ASSERT(worst <= GRAD_TOL);
    hs_s2s_acts_free(&a);

    /* Michel et al.'s importance_raw of every unit on the pairs file, one
     * pair a batch and both at once: torch's mean over pairs of |dL_n/dxi| */
    char path[600];
    snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
    hs_pairs p;
    hs_tokenizer *tk = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_pairs_load(&p, path, &m.cfg, &tk, NULL, dir, 0), HS_OK);
    hs_pairs_units u;
    CU_ASSERT_EQUAL_FATAL(hs_pairs_units_init(&u, &m.cfg, 1u << HS_ATTN_ENC | 1u << HS_ATTN_DEC |
                                                              1u << HS_ATTN_CROSS), HS_OK);
    CU_ASSERT_EQUAL(u.n, E + 2 * (L - E));
    for (int batch = 1; batch <= 2; batch++) {
        hs_importance imp;
        CU_ASSERT_EQUAL_FATAL(hs_importance_alloc(&imp, &u.cfg), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_pairs_importance(&imp, &m, &p, &u, batch, NULL, NULL, NULL, NULL),
                              HS_OK);
        CU_ASSERT_EQUAL(imp.n, B);
        double e = 0;
        for (int k = 0; k < u.n; k++) {
            char key[32];
            snprintf(key, sizeof key, "imp_raw_%s", hs_attn_type_name(u.type[k]));
            const fx_tensor *w = fx_tensor_get(&fc, key);
            CU_ASSERT_PTR_NOT_NULL_FATAL(w);
            const int row = u.type[k] == HS_ATTN_ENC ? u.layer[k] : u.layer[k] - E;
            for (int h = 0; h < H; h++) {
                const double want = w->v[(size_t)row * H + h];
                e = fmax(e, fabs(imp.raw[(size_t)k * HS_MAX_HEADS + h] - want) /
                                fmax(1e-3, fabs(want)));
            }
        }
        printf("\n    importance_raw (batch %d)      %.3g", batch, e);
        CU_ASSERT(e <= GRAD_TOL);
        hs_importance_free(&imp);
    }
    hs_pairs_free(&p);
    free(buf), free(ones), free(dg), free(dx);
    free(src), free(dec), free(tgt);
    hs_model_free(&m);
    fx_free(&fc);
}

static void test_t5_backward_gates_weights_relative_bias_match_torch(void)
{
    gradient_case("t5");
}

static void test_flan_t5_backward_gated_mlp_untied_head_match_torch(void)
{
    gradient_case("flan_t5");
}

static void test_bart_backward_positions_embedding_norm_post_norm_match_torch(void)
{
    gradient_case("bart");
}

static void test_marian_backward_scaled_embeddings_match_torch(void)
{
    gradient_case("marian");
}

/* HF's _relative_position_bucket at hand-derived points of the T5 paper's
 * setting (32 buckets, distance 128): 16 a side, 8 exact, then log bins. */
static void test_t5_buckets_at_known_points(void)
{
    CU_ASSERT_EQUAL(hs_t5_bucket(0, 1, 32, 128), 0);
    CU_ASSERT_EQUAL(hs_t5_bucket(-1, 1, 32, 128), 1);
    CU_ASSERT_EQUAL(hs_t5_bucket(1, 1, 32, 128), 17);
    CU_ASSERT_EQUAL(hs_t5_bucket(7, 1, 32, 128), 23);
    CU_ASSERT_EQUAL(hs_t5_bucket(-8, 1, 32, 128), 8);
    CU_ASSERT_EQUAL(hs_t5_bucket(8, 1, 32, 128), 24);
    CU_ASSERT_EQUAL(hs_t5_bucket(-200, 1, 32, 128), 15);
    CU_ASSERT_EQUAL(hs_t5_bucket(200, 1, 32, 128), 31);
    /* causal: keys after the query all in bucket 0 */
    CU_ASSERT_EQUAL(hs_t5_bucket(5, 0, 32, 128), 0);
    CU_ASSERT_EQUAL(hs_t5_bucket(-1, 0, 32, 128), 1);
    CU_ASSERT_EQUAL(hs_t5_bucket(-200, 0, 32, 128), 31);
    /* log(20/8)/log(16)*8 = 2.64: bucket 8 + 2 */
    CU_ASSERT_EQUAL(hs_t5_bucket(-20, 1, 32, 128), 10);
}

/* Saved in its family's layout and reloaded, each case computes the same
 * loss, and config.json keeps the family. */
static void test_saved_checkpoints_reload_with_the_same_loss(void)
{
    static const char *const names[] = { "t5", "flan_t5", "bart", "marian" };
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char dir[512], path[600], tmpl[] = "/tmp/hs_seq2seq_XXXXXX";
        case_dir(dir, sizeof dir, names[k]);
        hs_model m, back;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(tmpl));
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&m, tmpl), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&back, tmpl), HS_OK);
        CU_ASSERT_EQUAL(back.cfg.family, m.cfg.family);
        snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
        double loss[2];
        for (int i = 0; i < 2; i++) {
            hs_pairs p;
            hs_tokenizer *tk = NULL;
            hs_eval_result r = { 0 };
            const hs_model *mm = i ? &back : &m;
            CU_ASSERT_EQUAL(hs_pairs_load(&p, path, &mm->cfg, &tk, NULL, NULL, 0), HS_OK);
            CU_ASSERT_EQUAL(hs_pairs_eval(&r, mm, &p, 2, 0, NULL, NULL), HS_OK);
            loss[i] = r.loss;
            hs_pairs_free(&p);
        }
        printf("\n    %s: %.9g, reloaded %.9g", names[k], loss[0], loss[1]);
        CU_ASSERT(loss[0] == loss[1]);
        hs_model_free(&m);
        hs_model_free(&back);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
        CU_ASSERT_EQUAL(system(cmd), 0);
    }
}

/* ---- refusals ---------------------------------------------------------- */

/* config.json text of case `name` with `from` replaced by `to`, parsed:
 * refused with a message holding needle. */
static void config_refused(const char *name, const char *from, const char *to,
                           const char *needle)
{
    char dir[512], path[600];
    case_dir(dir, sizeof dir, name);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text;
    CU_ASSERT_EQUAL_FATAL(hs_read_text(&text, path, 1 << 20), HS_OK);
    char *at = strstr(text, from);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    char *edited = malloc(strlen(text) + strlen(to) + 1);
    sprintf(edited, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    hs_model_config c;
    int rc = hs_config_parse(&c, edited, "config.json");
    if (!rc)
        rc = hs_config_check(&c);
    printf("\n    %s -> %s: %s", from, to, rc ? hs_last_error() : "(accepted)");
    CU_ASSERT_NOT_EQUAL(rc, HS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), needle));
    free(edited);
    free(text);
}

static void test_unimplemented_keys_are_refused_naming_them(void)
{
    config_refused("t5", "\"feed_forward_proj\": \"relu\"", "\"feed_forward_proj\": \"gated-relu\"",
                   "feed_forward_proj");
    config_refused("t5", "\"is_encoder_decoder\": true", "\"is_encoder_decoder\": false",
                   "is_encoder_decoder");
    config_refused("t5", "\"relative_attention_max_distance\": 12",
                   "\"relative_attention_max_distance\": 4", "relative_attention_max_distance");
    config_refused("t5", "\"relative_attention_num_buckets\": 8",
                   "\"relative_attention_num_buckets\": 2", "relative_attention_num_buckets");
    config_refused("marian", "\"share_encoder_decoder_embeddings\": true",
                   "\"share_encoder_decoder_embeddings\": false",
                   "share_encoder_decoder_embeddings");
    config_refused("marian", "\"decoder_vocab_size\": 40", "\"decoder_vocab_size\": 41",
                   "decoder_vocab_size");
    config_refused("bart", "\"decoder_ffn_dim\": 24", "\"decoder_ffn_dim\": 32",
                   "decoder_ffn_dim");
    config_refused("bart", "\"activation_function\": \"gelu\"",
                   "\"activation_function\": \"tanh\"", "activation_function");
    config_refused("bart", "\"decoder_start_token_id\": 2", "\"decoder_start_token_id\": 400",
                   "decoder_start_token_id");
}

/* Writes text to a fresh file; returns its path (malloc'd). */
static char *temp_file(const char *text)
{
    char tmpl[] = "/tmp/hs_pairs_XXXXXX";
    const int fd = mkstemp(tmpl);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    return strdup(tmpl);
}

static void pairs_refused(const hs_model *m, const char *text, const char *needle, int max_src)
{
    char *path = temp_file(text);
    hs_pairs p;
    hs_tokenizer *tk = NULL;
    const int rc = hs_pairs_load(&p, path, &m->cfg, &tk, NULL, NULL, max_src);
    printf("\n    %s", rc ? hs_last_error() : "(accepted)");
    CU_ASSERT_NOT_EQUAL(rc, HS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), needle));
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), path));
    if (!rc)
        hs_pairs_free(&p);
    unlink(path);
    free(path);
}

static void test_bad_pairs_are_refused_naming_the_line(void)
{
    char dir[512];
    case_dir(dir, sizeof dir, "bart");
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
    pairs_refused(&m, "{\"source_ids\": [3, 4, 2]}\n", ":1: a pair has \"target\"", 0);
    pairs_refused(&m, "\n{\"source_ids\": [3], \"target_ids\": [3, 40]}\n", ":2:", 0);
    pairs_refused(&m, "{\"source_ids\": [3], \"target_ids\": []}\n", "target_ids", 0);
    pairs_refused(&m, "{\"source_ids\": [3,3,3,3,3,3,3,3,3,3,3,3,3], \"target_ids\": [3]}\n",
                  "longer than the model's 12 positions", 0);
    pairs_refused(&m, "{\"source_ids\": [3,3,3,3], \"target_ids\": [3]}\n",
                  "longer than --seq-len 3", 3);
    pairs_refused(&m, "{\"source\": \"a b\", \"target\": \"c\"}\n", "needs a tokenizer", 0);
    pairs_refused(&m, "[1, 2]\n", "not a JSON object", 0);
    pairs_refused(&m, "{\"source\": \"a\", \"source_ids\": 5, \"target_ids\": [3]}\n",
                  "one of them", 0);
    pairs_refused(&m, "{\"source_ids\": 5, \"target_ids\": [3]}\n", "source_ids", 0);
    pairs_refused(&m, "\n\n", "no pairs", 0);
    /* a source that is all padding has no key to attend to */
    char *path = temp_file("{\"source_ids\": [1, 1], \"target_ids\": [3, 2]}\n");
    hs_pairs p;
    hs_tokenizer *tk = NULL;
    hs_eval_result r;
    CU_ASSERT_EQUAL_FATAL(hs_pairs_load(&p, path, &m.cfg, &tk, NULL, NULL, 0), HS_OK);
    CU_ASSERT_EQUAL(hs_pairs_eval(&r, &m, &p, 1, 0, NULL, NULL), HS_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "all padding"));
    CU_ASSERT_EQUAL(hs_pairs_bleu(&r, &m, &p, NULL), HS_EINVAL); /* no tokenizer */
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "needs a tokenizer"));
    hs_pairs_free(&p);
    unlink(path);
    free(path);
    /* the one-stack computations refuse the model, naming it */
    hs_acts acts;
    CU_ASSERT_EQUAL(hs_acts_alloc(&acts, &m.cfg, 1, 4, HS_ACTS_INFER), HS_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "encoder-decoder"));
    hs_model_free(&m);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_t5_relative_buckets_unscaled_scores_relu_tied_scale_match_torch",
          test_t5_relative_buckets_unscaled_scores_relu_tied_scale_match_torch },
        { "test_flan_t5_gated_gelu_untied_head_wide_heads_match_torch",
          test_flan_t5_gated_gelu_untied_head_wide_heads_match_torch },
        { "test_bart_learned_offset_positions_post_norm_logits_bias_match_torch",
          test_bart_learned_offset_positions_post_norm_logits_bias_match_torch },
        { "test_marian_sinusoids_scaled_embeddings_swish_match_torch",
          test_marian_sinusoids_scaled_embeddings_swish_match_torch },
        { "test_t5_backward_gates_weights_relative_bias_match_torch",
          test_t5_backward_gates_weights_relative_bias_match_torch },
        { "test_flan_t5_backward_gated_mlp_untied_head_match_torch",
          test_flan_t5_backward_gated_mlp_untied_head_match_torch },
        { "test_bart_backward_positions_embedding_norm_post_norm_match_torch",
          test_bart_backward_positions_embedding_norm_post_norm_match_torch },
        { "test_marian_backward_scaled_embeddings_match_torch",
          test_marian_backward_scaled_embeddings_match_torch },
        { "test_t5_buckets_at_known_points", test_t5_buckets_at_known_points },
        { "test_saved_checkpoints_reload_with_the_same_loss",
          test_saved_checkpoints_reload_with_the_same_loss },
        { "test_unimplemented_keys_are_refused_naming_them",
          test_unimplemented_keys_are_refused_naming_them },
        { "test_bad_pairs_are_refused_naming_the_line",
          test_bad_pairs_are_refused_naming_the_line },
    };
    return hs_run_tests("seq2seq", tests, HS_NTESTS(tests));
}
