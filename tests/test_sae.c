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
#include "rng.h"
#include "sae.h"
#include "sae_train.h"

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

/* A row's TopK by a naive selection: of v = pre + b, the k largest by
 * (value, lower index) through repeated scans, the positive ones by index
 * into idx, val; their count, and the k-th value into *kth. */
static int naive_topk(int32_t *idx, hs_real *val, hs_real *kth, const hs_real *pre,
                      const hs_real *b, int M, int k)
{
    unsigned char taken[1024] = { 0 };
    int cnt = 0;
    CU_ASSERT_FATAL(M <= 1024);
    for (int q = 0; q < k; q++) {
        int best = -1;
        for (int j = 0; j < M; j++)
            if (!taken[j] && (best < 0 || pre[j] + b[j] > pre[best] + b[best]))
                best = j; /* strictly larger: the lower index keeps a tie */
        taken[best] = 1;
        *kth = pre[best] + b[best];
    }
    for (int j = 0; j < M; j++)
        if (taken[j] && pre[j] + b[j] > 0)
            idx[cnt] = j, val[cnt++] = pre[j] + b[j];
    return cnt;
}

/* hs_sae_encode_topk's rows equal a naive selection on the pre-activations
 * it computed, exactly: d_sae not a multiple of the 16 entries its scan
 * skips at a time, and ties at the k-th place across those blocks (the
 * first 750 encoder columns 25 distinct ones, each 30 times, b_enc too);
 * then with W_enc packed (hs_sae_pack) the same, on pre-activations within
 * rounding of the unpacked GEMM's (a transposition or panel gone wrong is
 * far off). */
static void test_topk_rows_equal_a_naive_selection(void)
{
    enum { d = 40, M = 1000, k = 32, n = 30 };
    hs_sae s;
    CU_ASSERT_FATAL(hs_sae_init_topk(&s, "blocks.0.hook_attn_out", d, M, k, 9) == HS_OK);
    hs_rng r;
    hs_rng_seed(&r, 21);
    for (int j = 0; j < M; j++) {
        const int copy = j >= 25 && j < 750; /* of column j % 25 */
        s.b_enc[j] = copy ? s.b_enc[j % 25] : (hs_real)(0.2 * hs_rng_normal(&r));
        for (int i = 0; i < d; i++)
            s.W_enc[i * M + j] = copy ? s.W_enc[i * M + j % 25] : (hs_real)hs_rng_normal(&r);
    }
    hs_real *x = calloc((size_t)n * d, sizeof *x), *pre = calloc((size_t)n * M, sizeof *x);
    hs_real *pre0 = calloc((size_t)n * M, sizeof *x), *val = calloc((size_t)n * k, sizeof *x);
    hs_real *wval = calloc((size_t)k, sizeof *x);
    int32_t *idx = calloc((size_t)n * k, sizeof *idx), *count = calloc(n, sizeof *count);
    int32_t widx[k];
    for (int i = 0; i < n * d; i++)
        x[i] = (hs_real)hs_rng_normal(&r);
    int tied = 0; /* rows whose k-th place is a tie */
    for (int packed = 0; packed < 2; packed++) {
        if (packed) {
            CU_ASSERT_EQUAL_FATAL(hs_sae_pack(&s), HS_OK);
#ifndef HEADSCOPE_DOUBLE
            CU_ASSERT_PTR_NOT_NULL(s.enc_pk); /* every CPU the tests run on has the kernel */
#endif
        }
        CU_ASSERT_EQUAL_FATAL(hs_sae_encode_topk(&s, x, n, pre, idx, val, count), HS_OK);
        for (int t = 0; t < n; t++) {
            const hs_real *p = pre + (size_t)t * M;
            hs_real kth;
            const int c = naive_topk(widx, wval, &kth, p, s.b_enc, M, k);
            CU_ASSERT_EQUAL(count[t], c);
            for (int q = 0; q < c && q < count[t]; q++) {
                CU_ASSERT_EQUAL(idx[t * k + q], widx[q]);
                CU_ASSERT_EQUAL(val[t * k + q], wval[q]);
            }
            int above = 0, at = 0; /* the k-th value's ties decide */
            for (int j = 0; j < M; j++) {
                const hs_real v = p[j] + s.b_enc[j];
                above += v > kth, at += v == kth;
            }
            tied += above + at > k;
        }
        if (!packed) {
            memcpy(pre0, pre, sizeof *pre * (size_t)n * M);
            continue;
        }
        double big = 0, err = 0;
        for (int i = 0; i < n * M; i++)
            big = fmax(big, fabs(pre0[i])), err = fmax(err, fabs(pre[i] - pre0[i]));
        CU_ASSERT(err <= 1e-5 * big);
    }
    CU_ASSERT(tied >= n / 2);
    hs_sae_unpack(&s);
    CU_ASSERT_PTR_NULL(s.enc_pk);
    free(x), free(pre), free(pre0), free(val), free(wval), free(idx), free(count);
    hs_sae_free(&s);
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

/* The loss of train_grad (mse + aux_coef aux) at the SAE as it is, the
 * dead latents' counters restored after. */
static double step_loss(hs_sae_trainer *t, const hs_sae *s, const hs_real *x, long n)
{
    long long since[16];
    memcpy(since, t->since, sizeof(long long) * (size_t)s->d_sae);
    hs_sae_step_stats st;
    CU_ASSERT_FATAL(hs_sae_train_grad(t, s, x, n, 0, n, &st, NULL) == HS_OK);
    memcpy(t->since, since, sizeof(long long) * (size_t)s->d_sae);
    return st.mse + t->o.aux_coef * st.aux;
}

/* Central differences of step_loss over the parameters where on[i]:
 * their largest |difference - grad| and largest |difference|. */
static void fd_errors(hs_sae_trainer *t, hs_sae *s, const hs_real *x, long n,
                      const hs_real *grad, const unsigned char *on, double *worst, double *big)
{
#ifdef HEADSCOPE_DOUBLE
    const double eps = 1e-6;
#else
    const double eps = 2e-3;
#endif
    *worst = *big = 0;
    for (size_t i = 0; i < t->n_params; i++) {
        if (!on[i])
            continue;
        const hs_real keep = s->W_enc[i];
        s->W_enc[i] = (hs_real)(keep + eps);
        const double up = step_loss(t, s, x, n);
        s->W_enc[i] = (hs_real)(keep - eps);
        const double down = step_loss(t, s, x, n);
        s->W_enc[i] = keep;
        const double fd = (up - down) / (2 * eps);
        *big = fmax(*big, fabs(fd));
        *worst = fmax(*worst, fabs(fd - grad[i]));
    }
}

/* train_grad's gradient against central differences of the loss, TopK's
 * selection held: every parameter (W_enc, W_dec, b_enc, b_dec) of the MSE
 * alone; then with AuxK (half the latents dead, aux_coef 0.5) the
 * parameters of the dead latents the TopK never selects -- AuxK's residual
 * x - x_hat is held fixed (no gradient), which central differences of
 * anything that moves x_hat would not. */
static void test_topk_gradient_matches_finite_differences(void)
{
    hs_sae s;
    enum { d = 5, M = 16, n = 4, P = 2 * d * M + M + d };
    CU_ASSERT_FATAL(hs_sae_init_topk(&s, "blocks.0.attn.hook_z", d, M, 3, 11) == HS_OK);
    hs_rng r;
    hs_rng_seed(&r, 5);
    for (int i = 0; i < d * M; i++)
        s.W_enc[i] += (hs_real)(0.3 * hs_rng_normal(&r));
    for (int j = 0; j < M; j++)
        s.b_enc[j] = (hs_real)(0.2 * hs_rng_normal(&r));
    for (int i = 0; i < d; i++)
        s.b_dec[i] = (hs_real)(0.1 * hs_rng_normal(&r));
    hs_real x[n * d], pre[n * M], f[n * M];
    for (int i = 0; i < n * d; i++)
        x[i] = (hs_real)hs_rng_normal(&r);
    CU_ASSERT_FATAL(hs_sae_encode(&s, x, n, pre, f) == HS_OK);
#ifdef HEADSCOPE_DOUBLE
    const double tol = 1e-6;
#else
    const double tol = 3e-3;
#endif
    for (int aux = 0; aux < 2; aux++) {
        const hs_sae_train_opts o = { 2, aux ? 0.5 : 0, 4, 1e-3, 0.9, 0.999, 1e-8 };
        hs_sae_trainer t;
        CU_ASSERT_FATAL(hs_sae_trainer_init(&t, &s, &o) == HS_OK);
        unsigned char on[P];
        int dead_unselected = 0;
        memset(on, !aux, sizeof on);
        for (int j = 0; j < M; j++) {
            t.since[j] = j % 2 ? 100 : 0;
            int selected = 0;
            for (int q = 0; q < n; q++)
                selected |= f[q * M + j] > 0;
            if (!aux || !(j % 2) || selected)
                continue;
            dead_unselected++;
            for (int i = 0; i < d; i++)
                on[i * M + j] = on[d * M + j * d + i] = 1; /* W_enc's column, W_dec's row */
            on[2 * d * M + j] = 1;                      /* b_enc */
        }
        CU_ASSERT(!aux || dead_unselected >= 2);
        step_loss(&t, &s, x, n); /* t.grad at the point */
        hs_real grad[P];
        memcpy(grad, t.grad, sizeof grad);
        double worst, big;
        fd_errors(&t, &s, x, n, grad, on, &worst, &big);
        CU_ASSERT(big > 0.01);
        if (worst > tol * big)
            fprintf(stderr, "aux %d: largest gradient error %g of %g\n", aux, worst, big);
        CU_ASSERT(worst <= tol * big);
        hs_sae_trainer_free(&t);
    }
    hs_sae_free(&s);
}

/* The gradient of a batch is the sum of its shares' (train-sae under
 * mpirun: each rank's rows, each weighted as one of the batch). */
static void test_shares_add_up_to_the_batch(void)
{
    hs_sae s;
    enum { d = 6, M = 20, n = 9 };
    CU_ASSERT_FATAL(hs_sae_init_topk(&s, "blocks.0.hook_attn_out", d, M, 3, 4) == HS_OK);
    hs_rng r;
    hs_rng_seed(&r, 12);
    hs_real x[n * d];
    for (int i = 0; i < n * d; i++)
        x[i] = (hs_real)hs_rng_normal(&r);
    const hs_sae_train_opts o = { 4, 1.0 / 32, 2, 1e-3, 0.9, 0.999, 1e-8 };
    hs_sae_trainer t;
    CU_ASSERT_FATAL(hs_sae_trainer_init(&t, &s, &o) == HS_OK);
    for (int j = 0; j < M; j++)
        t.since[j] = j % 3 ? 0 : 9; /* a third dead: AuxK in both */
    hs_sae_step_stats all, a, b;
    unsigned char fa[M], fb[M], fall[M];
    CU_ASSERT_FATAL(hs_sae_train_grad(&t, &s, x, n, 0, n, &all, fall) == HS_OK);
    hs_real *whole = malloc(sizeof *whole * t.n_params), *part = malloc(sizeof *part * t.n_params);
    memcpy(whole, t.grad, sizeof *whole * t.n_params);
    CU_ASSERT_FATAL(hs_sae_train_grad(&t, &s, x, n, 0, 4, &a, fa) == HS_OK);
    memcpy(part, t.grad, sizeof *part * t.n_params);
    CU_ASSERT_FATAL(hs_sae_train_grad(&t, &s, x, n, 4, n, &b, fb) == HS_OK);
    double worst = 0, big = 0;
    for (size_t i = 0; i < t.n_params; i++) {
        worst = fmax(worst, fabs(part[i] + t.grad[i] - whole[i]));
        big = fmax(big, fabs(whole[i]));
    }
    CU_ASSERT(big > 0 && worst <= 1e-5 * big);
    CU_ASSERT(fabs(a.mse + b.mse - all.mse) <= 1e-6 * all.mse);
    CU_ASSERT(fabs(a.aux + b.aux - all.aux) <= 1e-6 * fmax(all.aux, 1e-30) && all.aux > 0);
    for (int j = 0; j < M; j++)
        CU_ASSERT_EQUAL(fa[j] | fb[j], fall[j]);
    free(whole), free(part);
    hs_sae_trainer_free(&t);
    hs_sae_free(&s);
}

/* A step of the update: decoder rows at unit norm, the loss of a repeated
 * batch down after a few steps. */
static void test_updates_keep_unit_rows_and_lower_the_loss(void)
{
    hs_sae s;
    const int d = 6, M = 12, n = 32;
    CU_ASSERT_FATAL(hs_sae_init_topk(&s, "blocks.0.hook_resid_pre", d, M, 2, 3) == HS_OK);
    hs_rng r;
    hs_rng_seed(&r, 9);
    hs_real x[32 * 6];
    for (int i = 0; i < n * d; i++)
        x[i] = (hs_real)hs_rng_normal(&r);
    const hs_sae_train_opts o = { 4, 1.0 / 32, 64, 1e-2, 0.9, 0.999, 1e-8 };
    hs_sae_trainer t;
    CU_ASSERT_FATAL(hs_sae_trainer_init(&t, &s, &o) == HS_OK);
    hs_sae_step_stats first, st;
    unsigned char fired[12];
    for (int step = 0; step < 50; step++) {
        CU_ASSERT_FATAL(hs_sae_train_grad(&t, &s, x, n, 0, n, step ? &st : &first, fired) == HS_OK);
        hs_sae_trainer_count(&t, fired, n, M);
        hs_sae_trainer_update(&t, &s);
    }
    CU_ASSERT(st.mse < 0.8 * first.mse);
    for (int j = 0; j < M; j++) {
        double q = 0;
        for (int i = 0; i < d; i++)
            q += (double)s.W_dec[j * d + i] * s.W_dec[j * d + i];
        CU_ASSERT(fabs(q - 1) < 1e-5);
    }
    hs_sae_trainer_free(&t);
    hs_sae_free(&s);
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_encode_decode_match_the_oracle", test_encode_decode_match_the_oracle },
        { "test_save_reads_back", test_save_reads_back },
        { "test_topk_rows_equal_a_naive_selection", test_topk_rows_equal_a_naive_selection },
        { "test_topk_gradient_matches_finite_differences",
          test_topk_gradient_matches_finite_differences },
        { "test_shares_add_up_to_the_batch", test_shares_add_up_to_the_batch },
        { "test_updates_keep_unit_rows_and_lower_the_loss",
          test_updates_keep_unit_rows_and_lower_the_loss },
    };
    return hs_run_tests("sae_" HS_REAL_NAME, tests, HS_NTESTS(tests));
}
