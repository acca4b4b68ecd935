/* Attribution patching (SPEC §15; Nanda 2023, Syed et al. 2023) and AtP*
 * (Kramár et al. 2024): the first-order estimate of every activation patch of
 * analyze/patch.h from one forward of each run and one backward,
 *
 *   I(n) = sum over the site's elements (a_source - a_base) . dLD/da|base
 *
 * (every position of a head; one position of a position site), denoising
 * (base corrupt, source clean) or noising (base clean, source corrupt),
 * normalised and averaged exactly as patch: value = mean I / (mean LD_source
 * - mean LD_base), stderr = sd(I) / sqrt(n) / |mean LD_clean - mean
 * LD_corrupt|. Sites: z, pattern, q, k, v (head rows; k and v per key/value
 * head, MLA: the latent), resid_pre, attn_out, mlp_out (position rows).
 *
 * AtP* (star), for the head sites: the QK fix -- for q, k and pattern the
 * pattern the patch makes is computed exactly (each query row's softmax with
 * the patched queries or keys) and only what follows it is linearised,
 * I = sum_{t,s} (A_patched - A)_{ts} dLD/dA_{ts} -- and GradDrop: I_l(n) with
 * the backward flow through layer l's attention and MLP outputs stopped, for
 * every layer l, and atp_star = mean_n (1/(L-1)) sum_l |I_l(n)| / |mean
 * LD_clean - mean LD_corrupt| (a magnitude: AtP* ranks candidates for exact
 * patching). Costs L more backwards per batch.
 *
 * Under mpirun the batches are shared out (batch i on rank i mod N) and the
 * per-prompt terms gathered in prompt order, so every rank returns what one
 * process returns. */
#ifndef HS_ATP_H
#define HS_ATP_H

#include <signal.h>
#include <stddef.h>

#include "patch.h"

enum {
    HS_ATP_Z = 0,
    HS_ATP_PATTERN,
    HS_ATP_Q,
    HS_ATP_K,
    HS_ATP_V,
    HS_ATP_RESID_PRE,
    HS_ATP_ATTN_OUT,
    HS_ATP_MLP_OUT,
    HS_ATP_SITES
};

/* "z", "pattern", "q", "k", "v", "resid_pre", "attn_out", "mlp_out". */
const char *hs_atp_site_name(int site);

typedef struct {
    int sites;   /* bit set of 1 << HS_ATP_* */
    int noising; /* gradient on the clean run, source corrupt */
    int star;    /* also atp_star_<site> of the head sites */
    int verify;  /* K > 0: exact patch_z (patch_pattern) of the K heads of largest |atp_z|
                    (|atp_pattern|), through hs_patch */
    int batch;   /* prompts per forward within a length group (0: 32) */
    volatile sig_atomic_t *stop;
    void (*progress)(void *ctx, size_t done, size_t total);
    void *ctx;
} hs_atp_opts;

typedef struct {
    /* logit_diff_clean, logit_diff_corrupt (layer = head = -1), then per head
     * atp_<site>, atp_star_<site>, and with verify the patch_z / patch_pattern
     * of the verified heads */
    hs_head_table heads;
    hs_position_row *pos; /* atp_resid_pre, atp_attn_out, atp_mlp_out (static names) */
    int n_pos;
    double ld_clean, ld_corrupt; /* means over prompts */
    long n;                      /* prompts */
    int T;                       /* positions of the position rows */
} hs_atp_result;

/* --site LIST into the bit set; NULL: z plus, prompts of one length, the
 * position sites (mlp_out with an MLP). HS_EINVAL naming an unknown site. */
int hs_atp_sites(int *sites, const char *list, const hs_model_config *c, const hs_prompt_set *ps);

/* The model's family: HS_EINVAL for an encoder, whose bidirectional
 * patterns the causal patched maps would misstate. */
int hs_atp_family_check(const hs_model_config *c);

/* The options against the model and prompts, before any work (the family
 * too, hs_atp_family_check): a site, an
 * MLP for mlp_out, one prompt length for the position sites, two layers or
 * more for --star (its 1/(L-1)), z or pattern for --verify. */
int hs_atp_check(const hs_model_config *c, const hs_prompt_set *ps, const hs_atp_opts *o);

/* Every estimate of the chosen sites over every prompt. Fails (no rows) on
 * 0/0 as hs_patch does. Costs per batch one forward of each run, one
 * backward (training activations of the batch for both runs), and with
 * star L backwards more and 2 L H maps of the batch; with verify what
 * hs_patch of the z (pattern) site costs. r is initialised here; free it with
 * hs_atp_result_free. */
int hs_atp(hs_atp_result *r, const hs_model *m, const hs_prompt_set *ps, const hs_atp_opts *o);
void hs_atp_result_free(hs_atp_result *r);

#endif
