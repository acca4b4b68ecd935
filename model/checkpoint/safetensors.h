/* Reading and writing the safetensors container: an 8-byte little-endian
 * header length, a JSON header {name: {dtype, shape, data_offsets}}, then the
 * data. Reading memory-maps the file and validates every field before any
 * byte of data is used. */
#ifndef HS_SAFETENSORS_H
#define HS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "common.h"
#include "dtype.h"

enum { HS_ST_MAX_DIMS = 8 };

typedef struct {
    char *name;
    hs_dtype dtype;
    char dtype_name[8];
    int ndim;
    int64_t shape[HS_ST_MAX_DIMS];
    size_t begin, end; /* byte offsets into the data section */
} hs_st_tensor;

typedef struct {
    char path[512];
    int fd;
    struct stat opened; /* the file as mapped: size and modification time */
    unsigned char *map;
    size_t map_len;
    const unsigned char *data; /* start of the data section */
    size_t data_len;
    int n;
    hs_st_tensor *t;
} hs_safetensors;

/* Opens and validates: header length inside the file, JSON well formed,
 * every dtype known, every shape non-negative, data_offsets inside the data
 * section, size = product(shape) * element size, no two tensors overlapping.
 * Errors are HS_EIO / HS_EFORMAT naming the file and the tensor. */
int hs_st_open(hs_safetensors *st, const char *path);
void hs_st_close(hs_safetensors *st);

/* The first step of hs_st_open, for the readers of other containers
 * (pytorch.h): path opened (a regular file), mapped whole and registered
 * for hs_st_fault, st->path set and nothing parsed. A file of fewer than
 * `least` bytes (or none) is HS_EFORMAT "PATH: truncated (N bytes,
 * short_why)". */
int hs_st_map(hs_safetensors *st, const char *path, size_t least, const char *short_why);

const hs_st_tensor *hs_st_find(const hs_safetensors *st, const char *name);

/* Element i of tensor t as a double (F32, F16, BF16, or F64 rounded to
 * float). */
double hs_st_get(const hs_safetensors *st, const hs_st_tensor *t, size_t i);

/* Elements first .. first + n - 1 of tensor t converted into dst (exactly:
 * BF16 and F16 widen without rounding), read from the file with pread in
 * blocks rather than through the mapping: no page fault per 4 KB of the
 * file, and nothing of it resident afterwards. HS_EIO naming the file and
 * the tensor when the read fails. */
int hs_st_read(const hs_safetensors *st, const hs_st_tensor *t, size_t first, size_t n,
               hs_real *dst);

/* Bytes first .. first + n - 1 of tensor t's data into dst as they are,
 * with pread (as hs_st_read, without the conversion). */
int hs_st_read_bytes(const hs_safetensors *st, const hs_st_tensor *t, size_t first, size_t n,
                     void *dst);

/* HS_OK when the file is as it was mapped (its size and modification time,
 * by the descriptor kept open); else HS_EIO "PATH changed while it was read
 * (...)": a checkpoint truncated or rewritten in place under a running
 * command gives weights from neither version, so the run must fail. */
int hs_st_unchanged(const hs_safetensors *st);

/* For a SIGBUS handler (cli/): 1 when addr lies in a file of hs_st_open's
 * whose pages went away (the file was truncated under the mapping), after
 * putting a page of zeros there so the reader can run on to the check of
 * hs_st_unchanged; 0 for any other address. Async-signal-safe. */
int hs_st_fault(void *addr);

/* Tells the kernel the pages wholly inside t's bytes are no longer needed,
 * so loading never holds the file and the parameters in memory at once. */
void hs_st_release(const hs_safetensors *st, const hs_st_tensor *t);

/* Writer: tensors are described first, then written in the same order. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} hs_st_spec;

/* Writes an F32 safetensors file at path: specs[i] gets data from
 * fill(ctx, i, out) which writes product(shape) floats. Written to a
 * temporary name and renamed, so a crash never leaves a partial file. */
int hs_st_write(const char *path, const hs_st_spec *specs, int n,
                void (*fill)(void *ctx, int i, float *out), void *ctx);

/* The general writer: tensors t[0..n) (names, dtype names as the format
 * spells them, shapes, and their bytes) described in the header, then
 * emit(ctx, i, f) writes tensor i's bytes to f in order (HS_OK, or the
 * status with the message set). Written under a temporary name and renamed;
 * nothing is left at path when a write or an emit fails. */
typedef struct {
    const char *name, *dtype;
    int ndim;
    const int64_t *shape;
    size_t bytes;
} hs_st_out;

int hs_st_write_with(const char *path, const hs_st_out *t, int n,
                     int (*emit)(void *ctx, int i, FILE *f), void *ctx);

#endif
