/* The descriptor table of every metric (metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NONE HS_M_COUNT
#define HEAD HS_WHERE_HEAD
#define LAYER HS_WHERE_LAYER
#define MODEL HS_WHERE_MODEL
#define POS HS_WHERE_POSITION
#define PAIR HS_WHERE_PAIR
#define CURVE HS_WHERE_CURVE
#define EDGE HS_WHERE_EDGE
#define FEATURE HS_WHERE_FEATURE

static const char ATTN[] = "attention probability";
static const char LOSS_NATS[] = "loss (nats, next-token cross-entropy)";
static const char TOKENS[] = "tokens trained on";

static const hs_metric_desc METRICS[HS_M_COUNT] = {
    [HS_M_LOSS] = { "loss", MODEL, HS_SCALE_NONNEG, "nats", LOSS_NATS, NULL, NONE },
    [HS_M_LOSS_DELTA_ZERO] = { "loss_delta_zero", HEAD, HS_SCALE_LOSS_DELTA, "nats",
        "loss_delta_zero", "Evaluation loss with each head's output z set to 0, minus the clean "
        "loss (nats; the index holds the standard error of the per-sequence differences). One "
        "head at a time: heads that back each other up each look unimportant here.", NONE },
    [HS_M_LOSS_DELTA_MEAN] = { "loss_delta_mean", HEAD, HS_SCALE_LOSS_DELTA, "nats",
        "loss_delta_mean", "Evaluation loss with each head's output replaced by its mean over "
        "the data, minus the clean loss (nats; the index holds the standard error of the "
        "per-sequence differences). One head at a time: heads that back each other up each look "
        "unimportant here.", NONE },
    [HS_M_LOSS_DELTA_RESAMPLE] = { "loss_delta_resample", HEAD, HS_SCALE_LOSS_DELTA, "nats",
        "loss_delta_resample", "Evaluation loss with each head's output taken from another "
        "sequence of the batch, minus the clean loss (nats; the index holds the standard error "
        "of the per-sequence differences). One head at a time: heads that back each other up "
        "each look unimportant here.", NONE },
    [HS_M_IMPORTANCE] = { "importance", HEAD, HS_SCALE_PROB, "",
        "importance (unit length per layer)", "Mean |dL/d gate| per head (Michel et al. 2019), "
        "each layer's vector scaled to unit length: a first-order estimate of what removing the "
        "head costs, comparable within a layer, not across layers (a layer of one head always "
        "reads 1).", NONE },
    [HS_M_IMPORTANCE_RAW] = { "importance_raw", HEAD, HS_SCALE_NONNEG, "",
        "importance_raw", NULL, NONE },
    [HS_M_PRUNED] = { "pruned", HEAD, HS_SCALE_PROB, "", "1 = pruned",
        "The final mask: 1 for a pruned head.", NONE },
    [HS_M_FORWARD_MS_UNPRUNED] = { "forward_ms_unpruned", MODEL, HS_SCALE_NONNEG, "ms",
        "forward ms, unpruned", NULL, NONE },
    [HS_M_FORWARD_MS_PRUNED] = { "forward_ms_pruned", MODEL, HS_SCALE_NONNEG, "ms",
        "forward ms, pruned", NULL, NONE },

    [HS_M_INDUCTION] = { "induction", HEAD, HS_SCALE_PROB, "", ATTN,
        "Mean attention from each token of the second copy of r ++ r to the token after its "
        "first occurrence (chance &asymp; 1/position), beside the same score of a randomly "
        "initialised model of the same configuration. A high score is a pattern, not proof of "
        "function: see the causal check.", HS_M_INDUCTION_CONTROL },
    [HS_M_DUPLICATE_TOKEN] = { "duplicate_token", HEAD, HS_SCALE_PROB, "", ATTN,
        "Mean attention from the second copy to the earlier occurrence of the same token, "
        "beside the control.", HS_M_DUPLICATE_TOKEN_CONTROL },
    [HS_M_PREV_TOKEN] = { "prev_token", HEAD, HS_SCALE_PROB, "", ATTN,
        "Mean attention to the previous position, beside the control. Previous-token heads in "
        "an earlier layer are what induction heads usually compose with.",
        HS_M_PREV_TOKEN_CONTROL },
    [HS_M_COPYING] = { "copying", HEAD, HS_SCALE_COPYING, "", "copying score",
        "Sum of the real parts over the sum of the magnitudes of the eigenvalues of each head's "
        "OV circuit W_E W_V W_O W_U (positive: the head copies the tokens it attends to), beside "
        "the control. Norms are ignored, so it is a property of the weights, not of any input.",
        HS_M_COPYING_CONTROL },
    [HS_M_INDUCTION_CONTROL] = { "induction_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL, NONE },
    [HS_M_DUPLICATE_TOKEN_CONTROL] = { "duplicate_token_control", HEAD, HS_SCALE_PROB, "", ATTN,
        NULL, NONE },
    [HS_M_PREV_TOKEN_CONTROL] = { "prev_token_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL,
        NONE },
    [HS_M_COPYING_CONTROL] = { "copying_control", HEAD, HS_SCALE_COPYING, "", "copying score",
        NULL, NONE },
    [HS_M_SECOND_HALF_LOSS] = { "second_half_loss", MODEL, HS_SCALE_NONNEG, "nats",
        "second-half loss on r ++ r", NULL, NONE },
    [HS_M_FIRST_HALF_LOSS] = { "first_half_loss", MODEL, HS_SCALE_NONNEG, "nats",
        "first-half loss on r ++ r", "Random tokens predicting random tokens: about ln V at "
        "chance; well above it, the probe's tokens are ones the model finds improbable.", NONE },
    [HS_M_CAUSAL_LOSS_DELTA_TOP_K] = { "causal_loss_delta_top_k", MODEL, HS_SCALE_LOSS_DELTA,
        "nats", "loss increase, top heads off", NULL, NONE },
    [HS_M_CAUSAL_LOSS_DELTA_RANDOM_K] = { "causal_loss_delta_random_k", MODEL,
        HS_SCALE_LOSS_DELTA, "nats", "loss increase, random heads off", NULL, NONE },
    [HS_M_CAUSAL_TOP_K] = { "causal_top_k", HEAD, HS_SCALE_PROB, "", "1 = targeted by the "
        "causal check", NULL, NONE },
    [HS_M_INDUCTION_ESTABLISHED] = { "induction_established", MODEL, HS_SCALE_PROB, "",
        "1 = established", NULL, NONE },
    [HS_M_ICL] = { "icl", MODEL, HS_SCALE_SIGNED, "nats", "in-context learning score", NULL,
        HS_M_ICL_CONTROL },
    [HS_M_ICL_CONTROL] = { "icl_control", MODEL, HS_SCALE_SIGNED, "nats",
        "in-context learning score", NULL, NONE },
    [HS_M_HEAD_OUTPUT_NORM] = { "head_output_norm", HEAD, HS_SCALE_NONNEG, "",
        "output norm ||z_h W_O^h||", "Mean L2 norm of what each head adds to the residual "
        "stream, z_h W_O^h at each position (Kobayashi et al. 2020), beside a random-init "
        "model's: how much a head writes, not what, and not whether the model needs it (a "
        "large output can be cancelled downstream or ignored).", HS_M_HEAD_OUTPUT_NORM_CONTROL },
    [HS_M_HEAD_OUTPUT_NORM_CONTROL] = { "head_output_norm_control", HEAD, HS_SCALE_NONNEG, "",
        "output norm ||z_h W_O^h||", NULL, NONE },

    [HS_M_ENTROPY] = { "entropy", HEAD, HS_SCALE_ENTROPY, "nats", "entropy (nats)",
        "Mean entropy (nats) of each head's attention distribution: low is focused, "
        "ln(position) is uniform.", HS_M_ENTROPY_CONTROL },
    [HS_M_SELF] = { "self", HEAD, HS_SCALE_PROB, "", ATTN, NULL, HS_M_SELF_CONTROL },
    [HS_M_NEXT_TOKEN] = { "next_token", HEAD, HS_SCALE_PROB, "", ATTN, NULL,
        HS_M_NEXT_TOKEN_CONTROL },
    [HS_M_FIRST_TOKEN] = { "first_token", HEAD, HS_SCALE_PROB, "", ATTN,
        "Mean attention on position 0; heads that park their attention there are often doing "
        "nothing with it.", HS_M_FIRST_TOKEN_CONTROL },
    [HS_M_SINK] = { "sink", HEAD, HS_SCALE_PROB, "", "attention sink alpha_0",
        "Each head's alpha_0 (SPEC §18, Gu et al. 2024): the mean attention on position 0 over "
        "a sequence's real queries, then over sequences (first_token's number).",
        HS_M_SINK_CONTROL },
    [HS_M_SINK_RATE] = { "sink_rate", MODEL, HS_SCALE_PROB, "", "sink rate",
        "The share of heads whose alpha_0 exceeds --sink-epsilon (default 0.3).",
        HS_M_SINK_RATE_CONTROL },
    [HS_M_SINK_ALPHA] = { "sink_alpha", POS, HS_SCALE_PROB, "", "attention on position k",
        "Each head's alpha_k for k < --sink-positions (SPEC §18): the mean of att[t, k] over a "
        "sequence's real queries t >= k, then over sequences; position_metrics rows with the "
        "head.", NONE },
    [HS_M_SINK_CONTROL] = { "sink_control", HEAD, HS_SCALE_PROB, "", "attention sink alpha_0",
        NULL, NONE },
    [HS_M_SINK_RATE_CONTROL] = { "sink_rate_control", MODEL, HS_SCALE_PROB, "", "sink rate",
        NULL, NONE },
    [HS_M_DELIM] = { "delim", HEAD, HS_SCALE_PROB, "", ATTN, NULL, HS_M_DELIM_CONTROL },
    [HS_M_DISTANCE] = { "distance", HEAD, HS_SCALE_DISTANCE, "positions",
        "mean distance (positions)", "Mean attention-weighted distance |t - s| between query "
        "and key.", HS_M_DISTANCE_CONTROL },
    [HS_M_ENTROPY_CONTROL] = { "entropy_control", HEAD, HS_SCALE_ENTROPY, "nats",
        "entropy (nats)", NULL, NONE },
    [HS_M_SELF_CONTROL] = { "self_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL, NONE },
    [HS_M_NEXT_TOKEN_CONTROL] = { "next_token_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL,
        NONE },
    [HS_M_FIRST_TOKEN_CONTROL] = { "first_token_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL,
        NONE },
    [HS_M_DELIM_CONTROL] = { "delim_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL, NONE },
    [HS_M_DISTANCE_CONTROL] = { "distance_control", HEAD, HS_SCALE_DISTANCE, "positions",
        "mean distance (positions)", NULL, NONE },

    [HS_M_CLS] = { "cls", HEAD, HS_SCALE_PROB, "", ATTN,
        "Mean attention on [CLS] (an encoder's; per document over its real tokens, then over "
        "documents, as Clark et al.). Heads that park attention on [CLS] or [SEP] are often "
        "doing nothing with it (a no-op), not gathering the sequence.", HS_M_CLS_CONTROL },
    [HS_M_SEP] = { "sep", HEAD, HS_SCALE_PROB, "", ATTN,
        "Mean attention on the [SEP] tokens (an encoder's), beside the control.",
        HS_M_SEP_CONTROL },
    [HS_M_PUNCT] = { "punct", HEAD, HS_SCALE_PROB, "", ATTN,
        "Mean attention on \".\" and \",\" (an encoder's), beside the control.",
        HS_M_PUNCT_CONTROL },
    [HS_M_CLS_CONTROL] = { "cls_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL, NONE },
    [HS_M_SEP_CONTROL] = { "sep_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL, NONE },
    [HS_M_PUNCT_CONTROL] = { "punct_control", HEAD, HS_SCALE_PROB, "", ATTN, NULL, NONE },

    [HS_M_LOGIT_DIFF_CLEAN] = { "logit_diff_clean", MODEL, HS_SCALE_SIGNED, "logits",
        "logit difference, clean", NULL, NONE },
    [HS_M_LOGIT_DIFF_CORRUPT] = { "logit_diff_corrupt", MODEL, HS_SCALE_SIGNED, "logits",
        "logit difference, corrupt", NULL, NONE },
    [HS_M_LOGIT_DIFF_GAP] = { "logit_diff_gap", MODEL, HS_SCALE_SIGNED, "logits",
        "logit difference gap, clean - corrupt", "The denominator of every normalised causal "
        "number (SPEC §21), with the stderr of the per-prompt gaps.", NONE },
    [HS_M_PREMISE_OK] = { "premise_ok", MODEL, HS_SCALE_PROB, "",
        "premise holds (1) or not (0)", "1 when the gap is at least two of its standard errors "
        "from 0; 0 (with --allow-weak-premise): the normalised numbers are not established.",
        NONE },
    [HS_M_PATCH_Z] = { "patch_z", HEAD, HS_SCALE_FRACTION, "", "patch_z",
        "Each head's output z patched at every position: the fraction of the logit difference "
        "it restores on its own. Heads that back each other up each look small.", NONE },
    [HS_M_PATCH_PATTERN] = { "patch_pattern", HEAD, HS_SCALE_FRACTION, "", "patch_pattern",
        "Each head's attention pattern patched (its values left to the run): how much of the "
        "effect goes through where the head attends.", NONE },
    [HS_M_PATCH_RESID_PRE] = { "patch_resid_pre", POS, HS_SCALE_FRACTION, "",
        "the residual stream entering each layer", NULL, NONE },
    [HS_M_PATCH_ATTN_OUT] = { "patch_attn_out", POS, HS_SCALE_FRACTION, "",
        "each layer's attention output", NULL, NONE },
    [HS_M_PATCH_MLP_OUT] = { "patch_mlp_out", POS, HS_SCALE_FRACTION, "", "each layer's MLP output",
        NULL, NONE },
    [HS_M_PATH_PATCH] = { "path_patch", HEAD, HS_SCALE_FRACTION, "", "path_patch",
        "Path patching (Wang et al. 2022): the sender head's clean-to-corrupt change carried "
        "only through the receivers named in the run (or straight to the logits), as a fraction "
        "of the logit difference.", NONE },
    [HS_M_DLA] = { "dla", HEAD, HS_SCALE_SIGNED, "logits", "dla",
        "The heads' direct logit attribution as a layer &times; head grid.", NONE },
    [HS_M_DLA_EMBED] = { "dla_embed", MODEL, HS_SCALE_SIGNED, "logits", "embed", NULL, NONE },
    [HS_M_DLA_POS_EMBED] = { "dla_pos_embed", MODEL, HS_SCALE_SIGNED, "logits", "pos_embed", NULL,
        NONE },
    [HS_M_DLA_ATTN_BIAS] = { "dla_attn_bias", MODEL, HS_SCALE_SIGNED, "logits", "attn biases",
        NULL, NONE },
    [HS_M_DLA_FINAL_NORM_BIAS] = { "dla_final_norm_bias", MODEL, HS_SCALE_SIGNED, "logits",
        "final norm bias", NULL, NONE },
    [HS_M_DLA_LM_HEAD_BIAS] = { "dla_lm_head_bias", MODEL, HS_SCALE_SIGNED, "logits",
        "unembedding bias", NULL, NONE },
    [HS_M_LOGIT_LENS_LOSS] = { "logit_lens_loss", LAYER, HS_SCALE_NONNEG, "nats",
        "loss of the answer, −log p (nats)", NULL, NONE },
    [HS_M_LOGIT_LENS_LOGIT_DIFF] = { "logit_lens_logit_diff", LAYER, HS_SCALE_SIGNED, "logits",
        "logit difference", NULL, NONE },
    [HS_M_Q_COMPOSITION] = { "q_composition", PAIR, HS_SCALE_PROB, "", "queries", NULL,
        HS_M_Q_COMPOSITION_CONTROL },
    [HS_M_K_COMPOSITION] = { "k_composition", PAIR, HS_SCALE_PROB, "", "keys", NULL,
        HS_M_K_COMPOSITION_CONTROL },
    [HS_M_V_COMPOSITION] = { "v_composition", PAIR, HS_SCALE_PROB, "", "values", NULL,
        HS_M_V_COMPOSITION_CONTROL },
    [HS_M_Q_COMPOSITION_CONTROL] = { "q_composition_control", PAIR, HS_SCALE_PROB, "", "queries",
        NULL, NONE },
    [HS_M_K_COMPOSITION_CONTROL] = { "k_composition_control", PAIR, HS_SCALE_PROB, "", "keys",
        NULL, NONE },
    [HS_M_V_COMPOSITION_CONTROL] = { "v_composition_control", PAIR, HS_SCALE_PROB, "", "values",
        NULL, NONE },
    [HS_M_Q_COMPOSITION_MEAN] = { "q_composition_mean", MODEL, HS_SCALE_PROB, "",
        "mean Q-composition", NULL, HS_M_Q_COMPOSITION_CONTROL_MEAN },
    [HS_M_K_COMPOSITION_MEAN] = { "k_composition_mean", MODEL, HS_SCALE_PROB, "",
        "mean K-composition", NULL, HS_M_K_COMPOSITION_CONTROL_MEAN },
    [HS_M_V_COMPOSITION_MEAN] = { "v_composition_mean", MODEL, HS_SCALE_PROB, "",
        "mean V-composition", NULL, HS_M_V_COMPOSITION_CONTROL_MEAN },
    [HS_M_Q_COMPOSITION_CONTROL_MEAN] = { "q_composition_control_mean", MODEL, HS_SCALE_PROB, "",
        "mean Q-composition, control", NULL, NONE },
    [HS_M_K_COMPOSITION_CONTROL_MEAN] = { "k_composition_control_mean", MODEL, HS_SCALE_PROB, "",
        "mean K-composition, control", NULL, NONE },
    [HS_M_V_COMPOSITION_CONTROL_MEAN] = { "v_composition_control_mean", MODEL, HS_SCALE_PROB, "",
        "mean V-composition, control", NULL, NONE },

    [HS_M_ATP_Z] = { "atp_z", HEAD, HS_SCALE_FRACTION, "", "atp_z",
        "Attribution patching (Nanda 2023): the first-order estimate of patch_z, "
        "(z clean - z corrupt) times the gradient of the logit difference on the corrupt run, "
        "summed over positions, as a fraction of LD clean - LD corrupt. One forward and backward "
        "for every head; it misses what saturating attention and norms do (compare patch_z).",
        NONE },
    [HS_M_ATP_PATTERN] = { "atp_pattern", HEAD, HS_SCALE_FRACTION, "", "atp_pattern",
        "The first-order estimate of patch_pattern: each head's change of attention pattern "
        "times the gradient of the logit difference with respect to it.", NONE },
    [HS_M_ATP_Q] = { "atp_q", HEAD, HS_SCALE_FRACTION, "", "atp_q",
        "The first-order estimate of patching each head's queries (after RoPE).", NONE },
    [HS_M_ATP_K] = { "atp_k", HEAD, HS_SCALE_FRACTION, "", "atp_k",
        "The first-order estimate of patching each key/value head's keys (head = the key/value "
        "head; MLA: the latent as the keys read it).", NONE },
    [HS_M_ATP_V] = { "atp_v", HEAD, HS_SCALE_FRACTION, "", "atp_v",
        "The first-order estimate of patching each key/value head's values (head = the "
        "key/value head; MLA: the latent as the values read it).", NONE },
    [HS_M_ATP_RESID_PRE] = { "atp_resid_pre", POS, HS_SCALE_FRACTION, "",
        "the residual stream entering each layer (first-order)", NULL, NONE },
    [HS_M_ATP_ATTN_OUT] = { "atp_attn_out", POS, HS_SCALE_FRACTION, "",
        "each layer's attention output (first-order)", NULL, NONE },
    [HS_M_ATP_MLP_OUT] = { "atp_mlp_out", POS, HS_SCALE_FRACTION, "",
        "each layer's MLP output (first-order)", NULL, NONE },
    [HS_M_ATP_STAR_Z] = { "atp_star_z", HEAD, HS_SCALE_FRACTION, "", "atp_star_z",
        "AtP* (Kramar et al. 2024) with GradDrop: the mean over layers of |the estimate with "
        "that layer's backward flow stopped|, a magnitude that ranks heads for exact patching "
        "(cancellations across paths no longer hide a head), not an effect.", NONE },
    [HS_M_ATP_STAR_PATTERN] = { "atp_star_pattern", HEAD, HS_SCALE_FRACTION, "",
        "atp_star_pattern", NULL, NONE },
    [HS_M_ATP_STAR_Q] = { "atp_star_q", HEAD, HS_SCALE_FRACTION, "", "atp_star_q",
        "AtP* for queries: the pattern change of the patched queries computed exactly (QK fix), "
        "what follows the pattern linearised, with GradDrop; a magnitude for ranking.", NONE },
    [HS_M_ATP_STAR_K] = { "atp_star_k", HEAD, HS_SCALE_FRACTION, "", "atp_star_k",
        "AtP* for keys (head = the key/value head): QK fix and GradDrop; a magnitude for "
        "ranking.", NONE },
    [HS_M_ATP_STAR_V] = { "atp_star_v", HEAD, HS_SCALE_FRACTION, "", "atp_star_v", NULL, NONE },
    [HS_M_EAP] = { "eap", EDGE, HS_SCALE_SIGNED, "logits", "eap",
        "Edge attribution patching (Syed et al. 2023): each edge's sender output change "
        "(corrupt - clean) times the gradient of the logit difference with respect to the "
        "receiver's input on the clean run, mean over prompts (logits).", NONE },
    [HS_M_EAP_IG] = { "eap_ig", EDGE, HS_SCALE_SIGNED, "logits", "eap_ig",
        "EAP-IG (Hanna et al. 2024): edge attribution patching with the gradient averaged "
        "over embeddings interpolated from corrupt to clean, mean over prompts (logits).",
        NONE },

    [HS_M_TASK_LOSS] = { "task_loss", MODEL, HS_SCALE_NONNEG, "nats",
        "task loss (mean per example)", NULL, NONE },
    [HS_M_ACCURACY] = { "accuracy", MODEL, HS_SCALE_PROB, "", "accuracy", NULL, NONE },
    [HS_M_F1] = { "f1", MODEL, HS_SCALE_PROB, "", "F1", NULL, NONE },
    [HS_M_MCC] = { "mcc", MODEL, HS_SCALE_SIGNED, "", "Matthews correlation", NULL, NONE },
    [HS_M_PEARSON] = { "pearson", MODEL, HS_SCALE_SIGNED, "", "Pearson correlation", NULL, NONE },
    [HS_M_SPEARMAN] = { "spearman", MODEL, HS_SCALE_SIGNED, "", "Spearman correlation", NULL,
        NONE },
    [HS_M_ACCURACY_DELTA] = { "accuracy_delta_%s", HEAD, HS_SCALE_SIGNED, "",
        "accuracy change", "Task accuracy with each head ablated minus the clean accuracy (the "
        "index holds the paired jackknife standard error). One head at a time.", NONE },
    [HS_M_F1_DELTA] = { "f1_delta_%s", HEAD, HS_SCALE_SIGNED, "", "F1 change", NULL, NONE },
    [HS_M_MCC_DELTA] = { "mcc_delta_%s", HEAD, HS_SCALE_SIGNED, "", "MCC change", NULL, NONE },
    [HS_M_PEARSON_DELTA] = { "pearson_delta_%s", HEAD, HS_SCALE_SIGNED, "", "Pearson change",
        NULL, NONE },
    [HS_M_SPEARMAN_DELTA] = { "spearman_delta_%s", HEAD, HS_SCALE_SIGNED, "",
        "Spearman change", NULL, NONE },
    [HS_M_L0_GATE] = { "l0_gate", HEAD, HS_SCALE_PROB, "", "L0 gate (0 = closed)",
        "Each head's deterministic hard-concrete gate after training the gates on the task "
        "loss plus lambda times the expected number of open heads (Voita et al. 2019): heads "
        "the task can do without close. One lambda per run.", NONE },
    [HS_M_L0_LOG_ALPHA] = { "l0_log_alpha", HEAD, HS_SCALE_SIGNED, "", "log alpha", NULL,
        NONE },
    [HS_M_L0_HEADS_OPEN] = { "l0_heads_open", MODEL, HS_SCALE_NONNEG, "", "heads open", NULL,
        NONE },
    [HS_M_RETRIEVAL] = { "retrieval", HEAD, HS_SCALE_PROB, "", "retrieval score",
        "Wu et al.'s retrieval score (SPEC §18): the share of a needle's tokens each head copies "
        "(its largest attention on the needle token it emits) over the successful runs of the "
        "length x depth grid, divided by every run. High scores say where the copy happens, not "
        "that the head is needed: --mask-top checks that.", NONE },
    [HS_M_NEEDLE_ACCURACY] = { "needle_accuracy", MODEL, HS_SCALE_PROB, "", "needle accuracy",
        "The share of runs whose greedy answer recalls more than half the answer's words "
        "(ROUGE-1 recall > 0.5).", NONE },
    [HS_M_NEEDLE_ACCURACY_MASKED_TOP] = { "needle_accuracy_masked_top", MODEL, HS_SCALE_PROB,
        "", "needle accuracy", "Needle accuracy with the K highest-scoring heads' z set to 0.",
        NONE },
    [HS_M_NEEDLE_ACCURACY_MASKED_RANDOM] = { "needle_accuracy_masked_random", MODEL,
        HS_SCALE_PROB, "", "needle accuracy",
        "Needle accuracy with K random other heads' z set to 0: the control of the top heads' "
        "mask.", NONE },
    [HS_M_KV_CACHE_BYTES] = { "kv_cache_bytes", MODEL, HS_SCALE_NONNEG, "bytes",
        "KV cache (bytes)", "The decoder's cache for the grid's longest run (float32 keys and "
        "values), under the run's KV plan if any.", NONE },
    [HS_M_HAYSTACK_LOSS] = { "haystack_loss", MODEL, HS_SCALE_NONNEG, "nats", LOSS_NATS,
        "The next-token loss of the haystack's first N tokens (the longest length) under the "
        "run's KV plan if any: what the plan costs on plain text.", NONE },
    [HS_M_FREQUENCY] = { "frequency", FEATURE, HS_SCALE_PROB, "", "feature frequency",
        "The share of tokens on which the SAE feature is active (f > 0).", NONE },
    [HS_M_MEAN_ACT] = { "mean_act", FEATURE, HS_SCALE_NONNEG, "", "mean activation",
        "The feature's mean activation over the tokens where it is active (NULL where it "
        "never is).", NONE },
    [HS_M_HEAD_SHARE] = { "head_share", FEATURE, HS_SCALE_PROB, "", "head share",
        "Kissane et al.'s share of a hook_z feature's decoder norm in each head's block: "
        "||W_dec[f, h]|| / sum over heads of ||W_dec[f, h']||; a weight-based attribution, not "
        "a causal one.", NONE },
    [HS_M_SAE_L0] = { "l0", FEATURE, HS_SCALE_NONNEG, "", "active features a token",
        "sae-eval: the mean count of active features a token.", NONE },
    [HS_M_EXPLAINED_VARIANCE] = { "explained_variance", FEATURE, HS_SCALE_SIGNED, "",
        "explained variance",
        "sae-eval: 1 - sum ||x - x_hat||^2 / sum ||x - mean x||^2 over the tokens.", NONE },
    [HS_M_MSE] = { "mse", FEATURE, HS_SCALE_NONNEG, "", "reconstruction MSE",
        "sae-eval: the mean squared error of the reconstruction over every element.", NONE },
    [HS_M_CE_LOSS_SCORE] = { "ce_loss_score", FEATURE, HS_SCALE_SIGNED, "", "CE loss score",
        "sae-eval: (L_zero - L_sae) / (L_zero - L_clean), the hooked activation replaced by the "
        "reconstruction (L_sae) or by 0 (L_zero); meaningless where L_zero is near L_clean.",
        NONE },
    [HS_M_LOSS_CLEAN] = { "loss_clean", FEATURE, HS_SCALE_NONNEG, "nats", LOSS_NATS,
        "sae-eval: the next-token loss of the model as it is.", NONE },
    [HS_M_LOSS_SAE] = { "loss_sae", FEATURE, HS_SCALE_NONNEG, "nats", LOSS_NATS,
        "sae-eval: the loss with the hooked activation replaced by the SAE's reconstruction.",
        NONE },
    [HS_M_LOSS_ZERO] = { "loss_zero", FEATURE, HS_SCALE_NONNEG, "nats", LOSS_NATS,
        "sae-eval: the loss with the hooked activation replaced by 0.", NONE },
    [HS_M_VAL_LOSS_HEADS] = { "val_loss_heads_%d", MODEL, HS_SCALE_NONNEG, "nats",
        "validation loss", NULL, NONE },
    [HS_M_FORWARD_MS_HEADS] = { "forward_ms_heads_%d", MODEL, HS_SCALE_NONNEG, "ms",
        "forward ms", NULL, NONE },
    [HS_M_VAL_LOSS_MHA] = { "val_loss_mha", MODEL, HS_SCALE_NONNEG, "nats", "validation loss",
        NULL, NONE },
    [HS_M_VAL_LOSS_MHA_UPTRAINED] = { "val_loss_mha_uptrained", MODEL, HS_SCALE_NONNEG, "nats",
        "validation loss, uptrained", NULL, NONE },
    [HS_M_VAL_LOSS_KV_HEADS] = { "val_loss_kv_heads_%d", MODEL, HS_SCALE_NONNEG, "nats",
        "validation loss", NULL, NONE },
    [HS_M_VAL_LOSS_KV_HEADS_UPTRAINED] = { "val_loss_kv_heads_%d_uptrained", MODEL,
        HS_SCALE_NONNEG, "nats", "validation loss, uptrained", NULL, NONE },
    [HS_M_VAL_LOSS_WINDOWS] = { "val_loss_windows_%s", MODEL, HS_SCALE_NONNEG, "nats",
        "validation loss", NULL, NONE },
    [HS_M_KV_BYTES_WINDOWS] = { "kv_bytes_per_token_windows_%s", MODEL, HS_SCALE_NONNEG,
        "bytes", "kv bytes per token", NULL, NONE },
    [HS_M_FORWARD_MS_WINDOWS] = { "forward_ms_windows_%s", MODEL, HS_SCALE_NONNEG, "ms",
        "forward ms", NULL, NONE },

    [HS_M_TRAIN_LOSS] = { "train_loss", CURVE, HS_SCALE_NONNEG, "nats",
        "training loss (each batch)", NULL, NONE, "Training loss", TOKENS, LOSS_NATS },
    [HS_M_VAL_LOSS] = { "val_loss", CURVE, HS_SCALE_NONNEG, "nats",
        "validation loss (held-out data)", NULL, NONE, "Training and validation loss", TOKENS,
        LOSS_NATS },
    [HS_M_PRUNING] = { "pruning", CURVE, HS_SCALE_NONNEG, "nats",
        "validation loss after each pruning step",
        "Validation loss after each step of joint pruning (heads of lowest importance gated "
        "off, importance recomputed on the pruned model) against the fraction of heads pruned.",
        NONE, "Validation loss against the fraction of heads pruned", "fraction of heads pruned",
        LOSS_NATS },
    [HS_M_CAUSAL_RANDOM_K] = { "causal_random_k", CURVE, HS_SCALE_LOSS_DELTA, "nats",
        "loss increase, k random heads off", NULL, NONE, "Causal check: random draws", "draw",
        "increase of the loss (nats)" },
    [HS_M_TRAIN_LOSS_HEADS] = { "train_loss_heads_%d_seed_%d", CURVE, HS_SCALE_NONNEG, "nats",
        "training loss, %d head(s), seed %d", NULL, NONE, "Training loss", TOKENS, LOSS_NATS },
    [HS_M_TRAIN_LOSS_WINDOWS] = { "train_loss_windows_%s_seed_%d", CURVE, HS_SCALE_NONNEG,
        "nats", "training loss", NULL, NONE, "Training loss", TOKENS, LOSS_NATS },
    [HS_M_FAITHFULNESS] = { "faithfulness", CURVE, HS_SCALE_SIGNED, "",
        "faithfulness of the top-N circuit",
        "The clean prompts run with only the N edges of largest |score| carrying this run's "
        "values (every other edge its corrupt value): (LD circuit - LD corrupt) / (LD clean - "
        "LD corrupt) against N. 1: the circuit alone restores the clean behaviour; the empty "
        "circuit is 0 by construction. Faithful on these prompts, not an explanation of the "
        "task in general.",
        NONE, "Faithfulness of the top-N edges", "edges in the circuit (N)",
        "faithfulness: (LD circuit - LD corrupt) / (LD clean - LD corrupt)" },
    [HS_M_PRUNING_METRIC] = { "pruning_%s", CURVE, HS_SCALE_SIGNED, "", "task metric",
        "The task's headline metric after each step of joint pruning by importance against "
        "the fraction of heads pruned (Michel et al. 2019's figure).",
        NONE, "Task metric against the fraction of heads pruned", "fraction of heads pruned",
        "headline metric" },
    [HS_M_L0] = { "l0", CURVE, HS_SCALE_SIGNED, "", "task metric with the gates",
        "The task's headline metric with each run's deterministic L0 gates against the heads "
        "they leave open, one point per lambda (one run each).",
        NONE, "Task metric against the heads L0 gates leave open", "heads open",
        "headline metric" },
};

const hs_metric_desc *hs_metric(hs_metric_id id)
{
    return &METRICS[id >= 0 && id < HS_M_COUNT ? id : 0];
}

void hs_metric_name_of(char *out, size_t n, hs_metric_id id, ...)
{
    va_list ap;
    va_start(ap, id);
    vsnprintf(out, n, hs_metric(id)->name, ap);
    va_end(ap);
}

void hs_metric_prefix(char *out, size_t n, hs_metric_id id)
{
    const char *t = hs_metric(id)->name;
    snprintf(out, n, "%.*s", (int)strcspn(t, "%"), t);
}

/* 1 when name is an instance of template t: %d matches digits, %s one or
 * more letters, digits or underscores up to the rest of t. */
static int matches(const char *t, const char *name)
{
    for (; *t; t++, name++) {
        if (t[0] == '%' && (t[1] == 'd' || t[1] == 's')) {
            const char *rest = t + 2;
            if (t[1] == 'd') {
                const char *p = name;
                while (*p >= '0' && *p <= '9')
                    p++;
                return p > name && matches(rest, p);
            }
            for (const char *p = name + 1; p <= name + strlen(name); p++)
                if (matches(rest, p))
                    return 1;
            return 0;
        }
        if (*t != *name)
            return 0;
    }
    return !*name;
}

const hs_metric_desc *hs_metric_find(const char *name)
{
    for (int i = 0; name && i < HS_M_COUNT; i++)
        if (!strcmp(METRICS[i].name, name))
            return &METRICS[i];
    for (int i = 0; name && i < HS_M_COUNT; i++)
        if (strchr(METRICS[i].name, '%') && matches(METRICS[i].name, name))
            return &METRICS[i];
    return NULL;
}

int hs_metric_control(const char *metric, char *out, size_t n)
{
    const hs_metric_desc *d = hs_metric_find(metric);
    *out = 0;
    if (!d || d->control == NONE)
        return 0;
    snprintf(out, n, "%s", METRICS[d->control].name);
    return 1;
}

/* The smallest number of two significant digits >= x > 0 (1 for x <= 0). */
static double nice_up(double x)
{
    if (!(x > 0) || !isfinite(x))
        return 1;
    double unit = pow(10, floor(log10(x)) - 1);
    return ceil(x / unit - 1e-9) * unit;
}

void hs_metric_range_of(hs_metric_range *r, const char *metric, int seq_len, double max_abs,
                        double max, int negative)
{
    const hs_metric_desc *d = hs_metric_find(metric);
    const char *label = d ? d->label : metric;
    hs_metric_scale s = d ? d->scale : negative ? HS_SCALE_SIGNED : HS_SCALE_NONNEG;
    const int T = seq_len;
    if ((s == HS_SCALE_ENTROPY || s == HS_SCALE_DISTANCE) && T <= 1)
        s = HS_SCALE_NONNEG; /* the bound needs the run's T */
    if (s == HS_SCALE_NONNEG && negative)
        s = HS_SCALE_SIGNED;
    r->lo = 0, r->hi = 1, r->diverging = 0;
    switch (s) {
    case HS_SCALE_PROB:
        snprintf(r->label, sizeof r->label, "%s, fixed scale 0 .. 1", label);
        return;
    case HS_SCALE_COPYING:
        r->lo = -1, r->diverging = 1;
        snprintf(r->label, sizeof r->label, "%s, fixed scale −1 .. 1, white at 0", label);
        return;
    case HS_SCALE_ENTROPY:
    case HS_SCALE_DISTANCE:
        r->hi = s == HS_SCALE_ENTROPY ? log(T) : T - 1;
        snprintf(r->label, sizeof r->label, "%s, fixed scale 0 .. %s = %.3g (T = %d)", label,
                 s == HS_SCALE_ENTROPY ? "ln T" : "T − 1", r->hi, T);
        return;
    case HS_SCALE_SIGNED:
    case HS_SCALE_LOSS_DELTA:
        r->hi = nice_up(max_abs);
        if (s == HS_SCALE_LOSS_DELTA && r->hi < 0.1)
            r->hi = 0.1;
        r->lo = -r->hi, r->diverging = 1;
        snprintf(r->label, sizeof r->label, "%s%s, scale −%.2g .. +%.2g, white at 0", label,
                 s == HS_SCALE_LOSS_DELTA ? " (nats)" : "", r->hi, r->hi);
        return;
    case HS_SCALE_FRACTION:
        r->lo = -1, r->diverging = 1;
        snprintf(r->label, sizeof r->label, "%s, fixed scale −1 .. 1 (fractions of the gap), "
                 "white at 0%s", label, max_abs > 1 ? "; larger |values| at the ends" : "");
        return;
    case HS_SCALE_NONNEG:
        r->hi = nice_up(max);
        snprintf(r->label, sizeof r->label, "%s, scale 0 .. %.2g (its largest value)", label,
                 r->hi);
        return;
    }
}
