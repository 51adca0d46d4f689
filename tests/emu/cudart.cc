/*
 * cudart.cc — the CUDA runtime API of the emulated device, built as
 * libcudart.so.13: device memory, streams, events, graphs, libraries of
 * kernels, launches, device queries.  Fidelity that finds bugs:
 *
 *  - device memory is filled with NaN bytes when allocated, ends at a guard
 *    page (the bytes between the end and the page, up to 255, are a canary
 *    checked at every synchronisation), and is unreadable from the host
 *    except while the device works, so a host dereference of a device
 *    pointer faults with a message naming the allocation;
 *  - streams run lazily: their work runs when the host waits for it
 *    (cudaStreamSynchronize, cudaEventSynchronize, a blocking copy, a copy
 *    to pageable memory), so a missing synchronisation reads stale data;
 *    a stream holds at most 1024 operations, the oldest half running
 *    when one more comes, as a GPU's full queue makes the host wait;
 *    a pageable source is copied when the call is made, as CUDA stages it;
 *  - stream capture refuses what CUDA refuses (synchronising, allocating,
 *    pageable copies), takes in the streams that wait for its events and
 *    must join them back; a graph replays what was recorded, its branches
 *    in a random order their dependencies allow;
 *  - a launch's configuration and pointer arguments are checked (device.cc);
 *  - NETC_EMU_MEMORY (bytes, or with K, M, G) sizes the device (default
 *    2G); CUDA_VISIBLE_DEVICES and NETC_EMU_DEVICES (default 1) say how many
 *    devices there are.
 *
 * A library of kernels (cudaLibraryLoadData) is a shared object compiled
 * by the emulated nvcc or NVRTC, loaded with dlopen: from the copy nvcc.py
 * keeps in NETC_EMU_IMAGE_DIR, or from a temporary file.
 */
#include "impl.h"

#include <dlfcn.h>
#include <elf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>

using namespace emu;

/* ------------------------------------------------------------- errors */

static thread_local cudaError_t last_error = cudaSuccess;
static cudaError_t sticky = cudaSuccess; /* a kernel failed: the context is lost */

static cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        last_error = e;
    return e;
}

#define GUARD()                                            \
    std::lock_guard<std::recursive_mutex> guard_(lock()); \
    if (sticky != cudaSuccess)                             \
    return ret(sticky)

/* ------------------------------------------------------------- memory */

namespace {

struct Alloc {
    char *map;
    size_t map_len;
    char *ptr;
    size_t size, room; /* room: size rounded up to 256 */
    Kind kind;
};

std::map<uintptr_t, Alloc> &allocs()
{
    static std::map<uintptr_t, Alloc> m;
    return m;
}

size_t page_size() { return (size_t)sysconf(_SC_PAGESIZE); }

size_t parse_bytes(const char *s, size_t dflt)
{
    if (!s || !*s)
        return dflt;
    char *end;
    double v = strtod(s, &end);
    double mul = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                 : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
    return v > 0 ? (size_t)(v * mul) : dflt;
}

size_t device_memory()
{
    static size_t m = parse_bytes(getenv("NETC_EMU_MEMORY"), (size_t)2 << 30);
    return m;
}
size_t used;
int work_depth;

const Alloc *find(const void *p)
{
    auto &m = allocs();
    auto it = m.upper_bound((uintptr_t)p);
    if (it == m.begin())
        return nullptr;
    --it;
    const Alloc &a = it->second;
    return (const char *)p <= a.ptr + a.size ? &a : nullptr;
}

/* the allocation whose mapping (guard page included) holds p */
const Alloc *find_mapped(const void *p)
{
    for (auto &kv : allocs()) {
        const Alloc &a = kv.second;
        if ((const char *)p >= a.map && (const char *)p < a.map + a.map_len)
            return &a;
    }
    return nullptr;
}

void protect(const Alloc &a, int prot)
{
    const size_t page = page_size();
    char *data = (char *)((uintptr_t)a.ptr / page * page);
    mprotect(data, (size_t)(a.ptr + a.room - data), prot);
}

void check_canary(const Alloc &a)
{
    for (size_t i = a.size; i < a.room; i++)
        if ((unsigned char)a.ptr[i] != 0xa5) {
            fail("a write %zu bytes past the end of a %zu-byte device allocation at %p",
                 i - a.size, a.size, (void *)a.ptr);
            abort();
        }
}

void on_segv(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    const char *p = (const char *)si->si_addr;
    const Alloc *a = find_mapped(p);
    if (a && p >= a->ptr && p < a->ptr + a->size && !work_depth) {
        fail("the host touched device memory at %p (byte %zu of a %zu-byte %s): device memory "
             "is read with cudaMemcpy, after the stream's work is done", (const void *)p,
             (size_t)(p - a->ptr), a->size, a->kind == DEVICE ? "cudaMalloc" : "allocation");
    } else if (a) {
        fail("an access at %p, %zd bytes %s a %zu-byte device allocation at %p",
             (const void *)p, p >= a->ptr ? (ssize_t)(p - a->ptr - a->size) : (ssize_t)(a->ptr - p),
             p >= a->ptr ? "past the end of" : "before", a->size, (void *)a->ptr);
    } else {
        signal(sig, SIG_DFL);
        return; /* not ours: the fault happens again, as it would */
    }
    const std::string k = running();
    if (!k.empty())
        fprintf(stderr, "netc-emu: in %s\n", k.c_str());
    signal(SIGABRT, SIG_DFL);
    abort();
}

__attribute__((constructor)) void install_handler(void)
{
    static char alt[1 << 16];
    stack_t ss = {};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, NULL);
    struct sigaction sa = {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

cudaError_t allocate(void **p, size_t size, Kind kind)
{
    *p = NULL;
    if (size == 0)
        return cudaSuccess;
    if (kind == DEVICE && size > device_memory() - used)
        return cudaErrorMemoryAllocation;
    const size_t page = page_size(), room = (size + 255) / 256 * 256;
    const size_t data = (room + page - 1) / page * page, len = data + page;
    char *m = (char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return cudaErrorMemoryAllocation;
    mprotect(m + data, page, PROT_NONE);
    Alloc a = {m, len, m + data - room, size, room, kind};
    memset(a.ptr, 0xff, size);             /* NaN bytes */
    memset(a.ptr + size, 0xa5, room - size); /* the canary */
    if (kind == DEVICE) {
        used += size;
        if (!work_depth)
            protect(a, PROT_NONE);
    }
    allocs()[(uintptr_t)a.ptr] = a;
    *p = a.ptr;
    return cudaSuccess;
}

} /* namespace */

Kind emu::kind_of(const void *p, size_t *left)
{
    const Alloc *a = find(p);
    if (!a)
        return NONE;
    if (left)
        *left = a->size - (size_t)((const char *)p - a->ptr);
    return a->kind;
}

emu::DeviceWork::DeviceWork()
{
    if (work_depth++ == 0)
        for (auto &kv : allocs())
            if (kv.second.kind == DEVICE)
                protect(kv.second, PROT_READ | PROT_WRITE);
}

emu::DeviceWork::~DeviceWork()
{
    if (--work_depth == 0)
        for (auto &kv : allocs()) {
            check_canary(kv.second);
            if (kv.second.kind == DEVICE)
                protect(kv.second, PROT_NONE);
        }
}

/* ------------------------------------------------------------- streams */

/* A captured graph: its operations, each with the nodes it depends on
 * (the one before it on its stream, and those of the events its stream
 * waited for).  A capture begun on one stream takes in another that waits
 * for an event recorded in it (fork), and must have every such stream
 * waited for again (join) by its end, as CUDA requires. */
struct GraphNode {
    std::function<void()> op;
    std::vector<size_t> deps;
};
struct CUgraph_st {
    std::vector<GraphNode> nodes;
    bool invalidated = false;
};
struct CUgraphExec_st {
    std::vector<GraphNode> nodes;
};

struct CUstream_st {
    unsigned flags = 0;
    std::deque<std::function<void()>> q;
    unsigned long long enq = 0, done = 0;
    CUgraph_st *capture = nullptr; /* the graph being captured: its own, or joined */
    bool origin = false;           /* the capture began here (and ends here) */
    std::vector<size_t> tail;      /* what the stream's next node depends on */
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
};

struct CUevent_st {
    unsigned flags = 0;
    CUstream_st *s = nullptr;
    unsigned long long seq = 0;
    bool recorded = false, happened = false;
    double time = 0;
    CUgraph_st *graph = nullptr;   /* recorded in a capture: there, */
    std::vector<size_t> nodes;     /* after these nodes */
};

namespace {

CUstream_st legacy;
std::vector<CUstream_st *> streams = {&legacy};

CUstream_st *stream_of(cudaStream_t s) { return s ? s : &legacy; }

double now()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs s's work up to (and including) its seq-th operation. */
void run(CUstream_st *s, unsigned long long seq)
{
    DeviceWork w;
    while (s->done < seq && !s->q.empty()) {
        std::function<void()> op = std::move(s->q.front());
        s->q.pop_front();
        if (sticky == cudaSuccess)
            op();
        s->done++;
    }
}
void drain(CUstream_st *s) { run(s, s->enq); }
void drain_all()
{
    for (CUstream_st *s : streams)
        drain(s);
}

CUstream_st *capturing()
{
    for (CUstream_st *s : streams)
        if (s->capture)
            return s;
    return nullptr;
}

/* A call CUDA refuses while a stream captures: the capture is invalidated. */
bool refused_in_capture(const char *call)
{
    CUstream_st *s = capturing();
    if (!s || s->mode == cudaStreamCaptureModeRelaxed)
        return false;
    note("%s during a stream capture: refused, and the capture invalidated, as CUDA does", call);
    s->capture->invalidated = true;
    return true;
}

bool eager; /* emu::run_eagerly */

/* A GPU works through a stream while the host goes on, and a host far
 * ahead waits once the stream's queue is full.  Here a stream's work runs
 * when the host waits for it, and a stream holds at most QUEUE_DEPTH
 * operations: one more runs the oldest half, as a full queue makes the
 * host wait (half, not one: each run opens device memory to the host and
 * closes it again).  Unbounded, a loop that never waits would queue a
 * whole epoch, and its first wait (a live progress line reading a loss)
 * would run all of it.  The newest operations stay queued, so a read that
 * does not wait for them still reads stale data. */
const unsigned long long QUEUE_DEPTH = 1024;

void enqueue(CUstream_st *s, std::function<void()> op)
{
    if (s->capture) {
        s->capture->nodes.push_back(GraphNode{std::move(op), s->tail});
        s->tail.assign(1, s->capture->nodes.size() - 1);
        return;
    }
    s->q.push_back(std::move(op));
    s->enq++;
    if (eager)
        drain(s);
    else if (s->enq - s->done > QUEUE_DEPTH)
        run(s, s->enq - QUEUE_DEPTH / 2);
}

const char *kind_word(Kind k) { return k == DEVICE ? "device" : k == PINNED ? "pinned" : "pageable"; }

/* Checks a copy's pointers against its kind and its extents against the
 * allocations. */
cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, Kind *dk,
                       Kind *sk)
{
    size_t dl = 0, sl = 0;
    *dk = kind_of(dst, &dl);
    *sk = kind_of(src, &sl);
    const bool to_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool from_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyDefault && ((to_dev && *dk != DEVICE) || (!to_dev && *dk == DEVICE) ||
                                      (from_dev && *sk != DEVICE) || (!from_dev && *sk == DEVICE))) {
        fail("cudaMemcpy of %zu bytes from %s memory %p to %s memory %p with kind %d: the "
             "pointers do not match the kind", n, kind_word(*sk), src, kind_word(*dk), dst,
             (int)kind);
        return cudaErrorInvalidValue;
    }
    if ((*dk != NONE && n > dl) || (*sk != NONE && n > sl)) {
        fail("cudaMemcpy of %zu bytes from %p to %p: past the end of an allocation (%zu bytes "
             "left at the destination, %zu at the source)", n, src, dst,
             *dk != NONE ? dl : n, *sk != NONE ? sl : n);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

cudaError_t launch(const Kernel *k, dim3 grid, dim3 block, void **args, size_t shared,
                   cudaStream_t stream)
{
    Launch l;
    cudaError_t e = make_launch(k, grid, block, args, shared, &l);
    if (e != cudaSuccess)
        return ret(e);
    enqueue(stream_of(stream), [l]() {
        if (run_launch(l))
            sticky = cudaErrorLaunchFailure;
    });
    return cudaSuccess;
}

} /* namespace */

void emu::enqueue_op(cudaStream_t s, std::function<void()> op)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    enqueue(stream_of(s), std::move(op));
}

void emu::lose_context(void) { sticky = cudaErrorLaunchFailure; }

void emu::run_eagerly(void)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    drain_all();
    eager = true;
}

void emu::synchronize(void)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    drain_all();
}

/* ------------------------------------------------------------ the API */

extern "C" {

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return sticky != cudaSuccess ? sticky : e;
}

cudaError_t cudaPeekAtLastError(void) { return sticky != cudaSuccess ? sticky : last_error; }

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define NAME(x) case x: return #x;
    NAME(cudaSuccess) NAME(cudaErrorInvalidValue) NAME(cudaErrorMemoryAllocation)
    NAME(cudaErrorInvalidConfiguration) NAME(cudaErrorLaunchOutOfResources)
    NAME(cudaErrorInvalidDeviceFunction) NAME(cudaErrorNoDevice) NAME(cudaErrorInvalidDevice)
    NAME(cudaErrorLaunchFailure) NAME(cudaErrorIllegalAddress) NAME(cudaErrorNotReady)
    NAME(cudaErrorStreamCaptureUnsupported) NAME(cudaErrorStreamCaptureInvalidated)
    NAME(cudaErrorInvalidResourceHandle) NAME(cudaErrorInvalidKernelImage)
    NAME(cudaErrorSymbolNotFound) NAME(cudaErrorIllegalState)
    NAME(cudaErrorStreamCaptureUnjoined) NAME(cudaErrorStreamCaptureIsolation)
    NAME(cudaErrorStreamCaptureUnmatched)
#undef NAME
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidKernelImage: return "device kernel image is invalid";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    case cudaErrorStreamCaptureUnjoined: return "capture was not joined back to the origin stream";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    default: return "unknown error";
    }
}

cudaError_t cudaRuntimeGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = CUDART_VERSION; return cudaSuccess; }

static int device_count(void)
{
    int n = 1;
    const char *d = getenv("NETC_EMU_DEVICES");
    if (d && *d)
        n = atoi(d);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis)
        return n;
    /* as CUDA reads it: indices up to the first invalid one */
    int count = 0;
    for (const char *p = vis; *p;) {
        char *end;
        long i = strtol(p, &end, 10);
        if (end == p || i < 0 || i >= n)
            break;
        count++;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' )
            break;
    }
    return count;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = device_count();
    return *count ? cudaSuccess : ret(cudaErrorNoDevice);
}

static thread_local int current_device;

cudaError_t cudaSetDevice(int d)
{
    if (d < 0 || d >= device_count())
        return ret(cudaErrorInvalidDevice);
    current_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) { *d = current_device; return cudaSuccess; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= device_count())
        return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "netc emulated CUDA device");
    p->totalGlobalMem = device_memory();
    p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = 227 << 10;
    p->sharedMemPerMultiprocessor = 228 << 10;
    p->regsPerBlock = 65536;
    p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->totalConstMem = 64 << 10;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 4;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->l2CacheSize = 4 << 20;
    p->memoryBusWidth = 256;
    p->unifiedAddressing = 1;
    p->concurrentKernels = 1;
    p->pciBusID = d;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, d);
    if (e != cudaSuccess)
        return e;
    switch (a) {
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrWarpSize: *v = p.warpSize; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
    default:
        note("cudaDeviceGetAttribute: attribute %d is not emulated", (int)a);
        return ret(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    GUARD();
    *free_bytes = device_memory() - used;
    *total = device_memory();
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    GUARD();
    if (refused_in_capture("cudaDeviceSynchronize"))
        return ret(cudaErrorStreamCaptureUnsupported);
    drain_all();
    return ret(sticky);
}

cudaError_t cudaMalloc(void **p, size_t size)
{
    GUARD();
    if (refused_in_capture("cudaMalloc"))
        return ret(cudaErrorStreamCaptureUnsupported);
    return ret(allocate(p, size, DEVICE));
}

cudaError_t cudaMallocHost(void **p, size_t size)
{
    GUARD();
    if (refused_in_capture("cudaMallocHost"))
        return ret(cudaErrorStreamCaptureUnsupported);
    return ret(allocate(p, size, PINNED));
}

static cudaError_t release(void *p, Kind kind, const char *call)
{
    GUARD();
    if (!p)
        return cudaSuccess;
    if (refused_in_capture(call))
        return ret(cudaErrorStreamCaptureUnsupported);
    auto it = allocs().find((uintptr_t)p);
    if (it == allocs().end() || it->second.kind != kind) {
        fail("%s(%p): not the start of a live %s allocation", call, p,
             kind == DEVICE ? "cudaMalloc" : "cudaMallocHost");
        return ret(cudaErrorInvalidValue);
    }
    drain_all(); /* cudaFree waits for the device */
    Alloc a = it->second;
    {
        DeviceWork w;
        check_canary(a);
    }
    if (kind == DEVICE)
        used -= a.size;
    munmap(a.map, a.map_len);
    allocs().erase(it);
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) { return release(p, DEVICE, "cudaFree"); }
cudaError_t cudaFreeHost(void *p) { return release(p, PINNED, "cudaFreeHost"); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    GUARD();
    *s = new CUstream_st;
    (*s)->flags = flags;
    streams.push_back(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    GUARD();
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    drain_all(); /* s, and the streams that may wait for it */
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == s)
            streams.erase(streams.begin() + (long)i);
    if (s->capture && !s->origin)
        s->capture->invalidated = true;
    else
        delete s->capture;
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    GUARD();
    CUstream_st *st = stream_of(s);
    if (st->capture) {
        note("cudaStreamSynchronize on a capturing stream: refused, the capture invalidated");
        st->capture->invalidated = true;
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (refused_in_capture("cudaStreamSynchronize"))
        return ret(cudaErrorStreamCaptureUnsupported);
    if (st == &legacy)
        drain_all();
    else
        drain(st);
    return ret(sticky);
}

/* Blocking calls wait for the legacy stream and the streams that
 * synchronise with it (not those created cudaStreamNonBlocking). */
static void drain_blocking(void)
{
    for (CUstream_st *s : streams)
        if (!(s->flags & cudaStreamNonBlocking))
            drain(s);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    GUARD();
    if (refused_in_capture("cudaMemcpy"))
        return ret(cudaErrorStreamCaptureUnsupported);
    Kind dk, sk;
    cudaError_t e = check_copy(dst, src, n, kind, &dk, &sk);
    if (e != cudaSuccess)
        return ret(e);
    drain_blocking();
    if (sticky != cudaSuccess)
        return ret(sticky);
    DeviceWork w;
    memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    GUARD();
    CUstream_st *st = stream_of(s);
    Kind dk, sk;
    cudaError_t e = check_copy(dst, src, n, kind, &dk, &sk);
    if (e != cudaSuccess)
        return ret(e);
    if ((dk == NONE || sk == NONE) && st->capture) {
        note("cudaMemcpyAsync with pageable host memory %p during a stream capture: refused, "
             "the capture invalidated", dk == NONE ? dst : src);
        st->capture->invalidated = true;
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (dk == NONE) { /* to pageable memory: the call returns when it is done */
        drain(st);
        if (sticky != cudaSuccess)
            return ret(sticky);
        DeviceWork w;
        memmove(dst, src, n);
        return cudaSuccess;
    }
    if (sk == NONE) { /* from pageable memory: staged now */
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        enqueue(st, [dst, staged]() { memmove(dst, staged->data(), staged->size()); });
        return cudaSuccess;
    }
    enqueue(st, [dst, src, n]() { memmove(dst, src, n); });
    return cudaSuccess;
}

static cudaError_t check_set(void *p, size_t n, const char *call)
{
    size_t left = 0;
    if (kind_of(p, &left) != DEVICE || n > left) {
        fail("%s(%p, %zu bytes): %s", call, p, n,
             kind_of(p, NULL) != DEVICE ? "not device memory" : "past the end of the allocation");
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
    GUARD();
    if (refused_in_capture("cudaMemset"))
        return ret(cudaErrorStreamCaptureUnsupported);
    if (cudaError_t e = check_set(p, n, "cudaMemset"))
        return ret(e);
    drain_blocking();
    DeviceWork w;
    memset(p, v, n);
    return ret(sticky);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    GUARD();
    if (cudaError_t e = check_set(p, n, "cudaMemsetAsync"))
        return ret(e);
    enqueue(stream_of(s), [p, v, n]() { memset(p, v, n); });
    return cudaSuccess;
}

/* -------------------------------------------------------------- events */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    GUARD();
    *e = new CUevent_st();
    (*e)->flags = flags;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    GUARD();
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    GUARD();
    CUstream_st *st = stream_of(s);
    e->graph = st->capture;
    if (st->capture) { /* a point in the graph, for streams to wait for */
        e->nodes = st->tail;
        return cudaSuccess;
    }
    e->recorded = true;
    e->happened = false;
    e->s = st;
    enqueue(st, [e]() {
        e->happened = true;
        e->time = now();
    });
    e->seq = st->enq;
    return cudaSuccess;
}

/* In a capture: the stream depends on the event's point in the graph,
 * taken into the capture if it was not in it (a fork).  Else the stream's
 * next work waits for the event's: lazily, it runs the event's stream up
 * to it first. */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    GUARD();
    CUstream_st *st = stream_of(s);
    if (flags != 0) {
        note("cudaStreamWaitEvent: flags %u are not emulated", flags);
        return ret(cudaErrorInvalidValue);
    }
    if (e->graph) {
        CUstream_st *origin = nullptr;
        for (CUstream_st *o : streams)
            if (o->capture == e->graph && o->origin)
                origin = o;
        if (!origin || (st->capture && st->capture != e->graph) || st == &legacy) {
            fail("cudaStreamWaitEvent: the event was recorded in a capture %s",
                 !origin ? "that has ended" : "other than the stream's");
            if (st->capture)
                st->capture->invalidated = true;
            return ret(cudaErrorStreamCaptureIsolation);
        }
        if (!st->capture) {
            st->capture = e->graph;
            st->mode = origin->mode;
            st->tail.clear();
        }
        for (size_t n : e->nodes)
            if (std::find(st->tail.begin(), st->tail.end(), n) == st->tail.end())
                st->tail.push_back(n);
        return cudaSuccess;
    }
    if (st->capture) {
        fail("cudaStreamWaitEvent: a capturing stream waits for an event recorded outside "
             "the capture, which CUDA refuses");
        st->capture->invalidated = true;
        return ret(cudaErrorStreamCaptureIsolation);
    }
    if (!e->recorded || e->s == st)
        return cudaSuccess;
    CUstream_st *from = e->s;
    const unsigned long long seq = e->seq;
    enqueue(st, [from, seq]() { run(from, seq); });
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    GUARD();
    if (refused_in_capture("cudaEventSynchronize"))
        return ret(cudaErrorStreamCaptureUnsupported);
    if (e->recorded)
        run(e->s, e->seq);
    return ret(sticky);
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    GUARD();
    return !e->recorded || e->happened ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    GUARD();
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return ret(cudaErrorInvalidResourceHandle);
    if (!a->happened || !b->happened)
        return ret(cudaErrorNotReady);
    *ms = (float)((b->time - a->time) * 1e3);
    return cudaSuccess;
}

/* -------------------------------------------------------------- graphs */

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    GUARD();
    if (!s || s->capture)
        return ret(cudaErrorIllegalState);
    s->capture = new CUgraph_st;
    s->origin = true;
    s->tail.clear();
    s->mode = mode;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    GUARD();
    *g = NULL;
    if (!s || !s->capture || !s->origin)
        return ret(s && s->capture ? cudaErrorStreamCaptureUnmatched : cudaErrorIllegalState);
    CUgraph_st *graph = s->capture;
    /* every stream the capture took in must have been joined: its last
     * node one the origin's end depends on */
    std::vector<bool> before(graph->nodes.size());
    std::vector<size_t> todo = s->tail;
    while (!todo.empty()) {
        size_t n = todo.back();
        todo.pop_back();
        if (!before[n]) {
            before[n] = true;
            todo.insert(todo.end(), graph->nodes[n].deps.begin(), graph->nodes[n].deps.end());
        }
    }
    bool unjoined = false;
    for (CUstream_st *o : streams)
        if (o->capture == graph) {
            for (size_t n : o->tail)
                unjoined |= !before[n];
            o->capture = nullptr;
            o->origin = false;
            o->tail.clear();
        }
    if (unjoined)
        fail("cudaStreamEndCapture: a stream the capture took in was not joined back (its "
             "last work is not waited for by the capturing stream), as CUDA requires");
    if (unjoined || graph->invalidated) {
        delete graph;
        return ret(unjoined ? cudaErrorStreamCaptureUnjoined : cudaErrorStreamCaptureInvalidated);
    }
    *g = graph;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status)
{
    GUARD();
    CUstream_st *st = stream_of(s);
    *status = !st->capture ? cudaStreamCaptureStatusNone
              : st->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags)
{
    GUARD();
    (void)flags;
    if (refused_in_capture("cudaGraphInstantiate"))
        return ret(cudaErrorStreamCaptureUnsupported);
    *x = new CUgraphExec_st{g->nodes};
    return cudaSuccess;
}

/* A launch runs the graph's nodes in an order its dependencies allow, as
 * a GPU runs the branches of a graph at once, so that a missing dependency
 * (a fork or a join) shows as a wrong result.  The ready node that runs
 * next is the oldest (the order of the capture: a branch runs as soon as
 * it can), the newest (a branch runs as late as it can), or one drawn at
 * random: under NETC_EMU_ORDER=shuffle (the default) one of the three,
 * drawn for each launch, under forward the oldest, under reverse the
 * newest. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
    GUARD();
    CUstream_st *st = stream_of(s);
    const std::vector<GraphNode> &nodes = x->nodes;
    std::vector<size_t> waiting(nodes.size());
    std::vector<std::vector<size_t>> after(nodes.size());
    std::vector<size_t> ready;
    for (size_t i = 0; i < nodes.size(); i++) {
        waiting[i] = nodes[i].deps.size();
        for (size_t d : nodes[i].deps)
            after[d].push_back(i);
        if (!waiting[i])
            ready.push_back(i);
    }
    std::vector<unsigned> pick(3);
    order(pick); /* forward: 0, reverse: 2, shuffle: any */
    const unsigned policy = pick[0];
    while (!ready.empty()) {
        std::sort(ready.begin(), ready.end());
        pick.resize(ready.size());
        order(pick);
        const size_t at = policy == 0 ? 0 : policy == 2 ? ready.size() - 1 : pick[0];
        const size_t n = ready[at];
        ready.erase(ready.begin() + (long)at);
        enqueue(st, nodes[n].op);
        for (size_t a : after[n])
            if (--waiting[a] == 0)
                ready.push_back(a);
    }
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    GUARD();
    delete g;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    GUARD();
    delete x;
    return cudaSuccess;
}

/* ------------------------------------------------------------ launches */

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                             size_t shared, cudaStream_t s)
{
    GUARD();
    const Kernel *k = kernel_record(func);
    if (!k)
        k = kernel_by_fn(func);
    if (!k) {
        fail("cudaLaunchKernel(%p): not a kernel of a loaded library or of this program", func);
        return ret(cudaErrorInvalidDeviceFunction);
    }
    return launch(k, grid, block, args, shared, s);
}

cudaError_t cudaGetKernel(cudaKernel_t *k, const void *fn)
{
    GUARD();
    const Kernel *r = kernel_by_fn(fn);
    *k = (cudaKernel_t)(void *)r;
    return r ? cudaSuccess : ret(cudaErrorInvalidDeviceFunction);
}

} /* extern "C" */

extern "C" cudaError_t netc_emu_launch_fn(void *fn, netc_emu_trampoline call, int nparams,
                                          const size_t *size, const size_t *align,
                                          const unsigned char *is_pointer, int max_threads,
                                          const char *name, dim3 grid, dim3 block, void **args,
                                          size_t shared, cudaStream_t stream)
{
    GUARD();
    const Kernel *k = kernel_by_fn(fn);
    if (!k) {
        netc_emu_register(name, fn, call, nparams, size, align, is_pointer, max_threads);
        k = kernel_by_fn(fn);
    }
    return launch(k, grid, block, args, shared, stream);
}

/* ----------------------------------------------------------- libraries */

struct CUlib_st {
    void *handle;
    std::string path;
};

/* An ELF image's size, from its header: the section table ends it. */
static size_t elf_size(const void *code)
{
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)code;
    if (memcmp(h->e_ident, ELFMAG, SELFMAG) || h->e_ident[EI_CLASS] != ELFCLASS64)
        return 0;
    return (size_t)h->e_shoff + (size_t)h->e_shnum * h->e_shentsize;
}

static uint32_t crc32(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = c >> 1 ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* dlopen needs the image in a file.  The emulated nvcc keeps a copy of
 * each image it makes in NETC_EMU_IMAGE_DIR (tests/emu/env.sh sets it),
 * named SIZE-CRC32.so: loaded from there, an image needs no file written,
 * so a program whose writes are limited (ulimit -f) loads its kernels, as
 * on a GPU.  Returns that copy's path if it holds the image byte for byte
 * and was not loaded before in this process (dlopen would give the same
 * library again, its kernels registered to the first load), else "": the
 * image is then written to a temporary file. */
static std::string staged_copy(const void *code, size_t size)
{
    static std::set<std::string> loaded;
    const char *dir = getenv("NETC_EMU_IMAGE_DIR");
    if (!dir || !*dir)
        return "";
    char name[64];
    snprintf(name, sizeof name, "/%zu-%08x.so", size,
             (unsigned)crc32((const unsigned char *)code, size));
    std::string path = dir + std::string(name);
    FILE *f = loaded.count(path) ? NULL : fopen(path.c_str(), "rb");
    if (!f)
        return "";
    std::vector<char> b(size + 1);
    const bool same = fread(b.data(), 1, size + 1, f) == size && !memcmp(b.data(), code, size);
    fclose(f);
    if (!same)
        return "";
    loaded.insert(path);
    return path;
}

extern "C" cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code,
                                           cudaJitOption *jo, void **jv, unsigned nj,
                                           cudaLibraryOption *lo, void **lv, unsigned nl)
{
    GUARD();
    (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
    *lib = NULL;
    if (refused_in_capture("cudaLibraryLoadData"))
        return ret(cudaErrorStreamCaptureUnsupported);
    const size_t size = code ? elf_size(code) : 0;
    if (!size) {
        fail("cudaLibraryLoadData: the image is not a shared object of the emulated nvcc or "
             "NVRTC (a real fatbin or cubin cannot run on the emulated device)");
        return ret(cudaErrorInvalidKernelImage);
    }
    std::string path = staged_copy(code, size);
    char tmp[] = "/tmp/netc-emu-lib.XXXXXX";
    if (path.empty()) {
        int fd = mkstemp(tmp);
        if (fd < 0 || write(fd, code, size) != (ssize_t)size) {
            if (fd >= 0)
                close(fd), unlink(tmp);
            fail("cudaLibraryLoadData: cannot write the image to %s (and the emulated nvcc "
                 "left no copy of it in NETC_EMU_IMAGE_DIR)", tmp);
            return ret(cudaErrorInvalidKernelImage);
        }
        close(fd);
        path = tmp;
    }
    CUlib_st *l = new CUlib_st{nullptr, path};
    set_loading(l);
    l->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    set_loading(nullptr);
    if (path == tmp)
        unlink(tmp);
    if (!l->handle || !dlsym(l->handle, "netc_emu_image")) {
        fail("cudaLibraryLoadData: %s", l->handle ? "the image was not made by the emulated "
                                                    "nvcc or NVRTC" : dlerror());
        if (l->handle)
            dlclose(l->handle);
        delete l;
        return ret(cudaErrorInvalidKernelImage);
    }
    *lib = l;
    return cudaSuccess;
}

extern "C" cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib, const char *name)
{
    GUARD();
    *k = NULL;
    for (const Kernel *r : kernels_of(lib))
        if (r->name == name) {
            *k = (cudaKernel_t)(void *)r;
            return cudaSuccess;
        }
    return ret(cudaErrorSymbolNotFound);
}

extern "C" cudaError_t cudaLibraryUnload(cudaLibrary_t lib)
{
    GUARD();
    if (!lib)
        return ret(cudaErrorInvalidResourceHandle);
    drain_all();
    forget(lib); /* a handle kept past here is not a kernel any more */
    dlclose(lib->handle);
    delete lib;
    return cudaSuccess;
}
