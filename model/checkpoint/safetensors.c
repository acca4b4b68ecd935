#include "safetensors.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "json.h"

/* The mapped files, for hs_st_fault: a signal handler reads this table, so
 * slots are published with their range set and cleared before the unmap. */
enum { MAX_MAPS = 256 };
static struct {
    _Atomic(uintptr_t) lo, hi;
} maps[MAX_MAPS];

static size_t page_bytes; /* read by the handler: set before a slot is */

static void maps_add(const unsigned char *p, size_t n)
{
    if (!page_bytes)
        page_bytes = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < MAX_MAPS; i++)
        if (!atomic_load(&maps[i].hi)) {
            atomic_store(&maps[i].lo, (uintptr_t)p);
            atomic_store(&maps[i].hi, (uintptr_t)p + n);
            return;
        }
}

static void maps_remove(const unsigned char *p)
{
    for (int i = 0; i < MAX_MAPS; i++)
        if (atomic_load(&maps[i].lo) == (uintptr_t)p)
            atomic_store(&maps[i].hi, 0), atomic_store(&maps[i].lo, 0);
}

static size_t dtype_size(const char *name, hs_dtype *dt)
{
    static const struct { const char *name; size_t size; hs_dtype dt; } known[] = {
        { "F32", 4, HS_DT_F32 },  { "F16", 2, HS_DT_F16 },   { "BF16", 2, HS_DT_BF16 },
        { "F64", 8, HS_DT_F64 }, { "I64", 8, HS_DT_OTHER }, { "I32", 4, HS_DT_OTHER },
        { "I16", 2, HS_DT_OTHER }, { "I8", 1, HS_DT_OTHER },  { "U8", 1, HS_DT_OTHER },
        { "BOOL", 1, HS_DT_OTHER },
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(name, known[i].name)) {
            *dt = known[i].dt;
            return known[i].size;
        }
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const hs_st_tensor *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* Validates one header entry into t. */
static int parse_entry(hs_st_tensor *t, const cJSON *e, const hs_safetensors *st)
{
    const char *p = st->path, *n = e->string;
    if (!cJSON_IsObject(e))
        return hs_fail(HS_EFORMAT, "%s: tensor %s: header entry is not an object", p, n);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return hs_fail(HS_EFORMAT, "%s: tensor %s: missing dtype", p, n);
    size_t esize = dtype_size(dt->valuestring, &t->dtype);
    if (!esize)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: unknown dtype \"%.16s\"", p, n, dt->valuestring);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dt->valuestring);
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > HS_ST_MAX_DIMS)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: shape must be a list of at most %d sizes", p,
                       n, HS_ST_MAX_DIMS);
    size_t count = 1;
    const cJSON *s;
    t->ndim = 0;
    cJSON_ArrayForEach(s, shape)
    {
        if (!cJSON_IsNumber(s) || s->valuedouble < 0 || s->valuedouble > 1e15 ||
            s->valuedouble != floor(s->valuedouble))
            return hs_fail(HS_EFORMAT, "%s: tensor %s: shape entry is not a size", p, n);
        t->shape[t->ndim++] = (int64_t)s->valuedouble;
        if (t->shape[t->ndim - 1] && count > SIZE_MAX / (size_t)t->shape[t->ndim - 1])
            return hs_fail(HS_EFORMAT, "%s: tensor %s: shape overflows", p, n);
        count *= (size_t)t->shape[t->ndim - 1];
    }
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        !cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(off, 1)))
        return hs_fail(HS_EFORMAT, "%s: tensor %s: data_offsets must be [begin, end]", p, n);
    double b = cJSON_GetArrayItem(off, 0)->valuedouble, en = cJSON_GetArrayItem(off, 1)->valuedouble;
    if (en < b)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: data_offsets [%.0f, %.0f] end before begin", p,
                       n, b, en);
    if (b < 0 || en > (double)st->data_len || b != floor(b) || en != floor(en))
        return hs_fail(HS_EFORMAT,
                       "%s: tensor %s: data_offsets [%.0f, %.0f] outside the %zu data bytes", p, n,
                       b, en, st->data_len);
    t->begin = (size_t)b;
    t->end = (size_t)en;
    if (count > SIZE_MAX / esize || t->end - t->begin != count * esize)
        return hs_fail(HS_EFORMAT,
                       "%s: tensor %s: %zu bytes for %zu elements of %s (expected %zu)", p, n,
                       t->end - t->begin, count, t->dtype_name, count * esize);
    t->name = strdup(n);
    if (!t->name)
        return hs_fail(HS_ENOMEM, "%s: out of memory", p);
    return HS_OK;
}

int hs_st_map(hs_safetensors *st, const char *path, size_t least, const char *short_why)
{
    memset(st, 0, sizeof *st);
    st->fd = -1;
    snprintf(st->path, sizeof st->path, "%s", path);
    st->fd = hs_open_regular(path, &st->map_len);
    if (st->fd < 0)
        return HS_EIO; /* the message names the file */
    if (st->map_len < least || !st->map_len) {
        int rc = hs_fail(HS_EFORMAT, "%s: truncated (%zu bytes, %s)", path, st->map_len,
                         short_why);
        hs_st_close(st);
        return rc;
    }
    st->map = mmap(NULL, st->map_len, PROT_READ, MAP_PRIVATE, st->fd, 0);
    if (st->map == MAP_FAILED || fstat(st->fd, &st->opened)) {
        if (st->map == MAP_FAILED)
            st->map = NULL;
        hs_st_close(st);
        return hs_fail(HS_EIO, "%s: cannot map: %s", path, strerror(errno));
    }
    maps_add(st->map, st->map_len);
    return HS_OK;
}

int hs_st_open(hs_safetensors *st, const char *path)
{
    int rc = hs_st_map(st, path, 8, "no header length");
    if (rc)
        return rc;
    const uint64_t hlen = hs_le_bytes(st->map, 8);
    if (hlen > st->map_len - 8 || hlen > (100u << 20)) {
        int rc = hs_fail(HS_EFORMAT, "%s: header length %llu exceeds the file (%zu bytes)", path,
                         (unsigned long long)hlen, st->map_len);
        hs_st_close(st);
        return rc;
    }
    st->data = st->map + 8 + hlen;
    st->data_len = st->map_len - 8 - hlen;
    cJSON *root = NULL;
    char what[1100];
    snprintf(what, sizeof what, "%s: header", path);
    if (hs_json_parse(&root, (const char *)st->map + 8, (size_t)hlen, what)) {
        hs_st_close(st);
        return HS_EFORMAT;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        hs_st_close(st);
        return hs_fail(HS_EFORMAT, "%s: header is not a JSON object", path);
    }
    int n = cJSON_GetArraySize(root);
    st->t = hs_calloc((size_t)n, sizeof *st->t, "safetensors header");
    if (!st->t)
        rc = HS_ENOMEM;
    const cJSON *e;
    cJSON_ArrayForEach(e, root)
    {
        if (rc)
            break;
        if (!strcmp(e->string, "__metadata__"))
            continue;
        rc = parse_entry(&st->t[st->n], e, st);
        if (!rc)
            st->n++;
    }
    cJSON_Delete(root);
    if (!rc) {
        /* Overlap check on a sorted copy; the header order stays as written. */
        hs_st_tensor *sorted = hs_calloc((size_t)st->n, sizeof *sorted, "safetensors check");
        if (!sorted)
            rc = HS_ENOMEM;
        else {
            memcpy(sorted, st->t, sizeof *sorted * st->n);
            qsort(sorted, (size_t)st->n, sizeof *sorted, cmp_begin);
            int last = -1; /* the non-empty tensor reaching furthest so far */
            for (int i = 0; i < st->n && !rc; i++) {
                if (sorted[i].end == sorted[i].begin)
                    continue;
                if (last >= 0 && sorted[i].begin < sorted[last].end)
                    rc = hs_fail(HS_EFORMAT, "%s: tensors %s and %s overlap in the data section",
                                 path, sorted[last].name, sorted[i].name);
                if (last < 0 || sorted[i].end > sorted[last].end)
                    last = i;
            }
            free(sorted);
        }
    }
    if (rc)
        hs_st_close(st);
    return rc;
}

int hs_st_fault(void *addr)
{
    const uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < MAX_MAPS; i++)
        if (a >= atomic_load(&maps[i].lo) && a < atomic_load(&maps[i].hi)) {
            const uintptr_t page = a & ~(uintptr_t)(page_bytes - 1);
            return mmap((void *)page, page_bytes, PROT_READ,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED;
        }
    return 0;
}

int hs_st_unchanged(const hs_safetensors *st)
{
    struct stat now;
    if (st->fd < 0 || fstat(st->fd, &now))
        return hs_fail(HS_EIO, "%s: cannot check the file: %s", st->path, strerror(errno));
    const struct stat *was = &st->opened;
    if (now.st_size != was->st_size)
        return hs_fail(HS_EIO, "%s changed while it was read (%lld bytes, then %lld): the "
                       "weights are from neither version", st->path, (long long)was->st_size,
                       (long long)now.st_size);
    if (now.st_mtim.tv_sec != was->st_mtim.tv_sec || now.st_mtim.tv_nsec != was->st_mtim.tv_nsec)
        return hs_fail(HS_EIO, "%s changed while it was read (rewritten in place): the weights "
                       "are from neither version", st->path);
    return HS_OK;
}

void hs_st_close(hs_safetensors *st)
{
    for (int i = 0; st->t && i < st->n; i++)
        free(st->t[i].name);
    free(st->t);
    if (st->map) {
        maps_remove(st->map);
        munmap(st->map, st->map_len);
    }
    if (st->fd >= 0)
        close(st->fd);
    memset(st, 0, sizeof *st);
    st->fd = -1;
}

const hs_st_tensor *hs_st_find(const hs_safetensors *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name))
            return &st->t[i];
    return NULL;
}

double hs_st_get(const hs_safetensors *st, const hs_st_tensor *t, size_t i)
{
    hs_real v;
    hs_dtype_widen(&v, st->data + t->begin + hs_dtype_bytes(t->dtype) * i, t->dtype, 1);
    return v;
}

int hs_st_read_bytes(const hs_safetensors *st, const hs_st_tensor *t, size_t first, size_t n,
                     void *dst)
{
    unsigned char *out = dst;
    const off_t at = (off_t)((size_t)(st->data - st->map) + t->begin + first);
    size_t got = 0;
    while (got < n) {
        const ssize_t r = pread(st->fd, out + got, n - got, at + (off_t)got);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0 || errno != EINTR)
            return hs_fail(HS_EIO, "%s: tensor %s: cannot read it: %s", st->path, t->name,
                           r < 0 ? strerror(errno) : "the file ended early");
    }
    return HS_OK;
}

int hs_st_read(const hs_safetensors *st, const hs_st_tensor *t, size_t first, size_t n,
               hs_real *dst)
{
    enum { BLOCK = 1 << 20 };
    const size_t es = hs_dtype_bytes(t->dtype);
    unsigned char *buf = malloc(n * es < BLOCK ? n * es + 1 : BLOCK);
    if (!buf)
        return hs_fail(HS_ENOMEM, "%s: tensor %s: a read buffer", st->path, t->name);
    int rc = HS_OK;
    for (size_t done = 0; !rc && done < n;) {
        const size_t k = n - done < BLOCK / es ? n - done : BLOCK / es;
        rc = hs_st_read_bytes(st, t, (first + done) * es, k * es, buf);
        if (!rc)
            hs_dtype_widen(dst + done, buf, t->dtype, k);
        done += k;
    }
    free(buf);
    return rc;
}

void hs_st_release(const hs_safetensors *st, const hs_st_tensor *t)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)(st->data + t->begin), hi = (uintptr_t)(st->data + t->end);
    lo = (lo + page - 1) / page * page;
    hi = hi / page * page;
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int hs_st_write_with(const char *path, const hs_st_out *t, int n,
                     int (*emit)(void *ctx, int i, FILE *f), void *ctx)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON_AddStringToObject(e, "dtype", t[i].dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int k = 0; k < t[i].ndim; k++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[k]));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(offset + t[i].bytes)));
        offset += t[i].bytes;
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json)
        return hs_fail(HS_ENOMEM, "%s: cannot build the header", path);
    size_t hlen = strlen(json), padded = (hlen + 8 + 7) / 8 * 8 - 8;
    char tmp[1200];
    FILE *f = hs_tmp_fopen(path, tmp, sizeof tmp);
    int rc = HS_OK;
    if (!f) {
        rc = HS_EIO;
    } else {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++)
            len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
        int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, hlen, f) == hlen;
        for (size_t i = hlen; ok && i < padded; i++)
            ok = fputc(' ', f) != EOF;
        for (int i = 0; ok && !rc && i < n; i++)
            rc = emit(ctx, i, f);
        if (fflush(f) || fsync(fileno(f)))
            ok = 0;
        if (fclose(f))
            ok = 0;
        f = NULL;
        if (!rc && !ok)
            rc = hs_fail(HS_EIO, "%s: write failed: %s", tmp, strerror(errno));
        if (!rc)
            rc = hs_tmp_commit(tmp, path, 1), *tmp = 0; /* moved, or removed */
    }
    if (rc && f)
        fclose(f);
    if (rc && *tmp)
        unlink(tmp);
    free(json);
    return rc;
}

/* hs_st_write's tensors: fill's floats, one tensor at a time. */
typedef struct {
    const hs_st_out *t;
    void (*fill)(void *ctx, int i, float *out);
    void *ctx;
    float *buf;
} f32_writer;

static int emit_f32(void *ctx, int i, FILE *f)
{
    const f32_writer *w = ctx;
    const size_t count = w->t[i].bytes / 4;
    w->fill(w->ctx, i, w->buf); /* little-endian host assumed, as on x86-64/aarch64 */
    if (fwrite(w->buf, sizeof(float), count, f) != count)
        return hs_fail(HS_EIO, "cannot write tensor %s: %s", w->t[i].name, strerror(errno));
    return HS_OK;
}

int hs_st_write(const char *path, const hs_st_spec *specs, int n,
                void (*fill)(void *ctx, int i, float *out), void *ctx)
{
    hs_st_out *t = hs_calloc((size_t)n + 1, sizeof *t, "safetensors header");
    if (!t)
        return HS_ENOMEM;
    size_t most = 1;
    for (int i = 0; i < n; i++) {
        size_t count = 1;
        for (int k = 0; k < specs[i].ndim; k++)
            count *= (size_t)specs[i].shape[k];
        t[i] = (hs_st_out){ specs[i].name, "F32", specs[i].ndim, specs[i].shape, 4 * count };
        most = count > most ? count : most;
    }
    f32_writer w = { t, fill, ctx, hs_calloc(most, sizeof(float), "safetensors write buffer") };
    int rc = w.buf ? hs_st_write_with(path, t, n, emit_f32, &w) : HS_ENOMEM;
    free(w.buf);
    free(t);
    return rc;
}
