/* What the model tests share: the reader for the oracle fixture text files
 * written by the scripts in scripts/oracle/
 *   case NAME / int NAME VALUE / tensor NAME NDIM D0 D1 ... then values / end
 * (values stored as double and converted to hs_real on request), one oracle
 * case run through its checkpoint (logits, loss, gradients), and cached
 * decoding checked against full recomputation. The helpers that take no
 * status assert with CUnit (fatal where the test cannot go on). */
#ifndef HS_TEST_FIXTURE_H
#define HS_TEST_FIXTURE_H

#include <stddef.h>

#include "common.h"
#include "trainer.h"
#include "transformer.h"

enum { FX_MAX_DIMS = 8, FX_MAX_INTS = 32, FX_MAX_TENSORS = 64 };

typedef struct {
    char name[64];
    int ndim;
    int dims[FX_MAX_DIMS];
    size_t n;
    double *v;
} fx_tensor;

typedef struct {
    char name[64];
    int nint, ntensor;
    char int_names[FX_MAX_INTS][64];
    long ints[FX_MAX_INTS];
    fx_tensor t[FX_MAX_TENSORS];
} fx_case;

/* Loads case `name` from `path`; returns 0, or -1 with a message on stderr. */
int fx_load(fx_case *fc, const char *path, const char *name);
void fx_free(fx_case *fc);
/* NULL when the case has no such tensor. */
const fx_tensor *fx_tensor_get(const fx_case *fc, const char *name);
/* The named int; aborts the test run if missing (a malformed fixture). */
long fx_int(const fx_case *fc, const char *name);
/* A freshly allocated hs_real copy of a tensor (NULL if absent). */
hs_real *fx_real(const fx_case *fc, const char *name);

/* Largest |a - b| / (atol_scale + |b|) style comparison used by the oracle
 * tests: returns the largest of |a-b| / max(1, |b|), i.e. absolute error for
 * small values and relative error for large ones. Prints the worst index. */
double fx_max_err(const hs_real *a, const double *b, size_t n, const char *what);

/* Largest |a[i] - b[i]| / max(1, |b[i]|) (absolute error for small values,
 * relative for large ones); a NaN counts as infinitely far. Silent. */
double fx_err(const hs_real *a, const double *b, size_t n);
double fx_err_double(const double *a, const double *b, size_t n);

/* tokens (B, T+1) of a case into inputs and targets (B, T). */
void fx_split_tokens(const fx_tensor *tok, int B, int T, int32_t *in, int32_t *tg);

/* Every "<prefix><name>" tensor of the case against the model's tensor
 * `name` exported in the file's layout (a model whose params point at a
 * gradient buffer compares gradients): the worst within tol. Returns the
 * number of tensors compared. */
int fx_compare_exported(const fx_case *fc, const char *prefix, const hs_model *m, double tol);
/* The same against every tensor of a safetensors file (the oracle's
 * grad.safetensors). Returns the number of tensors in the file. */
int fx_compare_safetensors(const char *path, const hs_model *m, double tol);

/* One oracle case run through its checkpoint. The steps are separate so a
 * test can compare more of tr.acts (maps, head outputs) after the logits:
 *   fx_oracle_open    loads case `name` of `txt` and the checkpoint `dir`,
 *                     splits the case's tokens and sets up a trainer (B, T);
 *   fx_oracle_logits  forward without targets: the case's "logits" within tol
 *                     (printed with `what` and the model's family);
 *   fx_oracle_loss    forward with targets: the loss within tol max(1, |want|),
 *                     then (grads) the backward into tr.grad_buf, which
 *                     fx_oracle_grads shows through the model's tensor table;
 *   fx_oracle_close   frees all. */
typedef struct {
    fx_case fc;
    hs_model m;
    hs_trainer tr;
    int B, T;
    int32_t *in, *tg; /* (B, T) */
} fx_oracle;

void fx_oracle_open(fx_oracle *o, const char *txt, const char *name, const char *dir);
void fx_oracle_logits(fx_oracle *o, const char *what, double tol);
void fx_oracle_loss(fx_oracle *o, double tol, int grads);
hs_model fx_oracle_grads(const fx_oracle *o);
void fx_oracle_close(fx_oracle *o);

/* A preset with overrides, randomly initialised from `seed` and scaled up
 * (x3) so the logits are far from uniform and greedy choices are not
 * near-ties. */
void fx_make_model(hs_model *m, const char *preset, const char *const *over, int nover,
                   unsigned long long seed);

/* Cached decoding (model/decode.h) against full recomputation: a prefill of
 * `prompt` tokens, then greedy steps up to `total` positions; every step's
 * logits within tol (relative to max(1, |logit|)) of a fresh full forward
 * over the whole prefix, the same greedy ids, the same position of each
 * head's largest weight in the last row (the decoder's watch, SPEC §18's
 * copy rule; not for latent attention) as the full forward's maps where
 * the largest weight exceeds the runner-up by 1e-4, and a feed past the
 * decoder's length refused. Returns the number of such rows compared. A model with windows (layer or per head) gets them in the
 * reference applied to its maps by a pattern hook, independently of the
 * attention kernel. */
int fx_check_decoding(const hs_model *m, int prompt, int total, double tol, const char *what);

#endif
