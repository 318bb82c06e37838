/* tcu_cudnn_graph.c — the refusals, the tensor table and the two operation graphs of cuDNN's
 * fused attention (tcu_cudnn.h): the composite forward (research/cudnn-sdpa.md §1.2) and the
 * deterministic composite backward (§1.3, dQ written by its matmul), built descriptor by
 * descriptor through the backend API. Logical dims are (B, H, S, D); layouts are strides only. */
#include "tcu_cudnn_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

const char *tcu_cudnn_refusal(tcu_cudnn_shape sh, const float *alibi_slopes, const int32_t *seq,
                              const tsr_attn_var *var, int bwd, tsr_grad_mode mode) {
    if (seq) return "document mask (seq): cuDNN takes packed documents only as ragged batches, "
                    "which tessera's graphs do not build";
    if (alibi_slopes) return "ALiBi: not in tessera's cuDNN graphs";
    if (var && var->window > 0) return "sliding window: not in tessera's cuDNN graphs";
    if (var && var->sinks) return "attention sinks: not in tessera's cuDNN graphs";
    if (var && var->softcap > 0) return "soft cap: not in tessera's cuDNN graphs";
    if (var && var->scale > 0)
        return "a score scale other than 1/sqrt(hs): not in tessera's cuDNN graphs";
    if (sh.hs != 32 && sh.hs != 64 && sh.hs != 128)
        return "head size not 32, 64 or 128 (hs 256 runs on the own kernels)";
    if (sh.B < 1 || sh.T < 1 || sh.KVH < 1 || sh.NH % sh.KVH) return "not a valid shape";
    if (bwd && mode != TSR_GRAD_SET) return "gradient mode add: cuDNN writes dq, dk, dv";
    if (bwd && sh.T == 1) return "backward at T = 1: unsupported by cuDNN";
    return NULL;
}

/* one tensor's row of the table */
static tcu_cudnn_tensor row(int64_t uid, int fp32, const int64_t d[4], const int64_t s[4],
                            tcu_cudnn_buf buf, int64_t off) {
    tcu_cudnn_tensor t = {.uid = uid, .fp32 = fp32, .buf = buf, .offset = off};
    memcpy(t.dim, d, sizeof t.dim);
    memcpy(t.stride, s, sizeof t.stride);
    return t;
}

int tcu_cudnn_tensors(tcu_cudnn_shape sh, int bwd, tcu_cudnn_tensor *t) {
    const int64_t B = sh.B, T = sh.T, NH = sh.NH, KVH = sh.KVH, hs = sh.hs;
    const int64_t QKV = (NH + 2 * KVH) * hs, ko = NH * hs, vo = (NH + KVH) * hs;
    const int64_t dq[4] = {B, NH, T, hs}, dkv[4] = {B, KVH, T, hs}, dkt[4] = {B, KVH, hs, T};
    const int64_t sp[4] = {T * QKV, hs, QKV, 1}, spt[4] = {T * QKV, hs, 1, QKV};
    const int64_t dro[4] = {B, NH, T, hs}, so[4] = {T * NH * hs, hs, NH * hs, 1};
    const int64_t dst[4] = {B, NH, T, 1}, sst[4] = {NH * T, T, 1, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    int n = 0;
    t[n++] = row(TCU_CD_Q, 0, dq, sp, TCU_BUF_QKV, 0);
    t[n++] = row(TCU_CD_K, 0, dkt, spt, TCU_BUF_QKV, ko);
    t[n++] = bwd ? row(TCU_CD_V, 0, dkt, spt, TCU_BUF_QKV, vo) : row(TCU_CD_V, 0, dkv, sp, TCU_BUF_QKV, vo);
    t[n++] = row(TCU_CD_O, 0, dro, so, TCU_BUF_OUT, 0);
    t[n++] = row(TCU_CD_STATS, 1, dst, sst, TCU_BUF_LSE, 0);
    t[n++] = row(TCU_CD_SCALE, 1, one, one, TCU_BUF_HOST, 0);
    t[n++] = row(TCU_CD_NEG_INF, 1, one, one, TCU_BUF_HOST, 1);
    if (!bwd) return n;
    t[n++] = row(TCU_CD_DO, 0, dro, so, TCU_BUF_DOUT, 0);
    t[n++] = row(TCU_CD_DQ, 0, dq, sp, TCU_BUF_DQKV, 0);
    t[n++] = row(TCU_CD_DK, 0, dkv, sp, TCU_BUF_DQKV, ko);
    t[n++] = row(TCU_CD_DV, 0, dkv, sp, TCU_BUF_DQKV, vo);
    t[n++] = row(TCU_CD_ONE, 1, one, one, TCU_BUF_HOST, 2);
    t[n++] = row(TCU_CD_SOFTMAX_SUM, 1, dst, sst, TCU_BUF_SCRATCH, 0);
    return n;
}

tcu_cudnn_tensor tcu_cudnn_k_view(tcu_cudnn_shape sh) {
    tcu_cudnn_tensor tab[TCU_CD_UID_COUNT];
    tcu_cudnn_tensors(sh, 1, tab);
    tcu_cudnn_tensor k = tab[TCU_CD_K - 1];
    const int64_t d = k.dim[2], s = k.stride[2];
    k.dim[2] = k.dim[3], k.stride[2] = k.stride[3];
    k.dim[3] = d, k.stride[3] = s;
    return k;
}

const char *tcu_cudnn_misaligned(tcu_cudnn_shape sh, int bwd, void *const buf[TCU_BUF_COUNT],
                                 const void *ws) {
    static const char *const names[TCU_CD_UID_COUNT] = {
        [TCU_CD_Q] = "q", [TCU_CD_K] = "k", [TCU_CD_V] = "v", [TCU_CD_O] = "out",
        [TCU_CD_STATS] = "lse", [TCU_CD_DO] = "dout", [TCU_CD_DQ] = "dq", [TCU_CD_DK] = "dk",
        [TCU_CD_DV] = "dv", [TCU_CD_SOFTMAX_SUM] = "the scratch's softmax_sum"};
    tcu_cudnn_tensor tab[TCU_CD_UID_COUNT];
    const int n = tcu_cudnn_tensors(sh, bwd, tab);
    if ((uintptr_t)ws % 16) return "a device buffer not 16-byte aligned (the workspace)";
    for (int i = 0; i < n; i++) {
        if (tab[i].buf == TCU_BUF_HOST) continue;
        const uintptr_t p =
            (uintptr_t)buf[tab[i].buf] + (uintptr_t)tab[i].offset * (tab[i].fp32 ? 4 : 2);
        if (p % 16 == 0) continue;
        static char why[96];
        snprintf(why, sizeof why, "a device buffer not 16-byte aligned (%s)", names[tab[i].uid]);
        return why;
    }
    return NULL;
}

tcu_att_backend tcu_cudnn_model_backend(tcu_att_backend asked, int doc, int alibi, int var,
                                        const char **why) {
    *why = doc     ? "the model's document mask: not in tessera's cuDNN graphs"
           : alibi ? "the model's ALiBi: not in tessera's cuDNN graphs"
           : var   ? "the model's attention variants (window, sinks, soft cap, scale): not in "
                     "tessera's cuDNN graphs"
                   : NULL;
    return *why ? TCU_ATT_OWN : asked;
}

#ifndef TCU_HAVE_CUDNN
int tcu_cudnn_graph_check(tcu_cudnn_shape sh, int bwd, int *ops, char *why, size_t n) {
    (void)sh, (void)bwd;
    *ops = 0;
    snprintf(why, n, "%s", tcu_cudnn_load());
    return -1;
}
#else

/* ---- descriptor helpers: each does nothing once g has failed ---- */

static void fail(cd_graph *g, const char *what, cudnnStatus_t st) {
    if (g->failed) return;
    g->failed = 1;
    cd_why(what, st, g->why, sizeof g->why);
}

static cudnnBackendDescriptor_t make(cd_graph *g, cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = NULL;
    if (g->failed) return NULL;
    if (g->ndesc == CD_MAX_DESC) {
        g->failed = 1;
        snprintf(g->why, sizeof g->why, "more than %d descriptors in one graph", CD_MAX_DESC);
        return NULL;
    }
    cudnnStatus_t st = g->api->cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) fail(g, "cudnnBackendCreateDescriptor", st);
    else g->desc[g->ndesc++] = d;
    return d;
}

static void set(cd_graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                cudnnBackendAttributeType_t type, int64_t count, const void *v) {
    if (g->failed) return;
    cudnnStatus_t st = g->api->cudnnBackendSetAttribute(d, a, type, count, v);
    if (st != CUDNN_STATUS_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "cudnnBackendSetAttribute(%d)", (int)a);
        fail(g, what, st);
    }
}

static void finalize(cd_graph *g, cudnnBackendDescriptor_t d, const char *what) {
    if (g->failed) return;
    cudnnStatus_t st = g->api->cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) fail(g, what, st);
}

static void set_desc(cd_graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                     cudnnBackendDescriptor_t v) {
    set(g, d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

/* a tensor: dims and strides (elements), type, UID; virt: intermediate, byval: host scalar */
static cudnnBackendDescriptor_t tensor(cd_graph *g, int64_t uid, cudnnDataType_t type,
                                       const int64_t dim[4], const int64_t stride[4], bool virt,
                                       bool byval) {
    cudnnBackendDescriptor_t t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride);
    set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (byval) set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
    finalize(g, t, "tensor");
    return t;
}

/* a virtual tensor with packed (row-major) strides */
static cudnnBackendDescriptor_t virt(cd_graph *g, cudnnDataType_t type, int64_t d0, int64_t d1,
                                     int64_t d2, int64_t d3) {
    const int64_t dim[4] = {d0, d1, d2, d3};
    const int64_t stride[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
    return tensor(g, g->next_uid++, type, dim, stride, true, false);
}

/* a virtual (d0, d1, d3, d2) view of a (d0, d1, d2, d3) row-major tensor: its transpose */
static cudnnBackendDescriptor_t virt_t(cd_graph *g, cudnnDataType_t type, int64_t d0,
                                       int64_t d1, int64_t d2, int64_t d3) {
    const int64_t dim[4] = {d0, d1, d3, d2};
    const int64_t stride[4] = {d1 * d2 * d3, d2 * d3, 1, d3};
    return tensor(g, g->next_uid++, type, dim, stride, true, false);
}

static void add_op(cd_graph *g, cudnnBackendDescriptor_t op, const char *what) {
    finalize(g, op, what);
    if (g->failed) return;
    if (g->nops == CD_MAX_OPS) {
        g->failed = 1;
        snprintf(g->why, sizeof g->why, "more than %d operations in one graph", CD_MAX_OPS);
        return;
    }
    g->op[g->nops++] = op;
}

/* y = mode(x, b[, t]) with math in prec; axis >= 0: GEN_INDEX's axis */
static void pw(cd_graph *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
               cudnnDataType_t prec, int64_t axis) {
    cudnnBackendDescriptor_t p = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(g, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(g, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(g, p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(g, p, "pointwise descriptor");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    add_op(g, op, "pointwise operation");
}

/* y = op(x, b) in fp32 */
static void pw2(cd_graph *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y) {
    pw(g, mode, x, b, NULL, y, CUDNN_DATA_FLOAT, -1);
}

/* c = a b (batched over the first two dims, b's heads broadcast for GQA), fp32 products */
static void matmul(cd_graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                   cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t m = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(g, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    finalize(g, m, "matmul descriptor");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m);
    add_op(g, op, "matmul operation");
}

/* y = reduce(x) over the dims where y is smaller, in fp32 */
static void reduce(cd_graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    finalize(g, r, "reduction descriptor");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    add_op(g, op, "reduction operation");
}

/* y = x seen through y's dims and strides */
static void reshape(cd_graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add_op(g, op, "reshape operation");
}

/* ---- the graphs ---- */

typedef struct cd_io {
    cudnnBackendDescriptor_t t[TCU_CD_UID_COUNT]; /* by UID */
    int64_t B, H, T;                              /* query heads */
} cd_io;

static void io_tensors(cd_graph *g, cd_io *io, tcu_cudnn_shape sh, int bwd) {
    tcu_cudnn_tensor tab[TCU_CD_UID_COUNT];
    const int n = tcu_cudnn_tensors(sh, bwd, tab);
    for (int i = 0; i < n; i++)
        io->t[tab[i].uid] = tensor(g, tab[i].uid, tab[i].fp32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16,
                                   tab[i].dim, tab[i].stride, false, tab[i].buf == TCU_BUF_HOST);
    io->B = sh.B, io->H = sh.NH, io->T = sh.T;
}

/* s (B,H,T,T) fp32 -> the causal mask applied: keys after the query row get -inf */
static cudnnBackendDescriptor_t causal(cd_graph *g, const cd_io *io, cudnnBackendDescriptor_t s) {
    const int64_t B = io->B, H = io->H, T = io->T;
    cudnnBackendDescriptor_t r = virt(g, CUDNN_DATA_INT32, B, H, T, T);
    cudnnBackendDescriptor_t c = virt(g, CUDNN_DATA_INT32, B, H, T, T);
    cudnnBackendDescriptor_t keep = virt(g, CUDNN_DATA_BOOLEAN, B, H, T, T);
    cudnnBackendDescriptor_t y = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    pw(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, r, CUDNN_DATA_INT32, 2);
    pw(g, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, c, CUDNN_DATA_INT32, 3);
    pw(g, CUDNN_POINTWISE_CMP_GE, r, c, NULL, keep, CUDNN_DATA_BOOLEAN, -1);
    pw(g, CUDNN_POINTWISE_BINARY_SELECT, s, io->t[TCU_CD_NEG_INF], keep, y, CUDNN_DATA_FLOAT, -1);
    return y;
}

/* the scaled scores of q and k: (B,H,T,T) fp32 */
static cudnnBackendDescriptor_t scores(cd_graph *g, const cd_io *io) {
    const int64_t B = io->B, H = io->H, T = io->T;
    cudnnBackendDescriptor_t s = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    cudnnBackendDescriptor_t s1 = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    matmul(g, io->t[TCU_CD_Q], io->t[TCU_CD_K], s);
    pw2(g, CUDNN_POINTWISE_MUL, s, io->t[TCU_CD_SCALE], s1);
    return s1;
}

/* forward: o = softmax(causal(scale q k^T)) v, Stats = max + log sum exp (natural log) */
static void forward(cd_graph *g, const cd_io *io) {
    const int64_t B = io->B, H = io->H, T = io->T;
    cudnnBackendDescriptor_t s = causal(g, io, scores(g, io));
    cudnnBackendDescriptor_t m = virt(g, CUDNN_DATA_FLOAT, B, H, T, 1);
    cudnnBackendDescriptor_t d = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    cudnnBackendDescriptor_t e = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    cudnnBackendDescriptor_t z = virt(g, CUDNN_DATA_FLOAT, B, H, T, 1);
    cudnnBackendDescriptor_t lz = virt(g, CUDNN_DATA_FLOAT, B, H, T, 1);
    cudnnBackendDescriptor_t p = virt(g, CUDNN_DATA_BFLOAT16, B, H, T, T);
    reduce(g, CUDNN_REDUCE_TENSOR_MAX, s, m);
    pw2(g, CUDNN_POINTWISE_SUB, s, m, d);
    pw(g, CUDNN_POINTWISE_EXP, d, NULL, NULL, e, CUDNN_DATA_FLOAT, -1);
    reduce(g, CUDNN_REDUCE_TENSOR_ADD, e, z);
    pw(g, CUDNN_POINTWISE_LOG, z, NULL, NULL, lz, CUDNN_DATA_FLOAT, -1);
    pw2(g, CUDNN_POINTWISE_ADD, m, lz, io->t[TCU_CD_STATS]);
    pw2(g, CUDNN_POINTWISE_DIV, e, z, p);
    matmul(g, p, io->t[TCU_CD_V], io->t[TCU_CD_O]);
}

/* out = a b, through a full-head bf16 product reduced over each key/value head's query heads
 * when KVH < NH (GQA); out (B,KVH,T,hs) */
static void matmul_kv(cd_graph *g, const cd_io *io, cudnnBackendDescriptor_t a,
                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out, int gqa,
                      int64_t hs) {
    if (!gqa) {
        matmul(g, a, b, out);
        return;
    }
    cudnnBackendDescriptor_t full = virt(g, CUDNN_DATA_BFLOAT16, io->B, io->H, io->T, hs);
    matmul(g, a, b, full);
    reduce(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

/* backward, deterministic: softmax_sum = rowsum(dO O); P recomputed from Stats; dV = P^T dO;
 * dS = P (dO V^T - softmax_sum) scale; dK = dS^T Q; dQ = dS K (no fp32 accumulator) */
static void backward(cd_graph *g, const cd_io *io, tcu_cudnn_shape sh) {
    const int64_t B = io->B, H = io->H, T = io->T, hs = sh.hs;
    const int gqa = sh.KVH < sh.NH;
    cudnnBackendDescriptor_t const *t = io->t;
    cudnnBackendDescriptor_t dd = virt(g, CUDNN_DATA_FLOAT, B, H, T, hs);
    cudnnBackendDescriptor_t rs = virt(g, CUDNN_DATA_FLOAT, B, H, T, 1);
    pw2(g, CUDNN_POINTWISE_MUL, t[TCU_CD_DO], t[TCU_CD_O], dd);
    reduce(g, CUDNN_REDUCE_TENSOR_ADD, dd, rs);
    pw2(g, CUDNN_POINTWISE_MUL, rs, t[TCU_CD_ONE], t[TCU_CD_SOFTMAX_SUM]);
    cudnnBackendDescriptor_t s = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    pw2(g, CUDNN_POINTWISE_SUB, scores(g, io), t[TCU_CD_STATS], s);
    cudnnBackendDescriptor_t p = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    pw(g, CUDNN_POINTWISE_EXP, causal(g, io, s), NULL, NULL, p, CUDNN_DATA_FLOAT, -1);
    cudnnBackendDescriptor_t pt = virt_t(g, CUDNN_DATA_BFLOAT16, B, H, T, T);
    reshape(g, p, pt);
    matmul_kv(g, io, pt, t[TCU_CD_DO], t[TCU_CD_DV], gqa, hs);
    cudnnBackendDescriptor_t dp = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    cudnnBackendDescriptor_t d1 = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    cudnnBackendDescriptor_t d2 = virt(g, CUDNN_DATA_FLOAT, B, H, T, T);
    cudnnBackendDescriptor_t ds = virt(g, CUDNN_DATA_FLOAT, B, H, T, T); /* fp32: the frontend's */
    matmul(g, t[TCU_CD_DO], t[TCU_CD_V], dp);
    pw2(g, CUDNN_POINTWISE_SUB, dp, t[TCU_CD_SOFTMAX_SUM], d1);
    pw2(g, CUDNN_POINTWISE_MUL, d1, p, d2);
    pw2(g, CUDNN_POINTWISE_MUL, d2, t[TCU_CD_SCALE], ds);
    cudnnBackendDescriptor_t dst = virt_t(g, CUDNN_DATA_BFLOAT16, B, H, T, T);
    reshape(g, ds, dst);
    matmul_kv(g, io, dst, t[TCU_CD_Q], t[TCU_CD_DK], gqa, hs);
    const tcu_cudnn_tensor kv = tcu_cudnn_k_view(sh); /* K^T's memory, dims 2 and 3 swapped */
    cudnnBackendDescriptor_t k = tensor(g, g->next_uid++, CUDNN_DATA_BFLOAT16, kv.dim, kv.stride,
                                        true, false);
    reshape(g, t[TCU_CD_K], k);
    matmul(g, ds, k, t[TCU_CD_DQ]);
}

int cd_graph_build(cd_graph *g, tcu_cudnn_shape sh, int bwd, cudnnHandle_t handle) {
    memset(g, 0, sizeof *g);
    g->api = cd_lib();
    g->next_uid = 100;
    if (!g->api) {
        g->failed = 1;
        snprintf(g->why, sizeof g->why, "%s", tcu_cudnn_load());
        return -1;
    }
    cd_io io = {0};
    io_tensors(g, &io, sh, bwd);
    if (bwd) backward(g, &io, sh);
    else forward(g, &io);
    g->opgraph = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, g->opgraph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->op);
    if (handle) set(g, g->opgraph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(g, g->opgraph, bwd ? "the backward's operation graph" : "the forward's operation graph");
    return g->failed ? -1 : 0;
}

void cd_graph_free(cd_graph *g) {
    for (int i = g->ndesc - 1; g->api && i >= 0; i--)
        g->api->cudnnBackendDestroyDescriptor(g->desc[i]);
    g->ndesc = g->nops = 0;
}

int tcu_cudnn_graph_check(tcu_cudnn_shape sh, int bwd, int *ops, char *why, size_t n) {
    cd_graph *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(why, n, "out of host memory");
        return -1;
    }
    const int rc = cd_graph_build(g, sh, bwd, NULL);
    *ops = g->nops;
    snprintf(why, n, "%s", rc ? g->why : "");
    if (g->api) cd_graph_free(g);
    free(g);
    return rc;
}
#endif
