/* metrics_units.h — the units the run's figures are written in, needing no trainer: a device's
 * peak FLOP/s (the denominator of MFU, docs/mfu.md: MFU = flops_per_token * tokens/s /
 * (W * peak_flops)) and bytes as people read them. Used by the step lines, the plans
 * (src/plan/) and the tools. */
#ifndef TSR_METRICS_UNITS_H
#define TSR_METRICS_UNITS_H

#include <stddef.h>

/* Peak FLOP/s of one rank by device name ("cpu", "H100", ...): the table in docs/mfu.md.
 * For "cpu" it is the measured fp32 FMA roofline per core times threads. */
double metrics_peak_flops(const char *device, int threads);
/* b bytes as "12.3 MiB" (B, KiB, MiB, GiB, TiB; one decimal). */
void metrics_human_bytes(char *buf, size_t n, double b);

#endif
