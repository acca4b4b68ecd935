#include "rng.h"

#include <math.h>

void hs_rng_seed(hs_rng *r, unsigned long long seed)
{
    r->s = seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL;
    if (!r->s)
        r->s = 1;
}

double hs_rng_uniform(hs_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return (double)((r->s * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

double hs_rng_normal(hs_rng *r)
{
    double u1 = hs_rng_uniform(r), u2 = hs_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}
