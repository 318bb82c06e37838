/* hc_gpu_util.c — the small helpers every file of libtessera-hc-gpu.so uses (hc_gpu_impl.h): the
 * first-failure note, the clock, the fault injections' sleep, one thread per GPU. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "hc_gpu_impl.h"

void gpu_note(char *err, size_t n, const char *fmt, ...) {
    if (!err || n == 0 || err[0]) return; /* keep the first failure: the later ones follow from it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

double gpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void gpu_sleep(double s) {
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

typedef struct each_arg {
    void (*fn)(void *ctx, int d);
    void *ctx;
    int d;
} each_arg;

static void *each_main(void *p) {
    each_arg *a = p;
    a->fn(a->ctx, a->d);
    return NULL;
}

void gpu_each(int n, void (*fn)(void *ctx, int d), void *ctx) {
    pthread_t t[HC_MAX_GPUS];
    each_arg a[HC_MAX_GPUS];
    int started[HC_MAX_GPUS] = {0};
    for (int d = 0; d < n && d < HC_MAX_GPUS; d++) {
        a[d] = (each_arg){fn, ctx, d};
        started[d] = pthread_create(&t[d], NULL, each_main, &a[d]) == 0;
        if (!started[d]) fn(ctx, d); /* no thread to be had: this GPU runs alone, still measured */
    }
    for (int d = 0; d < n && d < HC_MAX_GPUS; d++)
        if (started[d]) pthread_join(t[d], NULL);
}
