/* plot: gnuplot renderings (PNG, SVG or PDF by the output's suffix) of map
 * files and of the index (render/plot.h draws them; the scripts in scripts/
 * are usable on their own). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gnuplot.h"
#include "plot.h"

/* An option given that the kind would ignore, or a missing one: the usage
 * error (exit 2), else 0. */
static int check_kind(const hs_plot_kind *k, const opt *o, int n, const hs_plot_request *rq)
{
    for (int i = 0; i < n; i++) {
        char word[40];
        snprintf(word, sizeof word, " %s ", o[i].name);
        if (o[i].flags & OPT_SEEN && strcmp(o[i].name, "--out") && strcmp(o[i].name, "--json") &&
            !strstr(k->options, word))
            return cli_usage_error("plot",
                                   "%s does not apply to plot %s (it takes%s--out and "
                                   "--json)",
                                   o[i].name, k->name, k->options);
    }
    const int maps = strstr(k->options, " --maps ") != NULL;
    const int needs = !maps && k->required;
    if (maps ? !rq->maps : !rq->db || (needs && !(rq->metric || rq->curve)))
        return cli_usage_error("plot", "plot %s needs %s%s%s", k->name,
                               maps ? "--maps FILE.h5" : "--db FILE", needs ? " and " : "",
                               needs ? k->required : "");
    if (!rq->out)
        return cli_usage_error("plot", "--out FILE is required");
    const char *fmt = hs_plot_format(rq->out);
    if (!fmt)
        return cli_usage_error("plot", "--out %s: unknown format; name the file .png, .svg or .pdf",
                               rq->out);
    if (!strcmp(fmt, "pdf") && !hs_plot_pdf_available())
        return cli_usage_error("plot",
                               "--out %s: this gnuplot has no PDF terminal (pdfcairo); "
                               "name the file .png or .svg",
                               rq->out);
    return 0;
}

/* "map, grid, ... or composition" */
static void kind_list(char *out, size_t n)
{
    int nk;
    const hs_plot_kind *k = hs_plot_kinds(&nk);
    size_t len = 0;
    for (int i = 0; i < nk && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%s", !i ? "" : i + 1 < nk ? ", " : " or ",
                                k[i].name);
}

static int cmd_plot(int argc, char **argv)
{
    hs_plot_request rq = { 0 };
    long seq = 0, run = 0;
    int json = 0;
    opt o[] = {
        { "--maps", OPT_STR, &rq.maps, 0, "FILE.h5", "map file (plot map, plot grid)", 0 },
        { "--layer", OPT_INT, &rq.layer, 0, "L", "layer (plot map)", 0 },
        { "--head", OPT_INT, &rq.head, 0, "H", "head (plot map)", 0 },
        { "--seq", OPT_LONG, &seq, 0, "N", "sequence number in the file", 0 },
        { "--db", OPT_STR, &rq.db, 0, "FILE", "index (plot scores, plot curve)", 0 },
        { "--metric", OPT_STR, &rq.metric, 0, "NAME", "head metric (plot scores)", 0 },
        { "--curve", OPT_STR, &rq.curve, 0, "NAME", "curve (plot curve)", 0 },
        { "--run", OPT_LONG, &run, 0, "ID", "run id (default: the latest with that name)", 0 },
        { "--control", OPT_FLAG, &rq.control, 0, NULL, "plot scores: draw METRIC_control beside it", 0 },
        { "--out", OPT_STR, &rq.out, 0, "FILE", "output: FILE.png, FILE.svg or FILE.pdf", 0 },
        OPT_JSON(&json),
    };
    const int n = CLI_N(o);
    char kinds[256];
    kind_list(kinds, sizeof kinds);
    if (argc < 2 || argv[1][0] == '-') {
        int rc = cli_opts_parse("plot", o, n, argc, argv, NULL, 0, NULL);
        return rc < 0 ? 0 : cli_usage_error("plot", "a kind is required: %s", kinds);
    }
    rq.kind = argv[1];
    int rc = cli_opts_parse("plot", o, n, argc - 1, argv + 1, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    const hs_plot_kind *k = hs_plot_kind_find(rq.kind);
    if (!k)
        return cli_usage_error("plot", "unknown kind '%s' (%s)", rq.kind, kinds);
    rq.seq = seq, rq.run = run;
    if ((rc = check_kind(k, o, n, &rq)))
        return rc;
    if (hs_plot(&rq))
        return cli_run_error("plot");
    if (json) {
        printf("{\"out\":");
        hs_json_string(stdout, rq.out);
        printf(",\"kind\":");
        hs_json_string(stdout, rq.kind);
        printf("}\n");
    } else {
        printf("wrote %s\n", rq.out);
    }
    return 0;
}

HS_COMMAND(cmd_plot_record) = {
    .name = "plot",
    .order = 90,
    .summary = "Render maps and index results with gnuplot (PNG, SVG or PDF by the --out suffix).",
    .usage = "headscope plot (map|grid|scores|curve|causal|patch|dla|lens|composition|circuit|atp) [options] --out FILE",
    .details = "  plot map    --maps F.h5 --layer L --head H [--seq N]   one head's map, token labels\n"
        "  plot grid   --maps F.h5 [--seq N]                      layer x head small multiples\n"
        "  plot scores --db F --metric NAME [--run ID]           per-head score grid\n"
        "  plot scores --db F --metric NAME --control            score beside its random-init control\n"
        "  plot curve  --db F --curve NAME [--run ID]            a curve (e.g. train_loss)\n"
        "  plot causal --db F [--run ID]                         induction causal check: targeted\n"
        "                                                        heads' loss increase vs random draws\n"
        "  plot patch  --db F [--metric patch_resid_pre|patch_attn_out|patch_mlp_out] [--run ID]\n"
        "                      activation patching, layer x position, the prompt's tokens as labels\n"
        "  plot dla    --db F [--run ID]        direct logit attribution: heads, MLPs, biases, sorted\n"
        "  plot lens   --db F [--run ID]        logit lens: loss (and logit difference) per layer\n"
        "  plot composition --db F [--metric q_composition|k_composition|v_composition] [--run ID]\n"
        "                      heads x heads composition scores beside the random-init control\n"
        "  plot circuit --db F [--metric eap|eap_ig] [--run ID]   a circuit's top edges (Graphviz)\n"
        "  plot atp    --db F [--metric atp_z|atp_pattern] [--run ID]   AtP against patch --verify\n"
        "Per-head patching and attribution grids: plot scores --metric patch_z|patch_pattern|\n"
        "path_patch|dla.\n"
        "The gnuplot scripts are scripts/plot_*.gp (HEADSCOPE_SCRIPTS overrides where).\n\n"
        "example: headscope plot map --maps maps.h5 --layer 1 --head 0 --out head.png\n",
    .run = cmd_plot,
};
