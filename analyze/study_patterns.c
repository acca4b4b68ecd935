/* The patterns study (study.h): Clark et al. statistics, control, JS matrix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"
#include "config_file.h"
#include "patterns.h"
#include "study.h"
#include "study_patterns.h"
#include "metrics.h"
#include "task.h"

void hs_patterns_result_free(hs_patterns_result *r)
{
    hs_head_table_free(&r->table);
    free(r->sink_alpha);
    free(r->js), free(r->js_layer), free(r->js_head);
    memset(r, 0, sizeof *r);
}

static int js_labels(hs_patterns_result *r, int n)
{
    r->js_n = n;
    r->js_layer = hs_calloc((size_t)n, sizeof(int), "labels");
    r->js_head = hs_calloc((size_t)n, sizeof(int), "labels");
    return r->js_layer && r->js_head ? HS_OK : HS_ENOMEM;
}

/* What an encoder's statistics left out, for the command to say. */
static void note_missing(hs_patterns_result *r, const hs_patterns *p, int tokenizer)
{
    static const char *const what[3] = { "cls ([CLS])", "sep ([SEP])", "punct (\".\", \",\")" };
    char missing[128] = "";
    for (int k = 0; k < 3; k++)
        if (p->value[0] && !p->recorded[HS_PAT_CLS + k])
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
                     *missing ? ", " : "", what[k]);
    if (*missing)
        snprintf(r->note, sizeof r->note, "%s not recorded: %s", missing,
                 tokenizer ? "the tokenizer has no such token"
                           : "no tokenizer is known and config.json gives no id (pass "
                             "--tokenizer)");
}

/* SPEC §18's sink rows of p (suffix "" or "_control"): per head sink =
 * alpha_0, the mean over each sequence's real queries of the attention on
 * position 0, then over sequences (first_token's number), and model-wide
 * sink_rate = the share of heads whose alpha_0 exceeds eps (n: heads). */
static int sink_rows(hs_head_table *t, const hs_patterns *p, const char *suffix, double eps)
{
    char name[64];
    int rc = HS_OK, over = 0, heads = 0;
    snprintf(name, sizeof name, "%s%s", HS_METRIC(SINK), suffix);
    for (int li = 0; !rc && li < p->n_layer; li++)
        for (int hi = 0; !rc && hi < p->n_head[li]; hi++, heads++) {
            const size_t i = (size_t)li * HS_MAX_HEADS + hi;
            const double a0 = p->value[HS_PAT_FIRST][i];
            over += a0 > (eps > 0 ? eps : 0.3);
            rc = hs_head_table_add(t, p->layer[li], p->head[i], name, a0,
                                   p->stderr_value[HS_PAT_FIRST][i], p->n);
            if (!rc && p->attn != HS_ATTN_SELF)
                t->rows[t->n - 1].attn = hs_attn_type_name(p->attn);
        }
    snprintf(name, sizeof name, "%s%s", HS_METRIC(SINK_RATE), suffix);
    if (!rc)
        rc = hs_head_table_add(t, -1, -1, name, heads ? (double)over / heads : 0, 0, heads);
    if (!rc && p->attn != HS_ATTN_SELF)
        t->rows[t->n - 1].attn = hs_attn_type_name(p->attn);
    return rc;
}

/* SPEC §18's sink_alpha rows of p (alpha_k per head, k < p->n_sink; none
 * where no sequence has a query t >= k). */
static int sink_alpha_rows(hs_patterns_result *r, const hs_patterns *p)
{
    if (!p->n_sink)
        return HS_OK;
    r->sink_alpha = hs_calloc((size_t)r->heads * p->n_sink, sizeof *r->sink_alpha, "sink rows");
    if (!r->sink_alpha)
        return HS_ENOMEM;
    for (int li = 0; li < p->n_layer; li++)
        for (int hi = 0; hi < p->n_head[li]; hi++)
            for (int k = 0; k < p->n_sink; k++) {
                const size_t i = ((size_t)li * HS_MAX_HEADS + hi) * p->n_sink + k;
                if (p->sink_n[i])
                    r->sink_alpha[r->n_sink_alpha++] = (hs_position_row){
                        p->layer[li], k, HS_METRIC(SINK_ALPHA), p->sink_value[i],
                        p->sink_stderr[i], p->sink_n[i], p->head[(size_t)li * HS_MAX_HEADS + hi]
                    };
            }
    return HS_OK;
}

/* The statistics of env's model (and its control) on its data. */
static int model_study(hs_patterns_result *r, const hs_patterns_opts *o, const hs_study_env *env)
{
    const hs_model *m = env->m;
    hs_tokens task = { 0 }; /* --task: its examples, right-padded, as the data */
    unsigned char *valid = NULL; /* their padded queries are no queries */
    if (env->task && hs_task_tokens(&task, &valid, env->task))
        return HS_ENOMEM;
    task.valid = valid;
    const hs_tokens *data = env->task ? &task : env->data;
    const hs_study_io *io = &env->io;
    const int B = env->batch, T = env->task ? env->task->T : env->seq_len;
    const hs_progress_fn pf = io->progress;
    void *pc = io->ctx;
    hs_patterns pt = { 0 }, pctl = { 0 };
    hs_special_ids ids;
    hs_special_ids_of(&ids, &m->cfg, env->tk);
    hs_study_phase(io, "patterns");
    int rc = hs_patterns_run_dist(&pt, m, data, B, T, env->max_batches, o->delim_ids,
                                  o->n_delim, &ids, o->sink_positions, pf, pc);
    if (!rc && m->cfg.encoder)
        note_missing(r, &pt, env->tk != NULL);
    hs_model ctrl = { 0 };
    if (!rc && o->control) {
        hs_study_phase(io, "patterns: control");
        rc = hs_control_model(&ctrl, &m->cfg, (unsigned long long)o->seed);
        if (!rc)
            rc = hs_patterns_run_dist(&pctl, &ctrl, data, B, T, env->max_batches,
                                      o->delim_ids, o->n_delim, &ids, 0, pf, pc);
    }
    hs_study_phase(io, NULL);
    if (ctrl.params)
        hs_model_free(&ctrl);
    /* the sequences the statistics read (whole batches of B), one at a time */
    size_t nb = 0;
    int n = 0;
    if (!rc && o->js_out && !hs_batches_to_run(data, B, T, env->max_batches, &nb))
        rc = hs_js_distances_model(&r->js, &n, m, data, T, nb * (size_t)B, (size_t)4 << 30);
    if (!rc && o->js_out && !(rc = js_labels(r, n)))
        for (int l = 0, k = 0; l < m->cfg.n_layer; l++)
            for (int h = 0; h < m->cfg.n_head[l]; h++, k++)
                r->js_layer[k] = l, r->js_head[k] = h;
    if (!rc)
        rc = hs_patterns_to_table(&r->table, &pt, "");
    if (!rc)
        rc = sink_rows(&r->table, &pt, "", o->sink_epsilon);
    if (!rc && o->control)
        rc = hs_patterns_to_table(&r->table, &pctl, "_control");
    if (!rc && o->control)
        rc = sink_rows(&r->table, &pctl, "_control", o->sink_epsilon);
    for (int li = 0; li < pt.n_layer; li++)
        r->heads += pt.n_head[li];
    r->sequences = pt.n;
    if (!rc)
        rc = sink_alpha_rows(r, &pt);
    if (pt.value[0])
        hs_patterns_free(&pt);
    if (pctl.value[0])
        hs_patterns_free(&pctl);
    hs_tokens_free(&task);
    return rc;
}

/* The rows of an encoder-decoder's statistics (hs_pairs_patterns' three
 * types) with suffix "" or "_control", into t; frees pt. */
static int pairs_rows(hs_head_table *t, hs_patterns pt[3], const char *suffix, double eps)
{
    int rc = HS_OK;
    for (int ty = 0; ty < 3; ty++) {
        if (!rc)
            rc = hs_patterns_to_table(t, &pt[ty], suffix);
        if (!rc)
            rc = sink_rows(t, &pt[ty], suffix, eps);
        hs_patterns_free(&pt[ty]);
    }
    return rc;
}

/* patterns --pairs (SPEC §17): every head of every attention type of an
 * encoder-decoder on its pairs, and of its control. */
static int pairs_study(hs_patterns_result *r, const hs_patterns_opts *o, const hs_study_env *env)
{
    const hs_model *m = env->m;
    const hs_study_io *io = &env->io;
    hs_patterns pt[3], pctl[3];
    hs_study_phase(io, "patterns");
    int rc = hs_pairs_patterns(pt, m, env->pairs, env->batch, env->max_batches, o->delim_ids,
                               o->n_delim, io->progress, io->ctx);
    for (int ty = 0; !rc && ty < 3; ty++)
        for (int li = 0; li < pt[ty].n_layer; li++)
            r->heads += pt[ty].n_head[li];
    r->sequences = rc ? 0 : pt[0].n;
    if (!rc)
        rc = pairs_rows(&r->table, pt, "", o->sink_epsilon);
    hs_model ctrl = { 0 };
    if (!rc && o->control) {
        hs_study_phase(io, "patterns: control");
        rc = hs_control_model(&ctrl, &m->cfg, (unsigned long long)o->seed);
        if (!rc && !(rc = hs_pairs_patterns(pctl, &ctrl, env->pairs, env->batch,
                                            env->max_batches, o->delim_ids, o->n_delim,
                                            io->progress, io->ctx)))
            rc = pairs_rows(&r->table, pctl, "_control", o->sink_epsilon);
    }
    hs_study_phase(io, NULL);
    if (ctrl.params)
        hs_model_free(&ctrl);
    return rc;
}

/* 1 when the map file's model is an encoder. */
static int maps_of_encoder(hs_maps_reader *maps)
{
    hs_model_config c;
    const char *json = hs_maps_get_info(maps)->model_config;
    return json && !hs_config_parse(&c, json, "map file") && c.encoder;
}

/* The statistics of the capture file o->maps. */
static int maps_study(hs_patterns_result *r, const hs_patterns_opts *o)
{
    hs_maps_reader *maps;
    int rc = hs_maps_open(&maps, o->maps);
    if (rc)
        return rc;
    if (hs_maps_get_info(maps)->seq2seq) { /* capture --pairs's */
        hs_patterns pt[3];
        rc = hs_pairs_patterns_from_maps(pt, maps, o->delim_ids, o->n_delim);
        for (int ty = 0; !rc && ty < 3; ty++)
            for (int li = 0; li < pt[ty].n_layer; li++)
                r->heads += pt[ty].n_head[li];
        r->sequences = rc ? 0 : pt[0].n;
        rc = rc ? rc : pairs_rows(&r->table, pt, "", o->sink_epsilon);
        hs_maps_close(maps);
        return rc;
    }
    hs_patterns pt = { 0 };
    rc = hs_patterns_from_maps(&pt, maps, o->delim_ids, o->n_delim, o->sink_positions);
    if (!rc && (pt.recorded[HS_PAT_CLS] || pt.recorded[HS_PAT_SEP] || pt.recorded[HS_PAT_PUNCT] ||
                maps_of_encoder(maps)))
        note_missing(r, &pt, 0);
    int n = 0;
    if (!rc && o->js_out)
        rc = hs_js_distances(&r->js, &n, maps);
    if (!rc && o->js_out && !(rc = js_labels(r, n))) {
        const hs_maps_info *in = hs_maps_get_info(maps);
        for (int li = 0, k = 0; li < in->n_layers; li++)
            for (int hi = 0; hi < in->layers[li].nh; hi++, k++)
                r->js_layer[k] = in->layers[li].layer, r->js_head[k] = in->layers[li].heads[hi];
    }
    if (!rc)
        rc = hs_patterns_to_table(&r->table, &pt, "");
    if (!rc)
        rc = sink_rows(&r->table, &pt, "", o->sink_epsilon);
    for (int li = 0; li < pt.n_layer; li++)
        r->heads += pt.n_head[li];
    r->sequences = pt.n;
    if (!rc)
        rc = sink_alpha_rows(r, &pt);
    if (pt.value[0])
        hs_patterns_free(&pt);
    hs_maps_close(maps);
    return rc;
}

int hs_patterns_check(hs_patterns_opts *o, const hs_study_env *env)
{
    if (o->sink_epsilon && !(o->sink_epsilon > 0 && o->sink_epsilon < 1))
        return hs_fail(HS_EINVAL, "--sink-epsilon %g: a share of attention in (0, 1)",
                       o->sink_epsilon);
    if (o->sink_positions < 0 || o->sink_positions > HS_MAX_SINK_POSITIONS)
        return hs_fail(HS_EINVAL, "--sink-positions %d: the first K positions, 1 .. %d",
                       o->sink_positions, HS_MAX_SINK_POSITIONS);
    const int T = env->task ? env->task->T : env->seq_len;
    if (!o->maps && T > 0 && o->sink_positions > T)
        return hs_fail(HS_EINVAL, "--sink-positions %d: more positions than --seq-len %d",
                       o->sink_positions, T);
    o->n_delim = hs_parse_ints(o->delim, o->delim_ids, 64, 0, INT32_MAX, 0);
    if (o->n_delim < 0)
        return hs_fail(HS_EINVAL, "--delim '%s': token ids separated by commas", o->delim);
    if (o->maps && o->control)
        return hs_fail(HS_EINVAL, "--control needs --model (a capture file holds no weights to "
                       "re-initialise)");
    hs_maps_reader *maps = NULL;
    int rc = o->maps ? hs_maps_open(&maps, o->maps) : HS_OK;
    const int s2s = env->pairs || (maps && hs_maps_get_info(maps)->seq2seq);
    hs_maps_close(maps);
    if (!rc && s2s && (o->js_out || o->sink_positions))
        return hs_fail(HS_EINVAL, "%s: not implemented for an encoder-decoder's three "
                       "attention types (sink and sink_rate are recorded per type)",
                       o->js_out ? "--js-out" : "--sink-positions");
    return rc == HS_EINVAL ? HS_EIO : rc; /* the file, not an option's value */
}

int hs_patterns_study(hs_patterns_result *r, const hs_patterns_opts *o, const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    int rc = o->maps ? maps_study(r, o) : env->pairs ? pairs_study(r, o, env)
                                                     : model_study(r, o, env);
    if (!rc) /* also for maps: a capture of a model with non-finite weights */
        rc = hs_study_check_finite(&env->io, &r->table, NULL, 0);
    if (!rc)
        rc = hs_study_check_finite_positions(&env->io, r->sink_alpha, r->n_sink_alpha);
    if (!rc && o->js_out && !(rc = hs_patterns_write_js(o->js_out, r)))
        rc = hs_study_record_artifact(env->ix, env->run_id, o->js_out);
    r->rows = (hs_study_rows){ .heads = &r->table, .pos = r->sink_alpha,
                               .n_pos = r->n_sink_alpha };
    return rc;
}

HS_STUDY_KIND(patterns, hs_patterns_check);

int hs_patterns_write_js(const char *path, const hs_patterns_result *r)
{
    if (hs_dist_rank() > 0) /* under mpirun rank 0 alone writes (dist.h) */
        return HS_OK;
    char tmp[1100];
    FILE *f = hs_tmp_fopen(path, tmp, sizeof tmp);
    if (!f)
        return HS_EIO;
    const int n = r->js_n;
    fprintf(f, "head");
    for (int j = 0; j < n; j++)
        fprintf(f, ",L%dH%d", r->js_layer[j], r->js_head[j]);
    fprintf(f, "\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "L%dH%d", r->js_layer[i], r->js_head[i]);
        for (int j = 0; j < n; j++)
            fprintf(f, ",%.6g", r->js[(size_t)i * n + j]);
        fprintf(f, "\n");
    }
    const int failed = ferror(f);
    if (fclose(f) || failed) {
        unlink(tmp);
        return hs_fail(HS_EIO, "%s: cannot write", path);
    }
    return hs_tmp_commit(tmp, path, 1);
}
