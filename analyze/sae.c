#include "sae.h"

#include <math.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemm.h"
#include "json.h"
#include "linalg.h"
#include "safetensors.h"

const char *hs_sae_arch_name(hs_sae_arch a)
{
    return a == HS_SAE_JUMPRELU ? "jumprelu" : a == HS_SAE_TOPK ? "topk" : "standard";
}

void hs_sae_free(hs_sae *s)
{
    hs_sae_unpack(s);
    free(s->W_enc);
    memset(s, 0, sizeof *s);
}

/* cfg.json's integer key (HS_EFORMAT naming path and key unless it is a
 * whole number in lo..hi; absent: *v untouched when optional). */
static int cfg_int(int *v, const cJSON *o, const char *key, long lo, long hi, int optional,
                   const char *path)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!j && optional)
        return HS_OK;
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || j->valuedouble < lo ||
        j->valuedouble > hi)
        return hs_fail(HS_EFORMAT, "%s: \"%s\" must be a whole number in %ld .. %ld", path, key,
                       lo, hi);
    *v = (int)j->valuedouble;
    return HS_OK;
}

static const char *cfg_str(const cJSON *o, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}

static int parse_cfg(hs_sae *s, const cJSON *root, const char *path)
{
    if (!cJSON_IsObject(root))
        return hs_fail(HS_EFORMAT, "%s: not a JSON object", path);
    int rc = cfg_int(&s->d_in, root, "d_in", 1, 1 << 20, 0, path);
    if (!rc)
        rc = cfg_int(&s->d_sae, root, "d_sae", 1, 1 << 24, 0, path);
    if (rc)
        return rc;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    const char *hook = cfg_str(root, "hook_name"); /* SAELens 6: under "metadata" */
    if (!hook && cJSON_IsObject(meta))
        hook = cfg_str(meta, "hook_name");
    if (!hook || !*hook || strlen(hook) >= sizeof s->hook)
        return hs_fail(HS_EFORMAT, "%s: \"hook_name\" must be a TransformerLens hook name", path);
    snprintf(s->hook, sizeof s->hook, "%s", hook);
    const char *arch = cfg_str(root, "architecture");
    if (!arch)
        arch = "standard"; /* SAELens's default */
    if (!strcmp(arch, "standard"))
        s->arch = HS_SAE_STANDARD;
    else if (!strcmp(arch, "jumprelu"))
        s->arch = HS_SAE_JUMPRELU;
    else if (!strcmp(arch, "topk"))
        s->arch = HS_SAE_TOPK;
    else
        return hs_fail(HS_EFORMAT, "%s: \"architecture\" \"%s\" is not standard, jumprelu or "
                       "topk", path, arch);
    if (s->arch == HS_SAE_TOPK) {
        const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "activation_fn_kwargs");
        s->k = 0;
        rc = cfg_int(&s->k, root, "k", 1, s->d_sae, 1, path);
        if (!rc && !s->k && cJSON_IsObject(kw))
            rc = cfg_int(&s->k, kw, "k", 1, s->d_sae, 1, path);
        if (!rc && !s->k)
            return hs_fail(HS_EFORMAT, "%s: a topk SAE needs \"k\" (or activation_fn_kwargs.k)",
                           path);
    }
    const cJSON *apply = cJSON_GetObjectItemCaseSensitive(root, "apply_b_dec_to_input");
    if (apply && !cJSON_IsBool(apply))
        return hs_fail(HS_EFORMAT, "%s: \"apply_b_dec_to_input\" must be true or false", path);
    s->apply_b_dec = cJSON_IsTrue(apply);
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalize_activations");
    if (norm && !cJSON_IsNull(norm) &&
        (!cJSON_IsString(norm) || strcmp(norm->valuestring, "none")))
        return hs_fail(HS_EFORMAT, "%s: \"normalize_activations\" %s is not implemented (only "
                       "\"none\")", path, cJSON_IsString(norm) ? norm->valuestring : "(not a string)");
    return rc;
}

/* Tensor name of st (path) into dst (n elements of the expected shape
 * rows x cols, cols 0: a vector), every value finite. */
static int read_tensor(hs_real *dst, const hs_safetensors *st, const char *path, const char *name,
                       int rows, int cols)
{
    const hs_st_tensor *t = hs_st_find(st, name);
    if (!t)
        return hs_fail(HS_EFORMAT, "%s: no tensor \"%s\"", path, name);
    const int ndim = cols ? 2 : 1;
    if (t->ndim != ndim || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        char want[48];
        if (cols)
            snprintf(want, sizeof want, "[%d, %d]", rows, cols);
        else
            snprintf(want, sizeof want, "[%d]", rows);
        return hs_fail(HS_EFORMAT, "%s: tensor \"%s\" is not %s (cfg.json's d_in %s)", path,
                       name, want, "and d_sae");
    }
    if (t->dtype != HS_DT_F32 && t->dtype != HS_DT_F16 && t->dtype != HS_DT_BF16)
        return hs_fail(HS_EFORMAT, "%s: tensor \"%s\" is %s (F32, F16 or BF16 only)", path, name,
                       t->dtype_name);
    const size_t n = (size_t)rows * (cols ? cols : 1);
    const int rc = hs_st_read(st, t, 0, n, dst);
    for (size_t i = 0; !rc && i < n; i++)
        if (!isfinite(dst[i]))
            return hs_fail(HS_EFORMAT, "%s: tensor \"%s\" holds a non-finite value (element %zu)",
                           path, name, i);
    return rc;
}

static int read_weights(hs_sae *s, const char *path)
{
    hs_safetensors st;
    int rc = hs_st_open(&st, path);
    if (rc)
        return rc;
    const size_t din = (size_t)s->d_in, dsae = (size_t)s->d_sae;
    const size_t total = 2 * din * dsae + 2 * dsae + din;
    s->W_enc = hs_calloc(total, sizeof(hs_real), "SAE weights");
    if (!s->W_enc)
        rc = HS_ENOMEM;
    if (!rc) {
        s->W_dec = s->W_enc + din * dsae;
        s->b_enc = s->W_dec + din * dsae;
        s->b_dec = s->b_enc + dsae;
        s->threshold = s->arch == HS_SAE_JUMPRELU ? s->b_dec + din : NULL;
        rc = read_tensor(s->W_enc, &st, path, "W_enc", s->d_in, s->d_sae);
    }
    if (!rc)
        rc = read_tensor(s->W_dec, &st, path, "W_dec", s->d_sae, s->d_in);
    if (!rc)
        rc = read_tensor(s->b_enc, &st, path, "b_enc", s->d_sae, 0);
    if (!rc)
        rc = read_tensor(s->b_dec, &st, path, "b_dec", s->d_in, 0);
    if (!rc && s->threshold && !hs_st_find(&st, "threshold"))
        rc = hs_fail(HS_EFORMAT, "%s: a jumprelu SAE needs the tensor \"threshold\"", path);
    if (!rc && s->threshold)
        rc = read_tensor(s->threshold, &st, path, "threshold", s->d_sae, 0);
    hs_st_close(&st);
    return rc;
}

int hs_sae_open(hs_sae *s, const char *dir)
{
    memset(s, 0, sizeof *s);
    if (strlen(dir) + 32 > sizeof s->dir)
        return hs_fail(HS_EINVAL, "--sae %s: the path is too long", dir);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    char path[600], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/cfg.json", dir);
    int rc = hs_read_file(&text, &len, path, (size_t)1 << 20, 0);
    cJSON *root = NULL;
    if (!rc)
        rc = hs_json_parse(&root, text, len, path);
    free(text);
    if (!rc)
        rc = parse_cfg(s, root, path);
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/sae_weights.safetensors", dir);
    if (!rc)
        rc = read_weights(s, path);
    if (rc)
        hs_sae_free(s);
    return rc;
}

int hs_sae_bind(hs_sae *s, const hs_model_config *c)
{
    static const struct {
        const char *suffix;
        hs_site site;
        int next, z;
    } hooks[] = {
        { "attn.hook_z", HS_SITE_Z, 0, 1 },
        { "hook_resid_pre", HS_SITE_RESID_PRE, 0, 0 },
        { "hook_resid_post", HS_SITE_RESID_PRE, 1, 0 },
        { "hook_attn_out", HS_SITE_ATTN_OUT, 0, 0 },
        { "hook_mlp_out", HS_SITE_MLP_OUT, 0, 0 },
    };
    if (c->enc_layers)
        return hs_fail(HS_EUNSUPPORTED, "SAEs on an encoder-decoder's hooks are not implemented");
    int L = -1, at = 0;
    char rest[128] = "";
    if (sscanf(s->hook, "blocks.%d.%n", &L, &at) != 1 || at == 0 || L < 0)
        return hs_fail(HS_EINVAL, "%s/cfg.json: hook_name \"%s\" is not blocks.L.<hook>", s->dir,
                       s->hook);
    snprintf(rest, sizeof rest, "%s", s->hook + at);
    if (L >= c->n_layer)
        return hs_fail(HS_EINVAL, "%s/cfg.json: hook_name \"%s\": the model has %d layers", s->dir,
                       s->hook, c->n_layer);
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        if (strcmp(rest, hooks[i].suffix))
            continue;
        s->site = hooks[i].site, s->hook_layer = L, s->layer = L + hooks[i].next;
        s->z = hooks[i].z;
        s->heads = s->z ? c->n_head[L] : 1;
        s->dh = s->z ? (c->mla ? c->v_head_dim : c->head_dim) : c->d_model;
        if (!s->d_in)
            s->d_in = s->heads * s->dh;
        if (s->d_in != s->heads * s->dh)
            return hs_fail(HS_EINVAL, "%s/cfg.json: d_in %d does not match %s, %d wide on this "
                           "model%s", s->dir, s->d_in, s->hook, s->heads * s->dh,
                           s->z ? " (heads x head dim)" : " (d_model)");
        return HS_OK;
    }
    return hs_fail(HS_EINVAL, "%s/cfg.json: hook_name \"%s\": the model has no such hook (SAEs "
                   "read blocks.L.attn.hook_z, hook_resid_pre, hook_resid_post, hook_attn_out "
                   "or hook_mlp_out)", s->dir, s->hook);
}

/* The k largest of row pre (ties to the lower index), relu'd, into f: a
 * first pass finds the k-th largest value v and how many of the k equal it,
 * a second keeps every entry above v and the first of those equal to it. */
static void topk_row(hs_real *f, const hs_real *pre, int n, int k)
{
    /* a min-heap of the k largest values seen, by value only */
    hs_real heap[256], *h = k <= 256 ? heap : f; /* f as scratch for large k: written after */
    int m = 0;
    for (int j = 0; j < n; j++) {
        const hs_real v = pre[j];
        if (m < k) { /* sift up */
            int c = m++;
            while (c > 0 && h[(c - 1) / 2] > v) {
                h[c] = h[(c - 1) / 2];
                c = (c - 1) / 2;
            }
            h[c] = v;
        } else if (v > h[0]) { /* replace the root, sift down */
            int c = 0;
            for (;;) {
                int l = 2 * c + 1;
                if (l >= k)
                    break;
                if (l + 1 < k && h[l + 1] < h[l])
                    l++;
                if (!(h[l] < v))
                    break;
                h[c] = h[l];
                c = l;
            }
            h[c] = v;
        }
    }
    const hs_real kth = h[0];
    int equal = 0; /* how many entries equal to kth the k keep */
    for (int i = 0; i < m; i++)
        equal += h[i] == kth;
    for (int j = 0; j < n; j++) {
        const hs_real v = pre[j];
        const int keep = v > kth || (v == kth && equal-- > 0);
        f[j] = keep && v > 0 ? v : 0;
    }
}

int hs_sae_pack(hs_sae *s)
{
#ifndef HEADSCOPE_DOUBLE
    if (!s->enc_pk && hs_packed_bytes(HS_DT_F32, s->d_sae, s->d_in) &&
        !(s->enc_pk = hs_pack_weight(s->W_enc, HS_DT_F32, 0, s->d_sae, s->d_in)))
        return HS_ENOMEM;
#else
    (void)s;
#endif
    return HS_OK;
}

void hs_sae_unpack(hs_sae *s)
{
#ifndef HEADSCOPE_DOUBLE
    hs_packed_free(s->enc_pk);
#endif
    s->enc_pk = NULL;
}

/* pre (n, d_sae) = (x - b_dec if applied) W_enc, b_enc not added: on the
 * packed W_enc when there is one. */
static int encode_gemm(const hs_sae *s, const hs_real *x, long n, hs_real *pre)
{
    const int din = s->d_in, dsae = s->d_sae;
    const hs_real *in = x;
    hs_real *xc = NULL;
    if (s->apply_b_dec) { /* x - b_dec */
        if (!(xc = hs_calloc((size_t)n * din, sizeof *xc, "SAE inputs")))
            return HS_ENOMEM;
        for (long t = 0; t < n; t++)
            for (int i = 0; i < din; i++)
                xc[t * din + i] = x[t * din + i] - s->b_dec[i];
        in = xc;
    }
    for (long t0 = 0; t0 < n; t0 += 1 << 20) { /* hs_gemm's sizes are int */
        const int rows = n - t0 < (1 << 20) ? (int)(n - t0) : 1 << 20;
#ifndef HEADSCOPE_DOUBLE
        if (s->enc_pk) {
            hs_sgemm_packed(hs_gemm_env_path(), 0, rows, dsae, din, 1, in + t0 * din, din,
                            s->enc_pk, 0, NULL, pre + t0 * dsae, dsae);
            continue;
        }
#endif
        hs_gemm(0, 0, rows, dsae, din, 1, in + t0 * din, din, s->W_enc, dsae, 0, pre + t0 * dsae,
                dsae);
    }
    free(xc);
    return HS_OK;
}

int hs_sae_encode(const hs_sae *s, const hs_real *x, long n, hs_real *pre, hs_real *f)
{
    const int dsae = s->d_sae;
    int rc = encode_gemm(s, x, n, pre);
    if (rc)
        return rc;
#pragma omp parallel for schedule(static) if (n > 64)
    for (long t = 0; t < n; t++) {
        hs_real *p = pre + t * dsae, *o = f + t * dsae;
        for (int j = 0; j < dsae; j++)
            p[j] += s->b_enc[j];
        if (s->arch == HS_SAE_TOPK) {
            topk_row(o, p, dsae, s->k);
            continue;
        }
        for (int j = 0; j < dsae; j++) {
            const hs_real r = p[j] > 0 ? p[j] : 0;
            o[j] = s->arch == HS_SAE_JUMPRELU && !(p[j] > s->threshold[j]) ? 0 : r;
        }
    }
    return HS_OK;
}

/* (value, index) ranks below another: a smaller value, or the same value at
 * a higher index (ties go to the lower index). */
static int below(hs_real v, int j, hs_real w, int i)
{
    return v < w || (v == w && j > i);
}

/* 1 when one of pre[i] + b[i], i < 16, is above t (the same sums as the
 * scalar loop's). */
static inline int any_above(const hs_real *pre, const hs_real *b, hs_real t)
{
#if defined(__AVX512F__) && !defined(HEADSCOPE_DOUBLE)
    const __m512 v = _mm512_add_ps(_mm512_loadu_ps(pre), _mm512_loadu_ps(b));
    return _mm512_cmp_ps_mask(v, _mm512_set1_ps(t), _CMP_GT_OQ) != 0;
#elif defined(__AVX2__) && !defined(HEADSCOPE_DOUBLE)
    const __m256 tv = _mm256_set1_ps(t);
    const __m256 v0 = _mm256_add_ps(_mm256_loadu_ps(pre), _mm256_loadu_ps(b));
    const __m256 v1 = _mm256_add_ps(_mm256_loadu_ps(pre + 8), _mm256_loadu_ps(b + 8));
    return _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(v0, tv, _CMP_GT_OQ),
                                           _mm256_cmp_ps(v1, tv, _CMP_GT_OQ))) != 0;
#else
    int any = 0;
    for (int i = 0; i < 16; i++)
        any |= pre[i] + b[i] > t;
    return any;
#endif
}

/* Row pre + b's k largest (ties to the lower index) in one pass through a
 * min-heap of (value, index), then those above 0 by index into idx, val;
 * the count. hv, hi: room for k. */
static int topk_sparse_row(int32_t *idx, hs_real *val, const hs_real *pre, const hs_real *b,
                           int n, int k, hs_real *hv, int *hi)
{
    int m = 0;
    for (int j = 0; j < n; j++) {
        if (m == k && j % 16 == 0 && j + 16 <= n) {
            /* a full heap: skip 16 entries none of which beats its root
             * (ties never do: the root's index is lower), a vector compare */
            if (!any_above(pre + j, b + j, hv[0])) {
                j += 15;
                continue;
            }
        }
        const hs_real v = pre[j] + b[j];
        int c;
        if (m < k) { /* sift up */
            for (c = m++; c > 0 && below(v, j, hv[(c - 1) / 2], hi[(c - 1) / 2]); c = (c - 1) / 2)
                hv[c] = hv[(c - 1) / 2], hi[c] = hi[(c - 1) / 2];
        } else if (below(hv[0], hi[0], v, j)) { /* replace the root, sift down */
            for (c = 0;;) {
                int l = 2 * c + 1;
                if (l >= k)
                    break;
                if (l + 1 < k && below(hv[l + 1], hi[l + 1], hv[l], hi[l]))
                    l++;
                if (!below(hv[l], hi[l], v, j))
                    break;
                hv[c] = hv[l], hi[c] = hi[l];
                c = l;
            }
        } else {
            continue;
        }
        hv[c] = v, hi[c] = j;
    }
    int cnt = 0;
    for (int q = 0; q < m; q++) /* the positive ones, by index (insertion: k is small) */
        if (hv[q] > 0) {
            int p = cnt++;
            for (; p > 0 && idx[p - 1] > hi[q]; p--)
                idx[p] = idx[p - 1], val[p] = val[p - 1];
            idx[p] = hi[q], val[p] = hv[q];
        }
    return cnt;
}

int hs_sae_encode_topk(const hs_sae *s, const hs_real *x, long n, hs_real *pre, int32_t *idx,
                       hs_real *val, int32_t *count)
{
    const int dsae = s->d_sae, k = s->k;
    int rc = s->arch == HS_SAE_TOPK ? encode_gemm(s, x, n, pre)
                                    : hs_fail(HS_EINVAL, "%s: not a topk SAE", s->dir);
    if (rc)
        return rc;
#pragma omp parallel if (n > 64)
    {
        hs_real *hv = malloc(sizeof *hv * (size_t)k);
        int *hi = malloc(sizeof *hi * (size_t)k);
#pragma omp for schedule(static)
        for (long t = 0; t < n; t++)
            count[t] = hv && hi ? topk_sparse_row(idx + t * k, val + t * k, pre + t * dsae,
                                                  s->b_enc, dsae, k, hv, hi)
                                : -1;
        free(hv), free(hi);
    }
    for (long t = 0; t < n; t++)
        if (count[t] < 0)
            return hs_fail(HS_ENOMEM, "out of memory for the TopK heaps");
    return HS_OK;
}

void hs_sae_decode(const hs_sae *s, const hs_real *f, long n, hs_real *x_hat)
{
    const int din = s->d_in, dsae = s->d_sae;
#pragma omp parallel for schedule(static) if (n > 64)
    for (long t = 0; t < n; t++) {
        hs_real *o = x_hat + t * din;
        memcpy(o, s->b_dec, sizeof *o * (size_t)din);
        const hs_real *ft = f + t * dsae;
        for (int j = 0; j < dsae; j++) {
            if (ft[j] == 0)
                continue;
            const hs_real a = ft[j], *w = s->W_dec + (size_t)j * din;
            for (int i = 0; i < din; i++)
                o[i] += a * w[i];
        }
    }
}

int hs_sae_site(void *ctx, const hs_site_view *v)
{
    const hs_sae_hook *h = ctx;
    const hs_sae *s = h->s;
    if (v->layer != s->layer)
        return HS_OK;
    if (v->heads * v->width != s->d_in)
        return hs_fail(HS_EINVAL, "%s: %s is %d wide here, d_in is %d", s->dir, s->hook,
                       v->heads * v->width, s->d_in);
    for (int b = 0; b < v->B; b++)
        for (int t = 0; t < v->T; t++)
            for (int hd = 0; hd < v->heads; hd++) {
                hs_real *site = v->x + b * v->sb + t * v->st + hd * v->sh;
                hs_real *row = h->x + ((size_t)b * v->T + t) * s->d_in + (size_t)hd * v->width;
                if (h->write)
                    memcpy(site, row, sizeof *row * (size_t)v->width);
                else
                    memcpy(row, site, sizeof *row * (size_t)v->width);
            }
    return h->stop ? HS_EDONE : HS_OK;
}

typedef struct {
    const hs_sae *s;
} save_ctx;

static void fill_tensor(void *ctx, int i, float *out)
{
    const hs_sae *s = ((save_ctx *)ctx)->s;
    const hs_real *src[] = { s->W_enc, s->b_enc, s->W_dec, s->b_dec };
    const size_t n[] = { (size_t)s->d_in * s->d_sae, (size_t)s->d_sae, (size_t)s->d_in * s->d_sae,
                         (size_t)s->d_in };
    for (size_t k = 0; k < n[i]; k++)
        out[k] = (float)src[i][k];
}

int hs_sae_save(const hs_sae *s, const char *dir)
{
    int rc = hs_mkdirs(dir);
    if (rc)
        return rc;
    char path[600], tmp[700];
    snprintf(path, sizeof path, "%s/sae_weights.safetensors", dir);
    const hs_st_spec spec[4] = { { "W_enc", 2, { s->d_in, s->d_sae } },
                                 { "b_enc", 1, { s->d_sae, 0 } },
                                 { "W_dec", 2, { s->d_sae, s->d_in } },
                                 { "b_dec", 1, { s->d_in, 0 } } };
    save_ctx ctx = { s };
    rc = hs_st_write(path, spec, 4, fill_tensor, &ctx);
    if (rc)
        return rc;
    snprintf(path, sizeof path, "%s/cfg.json", dir);
    FILE *f = hs_tmp_fopen(path, tmp, sizeof tmp);
    if (!f)
        return HS_EIO;
    fprintf(f, "{\n  \"architecture\": \"%s\",\n  \"d_in\": %d,\n  \"d_sae\": %d,\n"
            "  \"hook_name\": \"%s\",\n  \"hook_layer\": %d,\n  \"hook_head_index\": null,\n",
            hs_sae_arch_name(s->arch), s->d_in, s->d_sae, s->hook, s->hook_layer);
    if (s->arch == HS_SAE_TOPK)
        fprintf(f, "  \"k\": %d,\n  \"activation_fn_kwargs\": {\"k\": %d},\n", s->k, s->k);
    fprintf(f, "  \"apply_b_dec_to_input\": %s,\n  \"normalize_activations\": \"none\",\n"
            "  \"dtype\": \"float32\",\n  \"device\": \"cpu\",\n"
            "  \"finetuning_scaling_factor\": false\n}\n", s->apply_b_dec ? "true" : "false");
    const int failed = ferror(f);
    if (fclose(f) || failed) {
        unlink(tmp);
        return hs_fail(HS_EIO, "%s: cannot write", path);
    }
    return hs_tmp_commit(tmp, path, 1);
}
