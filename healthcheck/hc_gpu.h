/* hc_gpu.h — the interface between tessera-healthcheck and its GPU gather library,
 * libtessera-hc-gpu.so (sources: healthcheck/gpu/).
 *
 * Why a separate shared object: a CPU-only node must run tessera-healthcheck without any CUDA
 * library installed. The executable links no CUDA; in GPU mode it dlopen()s the .so (which links
 * cudart statically, cuBLAS and NCCL dynamically, and loads NVML itself with dlopen), looks up the
 * one exported symbol HC_GPU_SYMBOL and calls through the table of function pointers it returns.
 * MPI stays on the executable's side: the .so makes an NCCL unique id, and the executable carries
 * it to the partner nodes (hc_net.c) and hands it back (nccl_group).
 *
 * Both sides are built from the same tree; `abi`, `check_count` and `dev_size` catch a .so from
 * another build (refused by name, exit 2). The .so writes facts only into plain structs of hc.h
 * (hc_gpu_dev), so the judge stays pure and is tested on canned facts without a GPU.
 */
#ifndef TSR_HC_GPU_H
#define TSR_HC_GPU_H

#include <stddef.h>

#include "hc.h"

#define HC_GPU_ABI 2 /* 2: the FP8 burn (gemm_fp8, three burn precisions) */
#define HC_GPU_SYMBOL "tsr_hc_gpu_api"
#define HC_GPU_LIB_NAME "libtessera-hc-gpu.so"
#define HC_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId), NCCL_UNIQUE_ID_BYTES in nccl.h */

typedef struct hc_gpu_info {   /* what probe found */
    int n_devices;             /* CUDA devices (CUDA_VISIBLE_DEVICES applies) */
    char name0[96];            /* device 0's name: selects the healthcheck.cfg section */
    char versions[256];        /* driver, runtime, cuBLAS, NCCL: compile time vs run time */
    char nvml[192];            /* "" when NVML is usable, else why not (NVML checks not measured) */
} hc_gpu_info;

typedef struct hc_gpu_job {    /* what to measure, from the config section and the options */
    int n_devices;             /* use CUDA devices 0 .. n_devices-1 (hc_gpu_select) */
    int gemm_n;                /* burn (N, N) x (N, N) */
    double burn_s;             /* burn time per precision (bf16, fp32, then FP8), every GPU at once */
    int membw_mib, membw_reps; /* HBM copy: 2 arrays of membw_mib MiB per GPU, best of reps */
    int allreduce_mib;         /* NCCL all-reduce message per GPU, MiB */
    int allreduce_iters;       /* timed all-reduces (after 2 warm-up ones) */
    unsigned faults;           /* TSR_HC_FAULT mask (hc_fault.h) for this rank */
    int fp8;                   /* the FP8 burn (0: the section has no gemm_fp8 thresholds) */
} hc_gpu_job;

/* Whether GPU g runs the FP8 burn: asked for, and FP8 tensor cores (compute capability >= 8.9) */
static inline int hc_gpu_burns_fp8(const hc_gpu_job *job, const hc_gpu_dev *g) {
    return job->fp8 && g->compute_capability >= 89;
}

typedef struct hc_gpu_api {
    int abi;                   /* HC_GPU_ABI */
    int check_count;           /* HC_CHECK_COUNT the .so was built with */
    size_t dev_size;           /* sizeof(hc_gpu_dev) the .so was built with */
    /* Counts the CUDA devices, names device 0, loads NVML if it can. Returns 0, or 2 with the
     * reason in err when CUDA is unusable (no driver, driver too old for this runtime). */
    int (*probe)(hc_gpu_info *out, char *err, size_t n);
    /* Per GPU d < job->n_devices: name, bus id and the NVML state facts (ECC, retired pages, row
     * remapping). A failing query leaves its fact unmeasured and notes it in dev[d].error. */
    void (*state)(const hc_gpu_job *job, hc_gpu_dev *dev);
    /* The GEMM burn, on every GPU at once (a thread each): bf16, fp32, then FP8 where the compute
     * capability is >= 8.9 (dev[d].compute_capability, set by state), job->burn_s each, every
     * iteration compared with the exact result on the device; NVML clocks-event reasons sampled
     * and violation counters read around it. Sets the gemm_*, throttle_* and *_violation facts. */
    void (*burn)(const hc_gpu_job *job, hc_gpu_dev *dev);
    /* Device-memory copy bandwidth on every GPU at once. Sets hbm_bw. */
    void (*membw)(const hc_gpu_job *job, hc_gpu_dev *dev);
    /* All-reduce among this node's GPUs (one communicator, this process): bus bandwidth in GB/s,
     * 0 with err set when it failed or a sum was wrong. With n_devices == 1: a one-rank
     * all-reduce, its algorithm bandwidth (bytes / time; the self-test of one GPU). */
    double (*nccl_node)(const hc_gpu_job *job, char *err, size_t n);
    /* A new NCCL unique id (the first node of a partner group makes it). Returns 0 or 2. */
    int (*nccl_id)(unsigned char id[HC_NCCL_ID_BYTES], char *err, size_t n);
    /* Collective over the nodes of a group: this node's GPUs join the communicator of `id` as
     * ranks first_rank .. first_rank + n_devices - 1 of nranks, all-reduce allreduce_mib MiB
     * allreduce_iters times; iter_s[i] = this node's wall time of iteration i; *wrong = wrong
     * elements of the last result. Returns 0, or 2 with err set. */
    int (*nccl_group)(const hc_gpu_job *job, const unsigned char id[HC_NCCL_ID_BYTES], int first_rank,
                      int nranks, double *iter_s, long long *wrong, char *err, size_t n);
    void (*close)(void);       /* NVML shutdown; the CUDA context goes with the process */
} hc_gpu_api;

typedef const hc_gpu_api *(*hc_gpu_api_fn)(void);

#endif
