/* hc.h — tessera-healthcheck's vocabulary: the checks, the facts a gather step measures, the
 * thresholds a config file gives, and the verdicts the pure judge step derives from both.
 *
 * Gather, then judge (as LBNL NHC does): measurement code only fills an hc_facts; hc_judge() is a
 * pure function of (facts, thresholds), so tests/unit/test_healthcheck.c feeds it canned facts.
 * A check is either a rate that must reach a floor (GFLOP/s, GB/s: limit = expected * (1 -
 * tolerance)) or a count that must stay at or below a ceiling (wrong GEMM results: limit = max).
 * The CPU mode and the GPU mode have their own checks (hc_check_info.gpu); in the GPU mode most
 * facts are measured per GPU (hc_gpu_dev) and folded into the node's value, its worst GPU's or the
 * number of GPUs that have it (hc_scope, hc_gpu_summarize), before the same judge sees them.
 */
#ifndef TSR_HC_H
#define TSR_HC_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    /* CPU mode */
    HC_SGEMM = 0,    /* fp32 GEMM burn rate, GFLOP/s */
    HC_SGEMM_VERIFY, /* fp32 GEMM burn: elements that differed from the reference, summed */
    HC_DGEMM,        /* fp64 GEMM burn rate, GFLOP/s */
    HC_DGEMM_VERIFY, /* fp64 GEMM burn: wrong elements */
    HC_MEMBW,        /* STREAM-triad bandwidth, GB/s (1e9 bytes/s) */
    HC_ALLREDUCE,    /* MPI all-reduce bus bandwidth with this node's partners, GB/s */
    /* GPU mode (docs/healthcheck.md "GPU checks"); "worst GPU" = the node's value is its worst GPU's */
    HC_GPU_COUNT,         /* GPUs CUDA can use on this node */
    HC_ECC_UNCORRECTED,   /* NVML volatile uncorrected ECC errors (since the driver loaded), worst GPU */
    HC_RETIRED_PAGES,     /* NVML retired pages, both causes (pre-Ampere GPUs), worst GPU */
    HC_RETIRED_PENDING,   /* GPUs with pages pending retirement (need a reset) */
    HC_REMAP_PENDING,     /* GPUs with a row remapping pending (need a reset; Ampere and later) */
    HC_REMAP_FAILED,      /* GPUs on which a row remapping failed (replace the GPU) */
    HC_THROTTLE_HW,       /* % of burn samples with HW slowdown or HW power brake, worst GPU */
    HC_THROTTLE_THERMAL,  /* % of burn samples with HW or SW thermal slowdown, worst GPU */
    HC_POWER_VIOLATION,   /* % of burn time held below application clocks by power, worst GPU */
    HC_THERMAL_VIOLATION, /* % of burn time held below application clocks by temperature, worst GPU */
    HC_GEMM_BF16,         /* cuBLAS bf16 GEMM burn (fp32 accumulate) rate, TFLOP/s, worst GPU */
    HC_GEMM_BF16_VERIFY,  /* its wrong result elements over all iterations, worst GPU */
    HC_GEMM_FP32,         /* cuBLAS fp32 GEMM burn rate, TFLOP/s, worst GPU */
    HC_GEMM_FP32_VERIFY,  /* its wrong result elements, worst GPU */
    HC_GEMM_FP8,          /* cuBLASLt FP8 GEMM burn (E4M3 x E4M3, fp32 accumulate) rate, TFLOP/s, worst
                           * GPU; not measured on GPUs of compute capability < 8.9 (no FP8 there) */
    HC_GEMM_FP8_VERIFY,   /* its wrong result elements, worst GPU */
    HC_HBM_BW,            /* device-memory copy bandwidth (bytes read + written), GB/s, worst GPU */
    HC_NCCL_NODE,         /* NCCL all-reduce bus bandwidth among this node's GPUs, GB/s */
    HC_NCCL_PAIRS,        /* NCCL all-reduce bus bandwidth with partner nodes' GPUs, best round, GB/s */
    HC_CHECK_COUNT
} hc_check;
_Static_assert(HC_CHECK_COUNT <= 32, "hc_facts.measured is a 32-bit mask");

typedef enum { HC_AT_LEAST = 0, HC_AT_MOST, HC_SENSE_COUNT } hc_sense;

/* How a GPU-mode node value comes from its GPUs' values (hc_gpu_summarize). */
typedef enum {
    HC_PER_NODE = 0, /* measured for the node as a whole (CPU checks, gpu_count, NCCL) */
    HC_WORST_GPU,    /* the worst GPU's value: the lowest rate, the highest count */
    HC_GPUS_WITH,    /* how many GPUs have it (per GPU 0 or 1: a pending remap, ...) */
    HC_SCOPE_COUNT
} hc_scope;

typedef struct hc_check_info {
    const char *name; /* as in verdict lines and config keys */
    const char *unit;
    hc_sense sense;
    int decimals;     /* printed precision of actual and limit */
    int gpu;          /* a check of the GPU mode (config sections of mode "gpu" hold it) */
    hc_scope scope;
    int optional;     /* a section may leave it out (added after site configs were written): not run */
} hc_check_info;

extern const hc_check_info hc_checks[HC_CHECK_COUNT];

/* Which checks a mode runs: quick = the GEMM burns (GPU: + NVML state); full = everything. */
typedef enum { HC_MODE_QUICK = 0, HC_MODE_FULL, HC_MODE_COUNT } hc_mode;
extern const char *const hc_mode_names[HC_MODE_COUNT];

/* ---- thresholds (healthcheck.cfg, one device section) ---- */

typedef struct hc_limit {
    int set;                   /* the section gives this check */
    double expected, tolerance; /* HC_AT_LEAST: pass when actual >= expected * (1 - tolerance) */
    double max;                 /* HC_AT_MOST: pass when actual <= max */
} hc_limit;

typedef struct hc_params {     /* how to measure, per device section */
    int gemm_n;                /* N: the burn multiplies (N, N) x (N, N) */
    double quick_burn_s, full_burn_s; /* GEMM burn time per mode, split between fp32 and fp64
                                * (GPU: equal parts to bf16, fp32 and FP8, the last only where the section
                                * gives gemm_fp8 thresholds, every GPU at once) */
    int membw_mib;             /* size of each of the 3 triad arrays (GPU: 2 copy arrays per GPU), MiB */
    int membw_reps;            /* repetitions; the best is kept (STREAM convention) */
    int allreduce_mib;         /* all-reduce message size (GPU: per GPU), MiB */
    int allreduce_iters;       /* timed all-reduces per partner group (after 2 warm-up ones) */
} hc_params;

typedef struct hc_thresholds {
    char source[512];  /* config file */
    char section[64];  /* the device section's name */
    char match[128];   /* its match string ("" = the default of its mode) */
    int gpu;           /* section for the GPU mode */
    hc_limit lim[HC_CHECK_COUNT];
    hc_params params;
} hc_thresholds;

/* The limit that decides pass/fail of check c. */
double hc_limit_value(const hc_thresholds *t, hc_check c);

/* ---- facts (gather) ---- */

#define HC_MAX_GPUS 16

/* One GPU's facts (GPU mode), filled by libtessera-hc-gpu.so (healthcheck/gpu/); value[] uses the
 * checks of scope HC_WORST_GPU / HC_GPUS_WITH. A check NVML does not support on this GPU (retired
 * pages on an A100, row remapping on a V100) stays unmeasured: not applicable, not a failure. */
typedef struct hc_gpu_dev {
    char name[96];      /* CUDA's device name, e.g. "NVIDIA H100 80GB HBM3" */
    char bus_id[32];    /* PCI bus id (cudaDeviceGetPCIBusId), e.g. "0000:1B:00.0" */
    char error[192];    /* the first failure met measuring this GPU ("" = none); its rates are 0 */
    unsigned measured;  /* bit (1u << check) set when value[check] was measured */
    double value[HC_CHECK_COUNT];
    long gemm_iters[3];       /* [0] bf16, [1] fp32, [2] fp8 */
    double gemm_seconds[3];   /* time in the GEMMs (cudaEvent), s */
    int compute_capability;   /* major x 10 + minor (90: Hopper), 0 unknown; FP8 burns at >= 89 */
    int clock_samples;        /* NVML clocks-event-reason samples taken during the burn */
    unsigned long long clock_reasons; /* OR of the reasons seen in them (NVML bit mask) */
} hc_gpu_dev;

typedef struct hc_facts {
    char node[64];     /* $SLURMD_NODENAME, else the host name */
    char device[128];  /* CPU model name (GPU name in the GPU mode) */
    int rank, threads;
    unsigned measured; /* bit (1u << check) set when value[check] was measured */
    double value[HC_CHECK_COUNT];
    /* details for the JSON report */
    long gemm_iters[2];       /* [0] fp32, [1] fp64 */
    double gemm_seconds[2];
    int n_rounds;             /* all-reduce rounds this rank took part in (0..2) */
    int group_size[2];        /* ranks in its group per round (GPU mode: GPUs in its communicator) */
    int partner[2];           /* first other rank of its group per round */
    double busbw_round[2];    /* GB/s per round; HC_ALLREDUCE (HC_NCCL_PAIRS) is the best of them */
    char skipped[256];        /* checks of the mode not measured, and why */
    /* GPU mode */
    int gpu_mode;
    int n_gpus;               /* GPUs measured: gpus[0 .. n_gpus) */
    hc_gpu_dev gpus[HC_MAX_GPUS];
    int worst_gpu[HC_CHECK_COUNT]; /* the GPU whose value is the node's value; -1: none/node-level */
} hc_facts;

static inline void hc_fact_set(hc_facts *f, hc_check c, double v) {
    f->value[c] = v;
    f->measured |= 1u << c;
}
static inline void hc_gpu_set(hc_gpu_dev *g, hc_check c, double v) {
    g->value[c] = v;
    g->measured |= 1u << c;
}
/* Appends "; what" (or "what" when empty) to f->skipped, truncating. */
void hc_note_skipped(hc_facts *f, const char *what);

/* ---- verdicts (judge) ---- */

typedef struct hc_verdict {
    hc_check check;
    int ok;
    double actual, limit;
} hc_verdict;

/* Pure: one verdict per measured check, in hc_check order, into out (room for HC_CHECK_COUNT).
 * A measured check without a threshold fails (config validation prevents it). NaN fails.
 * Returns the number of verdicts; *n_failed gets how many failed. */
int hc_judge(const hc_facts *f, const hc_thresholds *t, hc_verdict *out, int *n_failed);

/* "NODE CHECK OK|FAIL ACTUAL EXPECTED UNIT" (no newline). Returns 0, or 1 when truncated. */
int hc_verdict_line(char *buf, size_t n, const char *node, const hc_verdict *v);

/* Drain reason for the first failing verdict: "tessera-hc: CHECK ACTUAL<LIMIT UNIT" (">" for
 * at-most checks), with " (+K more)" when K more failed; sanitised. Returns 0, 1 if none failed. */
int hc_drain_reason(char *buf, size_t n, const hc_verdict *v, int n_verdicts);

/* In place: keeps printable ASCII (0x20..0x7e) except quotes and backslash, which become '_';
 * other bytes are dropped. Returns the new length. */
size_t hc_sanitize_reason(char *s);
/* A node name as passed to scontrol: [A-Za-z0-9._-]+ only. Returns 1 when valid. */
int hc_node_name_ok(const char *s);

#endif
