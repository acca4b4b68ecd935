/* api/: reading the index (hs_api.h), through store/index.h's readers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "api_json.h"

int hs_api_index_open(hs_index **ix, const char *path) { return hs_index_open_read(ix, path); }
void hs_api_index_close(hs_index *ix) { hs_index_close(ix); }

int hs_api_index_latest(hs_index *ix, const char *kind, long long *run_id)
{
    int64_t id = 0;
    const int rc = hs_index_latest_complete(ix, kind, NULL, &id);
    *run_id = id;
    return rc;
}

int hs_api_index_value(hs_index *ix, long long run_id, int layer, int head, const char *metric,
                       double *value, double *stderr_value, long long *n, int *found)
{
    hs_metric_value v = { NAN, NAN, 0 };
    const int rc = hs_index_metric_get(ix, run_id, layer, head, metric, &v, found);
    *value = v.value, *stderr_value = v.stderr_value, *n = v.n;
    return rc;
}

/* A stored parameter of a run as a member ("key": its text), when it has it. */
static int param_json(hs_jbuf *b, hs_index *ix, int64_t run, const char *key, int *first)
{
    char value[8192];
    int found = 0;
    const int rc = hs_index_param_get(ix, run, key, value, sizeof value, &found);
    if (!rc && found) {
        hs_jkey(b, *first, key);
        hs_jstr(b, value);
        *first = 0;
    }
    return rc;
}

int hs_api_index_runs(hs_index *ix, const char *kind, const char *status, char **json)
{
    *json = NULL;
    hs_run_list l = { 0 };
    int rc = hs_index_runs(ix, kind, status, &l);
    hs_jbuf b = { 0 };
    hs_jraw(&b, "[");
    for (int i = 0; !rc && i < l.n; i++) {
        const hs_run_record *r = &l.runs[i];
        hs_jf(&b, "%s{\"run_id\":%lld", i ? "," : "", (long long)r->run_id);
        const char *keys[] = { "kind", "status", "model_path", "model_sha256", "data_path",
                               "data_sha256", "started_at", "finished_at" };
        const char *vals[] = { r->kind, r->status, r->model_path, r->model_sha256,
                               r->data_path, r->data_sha256, r->started_at, r->finished_at };
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            hs_jkey(&b, 0, keys[k]);
            hs_jstr(&b, vals[k]);
        }
        hs_jkey(&b, 0, "args"); /* a JSON array already (run.c writes it) */
        hs_jraw(&b, r->args && r->args[0] == '[' ? r->args : "[]");
        hs_jraw(&b, ",\"params\":{");
        int first = 1;
        rc = param_json(&b, ix, r->run_id, "seq_len", &first);
        if (!rc)
            rc = param_json(&b, ix, r->run_id, "n_head", &first);
        hs_jraw(&b, "}}");
    }
    hs_jraw(&b, "]");
    hs_run_list_free(&l);
    if (rc) {
        hs_jfree(&b);
        return rc;
    }
    return hs_jdone(&b, json);
}

/* {"shape": [R, C], "value", "stderr", "n", "present"} of R x C cells. */
static void cells_json(hs_jbuf *b, int R, int C, const hs_metric_value *cell,
                       const unsigned char *present)
{
    const size_t n = (size_t)R * C;
    hs_jf(b, "{\"shape\":[%d,%d],\"value\":[", R, C);
    for (size_t i = 0; i < n; i++) {
        if (i)
            hs_jraw(b, ",");
        hs_jnum(b, present[i] ? cell[i].value : NAN);
    }
    hs_jraw(b, "],\"stderr\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            hs_jraw(b, ",");
        hs_jnum(b, present[i] ? cell[i].stderr_value : NAN);
    }
    hs_jraw(b, "],\"n\":[");
    for (size_t i = 0; i < n; i++)
        hs_jf(b, "%s%lld", i ? "," : "", present[i] ? cell[i].n : 0);
    hs_jraw(b, "],\"present\":[");
    for (size_t i = 0; i < n; i++)
        hs_jf(b, "%s%d", i ? "," : "", present[i] ? 1 : 0);
    hs_jraw(b, "]}");
}

int hs_api_index_metric(hs_index *ix, long long run_id, const char *metric, int kind,
                        char **json)
{
    *json = NULL;
    hs_jbuf b = { 0 };
    int rc;
    if (kind == 0) {
        hs_metric_grid g = { 0 };
        if (!(rc = hs_index_metric_grid(ix, run_id, metric, &g)))
            cells_json(&b, g.n_layer, g.n_head, g.cell, g.present);
        hs_metric_grid_free(&g);
    } else if (kind == 1) {
        hs_position_grid g = { 0 };
        if (!(rc = hs_index_position_grid(ix, run_id, metric, &g)))
            cells_json(&b, g.n_layer, g.n_pos, g.cell, g.present);
        hs_position_grid_free(&g);
    } else if (kind == 2) {
        hs_metric_series s = { 0 };
        if (!(rc = hs_index_layer_series(ix, run_id, metric, &s))) {
            /* rows keyed by layer: a column of 1 + the largest layer */
            const int R = s.n ? (int)s.key[s.n - 1] + 1 : 0;
            hs_metric_value *cell = hs_calloc(R ? (size_t)R : 1, sizeof *cell, "series");
            unsigned char *present = hs_calloc(R ? (size_t)R : 1, 1, "series");
            if (cell && present) {
                for (int i = 0; i < s.n; i++)
                    cell[s.key[i]] = s.v[i], present[s.key[i]] = 1;
                cells_json(&b, R, 1, cell, present);
            } else {
                rc = HS_ENOMEM;
            }
            free(cell), free(present);
        }
        hs_metric_series_free(&s);
    } else if (kind == 3) {
        hs_curve c = { 0 };
        if (!(rc = hs_index_curve_get(ix, run_id, metric, &c))) {
            hs_jraw(&b, "{\"step\":[");
            for (int i = 0; i < c.n; i++)
                hs_jf(&b, "%s%lld", i ? "," : "", (long long)c.p[i].step);
            hs_jraw(&b, "],\"x\":[");
            for (int i = 0; i < c.n; i++) {
                if (i)
                    hs_jraw(&b, ",");
                hs_jnum(&b, c.p[i].x);
            }
            hs_jraw(&b, "],\"y\":[");
            for (int i = 0; i < c.n; i++) {
                if (i)
                    hs_jraw(&b, ",");
                hs_jnum(&b, c.p[i].y);
            }
            hs_jraw(&b, "]}");
        }
        hs_curve_free(&c);
    } else {
        rc = hs_fail(HS_EINVAL, "index: no kind %d of metric (0 head, 1 position, 2 layer, "
                                "3 curve)", kind);
    }
    if (rc) {
        hs_jfree(&b);
        return rc;
    }
    return hs_jdone(&b, json);
}

/* A column of n rows: "name":[...] of ints (v NULL: of doubles d). */
static void column(hs_jbuf *b, const char *name, int n, const long long *v, const double *d,
                   int last)
{
    hs_jf(b, "\"%s\":[", name);
    for (int i = 0; i < n; i++) {
        if (i)
            hs_jraw(b, ",");
        if (v)
            hs_jf(b, "%lld", v[i]);
        else
            hs_jnum(b, d[i]);
    }
    hs_jraw(b, last ? "]}" : "],");
}

int hs_api_index_features(hs_index *ix, long long run_id, int which, const char *metric,
                          int feature, char **json)
{
    *json = NULL;
    hs_jbuf b = { 0 };
    int n = 0, rc;
    long long *c = NULL; /* up to six integer columns of n rows */
    double *v = NULL;
    if (which == 0) {
        hs_feature_row *r;
        if (!(rc = hs_index_feature_metric(ix, run_id, metric ? metric : "", &r, &n)) &&
            (c = calloc((size_t)3 * n + 1, sizeof *c)) && (v = calloc((size_t)n + 1, sizeof *v)))
            for (int i = 0; i < n; i++)
                c[i] = r[i].feature, c[n + i] = r[i].layer, c[2 * n + i] = r[i].head,
                v[i] = r[i].value;
        if (!rc && (!c || !v))
            rc = HS_ENOMEM;
        if (!rc) {
            hs_jraw(&b, "{");
            column(&b, "feature", n, c, NULL, 0), column(&b, "layer", n, c + n, NULL, 0);
            column(&b, "head", n, c + 2 * n, NULL, 0), column(&b, "value", n, NULL, v, 1);
        }
        free(r);
    } else if (which == 1) {
        hs_feature_example_row *r;
        if (!(rc = hs_index_feature_examples(ix, run_id, &r, &n)) &&
            (c = calloc((size_t)3 * n + 1, sizeof *c)) && (v = calloc((size_t)n + 1, sizeof *v)))
            for (int i = 0; i < n; i++)
                c[i] = r[i].feature, c[n + i] = r[i].seq, c[2 * n + i] = r[i].position,
                v[i] = r[i].value;
        if (!rc && (!c || !v))
            rc = HS_ENOMEM;
        if (!rc) {
            hs_jraw(&b, "{");
            column(&b, "feature", n, c, NULL, 0), column(&b, "seq", n, c + n, NULL, 0);
            column(&b, "position", n, c + 2 * n, NULL, 0), column(&b, "value", n, NULL, v, 1);
        }
        free(r);
    } else if (which == 2) {
        hs_feature_dfa_row *r;
        if (!(rc = hs_index_feature_dfa(ix, run_id, feature, &r, &n)) &&
            (c = calloc((size_t)5 * n + 1, sizeof *c)) && (v = calloc((size_t)n + 1, sizeof *v)))
            for (int i = 0; i < n; i++)
                c[i] = r[i].seq, c[n + i] = r[i].position, c[2 * n + i] = r[i].layer,
                c[3 * n + i] = r[i].head, c[4 * n + i] = r[i].source, v[i] = r[i].value;
        if (!rc && (!c || !v))
            rc = HS_ENOMEM;
        if (!rc) {
            static const char *const names[5] = { "seq", "position", "layer", "head", "source" };
            hs_jraw(&b, "{");
            for (int k = 0; k < 5; k++)
                column(&b, names[k], n, c + (size_t)k * n, NULL, 0);
            column(&b, "value", n, NULL, v, 1);
        }
        free(r);
    } else {
        rc = hs_fail(HS_EINVAL, "index: no table %d of features (0 metrics, 1 examples, 2 dfa)",
                     which);
    }
    free(c), free(v);
    if (rc) {
        hs_jfree(&b);
        return rc;
    }
    return hs_jdone(&b, json);
}
