/* KV plans (kv_plan.h): the file, and the configuration it makes. */
#include "kv_plan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "json.h"

void hs_kv_plan_free(hs_kv_plan *p)
{
    free(p->full);
    memset(p, 0, sizeof *p);
}

/* An integer of at least lo (and below INT_MAX) in *out, or -1. */
static int plan_int(const cJSON *v, int lo, int *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(long long)v->valuedouble ||
        v->valuedouble < lo || v->valuedouble >= INT_MAX)
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

static int parse_plan(hs_kv_plan *p, const cJSON *o, const char *path)
{
    if (!cJSON_IsObject(o))
        return hs_fail(HS_EFORMAT, "%s: a KV plan is an object {\"sink\": S, \"window\": W, "
                       "\"full\": [[layer, kv_head], ...]}", path);
    for (const cJSON *e = o->child; e; e = e->next)
        if (strcmp(e->string, "sink") && strcmp(e->string, "window") && strcmp(e->string, "full"))
            return hs_fail(HS_EFORMAT, "%s: unknown key \"%s\" (a plan has sink, window and "
                           "full)", path, e->string);
    if (plan_int(cJSON_GetObjectItemCaseSensitive(o, "sink"), 0, &p->sink))
        return hs_fail(HS_EFORMAT, "%s: \"sink\" must be an integer >= 0 (the first positions "
                       "every streaming head keeps)", path);
    if (plan_int(cJSON_GetObjectItemCaseSensitive(o, "window"), 1, &p->window))
        return hs_fail(HS_EFORMAT, "%s: \"window\" must be an integer >= 1 (the recent "
                       "positions a streaming head sees, its own included)", path);
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(o, "full");
    if (!cJSON_IsArray(full))
        return hs_fail(HS_EFORMAT, "%s: \"full\" must be a list of [layer, kv_head] pairs (the "
                       "heads that keep every position)", path);
    const int n = cJSON_GetArraySize(full);
    p->full = hs_calloc((size_t)n + 1, sizeof *p->full, "KV plan");
    if (!p->full)
        return HS_ENOMEM;
    int i = 0;
    for (const cJSON *e = full->child; e; e = e->next, i++) {
        int l, g;
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || plan_int(e->child, 0, &l) ||
            plan_int(e->child->next, 0, &g))
            return hs_fail(HS_EFORMAT, "%s: \"full\"[%d] must be a pair [layer, kv_head] of "
                           "integers >= 0", path, i);
        for (int k = 0; k < i; k++)
            if (p->full[k][0] == l && p->full[k][1] == g)
                return hs_fail(HS_EFORMAT, "%s: \"full\"[%d] names layer %d kv head %d again "
                               "(\"full\"[%d])", path, i, l, g, k);
        p->full[i][0] = l, p->full[i][1] = g;
    }
    p->n_full = n;
    return HS_OK;
}

int hs_kv_plan_read(hs_kv_plan *p, const char *path)
{
    memset(p, 0, sizeof *p);
    char *text;
    size_t len;
    int rc = hs_read_file(&text, &len, path, (size_t)64 << 20, 0);
    if (rc)
        return rc;
    cJSON *o;
    rc = hs_json_parse(&o, text, len, path);
    free(text);
    if (!rc)
        rc = parse_plan(p, o, path);
    cJSON_Delete(o);
    if (rc)
        hs_kv_plan_free(p);
    return rc;
}

int hs_kv_plan_apply(hs_model_config *c, const hs_kv_plan *p, const char *path)
{
    if (c->encoder || c->mla)
        return hs_fail(HS_EINVAL, "%s: a KV plan is for a decoder's key/value heads, and this "
                       "model %s", path, c->encoder ? "is an encoder" : "caches a latent (MLA)");
    if (c->window || c->n_head_windows || c->window_pattern)
        return hs_fail(HS_EINVAL, "%s: the model has sliding windows of its own; a KV plan "
                       "on top of them is not implemented", path);
    for (int i = 0; i < p->n_full; i++) {
        const int l = p->full[i][0], g = p->full[i][1];
        if (l >= c->n_layer || g >= c->n_kv_head[l])
            return hs_fail(HS_EINVAL, "%s: \"full\"[%d] names layer %d kv head %d, which the "
                           "model lacks (%d layers%s%d kv heads)", path, i, l, g, c->n_layer,
                           l < c->n_layer ? ", this one of " : "; ",
                           l < c->n_layer ? c->n_kv_head[l] : c->n_kv_head[0]);
    }
    int total = 0;
    for (int l = 0; l < c->n_layer; l++)
        total += c->n_head[l];
    int *w = hs_calloc((size_t)total, sizeof *w, "KV plan windows");
    if (!w)
        return HS_ENOMEM;
    for (int l = 0, k = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head[l]; h++, k++) {
            const int g = h / (c->n_head[l] / c->n_kv_head[l]);
            w[k] = p->window;
            for (int i = 0; i < p->n_full; i++)
                if (p->full[i][0] == l && p->full[i][1] == g)
                    w[k] = 0;
        }
    int rc = hs_config_set_windows(c, w);
    free(w);
    if (rc)
        return hs_fail(rc, "%s: %s", path, hs_last_error());
    c->sink = p->sink;
    return HS_OK;
}

int hs_kv_plan_load(hs_model_config *c, const char *path)
{
    hs_kv_plan p;
    int rc = hs_kv_plan_read(&p, path);
    if (!rc)
        rc = hs_kv_plan_apply(c, &p, path);
    hs_kv_plan_free(&p);
    return rc;
}

int hs_kv_plan_write(const char *path, const hs_kv_plan *p)
{
    char tmp[4200];
    FILE *f = hs_tmp_fopen(path, tmp, sizeof tmp);
    if (!f)
        return HS_EIO;
    fprintf(f, "{\"sink\": %d, \"window\": %d, \"full\": [", p->sink, p->window);
    for (int i = 0; i < p->n_full; i++)
        fprintf(f, "%s[%d, %d]", i ? ", " : "", p->full[i][0], p->full[i][1]);
    fprintf(f, "]}\n");
    const int failed = ferror(f);
    if (fclose(f) || failed) {
        unlink(tmp);
        return hs_fail(HS_EIO, "%s: cannot write", path);
    }
    return hs_tmp_commit(tmp, path, 1);
}
