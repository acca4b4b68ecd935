/* Attribution patching and circuits (SPEC §15). */
#ifndef HS_STUDY_ATP_H
#define HS_STUDY_ATP_H

#include "atp.h"
#include "circuit.h"
#include "study.h"

/* ---- atp: env's prompt pairs, env->batch prompts per forward (0: 32) ---------------- */

typedef struct {
    const char *site; /* --site LIST (NULL: z and, prompts of one length, the position sites) */
    hs_atp_opts atp;  /* noising, star, verify as hs_atp takes them; sites resolved by the
                         check; batch, stop and progress are env's */
} hs_atp_study_opts;

typedef struct {
    hs_study_rows rows; /* the head rows and the position rows */
    hs_atp_result atp;
} hs_atp_study_result;

/* The model's family (HS_EUNSUPPORTED: hs_atp_family_check's message), then
 * --site into o->atp.sites and hs_atp_check's checks (HS_EINVAL naming the
 * option). */
int hs_atp_study_check(hs_atp_study_opts *o, const hs_study_env *env);

/* hs_atp with the study's phases, progress and stop, every value checked
 * finite (position rows alike). r is initialised here; free it with
 * hs_atp_study_result_free. Costs what hs_atp costs. */
int hs_atp_study(hs_atp_study_result *r, const hs_atp_study_opts *o, const hs_study_env *env);
void hs_atp_study_result_free(hs_atp_study_result *r);

extern const hs_study_kind hs_atp_kind;

/* ---- circuit ------------------------------------------------------------------------ */

typedef struct {
    const char *method; /* --method eap | eap-ig (required) */
    const char *top;    /* --top-n "N,..." (NULL: 0, 1, 2, 5, 10, ... and every edge) */
    hs_circuit_opts circuit; /* ig_steps as hs_circuit takes it; method resolved by the
                                check; top_n, batch, stop and progress are the study's */
} hs_circuit_study_opts;

typedef struct {
    hs_study_rows rows; /* logit differences, every edge's score, the faithfulness curve */
    hs_circuit_result circuit;
    long *order;        /* the edges by rank (hs_circuit_rank) */
    long *top_n;        /* the circuits measured */
} hs_circuit_study_result;

/* --method (HS_EINVAL naming it), --top-n against env's model (HS_EINVAL),
 * then the family and the options (hs_circuit_check: HS_EUNSUPPORTED). */
int hs_circuit_study_check(hs_circuit_study_opts *o, const hs_study_env *env);

/* hs_circuit as hs_atp_study runs hs_atp, the edges ranked. */
int hs_circuit_study(hs_circuit_study_result *r, const hs_circuit_study_opts *o,
                     const hs_study_env *env);
void hs_circuit_study_result_free(hs_circuit_study_result *r);

extern const hs_study_kind hs_circuit_kind;

#endif
