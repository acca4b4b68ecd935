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
    int B, T, threads, json;
    int allow_nonfinite; /* --allow-nonfinite (OPT_ALLOW_NONFINITE) */
    long max_batches;
    long long resume;
    hs_model m;
    hs_tokens tok;
    cli_run run;
} analysis;

/* Loads model and data; prints the error and returns the exit status on
 * failure (with everything freed). */
int analysis_load(analysis *a);

/* Frees what analysis_load loaded (before a run was opened). */
void analysis_unload(analysis *a);

/* Opens the run of `kind` in the index (exit status on failure). */
int analysis_start(analysis *a, const char *kind, int argc, char **argv);

/* Ends the run, frees, reports: exit status. */
int analysis_close(analysis *a, int rc);

#endif
