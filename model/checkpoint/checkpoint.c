#include "checkpoint.h"
#include "memory.h"
#include "gemm.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "config_file.h"
#include "convert.h"
#include "family.h"
#include "json.h"
#include "pruned.h"
#include "pytorch.h"
#include "safetensors.h"
#include "seq2seq.h"
#include "stored.h"

/* The file's view of our table for the configuration's family: each of our
 * tensors under its name in the family's files, fused where the family
 * fuses (family.h). */
static int file_layout(const hs_model *m, hs_file_tensor **out, int *n_out)
{
    const hs_family_ops *fam = hs_family_ops_of(m->cfg.family);
    hs_file_tensor *ft = hs_calloc((size_t)m->n_tensors, sizeof *ft, "checkpoint layout");
    if (!ft)
        return HS_ENOMEM;
    int n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const hs_tensor_info *t = &m->tensors[i];
        hs_file_tensor *f = &ft[n];
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
        if (fam && fam->layout && fam->layout(m, f, i, layer, rest))
            continue; /* held inside another file tensor */
        if (!m->cfg.encoder && !strcmp(t->name, "cls.out.weight")) /* …ForSequenceClassification */
            snprintf(f->name, sizeof f->name, "score.weight");
        n++;
    }
    *out = ft;
    *n_out = n;
    return HS_OK;
}

int hs_read_text(char **out, const char *path, size_t limit)
{
    size_t n;
    int rc = hs_read_file(out, &n, path, limit, 0);
    if (rc == HS_EINVAL) /* larger than the limit */
        rc = hs_fail(HS_EFORMAT, "%s: larger than expected for this file (%zu bytes at most)",
                     path, limit);
    const char *nul = rc ? NULL : memchr(*out, 0, n);
    if (nul) /* the text would end there for every reader of the string */
        rc = hs_fail(HS_EFORMAT, "%s: a NUL byte at byte %zu (a text file holds none)", path,
                     (size_t)(nul - *out));
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

int hs_config_load(hs_model_config *c, const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *json;
    int rc = hs_read_text(&json, path, 1 << 20); /* the message names the file */
    if (rc)
        return rc;
    rc = hs_config_parse(c, json, path);
    free(json);
    return rc;
}

/* The checkpoint's tensor files: model.safetensors alone, or the shards a
 * sharded checkpoint's model.safetensors.index.json names in its
 * "weight_map" (tensor name -> shard file); where the directory has
 * neither, pytorch_model.bin or the shards of pytorch_model.bin.index.json
 * (SPEC §20: a .bin is never opened beside safetensors). Every file is
 * memory-mapped and validated by hs_st_open or hs_pt_open. */
typedef struct {
    hs_safetensors *st; /* n files */
    int n;
    cJSON *index;       /* the parsed index (NULL: one file) */
    char index_path[1024];
    /* pruned_heads: the files' tensors of layers with pruned heads in their
     * full shape (expand_pruned), found before the files' own */
    hs_safetensors expanded;
    int has_expanded;
} sources;

static void sources_close(sources *src)
{
    for (int i = 0; i < src->n; i++)
        hs_st_close(&src->st[i]);
    if (src->has_expanded)
        hs_st_close(&src->expanded);
    free(src->st);
    cJSON_Delete(src->index);
    memset(src, 0, sizeof *src);
}

/* A shard's file name as the index gives it: a plain name in DIR. */
static int shard_name_ok(const char *name)
{
    return *name && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

/* The files of one format: DIR/NAME, or else the shards of DIR/NAME.index.json. */
typedef struct {
    const char *name;
    int (*open)(hs_safetensors *st, const char *path);
} format;

static int exists(const char *path)
{
    struct stat sb;
    return !stat(path, &sb);
}

/* Opens DIR/NAME, or else every shard of DIR/NAME.index.json (each distinct
 * file once). A missing shard, or an index that is not {"weight_map":
 * {name: file}}, is an error naming the file. */
static int sources_open_as(sources *src, const char *dir, const format *fmt)
{
    memset(src, 0, sizeof *src);
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, fmt->name);
    snprintf(src->index_path, sizeof src->index_path, "%s/%s.index.json", dir, fmt->name);
    if (exists(path) || !exists(src->index_path)) {
        if (!(src->st = hs_calloc(1, sizeof *src->st, "checkpoint files")))
            return HS_ENOMEM;
        int rc = fmt->open(&src->st[0], path);
        src->n = !rc;
        if (rc)
            sources_close(src);
        return rc;
    }
    char *json;
    int prc = hs_read_text(&json, src->index_path, 64u << 20);
    if (prc)
        return prc;
    prc = hs_json_parse(&src->index, json, strlen(json), src->index_path);
    free(json);
    if (prc)
        return prc;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(src->index, "weight_map"), *e;
    int n = cJSON_GetArraySize(map), rc = HS_OK;
    if (!cJSON_IsObject(map) || !n)
        rc = hs_fail(HS_EFORMAT, "%s: not a sharded-checkpoint index (no \"weight_map\" "
                                 "object of tensor names and shard files)",
                     src->index_path);
    cJSON_ArrayForEach(e, map)
    {
        if (rc)
            break;
        if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring))
            rc = hs_fail(HS_EFORMAT, "%s: weight_map[\"%s\"] must name a shard file in the "
                                     "checkpoint directory",
                         src->index_path, e->string);
    }
    if (!rc && !(src->st = hs_calloc((size_t)n, sizeof *src->st, "checkpoint shards")))
        rc = HS_ENOMEM;
    cJSON_ArrayForEach(e, map)
    {
        if (rc)
            break;
        int seen = 0;
        for (int i = 0; i < src->n && !seen; i++)
            seen = !strcmp(strrchr(src->st[i].path, '/') + 1, e->valuestring);
        if (seen)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        if ((rc = fmt->open(&src->st[src->n], path))) {
            char why[512];
            snprintf(why, sizeof why, "%s", hs_last_error());
            rc = hs_fail(rc, "%s (a shard named by %s)", why, src->index_path);
        } else
            src->n++;
    }
    if (rc)
        sources_close(src);
    return rc;
}

static const format safetensors = { "model.safetensors", hs_st_open },
                    pytorch = { "pytorch_model.bin", hs_pt_open };

/* Safetensors where DIR has them (or has no PyTorch files either: the
 * message then names model.safetensors), else pytorch_model.bin. */
static const format *format_of(const char *dir)
{
    char st[1100], st_index[1100], pt[1100], pt_index[1100];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    snprintf(st_index, sizeof st_index, "%s/model.safetensors.index.json", dir);
    snprintf(pt, sizeof pt, "%s/pytorch_model.bin", dir);
    snprintf(pt_index, sizeof pt_index, "%s/pytorch_model.bin.index.json", dir);
    const int use_pt = !exists(st) && !exists(st_index) && (exists(pt) || exists(pt_index));
    return use_pt ? &pytorch : &safetensors;
}

static int sources_open(sources *src, const char *dir)
{
    return sources_open_as(src, dir, format_of(dir));
}

void hs_checkpoint_file(const char *dir, char *out, size_t n)
{
    const format *fmt = format_of(dir);
    snprintf(out, n, "%s/%s", dir, fmt->name);
    if (!exists(out))
        snprintf(out, n, "%s/%s.index.json", dir, fmt->name);
    if (!exists(out))
        snprintf(out, n, "%s/%s", dir, fmt->name);
}

/* The file holding `name` (NULL when the checkpoint has none). */
static const hs_st_tensor *sources_find(const sources *src, const char *name,
                                        const hs_safetensors **file)
{
    const hs_st_tensor *full = src->has_expanded ? hs_st_find(&src->expanded, name) : NULL;
    if (full) {
        *file = &src->expanded;
        return full;
    }
    *file = &src->st[0];
    if (!src->index)
        return hs_st_find(&src->st[0], name);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(src->index, "weight_map");
    const cJSON *shard = cJSON_GetObjectItemCaseSensitive(map, name);
    if (!cJSON_IsString(shard))
        return NULL;
    for (int i = 0; i < src->n; i++)
        if (!strcmp(strrchr(src->st[i].path, '/') + 1, shard->valuestring)) {
            *file = &src->st[i];
            return hs_st_find(&src->st[i], name);
        }
    return NULL;
}

/* The file's tensor for spec f: the name as written, or with the family's
 * other prefix (GPT-2's "transformer."); *file is the file holding it. */
static const hs_st_tensor *lookup(const sources *src, const hs_model_config *c,
                                  const char *name, const hs_safetensors **file)
{
    const hs_st_tensor *t = sources_find(src, name, file);
    const hs_family_ops *fam = hs_family_ops_of(c->family);
    if (!t && fam && fam->alt_prefix) {
        char prefixed[160];
        snprintf(prefixed, sizeof prefixed, "%s%s", fam->alt_prefix, name);
        const hs_safetensors *other;
        if ((t = sources_find(src, prefixed, &other)))
            *file = other;
    }
    for (int k = 0; !t && fam && fam->alt_name && k < fam->n_alt; k++) {
        char alt[160];
        const hs_safetensors *other;
        if (fam->alt_name(name, k, alt, sizeof alt) && (t = sources_find(src, alt, &other)))
            *file = other;
    }
    return t;
}

/* The file's tensor for f once its name, dtype and shape are what the
 * configuration implies; NULL with the message otherwise. *file is the
 * file holding it. */
static const hs_st_tensor *check_tensor(const hs_model *m, const sources *src,
                                        const hs_file_tensor *f, const hs_safetensors **file)
{
    const hs_st_tensor *t = lookup(src, &m->cfg, f->name, file);
    const hs_safetensors *st = *file;
    if (!t && src->index) {
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(src->index, "weight_map");
        if (cJSON_GetObjectItemCaseSensitive(map, f->name))
            hs_fail(HS_EFORMAT, "%s: missing tensor %s (the shard %s names it)", st->path, f->name,
                    src->index_path);
        else
            hs_fail(HS_EFORMAT, "%s: missing tensor %s (not in its weight_map)", src->index_path,
                    f->name);
        return NULL;
    }
    if (!t) {
        hs_fail(HS_EFORMAT, "%s: missing tensor %s", st->path, f->name);
        return NULL;
    }
    if (t->dtype == HS_DT_OTHER) {
        hs_fail(HS_EFORMAT, "%s: tensor %s: dtype %s not supported (F32, F16, BF16, F64)", st->path,
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

/* The element of the file tensor f holding element (o, i) of its part p
 * (a tensor of rows of `inner` elements). */
static size_t file_index(const hs_file_tensor *f, int p, size_t inner, size_t o, size_t i)
{
    if (f->part[p].transpose)
        return i * (f->ndim == 2 ? (size_t)f->shape[1] : 1) + (size_t)f->part[p].col0 + o;
    return (f->nparts == 1 ? o : hs_file_row(f, p, o)) * inner + i;
}

/* Part p of f (our tensor ti, rows x inner) into dst: the file's order in
 * one read, a fused tensor's rows one read each, a transposed one (GPT-2's
 * Conv1D) in blocks of file rows, whose elements are our rows' columns. */
static int load_part(const hs_safetensors *st, const hs_st_tensor *t, const hs_file_tensor *f,
                     int p, const hs_tensor_info *ti, hs_real *dst)
{
    const size_t rows = (size_t)ti->shape[0], inner = ti->ndim == 2 ? (size_t)ti->shape[1] : 1;
    int rc = HS_OK;
    if (!f->part[p].transpose && f->nparts == 1) /* the file's order */
        return hs_st_read(st, t, 0, ti->size, dst);
    if (!f->part[p].transpose) {
        for (size_t o = 0; !rc && o < rows; o++)
            rc = hs_st_read(st, t, file_index(f, p, inner, o, 0), inner, dst + o * inner);
        return rc;
    }
    enum { BLK = 16 }; /* file rows (our columns i) a block: 64-byte runs of dst */
    hs_real *tmp = hs_calloc(BLK * rows, sizeof(hs_real), "checkpoint transpose");
    if (!tmp)
        return HS_ENOMEM;
    for (size_t i0 = 0; !rc && i0 < inner; i0 += BLK) {
        const size_t ni = inner - i0 < BLK ? inner - i0 : BLK;
        for (size_t i = 0; !rc && i < ni; i++)
            rc = hs_st_read(st, t, file_index(f, p, inner, 0, i0 + i), rows, tmp + i * rows);
        for (size_t o = 0; !rc && o < rows; o++)
            for (size_t i = 0; i < ni; i++)
                dst[o * inner + i0 + i] = tmp[i * rows + o];
    }
    free(tmp);
    return rc;
}

static int load_tensor(hs_model *m, const sources *src, const hs_file_tensor *f)
{
    const hs_safetensors *st;
    const hs_st_tensor *t = check_tensor(m, src, f, &st);
    if (!t)
        return HS_EFORMAT;
    int rc = HS_OK;
    for (int p = 0; !rc && p < f->nparts; p++) {
        const hs_tensor_info *ti = &m->tensors[f->part[p].tensor];
        rc = load_part(st, t, f, p, ti, m->params + ti->offset);
    }
    hs_st_release(st, t);
    return rc;
}

/* ---- weights as stored (stored.h) ---------------------------------------- */

/* The tensors kept in their stored dtype: the matrices the model reads
 * through its GEMMs and its embedding rows, stored in F32, F16 or BF16 (in
 * file tensor ft). Position and token-type tables and T5's relative biases
 * (read element by element, small), MLA's projections (operands of products that take no
 * stored operand) and F64 tensors (rounded once to float) are held as
 * floats. */
static int keeps_stored(const hs_model *m, const hs_tensor_info *t, const hs_st_tensor *ft)
{
    if (t->ndim != 2 || !strcmp(t->name, "wpe.weight") || !strcmp(t->name, "tte.weight") ||
        !strcmp(t->name, "enc.wpe.weight") || strstr(t->name, "rel_bias.") ||
        ft->dtype == HS_DT_F64)
        return 0;
    return !(m->cfg.mla && strstr(t->name, ".attn."));
}

/* Whether hs_checkpoint_load_stored keeps weights as stored: not in the
 * double build (its oracles compute on doubles), nor with
 * HEADSCOPE_WEIGHTS=float (a check's switch: the float copy). */
static int loads_stored(void)
{
#ifdef HEADSCOPE_DOUBLE
    return 0;
#else
    const char *force = getenv("HEADSCOPE_WEIGHTS");
    return !(force && !strcmp(force, "float"));
#endif
}

/* The bytes hs_checkpoint_load_stored holds for file tensor f (t in the
 * file): its stored parts' in the file's dtype, the rest as hs_real. */
static size_t loaded_bytes(const hs_model *m, const hs_file_tensor *f, const hs_st_tensor *t,
                           size_t *packed)
{
    size_t b = 0;
    for (int p = 0; p < f->nparts; p++) {
        const hs_tensor_info *ti = &m->tensors[f->part[p].tensor];
        const int stored = loads_stored() && keeps_stored(m, ti, t);
        b += ti->size * (!stored ? sizeof(hs_real) : hs_dtype_bytes(t->dtype));
#ifndef HEADSCOPE_DOUBLE
        if (stored && ti->ndim == 2)
            *packed += hs_packed_bytes(t->dtype, ti->shape[0], ti->shape[1]);
#else
        (void)packed;
#endif
    }
    return b;
}

/* 1 when an encoder's files hold no tensor of its masked-LM head (the
 * dense transform, its norm, the decoder's bias): a sentence-embedding
 * model saved from BertModel, which is the encoder alone (SPEC §16). */
static int mlm_head_absent(const hs_model_config *c, const sources *src)
{
    hs_model m = { .cfg = *c };
    hs_file_tensor *ft = NULL;
    int n = 0, found = 0;
    if (!hs_tensor_table(c, &m.tensors, &m.n_tensors, &m.n_params) && !file_layout(&m, &ft, &n))
        for (int i = 0; i < n && !found; i++) {
            const char *ours = m.tensors[ft[i].part[0].tensor].name;
            const hs_safetensors *file;
            if (!strncmp(ours, "mlm.", 4) || !strncmp(ours, "ln_f.", 5) ||
                !strncmp(ours, "lm_head.", 8))
                found = lookup(src, c, ft[i].name, &file) != NULL;
        }
    else
        found = 1; /* the load reports what is wrong */
    free(ft);
    free(m.tensors);
    return !found;
}

/* ---- pruned_heads (pruned.h) ---------------------------------------------- */

/* A file tensor of a layer with pruned heads and its full shape. */
typedef struct {
    const hs_safetensors *st;
    const hs_st_tensor *t;
    hs_pruned_span span;
    int64_t full[2];
} pruned_tensor;

typedef struct {
    const hs_model_config *c;
    const pruned_tensor *p;
} expand_ctx;

static int emit_expanded(void *ctx, int i, FILE *f)
{
    const expand_ctx *e = ctx;
    const pruned_tensor *p = &e->p[i];
    const size_t inner = p->t->ndim == 2 ? (size_t)p->t->shape[1] : 1;
    const size_t n = (size_t)p->t->shape[0] * inner;
    const size_t all = (size_t)p->full[0] * (p->t->ndim == 2 ? (size_t)p->full[1] : 1);
    hs_real *in = hs_calloc(n + 1, sizeof *in, "pruned tensor");
    float *small = hs_calloc(n + 1, sizeof *small, "pruned tensor");
    float *out = hs_calloc(all + 1, sizeof *out, "pruned tensor");
    int rc = in && small && out ? hs_st_read(p->st, p->t, 0, n, in) : HS_ENOMEM;
    for (size_t k = 0; !rc && k < n; k++)
        small[k] = (float)in[k];
    if (!rc)
        rc = hs_pruned_expand(e->c, &p->span, p->full, p->t->ndim, small, out);
    if (!rc && fwrite(out, sizeof *out, all, f) != all)
        rc = hs_fail(HS_EIO, "cannot write the expanded tensor %s: %s", p->t->name,
                     strerror(errno));
    free(in), free(small), free(out);
    return rc;
}

/* Every tensor of the files that holds heads of a layer with pruned heads,
 * checked against pruned_heads and written in its full shape (zeros at the
 * pruned heads) to a private file (under $TMPDIR, unlinked once open) that
 * sources_find reads first: the loads then see every head. */
static int expand_pruned(sources *src, const hs_model_config *c)
{
    int n = 0, rc = HS_OK;
    for (int i = 0; i < src->n; i++)
        n += src->st[i].n;
    pruned_tensor *p = hs_calloc((size_t)n + 1, sizeof *p, "pruned tensors");
    hs_st_out *out = hs_calloc((size_t)n + 1, sizeof *out, "pruned tensors");
    if (!p || !out)
        rc = HS_ENOMEM;
    int k = 0;
    for (int i = 0; !rc && i < src->n; i++)
        for (int j = 0; !rc && j < src->st[i].n; j++) {
            const hs_st_tensor *t = &src->st[i].t[j];
            pruned_tensor *q = &p[k];
            if (!hs_pruned_span_of(c, t->name, t->ndim, &q->span))
                continue;
            q->st = &src->st[i], q->t = t;
            q->full[0] = t->shape[0], q->full[1] = t->ndim == 2 ? t->shape[1] : 0;
            q->full[q->span.axis] =
                (int64_t)q->span.blocks * c->n_head[q->span.layer] * c->head_dim;
            int64_t want[2] = { q->full[0], q->full[1] };
            hs_pruned_shape(c, &q->span, want);
            if (t->shape[q->span.axis] != want[q->span.axis])
                rc = hs_fail(HS_EFORMAT, "%s: tensor %s has %lld along dimension %d, but "
                                         "config.json's pruned_heads implies %lld for layer %d "
                                         "(its kept heads times head_dim, per q | k | v block)",
                             src->st[i].path, t->name, (long long)t->shape[q->span.axis],
                             q->span.axis, (long long)want[q->span.axis], q->span.layer);
            const size_t count = (size_t)q->full[0] * (t->ndim == 2 ? (size_t)q->full[1] : 1);
            out[k] = (hs_st_out){ t->name, "F32", t->ndim, q->full, 4 * count };
            k++;
        }
    char path[1100];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/headscope-pruned-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = rc ? -1 : mkstemp(path);
    if (!rc && fd < 0)
        rc = hs_fail(HS_EIO, "%s: cannot create the expanded pruned tensors: %s", path,
                     strerror(errno));
    if (fd >= 0)
        close(fd);
    expand_ctx e = { c, p };
    if (!rc)
        rc = hs_st_write_with(path, out, k, emit_expanded, &e);
    if (!rc && !(rc = hs_st_open(&src->expanded, path)))
        src->has_expanded = 1;
    if (fd >= 0)
        unlink(path); /* open (or failed): nothing stays behind */
    free(p), free(out);
    return rc;
}

/* m's configuration, table and layout (*ft, *n) with every tensor checked
 * against the files' headers (which hs_st_open has checked against their
 * sizes): a config.json that claims more than the files hold is refused
 * before anything is allocated for the parameters. *bytes (when not NULL):
 * what those tensors take in the files and as hs_checkpoint_load_stored
 * holds them. */
/* Marian's sinusoid tables as a checkpoint may store them (SPEC §17: left
 * unread, the positions computed): each stored table's shape [n_ctx, d] and
 * every element within the storage's rounding of the formula
 * (hs_sinusoid_row), else HS_EFORMAT naming the tensor, row and column. */
static int check_sinusoids(const sources *src, const hs_model_config *c)
{
    static const char *const names[] = { "model.encoder.embed_positions.weight",
                                         "model.decoder.embed_positions.weight" };
    const int d = c->d_model, rows = c->n_ctx;
    hs_real *got = hs_calloc((size_t)d, sizeof *got, "position table row");
    hs_real *want = hs_calloc((size_t)d, sizeof *want, "position table row");
    int rc = got && want ? HS_OK : HS_ENOMEM;
    for (int k = 0; !rc && k < 2; k++) {
        const hs_safetensors *st;
        const hs_st_tensor *t = sources_find(src, names[k], &st);
        if (!t)
            continue;
        if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != d || t->dtype == HS_DT_OTHER) {
            rc = hs_fail(HS_EFORMAT, "%s: tensor %s: shape or dtype is not [%d, %d] of floats "
                                     "(max_position_embeddings, d_model)", st->path, names[k],
                         rows, d);
            break;
        }
        /* the storage's rounding of values in [-1, 1] */
        const double tol = t->dtype == HS_DT_BF16 ? 8e-3 : t->dtype == HS_DT_F16 ? 1e-3 : 1e-6;
        for (int r = 0; !rc && r < rows; r++) {
            if ((rc = hs_st_read(st, t, (size_t)r * d, (size_t)d, got)))
                break;
            hs_sinusoid_row(want, r, d);
            for (int i = 0; i < d; i++)
                if (!(fabs((double)got[i] - (double)want[i]) <= tol)) {
                    rc = hs_fail(HS_EFORMAT, "%s: tensor %s row %d column %d is %g where "
                                             "Marian's sinusoid formula gives %g: a table "
                                             "headscope does not compute", st->path, names[k], r,
                                 i, (double)got[i], (double)want[i]);
                    break;
                }
        }
    }
    free(got), free(want);
    return rc;
}

static int open_checked(hs_model *m, const char *dir, sources *src, hs_file_tensor **ft, int *n,
                        hs_checkpoint_bytes *bytes)
{
    memset(m, 0, sizeof *m);
    *ft = NULL;
    hs_model_config c;
    int rc = hs_config_load(&c, dir);
    if (rc || (rc = hs_config_check(&c)))
        return rc;
    if ((rc = sources_open(src, dir)))
        return rc;
    if (c.n_pruned && (rc = expand_pruned(src, &c))) {
        sources_close(src);
        return rc;
    }
    if (c.encoder && !c.headless && mlm_head_absent(&c, src))
        hs_config_make_headless(&c);
    if (c.pos == HS_POS_SINUSOID && (rc = check_sinusoids(src, &c))) {
        sources_close(src);
        return rc;
    }
    m->cfg = c;
    rc = hs_tensor_table(&c, &m->tensors, &m->n_tensors, &m->n_params);
    if (!rc)
        rc = file_layout(m, ft, n);
    const hs_safetensors *file;
    hs_checkpoint_bytes b = { 0, 0, 0 };
    for (int i = 0; !rc && i < *n; i++) {
        const hs_st_tensor *t = check_tensor(m, src, &(*ft)[i], &file);
        if (!t)
            rc = HS_EFORMAT;
        else
            b.stored += t->end - t->begin, b.loaded += loaded_bytes(m, &(*ft)[i], t, &b.packed);
    }
    if (bytes)
        *bytes = b;
    if (rc) {
        free(*ft);
        *ft = NULL;
        sources_close(src);
        hs_model_free(m);
    }
    return rc;
}

int hs_checkpoint_load(hs_model *m, const char *dir)
{
    sources src;
    hs_file_tensor *ft;
    int n, rc = open_checked(m, dir, &src, &ft, &n, NULL);
    if (rc)
        return rc;
    if (!(m->params = hs_calloc_held(m->n_params, sizeof(hs_real), "model parameters")))
        rc = HS_ENOMEM;
    if (!rc)
        hs_weights_bind(&m->w, &m->cfg, m->params);
    for (int i = 0; !rc && i < n; i++)
        rc = load_tensor(m, &src, &ft[i]);
    free(ft);
    sources_close(&src);
    if (rc)
        hs_model_free(m);
    return rc;
}

/* Part p of f (our tensor ti) as stored: the file's bytes in place when
 * mapped and its layout is ours, else in a block of the model's own: the
 * bytes read as they are, or re-laid out once in the file's dtype (fused
 * rows gathered, Conv1D transposed). */
static int store_part(hs_stored *set, const hs_safetensors *st, const hs_st_tensor *t,
                      const hs_file_tensor *f, int p, const hs_tensor_info *ti, int mapped)
{
    const hs_dtype type = t->dtype;
    const size_t es = hs_dtype_bytes(type);
    const unsigned char *src = st->data + t->begin;
    const int ours = f->nparts == 1 && !f->part[p].transpose;
    if (ours && mapped && (uintptr_t)src % es == 0)
        return hs_stored_add(set, (hs_stored_tensor){ ti->offset, ti->size, src, type }, 0);
    unsigned char *dst = hs_calloc_held(ti->size * es, 1, "model parameters");
    if (!dst)
        return HS_ENOMEM;
    const size_t rows = (size_t)ti->shape[0], inner = (size_t)ti->shape[1];
    int rc = HS_OK;
    if (ours) {
        rc = hs_st_read_bytes(st, t, 0, ti->size * es, dst);
    } else if (!f->part[p].transpose) {
        for (size_t o = 0; o < rows; o++)
            memcpy(dst + o * inner * es, src + file_index(f, p, inner, o, 0) * es, inner * es);
    } else { /* file row i holds our column i: read along it */
        for (size_t i = 0; i < inner; i++) {
            const size_t from = file_index(f, p, inner, 0, i);
            if (es == 2)
                for (size_t o = 0; o < rows; o++)
                    memcpy(dst + (o * inner + i) * 2, src + (from + o) * 2, 2);
            else
                for (size_t o = 0; o < rows; o++)
                    memcpy(dst + (o * inner + i) * 4, src + (from + o) * 4, 4);
        }
    }
    if (!rc)
        rc = hs_stored_add(set, (hs_stored_tensor){ ti->offset, ti->size, dst, type }, 1);
    if (rc)
        hs_free_held(dst, ti->size * es, 1);
    return rc;
}

static void sources_release(void *ctx)
{
    sources_close(ctx);
    free(ctx);
}

/* Every mapped file as it was opened (hs_st_unchanged). */
static int sources_unchanged(void *ctx)
{
    const sources *src = ctx;
    int rc = HS_OK;
    for (int i = 0; !rc && i < src->n; i++)
        rc = hs_st_unchanged(&src->st[i]);
    return rc;
}

int hs_checkpoint_load_stored(hs_model *m, const char *dir, hs_weights_place place)
{
    if (!loads_stored())
        return hs_checkpoint_load(m, dir);
    sources *src = hs_calloc(1, sizeof *src, "checkpoint files");
    if (!src)
        return HS_ENOMEM;
    hs_file_tensor *ft;
    int n, rc = open_checked(m, dir, src, &ft, &n, NULL);
    if (rc) {
        free(src);
        return rc;
    }
    const char *how = getenv("HEADSCOPE_WEIGHTS");
    const int mapped = how && !strcmp(how, "mapped")   ? 1
                       : how && !strcmp(how, "copied") ? 0
                       : place == HS_WEIGHTS_DECODING  ? hs_config_seq2seq(&m->cfg)
                                                       : place == HS_WEIGHTS_MAPPED;
    rc = hs_stored_create(&m->stored, m->n_params, &m->params, sources_release, src);
    if (!rc)
        hs_stored_set_check(m->stored, sources_unchanged);
    if (rc) {
        sources_release(src);
        free(ft);
        hs_model_free(m);
        return rc;
    }
    hs_weights_bind(&m->w, &m->cfg, m->params);
    for (int i = 0; !rc && i < n; i++) {
        const hs_safetensors *st;
        const hs_st_tensor *t = check_tensor(m, src, &ft[i], &st);
        for (int p = 0; !rc && p < ft[i].nparts; p++) {
            const hs_tensor_info *ti = &m->tensors[ft[i].part[p].tensor];
            if (keeps_stored(m, ti, t)) {
                rc = store_part(m->stored, st, t, &ft[i], p, ti, mapped);
                if (!mapped)
                    hs_st_release(st, t); /* the pages a re-laying read */
            } else if (!(rc = hs_stored_floats(m->stored, ti->offset, ti->size))) {
                rc = load_part(st, t, &ft[i], p, ti, m->params + ti->offset);
            }
        }
    }
    free(ft);
    if (!rc)
        rc = hs_stored_publish(m->stored);
    if (rc)
        hs_model_free(m);
    return rc;
}

/* Each layer's W_o where the file holds it: its file tensor, the part, and
 * that tensor in the file (the probe's dead-head reads). */
typedef struct {
    const hs_model *m;
    int layer; /* the layer read last: its pages are released once the next is read */
    struct {
        const hs_file_tensor *f;
        int part;
        const hs_safetensors *st;
        const hs_st_tensor *t;
    } wo[HS_MAX_LAYERS];
} wo_in_file;

static hs_real wo_of_file(void *ctx, int l, size_t k)
{
    wo_in_file *w = ctx;
    if (l != w->layer) {
        if (w->layer >= 0)
            hs_st_release(w->wo[w->layer].st, w->wo[w->layer].t);
        w->layer = l;
    }
    const hs_file_tensor *f = w->wo[l].f;
    const hs_tensor_info *ti = &w->m->tensors[f->part[w->wo[l].part].tensor];
    const size_t inner = ti->ndim == 2 ? (size_t)ti->shape[1] : 1;
    return (hs_real)hs_st_get(w->wo[l].st, w->wo[l].t,
                              file_index(f, w->wo[l].part, inner, k / inner, k % inner));
}

int hs_checkpoint_probe(hs_model *m, const char *dir, unsigned char *dead, int *n_dead,
                        hs_checkpoint_bytes *bytes)
{
    sources src;
    hs_file_tensor *ft;
    int n, rc = open_checked(m, dir, &src, &ft, &n, bytes);
    if (rc)
        return rc;
    wo_in_file w = { .m = m, .layer = -1 };
    for (int l = 0; !rc && l < m->cfg.n_layer; l++) {
        char name[64];
        snprintf(name, sizeof name, "h.%d.attn.o_proj.weight", l);
        const int ti = hs_model_find(m, name);
        for (int i = 0; i < n && !w.wo[l].f; i++)
            for (int p = 0; p < ft[i].nparts; p++)
                if (ft[i].part[p].tensor == ti) {
                    w.wo[l].f = &ft[i], w.wo[l].part = p;
                    w.wo[l].t = check_tensor(m, &src, &ft[i], &w.wo[l].st);
                }
        if (!w.wo[l].t)
            rc = hs_fail(HS_EFORMAT, "%s: no tensor holds %s", dir, name);
    }
    if (!rc)
        *n_dead = hs_dead_heads_by(&m->cfg, wo_of_file, &w, dead);
    for (int l = 0; !rc && l < m->cfg.n_layer; l++)
        hs_st_release(w.wo[l].st, w.wo[l].t);
    free(ft);
    sources_close(&src);
    if (rc)
        hs_model_free(m);
    return rc;
}

/* out (the file tensor's elements) from our tensors, in the file's layout. */
static void gather(const hs_model *m, const hs_file_tensor *f, double *out)
{
    const size_t cols = f->ndim == 2 ? (size_t)f->shape[1] : 1;
    for (int p = 0; p < f->nparts; p++) {
        const hs_tensor_info *ti = &m->tensors[f->part[p].tensor];
        const hs_real *src = m->params + ti->offset;
        const size_t rows = (size_t)ti->shape[0], inner = ti->ndim == 2 ? (size_t)ti->shape[1] : 1;
        if (!f->part[p].transpose)
            for (size_t o = 0; o < rows; o++)
                for (size_t k = 0; k < inner; k++)
                    out[hs_file_row(f, p, o) * inner + k] = src[o * inner + k];
        else
            for (size_t o = 0; o < rows; o++)
                for (size_t k = 0; k < inner; k++)
                    out[k * cols + f->part[p].col0 + o] = src[o * inner + k];
    }
}

static size_t hs_file_tensor_count(const hs_file_tensor *f)
{
    return (size_t)f->shape[0] * (f->ndim == 2 ? (size_t)f->shape[1] : 1);
}

typedef struct {
    const hs_model *m;
    const hs_file_tensor *ft;
    double *scratch, *small; /* largest file tensor, twice */
} save_ctx;

/* Tensor i in the file's form: pruned_heads' layers without their pruned
 * heads (pruned.h). */
static void fill_tensor(void *ctx, int i, float *out)
{
    const save_ctx *s = ctx;
    const hs_file_tensor *f = &s->ft[i];
    gather(s->m, f, s->scratch);
    hs_pruned_span span;
    size_t n = hs_file_tensor_count(f);
    const double *from = s->scratch;
    if (hs_pruned_span_of(&s->m->cfg, f->name, f->ndim, &span) &&
        !hs_pruned_reduce(&s->m->cfg, &span, f->shape, f->ndim, s->scratch, s->small)) {
        int64_t shape[2] = { f->shape[0], f->shape[1] };
        hs_pruned_shape(&s->m->cfg, &span, shape);
        n = (size_t)shape[0] * (f->ndim == 2 ? (size_t)shape[1] : 1), from = s->small;
    }
    for (size_t k = 0; k < n; k++)
        out[k] = (float)from[k];
}

int hs_checkpoint_export(const hs_model *m, const char *file_name, double *out, size_t cap,
                         size_t *n)
{
    hs_file_tensor *ft = NULL;
    int nft = 0, rc = file_layout(m, &ft, &nft);
    if (rc)
        return rc;
    rc = hs_fail(HS_EINVAL, "no tensor %s in a %s checkpoint", file_name,
                 hs_family_name(m->cfg.family));
    for (int i = 0; i < nft; i++) {
        if (strcmp(ft[i].name, file_name))
            continue;
        *n = hs_file_tensor_count(&ft[i]);
        if (*n > cap)
            rc = hs_fail(HS_EINVAL, "%s: %zu elements exceed %zu", file_name, *n, cap);
        else
            gather(m, &ft[i], out), rc = HS_OK;
        break;
    }
    free(ft);
    return rc;
}

/* n bytes into path, under a temporary name renamed over it (nothing left
 * at path on a failure). */
static int write_whole(const char *path, const void *bytes, size_t n)
{
    char tmp[1200];
    FILE *f = hs_tmp_fopen(path, tmp, sizeof tmp);
    int ok = f && fwrite(bytes, 1, n, f) == n;
    if (f && fclose(f))
        ok = 0;
    if (!f)
        return HS_EIO;
    if (!ok) {
        unlink(tmp);
        return hs_fail(HS_EIO, "%s: cannot write: %s", path, strerror(errno));
    }
    return hs_tmp_commit(tmp, path, 1);
}

/* A JSON text and a newline into path (write_whole). */
static int write_config(const char *path, const char *json)
{
    const size_t n = strlen(json);
    char *text = hs_calloc(n + 2, 1, "config text");
    if (!text)
        return HS_ENOMEM;
    memcpy(text, json, n);
    text[n] = '\n';
    const int rc = write_whole(path, text, n + 1);
    free(text);
    return rc;
}

int hs_checkpoint_save(const hs_model *m, const char *dir)
{
    /* a network the family's layout cannot express is never written in it */
    if (hs_config_check(&m->cfg))
        return HS_EINVAL;
    if (hs_mkdirs(dir))
        return HS_EIO;
    hs_file_tensor *ft = NULL;
    int n = 0;
    int rc = file_layout(m, &ft, &n);
    if (rc)
        return rc;
    hs_st_spec *specs = hs_calloc((size_t)n, sizeof *specs, "checkpoint specs");
    if (!specs) {
        free(ft);
        return HS_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        specs[i] = (hs_st_spec){ ft[i].name, ft[i].ndim, { ft[i].shape[0], ft[i].shape[1] } };
        hs_pruned_span span; /* pruned_heads: the kept heads only */
        if (hs_pruned_span_of(&m->cfg, ft[i].name, ft[i].ndim, &span))
            hs_pruned_shape(&m->cfg, &span, specs[i].shape);
    }
    size_t largest = 1;
    for (int i = 0; i < n; i++)
        largest = hs_file_tensor_count(&ft[i]) > largest ? hs_file_tensor_count(&ft[i]) : largest;
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    save_ctx ctx = { m, ft, hs_calloc(largest, sizeof(double), "checkpoint write buffer"),
                     hs_calloc(largest, sizeof(double), "checkpoint write buffer") };
    rc = ctx.scratch && ctx.small ? hs_st_write(path, specs, n, fill_tensor, &ctx) : HS_ENOMEM;
    free(ctx.scratch);
    free(ctx.small);
    free(specs);
    free(ft);
    if (rc)
        return rc;

    char *json = hs_config_to_json(&m->cfg);
    if (!json)
        return HS_ENOMEM;
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = write_config(path, json);
    free(json);
    return rc;
}

/* ---- convert --to safetensors --------------------------------------------- */

/* Every tensor of the checkpoint's files, in their order, for the writer. */
typedef struct {
    const sources *src;
    const hs_safetensors **file; /* of each tensor */
    const hs_st_tensor **t;
    hs_st_out *out;
    int n;
} all_tensors;

static int emit_copy(void *ctx, int i, FILE *f)
{
    const all_tensors *a = ctx;
    enum { BLOCK = 1 << 22 };
    const hs_st_tensor *t = a->t[i];
    const size_t bytes = t->end - t->begin;
    unsigned char *buf = malloc(bytes < BLOCK ? bytes + 1 : BLOCK);
    int rc = buf ? HS_OK : hs_fail(HS_ENOMEM, "%s: a copy buffer", t->name);
    for (size_t done = 0; !rc && done < bytes;) {
        const size_t k = bytes - done < BLOCK ? bytes - done : BLOCK;
        rc = hs_st_read_bytes(a->file[i], t, done, k, buf);
        if (!rc && fwrite(buf, 1, k, f) != k)
            rc = hs_fail(HS_EIO, "cannot write tensor %s: %s", t->name, strerror(errno));
        done += k;
    }
    free(buf);
    hs_st_release(a->file[i], t);
    return rc;
}

/* DIR/name copied to OUT/name when DIR has it (a file of at most 1 GiB). */
static int copy_beside(const char *dir, const char *out, const char *name)
{
    char from[1100], to[1100];
    snprintf(from, sizeof from, "%s/%s", dir, name);
    snprintf(to, sizeof to, "%s/%s", out, name);
    if (!exists(from))
        return HS_OK;
    char *bytes;
    size_t n;
    int rc = hs_read_file(&bytes, &n, from, (size_t)1 << 30, 0);
    if (rc)
        return rc;
    rc = write_whole(to, bytes, n);
    free(bytes);
    return rc;
}

/* The tensors into OUT: model.safetensors, or past max_shard bytes the
 * shards model-0000K-of-0000N.safetensors (each tensor whole, a shard begun
 * where the next tensor would pass the limit) and their index. */
static int write_shards(const all_tensors *a, const char *out, size_t max_shard, int *n_shards)
{
    size_t total = 0;
    for (int i = 0; i < a->n; i++)
        total += a->out[i].bytes;
    int *shard = hs_calloc((size_t)a->n + 1, sizeof *shard, "shards"), n = 1, rc = HS_OK;
    if (!shard)
        return HS_ENOMEM;
    size_t used = 0; /* the bytes of the shard begun */
    for (int i = 0; i < a->n; i++) {
        if (used && used + a->out[i].bytes > max_shard)
            n++, used = 0;
        shard[i] = n - 1;
        used += a->out[i].bytes;
    }
    cJSON *index = n > 1 ? cJSON_CreateObject() : NULL, *map = NULL;
    if (index) {
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(index, "metadata"), "total_size",
                                (double)total);
        map = cJSON_AddObjectToObject(index, "weight_map");
    }
    char path[1200], name[64];
    for (int s = 0; !rc && s < n; s++) {
        int first = -1, count = 0;
        for (int i = 0; i < a->n; i++)
            if (shard[i] == s)
                first = first < 0 ? i : first, count++;
        if (n > 1)
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n);
        else
            snprintf(name, sizeof name, "model.safetensors");
        snprintf(path, sizeof path, "%s/%s", out, name);
        all_tensors part = *a; /* a shard's tensors are consecutive */
        part.file += first, part.t += first, part.out += first, part.n = count;
        rc = hs_st_write_with(path, part.out, count, emit_copy, &part);
        for (int i = first; map && i < first + count; i++)
            cJSON_AddStringToObject(map, a->out[i].name, name);
    }
    free(shard);
    if (!rc && index) {
        char *json = cJSON_Print(index);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", out);
        rc = json ? write_config(path, json) : HS_ENOMEM;
        free(json);
    }
    cJSON_Delete(index);
    *n_shards = n;
    return rc;
}

int hs_checkpoint_convert(const char *dir, const char *out, size_t max_shard, int *n_tensors,
                          int *n_shards)
{
    char a_real[PATH_MAX], b_real[PATH_MAX];
    if (realpath(dir, a_real) && realpath(out, b_real) && !strcmp(a_real, b_real))
        return hs_fail(HS_EINVAL, "%s: the output folder is the checkpoint's own", out);
    hs_model m;
    sources src;
    hs_file_tensor *ft;
    int n_ft, rc = open_checked(&m, dir, &src, &ft, &n_ft, NULL); /* checked as a load is */
    if (rc)
        return rc;
    free(ft);
    hs_model_free(&m);
    int n = 0;
    for (int i = 0; i < src.n; i++)
        n += src.st[i].n;
    all_tensors a = { &src, hs_calloc((size_t)n + 1, sizeof *a.file, "convert"),
                      hs_calloc((size_t)n + 1, sizeof *a.t, "convert"),
                      hs_calloc((size_t)n + 1, sizeof *a.out, "convert"), n };
    rc = a.file && a.t && a.out ? hs_mkdirs(out) : HS_ENOMEM;
    a.n = 0; /* of a sharded checkpoint's, the tensors its index places in each file */
    for (int i = 0; !rc && i < src.n; i++)
        for (int j = 0; !rc && j < src.st[i].n; j++) {
            const hs_st_tensor *t = &src.st[i].t[j];
            const hs_safetensors *placed;
            if (src.index && (sources_find(&src, t->name, &placed) != t || placed != &src.st[i]))
                continue;
            if (!strcmp(t->name, "__metadata__"))
                rc = hs_fail(HS_EFORMAT, "%s: a tensor named __metadata__ cannot be written as "
                                         "safetensors",
                             src.st[i].path);
            a.file[a.n] = &src.st[i], a.t[a.n] = t;
            a.out[a.n++] = (hs_st_out){ t->name, t->dtype_name, t->ndim, t->shape,
                                        t->end - t->begin };
        }
    char config[1100];
    snprintf(config, sizeof config, "%s/config.json", out);
    if (!rc && unlink(config) && errno != ENOENT) /* a folder without it is no checkpoint yet */
        rc = hs_fail(HS_EIO, "%s: cannot replace: %s", config, strerror(errno));
    if (!rc)
        rc = write_shards(&a, out, max_shard, n_shards);
    static const char *beside[] = { "tokenizer.json", "tokenizer_config.json",
                                    "special_tokens_map.json", "added_tokens.json",
                                    "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model",
                                    "spiece.model", "sentencepiece.bpe.model", "source.spm",
                                    "target.spm", "generation_config.json", "config.json" };
    for (size_t i = 0; !rc && i < sizeof beside / sizeof *beside; i++)
        rc = copy_beside(dir, out, beside[i]); /* config.json last: the folder is complete */
    if (!rc)
        rc = sources_unchanged(&src);
    *n_tensors = a.n;
    free(a.file);
    free(a.t);
    free(a.out);
    sources_close(&src);
    return rc;
}

int hs_checkpoint_convert_kv_heads(const char *dir, const char *out, int G,
                                   hs_kv_conversion *done)
{
    hs_model in, conv;
    int rc = hs_checkpoint_load(&in, dir);
    if (rc)
        return rc;
    if (!(rc = hs_convert_kv_heads(&conv, &in, G))) {
        rc = hs_checkpoint_save(&conv, out);
        *done = (hs_kv_conversion){ conv.cfg.family, in.cfg.n_kv_head[0] / G, in.n_params,
                                    conv.n_params };
        hs_model_free(&conv);
    }
    hs_model_free(&in);
    return rc;
}
