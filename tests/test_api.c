/* The attn_scores hook site (model/hooks.h) and the flat interface of the
 * shared library (api/hs_api.h), as library suites: they run in the double
 * and sanitizer builds too, where the Python suites (python/tests) cannot,
 * so api/'s buffers, callbacks and JSON are checked under ASan and UBSan.
 * api/ is compiled into this test (the static library does not hold it).
 *
 * attn_scores: the scores are scale q.k of the recorded q and k (soft-capped
 * where the model caps them), -inf at every key a query may not see, and
 * the pattern is the softmax of whatever a hook leaves there; a zero
 * intervention at the scores makes every visible key equally likely. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>

#include "hs_api.h"
#include "intervene.h"
#include "runner.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-12;
#else
static const double TOL = 1e-5;
#endif

static hs_model *open_model(const char *rel)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", HS_FIXTURE_DIR, rel);
    hs_model *m = NULL;
    const int rc = hs_api_model_open(&m, dir);
    if (rc)
        printf("\n    %s: %s", dir, hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    return m;
}

static void tokens(int32_t *tok, int n, int V, unsigned seed)
{
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 7u + seed * 13u + (unsigned)i * i * seed) % (unsigned)V);
}

static size_t site_size(const hs_model *m, int site, int layer, int B, int T)
{
    int s[4];
    CU_ASSERT_EQUAL_FATAL(hs_api_site_shape(m, site, layer, B, T, s), HS_OK);
    return (size_t)s[0] * s[1] * s[2] * s[3];
}

static hs_real *record(hs_api_forward *f, const hs_model *m, int site, int layer, int B, int T)
{
    const size_t n = site_size(m, site, layer, B, T);
    hs_real *x = calloc(n, sizeof *x);
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_record(f, site, layer, x, n), HS_OK);
    return x;
}

/* ---- attn_scores ---- */

static void scores_case(const char *rel, double scale_of_dh, int B, int T)
{
    hs_model *m = open_model(rel);
    const hs_model_config *c = &m->cfg;
    const int l = c->n_layer - 1, H = c->n_head[l], G = c->n_kv_head[l], dh = c->head_dim;
    int32_t *tok = malloc(sizeof(int32_t) * B * T);
    tokens(tok, B * T, c->vocab_size, 3);
    hs_api_forward *f;
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_new(&f, m), HS_OK);
    hs_real *s = record(f, m, HS_SITE_ATTN_SCORES, l, B, T);
    hs_real *p = record(f, m, HS_SITE_PATTERN, l, B, T);
    hs_real *q = record(f, m, HS_SITE_Q, l, B, T), *k = record(f, m, HS_SITE_K, l, B, T);
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_run(f, tok, B, T, NULL, NULL, NULL, NULL), HS_OK);
    const double scale = scale_of_dh > 0 ? scale_of_dh : 1 / sqrt((double)dh);
    double worst_s = 0, worst_p = 0;
    int masked_ok = 1;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const hs_real *row = s + (((size_t)b * H + h) * T + t) * T;
                const hs_real *prow = p + (((size_t)b * H + h) * T + t) * T;
                const int W = hs_config_head_window(c, l, h), lo = W && t >= W ? t - W + 1 : 0;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u < lo; u++)
                    masked_ok &= isinf(row[u]) && row[u] < 0 && prow[u] == 0;
                for (int u = lo; u <= t; u++) {
                    double dot = 0;
                    for (int i = 0; i < dh; i++)
                        dot += (double)q[(((size_t)b * T + t) * H + h) * dh + i] *
                               k[(((size_t)b * T + u) * G + h / (H / G)) * dh + i];
                    worst_s = fmax(worst_s, fabs(dot * scale - row[u]) / fmax(1, fabs(row[u])));
                    mx = fmax(mx, row[u]);
                }
                for (int u = t + 1; u < T; u++)
                    masked_ok &= isinf(row[u]) && row[u] < 0 && prow[u] == 0;
                for (int u = lo; u <= t; u++)
                    sum += exp(row[u] - mx);
                for (int u = lo; u <= t; u++)
                    worst_p = fmax(worst_p, fabs(exp(row[u] - mx) / sum - prow[u]));
            }
    printf("\n    %s layer %d: scores within %.1e of scale q.k, pattern within %.1e of their "
           "softmax", rel, l, worst_s, worst_p);
    CU_ASSERT(worst_s <= TOL);
    CU_ASSERT(worst_p <= TOL);
    CU_ASSERT(masked_ok);
    hs_api_forward_free(f);
    free(s), free(p), free(q), free(k), free(tok);
    hs_api_model_free(m);
}

static void test_scores_are_scaled_q_dot_k_and_the_pattern_their_softmax(void)
{
    scores_case("models/gpt2_tiny", 0, 2, 9);
    scores_case("models/llama_gqa", 0, 2, 12);
    scores_case("families/mistral_w16", 0, 1, 20);
}

/* A hook writing the scores: the softmax reads what it leaves, but keys a
 * query may not see stay masked whatever it writes there. */
typedef struct {
    int H, T;
} shape_ctx;

static int bump_first_key(void *ctx, int site, int layer, hs_real *x, int B, int H, int T, int S)
{
    (void)ctx, (void)layer;
    CU_ASSERT_EQUAL(site, HS_SITE_ATTN_SCORES);
    for (size_t r = 0; r < (size_t)B * H * T; r++) {
        x[r * S] += 2; /* key 0: visible to every query */
        x[r * S + S - 1] = 50; /* key S-1: visible to the last query only */
    }
    return HS_OK;
}

static void test_a_scores_hook_is_what_the_softmax_reads(void)
{
    hs_model *m = open_model("models/llama_gqa");
    enum { B = 2, T = 10 };
    const int l = 1, H = m->cfg.n_head[l];
    int32_t tok[B * T];
    tokens(tok, B * T, m->cfg.vocab_size, 5);
    hs_api_forward *f;
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_new(&f, m), HS_OK);
    hs_real *before = record(f, m, HS_SITE_ATTN_SCORES, l, B, T);
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_run(f, tok, B, T, NULL, NULL, NULL, NULL), HS_OK);
    hs_api_forward_clear(f);
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_hook(f, HS_SITE_ATTN_SCORES, l, bump_first_key, NULL),
                          HS_OK);
    hs_real *p = record(f, m, HS_SITE_PATTERN, l, B, T);
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_run(f, tok, B, T, NULL, NULL, NULL, NULL), HS_OK);
    double worst = 0;
    for (size_t r = 0; r < (size_t)B * H * T; r++) {
        const int t = (int)(r % T);
        const hs_real *row = before + r * T;
        double e[T], sum = 0;
        for (int u = 0; u <= t; u++)
            sum += e[u] = exp(row[u] + (u == 0 ? 2 : 0) + (u == T - 1 ? 50 - row[u] : 0));
        for (int u = 0; u < T; u++)
            worst = fmax(worst, fabs((u <= t ? e[u] / sum : 0) - p[r * T + u]));
    }
    printf("\n    pattern within %.1e of the softmax of the hooked scores", worst);
    CU_ASSERT(worst <= TOL);
    hs_api_forward_free(f);
    free(before), free(p);
    hs_api_model_free(m);
}

static void test_zeroing_the_scores_makes_attention_uniform(void)
{
    hs_model *m = open_model("models/gpt2_tiny");
    enum { B = 2, T = 8 };
    int32_t tok[B * T];
    tokens(tok, B * T, m->cfg.vocab_size, 2);
    hs_intervention iv = { HS_SITE_ATTN_SCORES, 0, 1, -1, HS_IV_ZERO, NULL, 0 };
    CU_ASSERT_EQUAL(hs_intervention_check(&iv, &m->cfg), HS_OK);
    hs_site s;
    CU_ASSERT_EQUAL(hs_site_parse("attn_scores", &s), HS_OK);
    CU_ASSERT_EQUAL(s, HS_SITE_ATTN_SCORES);
    hs_hook_plan plan = { &iv, 1, NULL };
    hs_hooks h = { 0 };
    CU_ASSERT_EQUAL_FATAL(hs_hooks_attach(&h, &m->cfg, &plan), HS_OK);
    hs_act_cache cache;
    hs_site_key key = { HS_SITE_PATTERN, 0 };
    CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&cache, &key, 1, HS_CACHE_COPY), HS_OK);
    plan.cache = &cache;
    CU_ASSERT_EQUAL_FATAL(hs_hooks_attach(&h, &m->cfg, &plan), HS_OK);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_MAPS), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, tok, NULL, &h), HS_OK);
    hs_site_view v;
    const hs_real *p = hs_act_cache_get(&cache, HS_SITE_PATTERN, 0, &v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int u = 0; u < T; u++)
                worst = fmax(worst, fabs(p[b * v.sb + t * v.st + 1 * v.sh + u] -
                                         (u <= t ? 1.0 / (t + 1) : 0)));
    CU_ASSERT(worst <= TOL);
    /* a scores hook needs maps, as a pattern hook does */
    hs_acts ai;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&ai, &m->cfg, B, T, HS_ACTS_INFER), HS_OK);
    hs_hooks only = { 0 };
    only.site[HS_SITE_ATTN_SCORES] = h.site[HS_SITE_ATTN_SCORES];
    CU_ASSERT_EQUAL(hs_forward(&ai, m, tok, NULL, &only), HS_EINVAL);
    CU_ASSERT(strstr(hs_last_error(), "attn_scores") != NULL);
    hs_acts_free(&ai);
    hs_acts_free(&a);
    hs_act_cache_free(&cache);
    hs_api_model_free(m);
}

/* ---- the forward of api/ ---- */

static int doubling(void *ctx, int site, int layer, hs_real *x, int B, int T, int heads, int w)
{
    (void)ctx, (void)layer;
    CU_ASSERT_EQUAL(site, HS_API_SITE_FINAL);
    for (size_t i = 0; i < (size_t)B * T * heads * w; i++)
        x[i] *= 2;
    return HS_OK;
}

static int failing(void *ctx, int site, int layer, hs_real *x, int B, int T, int heads, int w)
{
    (void)site, (void)layer, (void)x, (void)B, (void)T, (void)heads, (void)w;
    ++*(int *)ctx;
    return hs_fail(HS_EINVAL, "the hook says no");
}

static void test_forward_records_hooks_logits_and_losses(void)
{
    hs_model *m = open_model("models/gpt2_tiny"); /* tied, no lm_head bias */
    const hs_model_config *c = &m->cfg;
    enum { B = 2, T = 8 };
    const size_t N = (size_t)B * T * c->vocab_size;
    int32_t tok[B * T], tg[B * T];
    tokens(tok, B * T, c->vocab_size, 4);
    tokens(tg, B * T, c->vocab_size, 6);
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_TRAIN), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, tok, NULL, NULL), HS_OK);
    hs_real *plain = malloc(sizeof(hs_real) * N), *lg = malloc(sizeof(hs_real) * N);
    memcpy(plain, a.logits, sizeof(hs_real) * N);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, tok, tg, NULL), HS_OK);
    hs_api_forward *f;
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_new(&f, m), HS_OK);
    /* every site recorded: logits bit-identical, losses the model's */
    hs_real *rec[HS_N_SITES + 1][4] = { { 0 } };
    for (int s = 0; s < hs_api_site_count(); s++)
        for (int l = 0; l <= c->n_layer; l++) {
            int sh[4];
            if (hs_api_site_shape(m, s, l, B, T, sh) == HS_OK)
                rec[s][l] = record(f, m, s, l, B, T);
        }
    hs_real losses[B * T];
    double loss = 0;
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_run(f, tok, B, T, tg, lg, losses, &loss), HS_OK);
    CU_ASSERT(!memcmp(lg, plain, sizeof(hs_real) * N));
    CU_ASSERT(!memcmp(losses, a.losses, sizeof losses));
    CU_ASSERT_EQUAL(loss, a.loss);
    CU_ASSERT(!memcmp(rec[HS_API_SITE_FINAL][0], a.lnf, sizeof(hs_real) * B * T * c->d_model));
    CU_ASSERT(!memcmp(rec[HS_SITE_RESID_PRE][0], a.emb, sizeof(hs_real) * B * T * c->d_model));
    CU_ASSERT(!memcmp(rec[HS_SITE_PATTERN][1], a.layer[1].attn.att,
                      sizeof(hs_real) * B * c->n_head[1] * T * T));
    /* the losses alone: the model's fused cross-entropy */
    double loss2 = 0;
    CU_ASSERT_EQUAL(hs_api_forward_run(f, tok, B, T, tg, NULL, NULL, &loss2), HS_OK);
    CU_ASSERT_EQUAL(loss2, a.loss);
    /* a final hook: the unembedding of what it leaves */
    hs_api_forward_clear(f);
    CU_ASSERT_EQUAL(hs_api_forward_hook(f, HS_API_SITE_FINAL, 0, doubling, NULL), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_run(f, tok, B, T, NULL, lg, NULL, NULL), HS_OK);
    int twice = 1;
    for (size_t i = 0; i < N; i++)
        twice &= lg[i] == 2 * plain[i];
    CU_ASSERT(twice);
    /* a failing hook stops the forward with its status; the next one runs */
    hs_api_forward_clear(f);
    int calls = 0;
    CU_ASSERT_EQUAL(hs_api_forward_hook(f, HS_SITE_Z, 0, failing, &calls), HS_OK);
    CU_ASSERT_EQUAL(hs_api_forward_run(f, tok, B, T, NULL, lg, NULL, NULL), HS_EINVAL);
    CU_ASSERT_STRING_EQUAL(hs_last_error(), "the hook says no");
    CU_ASSERT_EQUAL(calls, 1);
    hs_api_forward_clear(f);
    CU_ASSERT_EQUAL(hs_api_forward_run(f, tok, B, T, NULL, lg, NULL, NULL), HS_OK);
    CU_ASSERT(!memcmp(lg, plain, sizeof(hs_real) * N));
    /* refusals, each naming what is wrong */
    hs_real one;
    CU_ASSERT_EQUAL(hs_api_forward_record(f, HS_SITE_Z, 5, &one, 1), HS_EINVAL);
    CU_ASSERT_EQUAL(hs_api_forward_record(f, HS_SITE_Z, 0, &one, 1), HS_OK);
    CU_ASSERT_EQUAL(hs_api_forward_run(f, tok, B, T, NULL, NULL, NULL, NULL), HS_EINVAL);
    CU_ASSERT(strstr(hs_last_error(), "buffer of 1") != NULL);
    hs_api_forward_clear(f);
    tg[3] = c->vocab_size;
    CU_ASSERT_EQUAL(hs_api_forward_run(f, tok, B, T, tg, lg, NULL, NULL), HS_EINVAL);
    CU_ASSERT(strstr(hs_last_error(), "outside vocabulary") != NULL);
    for (int s = 0; s < HS_N_SITES + 1; s++)
        for (int l = 0; l < 4; l++)
            free(rec[s][l]);
    hs_api_forward_free(f);
    hs_acts_free(&a);
    free(plain), free(lg);
    hs_api_model_free(m);
}

static void test_site_shapes(void)
{
    hs_model *m = open_model("models/llama_gqa");
    int s[4];
    CU_ASSERT_EQUAL(hs_api_site_shape(m, HS_SITE_K, 1, 2, 5, s), HS_OK);
    CU_ASSERT(s[0] == 2 && s[1] == 5 && s[2] == m->cfg.n_kv_head[1] && s[3] == m->cfg.head_dim);
    CU_ASSERT_EQUAL(hs_api_site_shape(m, HS_SITE_PATTERN, 0, 2, 5, s), HS_OK);
    CU_ASSERT(s[0] == 2 && s[1] == m->cfg.n_head[0] && s[2] == 5 && s[3] == 5);
    CU_ASSERT_EQUAL(hs_api_site_shape(m, HS_SITE_RESID_PRE, m->cfg.n_layer, 1, 3, s), HS_OK);
    CU_ASSERT_EQUAL(hs_api_site_shape(m, HS_SITE_ATTN_OUT, m->cfg.n_layer, 1, 3, s), HS_EINVAL);
    CU_ASSERT_STRING_EQUAL(hs_api_site_name(HS_API_SITE_FINAL), "final");
    CU_ASSERT_STRING_EQUAL(hs_api_site_name(HS_SITE_ATTN_SCORES), "attn_scores");
    CU_ASSERT_PTR_NULL(hs_api_site_name(HS_N_SITES + 1));
    long long v = 0;
    CU_ASSERT_EQUAL(hs_api_model_int(m, "n_params", &v), HS_OK);
    CU_ASSERT_EQUAL(v, (long long)m->n_params);
    CU_ASSERT_EQUAL(hs_api_model_int(m, "bogus", &v), HS_EINVAL);
    hs_api_model_free(m);
    hs_model *mla = open_model("mla/mla_q");
    CU_ASSERT_EQUAL(hs_api_site_shape(mla, HS_SITE_K, 0, 1, 3, s), HS_EINVAL);
    CU_ASSERT_EQUAL(hs_api_site_shape(mla, HS_SITE_Q, 0, 1, 3, s), HS_OK);
    CU_ASSERT_EQUAL(s[3], mla->cfg.qk_nope_head_dim + mla->cfg.qk_rope_head_dim);
    hs_api_model_free(mla);
}

/* ---- studies and the index: JSON that reads back ---- */

static cJSON *parse(char *json)
{
    cJSON *j = json ? cJSON_Parse(json) : NULL;
    CU_ASSERT_PTR_NOT_NULL(j);
    hs_api_free(json);
    return j;
}

static void test_studies_record_and_the_index_reads_them(void)
{
    hs_model *m = open_model("models/gpt2_tiny");
    char dir[512], db[600], path[600];
    snprintf(dir, sizeof dir, "%s/models/gpt2_tiny", HS_FIXTURE_DIR);
    snprintf(db, sizeof db, "%s/hs_test_api_%d.db", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    unlink(db);
    hs_api_env *e;
    CU_ASSERT_EQUAL_FATAL(hs_api_env_new(&e), HS_OK);
    const char *argv[] = { "ablate", "--model", dir };
    CU_ASSERT_EQUAL_FATAL(hs_api_env_record(e, db, dir, 3, argv), HS_OK);
    int32_t ids[200];
    tokens(ids, 200, m->cfg.vocab_size, 9);
    hs_api_tokens *t;
    CU_ASSERT_EQUAL_FATAL(hs_api_tokens_wrap(&t, ids, 200), HS_OK);
    char *json = NULL;
    CU_ASSERT_EQUAL_FATAL(hs_api_ablate(&json, m, t, e, 2, 8, 3, "zero,mean", NULL, "1", 0),
                          HS_OK);
    cJSON *j = parse(json);
    const int rows = cJSON_GetArraySize(cJSON_GetObjectItem(j, "rows"));
    CU_ASSERT_EQUAL(rows, 1 + 2 * m->cfg.n_layer); /* loss, two kinds of head 1 per layer */
    const long long run = (long long)cJSON_GetObjectItem(j, "run_id")->valuedouble;
    CU_ASSERT_EQUAL(run, 1);
    cJSON_Delete(j);
    /* bad options: refused before a run opens */
    CU_ASSERT_EQUAL(hs_api_ablate(&json, m, t, e, 2, 64, 0, NULL, NULL, NULL, 0), HS_EINVAL);
    CU_ASSERT_PTR_NULL(json);
    hs_api_prompts *ps;
    snprintf(path, sizeof path, "%s/causal/gpt2.jsonl", HS_FIXTURE_DIR);
    CU_ASSERT_EQUAL_FATAL(hs_api_prompts_load(&ps, path, NULL, dir, m), HS_OK);
    CU_ASSERT_EQUAL(hs_api_prompts_count(ps), 6);
    CU_ASSERT_EQUAL_FATAL(hs_api_patch(&json, m, ps, e, "z,resid_pre", 0, 0, 0), HS_OK);
    j = parse(json);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(j, "positions")), m->cfg.n_layer * 6);
    cJSON_Delete(j);
    hs_api_prompts_free(ps);
    /* pairs added one by one: the same rows as the file's */
    hs_api_prompts *pa;
    CU_ASSERT_EQUAL_FATAL(hs_api_prompts_new(&pa), HS_OK);
    const int32_t cl[] = { 9, 15, 0, 11, 17, 39 }, co[] = { 9, 9, 0, 11, 2, 39 };
    CU_ASSERT_EQUAL(hs_api_prompts_add(pa, cl, co, 6, 15, 32), HS_OK);
    CU_ASSERT_EQUAL(hs_api_prompts_add(pa, co, cl, 6, 32, 15), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_api_dla(&json, m, pa, e, 0), HS_OK);
    j = parse(json);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "parts"),
                                                           "values")), 2);
    cJSON_Delete(j);
    hs_api_prompts_free(pa);
    hs_api_tokens_free(t);
    hs_api_env_free(e);
    hs_index *ix;
    CU_ASSERT_EQUAL_FATAL(hs_api_index_open(&ix, db), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_api_index_runs(ix, NULL, NULL, &json), HS_OK);
    j = parse(json);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(j), 3);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "status")->valuestring,
                           "complete");
    cJSON_Delete(j);
    CU_ASSERT_EQUAL_FATAL(hs_api_index_metric(ix, run, "loss_delta_zero", 0, &json), HS_OK);
    j = parse(json);
    const cJSON *shape = cJSON_GetObjectItem(j, "shape");
    CU_ASSERT_EQUAL(cJSON_GetArrayItem(shape, 0)->valueint, m->cfg.n_layer);
    CU_ASSERT_EQUAL(cJSON_GetArrayItem(shape, 1)->valueint, 2); /* heads 0..1, head 0 absent */
    CU_ASSERT_EQUAL(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "present"), 0)->valueint, 0);
    cJSON_Delete(j);
    double v, se;
    long long n;
    int found;
    CU_ASSERT_EQUAL(hs_api_index_value(ix, run, -1, -1, "loss", &v, &se, &n, &found), HS_OK);
    CU_ASSERT(found && v > 0 && n == 0); /* the clean loss: a model-wide number */
    CU_ASSERT_EQUAL(hs_api_index_metric(ix, run, "loss", 7, &json), HS_EINVAL);
    hs_api_index_close(ix);
    unlink(db);
    hs_api_model_free(m);
}

/* One forward object running with maps and without in turn, and at two
 * lengths: each run's logits and pattern equal, bit for bit, those of a
 * fresh object (the activations it keeps for either kind are not stale). */
static void run_fresh_or_kept(hs_api_forward *kept, const hs_model *m, const int32_t *tok,
                              int B, int T, int maps)
{
    const int l = m->cfg.n_layer - 1;
    const size_t nl = (size_t)B * T * m->cfg.vocab_size, np = site_size(m, HS_SITE_PATTERN, l, B, T);
    hs_real *logits[2], *pat[2] = { NULL, NULL };
    hs_api_forward *fresh;
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_new(&fresh, m), HS_OK);
    hs_api_forward *f[2] = { fresh, kept };
    for (int i = 0; i < 2; i++) {
        logits[i] = malloc(sizeof(hs_real) * nl);
        if (maps)
            pat[i] = record(f[i], m, HS_SITE_PATTERN, l, B, T);
        CU_ASSERT_EQUAL_FATAL(hs_api_forward_run(f[i], tok, B, T, NULL, logits[i], NULL, NULL),
                              HS_OK);
        hs_api_forward_clear(f[i]);
    }
    CU_ASSERT(!memcmp(logits[0], logits[1], sizeof(hs_real) * nl));
    CU_ASSERT(!maps || !memcmp(pat[0], pat[1], sizeof(hs_real) * np));
    hs_api_forward_free(fresh);
    for (int i = 0; i < 2; i++)
        free(logits[i]), free(pat[i]);
}

static void test_forwards_with_and_without_maps_in_turn(void)
{
    hs_model *m = open_model("models/llama_gqa");
    enum { B = 2, T = 11 };
    int32_t tok[2][B * T];
    tokens(tok[0], B * T, m->cfg.vocab_size, 2);
    tokens(tok[1], B * T, m->cfg.vocab_size, 9);
    hs_api_forward *f;
    CU_ASSERT_EQUAL_FATAL(hs_api_forward_new(&f, m), HS_OK);
    static const int runs[][3] = { /* tokens, length, maps */
        { 0, T, 1 }, { 1, T, 0 }, { 1, T, 1 }, { 0, T, 0 }, { 0, 6, 1 }, { 1, T, 0 }, { 1, T, 1 },
    };
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++)
        run_fresh_or_kept(f, m, tok[runs[r][0]], B, runs[r][1], runs[r][2]);
    hs_api_forward_free(f);
    hs_api_model_free(m);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_scores_are_scaled_q_dot_k_and_the_pattern_their_softmax",
          test_scores_are_scaled_q_dot_k_and_the_pattern_their_softmax },
        { "test_a_scores_hook_is_what_the_softmax_reads",
          test_a_scores_hook_is_what_the_softmax_reads },
        { "test_zeroing_the_scores_makes_attention_uniform",
          test_zeroing_the_scores_makes_attention_uniform },
        { "test_forward_records_hooks_logits_and_losses",
          test_forward_records_hooks_logits_and_losses },
        { "test_forwards_with_and_without_maps_in_turn",
          test_forwards_with_and_without_maps_in_turn },
        { "test_site_shapes", test_site_shapes },
        { "test_studies_record_and_the_index_reads_them",
          test_studies_record_and_the_index_reads_them },
    };
    return hs_run_tests("api", tests, HS_NTESTS(tests));
}
