/*
 * nccl_test.cu — the emulated NCCL between processes (tests/emu_nccl.sh).
 *
 *   nccl_test MODE NRANKS
 *
 * The parent makes a unique id and forks NRANKS ranks; each rank is a
 * process with an emulated GPU of its own (CUDA is touched only after the
 * fork) and prints its lines as "rank R: ...".  The parent waits for them,
 * prints "rank R: exit STATUS" for each, "time SECONDS" and whether the
 * id's shared segment is gone ("segment: removed"), and exits 0 when every
 * rank exited 0.
 *
 *   ok     an all-reduce of floats in place over several of the segment's
 *          chunks (values whose sum depends on the order: rank order
 *          expected, bit for bit), one of doubles out of place, on a
 *          non-blocking stream; a graph of a kernel and an in-place
 *          all-reduce captured once and replayed twice; a broadcast from
 *          the last rank; and the refusals (ncclMax, ncclFloat16, a host
 *          pointer).  Every rank prints "rank R: ok".
 *   late   the last rank never calls the collective (it sleeps past
 *          NETC_EMU_NCCL_TIMEOUT): the others' synchronisation fails
 *   exit   the last rank exits after joining: the others fail at once
 *   mismatch  the last rank's all-reduce has one element fewer: all fail
 *   init   the last rank never calls ncclCommInitRank: the others' fails
 *   rank   the last rank says it is rank 0 too: every rank's init fails
 *   size   the last rank is told one rank more: every rank's init fails
 *   stale  a rank 0 of the same id killed while it waits in
 *          ncclCommInitRank left the segment behind: it is replaced, and
 *          the ranks run as in ok
 */
#include <cuda_runtime.h>
#include <nccl.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>

static int rank_, nranks_;

#define CUDA(call)                                                                      \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            printf("rank %d: %s: %s\n", rank_, #call, cudaGetErrorString(e_));         \
            return 1;                                                                   \
        }                                                                               \
    } while (0)
#define NCCL(call)                                                                      \
    do {                                                                                \
        ncclResult_t r_ = (call);                                                       \
        if (r_ != ncclSuccess) {                                                        \
            printf("rank %d: %s: %s\n", rank_, #call, ncclGetErrorString(r_));         \
            return 1;                                                                   \
        }                                                                               \
    } while (0)
#define EXPECT(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            printf("rank %d: line %d: %s is not so\n", rank_, __LINE__, #cond);       \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

__global__ void add_rank(float *y, int n, float v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += v;
}

/* A value whose sum over the ranks depends on the order for one element in
 * five: with 3 ranks, (1 + 1e8) - 1e8 is 0 in float, 1 in another order. */
static float value(int r, size_t i)
{
    if (i % 5 == 0)
        return r == 0 ? 1.0f : r % 2 ? 1e8f : -1e8f;
    return (float)((i * 7 + (size_t)r * 13) % 101) * 0.1f - 5.0f;
}

static double timeout_s(void)
{
    const char *t = getenv("NETC_EMU_NCCL_TIMEOUT");
    return t && *t ? atof(t) : 60;
}

/* The ok mode's work on an initialised communicator. */
static int collectives(ncclComm_t comm)
{
    const int r = rank_, n = nranks_;
    int count = 0, me = -1;
    NCCL(ncclCommCount(comm, &count));
    NCCL(ncclCommUserRank(comm, &me));
    EXPECT(count == n && me == r);
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* floats, in place, over more than 3 chunks of 256 KiB */
    const size_t nf = 3 * 65536 + 77;
    float *hf = (float *)malloc(nf * sizeof(float)), *df;
    for (size_t i = 0; i < nf; i++)
        hf[i] = value(r, i);
    CUDA(cudaMalloc((void **)&df, nf * sizeof(float)));
    CUDA(cudaMemcpy(df, hf, nf * sizeof(float), cudaMemcpyHostToDevice));
    NCCL(ncclAllReduce(df, df, nf, ncclFloat, ncclSum, comm, s));
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaMemcpy(hf, df, nf * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < nf; i++) {
        float want = value(0, i);
        for (int q = 1; q < n; q++)
            want += value(q, i);
        bad += memcmp(&want, &hf[i], sizeof want) != 0;
    }
    printf("rank %d: floats in place: %zu of %zu differ from the sum in rank order\n", r, bad, nf);
    EXPECT(bad == 0);

    /* doubles, out of place */
    const size_t nd = 1000;
    double hd[nd], *dd_send, *dd_recv;
    for (size_t i = 0; i < nd; i++)
        hd[i] = (double)(r + 1) / 3.0 + (double)i * 1e-3;
    CUDA(cudaMalloc((void **)&dd_send, sizeof hd));
    CUDA(cudaMalloc((void **)&dd_recv, sizeof hd));
    CUDA(cudaMemcpy(dd_send, hd, sizeof hd, cudaMemcpyHostToDevice));
    NCCL(ncclAllReduce(dd_send, dd_recv, nd, ncclDouble, ncclSum, comm, s));
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaMemcpy(hd, dd_recv, sizeof hd, cudaMemcpyDeviceToHost));
    bad = 0;
    for (size_t i = 0; i < nd; i++) {
        double want = 0;
        for (int q = 0; q < n; q++)
            want = q ? want + ((double)(q + 1) / 3.0 + (double)i * 1e-3)
                     : (double)(q + 1) / 3.0 + (double)i * 1e-3;
        bad += memcmp(&want, &hd[i], sizeof want) != 0;
    }
    printf("rank %d: doubles out of place: %zu of %zu differ\n", r, bad, nd);
    EXPECT(bad == 0);

    /* a graph: add r + 1, then all-reduce in place; captured, replayed twice */
    const int ny = 4096;
    float hy[ny], *dy;
    for (int i = 0; i < ny; i++)
        hy[i] = (float)(r * 1000 + i);
    CUDA(cudaMalloc((void **)&dy, sizeof hy));
    CUDA(cudaMemcpy(dy, hy, sizeof hy, cudaMemcpyHostToDevice));
    cudaGraph_t g;
    cudaGraphExec_t x;
    CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    add_rank<<<(ny + 255) / 256, 256, 0, s>>>(dy, ny, (float)(r + 1));
    NCCL(ncclAllReduce(dy, dy, ny, ncclFloat, ncclSum, comm, s));
    CUDA(cudaStreamEndCapture(s, &g));
    CUDA(cudaGraphInstantiate(&x, g, 0));
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaMemcpy(hy, dy, sizeof hy, cudaMemcpyDeviceToHost));
    EXPECT(hy[1] == (float)(r * 1000 + 1)); /* captured, not run */
    CUDA(cudaGraphLaunch(x, s));
    CUDA(cudaGraphLaunch(x, s));
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaMemcpy(hy, dy, sizeof hy, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < ny; i++) {
        float y[8]; /* every rank's value, replayed on the host */
        for (int q = 0; q < n; q++)
            y[q] = (float)(q * 1000 + i);
        for (int rep = 0; rep < 2; rep++) {
            float sum = 0;
            for (int q = 0; q < n; q++)
                sum = q ? sum + (y[q] + (float)(q + 1)) : y[q] + (float)(q + 1);
            for (int q = 0; q < n; q++)
                y[q] = sum;
        }
        bad += hy[i] != y[r];
    }
    printf("rank %d: graph replayed twice: %zu of %d differ\n", r, bad, ny);
    EXPECT(bad == 0);

    /* a broadcast of ints from the last rank, in place */
    int hb[100], *db;
    for (int i = 0; i < 100; i++)
        hb[i] = r == n - 1 ? i * 3 + 7 : -1;
    CUDA(cudaMalloc((void **)&db, sizeof hb));
    CUDA(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice));
    NCCL(ncclBroadcast(db, db, 100, ncclInt32, n - 1, comm, s));
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaMemcpy(hb, db, sizeof hb, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < 100; i++)
        bad += hb[i] != i * 3 + 7;
    printf("rank %d: broadcast: %zu of 100 differ\n", r, bad);
    EXPECT(bad == 0);

    /* refused when called: nothing is enqueued, the ranks stay in step */
    EXPECT(ncclAllReduce(df, df, 10, ncclFloat, ncclMax, comm, s) == ncclInvalidArgument);
    EXPECT(ncclAllReduce(df, df, 10, ncclFloat16, ncclSum, comm, s) == ncclInvalidArgument);
    EXPECT(ncclAllReduce(hf, df, 10, ncclFloat, ncclSum, comm, s) == ncclInvalidArgument);
    EXPECT(strstr(ncclGetLastError(comm), "not device memory") != NULL);
    CUDA(cudaStreamSynchronize(s));

    CUDA(cudaGraphExecDestroy(x));
    CUDA(cudaGraphDestroy(g));
    NCCL(ncclCommDestroy(comm));
    free(hf);
    printf("rank %d: ok\n", r);
    return 0;
}

/* One rank of mode. */
static int rank_main(const char *mode, ncclUniqueId id)
{
    const int r = rank_, n = nranks_, last = r == n - 1;
    if (!strcmp(mode, "init") && last)
        return 0; /* never comes */
    CUDA(cudaSetDevice(0));
    ncclComm_t comm;
    const int as = last && !strcmp(mode, "rank") ? 0 : r;
    const int of = last && !strcmp(mode, "size") ? n + 1 : n;
    NCCL(ncclCommInitRank(&comm, of, id, as));
    if (!strcmp(mode, "ok") || !strcmp(mode, "stale"))
        return collectives(comm);
    if (last && strcmp(mode, "mismatch")) {
        if (!strcmp(mode, "exit"))
            _exit(0); /* as a crash would: the communicator left as it is */
        const double t = timeout_s() + 1.5;
        struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
        nanosleep(&ts, NULL);
        NCCL(ncclCommDestroy(comm));
        return 0;
    }
    float *d;
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA(cudaMalloc((void **)&d, 1000 * sizeof(float)));
    CUDA(cudaMemset(d, 0, 1000 * sizeof(float)));
    NCCL(ncclAllReduce(d, d, last ? 999 : 1000, ncclFloat, ncclSum, comm, s));
    const cudaError_t e = cudaStreamSynchronize(s);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    printf("rank %d: sync: %s; async error: %s\n", r, cudaGetErrorString(e),
           ncclGetErrorString(async));
    ncclCommAbort(comm);
    return 1;
}

/* The file of id's shared segment: its key in hex (tests/emu/nccl.cc). */
static std::string segment(const ncclUniqueId &id)
{
    std::string s = "/dev/shm/netc-emu-nccl-";
    char hex[3];
    for (int i = 16; i < 44; i++) {
        snprintf(hex, sizeof hex, "%02x", (unsigned char)id.internal[i]);
        s += hex;
    }
    return s;
}

/* Forks a rank of mode; its pid. */
static pid_t start(const char *mode, ncclUniqueId id, int r, int n)
{
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        rank_ = r;
        nranks_ = n;
        _exit(rank_main(mode, id));
    }
    return pid;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[2]) < 1 || atoi(argv[2]) > 8) {
        fprintf(stderr, "usage: nccl_test ok|late|exit|mismatch|init|rank|size|stale NRANKS "
                        "(1 to 8)\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argv[1];
    const int n = atoi(argv[2]);
    ncclUniqueId id;
    NCCL(ncclGetUniqueId(&id));
    int status;
    if (!strcmp(mode, "stale")) { /* a rank 0 killed while it waits for rank 1 */
        const pid_t p = start("ok", id, 0, 2);
        for (int i = 0; i < 500 && access(segment(id).c_str(), F_OK); i++)
            usleep(10000);
        kill(p, SIGKILL);
        waitpid(p, &status, 0);
        printf("stale segment: %s\n", access(segment(id).c_str(), F_OK) == 0 ? "there" : "missing");
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid[8];
    for (int r = 0; r < n; r++)
        pid[r] = start(mode, id, r, n);
    int failed = 0;
    for (int r = 0; r < n; r++) {
        waitpid(pid[r], &status, 0);
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        printf("rank %d: exit %d\n", r, code);
        failed += code != 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("time %.1f\n",
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    printf("segment: %s\n", access(segment(id).c_str(), F_OK) == 0 ? "left behind" : "removed");
    return failed ? 1 : 0;
}
