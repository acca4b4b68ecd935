/* head-norms: how much each head writes into the residual stream. */
#include <stdio.h>

#include "cli.h"
#include "study.h"
#include "study_head_norms.h"

CLI_PRINT(head_norms)

static int cmd_head_norms(int argc, char **argv)
{
    hs_head_norms_opts ho = { .seed = 1 };
    int control = 0; /* head-norms always has its control */
    cli_study s = { &hs_head_norms_kind, &ho, { .batch = 4, .need_batch = 1 },
                    .flags = CLI_NEEDS_DATA | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = print_head_norms };
    opt o[] = {
        CLI_STUDY_DATA_OPTS(s),
        OPT_BATCH(&s.in.batch),
        OPT_SEQ_LEN(&s.in.seq_len),
        OPT_MAX_BATCHES(&s.max_batches),
        { "--seed", OPT_LONG, &ho.seed, 0, "S", "seed of the random-init control", 0 },
        { "--control", OPT_FLAG, &control, 0, NULL, "the random-init control (always computed: accepted as patterns takes it)", 0 },
        CLI_STUDY_TAIL_OPTS(s),
    };
    return cli_study_run(&s, o, CLI_N(o), argc, argv);
}

static const opt_rule head_norms_rules[] = {
    OPT_TEXT_RULES,
};

HS_COMMAND(cmd_head_norms_record) = {
    .name = "head-norms",
    .order = 145,
    .summary = "How much each head writes into the residual stream (Kobayashi et al.), with a control.",
    .usage = "headscope head-norms --model DIR (--data FILE | --text FILE) --db FILE [options]",
    .details = "head_output_norm = mean over sequences of each sequence's mean over positions of\n"
        "the L2 norm of z_h W_O^h, the head's output as it enters the residual stream\n"
        "(before any output norm; an encoder's padding left out); head_output_norm_control\n"
        "the same of a random-init model of the same configuration (--seed). A size, not a\n"
        "cause: ablate or patch says whether the model needs the head.\n\n"
        "example: headscope head-norms --model runs/tiny --data val.bin --db runs.db\n",
    .run = cmd_head_norms,
    OPT_RULES(head_norms_rules),
};
