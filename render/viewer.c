/* The interactive viewer's files: the page and script of scripts/viewer/
 * copied into a directory beside the export of a map file. */
#include "viewer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gnuplot.h"

static const char *const PAGE_FILES[] = { "index.html", "viewer.js", "viewer.css", "features.js" };

/* Copies src to dst through a temporary file beside dst. */
static int copy_file(const char *src, const char *dst)
{
    char tmp[1400];
    FILE *in = fopen(src, "rb");
    if (!in)
        return hs_fail(HS_EIO, "%s: viewer file not found (set HEADSCOPE_SCRIPTS): %s", src,
                       strerror(errno));
    FILE *out = hs_tmp_fopen(dst, tmp, sizeof tmp);
    int rc = out ? HS_OK : HS_EIO;
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
    if (out && rc)
        unlink(tmp);
    return rc ? rc : hs_tmp_commit(tmp, dst, 1);
}

int hs_viewer_write_db(const hs_viewer_request *rq, const char *db, hs_viewer_summary *sum)
{
    hs_viewer_request r = *rq;
    r.ix = NULL;
    int rc = db ? hs_index_open_read(&r.ix, db) : HS_OK;
    if (!rc)
        rc = hs_viewer_write(&r, sum);
    if (r.ix)
        hs_index_close(r.ix);
    return rc;
}

/* The second map file of a side-by-side view, into dir/compare as
 * HS_DATA_B / HS_MAPS_B64_B: the same sequences and layers, refused unless
 * its every layer's heads, queries and keys are the first file's. */
static int export_compare(const hs_viewer_request *rq)
{
    hs_maps_reader *a, *b;
    int rc = hs_maps_open(&a, rq->maps);
    if (rc)
        return rc;
    if ((rc = hs_maps_open(&b, rq->compare))) {
        hs_maps_close(a);
        return rc;
    }
    const hs_maps_info *x = hs_maps_get_info(a), *y = hs_maps_get_info(b);
    int same = x->seq_len == y->seq_len && x->n_layers == y->n_layers && x->seq2seq == y->seq2seq;
    for (int i = 0; same && i < x->n_layers; i++) {
        const hs_maps_layer_info *p = &x->layers[i], *q = &y->layers[i];
        same = p->layer == q->layer && p->attn == q->attn && p->nh == q->nh && p->q0 == q->q0 &&
               p->nq == q->nq && p->S == q->S && !memcmp(p->heads, q->heads, sizeof(int) * p->nh);
    }
    hs_maps_close(a), hs_maps_close(b);
    if (!same)
        return hs_fail(HS_EINVAL, "--compare %s: its maps are not of %s's shapes (layers, heads, "
                       "query rows and keys must match)", rq->compare, rq->maps);
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/compare", rq->dir);
    if ((rc = hs_mkdirs(dir)))
        return rc;
    hs_viewer_request r = *rq;
    r.maps = rq->compare, r.dir = dir, r.compare = NULL, r.var = "_B", r.ix = NULL, r.runs = NULL;
    hs_viewer_summary unused;
    return hs_viewer_export(&r, &unused);
}

int hs_viewer_write(const hs_viewer_request *rq, hs_viewer_summary *sum)
{
    char dir[PATH_MAX - 64];
    snprintf(dir, sizeof dir, "%s/viewer", hs_scripts_dir());
    const size_t n = sizeof PAGE_FILES / sizeof PAGE_FILES[0];
    char src[sizeof PAGE_FILES / sizeof PAGE_FILES[0]][PATH_MAX];
    /* the page's sources before any output, then the data, then the page:
     * a failure leaves no page over data that is not there */
    for (size_t i = 0; i < n; i++) {
        snprintf(src[i], sizeof src[i], "%s/%s", dir, PAGE_FILES[i]);
        if (access(src[i], R_OK))
            return hs_fail(HS_EIO, "%s: viewer file not found (set HEADSCOPE_SCRIPTS): %s", src[i],
                           strerror(errno));
    }
    int rc = hs_viewer_export(rq, sum);
    if (!rc && rq->compare)
        rc = export_compare(rq);
    for (size_t i = 0; !rc && i < n; i++) {
        char dst[1300];
        snprintf(dst, sizeof dst, "%s/%s", rq->dir, PAGE_FILES[i]);
        rc = copy_file(src[i], dst);
    }
    return rc;
}

