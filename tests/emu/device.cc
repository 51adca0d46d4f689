/*
 * device.cc — the emulated device's CUDA threads: every thread of a block
 * is a fiber with a stack of its own, and the block's threads run in turns
 * on one host thread, switching only where CUDA threads wait for each
 * other (__syncthreads, warp shuffles and votes).  Between two such points
 * the threads run one after the other in an order that is shuffled anew
 * each time (NETC_EMU_ORDER=shuffle, the default; or forward, reverse), so
 * a missing barrier or a race between threads changes the result.  A
 * barrier some threads never reach, threads waiting at different
 * barriers, or a shuffle waiting for a lane that returned is reported with
 * the kernel, the block, the thread and the source line.
 *
 * Blocks run one at a time, in the same kind of order; each starts with
 * every __shared__ array filled with NaN bytes.
 */
#include "impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>

struct netc_emu_thread *netc_emu_cur;

namespace emu {

std::recursive_mutex &lock()
{
    static std::recursive_mutex m;
    return m;
}

static void report(const char *prefix, const char *fmt, va_list ap)
{
    fputs(prefix, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report("netc-emu: ", fmt, ap);
    va_end(ap);
}

void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report("netc-emu: error: ", fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------- ordering */

void order(std::vector<unsigned> &idx)
{
    static int mode = -1;
    static std::mt19937_64 rng;
    if (mode < 0) {
        const char *m = getenv("NETC_EMU_ORDER");
        mode = !m || !*m || !strcmp(m, "shuffle") ? 2 : !strcmp(m, "reverse") ? 1 : 0;
        if (m && *m && strcmp(m, "shuffle") && strcmp(m, "reverse") && strcmp(m, "forward"))
            note("NETC_EMU_ORDER=%s: not shuffle, forward or reverse; forward it is", m);
        const char *s = getenv("NETC_EMU_SEED");
        rng.seed(s ? strtoull(s, NULL, 10) : 1);
    }
    for (unsigned i = 0; i < idx.size(); i++)
        idx[i] = i;
    if (mode == 1)
        std::reverse(idx.begin(), idx.end());
    else if (mode == 2)
        std::shuffle(idx.begin(), idx.end(), rng);
}

/* ------------------------------------------------------------- registry */

static std::map<const void *, Kernel *> &by_fn()
{
    static std::map<const void *, Kernel *> m;
    return m;
}
static std::vector<Kernel *> &all_kernels()
{
    static std::vector<Kernel *> v;
    return v;
}
static const void *loading;

void set_loading(const void *lib) { loading = lib; }

const Kernel *kernel_by_fn(const void *fn)
{
    auto it = by_fn().find(fn);
    return it == by_fn().end() ? nullptr : it->second;
}

const Kernel *kernel_record(const void *handle)
{
    for (const Kernel *k : all_kernels())
        if (k == handle)
            return k;
    return nullptr;
}

void forget(const void *lib)
{
    auto &v = all_kernels();
    for (size_t i = 0; i < v.size();)
        if (v[i]->lib == lib) {
            by_fn().erase(v[i]->fn);
            delete v[i];
            v.erase(v.begin() + (long)i);
        } else {
            i++;
        }
}

std::vector<const Kernel *> kernels_of(const void *lib)
{
    std::vector<const Kernel *> v;
    for (const Kernel *k : all_kernels())
        if (k->lib == lib)
            v.push_back(k);
    return v;
}

static Kernel *make_kernel(const char *name, void *fn, netc_emu_trampoline call, int n,
                           const size_t *size, const size_t *align,
                           const unsigned char *is_pointer, int max_threads)
{
    Kernel *k = new Kernel{name, fn, call, std::vector<size_t>(size, size + n),
                           std::vector<size_t>(align, align + n),
                           std::vector<unsigned char>(is_pointer, is_pointer + n), max_threads,
                           loading};
    all_kernels().push_back(k);
    by_fn()[fn] = k;
    return k;
}

/* ------------------------------------------------------- shared memory */

static std::vector<std::pair<char *, char *>> &shared_ranges()
{
    static std::vector<std::pair<char *, char *>> v;
    return v;
}

/* ---------------------------------------------------------------- fibers */

enum { STACK = 256 << 10, MAX_THREADS = 1024 };

#if defined(__x86_64__)
/* switch(from, to): saves the callee-saved registers, the SSE and x87
 * control words and the stack pointer in *from, and resumes to. */
extern "C" void netc_emu_switch(void **from, void *to);
extern "C" void netc_emu_start(void);
asm(".text\n"
    ".globl netc_emu_switch\n"
    ".hidden netc_emu_switch\n"
    ".type netc_emu_switch,@function\n"
    "netc_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size netc_emu_switch,.-netc_emu_switch\n"
    ".globl netc_emu_start\n"
    ".hidden netc_emu_start\n"
    ".type netc_emu_start,@function\n"
    "netc_emu_start:\n"
    "  movq %r12, %rdi\n  callq *%r13\n  ud2\n"
    ".size netc_emu_start,.-netc_emu_start\n");
#else
#error "the emulated device's fibers are written for x86-64"
#endif

enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

struct Thread {
    netc_emu_thread pub;
    void *sp;
    char *stack;
    State state;
    unsigned lin; /* linear index in the block */
    const char *file;
    int line;
    unsigned xgen; /* warp exchanges done */
};

struct Warp {
    unsigned arrived[2], read[2], mask[2];
    const char *file[2];
    int line[2];
    /* a lane's bytes: a shuffle's value, an mma's fragments */
    alignas(16) unsigned char buf[2][32][NETC_EMU_WARP_BYTES];
};

/* One block under way. */
struct Block {
    const Launch *l;
    std::vector<Thread> t;
    std::vector<Warp> w;
    void *sched_sp;
    Thread *cur;
    std::string error;
};

static Block *blk;

static void yield(void)
{
    Thread *t = blk->cur;
    netc_emu_switch(&t->sp, blk->sched_sp);
}

static void thread_main(Thread *t)
{
    netc_emu_cur = &t->pub;
    const Launch &l = *blk->l;
    void *args[64];
    for (size_t i = 0; i < l.offset.size(); i++)
        args[i] = (void *)(l.params.data() + l.offset[i]);
    l.k->call(l.k->fn, args);
    t->state = DONE;
    yield();
}

static char *stacks[MAX_THREADS];

static void start_fiber(Thread *t)
{
    if (!stacks[t->lin]) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        char *m = (char *)mmap(NULL, STACK + page, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fail("cannot map a stack for a CUDA thread");
            abort();
        }
        mprotect(m, page, PROT_NONE); /* a guard below the stack */
        stacks[t->lin] = m + page;
    }
    char *top = stacks[t->lin] + STACK;
    uint64_t *sp = (uint64_t *)(top - 64);
    /* what netc_emu_switch pops: control words, r15..rbp, return address */
    sp[0] = 0x1f80 | (uint64_t)0x037f << 32;
    sp[1] = 0;                           /* r15 */
    sp[2] = 0;                           /* r14 */
    sp[3] = (uint64_t)(void *)thread_main; /* r13: the function */
    sp[4] = (uint64_t)t;                 /* r12: its argument */
    sp[5] = 0;                           /* rbx */
    sp[6] = 0;                           /* rbp */
    sp[7] = (uint64_t)(void *)netc_emu_start;
    t->sp = sp;
}

static std::string where(const Block &b, const Thread &t)
{
    char s[160];
    snprintf(s, sizeof s, "block (%u,%u,%u) thread (%u,%u,%u)", t.pub.bid.x, t.pub.bid.y,
             t.pub.bid.z, t.pub.tid.x, t.pub.tid.y, t.pub.tid.z);
    (void)b;
    return s;
}

static void block_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void block_error(const char *fmt, ...)
{
    if (!blk->error.empty())
        return;
    char s[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    blk->error = s;
}

std::string running(void)
{
    if (!blk || !blk->cur)
        return "";
    return "kernel " + blk->l->k->name + ", " + where(*blk, *blk->cur);
}

} /* namespace emu */

using namespace emu;

extern "C" void netc_emu_syncthreads(const char *file, int line)
{
    Thread *t = blk->cur;
    t->state = AT_BARRIER;
    t->file = file;
    t->line = line;
    yield();
}

extern "C" const unsigned char *netc_emu_warp_exchange(unsigned mask, const void *mine,
                                                       size_t size, const char *file, int line)
{
    Thread *t = blk->cur;
    const unsigned lane = t->lin & 31;
    Warp &w = blk->w[t->lin / 32];
    const unsigned p = t->xgen & 1;
    if (!(mask >> lane & 1) || size > sizeof w.buf[p][lane]) {
        if (size > sizeof w.buf[p][lane])
            block_error("%s: a warp operation at %s:%d moving %zu bytes a lane, more than the "
                        "emulator's %zu", where(*blk, *t).c_str(), file, line, size,
                        sizeof w.buf[p][lane]);
        else
            block_error("%s: a warp operation at %s:%d with mask 0x%08x, which leaves out the "
                        "calling lane %u", where(*blk, *t).c_str(), file, line, mask, lane);
        t->state = DONE;
        yield();
    }
    if (w.arrived[p] && (w.mask[p] != mask || w.line[p] != line || strcmp(w.file[p], file)))
        block_error("%s: lanes of warp %u meet at different warp operations: %s:%d mask "
                    "0x%08x and %s:%d mask 0x%08x", where(*blk, *t).c_str(), t->lin / 32,
                    w.file[p], w.line[p], w.mask[p], file, line, mask);
    w.mask[p] = mask;
    w.file[p] = file;
    w.line[p] = line;
    memcpy(w.buf[p][lane], mine, size);
    w.arrived[p] |= 1u << lane;
    t->state = AT_WARP;
    t->file = file;
    t->line = line;
    yield();
    t->xgen++;
    w.read[p] |= 1u << lane;
    if (w.read[p] == w.arrived[p])
        w.arrived[p] = w.read[p] = 0;
    /* no lane writes buffer p again before this one has come to its next
     * warp operation (buffer p ^ 1), where every lane meets it */
    return w.buf[p][0];
}

extern "C" void netc_emu_register(const char *name, void *fn, netc_emu_trampoline call,
                                  int nparams, const size_t *size, const size_t *align,
                                  const unsigned char *is_pointer, int max_threads)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    make_kernel(name, fn, call, nparams, size, align, is_pointer, max_threads);
}

extern "C" void netc_emu_add_shared(char *begin, char *end)
{
    std::lock_guard<std::recursive_mutex> g(lock());
    for (auto &r : shared_ranges())
        if (r.first == begin)
            return;
    if (end > begin)
        shared_ranges().push_back({begin, end});
}

extern "C" int netc_emu_shared_ok(const void *p, size_t size, size_t align, const char *what,
                                  const char *file, int line)
{
    const char *c = (const char *)p;
    bool in = false;
    for (auto &r : shared_ranges())
        in = in || (c >= r.first && c + size <= r.second);
    if (in && (uintptr_t)c % align == 0)
        return 1;
    if (in)
        block_error("%s: %s at %s:%d of %zu bytes at %p, not %zu-byte aligned",
                    where(*blk, *blk->cur).c_str(), what, file, line, size, p, align);
    else
        block_error("%s: %s at %s:%d of %zu bytes at %p, not in the block's shared memory",
                    where(*blk, *blk->cur).c_str(), what, file, line, size, p);
    return 0;
}

namespace emu {

cudaError_t make_launch(const Kernel *k, dim3 grid, dim3 block, void **args, size_t shared,
                        Launch *out)
{
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!threads || !grid.x || !grid.y || !grid.z) {
        fail("%s launched with a zero dimension: grid (%u,%u,%u), block (%u,%u,%u)",
             k->name.c_str(), grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return cudaErrorInvalidConfiguration;
    }
    if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        fail("%s launched with grid (%u,%u,%u), block (%u,%u,%u): beyond the hardware's "
             "limits (1024 threads a block; block 1024 x 1024 x 64; grid 2^31-1 x 65535 x 65535)",
             k->name.c_str(), grid.x, grid.y, grid.z, block.x, block.y, block.z);
        return cudaErrorInvalidConfiguration;
    }
    if (k->max_threads > 0 && threads > (unsigned long long)k->max_threads) {
        fail("%s launched with %llu threads a block, more than its __launch_bounds__(%d)",
             k->name.c_str(), threads, k->max_threads);
        return cudaErrorLaunchOutOfResources;
    }
    if (shared > 0) {
        fail("%s launched with %zu bytes of dynamic shared memory, which the emulated device "
             "does not have", k->name.c_str(), shared);
        return cudaErrorInvalidValue;
    }
    Launch l{k, grid, block, {}, {}};
    size_t at = 0;
    for (size_t i = 0; i < k->size.size(); i++) {
        at = (at + k->align[i] - 1) / k->align[i] * k->align[i];
        l.offset.push_back(at);
        at += k->size[i];
    }
    l.params.resize(at + 16);
    for (size_t i = 0; i < k->size.size(); i++) {
        memcpy(l.params.data() + l.offset[i], args[i], k->size[i]);
        if (k->is_pointer[i]) {
            void *p;
            memcpy(&p, args[i], sizeof p);
            if (p && kind_of(p, NULL) == NONE) {
                fail("%s: argument %zu is %p, which is neither device memory nor pinned host "
                     "memory", k->name.c_str(), i + 1, p);
                return cudaErrorInvalidValue;
            }
        }
    }
    *out = std::move(l);
    return cudaSuccess;
}

static int run_block(Block &b, uint3 bid)
{
    const Launch &l = *b.l;
    for (auto &r : shared_ranges())
        memset(r.first, 0xff, (size_t)(r.second - r.first));
    const unsigned n = (unsigned)b.t.size();
    for (unsigned i = 0; i < n; i++) {
        Thread &t = b.t[i];
        t.pub.tid = {i % l.block.x, i / l.block.x % l.block.y, i / (l.block.x * l.block.y)};
        t.pub.bid = bid;
        t.pub.bdim = l.block;
        t.pub.gdim = l.grid;
        t.state = RUNNABLE;
        t.lin = i;
        t.xgen = 0;
        start_fiber(&t);
    }
    for (Warp &w : b.w)
        memset(&w, 0, sizeof w);
    std::vector<unsigned> idx(n);
    for (;;) {
        order(idx);
        for (unsigned i : idx) {
            Thread &t = b.t[i];
            if (t.state != RUNNABLE)
                continue;
            b.cur = &t;
            netc_emu_cur = &t.pub;
            netc_emu_switch(&b.sched_sp, t.sp);
        }
        if (!b.error.empty())
            return -1;
        /* warp exchanges every lane of whose mask has reached */
        int released = 0;
        for (unsigned i = 0; i < n; i++) {
            Thread &t = b.t[i];
            if (t.state != AT_WARP)
                continue;
            const Warp &w = b.w[i / 32];
            const unsigned p = t.xgen & 1;
            if ((w.arrived[p] & w.mask[p]) == w.mask[p]) {
                t.state = RUNNABLE;
                released++;
            }
        }
        if (released)
            continue;
        unsigned done = 0, barrier = 0;
        const Thread *first = nullptr, *waiting = nullptr, *exited = nullptr;
        for (const Thread &t : b.t) {
            done += t.state == DONE;
            if (t.state == DONE && !exited)
                exited = &t;
            if (t.state == AT_BARRIER) {
                barrier++;
                if (!first)
                    first = &t;
                else if (t.line != first->line || strcmp(t.file, first->file)) {
                    block_error("%s waits at __syncthreads at %s:%d while %s waits at the one "
                                "at %s:%d: a barrier in divergent code",
                                where(b, *first).c_str(), first->file, first->line,
                                where(b, t).c_str(), t.file, t.line);
                    return -1;
                }
            }
            if (t.state == AT_WARP && !waiting)
                waiting = &t;
        }
        if (done == n)
            return 0;
        if (barrier == n) {
            for (Thread &t : b.t)
                t.state = RUNNABLE;
            continue;
        }
        if (waiting) {
            const Warp &w = b.w[waiting->lin / 32];
            const unsigned p = waiting->xgen & 1;
            block_error("deadlock: %s waits at the warp operation at %s:%d for lanes 0x%08x of "
                        "its warp, which %s", where(b, *waiting).c_str(), waiting->file,
                        waiting->line, w.mask[p] & ~w.arrived[p],
                        barrier ? "wait at a __syncthreads" : "have returned");
            return -1;
        }
        block_error("%s returned while %u threads wait at the __syncthreads at %s:%d: a "
                    "barrier not every thread reaches", where(b, *exited).c_str(), barrier,
                    first->file, first->line);
        return -1;
    }
}

int run_launch(const Launch &l)
{
    const unsigned n = l.block.x * l.block.y * l.block.z;
    Block b;
    b.l = &l;
    b.t.resize(n);
    b.w.resize((n + 31) / 32);
    Block *outer = blk;
    blk = &b;
    netc_emu_thread *outer_cur = netc_emu_cur;
    const unsigned long long blocks = (unsigned long long)l.grid.x * l.grid.y * l.grid.z;
    std::vector<unsigned> idx(blocks < (1u << 20) ? (size_t)blocks : 0);
    if (!idx.empty())
        order(idx);
    int rc = 0;
    for (unsigned long long i = 0; i < blocks && rc == 0; i++) {
        const unsigned long long j = idx.empty() ? i : idx[(size_t)i];
        uint3 bid = {(unsigned)(j % l.grid.x), (unsigned)(j / l.grid.x % l.grid.y),
                     (unsigned)(j / ((unsigned long long)l.grid.x * l.grid.y))};
        rc = run_block(b, bid);
    }
    if (rc)
        fail("kernel %s: %s", l.k->name.c_str(), b.error.c_str());
    blk = outer;
    netc_emu_cur = outer_cur;
    return rc;
}

} /* namespace emu */
