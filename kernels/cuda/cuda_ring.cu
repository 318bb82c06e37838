/* cuda_ring.cu — ring attention's blocks on the attention kernels (cuda_ops.h tcu_ring_forward,
 * tcu_ring_backward; context parallelism, src/model/model_ring.c, docs/parallelism.md).
 *
 * No new attention kernel: a block runs cuda_attention.cu's flash kernels on one sequence of
 * Tp rows laid out in scratch, and three small elementwise kernels move the results.
 *   - a diagonal block (the rank's own chunk against itself): the chunk's rows as they are (each
 *     row's q, k, v), Tp = Tq, a causal mask over them;
 *   - a block whose Tk keys all lie before its Tq queries: the keys' rows (k, v; q zero on the
 *     rows from tcu_attention_keys_row0, the only key rows the kernels read as queries), then
 *     the queries' rows, Tp = Tk + Tq, with the keys from Tk on masked (kend = Tk): every query
 *     sees the block's keys alone, causal order holding by construction. The kernels compute
 *     the query rows' Tq x Tk pairs and (a query tile holding row Tk) those of the few key rows
 *     from row0, nothing of the keys among themselves (docs/cuda.md, the ring's pair counts).
 * The document mask is the kernels' own: the rows' sequence ids are the first positions of their
 * documents (lo), equal along a document and rising along the sequence, so the keys and queries
 * of one document form one run. ALiBi's distances in the kernels are the rows' (Tk + i - j); the
 * whole sequence's differ by the constant delta = qoff - koff - Tk of the block, which moves each
 * query row's scores and log-sum-exp alike: the merge subtracts slope delta from the block's
 * log-sum-exp, and the backward adds it to the merged one it hands the kernels.
 * Forward: the block's out (bf16) and lse, then ring_merge_kernel merges them into acc (fp32) and
 * lse by their log-sum-exp. Backward: the block's dout and the merged out and lse on the query
 * rows (zeros on the key rows from row0, and a log-sum-exp of 1e30 that makes every
 * probability 0 on the key rows), the kernels' dqkv written into scratch (bf16), and
 * ring_add_rows_kernel adds its query rows' dq and its key rows' dk, dv into the fp32 sums. The
 * elementwise kernels: a warp per row (the merge) or a thread per row or element (the others),
 * fixed orders, no atomics: deterministic.
 * Variants (ops.h tsr_attn_var in k->var, cpu_ring.c's maths; docs/cuda.md "Attention variants"):
 * the scale and the soft cap go to the kernels as they are; a window W goes as W - delta, the
 * band in the rows' distances (a query row's position minus a key row's is delta more than
 * theirs), so the kernels' band is the whole sequence's; the sinks do not go to the kernels: the
 * merge starts a row's first block (merge = 0) from its sink's logit, so e^sink counts once in
 * the merged log-sum-exp, and the backward's probabilities (from that lse) are right as they are;
 * the block the caller marks (sink_grad) adds each row's -exp(sink - lse) D to dsinks
 * (ring_sink_grad_kernel).
 */
#include <cmath>

#include "cuda_internal.h"

/* A block's sequence in scratch: Tp rows, the keys past kend masked, the queries from qrow0 */
struct ring_seq {
    int Tp, kend, qrow0;
    int delta; /* ALiBi: the whole sequence's distance minus the rows' */
    int z0;    /* the key rows z0..qrow0 - 1 are read as queries (zeroed), those before never */
};

/* The variants the kernels take for block k (ring_seq q): no sinks, the window as W - delta */
static tsr_attn_var ring_var_of(const tsr_ring_block *k, const ring_seq &q, const char *what) {
    tsr_attn_var v = *k->var;
    v.sinks = nullptr, v.dsinks = nullptr;
    if (v.window > 0) {
        v.window -= q.delta;
        TCU_REQUIRE(v.window >= 1, what,
                    tcu_msg("a block of queries from %d and keys %d..%d lies wholly outside the "
                            "window of %d: the caller skips it (model_ring.c block_seen)",
                            k->qoff, k->koff, k->koff + k->Tk - 1, k->var->window));
    }
    return v;
}

static ring_seq ring_seq_of(const tsr_ring_block *k, const char *what) {
    const bool diag = k->qoff == k->koff && k->Tq == k->Tk;
    TCU_REQUIRE(diag || k->koff + k->Tk <= k->qoff, what,
                tcu_msg("a block of queries %d..%d and keys %d..%d: expected the same rows, or "
                        "every key before every query",
                        k->qoff, k->qoff + k->Tq - 1, k->koff, k->koff + k->Tk - 1));
    if (diag) return {k->Tq, k->Tq, 0, 0, 0};
    return {k->Tk + k->Tq, k->Tk, k->Tk, k->qoff - k->koff - k->Tk,
            tcu_attention_keys_row0(k->Tk, k->Tk + k->Tq)};
}

/* the scratch's buffers for blocks of B sequences of Tp <= T rows, 256-byte aligned */
struct ring_scratch {
    tsr_bf16 *x, *o, *u, *dx; /* (B,T,QKV) rows, (B,T,C) dout / out, (B,T,C) out, (B,T,QKV) */
    float *l;                 /* (B,NH,T) */
    int32_t *sq;              /* (B,T) */
    void *att;                /* the kernels' backward scratch */
    size_t bytes;
};

static size_t ring_align(size_t n) { return (n + 255) / 256 * 256; }

static ring_scratch ring_scratch_at(void *base, int B, int T, int NH, int KVH, int hs) {
    const size_t rows = (size_t)B * T, QKV = (size_t)(NH + 2 * KVH) * hs, C = (size_t)NH * hs;
    const size_t sz[] = {rows * QKV * 2, rows * C * 2, rows * C * 2, rows * QKV * 2,
                         rows * NH * sizeof(float), rows * sizeof(int32_t),
                         tcu_attention_scratch_bytes(B, T, NH, KVH, hs)};
    char *p = static_cast<char *>(base);
    size_t at[7], off = 0;
    for (int i = 0; i < 7; i++) at[i] = off, off += ring_align(sz[i]);
    ring_scratch s;
    s.x = reinterpret_cast<tsr_bf16 *>(p + at[0]), s.o = reinterpret_cast<tsr_bf16 *>(p + at[1]);
    s.u = reinterpret_cast<tsr_bf16 *>(p + at[2]), s.dx = reinterpret_cast<tsr_bf16 *>(p + at[3]);
    s.l = reinterpret_cast<float *>(p + at[4]), s.sq = reinterpret_cast<int32_t *>(p + at[5]);
    s.att = p + at[6];
    s.bytes = off;
    return s;
}

extern "C" size_t tcu_ring_scratch_bytes(int B, int T, int NH, int KVH, int hs) {
    return ring_scratch_at(nullptr, B, T, NH, KVH, hs).bytes;
}

/* The block's sequence: its key rows' k and v (q zero) and its query rows whole, and (document
 * mask) the rows' sequence ids, the first positions of their documents */
static void ring_lay_out(const ring_scratch &r, const tsr_ring_block *k, const ring_seq &q,
                         cudaStream_t st, const char *what) {
    const size_t QKV = (size_t)(k->NH + 2 * k->KVH) * k->hs, C = (size_t)k->NH * k->hs;
    const size_t KVW = (size_t)2 * k->KVH * k->hs, e = sizeof(tsr_bf16);
    TCU_REQUIRE((size_t)k->ldq == QKV, what, "the queries' rows must be whole qkv rows");
    const tsr_bf16 *qp = static_cast<const tsr_bf16 *>(k->q);
    const tsr_bf16 *kp = static_cast<const tsr_bf16 *>(k->kv);
    for (int b = 0; b < k->B; b++) {
        tsr_bf16 *xb = r.x + (size_t)b * q.Tp * QKV;
        tcu_zero(xb + (size_t)q.z0 * QKV, (size_t)(q.qrow0 - q.z0) * QKV * e, st);
        if (q.qrow0)
            tcu_memcpy2d(xb + C, QKV * e, kp + (size_t)b * k->kbs * k->ldkv, (size_t)k->ldkv * e,
                         KVW * e, (size_t)k->Tk, st);
        tcu_memcpy2d(xb + (size_t)q.qrow0 * QKV, QKV * e, qp + (size_t)b * k->qbs * QKV, QKV * e,
                     QKV * e, (size_t)k->Tq, st);
        if (!k->lo) continue;
        int32_t *sb = r.sq + (size_t)b * q.Tp;
        const int32_t *lb = k->lo + (size_t)b * k->T;
        if (q.qrow0) tcu_memcpy_d2d(sb, lb + k->koff, (size_t)k->Tk * sizeof(int32_t), st);
        tcu_memcpy_d2d(sb + q.qrow0, lb + k->qoff, (size_t)k->Tq * sizeof(int32_t), st);
    }
}

/* One query row (b, h, i) of the block, a warp per row (its lanes over the row's hs values, so
 * a warp's loads and stores are contiguous): its out and lse (the whole sequence's: slope delta
 * off) merged into acc and lse by the log-sum-exp, or (first block) written. Every lane computes
 * the row's weights alike; lane 0 stores lse once all have read it. */
__global__ void ring_merge_kernel(float *acc, float *lse, const bf16 *o, const float *l,
                                  const float *slopes, const bf16 *sinks, int delta, int merge,
                                  int B, int NH, int hs, int Tq, int Tp, int qrow0, int qbs) {
    const long row = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32; /* one per warp */
    const int lane = (int)(threadIdx.x & 31);
    if (row >= (long)B * NH * Tq) return;
    const int i = (int)(row % Tq), h = (int)(row / Tq % NH), b = (int)(row / ((long)Tq * NH));
    const size_t C = (size_t)NH * hs;
    float lb = l[((size_t)b * NH + h) * Tp + qrow0 + i];
    if (slopes) lb -= slopes[h] * (float)delta;
    float *a = acc + ((size_t)b * qbs + i) * C + (size_t)h * hs, *L = lse + ((size_t)b * NH + h) * qbs + i;
    const bf16 *ob = o + ((size_t)b * Tp + qrow0 + i) * C + (size_t)h * hs;
    if (!merge && !sinks) {
        for (int d = lane; d < hs; d += 32) a[d] = __bfloat162float(ob[d]);
        if (lane == 0) *L = lb;
        return;
    }
    /* with sinks a row's first block starts from out 0 and lse = its sink */
    const float L0 = merge ? *L : __bfloat162float(sinks[h]);
    if (lb == -INFINITY) { /* the row sees none of the block's keys */
        if (merge) return;
        for (int d = lane; d < hs; d += 32) a[d] = 0.0f;
        if (lane == 0) *L = L0;
        return;
    }
    const float m = fmaxf(L0, lb), w1 = expf(L0 - m), w2 = expf(lb - m);
    const float inv = 1.0f / (w1 + w2);
    for (int d = lane; d < hs; d += 32)
        a[d] = ((merge ? w1 * a[d] : 0.0f) + w2 * __bfloat162float(ob[d])) * inv;
    __syncwarp(); /* every lane has read L */
    if (lane == 0) *L = m + logf(w1 + w2);
}

/* The backward's log-sum-exp rows: 1e30 on the key rows (every probability 0), the merged
 * lse + slope delta on the query rows. Thread per (b, h, row). */
__global__ void ring_lse_kernel(float *l, const float *lse, const float *slopes, int delta,
                                int B, int NH, int Tp, int qrow0, int qbs) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)B * NH * Tp) return;
    const int r = (int)(idx % Tp), h = (int)(idx / Tp % NH), b = (int)(idx / ((long)Tp * NH));
    float v = 1e30f;
    if (r >= qrow0) {
        v = lse[((size_t)b * NH + h) * qbs + (r - qrow0)];
        if (slopes) v += slopes[h] * (float)delta;
    }
    l[idx] = v;
}

/* dsinks[h] += -sum_{b, i < Tq} exp(sinks[h] - lse[b,h,i]) (dout_i . out_i) over the block's
 * query rows (lse the merged one, rows qbs apart): one block per head, thread t summing rows t,
 * t + 256, ... in order (each row's dot product over hs in order), then a fixed tree */
__global__ void __launch_bounds__(256)
    ring_sink_grad_kernel(float *dsinks, const bf16 *sinks, const float *lse, const bf16 *dout,
                          const bf16 *out, int B, int NH, int hs, int Tq, int qbs) {
    __shared__ float red[256];
    const int h = blockIdx.x;
    const size_t C = (size_t)NH * hs;
    float acc = 0.0f;
    for (long r = threadIdx.x; r < (long)B * Tq; r += 256) {
        const int b = (int)(r / Tq), i = (int)(r % Tq);
        const size_t row = ((size_t)b * qbs + i) * C + (size_t)h * hs;
        float D = 0.0f;
        for (int d = 0; d < hs; d++)
            D = fmaf(__bfloat162float(dout[row + d]), __bfloat162float(out[row + d]), D);
        acc -= expf(__bfloat162float(sinks[h]) - lse[((size_t)b * NH + h) * qbs + i]) * D;
    }
    tcu_block256_add(dsinks + h, acc, red);
}

/* dst[(b dbs + r) ldd + c] += src[(b sbs + r) lds + c] (bf16 widened), r < rows, c < width;
 * thread per element */
__global__ void ring_add_rows_kernel(float *dst, int ldd, int dbs, const bf16 *src, int lds,
                                     int sbs, int width, int rows, int B) {
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)B * rows * width) return;
    const int c = (int)(idx % width), r = (int)(idx / width % rows), b = (int)(idx / ((long)width * rows));
    dst[((size_t)b * dbs + r) * ldd + c] += __bfloat162float(src[((size_t)b * sbs + r) * lds + c]);
}

extern "C" void tcu_ring_forward(float *acc, float *lse, const tsr_ring_block *k, int merge,
                                 void *scratch, tcu_stream s) {
    const char *what = "tcu_ring_forward";
    TCU_REQUIRE(acc && lse && k && k->q && k->kv && scratch, what,
                "acc, lse, the block's q and kv, and scratch must not be NULL");
    const ring_seq q = ring_seq_of(k, what);
    const ring_scratch r = ring_scratch_at(scratch, k->B, q.Tp, k->NH, k->KVH, k->hs);
    cudaStream_t st = reinterpret_cast<cudaStream_t>(s);
    ring_lay_out(r, k, q, st, what);
    tsr_attn_var v = {};
    if (k->var) v = ring_var_of(k, q, what);
    tcu_attention_forward_keys(r.o, r.l, r.x, k->slopes, k->lo ? r.sq : nullptr,
                               k->var ? &v : nullptr, k->B, q.Tp, q.kend, k->NH, k->KVH, k->hs, s);
    const long rows = (long)k->B * k->NH * k->Tq;
    ring_merge_kernel<<<tcu_blocks((size_t)rows * 32, 128), 128, 0, st>>>(
        acc, lse, reinterpret_cast<const bf16 *>(r.o), r.l, k->slopes,
        k->var ? reinterpret_cast<const bf16 *>(k->var->sinks) : nullptr, q.delta, merge, k->B,
        k->NH, k->hs, k->Tq, q.Tp, q.qrow0, k->qbs);
    TCU_CHECK_LAUNCH("tcu_ring_forward: the log-sum-exp merge");
}

/* dst's rows += src's rows (B sequences): one ring_add_rows_kernel launch */
static void ring_add_rows(float *dst, int ldd, int dbs, const tsr_bf16 *src, int lds, int sbs,
                          int width, int rows, int B, cudaStream_t st) {
    const size_t n = (size_t)B * rows * width;
    ring_add_rows_kernel<<<tcu_blocks(n, 256), 256, 0, st>>>(
        dst, ldd, dbs, reinterpret_cast<const bf16 *>(src), lds, sbs, width, rows, B);
    TCU_CHECK_LAUNCH("tcu_ring_backward: the gradients into their sums");
}

extern "C" void tcu_ring_backward(float *dq, int lddq, float *dkv, int lddkv, const tsr_bf16 *dout,
                                  const tsr_bf16 *out, const float *lse, const tsr_ring_block *k,
                                  void *scratch, tcu_stream s) {
    const char *what = "tcu_ring_backward";
    TCU_REQUIRE(dq && dkv && dout && out && lse && k && k->q && k->kv && scratch, what,
                "dq, dkv, dout, out, lse, the block's q and kv, and scratch must not be NULL");
    const ring_seq q = ring_seq_of(k, what);
    const ring_scratch r = ring_scratch_at(scratch, k->B, q.Tp, k->NH, k->KVH, k->hs);
    cudaStream_t st = reinterpret_cast<cudaStream_t>(s);
    const int B = k->B, NH = k->NH, C = NH * k->hs, QKV = (NH + 2 * k->KVH) * k->hs;
    const size_t e = sizeof(tsr_bf16), rows = (size_t)B * q.Tp;
    ring_lay_out(r, k, q, st, what);
    for (int b = 0; b < B; b++) {
        const size_t to = ((size_t)b * q.Tp + q.qrow0) * C, from = (size_t)b * k->qbs * C;
        const size_t zr = ((size_t)b * q.Tp + q.z0) * C, zn = (size_t)(q.qrow0 - q.z0) * C * e;
        tcu_zero(r.o + zr, zn, st), tcu_zero(r.u + zr, zn, st); /* the key rows read */
        tcu_memcpy_d2d(r.o + to, dout + from, (size_t)k->Tq * C * e, st);
        tcu_memcpy_d2d(r.u + to, out + from, (size_t)k->Tq * C * e, st);
    }
    ring_lse_kernel<<<tcu_blocks(rows * NH, 256), 256, 0, st>>>(r.l, lse, k->slopes, q.delta, B,
                                                                NH, q.Tp, q.qrow0, k->qbs);
    TCU_CHECK_LAUNCH("tcu_ring_backward: the log-sum-exp rows");
    tsr_attn_var v = {};
    if (k->var) v = ring_var_of(k, q, what);
    tcu_attention_backward_keys(r.dx, r.o, r.x, r.u, r.l, k->slopes, k->lo ? r.sq : nullptr,
                                k->var ? &v : nullptr, r.att, B, q.Tp, q.kend, NH, k->KVH, k->hs,
                                TSR_GRAD_SET, s);
    if (k->sink_grad && k->var && k->var->sinks && k->var->dsinks) {
        ring_sink_grad_kernel<<<NH, 256, 0, st>>>(
            k->var->dsinks, reinterpret_cast<const bf16 *>(k->var->sinks), lse,
            reinterpret_cast<const bf16 *>(dout), reinterpret_cast<const bf16 *>(out), B, NH,
            k->hs, k->Tq, k->qbs);
        TCU_CHECK_LAUNCH("tcu_ring_backward: the sink gradients");
    }
    ring_add_rows(dq, lddq, k->qbs, r.dx + (size_t)q.qrow0 * QKV, QKV, q.Tp, C, k->Tq, B, st);
    ring_add_rows(dkv, lddkv, k->kbs, r.dx + C, QKV, q.Tp, 2 * k->KVH * k->hs, k->Tk, B, st);
}
