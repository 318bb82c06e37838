/* gpu_grown.c — a device scratch that grows (gpu_grown.h). */
#include "gpu/gpu_grown.h"

void *gpu_grown_get(tcu_stream stream, gpu_grown *s, size_t bytes, const char *what) {
    if (bytes > s->have) {
        if (s->buf) tcu_sync(stream);
        tcu_free(s->buf);
        s->buf = tcu_malloc(bytes, what);
        s->have = bytes;
    }
    return s->buf;
}
