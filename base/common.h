/* Shared vocabulary of every headscope module: the numeric type, status codes,
 * the thread-local error message, checked allocation and the thread count.
 *
 * Every numeric kernel computes in hs_real: float by default, double when the
 * library is built with -DHEADSCOPE_DOUBLE=ON (the oracle-check build). */
#ifndef HS_COMMON_H
#define HS_COMMON_H

#include <stddef.h>
#include <stdio.h>

#ifdef HEADSCOPE_DOUBLE
typedef double hs_real;
#define HS_REAL_NAME "double"
#else
typedef float hs_real;
#define HS_REAL_NAME "float"
#endif

#define HS_VERSION "0.1.0"

/* Status codes. Library functions return one of these and never exit(); the
 * message describing the last failure on this thread is hs_last_error(). */
enum hs_status {
    HS_OK = 0,
    HS_EINVAL,  /* bad argument or configuration */
    HS_EIO,     /* a read or write failed */
    HS_EFORMAT, /* a file's contents are malformed */
    HS_ENOMEM,  /* allocation failed or a size overflowed */
    HS_EINTR,   /* interrupted by a signal */
    HS_EUNSUPPORTED, /* valid inputs that this study or command cannot take (a model
                        family, a model without the part it needs) */
    HS_EDONE,   /* not a failure: a forward hook had what it needed and stopped the
                   forward early; the caller that set the hook turns it into HS_OK */
};

/* Records a printf-style message for this thread and returns `code`, so a
 * failure reads `return hs_fail(HS_EINVAL, "...", ...);`. */
int hs_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *hs_last_error(void);
const char *hs_status_name(int code);

/* calloc of n*size bytes with an overflow check; on failure records HS_ENOMEM
 * naming `what` and returns NULL. */
void *hs_calloc(size_t n, size_t size, const char *what);

/* Opens path for reading only if it is a regular file: a FIFO, a device,
 * a socket or a directory is refused (HS_EIO "PATH: not a regular file (a
 * FIFO)") instead of blocking or reading forever. The open itself never
 * blocks (O_NONBLOCK, cleared once the type is known). Returns the
 * descriptor (O_CLOEXEC) or -1 with the message naming the file; *size gets
 * the file's size when size is not NULL. Every file headscope reads goes
 * through this (config.json, model.safetensors, token shards, text). */
int hs_open_regular(const char *path, size_t *size);

/* hs_open_regular as a stdio stream ("rb"); NULL with the message set. */
FILE *hs_fopen_regular(const char *path);

/* The whole of the file at path into *out (malloc'd, NUL-terminated; it may
 * hold NULs of its own), *len its bytes: a regular file (hs_open_regular)
 * of at most limit bytes, or with stream_cap > 0 any file that opens (a
 * pipe, /dev/stdin), read to its end up to stream_cap bytes: an endless
 * stream is refused past them instead of filling the memory. HS_EIO naming
 * the file when it cannot be read, HS_EINVAL when it is longer; *out NULL
 * then. The one reader of whole files (texts, config.json, tokenizer.json). */
int hs_read_file(char **out, size_t *len, const char *path, size_t limit, size_t stream_cap);

/* Output files are written under a temporary name beside the final one and
 * moved over it when complete, so that no reader ever sees half a file.
 * The temporary name is not predictable and the file is created with
 * O_CREAT|O_EXCL (never through a planted symlink or an existing file):
 * "PATH.tmp.PID.XXXXXX", the PID first so that a later run can tell a dead
 * writer's leftover (hs_tmp_stale). Mode 0666 less the umask, as fopen's.
 * hs_tmp_create: the descriptor (O_CLOEXEC), its name in tmp (n bytes), or
 * -1 with the message naming path. */
int hs_tmp_create(const char *path, char *tmp, size_t n);
/* hs_tmp_create as a stdio stream ("wb"); NULL with the message set. */
FILE *hs_tmp_fopen(const char *path, char *tmp, size_t n);
/* Moves the finished tmp to path: over whatever path is when replace is
 * set (rename: a symlink at path is replaced, never followed); else only if
 * path does not exist, atomically (renameat2 RENAME_NOREPLACE, or link +
 * unlink where the file system lacks it), HS_EIO "PATH exists" otherwise.
 * tmp is removed on failure. */
int hs_tmp_commit(const char *tmp, const char *path, int replace);
/* 1 when name (a file's name in path's directory) is a temporary of path
 * (hs_tmp_create) whose writer process is gone. */
int hs_tmp_stale(const char *path, const char *name);

/* A comma-separated list of integers ("0,2,5") into out: at most max
 * entries, each in [lo, hi], pairwise distinct when `distinct`. The count
 * (0 for ""), or -1 when s is not such a list (an empty entry, a trailing
 * comma, a sign or space, too many entries). Every option that takes a list
 * of layers, heads, counts or ids is read by this. */
int hs_parse_ints(const char *s, int *out, int max, long lo, long hi, int distinct);

/* The same for finite numbers that are not negative ("0.01,0.1,1"): the
 * count, or -1 when s is not such a list. */
int hs_parse_doubles(const char *s, double *out, int max);

/* Seconds of the monotonic clock, for timings and rates. */
double hs_now(void);

/* A private folder beside path for an external program to write path's
 * contents into: PATH.tmp.PID.XXXXXX, mode 0700, so that no other user can
 * plant, replace or rename an entry in it while the program runs (a
 * temporary file it reopened by name could be swapped for a link). *dir is
 * the folder, *file DIR/NAME. HS_EIO naming path. */
int hs_tmp_dir_create(const char *path, const char *name, char *dir, size_t dn, char *file,
                      size_t fn);

/* With rc HS_OK: file (of hs_tmp_dir_create) must be a regular, non-empty
 * file (else HS_EIO "PATH: WHO wrote nothing"), moved over path; then, and
 * on any rc, what is left of the folder is removed. Returns rc or the
 * commit's status. */
int hs_tmp_dir_commit(int rc, const char *dir, const char *file, const char *path,
                      const char *who);

/* HS_OK when path may be written: it does not exist, or force; else HS_EIO
 * "PATH exists (use --force to overwrite)". */
int hs_output_free(const char *path, int force);

/* mkdir -p: creates path and its missing parents (HS_EIO naming the path). */
int hs_mkdirs(const char *path);

/* Removes dir and the files in it (not recursive: a folder inside is left,
 * and so is dir then). Quietly does nothing for NULL, "" or a missing dir. */
void hs_remove_flat_dir(const char *dir);

/* Loops below this much work run on the calling thread (an if clause on
 * their parallel region): waking a passively waiting thread costs more than
 * they do, and when that thread's core is taken by another process the
 * region waits a whole time slice for it. HS_PAR_MIN counts entries of an
 * element-wise or row loop (an exp or a few flops each); HS_PAR_MIN_MACS
 * multiply-adds of a loop of small dot products (the attention's per-head
 * work), about the same time. Decoding one token of a small model stays
 * below both. */
#define HS_PAR_MIN 16384
#define HS_PAR_MIN_MACS (16 * (double)HS_PAR_MIN)
/* N rows of C entries each: enough work for a parallel region? */
#define HS_PAR_ROWS(N, C) ((N) * (size_t)(C) >= HS_PAR_MIN)

/* Threads for OpenMP loops and for OpenBLAS calls made outside them. */
void hs_set_threads(int n);
int hs_get_threads(void);

/* CPUs this process may run on (its affinity mask: taskset, cpusets, a batch
 * scheduler's allocation), not the machine's core count. */
int hs_affinity_cpus(void);

/* Call first in main(), before any output or thread. Makes waiting OpenMP
 * threads (libgomp's, and OpenBLAS's: the OpenMP build's threads are OpenMP
 * threads) sleep instead of spinning: with OMP_WAIT_POLICY unset, sets it to
 * passive and re-executes the program (/proc/self/exe, same argv; nothing
 * else changes; one more start of the program, ~14 ms), because libgomp
 * reads it before main().
 * Spinning threads on 2 cores shared with one other busy process made 30
 * training steps 4-24x slower; passive waits cost little (tens of ms) on
 * free cores (docs/guide.md, "Threads").
 * Then, with neither OMP_NUM_THREADS nor OPENBLAS_NUM_THREADS set, sets the
 * thread count to hs_affinity_cpus() (OpenBLAS otherwise counts every core);
 * a later hs_set_threads (--threads) wins. A user's OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT is left alone. Returns HS_OK, or HS_EIO (with the reason)
 * when the re-execution failed; the process then carries on normally, only
 * with the runtime's default (spinning) waits. */
int hs_runtime_init(int argc, char **argv);

#endif
