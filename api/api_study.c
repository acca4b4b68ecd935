/* api/: the studies (hs_api.h): each checks its options as its command does,
 * opens its run when an index is given (after the checks: bad input records
 * nothing), runs the one study of analyze/study.h, records its rows and
 * closes the run, then writes its results as JSON. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "api_json.h"
#include "checkpoint.h"
#include "inputs.h"
#include "metrics.h"
#include "run.h"
#include "sha256.h"
#include "study.h"
#include "study_ablate.h"
#include "study_importance.h"
#include "study_prune.h"
#include "study_patch.h"
#include "study_atp.h"
#include "study_interp.h"
#include "study_induction.h"
#include "study_capture.h"
#include "study_features.h"
#include "study_train.h"

struct hs_api_env {
    char *db, *model_dir;
    char **argv;
    int argc;
    volatile sig_atomic_t *stop;
    int allow_nonfinite, allow_weak_premise;
    const hs_api_task *task; /* ablate, importance, prune on a task (SPEC §16) */
};

void hs_api_env_task(hs_api_env *e, const hs_api_task *t) { e->task = t; }

int hs_api_env_new(hs_api_env **e) { return (*e = hs_calloc(1, sizeof **e, "env")) ? HS_OK : HS_ENOMEM; }

static void env_clear(hs_api_env *e)
{
    free(e->db), free(e->model_dir);
    for (int i = 0; i < e->argc; i++)
        free(e->argv[i]);
    free(e->argv);
    e->db = e->model_dir = NULL, e->argv = NULL, e->argc = 0;
}

void hs_api_env_free(hs_api_env *e)
{
    if (!e)
        return;
    env_clear(e);
    free(e);
}

static char *dup_or_null(const char *s, int *fail)
{
    char *d = s ? strdup(s) : NULL;
    *fail |= s && !d;
    return d;
}

int hs_api_env_record(hs_api_env *e, const char *db, const char *model_dir, int argc,
                      const char *const *argv)
{
    env_clear(e);
    int fail = 0;
    e->db = dup_or_null(db, &fail);
    e->model_dir = dup_or_null(model_dir, &fail);
    e->argv = argc > 0 ? calloc((size_t)argc, sizeof *e->argv) : NULL;
    fail |= argc > 0 && !e->argv;
    for (int i = 0; !fail && i < argc; i++, e->argc++)
        e->argv[i] = dup_or_null(argv[i], &fail);
    if (fail) {
        env_clear(e);
        return hs_fail(HS_ENOMEM, "out of memory");
    }
    return HS_OK;
}

void hs_api_env_stop(hs_api_env *e, volatile sig_atomic_t *stop) { e->stop = stop; }
void hs_api_env_allow_nonfinite(hs_api_env *e, int allow) { e->allow_nonfinite = allow; }
void hs_api_env_allow_weak_premise(hs_api_env *e, int allow) { e->allow_weak_premise = allow; }

static hs_study_io io_of(const hs_api_env *e)
{
    return (hs_study_io){ .stop = e->stop, .allow_nonfinite = e->allow_nonfinite,
                          .allow_weak_premise = e->allow_weak_premise };
}

/* ---- runs: what the command records about itself (cli_start) ---- */

/* Opens the run of kind in e's index (none without one) with its
 * provenance, then records what figures need of its inputs as the command
 * does (hs_inputs_record: seq_len when > 0, the heads per layer, the
 * prompts' position labels; nothing with m NULL). */
/* The environment of a study the flat interface runs. */
static hs_study_env env_for(const hs_api_env *e, const hs_model *m, const hs_tokens *data,
                            const hs_prompt_set *ps, hs_run *run, int B, int T,
                            size_t max_batches)
{
    return (hs_study_env){ .m = m, .data = data, .ps = ps, .batch = B, .seq_len = T,
                           .task = e->task ? hs_api_task_of(e->task) : NULL,
                           .max_batches = max_batches, .ix = hs_run_index(run),
                           .run_id = hs_run_id(run), .io = io_of(e) };
}

static int run_begin(hs_run **run, const hs_api_env *e, const char *kind, const hs_model *m,
                     const char *data_path, int seq_len, const hs_prompt_set *ps,
                     const hs_tokenizer *tk)
{
    *run = NULL;
    if (!e->db)
        return HS_OK;
    char file[1100];
    hs_checkpoint_file(e->model_dir ? e->model_dir : "", file, sizeof file);
    const hs_run_spec s = { .db = e->db, .kind = kind, .model_path = e->model_dir,
                            .model_file = e->model_dir ? file : NULL, .data_path = data_path,
                            .argc = e->argc, .argv = e->argv };
    int rc = hs_run_open(run, &s);
    /* the inputs as the command holds them (read here, never freed here);
     * none for a training run (m NULL), as `train` records none */
    hs_inputs in = { .seq_len = seq_len, .tk = (hs_tokenizer *)tk };
    if (m)
        in.m = *m;
    if (ps)
        in.ps = *ps;
    if (!rc && m)
        rc = hs_inputs_record(*run, &in);
    if (rc) {
        hs_run_close(*run, rc, NULL);
        *run = NULL;
    }
    return rc;
}

/* ---- results as JSON ---- */

static void rows_json(hs_jbuf *b, const hs_head_table *t)
{
    hs_jraw(b, "\"rows\":[");
    for (int i = 0; t && i < t->n; i++) {
        const hs_metric_row *r = &t->rows[i];
        hs_jf(b, "%s[%d,%d,", i ? "," : "", r->layer, r->head);
        hs_jstr(b, r->metric);
        hs_jraw(b, ",");
        hs_jnum(b, r->value);
        hs_jraw(b, ",");
        hs_jnum(b, r->stderr_value);
        hs_jf(b, ",%lld]", r->n);
    }
    hs_jraw(b, "]");
}

static void positions_json(hs_jbuf *b, const hs_position_row *p, int n)
{
    hs_jraw(b, ",\"positions\":[");
    for (int i = 0; i < n; i++) {
        hs_jf(b, "%s[%d,%d,", i ? "," : "", p[i].layer, p[i].position);
        hs_jstr(b, p[i].metric);
        hs_jraw(b, ",");
        hs_jnum(b, p[i].value);
        hs_jraw(b, ",");
        hs_jnum(b, p[i].stderr_value);
        hs_jf(b, ",%lld]", p[i].n);
    }
    hs_jraw(b, "]");
}

static void curve_json(hs_jbuf *b, const char *name, const hs_curve_point *p, int n, int first)
{
    hs_jkey(b, first, name);
    hs_jraw(b, "[");
    for (int i = 0; i < n; i++) {
        hs_jf(b, "%s[%lld,", i ? "," : "", (long long)p[i].step);
        hs_jnum(b, p[i].x);
        hs_jraw(b, ",");
        hs_jnum(b, p[i].y);
        hs_jraw(b, "]");
    }
    hs_jraw(b, "]");
}

typedef struct {
    const char *name;
    double v;
} scalar;

/* {"run_id", "rows", "positions", "curves", "scalars"}; the caller adds
 * members and closes the object. */
static void begin_json(hs_jbuf *b, long long run_id, const hs_head_table *t,
                       const hs_position_row *pos, int n_pos, const hs_study_curve *curves,
                       int n_curves, const scalar *sc, int n_sc)
{
    hs_jf(b, "{\"run_id\":%lld,", run_id);
    rows_json(b, t);
    positions_json(b, pos, n_pos);
    hs_jraw(b, ",\"curves\":{");
    for (int i = 0; i < n_curves; i++)
        curve_json(b, curves[i].name, curves[i].points, curves[i].n, i == 0);
    hs_jraw(b, "},\"scalars\":{");
    for (int i = 0; i < n_sc; i++) {
        hs_jkey(b, i == 0, sc[i].name);
        hs_jnum(b, sc[i].v);
    }
    hs_jraw(b, "}");
}

/* Closes the run (rc: the study's status) and, when all went well, the
 * JSON object into *json. */
static int finish(char **json, hs_jbuf *b, hs_run *run, int rc, const char *model_sha)
{
    rc = hs_run_close(run, rc, model_sha);
    if (rc) {
        hs_jfree(b);
        return rc;
    }
    hs_jraw(b, "}");
    return hs_jdone(b, json);
}

/* ---- token studies ---- */

/* What a run records as its data: the task's file, or the shard. */
static const char *data_path(const hs_api_env *e, const hs_api_tokens *data)
{
    return e->task ? hs_api_task_path(e->task) : hs_api_tokens_path(data);
}

/* The checks of a token study's batches (analyze/inputs.c's for --seq-len
 * and --batch): T within the context, at least one whole batch. */
static int check_batches(const hs_model *m, const hs_api_tokens *data, int B, int T)
{
    int rc = hs_seq_len_check(&m->cfg, T, "seq_len");
    if (!rc && B < 1)
        rc = hs_fail(HS_EINVAL, "batch %d must be at least 1", B);
    if (!rc && !data)
        rc = hs_fail(HS_EINVAL, "no data: token data or a task");
    if (!rc && !hs_batch_count(hs_api_tokens_of(data), B, T))
        rc = hs_fail_few_tokens(hs_api_tokens_path(data) ? hs_api_tokens_path(data) : "tokens",
                                hs_api_tokens_of(data), B, T);
    return rc;
}

/* The sequence length a study runs at: the task's padded length, or T (the model's default when
 * T is 0). */
static int study_seq_len(const hs_api_env *e, const hs_model *m, int T)
{
    return e->task ? hs_api_task_of(e->task)->T : hs_seq_len_or_default(&m->cfg, T);
}

/* A token study's input: the task (e's: a batch of at least 1), or the
 * data's batches (check_batches). */
static int check_input(const hs_api_env *e, const hs_model *m, const hs_api_tokens *data, int B,
                       int T)
{
    if (e->task && B < 1)
        return hs_fail(HS_EINVAL, "batch %d must be at least 1", B);
    return e->task ? HS_OK : check_batches(m, data, B, T);
}

int hs_api_ablate(char **json, const hs_model *m, const hs_api_tokens *data, const hs_api_env *e,
                  int B, int T, long long max_batches, const char *method, const char *layers,
                  const char *heads, int naive)
{
    *json = NULL;
    T = study_seq_len(e, m, T);
    hs_ablate_study_opts so = { .method = method, .layers = layers, .heads = heads,
                                .naive = naive };
    const hs_tokens *tok = data ? hs_api_tokens_of(data) : NULL;
    hs_study_env env = env_for(e, m, tok, NULL, NULL, B, T, (size_t)max_batches);
    int rc = check_input(e, m, data, B, T);
    if (!rc)
        rc = hs_ablate_study_check(&so, &env);
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, HS_KIND_ABLATE, m, data_path(e, data), T, NULL, NULL);
    if (rc)
        return rc;
    env = env_for(e, m, tok, NULL, run, B, T, (size_t)max_batches);
    hs_ablate_result r;
    rc = hs_ablate_study(&r, &so, &env);
    hs_jbuf b = { 0 };
    const scalar sc[] = { { "clean_loss", r.clean_loss } };
    if (!rc)
        begin_json(&b, hs_run_id(run), &r.table, NULL, 0, NULL, 0, sc, 1);
    rc = finish(json, &b, run, rc, NULL);
    hs_ablate_result_free(&r);
    return rc;
}

int hs_api_importance(char **json, const hs_model *m, const hs_api_tokens *data,
                      const hs_api_env *e, int B, int T, long long max_batches)
{
    *json = NULL;
    T = study_seq_len(e, m, T);
    int rc = check_input(e, m, data, B, T);
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, HS_KIND_IMPORTANCE, m, data_path(e, data), T, NULL, NULL);
    if (rc)
        return rc;
    const hs_study_env env = env_for(e, m, data ? hs_api_tokens_of(data) : NULL, NULL, run, B,
                                     T, (size_t)max_batches);
    hs_importance_result r;
    rc = hs_importance_study(&r, &(hs_importance_opts){ 0 }, &env);
    if (!rc)
        rc = hs_run_study_rows(run, &r.rows);
    hs_jbuf b = { 0 };
    const scalar sc[] = { { "sequences", (double)r.sequences } };
    if (!rc)
        begin_json(&b, hs_run_id(run), &r.table, NULL, 0, NULL, 0, sc, 1);
    rc = finish(json, &b, run, rc, NULL);
    hs_importance_result_free(&r);
    return rc;
}

int hs_api_prune(char **json, const hs_model *m, const hs_api_tokens *data, const hs_api_env *e,
                 int B, int T, long long max_batches, double step_percent, double max_percent,
                 int min_heads_per_layer, int one_shot, const char *method, double lambda,
                 int steps, double lr, long long seed)
{
    *json = NULL;
    T = study_seq_len(e, m, T);
    hs_prune_study_opts so = {
        .prune = { .step_percent = step_percent > 0 ? step_percent : 10,
                   .max_percent = max_percent > 0 ? max_percent : 50,
                   .min_heads_per_layer = min_heads_per_layer, .one_shot = one_shot },
        .method = method,
        .l0 = { .lambda = lambda, .steps = steps, .lr = lr, .seed = (unsigned long long)seed },
    };
    const hs_tokens *tok = data ? hs_api_tokens_of(data) : NULL;
    hs_study_env env = env_for(e, m, tok, NULL, NULL, B, T, (size_t)max_batches);
    int rc = check_input(e, m, data, B, T);
    if (!rc)
        rc = hs_prune_study_check(&so, &env);
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, HS_KIND_PRUNE, m, data_path(e, data), T, NULL, NULL);
    if (rc)
        return rc;
    env = env_for(e, m, tok, NULL, run, B, T, (size_t)max_batches);
    hs_prune_result r;
    rc = hs_prune_study(&r, &so, &env);
    if (!rc)
        rc = hs_run_study_rows(run, &r.rows);
    hs_study_curve curves[2];
    int nc = 0;
    if (r.curve.n)
        curves[nc++] = r.curve;
    if (r.metric_curve.n)
        curves[nc++] = r.metric_curve;
    hs_jbuf b = { 0 };
    const scalar sc[] = { { "n_pruned", r.n_pruned }, { "heads", r.heads } };
    if (!rc)
        begin_json(&b, hs_run_id(run), &r.table, NULL, 0, curves, nc, sc, 2);
    rc = finish(json, &b, run, rc, NULL);
    hs_prune_result_free(&r);
    return rc;
}

/* ---- prompt studies ---- */

/* The end of a causal study (patch, atp): the run closed with rc and, on
 * success, the JSON of its head and position rows with the scalars
 * logit_diff_clean, logit_diff_corrupt and prompts. */
static int causal_finish(char **json, hs_run *run, int rc, const hs_head_table *heads,
                         const hs_position_row *pos, int n_pos, double ld_clean,
                         double ld_corrupt, long n)
{
    hs_jbuf b = { 0 };
    const scalar sc[] = { { HS_METRIC(LOGIT_DIFF_CLEAN), ld_clean },
                          { HS_METRIC(LOGIT_DIFF_CORRUPT), ld_corrupt },
                          { "prompts", (double)n } };
    if (!rc)
        begin_json(&b, hs_run_id(run), heads, pos, n_pos, NULL, 0, sc, 3);
    return finish(json, &b, run, rc, NULL);
}

int hs_api_patch(char **json, const hs_model *m, hs_api_prompts *p, const hs_api_env *e,
                 const char *sites, int noising, int batch, int naive)
{
    *json = NULL;
    const hs_prompt_set *ps;
    const hs_tokenizer *tk;
    hs_patch_study_opts po = { .site = sites, .patch = { .noising = noising, .naive = naive } };
    int rc = hs_api_prompts_of(&ps, &tk, p, m);
    hs_study_env env = env_for(e, m, NULL, ps, NULL, batch, 0, 0);
    if (!rc)
        rc = hs_patch_study_check(&po, &env);
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, HS_KIND_PATCH, m, hs_api_prompts_path(p), 0, ps, tk);
    if (rc)
        return rc;
    env = env_for(e, m, NULL, ps, run, batch, 0, 0);
    hs_patch_study_result res;
    const hs_patch_result *r = &res.patch;
    rc = hs_patch_study(&res, &po, &env);
    if (!rc)
        rc = hs_run_study_rows(run, &res.rows);
    rc = causal_finish(json, run, rc, &r->heads, r->pos, r->n_pos, r->ld_clean, r->ld_corrupt,
                       r->n);
    hs_patch_study_result_free(&res);
    return rc;
}

int hs_api_atp(char **json, const hs_model *m, hs_api_prompts *p, const hs_api_env *e,
               const char *sites, int noising, int star, int verify, int batch)
{
    *json = NULL;
    const hs_prompt_set *ps;
    const hs_tokenizer *tk;
    hs_atp_study_opts ao = { .site = sites,
                             .atp = { .noising = noising, .star = star, .verify = verify } };
    int rc = hs_api_prompts_of(&ps, &tk, p, m);
    hs_study_env env = env_for(e, m, NULL, ps, NULL, batch, 0, 0);
    if (!rc)
        rc = hs_atp_study_check(&ao, &env);
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, HS_KIND_ATP, m, hs_api_prompts_path(p), 0, ps, tk);
    if (rc)
        return rc;
    env = env_for(e, m, NULL, ps, run, batch, 0, 0);
    hs_atp_study_result res;
    const hs_atp_result *r = &res.atp;
    rc = hs_atp_study(&res, &ao, &env);
    if (!rc)
        rc = hs_run_study_rows(run, &res.rows);
    rc = causal_finish(json, run, rc, &r->heads, r->pos, r->n_pos, r->ld_clean, r->ld_corrupt,
                       r->n);
    hs_atp_study_result_free(&res);
    return rc;
}

int hs_api_dla(char **json, const hs_model *m, hs_api_prompts *p, const hs_api_env *e, int batch)
{
    *json = NULL;
    const hs_prompt_set *ps;
    const hs_tokenizer *tk;
    int rc = hs_api_prompts_of(&ps, &tk, p, m);
    if (!rc)
        rc = hs_dla_check(&m->cfg);
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, HS_KIND_DLA, m, hs_api_prompts_path(p), 0, ps, tk);
    if (rc)
        return rc;
    const hs_study_env env = env_for(e, m, NULL, ps, run, batch ? batch : 8, 0, 0);
    hs_dla_result r;
    rc = hs_dla_study(&r, &(hs_dla_opts){ 0 }, &env);
    if (!rc)
        rc = hs_run_study_rows(run, &r.rows);
    hs_jbuf b = { 0 };
    const scalar sc[] = { { "logit_diff", r.logit_diff },
                          { "max_gap", r.max_gap },
                          { "max_gap_line", r.max_gap_line } };
    if (!rc) {
        begin_json(&b, hs_run_id(run), &r.table, NULL, 0, NULL, 0, sc, 3);
        const hs_dla *d = &r.parts;
        hs_jraw(&b, ",\"parts\":{\"terms\":[");
        for (int k = 0; k < d->n_terms; k++) {
            hs_jf(&b, "%s[%d,%d,", k ? "," : "", d->term[k].layer, d->term[k].head);
            hs_jstr(&b, d->term[k].metric);
            hs_jraw(&b, "]");
        }
        hs_jraw(&b, "],\"values\":[");
        for (int i = 0; i < d->n; i++) {
            hs_jraw(&b, i ? ",[" : "[");
            for (int k = 0; k < d->n_terms; k++) {
                if (k)
                    hs_jraw(&b, ",");
                hs_jnum(&b, d->value[(size_t)i * d->n_terms + k]);
            }
            hs_jraw(&b, "]");
        }
        hs_jraw(&b, "],\"logit_diff\":[");
        for (int i = 0; i < d->n; i++) {
            if (i)
                hs_jraw(&b, ",");
            hs_jnum(&b, d->logit_diff[i]);
        }
        hs_jraw(&b, "],\"line\":[");
        for (int i = 0; i < d->n; i++)
            hs_jf(&b, "%s%d", i ? "," : "", d->line[i]);
        hs_jraw(&b, "]}");
    }
    rc = finish(json, &b, run, rc, NULL);
    hs_dla_result_free(&r);
    return rc;
}

/* ---- induction ---- */

int hs_api_induction(char **json, const hs_model *m, const hs_api_env *e, int seq_len,
                     int samples, int batch, unsigned long long seed, int causal_k,
                     int random_draws, double min_score)
{
    *json = NULL;
    hs_induction_opts o = hs_induction_defaults();
    if (seq_len)
        o.seq_len = seq_len;
    if (samples)
        o.samples = samples;
    if (batch)
        o.batch = batch;
    if (causal_k)
        o.causal_k = causal_k;
    if (random_draws)
        o.random_draws = random_draws;
    if (min_score > 0)
        o.min_score = min_score;
    o.seed = seed;
    hs_study_env env = env_for(e, m, NULL, NULL, NULL, 0, 0, 0);
    int rc = hs_induction_check(&o, &env);
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, HS_KIND_INDUCTION, m, NULL, 0, NULL, NULL);
    if (rc)
        return rc;
    env = env_for(e, m, NULL, NULL, run, 0, 0, 0);
    hs_induction_result r;
    rc = hs_induction_study(&r, &o, &env);
    if (!rc)
        rc = hs_run_study_rows(run, &r.rows);
    hs_jbuf b = { 0 };
    const hs_causal_check *cc = &r.causal;
    const scalar sc[] = { { "established", r.established },
                          { "best_layer", r.best_layer },
                          { "best_head", r.best_head },
                          { "best", r.best },
                          { "best_control", r.best_control },
                          { "seq_len", o.seq_len },
                          { "samples", o.samples },
                          { "causal_k", cc->k },
                          { "causal_clean", cc->clean },
                          { "causal_targeted", cc->targeted },
                          { "causal_targeted_stderr", cc->targeted_stderr },
                          { "causal_random_mean", cc->random_mean },
                          { "causal_random_std", cc->random_std },
                          { "causal_beats", cc->beats } };
    if (!rc) {
        begin_json(&b, hs_run_id(run), &r.table, NULL, 0, &r.draws, 1, sc,
                   (int)(sizeof sc / sizeof sc[0]));
        hs_jraw(&b, ",\"causal_heads\":[");
        for (int i = 0; i < cc->k; i++)
            hs_jf(&b, "%s[%d,%d]", i ? "," : "", cc->layer[i], cc->head[i]);
        hs_jraw(&b, "]");
    }
    rc = finish(json, &b, run, rc, NULL);
    hs_induction_result_free(&r);
    return rc;
}

/* ---- capture ---- */

int hs_api_capture(char **json, const hs_model *m, const hs_api_tokens *data, const hs_api_env *e,
                   const char *out, int force, int half, int compress, int batch, int seq_len,
                   long long max_batches, const char *layers, const char *heads,
                   const char *queries, const char *tokenizer)
{
    *json = NULL;
    if (!out)
        return hs_fail(HS_EINVAL, "capture: no output file");
    if (!e->model_dir)
        return hs_fail(HS_EINVAL, "capture: the map file records the model's directory (its "
                                  "config.json and sha256): open the model from a directory, or "
                                  "save it first");
    const char *data_path = hs_api_tokens_path(data);
    char data_sha[65] = "";
    if (!data_path) { /* tokens in memory: the digest of their int32 bytes */
        hs_sha256 s;
        hs_sha256_init(&s);
        hs_sha256_update(&s, hs_api_tokens_ids(data), sizeof(int32_t) * hs_api_tokens_count(data));
        hs_sha256_hex(&s, data_sha);
        if (!data_sha[0])
            return hs_fail(HS_ENOMEM, "capture: sha256 of the tokens failed");
    }
    hs_tokenizer *tk = NULL;
    int rc = tokenizer ? hs_tokenizer_open(&tk, tokenizer) : HS_OK;
    hs_capture_opts co = { .out = out, .force = force, .half = half, .compress = compress,
                           .batch = batch ? batch : 4, .seq_len = seq_len,
                           .max_batches = (size_t)max_batches, .layers = layers, .heads = heads,
                           .queries = queries, .model_dir = e->model_dir,
                           .data_path = data_path ? data_path : "(memory)",
                           .data_sha = data_path ? NULL : data_sha, .tokenizer = tk };
    hs_capture_plan plan;
    size_t nb;
    if (!rc)
        rc = hs_capture_check(&plan, &co, &m->cfg);
    if (!rc)
        rc = hs_capture_batches(&nb, &co, hs_api_tokens_of(data));
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, HS_KIND_CAPTURE, m, data_path, co.seq_len, NULL, NULL);
    if (rc) {
        if (tk)
            hs_tokenizer_free(tk);
        return rc;
    }
    if (run) { /* hashed once by the run */
        co.model_sha = hs_run_model_sha(run);
        if (data_path)
            co.data_sha = hs_run_data_sha(run);
    }
    const hs_study_io io = io_of(e);
    hs_capture_result r;
    rc = hs_capture(&r, m, hs_api_tokens_of(data), co, &io);
    char *abs_out = rc ? NULL : realpath(out, NULL);
    if (!rc)
        rc = hs_run_artifact(run, abs_out ? abs_out : out, r.sha256, (long long)r.bytes);
    hs_jbuf b = { 0 };
    const scalar sc[] = { { "sequences", (double)r.sequences },
                          { "seconds", r.seconds },
                          { "bytes", (double)r.bytes } };
    if (!rc) {
        begin_json(&b, hs_run_id(run), NULL, NULL, 0, NULL, 0, sc, 3);
        hs_jraw(&b, ",\"texts\":{\"path\":");
        hs_jstr(&b, abs_out ? abs_out : out);
        hs_jraw(&b, ",\"sha256\":");
        hs_jstr(&b, r.sha256);
        hs_jraw(&b, "}");
    }
    free(abs_out);
    if (tk)
        hs_tokenizer_free(tk);
    return finish(json, &b, run, rc, NULL);
}

/* ---- features ---- */

/* The run's kind: the command's name (run.h has no HS_KIND_ for it). */
#define KIND_FEATURES "features"

/* As `headscope features` runs it (cli/cmd_sae.c): the check opens and
 * binds the SAE into fo.sae before any run is opened, the study reads it
 * from there and writes its feature tables into the run as it goes. */
int hs_api_features(char **json, const hs_model *m, const hs_api_tokens *data,
                    const hs_api_env *e, int B, int T, long long max_batches,
                    const char *sae_dir, int top, int dfa, const char *out, int force)
{
    *json = NULL;
    T = hs_seq_len_or_default(&m->cfg, T);
    hs_features_opts fo = { .sae_dir = sae_dir, .out = out, .force = force, .top = top,
                            .dfa = dfa };
    const hs_tokens *tok = data ? hs_api_tokens_of(data) : NULL;
    /* --out's record of the data it holds: the shard, or tokens in memory */
    const char *data_name = data && hs_api_tokens_path(data) ? hs_api_tokens_path(data)
                                                             : "(memory)";
    hs_study_env env = env_for(e, m, tok, NULL, NULL, B, T, (size_t)max_batches);
    env.data_name = data_name;
    int rc = check_input(e, m, data, B, T);
    if (!rc)
        rc = hs_features_check(&fo, &env);
    hs_run *run = NULL;
    if (!rc)
        rc = run_begin(&run, e, KIND_FEATURES, m, data_path(e, data), T, NULL, NULL);
    if (rc) {
        hs_sae_free(&fo.sae);
        return rc;
    }
    env = env_for(e, m, tok, NULL, run, B, T, (size_t)max_batches);
    env.data_name = data_name;
    hs_features_result r;
    rc = hs_features_study(&r, &fo, &env);
    if (!rc)
        rc = hs_run_study_rows(run, &r.rows);
    hs_jbuf b = { 0 };
    const scalar sc[] = { { "tokens", (double)r.tokens },
                          { "d_sae", r.d_sae },
                          { "alive", r.alive },
                          { HS_METRIC(SAE_L0), r.l0 },
                          { "examples", (double)r.n_examples },
                          { "dfa_rows", (double)r.n_dfa },
                          { "top_feature", r.top_feature },
                          { "top_frequency", r.top_frequency },
                          { "bytes", (double)r.bytes } };
    if (!rc) {
        begin_json(&b, hs_run_id(run), NULL, NULL, 0, NULL, 0, sc,
                   (int)(sizeof sc / sizeof sc[0]));
        hs_jraw(&b, ",\"texts\":{\"hook\":");
        hs_jstr(&b, fo.sae.hook);
        hs_jraw(&b, ",\"architecture\":");
        hs_jstr(&b, hs_sae_arch_name(fo.sae.arch));
        if (out) {
            hs_jraw(&b, ",\"path\":");
            hs_jstr(&b, out);
            hs_jraw(&b, ",\"sha256\":");
            hs_jstr(&b, r.sha256);
        }
        hs_jraw(&b, "}");
    }
    rc = finish(json, &b, run, rc, NULL);
    hs_features_result_free(&r);
    hs_sae_free(&fo.sae);
    return rc;
}

/* ---- train ---- */

typedef struct {
    hs_curve_point *p;
    int n, cap, failed;
    long tokens_per_step;
} curve_acc;

static void acc_add(curve_acc *c, hs_curve_point p)
{
    if (c->failed)
        return;
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 256;
        hs_curve_point *q = realloc(c->p, sizeof *q * (size_t)cap);
        if (!q) {
            c->failed = 1;
            return;
        }
        c->p = q, c->cap = cap;
    }
    c->p[c->n++] = p;
}

typedef struct {
    curve_acc train, val;
} train_acc;

static void on_step_study(void *ctx, long step, double loss, double tokens_per_s)
{
    train_acc *t = ctx;
    (void)tokens_per_s;
    acc_add(&t->train, (hs_curve_point){ step, (double)step * t->train.tokens_per_step, loss });
}

static void on_step_plain(void *ctx, long step, double loss, double lr)
{
    on_step_study(ctx, step, loss, lr);
}

static void on_val(void *ctx, long step, double loss, double stderr_loss)
{
    train_acc *t = ctx;
    (void)stderr_loss;
    acc_add(&t->val, (hs_curve_point){ step, (double)step * t->train.tokens_per_step, loss });
}

int hs_api_train(char **json, hs_model *m, const hs_api_tokens *data, const hs_api_env *e, int B,
                 int T, long steps, double lr, double weight_decay, double clip, long warmup,
                 const hs_api_tokens *val, long val_every, const char *out)
{
    *json = NULL;
    T = hs_seq_len_or_default(&m->cfg, T);
    int rc = hs_seq_len_check(&m->cfg, T, "seq_len");
    if (!rc && (B < 1 || steps < 1 || !(lr > 0)))
        rc = hs_fail(HS_EINVAL, "train: batch %d, steps %ld and lr %g must be positive", B, steps,
                     lr);
    if (!rc && hs_api_tokens_count(data) < (size_t)B * T + 1)
        rc = hs_fail(HS_EINVAL, "train: fewer than one batch of %d x %d (+1) tokens", B, T);
    if (!rc && e->db && !out)
        rc = hs_fail(HS_EINVAL, "train: a recorded run saves its model: give out");
    hs_run *run = NULL;
    if (!rc) { /* as `train` records it: the model it writes by its sha256, at the end */
        hs_api_env oe = *e;
        oe.model_dir = NULL;
        rc = run_begin(&run, &oe, HS_KIND_TRAIN, NULL, hs_api_tokens_path(data), 0, NULL, NULL);
    }
    if (rc)
        return rc;
    train_acc acc = { { .tokens_per_step = (long)B * T }, { 0 } };
    hs_train_opts to = { .B = B, .T = T, .steps = steps, .lr = lr, .weight_decay = weight_decay,
                         .clip = clip, .warmup = warmup, .val = val ? hs_api_tokens_of(val) : NULL,
                         .val_every = val_every, .stop = e->stop };
    double seconds = 0, final_loss = NAN;
    char model_sha[80] = "";
    if (out) {
        hs_train_study_opts so = { .train = to, .out = out, .ix = hs_run_index(run),
                                   .run_id = hs_run_id(run), .on_step = on_step_study,
                                   .on_val = on_val, .ctx = &acc };
        hs_train_result r;
        rc = hs_train_study(&r, m, hs_api_tokens_of(data), &so);
        seconds = r.seconds, final_loss = r.final_loss;
        snprintf(model_sha, sizeof model_sha, "%s", r.model_sha);
    } else {
        to.on_step = on_step_plain, to.on_val = on_val, to.ctx = &acc;
        const double t0 = hs_now();
        rc = hs_train(m, hs_api_tokens_of(data), &to);
        seconds = hs_now() - t0;
        final_loss = acc.train.n ? acc.train.p[acc.train.n - 1].y : NAN;
    }
    if (!rc && (acc.train.failed || acc.val.failed))
        rc = hs_fail(HS_ENOMEM, "train: out of memory keeping the curves");
    hs_jbuf b = { 0 };
    const scalar sc[] = { { "final_loss", final_loss }, { "seconds", seconds } };
    hs_study_curve curves[2] = { { .points = acc.train.p, .n = acc.train.n },
                                 { .points = acc.val.p, .n = acc.val.n } };
    snprintf(curves[0].name, sizeof curves[0].name, "%s", HS_METRIC(TRAIN_LOSS));
    snprintf(curves[1].name, sizeof curves[1].name, "%s", HS_METRIC(VAL_LOSS));
    if (!rc)
        begin_json(&b, hs_run_id(run), NULL, NULL, 0, curves, acc.val.n ? 2 : 1, sc, 2);
    rc = finish(json, &b, run, rc, model_sha[0] ? model_sha : NULL);
    free(acc.train.p);
    free(acc.val.p);
    return rc;
}
