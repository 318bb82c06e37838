/* gpu_route_ds.c — DeepSeek's router on the CUDA backend (gpu_mla.h; docs/cuda.md "DeepSeek's
 * router"): the N x E logits (and the correction bias) copied to the host as fp32, the CPU's
 * kernels/cpu/cpu_moe_route.h on them, the routing copied back; the backward likewise. The
 * selection (groups ranked by their two best, the top-k among them) is a sort per row that no
 * tcu_* op composes, and the copy is N E numbers a layer, small beside the layer's activations;
 * the choice is then the CPU's, bit for bit, on the same bf16 logits. */
#include <stdint.h>
#include <stdlib.h>

#include "common.h"
#include "cpu/cpu_moe_route.h"
#include "cuda_ops.h"
#include "gpu/gpu_grown.h"
#include "gpu/gpu_mla.h"
#include "gpu/gpu_profile.h"

#define STREAM(be) ((tcu_stream)(be)->ctx)

/* n bf16 of src on the device, as fp32 on the host (a new buffer); the device copy in tmp */
static float *host_f32(const tsr_backend *be, float *tmp, const void *src, size_t n) {
    float *h = tsr_malloc(n * sizeof *h);
    tcu_bf16_to_f32(tmp, src, n, STREAM(be));
    tcu_memcpy_d2h(h, tmp, n * sizeof *h, STREAM(be));
    return h;
}

/* n bytes of src on the device on the host (a new buffer) */
static void *host_copy(const tsr_backend *be, const void *src, size_t n) {
    void *h = tsr_malloc(n ? n : 1);
    tcu_memcpy_d2h(h, src, n, STREAM(be));
    return h;
}

static void to_dev(const tsr_backend *be, void *dst, const void *h, size_t n) {
    tcu_memcpy_h2d(dst, h, n, STREAM(be));
}

/* a device fp32 buffer of n (the router's; grown as needed) */
static float *dev_f32(const tsr_backend *be, size_t n) {
    static gpu_grown s;
    return gpu_grown_get(STREAM(be), &s, n * sizeof(float), "DeepSeek's router (fp32 logits)");
}

/* The host's outputs of one route, copied to the device as cpu_moe_route_ds wrote them */
typedef struct route_host {
    float *probs, *lse, *wts, *stats;
    int32_t *idx, *offs, *rows, *slot;
} route_host;

static route_host route_alloc(size_t N, size_t E, size_t K) {
    const size_t NK = N * K, i = sizeof(int32_t), f = sizeof(float);
    return (route_host){tsr_malloc(N * E * f + 1), tsr_malloc(N * f + 1), tsr_malloc(NK * f + 1),
                        tsr_malloc(2 * f), tsr_malloc(NK * i + 1), tsr_malloc((E + 1) * i),
                        tsr_malloc(NK * i + 1), tsr_malloc(NK * i + 1)};
}

static void route_free(route_host *h) {
    free(h->probs), free(h->lse), free(h->wts), free(h->stats);
    free(h->idx), free(h->offs), free(h->rows), free(h->slot);
}

void gpu_moe_route_ds(const tsr_backend *be, float *probs, float *lse, int32_t *idx, float *wts,
                      int32_t *offs, int32_t *rows, int32_t *slot, float *stats,
                      const void *logits, int N, int E, int K, const tsr_moe_router *r) {
    const size_t n = (size_t)N, e = (size_t)E, NK = n * K, f = sizeof(float), i = sizeof(int32_t);
    const int prof = gpu_prof_begin(STREAM(be), "moe_route_ds", N, E, K);
    float *tmp = dev_f32(be, n * e > e ? n * e : e);
    float *hl = host_f32(be, tmp, logits, n * e);
    tsr_moe_router hr = *r;
    float *hb = r->bias ? host_f32(be, tmp, r->bias, e) : NULL; /* (the weights' bf16 copy) */
    hr.bias = hb;
    route_host h = route_alloc(n, e, (size_t)K);
    cpu_moe_route_ds(h.probs, h.lse, h.idx, h.wts, h.offs, h.rows, h.slot, h.stats, hl, N, E, K,
                     &hr);
    to_dev(be, probs, h.probs, n * e * f), to_dev(be, lse, h.lse, n * f);
    to_dev(be, idx, h.idx, NK * i), to_dev(be, wts, h.wts, NK * f);
    to_dev(be, offs, h.offs, (e + 1) * i), to_dev(be, rows, h.rows, NK * i);
    to_dev(be, slot, h.slot, NK * i), to_dev(be, stats, h.stats, 2 * f);
    tcu_sync(STREAM(be)); /* (the host buffers are freed next) */
    route_free(&h);
    free(hl), free(hb);
    gpu_prof_end(STREAM(be), prof);
}

void gpu_moe_router_ds_backward(const tsr_backend *be, void *dlogits, const float *dwts,
                                const float *probs, const float *lse, const int32_t *idx,
                                const float *wts, const int32_t *offs, int N, int E, int K,
                                const tsr_moe_router *r, float aux_w, float z_w) {
    const size_t n = (size_t)N, e = (size_t)E, NK = n * K, f = sizeof(float), i = sizeof(int32_t);
    const int prof = gpu_prof_begin(STREAM(be), "moe_router_ds_backward", N, E, K);
    float *hdw = host_copy(be, dwts, NK * f), *hp = host_copy(be, probs, n * e * f);
    float *hlse = host_copy(be, lse, n * f), *hw = host_copy(be, wts, NK * f);
    int32_t *hidx = host_copy(be, idx, NK * i), *hoffs = host_copy(be, offs, (e + 1) * i);
    float *hd = tsr_malloc(n * e * f + 1), *tmp = dev_f32(be, n * e > e ? n * e : e);
    tsr_moe_router hr = *r;
    hr.bias = NULL; /* (the device's; the backward reads no bias) */
    cpu_moe_router_ds_backward(hd, hdw, hp, hlse, hidx, hw, hoffs, N, E, K, &hr, aux_w, z_w);
    to_dev(be, tmp, hd, n * e * f);
    tcu_f32_to_bf16(dlogits, tmp, n * e, STREAM(be));
    tcu_sync(STREAM(be));
    free(hdw), free(hp), free(hlse), free(hw), free(hidx), free(hoffs), free(hd);
    gpu_prof_end(STREAM(be), prof);
}
