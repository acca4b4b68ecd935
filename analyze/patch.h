/* Activation patching and path patching on clean/corrupt prompt pairs
 * (SPEC §11). LD = logit[answer] - logit[wrong] at the last position.
 *
 * patch: the base run with one activation replaced by the source run's —
 * all positions of one head at z and pattern, one position of one layer at
 * resid_pre, attn_out and mlp_out. Denoising (the default): base corrupt,
 * source clean; noising: base clean, source corrupt. Either way
 *
 *   value  = (mean LD_patched - mean LD_base) / (mean LD_source - mean LD_base)
 *   stderr = sd(dP_i - value * D_i) / sqrt(n) / |mean LD_clean - mean LD_corrupt|
 *
 * with dP_i = LD_patched,i - LD_base,i and D_i = LD_source,i - LD_base,i
 * (SPEC §21's delta method, sd with divisor n-1 over prompts): the fraction of the base-to-source
 * change of LD that one activation carries; 0 = no effect, 1 = all of it.
 * Denoising is SPEC's formula; noising is the same with clean and corrupt
 * swapped (TransformerLens/ARENA's noising metric (P - C)/(C - C*) is its
 * negative).
 *
 * Fast by construction, as hs_ablate: per batch of prompts both runs go
 * once through the model and keep every layer's activations; a patch of
 * layer l continues from the base run's residual at layer l (z, pattern:
 * r1 + (z' - z) W_o^(h), or with an output norm in + norm(W_o's output +
 * (z' - z) W_o^(h)): hs_head_change_resid; attn_out: r1 + the position's
 * change; mlp_out: a hook in the continuation) or l-1 (resid_pre: a hook
 * entering layer l), so
 * the layers below are never recomputed, and the patches of one layer run
 * stacked (capture/stack.h) through one batched continuation. */
#ifndef HS_PATCH_H
#define HS_PATCH_H

#include <signal.h>
#include <stddef.h>

#include "index.h"
#include "prompts.h"
#include "stats.h"
#include "weights.h"

enum {
    HS_PATCH_Z = 0,
    HS_PATCH_PATTERN,
    HS_PATCH_RESID_PRE,
    HS_PATCH_ATTN_OUT,
    HS_PATCH_MLP_OUT,
    HS_PATCH_SITES
};

/* "z", "pattern", "resid_pre", "attn_out", "mlp_out". */
const char *hs_patch_site_name(int site);
/* "patch_z", ... "patch_mlp_out". */
const char *hs_patch_metric(int site);
/* Whether the site is per head (z, pattern) or per (layer, position). */
int hs_patch_site_is_head(int site);

typedef struct {
    int sites;   /* bit set of 1 << HS_PATCH_* */
    int noising; /* base clean, source corrupt */
    int batch;   /* prompts per forward within a length group (0: 64, fewer with
                    pattern, whose source maps of every layer are kept: L*B*H*T*T
                    values, at most 256 MiB of them) */
    int stack;   /* patches per batched continuation (0: choose by memory) */
    int naive;   /* reference path: one hooked full forward per patch */
    volatile sig_atomic_t *stop;
    void (*progress)(void *ctx, size_t done, size_t total);
    void *ctx;
} hs_patch_opts;

typedef struct {
    /* hs_patch_baseline's model-wide rows (layer = head = -1), then
     * patch_z / patch_pattern per head */
    hs_head_table heads;
    /* patch_resid_pre, patch_attn_out, patch_mlp_out per (layer, position);
     * metric names are static strings */
    hs_position_row *pos;
    int n_pos;
    double ld_clean, ld_corrupt; /* means over prompts */
    long n;                      /* prompts */
    int T;                       /* positions of the position rows */
} hs_patch_result;

/* The options against the model and the prompts, before any work: a site
 * set, mlp_out only with an MLP, position sites only when every prompt
 * has the same length (positions are keyed 0..T-1; HS_EINVAL naming two
 * lines of different lengths otherwise). */
int hs_patch_check(const hs_model_config *c, const hs_prompt_set *ps, const hs_patch_opts *o);

/* Runs every patch of the chosen sites over every prompt. Fails with
 * HS_EINVAL, and no rows, when mean LD_clean equals mean LD_corrupt (the
 * value would be 0/0). Costs two forwards per batch plus, per layer l and
 * patch, one continuation through layers l.. (or l-1.. for resid_pre). r
 * is initialised here; free it with hs_patch_result_free. */
int hs_patch(hs_patch_result *r, const hs_model *m, const hs_prompt_set *ps,
             const hs_patch_opts *o);
void hs_patch_result_free(hs_patch_result *r);

/* ---- shared by patch and path-patch ------------------------------------------ */

/* LD of sequence `row` of a forward's logits (a: its activations, V the
 * vocabulary): logit[answer] - logit[wrong] at the last position. */
double hs_logit_diff(const hs_real *logits, int row, int T, int V, int answer, int wrong);

/* The logit differences of a prompt set's clean and corrupt runs over
 * prompts, and their per-prompt gap LD_clean,i - LD_corrupt,i. */
typedef struct {
    hs_welford clean, corrupt, gap;
} hs_ld_baseline;

static inline void hs_ld_baseline_add(hs_ld_baseline *b, double clean, double corrupt)
{
    hs_welford_add(&b->clean, clean);
    hs_welford_add(&b->corrupt, corrupt);
    hs_welford_add(&b->gap, clean - corrupt);
}

/* The model-wide rows into t: logit_diff_clean and logit_diff_corrupt
 * (mean, stderr over prompts), SPEC §21's logit_diff_gap (G = mean LD_clean
 * - mean LD_corrupt, stderr of the per-prompt gaps) and premise_ok (1 when
 * |G| >= 2 stderr, else 0: the study decides, hs_study_premise); span = G.
 * HS_EINVAL (no rows) when G is 0 or not finite: every value would be 0/0. */
int hs_patch_baseline(hs_head_table *t, double *span, const hs_ld_baseline *b);

/* A normalised number of SPEC §11/§21 from the pairs (dP_i, dG_i) of each
 * prompt's effect and gap: value = mean dP / towards (towards = mean
 * LD_source - mean LD_base: +-span, or |span| for a magnitude), stderr =
 * the delta method's sd(dP_i - value * D_i) / sqrt(n) / |span| with D_i the
 * prompt's own towards (dG_i with towards' sign). */
void hs_patch_ratio(double *value, double *stderr_value, const hs_welford2 *w, double towards,
                    double span);

/* ---- path patching (Wang et al. 2022) --------------------------------------- */

/* A receiver: the q, k or v input of query head `head` of `layer` (site
 * HS_SITE_Q, HS_SITE_K or HS_SITE_V). With grouped keys (G < H) a k or v
 * receiver is the key/value head head / (H/G), shared by its group. */
typedef struct {
    int layer, head;
    int site;
} hs_receiver;

typedef struct {
    const int *sender; /* [n_senders] sender heads as layer * HS_MAX_HEADS + head */
    int n_senders;
    const hs_receiver *recv; /* [n_recv], patched together; n_recv 0: the logits */
    int n_recv;
    int batch; /* prompts per forward (0: 64) */
    volatile sig_atomic_t *stop;
    void (*progress)(void *ctx, size_t done, size_t total);
    void *ctx;
} hs_path_opts;

/* Senders and receivers against the model (HS_EINVAL naming them). */
int hs_path_check(const hs_model_config *c, const hs_path_opts *o);

/* Path patching of each sender separately, on the clean run: (1) the
 * clean prompt with the sender's z from the corrupt run and every other
 * head's z frozen to the clean run (MLPs and norms recomputed), recording
 * the receivers' q/k/v (hook sites q, k, v: per head, after RoPE); (2) the
 * clean prompt with those receivers' q/k/v patched in, everything else
 * free. Without receivers LD is read from run (1) (the path to the
 * logits: the final residual of run (1)). Rows: logit_diff_clean,
 * logit_diff_corrupt, logit_diff_gap, premise_ok and per sender
 *
 *   path_patch = (mean LD_pp - mean LD_clean) / (mean LD_corrupt - mean LD_clean)
 *
 * with patch's stderr (dP_i = LD_pp,i - LD_clean,i, D_i = LD_corrupt,i -
 * LD_clean,i): patch's noising formula, the fraction of the clean-to-corrupt change of
 * LD sent along the path). 0/0 fails as in hs_patch. Costs two forwards per
 * batch plus one (logits) or two (up to the last receiver's layer, then a
 * full one) per sender. t is initialised here. */
int hs_path_patch(hs_head_table *t, const hs_model *m, const hs_prompt_set *ps,
                  const hs_path_opts *o);

#endif
