/* gpu_comm_nccl.c — gpu_comm.h on NCCL: the CUDA build's direct transport (parallel.gpu_comm =
 * "nccl", the default).
 *
 * libnccl.so.2 is opened with dlopen when a run first needs it, so the trainer links no NCCL:
 * CPU runs and single-GPU runs start where NCCL is not installed (a single GPU without NCCL
 * simply sums nothing). Bootstrap: rank 0 makes the unique id, MPI broadcasts it, every rank
 * calls ncclCommInitRank with its CUDA device already selected (tcu_init); a communicator over a
 * group (hsdp, the expert-parallel groups) gets its id from the group's first rank. The expert
 * exchange's all-to-all-v is grouped ncclSend/ncclRecv, one pair per peer. Each all-reduce is
 * one ncclGroupStart/End over the slices of a layer, on the communication stream after an event
 * recorded on the compute stream; gpu_comm_wait makes the compute stream wait for the last one.
 */
#include "gpu/gpu_comm.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/gpu_comm_impl.h"

typedef struct nccl_api {
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                   ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*get_version)(int *);
    const char *(*error_string)(ncclResult_t);
} nccl_api;

typedef struct nccl_comm {
    struct gpu_comm base; /* first: the dispatcher's view */
    nccl_api api;
    void *lib;
    ncclComm_t comm;
    tsr_group *g;
    tcu_stream compute, stream;
    tcu_event ready, done, order;
    int size, version;
    char name[64];
} nccl_comm;

static const gpu_comm_ops nccl_ops;

/* Loads libnccl and its functions; 0, or -1 with the reason. */
static int load_nccl(nccl_comm *c, char *why, size_t n) {
    const char *names[] = {"libnccl.so.2", "libnccl.so"};
    for (size_t i = 0; i < 2 && !c->lib; i++) c->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!c->lib) {
        snprintf(why, n, "cannot load NCCL (libnccl.so.2: %s): load the NCCL module or add its "
                 "lib directory to LD_LIBRARY_PATH", dlerror());
        return -1;
    }
    struct { void **fn; const char *sym; } syms[] = {
        {(void **)&c->api.get_unique_id, "ncclGetUniqueId"},
        {(void **)&c->api.comm_init_rank, "ncclCommInitRank"},
        {(void **)&c->api.comm_destroy, "ncclCommDestroy"},
        {(void **)&c->api.all_reduce, "ncclAllReduce"},
        {(void **)&c->api.reduce_scatter, "ncclReduceScatter"},
        {(void **)&c->api.all_gather, "ncclAllGather"},
        {(void **)&c->api.group_start, "ncclGroupStart"},
        {(void **)&c->api.group_end, "ncclGroupEnd"},
        {(void **)&c->api.get_version, "ncclGetVersion"},
        {(void **)&c->api.error_string, "ncclGetErrorString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        if (!(*syms[i].fn = dlsym(c->lib, syms[i].sym))) {
            snprintf(why, n, "libnccl.so.2 has no %s: NCCL too old (need 2.x)",
                     syms[i].sym);
            return -1;
        }
    }
    /* NCCL 2.7's point-to-point calls: only parallel.expert's exchange uses them (checked there),
     * so an older NCCL still runs everything else */
    *(void **)&c->api.send = dlsym(c->lib, "ncclSend");
    *(void **)&c->api.recv = dlsym(c->lib, "ncclRecv");
    return 0;
}

#define NCCL_DIE(c, call, what)                                                                   \
    do {                                                                                          \
        ncclResult_t r_ = (call);                                                                 \
        if (r_ != ncclSuccess)                                                                    \
            tsr_die(TSR_EXIT_INTERNAL, "NCCL %s failed: %s", what, (c)->api.error_string(r_));    \
    } while (0)

gpu_comm *gpu_comm_direct_open(const tsr_mesh_group *g, tcu_stream compute, char *why, size_t n) {
    nccl_comm *c = tsr_calloc(1, sizeof *c);
    c->base.ops = &nccl_ops;
    c->compute = compute;
    int bad = load_nccl(c, why, n) != 0;
    /* agree: a rank without NCCL stops every rank, with its reason on that rank */
    double agree = bad;
    dist_allreduce_max_f64(&agree, 1);
    if (agree > 0) {
        if (!bad) snprintf(why, n, "some rank could not load libnccl.so.2: load the NCCL module "
                                   "or add its lib directory to LD_LIBRARY_PATH on every node");
        if (c->lib) dlclose(c->lib);
        free(c);
        return NULL;
    }
    c->g = mesh_group_open(g); /* (its MPI communicator: the unique id's broadcast) */
    c->size = c->base.size = dist_group_size(c->g);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (dist_group_rank(c->g) == 0) NCCL_DIE(c, c->api.get_unique_id(&id), "ncclGetUniqueId");
    dist_group_bcast(c->g, &id, sizeof id, 0);
    NCCL_DIE(c, c->api.comm_init_rank(&c->comm, c->size, id, dist_group_rank(c->g)),
             "ncclCommInitRank");
    c->api.get_version(&c->version);
    snprintf(c->name, sizeof c->name, "NCCL %d.%d.%d", c->version / 10000,
             c->version / 100 % 100, c->version % 100);
    c->stream = tcu_stream_create();
    c->ready = tcu_event_create();
    c->done = tcu_event_create();
    c->order = tcu_event_create();
    return &c->base;
}

static const char *nccl_name(const gpu_comm *b) { return ((const nccl_comm *)b)->name; }

static tcu_stream nccl_follow(gpu_comm *b) {
    nccl_comm *c = (nccl_comm *)b;
    tcu_event_record(c->ready, c->compute);
    tcu_stream_wait_event(c->stream, c->ready);
    return c->stream;
}

static void nccl_allreduce(gpu_comm *b, float *base, const size_t *off, const size_t *len, int k) {
    nccl_comm *c = (nccl_comm *)b;
    nccl_follow(b);
    NCCL_DIE(c, c->api.group_start(), "ncclGroupStart");
    for (int i = 0; i < k; i++)
        NCCL_DIE(c, c->api.all_reduce(base + off[i], base + off[i], len[i], ncclFloat, ncclSum,
                                      c->comm, (cudaStream_t)c->stream),
                 "ncclAllReduce");
    NCCL_DIE(c, c->api.group_end(), "ncclGroupEnd");
}

static void nccl_allreduce_max(gpu_comm *b, float *buf, size_t n) {
    nccl_comm *c = (nccl_comm *)b;
    nccl_follow(b);
    NCCL_DIE(c, c->api.all_reduce(buf, buf, n, ncclFloat, ncclMax, c->comm, (cudaStream_t)c->stream),
             "ncclAllReduce (max)");
}

static void nccl_reduce_scatter(gpu_comm *b, const float *send, float *recv, size_t count) {
    nccl_comm *c = (nccl_comm *)b;
    nccl_follow(b);
    NCCL_DIE(c, c->api.reduce_scatter(send, recv, count, ncclFloat, ncclSum, c->comm,
                                      (cudaStream_t)c->stream),
             "ncclReduceScatter");
}

static void nccl_all_gather(gpu_comm *b, const void *send, void *recv, size_t count,
                            size_t elem) {
    nccl_comm *c = (nccl_comm *)b;
    nccl_follow(b);
    NCCL_DIE(c, c->api.all_gather(send, recv, count * elem, ncclUint8, c->comm,
                                  (cudaStream_t)c->stream),
             "ncclAllGather");
}

/* Point-to-point in one group: a send and a receive per peer (the rank itself included: NCCL
 * copies it locally), bytes as ncclUint8 so that any element type goes; then the compute stream
 * waits for the group. */
static void nccl_wait(gpu_comm *b);

static void nccl_alltoallv(gpu_comm *b, const void *send, const size_t *sc, const size_t *sd,
                           void *recv, const size_t *rc, const size_t *rd, size_t elem) {
    nccl_comm *c = (nccl_comm *)b;
    if (!c->api.send || !c->api.recv)
        tsr_die(TSR_EXIT_USAGE, "an all-to-all (parallel.expert's exchange, or Muon's owners under "
                "zero1, zero3 and hsdp): the loaded libnccl.so.2 has no ncclSend/ncclRecv (NCCL "
                "older than 2.7): load a newer NCCL, or set parallel.expert = 1 (Muon: ddp)");
    nccl_follow(b);
    NCCL_DIE(c, c->api.group_start(), "ncclGroupStart");
    for (int r = 0; r < c->size; r++) {
        if (sc[r])
            NCCL_DIE(c, c->api.send((const char *)send + sd[r] * elem, sc[r] * elem, ncclUint8, r,
                                    c->comm, (cudaStream_t)c->stream),
                     "ncclSend");
        if (rc[r])
            NCCL_DIE(c, c->api.recv((char *)recv + rd[r] * elem, rc[r] * elem, ncclUint8, r,
                                    c->comm, (cudaStream_t)c->stream),
                     "ncclRecv");
    }
    NCCL_DIE(c, c->api.group_end(), "ncclGroupEnd");
    nccl_wait(b);
}

static void nccl_ring_shift(gpu_comm *b, const void *send, void *recv, size_t bytes) {
    nccl_comm *c = (nccl_comm *)b;
    if (!c->api.send || !c->api.recv)
        tsr_die(TSR_EXIT_USAGE, "parallel.context: the loaded libnccl.so.2 has no ncclSend/ncclRecv "
                "(NCCL older than 2.7): load a newer NCCL, or set parallel.context = 1");
    const int me = dist_group_rank(c->g);
    nccl_follow(b);
    NCCL_DIE(c, c->api.group_start(), "ncclGroupStart");
    NCCL_DIE(c, c->api.send(send, bytes, ncclUint8, (me + 1) % c->size, c->comm,
                            (cudaStream_t)c->stream),
             "ncclSend");
    NCCL_DIE(c, c->api.recv(recv, bytes, ncclUint8, (me + c->size - 1) % c->size, c->comm,
                            (cudaStream_t)c->stream),
             "ncclRecv");
    NCCL_DIE(c, c->api.group_end(), "ncclGroupEnd");
}

static void nccl_after(gpu_comm *b, gpu_comm *bb) {
    nccl_comm *c = (nccl_comm *)b, *before = (nccl_comm *)bb;
    tcu_event_record(before->order, before->stream);
    tcu_stream_wait_event(c->stream, before->order);
}

static void nccl_mark(gpu_comm *b, tcu_event e) { tcu_event_record(e, ((nccl_comm *)b)->stream); }

static void nccl_wait(gpu_comm *b) {
    nccl_comm *c = (nccl_comm *)b;
    tcu_event_record(c->done, c->stream);
    tcu_stream_wait_event(c->compute, c->done);
}

static void nccl_close(gpu_comm *b) {
    nccl_comm *c = (nccl_comm *)b;
    tcu_sync(c->stream);
    if (c->comm) (void)c->api.comm_destroy(c->comm);
    tcu_event_destroy(c->ready);
    tcu_event_destroy(c->done);
    tcu_event_destroy(c->order);
    tcu_stream_destroy(c->stream);
    dist_group_free(c->g);
    /* the library stays loaded: NCCL's own threads may outlive the communicator briefly */
    free(c);
}

static const gpu_comm_ops nccl_ops = {
    .name = nccl_name, .allreduce = nccl_allreduce, .allreduce_max = nccl_allreduce_max,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather, .alltoallv = nccl_alltoallv, .ring_shift = nccl_ring_shift,
    .follow = nccl_follow,
    .after = nccl_after, .mark = nccl_mark, .wait = nccl_wait, .close = nccl_close,
};
