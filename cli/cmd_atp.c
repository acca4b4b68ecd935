/* atp: attribution patching and AtP* (SPEC §15) of every head and (layer,
 * position) on prompt pairs into the index. */
#include <stdio.h>

#include "cli.h"
#include "study.h"
#include "study_atp.h"

static int cmd_atp(int argc, char **argv)
{
    const char *model = NULL, *db = NULL, *site = NULL;
    int threads = 0, json = 0, allow = 0;
    hs_inputs_spec in = { .keep_tokenizer = 1 }; /* the run records its positions' tokens */
    hs_atp_opts ao = { 0 };
    opt o[] = {
        OPT_MODEL(&model),
        OPT_PROMPTS(&in.prompts),
        OPT_DB(&db),
        { "--site", OPT_STR, &site, 0, "LIST", "z, pattern, q, k, v, resid_pre, attn_out, mlp_out (default: z and, prompts of one length, resid_pre,attn_out,mlp_out)", 0 },
        { "--noising", OPT_FLAG, &ao.noising, 0, NULL, "the gradient on the clean run, corrupt - clean (default: denoising)", 0 },
        { "--star", OPT_FLAG, &ao.star, 0, NULL, "also AtP* (QK fix and GradDrop) of the head sites: atp_star_<site>", 0 },
        { "--verify", OPT_INT, &ao.verify, 0, "K", "exact patch_z (patch_pattern) of the K heads of largest |atp|", 0 },
        OPT_PROMPT_TOKENIZER(&in.source.tokenizer),
        OPT_BATCH_AS(&ao.batch, "prompts per forward (default 32)"),
        OPT_THREADS(&threads),
        OPT_JSON(&json),
        OPT_ALLOW_NONFINITE(&allow),
    };
    const int n = (int)(sizeof o / sizeof o[0]);
    int rc = cli_opts_parse("atp", o, n, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!model || !in.prompts || !db)
        return cli_usage_error("atp", "--model DIR, --prompts FILE and --db FILE are required");
    if (threads)
        hs_set_threads(threads);
    cli_job j = { 0 };
    in.model = model;
    if ((rc = cli_open(&j, &in)))
        return rc;
    if (hs_atp_family_check(&j.in.m.cfg)) /* the model's family: not a usage error */
        return cli_inputs_refused(&j.in, "atp", 0);
    if (hs_atp_sites(&ao.sites, site, &j.in.m.cfg, &j.in.ps) ||
        hs_atp_check(&j.in.m.cfg, &j.in.ps, &ao))
        return cli_inputs_refused(&j.in, "atp", 1);
    if ((rc = cli_start(&j, db, 0, model, o, n, argc, argv)))
        return rc;
    phase_bars bars;
    hs_study_io io = cli_study_io(&bars, 1);
    io.allow_nonfinite = allow;
    hs_atp_result r;
    hs_study_rows rows;
    const double t0 = hs_now();
    rc = hs_atp_study(&r, &rows, &j.in.m, &j.in.ps, ao, &io);
    if (!rc)
        rc = hs_run_study_rows(j.run, &rows);
    const double secs = hs_now() - t0;
    const long long id = hs_run_id(j.run);
    if (!(rc = cli_finish(&j, rc)))
        hs_print_atp(stdout, &(hs_summary){ id, db, secs, json }, &r);
    hs_atp_result_free(&r);
    return rc;
}

HS_COMMAND(cmd_atp_record) = {
    .name = "atp",
    .flags = CMD_SHARDS,
    .order = 157,
    .summary = "Attribution patching (AtP, AtP*) of every head and (layer, position) on prompt pairs.",
    .usage = "headscope atp --model DIR --prompts FILE --db FILE [options]",
    .details = "The first-order estimate of patch from one forward of each run and one backward:\n"
        "per prompt I = sum over the site's elements of (a_clean - a_corrupt) . dLD/da on the\n"
        "corrupt run (--noising: a_corrupt - a_clean, on the clean run), every position of a head,\n"
        "one position of resid_pre/attn_out/mlp_out, normalised as patch:\n"
        "  atp_<site> = mean I / (mean LD_clean - mean LD_corrupt)   (noising: / (corrupt - clean))\n"
        "stderr = sd(I) / sqrt(n) / |mean LD_clean - mean LD_corrupt|. Head sites z, pattern, q, k, v\n"
        "(after q/k norms and RoPE; k and v per key/value head, MLA: the latent) -> head_metrics;\n"
        "position sites -> position_metrics. --star adds AtP* (Kramar et al. 2024) of the head\n"
        "sites: the pattern of patched queries or keys computed exactly (QK fix), and GradDrop:\n"
        "  atp_star_<site> = mean (1/(L-1)) sum_l |I with layer l's backward stopped| / |span|\n"
        "(a magnitude that ranks heads for exact patching; L more backwards). --verify K records\n"
        "patch_z (patch_pattern) of the K heads of largest |atp_z| (|atp_pattern|), computed by\n"
        "patch. Shards prompts under mpirun.\n\n"
        "example: headscope atp --model runs/tiny --prompts ioi.jsonl --db runs.db --star --verify 5\n",
    .run = cmd_atp,
};
