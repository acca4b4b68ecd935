/* The causal patching studies (study.h): prompts, options and recording
 * around hs_patch and hs_path_patch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "study.h"
#include "tokenizer.h"
#include "study_interp.h"
#include "study_patch.h"

int hs_patch_sites(int *sites, const char *list, const hs_model_config *c,
                   const hs_prompt_set *ps)
{
    *sites = 0;
    if (!list) {
        *sites = 1 << HS_PATCH_Z;
        if (ps->n_group == 1)
            *sites |= 1 << HS_PATCH_RESID_PRE | 1 << HS_PATCH_ATTN_OUT |
                      (c->mlp != HS_MLP_NONE ? 1 << HS_PATCH_MLP_OUT : 0);
        return HS_OK;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int s = 0;
        while (s < HS_PATCH_SITES && strcmp(t, hs_patch_site_name(s)))
            s++;
        if (s == HS_PATCH_SITES)
            return hs_fail(HS_EINVAL, "--site: unknown site '%s' (z, pattern, resid_pre, "
                           "attn_out, mlp_out)", t);
        *sites |= 1 << s;
    }
    return *sites ? HS_OK : hs_fail(HS_EINVAL, "--site: no site given");
}


/* hs_patch_opts of o and env: the batch, and the study's stop and progress. */
static hs_patch_opts patch_opts(const hs_patch_study_opts *o, const hs_study_env *env)
{
    hs_patch_opts po = o->patch;
    po.batch = env->batch, po.stop = env->io.stop, po.progress = hs_study_progress;
    po.ctx = (void *)&env->io;
    return po;
}

int hs_patch_study_check(hs_patch_study_opts *o, const hs_study_env *env)
{
    const hs_model_config *c = &env->m->cfg;
    int rc = hs_patch_sites(&o->patch.sites, o->site, c, env->ps);
    if (!rc) {
        const hs_patch_opts po = patch_opts(o, env);
        rc = hs_patch_check(c, env->ps, &po);
    }
    return rc;
}

int hs_patch_study(hs_patch_study_result *res, const hs_patch_study_opts *o,
                   const hs_study_env *env)
{
    memset(res, 0, sizeof *res);
    hs_patch_result *r = &res->patch;
    const hs_study_io *io = &env->io;
    hs_patch_study_opts so = *o; /* its sites resolved here too */
    int rc = hs_patch_study_check(&so, env);
    const hs_patch_opts po = patch_opts(&so, env);
    if (!rc)
        hs_study_phase(io, po.noising ? "patch (noising)" : "patch");
    if (!rc)
        rc = hs_patch(r, env->m, env->ps, &po);
    hs_study_phase(io, NULL);
    if (!rc)
        rc = hs_study_check_finite(io, &r->heads, NULL, 0);
    if (!rc)
        rc = hs_study_check_finite_positions(io, r->pos, r->n_pos);
    if (!rc)
        rc = hs_study_premise(io, &r->heads);
    res->rows = (hs_study_rows){ .heads = &r->heads, .pos = r->pos, .n_pos = r->n_pos };
    return rc;
}

void hs_patch_study_result_free(hs_patch_study_result *r)
{
    hs_patch_result_free(&r->patch);
}

HS_STUDY_KIND_WRAPPED(patch, hs_patch_study_check);

/* "L.H" at s into *l, *h; the end in *end. */
static int parse_head(const char *s, char **end, int *l, int *h)
{
    errno = 0;
    long a = strtol(s, end, 10);
    if (*end == s || **end != '.' || errno || a < 0 || a >= HS_MAX_LAYERS)
        return -1;
    const char *t = *end + 1;
    long b = strtol(t, end, 10);
    if (*end == t || errno || b < 0 || b >= HS_MAX_HEADS)
        return -1;
    *l = (int)a, *h = (int)b;
    return 0;
}

static int parse_senders(int **sender, int *n, const char *s, const hs_model_config *c)
{
    int cap = 0;
    for (int l = 0; l < c->n_layer; l++)
        cap += c->n_head[l];
    cap = cap > (int)strlen(s) ? cap : (int)strlen(s);
    if (!(*sender = hs_calloc((size_t)cap, sizeof(int), "senders")))
        return HS_ENOMEM;
    if (!strcmp(s, "all")) {
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++)
                (*sender)[(*n)++] = l * HS_MAX_HEADS + h;
        return HS_OK;
    }
    for (const char *p = s; *p;) {
        char *end;
        int l, h;
        if (parse_head(p, &end, &l, &h) || (*end && *end != ','))
            return hs_fail(HS_EINVAL, "--senders '%s': L.H[,L.H...] or all expected", s);
        (*sender)[(*n)++] = l * HS_MAX_HEADS + h;
        p = *end ? end + 1 : end;
    }
    return HS_OK;
}

static int parse_receivers(hs_receiver **recv, int *n, const char *s)
{
    if (!(*recv = hs_calloc(strlen(s) + 1, sizeof **recv, "receivers")))
        return HS_ENOMEM;
    for (const char *p = s; *p;) {
        char *end;
        int l, h;
        if (parse_head(p, &end, &l, &h) || *end != ':' || !strchr("qkv", end[1]) || !end[1] ||
            (end[2] && end[2] != ','))
            return hs_fail(HS_EINVAL, "--receivers '%s': L.H:q|k|v[,...] expected", s);
        const hs_site site = end[1] == 'q' ? HS_SITE_Q : end[1] == 'k' ? HS_SITE_K : HS_SITE_V;
        (*recv)[(*n)++] = (hs_receiver){ l, h, site };
        p = end[2] ? end + 3 : end + 2;
    }
    return HS_OK;
}

int hs_path_parse(int **sender, int *n_senders, hs_receiver **recv, int *n_recv,
                  const char *senders, const char *receivers, const hs_model_config *c)
{
    *sender = NULL, *recv = NULL, *n_senders = 0, *n_recv = 0;
    int rc = senders ? parse_senders(sender, n_senders, senders, c)
                     : hs_fail(HS_EINVAL, "--senders is required");
    if (!rc && receivers)
        rc = parse_receivers(recv, n_recv, receivers);
    hs_path_opts o = { .sender = *sender, .n_senders = *n_senders, .recv = *recv,
                       .n_recv = *n_recv };
    if (!rc)
        rc = hs_path_check(c, &o);
    if (rc) {
        free(*sender), free(*recv);
        *sender = NULL, *recv = NULL;
    }
    return rc;
}

int hs_path_patch_check(hs_path_patch_opts *o, const hs_study_env *env)
{
    int *sender = NULL, n_senders, n_recv;
    hs_receiver *recv = NULL;
    const int rc = hs_path_parse(&sender, &n_senders, &recv, &n_recv, o->senders, o->receivers,
                                 &env->m->cfg);
    free(sender), free(recv);
    return rc;
}

int hs_path_patch_study(hs_path_patch_result *r, const hs_path_patch_opts *o,
                        const hs_study_env *env)
{
    memset(r, 0, sizeof *r);
    const hs_study_io *io = &env->io;
    int *sender = NULL;
    hs_receiver *recv = NULL;
    hs_path_opts po = { .batch = env->batch, .stop = io->stop, .progress = hs_study_progress,
                        .ctx = (void *)io };
    int rc = hs_path_parse(&sender, &po.n_senders, &recv, &po.n_recv, o->senders, o->receivers,
                           &env->m->cfg);
    po.sender = sender, po.recv = recv, r->n_senders = po.n_senders;
    if (!rc)
        hs_study_phase(io, "path-patch");
    if (!rc)
        rc = hs_path_patch(&r->heads, env->m, env->ps, &po);
    hs_study_phase(io, NULL);
    if (!rc)
        rc = hs_study_check_finite(io, &r->heads, NULL, 0);
    if (!rc)
        rc = hs_study_premise(io, &r->heads);
    free(sender), free(recv);
    r->rows = (hs_study_rows){ .heads = &r->heads };
    return rc;
}

void hs_path_patch_result_free(hs_path_patch_result *r)
{
    hs_head_table_free(&r->heads);
}

HS_STUDY_KIND(path_patch, hs_path_patch_check);
