/* energy.h — energy counters a run's cost reads (docs/site.md "What a run cost"):
 *   GPU: NVML's total energy since the driver loaded (nvmlDeviceGetTotalEnergyConsumption, mJ;
 *        Volta and newer), of the GPU this rank trains on, through libnvidia-ml.so.1 opened with
 *        dlopen (no CUDA or NVML at build time; a CPU node has none);
 *   CPU: the kernel's powercap (RAPL) package counters, /sys/class/powercap/intel-rapl:N/energy_uj,
 *        read by the first rank of each node (the counters are the node's), wrapping at
 *        max_energy_range_uj; readable by root only on recent kernels. TSR_POWERCAP_ROOT names
 *        another directory holding intel-rapl:N/ entries (tests).
 * A source that is absent or unreadable gives NAN and a reason; nothing stops the run. */
#ifndef TSR_ENERGY_H
#define TSR_ENERGY_H

#include <stddef.h>

#define TSR_RAPL_MAX 16           /* packages read (sockets of a node) */

typedef struct tsr_energy {
    int gpu_on, cpu_on;          /* a counter was read at start */
    double gpu_j0, cpu_j0;       /* the counters at start, joules (cpu: summed) */
    int n_pkg;                   /* the packages, each wrapping at its own range: */
    double pkg_last[TSR_RAPL_MAX], pkg_range[TSR_RAPL_MAX], cpu_wraps; /* joules */
    char gpu_why[160], cpu_why[160]; /* why a counter is not read ("" when it is) */
} tsr_energy;

/* Opens what this rank reads: the GPU counter when gpu_index >= 0 (the CUDA device this rank
 * uses among those CUDA_VISIBLE_DEVICES shows, mapped to NVML's numbering through that variable),
 * the package counters when node_first (the node's first rank). Reads the start values. */
void energy_start(tsr_energy *e, int gpu_index, int node_first);
/* Joules since energy_start: *gpu, *cpu (NAN where not read). */
void energy_read(tsr_energy *e, double *gpu, double *cpu);
/* The package counters under root (a powercap directory): the top-level intel-rapl:N/energy_uj
 * in joules into j[] and their max_energy_range_uj into range[], in name order, at most
 * TSR_RAPL_MAX; the count, or -1 with why when there is none or one is unreadable. */
int energy_rapl_read(const char *root, double *j, double *range, char *why, size_t n);

#endif
