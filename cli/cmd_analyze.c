/* ablate, importance, prune: the analyses of SPEC §5 into the index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>

#include "ablate.h"
#include "cli.h"
#include "importance.h"
#include "study.h"
#include "study_ablate.h"
#include "study_importance.h"
#include "study_prune.h"

/* ---- ablate ------------------------------------------------------------------ */

CLI_PRINT(ablate)

static int cmd_ablate(int argc, char **argv)
{
    hs_mlm_opts mlm = HS_MLM_OPTS_UNSET;
    hs_ablate_study_opts so = { .method = "zero,mean,resample" };
    cli_study s = { &hs_ablate_kind, &so, { .batch = 4, .need_batch = 1, .mlm = &mlm, .allow_pairs = 1 },
                    .flags = CLI_NEEDS_DATA | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = print_ablate };
    opt o[] = {
        CLI_STUDY_DATA_OPTS(s),
        { "--method", OPT_STR, &so.method, 0, "LIST", "zero, mean and/or resample, comma-separated", 0 },
        { "--layers", OPT_STR, &so.layers, 0, "L,L,...", "layers to ablate (default: all)", 0 },
        { "--heads", OPT_STR, &so.heads, 0, "H,H,...", "heads to ablate in those layers (default: all)", 0 },
        CLI_STUDY_TASK_OPTS(s),
        OPT_PAIRS(&s.in.pairs),
        OPT_BATCH(&s.in.batch),
        OPT_SEQ_LEN(&s.in.seq_len),
        OPT_MAX_BATCHES(&s.max_batches),
        { "--resume", OPT_LONG, &s.resume, 1, "RUN_ID", "finish an interrupted run, skipping recorded layers", 0 },
        { "--stack", OPT_INT, &so.stack, 0, "N", "ablations per batched continuation (0: choose)", OPT_NEUTRAL },
        { "--naive", OPT_FLAG, &so.naive, 0, NULL, "one full forward per ablation (the reference path)", OPT_NEUTRAL },
        OPT_MLM(&mlm),
        CLI_STUDY_TAIL_OPTS(s),
    };
    return cli_study_run(&s, o, CLI_N(o), argc, argv);
}

/* ---- importance ---------------------------------------------------------------- */

CLI_PRINT(importance)

static int cmd_importance(int argc, char **argv)
{
    hs_mlm_opts mlm = HS_MLM_OPTS_UNSET;
    hs_importance_opts io = { 0 };
    cli_study s = { &hs_importance_kind, &io, { .batch = 4, .need_batch = 1, .mlm = &mlm, .allow_pairs = 1 },
                    .flags = CLI_NEEDS_DATA | CLI_STOPPABLE | CLI_MANY_FORWARDS | CLI_TIMED, .print = print_importance };
    opt o[] = {
        CLI_STUDY_DATA_OPTS(s),
        CLI_STUDY_TASK_OPTS(s),
        OPT_PAIRS(&s.in.pairs),
        OPT_BATCH(&s.in.batch),
        OPT_SEQ_LEN(&s.in.seq_len),
        OPT_MAX_BATCHES(&s.max_batches),
        OPT_MLM(&mlm),
        CLI_STUDY_TAIL_OPTS(s),
    };
    return cli_study_run(&s, o, CLI_N(o), argc, argv);
}

/* ---- prune ------------------------------------------------------------------------ */

typedef struct {
    int json;
    cli_progress bar; /* over the steps */
    const hs_prune_study_opts *so;
} prune_ctx;

static void prune_step(void *ctx, int step, int pruned, double fraction, double loss,
                       double stderr_loss)
{
    prune_ctx *p = ctx;
    const hs_prune_opts *po = &p->so->prune;
    if (step == 0) /* steps: 0 (unpruned), then one per step_percent up to max_percent */
        cli_progress_start(&p->bar, "prune", (long)ceil(po->max_percent / po->step_percent - 1e-9));
    char line[128];
    snprintf(line, sizeof line, "step %d: %d head%s pruned (%.1f%%), loss %.4f ± %.4f",
             step, pruned, pruned == 1 ? "" : "s", 100 * fraction, loss, stderr_loss);
    if (p->bar.enabled)
        cli_progress_update(&p->bar, step, line);
    else if (!p->json)
        fprintf(stderr, "%s\n", line);
}

CLI_PRINT(prune)

static int cmd_prune(int argc, char **argv)
{
    hs_mlm_opts mlm = HS_MLM_OPTS_UNSET;
    hs_prune_study_opts so = { .prune = { .step_percent = 10, .max_percent = 50 } };
    const char *lambdas = NULL;
    hs_prune_opts *po = &so.prune;
    cli_study s = { &hs_prune_kind, &so, { .batch = 4, .need_batch = 1, .mlm = &mlm, .allow_pairs = 1 },
                    .flags = CLI_NEEDS_DATA | CLI_STOPPABLE | CLI_MANY_FORWARDS, .print = print_prune };
    prune_ctx pc = { .so = &so };
    so.on_step = prune_step, so.ctx = &pc;
    opt o[] = {
        OPT_MODEL(&s.in.model),
        OPT_DATA_AS(&s.in.source.data, "token shard for the importance"),
        OPT_TEXT(&s.in.source.text),
        OPT_LINES(&s.in.source.lines),
        OPT_TOKENIZER(&s.in.source.tokenizer),
        OPT_DB_AS(&s.db, "SQLite index for the curve and the mask"),
        { "--val", OPT_STR, &s.in.val.data, 0, "FILE.bin", "validation shard (default: --data)", 0 },
        OPT_TEXT_AS(&s.in.val.text, "--val-text", "validation text, tokenized as --text is"),
        { "--step-percent", OPT_DOUBLE, &po->step_percent, 0, "P", "step k prunes to floor(k*P*N/100) of the N heads", 0 },
        { "--max-percent", OPT_DOUBLE, &po->max_percent, 0, "P", "stop once P% of the heads are pruned (100: every head may go)", 0 },
        { "--min-heads-per-layer", OPT_INT, &po->min_heads_per_layer, 0, "K", "heads every layer keeps", 0 },
        { "--one-shot", OPT_FLAG, &po->one_shot, 0, NULL, "rank by the unpruned model's importance only", 0 },
        { "--out", OPT_STR, &so.out, 0, "DIR", "write the pruned model (W_o columns of pruned heads zeroed)", 0 },
        { "--structural", OPT_FLAG, &so.structural, 0, NULL, "with --out: remove the pruned heads (a smaller model)", 0 },
        { "--force", OPT_FLAG, &so.force, 0, NULL, "overwrite a checkpoint in --out", 0 },
        CLI_STUDY_TASK_OPTS(s),
        { "--method", OPT_STR, &so.method, 0, "NAME", "importance (default) or l0: hard-concrete head gates (Voita et al.; --pairs: of each type)", 0 },
        { "--lambda", OPT_STR, &lambdas, 0, "L,L,...", "l0: the penalty's weights, one run each", 0 },
        { "--steps", OPT_INT, &so.l0.steps, 0, "S", "l0: Adam steps (default 500)", 0 },
        { "--lr", OPT_DOUBLE, &so.l0.lr, 0, "LR", "l0: Adam's learning rate on log alpha (default 0.1)", 0 },
        { "--train-model", OPT_FLAG, &so.l0.train_model, 0, NULL, "l0: train the weights too", 0 },
        OPT_PAIRS(&s.in.pairs),
        { "--attn", OPT_STR, &so.attn, 0, "LIST", "with --pairs: the attention types pruned jointly, enc,dec,cross (default: all)", 0 },
        OPT_BATCH(&s.in.batch),
        OPT_SEQ_LEN(&s.in.seq_len),
        OPT_MAX_BATCHES_AS(&s.max_batches, "batches per evaluation (0: all)"),
        OPT_MLM(&mlm),
        CLI_STUDY_TAIL_OPTS(s),
    };
    int rc = cli_study_parse(&s, o, CLI_N(o), argc, argv);
    pc.json = s.json, so.l0.seed = mlm.seed < 0 ? 0 : (unsigned long long)mlm.seed;
    double lambda[64];
    const int nl = lambdas ? hs_parse_doubles(lambdas, lambda, 64) : 1;
    if (!rc && nl < 1)
        return cli_usage_error("prune", "--lambda '%s': up to 64 numbers, comma-separated", lambdas);
    for (int i = 0; !rc && i < nl; i++) { /* one run per lambda */
        so.l0.lambda = lambdas ? lambda[i] : -1;
        rc = cli_study_go(&s, o, CLI_N(o), argc, argv);
    }
    cli_progress_finish(&pc.bar);
    return rc < 0 ? 0 : rc;
}

static const opt_rule ablate_rules[] = {
    OPT_TASK_RULES,
    OPT_MLM_RULE,
    { "--naive", OPTS_EXCLUDES, "--stack", "the naive path runs one full forward per ablation" },
};

static const opt_rule importance_rules[] = {
    OPT_TASK_RULES,
    OPT_MLM_RULE,
};

static const opt_rule prune_rules[] = {
    OPT_TEXT_RULE_DATA,
    { "--text|--val-text|--task|--pairs", OPTS_NEEDS, "--tokenizer", "it tokenizes the text" },
    { "--val-text", OPTS_EXCLUDES, "--val", "one validation set" },
    { "--task", OPTS_EXCLUDES, "--data,--text,--val,--val-text,--mlm-prob,--mlm-mask",
      "a task's examples are its own" },
    { "--task", OPTS_NEEDS, "--metric,--truncate,--label-map", "they concern a task" },
    { "--method", OPTS_NEEDS, "--lambda,--steps,--lr,--train-model", "they concern --method l0" },
    OPT_MLM_RULE,
    { "--out", OPTS_NEEDS, "--structural,--force", "they concern the written model" },
    { "--pairs", OPTS_NEEDS, "--attn", "it selects an encoder-decoder's attention types" },
};

HS_COMMAND(cmd_ablate_record) = {
    .name = "ablate",
    .flags = CMD_SHARDS,
    .order = 100,
    .summary = "Loss delta of zero, mean and resample ablation of every head (an encoder-decoder's: of each attention type), into the index.",
    .usage = "headscope ablate --model DIR (--data FILE | --text FILE) --db FILE [options]",
    .details = "For head (l,h): zero sets its output z to 0, mean to its mean over the data,\n"
        "resample to z of the next sequence of the batch. loss_delta_<kind> = ablated -\n"
        "clean loss, with the standard error of the per-sequence differences (SPEC §5).\n"
        "Layers below l are not recomputed; layer l changes by (z'-z) W_o; ablations run\n"
        "stacked through the layers above. Ctrl-C or a crash leaves complete layers in\n"
        "the index; --resume RUN_ID finishes the run with the same numbers.\n\n"
        "example: headscope ablate --model runs/tiny --data val.bin --db runs.db \\\n"
        "           --batch 8 --seq-len 64 --method zero,mean\n",
    .run = cmd_ablate,
    OPT_RULES(ablate_rules),
};

HS_COMMAND(cmd_importance_record) = {
    .name = "importance",
    .flags = CMD_SHARDS,
    .order = 110,
    .summary = "Gradient head importance (Michel et al.), raw and layer-normalised; an encoder-decoder's by attention type.",
    .usage = "headscope importance --model DIR (--data FILE | --text FILE) --db FILE [options]",
    .details = "importance_raw = mean over sequences of |dL_n/dxi| (L_n: the summed token loss of\n"
        "sequence n, xi the head gate at 1); importance = each layer's vector over its L2\n"
        "norm. One backward per batch.\n\n"
        "example: headscope importance --model runs/tiny --data val.bin --db runs.db\n",
    .run = cmd_importance,
    OPT_RULES(importance_rules),
};

HS_COMMAND(cmd_prune_record) = {
    .name = "prune",
    .order = 120,
    .summary = "Iterative joint head pruning by importance (an encoder-decoder's over its three attention types); curve and mask into the index.",
    .usage = "headscope prune --model DIR (--data FILE | --text FILE) --db FILE [options]",
    .details = "Step k prunes the least important heads until floor(k*P*N/100) of the N heads are\n"
        "gated off, recomputing importance on the pruned model each step (--one-shot:\n"
        "once). The validation loss after every step goes to curve 'pruning' (x = fraction\n"
        "pruned); the final mask to metric 'pruned'. --out DIR --structural writes a smaller\n"
        "model without the pruned heads (gating alone makes nothing faster).\n\n"
        "example: headscope prune --model runs/tiny --data train.bin --val val.bin \\\n"
        "           --db runs.db --step-percent 25 --out runs/pruned --structural\n",
    .run = cmd_prune,
    OPT_RULES(prune_rules),
};
