/* The attribution studies (study.h): atp and circuit around hs_atp and
 * hs_circuit -- phases, progress, the finite check, the rows to record. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "metrics.h"
#include "study.h"
#include "study_atp.h"
#include "study_interp.h"

static void on_progress(void *ctx, size_t done, size_t total)
{
    const hs_study_io *io = ctx;
    if (io && io->progress)
        io->progress(io->ctx, done, total);
}

static void phase(const hs_study_io *io, const char *label)
{
    if (io && io->phase)
        io->phase(io->ctx, label);
}

static int finite_positions(const hs_study_io *io, const hs_position_row *p, int n)
{
    char what[96];
    for (int i = 0; !(io && io->allow_nonfinite) && i < n; i++)
        if (!isfinite(p[i].value) || !isfinite(p[i].stderr_value)) {
            snprintf(what, sizeof what, "%s of layer %d position %d", p[i].metric, p[i].layer,
                     p[i].position);
            return hs_fail_nonfinite(isfinite(p[i].value) ? p[i].stderr_value : p[i].value,
                                     what);
        }
    return HS_OK;
}

int hs_atp_study(hs_atp_result *r, hs_study_rows *rows, const hs_model *m,
                 const hs_prompt_set *ps, hs_atp_opts o, const hs_study_io *io)
{
    memset(rows, 0, sizeof *rows);
    o.stop = io ? io->stop : NULL, o.progress = on_progress, o.ctx = (void *)io;
    char label[64];
    snprintf(label, sizeof label, "atp (%s%s)", o.noising ? "noising" : "denoising",
             o.star ? ", AtP*" : "");
    phase(io, label);
    int rc = hs_atp(r, m, ps, &o);
    phase(io, NULL);
    if (!rc)
        rc = hs_study_check_finite(io, &r->heads, NULL, 0);
    if (!rc)
        rc = finite_positions(io, r->pos, r->n_pos);
    if (!rc)
        *rows = (hs_study_rows){ .heads = &r->heads, .pos = r->pos, .n_pos = r->n_pos };
    return rc;
}

int hs_circuit_study(hs_circuit_result *r, hs_study_rows *rows, const hs_model *m,
                     const hs_prompt_set *ps, hs_circuit_opts o, const hs_study_io *io)
{
    memset(rows, 0, sizeof *rows);
    o.stop = io ? io->stop : NULL, o.progress = on_progress, o.ctx = (void *)io;
    phase(io, o.method == HS_CIRCUIT_EAP ? "circuit (eap)" : "circuit (eap-ig)");
    int rc = hs_circuit(r, m, ps, &o);
    phase(io, NULL);
    hs_study_curve curve = { .points = r->curve, .n = r->n_curve };
    snprintf(curve.name, sizeof curve.name, "%s", HS_METRIC(FAITHFULNESS));
    if (!rc)
        rc = hs_study_check_finite(io, &r->heads, r->n_curve ? &curve : NULL, r->n_curve ? 1 : 0);
    char what[96];
    for (long e = 0; !rc && !(io && io->allow_nonfinite) && e < r->n_edges; e++)
        if (!isfinite(r->edges[e].value) || !isfinite(r->edges[e].stderr_value)) {
            snprintf(what, sizeof what, "%s of edge %s -> %s", r->edges[e].metric,
                     r->edges[e].sender, r->edges[e].receiver);
            rc = hs_fail_nonfinite(isfinite(r->edges[e].value) ? r->edges[e].stderr_value
                                                               : r->edges[e].value, what);
        }
    if (!rc) {
        *rows = (hs_study_rows){ .heads = &r->heads, .edges = r->edges, .n_edges = r->n_edges };
        if (r->n_curve)
            rows->curve[rows->n_curves++] = curve;
    }
    return rc;
}
