#include "pytorch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "memory.h"
#include "pickle.h"

/* ---- the state dict's entries ------------------------------------------- */

/* One storage class: its element, as a tensor's dtype. */
typedef struct {
    hs_dtype dtype;
    const char *name; /* hs_st_tensor.dtype_name */
    size_t bytes;
} storage_type;

static int storage_type_of(hs_pk_global g, storage_type *t)
{
    static const struct {
        hs_pk_global g;
        storage_type t;
    } known[] = {
        { HS_PK_FLOAT_STORAGE, { HS_DT_F32, "F32", 4 } },
        { HS_PK_HALF_STORAGE, { HS_DT_F16, "F16", 2 } },
        { HS_PK_BFLOAT16_STORAGE, { HS_DT_BF16, "BF16", 2 } },
        { HS_PK_DOUBLE_STORAGE, { HS_DT_F64, "F64", 8 } },
        { HS_PK_LONG_STORAGE, { HS_DT_OTHER, "I64", 8 } },
        { HS_PK_INT_STORAGE, { HS_DT_OTHER, "I32", 4 } },
        { HS_PK_BYTE_STORAGE, { HS_DT_OTHER, "U8", 1 } },
        { HS_PK_BOOL_STORAGE, { HS_DT_OTHER, "BOOL", 1 } },
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (known[i].g == g) {
            *t = known[i].t;
            return 1;
        }
    return 0;
}

/* A state-dict entry as its pickle describes it, checked against itself
 * (the storage it names is located afterwards). */
typedef struct {
    char *name;
    const hs_pk *key;   /* the storage's key (a STR) */
    storage_type type;
    int64_t numel;      /* the storage's elements */
    int64_t view_at;    /* legacy views: the view's first element in the storage, */
    int64_t view_numel; /* and its elements (numel when not a view) */
    int64_t offset;     /* the tensor's first element in the storage (or view) */
    int64_t count;      /* the tensor's elements */
    int ndim;
    int64_t shape[HS_ST_MAX_DIMS];
} entry;

typedef struct {
    const char *path;
    int legacy;
    entry *e;
    size_t n;
} state;

static void state_free(state *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->e[i].name);
    free(s->e);
    memset(s, 0, sizeof *s);
}

static int is_int(const hs_pk *v)
{
    return v && v->kind == HS_PK_INT;
}

static int str_is(const hs_pk *v, const char *s)
{
    return v && v->kind == HS_PK_STR && v->len == strlen(s) && !memcmp(v->bytes, s, v->len);
}

/* The persistent id ('storage', class, key, location, numel[, view]) into
 * e: a view (view_key, offset, numel) only in the legacy format. */
static int read_storage_id(const state *s, entry *e, const hs_pk *pid)
{
    const char *p = s->path, *n = e->name;
    const hs_pk *id = pid->args;
    const size_t want = s->legacy ? 6 : 5;
    if (id->kind != HS_PK_TUPLE || id->n != want || !str_is(id->item[0], "storage"))
        return hs_fail(HS_EFORMAT, "%s: tensor %s: its persistent id is not ('storage', class, "
                                   "key, location, size%s)",
                       p, n, s->legacy ? ", view" : "");
    const hs_pk *cls = id->item[1], *key = id->item[2], *numel = id->item[4];
    if (cls->kind != HS_PK_GLOBAL || !storage_type_of(cls->global, &e->type))
        return hs_fail(HS_EFORMAT, "%s: tensor %s: its storage class is %s, not a torch storage",
                       p, n, cls->kind == HS_PK_GLOBAL ? hs_pk_global_name(cls->global)
                                                       : hs_pk_kind_name(cls));
    if (key->kind != HS_PK_STR || !key->len || memchr(key->bytes, 0, key->len) ||
        memchr(key->bytes, '/', key->len) || key->len > 64)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: its storage key is not a plain name", p, n);
    if (!is_int(numel) || numel->i < 0)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: its storage size is not a count", p, n);
    if ((uint64_t)numel->i > (uint64_t)INT64_MAX / e->type.bytes)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: its storage size %lld overflows", p, n,
                       (long long)numel->i);
    e->key = key, e->numel = numel->i;
    e->view_at = 0, e->view_numel = numel->i;
    const hs_pk *view = s->legacy ? id->item[5] : NULL;
    if (view && view->kind != HS_PK_NONE) {
        if (view->kind != HS_PK_TUPLE || view->n != 3 || view->item[0]->kind != HS_PK_STR ||
            !is_int(view->item[1]) || !is_int(view->item[2]))
            return hs_fail(HS_EFORMAT, "%s: tensor %s: its storage view is not (key, offset, "
                                       "size)",
                           p, n);
        const int64_t at = view->item[1]->i, vn = view->item[2]->i;
        if (at < 0 || vn < 0 || at > e->numel || vn > e->numel - at)
            return hs_fail(HS_EFORMAT, "%s: tensor %s: its storage view [%lld, +%lld) lies "
                                       "outside its storage of %lld elements",
                           p, n, (long long)at, (long long)vn, (long long)e->numel);
        e->view_at = at, e->view_numel = vn;
    }
    return HS_OK;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks
 * [, metadata]) into e: a contiguous tensor inside its storage. */
static int read_tensor(const state *s, entry *e, const hs_pk *call)
{
    const char *p = s->path, *n = e->name;
    const hs_pk *a = call->args;
    if (call->global == HS_PK_REBUILD_PARAMETER) { /* (tensor, requires_grad, hooks) */
        if (a->n != 3 || a->item[0]->kind != HS_PK_CALL ||
            a->item[0]->global != HS_PK_REBUILD_TENSOR_V2)
            return hs_fail(HS_EFORMAT, "%s: tensor %s: _rebuild_parameter's arguments are not "
                                       "(tensor, requires_grad, hooks)",
                           p, n);
        a = a->item[0]->args;
    }
    if ((a->n != 6 && a->n != 7) || a->item[0]->kind != HS_PK_PERSID || !is_int(a->item[1]) ||
        a->item[2]->kind != HS_PK_TUPLE || a->item[3]->kind != HS_PK_TUPLE ||
        a->item[4]->kind != HS_PK_BOOL || a->item[5]->kind != HS_PK_DICT)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: _rebuild_tensor_v2's arguments are not "
                                   "(storage, offset, size, stride, requires_grad, hooks)",
                       p, n);
    int rc = read_storage_id(s, e, a->item[0]);
    if (rc)
        return rc;
    const hs_pk *size = a->item[2], *stride = a->item[3];
    if (size->n > HS_ST_MAX_DIMS || stride->n != size->n)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: %zu sizes and %zu strides (at most %d "
                                   "dimensions, one stride each)",
                       p, n, size->n, stride->n, HS_ST_MAX_DIMS);
    e->ndim = (int)size->n;
    for (int d = 0; d < e->ndim; d++) {
        if (!is_int(size->item[d]) || size->item[d]->i < 0 || !is_int(stride->item[d]))
            return hs_fail(HS_EFORMAT, "%s: tensor %s: size or stride %d is not an int64 count",
                           p, n, d);
        e->shape[d] = size->item[d]->i;
    }
    /* contiguous: each stride the product of the later sizes (size-1
     * dimensions' strides do not matter); counted without overflow */
    int64_t count = 1;
    for (int d = e->ndim - 1; d >= 0; d--) {
        if (e->shape[d] != 1 && stride->item[d]->i != count && e->shape[d] != 0)
            return hs_fail(HS_EFORMAT, "%s: tensor %s: not contiguous (dimension %d has stride "
                                       "%lld, %lld expected)",
                           p, n, d, (long long)stride->item[d]->i, (long long)count);
        if (e->shape[d] && count > INT64_MAX / e->shape[d])
            return hs_fail(HS_EFORMAT, "%s: tensor %s: its sizes overflow", p, n);
        count *= e->shape[d];
    }
    e->count = count;
    e->offset = a->item[1]->i;
    if (e->offset < 0 || e->offset > e->view_numel || count > e->view_numel - e->offset)
        return hs_fail(HS_EFORMAT, "%s: tensor %s: elements [%lld, +%lld) lie outside its storage "
                                   "of %lld",
                       p, n, (long long)e->offset, (long long)count, (long long)e->view_numel);
    return HS_OK;
}

static int cmp_entry_name(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

/* The state dict (a dict of tensors) into s->e. */
static int read_state(state *s, const hs_pk *top)
{
    if (!top || top->kind != HS_PK_DICT)
        return hs_fail(HS_EFORMAT, "%s: the pickle holds %s, not a state dict (a dict of "
                                   "tensors)",
                       s->path, hs_pk_kind_name(top));
    if (!(s->e = hs_calloc(top->n / 2 + 1, sizeof *s->e, "state dict")))
        return HS_ENOMEM;
    int rc = HS_OK;
    for (size_t i = 0; !rc && i < top->n; i += 2) {
        const hs_pk *key = top->item[i], *value = top->item[i + 1];
        if (key->kind != HS_PK_STR || memchr(key->bytes, 0, key->len) || key->len > 1024)
            return hs_fail(HS_EFORMAT, "%s: a state-dict key that is not a tensor name (%s)",
                           s->path, hs_pk_kind_name(key));
        entry *e = &s->e[s->n];
        if (!(e->name = hs_calloc(key->len + 1, 1, "state dict")))
            return HS_ENOMEM;
        memcpy(e->name, key->bytes, key->len);
        e->name[key->len] = 0;
        s->n++;
        if (value->kind != HS_PK_CALL)
            return hs_fail(HS_EFORMAT, "%s: %s is %s, not a tensor", s->path, e->name,
                           hs_pk_kind_name(value));
        rc = read_tensor(s, e, value);
    }
    if (rc || !s->n)
        return rc;
    entry *sorted = hs_calloc(s->n, sizeof *sorted, "state dict");
    if (!sorted)
        return HS_ENOMEM;
    memcpy(sorted, s->e, s->n * sizeof *sorted);
    qsort(sorted, s->n, sizeof *sorted, cmp_entry_name);
    for (size_t i = 1; !rc && i < s->n; i++)
        if (!strcmp(sorted[i].name, sorted[i - 1].name))
            rc = hs_fail(HS_EFORMAT, "%s: tensor %s appears twice in the state dict", s->path,
                         sorted[i].name);
    free(sorted);
    return rc;
}

/* Fills st->t from s: entry i's bytes at storage_begin[i] (the file offset
 * of its storage's first element). */
static int fill_tensors(hs_safetensors *st, state *s, const uint64_t *storage_begin)
{
    if (!(st->t = hs_calloc(s->n + 1, sizeof *st->t, "state dict")))
        return HS_ENOMEM;
    for (size_t i = 0; i < s->n; i++) {
        const entry *e = &s->e[i];
        hs_st_tensor *t = &st->t[st->n++];
        t->name = e->name, s->e[i].name = NULL;
        t->dtype = e->type.dtype;
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s", e->type.name);
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof t->shape);
        t->begin = (size_t)(storage_begin[i] + (uint64_t)(e->view_at + e->offset) * e->type.bytes);
        t->end = t->begin + (size_t)e->count * e->type.bytes;
    }
    st->data = st->map;
    st->data_len = st->map_len;
    return HS_OK;
}

/* ---- storages: one key, one class and size ------------------------------ */

typedef struct {
    const hs_pk *key;
    storage_type type;
    int64_t numel;
    uint64_t begin; /* in the file */
    int located;
} storage;

static int key_cmp(const hs_pk *a, const hs_pk *b)
{
    const size_t n = a->len < b->len ? a->len : b->len;
    const int c = memcmp(a->bytes, b->bytes, n);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int cmp_storage(const void *a, const void *b)
{
    return key_cmp(((const storage *)a)->key, ((const storage *)b)->key);
}

/* The distinct storages the entries name (sorted by key, *n of them), each
 * key with one class and size. */
static int storages_of(const state *s, storage **out, size_t *n)
{
    storage *all = hs_calloc(s->n + 1, sizeof *all, "storages");
    if (!all)
        return HS_ENOMEM;
    for (size_t i = 0; i < s->n; i++)
        all[i] = (storage){ s->e[i].key, s->e[i].type, s->e[i].numel, 0, 0 };
    qsort(all, s->n, sizeof *all, cmp_storage);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (k && !key_cmp(all[k - 1].key, all[i].key)) {
            if (all[k - 1].type.dtype != all[i].type.dtype ||
                strcmp(all[k - 1].type.name, all[i].type.name) || all[k - 1].numel != all[i].numel) {
                const int rc = hs_fail(HS_EFORMAT, "%s: storage %.*s is named with two classes or "
                                                   "sizes",
                                       s->path, (int)all[i].key->len,
                                       (const char *)all[i].key->bytes);
                free(all);
                return rc;
            }
            continue;
        }
        all[k++] = all[i];
    }
    *out = all;
    *n = k;
    return HS_OK;
}

static storage *storage_find(storage *all, size_t n, const hs_pk *key)
{
    storage probe = { .key = key };
    return bsearch(&probe, all, n, sizeof *all, cmp_storage);
}

/* Each entry's storage's file offset, from the located storages. */
static int place(hs_safetensors *st, state *s, storage *all, size_t n)
{
    uint64_t *begin = hs_calloc(s->n + 1, sizeof *begin, "storages");
    if (!begin)
        return HS_ENOMEM;
    for (size_t i = 0; i < s->n; i++)
        begin[i] = storage_find(all, n, s->e[i].key)->begin;
    int rc = fill_tensors(st, s, begin);
    free(begin);
    return rc;
}

/* ---- the zip format ------------------------------------------------------ */

typedef struct {
    const unsigned char *name;
    size_t name_len;
    unsigned method;
    uint64_t csize, usize, begin;
} member;

static int cmp_member(const void *a, const void *b)
{
    const member *x = a, *y = b;
    const size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    const int c = memcmp(x->name, y->name, n);
    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* A member name: relative, no "..", no NUL or backslash. */
static int member_name_ok(const unsigned char *s, size_t n)
{
    if (!n || s[0] == '/' || memchr(s, 0, n) || memchr(s, '\\', n))
        return 0;
    for (size_t i = 0; i < n;) {
        const unsigned char *slash = memchr(s + i, '/', n - i);
        const size_t end = slash ? (size_t)(slash - s) : n;
        if (end - i == 2 && s[i] == '.' && s[i + 1] == '.')
            return 0;
        i = end + 1;
    }
    return 1;
}

/* The end of central directory record (ZIP64's where needed): where the
 * central directory lies and how many entries it has. */
static int zip_directory(const hs_safetensors *st, uint64_t *at, uint64_t *size, uint64_t *count)
{
    const unsigned char *m = st->map;
    const size_t len = st->map_len;
    size_t eocd = SIZE_MAX;
    for (size_t i = len < 22 ? 0 : len - 22 + 1; i-- > 0 && len - i <= 22 + 65535;)
        if (hs_le_bytes(m + i, 4) == 0x06054b50) {
            eocd = i;
            break;
        }
    if (eocd == SIZE_MAX)
        return hs_fail(HS_EFORMAT, "%s: a zip archive without its end of central directory",
                       st->path);
    *count = hs_le_bytes(m + eocd + 10, 2), *size = hs_le_bytes(m + eocd + 12, 4), *at = hs_le_bytes(m + eocd + 16, 4);
    if (hs_le_bytes(m + eocd + 4, 2) || hs_le_bytes(m + eocd + 6, 2))
        return hs_fail(HS_EFORMAT, "%s: a zip archive of several disks", st->path);
    if (*count == 0xffff || *size == 0xffffffff || *at == 0xffffffff) {
        if (eocd < 20 || hs_le_bytes(m + eocd - 20, 4) != 0x07064b50)
            return hs_fail(HS_EFORMAT, "%s: ZIP64 sizes without the ZIP64 locator", st->path);
        const uint64_t rec = hs_le_bytes(m + eocd - 20 + 8, 8);
        if (len < 56 || rec > len - 56 || hs_le_bytes(m + rec, 4) != 0x06064b50)
            return hs_fail(HS_EFORMAT, "%s: the ZIP64 end of central directory lies outside the "
                                       "file",
                           st->path);
        *count = hs_le_bytes(m + rec + 32, 8), *size = hs_le_bytes(m + rec + 40, 8), *at = hs_le_bytes(m + rec + 48, 8);
    }
    if (*at > len || *size > len - *at || *count > *size / 46)
        return hs_fail(HS_EFORMAT, "%s: the zip central directory (%llu entries, %llu bytes at "
                                   "%llu) lies outside the file",
                       st->path, (unsigned long long)*count, (unsigned long long)*size,
                       (unsigned long long)*at);
    return HS_OK;
}

/* One central directory entry at *pos (inside [*pos, end)) into mb, its
 * local header checked: *pos moves past it. */
static int zip_entry(const hs_safetensors *st, uint64_t *pos, uint64_t end, member *mb)
{
    const unsigned char *m = st->map, *c = m + *pos;
    if (end - *pos < 46 || hs_le_bytes(c, 4) != 0x02014b50)
        return hs_fail(HS_EFORMAT, "%s: a zip central directory entry is malformed at byte %llu",
                       st->path, (unsigned long long)*pos);
    const size_t nlen = hs_le_bytes(c + 28, 2), xlen = hs_le_bytes(c + 30, 2), clen = hs_le_bytes(c + 32, 2);
    if (end - *pos - 46 < nlen + xlen + clen)
        return hs_fail(HS_EFORMAT, "%s: a zip central directory entry runs past the directory",
                       st->path);
    mb->name = c + 46, mb->name_len = nlen;
    if (!member_name_ok(mb->name, nlen))
        return hs_fail(HS_EFORMAT, "%s: zip member \"%.*s\": not a relative path inside the "
                                   "archive",
                       st->path, (int)(nlen > 200 ? 200 : nlen), (const char *)mb->name);
    if (hs_le_bytes(c + 8, 2) & 1)
        return hs_fail(HS_EFORMAT, "%s: zip member %.*s is encrypted", st->path, (int)nlen,
                       (const char *)mb->name);
    mb->method = (unsigned)hs_le_bytes(c + 10, 2);
    mb->csize = hs_le_bytes(c + 20, 4), mb->usize = hs_le_bytes(c + 24, 4);
    uint64_t local = hs_le_bytes(c + 42, 4);
    /* ZIP64's extra field: the sizes and offset that did not fit, in order */
    const unsigned char *x = c + 46 + nlen, *xend = x + xlen;
    while (xend - x >= 4) {
        const unsigned id = (unsigned)hs_le_bytes(x, 2), sz = (unsigned)hs_le_bytes(x + 2, 2);
        if ((size_t)(xend - x - 4) < sz)
            break;
        if (id == 1) {
            const unsigned char *f = x + 4, *fend = f + sz;
            uint64_t *wide[] = { &mb->usize, &mb->csize, &local };
            for (int k = 0; k < 3; k++)
                if (*wide[k] == 0xffffffff) {
                    if (fend - f < 8)
                        return hs_fail(HS_EFORMAT, "%s: zip member %.*s: a short ZIP64 field",
                                       st->path, (int)nlen, (const char *)mb->name);
                    *wide[k] = hs_le_bytes(f, 8), f += 8;
                }
        }
        x += 4 + sz;
    }
    *pos += 46 + nlen + xlen + clen;
    const size_t len = st->map_len;
    if (local > len || len - local < 30 || hs_le_bytes(m + local, 4) != 0x04034b50)
        return hs_fail(HS_EFORMAT, "%s: zip member %.*s: its local header is missing", st->path,
                       (int)nlen, (const char *)mb->name);
    const uint64_t lnlen = hs_le_bytes(m + local + 26, 2), lxlen = hs_le_bytes(m + local + 28, 2);
    mb->begin = local + 30 + lnlen + lxlen;
    if (lnlen != nlen || mb->begin > len || memcmp(m + local + 30, mb->name, nlen) ||
        mb->csize > len - mb->begin)
        return hs_fail(HS_EFORMAT, "%s: zip member %.*s: its local header or data disagree with "
                                   "the central directory or lie outside the file",
                       st->path, (int)nlen, (const char *)mb->name);
    return HS_OK;
}

/* A member read in place: stored (never inflated), its sizes equal. */
static int zip_stored(const hs_safetensors *st, const member *mb)
{
    if (mb->method != 0 || mb->csize != mb->usize)
        return hs_fail(HS_EFORMAT, "%s: zip member %.*s is compressed (method %u): PyTorch "
                                   "stores its members, and headscope never inflates one",
                       st->path, (int)mb->name_len, (const char *)mb->name, mb->method);
    return HS_OK;
}

static int zip_members(const hs_safetensors *st, member **out, size_t *n)
{
    uint64_t at = 0, size = 0, count = 0;
    int rc = zip_directory(st, &at, &size, &count);
    if (rc)
        return rc;
    member *mb = hs_calloc(count + 1, sizeof *mb, "zip directory");
    if (!mb)
        return HS_ENOMEM;
    uint64_t pos = at;
    for (uint64_t i = 0; !rc && i < count; i++)
        rc = zip_entry(st, &pos, at + size, &mb[i]);
    if (!rc)
        qsort(mb, count, sizeof *mb, cmp_member);
    for (uint64_t i = 1; !rc && i < count; i++)
        if (!cmp_member(&mb[i], &mb[i - 1]))
            rc = hs_fail(HS_EFORMAT, "%s: zip member %.*s appears twice", st->path,
                         (int)mb[i].name_len, (const char *)mb[i].name);
    if (rc) {
        free(mb);
        return rc;
    }
    *out = mb;
    *n = count;
    return HS_OK;
}

static const member *member_find(const member *mb, size_t n, const char *name, size_t len)
{
    member probe = { .name = (const unsigned char *)name, .name_len = len };
    return bsearch(&probe, mb, n, sizeof *mb, cmp_member);
}

/* The one PREFIX/data.pkl (PREFIX without '/'): *prefix_len. */
static const member *zip_pickle(const hs_safetensors *st, const member *mb, size_t n,
                                size_t *prefix_len)
{
    const member *found = NULL;
    static const char tail[] = "/data.pkl";
    const size_t tl = sizeof tail - 1;
    for (size_t i = 0; i < n; i++) {
        const size_t l = mb[i].name_len;
        if (l <= tl || memcmp(mb[i].name + l - tl, tail, tl) || memchr(mb[i].name, '/', l - tl))
            continue;
        if (found) {
            hs_fail(HS_EFORMAT, "%s: two pickles in the archive (%.*s and %.*s)", st->path,
                    (int)found->name_len, (const char *)found->name, (int)l,
                    (const char *)mb[i].name);
            return NULL;
        }
        found = &mb[i];
        *prefix_len = l - tl;
    }
    if (!found)
        hs_fail(HS_EFORMAT, "%s: a zip archive without */data.pkl: not a PyTorch checkpoint",
                st->path);
    return found;
}

static int open_zip(hs_safetensors *st, hs_pickle *pk)
{
    member *mb;
    size_t n, pl;
    int rc = zip_members(st, &mb, &n);
    if (rc)
        return rc;
    const member *pkl = zip_pickle(st, mb, n, &pl);
    if (pkl && pl > 512)
        rc = hs_fail(HS_EFORMAT, "%s: the archive's folder name is %zu bytes long", st->path, pl);
    if (!pkl || rc || (rc = zip_stored(st, pkl))) {
        free(mb);
        return pkl ? rc : HS_EFORMAT;
    }
    char name[1200];
    snprintf(name, sizeof name, "%.*sbyteorder", (int)pl + 1, (const char *)pkl->name);
    const member *order = member_find(mb, n, name, strlen(name));
    if (order && (zip_stored(st, order) || order->usize != 6 ||
                  memcmp(st->map + order->begin, "little", 6))) {
        free(mb);
        return hs_fail(HS_EFORMAT, "%s: %s is not \"little\": saved on a big-endian machine",
                       st->path, name);
    }
    char what[1200];
    snprintf(what, sizeof what, "%s: %.*s", st->path, (int)pkl->name_len,
             (const char *)pkl->name);
    hs_pk *top;
    size_t used;
    state s = { .path = st->path };
    storage *all = NULL;
    size_t n_all = 0;
    rc = hs_pickle_read(pk, st->map + pkl->begin, pkl->usize, what, &top, &used);
    if (!rc)
        rc = read_state(&s, top);
    if (!rc)
        rc = storages_of(&s, &all, &n_all);
    for (size_t i = 0; !rc && i < n_all; i++) {
        const int k = snprintf(name, sizeof name, "%.*sdata/%.*s", (int)pl + 1,
                               (const char *)pkl->name, (int)all[i].key->len,
                               (const char *)all[i].key->bytes);
        const member *data = member_find(mb, n, name, (size_t)k);
        if (!data)
            rc = hs_fail(HS_EFORMAT, "%s: zip member %s (a storage of the state dict) is "
                                     "missing",
                         st->path, name);
        else if (!(rc = zip_stored(st, data)) &&
                 data->usize != (uint64_t)all[i].numel * all[i].type.bytes)
            rc = hs_fail(HS_EFORMAT, "%s: zip member %s holds %llu bytes, its storage %lld "
                                     "elements of %zu bytes",
                         st->path, name, (unsigned long long)data->usize,
                         (long long)all[i].numel, all[i].type.bytes);
        else
            all[i].begin = data->begin;
    }
    if (!rc)
        rc = place(st, &s, all, n_all);
    free(all);
    state_free(&s);
    free(mb);
    return rc;
}

/* ---- the legacy format ---------------------------------------------------- */

/* The next pickle of the file at *pos; *pos moves past it. */
static int next_pickle(hs_safetensors *st, hs_pickle *pk, size_t *pos, const char *which,
                       hs_pk **out)
{
    char what[700];
    snprintf(what, sizeof what, "%s: %s", st->path, which);
    size_t used;
    int rc = hs_pickle_read(pk, st->map + *pos, st->map_len - *pos, what, out, &used);
    *pos += used;
    return rc;
}

/* The header pickles: magic number, protocol 1001, a little-endian system. */
static int legacy_header(hs_safetensors *st, hs_pickle *pk, size_t *pos)
{
    static const unsigned char magic[] = { 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                           0x20, 0x6a, 0xa8, 0x50, 0x19 };
    hs_pk *v;
    if (st->map[0] != 0x80 || next_pickle(st, pk, pos, "magic number", &v) ||
        v->kind != HS_PK_BIGINT || v->len != sizeof magic || memcmp(v->bytes, magic, v->len))
        return hs_fail(HS_EFORMAT, "%s: not a PyTorch checkpoint (neither a zip archive nor the "
                                   "legacy format's magic number)",
                       st->path);
    int rc = next_pickle(st, pk, pos, "protocol version", &v);
    if (!rc && (!is_int(v) || v->i != 1001))
        rc = hs_fail(HS_EFORMAT, "%s: legacy format protocol %lld, not 1001", st->path,
                     is_int(v) ? (long long)v->i : -1LL);
    if (!rc && !(rc = next_pickle(st, pk, pos, "system information", &v))) {
        int little = 0;
        for (size_t i = 0; v->kind == HS_PK_DICT && i < v->n; i += 2)
            if (str_is(v->item[i], "little_endian"))
                little = v->item[i + 1]->kind == HS_PK_BOOL && v->item[i + 1]->i;
        if (!little)
            rc = hs_fail(HS_EFORMAT, "%s: saved on a big-endian machine (or its system "
                                     "information is missing)",
                         st->path);
    }
    return rc;
}

/* The storage keys' list and the records after it: key by key, an int64
 * count then the elements, each count its persistent id's size. */
static int legacy_records(hs_safetensors *st, hs_pickle *pk, size_t pos, storage *all, size_t n)
{
    hs_pk *keys;
    int rc = next_pickle(st, pk, &pos, "storage keys", &keys);
    if (rc)
        return rc;
    if (keys->kind != HS_PK_LIST)
        return hs_fail(HS_EFORMAT, "%s: the storage keys are %s, not a list", st->path,
                       hs_pk_kind_name(keys));
    for (size_t i = 0; i < keys->n; i++) {
        const hs_pk *key = keys->item[i];
        storage *s = key->kind == HS_PK_STR ? storage_find(all, n, key) : NULL;
        if (!s)
            return hs_fail(HS_EFORMAT, "%s: storage key %zu of the list is not a storage of the "
                                       "state dict",
                           st->path, i);
        if (s->located)
            return hs_fail(HS_EFORMAT, "%s: storage %.*s is listed twice", st->path,
                           (int)key->len, (const char *)key->bytes);
        if (st->map_len - pos < 8)
            return hs_fail(HS_EFORMAT, "%s: the file ends before storage %.*s", st->path,
                           (int)key->len, (const char *)key->bytes);
        const uint64_t count = hs_le_bytes(st->map + pos, 8);
        if (count != (uint64_t)s->numel)
            return hs_fail(HS_EFORMAT, "%s: storage %.*s: its record holds %llu elements, its "
                                       "persistent id says %lld",
                           st->path, (int)key->len, (const char *)key->bytes,
                           (unsigned long long)count, (long long)s->numel);
        pos += 8;
        const uint64_t bytes = count * s->type.bytes; /* numel * bytes fits: read_storage_id */
        if (bytes > st->map_len - pos)
            return hs_fail(HS_EFORMAT, "%s: storage %.*s: %llu bytes past the end of the file",
                           st->path, (int)key->len, (const char *)key->bytes,
                           (unsigned long long)bytes);
        s->begin = pos, s->located = 1;
        pos += bytes;
    }
    for (size_t i = 0; i < n; i++)
        if (!all[i].located)
            return hs_fail(HS_EFORMAT, "%s: storage %.*s is used by the state dict but has no "
                                       "record",
                           st->path, (int)all[i].key->len, (const char *)all[i].key->bytes);
    return HS_OK;
}

static int open_legacy(hs_safetensors *st, hs_pickle *pk)
{
    size_t pos = 0;
    int rc = legacy_header(st, pk, &pos);
    if (rc)
        return rc;
    hs_pk *top;
    state s = { .path = st->path, .legacy = 1 };
    storage *all = NULL;
    size_t n_all = 0;
    rc = next_pickle(st, pk, &pos, "state dict", &top);
    if (!rc)
        rc = read_state(&s, top);
    if (!rc)
        rc = storages_of(&s, &all, &n_all);
    if (!rc)
        rc = legacy_records(st, pk, pos, all, n_all);
    if (!rc)
        rc = place(st, &s, all, n_all);
    free(all);
    state_free(&s);
    return rc;
}

int hs_pt_open(hs_safetensors *st, const char *path)
{
    int rc = hs_st_map(st, path, 4, "not a PyTorch checkpoint");
    if (rc)
        return rc;
    hs_pickle pk = { 0 };
    if (hs_le_bytes(st->map, 4) == 0x04034b50)
        rc = open_zip(st, &pk);
    else
        rc = open_legacy(st, &pk);
    hs_pickle_free(&pk);
    if (rc)
        hs_st_close(st);
    return rc;
}
