/* metrics_units.c — see metrics_units.h. */
#include "metrics_units.h"

#include <stdio.h>
#include <strings.h>

/* Peak dense FLOP/s per device (per rank). GPUs: bf16 dense from the vendors' datasheets.
 * cpu: 172.5 GFLOP/s per core = half the measured 2-core AVX-512 FMA roofline of the CI
 * machine kind (docs/mfu.md); set peak_flops for other CPUs. */
static const struct { const char *name; double flops; int per_thread; } peak_table[] = {
    {"H100", 989.4e12, 0}, {"H200", 989.4e12, 0}, {"A100", 312e12, 0}, {"cpu", 172.5e9, 1},
};

double metrics_peak_flops(const char *device, int threads) {
    for (size_t i = 0; i < sizeof peak_table / sizeof peak_table[0]; i++)
        if (strcasecmp(peak_table[i].name, device) == 0)
            return peak_table[i].flops * (peak_table[i].per_thread ? threads : 1);
    return 0.0;
}

void metrics_human_bytes(char *buf, size_t n, double b) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024.0 && i < 4) b /= 1024.0, i++;
    snprintf(buf, n, "%.1f %s", b, u[i]);
}
