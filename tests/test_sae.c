/* SPEC §19's SAE encoder and decoder (analyze/sae.c) against the encode
 * vectors of tests/fixtures/sae/oracle.json, which scripts/oracle/gen_sae.py
 * computes in float64 from the weights as stored: standard, jumprelu (BF16
 * weights and thresholds), topk (k from activation_fn_kwargs and from the
 * top-level key; llama_z_topk's features 3 and 7 share their encoder column,
 * so the k-th place is decided by "ties to the lower index"), apply_b_dec on
 * and off; and hs_sae_save's files read back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "json.h"
#include "runner.h"
#include "sae.h"

#define SAE_DIR HS_FIXTURE_DIR "/sae"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10;
#else
static const double TOL = 2e-5;
#endif

static cJSON *oracle(void)
{
    char *text = NULL;
    size_t len;
    cJSON *root = NULL;
    CU_ASSERT_FATAL(hs_read_file(&text, &len, SAE_DIR "/oracle.json", (size_t)1 << 24, 0) == HS_OK);
    CU_ASSERT_FATAL(hs_json_parse(&root, text, len, "oracle.json") == HS_OK);
    free(text);
    return root;
}

/* Row r of the 2-D array a (cJSON) into x (n values). */
static void row_of(hs_real *x, const cJSON *a, int r, int n)
{
    const cJSON *row = cJSON_GetArrayItem(a, r);
    CU_ASSERT_FATAL(cJSON_GetArraySize(row) == n);
    for (int i = 0; i < n; i++)
        x[i] = (hs_real)cJSON_GetArrayItem(row, i)->valuedouble;
}

/* Each case's three vectors: pre, f and x_hat within TOL of their largest entry. */
static void test_encode_decode_match_the_oracle(void)
{
    cJSON *root = oracle();
    const cJSON *c;
    int cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/%s", HS_FIXTURE_DIR,
                 cJSON_GetObjectItem(c, "sae")->valuestring);
        hs_sae s;
        CU_ASSERT_FATAL(hs_sae_open(&s, dir) == HS_OK);
        const cJSON *e = cJSON_GetObjectItem(c, "encode");
        const int n = cJSON_GetArraySize(cJSON_GetObjectItem(e, "x"));
        hs_real *x = calloc((size_t)n * s.d_in, sizeof *x), *xh = calloc((size_t)n * s.d_in, sizeof *x);
        hs_real *pre = calloc((size_t)n * s.d_sae, sizeof *x), *f = calloc((size_t)n * s.d_sae, sizeof *x);
        hs_real *want = calloc((size_t)(s.d_sae > s.d_in ? s.d_sae : s.d_in), sizeof *x);
        for (int r = 0; r < n; r++)
            row_of(x + (size_t)r * s.d_in, cJSON_GetObjectItem(e, "x"), r, s.d_in);
        CU_ASSERT_EQUAL_FATAL(hs_sae_encode(&s, x, n, pre, f), HS_OK);
        hs_sae_decode(&s, f, n, xh);
        static const char *const keys[3] = { "pre", "f", "x_hat" };
        for (int k = 0; k < 3; k++)
            for (int r = 0; r < n; r++) {
                const int w = k == 2 ? s.d_in : s.d_sae;
                const hs_real *got = (k == 0 ? pre : k == 1 ? f : xh) + (size_t)r * w;
                row_of(want, cJSON_GetObjectItem(e, keys[k]), r, w);
                double big = 1, err = 0;
                for (int i = 0; i < w; i++) {
                    big = fmax(big, fabs(want[i]));
                    err = fmax(err, fabs(got[i] - want[i]));
                    if (k == 1) /* which features fire is exact */
                        CU_ASSERT_EQUAL(got[i] > 0, want[i] > 0);
                }
                if (err > TOL * big)
                    fprintf(stderr, "%s %s row %d: error %g\n", cJSON_GetObjectItem(c, "name")->valuestring,
                            keys[k], r, err);
                CU_ASSERT(err <= TOL * big);
            }
        free(x), free(xh), free(pre), free(f), free(want);
        hs_sae_free(&s);
        cases++;
    }
    CU_ASSERT_EQUAL(cases, 5);
    cJSON_Delete(root);
}

/* Saved and read back: the same architecture, k, hook and weights (F32). */
static void test_save_reads_back(void)
{
    hs_sae s, t;
    CU_ASSERT_FATAL(hs_sae_open(&s, SAE_DIR "/llama_z_topk") == HS_OK);
    char dir[] = "/tmp/hs_sae_XXXXXX";
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    char out[64];
    snprintf(out, sizeof out, "%s/saved", dir);
    CU_ASSERT_FATAL(hs_sae_save(&s, out) == HS_OK);
    CU_ASSERT_FATAL(hs_sae_open(&t, out) == HS_OK);
    CU_ASSERT_EQUAL(t.arch, HS_SAE_TOPK);
    CU_ASSERT_EQUAL(t.k, s.k);
    CU_ASSERT_EQUAL(t.d_in, s.d_in);
    CU_ASSERT_STRING_EQUAL(t.hook, s.hook);
    CU_ASSERT_EQUAL(t.apply_b_dec, s.apply_b_dec);
    int same = 1;
    for (int i = 0; i < s.d_in * s.d_sae; i++)
        same &= (float)s.W_enc[i] == (float)t.W_enc[i] && (float)s.W_dec[i] == (float)t.W_dec[i];
    CU_ASSERT(same);
    hs_sae_free(&s), hs_sae_free(&t);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CU_ASSERT(system(cmd) == 0);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_encode_decode_match_the_oracle", test_encode_decode_match_the_oracle },
        { "test_save_reads_back", test_save_reads_back },
    };
    return hs_run_tests("sae_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
