/* hc_gpu_impl.h — shared by the files of libtessera-hc-gpu.so only (the executable sees hc_gpu.h).
 *
 * Conventions of the library:
 *  - every CUDA, cuBLAS and NCCL call goes through GPU_TRY / BLAS_TRY / NCCL_TRY, which write the
 *    first failure (file:line, the call, the library's message) into an error buffer and jump to
 *    the function's `fail:` label; the executable prints it with rank and host (tsr_warn).
 *  - a failure while measuring one GPU makes that GPU's rates 0 and its counts NaN (both fail the
 *    judge): a GPU that cannot finish a burn is not fit to train. Nothing here exits the process.
 *  - per-GPU work runs on every GPU at once, one host thread per GPU (gpu_each), so the node is
 *    loaded as a training job loads it (power, temperature, PCIe and NVLink traffic).
 */
#ifndef TSR_HC_GPU_IMPL_H
#define TSR_HC_GPU_IMPL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stddef.h>

#include "hc.h"
#include "hc_fault.h"
#include "hc_gpu.h"
#include "tcu_fp8_gemm.h"

/* Writes "fmt..." into err unless it already holds an earlier failure (hc_gpu_util.c). */
void gpu_note(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* call (text: its source) returns a status of type T: unless it is ok, "FILE:LINE: text: what(it)"
 * into err (gpu_note) and goto fail. */
#define GPU_TRY_STATUS(err, n, T, call, text, ok, what)                                         \
    do {                                                                                        \
        T gpu_st_ = (call);                                                                     \
        if (gpu_st_ != (ok)) {                                                                  \
            gpu_note((err), (n), "%s:%d: %s: %s", __FILE__, __LINE__, text, what(gpu_st_));     \
            goto fail;                                                                          \
        }                                                                                       \
    } while (0)
#define GPU_TRY(err, n, call)                                                                   \
    GPU_TRY_STATUS(err, n, cudaError_t, call, #call, cudaSuccess, cudaGetErrorString)
#define BLAS_TRY(err, n, call)                                                                  \
    GPU_TRY_STATUS(err, n, cublasStatus_t, call, #call, CUBLAS_STATUS_SUCCESS,                  \
                   cublasGetStatusString)
#define NCCL_TRY(err, n, call)                                                                  \
    GPU_TRY_STATUS(err, n, ncclResult_t, call, #call, ncclSuccess, ncclGetErrorString)

/* ---- hc_gpu_util.c: the helpers (they use nothing else of the library) ---- */
double gpu_now(void);         /* CLOCK_MONOTONIC, s */
void gpu_sleep(double s);     /* the fault injections' sleeps */
/* Runs fn(ctx, d) for d < n, each on its own thread, and waits for all. */
void gpu_each(int n, void (*fn)(void *ctx, int d), void *ctx);

/* ---- hc_gpu_nvml.c: NVML through dlopen ---- */
/* Loads libnvidia-ml.so.1 and initialises it. Returns 0, or 1 with why set (NVML checks are then
 * not measured). */
int nvml_open(char *why, size_t n);
void nvml_close(void);
/* The NVML handle of the GPU at this PCI bus id, or NULL (why set). */
void *nvml_device(const char *bus_id, char *why, size_t n);
/* ECC, retired pages, row remapping of one GPU into g (see hc.h for which fact is which). */
void nvml_state(void *h, hc_gpu_dev *g);
/* The current clocks event reasons (NVML bit mask). Returns 0 or 1 (unsupported / failed). */
int nvml_clock_reasons(void *h, unsigned long long *mask);
/* Reason masks the burn judges: HW slowdown | HW power brake, and HW | SW thermal slowdown. */
extern const unsigned long long nvml_reasons_hw, nvml_reasons_thermal;
/* Cumulative time (ns) the GPU was held below application clocks by power (thermal = 0) or by
 * temperature (thermal = 1). Returns 0 or 1. */
int nvml_violation_ns(void *h, int thermal, unsigned long long *ns);
/* Per GPU of the job: name, bus id, NVML handle and state into dev (the API's state step). */
void gpu_state(const hc_gpu_job *job, hc_gpu_dev *dev);
/* The NVML handle of device d (gpu_state found it from its bus id), or NULL. */
void *gpu_nvml_handle(int d);

/* ---- hc_gpu_burn.c ---- */
void gpu_burn(const hc_gpu_job *job, hc_gpu_dev *dev);
void gpu_membw(const hc_gpu_job *job, hc_gpu_dev *dev);

/* ---- hc_gpu_fp8.c: the FP8 burn's GEMM, C (N, N) fp32 = A (N, N) B (N, N), row-major, E4M3
 * inputs (A and B transposed, Bt, given), through the training call's plan and rules ---- */
typedef struct fp8_gemm {
    tcu_fp8_gemm plan;           /* tcu_fp8_gemm_plan_f32's, checked by tcu_fp8_gemm_check */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;   /* the heuristic's first choice */
    float *scales;               /* device: B's then A's scale (1.0), 16-byte slots */
    void *ws;                    /* the workspace, plan.ws_call bytes */
} fp8_gemm;
/* Plans, checks and describes the GEMM for output C. Returns 0, or 1 with err set (a plan that
 * breaks a rule: the rule and the plan's settings). */
int fp8_gemm_init(fp8_gemm *f, int n, const void *A, const void *Bt, float *C, char *err, size_t ne);
/* One GEMM into D (the plan's C or another cudaMalloc'd (N, N) fp32 buffer) on stream s. */
cublasStatus_t fp8_gemm_run(const fp8_gemm *f, float *D, cudaStream_t s);
void fp8_gemm_release(fp8_gemm *f); /* what init made; a zeroed f is fine */

/* ---- hc_gpu_nccl.c ---- */
double gpu_nccl_node(const hc_gpu_job *job, char *err, size_t n);
int gpu_nccl_id(unsigned char id[HC_NCCL_ID_BYTES], char *err, size_t n);
int gpu_nccl_group(const hc_gpu_job *job, const unsigned char id[HC_NCCL_ID_BYTES], int first_rank,
                   int nranks, double *iter_s, long long *wrong, char *err, size_t n);

#endif
