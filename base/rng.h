/* The one pseudo-random generator: deterministic from a seed on every
 * machine (xorshift64* for uniforms, Box-Muller for normal deviates), for
 * weight initialisation, sampled batches, random-head controls and every
 * other draw that a --seed option fixes. */
#ifndef HS_RNG_H
#define HS_RNG_H

typedef struct {
    unsigned long long s;
} hs_rng;

void hs_rng_seed(hs_rng *r, unsigned long long seed);
double hs_rng_uniform(hs_rng *r); /* [0, 1) */
double hs_rng_normal(hs_rng *r);  /* N(0, 1) */

#endif
