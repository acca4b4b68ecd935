#include "family.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* Each family's record lives in its own file (model/family_NAME.c). */
extern const hs_family_ops hs_family_headscope, hs_family_gpt2, hs_family_llama,
    hs_family_gpt_neox, hs_family_mistral, hs_family_qwen2, hs_family_gemma, hs_family_gemma2,
    hs_family_gemma3, hs_family_qwen3, hs_family_olmo2, hs_family_phi3, hs_family_bert,
    hs_family_roberta, hs_family_t5, hs_family_bart, hs_family_marian;

static const hs_family_ops *const FAMILIES[HS_FAMILY_COUNT] = {
    [HS_FAMILY_HEADSCOPE] = &hs_family_headscope, [HS_FAMILY_GPT2] = &hs_family_gpt2,
    [HS_FAMILY_LLAMA] = &hs_family_llama,         [HS_FAMILY_GPT_NEOX] = &hs_family_gpt_neox,
    [HS_FAMILY_MISTRAL] = &hs_family_mistral,     [HS_FAMILY_QWEN2] = &hs_family_qwen2,
    [HS_FAMILY_GEMMA] = &hs_family_gemma,         [HS_FAMILY_GEMMA2] = &hs_family_gemma2,
    [HS_FAMILY_GEMMA3] = &hs_family_gemma3,       [HS_FAMILY_QWEN3] = &hs_family_qwen3,
    [HS_FAMILY_OLMO2] = &hs_family_olmo2,         [HS_FAMILY_PHI3] = &hs_family_phi3,
    [HS_FAMILY_BERT] = &hs_family_bert,           [HS_FAMILY_ROBERTA] = &hs_family_roberta,
    [HS_FAMILY_T5] = &hs_family_t5,               [HS_FAMILY_BART] = &hs_family_bart,
    [HS_FAMILY_MARIAN] = &hs_family_marian,
};

/* Each record sits at its own id and names its model_type as config.h's
 * hs_family_name does (the one spelling other rooms read). */
__attribute__((unused)) static int families_sane(void)
{
    for (int f = 0; f < HS_FAMILY_COUNT; f++)
        if (!FAMILIES[f] || FAMILIES[f]->id != (hs_family)f ||
            strcmp(FAMILIES[f]->model_type, hs_family_name((hs_family)f)))
            return 0;
    return 1;
}

const hs_family_ops *hs_family_ops_of(hs_family f)
{
    assert(families_sane());
    return f >= 0 && f < HS_FAMILY_COUNT ? FAMILIES[f] : NULL;
}

const hs_family_ops *hs_family_by_type(const char *type)
{
    for (int f = 0; type && f < HS_FAMILY_COUNT; f++)
        if (!strcmp(FAMILIES[f]->model_type, type))
            return FAMILIES[f];
    return NULL;
}

const char *hs_family_types(void)
{
    static char list[512];
    if (!*list) /* the HF families in table order, then ours */
        for (int f = 1, k = 0; f <= HS_FAMILY_COUNT; f++) {
            const int i = f % HS_FAMILY_COUNT;
            k += snprintf(list + k, sizeof list - (size_t)k, "%s%s",
                          f == 1 ? "" : f == HS_FAMILY_COUNT ? " or " : ", ",
                          FAMILIES[i]->model_type);
        }
    return list;
}

int hs_family_find(const hs_model *m, const char *fmt, int l)
{
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    return hs_model_find(m, name);
}

void hs_preset_rmsnorm_swiglu(hs_model_config *c)
{
    c->pos = HS_POS_ROPE;
    c->norm = HS_NORM_RMSNORM;
    c->norm_bias = 0;
    c->mlp = HS_MLP_SWIGLU;
    c->d_ff = 172;
    c->tie_embeddings = 0;
}
