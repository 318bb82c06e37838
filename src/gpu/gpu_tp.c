/* gpu_tp.c — tensor parallelism on the device (gpu_tp.h). */
#include "gpu/gpu_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

size_t gpu_tp_scratch_bytes(const tsr_model *m, int B, int T) {
    if (!m->tp) return 0;
    const size_t N = (size_t)B * (size_t)T, rows = N * (size_t)m->C;
    const size_t sum = rows + rows / (size_t)m->tp->T, logits = N * (size_t)m->Vp;
    return (sum > logits ? sum : logits) * sizeof(float);
}

/* the scratch of n floats at least */
static float *scratch(gpu_tp *x, size_t n) {
    return gpu_grown_get(x->s, &x->scr, n * sizeof(float), "tensor parallelism's fp32 scratch");
}

/* the group's next collective: after the data-parallel communicator's queued so far */
static gpu_comm *next(gpu_tp *x) {
    gpu_comm_after(x->comm, x->after);
    return x->comm;
}

static void hook_gather(void *ctx, const void *xs, void *all, size_t n) {
    gpu_tp *x = ctx;
    gpu_comm_all_gather(next(x), xs, all, n, sizeof(tsr_bf16));
    gpu_comm_wait(x->comm);
}

static void hook_sum(void *ctx, void *buf, size_t n) {
    gpu_tp *x = ctx;
    float *f = scratch(x, n);
    const size_t off = 0;
    tcu_bf16_to_f32(f, buf, n, x->s);
    gpu_comm_allreduce(next(x), f, &off, &n, 1);
    gpu_comm_wait(x->comm);
    tcu_f32_to_bf16(buf, f, n, x->s);
}

static void hook_sum_scatter(void *ctx, const void *buf, void *out, size_t n) {
    gpu_tp *x = ctx;
    const size_t piece = n / (size_t)x->tp->T;
    float *f = scratch(x, n + piece);
    tcu_bf16_to_f32(f, buf, n, x->s);
    gpu_comm_reduce_scatter(next(x), f, f + n, piece);
    gpu_comm_wait(x->comm);
    tcu_f32_to_bf16(out, f + n, piece, x->s);
}

static void hook_to_host(void *ctx, float *host, const void *xs, size_t n) {
    gpu_tp *x = ctx;
    float *f = scratch(x, n);
    tcu_bf16_to_f32(f, xs, n, x->s);
    tcu_memcpy_d2h(host, f, n * sizeof(float), x->s);
}

static void hook_to_device(void *ctx, void *xs, const float *host, size_t n) {
    gpu_tp *x = ctx;
    float *f = scratch(x, n);
    tcu_memcpy_h2d(f, host, n * sizeof(float), x->s);
    tcu_f32_to_bf16(xs, f, n, x->s);
}

/* the slices of this rank's runs with (want_sum) the group's sum, or (!want_sum) that it does
 * not count in the norm, into off/len (NULL: counted only); their number */
static int slices(const tsr_model *m, const tsr_tp *tp, int want_sum, size_t *off, size_t *len) {
    int n = 0;
    for (size_t i = 0; i < tp->n_runs; i++) {
        const tp_run *r = &tp->runs[i];
        if (want_sum ? r->sum != TP_SUM_TENSOR : r->counted) continue;
        for (size_t k = 0; k < r->count; k++, n++)
            if (off) off[n] = m->params_info[r->id].offset + r->local + k * r->lstride,
                     len[n] = r->len;
    }
    return n;
}

static void plan_slices(gpu_tp *x, const tsr_model *m) {
    x->n_sum = slices(m, x->tp, 1, NULL, NULL);
    x->n_unc = slices(m, x->tp, 0, NULL, NULL);
    x->sum_off = tsr_malloc(((size_t)x->n_sum + 1) * sizeof(size_t));
    x->sum_len = tsr_malloc(((size_t)x->n_sum + 1) * sizeof(size_t));
    x->unc_off = tsr_malloc(((size_t)x->n_unc + 1) * sizeof(size_t));
    x->unc_len = tsr_malloc(((size_t)x->n_unc + 1) * sizeof(size_t));
    slices(m, x->tp, 1, x->sum_off, x->sum_len);
    slices(m, x->tp, 0, x->unc_off, x->unc_len);
}

int gpu_tp_init(gpu_tp *x, const tsr_model *m, const tsr_mesh *mesh, tcu_stream s) {
    const tsr_mesh_group *g = mesh_group(mesh, TSR_MESH_TENSOR);
    char why[512] = "";
    memset(x, 0, sizeof *x);
    x->tp = m->tp, x->s = s;
    x->comm = gpu_comm_open(g, s, why, sizeof why);
    if (!x->comm) {
        if (mesh_group(mesh, TSR_MESH_WORLD)->rank == 0)
            tsr_error("device = \"cuda\" with parallel.tensor = %d: %s", g->size, why);
        return TSR_EXIT_USAGE;
    }
    x->dev = (tsr_tp_dev){x, hook_gather, hook_sum, hook_sum_scatter, hook_to_host,
                          hook_to_device};
    plan_slices(x, m);
    if (mesh_group(mesh, TSR_MESH_WORLD)->rank == 0)
        printf("tensor parallelism: each layer split over %d ranks, %s, the activations' sums "
               "and gathers by %s\n", g->size,
               x->tp->sp ? "sequence parallel" : "without sequence parallelism",
               gpu_comm_name(x->comm));
    return 0;
}

void gpu_tp_finish_grads(gpu_tp *x, float *grads) {
    if (!x->n_sum) return;
    size_t total = 0;
    for (int i = 0; i < x->n_sum; i++) total += x->sum_len[i];
    gpu_comm_allreduce(next(x), grads, x->sum_off, x->sum_len, x->n_sum);
    gpu_comm_wait(x->comm);
    x->tp->sent += tp_collective_bytes(x->tp->T, 1, total * sizeof(float));
}

double gpu_tp_sumsq(gpu_tp *x, double sq, const float *grads, float *acc) {
    float unc = 0.0f;
    tcu_zero(acc, sizeof(float), x->s);
    for (int i = 0; i < x->n_unc; i++) tcu_sumsq(acc, grads + x->unc_off[i], x->unc_len[i], x->s);
    tcu_memcpy_d2h(&unc, acc, sizeof unc, x->s);
    double s = sq - (double)unc;
    dist_group_allreduce_sum_f64(x->tp->group, &s, 1);
    return s;
}

void gpu_tp_free(gpu_tp *x) {
    if (!x->comm) return;
    tcu_sync(x->s);
    tcu_free(x->scr.buf);
    gpu_comm_close(x->comm);
    free(x->sum_off), free(x->sum_len), free(x->unc_off), free(x->unc_len);
    memset(x, 0, sizeof *x);
}
