/* Test-only LD_PRELOAD shim (tests/test_faults.sh): counts the writes to the
 * files whose path contains HS_FAULT_MATCH (default ".db": the index, its WAL
 * and journal) and makes the HS_FAULT_AT-th and every later one fail with EIO,
 * as a disk that went bad or full would. HS_FAULT_AT unset or 0: counts only.
 * HS_FAULT_COUNT=FILE receives the number of matching writes at exit. Nothing
 * in headscope itself knows about it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static long n_writes;

static int matches(int fd)
{
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, path, sizeof path - 1);
    if (k <= 0)
        return 0;
    path[k] = 0;
    const char *m = getenv("HS_FAULT_MATCH");
    return strstr(path, m && *m ? m : ".db") != NULL;
}

/* 1 when this write is to fail. */
static int fault(int fd)
{
    if (!matches(fd))
        return 0;
    n_writes++;
    const char *at = getenv("HS_FAULT_AT");
    long n = at ? atol(at) : 0;
    if (n > 0 && n_writes >= n) {
        errno = EIO;
        return 1;
    }
    return 0;
}

ssize_t write(int fd, const void *buf, size_t count)
{
    static ssize_t (*real)(int, const void *, size_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    return fault(fd) ? -1 : real(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    return fault(fd) ? -1 : real(fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
    return fault(fd) ? -1 : real(fd, buf, count, off);
}

__attribute__((destructor)) static void report(void)
{
    const char *f = getenv("HS_FAULT_COUNT");
    FILE *o = f && *f ? fopen(f, "w") : NULL;
    if (o) {
        fprintf(o, "%ld\n", n_writes);
        fclose(o);
    }
}
