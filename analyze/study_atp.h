/* Attribution patching and circuits (SPEC §15). */
#ifndef HS_STUDY_ATP_H
#define HS_STUDY_ATP_H

#include "atp.h"
#include "circuit.h"
#include "study.h"

/* hs_atp with the study's phases, progress and stop, every value checked
 * finite (hs_study_check_finite; position rows alike); *rows describes r's
 * rows for hs_run_study_rows. r is initialised here; free it with
 * hs_atp_result_free. Costs what hs_atp costs. */
int hs_atp_study(hs_atp_result *r, hs_study_rows *rows, const hs_model *m,
                 const hs_prompt_set *ps, hs_atp_opts o, const hs_study_io *io);

/* hs_circuit as hs_atp_study runs hs_atp: its rows the logit differences,
 * every edge's score and the faithfulness curve. */
int hs_circuit_study(hs_circuit_result *r, hs_study_rows *rows, const hs_model *m,
                     const hs_prompt_set *ps, hs_circuit_opts o, const hs_study_io *io);

#endif
