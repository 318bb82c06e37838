/* hc_measure.h — the CPU gather step: GEMM burn with verification, memory bandwidth, all-reduce
 * bus bandwidth between node pairs, and the collectives the driver needs. Each fills hc_facts;
 * none judges. (The GPU mode will add a CUDA/NCCL file behind the same shape.) */
#ifndef TSR_HC_MEASURE_H
#define TSR_HC_MEASURE_H

#include <stddef.h>

#include "hc.h"

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

/* ---- hc_net.c (MPI; a world of one in NO_MPI builds) ----
 * Collective. Round 1 groups ranks (2k, 2k+1); round 2 (k, k + N/2), run only when N >= 4. With N
 * odd the last rank joins the previous group (a group of 3). In each round every group all-reduces
 * `mib` MiB of floats (sum) `iters` times after 2 warm-ups, each after a barrier; t = the best
 * iteration's time, an iteration lasting as long as its slowest member; algbw = bytes / t, busbw = algbw * 2 (n - 1) / n (nccl-tests), n = group size.
 * A wrong sum (inputs are small integers, so exact) counts as 0 GB/s. HC_ALLREDUCE = the best
 * round: a node fails only when it is slow with every partner, so a bad node does not fail its
 * healthy partners (with N = 2 or 3 there is one round and both/all fail together). */
void hc_net_allreduce(int mib, int iters, unsigned faults, int rank, int world, hc_facts *f);
/* Collective: rank 0 receives every rank's `bytes` (all, world * bytes); others pass all = NULL. */
void hc_net_gather(const void *mine, void *all, size_t bytes);
/* Collective: the maximum of v over all ranks. */
int hc_net_max(int v);

#endif
