/* hc_gpu_mock.c — a stand-in for libtessera-hc-gpu.so with no CUDA in it, for tests on machines
 * without a GPU (tests/gpu/test_hc_gpu.sh). It implements the same function table (hc_gpu.h) and
 * answers with canned facts of a healthy H100 node, so everything on the executable's side of the
 * GPU mode runs for real: loading and ABI checks, choosing GPU or CPU checks across ranks, the
 * fault injections that act outside the library (missing_gpu), the NCCL bootstrap over MPI (id
 * broadcast, group sizes, slowest-node timing) and the culprit logic of the node pairs, the
 * summary of per-GPU facts, the judge, the verdict lines, the JSON report and --drain.
 * The faults that act inside the real library are imitated on the canned numbers: slow_gemm and
 * low_membw divide the rates by 50, low_busbw multiplies all-reduce times by 100, corrupt_gemm
 * reports one wrong element per precision. FP8 is burnt (gemm_fp8 facts) only on GPUs of compute
 * capability >= 8.9, as the real library does.
 *
 * Environment (read at each call):
 *   TSR_HC_MOCK_GPUS   devices to report (default 2; 0 = CUDA sees none; "fail" = no driver)
 *   TSR_HC_MOCK_NAME   GPU 0's name (default "NVIDIA H100 80GB HBM3")
 *   TSR_HC_MOCK_FACT   CHECK=VALUE@GPU[,...]: set a per-GPU fact (e.g. remap_pending=1@1)
 *   TSR_HC_MOCK_CC     every GPU's compute capability x 10 (default 90, Hopper; 80: an A100, no FP8)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hc.h"
#include "hc_fault.h"
#include "hc_gpu.h"

static int mock_gpus(void) {
    const char *s = getenv("TSR_HC_MOCK_GPUS");
    return s && *s ? atoi(s) : 2;
}

static int mock_probe(hc_gpu_info *out, char *err, size_t n) {
    const char *s = getenv("TSR_HC_MOCK_GPUS"), *name = getenv("TSR_HC_MOCK_NAME");
    memset(out, 0, sizeof *out);
    if (s && !strcmp(s, "fail")) {
        snprintf(err, n, "cudaGetDeviceCount: mock: no CUDA driver");
        return 2;
    }
    out->n_devices = mock_gpus();
    snprintf(out->name0, sizeof out->name0, "%s", name && *name ? name : "NVIDIA H100 80GB HBM3");
    snprintf(out->versions, sizeof out->versions, "mock GPU library (no CUDA)");
    return 0;
}

/* TSR_HC_MOCK_FACT entries for this GPU override its canned facts */
static void mock_overrides(hc_gpu_dev *g, int d) {
    const char *spec = getenv("TSR_HC_MOCK_FACT");
    char buf[512];
    if (!spec || !*spec) return;
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(it, '='), *at = strchr(it, '@');
        if (!eq || !at) continue;
        *eq = *at = '\0';
        if (atoi(at + 1) != d) continue;
        for (int c = 0; c < HC_CHECK_COUNT; c++)
            if (!strcmp(hc_checks[c].name, it)) hc_gpu_set(g, (hc_check)c, strtod(eq + 1, NULL));
    }
}

static void mock_state(const hc_gpu_job *job, hc_gpu_dev *dev) {
    const char *cc = getenv("TSR_HC_MOCK_CC");
    for (int d = 0; d < job->n_devices; d++) {
        hc_gpu_dev *g = &dev[d];
        g->compute_capability = cc && *cc ? atoi(cc) : 90;
        snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");
        snprintf(g->bus_id, sizeof g->bus_id, "00000000:%02X:00.0", 0x18 + 0x10 * d);
        hc_gpu_set(g, HC_ECC_UNCORRECTED, 0); /* Hopper: row remapping, no retired pages */
        hc_gpu_set(g, HC_REMAP_PENDING, 0);
        hc_gpu_set(g, HC_REMAP_FAILED, 0);
        mock_overrides(g, d);
    }
}

static void mock_burn(const hc_gpu_job *job, hc_gpu_dev *dev) {
    double slow = HC_FAULT(job->faults, HC_FAULT_SLOW_GEMM) ? 50 : 1;
    double wrong = HC_FAULT(job->faults, HC_FAULT_CORRUPT_GEMM) ? 1 : 0;
    for (int d = 0; d < job->n_devices; d++) {
        hc_gpu_dev *g = &dev[d];
        hc_gpu_set(g, HC_GEMM_BF16, (800.0 - d) / slow);
        hc_gpu_set(g, HC_GEMM_BF16_VERIFY, wrong);
        hc_gpu_set(g, HC_GEMM_FP32, 52.0 / slow);
        hc_gpu_set(g, HC_GEMM_FP32_VERIFY, wrong);
        if (hc_gpu_burns_fp8(job, g)) {
            hc_gpu_set(g, HC_GEMM_FP8, (1450.0 - d) / slow);
            hc_gpu_set(g, HC_GEMM_FP8_VERIFY, wrong);
            g->gemm_iters[2] = 10;
            g->gemm_seconds[2] = job->burn_s;
        }
        hc_gpu_set(g, HC_THROTTLE_HW, 0);
        hc_gpu_set(g, HC_THROTTLE_THERMAL, 0);
        hc_gpu_set(g, HC_POWER_VIOLATION, 60);
        hc_gpu_set(g, HC_THERMAL_VIOLATION, 0);
        g->gemm_iters[0] = g->gemm_iters[1] = 10;
        g->gemm_seconds[0] = g->gemm_seconds[1] = job->burn_s;
        g->clock_samples = 10;
        mock_overrides(g, d);
    }
}

static void mock_membw(const hc_gpu_job *job, hc_gpu_dev *dev) {
    for (int d = 0; d < job->n_devices; d++) {
        hc_gpu_set(&dev[d], HC_HBM_BW, (3050.0 + d) / (HC_FAULT(job->faults, HC_FAULT_LOW_MEMBW) ? 50 : 1));
        mock_overrides(&dev[d], d);
    }
}

static double mock_nccl_node(const hc_gpu_job *job, char *err, size_t n) {
    (void)err, (void)n;
    return HC_FAULT(job->faults, HC_FAULT_LOW_BUSBW) ? 4.7 : 470.0;
}

static int mock_nccl_id(unsigned char id[HC_NCCL_ID_BYTES], char *err, size_t n) {
    (void)err, (void)n;
    memset(id, 0, HC_NCCL_ID_BYTES);
    snprintf((char *)id, HC_NCCL_ID_BYTES, "mock-nccl-id-%d", (int)getpid());
    return 0;
}

/* Iterations last as a 400 GB/s busbw would make them; 100x longer with low_busbw. The id must be
 * the one the group's first node made: the executable's MPI broadcast is what is tested. */
static int mock_nccl_group(const hc_gpu_job *job, const unsigned char id[HC_NCCL_ID_BYTES], int first_rank,
                           int nranks, double *iter_s, long long *wrong, char *err, size_t n) {
    if (strncmp((const char *)id, "mock-nccl-id-", 13) != 0 || first_rank < 0 ||
        first_rank + job->n_devices > nranks) {
        snprintf(err, n, "mock: bad bootstrap (id '%.20s', ranks %d..%d of %d)", (const char *)id, first_rank,
                 first_rank + job->n_devices - 1, nranks);
        return 2;
    }
    double algbw = 400e9 / (2.0 * (nranks - 1) / nranks);
    double t = (double)job->allreduce_mib * 1024 * 1024 / algbw;
    for (int i = 0; i < job->allreduce_iters; i++)
        iter_s[i] = t * (HC_FAULT(job->faults, HC_FAULT_LOW_BUSBW) ? 100 : 1);
    *wrong = 0;
    return 0;
}

static void mock_close(void) {}

static const hc_gpu_api api = {
    .abi = HC_GPU_ABI,
    .check_count = HC_CHECK_COUNT,
    .dev_size = sizeof(hc_gpu_dev),
    .probe = mock_probe,
    .state = mock_state,
    .burn = mock_burn,
    .membw = mock_membw,
    .nccl_node = mock_nccl_node,
    .nccl_id = mock_nccl_id,
    .nccl_group = mock_nccl_group,
    .close = mock_close,
};

const hc_gpu_api *tsr_hc_gpu_api(void);
const hc_gpu_api *tsr_hc_gpu_api(void) { return &api; }
