/* The induction study (study.h): scores, control, causal check, verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inputs.h"
#include "metrics.h"
#include "study.h"
#include "study_induction.h"

hs_induction_opts hs_induction_defaults(void)
{
    return (hs_induction_opts){ .samples = 64, .batch = 8, .seed = 1, .causal_k = 1,
                                .random_draws = 20, .min_score = 0.4, .early = 50, .late = 500 };
}

static int total_heads(const hs_model_config *c)
{
    int n = 0;
    for (int l = 0; l < c->n_layer; l++)
        n += c->n_head[l];
    return n;
}

/* The ICL score's data against the model: HS_EUNSUPPORTED (the data, not
 * an option's value) when there is no sequence of icl_seq_len (+1) tokens
 * or the model is an encoder. */
static int check_icl(const hs_induction_opts *o, const hs_study_env *env)
{
    const hs_model_config *c = &env->m->cfg;
    if (!env->data)
        return HS_OK;
    if (c->encoder)
        return hs_fail(HS_EUNSUPPORTED, "the ICL score compares next-token losses at two "
                       "positions, which an encoder (%s) does not predict: give no --data",
                       hs_family_name(c->family));
    if (!hs_batch_count(env->data, 1, o->icl_seq_len) ||
        (c->pos == HS_POS_LEARNED && o->icl_seq_len > c->n_ctx))
        return hs_fail(HS_EUNSUPPORTED, "%s: no sequence of %d (+1) tokens for the ICL score, or "
                       "longer than n_ctx=%d", env->data_name ? env->data_name : "ICL data",
                       o->icl_seq_len, c->n_ctx);
    return HS_OK;
}

/* --vocab "A:B" ([A, B)) or "A-B" ([A, B]) into [*lo, *hi) within V ids. */
static int vocab_range(const char *s, int V, int *lo, int *hi)
{
    char sep = 0;
    int used = 0;
    if (sscanf(s, "%d%c%d%n", lo, &sep, hi, &used) != 3 || s[used] || (sep != ':' && sep != '-'))
        return hs_fail(HS_EINVAL, "--vocab '%s': A:B (ids A .. B-1) or A-B (ids A .. B) expected",
                       s);
    *hi += sep == '-';
    if (*lo < 0 || *hi > V || *lo >= *hi - 1)
        return hs_fail(HS_EINVAL, "--vocab '%s': two ids at least, within the model's %d", s, V);
    return HS_OK;
}

/* 1 when path starts with a token shard's magic (SPEC §4). */
static int is_shard(const char *path)
{
    FILE *f = fopen(path, "rb");
    int32_t magic = 0;
    const int got = f && fread(&magic, sizeof magic, 1, f) == 1;
    if (f)
        fclose(f);
    return got && magic == 20240520;
}

/* The ids r's tokens are drawn from into *pool (malloc'd; NULL: 0 .. V-1)
 * and their count *n. */
static int draw_pool(int32_t **pool, int *n, const hs_induction_opts *o, const hs_study_env *env)
{
    const int V = env->m->cfg.vocab_size;
    int lo = 0, hi = V, rc = o->vocab ? vocab_range(o->vocab, V, &lo, &hi) : HS_OK;
    *pool = NULL, *n = hi - lo;
    if (rc || (!o->vocab && !o->from_data))
        return rc;
    unsigned char *seen = hs_calloc((size_t)V, 1, "ids");
    if (!seen)
        return HS_ENOMEM;
    for (int i = lo; i < hi && !o->from_data; i++)
        seen[i] = 1;
    if (o->from_data) {
        const hs_source src = { .data = is_shard(o->from_data) ? o->from_data : NULL,
                                .text = is_shard(o->from_data) ? NULL : o->from_data };
        hs_tokenizer *tk = (hs_tokenizer *)env->tk;
        hs_tokens t = { 0 };
        if (src.text && !tk)
            rc = hs_fail(HS_EINVAL, "--from-data %s: a text needs a tokenizer (--tokenizer, or "
                                    "the model directory's tokenizer.json)", o->from_data);
        if (!rc)
            rc = hs_source_load(&t, &src, &tk, NULL, V);
        for (size_t i = 0; !rc && i < t.n; i++)
            seen[t.tok[i]] = 1;
        hs_tokens_free(&t);
    }
    *n = 0;
    for (int i = 0; !rc && i < V; i++)
        *n += seen[i];
    if (!rc && *n < 2)
        rc = hs_fail(HS_EINVAL, "--from-data %s: %d distinct ids; r needs two at least",
                     o->from_data, *n);
    if (!rc && !(*pool = hs_calloc((size_t)*n, sizeof **pool, "ids")))
        rc = HS_ENOMEM;
    for (int i = 0, k = 0; !rc && i < V; i++)
        if (seen[i])
            (*pool)[k++] = i;
    free(seen);
    return rc;
}

int hs_induction_check(hs_induction_opts *o, const hs_study_env *env)
{
    const hs_model_config *c = &env->m->cfg;
    int T = o->seq_len;
    if (!T)
        T = o->seq_len = c->n_ctx / 2 < 64 ? c->n_ctx / 2 : 64;
    if (2 * T > c->n_ctx)
        return hs_fail(HS_EINVAL, "--seq-len %d: 2 x %d exceeds the model's n_ctx=%d", T, T,
                       c->n_ctx);
    const int heads = total_heads(c), k = o->causal_k;
    if (2 * k > heads || k > 64)
        return hs_fail(HS_EINVAL, "--causal-k %d: at most %d for a model of %d heads (the random "
                       "draws need as many other heads)", k, heads / 2 < 64 ? heads / 2 : 64, heads);
    int lo, hi;
    if (o->vocab && vocab_range(o->vocab, c->vocab_size, &lo, &hi))
        return HS_EINVAL;
    if (o->samples < 2 || o->batch < 1 || o->random_draws < 2)
        return hs_fail(HS_EINVAL, "induction: samples %d, batch %d, random draws %d out of range",
                       o->samples, o->batch, o->random_draws);
    if (!o->icl_seq_len)
        o->icl_seq_len = c->n_ctx < 1024 ? c->n_ctx : 1024;
    return check_icl(o, env);
}

void hs_induction_result_free(hs_induction_result *r)
{
    hs_head_table_free(&r->table);
    free(r->draws.points);
    memset(r, 0, sizeof *r);
}

static int stopped(const hs_study_io *io)
{
    return io->stop && *io->stop ? hs_fail(HS_EINTR, "interrupted") : HS_OK;
}

/* The model-wide rows of the causal check and the verdict, and the ICL
 * scores of model and control. */
static int causal_rows(hs_induction_result *r, const hs_model *m, const hs_model *ctrl,
                       const hs_induction_opts *o, const hs_tokens *data)
{
    const hs_causal_check *cc = &r->causal;
    hs_head_table *t = &r->table;
    if (m->cfg.encoder) /* no causal check (r->note), no ICL score (refused) */
        return HS_OK;
    /* the second-half loss, its increase with the top-k induction heads off
     * (stderr over sequences), and with k random other heads off (stderr:
     * the spread of the draws) */
    int rc = hs_head_table_add(t, -1, -1, HS_METRIC(SECOND_HALF_LOSS), cc->clean, 0, o->samples);
    if (!rc)
        rc = hs_head_table_add_welford(t, -1, -1, HS_METRIC(FIRST_HALF_LOSS), &cc->first_half);
    if (!rc)
        rc = hs_head_table_add(t, -1, -1, HS_METRIC(CAUSAL_LOSS_DELTA_TOP_K), cc->targeted,
                               cc->targeted_stderr, o->samples);
    if (!rc)
        rc = hs_head_table_add(t, -1, -1, HS_METRIC(CAUSAL_LOSS_DELTA_RANDOM_K), cc->random_mean,
                               cc->random_std, o->random_draws);
    for (int i = 0; !rc && i < cc->k; i++)
        rc = hs_head_table_add(t, cc->layer[i], cc->head[i], HS_METRIC(CAUSAL_TOP_K), 1, 0, cc->k);
    if (!rc)
        rc = hs_head_table_add(t, -1, -1, HS_METRIC(INDUCTION_ESTABLISHED), r->established, 0, cc->k);
    for (int c = 0; !rc && data && c < 2; c++) {
        double v, se;
        long cnt;
        rc = hs_icl_score(&v, &se, &cnt, c ? ctrl : m, data, 1, o->icl_seq_len, 0,
                          o->early, o->late);
        if (!rc)
            rc = hs_head_table_add(t, -1, -1, c ? HS_METRIC(ICL_CONTROL) : HS_METRIC(ICL), v, se, cnt);
    }
    return rc;
}

int hs_induction_study(hs_induction_result *r, const hs_induction_opts *opts,
                       const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    const hs_model *m = env->m;
    const hs_model_config *c = &m->cfg;
    const hs_study_io *io = &env->io;
    hs_induction_opts o = *opts; /* its defaults resolved here too */
    int rc = hs_induction_check(&o, env);
    if (rc)
        return rc;
    const int T = o.seq_len, N = o.samples, B = o.batch;
    const hs_progress_fn pf = io->progress;
    void *pc = io->ctx;
    hs_model ctrl = { 0 };
    hs_scores s = { 0 }, sc = { 0 };
    const size_t nh = (size_t)c->n_layer * HS_MAX_HEADS;
    int32_t *tok = hs_calloc((size_t)N * 2 * T, sizeof(int32_t), "sequences");
    double *cop = hs_calloc(nh, sizeof(double), "copying");
    double *cop_ctrl = hs_calloc(nh, sizeof(double), "copying");
    double *draw = hs_calloc((size_t)o.random_draws, sizeof(double), "draws");
    r->draws.points = hs_calloc((size_t)o.random_draws, sizeof *r->draws.points, "draws");
    rc = tok && cop && cop_ctrl && draw && r->draws.points ? HS_OK : HS_ENOMEM;
    if (!rc)
        rc = hs_control_model(&ctrl, c, o.seed);
    int32_t *pool = NULL;
    r->vocab = c->vocab_size;
    if (!rc)
        rc = draw_pool(&pool, &r->pool, &o, env);
    if (!rc) {
        hs_repeated_sequences(tok, N, T, pool, r->pool, o.seed);
        rc = hs_scores_alloc(&s, c);
    }
    free(pool);
    if (!rc)
        rc = hs_scores_alloc(&sc, c);
    hs_study_phase(io, "induction: scores");
    if (!rc)
        rc = hs_pattern_scores(&s, m, tok, N, T, B, pf, pc);
    hs_study_phase(io, "induction: control");
    if (!rc && !(rc = stopped(io)))
        rc = hs_pattern_scores(&sc, &ctrl, tok, N, T, B, pf, pc);
    if (!rc)
        rc = hs_copying_scores(cop, m);
    if (!rc)
        rc = hs_copying_scores(cop_ctrl, &ctrl);
    if (c->encoder)
        snprintf(r->note, sizeof r->note, "no causal check: its second-half loss is a next-token "
                 "loss, which an encoder (%s) does not predict", hs_family_name(c->family));
    else
        hs_study_phase(io, "induction: causal check");
    if (!rc && !c->encoder && !(rc = stopped(io)))
        rc = hs_induction_causal_check(&r->causal, m, tok, N, T, B, &s, o.causal_k,
                                       o.random_draws, o.seed + 17, draw, pf, pc);
    hs_study_phase(io, NULL);
    if (!rc)
        rc = hs_scores_to_table(&r->table, &s, cop, "");
    if (!rc)
        rc = hs_scores_to_table(&r->table, &sc, cop_ctrl, "_control");
    if (!rc) {
        r->established = !c->encoder && hs_induction_established(&r->causal, &s, &sc, o.min_score);
        rc = causal_rows(r, m, &ctrl, &o, env->data);
    }
    if (!rc) { /* each random draw's increase, for `plot causal` */
        snprintf(r->draws.name, sizeof r->draws.name, "%s", HS_METRIC(CAUSAL_RANDOM_K));
        for (int d = 0; d < o.random_draws; d++)
            r->draws.points[d] = (hs_curve_point){ d, d, draw[d] };
        r->draws.n = c->encoder ? 0 : o.random_draws;
        const double *ind = s.value[HS_SCORE_INDUCTION];
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++)
                if (ind[(size_t)l * HS_MAX_HEADS + h] >
                    ind[(size_t)r->best_layer * HS_MAX_HEADS + r->best_head])
                    r->best_layer = l, r->best_head = h;
        const size_t b = (size_t)r->best_layer * HS_MAX_HEADS + r->best_head;
        r->best = ind[b];
        r->best_control = sc.value[HS_SCORE_INDUCTION][b];
        rc = hs_study_check_finite(io, &r->table, &r->draws, 1);
        r->rows = (hs_study_rows){ .heads = &r->table, .curve = { r->draws }, .n_curves = 1 };
    }
    free(tok), free(cop), free(cop_ctrl), free(draw);
    if (s.value[0])
        hs_scores_free(&s);
    if (sc.value[0])
        hs_scores_free(&sc);
    if (ctrl.params)
        hs_model_free(&ctrl);
    return rc;
}

HS_STUDY_KIND(induction, hs_induction_check);
