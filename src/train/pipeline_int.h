/* pipeline_int.h — internal to src/train/pipeline*.c: the schedule's executor (pipeline_exec.c),
 * the zero-bubble schedule's split backward (pipeline_zb.c), the trainer's glue (pipeline.c). */
#ifndef TSR_PIPELINE_INT_H
#define TSR_PIPELINE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "pipeline/pp_schedule.h"
#include "train/train_state.h"

/* ---- the zero-bubble split (pipeline_zb.c) ---- */

/* One linear layer's weights' half of a backward, kept from its B for its W: dw += dout^T inp,
 * dbias += the sum of dout's rows (the copies of dout and inp in the list's arena) */
typedef struct zb_item {
    float *dw, *dbias;
    size_t dout, inp; /* offsets of the copies in the arena */
    int N, IC, OC;
} zb_item;

/* the Ws of one chunk's microbatch */
typedef struct zb_list {
    zb_item *items;
    int n, cap;
    float *arena;
    size_t used, size;
} zb_list;

/* The model's backend with matmul_backward's weights' half deferred into `into` (the B running);
 * the rest as the base's. be first: the ops find their zb_backend from it. */
typedef struct zb_backend {
    tsr_backend be;
    const tsr_backend *base;
    zb_list *into;
    size_t held, peak; /* floats held by pending Ws now, the most so far */
} zb_backend;

/* z over base (its counts kept): before each B, over the set's backend */
void zb_backend_use(zb_backend *z, const tsr_backend *base);
/* the list's Ws into their gradients (ops: the fp32 ops), then emptied (its memory kept) */
void zb_run(zb_backend *z, zb_list *l, const tsr_ops *ops);
void zb_list_free(zb_list *l);

/* ---- the executor (pipeline_exec.c) ---- */

/* An activation set of a chunk and the microbatch it holds (-1: free); its backend, the chunk's
 * with the set's own capped logits (model.final_logit_softcapping: kept from the last stage's
 * forward for its backward, other forwards running between them) */
typedef struct pp_set {
    tsr_acts a;
    int mb;
    tsr_backend be;
    tsr_capped_logits capped;
    struct ep_slot *ep_slots; /* expert parallelism: the exchange's records of this microbatch's
                               * forward for its backward (model_ep.h ep_slots_new), NULL without */
    int n_ep_slots;
} pp_set;

/* A message buffer: the send in flight from it (NULL: none), or a received message being read */
typedef struct pp_msg {
    void *buf;
    void *req;
    int held;
} pp_msg;

typedef struct pp_exec {
    pp_schedule sched;           /* this run's tables (M microbatches) */
    tsr_group *pipe;             /* the mesh's pipeline group */
    struct tsr_ep *ep;           /* expert parallelism's store (NULL without) */
    int B;                       /* sequences a set holds (the microbatch) */
    size_t msg_bytes;            /* an activation or its gradient: B T C floats */
    pp_set **sets[TSR_PART_MAX]; /* each chunk's sets */
    int n_sets[TSR_PART_MAX];
    pp_msg **msgs;               /* the message buffers */
    int n_msgs;
    zb_backend zb;               /* zb: the backend of the B actions */
    zb_list *w;                  /* zb: each chunk's microbatches' pending Ws (V M) */
    /* the step's measurement: seconds computing, waiting for a neighbour, the schedule's wall */
    double busy, wait, wall;
    double sum_busy, sum_wall;   /* over the measured steps (the second on), all ranks' busy */
    double idle;                 /* this rank's idle seconds over the measured steps: the
                                  * slowest rank's wall less its own busy (pipeline_exec.c) */
    int64_t steps;
    uint64_t sent;               /* bytes sent to the neighbours (steps and evaluations) */
    int phase;                   /* the watchdog's phase (tsr_wd_phase) a wait returns to */
    pp_set *turn[TSR_PART_MAX];  /* each chunk's set of the last pass in turn (eval_pass): what
                                  * pp_turn_backward and pp_turn_moe_stats read */
} pp_exec;

/* the decoder of chunk c over set s (its backend, or be when not NULL: the zero-bubble B's),
 * its rows' segment starts (attn_mask = document) at starts or NULL */
void pp_chunk_decoder(tsr_trainer *t, int c, pp_set *s, const tsr_backend *be,
                      const uint8_t *starts, struct tsr_decoder *d);
/* a new set of chunk model m, its activations not yet allocated, free (mb -1) */
pp_set *pp_set_new(pp_exec *x, const tsr_model *m);
/* a set of chunk c for microbatch mb (a free one, or a new one of x->B sequences); dies when
 * memory is out */
pp_set *pp_set_take(tsr_trainer *t, int c, int mb);
/* the set of chunk c holding microbatch mb */
pp_set *pp_set_of(pp_exec *x, int c, int mb);
void pp_sets_free(pp_exec *x, int V);
/* the bytes of a stage's output (and of its gradient) for B sequences: this rank's T / N
 * positions of each under context parallelism, its 1 / T of those tokens under sequence
 * parallelism (the tensor rank's frame, sent to the same tensor rank of the next stage) */
size_t pp_out_bytes(const tsr_trainer *t, int B);
/* the message's tag: direction (0 forward, 1 backward), the receiving chunk, the microbatch */
int pp_tag(int dir, int c, int mb);
/* waits for n bytes from group rank `from` under tag into a free buffer (held until the caller
 * clears it); the time is the step's wait, the watchdog told what it waits for: stage's message
 * (what) */
pp_msg *pp_recv(tsr_trainer *t, size_t n, int from, int tag, const char *what, int stage);
/* sends n bytes of src to group rank `to` under tag (copied into a buffer first) */
void pp_send(tsr_trainer *t, const void *src, size_t n, int to, int tag);
/* waits for every send in flight */
void pp_sends_wait(pp_exec *x);
/* the evaluation's hooks of the part's model (model.h fwd, scores): every stage in turn */
double pp_eval_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T);
void pp_eval_scores(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                    float *losses, int32_t *greedy);
/* after pp_eval_scores' forward (DPO's pass: train/objective.h), its backward with each token's
 * loss weighted (model.h bwd_weighted) through every stage in turn, the last first; and its MoE
 * statistics (model.h moe_stats) at their places in the whole model's records (pipeline.c) */
void pp_turn_backward(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                      const float *dlosses, float moe_w);
void pp_turn_moe_stats(void *ctx, double w, double *acc);

#endif
