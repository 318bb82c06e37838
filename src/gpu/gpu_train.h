/* gpu_train.h — device = cuda in the trainer (src/train/train_gpu.c fills the context and calls
 * these).
 *
 * One GPU per rank (CUDA device local_rank mod the visible count). On the device: the fp32
 * master weights and their bf16 copy, fp32 gradients and AdamW moments, bf16 activations
 * (gpu_model.h). On the host the trainer keeps its usual buffers as a mirror (model.params, m,
 * v), filled by gpu_train_pull before a checkpoint is written and sent back by gpu_train_push
 * after one is read: checkpoints are the same files as on the CPU, so a run moves between
 * devices at any checkpoint. Gradients are summed over ranks per layer as the backward pass
 * reaches them (gpu_comm.h), overlapping the layers still to come; parallel.sharding = zero1,
 * zero3 and hsdp shard the state as gpu_shard.h says. LoRA (c->lora): the base frozen in bf16
 * (whole, or a frozen shard under zero3 / hsdp), the adapters' fp32 store and AdamW on the device,
 * their gradients all-reduced once per step; the host mirror is the trainer's adapter store.
 *
 * The GPU code lives in libtessera-cuda-train.so (gpu_train*.c, gpu_model.c, gpu_backend.c,
 * gpu_comm_nccl.c and the CUDA backend), which gpu_load.c opens with dlopen the first time a run asks for
 * device = cuda: tessera-train itself links no CUDA, starts as fast on a CPU node (loading
 * cuBLASLt costs ~0.9 s per process) and runs where no CUDA is installed. A program that links
 * gpu_train.o directly (the emulator test build) uses that copy instead. The functions below
 * forward to the library's table. The library sees the trainer through gpu_train_ctx.h only.
 */
#ifndef TSR_GPU_TRAIN_H
#define TSR_GPU_TRAIN_H

#include <stddef.h>

#include "gpu/gpu_train_ctx.h"

struct gen_batch_opts;
struct gen_seq;

/* The library's entry points (gpu_train.c's table); the wrappers below document them. */
typedef struct gpu_train_api {
    const char *version;  /* TSR_VERSION it was built with: must be the executable's */
    size_t ctx_size;      /* sizeof(gpu_train_ctx) it was built with: must be the executable's */
    size_t api_size;      /* sizeof(gpu_train_api) it was built with: must be the executable's */
    const char *backend;  /* "cuda", or "cuda-emulator" */
    int (*init)(gpu_train_ctx *c);
    size_t (*plan_bytes)(const gpu_train_ctx *c);
    size_t (*muon_bytes)(const gpu_train_ctx *c);
    int (*acts_B)(const gpu_train_ctx *c);
    int (*try_acts)(gpu_train_ctx *c, int B);
    void (*free_acts)(gpu_train_ctx *c);
    size_t (*acts_bytes)(const gpu_train_ctx *c, int B);
    size_t (*layer_bytes)(const gpu_train_ctx *c, int B, int fp8);
    double (*compute)(gpu_train_ctx *c, float scale);
    double (*grad_sumsq)(gpu_train_ctx *c);
    void (*update)(gpu_train_ctx *c, double lr, float gscale, int step);
    void (*pull)(gpu_train_ctx *c);
    void (*push)(gpu_train_ctx *c, int with_optim);
    void (*host_model)(gpu_train_ctx *c, int on);
    size_t (*pin_host)(gpu_train_ctx *c);
    size_t (*mem_peak)(void);
    void (*free)(gpu_train_ctx *c);
    int (*switches)(const gpu_train_ctx *c);
    int64_t (*generate)(gpu_train_ctx *c, const struct gen_batch_opts *o, struct gen_seq *seqs,
                        int n);
    int (*pull_grads)(gpu_train_ctx *c);
    void (*moe_bias)(gpu_train_ctx *c);
} gpu_train_api;
#define GPU_TRAIN_LIB_NAME "libtessera-cuda-train.so"
#define GPU_TRAIN_SYMBOL "tsr_gpu_train_api"

/* The backend device = cuda trains on ("cuda"; "cuda-emulator" in the test build), loading the
 * library on first use; NULL when there is none, with the reason in why (n bytes). Searched:
 * $TESSERA_CUDA_LIB, then the executable's directory, then ../lib/tessera/ from it. */
const char *gpu_backend(char *why, size_t n);
/* The environment's measurement switches (TSR_GEMM_REDUCTION, TSR_ATT_WARP_ROWS, TSR_ATT_DQ_FUSED,
 * TSR_NORM_HOLD, TSR_XENT_RESIDENT; docs/cuda.md) read, checked to agree over the ranks and set,
 * and TSR_GEMM_TUNE's file name checked to agree (the file is read by gpu_train_init), touching
 * no device: before the device memory plan is sized or printed (the attention's scratch
 * depends on two of them) and before gpu_train_init. 0 or an exit code (reported on rank 0; every
 * rank returns the same). Collective. */
int gpu_train_switches(const gpu_train_ctx *c);
/* After gpu_train_switches and once the host weights are initialised (rank-identical): selects the GPU (its name into
 * c->device_name), checks the device memory plan against the free memory, allocates, uploads,
 * opens the communicator. 0 or an exit code (reported on rank 0; every rank returns the same). */
int gpu_train_init(gpu_train_ctx *c);
/* The device memory plan per rank, nothing allocated (--plan): the bytes of everything but the
 * activations (weights, gradients, AdamW, shards and communication buffers; evaluations run on
 * the training's buffers). */
size_t gpu_train_plan_bytes(const gpu_train_ctx *c);
/* Of those, optim.name = muon's (src/gpu/gpu_muon.h: the iteration's buffers; sharded, the
 * owned matrices and the exchange's); 0 under AdamW. */
size_t gpu_train_muon_bytes(const gpu_train_ctx *c);
/* Activations: allocated B (0: none); try to allocate for B sequences (0, or -1 with nothing
 * left allocated); free; their bytes for B. */
int gpu_train_acts_B(const gpu_train_ctx *c);
int gpu_train_try_acts(gpu_train_ctx *c, int B);
void gpu_train_free_acts(gpu_train_ctx *c);
size_t gpu_train_acts_bytes(const gpu_train_ctx *c, int B);
/* Of those, one decoder layer's saved activations with model.activation_compression = "fp8"
 * (fp8 1) or "none" (0) (gpu_model_layer_acts_bytes). */
size_t gpu_train_layer_bytes(const gpu_train_ctx *c, int B, int fp8);
/* A step's forward and backward over this rank's batch (c->inputs, c->targets) in microbatches
 * of c->micro, gradients scaled by scale and summed over the ranks. Returns this rank's loss
 * sum. */
double gpu_train_compute(gpu_train_ctx *c, float scale);
/* Sum of squares of the summed gradients (after the communication). */
double gpu_train_grad_sumsq(gpu_train_ctx *c);
/* AdamW on every tensor (weight decay c->decay), at lr, gradients times gscale, step `step`. */
void gpu_train_update(gpu_train_ctx *c, double lr, float gscale, int step);
/* After the update: the router's correction bias (model.moe_topk_method = "noaux_tc") moved by
 * model_moe_bias_step on the step's loads (c->moe, summed over the ranks) in the fp32 master
 * weights and their bf16 copy (zero1 / zero3 / hsdp: the device shard's pieces, then its refresh);
 * nothing under LoRA (the bias frozen with the base). Local under ddp; collective (every rank
 * calls it) when sharded. */
void gpu_train_moe_bias(gpu_train_ctx *c);
/* Host mirror <- device (weights, moments) / device <- host mirror (weights, and the moments
 * when with_optim). */
void gpu_train_pull(gpu_train_ctx *c);
void gpu_train_push(gpu_train_ctx *c, int with_optim);
/* The reduced gradients device -> host (the trainer's fingerprints, src/train/sdc.h): ddp's
 * dense ones into model->grads, LoRA's adapters' into lora->g, after the step's reduction is
 * done; 1, or 0 where the mode mirrors none (zero1, zero3, hsdp: the reduced gradients are a
 * shard on the device; the experts' are not copied). Local. */
int gpu_train_pull_grads(gpu_train_ctx *c);
/* save_async (docs/checkpoint-format.md): pins the host buffers gpu_train_pull copies the
 * device's state into (the host mirror: the weights and moments, or the shard of them, the
 * zero1 staging buffer, the experts' store, the adapters), so the device-to-host copy of a
 * checkpoint's snapshot runs at the bus's speed; they are unpinned by gpu_train_free. Returns the
 * bytes pinned, 0 when CUDA refused (the buffers stay pageable: the same copies, slower). */
size_t gpu_train_pin_host(gpu_train_ctx *c);
/* on = 1: the host model computes (host weights pulled, host activations for 1 sequence on the
 * ranks that sample: rank 0, every rank under zero3 / hsdp, whose forwards gather); on = 0: back
 * to the device. Collective. */
void gpu_train_host_model(gpu_train_ctx *c, int on);
/* The most device bytes this process held at once through the backend's allocator (tcu_mem_stats;
 * metrics.jsonl's peak_mem_bytes under device = cuda). */
size_t gpu_train_mem_peak(void);
/* Batched generation on the device (generate/gen_batch.h), on the weights as they are (zero3 /
 * hsdp: gathered once for the call; LoRA: the adapters without dropout): GRPO's rollouts.
 * Returns the tokens generated. */
int64_t gpu_train_generate(gpu_train_ctx *c, const struct gen_batch_opts *o, struct gen_seq *seqs,
                           int n);
/* Frees the library's state (nothing when c->state is NULL). */
void gpu_train_free(gpu_train_ctx *c);

#endif
