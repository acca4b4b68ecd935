/* patch, path-patch: activation and path patching on clean/corrupt prompt
 * pairs (SPEC §11) into the index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "study.h"
#include "study_patch.h"

CLI_PRINT_WRAPPED(patch, patch)

CLI_PRINT(path_patch)

/* What both commands take: the model, the prompts, the run; the run records
 * its positions' tokens. */
#define CAUSAL_STUDY(KIND, OPTS, PRINT)                                                       \
    { &(KIND), &(OPTS), { .keep_tokenizer = 1 },                                              \
      .flags = CLI_NEEDS_PROMPTS | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = (PRINT) }
#define CAUSAL_OPTS(s)                                                                        \
    OPT_MODEL(&(s).in.model),                                                                 \
    OPT_PROMPTS(s),                                                             \
    OPT_DB(&(s).db),                                                                          \
    OPT_PROMPT_TOKENIZER(&(s).in.source.tokenizer)

static int cmd_patch(int argc, char **argv)
{
    hs_patch_study_opts po = { 0 };
    cli_study s = CAUSAL_STUDY(hs_patch_kind, po, print_patch);
    opt o[] = {
        CAUSAL_OPTS(s),
        { "--site", OPT_STR, &po.site, 0, "LIST", "z, pattern, resid_pre, attn_out, mlp_out (default: z and, prompts of one length, resid_pre,attn_out,mlp_out)", 0 },
        { "--noising", OPT_FLAG, &po.patch.noising, 0, NULL, "patch corrupt into clean (default: clean into corrupt)", 0 },
        OPT_BATCH_AS(&s.in.batch, "prompts per forward (default 64)"),
        { "--stack", OPT_INT, &po.patch.stack, 0, "N", "patches per batched continuation (0: choose)", OPT_NEUTRAL },
        { "--naive", OPT_FLAG, &po.patch.naive, 0, NULL, "one hooked full forward per patch (the reference path)", OPT_NEUTRAL },
        CLI_STUDY_TAIL_OPTS(s),
    };
    return cli_study_run(&s, o, CLI_N(o), argc, argv);
}

static int cmd_path_patch(int argc, char **argv)
{
    hs_path_patch_opts po = { 0 };
    cli_study s = CAUSAL_STUDY(hs_path_patch_kind, po, print_path_patch);
    opt o[] = {
        CAUSAL_OPTS(s),
        { "--senders", OPT_STR, &po.senders, 0, "L.H,..|all", "sender heads, each patched on its own", 0 },
        { "--receivers", OPT_STR, &po.receivers, 0, "L.H:q|k|v,..", "receivers' inputs, patched together (default: the logits)", 0 },
        OPT_BATCH_AS(&s.in.batch, "prompts per forward (default 64)"),
        CLI_STUDY_TAIL_OPTS(s),
    };
    return cli_study_run(&s, o, CLI_N(o), argc, argv);
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
        "change; stderr by the delta method (SPEC §21): sd(dP_i - value D_i) / sqrt(n) / |gap|.\n"
        "Rows: head_metrics patch_z, patch_pattern (n = prompts), logit_diff_clean,\n"
        "logit_diff_corrupt, logit_diff_gap, premise_ok (layer = head = -1); position_metrics\n"
        "patch_resid_pre, patch_attn_out, patch_mlp_out at positions 0..T-1 (one length only).\n"
        "A gap within 2 stderr of 0 fails the run (--allow-weak-premise: marked not established).\n\n"
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
        "with stderr and premise as patch's. Rows in head_metrics at each sender head.\n\n"
        "example: headscope path-patch --model runs/tiny --prompts ioi.jsonl --db runs.db \\\n"
        "           --senders all --receivers 3.0:q,3.1:q\n",
    .run = cmd_path_patch,
};
