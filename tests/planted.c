#include "planted.h"
#include "config_file.h"

#include <CUnit/CUnit.h>

void build_planted(hs_model *m)
{
    hs_model_config c;
    CU_ASSERT_EQUAL_FATAL(hs_config_preset(&c, "attn-only"), HS_OK);
    c.vocab_size = PV, c.n_layer = 2, c.d_model = PD, c.n_ctx = PP, c.head_dim = PDH;
    c.norm = HS_NORM_RMSNORM, c.norm_bias = 0, c.tie_embeddings = 0;
    for (int l = 0; l < 2; l++)
        c.n_head[l] = c.n_kv_head[l] = PH;
    CU_ASSERT_EQUAL_FATAL(hs_model_init(m, &c), HS_OK);
    hs_weights *w = &m->w;
    const int TOK = 0, POS = PV, PREV = PV + PP, OUT = 2 * PV + PP, HD = PH * PDH;
    for (int v = 0; v < PV; v++)
        w->wte[v * PD + TOK + v] = 1;
    for (int p = 0; p < PP; p++)
        w->wpe[p * PD + POS + p] = 1;
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < PD; i++)
            w->layer[l].ln1_w[i] = 1;
    for (int i = 0; i < PD; i++)
        w->lnf_w[i] = 1;
    hs_attn_weights *a0 = &w->layer[0].attn, *a1 = &w->layer[1].attn;
    for (int p = 0; p < PP; p++) {
        a0->w_q[p * PD + POS + p] = 1;                 /* q = position t */
        if (p + 1 < PDH)
            a0->w_k[(p + 1) * PD + POS + p] = 1;       /* k = position s + 1 */
    }
    for (int v = 0; v < PV; v++) {
        a0->w_v[v * PD + TOK + v] = 1;                 /* v = token */
        a0->w_o[(PREV + v) * HD + v] = 0.2f;           /* z -> PREV */
        a1->w_q[v * PD + TOK + v] = 2;                 /* q = current token */
        a1->w_k[v * PD + PREV + v] = 5;                /* k = token before s */
        a1->w_v[v * PD + TOK + v] = 1;                 /* v = token at s */
        a1->w_o[(OUT + v) * HD + v] = 1;               /* z -> OUT */
        w->lm_w[v * PD + OUT + v] = 3;                 /* logits read OUT */
    }
}
