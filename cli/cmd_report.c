/* report: the static HTML page of an index (render/report.h writes it). */
#include <stdio.h>

#include "cli.h"
#include "report.h"

static int cmd_report(int argc, char **argv)
{
    hs_report_request rq = { 0 };
    long seq = 0;
    int json = 0;
    opt o[] = {
        { "--db", OPT_STR, &rq.db, 0, "FILE", "the index to report on", 0 },
        { "--out", OPT_STR, &rq.dir, 0, "DIR", "directory for index.html and its figures (created)", 0 },
        { "--maps", OPT_STR, &rq.maps, 0, "FILE.h5", "map file (default: the latest capture run's)", 0 },
        { "--seq", OPT_LONG, &seq, 0, "N", "sequence of the map file to draw", 0 },
        { "--runs", OPT_STR, &rq.runs, 0, "ID,...", "the runs the sections show (default: the latest of each kind)", 0 },
        { "--heads", OPT_STR, &rq.heads, 0, "L.H,...", "the heads whose maps are drawn (default: those causal runs and scores single out)", 0 },
        OPT_JSON(&json),
    };
    int rc = cli_opts_parse("report", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!rq.db || !rq.dir)
        return cli_usage_error("report", "--db FILE and --out DIR are required");
    rq.seq = seq;
    hs_report_summary sum;
    if (hs_report_write(&rq, &sum))
        return cli_run_error("report");
    hs_report_print(stdout, &sum, json);
    return 0;
}

HS_COMMAND(cmd_report_record) = {
    .name = "report",
    .order = 160,
    .summary = "Write a static HTML report (index.html + gnuplot figures) of an index.",
    .usage = "headscope report --db FILE --out DIR [options]",
    .details = "Sections: the induction claim with its causal check and the score grids beside\n"
        "their random-init controls; attention maps of the heads the scores single out\n"
        "(from the latest 'capture --db' run, or --maps); ablation, importance, pruning\n"
        "(curve and latency), pattern statistics, the head-count, GQA uptraining and\n"
        "local/global experiments, training curves, and every run with its provenance.\n"
        "Each section uses the latest complete run of its kind (of each experiment);\n"
        "each figure is captioned with what it shows and what it does not.\n"
        "index.html is written under a temporary name and renamed when complete.\n\n"
        "example: headscope report --db runs.db --out report && xdg-open report/index.html\n",
    .run = cmd_report,
};
