#define _GNU_SOURCE /* memfd_create */
#include "maps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <hdf5.h>
#include <hdf5_hl.h>

#include "linalg.h" /* HS_PAR_ROWS */

/* ---- float16 ---------------------------------------------------------------- */

uint16_t hs_float_to_half_soft(float f)
{
    /* Round to nearest even, with overflow to infinity and subnormals. */
    union { float f; uint32_t u; } v = { f };
    uint32_t sign = (v.u >> 16) & 0x8000, a = v.u & 0x7fffffff;
    if (a >= 0x7f800000) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000 ? 0x200 : 0));
    if (a >= 0x477ff000) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000) { /* below the smallest normal half: subnormal or zero */
        float m = fabsf(f) * 16777216.0f; /* units of 2^-24 */
        uint32_t q = (uint32_t)m;
        float rem = m - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t mant = a & 0x7fffff, exp = (a >> 23) - 112; /* rebias 127 -> 15 */
    uint32_t h = exp << 10 | mant >> 13, rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent, which is correct */
    return (uint16_t)(sign | h);
}

uint16_t hs_float_to_half(float f)
{
#ifdef __FLT16_MANT_DIG__
    /* The compiler's _Float16: the same rounding, and with F16C a vector
     * instruction, so capture's conversion loop vectorises. */
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
#else
    return hs_float_to_half_soft(f);
#endif
}

static float half_to_float(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v = exp == 0 ? ldexpf((float)mant, -24)
              : exp == 31 ? (mant ? NAN : INFINITY)
                          : ldexpf((float)(mant | 0x400), exp - 25);
    return sign ? -v : v;
}

/* IEEE half as HDF5 1.10 lacks it: h5py declares the same type. */
static hid_t half_type(void)
{
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
}

/* ---- writer ----------------------------------------------------------------- */

typedef struct {
    int layer, nh, q0, nq;
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
};

static void free_writer(hs_maps_writer *w);
static void *io_main(void *arg);

/* Set when an H5Fclose failed: HDF5 1.10 then leaves a half-freed file id
 * behind, and its cleanup at exit would crash on it. */
static int h5_dangling;

static void h5_at_exit(void)
{
    if (!h5_dangling)
        H5close();
}

/* HDF5 quiet: no automatic printing of its error stack (we report one line
 * of our own), and its cleanup at exit our own, skipped after a failed
 * H5Fclose (close_file avoids one where it can: this is the net under it). */
static void h5_quiet(void)
{
    static int done;
    if (!done) {
        done = 1;
        if (H5dont_atexit() >= 0)
            atexit(h5_at_exit);
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static int h5_fail(const char *path, const char *what)
{
    return hs_fail(HS_EIO, "%s: %s failed", path, what);
}

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

/* Removes PATH.tmp.PID files next to path whose process is gone (a capture
 * killed with SIGKILL, or a crash): regular files only, the name exactly
 * our pattern for this output, the pid not ours and not alive on this
 * machine (kill(pid, 0) fails with ESRCH). */
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
    DIR *d = opendir(dir);
    if (!d || !nb)
        goto done;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, base, nb) || strncmp(n + nb, ".tmp.", 5))
            continue;
        const char *digits = n + nb + 5;
        size_t nd = strspn(digits, "0123456789");
        if (nd < 1 || nd > 9 || digits[nd] || digits[0] == '0')
            continue;
        const long pid = strtol(digits, NULL, 10);
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char full[2200];
        struct stat sb;
        snprintf(full, sizeof full, "%s/%s", dir, n);
        if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode))
            unlink(full);
    }
done:
    if (d)
        closedir(d);
}

int hs_maps_create(hs_maps_writer **out, const char *path, const hs_maps_meta *meta, int force)
{
    *out = NULL;
    h5_quiet();
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
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%d", path, (int)getpid());
    w->T = meta->seq_len;
    w->half = meta->half;
    w->compress = meta->compress;
    w->tokens = w->dtype = w->text = w->text_type = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) {
        int rc = hs_fail(HS_EIO, "%s: cannot create (%s)", path,
                         errno ? strerror(errno) : "HDF5 error");
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
        return h5_fail(path, "writing the file header");
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
        return h5_fail(w->path, "creating /token_text");
    w->token_text = text, w->n_token_text = n;
    return HS_OK;
}

int hs_maps_add_layer(hs_maps_writer *w, int layer, int nh, const int *heads, int q0, int nq)
{
    if (w->thread_running) /* HDF5 is not thread-safe: layers come first */
        return hs_fail(HS_EINVAL, "%s: layers must be declared before the first append", w->path);
    if (w->n_layers == HS_MAPS_MAX_LAYERS || nh < 1 || q0 < 0 || nq < 1 || q0 + nq > w->T)
        return hs_fail(HS_EINVAL, "%s: bad layer selection (layer %d, %d heads, queries %d+%d)",
                       w->path, layer, nh, q0, nq);
    layer_out *lo = &w->layers[w->n_layers];
    lo->heads = hs_calloc((size_t)nh, sizeof(int), "captured heads");
    if (!lo->heads)
        return HS_ENOMEM;
    memcpy(lo->heads, heads, sizeof(int) * nh);
    lo->layer = layer, lo->nh = nh, lo->q0 = q0, lo->nq = nq;
    char name[32];
    snprintf(name, sizeof name, "layer_%02d", layer);
    hid_t g = H5Gcreate2(w->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[4] = { 0, (hsize_t)nh, (hsize_t)nq, (hsize_t)w->T };
    hsize_t chunk[4] = { 1, 1, (hsize_t)nq, (hsize_t)w->T };
    lo->dset = g < 0 ? -1 : create_extendible(g, "attn", w->dtype, 4, dims, chunk, w->compress);
    int bad = lo->dset < 0 || set_int_attr(lo->dset, "layer", &layer, 1) ||
              set_int_attr(lo->dset, "heads", heads, nh) ||
              set_int_attr(lo->dset, "query_start", &q0, 1);
    static const char *const labels[4] = { "seq", "head", "query", "key" };
    for (int i = 0; !bad && i < 4; i++)
        bad = H5DSset_label(lo->dset, (unsigned)i, labels[i]) < 0;
    if (g >= 0)
        H5Gclose(g);
    w->n_layers++; /* counted even on failure so that abort closes the dataset */
    return bad ? h5_fail(w->path, "creating a layer dataset") : HS_OK;
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
    const int T = w->T;
    const size_t per_seq = (size_t)lo->nh * lo->nq * T;
    int b, rc = take_buffer(w, per_seq * B * (w->half ? 2 : 4), &b);
    if (rc)
        return rc;
    void *buf = w->bufs[b];
#pragma omp parallel for collapse(2) schedule(static) if (HS_PAR_ROWS((size_t)B, per_seq))
    for (int s = 0; s < B; s++)
        for (int hi = 0; hi < lo->nh; hi++) {
            const hs_real *src =
                att + (((size_t)s * H_model + lo->heads[hi]) * T + lo->q0) * T;
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
            hsize_t row[4] = { 0, (hsize_t)job.layer->nh, (hsize_t)job.layer->nq, (hsize_t)w->T };
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
        h5_dangling = 1;
    }
    w->file = -1;
    if (lifted)
        setrlimit(RLIMIT_FSIZE, &fsz);
    if (bad && !rc)
        rc = hs_fail(HS_EIO, "%s: writing the file failed while closing it (disk full?)", w->path);
    return rc;
}

int hs_maps_finish(hs_maps_writer *w)
{
    int rc = close_file(w, HS_OK);
    if (!rc && rename(w->tmp, w->path))
        rc = hs_fail(HS_EIO, "%s: cannot rename into place: %s", w->path, strerror(errno));
    if (rc)
        unlink(w->tmp);
    if (!rc) {
        /* the attribute exists: rewritten in place, the file does not grow */
        const int complete = 1;
        hid_t f = H5Fopen(w->path, H5F_ACC_RDWR, H5P_DEFAULT);
        int bad = f < 0 || set_int_attr(f, "complete", &complete, 1);
        if (f >= 0 && H5Fclose(f) < 0)
            bad = 1;
        if (bad)
            rc = h5_fail(w->path, "marking the file complete");
    }
    free_writer(w);
    return rc;
}

void hs_maps_abort(hs_maps_writer *w)
{
    if (!w)
        return;
    close_file(w, HS_EINTR); /* nothing of it is kept: never a flush that can fail */
    unlink(w->tmp);
    free_writer(w);
}

/* ---- reader ----------------------------------------------------------------- */

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

/* Replaces, in place, control characters and bytes that are not part of
 * well-formed UTF-8 with '?': strings from a map file are printed. */
static void sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 && *p >= 0xc2 ? 1 : (*p & 0xf0) == 0xe0 ? 2
                : (*p & 0xf8) == 0xf0 && *p <= 0xf4 ? 3 : -1;
        for (int k = 1; n > 0 && k <= n; k++)
            if ((p[k] & 0xc0) != 0x80)
                n = -1;
        if (n < 0 || *p < 0x20 || *p == 0x7f) {
            *p++ = '?';
            continue;
        }
        p += n + 1;
    }
}

/* One string value (variable- or fixed-length, ASCII or UTF-8) into out
 * (truncated to cap) and/or a malloc'd copy in *dup. -1: absent or not a
 * string. */
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
                    sanitize(out);
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
            sanitize(out);
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

/* A dataset's storage as we write it: contiguous, or chunked with at most
 * MAX_CHUNK elements a chunk, filters only shuffle and deflate. */
static int plain_storage(hid_t d)
{
    hid_t pl = H5Dget_create_plist(d);
    if (pl < 0)
        return 0;
    int ok = 0;
    const H5D_layout_t lay = H5Pget_layout(pl);
    if (lay == H5D_CONTIGUOUS) {
        ok = 1;
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

/* Opens name as a dataset of `rank` dims (each at most INT_MAX) stored as
 * plain_storage allows; -1 otherwise, nothing left open. */
static hid_t open_dataset(hid_t file, const char *name, int rank, hsize_t *dims)
{
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
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

/* Global heap collections ("GCOL", where HDF5 keeps variable-length
 * strings) in the first GCOL_SCAN bytes of the file, checked before HDF5
 * reads any: HDF5 1.10 copies a heap object by the size the file gives,
 * unchecked. Each must lie inside the file and hold objects that lie inside
 * it (index, refcount, reserved, 8-byte size, data padded to 8). Returns the
 * offset of a bad collection, or -1 when all are sound. */
enum { GCOL_SCAN = 64 << 20, GCOL_MIN = 4096 };

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int gcol_sound(FILE *f, uint64_t at, uint64_t file_size)
{
    unsigned char h[16];
    if (fseeko(f, (off_t)at, SEEK_SET) || fread(h, 1, 16, f) != 16)
        return 0;
    const uint64_t size = le64(h + 8);
    if (size < GCOL_MIN || size > file_size || at > file_size - size)
        return 0;
    uint64_t off = 16;
    while (off + 16 <= size) {
        unsigned char o[16];
        if (fread(o, 1, 16, f) != 16)
            return 0;
        const unsigned idx = (unsigned)(o[0] | o[1] << 8);
        const uint64_t osz = le64(o + 8);
        if (osz > size - off - 16)
            return idx == 0 && osz <= size - off; /* free space counts its header */
        if (idx == 0)
            return 1;
        const uint64_t padded = (osz + 7) & ~(uint64_t)7;
        if (padded > size - off - 16)
            return 0;
        off += 16 + padded;
        if (fseeko(f, (off_t)(at + off), SEEK_SET))
            return 0;
    }
    return 1;
}

/* f: the file, read from its start; closed here. */
static long long bad_global_heap(FILE *f)
{
    struct stat sb;
    long long bad = -1;
    unsigned char *buf = malloc((1 << 20) + 8);
    const uint64_t size = fstat(fileno(f), &sb) ? 0 : (uint64_t)sb.st_size;
    const uint64_t end = size < GCOL_SCAN ? size : GCOL_SCAN;
    for (uint64_t pos = 0; buf && bad < 0 && pos < end; pos += 1 << 20) {
        if (fseeko(f, (off_t)pos, SEEK_SET))
            break;
        const size_t n = fread(buf, 1, (1 << 20) + 8, f); /* 8 bytes overlap the next block */
        for (size_t i = 0; bad < 0 && i + 8 <= n && i < (1 << 20); i++)
            if (!memcmp(buf + i, "GCOL\1\0\0\0", 8) && !gcol_sound(f, pos + i, size))
                bad = (long long)(pos + i);
    }
    free(buf);
    fclose(f);
    return bad;
}

struct hs_maps_reader {
    char path[1024];
    hid_t file, tokens;
    hid_t text; /* /token_text, or -1 */
    hid_t dsets[HS_MAPS_MAX_LAYERS];
    hs_maps_info info;
};

/* Layer l's dataset, checked against the file's seq_len and sequence count:
 * a float type of 2 or 4 bytes, [N, nh, nq, T] with nh = the number of
 * distinct head ids in [0, HS_MAX_HEADS), 0 <= query_start and
 * query_start + nq <= T, attribute layer = l. */
static int open_layer(hs_maps_reader *r, int l, const char *name)
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
        li->half = ts == 2;
        li->nh = get_int_attr(d, "heads", li->heads, HS_MAX_HEADS, 0, HS_MAX_HEADS - 1);
        for (int i = 0; ok && i < li->nh; i++)
            for (int k = 0; ok && k < i; k++)
                ok = li->heads[i] != li->heads[k];
        ok = ok && li->nh >= 1 && (hsize_t)li->nh == dims[1] &&
             get_int_attr(d, "query_start", &li->q0, 1, 0, in->seq_len - 1) == 1 &&
             get_int_attr(d, "layer", &layer, 1, 0, HS_MAPS_MAX_LAYERS - 1) == 1 && layer == l;
        li->nq = (int)dims[2];
        li->S = (int)dims[3];
        ok = ok && (long long)dims[0] == in->n_seq && li->S == in->seq_len && li->nq >= 1 &&
             (long long)li->q0 + li->nq <= in->seq_len;
    }
    if (t >= 0)
        H5Tclose(t);
    if (!ok) {
        if (d >= 0)
            H5Dclose(d);
        return hs_fail(HS_EFORMAT, "%s: /%s does not match the documented layout (float "
                       "[N, heads, queries, %d], attributes layer=%d, distinct heads, "
                       "0 <= query_start, query_start + queries <= %d)", r->path, name,
                       in->seq_len, l, in->seq_len);
    }
    r->dsets[in->n_layers++] = d;
    return HS_OK;
}

/* /token_text when the file has it: variable-length strings (ASCII or
 * UTF-8) of the shape of /tokens. */
static int open_token_text(hs_maps_reader *r)
{
    hs_maps_info *in = &r->info;
    if (H5Lexists(r->file, "token_text", H5P_DEFAULT) <= 0)
        return HS_OK;
    hsize_t d[2] = { 0, 0 };
    r->text = open_dataset(r->file, "token_text", 2, d);
    hid_t t = r->text < 0 ? -1 : H5Dget_type(r->text);
    const int ok = t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0 &&
                   (H5Tget_cset(t) == H5T_CSET_UTF8 || H5Tget_cset(t) == H5T_CSET_ASCII) &&
                   (long long)d[0] == in->n_seq && d[1] == (hsize_t)in->seq_len;
    if (t >= 0)
        H5Tclose(t);
    if (!ok)
        return hs_fail(HS_EFORMAT, "%s: /token_text is not variable-length strings [%lld, %d] "
                       "beside /tokens", r->path, in->n_seq, in->seq_len);
    in->has_token_text = 1;
    return HS_OK;
}

/* hs_maps_open's probe: opens the file and reads every layer's first map and
 * the first tokens in a child process, under a time limit, so that a file
 * that crashes or hangs libhdf5 is refused instead of taking the caller
 * down. HS_OK when the child got through (a refusal of the layout included:
 * the caller's own open reports it), else HS_EFORMAT with the message set. */
/* PROBE_REFUSED: the child's status for a file our checks refuse (any other
 * non-zero status, a sanitizer's report say, is a failure inside HDF5). */
enum { PROBE_SECONDS = 20, PROBE_REFUSED = 97 };

static int probe(const char *path)
{
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0)
        return HS_OK; /* no process to spare: the caller opens it itself */
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        signal(SIGINT, SIG_DFL); /* Ctrl-C ends the probe too */
        signal(SIGTERM, SIG_DFL);
        signal(SIGALRM, SIG_DFL);
        alarm(PROBE_SECONDS);
        hs_maps_reader *r;
        if (hs_maps_open_here(&r, path))
            _exit(PROBE_REFUSED);
        const hs_maps_info *in = &r->info;
        int rc = 0;
        int32_t *tok = malloc(sizeof(int32_t) * (size_t)in->seq_len);
        if (tok && in->n_seq > 0)
            rc |= hs_maps_read_tokens(r, 0, tok);
        char **text = calloc((size_t)in->seq_len, sizeof *text);
        if (text && in->n_seq > 0 && in->has_token_text)
            rc |= hs_maps_read_token_text(r, 0, text);
        hs_maps_free_token_text(text, in->seq_len);
        free(text);
        for (int li = 0; in->n_seq > 0 && li < in->n_layers; li++) {
            float *m = malloc(sizeof(float) * (size_t)in->layers[li].nq * in->layers[li].S);
            if (m)
                rc |= hs_maps_read(r, li, 0, 0, m);
            free(m);
        }
        free(tok);
        hs_maps_close(r);
        _exit(rc ? PROBE_REFUSED : 0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFSIGNALED(st) && (WTERMSIG(st) == SIGINT || WTERMSIG(st) == SIGTERM))
        return hs_fail(HS_EINTR, "%s: interrupted while opening", path);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        return hs_fail(HS_EFORMAT, "%s: refused: the HDF5 library did not get through this "
                       "file in %d s", path, PROBE_SECONDS);
    if (WIFSIGNALED(st))
        return hs_fail(HS_EFORMAT, "%s: refused: the HDF5 library crashed reading this file "
                       "(signal %d)", path, WTERMSIG(st));
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != PROBE_REFUSED))
        return hs_fail(HS_EFORMAT, "%s: refused: the HDF5 library failed reading this file "
                       "(status %d)", path, WEXITSTATUS(st));
    return HS_OK;
}

int hs_maps_open(hs_maps_reader **out, const char *path)
{
    *out = NULL;
    const int rc = probe(path);
    return rc ? rc : hs_maps_open_here(out, path);
}

int hs_maps_open_here(hs_maps_reader **out, const char *path)
{
    *out = NULL;
    h5_quiet();
    FILE *f = hs_fopen_regular(path); /* a FIFO or a folder: refused, never read */
    if (!f)
        return HS_EIO;
    const long long heap = bad_global_heap(f);
    if (heap >= 0)
        return hs_fail(HS_EFORMAT, "%s: malformed HDF5 global heap at byte %lld (where "
                       "variable-length strings are kept)", path, heap);
    hs_maps_reader *r = hs_calloc(1, sizeof *r, "maps reader");
    if (!r)
        return HS_ENOMEM;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->tokens = r->text = -1;
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
    if (!rc)
        rc = open_token_text(r);
    for (int l = 0; !rc && l < HS_MAPS_MAX_LAYERS; l++) {
        char name[32];
        snprintf(name, sizeof name, "layer_%02d", l);
        if (H5Lexists(r->file, name, H5P_DEFAULT) <= 0)
            continue;
        snprintf(name, sizeof name, "layer_%02d/attn", l);
        rc = open_layer(r, l, name);
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
            out[k] = half_to_float(raw[k]);
        H5Tclose(t);
        free(raw);
    } else if (rc >= 0) {
        rc = H5Dread(r->dsets[li], H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, out);
    }
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? h5_fail(r->path, "reading a map") : HS_OK;
}

int hs_maps_read_tokens(hs_maps_reader *r, long long n, int32_t *out)
{
    if (n < 0 || n >= r->info.n_seq)
        return hs_fail(HS_EINVAL, "%s: no sequence %lld", r->path, n);
    hsize_t start[2] = { (hsize_t)n, 0 }, count[2] = { 1, (hsize_t)r->info.seq_len };
    hid_t fs = H5Dget_space(r->tokens), ms = H5Screate_simple(2, count, NULL);
    herr_t rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    if (rc >= 0)
        rc = H5Dread(r->tokens, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, out);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? h5_fail(r->path, "reading tokens") : HS_OK;
}

/* Replaces, in place, bytes that are not part of well-formed UTF-8 with
 * '?' (control characters are kept: a token may be a newline). */
static void fix_utf8(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 && *p >= 0xc2 ? 1 : (*p & 0xf0) == 0xe0 ? 2
                : (*p & 0xf8) == 0xf0 && *p <= 0xf4 ? 3 : -1;
        for (int k = 1; n > 0 && k <= n; k++)
            if ((p[k] & 0xc0) != 0x80)
                n = -1;
        if (n < 0) {
            *p++ = '?';
            continue;
        }
        p += n + 1;
    }
}

int hs_maps_read_token_text(hs_maps_reader *r, long long n, char **out)
{
    const int T = r->info.seq_len;
    for (int t = 0; t < T; t++)
        out[t] = NULL;
    if (r->text < 0)
        return hs_fail(HS_EINVAL, "%s holds no /token_text", r->path);
    if (n < 0 || n >= r->info.n_seq)
        return hs_fail(HS_EINVAL, "%s: no sequence %lld", r->path, n);
    hsize_t start[2] = { (hsize_t)n, 0 }, count[2] = { 1, (hsize_t)T };
    char **raw = calloc((size_t)T, sizeof *raw);
    hid_t ft = H5Dget_type(r->text), mt = H5Tcopy(H5T_C_S1);
    hid_t fs = H5Dget_space(r->text), ms = H5Screate_simple(2, count, NULL);
    herr_t rc = raw && ft >= 0 && mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 &&
                        H5Tset_cset(mt, H5Tget_cset(ft)) >= 0
                    ? H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL)
                    : -1;
    if (rc >= 0)
        rc = H5Dread(r->text, mt, ms, fs, H5P_DEFAULT, raw);
    const int read = rc >= 0;
    for (int t = 0; rc >= 0 && t < T; t++) {
        out[t] = strdup(raw[t] ? raw[t] : "");
        if (!out[t])
            rc = -1;
        else
            fix_utf8(out[t]);
    }
    if (read)
        H5Dvlen_reclaim(mt, ms, H5P_DEFAULT, raw);
    free(raw);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Tclose(mt);
    H5Tclose(ft);
    if (rc < 0) {
        hs_maps_free_token_text(out, T);
        return h5_fail(r->path, "reading token_text");
    }
    return HS_OK;
}

void hs_maps_free_token_text(char **text, int T)
{
    for (int t = 0; text && t < T; t++) {
        free(text[t]);
        text[t] = NULL;
    }
}

long long hs_maps_open_ids(void)
{
    h5_quiet();
    return (long long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
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
    if (r->file >= 0)
        H5Fclose(r->file);
    free(r->info.model_config);
    free(r);
}
