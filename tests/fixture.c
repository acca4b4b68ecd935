#include "fixture.h"
#include "config_file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "checkpoint.h"
#include "decode.h"
#include "safetensors.h"

int fx_load(fx_case *fc, const char *path, const char *name)
{
    memset(fc, 0, sizeof *fc);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fixture %s: cannot open\n", path);
        return -1;
    }
    char word[64], id[64];
    int in_case = 0, found = 0;
    while (fscanf(f, "%63s", word) == 1) {
        if (word[0] == '#') {
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n')
                ;
        } else if (!strcmp(word, "case")) {
            if (fscanf(f, "%63s", id) != 1)
                break;
            in_case = !strcmp(id, name);
            if (in_case)
                snprintf(fc->name, sizeof fc->name, "%s", id);
        } else if (!strcmp(word, "end")) {
            if (in_case) {
                found = 1;
                break;
            }
        } else if (!strcmp(word, "int")) {
            long v;
            if (fscanf(f, "%63s %ld", id, &v) != 2)
                break;
            if (in_case && fc->nint < FX_MAX_INTS) {
                snprintf(fc->int_names[fc->nint], 64, "%s", id);
                fc->ints[fc->nint++] = v;
            }
        } else if (!strcmp(word, "tensor")) {
            fx_tensor t = { 0 };
            if (fscanf(f, "%63s %d", t.name, &t.ndim) != 2 || t.ndim < 0 || t.ndim > FX_MAX_DIMS)
                break;
            t.n = 1;
            for (int i = 0; i < t.ndim; i++) {
                if (fscanf(f, "%d", &t.dims[i]) != 1 || t.dims[i] < 0)
                    goto bad;
                t.n *= (size_t)t.dims[i];
            }
            double *v = malloc(sizeof(double) * (t.n ? t.n : 1));
            if (!v)
                goto bad;
            for (size_t i = 0; i < t.n; i++)
                if (fscanf(f, "%lf", &v[i]) != 1) {
                    free(v);
                    goto bad;
                }
            if (in_case && fc->ntensor < FX_MAX_TENSORS) {
                t.v = v;
                fc->t[fc->ntensor++] = t;
            } else {
                free(v);
            }
        } else {
            goto bad;
        }
    }
    fclose(f);
    if (!found) {
        fprintf(stderr, "fixture %s: case %s not found or not terminated\n", path, name);
        fx_free(fc);
        return -1;
    }
    return 0;
bad:
    fclose(f);
    fprintf(stderr, "fixture %s: malformed near '%s'\n", path, word);
    fx_free(fc);
    return -1;
}

void fx_free(fx_case *fc)
{
    for (int i = 0; i < fc->ntensor; i++)
        free(fc->t[i].v);
    memset(fc, 0, sizeof *fc);
}

const fx_tensor *fx_tensor_get(const fx_case *fc, const char *name)
{
    for (int i = 0; i < fc->ntensor; i++)
        if (!strcmp(fc->t[i].name, name))
            return &fc->t[i];
    return NULL;
}

long fx_int(const fx_case *fc, const char *name)
{
    for (int i = 0; i < fc->nint; i++)
        if (!strcmp(fc->int_names[i], name))
            return fc->ints[i];
    fprintf(stderr, "fixture case %s: missing int %s\n", fc->name, name);
    abort();
}

hs_real *fx_real(const fx_case *fc, const char *name)
{
    const fx_tensor *t = fx_tensor_get(fc, name);
    if (!t)
        return NULL;
    hs_real *r = malloc(sizeof(hs_real) * (t->n ? t->n : 1));
    for (size_t i = 0; r && i < t->n; i++)
        r[i] = (hs_real)t->v[i];
    return r;
}

/* The index of the largest |a - b| / max(1, |b|), its error in *worst. */
static size_t worst_at(const hs_real *a, const double *ad, const double *b, size_t n,
                       double *worst)
{
    size_t at = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = a ? (double)a[i] : ad[i];
        const double e = fabs(x - b[i]) / fmax(1, fabs(b[i]));
        if (!(e <= *worst)) { /* also catches NaN */
            *worst = isnan(e) ? INFINITY : e;
            at = i;
        }
    }
    return at;
}

double fx_err(const hs_real *a, const double *b, size_t n)
{
    double worst;
    worst_at(a, NULL, b, n, &worst);
    return worst;
}

double fx_err_double(const double *a, const double *b, size_t n)
{
    double worst;
    worst_at(NULL, a, b, n, &worst);
    return worst;
}

double fx_max_err(const hs_real *a, const double *b, size_t n, const char *what)
{
    double worst;
    const size_t at = worst_at(a, NULL, b, n, &worst);
    printf("    %-10s max err %.3g at %zu (got %.10g, want %.10g)\n", what, worst, at,
           n ? (double)a[at] : 0.0, n ? b[at] : 0.0);
    return worst;
}

void fx_split_tokens(const fx_tensor *tok, int B, int T, int32_t *in, int32_t *tg)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[b * T + t] = (int32_t)tok->v[b * (T + 1) + t];
            tg[b * T + t] = (int32_t)tok->v[b * (T + 1) + t + 1];
        }
}

int fx_compare_exported(const fx_case *fc, const char *prefix, const hs_model *m, double tol)
{
    int compared = 0;
    double worst = 0;
    const char *worst_name = "";
    const size_t plen = strlen(prefix);
    for (int i = 0; i < fc->ntensor; i++) {
        const fx_tensor *t = &fc->t[i];
        if (strncmp(t->name, prefix, plen))
            continue;
        double *buf = malloc(sizeof(double) * (t->n ? t->n : 1));
        CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
        size_t n = 0;
        const int rc = hs_checkpoint_export(m, t->name + plen, buf, t->n, &n);
        if (rc)
            printf("\n    %s", hs_last_error());
        CU_ASSERT_EQUAL(rc, HS_OK);
        CU_ASSERT_EQUAL(n, t->n);
        const double e = !rc && n == t->n ? fx_err_double(buf, t->v, n) : 0;
        if (!(e <= worst))
            worst = e, worst_name = t->name;
        free(buf);
        compared++;
    }
    printf("\n    %d %s tensors, worst %.3g (%s)", compared, prefix, worst, worst_name);
    CU_ASSERT(worst <= tol);
    return compared;
}

int fx_compare_safetensors(const char *path, const hs_model *m, double tol)
{
    hs_safetensors st;
    CU_ASSERT_EQUAL_FATAL(hs_st_open(&st, path), HS_OK);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < st.n; i++) {
        const hs_st_tensor *t = &st.t[i];
        const size_t n = (t->end - t->begin) / 4; /* the oracle writes F32 */
        double *mine = malloc(sizeof(double) * (n ? n : 1));
        double *want = malloc(sizeof(double) * (n ? n : 1));
        CU_ASSERT_FATAL(mine && want);
        size_t got = 0;
        const int rc = hs_checkpoint_export(m, t->name, mine, n, &got);
        if (rc)
            printf("\n    %s", hs_last_error());
        CU_ASSERT_EQUAL(rc, HS_OK);
        CU_ASSERT_EQUAL(got, n);
        for (size_t k = 0; k < n; k++)
            want[k] = hs_st_get(&st, t, k);
        const double e = !rc ? fx_err_double(mine, want, n) : 0;
        if (!(e <= worst))
            worst = e, worst_name = t->name;
        free(mine), free(want);
    }
    printf("\n    %d gradient tensors, worst %.3g (%s)", st.n, worst, worst_name);
    CU_ASSERT(worst <= tol);
    const int n = st.n;
    hs_st_close(&st);
    return n;
}

void fx_oracle_open(fx_oracle *o, const char *txt, const char *name, const char *dir)
{
    memset(o, 0, sizeof *o);
    CU_ASSERT_EQUAL_FATAL(fx_load(&o->fc, txt, name), 0);
    const int rc = hs_checkpoint_load(&o->m, dir);
    if (rc)
        printf("\n    load: %s\n", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    o->B = (int)fx_int(&o->fc, "B"), o->T = (int)fx_int(&o->fc, "T");
    const size_t N = (size_t)o->B * o->T;
    o->in = malloc(sizeof(int32_t) * N), o->tg = malloc(sizeof(int32_t) * N);
    CU_ASSERT_FATAL(o->in && o->tg);
    const fx_tensor *tok = fx_tensor_get(&o->fc, "tokens");
    CU_ASSERT_FATAL(tok && tok->n == (size_t)o->B * (o->T + 1));
    fx_split_tokens(tok, o->B, o->T, o->in, o->tg);
    CU_ASSERT_EQUAL_FATAL(hs_trainer_init(&o->tr, &o->m, o->B, o->T, 1e-3, 0, 0), HS_OK);
}

void fx_oracle_logits(fx_oracle *o, const char *what, double tol)
{
    CU_ASSERT_EQUAL_FATAL(hs_forward(&o->tr.acts, &o->m, o->in, NULL, NULL), HS_OK);
    const fx_tensor *lg = fx_tensor_get(&o->fc, "logits");
    CU_ASSERT_FATAL(lg != NULL);
    const double e = fx_err(o->tr.acts.logits, lg->v, lg->n);
    printf("\n    %s (%s) logits max err %.3g", what, hs_family_name(o->m.cfg.family), e);
    CU_ASSERT(e <= tol);
}

void fx_oracle_loss(fx_oracle *o, double tol, int grads)
{
    CU_ASSERT_EQUAL_FATAL(hs_forward(&o->tr.acts, &o->m, o->in, o->tg, NULL), HS_OK);
    const double want = fx_tensor_get(&o->fc, "loss")->v[0];
    printf("; loss %.12g want %.12g", o->tr.acts.loss, want);
    CU_ASSERT(fabs(o->tr.acts.loss - want) <= tol * fmax(1, fabs(want)));
    if (grads)
        CU_ASSERT_EQUAL_FATAL(hs_backward(&o->tr.grads, NULL, &o->tr.acts, &o->m, o->in, o->tg,
                                          NULL, (hs_real)(1.0 / (o->B * o->T))),
                              HS_OK);
}

hs_model fx_oracle_grads(const fx_oracle *o)
{
    hs_model g = o->m; /* the gradient buffer seen through the model's table */
    g.params = o->tr.grad_buf;
    return g;
}

void fx_oracle_close(fx_oracle *o)
{
    hs_trainer_free(&o->tr);
    hs_model_free(&o->m);
    free(o->in), free(o->tg);
    fx_free(&o->fc);
}

void fx_make_model(hs_model *m, const char *preset, const char *const *over, int nover,
                   unsigned long long seed)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, preset), HS_OK);
    for (int i = 0; i < nover; i++) {
        const int rc = hs_config_override(&c, over[i]);
        if (rc)
            printf("\n    %s: %s", over[i], hs_last_error());
        CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    }
    CU_ASSERT_EQUAL_FATAL(hs_model_init(m, &c), HS_OK);
    hs_model_init_random(m, seed);
    for (size_t i = 0; i < m->n_params; i++)
        m->params[i] *= 3;
}

/* The reference's windows, applied to the full forward's maps independently
 * of the kernel: entries of keys s <= t - W (W head h's window, 0 for a
 * global head) and of the future set to 0 and each row renormalised over
 * what is left, which is the softmax restricted to the window (a no-op once
 * the kernel masks the window). */
static int window_pattern(void *ctx, const hs_site_view *v)
{
    const hs_model_config *c = ctx;
    for (int b = 0; b < v->B; b++)
        for (int h = 0; h < v->heads; h++) {
            const int W = hs_config_head_window(c, v->layer, h);
            for (int t = 0; t < v->T; t++) {
                hs_real *row = v->x + b * v->sb + t * v->st + h * v->sh;
                double sum = 0;
                for (int s = 0; s < v->width; s++)
                    if ((W && s <= t - W && s >= c->sink) || s > t) /* sinks: a KV plan's */
                        row[s] = 0;
                    else
                        sum += row[s];
                for (int s = 0; s < v->width; s++)
                    row[s] = (hs_real)(row[s] / sum);
            }
        }
    return HS_OK;
}

/* Logits of the last position of a full forward over tok[0..T) (with the
 * model's windows applied to its maps, when it has any), and with where
 * (NULL: not asked) the position each head's last row attends most, the
 * first on ties, from the maps (layer after layer, heads in order), and
 * in margin by how much its weight exceeds the runner-up's. */
static void full_logits(hs_real *out, int *where, double *margin, const hs_model *m,
                        const int32_t *tok, int T)
{
    const int windowed = m->cfg.window || m->cfg.n_head_windows;
    hs_acts a;
    hs_hooks hooks = { 0 };
    hooks.site[HS_SITE_PATTERN] = (hs_site_hook){ window_pattern, (void *)&m->cfg };
    const int mode = where ? HS_ACTS_TRAIN : windowed ? HS_ACTS_MAPS : HS_ACTS_INFER;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m->cfg, 1, T, mode), HS_OK); /* TRAIN: every map */
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, tok, NULL, windowed ? &hooks : NULL), HS_OK);
    memcpy(out, a.logits + (size_t)(T - 1) * m->cfg.vocab_size,
           sizeof(hs_real) * m->cfg.vocab_size);
    for (int l = 0, k = 0; where && l < m->cfg.n_layer; l++)
        for (int h = 0; h < m->cfg.n_head[l]; h++, k++) {
            const hs_real *row = a.layer[l].attn.att + ((size_t)h * T + (T - 1)) * T;
            where[k] = 0;
            for (int s = 1; s < T; s++)
                if (row[s] > row[where[k]])
                    where[k] = s;
            double second = 0; /* the runner-up's weight */
            for (int s = 0; s < T; s++)
                if (s != where[k] && row[s] > second)
                    second = row[s];
            margin[k] = row[where[k]] - second;
        }
    hs_acts_free(&a);
}

static int32_t argmax(const hs_real *x, int n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

int fx_check_decoding(const hs_model *m, int prompt, int total, double tol, const char *what)
{
    const int V = m->cfg.vocab_size;
    int32_t *tok = calloc((size_t)total, sizeof *tok);
    hs_real *ref = calloc((size_t)V, sizeof *ref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    for (int i = 0; i < prompt; i++)
        tok[i] = (int32_t)((i * 37 + 11) % V);
    hs_decoder dec;
    CU_ASSERT_EQUAL_FATAL(hs_decoder_init(&dec, m, total), HS_OK);
    /* the copy rule's watch (not for latent attention, which has no row) */
    int heads = 0, *where = NULL, *ref_where = NULL, **watched = NULL, compared = 0;
    double *margin = NULL;
    for (int l = 0; l < m->cfg.n_layer; l++)
        heads += m->cfg.n_head[l];
    if (!m->cfg.mla) {
        where = calloc((size_t)heads, sizeof *where);
        ref_where = calloc((size_t)heads, sizeof *ref_where);
        margin = calloc((size_t)heads, sizeof *margin);
        watched = calloc((size_t)m->cfg.n_layer, sizeof *watched);
        CU_ASSERT_FATAL(where && ref_where && margin && watched);
        for (int l = 0, k = 0; l < m->cfg.n_layer; k += m->cfg.n_head[l], l++)
            watched[l] = where + k;
        dec.watch.argmax = watched;
    }
    CU_ASSERT_EQUAL_FATAL(hs_decoder_feed(&dec, tok, prompt), HS_OK);
    double worst = 0;
    int id_mismatch = 0, where_mismatch = 0;
    for (int t = prompt;; t++) {
        full_logits(ref, ref_where, margin, m, tok, t);
        /* rows whose largest weight stands clear of rounding (random
         * weights make rows near uniform) */
        for (int k = 0; where && k < heads; k++)
            if (margin[k] > 1e-4)
                compared++, where_mismatch += where[k] != ref_where[k];
        for (int v = 0; v < V; v++) {
            const double e = fabs((double)dec.logits[v] - ref[v]) / fmax(1.0, fabs((double)ref[v]));
            worst = e > worst ? e : worst;
        }
        id_mismatch += argmax(dec.logits, V) != argmax(ref, V);
        if (t == total)
            break;
        tok[t] = argmax(dec.logits, V);
        CU_ASSERT_EQUAL_FATAL(hs_decoder_feed(&dec, &tok[t], 1), HS_OK);
    }
    if (worst > tol || id_mismatch || where_mismatch)
        printf("\n    %s: largest logit difference %.3g, %d greedy ids differ, %d watched "
               "argmax positions differ", what, worst, id_mismatch, where_mismatch);
    CU_ASSERT(worst <= tol);
    CU_ASSERT_EQUAL(id_mismatch, 0);
    CU_ASSERT_EQUAL(where_mismatch, 0);
    free(where), free(ref_where), free(margin), free(watched);
    /* feeding past the decoder's length is refused */
    CU_ASSERT_EQUAL(hs_decoder_feed(&dec, tok, 1), HS_EINVAL);
    hs_decoder_free(&dec);
    free(tok);
    free(ref);
    return compared;
}
