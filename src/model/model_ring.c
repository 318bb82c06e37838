/* model_ring.c — context parallelism's zig-zag split and ring attention (model_ring.h;
 * docs/parallelism.md). */
#include "model/model_ring.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist/dist.h"
#include "model/model.h"

/* ---- the zig-zag split ---------------------------------------------------------------------- */

/* the chunk (of 2N) that local chunk k (0 or 1) of rank r is */
static int chunk_of(int N, int r, int k) { return k ? 2 * N - 1 - r : r; }

int ring_position(int N, int r, int T, int t) {
    const int c = T / (2 * N);
    return chunk_of(N, r, t >= c) * c + t % c;
}

int ring_owner(int N, int T, int p, int *t) {
    const int c = T / (2 * N), j = p / c, k = j >= N;
    *t = k * c + p % c;
    return k ? 2 * N - 1 - j : j;
}

void ring_split(void *local, const void *full, size_t elem, int B, int N, int r, int T) {
    const int c = T / (2 * N), Tl = T / N;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 2; k++)
            memcpy((char *)local + ((size_t)b * Tl + (size_t)k * c) * elem,
                   (const char *)full + ((size_t)b * T + (size_t)chunk_of(N, r, k) * c) * elem,
                   (size_t)c * elem);
}

void ring_join(void *full, const void *all, size_t elem, int B, int N, int T) {
    const int c = T / (2 * N), Tl = T / N;
    for (int r = 0; r < N; r++)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < 2; k++)
                memcpy((char *)full + ((size_t)b * T + (size_t)chunk_of(N, r, k) * c) * elem,
                       (const char *)all + (((size_t)r * B + b) * Tl + (size_t)k * c) * elem,
                       (size_t)c * elem);
}

/* ---- the transport over MPI (host memory) --------------------------------------------------- */

static void *mpi_start(void *ctx, const void *send, void *recv, size_t bytes) {
    return dist_group_ring_shift(ctx, send, recv, bytes);
}
static void mpi_wait(void *ctx, void *handle) {
    (void)ctx;
    dist_wait(handle);
}
static void mpi_gather(void *ctx, const void *mine, void *all, size_t bytes) {
    dist_group_allgather(ctx, mine, all, bytes);
}
static void mpi_sum(void *ctx, double *buf, size_t n) { dist_group_allreduce_sum_f64(ctx, buf, n); }

void ring_init_mpi(tsr_ring *g, struct tsr_group *group) {
    memset(g, 0, sizeof *g);
    g->N = dist_group_size(group);
    g->r = dist_group_rank(group);
    g->comm = (tsr_ring_comm){group, mpi_start, mpi_wait, mpi_gather, mpi_sum};
}

/* ---- the microbatch's share ----------------------------------------------------------------- */

void ring_free(tsr_ring *g) {
    int32_t **p[] = {&g->tokens, &g->targets, &g->pos, &g->lo, &g->hi, &g->seq, &g->dpos};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(*p[i]), *p[i] = NULL;
    free(g->dlosses), free(g->gather);
    g->dlosses = NULL, g->gather = NULL;
    g->B = g->T = 0;
}

void ring_alloc(tsr_ring *g, int B, int T) {
    if (B <= g->B && T == g->T) return;
    ring_free(g);
    const size_t n = (size_t)B * T, nl = n / (size_t)g->N, i4 = sizeof(int32_t);
    g->tokens = tsr_malloc(nl * i4), g->targets = tsr_malloc(nl * i4), g->pos = tsr_malloc(nl * i4);
    g->lo = tsr_malloc(n * i4), g->hi = tsr_malloc(n * i4);
    g->seq = tsr_malloc(n * i4), g->dpos = tsr_malloc(n * i4);
    g->dlosses = tsr_malloc(nl * sizeof(float));
    g->gather = tsr_malloc(n * 4);
    g->B = B, g->T = T;
}

/* lo, hi (B,T) of the documents made by model_segments' ids seq and positions dpos */
static void document_bounds(int32_t *lo, int32_t *hi, const int32_t *seq, const int32_t *dpos,
                            int B, int T) {
    for (int b = 0; b < B; b++) {
        const size_t o = (size_t)b * T;
        for (int t = 0; t < T; t++) lo[o + t] = t - dpos[o + t];
        hi[o + T - 1] = T;
        for (int t = T - 2; t >= 0; t--)
            hi[o + t] = seq[o + t] == seq[o + t + 1] ? hi[o + t + 1] : t + 1;
    }
}

void ring_stage(tsr_ring *g, const int32_t *tokens, const int32_t *targets, int B, int T,
                int eot, const uint8_t *starts) {
    ring_alloc(g, B, T);
    const size_t i4 = sizeof(int32_t);
    ring_split(g->tokens, tokens, i4, B, g->N, g->r, T);
    ring_split(g->targets, targets, i4, B, g->N, g->r, T);
    if (eot >= 0) { /* positions in the document, and its bounds */
        model_segments(g->seq, g->dpos, tokens, eot, starts, B, T);
        document_bounds(g->lo, g->hi, g->seq, g->dpos, B, T);
        ring_split(g->pos, g->dpos, i4, B, g->N, g->r, T);
        return;
    }
    const int Tl = T / g->N;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tl; t++) g->pos[(size_t)b * Tl + t] = ring_position(g->N, g->r, T, t);
}

void ring_gather(tsr_ring *g, void *full, const void *local, int B, int T) {
    const size_t bytes = (size_t)B * (size_t)(T / g->N) * 4;
    ring_alloc(g, B, T);
    g->comm.gather(g->comm.ctx, local, g->gather, bytes);
    ring_join(full, g->gather, 4, B, g->N, T);
}

/* ---- the activations' share ----------------------------------------------------------------- */

tsr_ring_dims ring_dims_attn(int NH, int KVH, int hs) {
    return (tsr_ring_dims){.NH = NH, .KVH = KVH, .hs = hs, .dv = hs, .width = 2 * KVH * hs};
}

tsr_ring_dims ring_dims_of(const tsr_model *m) {
    if (m->cfg.kv_lora_rank == 0) return ring_dims_attn(m->NH, m->KVH, m->hs);
    return (tsr_ring_dims){.NH = m->NH, .KVH = m->NH, .hs = m->dn + m->dr, .dv = m->dv,
                           .width = m->kvr + m->dr, .latent = 1};
}

void ring_act_plan(const tsr_backend *be, int N, int B, int T, const tsr_ring_dims *rd, int doc,
                   size_t *bytes) {
    const size_t Tl = (size_t)(T / N), rows = (size_t)B * Tl, e = tsr_dtype_size(be->act);
    const size_t W = (size_t)rd->width, KVW = (size_t)rd->KVH * (rd->hs + rd->dv);
    const size_t QKV = (size_t)rd->NH * rd->hs + KVW, x = rd->latent ? rows * KVW : 0;
    const size_t b[] = {(2 * rows * W + x) * e, rows * QKV * sizeof(float),
                        (3 * rows * W + x) * sizeof(float),
                        doc ? (size_t)B * T * sizeof(int32_t) : 0,
                        doc ? (size_t)B * T * sizeof(int32_t) : 0,
                        be->ring_scratch ? be->ring_scratch(B, (int)Tl, rd->NH, rd->KVH, rd->hs)
                                         : 0};
    _Static_assert(TSR_A_RING_SCRATCH - TSR_A_RING_KV + 1 == sizeof b / sizeof b[0],
                   "ring_act_plan vs tsr_act_id");
    memcpy(bytes, b, sizeof b);
}

uint64_t ring_layer_bytes(size_t act, int N, int B, int T, int width, int backward) {
    const uint64_t blk = (uint64_t)B * (uint64_t)(T / N) * (uint64_t)width;
    const uint64_t kv = (uint64_t)(N - 1) * blk * act;
    return backward ? kv + (uint64_t)N * blk * sizeof(float) : kv;
}

/* ---- ring attention ------------------------------------------------------------------------- */

/* One layer's shapes on this rank: rows of qkv QKV wide ([q NH hs | k KVH hs | v KVH dv]), of
 * the key/value rows KVW, of the output C (NH dv); QW the queries' part of a qkv row; W the
 * elements of a row that travel (KVW, or a payload's) */
typedef struct ring_shape {
    int B, T, Tl, c, NH, KVH, hs;
    size_t e, QKV, KVW, QW, C, W; /* act bytes; row widths in elements */
    const tsr_ring_payload *pay;  /* what travels for a latent ring, or NULL: the key/value rows */
} ring_shape;

static ring_shape shape_of(const tsr_ring *g, const tsr_backend *be, int B, int T, int NH,
                           int KVH, int hs, const tsr_attn_var *var,
                           const tsr_ring_payload *pay) {
    const size_t dv = (size_t)(var && var->dv > 0 ? var->dv : hs), KVW = (size_t)KVH * (hs + dv);
    return (ring_shape){.B = B, .T = T, .Tl = T / g->N, .c = T / (2 * g->N), .NH = NH, .KVH = KVH,
                        .hs = hs, .e = tsr_dtype_size(be->act), .QKV = (size_t)NH * hs + KVW,
                        .KVW = KVW, .QW = (size_t)NH * hs, .C = (size_t)NH * dv,
                        .W = pay ? (size_t)pay->width : KVW, .pay = pay};
}

/* Whether local chunk qk's queries see any key of chunk kc: not when every key lies after every
 * query (causal), nor when the nearest pair lies window or more apart (a sliding window's band:
 * the block is skipped, counted in g->skipped) */
static int block_seen(tsr_ring *g, const ring_shape *s, int qc, int kc, const tsr_attn_var *var) {
    if (kc > qc) return 0;
    const int W = var ? var->window : 0;
    if (W > 0 && (qc - kc) * s->c - (s->c - 1) >= W) {
        g->skipped++;
        return 0;
    }
    return 1;
}

/* The block of this rank's local chunk qk (0, 1) against local chunk kk of the key/value block of
 * rank src (kv: its rows ldkv elements apart); 0 in *ok when no query sees a key (block_seen) */
static tsr_ring_block block_of(tsr_ring *g, const ring_shape *s, const tsr_acts *a,
                               const void *qkv, const void *kv, int ldkv, int qk, int kk, int src,
                               const float *slopes, const tsr_attn_var *var, int *ok) {
    const int qc = chunk_of(g->N, g->r, qk), kc = chunk_of(g->N, src, kk);
    *ok = block_seen(g, s, qc, kc, var);
    return (tsr_ring_block){
        .B = s->B, .NH = s->NH, .KVH = s->KVH, .hs = s->hs, .Tq = s->c, .Tk = s->c,
        .qoff = qc * s->c, .koff = kc * s->c,
        .q = (const char *)qkv + (size_t)qk * s->c * s->QKV * s->e,
        .kv = (const char *)kv + (size_t)kk * s->c * (size_t)ldkv * s->e,
        .ldq = (int)s->QKV, .ldkv = ldkv, .qbs = s->Tl, .kbs = s->Tl, .lo = a->ring_lo,
        .hi = a->ring_hi, .T = s->T, .slopes = slopes, .var = var,
        .sink_grad = kc == qc}; /* the diagonal block: once per query row */
}

/* This rank's block into send: the key/value rows of qkv (B, Tl, KVW), or the payload's */
static void pack_block(const tsr_backend *be, const ring_shape *s, void *send, const void *qkv) {
    if (s->pay) {
        s->pay->pack(s->pay->ctx, send);
        return;
    }
    be->copy_rows(be, send, s->KVW * s->e, (const char *)qkv + s->QW * s->e, s->QKV * s->e,
                  s->KVW * s->e, (size_t)s->B * s->Tl);
}

/* The key/value rows of step's block and (*ldkv) their stride: the own ones in qkv, a received
 * block's as they arrived in got, or expanded from it into x (a latent ring) */
static const void *block_rows(const ring_shape *s, const void *qkv, const void *got, void *x,
                              int step, int src, int *ldkv) {
    *ldkv = step ? (int)s->KVW : (int)s->QKV;
    if (!step) return (const char *)qkv + s->QW * s->e;
    if (!s->pay) return got;
    s->pay->expand(s->pay->ctx, x, got, src);
    return x;
}

/* The blocks in flight in a->ring_kv: two of rows x W, then (a latent ring) the expanded one */
typedef struct ring_bufs {
    char *blk[2];
    void *x;
    size_t bytes; /* of one block in flight */
} ring_bufs;

static ring_bufs bufs_of(const tsr_acts *a, const ring_shape *s) {
    const size_t bytes = (size_t)s->B * s->Tl * s->W * s->e;
    char *b = a->ring_kv;
    return (ring_bufs){{b, b + bytes}, b + 2 * bytes, bytes};
}

static void ring_fwd(tsr_ring *g, const tsr_backend *be, tsr_acts *a, void *atty, float *lse,
                     const void *qkv, const float *slopes, const tsr_attn_var *var,
                     const ring_shape *s) {
    const ring_bufs bf = bufs_of(a, s);
    int cur = 0, started[2] = {0, 0};
    pack_block(be, s, bf.blk[0], qkv);
    for (int step = 0; step < g->N; step++) {
        const int src = (g->r - step + g->N) % g->N, more = step + 1 < g->N;
        void *h = more ? g->comm.start(g->comm.ctx, bf.blk[cur], bf.blk[cur ^ 1], bf.bytes) : NULL;
        if (more) g->sent += bf.bytes;
        int ldkv; /* the own block from qkv itself, the others as they arrived */
        const void *kv = block_rows(s, qkv, bf.blk[cur], bf.x, step, src, &ldkv);
        for (int qk = 0; qk < 2; qk++)
            for (int kk = 0; kk < 2; kk++) {
                int ok;
                tsr_ring_block k = block_of(g, s, a, qkv, kv, ldkv, qk, kk, src, slopes, var, &ok);
                if (ok)
                    be->ring_forward(be, a->ring_acc + (size_t)qk * s->c * s->C,
                                     lse + (size_t)qk * s->c, &k, started[qk]++ > 0,
                                     a->ring_scratch);
            }
        if (more) g->comm.wait(g->comm.ctx, h), cur ^= 1;
    }
    be->f32_to_act(be, atty, a->ring_acc, (size_t)s->B * s->Tl * s->C);
}

void ring_attention_forward(tsr_ring *g, const tsr_backend *be, tsr_acts *a, void *atty,
                            float *lse, const void *qkv, const float *slopes,
                            const tsr_attn_var *var, int B, int T, int NH, int KVH, int hs) {
    const ring_shape s = shape_of(g, be, B, T, NH, KVH, hs, var, NULL);
    ring_fwd(g, be, a, atty, lse, qkv, slopes, var, &s);
}

void ring_latent_forward(tsr_ring *g, const tsr_backend *be, tsr_acts *a, void *atty,
                         float *lse, const void *qkv, const tsr_attn_var *var,
                         const tsr_ring_payload *pay, int B, int T, int NH, int hs) {
    const ring_shape s = shape_of(g, be, B, T, NH, NH, hs, var, pay);
    ring_fwd(g, be, a, atty, lse, qkv, NULL, var, &s);
}

/* Step `step`'s blocks of the backward: dq into dq (rows QKV apart), the key/value gradients of
 * the block held (src's) into dkv (rows KVW apart) */
static void blocks_backward(tsr_ring *g, const tsr_backend *be, tsr_acts *a, const ring_shape *s,
                            float *dkv, const void *kv, int ldkv, int src, const void *datty,
                            const void *qkv, const void *atty, const float *lse,
                            const float *slopes, const tsr_attn_var *var) {
    for (int qk = 0; qk < 2; qk++)
        for (int kk = 0; kk < 2; kk++) {
            int ok;
            tsr_ring_block k = block_of(g, s, a, qkv, kv, ldkv, qk, kk, src, slopes, var, &ok);
            if (!ok) continue;
            const size_t q0 = (size_t)qk * s->c;
            be->ring_backward(be, a->ring_acc + q0 * s->QKV, (int)s->QKV,
                              dkv + (size_t)kk * s->c * s->KVW, (int)s->KVW,
                              (const char *)datty + q0 * s->C * s->e,
                              (const char *)atty + q0 * s->C * s->e, lse + q0, &k,
                              a->ring_scratch);
        }
}

/* The backward's passes: dq into a->ring_acc (rows QKV, the key/value columns zero); returns the
 * own block's gradient summed over the group (rows W fp32, home after the last hop). Each step's
 * key/value gradients of the block held (a latent ring's turned into its payload's) join the sum
 * that arrived with it and go on. */
static const float *ring_bwd(tsr_ring *g, const tsr_backend *be, tsr_acts *a, const void *datty,
                             const void *qkv, const void *atty, const float *lse,
                             const float *slopes, const tsr_attn_var *var, const ring_shape *s) {
    const ring_bufs bf = bufs_of(a, s);
    const size_t rows = (size_t)s->B * s->Tl, dkb = rows * s->W * sizeof(float);
    /* the gradients travelling (sent from travel, arriving in spare) and this step's own terms;
     * a latent ring's key/value gradients of the block held after them */
    float *travel = a->ring_dkv + rows * s->W, *spare = a->ring_dkv, *mine = travel + rows * s->W;
    float *dkv = mine + rows * s->W;
    void *hd = NULL;
    int cur = 0;
    be->zero(be, a->ring_acc, rows * s->QKV * sizeof(float));
    pack_block(be, s, bf.blk[0], qkv);
    for (int step = 0; step < g->N; step++) {
        const int src = (g->r - step + g->N) % g->N, more = step + 1 < g->N;
        void *hk = more ? g->comm.start(g->comm.ctx, bf.blk[cur], bf.blk[cur ^ 1], bf.bytes) : NULL;
        if (more) g->sent += bf.bytes;
        float *dst = step ? mine : travel; /* the own block's terms start the travelling sum */
        float *d = s->pay ? dkv : dst;
        int ldkv;
        const void *kv = block_rows(s, qkv, bf.blk[cur], bf.x, step, src, &ldkv);
        be->zero(be, d, rows * s->KVW * sizeof(float));
        blocks_backward(g, be, a, s, d, kv, ldkv, src, datty, qkv, atty, lse, slopes, var);
        if (s->pay) s->pay->contract(s->pay->ctx, dst, dkv, bf.blk[cur], src);
        if (step) { /* src's sum so far arrived from the previous rank: add this rank's terms */
            g->comm.wait(g->comm.ctx, hd);
            float *in = spare;
            spare = travel, travel = in;
            be->add_f32(be, travel, mine, rows * s->W);
        }
        hd = g->comm.start(g->comm.ctx, travel, spare, dkb); /* on to the next rank */
        g->sent += dkb;
        if (more) g->comm.wait(g->comm.ctx, hk), cur ^= 1;
    }
    g->comm.wait(g->comm.ctx, hd); /* this rank's block, summed over the group, is home */
    return spare;
}

void ring_attention_backward(tsr_ring *g, const tsr_backend *be, tsr_acts *a, void *dqkv,
                             const void *datty, const void *qkv, const void *atty,
                             const float *lse, const float *slopes, const tsr_attn_var *var,
                             int B, int T, int NH, int KVH, int hs) {
    const ring_shape s = shape_of(g, be, B, T, NH, KVH, hs, var, NULL);
    const size_t rows = (size_t)B * s.Tl;
    const float *home = ring_bwd(g, be, a, datty, qkv, atty, lse, slopes, var, &s);
    be->copy_rows(be, a->ring_acc + s.QW, s.QKV * sizeof(float), home, s.KVW * sizeof(float),
                  s.KVW * sizeof(float), rows);
    be->f32_to_act(be, dqkv, a->ring_acc, rows * s.QKV);
}

const float *ring_latent_backward(tsr_ring *g, const tsr_backend *be, tsr_acts *a, void *dqkv,
                                  const void *datty, const void *qkv, const void *atty,
                                  const float *lse, const tsr_attn_var *var,
                                  const tsr_ring_payload *pay, int B, int T, int NH, int hs) {
    const ring_shape s = shape_of(g, be, B, T, NH, NH, hs, var, pay);
    const float *home = ring_bwd(g, be, a, datty, qkv, atty, lse, NULL, var, &s);
    be->f32_to_act(be, dqkv, a->ring_acc, (size_t)B * s.Tl * s.QKV);
    return home;
}

struct tsr_group *ring_mpi_group(const tsr_ring *g) {
    return g->comm.start == mpi_start ? g->comm.ctx : NULL;
}
