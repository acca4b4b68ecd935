/* The setup the analysis commands share: load the model and the data, check
 * them, open the run in the index only after every argument has been
 * checked (bad input records nothing), and close it with the exit status. */
#ifndef HS_CLI_ANALYSIS_H
#define HS_CLI_ANALYSIS_H

#include "cli.h"
#include "tokens.h"
#include "weights.h"

/* Shared setup: model, data, sequence length, the index run. */
typedef struct {
    const char *cmd, *model, *data, *db;
    const char *text, *tokenizer; /* --text FILE --tokenizer PATH instead of --data */
    int B, T, threads, json;
    int allow_nonfinite; /* --allow-nonfinite (OPT_ALLOW_NONFINITE) */
    long max_batches;
    long long resume;
    hs_model m;
    hs_tokens tok;
    cli_run run;
} analysis;

/* The file recorded as the data: --data's shard or --text's file. */
const char *analysis_data_path(const analysis *a);

/* Loads model and data (--data, or --text tokenized: cli_tokens_load); prints the error and returns the exit status on
 * failure (with everything freed). */
int analysis_load(analysis *a);

/* A validation set beside the data, after analysis_load: --val's shard, or
 * --val-text's text tokenized as --text is; it must hold one batch. Both
 * NULL: v is left empty. On failure prints the error, unloads a and returns
 * the exit status. */
int analysis_load_val(analysis *a, hs_tokens *v, const char *val, const char *val_text);

/* Frees what analysis_load loaded (before a run was opened). */
void analysis_unload(analysis *a);

/* Opens the run of `kind` in the index (exit status on failure). */
int analysis_start(analysis *a, const char *kind, int argc, char **argv);

/* Ends the run, frees, reports: exit status. */
int analysis_close(analysis *a, int rc);

#endif
