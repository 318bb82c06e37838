/* mix.c — the batch composition of a data mix (see mix.h for the rules). */
#include "data/mix.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/data.h"

void mix_apportion(const double *w, int n, int64_t gb, int64_t *out) {
    double total = 0, rem[TSR_MAX_STREAMS];
    for (int k = 0; k < n; k++) total += w[k];
    int64_t given = 0;
    for (int k = 0; k < n; k++) {
        double q = (double)gb * w[k] / total;
        out[k] = (int64_t)floor(q);
        rem[k] = q - (double)out[k];
        given += out[k];
    }
    /* the gb - given remaining samples go to the largest remainders, ties to the lower index;
     * a stream of weight 0 never gets one */
    for (; given < gb; given++) {
        int best = -1;
        for (int k = 0; k < n; k++)
            if (w[k] > 0 && (best < 0 || rem[k] > rem[best])) best = k;
        out[best]++;
        rem[best] = -1;
    }
}

uint64_t mix_stream_seed(uint64_t seed, int k) { return seed ^ ((uint64_t)k * 0x9E3779B97F4A7C15ull); }

int mix_build(tsr_mix *m, int n_streams, int n_phases, const int64_t *start,
              const double (*w)[TSR_MAX_STREAMS], int64_t gb, uint64_t seed, char *why, size_t why_n) {
    memset(m, 0, sizeof *m);
    if (n_streams < 1 || n_streams > TSR_MAX_STREAMS || n_phases < 1 || n_phases > TSR_MAX_PHASES + 1 ||
        gb < 1 || start[0] != 0) {
        snprintf(why, why_n, "internal: bad mix plan arguments");
        return -1;
    }
    m->n_streams = n_streams;
    m->n_phases = n_phases;
    m->gb = gb;
    m->seed = seed ^ 0x6D69785F736C6F74ull; /* "mix_slot": not the streams' sampler key */
    for (int p = 0; p < n_phases; p++) {
        double total = 0;
        for (int k = 0; k < n_streams; k++) {
            if (!(w[p][k] >= 0) || !isfinite(w[p][k])) {
                snprintf(why, why_n, "phase %d: weight of stream %d is %g, expected >= 0", p, k, w[p][k]);
                return -1;
            }
            total += w[p][k];
        }
        if (!(total > 0)) {
            snprintf(why, why_n, "phase %d: every stream has weight 0", p);
            return -1;
        }
        if (p > 0 && start[p] <= start[p - 1]) {
            snprintf(why, why_n, "phase %d starts at batch %lld, not after phase %d (batch %lld)", p,
                     (long long)start[p], p - 1, (long long)start[p - 1]);
            return -1;
        }
        m->start[p] = start[p];
        mix_apportion(w[p], n_streams, gb, m->count[p]);
    }
    m->start[n_phases] = INT64_MAX;
    return 0;
}

int mix_phase(const tsr_mix *m, int64_t d) {
    int p = 0;
    while (p + 1 < m->n_phases && d >= m->start[p + 1]) p++;
    return p;
}

void mix_cumulative(const tsr_mix *m, int64_t d, int64_t *cum) {
    for (int k = 0; k < m->n_streams; k++) cum[k] = 0;
    for (int p = 0; p < m->n_phases && m->start[p] < d; p++) {
        int64_t end = m->start[p + 1] < d ? m->start[p + 1] : d;
        for (int k = 0; k < m->n_streams; k++) cum[k] += (end - m->start[p]) * m->count[p][k];
    }
}

void mix_slots(const tsr_mix *m, int64_t d, int64_t lo, int64_t hi, int *stream, uint64_t *pos) {
    int64_t cum[TSR_MAX_STREAMS], bound[TSR_MAX_STREAMS + 1];
    const int64_t *count = m->count[mix_phase(m, d)];
    mix_cumulative(m, d, cum);
    bound[0] = 0;
    for (int k = 0; k < m->n_streams; k++) bound[k + 1] = bound[k] + count[k];
    for (int64_t j = lo; j < hi; j++) {
        uint64_t q = m->n_streams == 1 ? (uint64_t)j
                                       : sampler_permute(m->seed, (uint64_t)d, (uint64_t)m->gb, (uint64_t)j);
        int k = 0;
        while ((int64_t)q >= bound[k + 1]) k++;
        stream[j - lo] = k;
        pos[j - lo] = (uint64_t)(cum[k] + ((int64_t)q - bound[k]));
    }
}
