#include "stored.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memory.h"
#include "dtype.h"

typedef struct {
    hs_stored_tensor t;
    size_t owned;  /* bytes of data allocated for it (0: it points into a file) */
    hs_packed *pk[2]; /* its panels (hs_stored_pack) for op(B) = B, B^T (tb 0, 1), or NULL */
} entry;

struct hs_stored {
    hs_real *base; /* the reserved range: n_params elements */
    size_t n_params;
    entry *e;      /* sorted by t.off once published */
    int n, cap;
    size_t held;   /* bytes counted by hs_mem_reserve */
    void (*release)(void *);
    int (*check)(void *);
    void *ctx;
    int published;
    _Atomic int backward; /* hs_stored_first_backward called */
};

/* The published sets (see stored.h for why a table): few, a model each. */
enum { MAX_LIVE = 16 };
static hs_stored *live[MAX_LIVE];
static _Atomic int n_live;

static size_t page_size(void)
{
    static size_t ps;
    if (!ps)
        ps = (size_t)sysconf(_SC_PAGESIZE);
    return ps;
}

int hs_stored_create(hs_stored **out, size_t n_params, hs_real **params, void (*release)(void *),
                     void *ctx)
{
    *out = NULL;
    hs_stored *s = hs_calloc(1, sizeof *s, "weights as stored");
    if (!s)
        return HS_ENOMEM;
    const size_t bytes = (n_params ? n_params : 1) * sizeof(hs_real);
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(s);
        return hs_fail(HS_ENOMEM, "weights as stored: cannot reserve %zu bytes of addresses",
                       bytes);
    }
    s->base = p;
    s->n_params = n_params;
    s->release = release;
    s->ctx = ctx;
    *out = s;
    *params = s->base;
    return HS_OK;
}

/* Read and write access to elements off .. off + size - 1 of the range
 * (whole pages: a neighbour's first or last elements may share one). */
static int open_pages(hs_stored *s, size_t off, size_t size, const char *what)
{
    if (!size)
        return HS_OK;
    const size_t ps = page_size();
    const uintptr_t lo = (uintptr_t)(s->base + off) & ~(uintptr_t)(ps - 1);
    const uintptr_t hi = ((uintptr_t)(s->base + off + size) + ps - 1) & ~(uintptr_t)(ps - 1);
    int rc = hs_mem_reserve(size * sizeof(hs_real), what);
    if (rc)
        return rc;
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE)) {
        hs_mem_release(size * sizeof(hs_real));
        return hs_fail(HS_ENOMEM, "%s: cannot map %zu bytes", what, (size_t)(hi - lo));
    }
    s->held += size * sizeof(hs_real);
    return HS_OK;
}

void hs_stored_set_check(hs_stored *s, int (*check)(void *ctx)) { s->check = check; }

int hs_stored_unchanged(const hs_stored *s)
{
    return s && s->check ? s->check(s->ctx) : HS_OK;
}

int hs_stored_floats(hs_stored *s, size_t off, size_t size)
{
    return open_pages(s, off, size, "model parameters");
}

int hs_stored_add(hs_stored *s, hs_stored_tensor t, int owned)
{
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 64;
        entry *e = realloc(s->e, sizeof *e * (size_t)cap);
        if (!e)
            return hs_fail(HS_ENOMEM, "weights as stored: no memory for the table");
        s->e = e;
        s->cap = cap;
    }
    const size_t bytes = t.size * hs_dtype_bytes(t.type);
    if (!owned) { /* the file's pages, resident once read: counted as held */
        int rc = hs_mem_reserve(bytes, "model parameters");
        if (rc)
            return rc;
        s->held += bytes;
    }
    s->e[s->n++] = (entry){ t, owned ? bytes : 0, { NULL, NULL } };
    return HS_OK;
}

static int by_offset(const void *a, const void *b)
{
    const size_t x = ((const entry *)a)->t.off, y = ((const entry *)b)->t.off;
    return (x > y) - (x < y);
}

/* Entry e lies inside the set's range, holds a known type and its data. */
static int entry_sane(const hs_stored *s, const entry *e)
{
    return e->t.data && e->t.off <= s->n_params && e->t.size <= s->n_params - e->t.off &&
           (e->t.type == HS_DT_F32 || e->t.type == HS_DT_F16 || e->t.type == HS_DT_BF16);
}

int hs_stored_sane(const hs_stored *s)
{
    for (int i = 0; i < s->n; i++)
        if (!entry_sane(s, &s->e[i]) ||
            (i && s->e[i - 1].t.off + s->e[i - 1].t.size > s->e[i].t.off))
            return 0;
    return s->base && s->n >= 0 && s->n <= s->cap;
}

int hs_stored_publish(hs_stored *s)
{
    qsort(s->e, (size_t)s->n, sizeof *s->e, by_offset);
    assert(hs_stored_sane(s));
    const int n = atomic_load(&n_live);
    if (n == MAX_LIVE)
        return hs_fail(HS_ENOMEM, "weights as stored: more than %d models open at once",
                       MAX_LIVE);
    live[n] = s;
    atomic_store(&n_live, n + 1);
    s->published = 1;
    return HS_OK;
}

static void drop_entry_data(entry *e)
{
    if (e->owned)
        hs_free_held((void *)e->t.data, e->owned, 1);
#ifndef HEADSCOPE_DOUBLE
    hs_packed_free(e->pk[0]);
    hs_packed_free(e->pk[1]);
#endif
    e->pk[0] = e->pk[1] = NULL;
}

void hs_stored_free(hs_stored *s)
{
    if (!s)
        return;
    if (s->published) {
        const int n = atomic_load(&n_live);
        for (int i = 0; i < n; i++)
            if (live[i] == s) {
                live[i] = live[n - 1];
                atomic_store(&n_live, n - 1);
                break;
            }
    }
    for (int i = 0; i < s->n; i++)
        drop_entry_data(&s->e[i]);
    free(s->e);
    hs_mem_release(s->held);
    munmap(s->base, (s->n_params ? s->n_params : 1) * sizeof(hs_real));
    if (s->release)
        s->release(s->ctx);
    free(s);
}

/* The set and entry holding float address p, or NULL. */
static entry *lookup(const void *p, hs_stored **set)
{
    const int n = atomic_load_explicit(&n_live, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        hs_stored *s = live[i];
        const uintptr_t lo = (uintptr_t)s->base, c = (uintptr_t)p;
        if (c < lo || c - lo >= s->n_params * sizeof(hs_real))
            continue;
        const size_t k = (size_t)(c - lo) / sizeof(hs_real);
        int a = 0, b = s->n; /* the last entry with off <= k */
        while (b - a > 1) {
            const int mid = (a + b) / 2;
            if (s->e[mid].t.off <= k)
                a = mid;
            else
                b = mid;
        }
        entry *e = s->n ? &s->e[a] : NULL;
        assert(s->published && (!e || entry_sane(s, e))); /* in full: hs_stored_sane */
        if (set)
            *set = s;
        return e && k >= e->t.off && k < e->t.off + e->t.size ? e : NULL;
    }
    return NULL;
}

/* p's element in e's data */
static const void *element(const hs_stored *s, const entry *e, const void *p)
{
    const size_t k = (size_t)((const hs_real *)p - s->base) - e->t.off;
    return (const char *)e->t.data + k * hs_dtype_bytes(e->t.type);
}

int hs_stored_find(const void *p, const void **data, hs_dtype *type)
{
    if (!atomic_load_explicit(&n_live, memory_order_relaxed))
        return 0;
    hs_stored *s;
    const entry *e = lookup(p, &s);
    if (!e)
        return 0;
    *data = element(s, e, p);
    *type = e->t.type;
    return 1;
}

#ifndef HEADSCOPE_DOUBLE
/* op(B)'s shape, K x N, of a (rows, cols) tensor read as B^T (tb 1) or B */
static void op_shape(int rows, int cols, int tb, int *N, int *K)
{
    *N = tb ? rows : cols, *K = tb ? cols : rows;
}

int hs_stored_pack(const void *p, int rows, int cols, int tb, int dry, size_t *bytes)
{
    *bytes = 0;
    if (!atomic_load(&n_live))
        return 0;
    hs_stored *s;
    entry *e = lookup(p, &s);
    int N, K;
    op_shape(rows, cols, tb, &N, &K);
    if (!e || (const hs_real *)p != s->base + e->t.off || e->t.size != (size_t)rows * cols ||
        !hs_packed_bytes(e->t.type, N, K))
        return 0;
    hs_packed **pk = &e->pk[tb != 0];
    if (!*pk && !dry && !(*pk = hs_pack_weight(e->t.data, e->t.type, tb != 0, N, K)))
        return -1;
    *bytes = hs_packed_bytes(e->t.type, N, K);
    return 1;
}

int hs_stored_first_backward(hs_stored *s)
{
    if (atomic_exchange(&s->backward, 1))
        return 0;
    for (int i = 0; i < s->n; i++)
        if (s->e[i].pk[1])
            return 1;
    return 0;
}

const hs_packed *hs_stored_packed(const void *p, int rows, int cols, int tb)
{
    if (!atomic_load_explicit(&n_live, memory_order_relaxed))
        return NULL;
    hs_stored *s;
    const entry *e = lookup(p, &s);
    const hs_packed *pk = e ? e->pk[tb != 0] : NULL;
    if (!pk || (const hs_real *)p != s->base + e->t.off)
        return NULL;
    int N, K, n, k;
    op_shape(rows, cols, tb, &N, &K);
    hs_packed_source(pk, &n, &k);
    return n == N && k == K ? pk : NULL;
}
#endif

void hs_stored_read(hs_real *dst, const hs_real *p, size_t n)
{
    const void *data;
    hs_dtype type;
    if (hs_stored_find(p, &data, &type))
        hs_dtype_widen(dst, data, type, n);
    else
        memcpy(dst, p, sizeof(hs_real) * n);
}

int hs_stored_widen(const hs_real *p)
{
    if (!atomic_load(&n_live))
        return HS_OK;
    hs_stored *s;
    entry *e = lookup(p, &s);
    if (!e)
        return HS_OK;
    int rc = open_pages(s, e->t.off, e->t.size, "model parameters");
    if (rc)
        return rc;
    hs_dtype_widen(s->base + e->t.off, e->t.data, e->t.type, e->t.size);
    drop_entry_data(e);
    if (!e->owned) { /* the file's pages are no longer counted */
        const size_t bytes = e->t.size * hs_dtype_bytes(e->t.type);
        hs_mem_release(bytes);
        s->held -= bytes;
    }
    const int i = (int)(e - s->e);
    memmove(e, e + 1, sizeof *e * (size_t)(s->n - i - 1));
    s->n--;
    return HS_OK;
}
