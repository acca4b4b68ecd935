/* The analyses of analyze/ on the decoder families of SPEC §14 -- gemma,
 * gemma2, gemma3_text, qwen3 (with and without biases), olmo2, phi3 -- on
 * the random checkpoints of tests/fixtures/families3/ (whose forward,
 * backward and maps test_families3 checks against PyTorch):
 *   ablate's and patch's fast paths equal their naive full re-runs, on the
 *   families whose attention output passes a norm before the residual
 *   (out_norm: gemma2, gemma3_text, olmo2) too; the logit lens's last entry
 *   is the model's own output ((1 + w) final norm, final soft-cap); DLA's
 *   parts sum to the (pre-cap) logit difference, or DLA refuses the
 *   out_norm families naming the feature; structural pruning equals gating,
 *   or refuses olmo2's whole-projection q/k norms; capture's maps, pattern
 *   statistics and induction scores equal the forward's maps (and torch's);
 *   the hook sites hold what SPEC §15 says (q/k after their norms and RoPE,
 *   attn_out/mlp_out what the block adds); importance equals a finite
 *   difference; composition is defined on the raw weights (every norm left
 *   out); path patching of a last-layer head equals noising patching of its
 *   z; convert --kv-heads of a model whose grouped heads are equal keeps
 *   its function. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "ablate.h"
#include "cache.h"
#include "checkpoint.h"
#include "composition.h"
#include "convert.h"
#include "dla.h"
#include "fixture.h"
#include "importance.h"
#include "logit_lens.h"
#include "maps.h"
#include "patch.h"
#include "patterns.h"
#include "recorder.h"
#include "runner.h"
#include "scores.h"
#include "study.h"
#include "transformer.h"

#ifdef HEADSCOPE_DOUBLE
static const double TOL = 1e-10;
static const double FD_TOL = 1e-6, FD_EPS = 1e-4; /* central differences */
static const double FILE_TOL = 6e-8;              /* float32 storage of double maps */
#else
static const double TOL = 1e-5;
static const double FD_TOL = 2e-2, FD_EPS = 1e-2;
static const double FILE_TOL = 0;
#endif

enum { B = 2, T = 8, NB = 3, MAXL = 4, MAXH = 8 };

static const char *const CASES[] = { "gemma", "gemma2", "gemma3", "qwen3", "qwen3_bias",
                                     "olmo2", "phi3" };
#define N_CASES (sizeof CASES / sizeof CASES[0])

static void load_case(hs_model *m, const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/families3/%s", HS_FIXTURE_DIR, name);
    const int rc = hs_checkpoint_load(m, dir);
    if (rc)
        printf("\n    %s: %s", name, hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    CU_ASSERT_FATAL(m->cfg.n_layer <= MAXL);
    for (int l = 0; l < m->cfg.n_layer; l++)
        CU_ASSERT_FATAL(m->cfg.n_head[l] <= MAXH);
}

static unsigned long long lcg(unsigned long long *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* A shard in memory: n ids below V from seed. */
static void make_tokens(hs_tokens *t, size_t n, int V, unsigned long long seed)
{
    int32_t *ids = malloc(sizeof(int32_t) * n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)(lcg(&seed) % (unsigned)V);
    CU_ASSERT_EQUAL_FATAL(hs_tokens_adopt(t, ids, n), HS_OK);
}

static double rel(double a, double b) { return fabs(a - b) / fmax(1, fabs(b)); }

/* The index of the largest of x (n), skipping `not`. */
static int argmax(const hs_real *x, int n, int not)
{
    int best = not == 0 ? 1 : 0;
    for (int i = 0; i < n; i++)
        if (i != not && x[i] > x[best])
            best = i;
    return best;
}

/* NP prompts of T tokens: clean random, corrupt with two tokens changed;
 * answer the clean run's top token at the last position, wrong the
 * corrupt run's (its second when they agree), so that LD moves between
 * the runs. */
enum { NP = 4 };
static void family_prompts(hs_prompt_set *ps, const hs_model *m, unsigned long long seed)
{
    const int V = m->cfg.vocab_size;
    hs_prompt_group *g = calloc(1, sizeof *g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    g->T = T, g->n = NP;
    g->clean = calloc(NP * T, sizeof(int32_t));
    g->corrupt = calloc(NP * T, sizeof(int32_t));
    g->answer = calloc(NP, sizeof(int32_t));
    g->wrong = calloc(NP, sizeof(int32_t));
    g->line = calloc(NP, sizeof(int));
    CU_ASSERT_FATAL(g->clean && g->corrupt && g->answer && g->wrong && g->line);
    for (int i = 0; i < NP * T; i++)
        g->clean[i] = (int32_t)(lcg(&seed) % (unsigned)V);
    memcpy(g->corrupt, g->clean, sizeof(int32_t) * NP * T);
    for (int i = 0; i < NP; i++) {
        g->corrupt[i * T + 1] = (g->clean[i * T + 1] + 7) % V;
        g->corrupt[i * T + T - 2] = (g->clean[i * T + T - 2] + 11) % V;
        g->line[i] = i + 1;
    }
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m->cfg, NP, T, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, g->clean, NULL, NULL), HS_OK);
    for (int i = 0; i < NP; i++)
        g->answer[i] = argmax(a.logits + ((size_t)i * T + T - 1) * V, V, -1);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, g->corrupt, NULL, NULL), HS_OK);
    for (int i = 0; i < NP; i++)
        g->wrong[i] = argmax(a.logits + ((size_t)i * T + T - 1) * V, V, g->answer[i]);
    hs_acts_free(&a);
    *ps = (hs_prompt_set){ g, 1, NP };
}

/* The maps (B, H, T, T) of every layer of a training forward of tok (B, T). */
static void forward_maps(hs_acts *a, const hs_model *m, const int32_t *tok, int nb, int t)
{
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(a, &m->cfg, nb, t, HS_ACTS_TRAIN), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(a, m, tok, NULL, NULL), HS_OK);
}

/* ---- ablate -------------------------------------------------------------- */

typedef struct {
    int L, H[MAXL];
    hs_ablate_stat s[MAXL][HS_ABLATE_KINDS][MAXH];
} collected;

static int collect(void *ctx, const hs_ablate_layer *r)
{
    collected *c = ctx;
    for (int k = 0; k < HS_ABLATE_KINDS; k++)
        for (int h = 0; h < r->n_heads; h++)
            c->s[r->layer][k][h] = r->stat[k * r->n_heads + h];
    c->H[r->layer] = r->n_heads;
    c->L = r->layer + 1;
    return HS_OK;
}

static double run_ablation(collected *out, const hs_model *m, const hs_tokens *tok, int naive,
                           int stack, size_t keep_bytes)
{
    memset(out, 0, sizeof *out);
    hs_ablate_opts o = { .B = B, .T = T, .kinds = 7, .naive = naive, .stack = stack,
                         .keep_bytes = keep_bytes, .on_layer = collect, .ctx = out };
    const int rc = hs_ablate(m, tok, &o);
    if (rc)
        printf("\n    %s", hs_last_error());
    CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
    return o.clean_loss;
}

/* Every head and kind (zero, mean, resample): the ablated loss of the fast
 * path -- its stacks of every size, its kept and its recomputed clean
 * prefixes -- equals the naive full forward with z replaced. */
static void test_ablation_fast_path_equals_naive_on_every_family(void)
{
    static collected fast, fast1, recomputed, naive;
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        hs_tokens tok;
        load_case(&m, CASES[i]);
        make_tokens(&tok, (size_t)NB * B * T + 1, m.cfg.vocab_size, 11 + i);
        const double c0 = run_ablation(&fast, &m, &tok, 0, 0, 0);
        run_ablation(&fast1, &m, &tok, 0, 1, 0);
        run_ablation(&recomputed, &m, &tok, 0, 0, 1);
        const double cn = run_ablation(&naive, &m, &tok, 1, 0, 0);
        CU_ASSERT_EQUAL(fast.L, m.cfg.n_layer);
        CU_ASSERT_EQUAL(naive.L, m.cfg.n_layer);
        double worst = 0, largest = 0;
        const collected *paths[] = { &fast, &fast1, &recomputed };
        for (int l = 0; l < m.cfg.n_layer; l++)
            for (int k = 0; k < HS_ABLATE_KINDS; k++)
                for (int h = 0; h < m.cfg.n_head[l]; h++) {
                    const hs_ablate_stat *n = &naive.s[l][k][h];
                    CU_ASSERT_EQUAL(n->n, NB * B);
                    largest = fmax(largest, fabs(n->delta));
                    for (int p = 0; p < 3; p++) {
                        const hs_ablate_stat *a = &paths[p]->s[l][k][h];
                        CU_ASSERT_EQUAL(a->n, NB * B);
                        worst = fmax(worst, fabs((c0 + a->delta) - (cn + n->delta)) /
                                                (cn + n->delta));
                    }
                }
        printf("\n    %-10s clean %.4f, largest |delta| %.3g, fast vs naive ablated loss %.3g",
               CASES[i], cn, largest, worst);
        CU_ASSERT(fabs(c0 - cn) <= TOL * cn);
        CU_ASSERT(largest > 1e-4); /* the heads matter: the comparison means something */
        CU_ASSERT(worst <= TOL);
        hs_tokens_free(&tok);
        hs_model_free(&m);
    }
}

/* ---- patch --------------------------------------------------------------- */

/* Every site (z, pattern, resid_pre, attn_out, mlp_out), denoising and
 * noising: the fast path's value equals the naive hooked forward's, within
 * TOL of the logit differences (the values are ratios over their span). */
static void test_patch_fast_path_equals_naive_on_every_family(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        load_case(&m, CASES[i]);
        hs_prompt_set ps;
        family_prompts(&ps, &m, 5 + i);
        for (int noising = 0; noising < 2; noising++) {
            hs_patch_opts o = { .sites = (1 << HS_PATCH_SITES) - 1, .noising = noising };
            hs_patch_result fast, fast2, naive;
            CU_ASSERT_EQUAL_FATAL(hs_patch(&fast, &m, &ps, &o), HS_OK);
            o.stack = 2;
            CU_ASSERT_EQUAL_FATAL(hs_patch(&fast2, &m, &ps, &o), HS_OK);
            o.stack = 0, o.naive = 1;
            CU_ASSERT_EQUAL_FATAL(hs_patch(&naive, &m, &ps, &o), HS_OK);
            const double span = fabs(naive.ld_clean - naive.ld_corrupt);
            const double scale =
                fmax(1, fmax(fabs(naive.ld_clean), fabs(naive.ld_corrupt))) / span;
            CU_ASSERT_EQUAL_FATAL(fast.heads.n, naive.heads.n);
            CU_ASSERT_EQUAL_FATAL(fast2.heads.n, naive.heads.n);
            CU_ASSERT_EQUAL_FATAL(fast.n_pos, naive.n_pos);
            CU_ASSERT_EQUAL_FATAL(fast2.n_pos, naive.n_pos);
            double worst = 0, largest = 0;
            for (int r = 0; r < naive.heads.n; r++) {
                const hs_metric_row *n = &naive.heads.rows[r];
                const hs_metric_row *f[2] = { &fast.heads.rows[r], &fast2.heads.rows[r] };
                for (int p = 0; p < 2; p++) {
                    CU_ASSERT(f[p]->layer == n->layer && f[p]->head == n->head &&
                              !strcmp(f[p]->metric, n->metric));
                    worst = fmax(worst, fabs(f[p]->value - n->value) / scale);
                }
                if (n->layer >= 0)
                    largest = fmax(largest, fabs(n->value));
            }
            for (int r = 0; r < naive.n_pos; r++) {
                const hs_position_row *n = &naive.pos[r];
                const hs_position_row *f[2] = { &fast.pos[r], &fast2.pos[r] };
                for (int p = 0; p < 2; p++) {
                    CU_ASSERT(f[p]->layer == n->layer && f[p]->position == n->position &&
                              !strcmp(f[p]->metric, n->metric));
                    worst = fmax(worst, fabs(f[p]->value - n->value) / scale);
                }
            }
            printf("\n    %-10s %s: LD %.3f -> %.3f, largest head value %.3g, fast vs naive "
                   "%.3g of LD",
                   CASES[i], noising ? "noising" : "denoising", naive.ld_clean, naive.ld_corrupt,
                   largest, worst);
            CU_ASSERT(span > 1e-2);
            CU_ASSERT(largest > 1e-3);
            CU_ASSERT(worst <= TOL);
            hs_patch_result_free(&fast);
            hs_patch_result_free(&fast2);
            hs_patch_result_free(&naive);
        }
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* ---- logit lens ------------------------------------------------------------ */

/* The lens's entry L is the model's output: on a shard its loss is the
 * forward's per-sequence loss; on prompts its -log p(answer) and logit
 * difference are the forward's (the (1 + w) final norm of the gemma
 * families, gemma2's final soft-cap). */
static void test_logit_lens_last_entry_is_the_models_output_on_every_family(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        hs_tokens tok;
        load_case(&m, CASES[i]);
        const int L = m.cfg.n_layer, V = m.cfg.vocab_size;
        make_tokens(&tok, (size_t)NB * B * T + 1, V, 3 + i);
        hs_lens lens;
        CU_ASSERT_EQUAL_FATAL(hs_lens_data(&lens, &m, &tok, B, T, 0), HS_OK);
        CU_ASSERT_EQUAL(lens.n, NB * B);
        hs_acts a;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, B, T, HS_ACTS_INFER), HS_OK);
        int32_t in[B * T], tg[B * T];
        double worst = 0;
        for (int b = 0; b < NB; b++) {
            hs_batch_at(&tok, (size_t)b * B * T, B, T, in, tg);
            CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, in, tg, NULL), HS_OK);
            for (int s = 0; s < B; s++) {
                double want = 0;
                for (int t = 0; t < T; t++)
                    want += a.losses[s * T + t];
                want /= T;
                worst = fmax(worst, rel(lens.loss[(size_t)(b * B + s) * (L + 1) + L], want));
            }
        }
        hs_lens_free(&lens);
        hs_acts_free(&a);
        /* prompts */
        hs_prompt_set ps;
        family_prompts(&ps, &m, 9 + i);
        const hs_prompt_group *g = &ps.group[0];
        CU_ASSERT_EQUAL_FATAL(hs_lens_prompts(&lens, &m, &ps, 3), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m.cfg, NP, T, HS_ACTS_INFER), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, g->clean, NULL, NULL), HS_OK);
        double worst_p = 0;
        for (int p = 0; p < NP; p++) {
            const hs_real *lg = a.logits + ((size_t)p * T + T - 1) * V;
            double mx = -INFINITY, z = 0;
            for (int v = 0; v < V; v++)
                mx = fmax(mx, lg[v]);
            for (int v = 0; v < V; v++)
                z += exp(lg[v] - mx);
            const double nll = mx + log(z) - lg[g->answer[p]];
            const double ld = (double)lg[g->answer[p]] - lg[g->wrong[p]];
            worst_p = fmax(worst_p, rel(lens.loss[(size_t)p * (L + 1) + L], nll));
            worst_p = fmax(worst_p, rel(lens.logit_diff[(size_t)p * (L + 1) + L], ld));
        }
        printf("\n    %-10s entry %d vs the model: shard loss %.3g, prompts %.3g", CASES[i], L,
               worst, worst_p);
        CU_ASSERT(worst <= TOL);
        CU_ASSERT(worst_p <= TOL);
        hs_lens_free(&lens);
        hs_acts_free(&a);
        hs_prompt_set_free(&ps);
        hs_tokens_free(&tok);
        hs_model_free(&m);
    }
}

/* ---- dla ---------------------------------------------------------------- */

/* The pre-cap logit difference of each prompt's last position: the
 * model's forward with its final soft-cap switched off. */
static void precap_ld(double *ld, const hs_model *m, const hs_prompt_set *ps)
{
    hs_model u = *m; /* shares the weights */
    u.cfg.final_softcap = 0;
    const hs_prompt_group *g = &ps->group[0];
    const int V = m->cfg.vocab_size;
    hs_acts a;
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &u.cfg, g->n, g->T, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &u, g->clean, NULL, NULL), HS_OK);
    for (int p = 0; p < g->n; p++)
        ld[p] = hs_logit_diff(a.logits, p, g->T, V, g->answer[p], g->wrong[p]);
    hs_acts_free(&a);
}

/* Every prompt's parts sum to r's logit difference, which is want's. */
static double dla_gap(const hs_dla *r, const double *want)
{
    double worst = 0;
    for (int p = 0; p < r->n; p++) {
        double sum = 0;
        for (int k = 0; k < r->n_terms; k++)
            sum += r->value[(size_t)p * r->n_terms + k];
        worst = fmax(worst, rel(sum, want[p]));
        worst = fmax(worst, rel(r->logit_diff[p], want[p]));
    }
    return worst;
}

/* Where the residual stream is a sum of head outputs (gemma: (1 + w) final
 * norm, sqrt(d) embeddings; qwen3; phi3) the parts sum to the logit
 * difference; with a final soft-cap they sum to the pre-cap one, which is
 * the logit difference DLA reports; the out_norm families are refused,
 * the message naming the family and the norm after each sublayer. */
static void test_dla_parts_sum_to_the_logit_difference_or_refuse(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        load_case(&m, CASES[i]);
        hs_prompt_set ps;
        family_prompts(&ps, &m, 21 + i);
        hs_dla r;
        if (m.cfg.out_norm) {
            CU_ASSERT_EQUAL(hs_dla_check(&m.cfg), HS_EINVAL);
            const char *msg = hs_last_error();
            printf("\n    %-10s refused: %s", CASES[i], msg);
            CU_ASSERT_PTR_NOT_NULL(strstr(msg, hs_family_name(m.cfg.family)));
            CU_ASSERT_PTR_NOT_NULL(strstr(msg, "norm"));
            CU_ASSERT_PTR_NOT_NULL(strstr(msg, "not a sum of head outputs"));
            CU_ASSERT_EQUAL(hs_dla_compute(&r, &m, &ps, 2), HS_EINVAL);
            hs_prompt_set_free(&ps);
            hs_model_free(&m);
            continue;
        }
        double ld[NP];
        precap_ld(ld, &m, &ps);
        CU_ASSERT_EQUAL_FATAL(hs_dla_compute(&r, &m, &ps, 3), HS_OK);
        const double gap = dla_gap(&r, ld);
        printf("\n    %-10s %d parts sum to the logit difference within %.3g", CASES[i],
               r.n_terms, gap);
        CU_ASSERT(gap <= TOL);
        hs_dla_free(&r);
        /* a final soft-cap (gemma2's, strong here): the pre-cap difference */
        hs_model capped = m;
        capped.cfg.final_softcap = 1.5;
        double ld_capped[NP], moved = 0;
        CU_ASSERT_EQUAL_FATAL(hs_dla_compute(&r, &capped, &ps, 3), HS_OK);
        {
            hs_acts a;
            const hs_prompt_group *g = &ps.group[0];
            CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &capped.cfg, NP, T, HS_ACTS_INFER), HS_OK);
            CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &capped, g->clean, NULL, NULL), HS_OK);
            for (int p = 0; p < NP; p++) {
                ld_capped[p] = hs_logit_diff(a.logits, p, T, m.cfg.vocab_size, g->answer[p],
                                             g->wrong[p]);
                moved = fmax(moved, fabs(ld_capped[p] - ld[p]));
            }
            hs_acts_free(&a);
        }
        const double gap_cap = dla_gap(&r, ld);
        printf("; with a final soft-cap of 1.5 (moving LD by %.3g) they sum to the pre-cap LD "
               "within %.3g",
               moved, gap_cap);
        CU_ASSERT(moved > 1e-2);
        CU_ASSERT(gap_cap <= TOL);
        hs_dla_free(&r);
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* ---- structural pruning ------------------------------------------------------ */

/* The same heads in every case: layer 0 loses head 1, layer 1 heads 0 and
 * 1 (a whole key/value group where G = 2), layer 2 head 3. */
static void prune_mask(unsigned char *pruned, const hs_model_config *c)
{
    memset(pruned, 0, (size_t)c->n_layer * HS_MAX_HEADS);
    pruned[1] = 1;
    pruned[HS_MAX_HEADS + 0] = pruned[HS_MAX_HEADS + 1] = 1;
    if (c->n_layer > 2)
        pruned[2 * HS_MAX_HEADS + 3] = 1;
}

/* logits (B*T, V) of m over tok with gates (NULL: none) into out. */
static void logits_of(hs_real *out, const hs_model *m, const int32_t *tok,
                      const hs_real *const *gates)
{
    hs_acts a;
    hs_hooks hooks = { .gates = gates };
    CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, &m->cfg, B, T, HS_ACTS_INFER), HS_OK);
    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, m, tok, NULL, &hooks), HS_OK);
    memcpy(out, a.logits, sizeof(hs_real) * B * T * m->cfg.vocab_size);
    hs_acts_free(&a);
}

/* The smaller model written by prune --structural (and reloaded from its
 * checkpoint) computes the gated dense model's logits; olmo2, whose q and
 * k norms take one RMS statistic over every head of the projection, is
 * refused, the message naming the family and why. */
static void test_structural_pruning_equals_gating_or_refuses(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m, s;
        load_case(&m, CASES[i]);
        const hs_model_config *c = &m.cfg;
        unsigned char pruned[MAXL * HS_MAX_HEADS];
        prune_mask(pruned, c);
        const int rc = hs_prune_structural(&s, &m, pruned);
        if (c->qk_norm == HS_QK_NORM_PROJ) {
            const char *msg = hs_last_error();
            printf("\n    %-10s refused: %s", CASES[i], rc ? msg : "(pruned)");
            CU_ASSERT_EQUAL(rc, HS_EINVAL);
            if (!rc)
                hs_model_free(&s);
            else {
                CU_ASSERT_PTR_NOT_NULL(strstr(msg, "olmo2"));
                CU_ASSERT_PTR_NOT_NULL(strstr(msg, "q_norm"));
            }
            hs_model_free(&m);
            continue;
        }
        CU_ASSERT_EQUAL_FATAL(rc, HS_OK);
        hs_real gate_mem[MAXL][MAXH];
        const hs_real *gates[MAXL];
        int kept = 0;
        for (int l = 0; l < c->n_layer; l++) {
            for (int h = 0; h < c->n_head[l]; h++)
                gate_mem[l][h] = pruned[l * HS_MAX_HEADS + h] ? 0 : 1;
            gates[l] = gate_mem[l];
            kept += s.cfg.n_head[l];
        }
        int32_t tok[B * T];
        unsigned long long seed = 77 + i;
        for (int k = 0; k < B * T; k++)
            tok[k] = (int32_t)(lcg(&seed) % (unsigned)c->vocab_size);
        const size_t n = (size_t)B * T * c->vocab_size;
        hs_real *want = malloc(sizeof(hs_real) * n), *got = malloc(sizeof(hs_real) * n);
        CU_ASSERT_FATAL(want && got);
        logits_of(want, &m, tok, gates);
        logits_of(got, &s, tok, NULL);
        double *wd = malloc(sizeof(double) * n);
        CU_ASSERT_FATAL(wd != NULL);
        for (size_t k = 0; k < n; k++)
            wd[k] = want[k];
        const double e = fx_err(got, wd, n);
        /* through its checkpoint */
        char out[] = "/tmp/hs_families3_prune_XXXXXX", cmd[600];
        CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(out));
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_save(&s, out), HS_OK);
        hs_model back;
        CU_ASSERT_EQUAL_FATAL(hs_checkpoint_load(&back, out), HS_OK);
        logits_of(got, &back, tok, NULL);
        const double e_back = fx_err(got, wd, n);
        printf("\n    %-10s %d heads kept of %d: logits vs gating %.3g, reloaded %.3g", CASES[i],
               kept, c->n_layer * c->n_head[0], e, e_back);
        CU_ASSERT(s.cfg.n_head[1] < c->n_head[1]);
        CU_ASSERT(e <= TOL);
        CU_ASSERT(e_back <= TOL);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
        CU_ASSERT_EQUAL(system(cmd), 0);
        free(want), free(got), free(wd);
        hs_model_free(&back);
        hs_model_free(&s);
        hs_model_free(&m);
    }
}

/* ---- capture, patterns, induction ------------------------------------------- */

typedef struct {
    const int32_t *tok;
} batch_src;

static int next_batch(void *ctx, size_t i, int32_t *in)
{
    const batch_src *b = ctx;
    memcpy(in, b->tok + i * B * T, sizeof(int32_t) * B * T);
    return HS_OK;
}

/* capture (the recorder streaming every layer's maps into a map file)
 * stores the maps of the forward, and those are torch's. */
static void test_capture_maps_equal_the_forwards_on_every_family(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/families3/%s", HS_FIXTURE_DIR, CASES[i]);
        fx_oracle o;
        fx_oracle_open(&o, HS_FIXTURE_DIR "/families3.txt", CASES[i], dir);
        CU_ASSERT_FATAL(o.B == B && o.T == T);
        const hs_model *m = &o.m;
        const int L = m->cfg.n_layer;
        const fx_tensor *ref = fx_tensor_get(&o.fc, "maps"); /* (L, B, H, T, T) */
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        char path[] = "/tmp/hs_families3_maps_XXXXXX";
        const int fd = mkstemp(path);
        CU_ASSERT_FATAL(fd >= 0);
        close(fd);
        hs_maps_meta meta = { "sha", "{}", "data", "dsha", T, 0, 0 };
        hs_maps_writer *w;
        CU_ASSERT_EQUAL_FATAL(hs_maps_create(&w, path, &meta, 1), HS_OK);
        for (int l = 0; l < L; l++) {
            int heads[MAXH];
            for (int h = 0; h < m->cfg.n_head[l]; h++)
                heads[h] = h;
            CU_ASSERT_EQUAL_FATAL(hs_maps_add_layer(w, l, m->cfg.n_head[l], heads, 0, T), HS_OK);
        }
        hs_map_sink sink = hs_maps_sink(w);
        batch_src src = { o.in };
        hs_record_opts ro = { .B = B, .T = T, .n_batches = 1 };
        CU_ASSERT_EQUAL_FATAL(hs_record(m, next_batch, &src, &sink, &ro), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_maps_finish(w), HS_OK);
        hs_maps_reader *r;
        CU_ASSERT_EQUAL_FATAL(hs_maps_open(&r, path), HS_OK);
        hs_acts a;
        forward_maps(&a, m, o.in, B, T);
        float map[T * T];
        double worst = 0, worst_ref = 0;
        for (int l = 0; l < L; l++) {
            const int H = m->cfg.n_head[l];
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++) {
                    CU_ASSERT_EQUAL_FATAL(hs_maps_read(r, l, b, h, map), HS_OK);
                    const size_t off = ((size_t)b * H + h) * T * T;
                    const double *want = ref->v + (size_t)l * B * H * T * T + off;
                    for (int k = 0; k < T * T; k++) {
                        worst = fmax(worst, fabs(map[k] - (double)a.layer[l].attn.att[off + k]));
                        worst_ref = fmax(worst_ref, fabs(map[k] - want[k]));
                    }
                }
        }
        printf("\n    %-10s file vs forward %.3g, vs torch %.3g", CASES[i], worst, worst_ref);
        CU_ASSERT(worst <= FILE_TOL);
        CU_ASSERT(worst_ref <= TOL + FILE_TOL);
        hs_acts_free(&a);
        hs_maps_close(r);
        unlink(path);
        fx_oracle_close(&o);
    }
}

/* Clark et al.'s statistics (the row observer of the attention kernel, of
 * sliding and soft-capped layers too) equal those computed from the
 * training forward's maps. */
static void test_pattern_statistics_equal_the_maps_on_every_family(void)
{
    const int32_t delim[2] = { 3, 5 };
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        hs_tokens tok;
        load_case(&m, CASES[i]);
        const hs_model_config *c = &m.cfg;
        make_tokens(&tok, (size_t)NB * B * T + 1, c->vocab_size, 31 + i);
        hs_patterns p;
        CU_ASSERT_EQUAL_FATAL(hs_patterns_run(&p, &m, &tok, B, T, 0, delim, 2, NULL, NULL),
                              HS_OK);
        CU_ASSERT_EQUAL(p.n, NB * B);
        /* want[kind][l][h]: the mean over sequences of the per-sequence means */
        static double want[HS_PAT_KINDS][MAXL][MAXH];
        memset(want, 0, sizeof want);
        int32_t in[B * T], tg[B * T];
        for (int bi = 0; bi < NB; bi++) {
            hs_batch_at(&tok, (size_t)bi * B * T, B, T, in, tg);
            hs_acts a;
            forward_maps(&a, &m, in, B, T);
            for (int l = 0; l < c->n_layer; l++)
                for (int b = 0; b < B; b++)
                    for (int h = 0; h < c->n_head[l]; h++) {
                        const hs_real *A =
                            a.layer[l].attn.att + ((size_t)b * c->n_head[l] + h) * T * T;
                        double s[HS_PAT_KINDS] = { 0 };
                        for (int t = 0; t < T; t++) {
                            const hs_real *row = A + (size_t)t * T;
                            for (int k = 0; k < T; k++) {
                                if (row[k] > 0)
                                    s[HS_PAT_ENTROPY] -= row[k] * log(row[k]);
                                s[HS_PAT_DISTANCE] += row[k] * abs(t - k);
                                if (in[b * T + k] == 3 || in[b * T + k] == 5)
                                    s[HS_PAT_DELIM] += row[k];
                            }
                            s[HS_PAT_SELF] += row[t];
                            s[HS_PAT_PREV] += t ? row[t - 1] : 0;
                            s[HS_PAT_NEXT] += t + 1 < T ? row[t + 1] : 0;
                            s[HS_PAT_FIRST] += row[0];
                        }
                        for (int k = 0; k < HS_PAT_KINDS; k++)
                            want[k][l][h] += s[k] / T / (NB * B);
                    }
            hs_acts_free(&a);
        }
        double worst = 0;
        for (int k = 0; k < HS_PAT_KINDS; k++)
            for (int l = 0; l < c->n_layer; l++)
                for (int h = 0; h < c->n_head[l]; h++)
                    worst = fmax(worst, rel(p.value[k][l * HS_MAX_HEADS + h], want[k][l][h]));
        printf("\n    %-10s statistics vs the maps %.3g", CASES[i], worst);
        CU_ASSERT(worst <= TOL);
        hs_patterns_free(&p);
        hs_tokens_free(&tok);
        hs_model_free(&m);
    }
}

/* The induction, duplicate-token and previous-token scores on r ++ r equal
 * those of the training forward's maps; the random-init control of each
 * family runs with scores in [0, 1]; copying scores lie in [-1, 1]. */
static void test_induction_scores_equal_the_maps_and_controls_run(void)
{
    enum { N = 4, TH = 6 };
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        load_case(&m, CASES[i]);
        const hs_model_config *c = &m.cfg;
        int32_t tok[N * 2 * TH];
        hs_repeated_sequences(tok, N, TH, NULL, c->vocab_size, 5 + i);
        hs_scores s;
        CU_ASSERT_EQUAL_FATAL(hs_scores_alloc(&s, c), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_pattern_scores(&s, &m, tok, N, TH, 3, NULL, NULL), HS_OK);
        hs_acts a;
        forward_maps(&a, &m, tok, N, 2 * TH);
        const int L2 = 2 * TH;
        double worst = 0;
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++) {
                double v[HS_SCORE_KINDS] = { 0 };
                for (int b = 0; b < N; b++) {
                    const hs_real *A =
                        a.layer[l].attn.att + ((size_t)b * c->n_head[l] + h) * L2 * L2;
                    double ind = 0, dup = 0, prev = 0;
                    for (int k = 0; k < TH - 1; k++)
                        ind += A[(TH + k) * L2 + k + 1];
                    for (int k = 0; k < TH; k++)
                        dup += A[(TH + k) * L2 + k];
                    for (int t = 1; t < L2; t++)
                        prev += A[t * L2 + t - 1];
                    v[HS_SCORE_INDUCTION] += ind / (TH - 1) / N;
                    v[HS_SCORE_DUPLICATE] += dup / TH / N;
                    v[HS_SCORE_PREV] += prev / (L2 - 1) / N;
                }
                for (int k = 0; k < HS_SCORE_KINDS; k++)
                    worst = fmax(worst, rel(s.value[k][l * HS_MAX_HEADS + h], v[k]));
            }
        hs_acts_free(&a);
        hs_model ctrl;
        hs_scores sc;
        CU_ASSERT_EQUAL_FATAL(hs_control_model(&ctrl, c, 1), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_scores_alloc(&sc, c), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_pattern_scores(&sc, &ctrl, tok, N, TH, 3, NULL, NULL), HS_OK);
        double copying[MAXL * HS_MAX_HEADS], copying_c[MAXL * HS_MAX_HEADS];
        CU_ASSERT_EQUAL_FATAL(hs_copying_scores(copying, &m), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_copying_scores(copying_c, &ctrl), HS_OK);
        int in_range = 1;
        for (int k = 0; k < HS_SCORE_KINDS; k++)
            for (int l = 0; l < c->n_layer; l++)
                for (int h = 0; h < c->n_head[l]; h++) {
                    const double x = sc.value[k][l * HS_MAX_HEADS + h];
                    const double y = copying[l * HS_MAX_HEADS + h];
                    const double z = copying_c[l * HS_MAX_HEADS + h];
                    in_range &= x >= 0 && x <= 1 && fabs(y) <= 1 + 1e-12 && fabs(z) <= 1 + 1e-12;
                }
        printf("\n    %-10s scores vs the maps %.3g; control and copying in range: %d", CASES[i],
               worst, in_range);
        CU_ASSERT(worst <= TOL);
        CU_ASSERT(in_range);
        hs_scores_free(&s);
        hs_scores_free(&sc);
        hs_model_free(&ctrl);
        hs_model_free(&m);
    }
}

/* ---- hook sites ------------------------------------------------------------ */

/* What SPEC §15 says each site holds, from an activation cache of every
 * site: resid_pre the layer's input; attn_out and mlp_out what the block
 * adds to the residual (after an output norm); q and k the vectors the
 * scores are formed from (after the q/k norms and RoPE, before the scale):
 * the maps recomputed from them (scale, soft-cap, window, causal softmax)
 * are the pattern site's; z the pattern times v. */
static void test_hook_sites_hold_what_the_spec_says_on_every_family(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        load_case(&m, CASES[i]);
        const hs_model_config *c = &m.cfg;
        const int L = c->n_layer, d = c->d_model, dh = c->head_dim;
        static const hs_site sites[] = { HS_SITE_RESID_PRE, HS_SITE_ATTN_OUT, HS_SITE_MLP_OUT,
                                         HS_SITE_Q,         HS_SITE_K,        HS_SITE_V,
                                         HS_SITE_Z,         HS_SITE_PATTERN };
        hs_site_key keys[8 * MAXL + 1];
        int nk = 0;
        for (int l = 0; l < L; l++)
            for (size_t s = 0; s < sizeof sites / sizeof sites[0]; s++)
                keys[nk++] = (hs_site_key){ sites[s], l };
        keys[nk++] = (hs_site_key){ HS_SITE_RESID_PRE, L };
        hs_act_cache cache;
        CU_ASSERT_EQUAL_FATAL(hs_act_cache_init(&cache, keys, nk, HS_CACHE_COPY), HS_OK);
        hs_hooks hooks = { 0 };
        hs_act_cache_hooks(&cache, &hooks);
        int32_t tok[B * T];
        unsigned long long seed = 91 + i;
        for (int k = 0; k < B * T; k++)
            tok[k] = (int32_t)(lcg(&seed) % (unsigned)c->vocab_size);
        hs_acts a;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_TRAIN), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, tok, NULL, &hooks), HS_OK);
        const size_t Nd = (size_t)B * T * d;
        double e_resid = 0, e_add = 0, e_maps = 0, e_z = 0;
        for (int l = 0; l < L; l++) {
            const hs_layer_acts *la = &a.layer[l];
            const hs_real *rp = hs_act_cache_get(&cache, HS_SITE_RESID_PRE, l, NULL);
            const hs_real *ao = hs_act_cache_get(&cache, HS_SITE_ATTN_OUT, l, NULL);
            const hs_real *mo = hs_act_cache_get(&cache, HS_SITE_MLP_OUT, l, NULL);
            const hs_real *next = hs_act_cache_get(&cache, HS_SITE_RESID_PRE, l + 1, NULL);
            CU_ASSERT_FATAL(rp && ao && mo && next);
            for (size_t k = 0; k < Nd; k++) {
                e_resid = fmax(e_resid, fabs(rp[k] - la->in[k]));
                /* in + attn_out = r1; r1 + mlp_out = the next layer's input */
                e_add = fmax(e_add, fabs(rp[k] + ao[k] - la->r1[k]) / fmax(1, fabs(la->r1[k])));
                e_add = fmax(e_add, fabs(la->r1[k] + mo[k] - next[k]) / fmax(1, fabs(next[k])));
            }
            const hs_attn_config ac = hs_config_attn(c, l);
            const int H = c->n_head[l], G = c->n_kv_head[l];
            const hs_real *q = hs_act_cache_get(&cache, HS_SITE_Q, l, NULL);
            const hs_real *kk = hs_act_cache_get(&cache, HS_SITE_K, l, NULL);
            const hs_real *v = hs_act_cache_get(&cache, HS_SITE_V, l, NULL);
            const hs_real *z = hs_act_cache_get(&cache, HS_SITE_Z, l, NULL);
            const hs_real *P = hs_act_cache_get(&cache, HS_SITE_PATTERN, l, NULL);
            CU_ASSERT_FATAL(q && kk && v && z && P);
            const double scale = hs_attn_scale(&ac);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < H; h++) {
                    const int g = h / (H / G), W = hs_config_head_window(c, l, h);
                    for (int t = 0; t < T; t++) {
                        double sc[T], mx = -INFINITY, sum = 0;
                        const hs_real *qt = q + (((size_t)b * T + t) * H + h) * dh;
                        for (int s = 0; s <= t; s++) {
                            const hs_real *ks = kk + (((size_t)b * T + s) * G + g) * dh;
                            double x = 0;
                            for (int j = 0; j < dh; j++)
                                x += (double)qt[j] * ks[j];
                            x *= scale;
                            if (ac.softcap > 0)
                                x = ac.softcap * tanh(x / ac.softcap);
                            sc[s] = W > 0 && t - s >= W ? -INFINITY : x;
                            mx = fmax(mx, sc[s]);
                        }
                        for (int s = 0; s <= t; s++)
                            sum += sc[s] == -INFINITY ? 0 : exp(sc[s] - mx);
                        const hs_real *row = P + (((size_t)b * H + h) * T + t) * T;
                        for (int s = 0; s < T; s++) {
                            const double want =
                                s > t || sc[s] == -INFINITY ? 0 : exp(sc[s] - mx) / sum;
                            e_maps = fmax(e_maps, fabs(row[s] - want));
                        }
                        for (int j = 0; j < dh; j++) {
                            double want = 0;
                            for (int s = 0; s < T; s++)
                                want += (double)row[s] * v[(((size_t)b * T + s) * G + g) * dh + j];
                            e_z = fmax(e_z, fabs(z[(((size_t)b * T + t) * H + h) * dh + j] - want) /
                                                fmax(1, fabs(want)));
                        }
                    }
                }
        }
        printf("\n    %-10s resid_pre %.3g, in + attn_out / + mlp_out %.3g, maps from q, k "
               "%.3g, z from pattern, v %.3g",
               CASES[i], e_resid, e_add, e_maps, e_z);
        CU_ASSERT(e_resid == 0);
        CU_ASSERT(e_add <= TOL);
        CU_ASSERT(e_maps <= TOL);
        CU_ASSERT(e_z <= TOL);
        hs_acts_free(&a);
        hs_act_cache_free(&cache);
        hs_model_free(&m);
    }
}

/* ---- importance ------------------------------------------------------------ */

/* importance_raw, the mean over sequences of |dL_n/dxi| from the gates'
 * backward, equals central differences of each sequence's summed loss in
 * each gate (relative to the largest gradient of the model). */
static void test_importance_equals_finite_differences_on_every_family(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        hs_tokens tok;
        load_case(&m, CASES[i]);
        const hs_model_config *c = &m.cfg;
        make_tokens(&tok, (size_t)B * T + 1, c->vocab_size, 41 + i);
        hs_importance imp;
        CU_ASSERT_EQUAL_FATAL(hs_importance_alloc(&imp, c), HS_OK);
        CU_ASSERT_EQUAL_FATAL(hs_importance_compute(&imp, &m, &tok, B, T, 1, NULL, NULL, NULL,
                                                    NULL),
                              HS_OK);
        int32_t in[B * T], tg[B * T];
        hs_batch_at(&tok, 0, B, T, in, tg);
        hs_real gate_mem[MAXL][MAXH];
        const hs_real *gates[MAXL];
        for (int l = 0; l < c->n_layer; l++) {
            for (int h = 0; h < c->n_head[l]; h++)
                gate_mem[l][h] = 1;
            gates[l] = gate_mem[l];
        }
        hs_hooks hooks = { .gates = gates };
        hs_acts a;
        CU_ASSERT_EQUAL_FATAL(hs_acts_alloc(&a, c, B, T, HS_ACTS_INFER), HS_OK);
        double worst = 0, largest = 0;
        double fd[MAXL][MAXH];
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++) {
                double Lp[B] = { 0 }, Lm[B] = { 0 };
                for (int sgn = 0; sgn < 2; sgn++) {
                    gate_mem[l][h] = (hs_real)(sgn ? 1 - FD_EPS : 1 + FD_EPS);
                    CU_ASSERT_EQUAL_FATAL(hs_forward(&a, &m, in, tg, &hooks), HS_OK);
                    for (int b = 0; b < B; b++)
                        for (int t = 0; t < T; t++)
                            (sgn ? Lm : Lp)[b] += a.losses[b * T + t];
                }
                gate_mem[l][h] = 1;
                fd[l][h] = 0;
                for (int b = 0; b < B; b++)
                    fd[l][h] += fabs((Lp[b] - Lm[b]) / (2 * FD_EPS)) / B;
                largest = fmax(largest, fd[l][h]);
            }
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_head[l]; h++)
                worst = fmax(worst, fabs(imp.raw[l * HS_MAX_HEADS + h] - fd[l][h]) / largest);
        printf("\n    %-10s largest |g| %.3g, backward vs central differences %.3g", CASES[i],
               largest, worst);
        CU_ASSERT(largest > 1e-3);
        CU_ASSERT(worst <= FD_TOL);
        hs_acts_free(&a);
        hs_importance_free(&imp);
        hs_tokens_free(&tok);
        hs_model_free(&m);
    }
}

/* ---- composition ------------------------------------------------------------- */

/* A (d, d) = X Y with X (d, dh), Y (dh, d), in double. */
static void mat_mul(double *A, const double *X, const double *Y, int d, int dh)
{
    for (int r = 0; r < d; r++)
        for (int s = 0; s < d; s++) {
            double x = 0;
            for (int k = 0; k < dh; k++)
                x += X[r * dh + k] * Y[k * d + s];
            A[r * d + s] = x;
        }
}

/* The (d, d) circuits of head h of layer l from the raw weights: OV =
 * W_V W_O, QK = W_Q W_K^T (row-vector convention). */
static void circuits(double *ov, double *qk, const hs_model *m, int l, int h)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model, dh = c->head_dim, H = c->n_head[l], G = c->n_kv_head[l];
    const int g = h / (H / G);
    const hs_attn_weights *w = &m->w.layer[l].attn;
    double *wv = malloc(sizeof(double) * d * dh), *wo = malloc(sizeof(double) * dh * d);
    double *wq = malloc(sizeof(double) * d * dh), *wkt = malloc(sizeof(double) * dh * d);
    CU_ASSERT_FATAL(wv && wo && wq && wkt);
    for (int i = 0; i < d; i++)
        for (int j = 0; j < dh; j++) {
            wv[i * dh + j] = w->w_v[((size_t)g * dh + j) * d + i];
            wq[i * dh + j] = w->w_q[((size_t)h * dh + j) * d + i];
            wkt[j * d + i] = w->w_k[((size_t)g * dh + j) * d + i];
            wo[j * d + i] = w->w_o[(size_t)i * H * dh + h * dh + j];
        }
    mat_mul(ov, wv, wo, d, dh);
    mat_mul(qk, wq, wkt, d, dh);
    free(wv), free(wo), free(wq), free(wkt);
}

static double frob(const double *A, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += A[i] * A[i];
    return sqrt(s);
}

/* |X Y| / (|X| |Y|) of (d, d) matrices, Y transposed when `trans`. */
static double comp(const double *X, const double *Y, int trans, int d)
{
    double *P = malloc(sizeof(double) * d * d);
    CU_ASSERT_FATAL(P != NULL);
    for (int r = 0; r < d; r++)
        for (int s = 0; s < d; s++) {
            double x = 0;
            for (int k = 0; k < d; k++)
                x += X[r * d + k] * (trans ? Y[s * d + k] : Y[k * d + s]);
            P[r * d + s] = x;
        }
    const double v = frob(P, d * d) / (frob(X, d * d) * frob(Y, d * d));
    free(P);
    return v;
}

/* Composition is defined on the raw weights of every family, every norm
 * left out (input norms, the out_norm families' output norms, q/k norms;
 * as TransformerLens with fold_ln=False): each score equals the Frobenius
 * ratio of the full d x d circuits (a query head's own key/value head
 * under GQA), and scaling every norm weight changes none. */
static void test_composition_on_the_raw_weights_of_every_family(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        load_case(&m, CASES[i]);
        const hs_model_config *c = &m.cfg;
        const int d = c->d_model;
        hs_pair_row *rows;
        int n;
        CU_ASSERT_EQUAL_FATAL(hs_composition_scores(&rows, &n, &m, 0), HS_OK);
        double *ova = malloc(sizeof(double) * d * d), *qka = malloc(sizeof(double) * d * d);
        double *ovb = malloc(sizeof(double) * d * d), *qkb = malloc(sizeof(double) * d * d);
        CU_ASSERT_FATAL(ova && qka && ovb && qkb);
        double worst = 0;
        int checked = 0;
        for (int r = 0; r < n; r++) {
            const hs_pair_row *p = &rows[r];
            circuits(ova, qka, &m, p->layer_a, p->head_a);
            circuits(ovb, qkb, &m, p->layer_b, p->head_b);
            double want;
            if (!strcmp(p->metric, "q_composition"))
                want = comp(ova, qkb, 0, d);
            else if (!strcmp(p->metric, "k_composition"))
                want = comp(ova, qkb, 1, d);
            else
                want = comp(ova, ovb, 0, d);
            worst = fmax(worst, fabs(p->value - want));
            checked++;
        }
        /* every norm weight scaled: the same scores */
        for (int t = 0; t < m.n_tensors; t++) {
            const hs_tensor_info *ti = &m.tensors[t];
            const size_t len = strlen(ti->name);
            const int weight = len > 7 && !strcmp(ti->name + len - 7, ".weight");
            if (ti->ndim == 1 && weight && (strstr(ti->name, "ln_") || strstr(ti->name, "_norm.")))
                for (size_t k = 0; k < ti->size; k++)
                    m.params[ti->offset + k] = m.params[ti->offset + k] * 3 + 1;
        }
        hs_pair_row *rows2;
        int n2;
        CU_ASSERT_EQUAL_FATAL(hs_composition_scores(&rows2, &n2, &m, 0), HS_OK);
        CU_ASSERT_EQUAL_FATAL(n2, n);
        int same = 1;
        for (int r = 0; r < n; r++)
            same &= rows2[r].value == rows[r].value;
        const int pairs = c->n_head[0] * c->n_head[1] * (c->n_layer > 2 ? 3 : 1);
        printf("\n    %-10s %d scores vs the d x d circuits %.3g; norms left out: %d", CASES[i],
               checked, worst, same);
        CU_ASSERT(n >= 3 * pairs);
        CU_ASSERT(worst <= 1e-9);
        CU_ASSERT(same);
        free(rows), free(rows2), free(ova), free(qka), free(ovb), free(qkb);
        hs_model_free(&m);
    }
}

/* ---- path patching ------------------------------------------------------------ */

/* A last-layer head's only path to the logits runs through what follows it
 * in its own layer, so path patching it to the logits equals noising
 * patching of its z; with q/k/v receivers (k and v per key/value head) it
 * runs and is finite. */
static void test_path_patching_of_a_last_layer_head_equals_noising_patch(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m;
        load_case(&m, CASES[i]);
        const hs_model_config *c = &m.cfg;
        const int L = c->n_layer;
        hs_prompt_set ps;
        family_prompts(&ps, &m, 51 + i);
        int senders[MAXH];
        for (int h = 0; h < c->n_head[L - 1]; h++)
            senders[h] = (L - 1) * HS_MAX_HEADS + h;
        hs_path_opts po = { .sender = senders, .n_senders = c->n_head[L - 1], .batch = 3 };
        hs_head_table pp;
        CU_ASSERT_EQUAL_FATAL(hs_path_patch(&pp, &m, &ps, &po), HS_OK);
        hs_patch_opts o = { .sites = 1 << HS_PATCH_Z, .noising = 1, .naive = 1 };
        hs_patch_result pr;
        CU_ASSERT_EQUAL_FATAL(hs_patch(&pr, &m, &ps, &o), HS_OK);
        double worst = 0;
        for (int h = 0; h < c->n_head[L - 1]; h++) {
            const hs_metric_row *a = hs_head_table_find(&pp, L - 1, h, "path_patch");
            const hs_metric_row *b = hs_head_table_find(&pr.heads, L - 1, h, "patch_z");
            CU_ASSERT_FATAL(a && b);
            worst = fmax(worst, rel(a->value, b->value));
        }
        hs_head_table_free(&pp);
        /* layer 0's head 1 into q, k, v receivers of layer 1 */
        const int sender = 1;
        const hs_receiver recv[3] = { { 1, 0, HS_SITE_Q }, { 1, 3, HS_SITE_K },
                                      { 1, 2, HS_SITE_V } };
        hs_path_opts pr2 = { .sender = &sender, .n_senders = 1, .recv = recv, .n_recv = 3,
                             .batch = 2 };
        CU_ASSERT_EQUAL_FATAL(hs_path_patch(&pp, &m, &ps, &pr2), HS_OK);
        const hs_metric_row *r = hs_head_table_find(&pp, 0, 1, "path_patch");
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        printf("\n    %-10s last layer's heads: path to the logits vs noising patch_z %.3g; "
               "through q/k/v of layer 1: %.4g",
               CASES[i], worst, r->value);
        CU_ASSERT(worst <= TOL);
        CU_ASSERT(isfinite(r->value) && isfinite(r->stderr_value));
        hs_head_table_free(&pp);
        hs_patch_result_free(&pr);
        hs_prompt_set_free(&ps);
        hs_model_free(&m);
    }
}

/* ---- convert --kv-heads --------------------------------------------------------- */

/* Makes the key/value heads of every group of G equal (copies of the
 * group's first, with its biases and whole-projection k-norm weights), so
 * that mean pooling into G heads keeps the model's function. */
static void equalise_groups(hs_model *m, int G)
{
    const hs_model_config *c = &m->cfg;
    const int d = c->d_model, dh = c->head_dim;
    for (int l = 0; l < c->n_layer; l++) {
        hs_attn_weights *w = &m->w.layer[l].attn;
        const int r = c->n_kv_head[l] / G;
        for (int j = 0; j < c->n_kv_head[l]; j++) {
            const int src = j / r * r;
            if (src == j)
                continue;
            memcpy(w->w_k + (size_t)j * dh * d, w->w_k + (size_t)src * dh * d,
                   sizeof(hs_real) * dh * d);
            memcpy(w->w_v + (size_t)j * dh * d, w->w_v + (size_t)src * dh * d,
                   sizeof(hs_real) * dh * d);
            if (w->b_k) {
                memcpy(w->b_k + (size_t)j * dh, w->b_k + (size_t)src * dh, sizeof(hs_real) * dh);
                memcpy(w->b_v + (size_t)j * dh, w->b_v + (size_t)src * dh, sizeof(hs_real) * dh);
            }
            if (c->qk_norm == HS_QK_NORM_PROJ)
                memcpy(w->k_norm + (size_t)j * dh, w->k_norm + (size_t)src * dh,
                       sizeof(hs_real) * dh);
        }
    }
}

/* Every family with more than one key/value head converts to fewer (down
 * to one): with equal heads within each group the converted model computes
 * the same logits; the same count is bit-identical. */
static void test_convert_kv_heads_keeps_the_function_of_equal_groups(void)
{
    for (size_t i = 0; i < N_CASES; i++) {
        hs_model m, out;
        load_case(&m, CASES[i]);
        const hs_model_config *c = &m.cfg;
        int32_t tok[B * T];
        unsigned long long seed = 61 + i;
        for (int k = 0; k < B * T; k++)
            tok[k] = (int32_t)(lcg(&seed) % (unsigned)c->vocab_size);
        const size_t n = (size_t)B * T * c->vocab_size;
        hs_real *want = malloc(sizeof(hs_real) * n), *got = malloc(sizeof(hs_real) * n);
        double *wd = malloc(sizeof(double) * n);
        CU_ASSERT_FATAL(want && got && wd);
        CU_ASSERT_EQUAL_FATAL(hs_convert_kv_heads(&out, &m, c->n_kv_head[0]), HS_OK);
        CU_ASSERT_EQUAL(memcmp(out.params, m.params, sizeof(hs_real) * m.n_params), 0);
        hs_model_free(&out);
        double worst = 0;
        int converted = 0;
        for (int G = c->n_kv_head[0] / 2; G >= 1; G /= 2) {
            equalise_groups(&m, G);
            logits_of(want, &m, tok, NULL);
            for (size_t k = 0; k < n; k++)
                wd[k] = want[k];
            CU_ASSERT_EQUAL_FATAL(hs_convert_kv_heads(&out, &m, G), HS_OK);
            CU_ASSERT_EQUAL(out.cfg.n_kv_head[0], G);
            CU_ASSERT_EQUAL(out.cfg.family, c->family);
            logits_of(got, &out, tok, NULL);
            worst = fmax(worst, fx_err(got, wd, n));
            converted++;
            hs_model_free(&out);
        }
        printf("\n    %-10s %d -> fewer key/value heads (%d conversions): logits %.3g", CASES[i],
               c->n_kv_head[0], converted, worst);
        CU_ASSERT(worst <= TOL);
        free(want), free(got), free(wd);
        hs_model_free(&m);
    }
}

int main(void)
{
    static const hs_test tests[] = {
        { "test_ablation_fast_path_equals_naive_on_every_family",
          test_ablation_fast_path_equals_naive_on_every_family },
        { "test_patch_fast_path_equals_naive_on_every_family",
          test_patch_fast_path_equals_naive_on_every_family },
        { "test_logit_lens_last_entry_is_the_models_output_on_every_family",
          test_logit_lens_last_entry_is_the_models_output_on_every_family },
        { "test_dla_parts_sum_to_the_logit_difference_or_refuse",
          test_dla_parts_sum_to_the_logit_difference_or_refuse },
        { "test_structural_pruning_equals_gating_or_refuses",
          test_structural_pruning_equals_gating_or_refuses },
        { "test_capture_maps_equal_the_forwards_on_every_family",
          test_capture_maps_equal_the_forwards_on_every_family },
        { "test_pattern_statistics_equal_the_maps_on_every_family",
          test_pattern_statistics_equal_the_maps_on_every_family },
        { "test_induction_scores_equal_the_maps_and_controls_run",
          test_induction_scores_equal_the_maps_and_controls_run },
        { "test_hook_sites_hold_what_the_spec_says_on_every_family",
          test_hook_sites_hold_what_the_spec_says_on_every_family },
        { "test_importance_equals_finite_differences_on_every_family",
          test_importance_equals_finite_differences_on_every_family },
        { "test_composition_on_the_raw_weights_of_every_family",
          test_composition_on_the_raw_weights_of_every_family },
        { "test_path_patching_of_a_last_layer_head_equals_noising_patch",
          test_path_patching_of_a_last_layer_head_equals_noising_patch },
        { "test_convert_kv_heads_keeps_the_function_of_equal_groups",
          test_convert_kv_heads_keeps_the_function_of_equal_groups },
    };
    return hs_run_tests("families3_analyses", tests, HS_NTESTS(tests));
}
