/* `plot KIND`: the kinds of figure as one table (what each takes, what it
 * needs) and the dispatch, so that the command is plumbing and a new figure
 * is a row here plus its drawing function. */
#include "plot.h"

#include <string.h>

#include "run.h"

static const hs_plot_kind KINDS[] = {
    { "map", " --maps --layer --head --seq ", "--maps FILE.h5",
      "--maps F.h5 --layer L --head H [--seq N]   one head's map, token labels" },
    { "grid", " --maps --seq ", "--maps FILE.h5",
      "--maps F.h5 [--seq N]                      layer x head small multiples" },
    { "scores", " --db --metric --run --control ", "--metric NAME",
      "--db F --metric NAME [--run ID] [--control] per-head score grid (beside its control)" },
    { "curve", " --db --curve --run ", "--curve NAME",
      "--db F --curve NAME [--run ID]            a curve (e.g. train_loss)" },
    { "causal", " --db --run ", NULL,
      "--db F [--run ID]    induction causal check: targeted heads vs random draws" },
    { "patch", " --db --metric --run ", NULL,
      "--db F [--metric patch_resid_pre|patch_attn_out|patch_mlp_out] [--run ID]\n"
      "                     activation patching, layer x position, the prompt's tokens" },
    { HS_KIND_DLA, " --db --run ", NULL,
      "--db F [--run ID]    direct logit attribution: heads, MLPs, biases, sorted" },
    { "lens", " --db --run ", NULL,
      "--db F [--run ID]    logit lens: loss (and logit difference) per layer" },
    { "composition", " --db --metric --run ", NULL,
      "--db F [--metric q_composition|k_composition|v_composition] [--run ID]\n"
      "                     heads x heads composition scores beside the random-init control" },
    { "circuit", " --db --metric --run ", NULL,
      "--db F [--metric eap|eap_ig] [--run ID]\n"
      "                     a circuit run's top edges as a graph (Graphviz dot)" },
    { "atp", " --db --metric --run ", NULL,
      "--db F [--metric atp_z|atp_pattern] [--run ID]\n"
      "                     attribution patching against the exact patching it verified" },
};

const hs_plot_kind *hs_plot_kinds(int *n)
{
    *n = (int)(sizeof KINDS / sizeof KINDS[0]);
    return KINDS;
}

const hs_plot_kind *hs_plot_kind_find(const char *name)
{
    for (size_t k = 0; name && k < sizeof KINDS / sizeof KINDS[0]; k++)
        if (!strcmp(KINDS[k].name, name))
            return &KINDS[k];
    return NULL;
}

/* The figure of an index kind on the open index. */
static int draw_index(hs_index *ix, const hs_plot_request *rq)
{
    const char *k = rq->kind, *db = rq->db;
    if (!strcmp(k, "scores"))
        return hs_plot_scores(ix, db, rq->metric, rq->run, rq->out, rq->control);
    if (!strcmp(k, "curve"))
        return hs_plot_curves(ix, db, rq->curve, rq->run, rq->out);
    if (!strcmp(k, "causal"))
        return hs_plot_causal(ix, db, rq->run, rq->out);
    if (!strcmp(k, "patch"))
        return hs_plot_patch(ix, db, rq->metric, rq->run, rq->out);
    if (!strcmp(k, HS_KIND_DLA))
        return hs_plot_dla(ix, db, rq->run, rq->out);
    if (!strcmp(k, "lens"))
        return hs_plot_lens(ix, db, rq->run, rq->out);
    if (!strcmp(k, "circuit"))
        return hs_plot_circuit(ix, db, rq->metric, rq->run, rq->out);
    if (!strcmp(k, "atp"))
        return hs_plot_atp(ix, db, rq->metric, rq->run, rq->out);
    return hs_plot_composition(ix, db, rq->metric, rq->run, rq->out);
}

int hs_plot(const hs_plot_request *rq)
{
    const hs_plot_kind *k = hs_plot_kind_find(rq->kind);
    if (!k)
        return hs_fail(HS_EINVAL, "no figure of kind '%s'", rq->kind ? rq->kind : "");
    if (strstr(k->options, " --maps "))
        return hs_plot_map(rq->maps, rq->layer, rq->head, rq->seq, rq->out,
                           !strcmp(k->name, "grid"));
    hs_index *ix;
    int rc = hs_index_open_read(&ix, rq->db);
    if (rc)
        return rc;
    rc = draw_index(ix, rq);
    hs_index_close(ix);
    return rc;
}
