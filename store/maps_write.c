/* The map file's writer (maps.h): the file's header and datasets on the
 * caller's thread, then appends converted into one of two buffers and
 * written, in order, by one I/O thread; the temporary file moved into place
 * when complete, removed on any failure. */
#define _GNU_SOURCE /* memfd_create */
#include "maps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <hdf5.h>
#include <hdf5_hl.h>

#include "linalg.h" /* HS_PAR_ROWS */
#include "maps_h5.h"
#include "sha256.h"

/* IEEE half as HDF5 1.10 lacks it: h5py declares the same type. */
static hid_t half_type(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
}

typedef struct {
    int layer, nh, q0, nq; /* layer: the map's id in appends */
    int rows, keys;        /* the appended maps' query rows and keys: T, T, or an
                              encoder-decoder's (hs_maps_add_map) */
    int *heads;
    hid_t dset;
    long long n; /* sequences written */
} layer_out;

/* The writer overlaps disk writes with the forward: appends convert a
 * layer's maps into one of two buffers and queue it; one I/O thread, the
 * only caller of HDF5 while it runs, writes the queue in order. */
enum { NBUF = 2 };

typedef struct {
    layer_out *layer; /* NULL: a tokens job */
    int B;
    int buf;          /* index into bufs */
} write_job;

struct hs_maps_writer {
    char path[1024], tmp[1100];
    int force;                          /* move over an existing path at the finish */
    hid_t file, tokens, dtype;
    hid_t text, text_type;              /* /token_text and its string type, or -1 */
    const char *const *token_text;      /* meta's: display string by id */
    int n_token_text;
    int T, half, compress;
    long long n_tokens;
    int n_layers;
    layer_out layers[HS_MAPS_MAX_LAYERS];
    void *bufs[NBUF];
    size_t buf_bytes[NBUF];
    int busy[NBUF];           /* queued or being written */
    write_job queue[NBUF];
    int qhead, qlen;
    pthread_t thread;
    int thread_running, closing;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int io_rc;                /* first failure of the I/O thread */
    char io_msg[1200];
    hid_t csr[3];             /* /features/indptr, indices, values, or -1 */
    long long csr_rows, csr_nnz;
};

static void free_writer(hs_maps_writer *w);
static void *io_main(void *arg);

static int set_str_attr(hid_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    const char *v = value ? value : "";
    herr_t rc = a < 0 ? -1 : H5Awrite(a, t, &v);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return rc < 0 ? -1 : 0;
}

static int set_int_attr(hid_t obj, const char *name, const int *v, int n)
{
    hsize_t dim = (hsize_t)n;
    hid_t sp = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &dim, NULL);
    hid_t a = H5Aexists(obj, name) > 0 ? H5Aopen(obj, name, H5P_DEFAULT)
                                        : H5Acreate2(obj, name, H5T_STD_I32LE, sp, H5P_DEFAULT,
                                                     H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT, v);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    return rc < 0 ? -1 : 0;
}

static hid_t create_extendible(hid_t loc, const char *name, hid_t type, int rank,
                               const hsize_t *dims, const hsize_t *chunk, int compress)
{
    hsize_t zero[4], maxd[4];
    for (int i = 0; i < rank; i++) {
        zero[i] = i ? dims[i] : 0;
        maxd[i] = i ? dims[i] : H5S_UNLIMITED;
    }
    hid_t sp = H5Screate_simple(rank, zero, maxd);
    hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(pl, rank, chunk);
    if (compress > 0) {
        H5Pset_shuffle(pl);
        H5Pset_deflate(pl, (unsigned)compress);
    }
    hid_t d = H5Dcreate2(loc, name, type, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
    H5Pclose(pl);
    H5Sclose(sp);
    return d;
}

/* 1 when n is a PATH.tmp.PID name (the pid alone: what the writer made
 * before its temporaries were unpredictable) of a pid that is gone. */
static int legacy_stale(const char *base, size_t nb, const char *n)
{
    if (strncmp(n, base, nb) || strncmp(n + nb, ".tmp.", 5))
        return 0;
    const char *digits = n + nb + 5;
    const size_t nd = strspn(digits, "0123456789");
    if (nd < 1 || nd > 9 || digits[nd] || digits[0] == '0')
        return 0;
    const long pid = strtol(digits, NULL, 10);
    return pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Removes the temporaries of path whose writer is gone (a capture killed
 * with SIGKILL, or a crash): regular files only, named as hs_tmp_create
 * names them for this output (or as earlier versions did), their pid not
 * alive on this machine (hs_tmp_stale). */
static void sweep_stale_temps(const char *path)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? path + (slash - dir) + 1 : path;
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    const size_t nb = strlen(base);
    DIR *d = nb ? opendir(dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!hs_tmp_stale(path, e->d_name) && !legacy_stale(base, nb, e->d_name))
            continue;
        char full[2200];
        struct stat sb;
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode))
            unlink(full);
    }
    if (d)
        closedir(d);
}

int hs_maps_create(hs_maps_writer **out, const char *path, const hs_maps_meta *meta, int force)
{
    *out = NULL;
    hs_maps_h5_quiet();
    struct stat sb;
    if (!force && stat(path, &sb) == 0)
        return hs_fail(HS_EIO, "%s exists (use --force to overwrite)", path);
    if (meta->seq_len < 1 || meta->compress < 0 || meta->compress > 9)
        return hs_fail(HS_EINVAL, "%s: bad sequence length %d or compression level %d", path,
                       meta->seq_len, meta->compress);
    sweep_stale_temps(path);
    hs_maps_writer *w = hs_calloc(1, sizeof *w, "maps writer");
    if (!w)
        return HS_ENOMEM;
    snprintf(w->path, sizeof w->path, "%s", path);
    w->force = force;
    w->T = meta->seq_len;
    w->half = meta->half;
    w->compress = meta->compress;
    w->tokens = w->dtype = w->text = w->text_type = -1;
    w->csr[0] = w->csr[1] = w->csr[2] = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* HDF5 creates by name: the name is hs_tmp_create's, unpredictable and
     * made O_EXCL here (a symlink planted at a guessable name is never
     * followed), and HDF5 truncates that file of ours */
    const int fd = hs_tmp_create(path, w->tmp, sizeof w->tmp);
    if (fd < 0) {
        free_writer(w);
        return HS_EIO;
    }
    close(fd);
    errno = 0;
    w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        int rc = hs_fail(HS_EIO, "%s: cannot create (%s)", path,
                         errno ? strerror(errno) : "HDF5 error");
        unlink(w->tmp);
        free_writer(w);
        return rc;
    }
    w->dtype = w->half ? half_type() : H5Tcopy(H5T_IEEE_F32LE);
    const int version = 1, complete = 0, T = meta->seq_len;
    int bad = set_str_attr(w->file, "format", "headscope-maps") ||
              set_int_attr(w->file, "version", &version, 1) ||
              set_str_attr(w->file, "model_sha256", meta->model_sha256) ||
              set_str_attr(w->file, "model_config", meta->model_config) ||
              set_str_attr(w->file, "data_path", meta->data_path) ||
              set_str_attr(w->file, "data_sha256", meta->data_sha256) ||
              set_int_attr(w->file, "seq_len", &T, 1) ||
              set_str_attr(w->file, "tool_version", HS_VERSION) ||
              set_int_attr(w->file, "complete", &complete, 1);
    hsize_t dims[2] = { 0, (hsize_t)T }, chunk[2] = { 64, (hsize_t)T };
    if (!bad)
        w->tokens = create_extendible(w->file, "tokens", H5T_STD_I32LE, 2, dims, chunk, 0);
    if (bad || w->tokens < 0) {
        hs_maps_abort(w);
        return hs_maps_h5_fail(path, "writing the file header");
    }
    *out = w;
    return HS_OK;
}

/* The first append starts the I/O thread: layers are declared (HDF5 calls on
 * this thread) before it. */
static int start_io(hs_maps_writer *w)
{
    if (w->thread_running)
        return HS_OK;
    if (pthread_create(&w->thread, NULL, io_main, w))
        return hs_fail(HS_ENOMEM, "%s: cannot start the writer thread", w->path);
    w->thread_running = 1;
    return HS_OK;
}

int hs_maps_set_token_text(hs_maps_writer *w, const char *const *text, int n)
{
    if (w->thread_running || w->text >= 0) /* HDF5 is not thread-safe: before the first append */
        return hs_fail(HS_EINVAL, "%s: token text must be given once, before the first append",
                       w->path);
    hsize_t dims[2] = { 0, (hsize_t)w->T }, chunk[2] = { 8, (hsize_t)w->T };
    w->text_type = H5Tcopy(H5T_C_S1);
    int bad = w->text_type < 0 || H5Tset_size(w->text_type, H5T_VARIABLE) < 0 ||
              H5Tset_cset(w->text_type, H5T_CSET_UTF8) < 0;
    if (!bad)
        w->text = create_extendible(w->file, "token_text", w->text_type, 2, dims, chunk, 0);
    if (bad || w->text < 0)
        return hs_maps_h5_fail(w->path, "creating /token_text");
    w->token_text = text, w->n_token_text = n;
    return HS_OK;
}

/* The dataset group/name [N, nh, nq, keys] of map `id` (layer: its layer
 * attribute), from appended maps of `rows` query rows. */
static int add_map(hs_maps_writer *w, int id, int layer, const char *group, const char *name,
                   int nh, const int *heads, int q0, int nq, int rows, int keys)
{
    if (w->thread_running) /* HDF5 is not thread-safe: layers come first */
        return hs_fail(HS_EINVAL, "%s: layers must be declared before the first append", w->path);
    if (w->n_layers == HS_MAPS_MAX_LAYERS || nh < 1 || q0 < 0 || nq < 1 || q0 + nq > rows ||
        keys < 1)
        return hs_fail(HS_EINVAL, "%s: bad layer selection (layer %d, %d heads, queries %d+%d)",
                       w->path, layer, nh, q0, nq);
    for (int i = 0; i < w->n_layers; i++)
        if (w->layers[i].layer == id)
            return hs_fail(HS_EINVAL, "%s: map %d declared twice", w->path, id);
    layer_out *lo = &w->layers[w->n_layers];
    lo->heads = hs_calloc((size_t)nh, sizeof(int), "captured heads");
    if (!lo->heads)
        return HS_ENOMEM;
    memcpy(lo->heads, heads, sizeof(int) * nh);
    lo->layer = id, lo->nh = nh, lo->q0 = q0, lo->nq = nq, lo->rows = rows, lo->keys = keys;
    /* the parents of a nested group ("encoder/layer_00") are made as needed;
     * a decoder layer's group holds its attn and its cross maps */
    hid_t g = -1;
    if (H5Lexists(w->file, group, H5P_DEFAULT) > 0) {
        g = H5Gopen2(w->file, group, H5P_DEFAULT);
    } else {
        hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
        if (lcpl >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0)
            g = H5Gcreate2(w->file, group, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        if (lcpl >= 0)
            H5Pclose(lcpl);
    }
    hsize_t dims[4] = { 0, (hsize_t)nh, (hsize_t)nq, (hsize_t)keys };
    hsize_t chunk[4] = { 1, 1, (hsize_t)nq, (hsize_t)keys };
    lo->dset = g < 0 ? -1 : create_extendible(g, name, w->dtype, 4, dims, chunk, w->compress);
    int bad = lo->dset < 0 || set_int_attr(lo->dset, "layer", &layer, 1) ||
              set_int_attr(lo->dset, "heads", heads, nh) ||
              set_int_attr(lo->dset, "query_start", &q0, 1);
    static const char *const labels[4] = { "seq", "head", "query", "key" };
    for (int i = 0; !bad && i < 4; i++)
        bad = H5DSset_label(lo->dset, (unsigned)i, labels[i]) < 0;
    if (g >= 0)
        H5Gclose(g);
    w->n_layers++; /* counted even on failure so that abort closes the dataset */
    return bad ? hs_maps_h5_fail(w->path, "creating a layer dataset") : HS_OK;
}

int hs_maps_add_layer(hs_maps_writer *w, int layer, int nh, const int *heads, int q0, int nq)
{
    char name[32];
    snprintf(name, sizeof name, "layer_%02d", layer);
    return add_map(w, layer, layer, name, "attn", nh, heads, q0, nq, w->T, w->T);
}

int hs_maps_add_map(hs_maps_writer *w, int id, int layer, const char *group, const char *name,
                    int nh, int rows, int keys)
{
    int *heads = hs_calloc((size_t)(nh > 0 ? nh : 1), sizeof *heads, "captured heads");
    if (!heads)
        return HS_ENOMEM;
    for (int h = 0; h < nh; h++)
        heads[h] = h;
    const int rc = add_map(w, id, layer, group, name, nh, heads, 0, rows, rows, keys);
    free(heads);
    return rc;
}

/* Grows dset's first dimension from n to n + B and writes buf there. */
static int append_rows(hid_t dset, hid_t mtype, int rank, const hsize_t *row_dims, long long n,
                       int B, const void *buf)
{
    hsize_t dims[4], start[4] = { (hsize_t)n, 0, 0, 0 }, count[4];
    for (int i = 0; i < rank; i++)
        dims[i] = count[i] = row_dims[i];
    dims[0] = (hsize_t)(n + B);
    count[0] = (hsize_t)B;
    if (H5Dset_extent(dset, dims) < 0)
        return -1;
    hid_t fs = H5Dget_space(dset), ms = H5Screate_simple(rank, count, NULL);
    herr_t rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    if (rc >= 0)
        rc = H5Dwrite(dset, mtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? -1 : 0;
}

/* Waits for a free buffer of at least `bytes` and sets *b to its index.
 * Fails when an earlier write failed, or out of memory. */
static int take_buffer(hs_maps_writer *w, size_t bytes, int *bout)
{
    int rc = start_io(w);
    if (rc)
        return rc;
    pthread_mutex_lock(&w->mu);
    int b = -1;
    while (!w->io_rc && b < 0) {
        for (int i = 0; i < NBUF && b < 0; i++)
            if (!w->busy[i])
                b = i;
        if (b < 0)
            pthread_cond_wait(&w->cv, &w->mu);
    }
    rc = w->io_rc;
    pthread_mutex_unlock(&w->mu);
    if (rc)
        return hs_fail(rc, "%s", w->io_msg);
    if (bytes > w->buf_bytes[b]) {
        void *grown = realloc(w->bufs[b], bytes);
        if (!grown)
            return hs_fail(HS_ENOMEM, "%s: cannot allocate %zu bytes for a batch of maps", w->path,
                           bytes);
        w->bufs[b] = grown;
        w->buf_bytes[b] = bytes;
    }
    *bout = b;
    return HS_OK;
}

static void queue_job(hs_maps_writer *w, write_job job)
{
    pthread_mutex_lock(&w->mu);
    w->busy[job.buf] = 1;
    w->queue[(w->qhead + w->qlen) % NBUF] = job;
    w->qlen++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int hs_maps_append(hs_maps_writer *w, int layer, const hs_real *att, int B, int H_model)
{
    layer_out *lo = NULL;
    for (int i = 0; i < w->n_layers && !lo; i++)
        if (w->layers[i].layer == layer)
            lo = &w->layers[i];
    if (!lo)
        return hs_fail(HS_EINVAL, "%s: layer %d was not declared", w->path, layer);
    const int T = lo->keys, rows = lo->rows;
    const size_t per_seq = (size_t)lo->nh * lo->nq * T;
    int b, rc = take_buffer(w, per_seq * B * (w->half ? 2 : 4), &b);
    if (rc)
        return rc;
    void *buf = w->bufs[b];
#pragma omp parallel for collapse(2) schedule(static) if (HS_PAR_ROWS((size_t)B, per_seq))
    for (int s = 0; s < B; s++)
        for (int hi = 0; hi < lo->nh; hi++) {
            const hs_real *src =
                att + (((size_t)s * H_model + lo->heads[hi]) * rows + lo->q0) * T;
            size_t dst = (size_t)s * per_seq + (size_t)hi * lo->nq * T;
            const size_t cnt = (size_t)lo->nq * T;
            if (w->half) {
                uint16_t *o = (uint16_t *)buf + dst;
#pragma omp simd
                for (size_t k = 0; k < cnt; k++)
                    o[k] = hs_float_to_half((float)src[k]);
            } else {
                float *o = (float *)buf + dst;
                for (size_t k = 0; k < cnt; k++)
                    o[k] = (float)src[k];
            }
        }
    queue_job(w, (write_job){ lo, B, b });
    return HS_OK;
}

int hs_maps_append_tokens(hs_maps_writer *w, const int32_t *tokens, int B)
{
    for (size_t i = 0; w->token_text && i < (size_t)B * w->T; i++)
        if (tokens[i] < 0 || tokens[i] >= w->n_token_text || !w->token_text[tokens[i]])
            return hs_fail(HS_EINVAL, "%s: token %d has no display string", w->path, tokens[i]);
    int b, rc = take_buffer(w, sizeof(int32_t) * (size_t)B * w->T, &b);
    if (rc)
        return rc;
    memcpy(w->bufs[b], tokens, sizeof(int32_t) * (size_t)B * w->T);
    queue_job(w, (write_job){ NULL, B, b });
    return HS_OK;
}

/* The strings of B rows of tokens to /token_text (rows n_tokens..), when
 * the writer has it: pointers into the caller's table, written as
 * variable-length strings. -1 on failure. */
static int append_text(hs_maps_writer *w, int B, const int32_t *tokens)
{
    if (w->text < 0)
        return 0;
    const size_t n = (size_t)B * w->T;
    const char **p = malloc(n * sizeof *p);
    if (!p)
        return -1;
    for (size_t i = 0; i < n; i++)
        p[i] = w->token_text[tokens[i]];
    hsize_t row[2] = { 0, (hsize_t)w->T };
    const int bad = append_rows(w->text, w->text_type, 2, row, w->n_tokens, B, p);
    free(p);
    return bad;
}

/* The I/O thread: writes queued jobs in order until closing and drained. */
static void *io_main(void *arg)
{
    hs_maps_writer *w = arg;
    /* HDF5's error stacks and their printing are per thread */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->qlen && !w->closing)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->qlen)
            break;
        write_job job = w->queue[w->qhead];
        int failed = w->io_rc != 0;
        pthread_mutex_unlock(&w->mu);
        int bad = 0;
        if (!failed && job.layer) {
            hsize_t row[4] = { 0, (hsize_t)job.layer->nh, (hsize_t)job.layer->nq,
                               (hsize_t)job.layer->keys };
            bad = append_rows(job.layer->dset, w->half ? w->dtype : H5T_NATIVE_FLOAT, 4, row,
                              job.layer->n, job.B, w->bufs[job.buf]);
            job.layer->n += job.B;
        } else if (!failed) {
            hsize_t row[2] = { 0, (hsize_t)w->T };
            bad = append_rows(w->tokens, H5T_NATIVE_INT32, 2, row, w->n_tokens, job.B,
                              w->bufs[job.buf]) ||
                  append_text(w, job.B, w->bufs[job.buf]);
            w->n_tokens += job.B;
        }
        pthread_mutex_lock(&w->mu);
        if (bad && !w->io_rc) {
            w->io_rc = HS_EIO;
            snprintf(w->io_msg, sizeof w->io_msg, "%s: writing %s failed (disk full?)", w->path,
                     job.layer ? "maps" : "tokens");
        }
        w->qhead = (w->qhead + 1) % NBUF;
        w->qlen--;
        w->busy[job.buf] = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Drains the queue and stops the I/O thread; returns its first failure. */
static int stop_io(hs_maps_writer *w)
{
    if (!w->thread_running)
        return HS_OK;
    pthread_mutex_lock(&w->mu);
    w->closing = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->thread_running = 0;
    return w->io_rc ? hs_fail(w->io_rc, "%s", w->io_msg) : HS_OK;
}

/* A whole [n, cols] dataset `name` of file type ftype from data of memory
 * type mtype, after every append (the I/O thread stopped first). */
static int write_rows_after(hs_maps_writer *w, const char *name, hid_t ftype, hid_t mtype,
                            const void *data, long long n, int cols, const char *label)
{
    int rc = stop_io(w); /* every sequence written; HDF5 on this thread alone from here */
    if (rc)
        return rc;
    hsize_t dims[2] = { (hsize_t)n, (hsize_t)cols };
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t d = space < 0 ? -1
                        : H5Dcreate2(w->file, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT,
                                     H5P_DEFAULT);
    int bad = d < 0 || (n > 0 && H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0);
    const char *const labels[2] = { "seq", label };
    for (int i = 0; !bad && i < 2; i++)
        bad = H5DSset_label(d, (unsigned)i, labels[i]) < 0;
    if (d >= 0 && H5Dclose(d) < 0)
        bad = 1;
    if (space >= 0)
        H5Sclose(space);
    char what[96];
    snprintf(what, sizeof what, "writing /%s", name);
    return bad ? hs_maps_h5_fail(w->path, what) : HS_OK;
}

int hs_maps_write_attention_mask(hs_maps_writer *w, const unsigned char *mask, long long n)
{
    int rc = stop_io(w);
    if (!rc && n != w->n_tokens)
        rc = hs_fail(HS_EINVAL, "%s: an attention mask of %lld sequences for %lld written",
                     w->path, n, w->n_tokens);
    return rc ? rc : write_rows_after(w, "attention_mask", H5T_STD_I8LE, H5T_NATIVE_SCHAR, mask,
                                      n, w->T, "key");
}

int hs_maps_write_ids(hs_maps_writer *w, const char *name, const int32_t *ids, long long n,
                      int cols)
{
    return write_rows_after(w, name, H5T_STD_I32LE, H5T_NATIVE_INT32, ids, n, cols, "position");
}

int hs_maps_write_mask(hs_maps_writer *w, const char *name, const unsigned char *mask,
                       long long n, int cols)
{
    return write_rows_after(w, name, H5T_STD_I8LE, H5T_NATIVE_SCHAR, mask, n, cols, "key");
}

int hs_maps_write_text(hs_maps_writer *w, const char *name, const char *alias, const int32_t *ids,
                       long long n, int cols, const char *const *text, int n_text)
{
    const size_t count = (size_t)n * (size_t)cols;
    for (size_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= n_text || !text[ids[i]])
            return hs_fail(HS_EINVAL, "%s: /%s: token %d has no string", w->path, name,
                           (int)ids[i]);
    const char **p = malloc((count ? count : 1) * sizeof *p);
    hid_t type = H5Tcopy(H5T_C_S1);
    int bad = !p || type < 0 || H5Tset_size(type, H5T_VARIABLE) < 0 ||
              H5Tset_cset(type, H5T_CSET_UTF8) < 0;
    for (size_t i = 0; !bad && i < count; i++)
        p[i] = text[ids[i]];
    int rc = bad ? hs_maps_h5_fail(w->path, "building token strings")
                 : write_rows_after(w, name, type, type, p, n, cols, "position");
    char what[160];
    snprintf(what, sizeof what, "linking /%s as /%s", name, alias ? alias : "");
    if (!rc && alias && H5Lcreate_hard(w->file, name, w->file, alias, H5P_DEFAULT, H5P_DEFAULT) < 0)
        rc = hs_maps_h5_fail(w->path, what);
    if (type >= 0)
        H5Tclose(type);
    free(p);
    return rc;
}

/* The /features group's three datasets, at the first CSR append. */
static int csr_create(hs_maps_writer *w, const hs_maps_csr *c)
{
    hid_t g = H5Gcreate2(w->file, "features", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const int run = (int)c->run_id;
    int bad = g < 0 || set_int_attr(g, "d_sae", &c->d_sae, 1) ||
              set_int_attr(g, "run_id", &run, 1) || set_int_attr(g, "vocab_size", &c->vocab_size, 1) ||
              set_str_attr(g, "hook_name", c->hook) ||
              set_str_attr(g, "sae", c->sae);
    static const char *const names[3] = { "indptr", "indices", "values" };
    const hid_t types[3] = { H5T_STD_I64LE, H5T_STD_I32LE, H5T_IEEE_F32LE };
    const hsize_t one = 1, chunk = 1 << 16;
    for (int i = 0; !bad && i < 3; i++)
        bad = (w->csr[i] = create_extendible(g, names[i], types[i], 1, &one, &chunk,
                                             w->compress)) < 0;
    const int64_t zero = 0; /* indptr[0] */
    const hsize_t row = 1;
    if (!bad)
        bad = append_rows(w->csr[0], H5T_NATIVE_INT64, 1, &row, 0, 1, &zero);
    if (g >= 0 && H5Gclose(g) < 0)
        bad = 1;
    return bad ? hs_maps_h5_fail(w->path, "creating /features") : HS_OK;
}

int hs_maps_append_csr(hs_maps_writer *w, const hs_maps_csr *c, const int32_t *tokens, int B)
{
    if (w->thread_running || w->n_layers)
        return hs_fail(HS_EINVAL, "%s: features are written to a file without maps", w->path);
    int rc = w->csr[0] < 0 ? csr_create(w, c) : HS_OK;
    if (rc)
        return rc;
    const long long rows = (long long)B * w->T;
    int64_t *indptr = malloc(sizeof *indptr * (size_t)(rows ? rows : 1));
    if (!indptr)
        return hs_fail(HS_ENOMEM, "%s: out of memory for /features/indptr", w->path);
    long long nnz = 0;
    for (long long r = 0; r < rows; r++)
        indptr[r] = w->csr_nnz + (nnz += c->row_nnz[r]);
    const hsize_t one = 1, row[2] = { 0, (hsize_t)w->T };
    int bad = append_rows(w->csr[0], H5T_NATIVE_INT64, 1, &one, w->csr_rows + 1, (int)rows,
                          indptr) ||
              (nnz && append_rows(w->csr[1], H5T_NATIVE_INT32, 1, &one, w->csr_nnz, (int)nnz,
                                  c->indices)) ||
              (nnz && append_rows(w->csr[2], H5T_NATIVE_FLOAT, 1, &one, w->csr_nnz, (int)nnz,
                                  c->values)) ||
              append_rows(w->tokens, H5T_NATIVE_INT32, 2, row, w->n_tokens, B, tokens) ||
              append_text(w, B, tokens);
    free(indptr);
    if (bad)
        return hs_fail(HS_EIO, "%s: writing /features failed (disk full?)", w->path);
    w->csr_rows += rows, w->csr_nnz += nnz, w->n_tokens += B;
    return HS_OK;
}

static int sink_maps(void *ctx, int layer, const hs_real *att, int B, int H_model)
{
    return hs_maps_append(ctx, layer, att, B, H_model);
}

static int sink_tokens(void *ctx, const int32_t *tokens, int B)
{
    return hs_maps_append_tokens(ctx, tokens, B);
}

hs_map_sink hs_maps_sink(hs_maps_writer *w)
{
    return (hs_map_sink){ w, sink_maps, sink_tokens };
}

/* Closes every dataset and type; returns -1 when one failed to close. */
static int close_all(hs_maps_writer *w)
{
    int bad = 0;
    stop_io(w);
    for (int i = 0; i < w->n_layers; i++) {
        if (w->layers[i].dset >= 0 && H5Dclose(w->layers[i].dset) < 0)
            bad = -1;
        free(w->layers[i].heads);
    }
    if (w->tokens >= 0 && H5Dclose(w->tokens) < 0)
        bad = -1;
    if (w->text >= 0 && H5Dclose(w->text) < 0)
        bad = -1;
    if (w->text_type >= 0 && H5Tclose(w->text_type) < 0)
        bad = -1;
    if (w->dtype >= 0 && H5Tclose(w->dtype) < 0)
        bad = -1;
    for (int i = 0; i < 3; i++)
        if (w->csr[i] >= 0 && H5Dclose(w->csr[i]) < 0)
            bad = -1;
    w->csr[0] = w->csr[1] = w->csr[2] = -1;
    w->n_layers = 0;
    w->tokens = w->dtype = w->text = w->text_type = -1;
    return bad;
}

static void free_writer(hs_maps_writer *w)
{
    for (int i = 0; i < NBUF; i++)
        free(w->bufs[i]);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

/* Points the temporary file's descriptor at a scratch file in memory (or
 * /dev/null) so that HDF5's closing flush of a file we throw away cannot
 * fail. HDF5 1.10 leaves a half-freed file id behind when H5Fclose fails
 * (on a full disk, say), which crashes the library's cleanup at exit; after
 * this, every id closes. */
static void divert_file(hs_maps_writer *w, int limited)
{
    int *fd = NULL;
    if (w->file < 0 || H5Fget_vfd_handle(w->file, H5P_DEFAULT, (void **)&fd) < 0 || !fd ||
        *fd < 0)
        return;
    int scratch = -1;
#ifdef __linux__
    if (!limited)
        scratch = memfd_create("headscope-discard", MFD_CLOEXEC);
#endif
    if (scratch < 0)
        scratch = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (scratch >= 0) {
        dup2(scratch, *fd);
        close(scratch);
    }
}

/* divert_file under a file size limit (RLIMIT_FSIZE), which applies to the
 * scratch file too: its soft limit is lifted, where it can be, until the
 * caller restores *old (when *lifted); where it cannot, /dev/null. */
static void divert_with_limit(hs_maps_writer *w, struct rlimit *old, int *lifted)
{
    if (!*lifted && !getrlimit(RLIMIT_FSIZE, old) && old->rlim_cur < old->rlim_max) {
        struct rlimit up = { old->rlim_max, old->rlim_max };
        *lifted = !setrlimit(RLIMIT_FSIZE, &up);
    }
    divert_file(w, !*lifted && old->rlim_cur != RLIM_INFINITY);
}

/* Flushes and closes everything; on any failure the file is diverted first
 * so that all ids close. Returns HS_OK or a status with the message set. */
static int close_file(hs_maps_writer *w, int rc)
{
    int io = stop_io(w);
    if (!rc)
        rc = io;
    struct rlimit fsz = { RLIM_INFINITY, RLIM_INFINITY };
    int lifted = 0;
    if (rc)
        divert_with_limit(w, &fsz, &lifted);
    /* datasets first: their chunk caches hold most of the data, and a
     * failure here still leaves the file to divert */
    int bad = close_all(w);
    if (bad && !rc) {
        rc = hs_fail(HS_EIO, "%s: writing the file failed (disk full?)", w->path);
        divert_with_limit(w, &fsz, &lifted);
    }
    if (w->file >= 0 && H5Fclose(w->file) < 0) {
        bad = -1;
        hs_maps_h5_dangling();
    }
    w->file = -1;
    if (lifted)
        setrlimit(RLIMIT_FSIZE, &fsz);
    if (bad && !rc)
        rc = hs_fail(HS_EIO, "%s: writing the file failed while closing it (disk full?)", w->path);
    return rc;
}

/* Sets complete=1 in the file at w->path when that file is the one open at
 * fd (the file this writer moved there; a --force writer may have moved
 * another over it since). */
static int mark_complete(hs_maps_writer *w, int fd)
{
    hid_t f = H5Fopen(w->path, H5F_ACC_RDWR, H5P_DEFAULT);
    int *h5fd = NULL;
    struct stat ours, there;
    int bad = f < 0 || H5Fget_vfd_handle(f, H5P_DEFAULT, (void **)&h5fd) < 0 || !h5fd ||
              fstat(*h5fd, &there) || fstat(fd, &ours);
    const int same = !bad && ours.st_dev == there.st_dev && ours.st_ino == there.st_ino;
    /* the attribute exists: rewritten in place, the file does not grow */
    const int complete = 1;
    if (same)
        bad = set_int_attr(f, "complete", &complete, 1);
    if (f >= 0 && H5Fclose(f) < 0)
        bad = 1;
    if (!bad && !same)
        return hs_fail(HS_EIO, "%s was replaced by another writer before it was marked "
                       "complete", w->path);
    return bad ? hs_maps_h5_fail(w->path, "marking the file complete") : HS_OK;
}

/* The digest of the file open at fd, while w->path still names it. */
static int hash_committed(const hs_maps_writer *w, int fd, char sha256[65], uint64_t *bytes)
{
    int rc = hs_sha256_fd(fd, w->path, sha256, bytes);
    struct stat ours, there;
    if (!rc && (fstat(fd, &ours) || stat(w->path, &there) || ours.st_dev != there.st_dev ||
                ours.st_ino != there.st_ino))
        rc = hs_fail(HS_EIO, "%s was replaced by another writer while it was hashed", w->path);
    if (rc)
        sha256[0] = 0;
    return rc;
}

int hs_maps_finish_sha(hs_maps_writer *w, char sha256[65], uint64_t *bytes)
{
    if (sha256)
        sha256[0] = 0;
    int rc = close_file(w, HS_OK);
    /* the finished file, held by descriptor from here on: what is marked
     * and hashed is the file moved into place, whatever the name names */
    const int fd = rc ? -1 : open(w->tmp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (!rc && fd < 0)
        rc = hs_fail(HS_EIO, "%s: cannot reopen %s: %s", w->path, w->tmp, strerror(errno));
    if (rc)
        unlink(w->tmp);
    else
        rc = hs_tmp_commit(w->tmp, w->path, w->force); /* without force: only where nothing is */
    if (!rc)
        rc = mark_complete(w, fd);
    if (!rc && sha256)
        rc = hash_committed(w, fd, sha256, bytes);
    if (fd >= 0)
        close(fd);
    free_writer(w);
    return rc;
}

int hs_maps_finish(hs_maps_writer *w)
{
    return hs_maps_finish_sha(w, NULL, NULL);
}

void hs_maps_abort(hs_maps_writer *w)
{
    if (!w)
        return;
    close_file(w, HS_EINTR); /* nothing of it is kept: never a flush that can fail */
    unlink(w->tmp);
    free_writer(w);
}
