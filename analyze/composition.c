/* Q-, K- and V-composition scores (composition.h). */
#include "composition.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const COMP_NAME[2][3] = {
    { "q_composition", "k_composition", "v_composition" },
    { "q_composition_control", "k_composition_control", "v_composition_control" },
};

/* out (d, H*dh): column h*dh + j is row (h/kv_mul)*dh + j of w (rows, d),
 * i.e. TransformerLens's W_Q / W_K / W_V of query head h side by side. */
static void in_block(double *out, const hs_real *w, int H, int kv_mul, int dh, int d)
{
    const int HD = H * dh;
    for (int i = 0; i < d; i++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < dh; j++)
                out[(size_t)i * HD + h * dh + j] = w[((size_t)(h / kv_mul) * dh + j) * d + i];
}

/* out (H*dh, d): rows h*dh .. h*dh+dh-1 are W_O^h (dh, d) of w_o (d, H*dh). */
static void out_block(double *out, const hs_real *w_o, int HD, int d)
{
    for (int r = 0; r < HD; r++)
        for (int i = 0; i < d; i++)
            out[(size_t)r * d + i] = w_o[(size_t)i * HD + r];
}

/* Per head of one layer: the Gram matrices (dh, dh) of its four factors. */
typedef struct {
    double *gq, *gk, *gv, *go; /* (H, dh, dh) each */
} layer_grams;

static double frob_dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* The blocks of layer l (q, k, v: (d, H*dh); o: (H*dh, d)) and its grams. */
static void layer_blocks(double *q, double *k, double *v, double *o, layer_grams *g,
                         const hs_model *m, int l)
{
    const hs_model_config *c = &m->cfg;
    const int H = c->n_head[l], dh = c->head_dim, d = c->d_model, HD = H * dh;
    const int kv_mul = H / c->n_kv_head[l];
    const hs_attn_weights *w = &m->w.layer[l].attn;
    in_block(q, w->w_q, H, 1, dh, d);
    in_block(k, w->w_k, H, kv_mul, dh, d);
    in_block(v, w->w_v, H, kv_mul, dh, d);
    out_block(o, w->w_o, HD, d);
    const double *in[3] = { q, k, v };
    double *gin[3] = { g->gq, g->gk, g->gv };
    for (int h = 0; h < H; h++) {
        const size_t gh = (size_t)h * dh * dh;
        for (int x = 0; x < 3; x++) /* X^T X of the (d, dh) column block */
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dh, dh, d, 1.0, in[x] + h * dh,
                        HD, in[x] + h * dh, HD, 0.0, gin[x] + gh, dh);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, dh, dh, d, 1.0,
                    o + (size_t)h * dh * d, d, o + (size_t)h * dh * d, d, 0.0, g->go + gh, dh);
    }
}

typedef struct {
    hs_pair_row *rows;
    int n, cap;
} pair_rows;

static int pair_add(pair_rows *p, hs_pair_row r)
{
    if (p->n == p->cap) {
        int ncap = p->cap ? 2 * p->cap : 256;
        hs_pair_row *nr = realloc(p->rows, sizeof *nr * (size_t)ncap);
        if (!nr)
            return hs_fail(HS_ENOMEM, "composition: out of memory");
        p->rows = nr, p->cap = ncap;
    }
    p->rows[p->n++] = r;
    return HS_OK;
}

/* Scratch of one (layer a, layer b) block product. */
typedef struct {
    double *mm, *pl, *pr; /* (HDa, HDb) */
} pair_scratch;

/* Every head of layer la into every head of layer lb, one kind: right
 * (d, HDb) is the later head's input factor, gr its other factor's grams
 * ((HDb/dh) x (dh, dh)), nr2 that head's circuit norm^2. */
static int pair_kind(pair_rows *out, const char *name, const double *oa, const layer_grams *ga,
                     const double *nov2a, const double *right, const double *gr,
                     const double *nr2, int la, int Ha, int lb, int Hb, int dh, int d,
                     pair_scratch *s)
{
    const int HDa = Ha * dh, HDb = Hb * dh;
    /* mm = O_A R: block (ha, hb) is W_O^A W_*^B (dh, dh) */
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, HDa, HDb, d, 1.0, oa, d, right, HDb,
                0.0, s->mm, HDb);
    for (int ha = 0; ha < Ha; ha++) /* pl = G_V^A mm, row block by row block */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dh, HDb, dh, 1.0,
                    ga->gv + (size_t)ha * dh * dh, dh, s->mm + (size_t)ha * dh * HDb, HDb, 0.0,
                    s->pl + (size_t)ha * dh * HDb, HDb);
    for (int hb = 0; hb < Hb; hb++) /* pr = mm G^B, column block by column block */
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, HDa, dh, dh, 1.0, s->mm + hb * dh,
                    HDb, gr + (size_t)hb * dh * dh, dh, 0.0, s->pr + hb * dh, HDb);
    for (int ha = 0; ha < Ha; ha++)
        for (int hb = 0; hb < Hb; hb++) {
            if (!(nov2a[ha] > 0) || !(nr2[hb] > 0))
                continue; /* a zero circuit: 0/0, no score */
            double num = 0;
            for (int i = 0; i < dh; i++) {
                const size_t at = ((size_t)ha * dh + i) * HDb + (size_t)hb * dh;
                num += frob_dot(s->pl + at, s->pr + at, (size_t)dh);
            }
            const double v = sqrt(fmax(num, 0) / (nov2a[ha] * nr2[hb]));
            int rc = pair_add(out, (hs_pair_row){ la, ha, lb, hb, name, v });
            if (rc)
                return rc;
        }
    return HS_OK;
}

/* Grams and circuit norms^2 of every head (layer by layer), using the
 * scratch blocks. */
typedef struct {
    layer_grams *g;       /* [L] */
    double *nov2, *nqk2;  /* [L * maxH]: |OV|_F^2, |QK|_F^2 */
    double *q, *k, *v, *o, *oa; /* scratch blocks of the largest layer */
    pair_scratch s;
    int maxH;
} comp_work;

static void comp_free(comp_work *w, int L)
{
    for (int l = 0; w->g && l < L; l++) {
        free(w->g[l].gq), free(w->g[l].gk), free(w->g[l].gv), free(w->g[l].go);
    }
    free(w->g), free(w->nov2), free(w->nqk2);
    free(w->q), free(w->k), free(w->v), free(w->o), free(w->oa);
    free(w->s.mm), free(w->s.pl), free(w->s.pr);
}

static int comp_alloc(comp_work *w, const hs_model_config *c)
{
    memset(w, 0, sizeof *w);
    const int L = c->n_layer, dh = c->head_dim, d = c->d_model;
    for (int l = 0; l < L; l++)
        w->maxH = c->n_head[l] > w->maxH ? c->n_head[l] : w->maxH;
    const size_t HD = (size_t)w->maxH * dh, gsz = (size_t)w->maxH * dh * dh;
    w->g = hs_calloc((size_t)L, sizeof *w->g, "composition");
    w->nov2 = hs_calloc((size_t)L * w->maxH, sizeof(double), "composition");
    w->nqk2 = hs_calloc((size_t)L * w->maxH, sizeof(double), "composition");
    double **blk[] = { &w->q, &w->k, &w->v, &w->o, &w->oa };
    for (int i = 0; i < 5; i++)
        *blk[i] = hs_calloc(HD * d, sizeof(double), "composition blocks");
    double **sq[] = { &w->s.mm, &w->s.pl, &w->s.pr };
    for (int i = 0; i < 3; i++)
        *sq[i] = hs_calloc(HD * HD, sizeof(double), "composition blocks");
    int ok = w->g && w->nov2 && w->nqk2 && w->q && w->k && w->v && w->o && w->oa && w->s.mm &&
             w->s.pl && w->s.pr;
    for (int l = 0; ok && l < L; l++) {
        layer_grams *g = &w->g[l];
        double **gm[] = { &g->gq, &g->gk, &g->gv, &g->go };
        for (int i = 0; i < 4; i++)
            ok &= (*gm[i] = hs_calloc(gsz, sizeof(double), "composition grams")) != NULL;
    }
    if (!ok) {
        comp_free(w, L);
        return HS_ENOMEM;
    }
    return HS_OK;
}

int hs_composition_scores(hs_pair_row **rows, int *n, const hs_model *m, int control)
{
    const hs_model_config *c = &m->cfg;
    const int L = c->n_layer, dh = c->head_dim, d = c->d_model;
    *rows = NULL, *n = 0;
    comp_work w;
    /* the blocks are read element by element: as floats */
    int rc = hs_model_widen(m);
    if (!rc)
        rc = comp_alloc(&w, c);
    if (rc)
        return rc;
    for (int l = 0; l < L; l++) { /* every head's grams and norms, once */
        const size_t sq = (size_t)dh * dh;
        layer_blocks(w.q, w.k, w.v, w.o, &w.g[l], m, l);
        for (int h = 0; h < c->n_head[l]; h++) {
            const layer_grams *g = &w.g[l];
            w.nov2[l * w.maxH + h] = frob_dot(g->gv + h * sq, g->go + h * sq, sq);
            w.nqk2[l * w.maxH + h] = frob_dot(g->gq + h * sq, g->gk + h * sq, sq);
        }
    }
    pair_rows out = { 0 };
    for (int lb = 1; !rc && lb < L; lb++) {
        layer_grams gb = w.g[lb], scratch = w.g[lb];
        layer_blocks(w.q, w.k, w.v, w.o, &scratch, m, lb); /* same grams again; blocks wanted */
        const double *right[3] = { w.q, w.k, w.v };
        const double *gr[3] = { gb.gk, gb.gq, gb.go };
        const double *nr2[3] = { w.nqk2 + lb * w.maxH, w.nqk2 + lb * w.maxH,
                                 w.nov2 + lb * w.maxH };
        for (int la = 0; !rc && la < lb; la++) {
            const int Ha = c->n_head[la];
            out_block(w.oa, m->w.layer[la].attn.w_o, Ha * dh, d);
            for (int kind = 0; !rc && kind < 3; kind++)
                rc = pair_kind(&out, COMP_NAME[control != 0][kind], w.oa, &w.g[la],
                               w.nov2 + la * w.maxH, right[kind], gr[kind], nr2[kind], la, Ha,
                               lb, c->n_head[lb], dh, d, &w.s);
        }
    }
    comp_free(&w, L);
    if (rc) {
        free(out.rows);
        return rc;
    }
    *rows = out.rows, *n = out.n;
    return HS_OK;
}
