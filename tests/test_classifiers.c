/* Sequence classifiers (SPEC §16) against scripts/oracle/gen_classifiers.py's
 * PyTorch forwards of BertForSequenceClassification,
 * RobertaForSequenceClassification, GPT2ForSequenceClassification and
 * LlamaForSequenceClassification (tests/fixtures/classifiers/): the pooled
 * row of each right-padded sequence (an encoder's first; a decoder's last
 * that is not pad_token_id, with the pad id also inside one text), the
 * classifier's outputs, the same outputs for each sequence run alone
 * (padding changes nothing), and what needs language-model logits refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "config_file.h"
#include "fixture.h"
#include "runner.h"
#include "transformer.h"

#define TXT HS_FIXTURE_DIR "/classifiers.txt"
#define DIR HS_FIXTURE_DIR "/classifiers/"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10;
#else
static const double TOL = 1e-5;
#endif

/* The outputs (B x K) of the first B sequences of tokens (rows of T). */
static void classify(const hs_model *m, const int32_t *tokens, int B, int T, hs_real *out,
                     int *pool)
{
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, tokens, NULL, NULL), HS_OK);
    for (int b = 0; b < B; b++)
        pool[b] = hs_classify_pool(&m->cfg, tokens + (size_t)b * T, T);
    CU_ASSERT_EQUAL(hs_classify(out, &a, m, pool), HS_OK);
    hs_acts_free(&a);
}

static void check(const char *name)
{
    fx_case fc;
    CU_ASSERT_EQUAL_FATAL(fx_load(&fc, TXT, name), 0);
    char dir[512];
    snprintf(dir, sizeof dir, DIR "%s", name);
    hs_model m;
    CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&m, dir), HS_OK);
    const int B = (int)fx_int(&fc, "B"), T = (int)fx_int(&fc, "T"), K = (int)fx_int(&fc, "K");
    CU_ASSERT_EQUAL(m.cfg.n_labels, K);
    CU_ASSERT(m.cfg.headless);
    const fx_tensor *tok = fx_tensor_get(&fc, "tokens"), *pool = fx_tensor_get(&fc, "pool"),
                    *want = fx_tensor_get(&fc, "logits");
    CU_ASSERT_FATAL(tok && pool && want);
    int32_t *ids = malloc(sizeof *ids * (size_t)B * T);
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)tok->v[i];
    hs_real *out = calloc((size_t)B * K, sizeof *out), *one = calloc((size_t)K, sizeof *one);
    int got_pool[8];
    classify(&m, ids, B, T, out, got_pool);
    for (int b = 0; b < B; b++)
        CU_ASSERT_EQUAL(got_pool[b], (int)pool->v[b]);
    const double err = fx_max_err(out, want->v, (size_t)B * K, name);
    CU_ASSERT(err <= TOL);
    for (int b = 0; b < B; b++) { /* alone: the same outputs */
        int p;
        classify(&m, ids + (size_t)b * T, 1, T, one, &p);
        CU_ASSERT(fx_err(one, want->v + (size_t)b * K, (size_t)K) <= TOL);
    }
    CU_ASSERT_EQUAL(hs_config_logits(&m.cfg, "a test"), HS_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(hs_last_error(), "classifier"));
    free(ids), free(out), free(one);
    hs_model_free(&m);
    fx_free(&fc);
}

static void test_bert_classifier(void) { check("bert"); }
static void test_roberta_classifier(void) { check("roberta"); }
static void test_gpt2_classifier(void) { check("gpt2"); }
static void test_llama_classifier(void) { check("llama"); }

/* config.json round trip: a classifier's own keys written back. */
static void test_classifier_config_round_trip(void)
{
    hs_model_config c, back;
    CU_ASSERT_EQUAL_FATAL(hs_config_load(&c, DIR "gpt2"), HS_OK);
    char *json = hs_config_to_json(&c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "GPT2ForSequenceClassification"));
    CU_ASSERT_EQUAL(hs_config_parse(&back, json, "round trip"), HS_OK);
    CU_ASSERT_EQUAL(back.n_labels, c.n_labels);
    CU_ASSERT_EQUAL(back.pad_id, c.pad_id);
    CU_ASSERT_STRING_EQUAL(back.label_names[2], "class_2");
    free(json);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_bert_classifier", test_bert_classifier },
        { "test_roberta_classifier", test_roberta_classifier },
        { "test_gpt2_classifier", test_gpt2_classifier },
        { "test_llama_classifier", test_llama_classifier },
        { "test_classifier_config_round_trip", test_classifier_config_round_trip },
    };
    return hs_run_tests("classifiers_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
