/* mxfp4.h — OCP Microscaling MXFP4 to fp32 or bf16: the form of gpt-oss's expert weights in its
 * Hugging Face files (docs/hf.md "MXFP4").
 *
 * A tensor W of (rows, cols) is stored as two uint8 tensors: NAME_blocks (rows, G, 16), every byte
 * two FP4 E2M1 elements, the low nibble first (element 2j of a block in bits 0-3 of byte j,
 * element 2j + 1 in bits 4-7), and NAME_scales (rows, G), one E8M0 scale per block of 32
 * elements: 2^(s - 127). cols = 32 G. E2M1 codes 0-7 are +0, 0.5, 1, 1.5, 2, 3, 4, 6, codes 8-15
 * the same negated (the sign is bit 3). W[r][32 g + i] = e2m1(element i of block (r, g)) x
 * 2^(scales[r][g] - 127), as transformers' convert_moe_packed_tensors computes it (its lookup
 * table, low nibble to even columns, ldexp). Every such product is exact in fp32 and in bf16 (at
 * most 2 significant bits) unless it passes their range (an element >= 2 at a scale of 2^127 or
 * >= 4 at 2^126), which is refused as a non-finite weight, as is a scale byte of 255 (NaN in the
 * OCP specification).
 * gpt-oss's leading expert axis is part of rows ((E, R, G, 16) is (E R, G, 16)); the transpose
 * and the gate/up interleave of its gate_up_proj are the family mapping's (hf_map.c).
 * No I/O: the caller reads the tensors (they are untrusted: every size is checked here).
 */
#ifndef TSR_HF_MXFP4_H
#define TSR_HF_MXFP4_H

#include <stddef.h>
#include <stdint.h>

#define MXFP4_BLOCK 32       /* elements per E8M0 scale */
#define MXFP4_BLOCK_BYTES 16 /* bytes of E2M1 elements per block */

/* rows and G of a blocks tensor of shape bshape (bndim dimensions: (..., G, 16)) and a scales
 * tensor of shape sshape ((..., G): the same leading dimensions, folded into rows). 0, or -1 with
 * the reason in why. */
int mxfp4_shapes(const int64_t *bshape, int bndim, const int64_t *sshape, int sndim,
                 int64_t *rows, int64_t *groups, char *why, size_t cap);

/* Dequantises rows x groups blocks into out (rows, 32 groups) float32. nb, ns: the bytes at
 * blocks and scales, which must be rows x groups x 16 and rows x groups; out_n: the floats out
 * holds (at least rows x groups x 32). 0, or -1 with the reason in why (sizes that do not agree,
 * a scale of 255, a value past float32's range); out is then undefined. */
int mxfp4_to_f32(const uint8_t *blocks, size_t nb, const uint8_t *scales, size_t ns, int64_t rows,
                 int64_t groups, float *out, size_t out_n, char *why, size_t cap);
/* The same into bf16 bit patterns (exact: no rounding happens). */
int mxfp4_to_bf16(const uint8_t *blocks, size_t nb, const uint8_t *scales, size_t ns, int64_t rows,
                  int64_t groups, uint16_t *out, size_t out_n, char *why, size_t cap);

#endif
