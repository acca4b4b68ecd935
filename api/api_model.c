/* api/: models, their configuration and tensors, site shapes, tokens and
 * prompts (hs_api.h). */
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "config_file.h"
#include "checkpoint.h"
#include "intervene.h"
#include "inputs.h"
#include "study.h"

const char *hs_api_version(void) { return HS_VERSION; }
int hs_api_real_bytes(void) { return (int)sizeof(hs_real); }
void hs_api_free(void *p) { free(p); }

int hs_api_site_count(void) { return HS_N_SITES + 1; }

const char *hs_api_site_name(int site)
{
    return site == HS_API_SITE_FINAL ? "final" : hs_site_name((hs_site)site);
}

/* ---- models ---- */

int hs_api_model_open(hs_model **m, const char *dir)
{
    *m = hs_calloc(1, sizeof **m, "model");
    if (!*m)
        return HS_ENOMEM;
    const int rc = hs_checkpoint_load(*m, dir);
    if (rc) {
        free(*m);
        *m = NULL;
    }
    return rc;
}

int hs_api_model_new(hs_model **m, const char *preset, const char *const *overrides, int n,
                     unsigned long long seed)
{
    *m = NULL;
    hs_model_config c;
    int rc = hs_config_build(&c, preset, overrides, n);
    if (rc)
        return rc;
    if (!(*m = hs_calloc(1, sizeof **m, "model")))
        return HS_ENOMEM;
    if ((rc = hs_model_init(*m, &c))) {
        free(*m);
        *m = NULL;
        return rc;
    }
    hs_model_init_random(*m, seed);
    return HS_OK;
}

int hs_api_model_save(const hs_model *m, const char *dir) { return hs_checkpoint_save(m, dir); }

void hs_api_model_free(hs_model *m)
{
    if (!m)
        return;
    hs_model_free(m);
    free(m);
}

char *hs_api_model_config(const hs_model *m) { return hs_config_to_json(&m->cfg); }

const char *hs_api_model_family(const hs_model *m) { return hs_family_name(m->cfg.family); }

int hs_api_model_int(const hs_model *m, const char *key, long long *v)
{
    const hs_model_config *c = &m->cfg;
    const struct {
        const char *name;
        long long value;
    } keys[] = {
        { "n_layer", c->n_layer },
        { "d_model", c->d_model },
        { "head_dim", c->head_dim },
        { "vocab_size", c->vocab_size },
        { "n_ctx", c->n_ctx },
        { "d_ff", c->d_ff },
        { "final_norm", c->final_norm },
        { "post_norm", c->post_norm },
        { "parallel_residual", c->parallel_residual },
        { "embed_scale", c->embed_scale },
        { "mla", c->mla },
        { "qk_nope_head_dim", c->qk_nope_head_dim },
        { "qk_rope_head_dim", c->qk_rope_head_dim },
        { "n_params", (long long)m->n_params },
        { "learned_positions", c->pos == HS_POS_LEARNED },
        { "rotary", c->pos == HS_POS_ROPE },
        { "mlp", c->mlp },
        { "n_labels", c->n_labels },
        { "enc_layers", c->enc_layers },
        { "pad_id", c->pad_id },
        { "decoder_start_id", c->dec_start_id },
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i].name)) {
            *v = keys[i].value;
            return HS_OK;
        }
    return hs_fail(HS_EINVAL, "model: no configuration number '%s'", key);
}

int hs_api_model_heads(const hs_model *m, int layer, int *H, int *G)
{
    if (layer < 0 || layer >= m->cfg.n_layer)
        return hs_fail(HS_EINVAL, "model: no layer %d (it has %d)", layer, m->cfg.n_layer);
    *H = m->cfg.n_head[layer];
    *G = m->cfg.n_kv_head[layer];
    return HS_OK;
}

int hs_api_model_tensor_count(const hs_model *m) { return m->n_tensors; }

int hs_api_model_tensor(const hs_model *m, int i, const char **name, hs_real **data, int *ndim,
                        int *rows, int *cols)
{
    if (i < 0 || i >= m->n_tensors)
        return hs_fail(HS_EINVAL, "model: no tensor %d (it has %d)", i, m->n_tensors);
    const hs_tensor_info *t = &m->tensors[i];
    *name = t->name;
    *data = m->params + t->offset;
    *ndim = t->ndim;
    *rows = t->shape[0];
    *cols = t->ndim > 1 ? t->shape[1] : 1;
    return HS_OK;
}

int hs_api_site_shape(const hs_model *m, int site, int layer, int B, int T, int shape[4])
{
    const hs_model_config *c = &m->cfg;
    const char *name = hs_api_site_name(site);
    if (!name)
        return hs_fail(HS_EINVAL, "no site %d", site);
    if (B <= 0 || T <= 0)
        return hs_fail(HS_EINVAL, "site %s: B=%d, T=%d must be positive", name, B, T);
    const int top = site == HS_SITE_RESID_PRE ? c->n_layer : site == HS_API_SITE_FINAL ? 0
                                                                                     : c->n_layer - 1;
    if (layer < 0 || layer > top)
        return hs_fail(HS_EINVAL, "site %s: layer %d outside 0..%d", name, layer, top);
    const int H = site == HS_API_SITE_FINAL ? 0 : c->n_head[layer < c->n_layer ? layer : 0];
    const int G = site == HS_API_SITE_FINAL ? 0 : c->n_kv_head[layer < c->n_layer ? layer : 0];
    int heads = 1, width = c->d_model, maps = 0;
    switch (site) {
    case HS_SITE_RESID_PRE:
    case HS_SITE_ATTN_OUT:
        break;
    case HS_SITE_MLP_OUT:
        if (c->mlp == HS_MLP_NONE)
            return hs_fail(HS_EINVAL, "site mlp_out: the model has no MLP");
        break;
    case HS_API_SITE_FINAL:
        if (!c->final_norm)
            return hs_fail(HS_EINVAL, "site final: the model has no final norm");
        break;
    case HS_SITE_Q:
        heads = H, width = c->mla ? c->qk_nope_head_dim + c->qk_rope_head_dim : c->head_dim;
        break;
    case HS_SITE_K:
    case HS_SITE_V:
        if (c->mla)
            return hs_fail(HS_EINVAL, "site %s: an MLA model has no per-head %s (its keys and "
                                      "values come from a shared latent)", name, name);
        heads = G, width = c->head_dim;
        break;
    case HS_SITE_Z:
        heads = H, width = c->head_dim;
        break;
    default: /* pattern, attn_scores */
        heads = H, width = T, maps = 1;
        break;
    }
    shape[0] = B;
    shape[1] = maps ? heads : T;
    shape[2] = maps ? T : heads;
    shape[3] = width;
    return HS_OK;
}

/* ---- tokens ---- */

struct hs_api_tokens {
    hs_tokens t;
    int owned; /* read from a file: t.tok is ours */
    char *path;
};

const hs_tokens *hs_api_tokens_of(const hs_api_tokens *t) { return &t->t; }
const char *hs_api_tokens_path(const hs_api_tokens *t) { return t ? t->path : NULL; }

int hs_api_tokens_read(hs_api_tokens **t, const char *path)
{
    if (!(*t = hs_calloc(1, sizeof **t, "tokens")))
        return HS_ENOMEM;
    int rc = hs_tokens_read(&(*t)->t, path);
    if (!rc && !((*t)->path = strdup(path)))
        rc = hs_fail(HS_ENOMEM, "out of memory");
    (*t)->owned = 1;
    if (rc) {
        hs_api_tokens_free(*t);
        *t = NULL;
    }
    return rc;
}

int hs_api_tokens_wrap(hs_api_tokens **t, const int32_t *ids, size_t n)
{
    *t = NULL;
    int version = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0)
            return hs_fail(HS_EINVAL, "tokens: id %d at %zu is negative", ids[i], i);
        if (ids[i] > 65535)
            version = 7;
    }
    if (!(*t = hs_calloc(1, sizeof **t, "tokens")))
        return HS_ENOMEM;
    (*t)->t = (hs_tokens){ .tok = (int32_t *)ids, .n = n, .version = version };
    return HS_OK;
}

size_t hs_api_tokens_count(const hs_api_tokens *t) { return t->t.n; }
const int32_t *hs_api_tokens_ids(const hs_api_tokens *t) { return t->t.tok; }

void hs_api_tokens_free(hs_api_tokens *t)
{
    if (!t)
        return;
    if (t->owned)
        hs_tokens_free(&t->t);
    free(t->path);
    free(t);
}

int hs_api_tokens_write(const char *path, const int32_t *ids, size_t n)
{
    int version = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0)
            return hs_fail(HS_EINVAL, "%s: id %d at %zu is negative", path, ids[i], i);
        if (ids[i] > 65535)
            version = 7;
    }
    return hs_tokens_write_version(path, ids, n, version);
}

/* ---- prompts ---- */

typedef struct {
    int32_t *clean, *corrupt;
    int T, answer, wrong;
} added_prompt;

struct hs_api_prompts {
    hs_prompt_set ps;   /* loaded, or built from `added` at the first use */
    int built;
    hs_tokenizer *tk;   /* the one that encoded a file's text (position labels); NULL: none */
    char *path;
    added_prompt *added;
    int n_added, cap_added;
};

int hs_api_prompts_load(hs_api_prompts **p, const char *path, const char *tokenizer,
                        const char *model_dir, const hs_model *m)
{
    if (!(*p = hs_calloc(1, sizeof **p, "prompts")))
        return HS_ENOMEM;
    /* as the commands read --prompts (analyze/inputs.c): lengths within n_ctx */
    int rc = hs_tokenizer_for(&(*p)->tk, tokenizer, model_dir, NULL);
    if (!rc)
        rc = hs_prompts_load(&(*p)->ps, path, (*p)->tk, m->cfg.vocab_size, m->cfg.n_ctx);
    if (!rc && !((*p)->path = strdup(path)))
        rc = hs_fail(HS_ENOMEM, "out of memory");
    (*p)->built = 1;
    if (rc) {
        hs_api_prompts_free(*p);
        *p = NULL;
    }
    return rc;
}

int hs_api_prompts_new(hs_api_prompts **p)
{
    return (*p = hs_calloc(1, sizeof **p, "prompts")) ? HS_OK : HS_ENOMEM;
}

int hs_api_prompts_add(hs_api_prompts *p, const int32_t *clean, const int32_t *corrupt, int T,
                       int answer, int wrong)
{
    if (p->built)
        return hs_fail(HS_EINVAL, "prompts: a loaded or used set takes no more pairs");
    if (T <= 0)
        return hs_fail(HS_EINVAL, "prompts: pair %d is empty", p->n_added + 1);
    if (p->n_added == p->cap_added) {
        const int cap = p->cap_added ? 2 * p->cap_added : 16;
        added_prompt *a = realloc(p->added, sizeof *a * (size_t)cap);
        if (!a)
            return hs_fail(HS_ENOMEM, "out of memory");
        p->added = a, p->cap_added = cap;
    }
    added_prompt *a = &p->added[p->n_added];
    a->clean = malloc(sizeof(int32_t) * (size_t)T);
    a->corrupt = malloc(sizeof(int32_t) * (size_t)T);
    if (!a->clean || !a->corrupt) {
        free(a->clean), free(a->corrupt);
        return hs_fail(HS_ENOMEM, "out of memory");
    }
    memcpy(a->clean, clean, sizeof(int32_t) * (size_t)T);
    memcpy(a->corrupt, corrupt, sizeof(int32_t) * (size_t)T);
    a->T = T, a->answer = answer, a->wrong = wrong;
    p->n_added++;
    return HS_OK;
}

int hs_api_prompts_count(const hs_api_prompts *p) { return p->built ? p->ps.n : p->n_added; }

/* The added pairs as a prompt set: groups by ascending length, pairs in the
 * order added, each checked against the model as a prompts file's are. */
static int build(hs_api_prompts *p, const hs_model_config *c)
{
    const int V = c->vocab_size, max_len = c->n_ctx;
    for (int i = 0; i < p->n_added; i++) {
        const added_prompt *a = &p->added[i];
        if (max_len && a->T > max_len)
            return hs_fail(HS_EINVAL, "prompts: pair %d has %d tokens, beyond the model's "
                                      "n_ctx=%d", i + 1, a->T, max_len);
        for (int t = 0; t < a->T; t++)
            if (a->clean[t] < 0 || a->clean[t] >= V || a->corrupt[t] < 0 || a->corrupt[t] >= V)
                return hs_fail(HS_EINVAL, "prompts: pair %d: id %d outside the vocabulary "
                                          "(%d ids)", i + 1,
                               a->clean[t] < 0 || a->clean[t] >= V ? a->clean[t] : a->corrupt[t],
                               V);
        if (a->answer < 0 || a->answer >= V || a->wrong < 0 || a->wrong >= V)
            return hs_fail(HS_EINVAL, "prompts: pair %d: answer %d or wrong %d outside the "
                                      "vocabulary (%d ids)", i + 1, a->answer, a->wrong, V);
    }
    if (!p->n_added)
        return hs_fail(HS_EINVAL, "prompts: no pair");
    hs_prompt_set *ps = &p->ps;
    ps->group = hs_calloc((size_t)p->n_added, sizeof *ps->group, "prompt groups");
    if (!ps->group)
        return HS_ENOMEM;
    for (int i = 0; i < p->n_added; i++) { /* the distinct lengths, ascending */
        int g = 0;
        while (g < ps->n_group && ps->group[g].T < p->added[i].T)
            g++;
        if (g < ps->n_group && ps->group[g].T == p->added[i].T) {
            ps->group[g].n++;
            continue;
        }
        memmove(ps->group + g + 1, ps->group + g, sizeof *ps->group * (size_t)(ps->n_group - g));
        ps->group[g] = (hs_prompt_group){ .T = p->added[i].T, .n = 1 };
        ps->n_group++;
    }
    for (int g = 0; g < ps->n_group; g++) {
        hs_prompt_group *gr = &ps->group[g];
        const size_t n = (size_t)gr->n, T = (size_t)gr->T;
        gr->clean = hs_calloc(n * T, sizeof(int32_t), "prompts");
        gr->corrupt = hs_calloc(n * T, sizeof(int32_t), "prompts");
        gr->answer = hs_calloc(n, sizeof(int32_t), "prompts");
        gr->wrong = hs_calloc(n, sizeof(int32_t), "prompts");
        gr->line = hs_calloc(n, sizeof(int), "prompts");
        if (!gr->clean || !gr->corrupt || !gr->answer || !gr->wrong || !gr->line)
            return HS_ENOMEM;
        gr->n = 0;
        for (int i = 0; i < p->n_added; i++) {
            const added_prompt *a = &p->added[i];
            if (a->T != gr->T)
                continue;
            memcpy(gr->clean + (size_t)gr->n * T, a->clean, sizeof(int32_t) * T);
            memcpy(gr->corrupt + (size_t)gr->n * T, a->corrupt, sizeof(int32_t) * T);
            gr->answer[gr->n] = a->answer, gr->wrong[gr->n] = a->wrong, gr->line[gr->n] = i + 1;
            gr->n++;
        }
    }
    ps->n = p->n_added;
    p->built = 1;
    return HS_OK;
}

int hs_api_prompts_of(const hs_prompt_set **ps, const hs_tokenizer **tk, hs_api_prompts *p,
                      const hs_model *m)
{
    int rc = p->built ? HS_OK : build(p, &m->cfg);
    if (rc) {
        hs_prompt_set_free(&p->ps);
        return rc;
    }
    *ps = &p->ps;
    *tk = p->tk;
    return HS_OK;
}

const char *hs_api_prompts_path(const hs_api_prompts *p) { return p->path; }

void hs_api_prompts_free(hs_api_prompts *p)
{
    if (!p)
        return;
    hs_prompt_set_free(&p->ps);
    if (p->tk)
        hs_tokenizer_free(p->tk);
    for (int i = 0; i < p->n_added; i++)
        free(p->added[i].clean), free(p->added[i].corrupt);
    free(p->added);
    free(p->path);
    free(p);
}
