/* The analysis commands' shared setup (analysis.h). */
#include "analysis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

const char *analysis_data_path(const analysis *a) { return a->data ? a->data : a->text; }

/* Loads model and data; prints the error and returns the exit status on
 * failure (with everything freed). */
int analysis_load(analysis *a)
{
    if (!a->model || !(a->data || a->text) || !a->db)
        return usage_error(a->cmd, "--model DIR, --data FILE (or --text FILE) and --db FILE are "
                           "required");
    if (a->threads)
        hs_set_threads(a->threads);
    if (hs_checkpoint_load(&a->m, a->model))
        return run_error(a->cmd);
    if (!a->T)
        a->T = a->m.cfg.n_ctx < 256 ? a->m.cfg.n_ctx : 256;
    if (a->m.cfg.pos == HS_POS_LEARNED && a->T > a->m.cfg.n_ctx) {
        int n_ctx = a->m.cfg.n_ctx;
        hs_model_free(&a->m);
        return usage_error(a->cmd, "--seq-len %d exceeds the model's n_ctx=%d", a->T, n_ctx);
    }
    const cli_source src = { a->data, a->text, a->tokenizer };
    const char *path = analysis_data_path(a);
    int rc = cli_tokens_load(NULL, &a->tok, &src, a->model, a->m.cfg.vocab_size);
    if (!rc && !hs_batch_count(&a->tok, a->B, a->T))
        rc = hs_fail(HS_EINVAL, "%s: fewer than one batch of %d x %d (+1) tokens", path, a->B,
                     a->T);
    for (size_t i = 0; !rc && i < a->tok.n; i++)
        if (a->tok.tok[i] >= a->m.cfg.vocab_size)
            rc = hs_fail(HS_EINVAL, "%s: token %d at %zu is outside the vocabulary of %d", path,
                         a->tok.tok[i], i, a->m.cfg.vocab_size);
    if (rc) {
        hs_tokens_free(&a->tok);
        hs_model_free(&a->m);
        return run_error(a->cmd);
    }
    return 0;
}

int analysis_load_val(analysis *a, hs_tokens *v, const char *val, const char *val_text)
{
    memset(v, 0, sizeof *v);
    if (!val && !val_text)
        return 0;
    const cli_source src = { val, val_text, a->tokenizer };
    int rc = cli_tokens_load(NULL, v, &src, a->model, a->m.cfg.vocab_size);
    if (!rc && !hs_batch_count(v, a->B, a->T))
        rc = hs_fail(HS_EINVAL, "%s: fewer than one batch of %d x %d (+1) tokens",
                     cli_source_path(&src), a->B, a->T);
    if (rc) {
        hs_tokens_free(v);
        analysis_unload(a);
        return run_error(a->cmd);
    }
    return 0;
}

/* Frees what analysis_load loaded (before a run was opened). */
void analysis_unload(analysis *a)
{
    hs_tokens_free(&a->tok);
    hs_model_free(&a->m);
}

/* Opens the run in the index, after every argument has been checked, so
 * that bad input records nothing. */
int analysis_start(analysis *a, const char *kind, int argc, char **argv)
{
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", a->model);
    if (cli_run_begin(&a->run, a->db, a->resume, kind, a->model, file, analysis_data_path(a),
                      argc, argv)) {
        analysis_unload(a);
        return run_error(a->cmd);
    }
    cli_install_signal_handlers();
    return 0;
}

/* Ends the run, frees, reports: exit status. */
int analysis_close(analysis *a, int rc)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", hs_last_error());
    if (cli_run_end(&a->run, rc, NULL) && !rc)
        rc = HS_EIO, snprintf(msg, sizeof msg, "%s", hs_last_error());
    hs_tokens_free(&a->tok);
    hs_model_free(&a->m);
    if (rc == HS_EINTR) {
        fprintf(stderr, "headscope: %s: %s; run %lld is marked failed, finish it with --resume %lld\n",
                a->cmd, msg, a->run.run_id, a->run.run_id);
        return EXIT_FAILURE_RUN;
    }
    if (rc) {
        fprintf(stderr, "headscope: %s: %s\n", a->cmd, msg);
        return EXIT_FAILURE_RUN;
    }
    return 0;
}
