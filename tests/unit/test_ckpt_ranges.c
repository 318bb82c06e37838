/* test_ckpt_ranges.c — the pure logic under the checkpoints: flat ranges -> hyperslab boxes, and
 * crc32c_combine. No MPI, no HDF5.
 *
 * Boxes: for many random shapes (1-D..4-D) and ranges, every element of [lo, hi) is covered by
 * exactly one box, nothing outside is, and there are at most 2*ndim-1 boxes.
 * CRC: crc32c_combine(crc(A), crc(B), len B) equals tsr_crc32c of A||B, zero-length parts included,
 * and folding many random parts in order gives the CRC of the whole buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ckpt_internal.h"
#include "crc32c.h"
#include "tap.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(uint64_t n) { /* uniform in [0, n) (n > 0), xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (rng_state * 2685821657736338717ull) % n;
}

/* Checks one range; returns 0 when exact, else prints why (once) and returns 1. */
static int check_range(int ndim, const int64_t *shape, uint64_t lo, uint64_t hi,
                       unsigned char *mark, int *max_boxes) {
    uint64_t numel = ckpt_numel(ndim, shape);
    ckpt_box boxes[CKPT_MAX_BOXES];
    int nb = flat_range_to_hyperslabs(ndim, shape, lo, hi, boxes);
    if (nb < 0 || nb > 2 * ndim - 1) {
        tap_diag("ndim %d range [%llu,%llu): %d boxes, expected 0..%d", ndim,
                 (unsigned long long)lo, (unsigned long long)hi, nb, 2 * ndim - 1);
        return 1;
    }
    if (nb > *max_boxes) *max_boxes = nb;
    memset(mark, 0, numel);
    for (int b = 0; b < nb; b++) {
        uint64_t idx[4] = {0}, cnt = 1;
        for (int d = 0; d < ndim; d++) {
            if (boxes[b].count[d] == 0 ||
                boxes[b].start[d] + boxes[b].count[d] > (uint64_t)shape[d]) {
                tap_diag("box %d out of the shape in dim %d", b, d);
                return 1;
            }
            cnt *= boxes[b].count[d];
        }
        for (uint64_t e = 0; e < cnt; e++) { /* enumerate the box's elements */
            uint64_t r = e, flat = 0;
            for (int d = ndim - 1; d >= 0; d--) {
                idx[d] = boxes[b].start[d] + r % boxes[b].count[d];
                r /= boxes[b].count[d];
            }
            for (int d = 0; d < ndim; d++) flat = flat * (uint64_t)shape[d] + idx[d];
            mark[flat]++;
        }
    }
    for (uint64_t i = 0; i < numel; i++) {
        unsigned want = (i >= lo && i < hi) ? 1 : 0;
        if (mark[i] != want) {
            tap_diag("ndim %d range [%llu,%llu): element %llu covered %u times, expected %u", ndim,
                     (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)i, mark[i],
                     want);
            return 1;
        }
    }
    return 0;
}

int main(void) {
    tap_plan(10);
    unsigned char *mark = malloc(8192) /* >= 9^4 and 50^2 and 4000 */;
    /* the worked example of ckpt_ranges.c */
    {
        int64_t shape[2] = {4, 5};
        ckpt_box b[CKPT_MAX_BOXES];
        int nb = flat_range_to_hyperslabs(2, shape, 3, 17, b);
        tap_ok(nb == 3 && b[0].start[0] == 0 && b[0].start[1] == 3 && b[0].count[1] == 2 &&
                   b[1].start[0] == 1 && b[1].count[0] == 2 && b[1].count[1] == 5 &&
                   b[2].start[0] == 3 && b[2].count[1] == 2,
               "shape (4,5) range [3,17) -> row 0 cols 3..4, rows 1..2, row 3 cols 0..1 (%d boxes)",
               nb);
    }
    for (int ndim = 1; ndim <= 4; ndim++) {
        int bad = 0, trials = 0, max_boxes = 0;
        for (int t = 0; t < 3000 && !bad; t++) {
            int64_t shape[4];
            for (int d = 0; d < ndim; d++)
                shape[d] = 1 + (int64_t)rnd(ndim == 1 ? 4000 : ndim == 2 ? 50 : 9);
            uint64_t numel = ckpt_numel(ndim, shape);
            uint64_t lo = rnd(numel + 1), hi = lo + rnd(numel - lo + 1);
            if (t % 7 == 0) lo = 0;
            if (t % 11 == 0) hi = numel;
            if (lo > hi) lo = hi;
            bad |= check_range(ndim, shape, lo, hi, mark, &max_boxes);
            trials++;
        }
        tap_ok(!bad,
               "%d-D: %d random shapes and ranges covered exactly (at most %d boxes, seen %d)",
               ndim, trials, 2 * ndim - 1, max_boxes);
    }
    {
        int64_t shape[3] = {3, 4, 5}, bad_shape[2] = {3, 0};
        ckpt_box b[CKPT_MAX_BOXES];
        tap_ok(flat_range_to_hyperslabs(3, shape, 5, 5, b) == 0 &&
                   flat_range_to_hyperslabs(3, shape, 0, 61, b) == -1 &&
                   flat_range_to_hyperslabs(3, shape, 7, 6, b) == -1 &&
                   flat_range_to_hyperslabs(2, bad_shape, 0, 0, b) == -1 &&
                   flat_range_to_hyperslabs(5, shape, 0, 1, b) == -1,
               "empty range -> 0 boxes; hi > numel, lo > hi, a zero dimension, ndim 5 -> -1");
    }
    /* CRC combine */
    enum { N = 10000 };
    unsigned char *buf = malloc(N);
    for (int i = 0; i < N; i++) buf[i] = (unsigned char)rnd(256);
    uint32_t whole = tsr_crc32c(0, buf, N);
    {
        int bad = 0;
        for (int t = 0; t < 2000; t++) {
            size_t a = rnd(N + 1), b = rnd(N - a + 1);
            uint32_t ca = tsr_crc32c(0, buf, a), cb = tsr_crc32c(0, buf + a, b);
            if (crc32c_combine(ca, cb, b) != tsr_crc32c(0, buf, a + b)) bad++;
        }
        tap_ok(
            bad == 0,
            "crc32c_combine(crc A, crc B, |B|) == crc32c(A||B) for 2000 random splits (%d wrong)",
            bad);
    }
    {
        uint32_t c0 = tsr_crc32c(0, buf, 0);
        tap_ok(crc32c_combine(whole, c0, 0) == whole && crc32c_combine(c0, whole, N) == whole &&
                   crc32c_combine(c0, c0, 0) == c0,
               "zero-length parts: A||empty, empty||A, empty||empty");
    }
    {
        uint32_t acc = tsr_crc32c(0, buf, 0);
        size_t pos = 0;
        int parts = 0;
        while (pos < N) {
            size_t len = rnd(700);
            if (len > N - pos) len = N - pos;
            acc = crc32c_combine(acc, tsr_crc32c(0, buf + pos, len), len);
            pos += len;
            parts++;
        }
        tap_ok(acc == whole, "folding %d parts (some empty) in order gives the whole buffer's CRC",
               parts);
    }
    {
        /* known answer: CRC32C("123456789") = 0xE3069283, assembled from "1234" and "56789" */
        uint32_t c = crc32c_combine(tsr_crc32c(0, "1234", 4), tsr_crc32c(0, "56789", 5), 5);
        tap_ok(c == 0xE3069283u, "combine(\"1234\", \"56789\") = 0x%08X, expected 0xE3069283", c);
    }
    free(buf);
    free(mark);
    return tap_done();
}
