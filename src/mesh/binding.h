/* binding.h — where each rank runs (docs/site.md "Binding"): the cores of its CPU set (the cores
 * Slurm's --cpu-bind gave the task), their NUMA nodes, its GPU; threads = auto counts those cores,
 * one thread per core (hardware threads of one core count once). */
#ifndef TSR_BINDING_H
#define TSR_BINDING_H

#include <stddef.h>

#include "dist/dist.h"

/* Cores (distinct core_id per package) in this process's CPU affinity set; 0 when unreadable. */
int binding_cores(void);
/* "cores 0-3,8 | NUMA 0 | GPU 2" of this process into buf; gpu: the CUDA device index this rank
 * uses among those CUDA_VISIBLE_DEVICES shows (-1: none), named as that variable names it. */
void binding_describe(char *buf, size_t n, int gpu);
/* Every rank's description, printed by rank 0 ("rank R on HOST: ..."; the first 64 ranks and a
 * count after). Collective. */
void binding_print(const tsr_dist *d, int gpu);
/* The CUDA_VISIBLE_DEVICES entry of CUDA device `index` (counting round), or its number when the
 * variable is unset, into buf (energy.c maps it to NVML the same way). */
void binding_cuda_visible(int index, char *buf, size_t n);

#endif
