/* api/: sparse autoencoders in SAELens's format (hs_api.h, SPEC §19): a
 * handle over analyze/sae.h's hs_sae, its configuration and tensors by name,
 * and its encoder and decoder on rows the caller holds. */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "sae.h"

struct hs_api_sae {
    hs_sae s;
};

int hs_api_sae_open(hs_api_sae **s, const char *dir)
{
    if (!(*s = hs_calloc(1, sizeof **s, "SAE")))
        return HS_ENOMEM;
    const int rc = hs_sae_open(&(*s)->s, dir);
    if (rc) {
        free(*s);
        *s = NULL;
    }
    return rc;
}

void hs_api_sae_free(hs_api_sae *s)
{
    if (!s)
        return;
    hs_sae_free(&s->s);
    free(s);
}

const char *hs_api_sae_dir(const hs_api_sae *s) { return s->s.dir; }
const char *hs_api_sae_hook(const hs_api_sae *s) { return s->s.hook; }
const char *hs_api_sae_architecture(const hs_api_sae *s) { return hs_sae_arch_name(s->s.arch); }

int hs_api_sae_int(const hs_api_sae *s, const char *key, long long *v)
{
    const hs_sae *a = &s->s;
    const struct {
        const char *name;
        long long value;
    } keys[] = {
        { "d_in", a->d_in },
        { "d_sae", a->d_sae },
        { "k", a->arch == HS_SAE_TOPK ? a->k : 0 },
        { "apply_b_dec_to_input", a->apply_b_dec },
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i].name)) {
            *v = keys[i].value;
            return HS_OK;
        }
    return hs_fail(HS_EINVAL, "%s: no SAE number '%s' (d_in, d_sae, k, apply_b_dec_to_input)",
                   a->dir, key);
}

int hs_api_sae_tensor(const hs_api_sae *s, const char *name, const hs_real **data, int *rows,
                      int *cols)
{
    const hs_sae *a = &s->s;
    /* cols 0: a vector of rows entries */
    const struct {
        const char *name;
        const hs_real *data;
        int rows, cols;
    } t[] = {
        { "W_enc", a->W_enc, a->d_in, a->d_sae },
        { "W_dec", a->W_dec, a->d_sae, a->d_in },
        { "b_enc", a->b_enc, a->d_sae, 0 },
        { "b_dec", a->b_dec, a->d_in, 0 },
        { "threshold", a->threshold, a->d_sae, 0 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (strcmp(name, t[i].name))
            continue;
        if (!t[i].data)
            return hs_fail(HS_EINVAL, "%s: a %s SAE has no tensor \"%s\"", a->dir,
                           hs_sae_arch_name(a->arch), name);
        *data = t[i].data, *rows = t[i].rows, *cols = t[i].cols;
        return HS_OK;
    }
    return hs_fail(HS_EINVAL, "%s: no SAE tensor \"%s\" (W_enc, W_dec, b_enc, b_dec, threshold)",
                   a->dir, name);
}

int hs_api_sae_bind(hs_api_sae *s, const hs_model *m, int *site, int *layer)
{
    const int rc = hs_sae_bind(&s->s, &m->cfg);
    if (!rc)
        *site = (int)s->s.site, *layer = s->s.layer;
    return rc;
}

int hs_api_sae_encode(const hs_api_sae *s, const hs_real *x, long n, hs_real *pre, hs_real *f)
{
    if (n < 0)
        return hs_fail(HS_EINVAL, "%s: encode of %ld rows", s->s.dir, n);
    if (!n) /* the centred copy would be an allocation of 0 bytes */
        return HS_OK;
    return hs_sae_encode(&s->s, x, n, pre, f);
}

int hs_api_sae_decode(const hs_api_sae *s, const hs_real *f, long n, hs_real *x_hat)
{
    if (n < 0)
        return hs_fail(HS_EINVAL, "%s: decode of %ld rows", s->s.dir, n);
    hs_sae_decode(&s->s, f, n, x_hat);
    return HS_OK;
}
