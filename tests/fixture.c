#include "fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

double fx_max_err(const hs_real *a, const double *b, size_t n, const char *what)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs(b[i]) > 1 ? fabs(b[i]) : 1;
        double e = fabs((double)a[i] - b[i]) / den;
        if (!(e <= worst)) { /* also catches NaN */
            worst = isnan(e) ? INFINITY : e;
            at = i;
        }
    }
    printf("    %-10s max err %.3g at %zu (got %.10g, want %.10g)\n", what, worst, at,
           n ? (double)a[at] : 0.0, n ? b[at] : 0.0);
    return worst;
}
