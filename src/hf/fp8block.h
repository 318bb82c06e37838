/* fp8block.h — block-scaled FP8 to fp32: the form of DeepSeek-V3's, Kimi K2's and Moonlight's
 * published Hugging Face weights (docs/hf.md "FP8 checkpoints").
 *
 * A weight W of (rows, cols) is stored as NAME (F8_E4M3, rows x cols) and NAME_scale_inv (F32,
 * ceil(rows / br) x ceil(cols / bc)), one scale per block of br x bc elements (config.json's
 * quantization_config.weight_block_size, [128, 128]), the blocks of the last row and column
 * partial when br, bc do not divide the shape: W[r][c] = e4m3(NAME[r][c]) x
 * scale_inv[r / br][c / bc] (DeepSeek's weight_dequant, transformers' FP8 integration). E4M3 is
 * the OCP "fn" variant (torch.float8_e4m3fn): sign, 4 exponent bits of bias 7, 3 mantissa bits,
 * no infinities, S.1111.111 NaN; its values are exact in fp32, and so is the product unless the
 * scale's significand is long (fp32 rounding, as torch's own product in fp32). A NaN element, a
 * scale that is not finite, or a product past fp32's range is refused.
 * No I/O: the caller reads the tensors (untrusted: every size is checked here).
 */
#ifndef TSR_HF_FP8BLOCK_H
#define TSR_HF_FP8BLOCK_H

#include <stddef.h>
#include <stdint.h>

/* The value of E4M3 (fn) code b; NaN for 0x7f and 0xff. */
float fp8_e4m3_to_f32(uint8_t b);

/* The scale tensor's shape (sndim dimensions) against a weight of rows x cols in blocks of
 * br x bc: 0, or -1 with what it must be in why. */
int fp8_block_shape(int64_t rows, int64_t cols, int64_t br, int64_t bc, const int64_t *sshape,
                    int sndim, char *why, size_t cap);

/* Dequantises w (rows x cols codes, nw bytes) with scales s (ns floats, the shape above) into out
 * (out_n >= rows x cols floats). 0, or -1 with the reason in why. */
int fp8_block_to_f32(const uint8_t *w, size_t nw, const float *s, size_t ns, int64_t rows,
                     int64_t cols, int64_t br, int64_t bc, float *out, size_t out_n, char *why,
                     size_t cap);

#endif
