/* Reader for the oracle fixture text files written by the scripts in scripts/oracle/:
 *   case NAME / int NAME VALUE / tensor NAME NDIM D0 D1 ... then values / end
 * Values are stored as double and converted to hs_real on request. */
#ifndef HS_TEST_FIXTURE_H
#define HS_TEST_FIXTURE_H

#include <stddef.h>

#include "common.h"

enum { FX_MAX_DIMS = 8, FX_MAX_INTS = 32, FX_MAX_TENSORS = 64 };

typedef struct {
    char name[64];
    int ndim;
    int dims[FX_MAX_DIMS];
    size_t n;
    double *v;
} fx_tensor;

typedef struct {
    char name[64];
    int nint, ntensor;
    char int_names[FX_MAX_INTS][64];
    long ints[FX_MAX_INTS];
    fx_tensor t[FX_MAX_TENSORS];
} fx_case;

/* Loads case `name` from `path`; returns 0, or -1 with a message on stderr. */
int fx_load(fx_case *fc, const char *path, const char *name);
void fx_free(fx_case *fc);
/* NULL when the case has no such tensor. */
const fx_tensor *fx_tensor_get(const fx_case *fc, const char *name);
/* The named int; aborts the test run if missing (a malformed fixture). */
long fx_int(const fx_case *fc, const char *name);
/* A freshly allocated hs_real copy of a tensor (NULL if absent). */
hs_real *fx_real(const fx_case *fc, const char *name);

/* Largest |a - b| / (atol_scale + |b|) style comparison used by the oracle
 * tests: returns the largest of |a-b| / max(1, |b|), i.e. absolute error for
 * small values and relative error for large ones. Prints the worst index. */
double fx_max_err(const hs_real *a, const double *b, size_t n, const char *what);

#endif
