/* hc_measure.h — the gather step: the CPU mode's GEMM burn with verification, memory bandwidth,
 * all-reduce bus bandwidth between node pairs; the GPU mode's loader of libtessera-hc-gpu.so and
 * its driver. Each fills hc_facts; none judges. (The driver's collectives: dist.h.) */
#ifndef TSR_HC_MEASURE_H
#define TSR_HC_MEASURE_H

#include <stddef.h>

#include "hc.h"
#include "hc_gpu.h"

#define HC_EXIT_CANNOT_RUN 2

/* ---- hc_gemm.c ----
 * Burns for `seconds`: C = A B with A, B (N, N) row-major, fp32 (cblas_sgemm) or fp64 (dgemm).
 * Inputs are small integers (|a| <= 63 in fp32, |a| <= 2^20 in fp64), so every product and partial
 * sum is an integer below 2^24 (2^53): the exact result does not depend on summation order, thread
 * count or kernel, and each iteration is compared bit for bit with a reference computed once. The
 * reference itself is checked exactly (Freivalds: C x == A (B x) in integers mod 2^64).
 * Sets HC_[SD]GEMM (GFLOP/s = 2 N^3 / time in the BLAS call) and HC_[SD]GEMM_VERIFY (elements
 * that differed, summed over iterations, plus reference rows that failed the Freivalds check). */
void hc_gemm_burn(int fp64, int n, double seconds, unsigned faults, hc_facts *f);

/* ---- hc_membw.c ----
 * STREAM triad a[i] = b[i] + s c[i] over 3 arrays of `mib` MiB of doubles, `reps` times, OpenMP
 * static schedule (first touch by the same threads). GB/s = 3 * bytes per array / best time / 1e9
 * (STREAM's count: no write-allocate traffic). Sets HC_MEMBW. */
void hc_membw(int mib, int reps, unsigned faults, hc_facts *f);

/* ---- hc_net.c (dist.h's groups; a world of one in NO_MPI builds) ----
 * Collective. Round 1 groups ranks (2k, 2k+1); round 2 (k, k + N/2), run only when N >= 4. With N
 * odd the last rank joins the previous group (a group of 3). In each round every group all-reduces
 * `mib` MiB of floats (sum) `iters` times after 2 warm-ups, each after a barrier; t = the best
 * iteration's time, an iteration lasting as long as its slowest member; algbw = bytes / t, busbw = algbw * 2 (n - 1) / n (nccl-tests), n = group size.
 * A wrong sum (inputs are small integers, so exact) counts as 0 GB/s. HC_ALLREDUCE = the best
 * round: a node fails only when it is slow with every partner, so a bad node does not fail its
 * healthy partners (with N = 2 or 3 there is one round and both/all fail together). */
void hc_net_allreduce(int mib, int iters, unsigned faults, int rank, int world, hc_facts *f);
/* GPU mode, collective: NCCL all-reduce bus bandwidth between this node's GPUs and its partner
 * nodes' GPUs, in the rounds and groups of hc_net_allreduce (one communicator per group of nodes,
 * all their GPUs as ranks; busbw with n = GPUs in it). The group's first node makes the NCCL id,
 * MPI carries it. A group with a node without GPUs, or whose NCCL failed, measures 0 GB/s.
 * Sets HC_NCCL_PAIRS (best round) when world >= 2. */
void hc_net_gpu_pairs(const hc_gpu_api *api, const hc_gpu_job *job, int rank, int world, hc_facts *f);

/* ---- hc_gpu_load.c: finding and opening libtessera-hc-gpu.so ---- */
typedef enum { HC_GPU_OFF = 0, HC_GPU_AUTO, HC_GPU_ON, HC_GPU_MODE_COUNT } hc_gpu_mode;
extern const char *const hc_gpu_mode_names[HC_GPU_MODE_COUNT];

/* The .so is `lib` (--gpu-lib) if given, else $TESSERA_HC_GPU_LIB, else the first that exists of
 * EXE_DIR/libtessera-hc-gpu.so (build tree) and EXE_DIR/../lib/tessera/libtessera-hc-gpu.so
 * (installed). With HC_GPU_AUTO and neither lib nor the variable set, a node without
 * /dev/nvidiactl (no NVIDIA driver) is CPU-only at once: the .so, which maps the large cuBLAS, is
 * not even loaded. Returns the API, or NULL with the reason in why; path gets the file tried. */
const hc_gpu_api *hc_gpu_open(const char *lib, hc_gpu_mode mode, char *path, size_t np, char *why,
                              size_t nw);

/* ---- hc_gpu_gather.c: the GPU mode's gather step ---- */
/* How many of the `found` CUDA devices to measure: all, one fewer with the missing_gpu fault. */
int hc_gpu_select(int found, unsigned faults);
/* Pure: the node values of the per-GPU checks from f->gpus[0 .. n_gpus): the worst GPU's value
 * (HC_WORST_GPU) or the number of GPUs that have it (HC_GPUS_WITH); f->worst_gpu[] says which.
 * A check no GPU measured stays unmeasured. */
void hc_gpu_summarize(hc_facts *f);
/* Collective (hc_net_gpu_pairs in full mode). Measures job->n_devices GPUs: NVML state and the
 * burn; in full mode also HBM bandwidth, the node's NCCL all-reduce and the partner-node one.
 * Sets gpu_count, fills f->gpus and summarizes them. Failures of a GPU warn and count as 0. */
void hc_gpu_gather(const hc_gpu_api *api, const hc_gpu_job *job, int full, int rank, int world,
                   hc_facts *f);

#endif
