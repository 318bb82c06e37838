/* cpu_rows.c — the batch-invariant product of batched decoding (ops.h matmul_rows; docs/generate.md
 * "Batched generation").
 *
 *   out (N,OC) = inp (N,IC) @ w^T (OC,IC) + bias (OC, or NULL)
 *
 * Each element out[n][o] is one dot product of inp[n] and w[o] computed by one thread in an order
 * fixed by IC alone: 16 partial sums, lane j adding x[i] w[i] for i = j, j + 16, j + 32, ... (a
 * product rounded, then added: the build's ISO C mode does not fuse them), then the lanes added
 * in a fixed tree, then the last IC % 16 terms in order, then the bias. No other row, the number
 * of rows, the thread count or the blocking changes the bits of a row, unlike sgemm, whose
 * kernels and summation order depend on the matrix shape (measured: a row's bits change with M).
 * That makes a sequence's next-token distribution a function of the sequence alone, whatever
 * batch it is decoded in. Blocking: 4 rows x 4 outputs share their loads (16 accumulators); the
 * outputs are split over the threads in blocks of 64, so each block of w is read from memory once
 * for all N rows.
 */
#include <stddef.h>
#include <string.h>

#include "cpu_internal.h"

#define LANES 16
#define RB 4       /* rows per register block */
#define OB 4       /* outputs per register block */
#define OCHUNK 64  /* outputs per thread task */

typedef float vlane __attribute__((vector_size(LANES * sizeof(float))));

/* (vectors through pointers: a 64-byte vector passed or returned by value changes the ABI without
 * AVX-512, which clang's -Wpsabi refuses) */
static inline void vload(vlane *v, const float *p) { memcpy(v, p, sizeof *v); }

/* the lanes' sum in a fixed tree, then the tail terms in order */
static inline float finish(const vlane *acc, const float *x, const float *w, int i0, int IC) {
    float s[LANES];
    memcpy(s, acc, sizeof s);
    for (int h = LANES / 2; h >= 1; h /= 2)
        for (int j = 0; j < h; j++) s[j] = s[j] + s[j + h];
    float r = s[0];
    for (int i = i0; i < IC; i++) r = r + x[i] * w[i];
    return r;
}

/* out[r][o] for the nr <= RB rows at x (ld IC) and the no <= OB outputs at w: every pair's
 * accumulator sees exactly the same operations whatever nr and no are */
static void block(float *out, int ldo, const float *x, const float *w, int nr, int no, int IC) {
    vlane acc[RB][OB];
    memset(acc, 0, sizeof acc);
    const int iv = IC / LANES * LANES;
    for (int i = 0; i < iv; i += LANES) {
        vlane wv[OB];
        for (int o = 0; o < no; o++) vload(&wv[o], w + (size_t)o * IC + i);
        for (int r = 0; r < nr; r++) {
            vlane xv;
            vload(&xv, x + (size_t)r * IC + i);
            for (int o = 0; o < no; o++) acc[r][o] = acc[r][o] + xv * wv[o];
        }
    }
    for (int r = 0; r < nr; r++)
        for (int o = 0; o < no; o++)
            out[(size_t)r * ldo + o] = finish(&acc[r][o], x + (size_t)r * IC, w + (size_t)o * IC, iv,
                                              IC);
}

void cpu_matmul_rows(float *out, const float *inp, const float *w, const float *bias, int N,
                     int IC, int OC) {
    const int tasks = (OC + OCHUNK - 1) / OCHUNK;
#pragma omp parallel for schedule(static) if ((long)N * OC * IC >= 64L * CPU_PAR_MIN)
    for (int t = 0; t < tasks; t++) {
        const int o1 = (t + 1) * OCHUNK < OC ? (t + 1) * OCHUNK : OC;
        for (int o = t * OCHUNK; o < o1; o += OB) {
            const int no = o1 - o < OB ? o1 - o : OB;
            for (int r = 0; r < N; r += RB)
                block(out + (size_t)r * OC + o, OC, inp + (size_t)r * IC, w + (size_t)o * IC,
                      N - r < RB ? N - r : RB, no, IC);
        }
        if (bias)
            for (int r = 0; r < N; r++)
                for (int o = t * OCHUNK; o < o1; o++) out[(size_t)r * OC + o] += bias[o];
    }
}
