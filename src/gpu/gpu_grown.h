/* gpu_grown.h — a device scratch that grows (the composed MLA path, DeepSeek's router on the host,
 * tensor parallelism's fp32 sums: src/gpu/gpu_mla.c, gpu_route_ds.c, gpu_tp.c). */
#ifndef TSR_GPU_GROWN_H
#define TSR_GPU_GROWN_H

#include <stddef.h>

#include "cuda_ops.h"

/* A device scratch that grows: at least bytes of s (the previous buffer freed after the work queued
 * on stream; named what in an out-of-memory message); tcu_free(s->buf) releases it. */
typedef struct gpu_grown {
    void *buf;
    size_t have;
} gpu_grown;
void *gpu_grown_get(tcu_stream stream, gpu_grown *s, size_t bytes, const char *what);

#endif
