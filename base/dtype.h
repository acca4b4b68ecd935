/* The element types weights are stored in (one enum for every file reader
 * and kernel) and the one conversion of each to float: IEEE 754 binary16
 * ("half", float16) to and from float for F16 weights, float16 map files
 * (store/maps_*.c) and the viewer's f16 rows (store/viewer_export.c);
 * bfloat16 to float for BF16 weights.
 *
 * Static inline because capture converts every stored attention weight
 * through hs_float_to_half inside an `omp simd` loop: a call into another
 * translation unit would keep that loop scalar. */
#ifndef HS_DTYPE_H
#define HS_DTYPE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common.h"

/* A tensor's element type as stored: the three a model computes from; F64,
 * which a checkpoint may hold and a model reads rounded once to F32 (SPEC
 * §20); OTHER for what a checkpoint may hold beside them (integers, masks). */
typedef enum { HS_DT_F32, HS_DT_F16, HS_DT_BF16, HS_DT_F64, HS_DT_OTHER } hs_dtype;

/* Bytes of one element of F32, F16, BF16 or F64. */
static inline size_t hs_dtype_bytes(hs_dtype t)
{
    return t == HS_DT_F32 ? 4 : t == HS_DT_F64 ? 8 : 2;
}

/* n (at most 8) little-endian bytes at p as an unsigned integer: the byte
 * order of every container headscope reads (safetensors, zip, pickle, HDF5). */
static inline uint64_t hs_le_bytes(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* bfloat16 (the top half of a float) to float: exact. */
static inline float hs_bf16_to_float(uint16_t h)
{
    union { uint32_t u; float f; } x = { .u = (uint32_t)h << 16 };
    return x.f;
}

/* n elements of type dt (F32, F16 or BF16, little-endian bytes) at src
 * widened exactly into dst: the one conversion of stored weights to
 * hs_real. F64 elements are rounded once to the nearest float (ties to
 * even), in the double build too: the same weights in every build. */
void hs_dtype_widen(hs_real *dst, const void *src, hs_dtype dt, size_t n);

/* Float to half, round to nearest even, overflow to infinity, subnormals
 * kept, NaN stays NaN (quiet). The portable bit-level version; the tests
 * check hs_float_to_half against it across the float range. */
static inline uint16_t hs_float_to_half_soft(float f)
{
    union { float f; uint32_t u; } v = { f };
    const uint32_t sign = (v.u >> 16) & 0x8000, a = v.u & 0x7fffffff;
    if (a >= 0x7f800000) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000 ? 0x200 : 0));
    if (a >= 0x477ff000) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000) { /* below the smallest normal half: subnormal or zero */
        const float m = fabsf(f) * 16777216.0f; /* units of 2^-24 */
        uint32_t q = (uint32_t)m;
        const float rem = m - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    const uint32_t mant = a & 0x7fffff, exp = (a >> 23) - 112; /* rebias 127 -> 15 */
    uint32_t h = exp << 10 | mant >> 13;
    const uint32_t rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent, which is correct */
    return (uint16_t)(sign | h);
}

/* hs_float_to_half_soft's result, through the compiler's _Float16 where it
 * has one: the same rounding, and with F16C a vector instruction. */
static inline uint16_t hs_float_to_half(float f)
{
#ifdef __FLT16_MANT_DIG__
    const _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
#else
    return hs_float_to_half_soft(f);
#endif
}

/* Half to float: exact (every half is a float), subnormals, infinities and
 * NaN included. */
static inline float hs_half_to_float(uint16_t h)
{
    const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float v;
    if (exp == 0) {
        v = (float)mant * 0x1p-24f; /* zero and subnormals: exact */
    } else if (exp == 31) {
        v = mant ? NAN : INFINITY;
    } else { /* normal: the exponent rebased (15 -> 127), the mantissa moved up */
        const uint32_t u = (uint32_t)(exp + 112) << 23 | (uint32_t)mant << 13;
        memcpy(&v, &u, sizeof v);
    }
    return sign ? -v : v;
}

#endif
