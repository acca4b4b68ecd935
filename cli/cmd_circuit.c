/* circuit: edge attribution patching (EAP, EAP-IG) of every edge and the
 * faithfulness of top-N circuits (SPEC §15) into the index. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "study.h"
#include "study_atp.h"

static int cmd_circuit(int argc, char **argv)
{
    const char *model = NULL, *db = NULL, *method = NULL, *top = NULL;
    int threads = 0, json = 0, allow = 0;
    hs_inputs_spec in = { .keep_tokenizer = 1 };
    hs_circuit_opts co = { .ig_steps = 5 };
    opt o[] = {
        OPT_MODEL(&model),
        OPT_PROMPTS(&in.prompts),
        OPT_DB(&db),
        { "--method", OPT_STR, &method, 0, "eap|eap-ig", "edge attribution patching, or with integrated gradients", 0 },
        { "--ig-steps", OPT_INT, &co.ig_steps, 1, "m", "eap-ig's interpolation steps (default 5)", 0 },
        { "--top-n", OPT_STR, &top, 0, "N,...", "the circuits whose faithfulness is measured (default 0,1,2,5,10,.. and all edges)", 0 },
        OPT_PROMPT_TOKENIZER(&in.source.tokenizer),
        OPT_BATCH_AS(&co.batch, "prompts per forward (default: by memory, at most 16)"),
        OPT_THREADS(&threads),
        OPT_JSON(&json),
        OPT_ALLOW_NONFINITE(&allow),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    int rc = cli_opts_parse("circuit", o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!model || !in.prompts || !db || !method)
        return cli_usage_error("circuit",
                               "--model DIR, --prompts FILE, --db FILE and --method are required");
    if (hs_circuit_method(&co.method, method))
        return cli_usage_error("circuit", "%s", hs_last_error());
    if (threads)
        hs_set_threads(threads);
    cli_job j = { 0 };
    in.model = model;
    if ((rc = cli_open(&j, &in)))
        return rc;
    long *tops = NULL;
    if (hs_circuit_top_n(&tops, &co.n_top, top, &j.in.m.cfg))
        return cli_inputs_refused(&j.in, "circuit", 1);
    co.top_n = tops;
    if (hs_circuit_check(&j.in.m.cfg, &co)) { /* the model's family: not a usage error */
        hs_inputs_free(&j.in), free(tops);
        return cli_run_error("circuit");
    }
    if ((rc = cli_start(&j, db, 0, model, o, n, argc, argv))) {
        free(tops);
        return rc;
    }
    phase_bars bars;
    hs_study_io io = cli_study_io(&bars, 1);
    io.allow_nonfinite = allow;
    hs_circuit_result r;
    hs_study_rows rows;
    const double t0 = hs_now();
    rc = hs_circuit_study(&r, &rows, &j.in.m, &j.in.ps, co, &io);
    if (!rc)
        rc = hs_run_study_rows(j.run, &rows);
    const double secs = hs_now() - t0;
    const long long id = hs_run_id(j.run);
    long *order = rc ? NULL : calloc((size_t)r.n_edges + 1, sizeof *order);
    if (!rc && (!order || hs_circuit_rank(&r, order)))
        rc = HS_ENOMEM;
    if (!(rc = cli_finish(&j, rc)))
        hs_print_circuit(stdout, &(hs_summary){ id, db, secs, json }, &r, order);
    hs_circuit_result_free(&r);
    free(order), free(tops);
    return rc;
}

HS_COMMAND(cmd_circuit_record) = {
    .name = "circuit",
    .flags = CMD_SHARDS,
    .order = 158,
    .summary = "Edge attribution patching (EAP, EAP-IG) of every edge and the faithfulness of top-N circuits.",
    .usage = "headscope circuit --model DIR --prompts FILE --db FILE --method eap|eap-ig [options]",
    .details = "The graph of EAP-IG (Hanna et al. 2024): nodes input, a{l}.h{h} (z_h W_o^h), m{l};\n"
        "receivers a{l}.h{h}<q>, <k>, <v> (k, v per key/value head; MLA: the latent, h0), m{l},\n"
        "logits, each reading the residual stream through its own input norm. Per edge u -> v:\n"
        "  eap    = mean over prompts of (a_u,corrupt - a_u,clean) . dLD/d(input of v), clean run\n"
        "  eap_ig = the same, the gradient averaged over m steps at embeddings\n"
        "           e_corrupt + (k/m)(e_clean - e_corrupt), k = 0..m-1\n"
        "with stderr over prompts, into edge_metrics. For each N of --top-n the top N edges by\n"
        "|score| (ties by sender, receiver) are run on the clean prompts, every other edge\n"
        "carrying its corrupt value: faithfulness = (mean LD_circuit - mean LD_corrupt) /\n"
        "(mean LD_clean - mean LD_corrupt), curve faithfulness (x = N). Refuses models whose\n"
        "residual stream is not a sum of the nodes' outputs (post-norm, output norms: gemma2,\n"
        "gemma3_text, olmo2). Shards prompts under mpirun. plot circuit draws the graph.\n\n"
        "example: headscope circuit --model runs/tiny --prompts ioi.jsonl --db runs.db --method eap-ig\n",
    .run = cmd_circuit,
};
