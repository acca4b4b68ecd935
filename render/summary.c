/* render/summary.c: what a command prints of its result, as lines for
 * people or (json) one JSON object, so that the library's suites (the
 * sanitizer builds run those) exercise it and a binding prints the same
 * as the command. */
#include "summary.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jsonout.h"
#include "metrics.h"
#include "study_ablate.h"
#include "study_prune.h"
#include "study_capture.h"
#include "study_headcount.h"
#include "study_interp.h"
#include "study_train.h"
#include "study_induction.h"
#include "study_importance.h"
#include "study_atp.h"

void hs_print_ablate(FILE *f, const hs_summary *s, const hs_ablate_result *r,
                     const hs_ablate_study_opts *o)
{
    (void)o;
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"clean_loss\":", s->run_id);
        hs_json_number(f, r->clean_loss, 9);
        fprintf(f, ",\"seconds\":"), hs_json_fixed(f, s->seconds, 3);
        fprintf(f, ",\"layers_skipped\":%d", r->layers_skipped);
        for (int k = 0; k < HS_ABLATE_KINDS; k++)
            if (r->worst_layer[k] >= 0) {
                fprintf(f, ",\"max_loss_delta_%s\":{\"layer\":%d,\"head\":%d,", hs_ablate_kind_name(k),
                        r->worst_layer[k], r->worst_head[k]);
                if (r->worst_attn)
                    fprintf(f, "\"attn\":\"%s\",", r->worst_attn);
                fprintf(f, "\"value\":");
                hs_json_number(f, r->worst_delta[k], 9);
                fprintf(f, "}");
            }
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "run %lld: clean loss %.4f; ablations recorded in %s (%.1f s)\n", s->run_id,
            r->clean_loss, s->db, s->seconds);
    for (int k = 0; k < HS_ABLATE_KINDS; k++)
        if (r->worst_layer[k] >= 0)
            fprintf(f, "  largest loss_delta_%-8s %+.4f at %s%slayer %d head %d\n",
                    hs_ablate_kind_name(k), r->worst_delta[k], r->worst_attn ? r->worst_attn : "",
                    r->worst_attn ? " " : "", r->worst_layer[k], r->worst_head[k]);
}

void hs_print_prune(FILE *f, const hs_summary *s, const hs_prune_result *r,
                    const hs_prune_study_opts *o)
{
    const char *out = o->out;
    const int structural = o->structural;
    const hs_study_curve *mc = &r->metric_curve; /* a task's metric */
    const char *metric = strchr(mc->name, '_') ? strchr(mc->name, '_') + 1 : NULL;
    if (r->l0.gate) { /* --method l0: one lambda */
        const hs_task_eval_result *e = &r->l0.eval;
        const char *name = r->l0.lm ? HS_METRIC(LOSS) : hs_task_metric_name(e->metric[e->headline]);
        const double value = r->l0.lm ? e->loss : e->value[e->headline];
        if (s->json) {
            fprintf(f, "{\"run_id\":%lld,\"method\":\"l0\",\"lambda\":", s->run_id);
            hs_json_number(f, o->l0.lambda, 9);
            fprintf(f, ",\"heads_open\":%d,\"heads\":%d", r->l0.open, r->heads);
            if (!r->l0.lm)
                fprintf(f, ",\"task_loss\":"), hs_json_number(f, e->loss, 9);
            fprintf(f, ",\"%s\":", name), hs_json_number(f, value, 9), fprintf(f, "}\n");
        } else {
            fprintf(f, "run %lld: lambda %g: %d of %d heads open, %s %.4f with the gates; "
                       "gates in %s\n", s->run_id, o->l0.lambda, r->l0.open, r->heads, name,
                    value, s->db);
        }
        return;
    }
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"pruned\":%d,\"heads\":%d,\"curve\":[", s->run_id,
                r->n_pruned, r->heads);
        for (int i = 0; i < r->curve.n; i++) {
            fprintf(f, "%s{\"fraction\":", i ? "," : "");
            hs_json_number(f, r->curve.points[i].x, 6);
            fprintf(f, ",\"loss\":"), hs_json_number(f, r->curve.points[i].y, 9);
            if (metric && i < mc->n)
                fprintf(f, ",\"%s\":", metric), hs_json_number(f, mc->points[i].y, 9);
            fprintf(f, "}");
        }
        fprintf(f, "]");
        if (out) {
            fprintf(f, ",\"out\":");
            hs_json_string(f, out);
            fprintf(f, ",\"form\":\"%s\"", !structural ? "dense" : r->hf_form ? "pruned_heads"
                                                                              : "headscope");
        }
        if (out && r->ms[0] > 0) { /* timed on token data */
            fprintf(f, ",\"forward_ms_unpruned\":"), hs_json_number(f, r->ms[0], 4);
            fprintf(f, ",\"forward_ms_pruned\":"), hs_json_number(f, r->ms[1], 4);
        }
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "run %lld: pruned %d of %d heads; curve 'pruning'%s%s and mask 'pruned' in %s%s%s\n",
            s->run_id, r->n_pruned, r->heads, metric ? ", " : "", metric ? mc->name : "", s->db,
            out ? "; model in " : "", out ? out : "");
    if (out && structural)
        fprintf(f, "%s\n", r->hf_form ? "written as transformers' pruned_heads (config.json and "
                                        "smaller q/k/v/o tensors)"
                                      : "written in headscope's own form: transformers cannot "
                                        "open it (pruned_heads is bert, roberta and gpt2's)");
    if (out && r->ms[0] > 0)
        fprintf(f, "forward of one batch (median of 7): %.2f ms unpruned, %.2f ms %s\n",
                r->ms[0], r->ms[1],
                structural ? "structurally pruned" : "pruned by zeroed columns (dense)");
}

void hs_print_capture(FILE *f, const hs_summary *s, const hs_capture_opts *o,
                      const hs_capture_result *r)
{
    struct stat sb;
    const uint64_t bytes = r->bytes ? r->bytes : stat(o->out, &sb) ? 0 : (uint64_t)sb.st_size;
    if (s->json) {
        fprintf(f, "{\"out\":");
        hs_json_string(f, o->out);
        if (s->db)
            fprintf(f, ",\"run_id\":%lld", s->run_id);
        fprintf(f, ",\"sequences\":%zu,\"seconds\":%.3f,\"bytes\":%llu}\n", r->sequences,
                r->seconds, (unsigned long long)bytes);
    } else {
        fprintf(f, "captured %zu sequences into %s (%.1f MB, %.2f s)\n", r->sequences, o->out,
                bytes / 1e6, r->seconds);
        if (s->db)
            fprintf(f, "run %lld recorded in %s\n", s->run_id, s->db);
    }
}

void hs_print_headcount(FILE *f, const hs_summary *s, const hs_headcount_result *r,
                        const hs_headcount_opts *o)
{
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"results\":[", s->run_id);
        for (int i = 0; i < o->n_heads; i++) {
            fprintf(f, "%s{\"heads\":%d,\"val_loss\":", i ? "," : "", o->heads[i]);
            hs_json_number(f, r->mean[i], 6);
            fprintf(f, ",\"std\":"), hs_json_number(f, r->sd[i], 6);
            fprintf(f, ",\"forward_ms\":"), hs_json_number(f, r->ms[i], 4), fprintf(f, "}");
        }
        fprintf(f, "]}\n");
        return;
    }
    fprintf(f, "run %lld: %d head counts x %d seeds, %ld steps each (shared initial weights per "
            "seed)\n  heads  val loss (mean ± std over seeds)  forward ms\n", s->run_id,
            o->n_heads, o->n_seeds, o->steps);
    for (int i = 0; i < o->n_heads; i++)
        fprintf(f, "  %5d  %.4f ± %.4f                   %.3f\n", o->heads[i], r->mean[i],
                r->sd[i], r->ms[i]);
    fprintf(f, "These are losses of this architecture, data, budget and learning rate; a\n"
            "difference smaller than the spread across seeds shows nothing, and no ordering\n"
            "of head counts carries over to other settings.\n");
}

void hs_print_gqa(FILE *f, const hs_summary *s, const hs_gqa_result *r, const hs_gqa_opts *o)
{
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"uptrain_steps\":%ld,\"results\":[", s->run_id,
                r->uptrain_steps);
        for (int i = 0; i < r->table.n; i++) {
            fprintf(f, "%s{\"metric\":", i ? "," : ""), hs_json_string(f, r->table.rows[i].metric);
            fprintf(f, ",\"val_loss\":"), hs_json_number(f, r->loss[i], 6);
            fprintf(f, ",\"stderr\":"), hs_json_number(f, r->se[i], 6), fprintf(f, "}");
        }
        fprintf(f, "]}\n");
        return;
    }
    fprintf(f, "run %lld: MHA -> GQA by mean-pooled key/value heads, uptrained %ld steps "
            "(%.1f%% of %ld)\n  key/value heads  val loss after conversion  after uptraining\n",
            s->run_id, r->uptrain_steps, 100 * o->fraction, o->original_steps);
    fprintf(f, "  %6d (MHA)     %.4f ± %.4f            %.4f ± %.4f\n", o->mha->cfg.n_kv_head[0],
            r->loss[0], r->se[0], r->loss[1], r->se[1]);
    for (int i = 0; i < o->n_kv; i++)
        fprintf(f, "  %6d           %.4f ± %.4f            %.4f ± %.4f\n", o->kv[i],
                r->loss[2 + 2 * i], r->se[2 + 2 * i], r->loss[3 + 2 * i], r->se[3 + 2 * i]);
    fprintf(f, "(mean ± stderr over validation sequences; one model, one uptraining each; the "
            "MHA\nrow's second column is the MHA model trained the same extra steps, the "
            "control)\n");
}

void hs_print_windows(FILE *f, const hs_summary *s, const hs_windows_result *r,
                      const hs_windows_opts *o)
{
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"window\":%d,\"results\":[", s->run_id, r->window);
        for (int a = 0; a < HS_WINDOWS_ARMS; a++) {
            fprintf(f, "%s{\"arm\":\"%s\",\"val_loss\":", a ? "," : "", HS_WINDOWS_ARM[a]);
            hs_json_number(f, r->mean[a], 6);
            fprintf(f, ",\"stderr\":"), hs_json_number(f, r->se[a], 6);
            fprintf(f, ",\"kv_bytes_per_token\":"), hs_json_fixed(f, r->kv_bytes[a], 1);
            fprintf(f, ",\"forward_ms\":"), hs_json_number(f, r->ms[a], 4), fprintf(f, "}");
        }
        fprintf(f, "]}\n");
        return;
    }
    fprintf(f, "run %lld: heads all global / half local / all local (W = %d), %d seeds x %ld steps "
            "each, T = %d\n  heads   val loss (mean ± stderr over seeds)  kv bytes/token  "
            "forward ms\n", s->run_id, r->window, o->n_seeds, o->steps, o->seq_len);
    for (int a = 0; a < HS_WINDOWS_ARMS; a++)
        fprintf(f, "  %-6s  %.4f ± %.4f                     %10.0f  %10.3f\n", HS_WINDOWS_ARM[a],
                r->mean[a], r->se[a], r->kv_bytes[a], r->ms[a]);
    fprintf(f, "Same heads, shared initial weights per seed, same data and steps. kv bytes: "
            "%d-byte\nvalues at T = %d, each key/value head keeping min(T, W) positions when "
            "all its query\nheads are local. A difference smaller than a few stderrs shows "
            "nothing.\n",
            (int)sizeof(hs_real), o->seq_len);
}

void hs_print_dla(FILE *f, const hs_summary *s, const hs_dla_result *r, const hs_dla_opts *o)
{
    (void)o;
    const hs_metric_row *ld = hs_head_table_find(&r->table, -1, -1, HS_METRIC(LOGIT_DIFF_CLEAN));
    int right = 0; /* prompts whose answer the model prefers to the wrong token */
    for (int i = 0; i < r->parts.n; i++)
        right += r->parts.logit_diff[i] > 0;
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"prompts\":%d,\"prompts_right\":%d,\"logit_diff_clean\":",
                s->run_id, r->parts.n, right);
        hs_json_number(f, ld->value, 8);
        fprintf(f, ",\"logit_diff_stderr\":"), hs_json_number(f, ld->stderr_value, 6);
        fprintf(f, ",\"top\":{\"layer\":%d,\"head\":%d,\"dla\":", r->top_layer, r->top_head);
        hs_json_number(f, r->top, 8);
        fprintf(f, "},\"sum_gap_max\":"), hs_json_number(f, r->max_gap, 3);
        fprintf(f, ",\"rows\":%d}\n", r->table.n);
        return;
    }
    fprintf(f, "run %lld: direct logit attribution of %d prompt%s in %s; clean logit difference "
            "%.4f ± %.4f; largest head toward the answer: layer %d head %d (%+.4f); the parts "
            "sum to the logit difference within %.1e (relative)\n",
            s->run_id, r->parts.n, r->parts.n == 1 ? "" : "s", s->db, ld->value,
            ld->stderr_value, r->top_layer, r->top_head, r->top, r->max_gap);
    fprintf(f, "the model prefers the answer to the wrong token on %d of %d clean prompt%s%s\n",
            right, r->parts.n, r->parts.n == 1 ? "" : "s",
            2 * right < r->parts.n ? ": it mostly does not do this task, so the parts explain "
                                     "a wrong answer" : "");
}

void hs_print_logit_lens(FILE *f, const hs_summary *s, const hs_logit_lens_result *r,
                         const hs_logit_lens_opts *o)
{
    (void)o;
    const int prompts = r->lens.logit_diff != NULL;
    if (s->json)
        fprintf(f, "{\"run_id\":%lld,\"%s\":%ld,\"layers\":[", s->run_id,
                prompts ? "prompts" : "sequences", r->lens.n);
    else
        fprintf(f, "run %lld: logit lens over %ld %s in %s\n%-8s %s\n", s->run_id, r->lens.n,
                prompts ? "prompts" : "sequences", s->db, "layer",
                prompts ? "loss (-log p answer)    logit difference" : "loss (nats)");
    for (int e = 0; e <= r->lens.n_layer; e++) {
        const hs_head_table *t = &r->table;
        const hs_metric_row *l = hs_head_table_find(t, e, -1, HS_METRIC(LOGIT_LENS_LOSS));
        const hs_metric_row *d = hs_head_table_find(t, e, -1, HS_METRIC(LOGIT_LENS_LOGIT_DIFF));
        if (s->json) {
            fprintf(f, "%s{\"layer\":%d,\"loss\":", e ? "," : "", e);
            hs_json_number(f, l->value, 8);
            fprintf(f, ",\"loss_stderr\":"), hs_json_number(f, l->stderr_value, 6);
            if (d)
                fprintf(f, ",\"logit_diff\":"), hs_json_number(f, d->value, 8);
            fprintf(f, "}");
            continue;
        }
        char name[32];
        snprintf(name, sizeof name, e < r->lens.n_layer ? "%d" : "%d final", e);
        fprintf(f, "%-8s %8.4f ± %-9.4f", name, l->value, l->stderr_value);
        if (d)
            fprintf(f, "  %8.4f ± %.4f", d->value, d->stderr_value);
        fprintf(f, "\n");
    }
    if (s->json)
        fprintf(f, "]}\n");
}

void hs_print_composition(FILE *f, const hs_summary *s, const hs_composition_result *r,
                          const hs_composition_opts *o)
{
    const int control = !o->no_control;
    static const char *const kind[3] = { "q", "k", "v" };
    if (s->json)
        fprintf(f, "{\"run_id\":%lld,\"pairs\":%d", s->run_id, r->n_pairs / (control ? 6 : 3));
    else
        fprintf(f, "run %lld: Q/K/V composition of %d head pairs in %s%s\n", s->run_id,
                r->n_pairs / (control ? 6 : 3), s->db,
                control ? " (and of a random-init control)" : "");
    for (int k = 0; k < 3; k++) {
        const int *b = r->best[k];
        if (s->json) {
            fprintf(f, ",\"%s\":{\"best\":{\"layer_a\":%d,\"head_a\":%d,\"layer_b\":%d,"
                    "\"head_b\":%d,\"value\":", kind[k], b[0], b[1], b[2], b[3]);
            hs_json_number(f, r->best_value[k], 6);
            fprintf(f, "},\"mean\":"), hs_json_number(f, r->mean[k], 6);
            fprintf(f, ",\"control_mean\":"), hs_json_number(f, r->control_mean[k], 6);
            fprintf(f, "}");
        } else {
            fprintf(f, "%s-composition: highest L%dH%d -> L%dH%d %.3f; mean %.3f", kind[k], b[0],
                    b[1], b[2], b[3], r->best_value[k], r->mean[k]);
            if (control)
                fprintf(f, " (control %.3f)", r->control_mean[k]);
            fprintf(f, "\n");
        }
    }
    if (s->json)
        fprintf(f, "}\n");
}

void hs_print_train(FILE *f, const hs_summary *s, const hs_train_result *r,
                    const hs_train_opts *to, const char *out)
{
    const double tps = to->steps * (double)to->B * to->T / r->seconds;
    if (s->json) {
        fprintf(f, "{\"out\":");
        hs_json_string(f, out);
        fprintf(f, ",\"steps\":%ld,\"final_loss\":", to->steps);
        hs_json_number(f, r->final_loss, 9);
        fprintf(f, ",\"tokens_per_s\":"), hs_json_fixed(f, tps, 1);
        if (s->db)
            fprintf(f, ",\"run_id\":%lld", s->run_id);
        fprintf(f, "}\n");
    } else {
        fprintf(f, "trained %ld steps (%.0f tokens/s), final loss %.4f; saved %s\n", to->steps, tps,
                r->final_loss, out);
    }
}

/* Every head row (JSON: "heads"), and the largest of each metric (text). */
static void print_heads(FILE *f, const hs_head_table *t, int json)
{
    if (json)
        fprintf(f, ",\"heads\":[");
    for (int i = 0, first = 1; i < t->n; i++) {
        const hs_metric_row *r = &t->rows[i];
        if (json) {
            fprintf(f, "%s{\"layer\":%d,\"head\":%d,\"metric\":", first ? "" : ",", r->layer,
                    r->head);
            hs_json_string(f, r->metric);
            fprintf(f, ",\"value\":"), hs_json_number(f, r->value, 9);
            fprintf(f, ",\"stderr\":"), hs_json_number(f, r->stderr_value, 9);
            fprintf(f, ",\"n\":%lld}", r->n);
            first = 0;
            continue;
        }
        int best = 1;
        for (int j = 0; j < t->n; j++)
            if (!strcmp(t->rows[j].metric, r->metric) && t->rows[j].value > r->value)
                best = 0;
        if (best && r->layer >= 0)
            fprintf(f, "  largest %-14s %+.4f (stderr %.4f) at layer %d head %d\n", r->metric,
                    r->value, r->stderr_value, r->layer, r->head);
    }
    if (json)
        fprintf(f, "]");
}

/* SPEC §21's premise of the normalised numbers in t: in JSON ,"premise":
 * "ok" or "not established: <why>"; as text one line (none when t has no
 * premise rows). */
static void print_premise(FILE *f, const hs_head_table *t, int json)
{
    char why[256] = "", words[320];
    const int failed = hs_premise_failed(t, why, sizeof why);
    const hs_metric_row *gap = hs_head_table_find(t, -1, -1, HS_METRIC(LOGIT_DIFF_GAP));
    snprintf(words, sizeof words, "not established: %s", why);
    if (json) {
        fprintf(f, ",\"premise\":");
        hs_json_string(f, failed ? words : "ok");
    } else if (failed) {
        fprintf(f, "  NOT ESTABLISHED: %s; the normalised numbers below rest on noise\n", why);
    } else if (gap) {
        fprintf(f, "  premise holds: gap clean - corrupt %+.4f (stderr %.4f over %lld prompts), "
                "at least two standard errors from 0\n", gap->value, gap->stderr_value, gap->n);
    }
}

/* The JSON fields a causal command's summary opens with. */
static void causal_json_head(FILE *f, const hs_summary *s, long n, double ld_clean,
                             double ld_corrupt, const hs_head_table *t)
{
    fprintf(f, "{\"run_id\":%lld,\"prompts\":%ld,\"logit_diff_clean\":", s->run_id, n);
    hs_json_number(f, ld_clean, 9);
    fprintf(f, ",\"logit_diff_corrupt\":"), hs_json_number(f, ld_corrupt, 9);
    fprintf(f, ",\"seconds\":"), hs_json_fixed(f, s->seconds, 3);
    print_premise(f, t, 1);
}

void hs_print_patch(FILE *f, const hs_summary *s, const hs_patch_result *r)
{
    if (!s->json) {
        fprintf(f, "run %lld: %ld prompts, logit difference clean %.4f, corrupt %.4f; patching "
                "recorded in %s (%.1f s)\n", s->run_id, r->n, r->ld_clean, r->ld_corrupt, s->db,
                s->seconds);
        print_premise(f, &r->heads, 0);
        print_heads(f, &r->heads, 0);
        return;
    }
    causal_json_head(f, s, r->n, r->ld_clean, r->ld_corrupt, &r->heads);
    print_heads(f, &r->heads, 1);
    fprintf(f, ",\"positions\":[");
    for (int i = 0; i < r->n_pos; i++) {
        const hs_position_row *p = &r->pos[i];
        fprintf(f, "%s{\"layer\":%d,\"position\":%d,\"metric\":\"%s\",\"value\":", i ? "," : "",
                p->layer, p->position, p->metric);
        hs_json_number(f, p->value, 9);
        fprintf(f, ",\"stderr\":"), hs_json_number(f, p->stderr_value, 9);
        fprintf(f, ",\"n\":%lld}", p->n);
    }
    fprintf(f, "]}\n");
}

/* The model-wide row `metric` of t (NULL: none). */
static const hs_metric_row *model_row(const hs_head_table *t, const char *metric)
{
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].layer < 0 && !strcmp(t->rows[i].metric, metric))
            return &t->rows[i];
    return NULL;
}

void hs_print_induction(FILE *f, const hs_summary *s, const hs_induction_result *r,
                        const hs_induction_opts *o)
{
    const hs_causal_check *cc = &r->causal;
    const hs_metric_row *icl = model_row(&r->table, HS_METRIC(ICL));
    const hs_metric_row *icl_c = model_row(&r->table, HS_METRIC(ICL_CONTROL));
    const hs_metric_row *first = model_row(&r->table, HS_METRIC(FIRST_HALF_LOSS));
    /* the probe against chance: random tokens predicting random ones */
    const double ln_v = log((double)r->vocab);
    const int above = first && first->value > ln_v + 2 * first->stderr_value;
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"samples\":%d,\"seq_len\":%d,\"top_induction\":{\"layer\":%d,"
                "\"head\":%d,\"value\":", s->run_id, o->samples, o->seq_len, r->best_layer,
                r->best_head);
        hs_json_number(f, r->best, 6);
        fprintf(f, ",\"control\":"), hs_json_number(f, r->best_control, 6);
        fprintf(f, "},\"causal\":{\"k\":%d,\"loss_delta_top_k\":", cc->k);
        hs_json_number(f, cc->targeted, 6);
        fprintf(f, ",\"loss_delta_random_mean\":"), hs_json_number(f, cc->random_mean, 6);
        fprintf(f, ",\"loss_delta_random_std\":"), hs_json_number(f, cc->random_std, 6);
        fprintf(f, ",\"induction_heads_established\":%s}", r->established ? "true" : "false");
        fprintf(f, ",\"pool\":%d", r->pool);
        if (first) {
            fprintf(f, ",\"first_half_loss\":{\"value\":"), hs_json_number(f, first->value, 6);
            fprintf(f, ",\"stderr\":"), hs_json_number(f, first->stderr_value, 6);
            fprintf(f, ",\"ln_v\":"), hs_json_number(f, ln_v, 6);
            fprintf(f, ",\"above_chance\":%s}", above ? "true" : "false");
        }
        if (icl) { /* SPEC §5's ICL score of the data (--data), beside the control's */
            fprintf(f, ",\"icl\":{\"value\":"), hs_json_number(f, icl->value, 6);
            fprintf(f, ",\"stderr\":"), hs_json_number(f, icl->stderr_value, 6);
            fprintf(f, ",\"control\":"), hs_json_number(f, icl_c ? icl_c->value : NAN, 6);
            fprintf(f, "}");
        }
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "run %lld: scores of every head on %d sequences r ++ r (|r| = %d) in %s; highest "
            "induction: layer %d head %d, %.3f (random-init control %.3f)\n",
            s->run_id, o->samples, o->seq_len, s->db, r->best_layer, r->best_head, r->best,
            r->best_control);
    if (first)
        fprintf(f, "probe: r drawn from %d ids; first-half loss %.3f ± %.3f nats against chance "
                "ln V = %.3f%s\n", r->pool, first->value, first->stderr_value, ln_v,
                above ? ": above chance, so the model finds these tokens improbable (rare, "
                        "byte-fallback or special ids) and its scores are measured off its usual "
                        "inputs (--from-data FILE or --vocab A:B draws typical ones)" : "");
    if (icl)
        fprintf(f, "ICL score of the data (late minus early token loss): %+.4f ± %.4f nats "
                   "(random-init control %+.4f)\n", icl->value, icl->stderr_value,
                icl_c ? icl_c->value : NAN);
    if (*r->note) { /* an encoder's scores, without the check */
        fprintf(f, "%s\n", r->note);
        return;
    }
    const char *pl = cc->k == 1 ? "" : "s";
    fprintf(f, "causal check: second-half loss %.4f; %+.4f with the top %d induction head%s off, "
            "%+.4f ± %.4f with %d random other head%s off (%d draws)\n",
            cc->clean, cc->targeted, cc->k, pl, cc->random_mean, cc->random_std, cc->k, pl,
            o->random_draws);
    if (r->established) {
        fprintf(f, "induction heads by score and causal check:");
        for (int i = 0; i < cc->k; i++)
            fprintf(f, " L%dH%d", cc->layer[i], cc->head[i]);
        fprintf(f, "\n");
    } else if (cc->beats) {
        fprintf(f, "not established: the top heads' ablation hurts beyond the random draws' "
                "spread, but their induction score is below --min-score %.2f or within two "
                "standard errors of the random-init control's\n", o->min_score);
    } else {
        fprintf(f, "not established: ablating the top heads does not hurt beyond the random "
                "draws' spread\n");
    }
}

void hs_print_path_patch(FILE *f, const hs_summary *s, const hs_path_patch_result *r,
                         const hs_path_patch_opts *o)
{
    (void)o;
    const hs_head_table *t = &r->heads;
    const int n_senders = r->n_senders;
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"seconds\":", s->run_id), hs_json_fixed(f, s->seconds, 3);
        print_premise(f, t, 1);
        print_heads(f, t, 1);
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "run %lld: path patching of %d sender(s) recorded in %s (%.1f s)\n", s->run_id,
            n_senders, s->db, s->seconds);
    print_premise(f, t, 0);
    print_heads(f, t, 0);
}

void hs_print_head_norms(FILE *f, const hs_summary *s, const hs_head_norms_result *r,
                         const hs_head_norms_opts *o)
{
    (void)o;
    if (s->json)
        fprintf(f, "{\"run_id\":%lld,\"sequences\":%ld,\"seconds\":%.3f,\"largest\":"
                "{\"layer\":%d,\"head\":%d}}\n", s->run_id, r->sequences, s->seconds,
                r->top_layer, r->top_head);
    else
        fprintf(f, "run %lld: output norms of every head and of a random-init control over %ld "
                "sequences in %s (%.2f s); largest: layer %d head %d\n", s->run_id, r->sequences,
                s->db, s->seconds, r->top_layer, r->top_head);
}

/* An encoder-decoder's sink_rate rows (metric, one per attention type) as
 * "enc 0.000, dec 0.750, cross 0.375", or a JSON object of them. */
static void sink_rates_by_type(FILE *f, const hs_head_table *t, const char *metric, int json)
{
    int k = 0;
    for (int i = 0; i < t->n; i++) {
        const hs_metric_row *r = &t->rows[i];
        if (r->layer >= 0 || !r->attn || strcmp(r->metric, metric))
            continue;
        fprintf(f, json ? "%s\"%s\":" : "%s%s ", k++ ? (json ? "," : ", ") : json ? "{" : "",
                r->attn);
        if (json)
            hs_json_number(f, r->value, 6);
        else
            fprintf(f, "%.3f", r->value);
    }
    if (json)
        fprintf(f, k ? "}" : "null");
}

void hs_print_patterns(FILE *f, const hs_summary *s, const hs_patterns_result *r,
                       const hs_patterns_opts *o)
{
    if (*r->note)
        fprintf(stderr, "headscope: patterns: note: %s\n", r->note);
    const hs_metric_row *rate = model_row(&r->table, HS_METRIC(SINK_RATE));
    const hs_metric_row *rate_c = model_row(&r->table, HS_METRIC(SINK_RATE_CONTROL));
    const int by_type = rate && rate->attn; /* an encoder-decoder's, one per type */
    const double eps = o->sink_epsilon > 0 ? o->sink_epsilon : 0.3;
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"sequences\":%ld,\"rows\":%d", s->run_id, r->sequences,
                r->table.n);
        fprintf(f, ",\"sink_rate\":");
        if (by_type)
            sink_rates_by_type(f, &r->table, HS_METRIC(SINK_RATE), 1);
        else
            hs_json_number(f, rate ? rate->value : NAN, 6);
        fprintf(f, ",\"sink_epsilon\":"), hs_json_number(f, eps, 6);
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "run %lld: pattern statistics of %d head-rows over %ld %s in %s%s\n",
            s->run_id, r->heads, r->sequences, by_type ? "pairs" : "sequences", s->db,
            o->control ? " (and of a random-init control)" : "");
    if (rate)
        fprintf(f, "sink rate%s", by_type ? " by attention type: " : " ");
    if (by_type)
        sink_rates_by_type(f, &r->table, HS_METRIC(SINK_RATE), 0);
    else if (rate)
        fprintf(f, "%.3f", rate->value);
    if (rate)
        fprintf(f, ": the share of heads whose attention on position 0 exceeds %g%s", eps,
                rate_c ? "" : "\n");
    if (rate && rate_c && by_type) {
        fprintf(f, " (random-init control: ");
        sink_rates_by_type(f, &r->table, HS_METRIC(SINK_RATE_CONTROL), 0);
        fprintf(f, ")\n");
    } else if (rate && rate_c)
        fprintf(f, " (random-init control %.3f)\n", rate_c->value);
}

void hs_print_eval(FILE *f, const hs_summary *s, const hs_eval_result *r)
{
    if (s->json) {
        fprintf(f, "{\"loss\":"), hs_json_number(f, r->loss, 9);
        fprintf(f, ",\"stderr\":"), hs_json_number(f, r->stderr_loss, 9);
        if (r->has_bleu)
            fprintf(f, ",\"bleu\":"), hs_json_number(f, r->bleu, 9);
        fprintf(f, ",\"tokens\":%zu,\"sequences\":%zu,\"batches\":%zu}\n", r->tokens,
                r->sequences, r->batches);
    } else {
        fprintf(f, "loss %.6f ± %.6f (stderr over %zu sequences), %zu tokens\n", r->loss,
                r->stderr_loss, r->sequences, r->tokens);
        if (r->has_bleu)
            fprintf(f, "bleu %.4f (corpus BLEU of the greedy outputs, sacreBLEU's 13a)\n",
                    r->bleu);
    }
}

void hs_print_task_eval(FILE *f, const hs_summary *s, const hs_task_eval_result *r)
{
    if (s->json) {
        fprintf(f, "{\"task_loss\":"), hs_json_number(f, r->loss, 9);
        fprintf(f, ",\"task_loss_stderr\":"), hs_json_number(f, r->loss_se, 9);
        for (int k = 0; k < r->n_metrics; k++) {
            const char *name = hs_task_metric_name(r->metric[k]);
            fprintf(f, ",\"%s\":", name), hs_json_number(f, r->value[k], 9);
            fprintf(f, ",\"%s_stderr\":", name), hs_json_number(f, r->se[k], 9);
        }
        fprintf(f, ",\"metric\":\"%s\",\"n\":%d}\n", hs_task_metric_name(r->metric[r->headline]),
                r->n);
        return;
    }
    fprintf(f, "%s %.4f ± %.4f over %d examples (task loss %.4f ± %.4f",
            hs_task_metric_name(r->metric[r->headline]), r->value[r->headline],
            r->se[r->headline], r->n, r->loss, r->loss_se);
    for (int k = 0; k < r->n_metrics; k++)
        if (k != r->headline)
            fprintf(f, ", %s %.4f ± %.4f", hs_task_metric_name(r->metric[k]), r->value[k], r->se[k]);
    fprintf(f, ")\n");
}

void hs_print_importance(FILE *f, const hs_summary *s, const hs_importance_result *r,
                         const hs_importance_opts *o)
{
    (void)o;
    const char *attn = r->least_attn ? r->least_attn : "";
    if (s->json)
        fprintf(f, "{\"run_id\":%lld,\"sequences\":%ld,\"seconds\":%.3f,\"least_important\":"
                "{%s%s%s\"layer\":%d,\"head\":%d}}\n", s->run_id, r->sequences, s->seconds,
                *attn ? "\"attn\":\"" : "", attn, *attn ? "\"," : "", r->least_layer,
                r->least_head);
    else
        fprintf(f, "run %lld: importance of every head over %ld %s in %s (%.2f s); least "
                "important: %s%slayer %d head %d\n", s->run_id, r->sequences,
                *attn ? "pairs" : "sequences", s->db, s->seconds, attn, *attn ? " " : "",
                r->least_layer, r->least_head);
}

/* The largest |value| of each head metric of t, one line each. */
static void print_largest(FILE *f, const hs_head_table *t)
{
    for (int i = 0; i < t->n; i++) {
        const hs_metric_row *r = &t->rows[i];
        int best = r->layer >= 0;
        for (int j = 0; best && j < t->n; j++) {
            const hs_metric_row *x = &t->rows[j];
            best = j == i || x->layer < 0 || strcmp(x->metric, r->metric) ||
                   fabs(x->value) < fabs(r->value) || (fabs(x->value) == fabs(r->value) && j > i);
        }
        if (best)
            fprintf(f, "  largest |%s| %+.4f (stderr %.4f) at layer %d head %d\n", r->metric,
                    r->value, r->stderr_value, r->layer, r->head);
    }
}

void hs_print_atp(FILE *f, const hs_summary *s, const hs_atp_result *r)
{
    if (!s->json) {
        fprintf(f, "run %lld: %ld prompts, logit difference clean %.4f, corrupt %.4f; "
                "attribution recorded in %s (%.2f s)\n", s->run_id, r->n, r->ld_clean,
                r->ld_corrupt, s->db, s->seconds);
        print_premise(f, &r->heads, 0);
        print_largest(f, &r->heads);
        return;
    }
    causal_json_head(f, s, r->n, r->ld_clean, r->ld_corrupt, &r->heads);
    fprintf(f, ",\"heads\":"), hs_json_head_rows(f, r->heads.rows, r->heads.n);
    fprintf(f, ",\"positions\":"), hs_json_position_rows(f, r->pos, r->n_pos);
    fprintf(f, "}\n");
}

void hs_print_circuit(FILE *f, const hs_summary *s, const hs_circuit_result *r,
                      const long *order)
{
    if (s->json) {
        causal_json_head(f, s, r->n, r->ld_clean, r->ld_corrupt, &r->heads);
        fprintf(f, ",\"faithfulness\":[");
        for (int k = 0; k < r->n_curve; k++) {
            fprintf(f, "%s[%.0f,", k ? "," : "", r->curve[k].x);
            hs_json_number(f, r->curve[k].y, 9);
            fprintf(f, "]");
        }
        fprintf(f, "],\"edges\":"), hs_json_edge_rows(f, r->edges, r->n_edges);
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "run %lld: %ld prompts, %ld edges scored in %s (%.2f s); logit difference clean "
            "%.4f, corrupt %.4f\n", s->run_id, r->n, r->n_edges, s->db, s->seconds, r->ld_clean,
            r->ld_corrupt);
    print_premise(f, &r->heads, 0);
    for (long i = 0; i < r->n_edges && i < 5; i++) {
        const hs_edge_row *e = &r->edges[order[i]];
        fprintf(f, "  %-7s %+.4f (stderr %.4f) %s -> %s\n", e->metric, e->value,
                e->stderr_value, e->sender, e->receiver);
    }
    for (int k = 0; k < r->n_curve; k++)
        fprintf(f, "%s%.0f: %.3f", k ? ", " : "  faithfulness of the top N edges: ",
                r->curve[k].x, r->curve[k].y);
    fprintf(f, "%s", r->n_curve ? "\n" : "");
}

/* One id's token string as JSON (null without one) or as text. */
static void token_of(FILE *f, const hs_tokenizer *tk, int32_t id, int json)
{
    char buf[256];
    const int have = tk && !hs_tokenizer_token_text(tk, id, buf, sizeof buf);
    if (json && have)
        hs_json_string(f, buf);
    else
        fprintf(f, json ? "null" : "%s", have ? buf : "");
}

void hs_print_predict_top(FILE *f, const hs_prediction *top, int k, const hs_tokenizer *tk,
                          int json)
{
    fprintf(f, json ? "{\"top\":[" : "rank  id  logit  prob  token\n");
    for (int i = 0; i < k; i++) {
        if (json) {
            fprintf(f, "%s{\"id\":%d,\"token\":", i ? "," : "", top[i].id);
            token_of(f, tk, top[i].id, 1);
            fprintf(f, ",\"logit\":"), hs_json_number(f, top[i].logit, 9);
            fprintf(f, ",\"prob\":"), hs_json_number(f, top[i].prob, 9), fprintf(f, "}");
        } else {
            fprintf(f, "%d  %d  %.4f  %.4f  ", i + 1, top[i].id, top[i].logit, top[i].prob);
            token_of(f, tk, top[i].id, 0);
            fprintf(f, "\n");
        }
    }
    fprintf(f, json ? "]}\n" : "");
}

static void print_pair(FILE *f, const char *name, const hs_prediction_pair *p, int json)
{
    if (!json) {
        fprintf(f, "  %-7s answer rank %d (p %.4f), wrong rank %d (p %.4f), LD %+.4f\n", name,
                p->answer_rank, p->answer.prob, p->wrong_rank, p->wrong.prob, p->ld);
        return;
    }
    fprintf(f, "\"%s\":{\"answer_rank\":%d,\"wrong_rank\":%d,\"answer_logit\":", name,
            p->answer_rank, p->wrong_rank);
    hs_json_number(f, p->answer.logit, 9), fprintf(f, ",\"wrong_logit\":");
    hs_json_number(f, p->wrong.logit, 9), fprintf(f, ",\"answer_prob\":");
    hs_json_number(f, p->answer.prob, 9), fprintf(f, ",\"wrong_prob\":");
    hs_json_number(f, p->wrong.prob, 9), fprintf(f, ",\"ld\":");
    hs_json_number(f, p->ld, 9), fprintf(f, "}");
}

void hs_print_predict_lines(FILE *f, const hs_prediction_line *r, int n, int json)
{
    fprintf(f, json ? "{\"lines\":[" : "");
    for (int i = 0; i < n; i++) {
        fprintf(f, json ? "%s{\"line\":%d," : "%sline %d\n", i && json ? "," : "", r[i].line);
        print_pair(f, "clean", &r[i].clean, json);
        fprintf(f, json ? "," : "");
        print_pair(f, "corrupt", &r[i].corrupt, json);
        fprintf(f, json ? "}" : "");
    }
    fprintf(f, json ? "]}\n" : "");
}

void hs_print_generation(FILE *f, const int32_t *out, int n_prompt, int n,
                         const hs_generate_stats *st, const hs_tokenizer *tok, int V, int json,
                         int answer)
{
    const int from = answer ? n_prompt : 0; /* an answer's text: the new ids alone */
    char *text = tok ? hs_tokenizer_decode(tok, out + from, (size_t)(n - from), answer) : NULL;
    if (json) {
        fprintf(f, "{\"ids\":[");
        for (int i = 0; i < n; i++)
            fprintf(f, "%s%d", i ? "," : "", out[i]);
        fprintf(f, "],\"new_ids\":[");
        for (int i = n_prompt; i < n; i++)
            fprintf(f, "%s%d", i > n_prompt ? "," : "", out[i]);
        if (text) /* the text output's, as a string */
            fprintf(f, "],\"text\":"), hs_json_string(f, text), fprintf(f, ",");
        else
            fprintf(f, "],");
        fprintf(f, "\"cache_bytes\":%zu,\"tokens_per_s\":", st->cache_bytes);
        hs_json_number(f, st->tokens_per_s, 6);
        fprintf(f, ",\"prefill_s\":"), hs_json_number(f, st->prefill_seconds, 6);
        fprintf(f, ",\"step_tokens_per_s\":"), hs_json_number(f, st->step_tokens_per_s, 6);
        fprintf(f, "}\n");
        free(text);
        return;
    }
    if (text)
        fprintf(f, "%s\n", text);
    else if (V == 256 && !tok) {
        for (int i = from; i < n; i++)
            fputc(out[i], f);
        fputc('\n', f);
    } else {
        for (int i = from; i < n; i++)
            fprintf(f, "%s%d", i > from ? " " : "", out[i]);
        fprintf(f, "\n");
    }
    free(text);
    fflush(f); /* the text first, whole, even when both streams go to one file */
    fprintf(stderr, "generate: %d new tokens, %.1f tokens/s, KV cache %zu bytes\n", n - n_prompt,
            st->tokens_per_s, st->cache_bytes);
}

static void print_head_refs(FILE *f, const char *key, const hs_head_ref *h, int k)
{
    fprintf(f, ",\"%s\":[", key);
    for (int i = 0; i < k; i++)
        fprintf(f, "%s{\"layer\":%d,\"head\":%d}", i ? "," : "", h[i].layer, h[i].head);
    fprintf(f, "]");
}

void hs_print_retrieval(FILE *f, const hs_summary *s, const hs_retrieval_result *r,
                        const hs_retrieval_opts *o)
{
    (void)o;
    const double acc = r->runs ? (double)r->succeeded / r->runs : 0;
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"runs\":%d,\"succeeded\":%d,\"%s\":", s->run_id, r->runs,
                r->succeeded, HS_METRIC(NEEDLE_ACCURACY));
        hs_json_number(f, acc, 6);
        fprintf(f, ",\"top_retrieval\":{\"layer\":%d,\"head\":%d,\"value\":", r->best.layer,
                r->best.head);
        hs_json_number(f, r->best_score, 6);
        fprintf(f, "},\"%s\":%zu,\"%s\":", HS_METRIC(KV_CACHE_BYTES), r->cache_bytes,
                HS_METRIC(HAYSTACK_LOSS));
        hs_json_number(f, r->haystack_loss, 6);
        fprintf(f, ",\"mask_top\":%d", r->k);
        if (r->k) {
            fprintf(f, ",\"%s\":", HS_METRIC(NEEDLE_ACCURACY_MASKED_TOP));
            hs_json_number(f, (double)r->top_succeeded / r->runs, 6);
            fprintf(f, ",\"%s\":", HS_METRIC(NEEDLE_ACCURACY_MASKED_RANDOM));
            hs_json_number(f, (double)r->random_succeeded / r->runs, 6);
            print_head_refs(f, "masked_top", r->top, r->k);
            print_head_refs(f, "masked_random", r->random, r->k);
        }
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "run %lld: retrieval scores of %d heads over %d runs in %s (%.1f s)\n", s->run_id,
            r->heads, r->runs, s->db, s->seconds);
    fprintf(f, "  needle accuracy %.3f (%d of %d runs recall over half the answer's words)\n",
            acc, r->succeeded, r->runs);
    if (!r->succeeded)
        fprintf(f, "  no run succeeded: every retrieval score is 0 and ranks nothing\n");
    else
        fprintf(f, "  largest retrieval score %.4f at layer %d head %d\n", r->best_score,
                r->best.layer, r->best.head);
    fprintf(f, "  KV cache %.2f MiB at the longest run; the haystack's loss %.4f nats\n",
            r->cache_bytes / 1048576.0, r->haystack_loss);
    if (r->k)
        fprintf(f, "  causal check: the top %d heads masked: needle accuracy %.3f; %d random "
                "other heads masked (control): %.3f\n", r->k, (double)r->top_succeeded / r->runs,
                r->k, (double)r->random_succeeded / r->runs);
}

/* {"ids": [...], "tokens": [...]} through cJSON, or one line per token:
 * the id, a tab, the token's display string as a JSON string */
int hs_print_tokens(FILE *f, const hs_tokenizer *tok, const int32_t *ids, size_t n, int json)
{
    cJSON *root = json ? cJSON_CreateObject() : NULL;
    cJSON *jid = json ? cJSON_AddArrayToObject(root, "ids") : NULL;
    cJSON *jtok = json ? cJSON_AddArrayToObject(root, "tokens") : NULL;
    if (json && (!root || !jid || !jtok)) {
        cJSON_Delete(root);
        return hs_fail(HS_ENOMEM, "tokenize: JSON output");
    }
    char text[512];
    for (size_t i = 0; i < n; i++) {
        if (hs_tokenizer_token_text(tok, ids[i], text, sizeof text)) {
            cJSON_Delete(root);
            return HS_EINVAL;
        }
        if (!json) {
            fprintf(f, "%d\t", (int)ids[i]);
            hs_json_string(f, text);
            fprintf(f, "\n");
        } else if (!cJSON_AddItemToArray(jid, cJSON_CreateNumber(ids[i])) ||
                   !cJSON_AddItemToArray(jtok, cJSON_CreateString(text))) {
            cJSON_Delete(root);
            return hs_fail(HS_ENOMEM, "tokenize: JSON output");
        }
    }
    if (json) {
        char *s = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        if (!s)
            return hs_fail(HS_ENOMEM, "tokenize: JSON output");
        fprintf(f, "%s\n", s);
        free(s);
    }
    return HS_OK;
}

void hs_print_kv_bytes(FILE *f, double bytes, int mla_line, double mla_per_token, double mla,
                       int json)
{
    if (json) {
        fprintf(f, "{\"kv_bytes\":"), hs_json_fixed(f, bytes, 0);
        fprintf(f, ",\"kv_gib\":"), hs_json_fixed(f, bytes / (1 << 30), 6);
        if (mla_line)
            fprintf(f, ",\"mla_bytes\":"), hs_json_fixed(f, mla, 0),
                fprintf(f, ",\"mla_bytes_per_token\":"), hs_json_fixed(f, mla_per_token, 0);
        fprintf(f, "}\n");
    } else {
        fprintf(f, "kv cache: %.0f bytes (%.4f GiB)\n", bytes, bytes / (1 << 30));
        if (mla_line)
            fprintf(f, "mla cache: %.0f bytes (%.0f per token)\n", mla, mla_per_token);
    }
}

void hs_print_features(FILE *f, const hs_summary *s, const hs_features_result *r,
                       const hs_features_opts *o)
{
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"tokens\":%lld,\"d_sae\":%d,\"alive\":%d,\"%s\":",
                s->run_id, r->tokens, r->d_sae, r->alive, HS_METRIC(SAE_L0));
        hs_json_number(f, r->l0, 6);
        fprintf(f, ",\"examples\":%ld,\"dfa_rows\":%ld,\"top_feature\":{\"feature\":%d,"
                "\"%s\":", r->n_examples, r->n_dfa, r->top_feature, HS_METRIC(FREQUENCY));
        hs_json_number(f, r->top_frequency, 6);
        fprintf(f, "}");
        if (o->out)
            fprintf(f, ",\"out\":\"%s\",\"sha256\":\"%s\",\"bytes\":%llu", o->out, r->sha256,
                    (unsigned long long)r->bytes);
        fprintf(f, ",\"seconds\":%.3f}\n", s->seconds);
        return;
    }
    fprintf(f, "run %lld: %d features of %s over %lld tokens in %s (%.1f s)\n", s->run_id,
            r->d_sae, o->sae.hook, r->tokens, s->db, s->seconds);
    fprintf(f, "  %d active at least once (%d never); %.2f active a token; the most frequent: "
            "feature %d (%.4f of tokens)\n", r->alive, r->d_sae - r->alive, r->l0,
            r->top_feature, r->top_frequency);
    fprintf(f, "  %ld top examples%s", r->n_examples, r->n_dfa ? "" : "\n");
    if (r->n_dfa)
        fprintf(f, ", %ld nonzero direct attributions (head, source position)\n", r->n_dfa);
    if (o->out)
        fprintf(f, "  activations in CSR: %s (%.1f MB)\n", o->out, r->bytes / 1e6);
}

void hs_print_sae_eval(FILE *f, const hs_summary *s, const hs_sae_eval_result *r,
                       const hs_sae_eval_opts *o)
{
    if (s->json) {
        const char *names[] = { HS_METRIC(SAE_L0), HS_METRIC(EXPLAINED_VARIANCE), HS_METRIC(MSE),
                                HS_METRIC(CE_LOSS_SCORE), HS_METRIC(LOSS_CLEAN),
                                HS_METRIC(LOSS_SAE), HS_METRIC(LOSS_ZERO) };
        const double v[] = { r->l0, r->explained_variance, r->mse, r->ce_loss_score,
                             r->loss_clean, r->loss_sae, r->loss_zero };
        fprintf(f, "{\"run_id\":%lld,\"tokens\":%lld,\"sequences\":%ld", s->run_id, r->tokens,
                r->sequences);
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
            fprintf(f, ",\"%s\":", names[i]);
            hs_json_number(f, v[i], 9);
        }
        fprintf(f, ",\"stderr\":{\"%s\":", HS_METRIC(SAE_L0));
        hs_json_number(f, r->se_l0, 6);
        fprintf(f, ",\"%s\":", HS_METRIC(MSE));
        hs_json_number(f, r->se_mse, 6);
        fprintf(f, ",\"%s\":", HS_METRIC(CE_LOSS_SCORE));
        hs_json_number(f, r->se_score, 6);
        fprintf(f, "},\"premise_ok\":%s}\n",
                fabs(r->gap) > 2 * r->se_gap ? "true" : "false");
        return;
    }
    fprintf(f, "run %lld: %s SAE on %s over %lld tokens (%ld sequences)\n", s->run_id,
            hs_sae_arch_name(o->sae.arch), o->sae.hook, r->tokens, r->sequences);
    fprintf(f, "  L0 %.3f ± %.3f active features a token; explained variance %.4f; MSE %.6g\n",
            r->l0, r->se_l0, r->explained_variance, r->mse);
    fprintf(f, "  CE loss score %.4f ± %.4f: loss %.4f clean, %.4f with the reconstruction, "
            "%.4f with 0 at the hook\n", r->ce_loss_score, r->se_score, r->loss_clean,
            r->loss_sae, r->loss_zero);
    if (!(fabs(r->gap) > 2 * r->se_gap))
        fprintf(f, "  note: L_zero - L_clean = %+.4g is within two standard errors (%.2g) of 0: "
                "the score divides by noise and says little\n", r->gap, r->se_gap);
}

void hs_print_train_sae(FILE *f, const hs_summary *s, const hs_train_sae_result *r,
                        const hs_train_sae_opts *o)
{
    const double rate = r->seconds > 0 ? (double)r->tokens / r->seconds : 0;
    if (s->json) {
        fprintf(f, "{\"run_id\":%lld,\"steps\":%ld,\"tokens\":%lld,\"mse\":", s->run_id,
                r->steps, r->tokens);
        hs_json_number(f, r->mse, 9);
        fprintf(f, ",\"%s\":", HS_METRIC(EXPLAINED_VARIANCE));
        hs_json_number(f, r->explained_variance, 9);
        fprintf(f, ",\"explained_variance_last\":");
        hs_json_number(f, r->ev_last, 9);
        fprintf(f, ",\"dead\":%d,\"tokens_per_second\":%.1f,\"out\":\"%s\"}\n", r->dead, rate,
                o->out);
        return;
    }
    fprintf(f, "run %lld: a TopK SAE (%d latents, k %d) on %s trained %ld steps, %lld tokens, "
            "in %.1f s (%.0f tokens/s): %s\n", s->run_id, o->d_sae, o->k, o->hook, r->steps,
            r->tokens, r->seconds, rate, o->out);
    fprintf(f, "  last step: MSE %.6g, explained variance %.4f (mean of the last 10%% of steps "
            "%.4f); %d latents dead\n", r->mse, r->explained_variance, r->ev_last, r->dead);
}
