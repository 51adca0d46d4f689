/*
 * nccl.cc — NCCL for the emulated device, built as libnccl.so.2: the
 * communicator calls, ncclAllReduce (sums) and ncclBroadcast, from NCCL's
 * documented semantics, between processes that each have an emulated GPU
 * of their own — one rank a process, as under mpirun.
 *
 * Rendezvous.  ncclGetUniqueId makes an id of random bytes, the pid and
 * the time; the id names a POSIX shared-memory segment, "/netc-emu-nccl-"
 * and the hex of those bytes.  The first rank of a communicator to come
 * creates it (O_EXCL), sized for its ranks, and the others open it; each
 * writes its pid in its rank's slot, under a robust process-shared mutex
 * in the segment.  The rank that fills the last slot unlinks the name:
 * every rank has the segment mapped, and nothing is left behind whatever
 * happens next.  ncclCommInitRank returns when every rank has come, or
 * fails after NETC_EMU_NCCL_TIMEOUT seconds (default 60), naming the
 * ranks that never came, and the last of those that did to leave unlinks
 * the name.  A segment of the same name one of whose ranks died without
 * leaving (a start with the same id that crashed in ncclCommInitRank) is
 * stale: the first rank to open it unlinks it, and the ranks make a fresh
 * one.
 *
 * Collectives.  ncclAllReduce and ncclBroadcast are stream work, like a
 * kernel: the call checks its arguments and enqueues the collective (or a
 * capture records it, and each replay of the graph runs it again); it runs
 * when the stream runs, i.e. when this process synchronises with it.
 * Running one is a sequence of barriers between the ranks' processes:
 * each rank says what it calls (ranks that call different collectives are
 * an error), then the data goes through the segment in chunks of 256 KiB a
 * rank, and each rank adds the chunks in rank order itself (rank 0 + rank 1
 * + ...): every rank gets the same bits, run after run.  A barrier some
 * rank does not come to in time, or that a rank left by exiting,
 * destroying or aborting its communicator, fails the collective with the
 * ranks named; the CUDA context is then lost (cudaErrorLaunchFailure,
 * sticky), as a failed kernel loses it, and ncclCommGetAsyncError says
 * ncclRemoteError: the program sees an error, never a hang.
 */
#include "impl.h"

#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>

using namespace emu;

namespace {

/* ------------------------------------------------------------- errors */

std::mutex last_lock;
char last_error[1200];

/* Says why a call failed, on stderr as the emulator's other errors and for
 * ncclGetLastError; gives r. */
ncclResult_t error(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t error(ncclResult_t r, const char *fmt, ...)
{
    std::lock_guard<std::mutex> g(last_lock);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    fail("%s", last_error);
    return r;
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...)
{
    char s[1000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    return s;
}

double now()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void pause_ns(long ns)
{
    struct timespec t = {0, ns};
    nanosleep(&t, NULL);
}

/* NETC_EMU_NCCL_TIMEOUT: how long a rank waits for the others, in seconds. */
double timeout()
{
    static const double t = [] {
        const char *s = getenv("NETC_EMU_NCCL_TIMEOUT");
        if (!s || !*s)
            return 60.0;
        char *end;
        const double v = strtod(s, &end);
        if (*end || !(v > 0)) {
            note("NETC_EMU_NCCL_TIMEOUT=%s: not a number of seconds; 60 it is", s);
            return 60.0;
        }
        return v;
    }();
    return t;
}

/* Whether pid still runs: it exists and is not a zombie (a rank that
 * crashed, its parent not yet told). */
bool alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true; /* cannot tell: alive */
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* "pid (name) state ..." */
    return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

/* ------------------------------------------------------------ the segment */

/* An id: this magic, then the key that names the segment. */
const char id_magic[16] = "netc-emu-nccl";
const size_t key_at = 16, key_len = 28; /* 16 random bytes, the pid, the time in ns */
const size_t chunk_bytes = 256 << 10;   /* a rank's share of the segment */

enum State : uint32_t { MAKING, READY, GONE };
enum Coll : uint32_t { ALL_REDUCE = 1, BROADCAST };

/* A collective as a rank calls it: every rank's must be the same. */
struct Desc {
    uint64_t seq;   /* the communicator's collectives so far, this one included */
    uint64_t count; /* elements */
    uint32_t coll;  /* Coll */
    uint32_t type;  /* ncclDataType_t */
    uint32_t op;    /* ncclRedOp_t; 0 for a broadcast */
    int32_t root;   /* 0 for an all-reduce */
};

struct Slot {
    std::atomic<int32_t> pid;      /* the process that joined as this rank, or 0 */
    std::atomic<uint32_t> left;    /* it destroyed or aborted its communicator */
    std::atomic<uint64_t> reached; /* the barriers it came to */
    Desc desc;                     /* its collective now, written before a barrier */
};

struct Header {
    std::atomic<uint32_t> state;  /* MAKING until the creator has set it up; GONE unlinked */
    std::atomic<int32_t> creator; /* its pid */
    uint32_t nranks;
    uint64_t chunk;          /* bytes of each rank's data */
    pthread_mutex_t mutex;   /* robust, process-shared: joining, leaving, giving up */
    std::atomic<int32_t> gave_up; /* rank + 1 of the first rank that failed, -1, or 0 */
    char why[400];           /* its reason, written before gave_up */
    char id[NCCL_UNIQUE_ID_BYTES];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "atomics in shared memory");

size_t round64(size_t n) { return (n + 63) / 64 * 64; }
size_t slots_at() { return round64(sizeof(Header)); }
size_t data_at(int nranks) { return round64(slots_at() + (size_t)nranks * sizeof(Slot)); }
size_t segment_size(int nranks) { return data_at(nranks) + (size_t)nranks * chunk_bytes; }

std::string segment_name(const ncclUniqueId &id)
{
    std::string s = "/netc-emu-nccl-";
    for (size_t i = key_at; i < key_at + key_len; i++)
        s += format("%02x", (unsigned char)id.internal[i]);
    return s;
}

/* One process's communicator: what the ncclComm_t and the collectives it
 * enqueued share (a graph can replay one after the handle is gone). */
struct Comm {
    Header *h = nullptr;
    size_t len = 0;
    std::string name;
    int rank = 0, nranks = 0, device = 0;
    uint64_t barriers = 0;    /* this rank's, all ranks count the same */
    uint64_t collectives = 0; /* run so far */
    ncclResult_t async = ncclSuccess; /* a collective failed: broken */
    bool destroyed = false, aborted = false;

    Slot *slot(int r) const { return (Slot *)((char *)h + slots_at()) + r; }
    char *data(int r) const { return (char *)h + data_at(nranks) + (size_t)r * h->chunk; }
};

} /* namespace */

struct ncclComm {
    std::shared_ptr<Comm> c;
};

namespace {

void lock_segment(Header *h)
{
    if (pthread_mutex_lock(&h->mutex) == EOWNERDEAD) /* a rank died holding it */
        pthread_mutex_consistent(&h->mutex);
}

/* Unlinks the segment's name, once: the process that moves its state from
 * `from` to GONE does, so that a name is never unlinked under a newer
 * segment of the same id.  The processes that have it mapped keep it. */
void unlink_segment(Header *h, const std::string &name, uint32_t from)
{
    if (h->state.compare_exchange_strong(from, GONE))
        shm_unlink(name.c_str());
}

/* The segment's first rank that joined, did not leave, and no longer runs,
 * or -1. */
int dead_rank(const Header *h, const Comm &c)
{
    for (int r = 0; r < (int)h->nranks; r++) {
        const Slot *s = c.slot(r);
        const pid_t pid = s->pid.load();
        if (pid && !s->left.load() && !alive(pid))
            return r;
    }
    return -1;
}

/* Says that rank (-1: a process that could not join) gives up on the
 * communicator, unless one did already: the others fail at their next
 * barrier, with why, instead of waiting.  The caller holds the segment's
 * mutex. */
void publish(Header *h, int rank, const std::string &why)
{
    if (!h->gave_up.load()) {
        snprintf(h->why, sizeof h->why, "%s", why.c_str());
        h->gave_up.store(rank >= 0 ? rank + 1 : -1, std::memory_order_release);
    }
}

void give_up(Comm &c, const std::string &why)
{
    lock_segment(c.h);
    publish(c.h, c.rank, why);
    pthread_mutex_unlock(&c.h->mutex);
}

enum Look { USE, AGAIN, FAIL };

/* Joins c.h, mapped: USE, AGAIN (it is being made, is going, or was
 * stale: open the name again), or FAIL with *why. */
Look join_mapped(Comm &c, const ncclUniqueId &id, ncclResult_t *r, std::string *why)
{
    Header *h = c.h;
    uint32_t state = h->state.load(std::memory_order_acquire);
    if (state == MAKING) {
        const pid_t creator = h->creator.load();
        if (creator && !alive(creator))
            unlink_segment(h, c.name, MAKING);
        return AGAIN;
    }
    if (state == GONE)
        return AGAIN;
    if (memcmp(h->id, id.internal, sizeof h->id) || c.len < segment_size((int)h->nranks)) {
        *r = ncclSystemError;
        *why = format("the shared segment %s is not this communicator's", c.name.c_str());
        return FAIL;
    }
    lock_segment(h);
    Look look = USE;
    int dead = -1;
    bool going = false;
    for (int i = 0; i < (int)h->nranks; i++)
        going |= c.slot(i)->left.load() != 0;
    if (h->state.load() != READY) {
        look = AGAIN;
    } else if ((dead = dead_rank(h, c)) >= 0) {
        note("%s is stale (its rank %d, pid %d, died without leaving): removed", c.name.c_str(),
             dead, (int)c.slot(dead)->pid.load());
        unlink_segment(h, c.name, READY);
        look = AGAIN;
    } else if ((int)h->nranks != c.nranks) {
        *r = ncclInvalidArgument;
        *why = format("this rank was told %d ranks, the first to come (pid %d) %u ranks",
                      c.nranks, (int)h->creator.load(), h->nranks);
        publish(h, -1, format("pid %d, rank %d of %d: %s", (int)getpid(), c.rank, c.nranks,
                              why->c_str()));
        look = FAIL;
    } else if (going) { /* an earlier communicator of this id is going */
        look = AGAIN;
    } else if (const pid_t pid = c.slot(c.rank)->pid.load()) {
        *r = ncclInvalidUsage;
        *why = format("rank %d has joined already, as pid %d: two processes were given the "
                      "same rank", c.rank, (int)pid);
        publish(h, -1, format("pid %d, rank %d of %d: %s", (int)getpid(), c.rank, c.nranks,
                              why->c_str()));
        look = FAIL;
    } else {
        c.slot(c.rank)->pid.store(getpid());
        bool all = true;
        for (int i = 0; i < c.nranks; i++)
            all &= c.slot(i)->pid.load() != 0;
        if (all) /* nobody else needs the name: a crash from here on leaves nothing */
            unlink_segment(h, c.name, READY);
    }
    pthread_mutex_unlock(&h->mutex);
    return look;
}

/* Sets up a segment this process created. */
void make(Comm &c, const ncclUniqueId &id)
{
    Header *h = c.h;
    h->creator.store(getpid());
    h->nranks = (uint32_t)c.nranks;
    h->chunk = chunk_bytes;
    memcpy(h->id, id.internal, sizeof h->id);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&h->mutex, &a);
    pthread_mutexattr_destroy(&a);
    h->state.store(READY, std::memory_order_release);
}

/* Opens or creates id's segment and takes c.rank's slot in it, by deadline. */
ncclResult_t join(Comm &c, const ncclUniqueId &id, double deadline, std::string *why)
{
    c.name = segment_name(id);
    for (long wait = 20000;; wait = wait < 1000000 ? 2 * wait : wait) {
        if (now() > deadline) {
            *why = format("the shared segment %s stayed unusable (being made, or an earlier "
                          "communicator of this id going) for %g s (NETC_EMU_NCCL_TIMEOUT)",
                          c.name.c_str(), timeout());
            return ncclSystemError;
        }
        bool made = true;
        int fd = shm_open(c.name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 && errno == EEXIST) {
            made = false;
            fd = shm_open(c.name.c_str(), O_RDWR, 0);
            if (fd < 0 && errno == ENOENT) /* gone meanwhile */
                continue;
        }
        if (fd < 0) {
            *why = format("shm_open(%s): %s", c.name.c_str(), strerror(errno));
            return ncclSystemError;
        }
        struct stat st;
        if (made && ftruncate(fd, (off_t)segment_size(c.nranks)) != 0) {
            *why = format("a shared segment of %zu bytes: %s", segment_size(c.nranks),
                          strerror(errno));
            close(fd);
            shm_unlink(c.name.c_str());
            return ncclSystemError;
        }
        if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(Header)) { /* being made */
            close(fd);
            pause_ns(wait);
            continue;
        }
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            *why = format("mmap of %s: %s", c.name.c_str(), strerror(errno));
            return ncclSystemError;
        }
        c.h = (Header *)p;
        c.len = (size_t)st.st_size;
        if (made)
            make(c, id);
        ncclResult_t r = ncclSuccess;
        const Look look = join_mapped(c, id, &r, why);
        if (look == USE)
            return ncclSuccess;
        munmap(c.h, c.len);
        c.h = nullptr;
        if (look == FAIL)
            return r;
        pause_ns(wait);
    }
}

/* Leaves the segment; if it still has its name (not every rank came), the
 * last to leave (every other rank left, died or never came) unlinks it. */
void leave(Comm &c)
{
    Header *h = c.h;
    lock_segment(h);
    c.slot(c.rank)->left.store(1);
    bool last = true;
    for (int r = 0; r < c.nranks; r++) {
        const Slot *s = c.slot(r);
        const pid_t pid = s->pid.load();
        last &= !pid || s->left.load() || !alive(pid);
    }
    if (last)
        unlink_segment(h, c.name, READY);
    pthread_mutex_unlock(&h->mutex);
    munmap(h, c.len);
    c.h = nullptr;
}

/* "rank 2", "ranks 1, 2" */
std::string rank_list(const std::vector<int> &ranks)
{
    std::string s = ranks.size() > 1 ? "ranks " : "rank ";
    for (size_t i = 0; i < ranks.size(); i++)
        s += format("%s%d", i ? ", " : "", ranks[i]);
    return s;
}

/* Comes to the communicator's next barrier and waits, until deadline, for
 * every rank to come to it: 0, or -1 with *why (the ranks that did not
 * come, and hint; a rank that left or exited first; a rank that gave up). */
int barrier(Comm &c, double deadline, const char *hint, std::string *why)
{
    const uint64_t k = ++c.barriers;
    Header *h = c.h;
    c.slot(c.rank)->reached.store(k, std::memory_order_release);
    const double start = now();
    double check_pids = start + 0.1;
    for (long wait = 1000;; wait = wait < 1000000 ? 2 * wait : wait) {
        std::vector<int> missing;
        for (int r = 0; r < c.nranks; r++)
            if (c.slot(r)->reached.load(std::memory_order_acquire) < k)
                missing.push_back(r);
        if (missing.empty())
            return 0;
        if (const int g = h->gave_up.load(std::memory_order_acquire)) {
            *why = g > 0 ? format("rank %d gave up on the communicator: %s", g - 1, h->why)
                         : format("a process could not join the communicator: %s", h->why);
            return -1;
        }
        for (int r : missing)
            if (c.slot(r)->left.load()) {
                *why = format("rank %d left the communicator (ncclCommDestroy or "
                              "ncclCommAbort) before coming here", r);
                return -1;
            }
        const double t = now();
        if (t >= check_pids) {
            check_pids = t + 0.1;
            for (int r : missing) {
                const pid_t pid = c.slot(r)->pid.load();
                if (pid && !alive(pid)) {
                    *why = format("rank %d (pid %d) exited", r, (int)pid);
                    return -1;
                }
            }
        }
        if (t >= deadline) {
            *why = format("%s never came in %g s (NETC_EMU_NCCL_TIMEOUT%s)",
                          rank_list(missing).c_str(), timeout(), hint);
            return -1;
        }
        pause_ns(wait);
    }
}

/* ---------------------------------------------------------- collectives */

size_t type_size(uint32_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0; /* halves, bfloat16, fp8: not emulated */
    }
}

const char *type_name(uint32_t t)
{
    static const char *const names[] = {"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32",
                                        "ncclInt64", "ncclUint64", "ncclFloat16", "ncclFloat32",
                                        "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3",
                                        "ncclFloat8e5m2"};
    return t < sizeof names / sizeof *names ? names[t] : "an unknown type";
}

const char *op_name(uint32_t op)
{
    static const char *const names[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
    return op < sizeof names / sizeof *names ? names[op] : "a ncclRedOpCreatePreMulSum op";
}

/* "ncclAllReduce of 10 ncclFloat32 (ncclSum)" */
std::string describe(const Desc &d)
{
    if (d.coll == ALL_REDUCE)
        return format("ncclAllReduce of %llu %s (%s)", (unsigned long long)d.count,
                      type_name(d.type), op_name(d.op));
    return format("ncclBroadcast of %llu %s from rank %d", (unsigned long long)d.count,
                  type_name(d.type), d.root);
}

/* out[i] = in[0][i] + in[1][i] + ..., in that order, added as Add (an
 * integer's unsigned type: integers wrap). */
template <typename T, typename Add> void sum(void *out, char *const *in, int n, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        Add acc = (Add)((const T *)in[0])[i];
        for (int r = 1; r < n; r++)
            acc = (Add)(acc + (Add)((const T *)in[r])[i]);
        ((T *)out)[i] = (T)acc;
    }
}

void sum(uint32_t type, void *out, char *const *in, int n, size_t count)
{
    switch (type) {
    case ncclInt8: sum<int8_t, uint8_t>(out, in, n, count); break;
    case ncclUint8: sum<uint8_t, uint8_t>(out, in, n, count); break;
    case ncclInt32: sum<int32_t, uint32_t>(out, in, n, count); break;
    case ncclUint32: sum<uint32_t, uint32_t>(out, in, n, count); break;
    case ncclInt64: sum<int64_t, uint64_t>(out, in, n, count); break;
    case ncclUint64: sum<uint64_t, uint64_t>(out, in, n, count); break;
    case ncclFloat32: sum<float, float>(out, in, n, count); break;
    case ncclFloat64: sum<double, double>(out, in, n, count); break;
    }
}

/* Runs a collective with the other ranks: 0, or -1 with *why. */
int run(Comm &c, Desc d, const void *send, void *recv, std::string *why)
{
    const char *hint = "; on the emulated device a rank comes to a collective only when it "
                       "waits for the collective's stream";
    d.seq = ++c.collectives;
    c.slot(c.rank)->desc = d;
    if (barrier(c, now() + timeout(), hint, why))
        return -1;
    for (int r = 0; r < c.nranks; r++) {
        const Desc &o = c.slot(r)->desc;
        if (memcmp(&o, &d, sizeof d)) {
            *why = format("rank %d calls %s as its collective %llu", r, describe(o).c_str(),
                          (unsigned long long)o.seq);
            return -1;
        }
    }
    std::vector<char *> in((size_t)c.nranks);
    for (int r = 0; r < c.nranks; r++)
        in[(size_t)r] = c.data(r);
    const size_t es = type_size(d.type), bytes = d.count * es, chunk = c.h->chunk;
    for (size_t off = 0; off < bytes; off += chunk) {
        const size_t n = bytes - off < chunk ? bytes - off : chunk;
        if (d.coll == ALL_REDUCE || c.rank == d.root)
            memcpy(c.data(c.rank), (const char *)send + off, n);
        if (barrier(c, now() + timeout(), hint, why))
            return -1;
        if (d.coll == ALL_REDUCE)
            sum(d.type, (char *)recv + off, in.data(), c.nranks, n / es);
        else
            memcpy((char *)recv + off, c.data(d.root), n);
        if (barrier(c, now() + timeout(), hint, why)) /* the chunks read: reusable */
            return -1;
    }
    return 0;
}

/* The stream work of a collective. */
void run_op(const std::shared_ptr<Comm> &c, const Desc &d, const void *send, void *recv)
{
    if (c->aborted) {
        note("%s skipped: its communicator was aborted", describe(d).c_str());
        return;
    }
    if (c->destroyed) {
        error(ncclInvalidUsage, "%s replayed by a graph after its communicator was destroyed",
              describe(d).c_str());
        lose_context();
        return;
    }
    std::string why;
    if (run(*c, d, send, recv, &why) == 0)
        return;
    give_up(*c, why);
    c->async = ncclRemoteError;
    error(ncclRemoteError, "%s, collective %llu of the communicator, on rank %d of %d: %s",
          describe(d).c_str(), (unsigned long long)c->collectives, c->rank,
          c->nranks, why.c_str());
    lose_context();
}

/* Checks a buffer of a collective: device memory of this process's
 * emulated GPU, bytes long. */
bool device_buffer(const char *call, const char *what, const void *p, size_t bytes)
{
    size_t left = 0;
    const Kind k = kind_of(p, &left);
    if (k != DEVICE) {
        error(ncclInvalidArgument, "%s: %s %p is %s", call, what, p,
              k == PINNED ? "pinned host memory, not device memory"
                          : "not device memory of this process's emulated GPU");
        return false;
    }
    if (bytes > left) {
        error(ncclInvalidArgument, "%s: %s %p has %zu bytes of its allocation left, not the "
              "%zu the count needs", call, what, p, left, bytes);
        return false;
    }
    return true;
}

/* Checks a collective's arguments and enqueues it on stream. */
ncclResult_t collective(const char *call, Desc d, const void *send, void *recv, ncclComm_t comm,
                        cudaStream_t stream)
{
    if (!comm)
        return error(ncclInvalidArgument, "%s: comm is NULL", call);
    const std::shared_ptr<Comm> &c = comm->c;
    if (c->async != ncclSuccess)
        return error(c->async, "%s: a collective of this communicator failed "
                     "(ncclCommGetAsyncError): abort it", call);
    const size_t es = type_size(d.type);
    if (!es)
        return error(ncclInvalidArgument, "%s: datatype %u (%s) is not emulated (integers, "
                     "ncclFloat32 and ncclFloat64 are)", call, d.type, type_name(d.type));
    if (d.coll == ALL_REDUCE && d.op != ncclSum)
        return error(ncclInvalidArgument, "%s: op %u (%s): the emulated NCCL sums only "
                     "(ncclSum)", call, d.op, op_name(d.op));
    if (d.coll == BROADCAST && (d.root < 0 || d.root >= c->nranks))
        return error(ncclInvalidArgument, "%s: root %d of %d ranks", call, d.root, c->nranks);
    if (d.count == 0)
        return ncclSuccess;
    if (d.count > SIZE_MAX / es)
        return error(ncclInvalidArgument, "%s: count %llu is too large", call,
                     (unsigned long long)d.count);
    const size_t bytes = d.count * es;
    const bool sends = d.coll == ALL_REDUCE || c->rank == d.root;
    if ((sends && !device_buffer(call, "sendbuff", send, bytes)) ||
        !device_buffer(call, "recvbuff", recv, bytes))
        return ncclInvalidArgument;
    const char *s = (const char *)send, *r = (const char *)recv;
    if (sends && s != r && s < r + bytes && r < s + bytes)
        return error(ncclInvalidArgument, "%s: sendbuff %p and recvbuff %p overlap (in place "
                     "is sendbuff == recvbuff)", call, send, recv);
    enqueue_op(stream, [c, d, send, recv]() { run_op(c, d, send, recv); });
    return ncclSuccess;
}

thread_local int group_depth;

} /* namespace */

/* ------------------------------------------------------------ the API */

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_error;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return error(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    memset(id, 0, sizeof *id);
    memcpy(id->internal, id_magic, sizeof id_magic);
    char *key = id->internal + key_at;
    if (getrandom(key, 16, 0) != 16)
        return error(ncclSystemError, "ncclGetUniqueId: getrandom: %s", strerror(errno));
    const int32_t pid = (int32_t)getpid();
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    const uint64_t ns = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
    memcpy(key + 16, &pid, sizeof pid);
    memcpy(key + 20, &ns, sizeof ns);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm)
        return error(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *comm = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return error(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d ranks", rank, nranks);
    if (memcmp(id.internal, id_magic, sizeof id_magic))
        return error(ncclInvalidArgument, "ncclCommInitRank (rank %d of %d): the id was not "
                     "made by ncclGetUniqueId (not sent to this rank yet?)", rank, nranks);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
        return error(ncclUnhandledCudaError, "ncclCommInitRank (rank %d of %d): no CUDA device",
                     rank, nranks);
    auto c = std::make_shared<Comm>();
    c->rank = rank;
    c->nranks = nranks;
    cudaGetDevice(&c->device);
    const double deadline = now() + timeout();
    std::string why;
    ncclResult_t r = join(*c, id, deadline, &why);
    if (r != ncclSuccess)
        return error(r, "ncclCommInitRank (rank %d of %d): %s", rank, nranks, why.c_str());
    if (barrier(*c, deadline, "", &why)) {
        give_up(*c, why);
        leave(*c);
        return error(ncclRemoteError, "ncclCommInitRank (rank %d of %d): %s", rank, nranks,
                     why.c_str());
    }
    *comm = new ncclComm{c};
    emu::run_eagerly(); /* the peers' collectives progress as on GPUs */
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    if (!comm)
        return error(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    synchronize(); /* its collectives, enqueued and not yet run */
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) /* as NCCL 2.28 does */
        return ncclSuccess;
    synchronize();
    Comm &c = *comm->c;
    leave(c);
    c.destroyed = true;
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    Comm &c = *comm->c;
    give_up(c, format("rank %d aborted its communicator", c.rank));
    leave(c);
    c.aborted = true;
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    if (!comm || !async)
        return error(ncclInvalidArgument, "ncclCommGetAsyncError: %s is NULL",
                     comm ? "asyncError" : "comm");
    *async = comm->c->async;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count)
        return error(ncclInvalidArgument, "ncclCommCount: %s is NULL", comm ? "count" : "comm");
    *count = comm->c->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!comm || !device)
        return error(ncclInvalidArgument, "ncclCommCuDevice: %s is NULL",
                     comm ? "device" : "comm");
    *device = comm->c->device;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank)
        return error(ncclInvalidArgument, "ncclCommUserRank: %s is NULL", comm ? "rank" : "comm");
    *rank = comm->c->rank;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    const Desc d = {0, count, ALL_REDUCE, (uint32_t)datatype, (uint32_t)op, 0};
    return collective("ncclAllReduce", d, sendbuff, recvbuff, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    const Desc d = {0, count, BROADCAST, (uint32_t)datatype, 0, root};
    return collective("ncclBroadcast", d, sendbuff, recvbuff, comm, stream);
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream)
{
    const Desc d = {0, count, BROADCAST, (uint32_t)datatype, 0, root};
    return collective("ncclBcast", d, buff, buff, comm, stream);
}

/* Collectives are enqueued as they are called, so a group only nests. */
ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0)
        return error(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    group_depth--;
    return ncclSuccess;
}

} /* extern "C" */
