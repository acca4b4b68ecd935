/* The big allocations a command holds at once -- a model's parameters, the
 * activations of a batch, training's gradients and optimizer moments --
 * counted against what the machine has before each is made, so that a
 * command that cannot fit says so before it starts (SPEC §13) instead of
 * being killed by the kernel half-way, its pages touched. What the machine
 * has: MemTotal + SwapTotal of /proc/meminfo, or HEADSCOPE_MEMORY_LIMIT
 * (bytes, or with a K, M or G suffix: powers of 1000) when set; no limit
 * without either. */
#ifndef HS_MEMORY_H
#define HS_MEMORY_H

#include <stddef.h>

/* Counts `bytes` more as held; HS_ENOMEM naming `what`, the bytes, what is
 * held and what the machine has when the total would pass it (nothing is
 * counted then). */
int hs_mem_reserve(size_t bytes, const char *what);

/* Counts `bytes` fewer (what a successful hs_mem_reserve counted). */
void hs_mem_release(size_t bytes);

/* HS_OK when `bytes` more would fit beside what is held now (counting
 * nothing), else hs_mem_reserve's refusal: for a command to say so before
 * it writes anything. */
int hs_mem_check(size_t bytes, const char *what);

/* Bytes counted as held now. */
size_t hs_mem_held(void);

/* hs_calloc of n * size bytes counted as held (hs_mem_reserve first);
 * hs_free_held frees such a block of n * size bytes (p may be NULL). */
void *hs_calloc_held(size_t n, size_t size, const char *what);
void hs_free_held(void *p, size_t n, size_t size);

/* A zeroed block of `bytes` counted as held, starting on an HS_KEPT_ALIGN
 * boundary, for the activations of a batch: the block hs_free_kept kept of
 * exactly that size when there is one (zeroed again: its pages are there
 * already), else a fresh one as hs_calloc_held makes, in 2 MiB pages. NULL
 * (the failure said) when it cannot be had. */
void *hs_calloc_kept(size_t bytes, const char *what);

/* Gives back a block of hs_calloc_kept (p may be NULL): no longer counted as
 * held, and one of HS_KEPT_MIN bytes or more kept for the next
 * hs_calloc_kept of its size: at most HS_KEPT_BLOCKS blocks of HS_KEPT_BYTES
 * in all, the oldest freed first to make room (a larger block is freed at
 * once: a caller between calls, a notebook, should not sit on gigabytes). A
 * call repeated on the same batch shape, as a library's caller repeats it,
 * then finds its pages touched: a fresh page costs the kernel's clearing of
 * it, a fifth of an attribution pass on a virtual machine. The next
 * reservation that reuses none (hs_mem_reserve, hs_calloc_held,
 * hs_calloc_kept of another size) frees every kept block first, so a
 * command holds no more at once than it would without them. */
void hs_free_kept(void *p, size_t bytes);
enum { HS_KEPT_ALIGN = 64, HS_KEPT_MIN = 32 << 20, HS_KEPT_BLOCKS = 4 };
#define HS_KEPT_BYTES ((size_t)1 << 30)

/* Frees every kept block (hs_free_kept). */
void hs_mem_drop_kept(void);

/* Bytes of the blocks kept now. */
size_t hs_mem_kept(void);

/* A large block in 2 MiB pages where the kernel offers them on request
 * (transparent huge pages, "madvise" or "always"): its first touch faults
 * once per 2 MiB instead of once per 4 KiB. A hint only. */
void hs_huge_pages(void *p, size_t bytes);

#endif
