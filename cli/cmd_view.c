/* view: an interactive attention viewer (index.html + viewer.js + the
 * export of a map file) that works from file://, without a server. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "index.h"
#include "view.h"

#ifndef HS_SCRIPTS_DIR
#define HS_SCRIPTS_DIR "scripts"
#endif

#ifndef HS_INSTALLED_SCRIPTS_REL
#define HS_INSTALLED_SCRIPTS_REL "../share/headscope/scripts"
#endif

static const char *const PAGE_FILES[] = { "index.html", "viewer.js", "viewer.css" };

/* The viewer's sources: $HEADSCOPE_SCRIPTS/viewer, else the source tree's
 * scripts/viewer (a build), else the installed copy beside the executable. */
static void viewer_dir(char *out, size_t n)
{
    const char *env = getenv("HEADSCOPE_SCRIPTS");
    if (env && *env) {
        snprintf(out, n, "%s/viewer", env);
        return;
    }
    snprintf(out, n, "%s/viewer", HS_SCRIPTS_DIR);
    if (!access(HS_SCRIPTS_DIR "/viewer/viewer.js", R_OK))
        return;
    char exe[PATH_MAX - 128];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(out, n, "%s/%s/viewer", exe, HS_INSTALLED_SCRIPTS_REL);
}

/* Copies src to dst through dst's temporary name. */
static int copy_file(const char *src, const char *dst)
{
    char tmp[1400];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    FILE *in = fopen(src, "rb");
    if (!in)
        return hs_fail(HS_EIO, "%s: viewer file not found (set HEADSCOPE_SCRIPTS): %s", src,
                       strerror(errno));
    FILE *out = fopen(tmp, "wb");
    int rc = out ? HS_OK : hs_fail(HS_EIO, "%s: cannot write: %s", tmp, strerror(errno));
    char buf[65536];
    size_t k;
    while (!rc && (k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k)
            rc = hs_fail(HS_EIO, "%s: write failed: %s", tmp, strerror(errno));
    if (!rc && ferror(in))
        rc = hs_fail(HS_EIO, "%s: read failed", src);
    fclose(in);
    if (out && fclose(out) && !rc)
        rc = hs_fail(HS_EIO, "%s: write failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, dst))
        rc = hs_fail(HS_EIO, "%s: cannot rename: %s", dst, strerror(errno));
    if (rc && out)
        remove(tmp);
    return rc;
}

int view_write(const hs_viewer_request *rq, hs_viewer_summary *sum)
{
    char dir[PATH_MAX - 64];
    viewer_dir(dir, sizeof dir);
    const size_t n = sizeof PAGE_FILES / sizeof PAGE_FILES[0];
    char src[3][PATH_MAX];
    /* the page's sources before any output, then the data, then the page:
     * a failure leaves no page over data that is not there */
    for (size_t i = 0; i < n; i++) {
        snprintf(src[i], sizeof src[i], "%s/%s", dir, PAGE_FILES[i]);
        if (access(src[i], R_OK))
            return hs_fail(HS_EIO, "%s: viewer file not found (set HEADSCOPE_SCRIPTS): %s", src[i],
                           strerror(errno));
    }
    int rc = hs_viewer_export(rq, sum);
    for (size_t i = 0; !rc && i < n; i++) {
        char dst[1300];
        snprintf(dst, sizeof dst, "%s/%s", rq->dir, PAGE_FILES[i]);
        rc = copy_file(src[i], dst);
    }
    return rc;
}

static void print_view(const hs_viewer_request *rq, const hs_viewer_summary *s, int json)
{
    const long long page = s->js_bytes + s->data_bytes;
    if (json) {
        printf("{\"out\":");
        json_string(stdout, rq->dir);
        printf(",\"blocks\":%d,\"sequences\":%d,\"layers\":%d,\"metrics\":%d,\"token_text\":%s,"
               "\"maps_bin_bytes\":%lld,\"maps_js_bytes\":%lld,\"data_js_bytes\":%lld}\n",
               s->blocks, s->sequences, s->layers, s->metrics, s->token_text ? "true" : "false",
               s->bin_bytes, s->js_bytes, s->data_bytes);
        return;
    }
    printf("wrote %s/index.html: %d maps (%d sequence%s, %d layer%s), %.1f MB of data%s\n",
           rq->dir, s->blocks, s->sequences, s->sequences == 1 ? "" : "s", s->layers,
           s->layers == 1 ? "" : "s", page / 1e6,
           s->metrics ? ", with the index's scores" : "");
}

static int cmd_view(int argc, char **argv)
{
    const char *dtype = "u8", *db = NULL;
    int json = 0;
    hs_viewer_request rq = { 0 };
    opt o[] = {
        { "--maps", OPT_STR, &rq.maps, 0, "FILE.h5", "map file (headscope capture)", 0 },
        { "--out", OPT_STR, &rq.dir, 0, "DIR", "directory for index.html and its data (created)", 0 },
        { "--sequences", OPT_STR, &rq.sequences, 0, "N,N,...", "sequences to export (default: 0)", 0 },
        { "--layers", OPT_STR, &rq.layers, 0, "L,L,...", "layers to export (default: all captured)", 0 },
        { "--dtype", OPT_STR, &dtype, 0, "u8|f16", "u8: 8 bits per value with a scale per row; f16: half", 0 },
        OPT_DB_AS(&db, "index whose scores for this model the head panel shows"),
        OPT_JSON(&json),
    };
    int rc = opts_parse("view", o, (int)(sizeof o / sizeof o[0]), argc, argv, NULL, 0, NULL);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!rq.maps || !rq.dir)
        return usage_error("view", "--maps FILE.h5 and --out DIR are required");
    rq.half = !strcmp(dtype, "f16");
    if (!rq.half && strcmp(dtype, "u8"))
        return usage_error("view", "--dtype must be u8 or f16, not '%s'", dtype);
    if (db && access(db, R_OK)) {
        fprintf(stderr, "headscope: view: %s: %s\n", db, strerror(errno));
        return EXIT_FAILURE_RUN;
    }
    /* a directory this command made is removed again when it fails */
    const int made = access(rq.dir, F_OK) != 0;
    if ((db && hs_index_open_read(&rq.ix, db)) || hs_mkdirs(rq.dir))
        return run_error("view");
    hs_viewer_summary sum;
    rc = view_write(&rq, &sum);
    if (rq.ix)
        hs_index_close(rq.ix);
    if (rc && made)
        rmdir(rq.dir);
    if (rc)
        return hs_last_error()[0] && strstr(hs_last_error(), "--") == hs_last_error()
                   ? usage_error("view", "%s", hs_last_error()) : run_error("view");
    print_view(&rq, &sum, json);
    return 0;
}

HS_COMMAND(cmd_view_record) = {
    .name = "view",
    .order = 162,
    .summary = "Write an interactive attention viewer (HTML + JavaScript) of a map file.",
    .usage = "headscope view --maps FILE.h5 --out DIR [options]",
    .details = "DIR/index.html opens from file:// in a browser, without a server or network:\n"
        "the token view (hover a token: the attention it gives or receives, per head), the\n"
        "T x T matrix on a canvas with zoom and pan, a layer x head grid of thumbnails, and\n"
        "a head panel with the index's scores (--db) for this model. Arrow keys move between\n"
        "heads and layers; the URL fragment keeps the selection (#l=1&h=3&s=0&q=12).\n"
        "Data: maps.bin (one block per sequence, layer and head; u8 rows with a scale per\n"
        "row, or f16), maps.js (the same, base64, for file://) and data.js (the index:\n"
        "shapes, offsets, tokens and their strings, model, GQA groups, scores).\n\n"
        "example: headscope view --maps maps.h5 --out viewer --db runs.db && xdg-open viewer/index.html\n",
    .run = cmd_view,
};
