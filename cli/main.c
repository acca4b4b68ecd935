/* The headscope command: dispatch and help (SPEC §8). Exit 0 on success, 1 on
 * failure, 2 on a usage error; errors as "headscope: CONTEXT: MESSAGE". */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const command COMMANDS[] = {
    { "help", "Show the commands, or one command's options.", "headscope help [COMMAND]", NULL,
      cmd_help },
    { "version", "Print the version and the numeric precision of this build.",
      "headscope version", NULL, cmd_version },
    { "info", "Describe a checkpoint: configuration, parameters, heads per layer, KV-cache bytes.",
      "headscope info --model DIR [--json]", "example: headscope info --model runs/tiny\n",
      cmd_info },
    { "tokens", "Write a byte-level token shard (vocabulary 256) from any file.",
      "headscope tokens --in TEXT --out FILE.bin [options]",
      "With --repeat-share P --seq-len T the bytes are read as sequences of T (the\n"
      "ones a batch of T reads) and a share P of them gets a segment (--repeat-len,\n"
      "default 8:T/2 tokens) copied right after itself, at a random place; with\n"
      "--random-share Q a share Q of those segments is uniform random bytes first,\n"
      "so only copying can predict the repeat: data on which induction heads form.\n\n"
      "example: headscope tokens --in corpus.txt --out corpus.bin\n"
      "example: headscope tokens --in corpus.txt --out mixed.bin --repeat-share 0.5 --seq-len 64\n",
      cmd_tokens },
    { "train", "Train a model from a preset or a checkpoint with Adam (AdamW with --weight-decay).",
      "headscope train --out DIR (--preset P [KEY=VALUE ...] | --init DIR) --data FILE [options]",
      "Batches follow llm.c: step i reads B*T+1 tokens from i*B*T, wrapping to the start.\n"
      "The loss is the mean over the batch's B*T targets. Defaults add nothing unasked:\n"
      "constant learning rate, no clipping, no decay. Ctrl-C stops after the current step\n"
      "and saves it (exit 1).\n"
      "KEY=VALUE overrides may come in any order: n_kv_head and head_dim (gpt2: d_ff)\n"
      "follow n_head and d_model unless given, so 'n_kv_head=1 n_head=8' is MQA.\n\n"
      "example: headscope train --preset attn-only n_layer=2 n_head=4 --data corpus.bin \\\n"
      "           --out runs/tiny --steps 500 --batch 8 --seq-len 64 --val val.bin --db runs.db\n",
      cmd_train },
    { "eval", "Mean next-token loss of a model on a token shard, with its standard error.",
      "headscope eval --model DIR --data FILE [options]",
      "stderr is the sample standard deviation of per-sequence mean losses over sqrt(n).\n\n"
      "example: headscope eval --model runs/tiny --data val.bin --batch 8 --seq-len 64 --json\n",
      cmd_eval },
    { "capture", "Run forwards and stream every per-head attention map to HDF5 (SPEC §6).",
      "headscope capture --model DIR --data FILE --out FILE.h5 [options]",
      "The file is written under a temporary name and renamed when complete; Ctrl-C\n"
      "stops cleanly and leaves nothing. Memory holds one batch's maps of one layer.\n\n"
      "example: headscope capture --model runs/tiny --data val.bin --out maps.h5 \\\n"
      "           --batch 4 --seq-len 64 --max-batches 8 --dtype f16\n",
      cmd_capture },
    { "maps", "List what a map file holds (layers, shapes, dtype, provenance) and check it.",
      "headscope maps FILE.h5 [--json]", "Exits 1 when the file is not marked complete.\n\n"
      "example: headscope maps maps.h5\n", cmd_maps },
    { "plot", "Render maps and index results with gnuplot (PNG, or SVG for .svg outputs).",
      "headscope plot (map|grid|scores|curve|causal) [options] --out FILE",
      "  plot map    --maps F.h5 --layer L --head H [--seq N]   one head's map, token labels\n"
      "  plot grid   --maps F.h5 [--seq N]                      layer x head small multiples\n"
      "  plot scores --db F --metric NAME [--run ID]           per-head score grid\n"
      "  plot scores --db F --metric NAME --control            score beside its random-init control\n"
      "  plot curve  --db F --curve NAME [--run ID]            a curve (e.g. train_loss)\n"
      "  plot causal --db F [--run ID]                         induction causal check: targeted\n"
      "                                                        heads' loss increase vs random draws\n"
      "The gnuplot scripts are scripts/plot_*.gp (HEADSCOPE_SCRIPTS overrides where).\n\n"
      "example: headscope plot map --maps maps.h5 --layer 1 --head 0 --out head.png\n",
      cmd_plot },
    { "ablate", "Loss delta of zero, mean and resample ablation of every head, into the index.",
      "headscope ablate --model DIR --data FILE --db FILE [options]",
      "For head (l,h): zero sets its output z to 0, mean to its mean over the data,\n"
      "resample to z of the next sequence of the batch. loss_delta_<kind> = ablated -\n"
      "clean loss, with the standard error of the per-sequence differences (SPEC §5).\n"
      "Layers below l are not recomputed; layer l changes by (z'-z) W_o; ablations run\n"
      "stacked through the layers above. Ctrl-C or a crash leaves complete layers in\n"
      "the index; --resume RUN_ID finishes the run with the same numbers.\n\n"
      "example: headscope ablate --model runs/tiny --data val.bin --db runs.db \\\n"
      "           --batch 8 --seq-len 64 --method zero,mean\n",
      cmd_ablate },
    { "importance", "Gradient head importance (Michel et al.), raw and layer-normalised.",
      "headscope importance --model DIR --data FILE --db FILE [options]",
      "importance_raw = mean over sequences of |dL_n/dxi| (L_n: the summed token loss of\n"
      "sequence n, xi the head gate at 1); importance = each layer's vector over its L2\n"
      "norm. One backward per batch.\n\n"
      "example: headscope importance --model runs/tiny --data val.bin --db runs.db\n",
      cmd_importance },
    { "prune", "Iterative joint head pruning by importance; curve and mask into the index.",
      "headscope prune --model DIR --data FILE --db FILE [options]",
      "Step k prunes the least important heads until floor(k*P*N/100) of the N heads are\n"
      "gated off, recomputing importance on the pruned model each step (--one-shot:\n"
      "once). The validation loss after every step goes to curve 'pruning' (x = fraction\n"
      "pruned); the final mask to metric 'pruned'. --out DIR --structural writes a smaller\n"
      "model without the pruned heads (gating alone makes nothing faster).\n\n"
      "example: headscope prune --model runs/tiny --data train.bin --val val.bin \\\n"
      "           --db runs.db --step-percent 25 --out runs/pruned --structural\n",
      cmd_prune },
    { "induction", "Induction, duplicate-token, previous-token and OV copying scores, with controls.",
      "headscope induction --model DIR --db FILE [options]",
      "On sequences r ++ r of uniformly random tokens (positions 0..2T-1): induction =\n"
      "mean over i of att[T+i, i+1]; duplicate_token = mean att[T+i, i]; prev_token =\n"
      "mean att[t, t-1]; copying = sum Re(lambda) / sum |lambda| of the head's OV circuit\n"
      "W_E W_V W_O W_U. Each also on a randomly initialised model of the same\n"
      "configuration (metric suffix _control), with standard errors over the samples.\n\n"
      "example: headscope induction --model runs/tiny --db runs.db --seq-len 32 --samples 64\n",
      cmd_induction },
    { "patterns", "Clark et al. attention statistics per head, row by row during the forward.",
      "headscope patterns (--model DIR --data FILE | --maps FILE.h5) --db FILE [options]",
      "entropy (nats), self, prev_token, next_token, first_token, delim (--delim ids) and\n"
      "distance, each the mean over every query of every sequence, with the standard\n"
      "error over sequences. The forward path sees one block of query rows at a time,\n"
      "so long contexts need no T x T buffer; --maps gives the same numbers from a\n"
      "capture file. --js-out also writes the head-to-head Jensen-Shannon distance\n"
      "matrix (mean over queries of sqrt(JSD)); from the forward it keeps one\n"
      "sequence's maps of every head, so use --maps for very long contexts.\n\n"
      "example: headscope patterns --model runs/tiny --data val.bin --db runs.db --delim 10,46\n",
      cmd_patterns },
    { "experiment", "head-count: train one architecture with several head counts, shared init.",
      "headscope experiment head-count (--preset P [KEY=VALUE ...]) --data FILE --db FILE [options]",
      "Every head count starts from the same initial weights per seed (the projections do\n"
      "not change shape with H when head_dim = d/H), trains the same steps on the same\n"
      "data, and is scored on a held-out split (the last 10% of --data unless --val).\n"
      "Records curves train_loss_heads_H_seed_S and per head count val_loss_heads_H\n"
      "(mean, stderr over seeds) and forward_ms_heads_H.\n\n"
      "example: headscope experiment head-count --preset attn-only --data corpus.bin \\\n"
      "           --db runs.db --heads 1,2,4,8 --seeds 1,2,3 --steps 300\n",
      cmd_experiment },
    { "report", "Write a static HTML report (index.html + gnuplot figures) of an index.",
      "headscope report --db FILE --out DIR [options]",
      "Sections: the induction claim with its causal check and the score grids beside\n"
      "their random-init controls; attention maps of the heads the scores single out\n"
      "(from the latest 'capture --db' run, or --maps); ablation, importance, pruning\n"
      "(curve and latency), pattern statistics, head-count experiments, training curves,\n"
      "and every run with its provenance. Each section uses the latest complete run of\n"
      "its kind; each figure is captioned with what it shows and what it does not.\n"
      "index.html is written under a temporary name and renamed when complete.\n\n"
      "example: headscope report --db runs.db --out report && xdg-open report/index.html\n",
      cmd_report },
    { "kv-bytes", "KV-cache size: 2*B*N*G*T*DH*E bytes, and MLA's (latent + rope) per token.",
      "headscope kv-bytes --layers N --kv-heads G --head-dim DH --seq-len T [options]",
      "example: headscope kv-bytes --layers 80 --kv-heads 8 --head-dim 128 --seq-len 2048\n",
      cmd_kv_bytes },
};
enum { NCOMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

static const command *find_command(const char *name)
{
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(COMMANDS[i].name, name))
            return &COMMANDS[i];
    return NULL;
}

static void overview(FILE *f)
{
    fprintf(f, "usage: headscope COMMAND [options]\n\n"
               "headscope: attention-head interpretability on the CPU.\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(f, "\nRun 'headscope help COMMAND' for a command's options and an example.\n");
}

static int cmd_version(int argc, char **argv)
{
    (void)argc, (void)argv;
    printf("headscope %s (%s)\n", HS_VERSION, HS_REAL_NAME);
    return 0;
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        overview(stdout);
        return 0;
    }
    const command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "headscope: help: unknown command '%s' (see 'headscope help')\n", argv[1]);
        return EXIT_USAGE;
    }
    if (c->run == cmd_help || c->run == cmd_version) {
        printf("usage: %s\n\n%s\n", c->usage, c->summary);
        return 0;
    }
    cli_current = c;
    char *help_argv[] = { argv[1], "--help", NULL };
    return c->run(2, help_argv);
}

int main(int argc, char **argv)
{
    hs_runtime_init(argc, argv); /* passive OpenMP waits, threads from the affinity mask */
    if (argc < 2) {
        overview(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return cmd_help(1, argv);
    if (!strcmp(argv[1], "--version"))
        return cmd_version(0, NULL);
    const command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "headscope: unknown command '%s' (see 'headscope help')\n", argv[1]);
        return EXIT_USAGE;
    }
    cli_current = c;
    return c->run(argc - 1, argv + 1);
}
