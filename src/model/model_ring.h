/* model_ring.h — context parallelism (parallel.context; docs/parallelism.md): a sequence split
 * over the N ranks of a context group, and ring attention over the group.
 *
 * The zig-zag split: a sequence of T positions is cut into 2N chunks of c = T / 2N, and rank r of
 * the group holds chunks r and 2N-1-r, in that order, as its local sequence of Tl = T / N
 * positions. Under a causal mask chunk k's queries see k + 1 chunks of keys, so every rank's two
 * chunks see 2N + 1 chunks together: the same attention work on every rank.
 *
 * Ring attention: each rank's keys and values go round the group, one hop per step, the next
 * block's exchange started before the current block's attention; each block's attention is merged
 * into the output by its log-sum-exp (ops.h ring_forward), which is what a layer keeps for the
 * backward. The backward passes the blocks round again with their key and value gradients
 * travelling beside them, summed on every rank they visit and back home after the last hop.
 * Positions: a rank's queries see exactly the keys they would see at N = 1 (causal, and
 * attn_mask = document with documents across chunk and rank boundaries), RoPE and learned
 * positions at each token's position in the whole sequence (or its document), ALiBi at the
 * distance in the whole sequence.
 *
 * Everything else in a layer is per token, so the decoder runs on the local positions; the ring
 * (this file) gives it the local tokens, targets and positions of a microbatch of whole sequences
 * and gathers per-position results back. A model's ring is set by its owner (the trainer for the
 * CPU model, src/gpu/ for the CUDA model), with the transport that moves the blocks.
 */
#ifndef TSR_MODEL_RING_H
#define TSR_MODEL_RING_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

struct tsr_acts;
struct tsr_group;
struct tsr_model;

/* Position in the whole sequence of local position t of rank r (T positions, N ranks). */
int ring_position(int N, int r, int T, int t);
/* The inverse: the rank whose share holds position p of the whole sequence, and (*t) its local
 * position there. */
int ring_owner(int N, int T, int p, int *t);
/* local (B, T/N) = rank r's zig-zag share of full (B, T), elements of elem bytes */
void ring_split(void *local, const void *full, size_t elem, int B, int N, int r, int T);
/* full (B, T) from every rank's share, all (N, B, T/N) in rank order */
void ring_join(void *full, const void *all, size_t elem, int B, int N, int T);

/* How the blocks move between the ranks of the context group. start sends bytes of send to the
 * next rank (group rank + 1 mod N) and receives as many from the previous one into recv, and
 * returns a handle that wait completes (send and recv must not be touched before); two may be in
 * flight, started in the same order on every rank. The buffers are the backend's memory. gather
 * and sum are collectives over the group on host memory: all[k bytes ..] = group rank k's mine;
 * buf (n) summed in place. */
typedef struct tsr_ring_comm {
    void *ctx;
    void *(*start)(void *ctx, const void *send, void *recv, size_t bytes);
    void (*wait)(void *ctx, void *handle);
    void (*gather)(void *ctx, const void *mine, void *all, size_t bytes);
    void (*sum)(void *ctx, double *buf, size_t n);
} tsr_ring_comm;

/* A context group's ring, and this rank's view of the current microbatch. */
typedef struct tsr_ring {
    int N, r;                    /* group size, this rank's place in it */
    tsr_ring_comm comm;
    /* host arrays of the last staged microbatch (ring_stage), for B x T sequences at most */
    int B, T;
    int32_t *tokens, *targets;   /* (B, T/N) this rank's share */
    int32_t *pos;                /* (B, T/N) the positions learned positions and RoPE use: in
                                  * the sequence, or in its document (attn_mask = document) */
    int32_t *lo, *hi;            /* (B, T) each position's document bounds (document), else
                                  * NULL */
    int32_t *seq, *dpos;         /* (B, T) scratch: segment ids and document positions */
    float *dlosses;              /* (B, T/N) scratch of a weighted backward */
    void *gather;                /* (N, B, T/N) 4-byte scratch of ring_gather */
    uint64_t sent;               /* bytes this rank sent round the ring */
    uint64_t skipped;            /* blocks wholly outside a sliding window's band, not computed
                                  * (forward and backward) */
} tsr_ring;

/* A ring over a group of the world (dist.h: MPI point-to-point on host memory), for the CPU
 * backend and the CUDA emulator. */
void ring_init_mpi(tsr_ring *g, struct tsr_group *group);
struct tsr_group *ring_mpi_group(const tsr_ring *g); /* that group, or NULL (another transport) */
/* The host arrays for microbatches of B sequences of T positions (the backend's buffers are the
 * activations': decoder.c); ring_free releases them (not the transport). */
void ring_alloc(tsr_ring *g, int B, int T);
void ring_free(tsr_ring *g);
/* This rank's share of B whole sequences: tokens, targets, positions and (document: eot >= 0)
 * the document bounds into the host arrays; the documents begin where starts (B, T) says, or
 * with starts NULL after each eot (model_segments). */
void ring_stage(tsr_ring *g, const int32_t *tokens, const int32_t *targets, int B, int T,
                int eot, const uint8_t *starts);
/* full (B, T) 4-byte elements on every rank of the group from each rank's local (B, T/N):
 * collective over the group */
void ring_gather(tsr_ring *g, void *full, const void *local, int B, int T);

/* The shapes of a model's ring: NH query heads, KVH key/value heads, keys of hs and values of dv;
 * width, the elements of a row that travel: the keys and values (KVH (hs + dv)), or with latent
 * a compressed form each rank expands into them itself (multi-head latent attention: the normed
 * latent and the turned RoPE key, kv_lora_rank + qk_rope_head_dim; tsr_ring_payload). */
typedef struct tsr_ring_dims {
    int NH, KVH, hs, dv, width, latent;
} tsr_ring_dims;
/* the model's: its MLA layers' (model.kv_lora_rank > 0: KVH = NH, hs = dn + dr) or its
 * attention layers' */
tsr_ring_dims ring_dims_of(const struct tsr_model *m);
/* plain attention's, values of hs */
tsr_ring_dims ring_dims_attn(int NH, int KVH, int hs);

/* Bytes of the ring's activation buffers for microbatches of B x T (T the whole sequence):
 * the blocks in flight (a latent ring's expanded block beside them), the fp32 accumulators (a
 * latent ring's block gradient among them), the document bounds, the backend's scratch
 * (docs/parallelism.md); buf ids in model.h's tsr_act_id order from TSR_A_RING_KV. */
void ring_act_plan(const tsr_backend *be, int N, int B, int T, const tsr_ring_dims *rd, int doc,
                   size_t *bytes);

/* The bytes each rank sends round the ring for one layer's attention of a microbatch of B x T,
 * width elements a row (tsr_ring_dims: 2 KVH hs for attention, kv_lora_rank + qk_rope_head_dim
 * for multi-head latent attention), activations of act bytes (4 on the CPU, 2 on the GPU):
 * the forward passes the blocks N - 1 hops, (N - 1) B (T/N) width act elements; the backward
 * passes them again and their fp32 gradients N hops, (N - 1) B (T/N) width act elements +
 * N B (T/N) width floats (a checkpointed layer's recomputation adds a forward's). */
uint64_t ring_layer_bytes(size_t act, int N, int B, int T, int width, int backward);

/* One layer's attention over the group: atty (B, T/N, NH hs) act and lse (B, NH, T/N) fp32 (kept
 * for the backward) from qkv (B, T/N, QKV) act; slopes (NH) or NULL; var the layer's variants
 * (ops.h tsr_attn_var: window, scale, soft cap, sinks) or NULL. The blocks wholly outside a
 * window's band are skipped (g->skipped), the others masked to it; the sinks join each row's
 * softmax once, when its first block starts the merge (so lse includes them). The ring's buffers
 * in a (lo, hi: the document bounds staged on the backend, or NULL). Collective over the group. */
void ring_attention_forward(tsr_ring *g, const tsr_backend *be, struct tsr_acts *a, void *atty,
                            float *lse, const void *qkv, const float *slopes,
                            const tsr_attn_var *var, int B, int T, int NH, int KVH, int hs);
/* Its backward: dqkv (B, T/N, QKV) act written (TSR_GRAD_SET) from datty, and the forward's qkv,
 * atty and lse; var->dsinks (NH) += this rank's rows' sink gradients (taken in each row's
 * diagonal block; the other ranks' rows come with the replicated gradients' reduction).
 * Collective over the group. */
void ring_attention_backward(tsr_ring *g, const tsr_backend *be, struct tsr_acts *a, void *dqkv,
                             const void *datty, const void *qkv, const void *atty,
                             const float *lse, const float *slopes, const tsr_attn_var *var,
                             int B, int T, int NH, int KVH, int hs);

/* What a latent ring sends instead of the key/value rows (multi-head latent attention,
 * src/model/mixer_mla.c; docs/parallelism.md "Multi-head latent attention"): width elements a
 * row of the B x T/N local rows. pack writes this rank's block (rows x width act) into send;
 * expand writes the key/value rows kv (rows, KVW = KVH (hs + dv)) act of a block blk received;
 * contract writes dblk (rows x width) fp32, the gradient of blk, from the gradient dkv (rows,
 * KVW) fp32 of the rows expand made from it (and adds what it owes the weights' gradients).
 * src: the group rank whose block it is (its rows that rank's zig-zag share: LoRA's dropout). */
typedef struct tsr_ring_payload {
    int width;
    void *ctx;
    void (*pack)(void *ctx, void *send);
    void (*expand)(void *ctx, void *kv, const void *blk, int src);
    void (*contract)(void *ctx, float *dblk, const float *dkv, const void *blk, int src);
} tsr_ring_payload;

/* ring_attention_forward with pay's blocks going round: the own block's keys and values still
 * from qkv (KVH = NH), the others expanded from what arrives. var->dv the value heads' size. */
void ring_latent_forward(tsr_ring *g, const tsr_backend *be, struct tsr_acts *a, void *atty,
                         float *lse, const void *qkv, const tsr_attn_var *var,
                         const tsr_ring_payload *pay, int B, int T, int NH, int hs);
/* Its backward: dqkv (B, T/N, QKV) act written, the queries' columns (the key/value ones zero);
 * returns this rank's block's gradient (rows x width fp32, summed over the group: the ring's
 * buffer, valid until its next pass). Collective over the group. */
const float *ring_latent_backward(tsr_ring *g, const tsr_backend *be, struct tsr_acts *a,
                                  void *dqkv, const void *datty, const void *qkv,
                                  const void *atty, const float *lse, const tsr_attn_var *var,
                                  const tsr_ring_payload *pay, int B, int T, int NH, int hs);

#endif
