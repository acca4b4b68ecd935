/* Scale-out over MPI (SPEC §12): the only module that knows MPI. Under
 * `mpirun -np N headscope ...` (OpenMPI sets OMPI_COMM_WORLD_SIZE) the
 * command initialises MPI and each of N ranks runs its share of a study's
 * items; rank 0 collects the items' partial results, reduces them in item
 * order (so that 1 and N ranks give the same numbers) and alone writes the
 * index and map files. Without mpirun, or in a build without MPI
 * (HEADSCOPE_MPI off), MPI is never initialised: rank 0 of 1, every
 * collective below is a no-op and a study runs exactly as it did.
 *
 * Collectives return a status agreed by every rank: a rank entering with a
 * failure makes every rank return a failure (the others' message says that
 * rank R failed), so that all leave the study at the same point. */
#ifndef HS_DIST_H
#define HS_DIST_H

#include <signal.h>
#include <stddef.h>

/* Initialises MPI when the process was started by mpirun (OMPI_COMM_WORLD_SIZE
 * in the environment and MPI built in); registers its finalisation at exit.
 * HS_OK, or HS_EIO when MPI is wanted but fails to start. */
int hs_dist_init(int *argc, char ***argv);
int hs_dist_rank(void); /* 0 without MPI */

/* The flag a signal handler sets: a rank waiting for others (every call
 * below) returns HS_EINTR once it is set, e.g. when mpirun ends the job
 * because a rank died, so that rank 0 still finishes its run as failed. */
void hs_dist_set_stop(volatile sig_atomic_t *stop);
int hs_dist_size(void); /* 1 without MPI */

/* The share [*lo, *hi) of n items (contiguous, in item order) of rank r:
 * shares differ by at most one item. */
void hs_dist_range(size_t n, int r, size_t *lo, size_t *hi);

/* Agrees on rc: the first failing rank's status everywhere (HS_OK when all
 * passed); on a rank that passed while another failed, hs_fail names it. */
int hs_dist_agree(int rc);

/* 1 once a collective above returned a failure on every rank: they all
 * leave, and none waits for another (no need to end the job). */
int hs_dist_failed_together(void);

/* After hs_dist_agree(rc): buf (bytes) of rank 0 on every rank. */
int hs_dist_bcast(int rc, void *buf, size_t bytes);

/* Every rank holds items [lo, hi) of hs_dist_range(n, rank) at their places
 * in buf (n items of item_bytes); afterwards rank 0's buf holds all n.
 * Other ranks' buf outside their share is not touched. */
int hs_dist_collect(int rc, void *buf, size_t item_bytes, size_t n);

/* Gathers each rank's bytes (equal sizes) into all (size * bytes) on rank 0. */
int hs_dist_gather(int rc, const void *mine, void *all, size_t bytes);

/* A table of n rows of `items` doubles (row p: prompt p) that every rank
 * filled for the rows it ran (owner[p], the rank of row p's batch) becomes
 * the whole table on every rank: rank 0 takes each row from its owner and
 * sends the table back. */
int hs_dist_share_rows(int rc, double *tab, size_t n, size_t items, const int *owner);

/* Element-wise sums across the ranks, in place on every rank: n floats (or
 * doubles with is_double) of each rank added (the reduction's order is
 * MPI's: the result may differ from one process's in the last bits). */
int hs_dist_sum(int rc, void *buf, size_t n, int is_double);
/* Bytewise OR across the ranks, in place on every rank. */
int hs_dist_or(int rc, unsigned char *buf, size_t n);
/* Point to point, for a stream of blocks to rank 0 (the capture's maps):
 * rank `from` sends, rank 0 receives. */
int hs_dist_send0(const void *buf, size_t bytes);
int hs_dist_recv(int from, void *buf, size_t bytes);

/* Ends every rank of the job now (MPI_Abort), after a failure that the
 * other ranks cannot learn of at a collective; a no-op in one process. */
void hs_dist_abort(int status);

/* Bytes this rank sent or received through the calls above, for the
 * scaling model (bench/mpi.sh). */
unsigned long long hs_dist_bytes(void);
/* Seconds this rank spent waiting in the calls above (for the other ranks
 * or for the transfer itself). */
double hs_dist_wait_seconds(void);

#endif
