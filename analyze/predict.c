#include "predict.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "transformer.h"

/* The logits at the last of ids (n) into out (V), and their log-sum-exp. */
static int last_logits(double *out, double *lse, const hs_model *m, const int32_t *ids, int n)
{
    const hs_model_config *c = &m->cfg;
    int rc = hs_config_logits(c, "predict (the next-token logits)");
    if (!rc && n < 1)
        rc = hs_fail(HS_EINVAL, "predict: an empty prompt");
    hs_acts a = { 0 };
    if (!rc)
        rc = hs_acts_alloc(&a, c, 1, n, HS_ACTS_INFER);
    if (!rc)
        rc = hs_forward(&a, m, ids, NULL, NULL);
    const int V = c->vocab_size;
    double mx = -INFINITY, s = 0;
    for (int v = 0; !rc && v < V; v++)
        mx = fmax(mx, out[v] = (double)a.logits[(size_t)(n - 1) * V + v]);
    for (int v = 0; !rc && v < V; v++)
        s += exp(out[v] - mx);
    *lse = mx + log(s);
    if (a.block)
        hs_acts_free(&a);
    return rc;
}

/* 1 when id a ranks before id b. */
static int before(const double *x, int32_t a, int32_t b)
{
    return x[a] > x[b] || (x[a] == x[b] && a < b);
}

int hs_predict_top(hs_prediction *top, int k, const hs_model *m, const int32_t *ids, int n)
{
    const int V = m->cfg.vocab_size;
    if (k < 1 || k > V)
        return hs_fail(HS_EINVAL, "--top %d: 1 to the vocabulary's %d", k, V);
    double *x = hs_calloc((size_t)V, sizeof *x, "logits"), lse;
    int rc = x ? last_logits(x, &lse, m, ids, n) : HS_ENOMEM;
    int have = 0; /* top[0..have) sorted; insertion keeps the k best */
    for (int32_t v = 0; !rc && v < V; v++) {
        if (have == k && !before(x, v, top[k - 1].id))
            continue;
        int at = have < k ? have++ : k - 1;
        while (at > 0 && before(x, v, top[at - 1].id))
            top[at] = top[at - 1], at--;
        top[at] = (hs_prediction){ v, x[v], exp(x[v] - lse) };
    }
    free(x);
    return rc;
}

int hs_predict_pair(hs_prediction_pair *r, const hs_model *m, const int32_t *ids, int n,
                    int32_t answer, int32_t wrong)
{
    const int V = m->cfg.vocab_size;
    if (answer < 0 || answer >= V || wrong < 0 || wrong >= V)
        return hs_fail(HS_EINVAL, "predict: an answer or wrong id outside the vocabulary (%d)", V);
    double *x = hs_calloc((size_t)V, sizeof *x, "logits"), lse;
    int rc = x ? last_logits(x, &lse, m, ids, n) : HS_ENOMEM;
    if (!rc) {
        r->answer = (hs_prediction){ answer, x[answer], exp(x[answer] - lse) };
        r->wrong = (hs_prediction){ wrong, x[wrong], exp(x[wrong] - lse) };
        r->ld = x[answer] - x[wrong];
        r->answer_rank = r->wrong_rank = 1;
        for (int32_t v = 0; v < V; v++) {
            r->answer_rank += v != answer && before(x, v, answer);
            r->wrong_rank += v != wrong && before(x, v, wrong);
        }
    }
    free(x);
    return rc;
}

static int by_line(const void *a, const void *b)
{
    return ((const hs_prediction_line *)a)->line - ((const hs_prediction_line *)b)->line;
}

int hs_predict_prompts(hs_prediction_line **out, const hs_model *m, const hs_prompt_set *ps)
{
    hs_prediction_line *r = hs_calloc((size_t)ps->n + 1, sizeof *r, "predictions");
    int rc = r ? HS_OK : HS_ENOMEM, k = 0;
    for (int g = 0; !rc && g < ps->n_group; g++)
        for (int i = 0; !rc && i < ps->group[g].n; i++, k++) {
            const hs_prompt_group *G = &ps->group[g];
            const size_t at = (size_t)i * G->T;
            r[k].line = G->line[i];
            rc = hs_predict_pair(&r[k].clean, m, G->clean + at, G->T, G->answer[i], G->wrong[i]);
            if (!rc)
                rc = hs_predict_pair(&r[k].corrupt, m, G->corrupt + at, G->T, G->answer[i],
                                     G->wrong[i]);
        }
    if (!rc)
        qsort(r, (size_t)k, sizeof *r, by_line);
    if (rc)
        free(r), r = NULL;
    *out = r;
    return rc;
}
