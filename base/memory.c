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

int hs_mem_reserve(size_t bytes, const char *what)
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

void hs_mem_release(size_t bytes)
{
    size_t now = held;
    while (!atomic_compare_exchange_weak(&held, &now, now > bytes ? now - bytes : 0))
        ;
}

int hs_mem_check(size_t bytes, const char *what)
{
    const int rc = hs_mem_reserve(bytes, what);
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
