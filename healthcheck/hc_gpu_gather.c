/* hc_gpu_gather.c — the GPU mode's gather step on the executable's side (see hc_measure.h): which
 * GPUs to measure, calling the GPU library in order, and folding per-GPU facts into node facts.
 * The measuring itself happens in libtessera-hc-gpu.so (healthcheck/gpu/). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "hc_fault.h"
#include "hc_measure.h"

int hc_gpu_select(int found, unsigned faults) {
    int n = found < HC_MAX_GPUS ? found : HC_MAX_GPUS;
    if (HC_FAULT(faults, HC_FAULT_MISSING_GPU) && n > 0) n--; /* as if the last fell off the bus */
    return n > 0 ? n : 0;
}

void hc_gpu_summarize(hc_facts *f) {
    for (int c = 0; c < HC_CHECK_COUNT; c++) {
        hc_scope scope = hc_checks[c].scope;
        if (scope == HC_PER_NODE) continue;
        f->worst_gpu[c] = -1;
        int seen = 0;
        double node = 0;
        for (int d = 0; d < f->n_gpus && d < HC_MAX_GPUS; d++) {
            const hc_gpu_dev *g = &f->gpus[d];
            if (!(g->measured & (1u << c))) continue;
            double v = g->value[c];
            if (scope == HC_GPUS_WITH) {
                /* NaN counts as having it: an unreadable flag must not pass */
                int has = !(v == 0);
                node += has;
                if (has && f->worst_gpu[c] < 0) f->worst_gpu[c] = d;
            } else {
                /* the worst: lowest rate or highest count; a NaN is worst of all */
                int worse = !seen || isnan(v) ||
                            (!isnan(node) && (hc_checks[c].sense == HC_AT_LEAST ? v < node : v > node));
                if (worse) node = v, f->worst_gpu[c] = d;
            }
            seen = 1;
        }
        if (seen) hc_fact_set(f, (hc_check)c, node);
    }
}

/* Warns about each GPU's first failure, naming it: the verdict lines are per node. */
static void warn_gpu_errors(const hc_facts *f) {
    for (int d = 0; d < f->n_gpus; d++)
        if (f->gpus[d].error[0])
            tsr_warn("%s GPU %d (%s): %s", f->node, d, f->gpus[d].bus_id, f->gpus[d].error);
}

/* The FP8 burn runs on GPUs of compute capability >= 8.9 only (FP8 tensor cores: Ada, Hopper and
 * later); on older ones gemm_fp8 is not applicable, said in the "not measured" line, not failed. */
static void note_no_fp8(hc_facts *f) {
    char note[160];
    int without = 0, cc = 0;
    for (int d = 0; d < f->n_gpus && d < HC_MAX_GPUS; d++) {
        int c = f->gpus[d].compute_capability;
        if (c > 0 && c < 89) without++, cc = c;
    }
    if (!without) return;
    snprintf(note, sizeof note, "gemm_fp8, gemm_fp8_verify (%d of %d GPUs: compute capability %d.%d, FP8 needs "
             "8.9; not supported)", without, f->n_gpus, cc / 10, cc % 10);
    hc_note_skipped(f, note);
}

/* One GPU has no all-reduce bus to measure; what it can say: NCCL loads, a communicator of one
 * rank starts and its all-reduce gives the right sums, at this algorithm bandwidth (a copy on
 * the device). Not judged (nccl_node needs 2 GPUs): said in the "not measured" line, a failure
 * also warned. */
static void one_gpu_nccl(const hc_gpu_api *api, const hc_gpu_job *job, hc_facts *f) {
    char err[512] = "", note[700];
    double algbw = api->nccl_node(job, err, sizeof err);
    if (err[0]) {
        tsr_warn("%s: NCCL all-reduce of one rank: %s", f->node, err);
        snprintf(note, sizeof note, "nccl_node (1 GPU; its one-rank NCCL all-reduce failed: %s)", err);
    } else {
        snprintf(note, sizeof note, "nccl_node (1 GPU: a one-rank NCCL all-reduce ran, its sums "
                 "right, %.0f GB/s algorithm bandwidth; bus bandwidth needs 2 GPUs)", algbw);
    }
    hc_note_skipped(f, note);
}

void hc_gpu_gather(const hc_gpu_api *api, const hc_gpu_job *job, int full, int rank, int world,
                   hc_facts *f) {
    f->gpu_mode = 1;
    f->n_gpus = job->n_devices;
    for (int c = 0; c < HC_CHECK_COUNT; c++) f->worst_gpu[c] = -1;
    hc_fact_set(f, HC_GPU_COUNT, job->n_devices);
    if (job->n_devices > 0) {
        api->state(job, f->gpus);
        api->burn(job, f->gpus);
        note_no_fp8(f);
    }
    if (!full) {
        hc_note_skipped(f, "hbm_bw, nccl_node, nccl_pairs (quick mode; --full measures them)");
    } else {
        if (job->n_devices > 0) api->membw(job, f->gpus);
        if (job->n_devices >= 2) {
            char err[512] = "";
            double busbw = api->nccl_node(job, err, sizeof err);
            if (err[0]) tsr_warn("%s: NCCL all-reduce among its GPUs: %s: counted as 0 GB/s", f->node, err);
            hc_fact_set(f, HC_NCCL_NODE, busbw);
        } else if (job->n_devices == 1) {
            one_gpu_nccl(api, job, f);
        } else {
            hc_note_skipped(f, "nccl_node (no GPU)");
        }
        hc_net_gpu_pairs(api, job, rank, world, f); /* collective: every rank, even without GPUs */
        if (world < 2) hc_note_skipped(f, "nccl_pairs (1 rank: no partner node)");
    }
    hc_gpu_summarize(f);
    warn_gpu_errors(f);
}
