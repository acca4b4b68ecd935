/* The headscope command: dispatch and help (SPEC §8). Exit 0 on success, 1 on
 * failure, 2 on a usage error; errors as "headscope: CONTEXT: MESSAGE". */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common.h"

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const command cmd_help_record = {
    .name = "help",
    .summary = "Show the commands, or one command's options.",
    .usage = "headscope help [COMMAND]",
    .run = cmd_help,
};
static const command cmd_version_record = {
    .name = "version",
    .summary = "Print the version and the numeric precision of this build.",
    .usage = "headscope version [--json]",
    .details = "example: headscope version --json\n",
    .run = cmd_version,
};
/* plot's and report's records, until they move beside their commands */
const command cmd_plot_record = {
    .name = "plot",
    .summary = "Render maps and index results with gnuplot (PNG, or SVG for .svg outputs).",
    .usage = "headscope plot (map|grid|scores|curve|causal) [options] --out FILE",
    .details = "  plot map    --maps F.h5 --layer L --head H [--seq N]   one head's map, token labels\n"
        "  plot grid   --maps F.h5 [--seq N]                      layer x head small multiples\n"
        "  plot scores --db F --metric NAME [--run ID]           per-head score grid\n"
        "  plot scores --db F --metric NAME --control            score beside its random-init control\n"
        "  plot curve  --db F --curve NAME [--run ID]            a curve (e.g. train_loss)\n"
        "  plot causal --db F [--run ID]                         induction causal check: targeted\n"
        "                                                        heads' loss increase vs random draws\n"
        "The gnuplot scripts are scripts/plot_*.gp (HEADSCOPE_SCRIPTS overrides where).\n\n"
        "example: headscope plot map --maps maps.h5 --layer 1 --head 0 --out head.png\n",
    .run = cmd_plot,
};
const command cmd_report_record = {
    .name = "report",
    .summary = "Write a static HTML report (index.html + gnuplot figures) of an index.",
    .usage = "headscope report --db FILE --out DIR [options]",
    .details = "Sections: the induction claim with its causal check and the score grids beside\n"
        "their random-init controls; attention maps of the heads the scores single out\n"
        "(from the latest 'capture --db' run, or --maps); ablation, importance, pruning\n"
        "(curve and latency), pattern statistics, head-count experiments, training curves,\n"
        "and every run with its provenance. Each section uses the latest complete run of\n"
        "its kind; each figure is captioned with what it shows and what it does not.\n"
        "index.html is written under a temporary name and renamed when complete.\n\n"
        "example: headscope report --db runs.db --out report && xdg-open report/index.html\n",
    .run = cmd_report,
};

/* The commands in the order `headscope help` lists them; each record is
 * defined beside its command (cli/cmd_*.c). */
static const command *const COMMANDS[] = {
    &cmd_help_record,
    &cmd_version_record,
    &cmd_info_record,
    &cmd_tokens_record,
    &cmd_train_record,
    &cmd_eval_record,
    &cmd_capture_record,
    &cmd_maps_record,
    &cmd_plot_record,
    &cmd_ablate_record,
    &cmd_importance_record,
    &cmd_prune_record,
    &cmd_induction_record,
    &cmd_patterns_record,
    &cmd_experiment_record,
    &cmd_report_record,
    &cmd_kv_bytes_record,
};
enum { NCOMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

static const command *find_command(const char *name)
{
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(COMMANDS[i]->name, name))
            return COMMANDS[i];
    return NULL;
}

static void overview(FILE *f)
{
    fprintf(f, "usage: headscope COMMAND [options]\n\n"
               "headscope: attention-head interpretability on the CPU.\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i]->name, COMMANDS[i]->summary);
    fprintf(f, "\nRun 'headscope help COMMAND' for a command's options and an example.\n"
               "An option's value follows it or an '=': --model DIR or --model=DIR.\n");
}

static int cmd_version(int argc, char **argv)
{
    int json = 0;
    opt o[] = { OPT_JSON(&json) };
    int rc = opts_parse("version", o, 1, argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (json)
        printf("{\"version\":\"%s\",\"precision\":\"%s\"}\n", HS_VERSION, HS_REAL_NAME);
    else
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
    if (c->run == cmd_help) {
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
