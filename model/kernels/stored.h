/* A model's weights as stored (SPEC §13): the large matrices stay in the
 * checkpoint's dtype (F32, BF16, F16), read in place from the mapped files
 * or, where the family's layout differs from ours (GPT-2's Conv1D, fused
 * qkv rows), re-laid out once in that dtype. The model's parameter pointers
 * keep their meaning: m->params is a reserved address range of the float
 * table's size, where the tensors held as floats (norms, biases, position
 * tables) have pages and the stored ones have none (reading one there
 * faults). hs_gemm and the linear and embedding kernels find a stored
 * tensor by its float address and read it through hs_sgemm_typed, widened
 * exactly, so results equal those of the float copy bit for bit; code that
 * reads weights element by element widens what it reads first
 * (hs_stored_widen) or copies through hs_stored_read.
 *
 * The stored models are kept in a process-wide table, written only when a
 * model is loaded or freed: kernels deep below the model (a GEMM inside an
 * OpenMP loop) receive pointers, not models, and the table is what lets a
 * pointer say how its tensor is held. Loading or freeing a model while
 * another thread computes on a stored one is not supported. */
#ifndef HS_STORED_H
#define HS_STORED_H

#include <stddef.h>

#include "common.h"
#include "gemm.h"

/* One stored tensor: elements off .. off + size - 1 of the float table, in
 * the table's layout, held at data as type. */
typedef struct {
    size_t off, size;
    const void *data;
    hs_dtype type;
} hs_stored_tensor;

typedef struct hs_stored hs_stored;

/* An empty set for a table of n_params elements: reserves the range (no
 * memory) and returns it in *params. release(ctx) is called once when the
 * set is freed (the files' mappings the tensors point into). */
int hs_stored_create(hs_stored **s, size_t n_params, hs_real **params, void (*release)(void *),
                     void *ctx);

/* Gives the float tensor at elements off .. off + size - 1 its pages
 * (zeroed), to be filled by the caller. */
int hs_stored_floats(hs_stored *s, size_t off, size_t size);

/* Adds a stored tensor; tensors must not overlap. owned: data was
 * allocated for it (hs_calloc_held(bytes, 1, ...): counted as held) and is
 * freed with the set. */
int hs_stored_add(hs_stored *s, hs_stored_tensor t, int owned);

/* check(ctx) (ctx: hs_stored_create's) tells whether the files the set maps
 * are as they were opened; hs_stored_unchanged asks it. */
void hs_stored_set_check(hs_stored *s, int (*check)(void *ctx));

/* HS_OK, or check's failure (the file named): see hs_model_unchanged. */
int hs_stored_unchanged(const hs_stored *s);

/* 1 when what the lookups from inside the GEMMs trust holds: entries sorted
 * by offset, none overlapping the next, each inside the range with a known
 * type and its data. hs_stored_publish asserts it in debug builds. */
int hs_stored_sane(const hs_stored *s);

/* Makes the set visible to hs_stored_find (sorts it); after the last add. */
int hs_stored_publish(hs_stored *s);

void hs_stored_free(hs_stored *s);

/* 1 when p (a float address into a published set's table) lies in a stored
 * tensor: *data is p's element there and *type its type. 0 otherwise (a
 * float tensor, or no stored model at all: one load). */
int hs_stored_find(const void *p, const void **data, hs_dtype *type);

/* The tensor starting at float address p, (rows, cols), packed once into
 * the GEMM's panels (gemm.h, hs_pack_weight) for op(B) = B^T (tb 1: a
 * linear layer's forward) or op(B) = B (tb 0: its input gradient): 1 when
 * it is (now or already; *bytes its panels' bytes), 0 when there is
 * nothing to pack (not a stored tensor's start, another shape, a dtype or
 * CPU the panels are not made for), -1 when the memory is not there (the
 * message set). dry: packs nothing, says what would be. The panels live as
 * long as the tensor's entry. Float build only. */
int hs_stored_pack(const void *p, int rows, int cols, int tb, int dry, size_t *bytes);

/* 1 the first time it is called on s when s's tensors have panels for
 * op(B) = B^T (the forwards' of a command of many): whether to pack the
 * backwards' too (hs_model_prepack_backward); 0 otherwise. */
int hs_stored_first_backward(hs_stored *s);

/* The panels of the tensor starting at p for op(B) = B^T (tb 1) or B (tb
 * 0) when they hold it as a (rows, cols) matrix whole, else NULL. */
const hs_packed *hs_stored_packed(const void *p, int rows, int cols, int tb);

/* dst[0 .. n-1] = the parameters from float address p on, widened where
 * they are stored (n elements inside one tensor). */
void hs_stored_read(hs_real *dst, const hs_real *p, size_t n);

/* Gives the stored tensor holding p its float pages, widened, and takes it
 * out of the set: from then on the float table holds it, for code that
 * reads it element by element. A float tensor: nothing to do. */
int hs_stored_widen(const hs_real *p);

#endif
