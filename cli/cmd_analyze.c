/* ablate, importance, prune: the analyses of SPEC §5 into the index. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>

#include "ablate.h"
#include "analysis.h"
#include "checkpoint.h"
#include "cli.h"
#include "importance.h"
#include "index.h"
#include "sha256.h"
#include "tokens.h"

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
    hs_metric_row rows[HS_MAX_HEADS * HS_ABLATE_KINDS + 1];
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
    unsigned char *head_on = hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, 1, "head selection");
    unsigned char lsel[HS_MAX_LAYERS] = { 0 }, hsel[HS_MAX_HEADS] = { 0 };
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
    if (hs_ablate_check(c, &(hs_ablate_opts){ .B = a.B, .T = a.T, .kinds = kinds })) {
        free(head_on);
        analysis_unload(&a);
        return usage_error("ablate", "%s", hs_last_error());
    }
    if ((rc = analysis_start(&a, "ablate", argc, argv))) {
        free(head_on);
        return rc;
    }
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            head_on[(size_t)l * HS_MAX_HEADS + h] = (!layers_s || lsel[l]) && (!heads_s || hsel[h]);
    /* --resume: a layer is recorded in one transaction, so it is either
     * complete in the index or absent; complete layers are skipped. */
    int skipped = 0;
    for (int l = 0; !rc && a.resume && l < c->n_layer; l++) {
        int all = 1, any = 0;
        for (int h = 0; h < c->n_head[l] && all; h++)
            for (int k = 0; k < HS_ABLATE_KINDS && all; k++) {
                if (!head_on[(size_t)l * HS_MAX_HEADS + h] || !(kinds & (1 << k)))
                    continue;
                char name[32];
                int exists = 0;
                snprintf(name, sizeof name, "loss_delta_%s", hs_ablate_kind_name(k));
                rc = hs_index_metric_exists(a.run.ix, a.run.run_id, l, h, name, &exists);
                all = all && exists;
                any = 1;
            }
        if (any && all) {
            memset(head_on + (size_t)l * HS_MAX_HEADS, 0, HS_MAX_HEADS);
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
            size_t i = (size_t)l * HS_MAX_HEADS + h;
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
            if (imp.norm[(size_t)l * HS_MAX_HEADS + h] <
                imp.norm[(size_t)least_l * HS_MAX_HEADS + least_h])
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
    unsigned char *pruned = hs_calloc((size_t)c->n_layer * HS_MAX_HEADS, 1, "mask");
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
            rows[n++] = (hs_metric_row){ l, h, "pruned", pruned[(size_t)l * HS_MAX_HEADS + h],
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
                        if (pruned[(size_t)l * HS_MAX_HEADS + h])
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

