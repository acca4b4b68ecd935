/* view: an interactive attention viewer (index.html + viewer.js + the
 * export of a map file) that works from file://, without a server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "viewer.h"

static void print_view(const hs_viewer_request *rq, const hs_viewer_summary *s, int json)
{
    const long long page = s->js_bytes + s->data_bytes;
    if (s->features && !json) {
        printf("wrote %s/index.html: the feature page of %d features, %.1f MB of data\n", rq->dir,
               s->features, page / 1e6);
        return;
    }
    if (json) {
        printf("{\"out\":");
        hs_json_string(stdout, rq->dir);
        printf(",\"blocks\":%d,\"sequences\":%d,\"layers\":%d,\"metrics\":%d,\"token_text\":%s,"
               "\"maps_bin_bytes\":%lld,\"maps_js_bytes\":%lld,\"data_js_bytes\":%lld,"
               "\"rows_bytes\":%lld,\"features\":%d}\n",
               s->blocks, s->sequences, s->layers, s->metrics, s->token_text ? "true" : "false",
               s->bin_bytes, s->js_bytes, s->data_bytes, s->rows_bytes, s->features);
        return;
    }
    printf("wrote %s/index.html: %d maps (%d sequence%s, %d layer%s), %.1f MB of data%s\n",
           rq->dir, s->blocks, s->sequences, s->sequences == 1 ? "" : "s", s->layers,
           s->layers == 1 ? "" : "s", page / 1e6,
           s->metrics ? ", with the index's scores" : "");
    if (s->rows_bytes)
        printf("  and %.1f MB in %s/rows: the long maps' rows, loaded as the page needs them\n",
               s->rows_bytes / 1e6, rq->dir);
}

static int cmd_view(int argc, char **argv)
{
    const char *dtype = "u8", *db = NULL;
    int json = 0;
    hs_viewer_request rq = { 0 };
    opt o[] = {
        { "--maps", OPT_STR, &rq.maps, 0, "FILE.h5", "map file (headscope capture)", 0 },
        { "--out", OPT_STR, &rq.dir, 0, "DIR", "directory for index.html and its data (created)", 0 },
        { "--sequences", OPT_STR, &rq.sequences, 0, "N,N,...", "sequences to export, or all (at most 64; default: 0)", 0 },
        { "--layers", OPT_STR, &rq.layers, 0, "L,L,...", "layers to export (default: all captured)", 0 },
        { "--dtype", OPT_STR, &dtype, 0, "u8|f16", "u8: 8 bits per value with a scale per row; f16: half", 0 },
        OPT_DB_AS(&db, "index whose scores for this model the head panel shows"),
        { "--runs", OPT_STR, &rq.runs, 0, "ID,...", "with --db: the runs whose scores the panel shows (default: the latest of each)", 0 },
        { "--heads", OPT_STR, &rq.heads, 0, "L.H,...", "heads of interest: listed in the panel, the first shown first", 0 },
        { "--compare", OPT_STR, &rq.compare, 0, "FILE.h5", "a second map file of the same shapes: both side by side and their difference", 0 },
        { "--on-demand", OPT_FLAG, &rq.on_demand, 0, NULL, "every map as row files the page loads as it needs them (default: maps over 2048 x 2048 cells)", 0 },
        OPT_JSON(&json),
    };
    int rc = cli_opts_parse("view", o, CLI_N(o), argc, argv, NULL, 0, NULL);
    CLI_EXIT_IF(rc);
    if (!rq.maps || !rq.dir)
        return cli_usage_error("view", "--maps FILE.h5 and --out DIR are required");
    rq.half = !strcmp(dtype, "f16");
    if (!rq.half && strcmp(dtype, "u8"))
        return cli_usage_error("view", "--dtype must be u8 or f16, not '%s'", dtype);
    /* a directory this command made is removed again when it fails */
    const int made = access(rq.dir, F_OK) != 0;
    if (hs_mkdirs(rq.dir))
        return cli_run_error("view");
    hs_viewer_summary sum;
    rc = hs_viewer_write_db(&rq, db, &sum);
    if (rc && made)
        rmdir(rq.dir);
    if (rc)
        return hs_last_error()[0] && strstr(hs_last_error(), "--") == hs_last_error()
                   ? cli_usage_error("view", "%s", hs_last_error())
                   : cli_run_error("view");
    print_view(&rq, &sum, json);
    return 0;
}

static const opt_rule view_rules[] = { { "--db", OPTS_NEEDS, "--runs", "the runs are its" } };

HS_COMMAND(cmd_view_record) = {
    .name = "view",
    .order = 162,
    .summary = "Write an interactive attention viewer (HTML + JavaScript) of a map file.",
    .usage = "headscope view --maps FILE.h5 --out DIR [options]",
    .details = "DIR/index.html opens from file:// in a browser, without a server or network:\n"
        "the token view (hover a token: the attention it gives or receives, per head), the\n"
        "T x T matrix on a canvas with zoom and pan (--compare B.h5: A, B or A - B on a\n"
        "diverging scale), a head view of every head's lines, a layer x head grid, and\n"
        "a head panel with the index's scores (--db; --runs: of those runs) for this model,\n"
        "the tokens on the matrix's axes. Arrow keys move between heads and layers; the URL\n"
        "fragment keeps the selection (#l=1&h=3&s=0&q=12), else --heads' first is shown.\n"
        "Data: maps.bin (one block per sequence, layer and head; u8 rows with a scale per\n"
        "row, or f16), maps.js (the same, base64, for file://) and data.js (the index:\n"
        "shapes, offsets, tokens and their strings, model, GQA groups, scores). A map of\n"
        "more than 2048 x 2048 cells (every map with --on-demand) goes to rows/ instead,\n"
        "16 query rows a file and a pooled overview, which the page loads as it needs\n"
        "them: a T = 8,192 capture opens without reading its T^2 cells.\n\n"
        "example: headscope view --maps maps.h5 --out viewer --db runs.db && xdg-open viewer/index.html\n",
    .run = cmd_view,
    OPT_RULES(view_rules),
};
