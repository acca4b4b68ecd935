/* atp: attribution patching and AtP* (SPEC §15) of every head and (layer,
 * position) on prompt pairs into the index. */
#include <stdio.h>

#include "cli.h"
#include "study.h"
#include "study_atp.h"

CLI_PRINT_WRAPPED(atp, atp)

static int cmd_atp(int argc, char **argv)
{
    hs_atp_study_opts ao = { 0 };
    /* the run records its positions' tokens */
    cli_study s = { &hs_atp_kind, &ao, { .keep_tokenizer = 1 },
                    .flags = CLI_NEEDS_PROMPTS | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = print_atp };
    opt o[] = {
        OPT_MODEL(&s.in.model),
        OPT_PROMPTS(s),
        OPT_DB(&s.db),
        { "--site", OPT_STR, &ao.site, 0, "LIST", "z, pattern, q, k, v, resid_pre, attn_out, mlp_out (default: z and, prompts of one length, resid_pre,attn_out,mlp_out)", 0 },
        { "--noising", OPT_FLAG, &ao.atp.noising, 0, NULL, "the gradient on the clean run, corrupt - clean (default: denoising)", 0 },
        { "--star", OPT_FLAG, &ao.atp.star, 0, NULL, "also AtP* (QK fix and GradDrop) of the head sites: atp_star_<site>", 0 },
        { "--verify", OPT_INT, &ao.atp.verify, 0, "K", "exact patch_z (patch_pattern) of the K heads of largest |atp|", 0 },
        OPT_PROMPT_TOKENIZER(&s.in.source.tokenizer),
        OPT_BATCH_AS(&s.in.batch, "prompts per forward (default 32)"),
        CLI_STUDY_TAIL_OPTS(s),
    };
    return cli_study_run(&s, o, CLI_N(o), argc, argv);
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
        "stderr and premise as patch's (SPEC §21: delta method). Head sites z, pattern, q, k, v\n"
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
