/* api/: hooked forwards (hs_api.h). One table of entries, each a hook or a
 * record of one (site, layer); the model's hook table points every site
 * that has entries at one dispatcher. Patterns are recorded from the maps
 * observer, which leaves the attention kernel in one pass; the final
 * norm's output is read from the activations after the forward. */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "inputs.h"
#include "layers.h"
#include "linalg.h"
#include "seq2seq.h"
#include "transformer.h"

typedef struct {
    int site, layer;
    hs_api_hook_fn fn; /* a hook, or NULL: a record into dst */
    void *ctx;
    hs_real *dst;
    size_t n;
} entry;

struct hs_api_forward {
    const hs_model *m;
    hs_acts a[2]; /* a forward's activations: [0] without maps, [1] with them */
    int have_acts[2];
    entry *e;
    int n, cap;
};

int hs_api_forward_new(hs_api_forward **f, const hs_model *m)
{
    if (!(*f = hs_calloc(1, sizeof **f, "forward")))
        return HS_ENOMEM;
    (*f)->m = m;
    return HS_OK;
}

void hs_api_forward_free(hs_api_forward *f)
{
    if (!f)
        return;
    for (int i = 0; i < 2; i++)
        if (f->have_acts[i])
            hs_acts_free(&f->a[i]);
    free(f->e);
    free(f);
}

void hs_api_forward_clear(hs_api_forward *f) { f->n = 0; }

static int add_entry(hs_api_forward *f, entry e)
{
    int shape[4];
    int rc = hs_api_site_shape(f->m, e.site, e.layer, 1, 1, shape);
    if (rc)
        return rc;
    if (f->n == f->cap) {
        const int cap = f->cap ? 2 * f->cap : 32;
        entry *p = realloc(f->e, sizeof *p * (size_t)cap);
        if (!p)
            return hs_fail(HS_ENOMEM, "out of memory");
        f->e = p, f->cap = cap;
    }
    f->e[f->n++] = e;
    return HS_OK;
}

int hs_api_forward_record(hs_api_forward *f, int site, int layer, hs_real *dst, size_t n)
{
    if (!dst)
        return hs_fail(HS_EINVAL, "record of %s: no buffer", hs_api_site_name(site));
    return add_entry(f, (entry){ site, layer, NULL, NULL, dst, n });
}

int hs_api_forward_hook(hs_api_forward *f, int site, int layer, hs_api_hook_fn fn, void *ctx)
{
    if (!fn)
        return hs_fail(HS_EINVAL, "hook of %s: no function", hs_api_site_name(site));
    return add_entry(f, (entry){ site, layer, fn, ctx, NULL, 0 });
}

/* Copies x (need elements) into a record's buffer, whose size must match. */
static int record(const entry *e, const hs_real *x, size_t need)
{
    if (e->n != need)
        return hs_fail(HS_EINVAL, "record of %s of layer %d: a buffer of %zu values for a "
                                  "tensor of %zu",
                       hs_api_site_name(e->site), e->layer, e->n, need);
    memcpy(e->dst, x, sizeof(hs_real) * need);
    return HS_OK;
}

/* The hooks of (site, layer) in order, then its records. */
static int run_entries(hs_api_forward *f, int site, int layer, hs_real *x, int B, int T,
                       int heads, int width, size_t need, int records)
{
    int rc = HS_OK;
    for (int i = 0; !rc && i < f->n; i++)
        if (f->e[i].fn && f->e[i].site == site && f->e[i].layer == layer)
            rc = f->e[i].fn(f->e[i].ctx, site, layer, x, B, T, heads, width);
    for (int i = 0; !rc && records && i < f->n; i++)
        if (!f->e[i].fn && f->e[i].site == site && f->e[i].layer == layer)
            rc = record(&f->e[i], x, need);
    return rc;
}

static int site_fn(void *ctx, const hs_site_view *v)
{
    hs_api_forward *f = ctx;
    const int maps = v->site == HS_SITE_PATTERN || v->site == HS_SITE_ATTN_SCORES;
    /* The views of hooks.h: (B,T,heads,width) contiguous, maps (B,H,T,S). */
    return run_entries(f, v->site, v->layer, v->x, v->B, maps ? v->heads : v->T,
                       maps ? v->T : v->heads, v->width, (size_t)v->B * v->sb,
                       v->site != HS_SITE_PATTERN);
}

static int maps_fn(void *ctx, int layer, const hs_real *att, int B, int H, int T)
{
    hs_api_forward *f = ctx;
    int rc = HS_OK;
    for (int i = 0; !rc && i < f->n; i++)
        if (!f->e[i].fn && f->e[i].site == HS_SITE_PATTERN && f->e[i].layer == layer)
            rc = record(&f->e[i], att, (size_t)B * H * T * T);
    return rc;
}

static int has(const hs_api_forward *f, int site, int hooks_only)
{
    for (int i = 0; i < f->n; i++)
        if (f->e[i].site == site && (!hooks_only || f->e[i].fn))
            return 1;
    return 0;
}

/* Activations for B x T with or without maps, kept while they fit: one set
 * of each, so that forwards with and without maps in turn (run_with_cache,
 * then model(ids)) reuse theirs instead of faulting fresh pages in. */
static hs_acts *ensure_acts(hs_api_forward *f, int B, int T, int maps, int *rc)
{
    hs_acts *a = &f->a[maps];
    int *have = &f->have_acts[maps];
    if (*have && (a->T != T || a->B_alloc < B)) {
        hs_acts_free(a);
        *have = 0;
    }
    if (!*have) {
        if ((*rc = hs_acts_alloc(a, &f->m->cfg, B, T, maps ? HS_ACTS_MAPS : HS_ACTS_INFER)))
            return NULL;
        *have = 1;
    }
    *rc = hs_acts_set_batch(a, B);
    return *rc ? NULL : a;
}

static int check_targets(const int32_t *targets, size_t N, int V)
{
    for (size_t i = 0; i < N; i++)
        if (targets[i] < 0 || targets[i] >= V)
            return hs_fail(HS_EINVAL, "forward: target %d at position %zu outside vocabulary %d",
                           targets[i], i, V);
    return HS_OK;
}

int hs_api_forward_run(hs_api_forward *f, const int32_t *ids, int B, int T,
                       const int32_t *targets, hs_real *logits, hs_real *losses, double *loss)
{
    const hs_model *m = f->m;
    const hs_model_config *c = &m->cfg;
    if (B <= 0 || T <= 0)
        return hs_fail(HS_EINVAL, "forward: B=%d, T=%d must be positive", B, T);
    if (hs_seq_len_check(c, T, "forward: positions")) /* the commands' one check */
        return HS_EINVAL;
    if ((logits || targets || has(f, HS_API_SITE_FINAL, 0) || has(f, HS_API_SITE_FINAL, 1)) &&
        hs_config_logits(c, "forward's logits or loss (return_type None runs the hooks alone)"))
        return HS_EUNSUPPORTED;
    const size_t N = (size_t)B * T, V = (size_t)c->vocab_size;
    const int maps = has(f, HS_SITE_PATTERN, 0) || has(f, HS_SITE_ATTN_SCORES, 0);
    int rc;
    hs_acts *a = ensure_acts(f, B, T, maps, &rc);
    if (a && targets)
        rc = check_targets(targets, N, c->vocab_size);
    if (rc)
        return rc;
    hs_hooks h = { .ctx = f };
    if (has(f, HS_SITE_PATTERN, 0))
        h.on_maps = maps_fn;
    for (int s = 0; s < HS_N_SITES; s++)
        if (s == HS_SITE_PATTERN ? has(f, s, 1) : has(f, s, 0))
            h.site[s] = (hs_site_hook){ site_fn, f };
    const int final_hook = has(f, HS_API_SITE_FINAL, 1);
    /* the model's own fused cross-entropy when only the losses are wanted;
     * otherwise the logits go straight into the caller's buffer */
    const int fused = targets && !logits && !final_hook;
    hs_real *own = a->logits;
    if (logits && !final_hook)
        a->logits = logits;
    rc = hs_forward(a, m, ids, fused ? targets : NULL, &h);
    a->logits = own;
    if (!rc && has(f, HS_API_SITE_FINAL, 0))
        rc = run_entries(f, HS_API_SITE_FINAL, 0, a->lnf, B, T, 1, c->d_model, N * c->d_model, 1);
    if (rc)
        return rc;
    if (final_hook) { /* the unembedding again, of what the hooks left */
        hs_real *out = logits ? logits : a->logits;
        hs_linear_forward(out, a->lnf, m->w.lm_w, m->w.lm_b, N, c->d_model, c->vocab_size);
        if (c->final_softcap > 0)
            hs_softcap_forward(out, c->final_softcap, N * V);
    }
    if (!targets)
        return HS_OK;
    if (!fused) {
        if (logits)
            memcpy(a->logits, logits, sizeof(hs_real) * N * V);
        hs_softmax_xent_forward(a->logits, a->losses, targets, N, c->vocab_size);
    }
    double sum = 0;
    for (size_t i = 0; i < N; i++)
        sum += a->losses[i];
    if (losses)
        memcpy(losses, a->losses, sizeof(hs_real) * N);
    if (loss)
        *loss = sum / (double)N;
    return HS_OK;
}

/* ---- encoder-decoders ----------------------------------------------------- */

/* The activations of record (attn, layer, site) of a forward kept in a
 * (HS_S2S_MAPS: every layer's), with its element count; NULL naming the
 * record when the model has no such one. */
static const hs_real *s2s_site(const hs_s2s_acts *a, const hs_model_config *c, int attn,
                               int layer, int site, size_t *count)
{
    const int E = c->enc_layers, l = attn == 1 ? layer : E + layer;
    const int ok = attn >= 1 && attn <= 3 && layer >= 0 &&
                   (attn == 1 ? layer < E : l < c->n_layer);
    if (!ok) {
        hs_fail(HS_EINVAL, "encoder-decoder forward: no %s layer %d",
                hs_attn_type_name((hs_attn_type)(attn >= 1 && attn <= 3 ? attn : 0)), layer);
        return NULL;
    }
    const hs_attn_acts *aa = attn == 3 ? &a->cross[l] : &a->self[l];
    const size_t rows = attn == 1 ? (size_t)a->S : (size_t)a->T;
    const size_t keys = attn == 2 ? (size_t)a->T : (size_t)a->S;
    const size_t hd = (size_t)c->n_head[l] * c->head_dim, gd = (size_t)c->n_kv_head[l] * c->head_dim;
    const size_t B = (size_t)a->B;
    switch (site) {
    case HS_SITE_Q: *count = B * rows * hd; return aa->q;
    case HS_SITE_K: *count = B * keys * gd; return aa->k;
    case HS_SITE_V: *count = B * keys * gd; return aa->v;
    case HS_SITE_Z: *count = B * rows * hd; return aa->z;
    case HS_SITE_PATTERN: *count = B * c->n_head[l] * rows * keys; return aa->att;
    default:
        hs_fail(HS_EINVAL, "encoder-decoder forward: site %d is not recorded (q, k, v, z, "
                           "pattern)", site);
        return NULL;
    }
}

int hs_api_s2s_forward(const hs_model *m, const int32_t *src, int S, const int32_t *dec, int T,
                       int B, const int32_t *targets, hs_real *logits, hs_real *losses,
                       double *loss, const int *attn, const int *layer, const int *site,
                       hs_real *const *dst, const size_t *n, int n_rec)
{
    const hs_model_config *c = &m->cfg;
    hs_s2s_acts a;
    int rc = hs_s2s_acts_alloc(&a, c, B, S, T, n_rec > 0 ? HS_S2S_MAPS : 0);
    if (rc)
        return rc;
    const size_t NT = (size_t)B * T, V = (size_t)c->vocab_size;
    rc = hs_s2s_encode(&a, m, src);
    if (!rc)
        rc = hs_s2s_decode(&a, m, dec, NULL);
    if (!rc && logits) /* before the loss makes them probabilities */
        memcpy(logits, a.logits, sizeof(hs_real) * NT * V);
    if (!rc && targets && !(rc = hs_s2s_loss(&a, c, targets))) {
        if (losses)
            memcpy(losses, a.losses, sizeof(hs_real) * NT);
        if (loss)
            *loss = a.loss;
    }
    for (int i = 0; !rc && i < n_rec; i++) {
        size_t count = 0;
        const hs_real *x = s2s_site(&a, c, attn[i], layer[i], site[i], &count);
        if (!x)
            rc = HS_EINVAL;
        else if (count != n[i])
            rc = hs_fail(HS_EINVAL, "encoder-decoder forward: record %d holds %zu elements, "
                                    "the site %zu", i, n[i], count);
        else
            memcpy(dst[i], x, sizeof(hs_real) * count);
    }
    hs_s2s_acts_free(&a);
    return rc;
}
