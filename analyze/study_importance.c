/* The importance study (study.h). */
#include <string.h>

#include "metrics.h"
#include "study.h"

void hs_importance_result_free(hs_importance_result *r)
{
    hs_head_table_free(&r->table);
}

int hs_importance_study(hs_importance_result *r, const hs_model *m, const hs_tokens *data, int B,
                        int T, size_t max_batches, const hs_study_io *io)
{
    memset(r, 0, sizeof *r);
    const hs_model_config *c = &m->cfg;
    hs_importance imp;
    int rc = hs_importance_alloc(&imp, c);
    if (rc)
        return rc;
    if (io && io->phase)
        io->phase(io->ctx, "importance");
    rc = hs_importance_compute_dist(&imp, m, data, B, T, max_batches, io ? io->stop : NULL,
                                    io ? io->progress : NULL, io ? io->ctx : NULL);
    if (io && io->phase)
        io->phase(io->ctx, NULL);
    if (!rc)
        rc = hs_importance_to_table(&r->table, &imp);
    if (!rc)
        rc = hs_study_check_finite(io, &r->table, NULL, 0);
    for (int l = 0; !rc && l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++)
            if (imp.norm[(size_t)l * HS_MAX_HEADS + h] <
                imp.norm[(size_t)r->least_layer * HS_MAX_HEADS + r->least_head])
                r->least_layer = l, r->least_head = h;
    r->sequences = imp.n;
    hs_importance_free(&imp);
    return rc;
}
