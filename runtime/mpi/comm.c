/*
 * comm.c — nrt_mpi: the ranks of a data-parallel run over MPI
 * (libnetrt_mpi, linked into a program built with netc --mpi).
 *
 * A program started by mpirun or srun joins the run in nrt_main; started
 * alone (no launcher's variables in its environment, or a world of one) it
 * never calls MPI_Init and trains as a program built without --mpi does.
 * One of several tasks of srun without PMI (--mpi=none) is an error.
 * Errors return to the caller (MPI_ERRORS_RETURN) with MPI's message.
 */
#include "netrt.h"

#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct Mpi {
    MPI_Comm world; /* a duplicate of MPI_COMM_WORLD: netc's own */
    double busy;    /* seconds in collectives */
} Mpi;

/* Counts the time since t, when a collective began; passes rc on. */
static int timed(Mpi *c, double t, int rc)
{
    c->busy += MPI_Wtime() - t;
    return rc;
}

static double seconds(void *ctx)
{
    return ((Mpi *)ctx)->busy;
}

static int check(int rc, const char *call, nrt_error *err)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error %d", rc);
    return nrt_errorf(err, "%s: %s", call, msg);
}

static int sum_floats(void *ctx, float *v, size_t n, nrt_error *err)
{
    Mpi *c = ctx;
    /* counts are ints: a gradient of more than 2^31 floats goes in parts */
    for (size_t at = 0; at < n; at += INT32_MAX) {
        int k = n - at < INT32_MAX ? (int)(n - at) : INT32_MAX;
        const double t = MPI_Wtime();
        if (check(timed(c, t, MPI_Allreduce(MPI_IN_PLACE, v + at, k, MPI_FLOAT, MPI_SUM,
                                            c->world)),
                  "MPI_Allreduce", err))
            return -1;
    }
    return 0;
}

static int sum_doubles(void *ctx, double *v, size_t n, nrt_error *err)
{
    Mpi *c = ctx;
    if (n > INT32_MAX)
        return nrt_errorf(err, "internal error: a sum of %zu doubles", n);
    const double t = MPI_Wtime();
    return check(timed(c, t, MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, c->world)),
                 "MPI_Allreduce", err);
}

static int broadcast(void *ctx, void *v, size_t bytes, nrt_error *err)
{
    Mpi *c = ctx;
    for (size_t at = 0; at < bytes; at += INT32_MAX) {
        int k = bytes - at < INT32_MAX ? (int)(bytes - at) : INT32_MAX;
        const double t = MPI_Wtime();
        if (check(timed(c, t, MPI_Bcast((char *)v + at, k, MPI_BYTE, 0, c->world)), "MPI_Bcast",
                  err))
            return -1;
    }
    return 0;
}

static int gather_u64(void *ctx, uint64_t mine, uint64_t *all, nrt_error *err)
{
    Mpi *c = ctx;
    const double t = MPI_Wtime();
    return check(timed(c, t, MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T,
                                           c->world)),
                 "MPI_Allgather", err);
}

static void mpi_abort(void *ctx, int status)
{
    MPI_Abort(((Mpi *)ctx)->world, status);
}

static void mpi_close(void *ctx)
{
    Mpi *c = ctx;
    if (!c)
        return;
    MPI_Comm_free(&c->world); /* cleanup: errors have nobody to go to */
    MPI_Finalize();
    free(c);
}

/* Whether a launcher started this process as one of several. */
static int launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return 1;
    }
    return 0;
}

/* The tasks of the srun step this process is one of: 0 outside one. srun
 * with no MPI plugin (--mpi=none, many clusters' MpiDefault) starts them
 * without PMI: each would train alone, all writing the same files. */
static long srun_tasks(void)
{
    const char *v = getenv("SLURM_STEP_NUM_TASKS");
    return v ? strtol(v, NULL, 10) : 0;
}

static int mpi_open(nrt_comm *comm, nrt_error *err)
{
    memset(comm, 0, sizeof *comm);
    if (!launched()) {
        const long n = srun_tasks();
        if (n > 1)
            return nrt_errorf(err, "srun started %ld tasks without MPI between them: "
                                   "start them with srun --mpi=pmix (srun --mpi=list "
                                   "shows the types)", n);
        return 0;
    }
    int inited = 0;
    if (MPI_Initialized(&inited) == MPI_SUCCESS && !inited &&
        check(MPI_Init(NULL, NULL), "MPI_Init", err))
        return -1;
    Mpi *c = calloc(1, sizeof *c);
    if (!c) {
        MPI_Finalize();
        return nrt_errorf(err, "out of memory");
    }
    MPI_Comm local = MPI_COMM_NULL;
    int size = 0, rank = 0, lrank = 0, first = 0, hosts = 0;
    if (check(MPI_Comm_dup(MPI_COMM_WORLD, &c->world), "MPI_Comm_dup", err)) {
        free(c);
        MPI_Finalize();
        return -1;
    }
    MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN);
    if (check(MPI_Comm_size(c->world, &size), "MPI_Comm_size", err) ||
        check(MPI_Comm_rank(c->world, &rank), "MPI_Comm_rank", err) ||
        check(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
              "MPI_Comm_split_type", err) ||
        check(MPI_Comm_rank(local, &lrank), "MPI_Comm_rank", err) ||
        (first = lrank == 0,
         check(MPI_Allreduce(&first, &hosts, 1, MPI_INT, MPI_SUM, c->world), "MPI_Allreduce",
               err))) {
        if (local != MPI_COMM_NULL)
            MPI_Comm_free(&local);
        mpi_close(c);
        return -1;
    }
    MPI_Comm_free(&local);
    if (size == 1) { /* a world of one: as if alone */
        mpi_close(c);
        return 0;
    }
    *comm = (nrt_comm){.rank = rank, .size = size, .local_rank = lrank, .hosts = hosts,
                       .ctx = c, .sum_floats = sum_floats, .sum_doubles = sum_doubles,
                       .broadcast = broadcast, .gather_u64 = gather_u64,
                       .seconds = seconds, .abort = mpi_abort,
                       .close = mpi_close};
    return 1;
}

const nrt_dist nrt_mpi = {"MPI", mpi_open};
