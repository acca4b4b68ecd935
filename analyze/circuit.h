/* Edge attribution patching and circuits (SPEC §15; Syed et al. 2023, Hanna
 * et al. 2024) on the graph of EAP-IG:
 *
 *   nodes      input (the embedding sum), a{l}.h{h} (head h's z_h W_o^h, no
 *              bias), m{l} (the MLP's output, its biases included)
 *   receivers  a{l}.h{h}<q>, a{l}.h{g}<k>, a{l}.h{g}<v> (g: key/value head;
 *              MLA: the one latent, h0), m{l}, logits: what reads the
 *              residual stream, each through its own input norm
 *   edges      u -> v when u's output is a term of v's input: u's layer
 *              before v's, an MLP after its own layer's heads except with a
 *              parallel residual, input before everything
 *
 *   eap(u -> v)    = mean over prompts of sum over positions and width of
 *                    (a_u,corrupt - a_u,clean) . dLD/d(input of v) on the clean run
 *   eap_ig(u -> v) = the same with the gradient averaged over m steps at the
 *                    embeddings e_corrupt + (k/m)(e_clean - e_corrupt), k = 0..m-1
 *
 * stderr the standard error over prompts. Every receiver's input gradient
 * comes from one backward (hs_backward_from's receivers); the scores of a
 * layer's receivers are one product per prompt of the senders' output
 * changes with the receivers' gradients.
 *
 * Faithfulness of the top N edges by |score| (ties by (sender, receiver) in
 * name order): the clean prompts run with each receiver's input the sum of
 * its in-circuit senders' outputs of this run and its other senders' outputs
 * of the corrupt run, plus the model's constants (hs_forward_split), and
 *   faithfulness(N) = (mean LD_circuit - mean LD_corrupt) / (mean LD_clean - mean LD_corrupt).
 *
 * Refused for models whose residual stream is not a sum of the nodes'
 * outputs (post-norm layers, output norms: gemma2, gemma3_text, olmo2) and
 * for q/k norms over the whole projection. Under mpirun the batches are
 * shared out and the per-prompt terms gathered in prompt order: every rank
 * returns what one process returns. */
#ifndef HS_CIRCUIT_H
#define HS_CIRCUIT_H

#include <signal.h>
#include <stddef.h>

#include "patch.h"

enum { HS_CIRCUIT_EAP = 0, HS_CIRCUIT_EAP_IG = 1 };

typedef struct {
    int method;        /* HS_CIRCUIT_EAP or HS_CIRCUIT_EAP_IG */
    int ig_steps;      /* m (0: 5) */
    const long *top_n; /* the N of each faithfulness point, ascending (n_top 0: no curve) */
    int n_top;
    int batch;         /* prompts per forward within a length group (0: by memory, at most 16) */
    volatile sig_atomic_t *stop;
    void (*progress)(void *ctx, size_t done, size_t total);
    void *ctx;
} hs_circuit_opts;

typedef struct {
    hs_head_table heads;   /* logit_diff_clean, logit_diff_corrupt (layer = head = -1) */
    hs_edge_row *edges;    /* eap or eap_ig of every edge, receiver by receiver */
    long n_edges;
    char (*names)[24];     /* nodes then receivers: what the edges' names point into */
    int n_nodes, n_receivers;
    hs_curve_point *curve; /* faithfulness: step k, x = N (at most n_edges), y */
    int n_curve;
    double ld_clean, ld_corrupt;
    long n;                /* prompts */
} hs_circuit_result;

/* The most interpolation steps eap-ig takes (Hanna et al. use 5 to 100). */
enum { HS_CIRCUIT_MAX_IG_STEPS = 1000 };

/* "eap" or "eap-ig" into *method; HS_EINVAL naming anything else. */
int hs_circuit_method(int *method, const char *name);

/* --top-n "N,N,..." (positive integers) into *top (malloc'd, sorted, distinct);
 * NULL list: 0, 1, 2, 5, 10, 20, 50, ... up to and including the edge count
 * of c's graph. HS_EINVAL naming a bad entry. */
int hs_circuit_top_n(long **top, int *n, const char *list, const hs_model_config *c);

/* The graph's size for c: nodes, receivers, edges. */
void hs_circuit_size(const hs_model_config *c, int *nodes, int *receivers, long *edges);

/* The options against the model, before any work: a family whose residual
 * is a sum of the nodes' outputs (HS_EINVAL with the reason otherwise), the
 * method, m >= 1. */
int hs_circuit_check(const hs_model_config *c, const hs_circuit_opts *o);

/* order (r->n_edges) = the edges of r by rank: |score| descending, ties by
 * (sender, receiver) in name order; the top N of it is the circuit of N. */
int hs_circuit_rank(const hs_circuit_result *r, long *order);

/* Scores every edge over every prompt, then the faithfulness curve. Fails
 * (no rows) on 0/0 as hs_patch does. Costs per batch two forwards and one
 * backward (eap) or m forwards and backwards (eap_ig), with the senders'
 * output changes (nodes x B x T x d) and one layer's receiver gradients in
 * memory, plus per faithfulness point two forwards and one hs_forward_split
 * per batch; the scores take edges x prompts doubles. r is initialised
 * here; free it with hs_circuit_result_free. */
int hs_circuit(hs_circuit_result *r, const hs_model *m, const hs_prompt_set *ps,
               const hs_circuit_opts *o);
void hs_circuit_result_free(hs_circuit_result *r);

#endif
