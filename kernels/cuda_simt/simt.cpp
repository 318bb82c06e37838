/* simt.cpp — the scheduler, barriers, warp collectives, cp.async, ldmatrix and mma of the SIMT
 * emulator (simt.h has the model), and the few CUDA runtime calls the kernel files make on the
 * host (cudaFuncSetAttribute, cudaGetLastError, cudaGetErrorString), so the test links no CUDA
 * library and runs without a GPU or driver. x86-64 Linux: a fiber switch is a few instructions
 * (tcu_simt_switch below), not swapcontext's signal-mask system call per switch.
 */
#include "simt.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#if !defined(__x86_64__)
#error "the SIMT emulator's fiber switch is written for x86-64"
#endif

/* tcu_simt_switch(save, load): saves the callee-saved registers, the x87 control word and MXCSR
 * on the current stack and its stack pointer in *save, then continues on the stack `load` (made
 * by an earlier switch, or by fiber_stack_init). */
extern "C" void tcu_simt_switch(void **save, void *load);
asm(R"(
    .pushsection .text
    .globl tcu_simt_switch
    .type tcu_simt_switch, @function
tcu_simt_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size tcu_simt_switch, .-tcu_simt_switch
    .popsection
)");

namespace tcu_simt {

thread_local uint3 g_thread_idx, g_block_idx;
thread_local dim3 g_block_dim, g_grid_dim;

namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096; /* below each stack and after dynamic shared memory */
constexpr int kMaxThreads = 1024;

enum State { RUNNABLE, WAIT_BLOCK, WAIT_WARP, WAIT_GROUP, DONE };

struct CpAsync {
    void *dst;
    const void *src;
    int bytes, src_bytes;
    long group; /* -1: not committed yet */
};

struct Fiber {
    void *sp = nullptr;
    unsigned char *stack = nullptr; /* kStackBytes above a PROT_NONE guard page */
    ~Fiber(); /* at the OS thread's end: the stack goes back to the pool */
    uint3 tid;
    int linear = 0;
    State state = DONE;
    const char *waiting_at = "";
    unsigned long warp_gen = 0;  /* the warp barrier generation this lane arrived in */
    unsigned long block_gen = 0; /* the block barrier generation this thread arrived in */
    std::vector<CpAsync> pending;
    long committed = 0; /* cp.async groups committed */
    bool wg_fenced = false; /* a wgmma_fence since this thread's last wgmma commit or wait */
    bool proxy_fenced = false; /* a fence_proxy_async since the block's last publication */
};

struct Warp {
    int lanes = 0;          /* threads of the block in this warp */
    int live = 0;           /* of them, not exited */
    int arrived = 0;        /* at the current collective */
    unsigned long gen = 0;  /* collectives completed */
    const char *what = nullptr;
    unsigned char slot[2][32][kSlotBytes];
};

/* one wgmma.mma_async of a warpgroup, from its issue to the wgmma_wait that completes it */
struct WgOp {
    int n = 0;
    bool scale_d = false, trans_b = false, a_regs = false;
    uint64_t da = 0, db = 0;
    float *d[128];
    const uint32_t *a[128];
    uint32_t a_copy[128][4]; /* the A registers at the issue: they may not change until the wait */
    std::vector<uint16_t> smem; /* the shared-memory elements it reads (A from memory, then B), at
                                   the issue: they may not change until the wait either */
    long group = -1;         /* -1: not committed yet */
};

/* a warpgroup: 4 consecutive warps, the wgmma collectives' unit */
struct Group {
    int arrived = 0;
    const char *what = nullptr;
    /* what each thread brought to the collective in progress */
    float *d[128];
    const uint32_t *a[128];
    uint64_t da[128], db[128];
    int n[128], arg[128];
    bool scale_d[128], trans_b[128];
    /* the products in flight, in issue order, and each accumulator's value meanwhile (the
     * thread's own registers hold NaN from the issue to the wait) */
    std::vector<WgOp> ops;
    long committed = 0;
    std::unordered_map<float *, std::vector<float>> shadow;
};

struct BlockState {
    int nthreads = 0, live = 0, arrived = 0;
    unsigned long gen = 0;
    int acc[2] = {0, 0}; /* the predicate reduction of generation g at acc[g & 1] */
    int result[2] = {0, 0};
    int kind = 0;
    bool last_warp_first = false; /* the warp order of switch_away: odd blocks from the last warp */
    int proxy_fenced = 0;   /* live threads with a fence_proxy_async since the last publication */
    bool view_poison = true; /* async_view not yet published: the block's 0xff fill */
    unsigned long pub_gen = ~0ul; /* the barrier generation (gen) of the last publication */
};

[[noreturn]] void die(const char *fmt, ...);

/* Fiber stacks (each above its guard page), kept for the next launch's worker threads: a
 * launch's OS threads are new each time, and mapping their stacks anew costs more than the
 * blocks of a small kernel. At most the stacks of as many OS threads as ran at once. */
std::mutex stack_pool_mutex;
std::vector<unsigned char *> stack_pool;

unsigned char *stack_get() {
    {
        std::lock_guard<std::mutex> lock(stack_pool_mutex);
        if (!stack_pool.empty()) {
            unsigned char *s = stack_pool.back();
            stack_pool.pop_back();
            return s;
        }
    }
    void *m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) die("cannot map a %zu-byte fiber stack", kStackBytes);
    if (mprotect(m, kGuardBytes, PROT_NONE) != 0) /* an overflow faults, not another's stack */
        die("cannot protect a fiber stack's guard page (vm.max_map_count?)");
    return static_cast<unsigned char *>(m) + kGuardBytes;
}

/* one scheduler per OS thread */
thread_local Fiber fibers[kMaxThreads];
thread_local Warp warps[kMaxThreads / 32];
thread_local Group groups[kMaxThreads / 128];
thread_local BlockState blk;
thread_local Fiber *cur = nullptr;
thread_local void *sched_sp = nullptr;
thread_local body_fn g_body;
thread_local void *g_ctx;
/* the block's dynamic shared memory: its last byte just below a PROT_NONE page (an access past
 * the size the launch asked for faults) */
struct SmemArea {
    unsigned char *map = nullptr;
    size_t map_bytes = 0;
    unsigned char *base = nullptr;
    size_t bytes = 0;
    ~SmemArea() {
        if (map) munmap(map, map_bytes);
    }
    void assign(size_t n) {
        const size_t page = kGuardBytes, need = (n + 15) / 16 * 16;
        const size_t want = (need + page - 1) / page * page + page;
        if (want > map_bytes) {
            if (map) munmap(map, map_bytes);
            void *m = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                           0);
            if (m == MAP_FAILED) die("cannot map %zu bytes of shared memory", n);
            map = static_cast<unsigned char *>(m), map_bytes = want;
            if (mprotect(map + want - page, page, PROT_NONE) != 0)
                die("cannot protect the guard page after shared memory");
        }
        /* 16-byte aligned, so it ends at the guard page when n is a multiple of 16 (every launch
         * here); otherwise up to 15 bytes past n go unnoticed */
        base = map + map_bytes - page - need;
        bytes = n;
    }
};
thread_local SmemArea smem_buf;
/* the block's dynamic shared memory as the async proxy (wgmma) sees it: what it held when every
 * live thread of the block had executed fence_proxy_async since the previous publication
 * (proxy_publish); the 0xff fill before the first (blk.view_poison) */
thread_local std::vector<unsigned char> async_view;
thread_local unsigned long block_serial = 0; /* blocks this OS thread has started */
thread_local std::map<void *, unsigned long> shared_poisoned; /* static array -> its block */
cudaError_t last_error = cudaSuccess;
unsigned long launch_serial = 0; /* launches so far (run_grid), for the warp order's parity */
std::map<const void *, int> smem_attr; /* cudaFuncAttributeMaxDynamicSharedMemorySize per kernel */
/* A block's shared memory as a GPU counts it: the static __shared__ arrays its threads reached
 * (the bytes of each, once per block) on top of the launch's dynamic bytes. Without the
 * attribute the two together may not pass 48 KiB; with it, the static bytes and the attribute's
 * value together may not pass the opt-in maximum (cudaFuncSetAttribute fails on a GPU; here the
 * static size is known only once the kernel runs). */
constexpr size_t kSmemDefault = 48 * 1024, kSmemOptin = 227 * 1024;
thread_local size_t launch_dynamic = 0; /* the running launch's dynamic shared memory */
thread_local long launch_attr = -1;     /* its kernel's attribute, -1 when never set */
thread_local size_t block_static = 0;   /* static __shared__ bytes this block reached so far */

[[noreturn]] void die(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "tessera simt: block (%u,%u,%u) thread (%u,%u,%u): %s\n", g_block_idx.x,
            g_block_idx.y, g_block_idx.z, g_thread_idx.x, g_thread_idx.y, g_thread_idx.z, msg);
    fflush(stderr);
    _exit(1); /* not exit: other OS threads may be running blocks */
}

void switch_away(Fiber *self, bool own_warp_first = true);
void proxy_publish();

void fiber_entry() {
    g_body(g_ctx);
    /* the committed copies a thread left: a GPU completes them after it exits */
    cp_async_wait(0);
    Fiber *f = cur;
    f->state = DONE;
    Warp &w = warps[f->linear / 32];
    w.live--;
    if (w.arrived > 0)
        die("thread exited while %d lane(s) of its warp wait at %s: a full mask needs all 32 lanes",
            w.arrived, w.what ? w.what : "a collective");
    if (groups[f->linear / 128].arrived > 0)
        die("thread exited while %d thread(s) of its warpgroup wait at %s: a wgmma needs all 128",
            groups[f->linear / 128].arrived, groups[f->linear / 128].what);
    blk.live--;
    if (f->proxy_fenced) blk.proxy_fenced--; /* counted among the live only */
    if (blk.proxy_fenced > 0 && blk.proxy_fenced >= blk.live) proxy_publish();
    if (blk.arrived > 0 && blk.arrived == blk.live) { /* the others waited for this one only */
        const unsigned long g = blk.gen;
        blk.result[g & 1] = blk.acc[g & 1];
        blk.arrived = 0;
        blk.gen++;
        for (int i = 0; i < blk.nthreads; i++)
            if (fibers[i].state == WAIT_BLOCK) fibers[i].state = RUNNABLE;
    }
    switch_away(f, false); /* after a release, the block's first warp in its order runs first */
    abort(); /* never resumed */
}

void fiber_stack_init(Fiber &f) {
    if (!f.stack) f.stack = stack_get();
    /* the frame tcu_simt_switch pops: control words, r15..rbp, then the return address
     * (fiber_entry), 16-byte aligned so that fiber_entry starts as if called. Each fiber's stack
     * top sits at its own offset below the mapping's end (0 to 64 KiB in steps of a cache line):
     * tops at the same address modulo 4 KiB would share the L1's sets and evict each other at
     * every switch */
    const uintptr_t color = (uintptr_t)((f.linear * 41) % 1024) * 64;
    uintptr_t top = ((uintptr_t)(f.stack + kStackBytes - color) & ~(uintptr_t)15) - 16;
    uint64_t *ret = reinterpret_cast<uint64_t *>(top);
    ret[0] = (uint64_t)(uintptr_t)&fiber_entry;
    ret[1] = 0;
    uint64_t *sp = ret - 8;
    memset(sp, 0, 8 * sizeof(uint64_t));
    const uint16_t fpucw = 0x037f;
    const uint32_t mxcsr = 0x1f80;
    memcpy(sp, &fpucw, sizeof fpucw);
    memcpy(reinterpret_cast<unsigned char *>(sp) + 8, &mxcsr, sizeof mxcsr);
    f.sp = sp;
}

/* Self gives the OS thread straight to the next runnable thread, or back to the scheduler when
 * none is (the block ended, or deadlocked); it returns when self is resumed. The next is, with
 * own_warp_first (self waits at a collective or a barrier), a lane of self's own warp (after self,
 * cyclically) while one can run; else, and after a barrier's release (self runnable too), the
 * first runnable lane of the warps in the block's order: from warp 0 up in even phases, from the
 * last warp down in odd ones (blk.last_warp_first). So a warp runs ahead as far as it can, to a
 * block barrier or its end, before the next starts, and every phase between two barriers runs
 * its warps in the block's order: what one warp writes to shared memory and another reads, or a
 * buffer refilled while another warp still reads it, without a barrier between them shows in one
 * of the two orders (as NaN: shared memory and cp.async destinations start as NaN bytes), where
 * warps moving in step would hide it. */
void switch_away(Fiber *self, bool own_warp_first) {
    const int nw = blk.nthreads / 32, w0 = self->linear / 32, l0 = self->linear & 31;
    Fiber *next = nullptr;
    for (int k = 1; k < 32 && !next && own_warp_first; k++) {
        Fiber &f = fibers[w0 * 32 + (l0 + k) % 32];
        if (f.state == RUNNABLE) next = &f;
    }
    for (int i = 0; i < nw && !next; i++) {
        const int w = blk.last_warp_first ? nw - 1 - i : i;
        for (int l = 0; l < 32 && !next && (w != w0 || !own_warp_first); l++)
            if (fibers[w * 32 + l].state == RUNNABLE) next = &fibers[w * 32 + l];
    }
    if (next == self) return; /* self is the block's first in order: it goes on */
    if (!next) {
        tcu_simt_switch(&self->sp, sched_sp);
        return;
    }
    cur = next;
    g_thread_idx = next->tid;
    tcu_simt_switch(&self->sp, next->sp);
}

/* this thread waits: another runs; returns when this one is resumed */
void yield() { switch_away(cur); }

/* every live thread has executed fence_proxy_async since the last publication: the async proxy
 * now sees the block's shared memory as it is (async_view), and the count starts again */
void proxy_publish() {
    async_view.assign(smem_buf.base, smem_buf.base + smem_buf.bytes);
    blk.view_poison = false;
    blk.pub_gen = blk.gen;
    blk.proxy_fenced = 0;
    for (int i = 0; i < blk.nthreads; i++) fibers[i].proxy_fenced = false;
}

Fiber::~Fiber() {
    if (!stack) return;
    std::lock_guard<std::mutex> lock(stack_pool_mutex);
    stack_pool.push_back(stack);
}

void describe_deadlock() {
    fflush(stdout);
    fprintf(stderr, "tessera simt: deadlock in block (%u,%u,%u): no thread can go on\n",
            g_block_idx.x, g_block_idx.y, g_block_idx.z);
    int shown = 0;
    for (int i = 0; i < blk.nthreads && shown < 8; i++)
        if (fibers[i].state == WAIT_BLOCK || fibers[i].state == WAIT_WARP ||
            fibers[i].state == WAIT_GROUP) {
            fprintf(stderr, "  thread %d waits at %s\n", i, fibers[i].waiting_at);
            shown++;
        }
    fflush(stderr);
    _exit(1);
}

} // namespace

unsigned char *dynamic_smem() { return smem_buf.base; }

void shared_block_init(void *p, size_t bytes) {
    unsigned long &b = shared_poisoned[p];
    if (b != block_serial) { /* the first thread of this block to reach the declaration */
        memset(p, 0xff, bytes);
        b = block_serial;
        block_static += bytes;
        if (launch_attr < 0 && block_static + launch_dynamic > kSmemDefault)
            die("%zu bytes of static __shared__ memory and %zu of dynamic shared memory pass "
                "48 KiB without cudaFuncAttributeMaxDynamicSharedMemorySize: the launch fails on "
                "a GPU (set the attribute, as the attention kernels do)",
                block_static, launch_dynamic);
        if (launch_attr >= 0 && block_static + (size_t)launch_attr > kSmemOptin)
            die("%zu bytes of static __shared__ memory and a dynamic maximum of %ld "
                "(cudaFuncAttributeMaxDynamicSharedMemorySize) pass the 227 KiB a block can "
                "have: cudaFuncSetAttribute fails on a GPU", block_static, launch_attr);
    }
}

int lane_id() { return cur->linear & 31; }

const unsigned char *warp_exchange(const void *mine, size_t bytes, unsigned mask,
                                   const char *what, complete_fn complete) {
    Fiber *f = cur;
    Warp &w = warps[f->linear / 32];
    if (mask != 0xffffffffu)
        die("%s with mask 0x%08x: the emulator runs full-warp collectives only", what, mask);
    if (w.lanes != 32 || w.live != 32)
        die("%s in a warp of %d lane(s), %d not exited: a full mask needs all 32 lanes", what,
            w.lanes, w.live);
    if (w.arrived > 0 && w.what != what)
        die("%s while other lanes of the warp wait at %s: divergent collectives", what, w.what);
    const unsigned long g = w.gen;
    if (bytes) memcpy(w.slot[g & 1][f->linear & 31], mine, bytes);
    w.what = what;
    if (++w.arrived == 32) {
        if (complete) complete(&w.slot[g & 1][0][0]);
        w.arrived = 0;
        w.gen++;
        w.what = nullptr;
        const int base = f->linear & ~31;
        for (int l = 0; l < 32; l++)
            if (fibers[base + l].state == WAIT_WARP) fibers[base + l].state = RUNNABLE;
    } else {
        f->state = WAIT_WARP;
        f->waiting_at = what;
        f->warp_gen = g;
        yield();
    }
    return &w.slot[g & 1][0][0];
}

int block_barrier(int pred, int kind) {
    Fiber *f = cur;
    if (blk.arrived > 0 && blk.kind != kind)
        die("__syncthreads variant %d while others wait at variant %d", kind, blk.kind);
    blk.kind = kind;
    const unsigned long g = blk.gen;
    int &acc = blk.acc[g & 1];
    if (blk.arrived == 0) acc = kind == 1 ? 1 : 0;
    if (kind == 0) acc |= pred;
    else if (kind == 1) acc &= pred;
    else acc += pred;
    if (++blk.arrived == blk.live) {
        blk.result[g & 1] = acc;
        blk.arrived = 0;
        blk.gen++;
        for (int i = 0; i < blk.nthreads; i++)
            if (fibers[i].state == WAIT_BLOCK) fibers[i].state = RUNNABLE;
        switch_away(f, false); /* the next phase starts with the block's first warp in its order */
    } else {
        f->state = WAIT_BLOCK;
        f->waiting_at = "__syncthreads";
        f->block_gen = g;
        yield();
    }
    return blk.result[g & 1];
}

namespace {

/* the OS threads a grid's blocks are dealt to: TSR_SIMT_THREADS, else the CPUs (at most 8) */
unsigned simt_threads() {
    static unsigned n = [] {
        const char *e = getenv("TSR_SIMT_THREADS");
        if (e && *e) {
            char *end;
            const long v = strtol(e, &end, 10);
            if (*end || v < 1 || v > 64) { /* 64 x 1024 fibers, each stack 2 maps: < max_map_count */
                fprintf(stderr, "tessera simt: TSR_SIMT_THREADS='%s': expected 1..64\n", e);
                exit(2);
            }
            return (unsigned)v;
        }
        const unsigned hw = std::thread::hardware_concurrency();
        return hw < 1 ? 1u : hw > 8 ? 8u : hw;
    }();
    return n;
}

/* blocks first, first + stride, ... (linear index, x fastest) of the grid, on this OS thread */
void run_blocks(dim3 grid, dim3 block, size_t smem, long attr, body_fn body, void *ctx,
                size_t first, size_t stride) {
    const size_t nthreads = (size_t)block.x * block.y * block.z;
    const size_t nblocks = (size_t)grid.x * grid.y * grid.z;
    g_body = body;
    g_ctx = ctx;
    g_grid_dim = grid;
    g_block_dim = block;
    smem_buf.assign(smem);
    launch_dynamic = smem, launch_attr = attr;
    for (size_t lin = first; lin < nblocks; lin += stride) {
        g_block_idx = make_uint3((unsigned)(lin % grid.x), (unsigned)(lin / grid.x % grid.y),
                                 (unsigned)(lin / ((size_t)grid.x * grid.y)));
        if (smem) memset(smem_buf.base, 0xff, smem);
        block_serial++; /* static __shared__ arrays are poisoned again at first use (below) */
        block_static = 0;
        blk = BlockState();
        blk.nthreads = blk.live = (int)nthreads;
        blk.last_warp_first = (lin + launch_serial) & 1; /* both orders, also for 1-block grids */
        for (size_t w = 0; w < nthreads / 32; w++) {
            warps[w].lanes = warps[w].live = 32;
            warps[w].arrived = 0;
            warps[w].what = nullptr;
        }
        for (size_t w = 0; w < (nthreads + 127) / 128; w++) {
            groups[w].arrived = 0;
            groups[w].what = nullptr;
            groups[w].ops.clear();
            groups[w].committed = 0;
            groups[w].shadow.clear();
        }
        for (size_t i = 0; i < nthreads; i++) {
            Fiber &f = fibers[i];
            f.linear = (int)i;
            fiber_stack_init(f);
            f.tid = make_uint3((unsigned)(i % block.x), (unsigned)(i / block.x % block.y),
                               (unsigned)(i / ((size_t)block.x * block.y)));
            f.state = RUNNABLE;
            f.pending.clear();
            f.committed = 0;
            f.wg_fenced = false;
            f.proxy_fenced = false;
        }
        /* the threads pass the OS thread among themselves (switch_away); it comes back here
         * when none can run: every thread done, or a deadlock */
        Fiber &first = fibers[blk.last_warp_first ? nthreads - 32 : 0];
        cur = &first;
        g_thread_idx = first.tid;
        tcu_simt_switch(&sched_sp, first.sp);
        for (size_t i = 0; i < nthreads; i++)
            if (fibers[i].state != DONE) describe_deadlock();
        for (size_t w = 0; w < (nthreads + 127) / 128; w++)
            if (!groups[w].ops.empty())
                die("the block ended with %zu wgmma product(s) of warpgroup %zu not waited for "
                    "(wgmma.wait_group)", groups[w].ops.size(), w);
        cur = nullptr;
    }
}

} // namespace

void run_grid(const void *kernel, dim3 grid, dim3 block, size_t smem, body_fn body, void *ctx) {
    const size_t nthreads = (size_t)block.x * block.y * block.z;
    auto it = smem_attr.find(kernel);
    const long attr = it == smem_attr.end() ? -1 : (long)it->second;
    const size_t smem_max = attr < 0 ? kSmemDefault : (size_t)attr;
    if (nthreads == 0 || nthreads > (size_t)kMaxThreads || block.z > 64 || grid.x == 0 ||
        grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (smem > smem_max) {
        last_error = cudaErrorInvalidValue;
        return;
    }
    if (nthreads % 32 != 0) {
        /* allowed on a GPU; the emulator's warps would be partial: no kernel here launches so */
        fprintf(stderr, "tessera simt: %zu threads per block is not a whole number of warps\n",
                nthreads);
        exit(1);
    }
    const size_t nblocks = (size_t)grid.x * grid.y * grid.z;
    const size_t n = nblocks < simt_threads() ? nblocks : simt_threads();
    launch_serial++;
    std::vector<std::thread> others;
    for (size_t t = 1; t < n; t++)
        others.emplace_back(run_blocks, grid, block, smem, attr, body, ctx, t, n);
    run_blocks(grid, block, smem, attr, body, ctx, 0, n);
    for (std::thread &t : others) t.join();
}

/* ---- cp.async ------------------------------------------------------------------------------ */

void cp_async(void *sdst, const void *gsrc, int bytes, int src_bytes) {
    if (src_bytes < 0 || src_bytes > bytes) die("cp.async with src-size %d of %d", src_bytes, bytes);
    if (((uintptr_t)sdst % (uintptr_t)bytes) || (src_bytes && (uintptr_t)gsrc % (uintptr_t)bytes))
        die("cp.async of %d bytes at a misaligned address (shared %p, global %p)", bytes, sdst,
            gsrc);
    /* from issue to completion the destination is undefined: NaN bytes now, the data at the wait
     * (a read before the wait, or a refill issued while another warp still reads the old tile,
     * sees NaN) */
    memset(sdst, 0xff, (size_t)bytes);
    cur->pending.push_back(CpAsync{sdst, gsrc, bytes, src_bytes, -1});
}

void cp_async_commit() {
    Fiber *f = cur;
    for (CpAsync &c : f->pending)
        if (c.group < 0) c.group = f->committed;
    f->committed++;
}

void cp_async_wait(int n) {
    Fiber *f = cur;
    /* committed groups 0 .. committed-1-n complete (PTX: wait_group N leaves at most the N most
     * recent committed groups pending). A copy never committed is waited for by no wait_group:
     * here it never lands (its destination stays NaN), stricter than a GPU, where it lands at
     * some unknown time */
    const long upto = f->committed - 1 - n;
    std::vector<CpAsync> keep;
    for (CpAsync &c : f->pending) {
        if (c.group >= 0 && c.group <= upto) {
            if (c.src_bytes) memcpy(c.dst, c.src, (size_t)c.src_bytes);
            memset(static_cast<unsigned char *>(c.dst) + c.src_bytes, 0,
                   (size_t)(c.bytes - c.src_bytes));
        } else {
            keep.push_back(c);
        }
    }
    f->pending.swap(keep);
}

/* ---- ldmatrix and mma ---------------------------------------------------------------------- */

void ldmatrix_x4(uint32_t (&r)[4], const void *p, bool trans) {
    if ((uintptr_t)p & 15) die("ldmatrix row address %p is not 16-byte aligned", p);
    const uintptr_t mine = (uintptr_t)p;
    const unsigned char *all = warp_exchange(&mine, sizeof mine, 0xffffffffu,
                                             trans ? "ldmatrix.trans" : "ldmatrix");
    const int l = lane_id();
    auto row = [&](int lane) {
        uintptr_t a;
        memcpy(&a, all + (size_t)lane * kSlotBytes, sizeof a);
        return reinterpret_cast<const uint16_t *>(a);
    };
    for (int m = 0; m < 4; m++) {
        uint16_t lo, hi;
        if (!trans) { /* row l/4, columns 2(l%4), 2(l%4)+1 of matrix m */
            const uint16_t *rp = row(8 * m + l / 4);
            lo = rp[2 * (l % 4)];
            hi = rp[2 * (l % 4) + 1];
        } else { /* rows 2(l%4), 2(l%4)+1, column l/4 */
            lo = row(8 * m + 2 * (l % 4))[l / 4];
            hi = row(8 * m + 2 * (l % 4) + 1)[l / 4];
        }
        r[m] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}

namespace {
float bf16_bits(uint32_t reg, int half) {
    const uint32_t b = half ? reg >> 16 : reg & 0xffffu;
    const uint32_t f = b << 16;
    float x;
    memcpy(&x, &f, sizeof x);
    return x;
}
} // namespace

/* the warp's product, once, by the last lane to arrive: slot l holds lane l's a[4], b0, b1, c[4]
 * (as u32 and fp32 bits) and receives its d[4] = c + A B over the first 16 bytes.
 * A[r][k]: lane (r%8)*4 + (k%8)/2, register (r >= 8) + 2 (k >= 8), half k%2;
 * B[k][n]: lane n*4 + (k%8)/2, register b0 (k < 8) or b1, half k%2; d as c (simt.h's layout) */
static void mma_complete(unsigned char *slots) {
    float A[16][16], B[16][8], D[16][8];
    for (int l = 0; l < 32; l++) {
        const unsigned char *slot = slots + (size_t)l * kSlotBytes;
        uint32_t reg[6];
        float c[4];
        memcpy(reg, slot, sizeof reg);
        memcpy(c, slot + 24, sizeof c);
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) /* a0..a3 */
            for (int h = 0; h < 2; h++)
                A[g + 8 * (i & 1)][2 * t + h + 8 * (i >> 1)] = bf16_bits(reg[i], h);
        for (int i = 0; i < 2; i++) /* b0, b1 */
            for (int h = 0; h < 2; h++) B[2 * t + h + 8 * i][g] = bf16_bits(reg[4 + i], h);
        for (int e = 0; e < 4; e++) D[g + (e >= 2 ? 8 : 0)][2 * t + (e & 1)] = c[e];
    }
    /* each output: c, then the 16 products added in k order (one rounding each); the 8 outputs of
     * a row are independent chains (vectorised) */
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++) D[r][n] = __builtin_fmaf(A[r][k], B[k][n], D[r][n]);
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        const float d[4] = {D[g][2 * t], D[g][2 * t + 1], D[g + 8][2 * t], D[g + 8][2 * t + 1]};
        memcpy(slots + (size_t)l * kSlotBytes, d, sizeof d);
    }
}

void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    unsigned char mine[40];
    const uint32_t regs[6] = {a[0], a[1], a[2], a[3], b0, b1};
    memcpy(mine, regs, sizeof regs);
    memcpy(mine + 24, c, 16);
    const unsigned char *all =
        warp_exchange(mine, sizeof mine, 0xffffffffu, "mma.m16n8k16", mma_complete);
    memcpy(c, all + (size_t)lane_id() * kSlotBytes, 16);
}

/* ---- wgmma ----------------------------------------------------------------------------------- */

namespace {

/* The running thread's warpgroup collective: each thread has put its operands in the group's
 * slots (index linear % 128); the last of the 128 to arrive runs `complete` on them. */
void group_arrive(const char *what, void (*complete)(Group &)) {
    Fiber *f = cur;
    if (blk.nthreads % 128)
        die("%s in a block of %d threads: a warpgroup is 128 threads (4 whole warps)", what,
            blk.nthreads);
    const int gi = f->linear / 128;
    Group &G = groups[gi];
    for (int w = 0; w < 4; w++)
        if (warps[gi * 4 + w].live != 32)
            die("%s with %d thread(s) of warp %d exited: a wgmma needs all 128 threads of the "
                "warpgroup", what, 32 - warps[gi * 4 + w].live, gi * 4 + w);
    if (G.arrived > 0 && G.what != what)
        die("%s while other threads of the warpgroup wait at %s: divergent wgmma collectives",
            what, G.what);
    G.what = what;
    if (++G.arrived == 128) {
        complete(G);
        G.arrived = 0;
        G.what = nullptr;
        for (int i = 0; i < 128; i++)
            if (fibers[gi * 128 + i].state == WAIT_GROUP) fibers[gi * 128 + i].state = RUNNABLE;
    } else {
        f->state = WAIT_GROUP;
        f->waiting_at = what;
        yield();
    }
}

/* a descriptor's fields (the PTX ISA's matrix descriptor) */
struct Desc {
    size_t addr, lbo, sbo;
};
Desc desc_fields(uint64_t d, const char *which) {
    if (d >> 62)
        die("wgmma: %s descriptor with swizzle mode %u: the emulator has no swizzle", which,
            (unsigned)(d >> 62));
    if ((d >> 49) & 7) die("wgmma: %s descriptor with a base offset: the emulator has none", which);
    return Desc{(size_t)(d & 0x3fff) << 4, (size_t)((d >> 16) & 0x3fff) << 4,
                (size_t)((d >> 32) & 0x3fff) << 4};
}

/* the raw bf16 at byte offset `off` of the block's dynamic shared memory, or of its image at
 * `base` (async_view) */
uint16_t smem_u16(size_t off, const char *which, const unsigned char *base) {
    if (off + 2 > smem_buf.bytes)
        die("wgmma: %s reads shared memory at byte %zu, past the %zu bytes the launch asked for",
            which, off, smem_buf.bytes);
    uint16_t b;
    memcpy(&b, base + off, sizeof b);
    return b;
}

/* the shared-memory elements op reads, in a fixed order: A (64 x 16, K-major) when it comes from
 * memory, then B (16 x N); from the block's shared memory, or from its image at base */
std::vector<uint16_t> wg_operands(const WgOp &op, const unsigned char *base = smem_buf.base) {
    std::vector<uint16_t> v;
    v.reserve((op.a_regs ? 0 : 64 * 16) + 16 * (size_t)op.n);
    if (!op.a_regs) {
        const Desc da = desc_fields(op.da, "A");
        for (int r = 0; r < 64; r++)
            for (int k = 0; k < 16; k++)
                v.push_back(smem_u16(da.addr + (r / 8) * da.sbo + (r % 8) * 16 + (k / 8) * da.lbo +
                                         (k % 8) * 2, "A", base));
    }
    const Desc db = desc_fields(op.db, "B");
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < op.n; n++)
            v.push_back(smem_u16(op.trans_b ? db.addr + (n / 8) * db.sbo + (n % 8) * 2 +
                                                  (k / 8) * db.lbo + (k % 8) * 16
                                            : db.addr + (n / 8) * db.sbo + (n % 8) * 16 +
                                                  (k / 8) * db.lbo + (k % 8) * 2, "B", base));
    return v;
}

float bf16_value(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* this thread's accumulator element i <-> (row, column) of the 64 x N tile */
inline void wg_d_pos(int t, int i, int &row, int &col) {
    const int w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
    row = 16 * w + g + 8 * ((i % 4) >= 2);
    col = 8 * (i / 4) + 2 * q + (i % 2);
}

/* what an accumulator of a product in flight holds (a NaN with a payload of its own): a read
 * before the wait shows as NaN, a write before it as other bits at the wait */
constexpr uint32_t kWgPendingBits = 0x7fc0a5a5u;
const float kWgPending = [] {
    float f;
    memcpy(&f, &kWgPendingBits, sizeof f);
    return f;
}();

void wg_execute(Group &G, WgOp &op) {
    static thread_local float A[64][16], B[16][256], D[64][256];
    if (op.a_regs) {
        for (int t = 0; t < 128; t++) {
            if (memcmp(op.a[t], op.a_copy[t], sizeof op.a_copy[t]) != 0)
                die("wgmma: thread %d changed its A registers between the wgmma.mma_async and the "
                    "wgmma.wait_group that completes it", t);
            const int w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
            for (int r = 0; r < 4; r++)
                for (int h = 0; h < 2; h++) {
                    const uint32_t v = h ? op.a_copy[t][r] >> 16 : op.a_copy[t][r] & 0xffffu;
                    const uint32_t u = v << 16;
                    float x;
                    memcpy(&x, &u, sizeof x);
                    A[16 * w + g + 8 * (r & 1)][2 * q + h + 8 * (r >> 1)] = x;
                }
        }
    }
    /* shared memory as at the issue: a GPU reads it some time in between */
    const std::vector<uint16_t> now = wg_operands(op);
    if (now != op.smem)
        die("wgmma: shared memory a product reads changed between its wgmma.mma_async and the "
            "wgmma.wait_group that completes it (a refill or a store before the wait)");
    size_t at = 0;
    if (!op.a_regs)
        for (int r = 0; r < 64; r++)
            for (int k = 0; k < 16; k++) A[r][k] = bf16_value(now[at++]);
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < op.n; n++) B[k][n] = bf16_value(now[at++]);
    for (int t = 0; t < 128; t++) {
        const std::vector<float> &sh = G.shadow.at(op.d[t]);
        for (int i = 0; i < op.n / 2; i++) {
            int r, c;
            wg_d_pos(t, i, r, c);
            D[r][c] = op.scale_d ? sh[(size_t)i] : 0.0f;
        }
    }
    for (int r = 0; r < 64; r++)
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < op.n; n++) D[r][n] = __builtin_fmaf(A[r][k], B[k][n], D[r][n]);
    for (int t = 0; t < 128; t++) {
        std::vector<float> &sh = G.shadow.at(op.d[t]);
        for (int i = 0; i < op.n / 2; i++) {
            int r, c;
            wg_d_pos(t, i, r, c);
            sh[(size_t)i] = D[r][c];
        }
    }
}

void wg_complete_mma(Group &G) {
    WgOp op;
    op.n = G.n[0], op.scale_d = G.scale_d[0], op.trans_b = G.trans_b[0];
    op.a_regs = G.a[0] != nullptr, op.da = G.da[0], op.db = G.db[0];
    if (op.n < 8 || op.n > 256 || op.n % 8)
        die("wgmma.mma_async with N = %d: m64nNk16 has N = 8, 16, ..., 256", op.n);
    for (int t = 0; t < 128; t++) {
        if (G.n[t] != op.n || G.scale_d[t] != op.scale_d || G.trans_b[t] != op.trans_b ||
            (G.a[t] != nullptr) != op.a_regs || (!op.a_regs && G.da[t] != op.da) ||
            G.db[t] != op.db)
            die("wgmma.mma_async: thread %d of the warpgroup gave other operands than thread 0 "
                "(shape, descriptors, scale-d, trans-b): .aligned asks for the same", t);
        op.d[t] = G.d[t];
        op.a[t] = G.a[t];
        if (op.a_regs) memcpy(op.a_copy[t], G.a[t], sizeof op.a_copy[t]);
        auto it = G.shadow.find(G.d[t]);
        if (it == G.shadow.end())
            G.shadow.emplace(G.d[t], std::vector<float>(G.d[t], G.d[t] + op.n / 2));
        else if ((int)it->second.size() != op.n / 2)
            die("wgmma.mma_async: thread %d's accumulators are in flight with another N", t);
        for (int i = 0; i < op.n / 2; i++) G.d[t][i] = kWgPending; /* undefined until the wait */
    }
    op.smem = wg_operands(op);
    if (blk.view_poison) { /* nothing published yet: the async proxy sees the block's fill */
        async_view.assign(smem_buf.bytes, 0xff);
        blk.view_poison = false;
    }
    if (blk.pub_gen == blk.gen)
        die("wgmma.mma_async in the barrier phase whose fence.proxy.async published its operands: "
            "a barrier must come between the fences and the wgmma, so that every thread's "
            "fenced stores are visible to it");
    if (wg_operands(op, async_view.data()) != op.smem)
        die("wgmma.mma_async reads shared memory written (by stores or cp.async) since the block's "
            "threads last all executed fence.proxy.async: each writing thread fences after its "
            "writes, then a barrier, before the wgmma (the emulator asks it of every thread of "
            "the block, a stricter rule)");
    G.ops.push_back(std::move(op));
}

void wg_complete_commit(Group &G) {
    for (WgOp &op : G.ops)
        if (op.group < 0) op.group = G.committed;
    G.committed++;
    /* the next batch needs its own wgmma.fence (the emulator's rule: one before every batch) */
    const int gi = cur->linear / 128;
    for (int i = 0; i < 128; i++) fibers[gi * 128 + i].wg_fenced = false;
}

void wg_complete_wait(Group &G) {
    const int n = G.arg[0];
    for (int t = 1; t < 128; t++)
        if (G.arg[t] != n)
            die("wgmma.wait_group: thread %d waits for %d group(s), thread 0 for %d", t, G.arg[t],
                n);
    const long upto = G.committed - 1 - n;
    std::vector<WgOp> keep;
    for (WgOp &op : G.ops) {
        if (op.group >= 0 && op.group <= upto)
            wg_execute(G, op);
        else
            keep.push_back(op);
    }
    G.ops.swap(keep);
    /* accumulators no product in flight writes any more land in their registers */
    for (auto it = G.shadow.begin(); it != G.shadow.end();) {
        bool busy = false;
        for (const WgOp &op : G.ops)
            for (int t = 0; t < 128 && !busy; t++) busy = op.d[t] == it->first;
        if (busy) {
            ++it;
            continue;
        }
        for (size_t i = 0; i < it->second.size(); i++) {
            uint32_t bits;
            memcpy(&bits, &it->first[i], sizeof bits);
            if (bits != kWgPendingBits)
                die("wgmma: an accumulator of a product in flight was written between its "
                    "wgmma.mma_async and its wgmma.wait_group (element %zu)", i);
        }
        memcpy(it->first, it->second.data(), it->second.size() * sizeof(float));
        it = G.shadow.erase(it);
    }
    const int gi = cur->linear / 128;
    for (int i = 0; i < 128; i++) fibers[gi * 128 + i].wg_fenced = false;
}

} // namespace

uint64_t wgmma_desc(const void *p, uint32_t lbo, uint32_t sbo) {
    const unsigned char *c = static_cast<const unsigned char *>(p);
    if (c < smem_buf.base || c >= smem_buf.base + smem_buf.bytes)
        die("wgmma descriptor for %p: not in the block's dynamic shared memory", p);
    const size_t off = (size_t)(c - smem_buf.base);
    if (off % 16 || lbo % 16 || sbo % 16 || off >= (1u << 18) || lbo >= (1u << 18) ||
        sbo >= (1u << 18))
        die("wgmma descriptor: address %zu, leading %u, stride %u bytes: each a multiple of 16 "
            "below 256 KiB", off, lbo, sbo);
    return (uint64_t)(off >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}

void wgmma_fence() { cur->wg_fenced = true; }

void fence_proxy_async() {
    Fiber *f = cur;
    /* a second fence in the barrier phase whose fences already published (stores, fence, more
     * stores, fence, barrier: correct) publishes again, at once */
    if (blk.pub_gen == blk.gen) {
        proxy_publish();
        return;
    }
    if (!f->proxy_fenced) f->proxy_fenced = true, blk.proxy_fenced++;
    if (blk.proxy_fenced >= blk.live) proxy_publish();
}

void wgmma_mma(float *d, int n, const uint32_t *a, uint64_t da, uint64_t db, bool scale_d,
               bool trans_b) {
    Fiber *f = cur;
    if (!f->wg_fenced)
        die("wgmma.mma_async without a wgmma.fence since this thread's last wgmma commit or "
            "wait");
    Group &G = groups[f->linear / 128];
    const int t = f->linear % 128;
    G.d[t] = d, G.a[t] = a, G.da[t] = da, G.db[t] = db, G.n[t] = n;
    G.scale_d[t] = scale_d, G.trans_b[t] = trans_b;
    group_arrive("wgmma.mma_async", wg_complete_mma);
}

void wgmma_commit() { group_arrive("wgmma.commit_group", wg_complete_commit); }

void wgmma_wait(int n) {
    Group &G = groups[cur->linear / 128];
    G.arg[cur->linear % 128] = n;
    group_arrive("wgmma.wait_group", wg_complete_wait);
}

void spin_wait_eq(const int *p, int want, const char *what) {
    const auto t0 = std::chrono::steady_clock::now();
    while (__atomic_load_n(p, __ATOMIC_ACQUIRE) != want) {
        sched_yield();
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120))
            die("%s: waited 120 s for a turn that did not come (have %d, want %d): a wait for a "
                "block that had not started?",
                what, __atomic_load_n(p, __ATOMIC_ACQUIRE), want);
    }
}

} // namespace tcu_simt

/* ---- the CUDA runtime calls of the kernel files' host code --------------------------------- */

extern "C" {
cudaError_t cudaGetLastError(void) {
    const cudaError_t e = tcu_simt::last_error;
    tcu_simt::last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return tcu_simt::last_error; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; } /* every launch has finished */
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream) {
    (void)stream; /* in order with the launches, which have all finished */
    if (bytes) memset(p, value, bytes);
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (SIMT emulator)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (SIMT emulator)";
    default: return "error (SIMT emulator)";
    }
}
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        /* an H100/H200 grants up to 227 KiB a block */
        if (value < 0 || (size_t)value > tcu_simt::kSmemOptin) return cudaErrorInvalidValue;
        tcu_simt::smem_attr[func] = value;
    }
    return cudaSuccess;
}
}
