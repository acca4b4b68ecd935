/* induction and patterns: the scores and statistics of SPEC §5 into the index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis.h"
#include "checkpoint.h"
#include "cli.h"
#include "index.h"
#include "maps.h"
#include "patterns.h"
#include "scores.h"
#include "sha256.h"

/* ---- induction ------------------------------------------------------------------ */

/* Scores of one model into rows (suffix "" or "_control"); returns the count. */
static int score_rows(hs_metric_row *rows, char names[][40], const hs_model_config *c,
                      const hs_scores *s, const double *copying, const char *suffix)
{
    int n = 0;
    for (int k = 0; k <= HS_SCORE_KINDS; k++) {
        char *name = names[k];
        snprintf(name, 40, "%s%s", k < HS_SCORE_KINDS ? hs_score_name(k) : "copying", suffix);
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++) {
                const size_t i = (size_t)l * HS_MAX_HEADS + h;
                rows[n++] = k < HS_SCORE_KINDS
                                ? (hs_metric_row){ l, h, name, s->value[k][i], s->stderr_value[k][i], s->n }
                                : (hs_metric_row){ l, h, name, copying[i], 0, 1 };
            }
    }
    return n;
}

int cmd_induction(int argc, char **argv)
{
    const char *model = NULL, *db = NULL, *data = NULL;
    int T = 0, samples = 64, B = 8, threads = 0, json = 0, k = 1, draws = 20, icl_T = 0;
    int early = 50, late = 500;
    long seed = 1;
    double min_score = 0.4;
    opt o[] = {
        { "--model", OPT_STR, &model, 0, "DIR", "checkpoint directory", 0 },
        { "--db", OPT_STR, &db, 0, "FILE", "SQLite index for the scores", 0 },
        { "--seq-len", OPT_INT, &T, 2, "T", "length of the random half r of r ++ r (default: min(n_ctx/2, 64))", 0 },
        { "--samples", OPT_INT, &samples, 2, "N", "random sequences", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the sequences and of the control model", 0 },
        { "--batch", OPT_INT, &B, 1, "B", "sequences per forward", 0 },
        { "--causal-k", OPT_INT, &k, 1, "K", "heads the causal check ablates", 0 },
        { "--data", OPT_STR, &data, 0, "FILE.bin", "evaluation shard for the ICL score (optional)", 0 },
        { "--icl-seq-len", OPT_INT, &icl_T, 2, "T", "sequence length of the ICL score (default: min(n_ctx, 1024))", 0 },
        { "--early", OPT_INT, &early, 0, "P", "ICL: the early position", 0 },
        { "--late", OPT_INT, &late, 1, "P", "ICL: the late position", 0 },
        { "--random-draws", OPT_INT, &draws, 2, "D", "random sets of K heads to compare with", 0 },
        { "--min-score", OPT_DOUBLE, &min_score, 0, "S", "induction score a head needs for the claim", 0 },
        { "--threads", OPT_INT, &threads, 0, "N", "threads (0: OpenMP's default)", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = opts_parse("induction", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!model || !db)
        return usage_error("induction", "--model DIR and --db FILE are required");
    if (threads)
        hs_set_threads(threads);
    hs_model m, ctrl = { 0 };
    if (hs_checkpoint_load(&m, model))
        return run_error("induction");
    const hs_model_config *c = &m.cfg;
    if (!T)
        T = c->pos == HS_POS_LEARNED ? (c->n_ctx / 2 < 64 ? c->n_ctx / 2 : 64) : 64;
    if (c->pos == HS_POS_LEARNED && 2 * T > c->n_ctx) {
        int n_ctx = c->n_ctx;
        hs_model_free(&m);
        return usage_error("induction", "--seq-len %d: 2 x %d exceeds the model's n_ctx=%d", T, T,
                           n_ctx);
    }
    int heads = 0;
    for (int l = 0; l < c->n_layer; l++)
        heads += c->n_head[l];
    if (2 * k > heads || k > 64) {
        hs_model_free(&m);
        return usage_error("induction", "--causal-k %d: at most %d for a model of %d heads (the "
                           "random draws need as many other heads)", k, heads / 2 < 64 ? heads / 2 : 64,
                           heads);
    }
    if (!icl_T)
        icl_T = c->n_ctx < 1024 ? c->n_ctx : 1024;
    hs_tokens evd = { 0 };
    if (data && hs_tokens_read(&evd, data)) {
        hs_model_free(&m);
        return run_error("induction");
    }
    if (data && (!hs_batch_count(&evd, 1, icl_T) || (c->pos == HS_POS_LEARNED && icl_T > c->n_ctx))) {
        hs_fail(HS_EINVAL, "%s: no sequence of %d (+1) tokens for the ICL score, or longer than "
                "n_ctx=%d", data, icl_T, c->n_ctx);
        hs_tokens_free(&evd);
        hs_model_free(&m);
        return run_error("induction");
    }
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", model);
    cli_run run;
    if (cli_run_begin(&run, db, 0, "induction", model, file, data, argc, argv)) {
        hs_tokens_free(&evd);
        hs_model_free(&m);
        return run_error("induction");
    }
    /* The control: the same configuration, randomly initialised. */
    int32_t *tok = hs_calloc((size_t)samples * 2 * T, sizeof(int32_t), "sequences");
    const size_t nh = (size_t)c->n_layer * HS_MAX_HEADS;
    double *cop = hs_calloc(nh, sizeof(double), "copying");
    double *cop_ctrl = hs_calloc(nh, sizeof(double), "copying");
    hs_scores s = { 0 }, sc = { 0 };
    rc = tok && cop && cop_ctrl ? HS_OK : HS_ENOMEM;
    if (!rc)
        rc = hs_model_init(&ctrl, c);
    if (!rc) {
        hs_model_init_random(&ctrl, (unsigned long long)seed + 1000003ULL);
        hs_repeated_sequences(tok, samples, T, c->vocab_size, (unsigned long long)seed);
        rc = hs_scores_alloc(&s, c);
    }
    if (!rc)
        rc = hs_scores_alloc(&sc, c);
    progress bar;
    progress_start(&bar, "induction: scores", 0);
    if (!rc)
        rc = hs_pattern_scores(&s, &m, tok, samples, T, B, progress_cb, &bar);
    progress_finish(&bar);
    progress_start(&bar, "induction: control", 0);
    if (!rc)
        rc = hs_pattern_scores(&sc, &ctrl, tok, samples, T, B, progress_cb, &bar);
    progress_finish(&bar);
    if (!rc)
        rc = hs_copying_scores(cop, &m);
    if (!rc)
        rc = hs_copying_scores(cop_ctrl, &ctrl);
    int total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    hs_metric_row *rows = rc ? NULL : hs_calloc((size_t)total * 2 * (HS_SCORE_KINDS + 1) + 5 + 64,
                                                sizeof *rows, "score rows");
    char names[2][HS_SCORE_KINDS + 1][40];
    if (!rc && !rows)
        rc = HS_ENOMEM;
    hs_causal_check cc;
    int established = 0;
    double *draw_delta = rc ? NULL : hs_calloc((size_t)draws, sizeof(double), "draws");
    hs_curve_point *draw_pts = rc ? NULL : hs_calloc((size_t)draws, sizeof *draw_pts, "draws");
    if (!rc && (!draw_delta || !draw_pts))
        rc = HS_ENOMEM;
    progress_start(&bar, "induction: causal check", 0);
    if (!rc)
        rc = hs_induction_causal_check(&cc, &m, tok, samples, T, B, &s, k, draws,
                                       (unsigned long long)seed + 17, draw_delta, progress_cb,
                                       &bar);
    progress_finish(&bar);
    if (!rc) {
        int n = score_rows(rows, names[0], c, &s, cop, "");
        n += score_rows(rows + n, names[1], c, &sc, cop_ctrl, "_control");
        /* The causal check, model-wide: the second-half loss, its increase
         * with the top-k induction heads off (stderr over sequences), and with
         * k random other heads off (stderr: the spread of the draws). */
        rows[n++] = (hs_metric_row){ -1, -1, "second_half_loss", cc.clean, 0, samples };
        rows[n++] = (hs_metric_row){ -1, -1, "causal_loss_delta_top_k", cc.targeted,
                                     cc.targeted_stderr, samples };
        rows[n++] = (hs_metric_row){ -1, -1, "causal_loss_delta_random_k", cc.random_mean,
                                     cc.random_std, draws };
        for (int i = 0; i < cc.k; i++)
            rows[n++] = (hs_metric_row){ cc.layer[i], cc.head[i], "causal_top_k", 1, 0, cc.k };
        established = hs_induction_established(&cc, &s, &sc, min_score);
        rows[n++] = (hs_metric_row){ -1, -1, "induction_established", established, 0, cc.k };
        if (data) { /* model-wide ICL score of the model and of its control */
            double v, se;
            long cnt;
            rc = hs_icl_score(&v, &se, &cnt, &m, &evd, 1, icl_T, 0, early, late);
            if (!rc)
                rows[n++] = (hs_metric_row){ -1, -1, "icl", v, se, cnt };
            if (!rc)
                rc = hs_icl_score(&v, &se, &cnt, &ctrl, &evd, 1, icl_T, 0, early, late);
            if (!rc)
                rows[n++] = (hs_metric_row){ -1, -1, "icl_control", v, se, cnt };
        }
        if (!rc)
            rc = hs_index_metrics_add(run.ix, run.run_id, rows, n);
        /* each random draw's increase, for `plot causal` */
        for (int d = 0; d < draws; d++)
            draw_pts[d] = (hs_curve_point){ d, d, draw_delta[d] };
        if (!rc)
            rc = hs_index_curve_add(run.ix, run.run_id, "causal_random_k", draw_pts, draws);
    }
    int best_l = 0, best_h = 0;
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            if (s.value[HS_SCORE_INDUCTION][(size_t)l * HS_MAX_HEADS + h] >
                s.value[HS_SCORE_INDUCTION][(size_t)best_l * HS_MAX_HEADS + best_h])
                best_l = l, best_h = h;
    double best = rc ? 0 : s.value[HS_SCORE_INDUCTION][(size_t)best_l * HS_MAX_HEADS + best_h];
    double best_ctrl = rc ? 0 : sc.value[HS_SCORE_INDUCTION][(size_t)best_l * HS_MAX_HEADS + best_h];
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hs_last_error());
    free(rows), free(tok), free(cop), free(cop_ctrl), free(draw_delta), free(draw_pts);
    if (s.value[0])
        hs_scores_free(&s);
    if (sc.value[0])
        hs_scores_free(&sc);
    if (ctrl.params)
        hs_model_free(&ctrl);
    hs_model_free(&m);
    hs_tokens_free(&evd);
    long long run_id = run.run_id;
    cli_run_end(&run, rc == HS_OK, NULL);
    if (rc) {
        fprintf(stderr, "headscope: induction: %s\n", msg);
        return EXIT_FAILURE_RUN;
    }
    if (json) {
        printf("{\"run_id\":%lld,\"samples\":%d,\"seq_len\":%d,\"top_induction\":{\"layer\":%d,"
               "\"head\":%d,\"value\":%.6g,\"control\":%.6g},\"causal\":{\"k\":%d,"
               "\"loss_delta_top_k\":%.6g,\"loss_delta_random_mean\":%.6g,"
               "\"loss_delta_random_std\":%.6g,\"induction_heads_established\":%s}}\n",
               run_id, samples, T, best_l, best_h, best, best_ctrl, cc.k, cc.targeted,
               cc.random_mean, cc.random_std, established ? "true" : "false");
    } else {
        printf("run %lld: scores of every head on %d sequences r ++ r (|r| = %d) in %s; highest "
               "induction: layer %d head %d, %.3f (random-init control %.3f)\n",
               run_id, samples, T, db, best_l, best_h, best, best_ctrl);
        printf("causal check: second-half loss %.4f; +%.4f with the top %d induction head(s) off, "
               "+%.4f +- %.4f with %d random other head(s) off (%d draws)\n",
               cc.clean, cc.targeted, cc.k, cc.random_mean, cc.random_std, cc.k, draws);
        if (established) {
            printf("induction heads by score and causal check:");
            for (int i = 0; i < cc.k; i++)
                printf(" L%dH%d", cc.layer[i], cc.head[i]);
            printf("\n");
        } else if (cc.beats) {
            printf("not established: the top heads' ablation hurts beyond the random draws' "
                   "spread, but their induction score is below --min-score %.2f or within two "
                   "standard errors of the random-init control's\n", min_score);
        } else {
            printf("not established: ablating the top heads does not hurt beyond the random "
                   "draws' spread\n");
        }
    }
    return 0;
}

/* ---- patterns ------------------------------------------------------------------- */

/* The head-to-head Jensen-Shannon matrix D (n x n) as a CSV with head labels
 * (LlHh), written whole then renamed, and recorded as the run's artifact. */
static int write_js(const char *path, const double *D, int n, const int *layer, const int *head,
                    cli_run *run)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (ok) {
        fprintf(f, "head");
        for (int j = 0; j < n; j++)
            fprintf(f, ",L%dH%d", layer[j], head[j]);
        fprintf(f, "\n");
        for (int i = 0; i < n; i++) {
            fprintf(f, "L%dH%d", layer[i], head[i]);
            for (int j = 0; j < n; j++)
                fprintf(f, ",%.6g", D[(size_t)i * n + j]);
            fprintf(f, "\n");
        }
        ok = fclose(f) == 0 && rename(tmp, path) == 0;
    }
    if (!ok) {
        unlink(tmp);
        return hs_fail(HS_EIO, "%s: cannot write", path);
    }
    char sha[80];
    uint64_t bytes = 0;
    int rc = hs_sha256_file(path, sha, &bytes);
    return rc ? rc : hs_index_artifact_add(run->ix, run->run_id, path, sha, (int64_t)bytes, 1);
}

int cmd_patterns(int argc, char **argv)
{
    analysis a = { .cmd = "patterns", .B = 4 };
    const char *maps = NULL, *delim_s = NULL, *js_out = NULL;
    int control = 0;
    long seed = 1;
    opt o[] = {
        { "--model", OPT_STR, &a.model, 0, "DIR", "checkpoint directory (row-wise during the forward)", 0 },
        { "--data", OPT_STR, &a.data, 0, "FILE.bin", "evaluation token shard", 0 },
        { "--maps", OPT_STR, &maps, 0, "FILE.h5", "compute from a capture file instead", 0 },
        { "--db", OPT_STR, &a.db, 0, "FILE", "SQLite index for the statistics", 0 },
        { "--delim", OPT_STR, &delim_s, 0, "ID,ID,...", "token ids counted by 'delim'", 0 },
        { "--js-out", OPT_STR, &js_out, 0, "FILE.csv", "also write the head-to-head Jensen-Shannon distance matrix", 0 },
        { "--control", OPT_FLAG, &control, 0, NULL, "with --model: also <stat>_control of a randomly initialised model", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the control model", 0 },
        { "--batch", OPT_INT, &a.B, 1, "B", "sequences per batch", 0 },
        { "--seq-len", OPT_INT, &a.T, 1, "T", "sequence length (default: min(n_ctx, 256))", 0 },
        { "--max-batches", OPT_LONG, &a.max_batches, 0, "N", "evaluate N batches (0: all)", 0 },
        { "--threads", OPT_INT, &a.threads, 0, "N", "threads (0: OpenMP's default)", 0 },
        { "--json", OPT_FLAG, &a.json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = opts_parse("patterns", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    int32_t delim[64];
    int n_delim = 0;
    for (const char *p = delim_s; p && *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || n_delim == 64 || (*end && *end != ','))
            return usage_error("patterns", "--delim '%s': token ids separated by commas", delim_s);
        delim[n_delim++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (control && maps)
        return usage_error("patterns", "--control needs --model (a capture file holds no weights "
                                       "to re-initialise)");
    hs_patterns pt = { 0 }, pc = { 0 };
    if (maps) {
        if (!a.db)
            return usage_error("patterns", "--db FILE is required");
        hs_maps_reader *r;
        if (hs_maps_open(&r, maps))
            return run_error("patterns");
        rc = cli_run_begin(&a.run, a.db, 0, "patterns", a.model, NULL, maps, argc, argv);
        if (!rc)
            rc = hs_patterns_from_maps(&pt, r, delim, n_delim);
        double *D = NULL;
        int nh = 0;
        if (!rc && js_out)
            rc = hs_js_distances(&D, &nh, r);
        if (!rc && js_out) {
            const hs_maps_info *in = hs_maps_get_info(r);
            int *lay = hs_calloc((size_t)nh, sizeof(int), "labels"), k = 0;
            int *hd = hs_calloc((size_t)nh, sizeof(int), "labels");
            for (int li = 0; lay && hd && li < in->n_layers; li++)
                for (int hi = 0; hi < in->layers[li].nh; hi++, k++)
                    lay[k] = in->layers[li].layer, hd[k] = in->layers[li].heads[hi];
            rc = lay && hd ? write_js(js_out, D, nh, lay, hd, &a.run) : HS_ENOMEM;
            free(lay), free(hd);
        }
        free(D);
        hs_maps_close(r);
        if (rc && !a.run.ix)
            return run_error("patterns");
    } else {
        if ((rc = analysis_load(&a)) || (rc = analysis_start(&a, "patterns", argc, argv)))
            return rc;
        progress bar;
        progress_start(&bar, "patterns", 0);
        rc = hs_patterns_run(&pt, &a.m, &a.tok, a.B, a.T, (size_t)a.max_batches, delim, n_delim,
                             progress_cb, &bar);
        progress_finish(&bar);
        /* the control: the same configuration, randomly initialised (the
         * seed offset of `induction`'s control) */
        hs_model ctrl = { 0 };
        if (!rc && control)
            rc = hs_model_init(&ctrl, &a.m.cfg);
        if (!rc && control) {
            hs_model_init_random(&ctrl, (unsigned long long)seed + 1000003ULL);
            progress_start(&bar, "patterns: control", 0);
            rc = hs_patterns_run(&pc, &ctrl, &a.tok, a.B, a.T, (size_t)a.max_batches, delim,
                                 n_delim, progress_cb, &bar);
            progress_finish(&bar);
        }
        if (ctrl.params)
            hs_model_free(&ctrl);
        double *D = NULL;
        int nh = 0;
        /* the sequences the statistics read (whole batches of B), one at a time */
        size_t nb = 0;
        if (!rc && js_out && !hs_batches_to_run(&a.tok, a.B, a.T, (size_t)a.max_batches, &nb))
            rc = hs_js_distances_model(&D, &nh, &a.m, &a.tok, a.T, nb * (size_t)a.B,
                                       (size_t)4 << 30);
        if (!rc && js_out) {
            int *lay = hs_calloc((size_t)nh, sizeof(int), "labels"), k = 0;
            int *hd = hs_calloc((size_t)nh, sizeof(int), "labels");
            for (int l = 0; lay && hd && l < a.m.cfg.n_layer; l++)
                for (int h = 0; h < a.m.cfg.n_head[l]; h++, k++)
                    lay[k] = l, hd[k] = h;
            rc = lay && hd ? write_js(js_out, D, nh, lay, hd, &a.run) : HS_ENOMEM;
            free(lay), free(hd);
        }
        free(D);
    }
    hs_metric_row *rows = NULL;
    int n = 0;
    char names[HS_PAT_KINDS][40];
    if (!rc) {
        int total = 0;
        for (int li = 0; li < pt.n_layer; li++)
            total += pt.n_head[li];
        rows = hs_calloc((size_t)total * HS_PAT_KINDS * 2, sizeof *rows, "pattern rows");
        rc = rows ? HS_OK : HS_ENOMEM;
        for (int k = 0; k < HS_PAT_KINDS; k++)
            snprintf(names[k], sizeof names[k], "%s_control", hs_pattern_name(k));
        for (int c = 0; rows && c < 1 + control; c++) {
            const hs_patterns *p = c ? &pc : &pt;
            for (int k = 0; k < HS_PAT_KINDS; k++)
                for (int li = 0; li < p->n_layer; li++)
                    for (int hi = 0; hi < p->n_head[li]; hi++) {
                        const size_t i = (size_t)li * HS_MAX_HEADS + hi;
                        rows[n++] = (hs_metric_row){ p->layer[li], p->head[i],
                                                     c ? names[k] : hs_pattern_name(k),
                                                     p->value[k][i], p->stderr_value[k][i], p->n };
                    }
        }
    }
    if (!rc)
        rc = hs_index_metrics_add(a.run.ix, a.run.run_id, rows, n);
    free(rows);
    long seqs = pt.n;
    if (pt.value[0])
        hs_patterns_free(&pt);
    if (pc.value[0])
        hs_patterns_free(&pc);
    long long run_id = a.run.run_id;
    int status = analysis_close(&a, rc);
    if (status)
        return status;
    if (a.json)
        printf("{\"run_id\":%lld,\"sequences\":%ld,\"rows\":%d}\n", run_id, seqs, n);
    else
        printf("run %lld: pattern statistics of %d head-rows over %ld sequences in %s%s\n", run_id,
               n / HS_PAT_KINDS / (1 + control), seqs, a.db,
               control ? " (and of a random-init control)" : "");
    return 0;
}
