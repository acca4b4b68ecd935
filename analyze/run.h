/* A run in the index (SPEC §7): what a command records about one of its
 * invocations. hs_run_open inserts it `running` with its provenance (the
 * sha256 of the model and the data, hashed once here, the command line), or
 * reopens an interrupted run after checking that it was made with the same
 * model, data and options; the study's rows go in through hs_run_record;
 * hs_run_close marks it complete or failed. Under mpirun rank 0 alone
 * writes the index, every rank agrees on each step's status, and on other
 * ranks every call below is a no-op. Without an index (db NULL) too: a
 * command runs the same with or without one. */
#ifndef HS_RUN_H
#define HS_RUN_H

#include "index.h"
#include "study.h"

/* The kinds of run other layers look runs up by: a run's kind is the name of
 * the command that made it. */
#define HS_KIND_TRAIN "train"
#define HS_KIND_CAPTURE "capture"
#define HS_KIND_INDUCTION "induction"
#define HS_KIND_ABLATE "ablate"
#define HS_KIND_IMPORTANCE "importance"
#define HS_KIND_PRUNE "prune"
#define HS_KIND_PATTERNS "patterns"
#define HS_KIND_EXPERIMENT "experiment"
#define HS_KIND_PATCH "patch"
#define HS_KIND_PATH_PATCH "path-patch"
#define HS_KIND_DLA "dla"
#define HS_KIND_LOGIT_LENS "logit-lens"
#define HS_KIND_COMPOSITION "composition"
#define HS_KIND_ATP "atp"
#define HS_KIND_CIRCUIT "circuit"
#define HS_KIND_RETRIEVAL "retrieval"
#define HS_KIND_FEATURES "features"
#define HS_KIND_SAE_EVAL "sae-eval"
#define HS_KIND_TRAIN_SAE "train-sae"

/* An option the run treats apart: neutral, one that cannot change a result
 * (--threads, --json, ...), left out when a resumed run's command line is
 * compared with its original's; path, one whose value is a file or
 * directory, recorded absolute (runs.args), so that the index finds its
 * inputs from any working directory. */
typedef struct {
    const char *name;
    int takes_value, neutral, path;
} hs_run_option;

typedef struct {
    const char *db;          /* the index; NULL: nothing is recorded */
    const char *kind;        /* runs.kind */
    long long resume;        /* > 0: reopen this run instead of inserting one */
    const char *model_path;  /* runs.model_path (NULL: none) */
    const char *model_file;  /* hashed for runs.model_sha256 (NULL: none) */
    const char *data_path;   /* runs.data_path, hashed for data_sha256 (NULL: none) */
    int argc;                /* the command line from the command's name on (runs.args) */
    char **argv;
    const hs_run_option *options; /* n_options neutral or path options */
    int n_options;
} hs_run_spec;

typedef struct hs_run hs_run;

/* Opens the run of s (see above); *r is NULL without an index. HS_OK, or
 * the failure (nothing recorded): a model or data file that cannot be
 * hashed, an index that cannot be opened, a resumed run of another kind,
 * model, data or command line, or another rank's failure. Costs a read of
 * the model and data files for their sha256. */
int hs_run_open(hs_run **r, const hs_run_spec *s);

/* The run's id (0 without an index) and its index (NULL without one, and on
 * ranks other than 0), for studies that record as they go. */
long long hs_run_id(const hs_run *r);
hs_index *hs_run_index(const hs_run *r);

/* The sha256 (hex) the run hashed of its model and its data, so that a
 * study writing them into a file need not hash again; NULL when not hashed. */
const char *hs_run_model_sha(const hs_run *r);
const char *hs_run_data_sha(const hs_run *r);

/* Records what the run knows about itself that figures need (run_params):
 * "seq_len", "positions_T" (run.h's position labels). HS_OK and nothing
 * done without an index. */
int hs_run_param(hs_run *r, const char *key, const char *value);

/* The labels of positions 0..T-1 of every prompt length T of ps, recorded
 * as "positions_T" (a JSON array of strings): the tokens of the first clean
 * prompt of that length in file order, as the tokenizer's text (tk), as the
 * byte itself for a byte-level model without one (vocab_size 256), else as
 * "#id". The figure of a patching run labels its axis with them. */
int hs_run_position_labels(hs_run *r, const hs_prompt_set *ps, const hs_tokenizer *tk,
                           int vocab_size);

/* Records a study's rows (one transaction) and curves into the run; HS_OK
 * and nothing done without an index. */
int hs_run_rows(hs_run *r, const hs_head_table *t, const hs_study_curve *curves, int n_curves);

/* Records every row of a SPEC §15 study (study.h: its head table and curves
 * as hs_run_rows does, then its position rows and its edge rows, each table
 * in one transaction); HS_OK and nothing done without an index. */
int hs_run_study_rows(hs_run *r, const hs_study_rows *rows);

/* Records path as an artifact of the run with its sha256 (hex) and size;
 * sha256 NULL: read the file for both. */
int hs_run_artifact(hs_run *r, const char *path, const char *sha256, long long bytes);

/* Marks the run complete (rc HS_OK) or failed (model_sha: the model it
 * produced, or NULL), closes the index and frees r. Returns rc, or when rc
 * is HS_OK the status of a failed final write (its message says which run
 * is left unmarked): a command whose run could not be marked complete
 * fails. A failure's message is kept (rc's, not the close's). */
int hs_run_close(hs_run *r, int rc, const char *model_sha);

#endif
