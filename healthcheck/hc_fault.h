/* hc_fault.h — fault injection for tests: TSR_HC_FAULT makes chosen ranks measure a broken node.
 *
 *   TSR_HC_FAULT="KIND[:TARGET][,KIND[:TARGET]]..."   TARGET = a node name, or rank=N; none = all
 *   KIND: slow_gemm     each GEMM call also sleeps 49x its own time (rate / 50)
 *         corrupt_gemm  one result element of the first timed iteration of each burn precision
 *                       (fp32 and fp64; GPU: bf16, fp32 and FP8, on every GPU) is altered by 1
 *         low_membw     each triad repetition counts 1000x its own time (sleeping up to 0.25 s
 *                       of it); GPU: each HBM copy repetition also sleeps 49x its own time
 *         low_busbw     this rank sleeps 99x an all-reduce's time before each timed all-reduce, so
 *                       every group it is in measures ~1/100 of the bus bandwidth (GPU: NCCL, in
 *                       the node and with partner nodes)
 *         missing_gpu   GPU mode: the last GPU CUDA lists is left out, as if it had fallen off the
 *                       bus (hc_gpu_select), so gpu_count is one short
 * The faults act on the measurement (sleeps, a changed result), never on the verdicts, so the
 * judge, the report and --drain see what they would see on a broken node. Unset: no effect.
 */
#ifndef TSR_HC_FAULT_H
#define TSR_HC_FAULT_H

typedef enum {
    HC_FAULT_SLOW_GEMM = 0,
    HC_FAULT_CORRUPT_GEMM,
    HC_FAULT_LOW_MEMBW,
    HC_FAULT_LOW_BUSBW,
    HC_FAULT_MISSING_GPU,
    HC_FAULT_COUNT
} hc_fault_kind;

extern const char *const hc_fault_names[HC_FAULT_COUNT];

#define HC_FAULT(mask, kind) (((mask) >> (kind)) & 1u)

/* Parses spec (NULL or "" = none) and sets *active to the faults that apply to (node, rank).
 * Returns 0, or 2 (could not run) after naming what is wrong. */
int hc_fault_parse(const char *spec, const char *node, int rank, unsigned *active);

#endif
