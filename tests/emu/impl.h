/*
 * impl.h — the emulated device's insides, shared by device.cc (CUDA
 * threads as fibers), cudart.cc (the CUDA runtime API: memory, streams,
 * graphs, libraries), cublas.cc and nccl.cc.  Not seen by device code (emu.h is).
 */
#ifndef NETC_EMU_IMPL_H
#define NETC_EMU_IMPL_H

#include "emu.h"

#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace emu {

/* A __global__ function: how to call it with its parameters. */
struct Kernel {
    std::string name;
    void *fn;
    netc_emu_trampoline call;
    std::vector<size_t> size, align;
    std::vector<unsigned char> is_pointer;
    int max_threads; /* __launch_bounds__, or 0 */
    const void *lib; /* the cudaLibrary_t it came with, or NULL: the program's */
};

/* A launch as a stream keeps it: the parameters copied when it was made. */
struct Launch {
    const Kernel *k;
    dim3 grid, block;
    std::vector<unsigned char> params; /* each at offset[i] */
    std::vector<size_t> offset;
};

/* Checks a launch's configuration and arguments, and copies them:
 * cudaSuccess or the error CUDA gives (the reason on stderr). */
cudaError_t make_launch(const Kernel *k, dim3 grid, dim3 block, void **args, size_t shared,
                        Launch *out);
/* Runs a launch to the end: 0, or -1 after a message on stderr (a
 * deadlock, a divergent barrier). */
int run_launch(const Launch &l);

/* The registry: kernels by host function or library. */
const Kernel *kernel_by_fn(const void *fn);
const Kernel *kernel_record(const void *handle); /* a cudaKernel_t, or NULL */
void set_loading(const void *lib);             /* registrations go to lib */
std::vector<const Kernel *> kernels_of(const void *lib);
void forget(const void *lib);                  /* lib's kernels are gone */

/* Device memory: what an address is. */
enum Kind { NONE, DEVICE, PINNED };
Kind kind_of(const void *p, size_t *size_left);
/* Lifts and restores the host's protection of device memory around the
 * device's work. */
struct DeviceWork {
    DeviceWork();
    ~DeviceWork();
};

/* Puts op on s's queue (or its capture), as a kernel launch would be. */
void enqueue_op(cudaStream_t s, std::function<void()> op);
/* From now on the process's streams run their work as it is enqueued
 * (outside captures), not when the host waits.  A process that joined a
 * communicator (nccl.cc): a rank's collective then runs whatever its host
 * goes on to wait for (another rank, over MPI), as a GPU would run it;
 * lazily, two ranks could each wait on the host for the other while their
 * collectives sit queued.  The price: such a process no longer shows a
 * missing synchronisation as stale data. */
void run_eagerly(void);
/* The op running now failed (a collective whose peers never came): the
 * context is lost, as a failed kernel loses it (cudaErrorLaunchFailure,
 * sticky).  Called from an op, after a message on stderr. */
void lose_context(void);
/* Runs every stream's queued work, as cudaDeviceSynchronize does but
 * without its refusal during a capture (a communicator's pending
 * collectives, before it goes). */
void synchronize(void);

/* The kernel running now and where, for a fault's message: "" when none. */
std::string running(void);

/* The one lock the emulated device's state is under. */
std::recursive_mutex &lock();

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The order threads and blocks run in: NETC_EMU_ORDER. */
void order(std::vector<unsigned> &idx);

} /* namespace emu */

#endif
