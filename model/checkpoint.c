#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

/* A tensor as the file stores it, filled from one to three of our tensors.
 * Part p covers file columns [col0, col0 + rows of ours): with transpose,
 * file[i][col0 + o] = ours[o][i] (GPT-2's Conv1D stores [in, out]);
 * otherwise the file tensor is ours unchanged. 1-D parts: file[col0 + o]. */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[2];
    int nparts;
    struct {
        int tensor; /* index into the model's table */
        int transpose;
        int col0;
    } part[3];
} file_tensor;

static int find(const hs_model *m, const char *fmt, int l)
{
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    return hs_model_find(m, name);
}

/* The file's view of our table for the configuration's family. */
static int file_layout(const hs_model *m, file_tensor **out, int *n_out)
{
    const hs_model_config *c = &m->cfg;
    file_tensor *ft = hs_calloc((size_t)m->n_tensors, sizeof *ft, "checkpoint layout");
    if (!ft)
        return HS_ENOMEM;
    int n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const hs_tensor_info *t = &m->tensors[i];
        file_tensor *f = &ft[n];
        int layer = -1;
        char rest[80] = "";
        if (sscanf(t->name, "h.%d.%79s", &layer, rest) != 2)
            layer = -1;
        f->ndim = t->ndim;
        f->shape[0] = t->shape[0];
        f->shape[1] = t->shape[1];
        f->nparts = 1;
        f->part[0].tensor = i;
        snprintf(f->name, sizeof f->name, "%s", t->name);
        if (c->family == HS_FAMILY_LLAMA) {
            static const char *const map[][2] = {
                { "ln_1.weight", "input_layernorm.weight" },
                { "ln_2.weight", "post_attention_layernorm.weight" },
                { "attn.q_proj.weight", "self_attn.q_proj.weight" },
                { "attn.k_proj.weight", "self_attn.k_proj.weight" },
                { "attn.v_proj.weight", "self_attn.v_proj.weight" },
                { "attn.o_proj.weight", "self_attn.o_proj.weight" },
                { "attn.q_proj.bias", "self_attn.q_proj.bias" },
                { "attn.k_proj.bias", "self_attn.k_proj.bias" },
                { "attn.v_proj.bias", "self_attn.v_proj.bias" },
                { "attn.o_proj.bias", "self_attn.o_proj.bias" },
            };
            if (!strcmp(t->name, "wte.weight"))
                snprintf(f->name, sizeof f->name, "model.embed_tokens.weight");
            else if (!strcmp(t->name, "ln_f.weight"))
                snprintf(f->name, sizeof f->name, "model.norm.weight");
            else if (layer >= 0) {
                const char *to = rest; /* mlp.* keeps its name */
                for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
                    if (!strcmp(rest, map[k][0]))
                        to = map[k][1];
                snprintf(f->name, sizeof f->name, "model.layers.%d.%s", layer, to);
            }
        } else if (c->family == HS_FAMILY_GPT2 && layer >= 0) {
            const int d = c->d_model;
            if (!strcmp(rest, "attn.q_proj.weight") || !strcmp(rest, "attn.q_proj.bias")) {
                int is_w = t->ndim == 2;
                snprintf(f->name, sizeof f->name, "h.%d.attn.c_attn.%s", layer,
                         is_w ? "weight" : "bias");
                f->ndim = is_w ? 2 : 1;
                f->shape[0] = is_w ? d : 3 * d;
                f->shape[1] = is_w ? 3 * d : 0;
                f->nparts = 3;
                const char *kv[2] = { is_w ? "h.%d.attn.k_proj.weight" : "h.%d.attn.k_proj.bias",
                                      is_w ? "h.%d.attn.v_proj.weight" : "h.%d.attn.v_proj.bias" };
                for (int p = 0; p < 3; p++) {
                    f->part[p].tensor = p ? find(m, kv[p - 1], layer) : i;
                    f->part[p].transpose = is_w;
                    f->part[p].col0 = p * d;
                }
            } else if (strstr(rest, "attn.k_proj") || strstr(rest, "attn.v_proj")) {
                continue; /* inside c_attn */
            } else {
                static const char *const map[][2] = { { "attn.o_proj", "attn.c_proj" },
                                                      { "mlp.fc", "mlp.c_fc" },
                                                      { "mlp.proj", "mlp.c_proj" } };
                for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
                    size_t len = strlen(map[k][0]);
                    if (!strncmp(rest, map[k][0], len) && rest[len] == '.') {
                        snprintf(f->name, sizeof f->name, "h.%d.%s%s", layer, map[k][1], rest + len);
                        if (t->ndim == 2) {
                            f->part[0].transpose = 1;
                            f->shape[0] = t->shape[1];
                            f->shape[1] = t->shape[0];
                        }
                    }
                }
            }
        }
        n++;
    }
    *out = ft;
    *n_out = n;
    return HS_OK;
}

char *hs_read_text(const char *path, size_t limit)
{
    FILE *f = hs_fopen_regular(path);
    if (!f)
        return NULL;
    char *buf = hs_calloc(limit + 1, 1, path);
    size_t n = buf ? fread(buf, 1, limit + 1, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (buf && (err || n > limit)) {
        hs_fail(err ? HS_EIO : HS_EFORMAT, "%s: %s", path,
                err ? "read failed" : "larger than expected for this file");
        free(buf);
        return NULL;
    }
    if (buf)
        buf[n] = 0;
    return buf;
}

int hs_config_load(hs_model_config *c, const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *json = hs_read_text(path, 1 << 20);
    if (!json)
        return HS_EIO; /* hs_read_text's message names the file */
    int rc = hs_config_parse(c, json, path);
    free(json);
    return rc;
}

/* The file's tensor for spec f: the name as written, or with GPT-2's
 * "transformer." prefix. */
static const hs_st_tensor *lookup(const hs_safetensors *st, const hs_model_config *c,
                                  const char *name)
{
    const hs_st_tensor *t = hs_st_find(st, name);
    if (!t && c->family == HS_FAMILY_GPT2) {
        char prefixed[160];
        snprintf(prefixed, sizeof prefixed, "transformer.%s", name);
        t = hs_st_find(st, prefixed);
    }
    return t;
}

/* The file's tensor for f once its name, dtype and shape are what the
 * configuration implies; NULL with the message otherwise. */
static const hs_st_tensor *check_tensor(const hs_model *m, const hs_safetensors *st,
                                        const file_tensor *f)
{
    const hs_st_tensor *t = lookup(st, &m->cfg, f->name);
    if (!t) {
        hs_fail(HS_EFORMAT, "%s: missing tensor %s", st->path, f->name);
        return NULL;
    }
    if (t->dtype == HS_DT_OTHER) {
        hs_fail(HS_EFORMAT, "%s: tensor %s: dtype %s not supported (F32, F16, BF16)", st->path,
                f->name, t->dtype_name);
        return NULL;
    }
    int shape_ok = t->ndim == f->ndim && t->shape[0] == f->shape[0] &&
                   (f->ndim < 2 || t->shape[1] == f->shape[1]);
    if (!shape_ok) {
        char got[96] = "", want[64];
        for (int k = 0; k < t->ndim; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", k ? "," : "",
                     (long long)t->shape[k]);
        if (f->ndim == 2)
            snprintf(want, sizeof want, "%lld,%lld", (long long)f->shape[0], (long long)f->shape[1]);
        else
            snprintf(want, sizeof want, "%lld", (long long)f->shape[0]);
        hs_fail(HS_EFORMAT, "%s: tensor %s has shape [%s], config.json implies [%s]", st->path,
                f->name, got, want);
        return NULL;
    }
    return t;
}

static int load_tensor(hs_model *m, const hs_safetensors *st, const file_tensor *f)
{
    const hs_st_tensor *t = check_tensor(m, st, f);
    if (!t)
        return HS_EFORMAT;
    const size_t cols = f->ndim == 2 ? (size_t)f->shape[1] : 1;
    for (int p = 0; p < f->nparts; p++) {
        const hs_tensor_info *ti = &m->tensors[f->part[p].tensor];
        hs_real *dst = m->params + ti->offset;
        const size_t rows = (size_t)ti->shape[0], inner = ti->ndim == 2 ? (size_t)ti->shape[1] : 1;
        if (!f->part[p].transpose && f->nparts == 1) {
            for (size_t k = 0; k < ti->size; k++)
                dst[k] = (hs_real)hs_st_get(st, t, k);
        } else if (!f->part[p].transpose) { /* 1-D slice of a fused bias */
            for (size_t o = 0; o < rows; o++)
                dst[o] = (hs_real)hs_st_get(st, t, f->part[p].col0 + o);
        } else {
            for (size_t o = 0; o < rows; o++)
                for (size_t i = 0; i < inner; i++)
                    dst[o * inner + i] = (hs_real)hs_st_get(st, t, i * cols + f->part[p].col0 + o);
        }
    }
    hs_st_release(st, t);
    return HS_OK;
}

int hs_checkpoint_load(hs_model *m, const char *dir)
{
    memset(m, 0, sizeof *m);
    hs_model_config c;
    int rc = hs_config_load(&c, dir);
    if (rc || (rc = hs_config_check(&c)))
        return rc;
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    hs_safetensors st;
    if ((rc = hs_st_open(&st, path)))
        return rc;
    /* The table first and every tensor checked against the file (whose
     * header hs_st_open has checked against its size): a config.json that
     * claims more than the file holds is refused before the parameters are
     * allocated. */
    m->cfg = c;
    file_tensor *ft = NULL;
    int n = 0;
    rc = hs_tensor_table(&c, &m->tensors, &m->n_tensors, &m->n_params);
    if (!rc)
        rc = file_layout(m, &ft, &n);
    for (int i = 0; !rc && i < n; i++)
        if (!check_tensor(m, &st, &ft[i]))
            rc = HS_EFORMAT;
    if (!rc && !(m->params = hs_calloc(m->n_params, sizeof(hs_real), "model parameters")))
        rc = HS_ENOMEM;
    if (!rc)
        hs_weights_bind(&m->w, &c, m->params);
    for (int i = 0; !rc && i < n; i++)
        rc = load_tensor(m, &st, &ft[i]);
    free(ft);
    if (st.map || st.fd >= 0)
        hs_st_close(&st);
    if (rc)
        hs_model_free(m);
    return rc;
}

/* out (the file tensor's elements) from our tensors, in the file's layout. */
static void gather(const hs_model *m, const file_tensor *f, double *out)
{
    const size_t cols = f->ndim == 2 ? (size_t)f->shape[1] : 1;
    for (int p = 0; p < f->nparts; p++) {
        const hs_tensor_info *ti = &m->tensors[f->part[p].tensor];
        const hs_real *src = m->params + ti->offset;
        const size_t rows = (size_t)ti->shape[0], inner = ti->ndim == 2 ? (size_t)ti->shape[1] : 1;
        if (!f->part[p].transpose)
            for (size_t k = 0; k < ti->size; k++)
                out[f->part[p].col0 + k] = src[k];
        else
            for (size_t o = 0; o < rows; o++)
                for (size_t k = 0; k < inner; k++)
                    out[k * cols + f->part[p].col0 + o] = src[o * inner + k];
    }
}

static size_t file_tensor_count(const file_tensor *f)
{
    return (size_t)f->shape[0] * (f->ndim == 2 ? (size_t)f->shape[1] : 1);
}

typedef struct {
    const hs_model *m;
    const file_tensor *ft;
    double *scratch; /* largest file tensor */
} save_ctx;

static void fill_tensor(void *ctx, int i, float *out)
{
    const save_ctx *s = ctx;
    gather(s->m, &s->ft[i], s->scratch);
    for (size_t k = 0, n = file_tensor_count(&s->ft[i]); k < n; k++)
        out[k] = (float)s->scratch[k];
}

int hs_checkpoint_export(const hs_model *m, const char *file_name, double *out, size_t cap,
                         size_t *n)
{
    file_tensor *ft = NULL;
    int nft = 0, rc = file_layout(m, &ft, &nft);
    if (rc)
        return rc;
    rc = hs_fail(HS_EINVAL, "no tensor %s in a %s checkpoint", file_name,
                 hs_family_name(m->cfg.family));
    for (int i = 0; i < nft; i++) {
        if (strcmp(ft[i].name, file_name))
            continue;
        *n = file_tensor_count(&ft[i]);
        if (*n > cap)
            rc = hs_fail(HS_EINVAL, "%s: %zu elements exceed %zu", file_name, *n, cap);
        else
            gather(m, &ft[i], out), rc = HS_OK;
        break;
    }
    free(ft);
    return rc;
}

int hs_checkpoint_save(const hs_model *m, const char *dir)
{
    if (hs_mkdirs(dir))
        return HS_EIO;
    file_tensor *ft = NULL;
    int n = 0;
    int rc = file_layout(m, &ft, &n);
    if (rc)
        return rc;
    hs_st_spec *specs = hs_calloc((size_t)n, sizeof *specs, "checkpoint specs");
    if (!specs) {
        free(ft);
        return HS_ENOMEM;
    }
    for (int i = 0; i < n; i++)
        specs[i] = (hs_st_spec){ ft[i].name, ft[i].ndim, { ft[i].shape[0], ft[i].shape[1] } };
    size_t largest = 1;
    for (int i = 0; i < n; i++)
        largest = file_tensor_count(&ft[i]) > largest ? file_tensor_count(&ft[i]) : largest;
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    save_ctx ctx = { m, ft, hs_calloc(largest, sizeof(double), "checkpoint write buffer") };
    rc = ctx.scratch ? hs_st_write(path, specs, n, fill_tensor, &ctx) : HS_ENOMEM;
    free(ctx.scratch);
    free(specs);
    free(ft);
    if (rc)
        return rc;

    char *json = hs_config_to_json(&m->cfg);
    if (!json)
        return HS_ENOMEM;
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(json, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f))
        ok = 0;
    free(json);
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return hs_fail(HS_EIO, "%s: cannot write: %s", path, strerror(errno));
    }
    return HS_OK;
}
