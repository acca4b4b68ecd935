#include "optim.h"
#include "memory.h"

#ifdef HEADSCOPE_DOUBLE
#define HS_SQRT sqrt
#else
#define HS_SQRT sqrtf
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linalg.h"

int hs_adam_init(hs_adam *a, size_t n, double lr, double weight_decay)
{
    memset(a, 0, sizeof *a);
    a->lr = lr;
    a->beta1 = 0.9;
    a->beta2 = 0.999;
    a->eps = 1e-8;
    a->weight_decay = weight_decay;
    a->n = n;
    a->m = hs_calloc_held(n, sizeof(hs_real), "adam first moment");
    a->v = a->m ? hs_calloc_held(n, sizeof(hs_real), "adam second moment") : NULL;
    if (!a->m || !a->v) {
        hs_adam_free(a);
        return HS_ENOMEM;
    }
    return HS_OK;
}

void hs_adam_free(hs_adam *a)
{
    hs_free_held(a->m, a->n, sizeof(hs_real));
    hs_free_held(a->v, a->n, sizeof(hs_real));
    memset(a, 0, sizeof *a);
}

/* One pass over the four arrays, no branch inside: AdamW's decay is a factor
 * of exactly 1 for plain Adam (x * 1 is exact, so Adam's arithmetic is
 * unchanged), restrict lets the loop vectorise, and the file is compiled with
 * -fno-math-errno (CMakeLists.txt) so sqrt is the vector instruction rather
 * than a scalar call guarded for errno. zero: also set each gradient to 0
 * once read (the loop-invariant test is hoisted out: two vector loops). */
static void adam_update(hs_adam *a, hs_real *restrict params, hs_real *restrict grads, int zero)
{
    a->step++;
    const double bc1 = 1 - pow(a->beta1, (double)a->step);
    const double bc2 = 1 - pow(a->beta2, (double)a->step);
    /* torch: p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) */
    const hs_real step_size = (hs_real)(a->lr / bc1), sqrt_bc2 = (hs_real)sqrt(bc2);
    const hs_real b1 = (hs_real)a->beta1, b2 = (hs_real)a->beta2, eps = (hs_real)a->eps;
    const hs_real decay = a->weight_decay > 0 ? (hs_real)(1 - a->lr * a->weight_decay) : 1;
    hs_real *restrict m = a->m, *restrict v = a->v;
    const size_t n = a->n;
#pragma omp parallel for simd schedule(static) if (n >= HS_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const hs_real g = grads[i];
        const hs_real mi = b1 * m[i] + (1 - b1) * g;
        const hs_real vi = b2 * v[i] + (1 - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        params[i] = params[i] * decay - step_size * mi / (HS_SQRT(vi) / sqrt_bc2 + eps);
        if (zero)
            grads[i] = 0;
    }
}

void hs_adam_step(hs_adam *a, hs_real *restrict params, const hs_real *restrict grads)
{
    adam_update(a, params, (hs_real *)grads, 0); /* not written: zero is 0 */
}

void hs_adam_step_zero(hs_adam *a, hs_real *restrict params, hs_real *restrict grads)
{
    adam_update(a, params, grads, 1);
}

void hs_clip_grad_norm(hs_real *g, size_t n, double clip)
{
    if (!(clip > 0))
        return;
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)g[i] * g[i];
    const double coef = clip / (sqrt(ss) + 1e-6);
    for (size_t i = 0; coef < 1 && i < n; i++)
        g[i] *= (hs_real)coef;
}
