/* The map file's reader (maps.h): every attribute's type, size and range
 * and every dataset's shape, type and storage checked before use, so that a
 * hostile file is refused with HS_EFORMAT and nothing left open. */
#include "maps.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "maps_h5.h"
#include "utf8.h"

/* Attributes are read with their type class, size and number of values
 * checked first; anything else is refused before HDF5 converts it. */
enum {
    MAX_STR_ATTR = 1 << 24,   /* bytes of a fixed-length string attribute */
    MAX_SEQ_LEN = 1 << 14,    /* T: readers hold T x T floats */
    MAX_CHUNK = 1 << 28,      /* elements of one chunk */
};

/* Opens attribute `name` of obj when it exists with type class cls and
 * between 1 and max values in a scalar or 1-D space; *type and *n are set.
 * Returns the attribute id, or -1 with nothing left open. */
static hid_t open_attr(hid_t obj, const char *name, H5T_class_t cls, hssize_t max, hid_t *type,
                       hssize_t *n)
{
    if (H5Aexists(obj, name) <= 0)
        return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = a < 0 ? -1 : H5Aget_type(a), sp = a < 0 ? -1 : H5Aget_space(a);
    const H5S_class_t sc = sp < 0 ? H5S_NO_CLASS : H5Sget_simple_extent_type(sp);
    *n = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    const int ok = t >= 0 && H5Tget_class(t) == cls && (sc == H5S_SCALAR ||
                   (sc == H5S_SIMPLE && H5Sget_simple_extent_ndims(sp) == 1)) &&
                   *n >= 1 && *n <= max;
    if (sp >= 0)
        H5Sclose(sp);
    if (ok) {
        *type = t;
        return a;
    }
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    return -1;
}

/* One string value (variable- or fixed-length, ASCII or UTF-8) into out
 * (truncated to cap; control characters and bytes that are not well-formed
 * UTF-8 replaced by '?', since strings from a map file are printed) and/or
 * a malloc'd copy in *dup. -1: absent or not a string. */
static int get_str_attr(hid_t obj, const char *name, char *out, size_t cap, char **dup)
{
    hid_t t;
    hssize_t n;
    hid_t a = open_attr(obj, name, H5T_STRING, 1, &t, &n);
    if (a < 0)
        return -1;
    const H5T_cset_t cs = H5Tget_cset(t);
    const htri_t var = H5Tis_variable_str(t);
    const size_t size = H5Tget_size(t);
    char *s = NULL;
    int rc = -1;
    hid_t mt = H5Tcopy(H5T_C_S1);
    if (mt >= 0 && (cs == H5T_CSET_ASCII || cs == H5T_CSET_UTF8) && H5Tset_cset(mt, cs) >= 0) {
        if (var > 0) {
            if (H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &s) >= 0 && s) {
                rc = 0;
            } else if (s) {
                H5free_memory(s);
                s = NULL;
            }
        } else if (var == 0 && size >= 1 && size <= MAX_STR_ATTR) {
            char *buf = calloc(size + 1, 1);
            if (buf && H5Tset_size(mt, size + 1) >= 0 && H5Tset_strpad(mt, H5T_STR_NULLTERM) >= 0 &&
                H5Aread(a, mt, buf) >= 0) {
                buf[size] = 0;
                rc = 0;
            }
            if (!rc) {
                if (out) {
                    snprintf(out, cap, "%s", buf);
                    hs_utf8_sanitize(out, 1);
                }
                if (dup)
                    *dup = strdup(buf);
            }
            free(buf);
        }
    }
    if (s) {
        if (out) {
            snprintf(out, cap, "%s", s);
            hs_utf8_sanitize(out, 1);
        }
        if (dup)
            *dup = strdup(s);
        H5free_memory(s);
    }
    if (mt >= 0)
        H5Tclose(mt);
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* 1..max integers, each in [lo, hi], into v. Returns the count or -1. */
static int get_int_attr(hid_t obj, const char *name, int *v, int max, long long lo, long long hi)
{
    hid_t t;
    hssize_t n;
    hid_t a = open_attr(obj, name, H5T_INTEGER, max, &t, &n);
    if (a < 0)
        return -1;
    long long buf[HS_MAX_HEADS > 1 ? HS_MAX_HEADS : 1];
    int rc = H5Tget_size(t) <= 8 && n <= (hssize_t)(sizeof buf / sizeof buf[0]) &&
                     H5Aread(a, H5T_NATIVE_LLONG, buf) >= 0
                 ? (int)n
                 : -1;
    for (int i = 0; rc > 0 && i < n; i++) {
        if (buf[i] < lo || buf[i] > hi)
            rc = -1;
        else
            v[i] = (int)buf[i];
    }
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* A dataset's storage as we write it: contiguous in this file, or chunked
 * with at most MAX_CHUNK elements a chunk, filters only shuffle and
 * deflate. Contiguous data may be kept in external files the dataset
 * names (any file of the reader's disk, shown as attention weights): not
 * ours, refused. */
static int plain_storage(hid_t d)
{
    hid_t pl = H5Dget_create_plist(d);
    if (pl < 0)
        return 0;
    int ok = 0;
    const H5D_layout_t lay = H5Pget_layout(pl);
    if (lay == H5D_CONTIGUOUS) {
        ok = H5Pget_external_count(pl) == 0;
    } else if (lay == H5D_CHUNKED) {
        hsize_t c[H5S_MAX_RANK];
        const int rank = H5Pget_chunk(pl, H5S_MAX_RANK, c);
        unsigned long long prod = 1;
        ok = rank >= 1 && rank <= 4;
        for (int i = 0; ok && i < rank; i++)
            ok = c[i] >= 1 && !__builtin_mul_overflow(prod, (unsigned long long)c[i], &prod) &&
                 prod <= MAX_CHUNK;
        const int nf = ok ? H5Pget_nfilters(pl) : -1;
        ok = ok && nf >= 0 && nf <= 2;
        for (int i = 0; ok && i < nf; i++) {
            unsigned flags, cd[8];
            size_t ncd = 8;
            char fname[64];
            const H5Z_filter_t f = H5Pget_filter2(pl, (unsigned)i, &flags, &ncd, cd, sizeof fname,
                                                  fname, NULL);
            ok = f == H5Z_FILTER_SHUFFLE || f == H5Z_FILTER_DEFLATE;
        }
    }
    H5Pclose(pl);
    return ok;
}

/* 1 when each component of the path name ("layer_03/attn") exists as a
 * hard link: an object of this file. A soft link may loop or point
 * anywhere in it, an external link opens another file the map file names
 * (a FIFO, say, or one read from the victim's disk): neither is written by
 * capture, both are refused before HDF5 follows them. */
static int hard_path(hid_t file, const char *name)
{
    char part[64];
    for (const char *slash = name;; slash++) {
        slash = strchr(slash, '/');
        const size_t n = slash ? (size_t)(slash - name) : strlen(name);
        if (n >= sizeof part)
            return 0;
        memcpy(part, name, n);
        part[n] = 0;
        H5L_info_t li;
        if (H5Lexists(file, part, H5P_DEFAULT) <= 0 ||
            H5Lget_info(file, part, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD)
            return 0;
        if (!slash)
            return 1;
    }
}

/* Opens name as a dataset of `rank` dims (each at most INT_MAX) stored as
 * plain_storage allows; -1 otherwise, nothing left open. */
static hid_t open_dataset(hid_t file, const char *name, int rank, hsize_t *dims)
{
    if (!hard_path(file, name))
        return -1;
    H5O_info_t oi;
    if (H5Oget_info_by_name2(file, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
        oi.type != H5O_TYPE_DATASET)
        return -1;
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    hid_t sp = d < 0 ? -1 : H5Dget_space(d);
    int ok = sp >= 0 && H5Sget_simple_extent_type(sp) == H5S_SIMPLE &&
             H5Sget_simple_extent_ndims(sp) == rank &&
             H5Sget_simple_extent_dims(sp, dims, NULL) == rank && plain_storage(d);
    for (int i = 0; ok && i < rank; i++)
        ok = dims[i] <= INT_MAX;
    if (sp >= 0)
        H5Sclose(sp);
    if (!ok && d >= 0) {
        H5Dclose(d);
        d = -1;
    }
    return d;
}

/* t is IEEE binary32 (either byte order: HDF5 converts it) or binary16
 * little-endian (read raw and converted in our code), nothing exotic for
 * HDF5's float conversion to handle. */
static int ieee_float(hid_t t, size_t size)
{
    if (H5Tget_class(t) != H5T_FLOAT)
        return 0;
    if (size == 4)
        return H5Tequal(t, H5T_IEEE_F32LE) > 0 || H5Tequal(t, H5T_IEEE_F32BE) > 0;
    size_t spos, epos, esize, mpos, msize;
    return size == 2 && H5Tget_order(t) == H5T_ORDER_LE && H5Tget_precision(t) == 16 &&
           H5Tget_offset(t) == 0 && H5Tget_ebias(t) == 15 &&
           H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos == 15 &&
           epos == 10 && esize == 5 && mpos == 0 && msize == 10;
}

struct hs_maps_reader {
    char path[1024];
    hid_t file, tokens;
    hid_t text; /* /token_text (an encoder-decoder's /target_token_text), or -1 */
    hid_t src, src_text; /* an encoder-decoder's /source_tokens, /source_token_text, or -1 */
    hid_t dsets[HS_MAPS_MAX_LAYERS];
    hid_t csr[3];        /* a features file's /features/indptr, indices, values, or -1 */
    hid_t mask;          /* /attention_mask [N, T] (a task's or --lines' padding), or -1 */
    long long csr_nnz;
    hs_maps_info info;
};

/* Layer l's dataset of attention type attn, checked against the file's
 * sequence count: a float type of 2 or 4 bytes, [N, nh, nq, keys] with nh =
 * the number of distinct head ids in [0, HS_MAX_HEADS), 0 <= query_start
 * and query_start + nq <= rows, attribute layer = l. */
static int open_layer(hs_maps_reader *r, int l, const char *name, int attn, int rows, int keys)
{
    hs_maps_info *in = &r->info;
    hs_maps_layer_info *li = &in->layers[in->n_layers];
    hsize_t dims[4] = { 0 };
    hid_t d = open_dataset(r->file, name, 4, dims);
    hid_t t = d < 0 ? -1 : H5Dget_type(d);
    const size_t ts = t < 0 ? 0 : H5Tget_size(t);
    int ok = t >= 0 && ieee_float(t, ts), layer = -1;
    if (ok) {
        li->layer = l;
        li->attn = attn;
        li->half = ts == 2;
        li->nh = get_int_attr(d, "heads", li->heads, HS_MAX_HEADS, 0, HS_MAX_HEADS - 1);
        for (int i = 0; ok && i < li->nh; i++)
            for (int k = 0; ok && k < i; k++)
                ok = li->heads[i] != li->heads[k];
        ok = ok && li->nh >= 1 && (hsize_t)li->nh == dims[1] &&
             get_int_attr(d, "query_start", &li->q0, 1, 0, rows - 1) == 1 &&
             get_int_attr(d, "layer", &layer, 1, 0, HS_MAPS_MAX_LAYERS - 1) == 1 && layer == l;
        li->nq = (int)dims[2];
        li->S = (int)dims[3];
        ok = ok && (long long)dims[0] == in->n_seq && li->S == keys && li->nq >= 1 &&
             (long long)li->q0 + li->nq <= rows;
    }
    if (t >= 0)
        H5Tclose(t);
    if (!ok) {
        if (d >= 0)
            H5Dclose(d);
        return hs_fail(HS_EFORMAT, "%s: /%s does not match the documented layout (float "
                       "[N, heads, queries, %d], attributes layer=%d, distinct heads, "
                       "0 <= query_start, query_start + queries <= %d)", r->path, name,
                       keys, l, rows);
    }
    r->dsets[in->n_layers++] = d;
    return HS_OK;
}

/* /name when the file has it (*d -1 otherwise): variable-length strings
 * (ASCII or UTF-8) [N, cols], beside the ids of `beside`. */
static int open_text(hs_maps_reader *r, const char *name, hid_t *d, int cols, const char *beside)
{
    hs_maps_info *in = &r->info;
    *d = -1;
    if (H5Lexists(r->file, name, H5P_DEFAULT) <= 0)
        return HS_OK;
    hsize_t dims[2] = { 0, 0 };
    *d = open_dataset(r->file, name, 2, dims);
    hid_t t = *d < 0 ? -1 : H5Dget_type(*d);
    const int ok = t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0 &&
                   (H5Tget_cset(t) == H5T_CSET_UTF8 || H5Tget_cset(t) == H5T_CSET_ASCII) &&
                   (long long)dims[0] == in->n_seq && dims[1] == (hsize_t)cols;
    if (t >= 0)
        H5Tclose(t);
    if (!ok)
        return hs_fail(HS_EFORMAT, "%s: /%s is not variable-length strings [%lld, %d] "
                       "beside /%s", r->path, name, in->n_seq, cols, beside);
    return HS_OK;
}

/* An integer dataset /name [N, cols] (cols 0: any, set here). */
static hid_t open_ids(hs_maps_reader *r, const char *name, int *cols)
{
    hsize_t d[2] = { 0, 0 };
    hid_t ds = open_dataset(r->file, name, 2, d);
    hid_t t = ds < 0 ? -1 : H5Dget_type(ds);
    const int ok = t >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) <= 8 &&
                   d[1] >= 1 && d[1] <= MAX_SEQ_LEN && (!*cols || d[1] == (hsize_t)*cols) &&
                   (long long)d[0] == r->info.n_seq;
    if (t >= 0)
        H5Tclose(t);
    if (!ok) {
        if (ds >= 0)
            H5Dclose(ds);
        hs_fail(HS_EFORMAT, "%s: /%s is missing or not integer [%lld, %s]", r->path, name,
                r->info.n_seq, *cols ? "T" : "S");
        return -1;
    }
    *cols = (int)d[1];
    return ds;
}

/* An encoder-decoder's maps (the group /encoder) as layers: the source's
 * ids and strings, then /encoder/layer_LL/attn [N, H, S, S], and
 * /decoder/layer_LL/attn [N, H, T, T] and /cross [N, H, T, S]. */
static int open_seq2seq(hs_maps_reader *r)
{
    hs_maps_info *in = &r->info;
    in->seq2seq = 1;
    int cols = 0;
    if ((r->src = open_ids(r, "source_tokens", &cols)) < 0)
        return HS_EFORMAT;
    in->src_len = cols;
    int rc = open_text(r, "source_token_text", &r->src_text, cols, "source_tokens");
    in->has_source_text = r->src_text >= 0;
    const int S = in->src_len, T = in->seq_len;
    static const struct { const char *stack, *name; int attn; } kinds[] = {
        { "encoder", "attn", 1 }, { "decoder", "attn", 2 }, { "decoder", "cross", 3 } };
    for (int k = 0; !rc && k < 3; k++)
        for (int l = 0; !rc && l < HS_MAPS_MAX_LAYERS && in->n_layers < HS_MAPS_MAX_LAYERS; l++) {
            char name[64];
            snprintf(name, sizeof name, "%s/layer_%02d", kinds[k].stack, l);
            if (H5Lexists(r->file, kinds[k].stack, H5P_DEFAULT) <= 0 ||
                H5Lexists(r->file, name, H5P_DEFAULT) <= 0)
                break;
            snprintf(name, sizeof name, "%s/layer_%02d/%s", kinds[k].stack, l, kinds[k].name);
            rc = open_layer(r, l, name, kinds[k].attn, kinds[k].attn == 1 ? S : T,
                            kinds[k].attn == 2 ? T : S);
        }
    return rc;
}

/* A features file's group: its attributes (d_sae, run_id, hook_name) and
 * the three CSR datasets, indptr holding one row per token and a start. */
static int open_features(hs_maps_reader *r)
{
    hs_maps_info *in = &r->info;
    hid_t g = H5Gopen2(r->file, "features", H5P_DEFAULT);
    int bad = g < 0 || get_int_attr(g, "d_sae", &in->d_sae, 1, 1, 1 << 24) < 0 ||
              get_int_attr(g, "run_id", &in->features_run, 1, 0, INT_MAX) < 0 ||
              get_int_attr(g, "vocab_size", &in->vocab_size, 1, 1, INT_MAX) < 0 ||
              get_str_attr(g, "hook_name", in->features_hook, sizeof in->features_hook, NULL);
    if (g >= 0)
        H5Gclose(g);
    static const char *const names[3] = { "features/indptr", "features/indices",
                                          "features/values" };
    hsize_t dims[3][1] = { { 0 }, { 0 }, { 0 } };
    for (int i = 0; !bad && i < 3; i++)
        bad = (r->csr[i] = open_dataset(r->file, names[i], 1, dims[i])) < 0;
    const long long rows = in->n_seq * (long long)in->seq_len;
    if (!bad && ((long long)dims[0][0] != rows + 1 || dims[1][0] != dims[2][0]))
        bad = 1;
    r->csr_nnz = bad ? 0 : (long long)dims[1][0];
    in->features = !bad;
    return bad ? hs_fail(HS_EFORMAT, "%s: /features is not a CSR of the file's %lld tokens "
                         "(attributes d_sae, run_id, vocab_size, hook_name; indptr [tokens + 1], indices "
                         "and values of one length)", r->path, rows)
               : HS_OK;
}

/* Elements first .. first + n - 1 of the 1-D dataset d as mtype into out. */
static int read_slice(hid_t d, hid_t mtype, long long first, long long n, void *out)
{
    if (n <= 0)
        return 0;
    hsize_t start = (hsize_t)first, count = (hsize_t)n;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &count, NULL);
    herr_t rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (rc >= 0)
        rc = H5Dread(d, mtype, ms, fs, H5P_DEFAULT, out);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? -1 : 0;
}

int hs_maps_read_features(hs_maps_reader *r, long long n, long long *indptr, int32_t **indices,
                          float **values)
{
    const hs_maps_info *in = &r->info;
    const int T = in->seq_len;
    *indices = NULL, *values = NULL;
    if (!in->features)
        return hs_fail(HS_EINVAL, "%s holds no features", r->path);
    if (n < 0 || n >= in->n_seq)
        return hs_fail(HS_EINVAL, "%s: no sequence %lld", r->path, n);
    if (read_slice(r->csr[0], H5T_NATIVE_LLONG, n * T, T + 1, indptr))
        return hs_maps_h5_fail(r->path, "reading /features/indptr");
    const long long first = indptr[0];
    for (int t = 0; t <= T; t++) {
        if (indptr[t] < first || indptr[t] > r->csr_nnz || (t && indptr[t] < indptr[t - 1]))
            return hs_fail(HS_EFORMAT, "%s: /features/indptr of sequence %lld is not increasing "
                           "within the %lld entries", r->path, n, r->csr_nnz);
        indptr[t] -= first;
    }
    const long long k = indptr[T];
    int32_t *idx = malloc(sizeof *idx * (size_t)(k ? k : 1));
    float *val = malloc(sizeof *val * (size_t)(k ? k : 1));
    int rc = idx && val ? HS_OK : hs_fail(HS_ENOMEM, "out of memory for features");
    if (!rc && (read_slice(r->csr[1], H5T_NATIVE_INT32, first, k, idx) ||
                read_slice(r->csr[2], H5T_NATIVE_FLOAT, first, k, val)))
        rc = hs_maps_h5_fail(r->path, "reading /features");
    for (long long i = 0; !rc && i < k; i++)
        if (idx[i] < 0 || idx[i] >= in->d_sae)
            rc = hs_fail(HS_EFORMAT, "%s: /features/indices holds %d, outside 0 .. %d", r->path,
                         idx[i], in->d_sae - 1);
    if (rc) {
        free(idx), free(val);
        return rc;
    }
    *indices = idx, *values = val;
    return HS_OK;
}

int hs_maps_open_here(hs_maps_reader **out, const char *path)
{
    *out = NULL;
    hs_maps_h5_quiet();
    FILE *f = hs_fopen_regular(path); /* a FIFO or a folder: refused, never read */
    if (!f)
        return HS_EIO;
    const long long heap = hs_maps_bad_global_heap(f);
    if (heap >= 0)
        return hs_fail(HS_EFORMAT, "%s: malformed HDF5 global heap at byte %lld (where "
                       "variable-length strings are kept)", path, heap);
    hs_maps_reader *r = hs_calloc(1, sizeof *r, "maps reader");
    if (!r)
        return HS_ENOMEM;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->tokens = r->text = r->src = r->src_text = -1;
    r->csr[0] = r->csr[1] = r->csr[2] = r->mask = -1;
    r->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (r->file < 0) {
        free(r);
        return hs_fail(HS_EFORMAT, "%s: not an HDF5 file (or a truncated one)", path);
    }
    hs_maps_info *in = &r->info;
    char format[64] = "";
    int rc = HS_OK;
    if (get_str_attr(r->file, "format", format, sizeof format, NULL) ||
        strcmp(format, "headscope-maps"))
        rc = hs_fail(HS_EFORMAT, "%s: not a headscope map file (no string attribute format="
                     "\"headscope-maps\")", path);
    else if (get_int_attr(r->file, "version", &in->version, 1, INT_MIN, INT_MAX) < 0 ||
             in->version != 1)
        rc = hs_fail(HS_EFORMAT, "%s: unsupported version %d (or not an integer attribute)",
                     path, in->version);
    else if (get_int_attr(r->file, "complete", &in->complete, 1, 0, 1) < 0 ||
             get_int_attr(r->file, "seq_len", &in->seq_len, 1, 1, MAX_SEQ_LEN) < 0)
        rc = hs_fail(HS_EFORMAT, "%s: missing or bad complete (0|1) or seq_len (1..%d) "
                     "attribute", path, MAX_SEQ_LEN);
    if (!rc) {
        get_str_attr(r->file, "model_sha256", in->model_sha256, sizeof in->model_sha256, NULL);
        get_str_attr(r->file, "data_sha256", in->data_sha256, sizeof in->data_sha256, NULL);
        get_str_attr(r->file, "data_path", in->data_path, sizeof in->data_path, NULL);
        get_str_attr(r->file, "tool_version", in->tool_version, sizeof in->tool_version, NULL);
        get_str_attr(r->file, "model_config", NULL, 0, &in->model_config);
        hsize_t d[2] = { 0, 0 };
        r->tokens = open_dataset(r->file, "tokens", 2, d);
        hid_t t = r->tokens < 0 ? -1 : H5Dget_type(r->tokens);
        if (t < 0 || H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) > 8 ||
            d[1] != (hsize_t)in->seq_len)
            rc = hs_fail(HS_EFORMAT, "%s: /tokens is missing or not integer [N, %d]", path,
                         in->seq_len);
        if (t >= 0)
            H5Tclose(t);
        in->n_seq = (long long)d[0];
    }
    const int s2s = !rc && H5Lexists(r->file, "encoder", H5P_DEFAULT) > 0;
    if (!rc)
        rc = open_text(r, s2s ? "target_token_text" : "token_text", &r->text, in->seq_len,
                       "tokens");
    in->has_token_text = r->text >= 0;
    if (!rc && s2s)
        rc = open_seq2seq(r);
    if (!rc && H5Lexists(r->file, "features", H5P_DEFAULT) > 0)
        rc = open_features(r);
    if (!rc && H5Lexists(r->file, "attention_mask", H5P_DEFAULT) > 0) {
        int cols = 0;
        if ((r->mask = open_ids(r, "attention_mask", &cols)) < 0 || cols != in->seq_len)
            rc = hs_fail(HS_EFORMAT, "%s: /attention_mask is not integer [%lld, %d]", path,
                         in->n_seq, in->seq_len);
        in->has_attention_mask = !rc;
    }
    for (int l = 0; !rc && !s2s && l < HS_MAPS_MAX_LAYERS; l++) {
        char name[32];
        snprintf(name, sizeof name, "layer_%02d", l);
        if (H5Lexists(r->file, name, H5P_DEFAULT) <= 0)
            continue;
        snprintf(name, sizeof name, "layer_%02d/attn", l);
        rc = open_layer(r, l, name, 0, in->seq_len, in->seq_len);
    }
    if (rc) {
        hs_maps_close(r);
        return rc;
    }
    *out = r;
    return HS_OK;
}

const hs_maps_info *hs_maps_get_info(const hs_maps_reader *r) { return &r->info; }

int hs_maps_read(hs_maps_reader *r, int li, long long n, int hi, float *out)
{
    const hs_maps_info *in = &r->info;
    if (li < 0 || li >= in->n_layers || n < 0 || n >= in->n_seq || hi < 0 ||
        hi >= in->layers[li].nh)
        return hs_fail(HS_EINVAL, "%s: no map at layer index %d, sequence %lld, head index %d",
                       r->path, li, n, hi);
    const hs_maps_layer_info *l = &in->layers[li];
    hsize_t start[4] = { (hsize_t)n, (hsize_t)hi, 0, 0 }, count[4] = { 1, 1, (hsize_t)l->nq,
                                                                      (hsize_t)l->S };
    hid_t fs = H5Dget_space(r->dsets[li]), ms = H5Screate_simple(4, count, NULL);
    herr_t rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    const size_t cnt = (size_t)l->nq * l->S;
    if (rc >= 0 && l->half) {
        uint16_t *raw = malloc(cnt * sizeof *raw);
        hid_t t = H5Dget_type(r->dsets[li]);
        rc = raw ? H5Dread(r->dsets[li], t, ms, fs, H5P_DEFAULT, raw) : -1;
        for (size_t k = 0; rc >= 0 && k < cnt; k++)
            out[k] = hs_half_to_float(raw[k]);
        H5Tclose(t);
        free(raw);
    } else if (rc >= 0) {
        rc = H5Dread(r->dsets[li], H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, out);
    }
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? hs_maps_h5_fail(r->path, "reading a map") : HS_OK;
}

/* Row n of the integer dataset d [N, cols] into out. */
static int read_ids(hs_maps_reader *r, hid_t d, long long n, int cols, int32_t *out)
{
    if (n < 0 || n >= r->info.n_seq)
        return hs_fail(HS_EINVAL, "%s: no sequence %lld", r->path, n);
    hsize_t start[2] = { (hsize_t)n, 0 }, count[2] = { 1, (hsize_t)cols };
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(2, count, NULL);
    herr_t rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    if (rc >= 0)
        rc = H5Dread(d, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, out);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? hs_maps_h5_fail(r->path, "reading tokens") : HS_OK;
}

/* Row n of the string dataset d [N, cols] into out (each malloc'd). */
static int read_text(hs_maps_reader *r, hid_t d, long long n, int cols, char **out)
{
    for (int t = 0; t < cols; t++)
        out[t] = NULL;
    if (d < 0)
        return hs_fail(HS_EINVAL, "%s holds no token strings", r->path);
    if (n < 0 || n >= r->info.n_seq)
        return hs_fail(HS_EINVAL, "%s: no sequence %lld", r->path, n);
    hsize_t start[2] = { (hsize_t)n, 0 }, count[2] = { 1, (hsize_t)cols };
    char **raw = calloc((size_t)cols, sizeof *raw);
    hid_t ft = H5Dget_type(d), mt = H5Tcopy(H5T_C_S1);
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(2, count, NULL);
    herr_t rc = raw && ft >= 0 && mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 &&
                        H5Tset_cset(mt, H5Tget_cset(ft)) >= 0
                    ? H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL)
                    : -1;
    if (rc >= 0)
        rc = H5Dread(d, mt, ms, fs, H5P_DEFAULT, raw);
    const int read = rc >= 0;
    for (int t = 0; rc >= 0 && t < cols; t++) {
        out[t] = strdup(raw[t] ? raw[t] : "");
        if (!out[t])
            rc = -1;
        else
            hs_utf8_sanitize(out[t], 0); /* a token may be a newline */
    }
    if (read)
        H5Dvlen_reclaim(mt, ms, H5P_DEFAULT, raw);
    free(raw);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Tclose(mt);
    H5Tclose(ft);
    if (rc < 0) {
        hs_maps_free_token_text(out, cols);
        return hs_maps_h5_fail(r->path, "reading token strings");
    }
    return HS_OK;
}

int hs_maps_read_tokens(hs_maps_reader *r, long long n, int32_t *out)
{
    return read_ids(r, r->tokens, n, r->info.seq_len, out);
}

int hs_maps_read_token_text(hs_maps_reader *r, long long n, char **out)
{
    return read_text(r, r->text, n, r->info.seq_len, out);
}

int hs_maps_read_attention_mask(hs_maps_reader *r, long long n, int32_t *out)
{
    if (r->mask < 0)
        return hs_fail(HS_EINVAL, "%s holds no /attention_mask", r->path);
    int rc = read_ids(r, r->mask, n, r->info.seq_len, out);
    for (int t = 0; !rc && t < r->info.seq_len; t++)
        if (out[t] != 0 && out[t] != 1)
            rc = hs_fail(HS_EFORMAT, "%s: /attention_mask holds %d (0 or 1 only)", r->path, out[t]);
    return rc;
}

int hs_maps_read_source(hs_maps_reader *r, long long n, int32_t *ids, char **text)
{
    if (!r->info.seq2seq)
        return hs_fail(HS_EINVAL, "%s holds one stack's maps (no /source_tokens)", r->path);
    const int rc = read_ids(r, r->src, n, r->info.src_len, ids);
    return rc || !text ? rc : read_text(r, r->src_text, n, r->info.src_len, text);
}

void hs_maps_free_token_text(char **text, int T)
{
    for (int t = 0; text && t < T; t++) {
        free(text[t]);
        text[t] = NULL;
    }
}

void hs_maps_close(hs_maps_reader *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->info.n_layers; i++)
        H5Dclose(r->dsets[i]);
    if (r->tokens >= 0)
        H5Dclose(r->tokens);
    if (r->text >= 0)
        H5Dclose(r->text);
    if (r->src >= 0)
        H5Dclose(r->src);
    if (r->src_text >= 0)
        H5Dclose(r->src_text);
    for (int i = 0; i < 3; i++)
        if (r->csr[i] >= 0)
            H5Dclose(r->csr[i]);
    if (r->mask >= 0)
        H5Dclose(r->mask);
    if (r->file >= 0)
        H5Fclose(r->file);
    free(r->info.model_config);
    free(r);
}
