/* gpu_comm_staged.c — gpu_comm.h staged through host memory (parallel.gpu_comm = "mpi"): the
 * fallback transport for a site whose NCCL is broken, and the one that lets several ranks share
 * a GPU. Written over cuda_ops.h (tcu_*) and dist.h only, so the same code runs in the CUDA build
 * and in the host emulator's (kernels/cuda_emu/), where the tests run it on several ranks.
 *
 * A process has one engine, shared by its staged communicators: a communication stream S, one
 * pinned staging buffer, and one communication thread that makes every MPI call of the transport.
 * A collective, called on the main thread, queues on S and returns at once:
 *   1. S waits for an event recorded on the compute stream (the data is complete there);
 *   2. device -> pinned copies of its inputs (tcu_memcpy_d2h_async);
 *   3. a host function, the gate: it tells the thread the copies are done (the stream reached it),
 *      then blocks S until the thread has run the MPI call on the pinned copies;
 *   4. pinned -> device copies of its outputs.
 * The compute stream waits for S only at gpu_comm_wait (and after an all-to-all-v, which needs its
 * rows at once), through an event recorded on S after step 4: the contract of gpu_comm.h, as NCCL
 * keeps it. The gate calls no CUDA and no MPI (cudaLaunchHostFunc forbids the first, and an
 * MPI built with CUDA support may make CUDA calls of its own); it only signals and waits.
 *
 * Where the MPI calls run: on the communication thread, one per process, in the order the main
 * thread queued the collectives (one FIFO for every communicator: the same order on every rank,
 * which is what NCCL's rule for concurrent communicators asks, so gpu_comm_after has nothing to
 * add). The main thread still calls MPI itself (the loss, checkpoints, the watchdog) at the same
 * time, on other communicators: hence MPI_THREAD_MULTIPLE (dist_thread_multiple; refused at open
 * without it on more than one rank). A single stream means the host functions run in queue order,
 * so the one thread of the CUDA runtime that runs them can never wait in a gate for a collective
 * whose own gate it has not reached. The price: staging copies and MPI calls of successive
 * collectives run one after the other (each still overlaps the compute stream's backward pass).
 *
 * All collectives queued on S run in turn, so one staging buffer serves them all; a collective that
 * needs more allocates a larger one, and the smaller stays allocated (a collective queued before
 * may still read it) until the engine closes. A group of one moves nothing through the host
 * (device-to-device copies on S).
 */
#include "gpu/gpu_comm.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/gpu_comm_impl.h"

typedef enum { OP_ALLREDUCE, OP_ALLREDUCE_MAX, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_ALLTOALLV, OP_RING_SHIFT, OP_STOP } stage_op;

typedef struct engine engine;

/* one collective, from the main thread to the communication thread; the thread frees it */
typedef struct stage_task {
    struct stage_task *next;
    engine *e;
    uint64_t seq;     /* its place in the FIFO (1, 2, ...) */
    stage_op op;
    tsr_group *g;
    unsigned char *in, *out; /* in the staging buffer: the inputs, the outputs (allreduce: in) */
    size_t *len;      /* allreduce: the k slice lengths (floats), packed one after the other */
    int k;
    size_t count, elem; /* reduce-scatter, all-gather: per rank; ring shift: count bytes */
    size_t *cnt;      /* all-to-all-v: sc, sd, rc, rd (group size each) */
} stage_task;

struct engine {
    int users;
    tcu_stream s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stage_task *head, *tail;        /* queued, not yet taken by the thread */
    uint64_t queued, staged, done;  /* the last task queued, whose gate ran, whose MPI ran */
    unsigned char *buf;             /* the staging buffer (pinned) */
    size_t cap;
    void **old;                     /* smaller buffers, freed at the end */
    int n_old;
};

static engine *the_engine; /* the process's, while a staged communicator is open */

typedef struct staged_comm {
    struct gpu_comm base; /* first: the dispatcher's view */
    engine *e;
    tsr_group *g;
    tcu_stream compute;
    tcu_event ready, done;
} staged_comm;

static const gpu_comm_ops staged_ops;

static void run_mpi(stage_task *t) {
    const int W = dist_group_size(t->g);
    size_t at = 0;
    switch (t->op) {
    case OP_ALLREDUCE: /* one call a slice, as the emulator's direct transport sums them */
        for (int i = 0; i < t->k; i++) {
            dist_group_allreduce_sum_f32(t->g, (float *)(void *)(t->in + at), t->len[i]);
            at += t->len[i] * sizeof(float);
        }
        break;
    case OP_ALLREDUCE_MAX:
        dist_group_allreduce_max_f32(t->g, (float *)(void *)t->in, t->count);
        break;
    case OP_REDUCE_SCATTER: {
        int *counts = tsr_malloc((size_t)W * sizeof(int));
        for (int r = 0; r < W; r++) counts[r] = (int)t->count;
        dist_group_reduce_scatter_f32(t->g, (const float *)(void *)t->in, (float *)(void *)t->out,
                                      counts);
        free(counts);
        break;
    }
    case OP_ALL_GATHER: dist_group_allgather(t->g, t->in, t->out, t->count * t->elem); break;
    case OP_ALLTOALLV:
        dist_group_alltoallv(t->g, t->in, t->cnt, t->cnt + W, t->out, t->cnt + 2 * W,
                             t->cnt + 3 * W, t->elem);
        break;
    case OP_RING_SHIFT: dist_wait(dist_group_ring_shift(t->g, t->in, t->out, t->count)); break;
    case OP_STOP: break;
    }
}

/* The communication thread: each task in queue order, once its gate has run (its inputs are in
 * the staging buffer), its MPI call, then the gate may let the stream go on */
static void *comm_thread(void *arg) {
    engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->head) pthread_cond_wait(&e->cv, &e->mu);
        stage_task *t = e->head;
        e->head = t->next;
        if (!e->head) e->tail = NULL;
        while (t->op != OP_STOP && e->staged < t->seq) pthread_cond_wait(&e->cv, &e->mu);
        pthread_mutex_unlock(&e->mu);
        if (t->op == OP_STOP) {
            free(t);
            return NULL;
        }
        run_mpi(t);
        pthread_mutex_lock(&e->mu);
        e->done = t->seq;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        free(t->len);
        free(t->cnt);
        free(t);
    }
}

/* The gate, a host function on S (no CUDA, no MPI): task seq's inputs are staged; S goes on once
 * its MPI call has run. Reads the task before signalling: the thread may free it after. */
static void gate(void *arg) {
    const stage_task *t = arg;
    engine *e = t->e;
    const uint64_t seq = t->seq;
    pthread_mutex_lock(&e->mu);
    e->staged = seq;
    pthread_cond_broadcast(&e->cv);
    while (e->done < seq) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

/* t into the FIFO (numbered), then its gate on S */
static void submit(engine *e, stage_task *t) {
    t->e = e;
    pthread_mutex_lock(&e->mu);
    t->seq = ++e->queued;
    if (e->tail) e->tail->next = t;
    else e->head = t;
    e->tail = t;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (t->op != OP_STOP) tcu_launch_host(e->s, gate, t);
}

/* The staging buffer, at least bytes long; a smaller one is kept until the end (a collective
 * queued before may still use it) */
static unsigned char *stage_buffer(engine *e, size_t bytes) {
    if (e->buf && bytes <= e->cap) return e->buf;
    if (e->buf) {
        e->old = tsr_realloc(e->old, (size_t)(e->n_old + 1) * sizeof *e->old);
        e->old[e->n_old++] = e->buf;
    }
    e->cap = bytes > 2 * e->cap ? bytes : 2 * e->cap;
    if (e->cap < 4096) e->cap = 4096;
    e->buf = tcu_host_alloc(e->cap, "parallel.gpu_comm = mpi: the staging buffer");
    return e->buf;
}

static stage_task *new_task(staged_comm *c, stage_op op, size_t in_bytes, size_t out_bytes) {
    stage_task *t = tsr_calloc(1, sizeof *t);
    t->op = op;
    t->g = c->g;
    t->in = stage_buffer(c->e, in_bytes + out_bytes);
    t->out = t->in + in_bytes;
    return t;
}

/* the engine, made by the first staged communicator: its stream and thread (signals blocked in
 * it: SIGTERM and SIGUSR1 are the main thread's, watchdog/stop.c) */
static engine *engine_get(void) {
    if (the_engine) {
        the_engine->users++;
        return the_engine;
    }
    engine *e = tsr_calloc(1, sizeof *e);
    e->users = 1;
    e->s = tcu_stream_create();
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    sigset_t all, was;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &was);
    int rc = pthread_create(&e->thread, NULL, comm_thread, e);
    pthread_sigmask(SIG_SETMASK, &was, NULL);
    if (rc != 0)
        tsr_die(TSR_EXIT_INTERNAL, "parallel.gpu_comm = mpi: cannot start the communication "
                "thread: %s", strerror(rc));
    return the_engine = e;
}

/* the last communicator gone: everything queued has run (tcu_sync), the thread stops */
static void engine_put(engine *e) {
    if (--e->users > 0) return;
    tcu_sync(e->s);
    stage_task *stop = tsr_calloc(1, sizeof *stop);
    stop->op = OP_STOP;
    submit(e, stop);
    pthread_join(e->thread, NULL);
    for (int i = 0; i < e->n_old; i++) tcu_host_free(e->old[i]);
    free(e->old);
    tcu_host_free(e->buf);
    tcu_stream_destroy(e->s);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
    the_engine = NULL;
}

gpu_comm *gpu_comm_staged_open(const tsr_mesh_group *g, tcu_stream compute, char *why, size_t n) {
    double bad = dist_world_size() > 1 && !dist_thread_multiple();
    dist_allreduce_max_f64(&bad, 1); /* agreed: every rank stops */
    if (bad > 0) {
        snprintf(why, n, "parallel.gpu_comm = \"mpi\" needs an MPI library that grants "
                 "MPI_THREAD_MULTIPLE (its communication thread calls MPI beside the main "
                 "thread); this one does not: use an MPI built with thread support, or "
                 "parallel.gpu_comm = \"nccl\"");
        return NULL;
    }
    staged_comm *c = tsr_calloc(1, sizeof *c);
    c->base.ops = &staged_ops;
    c->g = mesh_group_open(g); /* its own: the communication thread calls MPI on it */
    c->base.size = dist_group_size(c->g);
    c->compute = compute;
    c->e = engine_get();
    c->ready = tcu_event_create();
    c->done = tcu_event_create();
    return &c->base;
}

static const char *staged_name(const gpu_comm *c) {
    (void)c;
    return "MPI staged through pinned host memory (parallel.gpu_comm = \"mpi\": the fallback "
           "transport, slower than NCCL)";
}

static tcu_stream staged_follow(gpu_comm *b) {
    staged_comm *c = (staged_comm *)b;
    tcu_event_record(c->ready, c->compute);
    tcu_stream_wait_event(c->e->s, c->ready);
    return c->e->s;
}

static void staged_allreduce(gpu_comm *b, float *base, const size_t *off, const size_t *len,
                             int k) {
    staged_comm *c = (staged_comm *)b;
    if (b->size < 2 || k < 1) return;
    size_t total = 0;
    for (int i = 0; i < k; i++) total += len[i] * sizeof(float);
    tcu_stream s = staged_follow(b);
    stage_task *t = new_task(c, OP_ALLREDUCE, total, 0);
    t->k = k;
    t->len = tsr_malloc((size_t)k * sizeof *t->len);
    memcpy(t->len, len, (size_t)k * sizeof *t->len);
    unsigned char *h = t->in;
    size_t at = 0;
    for (int i = 0; i < k; at += len[i++] * sizeof(float))
        tcu_memcpy_d2h_async(h + at, base + off[i], len[i] * sizeof(float), s);
    submit(c->e, t);
    at = 0;
    for (int i = 0; i < k; at += len[i++] * sizeof(float))
        tcu_memcpy_h2d(base + off[i], h + at, len[i] * sizeof(float), s);
}

static void staged_allreduce_max(gpu_comm *b, float *buf, size_t n) {
    staged_comm *c = (staged_comm *)b;
    if (b->size < 2 || n == 0) return;
    tcu_stream s = staged_follow(b);
    stage_task *t = new_task(c, OP_ALLREDUCE_MAX, n * sizeof(float), 0);
    t->count = n;
    tcu_memcpy_d2h_async(t->in, buf, n * sizeof(float), s);
    submit(c->e, t);
    tcu_memcpy_h2d(buf, t->in, n * sizeof(float), s);
}

static void staged_reduce_scatter(gpu_comm *b, const float *send, float *recv, size_t count) {
    staged_comm *c = (staged_comm *)b;
    const size_t piece = count * sizeof(float);
    tcu_stream s = staged_follow(b);
    if (b->size < 2) {
        tcu_memcpy_d2d(recv, send, piece, s);
        return;
    }
    stage_task *t = new_task(c, OP_REDUCE_SCATTER, (size_t)b->size * piece, piece);
    t->count = count;
    tcu_memcpy_d2h_async(t->in, send, (size_t)b->size * piece, s);
    unsigned char *out = t->out;
    submit(c->e, t);
    tcu_memcpy_h2d(recv, out, piece, s);
}

static void staged_all_gather(gpu_comm *b, const void *send, void *recv, size_t count,
                              size_t elem) {
    staged_comm *c = (staged_comm *)b;
    const size_t piece = count * elem;
    tcu_stream s = staged_follow(b);
    if (b->size < 2) {
        tcu_memcpy_d2d(recv, send, piece, s);
        return;
    }
    stage_task *t = new_task(c, OP_ALL_GATHER, piece, (size_t)b->size * piece);
    t->count = count, t->elem = elem;
    tcu_memcpy_d2h_async(t->in, send, piece, s);
    unsigned char *out = t->out;
    submit(c->e, t);
    tcu_memcpy_h2d(recv, out, (size_t)b->size * piece, s);
}

static void staged_wait(gpu_comm *b);

/* the send side staged whole up to its last row; the receive side copied back per peer (rows
 * between the peers' blocks are left as they are) */
static void staged_alltoallv(gpu_comm *b, const void *send, const size_t *sc, const size_t *sd,
                             void *recv, const size_t *rc, const size_t *rd, size_t elem) {
    staged_comm *c = (staged_comm *)b;
    const int W = b->size;
    tcu_stream s = staged_follow(b);
    size_t in = 0, out = 0;
    for (int r = 0; r < W; r++) {
        if (sc[r] && (sd[r] + sc[r]) * elem > in) in = (sd[r] + sc[r]) * elem;
        if (rc[r] && (rd[r] + rc[r]) * elem > out) out = (rd[r] + rc[r]) * elem;
    }
    if (W < 2) {
        tcu_memcpy_d2d((char *)recv + rd[0] * elem, (const char *)send + sd[0] * elem,
                       rc[0] * elem, s);
        staged_wait(b);
        return;
    }
    stage_task *t = new_task(c, OP_ALLTOALLV, in, out);
    t->elem = elem;
    t->cnt = tsr_malloc(4 * (size_t)W * sizeof *t->cnt);
    const size_t *arrays[4] = {sc, sd, rc, rd};
    for (int a = 0; a < 4; a++) memcpy(t->cnt + (size_t)a * W, arrays[a], (size_t)W * sizeof(size_t));
    tcu_memcpy_d2h_async(t->in, send, in, s);
    unsigned char *h = t->out;
    submit(c->e, t);
    for (int r = 0; r < W; r++)
        tcu_memcpy_h2d((char *)recv + rd[r] * elem, h + rd[r] * elem, rc[r] * elem, s);
    staged_wait(b);
}

/* context parallelism's ring: count bytes to the next group rank, as many from the previous */
static void staged_ring_shift(gpu_comm *b, const void *send, void *recv, size_t bytes) {
    staged_comm *c = (staged_comm *)b;
    tcu_stream s = staged_follow(b);
    if (b->size < 2) {
        tcu_memcpy_d2d(recv, send, bytes, s);
        return;
    }
    stage_task *t = new_task(c, OP_RING_SHIFT, bytes, bytes);
    t->count = bytes;
    tcu_memcpy_d2h_async(t->in, send, bytes, s);
    unsigned char *out = t->out;
    submit(c->e, t);
    tcu_memcpy_h2d(recv, out, bytes, s);
}

/* one stream for every staged communicator: already in the order of the calls */
static void staged_after(gpu_comm *c, gpu_comm *before) { (void)c, (void)before; }

static void staged_mark(gpu_comm *b, tcu_event e) {
    tcu_event_record(e, ((staged_comm *)b)->e->s);
}

static void staged_wait(gpu_comm *b) {
    staged_comm *c = (staged_comm *)b;
    tcu_event_record(c->done, c->e->s);
    tcu_stream_wait_event(c->compute, c->done);
}

static void staged_close(gpu_comm *b) {
    staged_comm *c = (staged_comm *)b;
    tcu_sync(c->e->s);
    tcu_event_destroy(c->ready);
    tcu_event_destroy(c->done);
    dist_group_free(c->g);
    engine_put(c->e);
    free(c);
}

static const gpu_comm_ops staged_ops = {
    .name = staged_name, .allreduce = staged_allreduce, .allreduce_max = staged_allreduce_max,
    .reduce_scatter = staged_reduce_scatter,
    .all_gather = staged_all_gather, .alltoallv = staged_alltoallv,
    .ring_shift = staged_ring_shift, .follow = staged_follow,
    .after = staged_after, .mark = staged_mark, .wait = staged_wait, .close = staged_close,
};
