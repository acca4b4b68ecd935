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
#include "study.h"

/* ---- induction ------------------------------------------------------------------ */

static void print_induction(const hs_induction_result *r, const hs_induction_opts *o,
                            long long run_id, const char *db, int json)
{
    const hs_causal_check *cc = &r->causal;
    if (json) {
        printf("{\"run_id\":%lld,\"samples\":%d,\"seq_len\":%d,\"top_induction\":{\"layer\":%d,"
               "\"head\":%d,\"value\":%.6g,\"control\":%.6g},\"causal\":{\"k\":%d,"
               "\"loss_delta_top_k\":%.6g,\"loss_delta_random_mean\":%.6g,"
               "\"loss_delta_random_std\":%.6g,\"induction_heads_established\":%s}}\n",
               run_id, o->samples, o->seq_len, r->best_layer, r->best_head, r->best,
               r->best_control, cc->k, cc->targeted, cc->random_mean, cc->random_std,
               r->established ? "true" : "false");
        return;
    }
    printf("run %lld: scores of every head on %d sequences r ++ r (|r| = %d) in %s; highest "
           "induction: layer %d head %d, %.3f (random-init control %.3f)\n",
           run_id, o->samples, o->seq_len, db, r->best_layer, r->best_head, r->best,
           r->best_control);
    printf("causal check: second-half loss %.4f; +%.4f with the top %d induction head(s) off, "
           "+%.4f +- %.4f with %d random other head(s) off (%d draws)\n",
           cc->clean, cc->targeted, cc->k, cc->random_mean, cc->random_std, cc->k,
           o->random_draws);
    if (r->established) {
        printf("induction heads by score and causal check:");
        for (int i = 0; i < cc->k; i++)
            printf(" L%dH%d", cc->layer[i], cc->head[i]);
        printf("\n");
    } else if (cc->beats) {
        printf("not established: the top heads' ablation hurts beyond the random draws' "
               "spread, but their induction score is below --min-score %.2f or within two "
               "standard errors of the random-init control's\n", o->min_score);
    } else {
        printf("not established: ablating the top heads does not hurt beyond the random "
               "draws' spread\n");
    }
}

int cmd_induction(int argc, char **argv)
{
    const char *model = NULL, *db = NULL, *data = NULL;
    int threads = 0, json = 0;
    long seed = 1;
    hs_induction_opts io = hs_induction_defaults();
    opt o[] = {
        OPT_MODEL(&model),
        OPT_DB_AS(&db, "SQLite index for the scores"),
        { "--seq-len", OPT_INT, &io.seq_len, 2, "T", "length of the random half r of r ++ r (default: min(n_ctx/2, 64))", 0 },
        { "--samples", OPT_INT, &io.samples, 2, "N", "random sequences", 0 },
        { "--seed", OPT_LONG, &seed, 0, "S", "seed of the sequences and of the control model", 0 },
        OPT_BATCH_AS(&io.batch, "sequences per forward"),
        { "--causal-k", OPT_INT, &io.causal_k, 1, "K", "heads the causal check ablates", 0 },
        OPT_DATA_AS(&data, "evaluation shard for the ICL score (optional)"),
        { "--icl-seq-len", OPT_INT, &io.icl_seq_len, 2, "T", "sequence length of the ICL score (default: min(n_ctx, 1024))", 0 },
        { "--early", OPT_INT, &io.early, 0, "P", "ICL: the early position", 0 },
        { "--late", OPT_INT, &io.late, 1, "P", "ICL: the late position", 0 },
        { "--random-draws", OPT_INT, &io.random_draws, 2, "D", "random sets of K heads to compare with", 0 },
        { "--min-score", OPT_DOUBLE, &io.min_score, 0, "S", "induction score a head needs for the claim", 0 },
        OPT_THREADS(&threads),
        OPT_JSON(&json),
    };
    int rc = opts_parse("induction", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!model || !db)
        return usage_error("induction", "--model DIR and --db FILE are required");
    if (threads)
        hs_set_threads(threads);
    io.seed = (unsigned long long)seed;
    hs_model m;
    hs_tokens evd = { 0 };
    if (hs_checkpoint_load(&m, model))
        return run_error("induction");
    if (hs_induction_check(&io, &m.cfg)) {
        hs_model_free(&m);
        return usage_error("induction", "%s", hs_last_error());
    }
    io.icl_data = data ? &evd : NULL, io.icl_data_name = data;
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", model);
    cli_run run = { 0 };
    if ((data && hs_tokens_read(&evd, data)) || hs_induction_check_icl(&io, &m.cfg) ||
        cli_run_begin(&run, db, 0, "induction", model, file, data, argc, argv)) {
        hs_tokens_free(&evd);
        hs_model_free(&m);
        return run_error("induction");
    }
    hs_induction_result r;
    phase_bars bars;
    hs_study_io sio = cli_study_io(&bars, 0);
    rc = hs_induction_study(&r, &m, io, &sio);
    if (!rc)
        rc = hs_study_record(run.ix, run.run_id, &r.table, &r.draws, 1);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hs_last_error());
    hs_model_free(&m);
    hs_tokens_free(&evd);
    cli_run_end(&run, rc == HS_OK, NULL);
    if (rc) {
        hs_induction_result_free(&r);
        fprintf(stderr, "headscope: induction: %s\n", msg);
        return EXIT_FAILURE_RUN;
    }
    print_induction(&r, &io, run.run_id, db, json);
    hs_induction_result_free(&r);
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
                        const size_t i = (size_t)li * HS_PAT_MAX_HEADS + hi;
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

const command cmd_induction_record = {
    .name = "induction",
    .summary = "Induction, duplicate-token, previous-token and OV copying scores, with controls.",
    .usage = "headscope induction --model DIR --db FILE [options]",
    .details = "On sequences r ++ r of uniformly random tokens (positions 0..2T-1): induction =\n"
        "mean over i of att[T+i, i+1]; duplicate_token = mean att[T+i, i]; prev_token =\n"
        "mean att[t, t-1]; copying = sum Re(lambda) / sum |lambda| of the head's OV circuit\n"
        "W_E W_V W_O W_U. Each also on a randomly initialised model of the same\n"
        "configuration (metric suffix _control), with standard errors over the samples.\n\n"
        "example: headscope induction --model runs/tiny --db runs.db --seq-len 32 --samples 64\n",
    .run = cmd_induction,
};

const command cmd_patterns_record = {
    .name = "patterns",
    .summary = "Clark et al. attention statistics per head, row by row during the forward.",
    .usage = "headscope patterns (--model DIR --data FILE | --maps FILE.h5) --db FILE [options]",
    .details = "entropy (nats), self, prev_token, next_token, first_token, delim (--delim ids) and\n"
        "distance, each the mean over every query of every sequence, with the standard\n"
        "error over sequences. The forward path sees one block of query rows at a time,\n"
        "so long contexts need no T x T buffer; --maps gives the same numbers from a\n"
        "capture file. --js-out also writes the head-to-head Jensen-Shannon distance\n"
        "matrix (mean over queries of sqrt(JSD)); from the forward it keeps one\n"
        "sequence's maps of every head, so use --maps for very long contexts.\n\n"
        "example: headscope patterns --model runs/tiny --data val.bin --db runs.db --delim 10,46\n",
    .run = cmd_patterns,
};
