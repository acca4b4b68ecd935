#include "memory.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

static _Atomic size_t held;

/* The blocks hs_free_kept keeps (memory.h), oldest first: not counted as
 * held (a reservation frees them before it counts). */
static struct {
    void *p;
    size_t bytes;
} kept[HS_KEPT_BLOCKS];
static int n_kept;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* HEADSCOPE_MEMORY_LIMIT's bytes (0 when it is not a size), with an
 * optional K, M or G suffix (powers of 1000, as the messages print sizes) */
static size_t parse_limit(const char *s)
{
    char *end;
    const double v = strtod(s, &end);
    const double unit = !strcmp(end, "") ? 1 : !strcmp(end, "K") ? 1e3
                      : !strcmp(end, "M") ? 1e6 : !strcmp(end, "G") ? 1e9 : 0;
    return end != s && v > 0 && unit > 0 && v * unit < 1.8e19 ? (size_t)(v * unit) : 0;
}

/* "2.47 GB", "18.3 MB" or "512 KB" (powers of 1000) into out[32] */
static const char *size_text(char *out, double b)
{
    if (b >= 1e9)
        snprintf(out, 32, "%.2f GB", b / 1e9);
    else if (b >= 1e6)
        snprintf(out, 32, "%.1f MB", b / 1e6);
    else
        snprintf(out, 32, "%.0f KB", b / 1e3);
    return out;
}

/* What the machine has, and where that figure comes from (0: no limit;
 * SIZE_MAX: HEADSCOPE_MEMORY_LIMIT is not a size). */
static size_t machine_bytes(const char **from)
{
    const char *env = getenv("HEADSCOPE_MEMORY_LIMIT");
    if (env && *env) {
        *from = env;
        const size_t n = parse_limit(env);
        return n ? n : SIZE_MAX;
    }
    *from = "MemTotal + SwapTotal of /proc/meminfo";
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb, total = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1 || sscanf(line, "SwapTotal: %llu kB", &kb) == 1)
            total += kb;
    fclose(f);
    return (size_t)total * 1024;
}

static const char *machine_from;
static size_t machine_have;
static void machine_once(void) { machine_have = machine_bytes(&machine_from); }

/* hs_mem_reserve's count, leaving the kept blocks be. */
static int count(size_t bytes, const char *what)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, machine_once);
    const size_t have = machine_have;
    const char *from = machine_from;
    if (have == SIZE_MAX)
        return hs_fail(HS_EINVAL, "HEADSCOPE_MEMORY_LIMIT: '%s' is not a size (bytes, or a number "
                       "with K, M or G)", from);
    const size_t before = held;
    if (have && (bytes > have || before > have - bytes)) {
        char more[32], total[32], machine[32];
        return hs_fail(HS_ENOMEM, "%s: %s more would make %s held at once (parameters, "
                       "activations, gradients), more than this machine's %s (%s)%s", what,
                       size_text(more, (double)bytes),
                       size_text(total, (double)before + (double)bytes),
                       size_text(machine, (double)have),
                       getenv("HEADSCOPE_MEMORY_LIMIT") ? "HEADSCOPE_MEMORY_LIMIT" : from,
                       before ? ": a smaller --batch or --seq-len needs less ('headscope info "
                                "--batch B --seq-len T' prints the plan)"
                              : ", whatever the batch");
    }
    held += bytes;
    return HS_OK;
}

int hs_mem_reserve(size_t bytes, const char *what)
{
    hs_mem_drop_kept(); /* a reservation that reuses no kept block ends them */
    return count(bytes, what);
}

void hs_mem_release(size_t bytes)
{
    size_t now = held;
    while (!atomic_compare_exchange_weak(&held, &now, now > bytes ? now - bytes : 0))
        ;
}

int hs_mem_check(size_t bytes, const char *what)
{
    const int rc = count(bytes, what);
    if (!rc)
        hs_mem_release(bytes);
    return rc;
}

size_t hs_mem_held(void) { return held; }

void *hs_calloc_held(size_t n, size_t size, const char *what)
{
    if (size && n > SIZE_MAX / size) {
        hs_fail(HS_ENOMEM, "%s: size %zu x %zu overflows", what, n, size);
        return NULL;
    }
    if (hs_mem_reserve(n * size, what))
        return NULL;
    void *p = hs_calloc(n, size, what);
    if (!p)
        hs_mem_release(n * size);
    else
        hs_huge_pages(p, n * size); /* the blocks held are the large ones */
    return p;
}

void hs_free_held(void *p, size_t n, size_t size)
{
    if (p)
        hs_mem_release(n * size);
    free(p);
}

/* A kept block's start: HS_KEPT_ALIGN bytes on from the start of its
 * allocation, or fewer to be aligned; how many is in the byte before it. */
static void *kept_start(unsigned char *raw)
{
    const size_t shift = HS_KEPT_ALIGN - (uintptr_t)raw % HS_KEPT_ALIGN;
    raw[shift - 1] = (unsigned char)shift;
    return raw + shift;
}

static void *kept_raw(void *p) { return (unsigned char *)p - ((unsigned char *)p)[-1]; }

/* Kept block i taken off the list (kept_lock held). */
static void *kept_take(int i)
{
    void *p = kept[i].p;
    memmove(&kept[i], &kept[i + 1], (size_t)(n_kept - i - 1) * sizeof *kept);
    n_kept--;
    return p;
}

/* Bytes of the kept blocks (kept_lock held). */
static size_t kept_bytes(void)
{
    size_t bytes = 0;
    for (int i = 0; i < n_kept; i++)
        bytes += kept[i].bytes;
    return bytes;
}

void hs_mem_drop_kept(void)
{
    pthread_mutex_lock(&kept_lock);
    for (int i = 0; i < n_kept; i++)
        free(kept_raw(kept[i].p));
    n_kept = 0;
    pthread_mutex_unlock(&kept_lock);
}

size_t hs_mem_kept(void)
{
    pthread_mutex_lock(&kept_lock);
    const size_t bytes = kept_bytes();
    pthread_mutex_unlock(&kept_lock);
    return bytes;
}

void *hs_calloc_kept(size_t bytes, const char *what)
{
    void *p = NULL;
    pthread_mutex_lock(&kept_lock);
    for (int i = 0; i < n_kept && !p; i++)
        if (kept[i].bytes == bytes)
            p = kept_take(i);
    pthread_mutex_unlock(&kept_lock);
    if (p) {
        if (count(bytes, what)) {
            free(kept_raw(p));
            return NULL;
        }
        return memset(p, 0, bytes);
    }
    if (bytes > SIZE_MAX - HS_KEPT_ALIGN) {
        hs_fail(HS_ENOMEM, "%s: %zu bytes overflow the address space", what, bytes);
        return NULL;
    }
    if (hs_mem_reserve(bytes, what))
        return NULL;
    unsigned char *raw = hs_calloc(bytes + HS_KEPT_ALIGN, 1, what);
    if (!raw) {
        hs_mem_release(bytes);
        return NULL;
    }
    hs_huge_pages(raw, bytes + HS_KEPT_ALIGN);
    return kept_start(raw);
}

/* Blocks under HS_KEPT_MIN are not kept: glibc's malloc already serves
 * them again from its heap once one of their size has been freed (its mmap
 * threshold rises to 32 MiB at most). */
void hs_free_kept(void *p, size_t bytes)
{
    if (!p)
        return;
    hs_mem_release(bytes);
    if (bytes < HS_KEPT_MIN || bytes > HS_KEPT_BYTES) {
        free(kept_raw(p));
        return;
    }
    pthread_mutex_lock(&kept_lock);
    while (n_kept && (n_kept == HS_KEPT_BLOCKS || kept_bytes() + bytes > HS_KEPT_BYTES))
        free(kept_raw(kept_take(0))); /* the oldest go */
    kept[n_kept].p = p, kept[n_kept].bytes = bytes;
    n_kept++;
    pthread_mutex_unlock(&kept_lock);
}

/* A large block in 2 MiB pages where the kernel offers them on request
 * (transparent huge pages in "madvise" or "always" mode): its first touch faults
 * once per 2 MiB instead of once per 4 KiB. The stacked continuations of the
 * sweeps allocate hundreds of MiB per call; in a virtual machine each 4 KiB
 * fault cost microseconds. Only a hint: nothing changes where it fails. */
void hs_huge_pages(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
    enum { HUGE = 2 << 20 };
    const uintptr_t lo = ((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1);
    const uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(HUGE - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}
