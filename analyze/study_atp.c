/* The attribution studies (study.h): atp and circuit around hs_atp and
 * hs_circuit -- phases, progress, the finite check, the rows to record. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "study.h"
#include "study_atp.h"
#include "study_interp.h"

static int finite_positions(const hs_study_io *io, const hs_position_row *p, int n)
{
    char what[96];
    for (int i = 0; !io->allow_nonfinite && i < n; i++)
        if (!isfinite(p[i].value) || !isfinite(p[i].stderr_value)) {
            snprintf(what, sizeof what, "%s of layer %d position %d", p[i].metric, p[i].layer,
                     p[i].position);
            return hs_fail_nonfinite(isfinite(p[i].value) ? p[i].stderr_value : p[i].value,
                                     what);
        }
    return HS_OK;
}

/* hs_atp_opts of o and env: the batch, and the study's stop and progress. */
static hs_atp_opts atp_opts(const hs_atp_study_opts *o, const hs_study_env *env)
{
    hs_atp_opts ao = o->atp;
    ao.batch = env->batch, ao.stop = env->io.stop, ao.progress = hs_study_progress;
    ao.ctx = (void *)&env->io;
    return ao;
}

int hs_atp_study_check(hs_atp_study_opts *o, const hs_study_env *env)
{
    const hs_model_config *c = &env->m->cfg;
    if (hs_atp_family_check(c)) /* the model's family: not an option's value */
        return HS_EUNSUPPORTED;
    int rc = hs_atp_sites(&o->atp.sites, o->site, c, env->ps);
    if (!rc) {
        const hs_atp_opts ao = atp_opts(o, env);
        rc = hs_atp_check(c, env->ps, &ao);
    }
    return rc;
}

int hs_atp_study(hs_atp_study_result *res, const hs_atp_study_opts *o, const hs_study_env *env)
{
    memset(res, 0, sizeof *res);
    hs_atp_result *r = &res->atp;
    const hs_study_io *io = &env->io;
    hs_atp_study_opts so = *o; /* its sites resolved here too */
    int rc = hs_atp_study_check(&so, env);
    if (rc)
        return rc;
    const hs_atp_opts ao = atp_opts(&so, env);
    char label[64];
    snprintf(label, sizeof label, "atp (%s%s)", ao.noising ? "noising" : "denoising",
             ao.star ? ", AtP*" : "");
    hs_study_phase(io, label);
    rc = hs_atp(r, env->m, env->ps, &ao);
    hs_study_phase(io, NULL);
    if (!rc)
        rc = hs_study_check_finite(io, &r->heads, NULL, 0);
    if (!rc)
        rc = finite_positions(io, r->pos, r->n_pos);
    if (!rc)
        rc = hs_study_premise(io, &r->heads);
    res->rows = (hs_study_rows){ .heads = &r->heads, .pos = r->pos, .n_pos = r->n_pos };
    return rc;
}

void hs_atp_study_result_free(hs_atp_study_result *r)
{
    hs_atp_result_free(&r->atp);
}

HS_STUDY_KIND_WRAPPED(atp, hs_atp_study_check);

int hs_circuit_study_check(hs_circuit_study_opts *o, const hs_study_env *env)
{
    const hs_model_config *c = &env->m->cfg;
    if (!o->method)
        return hs_fail(HS_EINVAL, "--method eap or eap-ig is required");
    if (o->circuit.ig_steps > HS_CIRCUIT_MAX_IG_STEPS)
        return hs_fail(HS_EINVAL, "--ig-steps %d: at most %d (each step is a forward and a "
                       "backward of every prompt)", o->circuit.ig_steps, HS_CIRCUIT_MAX_IG_STEPS);
    long *top = NULL;
    int rc = hs_circuit_method(&o->circuit.method, o->method);
    if (!rc)
        rc = hs_circuit_top_n(&top, &o->circuit.n_top, o->top, c);
    free(top);
    if (!rc && hs_circuit_check(c, &o->circuit)) /* the model's family: not an option's value */
        rc = HS_EUNSUPPORTED;
    return rc;
}

int hs_circuit_study(hs_circuit_study_result *res, const hs_circuit_study_opts *o,
                     const hs_study_env *env)
{
    memset(res, 0, sizeof *res);
    hs_circuit_result *r = &res->circuit;
    const hs_study_io *io = &env->io;
    hs_circuit_study_opts so = *o; /* its method resolved here too */
    int rc = hs_circuit_study_check(&so, env);
    hs_circuit_opts co = so.circuit;
    if (!rc)
        rc = hs_circuit_top_n(&res->top_n, &co.n_top, so.top, &env->m->cfg);
    if (rc)
        return rc;
    co.top_n = res->top_n, co.batch = env->batch;
    co.stop = io->stop, co.progress = hs_study_progress, co.ctx = (void *)io;
    hs_study_phase(io, co.method == HS_CIRCUIT_EAP ? "circuit (eap)" : "circuit (eap-ig)");
    rc = hs_circuit(r, env->m, env->ps, &co);
    hs_study_phase(io, NULL);
    hs_study_curve curve = { .points = r->curve, .n = r->n_curve };
    snprintf(curve.name, sizeof curve.name, "%s", HS_METRIC(FAITHFULNESS));
    if (!rc)
        rc = hs_study_check_finite(io, &r->heads, r->n_curve ? &curve : NULL, r->n_curve ? 1 : 0);
    char what[96];
    for (long e = 0; !rc && !io->allow_nonfinite && e < r->n_edges; e++)
        if (!isfinite(r->edges[e].value) || !isfinite(r->edges[e].stderr_value)) {
            snprintf(what, sizeof what, "%s of edge %s -> %s", r->edges[e].metric,
                     r->edges[e].sender, r->edges[e].receiver);
            rc = hs_fail_nonfinite(isfinite(r->edges[e].value) ? r->edges[e].stderr_value
                                                               : r->edges[e].value, what);
        }
    if (!rc)
        rc = hs_study_premise(io, &r->heads);
    res->order = rc ? NULL : hs_calloc((size_t)r->n_edges + 1, sizeof *res->order, "edge ranks");
    if (!rc && (!res->order || hs_circuit_rank(r, res->order)))
        rc = HS_ENOMEM;
    res->rows = (hs_study_rows){ .heads = &r->heads, .edges = r->edges, .n_edges = r->n_edges };
    if (r->n_curve)
        res->rows.curve[res->rows.n_curves++] = curve;
    return rc;
}

void hs_circuit_study_result_free(hs_circuit_study_result *r)
{
    hs_circuit_result_free(&r->circuit);
    free(r->order), free(r->top_n);
}

HS_STUDY_KIND_WRAPPED(circuit, hs_circuit_study_check);
