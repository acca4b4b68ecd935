/* Every number headscope records, described once: its name in the index,
 * where its rows live (per head, per layer, model-wide, per position, per
 * head pair, or a curve), the scale a figure must draw it on, its unit and
 * words for an axis, what a figure of it shows and does not (the report's
 * caption), and the name of its random-init control. The studies write
 * their rows under these names; the figures, the report and the viewer read
 * scales, labels and captions from here, so that a metric's meaning is not
 * retyped in every place that shows it.
 *
 * Adding a metric: its id below and its row in metrics.c. A family of names
 * (one per head count, per arm) is one row whose name is a printf template
 * ("val_loss_heads_%d"); hs_metric_find matches a concrete name to it. */
#ifndef HS_METRICS_H
#define HS_METRICS_H

#include <stddef.h>

typedef enum {
    /* eval, ablate, importance, prune (SPEC §5) */
    HS_M_LOSS,
    HS_M_LOSS_DELTA_ZERO,
    HS_M_LOSS_DELTA_MEAN,
    HS_M_LOSS_DELTA_RESAMPLE,
    HS_M_IMPORTANCE,
    HS_M_IMPORTANCE_RAW,
    HS_M_PRUNED,
    HS_M_FORWARD_MS_UNPRUNED,
    HS_M_FORWARD_MS_PRUNED,
    /* induction */
    HS_M_INDUCTION,
    HS_M_DUPLICATE_TOKEN,
    HS_M_PREV_TOKEN,
    HS_M_COPYING,
    HS_M_INDUCTION_CONTROL,
    HS_M_DUPLICATE_TOKEN_CONTROL,
    HS_M_PREV_TOKEN_CONTROL,
    HS_M_COPYING_CONTROL,
    HS_M_SECOND_HALF_LOSS,
    HS_M_FIRST_HALF_LOSS,
    HS_M_CAUSAL_LOSS_DELTA_TOP_K,
    HS_M_CAUSAL_LOSS_DELTA_RANDOM_K,
    HS_M_CAUSAL_TOP_K,
    HS_M_INDUCTION_ESTABLISHED,
    HS_M_ICL,
    HS_M_ICL_CONTROL,
    /* head-norms: the size of what each head writes */
    HS_M_HEAD_OUTPUT_NORM,
    HS_M_HEAD_OUTPUT_NORM_CONTROL,
    /* pattern statistics (prev_token above) */
    HS_M_ENTROPY,
    HS_M_SELF,
    HS_M_NEXT_TOKEN,
    HS_M_FIRST_TOKEN,
    HS_M_SINK,
    HS_M_SINK_RATE,
    HS_M_SINK_ALPHA,
    HS_M_DELIM,
    HS_M_DISTANCE,
    HS_M_ENTROPY_CONTROL,
    HS_M_SELF_CONTROL,
    HS_M_NEXT_TOKEN_CONTROL,
    HS_M_FIRST_TOKEN_CONTROL,
    HS_M_SINK_CONTROL,
    HS_M_SINK_RATE_CONTROL,
    HS_M_DELIM_CONTROL,
    HS_M_DISTANCE_CONTROL,
    /* encoders' pattern statistics (SPEC §14) */
    HS_M_CLS,
    HS_M_SEP,
    HS_M_PUNCT,
    HS_M_CLS_CONTROL,
    HS_M_SEP_CONTROL,
    HS_M_PUNCT_CONTROL,
    /* causal interventions (SPEC §11) */
    HS_M_LOGIT_DIFF_CLEAN,
    HS_M_LOGIT_DIFF_CORRUPT,
    HS_M_LOGIT_DIFF_GAP,
    HS_M_PREMISE_OK,
    HS_M_PATCH_Z,
    HS_M_PATCH_PATTERN,
    HS_M_PATCH_RESID_PRE,
    HS_M_PATCH_ATTN_OUT,
    HS_M_PATCH_MLP_OUT,
    HS_M_PATH_PATCH,
    HS_M_DLA,
    HS_M_DLA_EMBED,
    HS_M_DLA_POS_EMBED,
    HS_M_DLA_ATTN_BIAS,
    HS_M_DLA_FINAL_NORM_BIAS,
    HS_M_DLA_LM_HEAD_BIAS,
    HS_M_LOGIT_LENS_LOSS,
    HS_M_LOGIT_LENS_LOGIT_DIFF,
    HS_M_Q_COMPOSITION,
    HS_M_K_COMPOSITION,
    HS_M_V_COMPOSITION,
    HS_M_Q_COMPOSITION_CONTROL,
    HS_M_K_COMPOSITION_CONTROL,
    HS_M_V_COMPOSITION_CONTROL,
    HS_M_Q_COMPOSITION_MEAN,
    HS_M_K_COMPOSITION_MEAN,
    HS_M_V_COMPOSITION_MEAN,
    HS_M_Q_COMPOSITION_CONTROL_MEAN,
    HS_M_K_COMPOSITION_CONTROL_MEAN,
    HS_M_V_COMPOSITION_CONTROL_MEAN,
    /* attribution patching and circuits (SPEC §15) */
    HS_M_ATP_Z,
    HS_M_ATP_PATTERN,
    HS_M_ATP_Q,
    HS_M_ATP_K,
    HS_M_ATP_V,
    HS_M_ATP_RESID_PRE,
    HS_M_ATP_ATTN_OUT,
    HS_M_ATP_MLP_OUT,
    HS_M_ATP_STAR_Z,
    HS_M_ATP_STAR_PATTERN,
    HS_M_ATP_STAR_Q,
    HS_M_ATP_STAR_K,
    HS_M_ATP_STAR_V,
    HS_M_EAP,
    HS_M_EAP_IG,
    /* labelled tasks (SPEC §16): model-wide numbers, ablation deltas of
     * the headline metric (one template per metric), L0 gates */
    HS_M_TASK_LOSS,
    HS_M_ACCURACY,
    HS_M_F1,
    HS_M_MCC,
    HS_M_PEARSON,
    HS_M_SPEARMAN,
    HS_M_ACCURACY_DELTA,
    HS_M_F1_DELTA,
    HS_M_MCC_DELTA,
    HS_M_PEARSON_DELTA,
    HS_M_SPEARMAN_DELTA,
    HS_M_L0_GATE,
    HS_M_L0_LOG_ALPHA,
    HS_M_L0_HEADS_OPEN,
    /* heads at long context (SPEC §18) */
    HS_M_RETRIEVAL,
    HS_M_NEEDLE_ACCURACY,
    HS_M_NEEDLE_ACCURACY_MASKED_TOP,
    HS_M_NEEDLE_ACCURACY_MASKED_RANDOM,
    HS_M_KV_CACHE_BYTES,
    HS_M_HAYSTACK_LOSS,
    /* attention-output SAEs (SPEC §19): feature_metrics rows, per feature
     * (head -1), per (feature, head), and sae-eval's of the whole SAE
     * (feature -1) */
    HS_M_FREQUENCY,
    HS_M_MEAN_ACT,
    HS_M_HEAD_SHARE,
    HS_M_SAE_L0,
    HS_M_EXPLAINED_VARIANCE,
    HS_M_MSE,
    HS_M_CE_LOSS_SCORE,
    HS_M_LOSS_CLEAN,
    HS_M_LOSS_SAE,
    HS_M_LOSS_ZERO,
    /* experiments: families of names */
    HS_M_VAL_LOSS_HEADS,
    HS_M_FORWARD_MS_HEADS,
    HS_M_VAL_LOSS_MHA,
    HS_M_VAL_LOSS_MHA_UPTRAINED,
    HS_M_VAL_LOSS_KV_HEADS,
    HS_M_VAL_LOSS_KV_HEADS_UPTRAINED,
    HS_M_VAL_LOSS_WINDOWS,
    HS_M_KV_BYTES_WINDOWS,
    HS_M_FORWARD_MS_WINDOWS,
    /* curves */
    HS_M_TRAIN_LOSS,
    HS_M_VAL_LOSS,
    HS_M_PRUNING,
    HS_M_CAUSAL_RANDOM_K,
    HS_M_TRAIN_LOSS_HEADS,
    HS_M_TRAIN_LOSS_WINDOWS,
    HS_M_FAITHFULNESS,
    HS_M_PRUNING_METRIC,
    HS_M_L0,
    HS_M_COUNT
} hs_metric_id;

/* Where a metric's rows are. */
typedef enum {
    HS_WHERE_HEAD,     /* head_metrics (layer, head) */
    HS_WHERE_LAYER,    /* head_metrics (layer, -1) */
    HS_WHERE_MODEL,    /* head_metrics (-1, -1) */
    HS_WHERE_POSITION, /* position_metrics */
    HS_WHERE_PAIR,     /* head_pair_metrics */
    HS_WHERE_CURVE,    /* curves */
    HS_WHERE_EDGE,     /* edge_metrics (sender, receiver) */
    HS_WHERE_FEATURE,  /* feature_metrics (feature, layer, head) */
} hs_metric_where;

/* The scale a figure draws a metric on, fixed by its meaning (STYLE.md:
 * figures that cannot mislead): a probability on 0 .. 1; a signed quantity
 * diverging about a white 0 (loss deltas at least +-0.1 nats, so noise stays
 * pale); copying on -1 .. 1; entropy on 0 .. ln T and distance on
 * 0 .. T - 1, their largest possible values; other nonnegative numbers on
 * 0 .. their largest value; the normalised causal numbers (patch_*,
 * path_patch, atp_*: fractions of one gap) all on -1 .. 1, so that a grid
 * of 0.008s stays pale beside one of 1s. */
typedef enum {
    HS_SCALE_PROB,
    HS_SCALE_SIGNED,
    HS_SCALE_LOSS_DELTA,
    HS_SCALE_COPYING,
    HS_SCALE_ENTROPY,
    HS_SCALE_DISTANCE,
    HS_SCALE_NONNEG,
    HS_SCALE_FRACTION, /* a fraction of the causal gap: fixed -1 .. 1, beyond at the ends */
} hs_metric_scale;

typedef struct {
    const char *name;      /* as the index holds it, or a printf template */
    hs_metric_where where;
    hs_metric_scale scale;
    const char *unit;      /* "nats", "ms", "" */
    const char *label;     /* words for an axis, a colour bar or a key */
    const char *caption;   /* what a figure of it shows and does not; NULL: none */
    hs_metric_id control;  /* its random-init control; HS_M_COUNT: none */
    /* curves: a figure's title, and what its x and y axes are */
    const char *title, *x, *y;
} hs_metric_desc;

/* The descriptor of id (every id has one). */
const hs_metric_desc *hs_metric(hs_metric_id id);

/* The name of id: HS_METRIC(INDUCTION) is "induction". */
#define HS_METRIC(ID) (hs_metric(HS_M_##ID)->name)

/* A name of a template's family, printf-formatted from its template:
 * (HS_M_VAL_LOSS_HEADS, 4) is "val_loss_heads_4". */
void hs_metric_name_of(char *out, size_t n, hs_metric_id id, ...);

/* The text of id's template before its first '%' ("val_loss_heads_"): the
 * prefix the index groups a family's rows by (hs_index_metric_series). */
void hs_metric_prefix(char *out, size_t n, hs_metric_id id);

/* The descriptor of a concrete name (an exact name, or one a template
 * matches: "val_loss_heads_4"), or NULL. */
const hs_metric_desc *hs_metric_find(const char *name);

/* The name of metric's control into out (n bytes): 1, or 0 when it has
 * none (out is then ""). */
int hs_metric_control(const char *metric, char *out, size_t n);

/* The range a figure draws metric on: [lo, hi], diverging about 0 or not,
 * and the colour-bar label saying which. seq_len is the run's T (0:
 * unknown); max_abs and max the largest |value| and value of what is drawn
 * (the model and its control), negative whether any value is below 0. A
 * metric without a descriptor is drawn as its values demand. */
typedef struct {
    double lo, hi;
    int diverging;
    char label[200];
} hs_metric_range;

void hs_metric_range_of(hs_metric_range *r, const char *metric, int seq_len, double max_abs,
                        double max, int negative);

#endif
