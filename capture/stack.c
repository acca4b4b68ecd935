#include "stack.h"

/* The site function of a stacked plan: copy j's view is rows j*B.. of v. */
static int stack_site(void *ctx, const hs_site_view *v)
{
    const hs_stack_plan *p = ctx;
    if (v->B > p->n * p->rows)
        return hs_fail(HS_EINVAL, "stacked interventions: a forward of %d sequences, the plan "
                       "has %d copies of %d", v->B, p->n, p->rows);
    int rc = HS_OK;
    for (int j = 0; !rc && j < p->n && (j + 1) * p->rows <= v->B; j++) {
        const hs_intervention *iv = &p->iv[j];
        if (iv->layer < 0 || iv->site != v->site || iv->layer != v->layer)
            continue;
        hs_site_view sub = *v;
        sub.x = v->x + (size_t)j * p->rows * v->sb;
        sub.B = p->rows;
        rc = hs_intervene(&sub, iv);
    }
    return rc;
}

int hs_stack_hooks_attach(hs_hooks *h, const hs_model_config *c, hs_stack_plan *plan)
{
    if (plan->rows < 1 || plan->n < 0)
        return hs_fail(HS_EINVAL, "stacked interventions: %d copies of %d sequences", plan->n,
                       plan->rows);
    for (int j = 0; j < plan->n; j++) {
        int rc = plan->iv[j].layer < 0 ? HS_OK : hs_intervention_check(&plan->iv[j], c);
        if (rc)
            return rc;
    }
    for (int j = 0; j < plan->n; j++)
        if (plan->iv[j].layer >= 0)
            h->site[plan->iv[j].site] = (hs_site_hook){ stack_site, plan };
    return HS_OK;
}
