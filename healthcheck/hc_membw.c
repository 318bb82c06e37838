/* hc_membw.c — STREAM-triad memory bandwidth (see hc_measure.h). */
#include <stdlib.h>
#include <time.h>

#include "common.h"
#include "hc_fault.h"
#include "hc_measure.h"

void hc_membw(int mib, int reps, unsigned faults, hc_facts *f) {
    const size_t n = (size_t)mib * 1024 * 1024 / sizeof(double);
    double *a = NULL, *b = NULL, *c = NULL;
    if (posix_memalign((void **)&a, 64, n * 8) || posix_memalign((void **)&b, 64, n * 8) ||
        posix_memalign((void **)&c, 64, n * 8))
        tsr_die(HC_EXIT_CANNOT_RUN, "membw: cannot allocate 3 x %d MiB", mib);
    const double s = 3.0;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 0.0, b[i] = 1.0, c[i] = 2.0; /* first touch */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = tsr_now();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        double dt = tsr_now() - t0;
        if (HC_FAULT(faults, HC_FAULT_LOW_MEMBW)) {
            /* memory 1000x slower: far under any threshold whatever this node's healthy rate (a
             * cache-resident triad runs at 50+ GB/s on a current EPYC, so /50 was not enough);
             * the wait it implies is slept, at most 0.25 s a repetition */
            double wait = 999 * dt < 0.25 ? 999 * dt : 0.25;
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
            dt *= 1000;
        }
        if (dt < best) best = dt;
    }
    /* the triad is exact here (1 + 3 * 2 = 7): a wrong element means broken memory */
    size_t bad = 0;
    for (size_t i = 0; i < n; i += 4096 / sizeof(double)) bad += a[i] != 7.0;
    if (bad) tsr_warn("membw: %zu sampled triad results wrong: bandwidth counted as 0", bad);
    hc_fact_set(f, HC_MEMBW, bad ? 0.0 : 3.0 * (double)n * 8 / best / 1e9);
    free(a), free(b), free(c);
}
