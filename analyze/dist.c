/* Scale-out over MPI (dist.h). Every MPI call of headscope is in this file;
 * built without HEADSCOPE_MPI each function is the single-process case. */
#include "dist.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#ifdef HEADSCOPE_MPI
#include <mpi.h>
#endif

static int g_rank, g_size = 1;
static unsigned long long g_bytes;
static volatile sig_atomic_t *g_stop;
static double g_wait;
static int g_agreed; /* every rank learnt of a failure at a collective */

int hs_dist_failed_together(void)
{
    return g_agreed;
}

double hs_dist_wait_seconds(void)
{
    return g_wait;
}

void hs_dist_set_stop(volatile sig_atomic_t *stop)
{
    g_stop = stop;
}

int hs_dist_rank(void)
{
    return g_rank;
}

int hs_dist_size(void)
{
    return g_size;
}

unsigned long long hs_dist_bytes(void)
{
    return g_bytes;
}

void hs_dist_range(size_t n, int r, size_t *lo, size_t *hi)
{
    const size_t q = n / (size_t)g_size, rem = n % (size_t)g_size, ur = (size_t)r;
    *lo = ur * q + (ur < rem ? ur : rem);
    *hi = *lo + q + (ur < rem ? 1 : 0);
}

#ifdef HEADSCOPE_MPI

static void finalize(void)
{
    int done = 0;
    MPI_Finalized(&done);
    if (!done)
        MPI_Finalize();
}

int hs_dist_init(int *argc, char ***argv)
{
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n || !*n)
        return HS_OK; /* not started by mpirun: never initialise MPI */
    if (MPI_Init(argc, argv) != MPI_SUCCESS)
        return hs_fail(HS_EIO, "MPI_Init failed (OMPI_COMM_WORLD_SIZE=%s)", n);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    atexit(finalize);
    return HS_OK;
}

void hs_dist_abort(int status)
{
    if (g_size > 1)
        MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
}

/* Waits for rq, polling every 0.2 ms (a waiting rank leaves its core to
 * the others) and the stop flag: mpirun sends SIGTERM to every rank when
 * one died, and a rank blocked in a collective would never see it; this one
 * returns HS_EINTR instead, so rank 0 can finish its run as failed. */
static int wait_for(MPI_Request *rq, const char *what)
{
    const double t0 = MPI_Wtime();
    int done = 0, rc = HS_OK;
    for (;;) {
        if (MPI_Test(rq, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            rc = hs_fail(HS_EIO, "%s failed", what);
            break;
        }
        if (done)
            break;
        if (g_stop && *g_stop) {
            rc = hs_fail(HS_EINTR, "interrupted while waiting for the other ranks (%s)", what);
            break;
        }
        nanosleep(&(struct timespec){ 0, 200000 }, NULL);
    }
    g_wait += MPI_Wtime() - t0;
    return rc;
}

int hs_dist_agree(int rc)
{
    if (g_size < 2)
        return rc;
    /* the lowest failing rank, and its status */
    int mine[2] = { rc ? g_rank : g_size, rc }, low[2];
    MPI_Request rq;
    int w = MPI_Iallreduce(mine, low, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD, &rq) == MPI_SUCCESS
                ? wait_for(&rq, "MPI_Iallreduce")
                : hs_fail(HS_EIO, "MPI_Iallreduce failed");
    if (w)
        return rc ? rc : w;
    if (low[0] == g_size)
        return HS_OK;
    g_agreed = 1;
    if (!rc)
        return hs_fail(low[1], "rank %d of %d failed (its message is on its standard error)",
                       low[0], g_size);
    return rc;
}

static int too_big(size_t bytes)
{
    return bytes > INT_MAX ? hs_fail(HS_ENOMEM, "MPI message of %zu bytes exceeds 2 GiB", bytes)
                           : HS_OK;
}

int hs_dist_bcast(int rc, void *buf, size_t bytes)
{
    if ((rc = hs_dist_agree(rc ? rc : too_big(bytes))) || g_size < 2)
        return rc;
    g_bytes += bytes;
    MPI_Request rq;
    return MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &rq) == MPI_SUCCESS
               ? wait_for(&rq, "MPI_Ibcast")
               : hs_fail(HS_EIO, "MPI_Ibcast of %zu bytes failed", bytes);
}

int hs_dist_collect(int rc, void *buf, size_t item_bytes, size_t n)
{
    if ((rc = hs_dist_agree(rc ? rc : too_big(item_bytes * n))) || g_size < 2)
        return rc;
    int *counts = malloc(sizeof(int) * 2 * (size_t)g_size);
    if (!counts)
        return hs_fail(HS_ENOMEM, "MPI displacements");
    int *displs = counts + g_size;
    for (int r = 0; r < g_size; r++) {
        size_t lo, hi;
        hs_dist_range(n, r, &lo, &hi);
        counts[r] = (int)((hi - lo) * item_bytes), displs[r] = (int)(lo * item_bytes);
    }
    char *mine = (char *)buf + displs[g_rank];
    g_bytes += g_rank ? (unsigned long long)counts[g_rank] : (unsigned long long)(item_bytes * n);
    MPI_Request rq;
    int ok = MPI_Igatherv(g_rank ? mine : MPI_IN_PLACE, counts[g_rank], MPI_BYTE, buf, counts,
                          displs, MPI_BYTE, 0, MPI_COMM_WORLD, &rq);
    rc = ok == MPI_SUCCESS ? wait_for(&rq, "MPI_Igatherv")
                           : hs_fail(HS_EIO, "MPI_Igatherv of %zu items failed", n);
    if (rc != HS_EINTR) /* a pending request still reads them until the job ends */
        free(counts);
    return rc;
}

int hs_dist_gather(int rc, const void *mine, void *all, size_t bytes)
{
    if ((rc = hs_dist_agree(rc ? rc : too_big(bytes * (size_t)g_size))))
        return rc;
    if (g_size < 2) {
        memmove(all, mine, bytes);
        return HS_OK;
    }
    g_bytes += g_rank ? bytes : bytes * (size_t)g_size;
    MPI_Request rq;
    return MPI_Igather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD,
                       &rq) == MPI_SUCCESS
               ? wait_for(&rq, "MPI_Igather")
               : hs_fail(HS_EIO, "MPI_Igather of %zu bytes failed", bytes);
}

/* MPI_Iallreduce of n elements of type t with op, in place. */
static int allreduce(int rc, void *buf, size_t n, MPI_Datatype t, MPI_Op op, size_t elem)
{
    if ((rc = hs_dist_agree(rc ? rc : n > INT_MAX ? too_big(n * elem) : HS_OK)) || g_size < 2)
        return rc;
    g_bytes += 2 * n * elem;
    MPI_Request rq;
    return MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, t, op, MPI_COMM_WORLD, &rq) == MPI_SUCCESS
               ? wait_for(&rq, "MPI_Iallreduce")
               : hs_fail(HS_EIO, "MPI_Iallreduce of %zu elements failed", n);
}

int hs_dist_sum(int rc, void *buf, size_t n, int is_double)
{
    return allreduce(rc, buf, n, is_double ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM,
                     is_double ? sizeof(double) : sizeof(float));
}

int hs_dist_or(int rc, unsigned char *buf, size_t n)
{
    return allreduce(rc, buf, n, MPI_UNSIGNED_CHAR, MPI_BOR, 1);
}

int hs_dist_send0(const void *buf, size_t bytes)
{
    int rc = too_big(bytes);
    if (rc)
        return rc;
    g_bytes += bytes;
    MPI_Request rq;
    return MPI_Isend(buf, (int)bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &rq) == MPI_SUCCESS
               ? wait_for(&rq, "MPI_Isend to rank 0")
               : hs_fail(HS_EIO, "MPI_Isend of %zu bytes to rank 0 failed", bytes);
}

int hs_dist_recv(int from, void *buf, size_t bytes)
{
    int rc = too_big(bytes);
    if (rc)
        return rc;
    g_bytes += bytes;
    MPI_Request rq;
    return MPI_Irecv(buf, (int)bytes, MPI_BYTE, from, 0, MPI_COMM_WORLD, &rq) == MPI_SUCCESS
               ? wait_for(&rq, "MPI_Irecv")
               : hs_fail(HS_EIO, "MPI_Irecv of %zu bytes from rank %d failed", bytes, from);
}

#else /* one process */

int hs_dist_init(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    /* N copies of one process would each open a run and write the outputs */
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (n && atoi(n) > 1)
        return hs_fail(HS_EINVAL, "started by mpirun on %s ranks, but this build has no MPI "
                       "(HEADSCOPE_MPI off): run it without mpirun, or rebuild with OpenMPI", n);
    return HS_OK;
}

void hs_dist_abort(int status)
{
    (void)status;
}

int hs_dist_agree(int rc)
{
    return rc;
}

int hs_dist_bcast(int rc, void *buf, size_t bytes)
{
    (void)buf, (void)bytes;
    return rc;
}

int hs_dist_collect(int rc, void *buf, size_t item_bytes, size_t n)
{
    (void)buf, (void)item_bytes, (void)n;
    return rc;
}

int hs_dist_gather(int rc, const void *mine, void *all, size_t bytes)
{
    if (!rc)
        memmove(all, mine, bytes);
    return rc;
}

int hs_dist_sum(int rc, void *buf, size_t n, int is_double)
{
    (void)buf, (void)n, (void)is_double;
    return rc;
}

int hs_dist_or(int rc, unsigned char *buf, size_t n)
{
    (void)buf, (void)n;
    return rc;
}

int hs_dist_send0(const void *buf, size_t bytes)
{
    (void)buf, (void)bytes;
    return hs_fail(HS_EINVAL, "no MPI in this build: rank 0 is the only rank");
}

int hs_dist_recv(int from, void *buf, size_t bytes)
{
    (void)buf, (void)bytes;
    return hs_fail(HS_EINVAL, "no MPI in this build: no rank %d", from);
}

#endif

int hs_dist_share_rows(int rc, double *tab, size_t n, size_t items, const int *owner)
{
    const int N = hs_dist_size(), rank = hs_dist_rank();
    const size_t per = n * items;
    double *all = rank ? NULL : hs_calloc(per * (size_t)N, sizeof *all, "shared rows");
    if (!rc && !rank && !all)
        rc = HS_ENOMEM;
    rc = hs_dist_gather(rc, tab, all, sizeof *all * per);
    for (size_t p = 0; !rc && !rank && p < n; p++)
        memcpy(tab + p * items, all + (size_t)owner[p] * per + p * items, sizeof *all * items);
    free(all);
    return hs_dist_bcast(rc, tab, sizeof *tab * per);
}
