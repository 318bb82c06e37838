/* fp8_dump.c — kernels/cuda/tcu_fp8.h's functions on stdin's values, for the float64 reference of
 * tests/reference/test_fp8_formats.py (which decodes and rounds from the formats' definition on
 * its own).
 *   fp8_dump decode             every bit pattern of both formats: "FMT BITS VALUE" (VALUE in C's
 *                               %a, or nan / -nan / inf / -inf), FMT 0 E4M3, 1 E5M2
 *   fp8_dump encode FMT SAT     per stdin line (fp32 bits in hex): the code, in hex
 *   fp8_dump scale FMT          per stdin line (fp32 bits of an amax, hex): the scale's and its
 *                               inverse's fp32 bits, in hex
 * Exit 2 on a usage error. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcu_fp8.h"

static void print_value(float v) {
    if (isnan(v)) printf("%snan\n", signbit(v) ? "-" : "");
    else if (isinf(v)) printf("%sinf\n", v < 0 ? "-" : "");
    else printf("%a\n", (double)v);
}

static int fmt_arg(const char *s, tcu_fp8_format *fmt) {
    if (strcmp(s, "0") && strcmp(s, "1")) return -1;
    *fmt = s[0] == '0' ? TCU_FP8_E4M3 : TCU_FP8_E5M2;
    return 0;
}

int main(int argc, char **argv) {
    tcu_fp8_format fmt = TCU_FP8_E4M3;
    char line[64];
    if (argc == 2 && !strcmp(argv[1], "decode")) {
        for (int f = 0; f < 2; f++)
            for (int b = 0; b < 256; b++) {
                printf("%d %d ", f, b);
                print_value(tcu_fp8_decode((tsr_fp8)b, (tcu_fp8_format)f));
            }
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "encode") && !fmt_arg(argv[2], &fmt)) {
        const int sat = atoi(argv[3]);
        while (fgets(line, sizeof line, stdin))
            printf("%02x\n", tcu_fp8_encode(tcu_fp8_bits_f32((uint32_t)strtoul(line, NULL, 16)),
                                            fmt, sat));
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "scale") && !fmt_arg(argv[2], &fmt)) {
        while (fgets(line, sizeof line, stdin)) {
            const float a = tcu_fp8_bits_f32((uint32_t)strtoul(line, NULL, 16));
            printf("%08" PRIx32 " %08" PRIx32 "\n", tcu_fp8_f32_bits(tcu_fp8_scale(a, fmt)),
                   tcu_fp8_f32_bits(tcu_fp8_scale_inv(a, fmt)));
        }
        return 0;
    }
    fprintf(stderr, "usage: fp8_dump decode | encode FMT SAT | scale FMT (FMT 0 E4M3, 1 E5M2)\n");
    return 2;
}
