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
      "headscope tokens --in TEXT --out FILE.bin [--force]",
      "example: headscope tokens --in corpus.txt --out corpus.bin\n", cmd_tokens },
    { "train", "Train a model from a preset or a checkpoint with Adam (AdamW with --weight-decay).",
      "headscope train --out DIR (--preset P [KEY=VALUE ...] | --init DIR) --data FILE [options]",
      "Batches follow llm.c: step i reads B*T+1 tokens from i*B*T, wrapping to the start.\n"
      "The loss is the mean over the batch's B*T targets. Defaults add nothing unasked:\n"
      "constant learning rate, no clipping, no decay. Ctrl-C stops after the current step\n"
      "and saves it (exit 1).\n\n"
      "example: headscope train --preset attn-only n_layer=2 n_head=4 --data corpus.bin \\\n"
      "           --out runs/tiny --steps 500 --batch 8 --seq-len 64 --val val.bin --db runs.db\n",
      cmd_train },
    { "eval", "Mean next-token loss of a model on a token shard, with its standard error.",
      "headscope eval --model DIR --data FILE [options]",
      "stderr is the sample standard deviation of per-sequence mean losses over sqrt(n).\n\n"
      "example: headscope eval --model runs/tiny --data val.bin --batch 8 --seq-len 64 --json\n",
      cmd_eval },
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
