/* ablate, importance, prune: the analyses of SPEC §5 into the index. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ablate.h"
#include "checkpoint.h"
#include "cli.h"
#include "importance.h"
#include "index.h"
#include "scores.h"
#include "patterns.h"
#include "maps.h"
#include "eval.h"
#include "train.h"
#include <math.h>
#include "sha256.h"
#include "tokens.h"

/* Shared setup: model, data, sequence length, the index run. */
typedef struct {
    const char *cmd, *model, *data, *db;
    int B, T, threads, json;
    long max_batches;
    long long resume;
    hs_model m;
    hs_tokens tok;
    cli_run run;
} analysis;

/* Loads model and data; prints the error and returns the exit status on
 * failure (with everything freed). */
static int analysis_load(analysis *a)
{
    if (!a->model || !a->data || !a->db)
        return usage_error(a->cmd, "--model DIR, --data FILE and --db FILE are required");
    if (a->threads)
        hs_set_threads(a->threads);
    if (hs_checkpoint_load(&a->m, a->model))
        return run_error(a->cmd);
    if (!a->T)
        a->T = a->m.cfg.n_ctx < 256 ? a->m.cfg.n_ctx : 256;
    if (a->m.cfg.pos == HS_POS_LEARNED && a->T > a->m.cfg.n_ctx) {
        int n_ctx = a->m.cfg.n_ctx;
        hs_model_free(&a->m);
        return usage_error(a->cmd, "--seq-len %d exceeds the model's n_ctx=%d", a->T, n_ctx);
    }
    int rc = hs_tokens_read(&a->tok, a->data);
    if (!rc && !hs_batch_count(&a->tok, a->B, a->T))
        rc = hs_fail(HS_EINVAL, "%s: fewer than one batch of %d x %d (+1) tokens", a->data, a->B,
                     a->T);
    for (size_t i = 0; !rc && i < a->tok.n; i++)
        if (a->tok.tok[i] >= a->m.cfg.vocab_size)
            rc = hs_fail(HS_EINVAL, "%s: token %d at %zu is outside the vocabulary of %d", a->data,
                         a->tok.tok[i], i, a->m.cfg.vocab_size);
    if (rc) {
        hs_tokens_free(&a->tok);
        hs_model_free(&a->m);
        return run_error(a->cmd);
    }
    return 0;
}

/* Frees what analysis_load loaded (before a run was opened). */
static void analysis_unload(analysis *a)
{
    hs_tokens_free(&a->tok);
    hs_model_free(&a->m);
}

/* Opens the run in the index, after every argument has been checked, so
 * that bad input records nothing. */
static int analysis_start(analysis *a, const char *kind, int argc, char **argv)
{
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", a->model);
    if (cli_run_begin(&a->run, a->db, a->resume, kind, a->model, file, a->data, argc, argv)) {
        analysis_unload(a);
        return run_error(a->cmd);
    }
    cli_install_signal_handlers();
    return 0;
}

/* Ends the run, frees, reports: exit status. */
static int analysis_close(analysis *a, int rc)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hs_last_error());
    cli_run_end(&a->run, rc == HS_OK, NULL);
    hs_tokens_free(&a->tok);
    hs_model_free(&a->m);
    if (rc == HS_EINTR) {
        fprintf(stderr, "headscope: %s: %s; run %lld is marked failed, finish it with --resume %lld\n",
                a->cmd, msg, a->run.run_id, a->run.run_id);
        return EXIT_FAILURE_RUN;
    }
    if (rc) {
        fprintf(stderr, "headscope: %s: %s\n", a->cmd, msg);
        return EXIT_FAILURE_RUN;
    }
    return 0;
}

/* "0,2" -> flags[i] = 1 for each entry < limit; -1 on a bad list. */
static int parse_flags(const char *s, unsigned char *flags, int limit)
{
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v >= limit)
            return -1;
        flags[v] = 1;
        n++;
        s = *end == ',' && end[1] ? end + 1 : end;
        if (*s && *end != ',')
            return -1;
    }
    return n;
}

/* ---- ablate ------------------------------------------------------------------ */

typedef struct {
    analysis *a;
    hs_ablate_opts *o;
    int clean_recorded;
    progress bar;
    double worst_delta[HS_ABLATE_KINDS];
    int worst_layer[HS_ABLATE_KINDS], worst_head[HS_ABLATE_KINDS];
} ablate_ctx;

static void ablate_progress(void *ctx, size_t done, size_t total)
{
    progress_cb(&((ablate_ctx *)ctx)->bar, done, total);
}

static int record_layer(void *ctx, const hs_ablate_layer *r)
{
    ablate_ctx *c = ctx;
    hs_metric_row rows[HS_MAX_HEADS_ON * HS_ABLATE_KINDS + 1];
    static char names[HS_ABLATE_KINDS][32];
    int n = 0;
    if (!c->clean_recorded) {
        rows[n++] = (hs_metric_row){ -1, -1, "loss", c->o->clean_loss, 0, 0 };
        c->clean_recorded = 1;
    }
    for (int k = 0; k < HS_ABLATE_KINDS; k++) {
        snprintf(names[k], sizeof names[k], "loss_delta_%s", hs_ablate_kind_name(k));
        for (int h = 0; h < r->n_heads; h++) {
            const hs_ablate_stat *s = &r->stat[k * r->n_heads + h];
            if (!s->n)
                continue;
            rows[n++] = (hs_metric_row){ r->layer, h, names[k], s->delta, s->stderr_delta, s->n };
            if (s->delta > c->worst_delta[k] || c->worst_layer[k] < 0) {
                c->worst_delta[k] = s->delta;
                c->worst_layer[k] = r->layer;
                c->worst_head[k] = h;
            }
        }
    }
    return hs_index_metrics_add(c->a->run.ix, c->a->run.run_id, rows, n);
}

int cmd_ablate(int argc, char **argv)
{
    analysis a = { .cmd = "ablate", .B = 4 };
    const char *method = "zero,mean,resample", *layers_s = NULL, *heads_s = NULL;
    int naive = 0, stack = 0;
    opt o[] = {
        { "--model", OPT_STR, &a.model, 0, "DIR", "checkpoint directory", 0 },
        { "--data", OPT_STR, &a.data, 0, "FILE.bin", "evaluation token shard", 0 },
        { "--db", OPT_STR, &a.db, 0, "FILE", "SQLite index for the results", 0 },
        { "--method", OPT_STR, &method, 0, "LIST", "zero, mean and/or resample, comma-separated", 0 },
        { "--layers", OPT_STR, &layers_s, 0, "L,L,...", "layers to ablate (default: all)", 0 },
        { "--heads", OPT_STR, &heads_s, 0, "H,H,...", "heads to ablate in those layers (default: all)", 0 },
        { "--batch", OPT_INT, &a.B, 1, "B", "sequences per batch", 0 },
        { "--seq-len", OPT_INT, &a.T, 1, "T", "sequence length (default: min(n_ctx, 256))", 0 },
        { "--max-batches", OPT_LONG, &a.max_batches, 0, "N", "evaluate N batches (0: all)", 0 },
        { "--resume", OPT_LONG, &a.resume, 1, "RUN_ID", "finish an interrupted run, skipping recorded layers", 0 },
        { "--stack", OPT_INT, &stack, 0, "N", "ablations per batched continuation (0: choose)", 0 },
        { "--naive", OPT_FLAG, &naive, 0, NULL, "one full forward per ablation (the reference path)", 0 },
        { "--threads", OPT_INT, &a.threads, 0, "N", "threads (0: OpenMP's default)", 0 },
        { "--json", OPT_FLAG, &a.json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = opts_parse("ablate", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    int kinds = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", method);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int k = 0;
        while (k < HS_ABLATE_KINDS && strcmp(tok, hs_ablate_kind_name(k)))
            k++;
        if (k == HS_ABLATE_KINDS)
            return usage_error("ablate", "unknown method '%s' (zero, mean, resample)", tok);
        kinds |= 1 << k;
    }
    if (!kinds)
        return usage_error("ablate", "--method needs at least one of zero, mean, resample");
    if ((rc = analysis_load(&a)))
        return rc;
    const hs_model_config *c = &a.m.cfg;
    unsigned char *head_on = hs_calloc((size_t)c->n_layer * HS_MAX_HEADS_ON, 1, "head selection");
    unsigned char lsel[HS_MAX_LAYERS] = { 0 }, hsel[HS_MAX_HEADS_ON] = { 0 };
    int min_heads = 1 << 30;
    for (int l = 0; l < c->n_layer; l++)
        min_heads = c->n_head[l] < min_heads ? c->n_head[l] : min_heads;
    char bad[200] = "";
    if (layers_s && parse_flags(layers_s, lsel, c->n_layer) <= 0)
        snprintf(bad, sizeof bad, "--layers '%s': indices 0..%d expected (the model has %d layers)",
                 layers_s, c->n_layer - 1, c->n_layer);
    else if (heads_s && parse_flags(heads_s, hsel, min_heads) <= 0)
        snprintf(bad, sizeof bad, "--heads '%s': indices 0..%d expected (the smallest layer has %d "
                 "heads)", heads_s, min_heads - 1, min_heads);
    if (*bad || !head_on) {
        free(head_on);
        analysis_unload(&a);
        return *bad ? usage_error("ablate", "%s", bad) : run_error("ablate");
    }
    if ((rc = analysis_start(&a, "ablate", argc, argv))) {
        free(head_on);
        return rc;
    }
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            head_on[(size_t)l * HS_MAX_HEADS_ON + h] = (!layers_s || lsel[l]) && (!heads_s || hsel[h]);
    /* --resume: a layer is recorded in one transaction, so it is either
     * complete in the index or absent; complete layers are skipped. */
    int skipped = 0;
    for (int l = 0; !rc && a.resume && l < c->n_layer; l++) {
        int all = 1, any = 0;
        for (int h = 0; h < c->n_head[l] && all; h++)
            for (int k = 0; k < HS_ABLATE_KINDS && all; k++) {
                if (!head_on[(size_t)l * HS_MAX_HEADS_ON + h] || !(kinds & (1 << k)))
                    continue;
                char name[32];
                int exists = 0;
                snprintf(name, sizeof name, "loss_delta_%s", hs_ablate_kind_name(k));
                rc = hs_index_metric_exists(a.run.ix, a.run.run_id, l, h, name, &exists);
                all = all && exists;
                any = 1;
            }
        if (any && all) {
            memset(head_on + (size_t)l * HS_MAX_HEADS_ON, 0, HS_MAX_HEADS_ON);
            skipped++;
        }
    }
    hs_ablate_opts ao = { .B = a.B, .T = a.T, .max_batches = (size_t)a.max_batches,
                          .kinds = kinds, .head_on = head_on, .stack = stack, .naive = naive,
                          .stop = &cli_stop_requested, .on_layer = record_layer };
    ablate_ctx ctx = { .a = &a, .o = &ao, .worst_layer = { -1, -1, -1 } };
    ao.ctx = &ctx;
    ao.progress = ablate_progress;
    progress_start(&ctx.bar, "ablate", 1);
    double t0 = now_seconds();
    if (!rc)
        rc = hs_ablate(&a.m, &a.tok, &ao);
    double secs = now_seconds() - t0;
    progress_finish(&ctx.bar);
    free(head_on);
    long long run_id = a.run.run_id;
    int status = analysis_close(&a, rc);
    if (status)
        return status;
    if (a.json) {
        printf("{\"run_id\":%lld,\"clean_loss\":%.9g,\"seconds\":%.3f,\"layers_skipped\":%d", run_id,
               ao.clean_loss, secs, skipped);
        for (int k = 0; k < HS_ABLATE_KINDS; k++)
            if (ctx.worst_layer[k] >= 0)
                printf(",\"max_loss_delta_%s\":{\"layer\":%d,\"head\":%d,\"value\":%.9g}",
                       hs_ablate_kind_name(k), ctx.worst_layer[k], ctx.worst_head[k],
                       ctx.worst_delta[k]);
        printf("}\n");
    } else {
        printf("run %lld: clean loss %.4f; ablations recorded in %s (%.1f s)\n", run_id,
               ao.clean_loss, a.db, secs);
        for (int k = 0; k < HS_ABLATE_KINDS; k++)
            if (ctx.worst_layer[k] >= 0)
                printf("  largest loss_delta_%-8s %+.4f at layer %d head %d\n",
                       hs_ablate_kind_name(k), ctx.worst_delta[k], ctx.worst_layer[k],
                       ctx.worst_head[k]);
    }
    return 0;
}

/* ---- importance ---------------------------------------------------------------- */

/* Rows of importance and importance_raw for every head, one transaction. */
static int record_importance(const analysis *a, const hs_importance *imp)
{
    const hs_model_config *c = &a->m.cfg;
    int total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    hs_metric_row *rows = hs_calloc((size_t)total * 2, sizeof *rows, "importance rows");
    if (!rows)
        return HS_ENOMEM;
    int n = 0;
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++) {
            size_t i = (size_t)l * HS_IMP_MAX_HEADS + h;
            rows[n++] = (hs_metric_row){ l, h, "importance", imp->norm[i], imp->norm_stderr[i], imp->n };
            rows[n++] = (hs_metric_row){ l, h, "importance_raw", imp->raw[i], imp->raw_stderr[i],
                                         imp->n };
        }
    int rc = hs_index_metrics_add(a->run.ix, a->run.run_id, rows, n);
    free(rows);
    return rc;
}

int cmd_importance(int argc, char **argv)
{
    analysis a = { .cmd = "importance", .B = 4 };
    opt o[] = {
        { "--model", OPT_STR, &a.model, 0, "DIR", "checkpoint directory", 0 },
        { "--data", OPT_STR, &a.data, 0, "FILE.bin", "evaluation token shard", 0 },
        { "--db", OPT_STR, &a.db, 0, "FILE", "SQLite index for the results", 0 },
        { "--batch", OPT_INT, &a.B, 1, "B", "sequences per batch", 0 },
        { "--seq-len", OPT_INT, &a.T, 1, "T", "sequence length (default: min(n_ctx, 256))", 0 },
        { "--max-batches", OPT_LONG, &a.max_batches, 0, "N", "evaluate N batches (0: all)", 0 },
        { "--threads", OPT_INT, &a.threads, 0, "N", "threads (0: OpenMP's default)", 0 },
        { "--json", OPT_FLAG, &a.json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = opts_parse("importance", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = analysis_load(&a)) || (rc = analysis_start(&a, "importance", argc, argv)))
        return rc;
    hs_importance imp;
    double t0 = now_seconds();
    rc = hs_importance_alloc(&imp, &a.m.cfg);
    progress bar;
    progress_start(&bar, "importance", 0);
    if (!rc)
        rc = hs_importance_compute(&imp, &a.m, &a.tok, a.B, a.T, (size_t)a.max_batches, NULL,
                                   &cli_stop_requested, progress_cb, &bar);
    progress_finish(&bar);
    if (!rc)
        rc = record_importance(&a, &imp);
    double secs = now_seconds() - t0;
    int least_l = 0, least_h = 0;
    for (int l = 0; !rc && l < a.m.cfg.n_layer; l++)
        for (int h = 0; h < a.m.cfg.n_head[l]; h++)
            if (imp.norm[(size_t)l * HS_IMP_MAX_HEADS + h] <
                imp.norm[(size_t)least_l * HS_IMP_MAX_HEADS + least_h])
                least_l = l, least_h = h;
    long long run_id = a.run.run_id;
    long n = imp.n;
    if (imp.raw)
        hs_importance_free(&imp);
    int status = analysis_close(&a, rc);
    if (status)
        return status;
    if (a.json)
        printf("{\"run_id\":%lld,\"sequences\":%ld,\"seconds\":%.3f,\"least_important\":"
               "{\"layer\":%d,\"head\":%d}}\n", run_id, n, secs, least_l, least_h);
    else
        printf("run %lld: importance of every head over %ld sequences in %s (%.2f s); least "
               "important: layer %d head %d\n", run_id, n, a.db, secs, least_l, least_h);
    return 0;
}

/* ---- prune ------------------------------------------------------------------------ */

typedef struct {
    analysis *a;
    hs_curve_point pts[1024];
    int npts, json;
    progress bar; /* over the steps */
} prune_ctx;

static int prune_step(void *ctx, int step, int pruned, double fraction, double loss,
                      double stderr_loss)
{
    prune_ctx *p = ctx;
    char line[128];
    snprintf(line, sizeof line, "step %d: %d heads pruned (%.1f%%), validation loss %.4f ± %.4f",
             step, pruned, 100 * fraction, loss, stderr_loss);
    if (p->bar.enabled)
        progress_update(&p->bar, step, line);
    else if (!p->json)
        fprintf(stderr, "%s\n", line);
    hs_curve_point pt = { step, fraction, loss };
    if (p->npts < 1024)
        p->pts[p->npts++] = pt;
    /* Each step is committed as it completes: an interrupted run keeps its curve. */
    return hs_index_curve_add(p->a->run.ix, p->a->run.run_id, "pruning", &pt, 1);
}

/* Median ms of a forward of the first batch (B x T) of tok, over 7 runs
 * after one warm-up; -1 when out of memory. */
static double forward_ms(const hs_model *m, const hs_tokens *tok, int B, int T)
{
    hs_acts a;
    if (hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_INFER))
        return -1;
    int32_t *in = calloc((size_t)B * T, sizeof(int32_t)), *tg = calloc((size_t)B * T, sizeof(int32_t));
    if (!in || !tg) {
        free(in), free(tg);
        hs_acts_free(&a);
        return -1;
    }
    double t[7];
    hs_batch_at(tok, 0, B, T, in, tg);
    for (int r = -1; r < 7; r++) {
        double t0 = now_seconds();
        hs_forward(&a, m, in, NULL, NULL);
        if (r >= 0)
            t[r] = (now_seconds() - t0) * 1e3;
    }
    for (int i = 1; i < 7; i++) /* insertion sort, 7 values */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    free(in), free(tg);
    hs_acts_free(&a);
    return t[3];
}

int cmd_prune(int argc, char **argv)
{
    analysis a = { .cmd = "prune", .B = 4 };
    const char *val = NULL, *out = NULL;
    double step_percent = 10, max_percent = 100;
    int min_heads = 0, one_shot = 0, structural = 0, force = 0;
    opt o[] = {
        { "--model", OPT_STR, &a.model, 0, "DIR", "checkpoint directory", 0 },
        { "--data", OPT_STR, &a.data, 0, "FILE.bin", "token shard for the importance", 0 },
        { "--db", OPT_STR, &a.db, 0, "FILE", "SQLite index for the curve and the mask", 0 },
        { "--val", OPT_STR, &val, 0, "FILE.bin", "validation shard (default: --data)", 0 },
        { "--step-percent", OPT_DOUBLE, &step_percent, 0, "P", "step k prunes to floor(k*P*N/100) of the N heads", 0 },
        { "--max-percent", OPT_DOUBLE, &max_percent, 0, "P", "stop once P% of the heads are pruned", 0 },
        { "--min-heads-per-layer", OPT_INT, &min_heads, 0, "K", "heads every layer keeps", 0 },
        { "--one-shot", OPT_FLAG, &one_shot, 0, NULL, "rank by the unpruned model's importance only", 0 },
        { "--out", OPT_STR, &out, 0, "DIR", "write the pruned model (W_o columns of pruned heads zeroed)", 0 },
        { "--structural", OPT_FLAG, &structural, 0, NULL, "with --out: remove the pruned heads (a smaller model)", 0 },
        { "--force", OPT_FLAG, &force, 0, NULL, "overwrite a checkpoint in --out", 0 },
        { "--batch", OPT_INT, &a.B, 1, "B", "sequences per batch", 0 },
        { "--seq-len", OPT_INT, &a.T, 1, "T", "sequence length (default: min(n_ctx, 256))", 0 },
        { "--max-batches", OPT_LONG, &a.max_batches, 0, "N", "batches per evaluation (0: all)", 0 },
        { "--threads", OPT_INT, &a.threads, 0, "N", "threads (0: OpenMP's default)", 0 },
        { "--json", OPT_FLAG, &a.json, 0, NULL, "print one JSON object", 0 },
    };
    int rc = opts_parse("prune", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!(step_percent > 0) || step_percent > 100 || !(max_percent > 0) || max_percent > 100)
        return usage_error("prune", "--step-percent and --max-percent must be in (0, 100]");
    if (structural && !out)
        return usage_error("prune", "--structural needs --out DIR");
    if (out) {
        char target[1100];
        struct stat sb;
        snprintf(target, sizeof target, "%s/model.safetensors", out);
        if (!force && stat(target, &sb) == 0) {
            fprintf(stderr, "headscope: prune: %s exists (use --force to overwrite)\n", target);
            return EXIT_FAILURE_RUN;
        }
    }
    hs_tokens vtok = { 0 };
    if (val && hs_tokens_read(&vtok, val))
        return run_error("prune");
    if ((rc = analysis_load(&a))) {
        hs_tokens_free(&vtok);
        return rc;
    }
    const hs_model_config *c = &a.m.cfg;
    if (val && !hs_batch_count(&vtok, a.B, a.T)) {
        hs_fail(HS_EINVAL, "%s: fewer than one batch of %d x %d (+1) tokens", val, a.B, a.T);
        hs_tokens_free(&vtok);
        analysis_unload(&a);
        return run_error("prune");
    }
    if ((rc = analysis_start(&a, "prune", argc, argv))) {
        hs_tokens_free(&vtok);
        return rc;
    }
    unsigned char *pruned = hs_calloc((size_t)c->n_layer * HS_IMP_MAX_HEADS, 1, "mask");
    if (!rc && !pruned)
        rc = HS_ENOMEM;
    prune_ctx pc = { .a = &a, .json = a.json };
    hs_prune_opts po = { .B = a.B, .T = a.T, .max_batches = (size_t)a.max_batches,
                         .step_percent = step_percent, .max_percent = max_percent,
                         .min_heads_per_layer = min_heads, .one_shot = one_shot,
                         .val = val ? &vtok : NULL, .stop = &cli_stop_requested,
                         .on_step = prune_step, .ctx = &pc };
    int n_pruned = 0;
    /* steps: 0 (unpruned), then one per step_percent up to max_percent */
    progress_start(&pc.bar, "prune", (long)ceil(max_percent / step_percent - 1e-9));
    if (!rc)
        rc = hs_prune(&a.m, &a.tok, &po, pruned, &n_pruned);
    progress_finish(&pc.bar);
    /* The final mask: pruned = 0/1 for every head. */
    int total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    hs_metric_row *rows = rc ? NULL : hs_calloc((size_t)total, sizeof *rows, "mask rows");
    int n = 0;
    for (int l = 0; rows && l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            rows[n++] = (hs_metric_row){ l, h, "pruned", pruned[(size_t)l * HS_IMP_MAX_HEADS + h],
                                         0, 0 };
    if (!rc)
        rc = rows ? hs_index_metrics_add(a.run.ix, a.run.run_id, rows, n) : HS_ENOMEM;
    free(rows);
    char out_sha[80] = "";
    double ms[2] = { 0, 0 };
    if (!rc && out) {
        hs_model small;
        if (structural) {
            rc = hs_prune_structural(&small, &a.m, pruned);
        } else { /* the dense model, pruned heads' output columns zeroed */
            rc = hs_model_init(&small, c);
            if (!rc) {
                memcpy(small.params, a.m.params, sizeof(hs_real) * a.m.n_params);
                for (int l = 0; l < c->n_layer; l++) {
                    const int H = c->n_head[l], dh = c->head_dim;
                    for (int h = 0; h < H; h++)
                        if (pruned[(size_t)l * HS_IMP_MAX_HEADS + h])
                            for (int row = 0; row < c->d_model; row++)
                                memset(small.w.layer[l].attn.w_o + (size_t)row * H * dh + h * dh,
                                       0, sizeof(hs_real) * dh);
                }
            }
        }
        if (!rc)
            rc = hs_checkpoint_save(&small, out);
        char file[1100];
        uint64_t bytes = 0;
        snprintf(file, sizeof file, "%s/model.safetensors", out);
        if (!rc)
            rc = hs_sha256_file(file, out_sha, &bytes);
        if (!rc)
            rc = hs_index_artifact_add(a.run.ix, a.run.run_id, file, out_sha, (int64_t)bytes, 1);
        /* what the written model costs to run, beside the unpruned one: a
         * gated (dense) model is no faster; a structural one is */
        if (!rc) {
            ms[0] = forward_ms(&a.m, &a.tok, a.B, a.T);
            ms[1] = forward_ms(&small, &a.tok, a.B, a.T);
            hs_metric_row lat[2] = { { -1, -1, "forward_ms_unpruned", ms[0], 0, 7 },
                                     { -1, -1, "forward_ms_pruned", ms[1], 0, 7 } };
            rc = ms[0] < 0 || ms[1] < 0 ? hs_fail(HS_ENOMEM, "latency: out of memory")
                                        : hs_index_metrics_add(a.run.ix, a.run.run_id, lat, 2);
        }
        if (small.params)
            hs_model_free(&small);
    }
    free(pruned);
    hs_tokens_free(&vtok);
    long long run_id = a.run.run_id;
    int status = analysis_close(&a, rc);
    if (status)
        return status;
    if (a.json) {
        printf("{\"run_id\":%lld,\"pruned\":%d,\"heads\":%d,\"curve\":[", run_id, n_pruned,
               total);
        for (int i = 0; i < pc.npts; i++)
            printf("%s{\"fraction\":%.6g,\"loss\":%.9g}", i ? "," : "", pc.pts[i].x,
                   pc.pts[i].y);
        printf("]");
        if (out) {
            printf(",\"out\":");
            json_string(stdout, out);
            printf(",\"forward_ms_unpruned\":%.4g,\"forward_ms_pruned\":%.4g", ms[0], ms[1]);
        }
        printf("}\n");
    } else {
        printf("run %lld: pruned %d of %d heads; curve 'pruning' and mask 'pruned' in %s%s%s\n",
               run_id, n_pruned, total, a.db, out ? "; model in " : "", out ? out : "");
        if (out)
            printf("forward of one batch (median of 7): %.2f ms unpruned, %.2f ms %s\n", ms[0],
                   ms[1], structural ? "structurally pruned" : "pruned by zeroed columns (dense)");
    }
    return 0;
}

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
                const size_t i = (size_t)l * HS_SCORE_MAX_HEADS + h;
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
    const size_t nh = (size_t)c->n_layer * HS_SCORE_MAX_HEADS;
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
            if (s.value[HS_SCORE_INDUCTION][(size_t)l * HS_SCORE_MAX_HEADS + h] >
                s.value[HS_SCORE_INDUCTION][(size_t)best_l * HS_SCORE_MAX_HEADS + best_h])
                best_l = l, best_h = h;
    double best = rc ? 0 : s.value[HS_SCORE_INDUCTION][(size_t)best_l * HS_SCORE_MAX_HEADS + best_h];
    double best_ctrl = rc ? 0 : sc.value[HS_SCORE_INDUCTION][(size_t)best_l * HS_SCORE_MAX_HEADS + best_h];
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

/* ---- experiment head-count -------------------------------------------------------- */

typedef struct {
    cli_run *run;
    char curve[64];
    hs_curve_point pts[64];
    int npts;
    long tokens_per_step;
    progress *bar;
    long steps_before; /* of the earlier runs of the experiment */
} hc_ctx;

static void hc_flush(hc_ctx *h)
{
    if (h->run->ix && h->npts)
        hs_index_curve_add(h->run->ix, h->run->run_id, h->curve, h->pts, h->npts);
    h->npts = 0;
}

static void hc_step(void *ctx, long step, double loss, double lr)
{
    hc_ctx *h = ctx;
    (void)lr;
    h->pts[h->npts++] = (hs_curve_point){ step, (double)step * h->tokens_per_step, loss };
    if (h->npts == 64)
        hc_flush(h);
    progress_update(h->bar, h->steps_before + step, h->curve);
}

int cmd_experiment(int argc, char **argv)
{
    /* `help experiment` (argv[1] "--help") shows head-count's options */
    const int help = argc >= 2 && !strcmp(argv[1], "--help");
    if (argc < 2 || (strcmp(argv[1], "head-count") && !help))
        return usage_error("experiment", "the experiment is 'head-count'");
    const char *preset = "attn-only", *data = NULL, *val = NULL, *db = NULL;
    const char *heads_s = "1,2,4", *seeds_s = "1,2,3";
    int B = 8, T = 64, threads = 0, json = 0;
    long steps = 200;
    double lr = 1e-3;
    opt o[] = {
        { "--preset", OPT_STR, &preset, 0, "P", "architecture; KEY=VALUE arguments override it", 0 },
        { "--data", OPT_STR, &data, 0, "FILE.bin", "training shard (its last 10% is the validation split unless --val)", 0 },
        { "--val", OPT_STR, &val, 0, "FILE.bin", "validation shard", 0 },
        { "--db", OPT_STR, &db, 0, "FILE", "SQLite index for curves and results", 0 },
        { "--heads", OPT_STR, &heads_s, 0, "H,H,...", "head counts (each divides d_model)", 0 },
        { "--seeds", OPT_STR, &seeds_s, 0, "S,S,...", "initialisation seeds", 0 },
        { "--steps", OPT_LONG, &steps, 1, "N", "equal step budget of every run", 0 },
        { "--batch", OPT_INT, &B, 1, "B", "sequences per step", 0 },
        { "--seq-len", OPT_INT, &T, 1, "T", "sequence length", 0 },
        { "--lr", OPT_DOUBLE, &lr, 0, "LR", "learning rate (Adam)", 0 },
        { "--threads", OPT_INT, &threads, 0, "N", "threads (0: OpenMP's default)", 0 },
        { "--json", OPT_FLAG, &json, 0, NULL, "print one JSON object", 0 },
    };
    const char *overrides[64];
    int nover = 0;
    int rc = opts_parse("experiment", o, (int)(sizeof o / sizeof o[0]), argc - !help,
                        argv + !help, overrides, 64, &nover);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!data || !db)
        return usage_error("experiment", "--data FILE and --db FILE are required");
    if (!(lr > 0))
        return usage_error("experiment", "--lr must be positive");
    int heads[16], nh = 0, seeds[16], ns = 0;
    for (const char *p = heads_s; *p && nh < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1)
            return usage_error("experiment", "--heads '%s': positive counts expected", heads_s);
        heads[nh++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    for (const char *p = seeds_s; *p && ns < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0)
            return usage_error("experiment", "--seeds '%s': seeds expected", seeds_s);
        seeds[ns++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    hs_model_config base;
    if (hs_config_preset(&base, preset))
        return usage_error("experiment", "%s", hs_last_error());
    for (int i = 0; i < nover; i++)
        if (hs_config_override(&base, overrides[i]))
            return usage_error("experiment", "%s", hs_last_error());
    hs_model_config cfg[16];
    for (int i = 0; i < nh; i++) {
        char kv[32];
        cfg[i] = base;
        snprintf(kv, sizeof kv, "n_head=%d", heads[i]);
        if (hs_config_override(&cfg[i], kv))
            return usage_error("experiment", "--heads %d: %s", heads[i], hs_last_error());
        if (cfg[i].pos == HS_POS_LEARNED && T > cfg[i].n_ctx)
            return usage_error("experiment", "--seq-len %d exceeds n_ctx=%d", T, cfg[i].n_ctx);
    }
    if (threads)
        hs_set_threads(threads);
    hs_tokens all, train = { 0 }, vt = { 0 };
    if (hs_tokens_read(&all, data))
        return run_error("experiment");
    if (val) {
        train = all;
        if (hs_tokens_read(&vt, val)) {
            hs_tokens_free(&all);
            return run_error("experiment");
        }
    } else { /* held-out split: the last 10% of the tokens */
        size_t cut = all.n - all.n / 10;
        train = (hs_tokens){ all.tok, cut, all.version };
        vt = (hs_tokens){ all.tok + cut, all.n - cut, all.version };
    }
    if (!hs_batch_count(&train, B, T) || !hs_batch_count(&vt, B, T)) {
        hs_fail(HS_EINVAL, "%s: too few tokens for a batch of %d x %d in both the training and "
                "validation parts", data, B, T);
        hs_tokens_free(&all);
        if (val)
            hs_tokens_free(&vt);
        return run_error("experiment");
    }
    cli_run run;
    if (cli_run_begin(&run, db, 0, "experiment", NULL, NULL, data, argc, argv)) {
        hs_tokens_free(&all);
        if (val)
            hs_tokens_free(&vt);
        return run_error("experiment");
    }
    cli_install_signal_handlers();
    double final[16][16], ms[16];
    hs_metric_row rows[64];
    int nrows = 0;
    static char names[32][48];
    progress bar;
    progress_start(&bar, "experiment", (long)ns * nh * steps);
    for (int s = 0; !rc && s < ns; s++) {
        /* Shared initial weights: with dh = d/H every tensor has the same shape
         * for every head count, so one initialisation serves them all. */
        hs_model init;
        rc = hs_model_init(&init, &cfg[0]);
        if (rc)
            break;
        hs_model_init_random(&init, (unsigned long long)seeds[s]);
        for (int i = 0; !rc && i < nh; i++) {
            hs_model m;
            rc = hs_model_init(&m, &cfg[i]);
            if (!rc && m.n_params != init.n_params)
                rc = hs_fail(HS_EINVAL, "head count %d changes the parameter shapes (set head_dim "
                             "to d_model / n_head)", heads[i]);
            if (!rc)
                memcpy(m.params, init.params, sizeof(hs_real) * m.n_params);
            hc_ctx hc = { &run, "", { { 0 } }, 0, (long)B * T, &bar, (long)(s * nh + i) * steps };
            snprintf(hc.curve, sizeof hc.curve, "train_loss_heads_%d_seed_%d", heads[i], seeds[s]);
            hs_train_opts to = { .B = B, .T = T, .steps = steps, .lr = lr, .on_step = hc_step,
                                 .ctx = &hc, .stop = &cli_stop_requested };
            if (!rc)
                rc = hs_train(&m, &train, &to);
            hc_flush(&hc);
            hs_eval_result er;
            if (!rc)
                rc = hs_evaluate(&er, &m, &vt, B, T, 0, NULL, NULL, NULL);
            if (!rc) {
                final[i][s] = er.loss;
                if (s == 0)
                    ms[i] = forward_ms(&m, &vt, B, T);
                if (!json)
                    fprintf(stderr, "%sheads %d seed %d: validation loss %.4f\n",
                            bar.enabled ? "\r\033[K" : "", heads[i], seeds[s], er.loss);
            }
            if (m.params)
                hs_model_free(&m);
        }
        hs_model_free(&init);
    }
    progress_finish(&bar);
    for (int i = 0; !rc && i < nh; i++) {
        double mean = 0, var = 0;
        for (int s = 0; s < ns; s++)
            mean += final[i][s] / ns;
        for (int s = 0; s < ns; s++)
            var += (final[i][s] - mean) * (final[i][s] - mean);
        double sd = ns > 1 ? sqrt(var / (ns - 1)) : 0;
        snprintf(names[2 * i], 48, "val_loss_heads_%d", heads[i]);
        snprintf(names[2 * i + 1], 48, "forward_ms_heads_%d", heads[i]);
        rows[nrows++] = (hs_metric_row){ -1, -1, names[2 * i], mean, sd / sqrt((double)ns), ns };
        rows[nrows++] = (hs_metric_row){ -1, -1, names[2 * i + 1], ms[i], 0, 7 };
        final[i][0] = mean, final[i][1] = sd;
    }
    if (!rc)
        rc = hs_index_metrics_add(run.ix, run.run_id, rows, nrows);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hs_last_error());
    long long run_id = run.run_id;
    cli_run_end(&run, rc == HS_OK, NULL);
    hs_tokens_free(&all);
    if (val)
        hs_tokens_free(&vt);
    if (rc) {
        fprintf(stderr, "headscope: experiment: %s\n", msg);
        return EXIT_FAILURE_RUN;
    }
    if (json) {
        printf("{\"run_id\":%lld,\"results\":[", run_id);
        for (int i = 0; i < nh; i++)
            printf("%s{\"heads\":%d,\"val_loss\":%.6g,\"std\":%.6g,\"forward_ms\":%.4g}",
                   i ? "," : "", heads[i], final[i][0], final[i][1], ms[i]);
        printf("]}\n");
    } else {
        printf("run %lld: %d head counts x %d seeds, %ld steps each (shared initial weights per "
               "seed)\n  heads  val loss (mean ± std over seeds)  forward ms\n", run_id, nh, ns,
               steps);
        for (int i = 0; i < nh; i++)
            printf("  %5d  %.4f ± %.4f                   %.3f\n", heads[i], final[i][0],
                   final[i][1], ms[i]);
        printf("These are losses of this architecture, data, budget and learning rate; a\n"
               "difference smaller than the spread across seeds shows nothing, and no ordering\n"
               "of head counts carries over to other settings.\n");
    }
    return 0;
}
