#include "dtype.h"

/* Element by element through memcpy and explicit byte order: src may be a
 * mapped file's bytes at any alignment. */
void hs_dtype_widen(hs_real *dst, const void *from, hs_dtype dt, size_t n)
{
    const unsigned char *src = from;
    if (dt == HS_DT_F32) {
        for (size_t k = 0; k < n; k++) {
            float f;
            memcpy(&f, src + 4 * k, 4);
            dst[k] = (hs_real)f;
        }
    } else if (dt == HS_DT_F64) {
        for (size_t k = 0; k < n; k++) {
            double d;
            memcpy(&d, src + 8 * k, 8);
            dst[k] = (hs_real)(float)d;
        }
    } else if (dt == HS_DT_BF16) {
        for (size_t k = 0; k < n; k++)
            dst[k] = (hs_real)hs_bf16_to_float((uint16_t)(src[2 * k] | src[2 * k + 1] << 8));
    } else {
        for (size_t k = 0; k < n; k++)
            dst[k] = (hs_real)hs_half_to_float((uint16_t)(src[2 * k] | src[2 * k + 1] << 8));
    }
}
