#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "common.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static _Thread_local char last_error[1024];

int hs_fail(int code, const char *fmt, ...)
{
    /* Format into a scratch buffer first: callers may pass hs_last_error()
     * itself as an argument to add context to an earlier message. */
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Messages quote what files and arguments hold (names, keys, paths): a
     * control byte among them is written \xNN, so that printing a message
     * can never move the cursor, retitle or clear the terminal. */
    size_t k = 0;
    for (const unsigned char *c = (const unsigned char *)msg; *c && k + 5 < sizeof last_error; c++)
        if (*c < 0x20 || *c == 0x7f)
            k += (size_t)snprintf(last_error + k, sizeof last_error - k, "\\x%02x", *c);
        else
            last_error[k++] = (char)*c;
    last_error[k] = 0;
    return code;
}

const char *hs_last_error(void) { return last_error; }

const char *hs_status_name(int code)
{
    switch (code) {
    case HS_OK: return "ok";
    case HS_EINVAL: return "invalid argument";
    case HS_EIO: return "input/output error";
    case HS_EFORMAT: return "malformed file";
    case HS_ENOMEM: return "out of memory";
    case HS_EINTR: return "interrupted";
    case HS_EUNSUPPORTED: return "unsupported";
    case HS_EDONE: return "stopped early";
    default: return "unknown status";
    }
}

void *hs_calloc(size_t n, size_t size, const char *what)
{
    if (size != 0 && n > SIZE_MAX / size) {
        hs_fail(HS_ENOMEM, "%s: size %zu x %zu overflows", what, n, size);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        hs_fail(HS_ENOMEM, "%s: cannot allocate %zu bytes", what, n * size);
    return p;
}

void hs_set_threads(int n)
{
    if (n < 1)
        n = 1;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    openblas_set_num_threads(n);
}

int hs_get_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int hs_affinity_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* libgomp reads OMP_WAIT_POLICY (and GOMP_SPINCOUNT) once, in its own ELF
 * constructor, which runs before main(): a setenv() in main() changes nothing
 * for this process. So the policy is put in the environment and the program
 * executed again; the new image's libgomp then starts passive. The variable
 * being set is itself the guard: the second image never execs again.
 * Setting it earlier, from the executable's .preinit_array (which runs before
 * every library's constructor), does not work with glibc: libc's own
 * constructor then resets environ to the array the kernel passed. */
int hs_runtime_init(int argc, char **argv)
{
    (void)argc;
    int rc = HS_OK;
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") && argv && argv[0] &&
        setenv("OMP_WAIT_POLICY", "passive", 1) == 0) {
        execv("/proc/self/exe", argv);
        /* No /proc (or no exec): carry on with the runtime's default policy. The
         * variable stays set for children (gnuplot, chromium) all the same. */
        rc = hs_fail(HS_EIO, "cannot re-execute /proc/self/exe for passive OpenMP waiting: %s",
                     strerror(errno));
    }
    if (!getenv("OMP_NUM_THREADS") && !getenv("OPENBLAS_NUM_THREADS"))
        hs_set_threads(hs_affinity_cpus());
    return rc;
}

int hs_tmp_create(const char *path, char *tmp, size_t n)
{
    static mode_t mode = (mode_t)-1;
    if (mode == (mode_t)-1) { /* the umask can only be read by setting it */
        const mode_t mask = umask(022);
        umask(mask);
        mode = 0666 & ~mask;
    }
    if (snprintf(tmp, n, "%s.tmp.%d.XXXXXX", path, (int)getpid()) >= (int)n) {
        hs_fail(HS_EIO, "%s: path too long", path);
        return -1;
    }
    const int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        hs_fail(HS_EIO, "%s: cannot create a file beside it: %s", path, strerror(errno));
        return -1;
    }
    if (fchmod(fd, mode)) {
        hs_fail(HS_EIO, "%s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    return fd;
}

FILE *hs_tmp_fopen(const char *path, char *tmp, size_t n)
{
    const int fd = hs_tmp_create(path, tmp, n);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (fd >= 0 && !f) {
        hs_fail(HS_EIO, "%s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
    }
    return f;
}

int hs_tmp_commit(const char *tmp, const char *path, int replace)
{
    int rc = 0;
    if (replace) {
        rc = rename(tmp, path);
    } else {
        rc = renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE);
        if (rc && (errno == EINVAL || errno == ENOSYS) && !(rc = link(tmp, path)))
            unlink(tmp);
    }
    if (!rc)
        return HS_OK;
    const int err = errno;
    unlink(tmp);
    return err == EEXIST ? hs_fail(HS_EIO, "%s exists (another writer finished first; --force "
                                           "replaces it)", path)
                         : hs_fail(HS_EIO, "%s: cannot move the finished file into place: %s",
                                   path, strerror(err));
}

int hs_tmp_stale(const char *path, const char *name)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const size_t nb = strlen(base);
    if (strncmp(name, base, nb) || strncmp(name + nb, ".tmp.", 5))
        return 0;
    char *end;
    const long pid = strtol(name + nb + 5, &end, 10);
    if (end == name + nb + 5 || *end != '.' || strlen(end) != 7 || pid <= 0)
        return 0;
    return kill((pid_t)pid, 0) && errno == ESRCH;
}

int hs_parse_ints(const char *s, int *out, int max, long lo, long hi, int distinct)
{
    int n = 0;
    for (const char *p = s; p && *p;) {
        if (*p < '0' || *p > '9' || n == max)
            return -1;
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (errno || v < lo || v > hi)
            return -1;
        for (int i = 0; distinct && i < n; i++)
            if (out[i] == v)
                return -1;
        out[n++] = (int)v;
        if (*end == ',' && end[1])
            end++;
        else if (*end)
            return -1;
        p = end;
    }
    return n;
}

int hs_parse_doubles(const char *s, double *out, int max)
{
    int n = 0;
    for (const char *p = s; p && *p;) {
        if (((*p < '0' || *p > '9') && *p != '.') || n == max)
            return -1;
        char *end;
        errno = 0;
        const double v = strtod(p, &end);
        if (errno || end == p || !isfinite(v))
            return -1;
        out[n++] = v;
        if (*end == ',' && end[1])
            end++;
        else if (*end)
            return -1;
        p = end;
    }
    return n;
}

double hs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int hs_mkdirs(const char *path)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return hs_fail(HS_EIO, "%s: path too long", path);
    /* each parent in turn, then the path itself */
    for (char *s = p + 1; ; s++) {
        const char c = *s;
        if (c != '/' && c != 0)
            continue;
        *s = 0;
        struct stat sb;
        if (mkdir(p, 0777) && errno != EEXIST)
            return hs_fail(HS_EIO, "%s: cannot create directory %s: %s", path, p, strerror(errno));
        if (stat(p, &sb) || !S_ISDIR(sb.st_mode))
            return hs_fail(HS_EIO, "%s: %s is not a directory", path, p);
        *s = c;
        if (!c)
            break;
    }
    return HS_OK;
}

void hs_remove_flat_dir(const char *dir)
{
    if (!dir || !*dir)
        return;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[4096];
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p)
            unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

static const char *file_kind(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : "not a file";
}

int hs_open_regular(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        hs_fail(HS_EIO, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb)) {
        hs_fail(HS_EIO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        hs_fail(HS_EIO, "%s: not a regular file (%s)", path, file_kind(sb.st_mode));
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size)
        *size = (size_t)sb.st_size;
    return fd;
}

int hs_read_file(char **out, size_t *len, const char *path, size_t limit, size_t stream_cap)
{
    *out = NULL, *len = 0;
    /* a regular file unless streams are taken: then any file, a pipe too */
    const int fd = stream_cap ? open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)
                              : hs_open_regular(path, NULL);
    if (fd < 0)
        return stream_cap ? hs_fail(HS_EIO, "%s: cannot open: %s", path, strerror(errno)) : HS_EIO;
    struct stat sb;
    const int regular = !fstat(fd, &sb) && S_ISREG(sb.st_mode);
    const size_t cap = regular ? limit : stream_cap;
    int rc = regular && (uint64_t)sb.st_size > cap
                 ? hs_fail(HS_EINVAL, "%s: %lld bytes: a file of at most %zu bytes is read here",
                           path, (long long)sb.st_size, cap)
                 : HS_OK;
    /* room for one byte more than a regular file's size, so that its end
     * is read without growing the buffer */
    size_t n = 0, room = regular ? (size_t)sb.st_size + 2 : (size_t)1 << 16;
    char *buf = rc ? NULL : hs_calloc(room, 1, path);
    rc = rc ? rc : buf ? HS_OK : HS_ENOMEM;
    /* to the end, or until the cap is passed: an endless stream (/dev/zero,
     * a pipe that never closes) is refused there, as a regular file that
     * grew past it since fstat */
    while (!rc) {
        if (n + 1 == room) { /* n <= cap here, so cap + 2 > room */
            const size_t grow = room > cap / 2 ? cap + 2 : room * 2;
            char *grown = realloc(buf, grow);
            if (!grown) {
                rc = hs_fail(HS_ENOMEM, "%s: out of memory reading it", path);
                break;
            }
            buf = grown, room = grow;
        }
        const size_t want = room - 1 - n;
        const ssize_t got = read(fd, buf + n, want > (size_t)1 << 20 ? (size_t)1 << 20 : want);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = hs_fail(HS_EIO, "%s: read failed: %s", path, strerror(errno));
        else if (!got)
            break;
        else if ((n += (size_t)got) > cap)
            rc = regular ? hs_fail(HS_EINVAL, "%s: more than %zu bytes (it grew while read)", path,
                                   cap)
                         : hs_fail(HS_EINVAL, "%s: more than %zu MiB of text from a stream (write "
                                   "it to a file to read more)", path, cap >> 20);
    }
    close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *out = buf, *len = n;
    return HS_OK;
}

FILE *hs_fopen_regular(const char *path)
{
    int fd = hs_open_regular(path, NULL);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        hs_fail(HS_EIO, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int hs_output_free(const char *path, int force)
{
    struct stat sb;
    if (!force && stat(path, &sb) == 0)
        return hs_fail(HS_EIO, "%s exists (use --force to overwrite)", path);
    return HS_OK;
}

int hs_tmp_dir_create(const char *path, const char *name, char *dir, size_t dn, char *file,
                      size_t fn)
{
    if (snprintf(dir, dn, "%s.tmp.%d.XXXXXX", path, (int)getpid()) >= (int)dn ||
        snprintf(file, fn, "%s/%s", dir, name) >= (int)fn)
        return hs_fail(HS_EIO, "%s: path too long", path);
    if (!mkdtemp(dir))
        return hs_fail(HS_EIO, "%s: cannot create a folder beside it: %s", path, strerror(errno));
    snprintf(file, fn, "%s/%s", dir, name);
    return HS_OK;
}

int hs_tmp_dir_commit(int rc, const char *dir, const char *file, const char *path,
                      const char *who)
{
    struct stat sb;
    if (!rc && (lstat(file, &sb) || !S_ISREG(sb.st_mode) || sb.st_size == 0))
        rc = hs_fail(HS_EIO, "%s: %s wrote nothing", path, who);
    if (!rc)
        rc = hs_tmp_commit(file, path, 1);
    else
        unlink(file);
    rmdir(dir);
    return rc;
}
