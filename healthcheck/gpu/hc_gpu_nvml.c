/* hc_gpu_nvml.c — the NVML facts and the per-GPU state pass (see hc_gpu_impl.h). NVML ships with the driver, not with the
 * CUDA toolkit, and the build machine has no nvml.h: so libnvidia-ml.so.1 is loaded here with
 * dlopen and the few entry points used are declared below from NVIDIA's documentation of its C ABI
 * (stable across drivers; the _v2 names are the symbols nvml.h maps the plain names to):
 *   functions, return codes:  https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
 *                             https://docs.nvidia.com/deploy/nvml-api/group__nvmlInitializationAndCleanup.html
 *   nvmlReturn_t values:      https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceEnumvs.html
 *                             (NVML_SUCCESS 0, NVML_ERROR_NOT_SUPPORTED 3, ..._INSUFFICIENT_SIZE 7,
 *                             ..._FUNCTION_NOT_FOUND 13)
 *   nvmlMemoryErrorType_t (UNCORRECTED = 1), nvmlEccCounterType_t (VOLATILE = 0),
 *   nvmlPageRetirementCause_t (MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0, DOUBLE_BIT_ECC_ERROR = 1),
 *   nvmlEnableState_t (ENABLED = 1): same page
 *   nvmlPerfPolicyType_t (POWER = 0, THERMAL = 1):
 *                             https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceStructs.html
 *   clocks event reasons:     https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html
 *   nvmlViolationTime_t:      https://docs.nvidia.com/deploy/nvml-api/structnvmlViolationTime__t.html
 *                             { unsigned long long referenceTime (us); unsigned long long violationTime (ns); }
 *   retired pages:            https://docs.nvidia.com/deploy/dynamic-page-retirement/
 * All enums are passed as int (C enums of these values are int-sized on every Linux ABI).
 * Thread-safe: NVML may be called from several threads at once (its documentation says so); the
 * function table is written once, by nvml_open, before the per-GPU threads start.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hc_gpu_impl.h"

typedef int nvml_ret;                       /* nvmlReturn_t */
typedef struct nvml_device_st *nvml_dev_t; /* nvmlDevice_t: an opaque pointer */
typedef struct {
    unsigned long long reference_time; /* CPU timestamp, us */
    unsigned long long violation_time; /* ns */
} nvml_violation_time;                 /* nvmlViolationTime_t */

enum {
    NVML_OK = 0,
    NVML_NOT_SUPPORTED = 3,
    NVML_INSUFFICIENT_SIZE = 7,
    NVML_FUNCTION_NOT_FOUND = 13,
    NVML_UNCORRECTED = 1,   /* nvmlMemoryErrorType_t */
    NVML_VOLATILE = 0,      /* nvmlEccCounterType_t: since the driver loaded */
    NVML_RETIRE_SBE = 0,    /* nvmlPageRetirementCause_t */
    NVML_RETIRE_DBE = 1,
    NVML_ENABLED = 1,       /* nvmlEnableState_t */
    NVML_POLICY_POWER = 0,  /* nvmlPerfPolicyType_t */
    NVML_POLICY_THERMAL = 1,
};

/* nvmlClocksEventReason* bits (older drivers: nvmlClocksThrottleReason*, same values) */
#define NVML_REASON_SW_THERMAL 0x20ULL
#define NVML_REASON_HW_SLOWDOWN 0x08ULL
#define NVML_REASON_HW_THERMAL 0x40ULL
#define NVML_REASON_HW_POWER_BRAKE 0x80ULL
const unsigned long long nvml_reasons_hw = NVML_REASON_HW_SLOWDOWN | NVML_REASON_HW_POWER_BRAKE;
const unsigned long long nvml_reasons_thermal = NVML_REASON_HW_THERMAL | NVML_REASON_SW_THERMAL;

static struct {
    void *lib;
    nvml_ret (*init)(void);                                        /* nvmlInit_v2 */
    nvml_ret (*shutdown)(void);                                    /* nvmlShutdown */
    const char *(*error_string)(nvml_ret);                         /* nvmlErrorString */
    nvml_ret (*by_bus_id)(const char *, nvml_dev_t *);            /* nvmlDeviceGetHandleByPciBusId_v2 */
    nvml_ret (*total_ecc)(nvml_dev_t, int, int, unsigned long long *); /* nvmlDeviceGetTotalEccErrors */
    nvml_ret (*retired)(nvml_dev_t, int, unsigned *, unsigned long long *); /* nvmlDeviceGetRetiredPages */
    nvml_ret (*retired_pending)(nvml_dev_t, int *);                /* nvmlDeviceGetRetiredPagesPendingStatus */
    nvml_ret (*remapped)(nvml_dev_t, unsigned *, unsigned *, unsigned *, unsigned *); /* nvmlDeviceGetRemappedRows */
    nvml_ret (*reasons)(nvml_dev_t, unsigned long long *); /* nvmlDeviceGetCurrentClocksEventReasons */
    nvml_ret (*violation)(nvml_dev_t, int, nvml_violation_time *); /* nvmlDeviceGetViolationStatus */
} nv;

static void *sym(const char *name) { return nv.lib ? dlsym(nv.lib, name) : NULL; }
#define NVML_SYM(field, name) memcpy(&nv.field, &(void *){sym(name)}, sizeof nv.field)

static const char *nvml_msg(nvml_ret r) { return nv.error_string ? nv.error_string(r) : "?"; }

int nvml_open(char *why, size_t n) {
    nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nv.lib) {
        const char *e = dlerror();
        snprintf(why, n, "libnvidia-ml.so.1: %s", e ? e : "cannot load");
        return 1;
    }
    NVML_SYM(init, "nvmlInit_v2");
    NVML_SYM(shutdown, "nvmlShutdown");
    NVML_SYM(error_string, "nvmlErrorString");
    NVML_SYM(by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    NVML_SYM(total_ecc, "nvmlDeviceGetTotalEccErrors");
    NVML_SYM(retired, "nvmlDeviceGetRetiredPages");
    NVML_SYM(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
    NVML_SYM(remapped, "nvmlDeviceGetRemappedRows");
    NVML_SYM(reasons, "nvmlDeviceGetCurrentClocksEventReasons"); /* R535 and later */
    if (!nv.reasons) NVML_SYM(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons"); /* its old name */
    NVML_SYM(violation, "nvmlDeviceGetViolationStatus");
    if (!nv.init || !nv.shutdown || !nv.by_bus_id) {
        snprintf(why, n, "libnvidia-ml.so.1 lacks nvmlInit_v2/nvmlShutdown/nvmlDeviceGetHandleByPciBusId_v2");
        dlclose(nv.lib);
        memset(&nv, 0, sizeof nv);
        return 1;
    }
    nvml_ret r = nv.init();
    if (r != NVML_OK) {
        snprintf(why, n, "nvmlInit_v2: %s (error %d)", nvml_msg(r), r);
        dlclose(nv.lib);
        memset(&nv, 0, sizeof nv);
        return 1;
    }
    return 0;
}

void nvml_close(void) {
    if (!nv.lib) return;
    nv.shutdown();
    /* the library stays mapped: dlclose of a driver library at exit buys nothing */
    memset(&nv, 0, sizeof nv);
}

void *nvml_device(const char *bus_id, char *why, size_t n) {
    if (!nv.lib) return NULL;
    nvml_dev_t h = NULL;
    nvml_ret r = nv.by_bus_id(bus_id, &h);
    if (r != NVML_OK) {
        snprintf(why, n, "nvmlDeviceGetHandleByPciBusId_v2(%s): %s (error %d)", bus_id, nvml_msg(r), r);
        return NULL;
    }
    return h;
}

/* A query's result: SUCCESS sets the fact; "not supported" (or a driver without the function)
 * leaves it unmeasured: not applicable to this GPU; any other error sets NaN, which fails, and
 * notes why: a GPU whose state cannot be read is not known to be healthy. */
static void state_fact(hc_gpu_dev *g, hc_check c, nvml_ret r, double v, const char *call) {
    if (r == NVML_NOT_SUPPORTED || r == NVML_FUNCTION_NOT_FOUND) return;
    if (r == NVML_OK) {
        hc_gpu_set(g, c, v);
        return;
    }
    hc_gpu_set(g, c, NAN);
    gpu_note(g->error, sizeof g->error, "%s: %s (error %d)", call, nvml_msg(r), r);
}

void nvml_state(void *h, hc_gpu_dev *g) {
    nvml_dev_t d = h;
    if (!d) return;
    if (nv.total_ecc) {
        unsigned long long ecc = 0;
        nvml_ret r = nv.total_ecc(d, NVML_UNCORRECTED, NVML_VOLATILE, &ecc);
        state_fact(g, HC_ECC_UNCORRECTED, r, (double)ecc, "nvmlDeviceGetTotalEccErrors");
    }
    if (nv.retired) {
        /* pageCount in: room in addresses; out: pages retired for that cause (also when the room
         * is too small: then NVML_ERROR_INSUFFICIENT_SIZE, and the count is still right) */
        unsigned long long addr[64];
        double total = 0;
        nvml_ret worst = NVML_OK;
        for (int cause = NVML_RETIRE_SBE; cause <= NVML_RETIRE_DBE; cause++) {
            unsigned count = (unsigned)(sizeof addr / sizeof addr[0]);
            nvml_ret r = nv.retired(d, cause, &count, addr);
            if (r == NVML_OK || r == NVML_INSUFFICIENT_SIZE) total += count;
            else worst = r;
        }
        state_fact(g, HC_RETIRED_PAGES, worst, total, "nvmlDeviceGetRetiredPages");
    }
    if (nv.retired_pending) {
        int pending = 0;
        nvml_ret r = nv.retired_pending(d, &pending);
        state_fact(g, HC_RETIRED_PENDING, r, pending == NVML_ENABLED, "nvmlDeviceGetRetiredPagesPendingStatus");
    }
    if (nv.remapped) {
        unsigned corr = 0, unc = 0, pending = 0, failed = 0;
        nvml_ret r = nv.remapped(d, &corr, &unc, &pending, &failed);
        state_fact(g, HC_REMAP_PENDING, r, pending != 0, "nvmlDeviceGetRemappedRows");
        state_fact(g, HC_REMAP_FAILED, r, failed != 0, "nvmlDeviceGetRemappedRows");
    }
}

int nvml_clock_reasons(void *h, unsigned long long *mask) {
    *mask = 0;
    return !(h && nv.reasons && nv.reasons((nvml_dev_t)h, mask) == NVML_OK);
}

int nvml_violation_ns(void *h, int thermal, unsigned long long *ns) {
    nvml_violation_time t = {0, 0};
    *ns = 0;
    if (!(h && nv.violation)) return 1;
    if (nv.violation((nvml_dev_t)h, thermal ? NVML_POLICY_THERMAL : NVML_POLICY_POWER, &t) != NVML_OK) return 1;
    *ns = t.violation_time;
    return 0;
}

/* NVML handles of the CUDA devices, found from their PCI bus ids by gpu_state */
static void *nvml_of[HC_MAX_GPUS];

void *gpu_nvml_handle(int d) { return d >= 0 && d < HC_MAX_GPUS ? nvml_of[d] : NULL; }

/* Per GPU: name, bus id, compute capability, NVML handle and state. Sequential: a few fast queries per GPU. */
void gpu_state(const hc_gpu_job *job, hc_gpu_dev *dev) {
    for (int d = 0; d < job->n_devices && d < HC_MAX_GPUS; d++) {
        hc_gpu_dev *g = &dev[d];
        struct cudaDeviceProp prop;
        char why[256] = "";
        nvml_of[d] = NULL;
        GPU_TRY(g->error, sizeof g->error, cudaGetDeviceProperties(&prop, d));
        snprintf(g->name, sizeof g->name, "%.*s", (int)sizeof g->name - 1, prop.name);
        g->compute_capability = 10 * prop.major + prop.minor;
        GPU_TRY(g->error, sizeof g->error, cudaDeviceGetPCIBusId(g->bus_id, (int)sizeof g->bus_id, d));
        nvml_of[d] = nvml_device(g->bus_id, why, sizeof why);
        if (!nvml_of[d] && why[0]) gpu_note(g->error, sizeof g->error, "NVML: %s", why);
        nvml_state(nvml_of[d], g);
    fail:; /* the burn meets the same failure again and records this GPU as failed */
    }
}
