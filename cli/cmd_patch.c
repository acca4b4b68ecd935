/* patch, path-patch: activation and path patching on clean/corrupt prompt
 * pairs (SPEC §11) into the index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "study.h"
#include "study_patch.h"

/* What both commands share: the model, the prompts, the run. */
typedef struct {
    const char *model, *db;
    hs_inputs_spec in;
    int threads, json, allow_nonfinite;
    cli_job j;
} causal;

/* Loads the model and the prompts (errors name the file and line: exit 1). */
static int causal_load(causal *a)
{
    const char *cmd = cli_current->name;
    if (!a->model || !a->in.prompts || !a->db)
        return cli_usage_error(cmd, "--model DIR, --prompts FILE and --db FILE are required");
    if (a->threads)
        hs_set_threads(a->threads);
    a->in.model = a->model;
    a->in.keep_tokenizer = 1; /* the run records its positions' tokens */
    return cli_open(&a->j, &a->in);
}

/* A usage error from the library's last message, after freeing. */
static int causal_usage(causal *a)
{
    hs_inputs_free(&a->j.in);
    return cli_usage_error(cli_current->name, "%s", hs_last_error());
}



#define CAUSAL_OPTS(a)                                                                        \
    OPT_MODEL(&(a).model),                                                                    \
    OPT_PROMPTS(&(a).in.prompts),                                                             \
    OPT_DB(&(a).db),                                                                          \
    OPT_PROMPT_TOKENIZER(&(a).in.source.tokenizer)

static int cmd_patch(int argc, char **argv)
{
    causal a = { 0 };
    const char *site = NULL;
    hs_patch_opts po = { 0 };
    opt o[] = {
        CAUSAL_OPTS(a),
        { "--site", OPT_STR, &site, 0, "LIST", "z, pattern, resid_pre, attn_out, mlp_out (default: z and, prompts of one length, resid_pre,attn_out,mlp_out)", 0 },
        { "--noising", OPT_FLAG, &po.noising, 0, NULL, "patch corrupt into clean (default: clean into corrupt)", 0 },
        OPT_BATCH_AS(&po.batch, "prompts per forward (default 64)"),
        { "--stack", OPT_INT, &po.stack, 0, "N", "patches per batched continuation (0: choose)", OPT_NEUTRAL },
        { "--naive", OPT_FLAG, &po.naive, 0, NULL, "one hooked full forward per patch (the reference path)", OPT_NEUTRAL },
        OPT_THREADS(&a.threads),
        OPT_JSON(&a.json),
        OPT_ALLOW_NONFINITE(&a.allow_nonfinite),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    int rc = cli_opts_parse("patch", o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = causal_load(&a)))
        return rc;
    const hs_inputs *in = &a.j.in;
    if (hs_patch_sites(&po.sites, site, &in->m.cfg, &in->ps) ||
        hs_patch_check(&in->m.cfg, &in->ps, &po))
        return causal_usage(&a);
    if ((rc = cli_start(&a.j, a.db, 0, a.model, o, n, argc, argv)))
        return rc;
    phase_bars bars;
    hs_study_io io = cli_study_io(&bars, 1);
    io.allow_nonfinite = a.allow_nonfinite;
    hs_patch_result r;
    double t0 = hs_now();
    rc = hs_patch_study(&r, &in->m, &in->ps, po, hs_run_index(a.j.run), hs_run_id(a.j.run), &io);
    double secs = hs_now() - t0;
    const long long id = hs_run_id(a.j.run);
    int status = cli_finish(&a.j, rc);
    if (!status)
        hs_print_patch(stdout, &(hs_summary){ id, a.db, secs, a.json }, &r);
    hs_patch_result_free(&r);
    return status;
}

static int cmd_path_patch(int argc, char **argv)
{
    causal a = { 0 };
    const char *senders = NULL, *receivers = NULL;
    hs_path_opts po = { 0 };
    opt o[] = {
        CAUSAL_OPTS(a),
        { "--senders", OPT_STR, &senders, 0, "L.H,..|all", "sender heads, each patched on its own", 0 },
        { "--receivers", OPT_STR, &receivers, 0, "L.H:q|k|v,..", "receivers' inputs, patched together (default: the logits)", 0 },
        OPT_BATCH_AS(&po.batch, "prompts per forward (default 64)"),
        OPT_THREADS(&a.threads),
        OPT_JSON(&a.json),
        OPT_ALLOW_NONFINITE(&a.allow_nonfinite),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    int rc = cli_opts_parse("path-patch", o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = causal_load(&a)))
        return rc;
    const hs_inputs *in = &a.j.in;
    int *sender = NULL;
    hs_receiver *recv = NULL;
    if (hs_path_parse(&sender, &po.n_senders, &recv, &po.n_recv, senders, receivers, &in->m.cfg))
        return causal_usage(&a);
    po.sender = sender, po.recv = recv;
    if ((rc = cli_start(&a.j, a.db, 0, a.model, o, n, argc, argv))) {
        free(sender), free(recv);
        return rc;
    }
    phase_bars bars;
    hs_study_io io = cli_study_io(&bars, 1);
    io.allow_nonfinite = a.allow_nonfinite;
    hs_head_table t;
    double t0 = hs_now();
    rc = hs_path_patch_study(&t, &in->m, &in->ps, po, hs_run_index(a.j.run), hs_run_id(a.j.run),
                             &io);
    double secs = hs_now() - t0;
    const long long id = hs_run_id(a.j.run);
    int status = cli_finish(&a.j, rc);
    if (!status)
        hs_print_path_patch(stdout, &(hs_summary){ id, a.db, secs, a.json }, &t, po.n_senders);
    hs_head_table_free(&t);
    free(sender), free(recv);
    return status;
}

HS_COMMAND(cmd_patch_record) = {
    .name = "patch",
    .flags = CMD_SHARDS,
    .order = 155,
    .summary = "Activation patching of every head and (layer, position) on prompt pairs.",
    .usage = "headscope patch --model DIR --prompts FILE --db FILE [options]",
    .details = "LD = logit[answer] - logit[wrong] at the last position. Denoising (default):\n"
        "the corrupt run with one activation from the clean run -- a head's z or pattern at\n"
        "every position, or resid_pre/attn_out/mlp_out of one layer at one position:\n"
        "  patch_<site> = (mean LD_patched - mean LD_corrupt) / (mean LD_clean - mean LD_corrupt)\n"
        "--noising: the clean run with one activation from the corrupt run:\n"
        "  patch_<site> = (mean LD_patched - mean LD_clean) / (mean LD_corrupt - mean LD_clean)\n"
        "(the negative of ARENA's noising metric). Either way 0 = no effect, 1 = the whole\n"
        "change; stderr = sd of the per-prompt LD_patched - LD_base / sqrt(n) / |mean LD_clean -\n"
        "mean LD_corrupt|. Rows: head_metrics patch_z, patch_pattern (n = prompts),\n"
        "logit_diff_clean and logit_diff_corrupt (layer = head = -1); position_metrics\n"
        "patch_resid_pre, patch_attn_out, patch_mlp_out at positions 0..T-1, which need\n"
        "prompts of one length. Equal mean clean and corrupt LD (0/0) fails the run.\n\n"
        "example: headscope patch --model runs/tiny --prompts ioi.jsonl --db runs.db --site z\n",
    .run = cmd_patch,
};

HS_COMMAND(cmd_path_patch_record) = {
    .name = "path-patch",
    .order = 156,
    .summary = "Path patching (Wang et al.) from sender heads to receivers' q/k/v or the logits.",
    .usage = "headscope path-patch --model DIR --prompts FILE --db FILE --senders L.H,..|all "
        "[--receivers L.H:q|k|v,..]",
    .details = "Per sender: (1) the clean prompt with the sender's z from the corrupt run and every\n"
        "other head's z frozen to the clean run (MLPs recomputed), recording the receivers'\n"
        "per-head q/k/v (after RoPE; k and v of a grouped-key model: the receiver's key/value\n"
        "head); (2) the clean prompt with those patched in. Without --receivers LD comes from\n"
        "run (1) (the path to the logits).\n"
        "  path_patch = (mean LD_pp - mean LD_clean) / (mean LD_corrupt - mean LD_clean)\n"
        "with stderr as patch's. Rows in head_metrics at each sender head.\n\n"
        "example: headscope path-patch --model runs/tiny --prompts ioi.jsonl --db runs.db \\\n"
        "           --senders all --receivers 3.0:q,3.1:q\n",
    .run = cmd_path_patch,
};
