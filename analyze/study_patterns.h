/* Attention-pattern statistics (SPEC §5), from a forward or a capture file. */
#ifndef HS_STUDY_PATTERNS_H
#define HS_STUDY_PATTERNS_H

#include "maps.h"
#include "scores.h"
#include "study.h"

/* The statistics of env's model on the batches of its data (an encoder's
 * [CLS], [SEP], "." and "," from env's tokenizer, else config.json's ids),
 * or of a capture file's maps. */
typedef struct {
    const char *maps;          /* a capture file to read instead of a forward (NULL: none) */
    const char *delim;         /* --delim "ID,ID,...": token ids counted by `delim` */
    int32_t delim_ids[64];     /* resolved by the check */
    int n_delim;
    int control;               /* also <stat>_control of hs_control_model(seed) */
    long seed;
    const char *js_out;        /* also the head-to-head Jensen-Shannon distances, as a CSV
                                  written here and recorded as the run's artifact */
    double sink_epsilon;       /* SPEC §18: sink_rate's threshold on alpha_0 (0: 0.3) */
    int sink_positions;        /* SPEC §18: alpha_k for k < this (0: none) */
} hs_patterns_opts;

typedef struct {
    hs_study_rows rows;
    /* head_metrics rows: every statistic of hs_pattern_name per head (model
     * layer and head ids), sink (alpha_0) per head and model-wide sink_rate
     * (SPEC §18), then with suffix _control when asked */
    hs_head_table table;
    long sequences;
    int heads;          /* heads with rows (a capture file may hold a subset) */
    /* with js_out: D (js_n x js_n) and each row's model layer and head */
    double *js;
    int js_n, *js_layer, *js_head;
    char note[256];     /* "" or which encoder statistics were left out, and why */
    /* position_metrics rows sink_alpha (layer, head, position k) with --sink-positions */
    hs_position_row *sink_alpha;
    int n_sink_alpha;
} hs_patterns_result;

/* --delim's ids (HS_EINVAL naming it), --sink-positions in 1 ..
 * HS_MAX_SINK_POSITIONS and at most the sequences' length; with maps, that
 * the file opens (its error) and no control is asked (a capture file holds
 * no weights to re-initialise: HS_EINVAL). */
int hs_patterns_check(hs_patterns_opts *o, const hs_study_env *env);

/* The pattern statistics of env's model on its data, row by row during the
 * forward (hs_patterns_run), of the random-init control when o->control,
 * and the Jensen-Shannon matrix with o->js_out (which keeps one sequence's
 * maps of every head, up to 4 GiB); or the same from o->maps (no control).
 * Every value checked finite (a capture of a model with non-finite weights
 * too). Costs one pass over the data per model. r is initialised here;
 * free it with hs_patterns_result_free (also after a failure). */
int hs_patterns_study(hs_patterns_result *r, const hs_patterns_opts *o, const hs_study_env *env);
void hs_patterns_result_free(hs_patterns_result *r);

extern const hs_study_kind hs_patterns_kind;

/* Writes r's Jensen-Shannon matrix as a CSV with head labels (LlHh), whole
 * under a temporary name and then renamed, so a reader never sees half. */
int hs_patterns_write_js(const char *path, const hs_patterns_result *r);

#endif
