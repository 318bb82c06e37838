/* tcu_fp8_linear.c — tcu_matmul_forward_fp8 (cuda_ops.h): the FP8 linear forward as a sequence of
 * the FP8 ops (amax, casts, the GEMM), host C over the C API, so that the CUDA backend and its
 * emulator (kernels/cuda_emu/) share one definition: both link this file.
 *
 * The quantised operands live in one process-wide scratch (the ops' one-stream rule, cuda_ops.h):
 * the two amax and the two inverse scales in its first 256 bytes, each in a 16-byte slot of its
 * own (tcu_matmul_fp8 takes only 16-byte aligned scale pointers: tcu_fp8_gemm_check), then the
 * input's and the weight's E4M3 codes, each 256-byte aligned; grown on demand (the stream waited for first, since
 * queued work may still read the old one), freed by tcu_fp8_release (the backend's tcu_shutdown
 * calls it; the emulator's keeps it, host memory that outlives its contexts).
 * Preconditions are the ops' own: a bad shape is refused by tcu_matmul_fp8, a NULL inp or w by
 * tcu_amax_bf16, a NULL out by tcu_matmul_fp8. */
#include "cuda_ops.h"
#include "tcu_memtab.h"

static unsigned char *fp8_scratch;
static size_t fp8_scratch_bytes;

static unsigned char *fp8_scratch_get(size_t bytes, tcu_stream s) {
    if (bytes <= fp8_scratch_bytes) return fp8_scratch;
    if (fp8_scratch) {
        tcu_sync(s);
        tcu_free(fp8_scratch);
    }
    fp8_scratch = tcu_malloc(bytes, "the FP8 operands' scratch");
    fp8_scratch_bytes = bytes;
    return fp8_scratch;
}

void tcu_fp8_release(void) {
    tcu_free(fp8_scratch);
    fp8_scratch = NULL;
    fp8_scratch_bytes = 0;
}

static size_t round256(size_t b) { return (b + 255) / 256 * 256; }

void tcu_matmul_forward_fp8(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                            const tsr_bf16 *w, const tsr_bf16 *bias, int N, int IC, int OC,
                            tsr_gelu_kind gelu, tcu_stream s) {
    if (N < 1 || IC < 1 || OC < 1) /* refused there, naming the shape (NULL pointers: below) */
        tcu_matmul_fp8(out, NULL, NULL, NULL, NULL, bias, N, IC, OC, s);
    const size_t nx = (size_t)N * IC, nw = (size_t)OC * IC;
    unsigned char *p = fp8_scratch_get(tcu_fp8_scratch_bytes((size_t)N, (size_t)IC, (size_t)OC), s);
    float *f = (float *)(void *)p; /* 16-byte slots: amax x, amax w, scale_inv x, scale_inv w */
    float *amax_w = f + 4, *sinv_w = f + 12;
    tsr_fp8 *qw = p + 256 + round256(nx);
    tcu_amax_bf16(amax_w, w, nw, s);
    tcu_fp8_quantize(qw, sinv_w, w, amax_w, nw, TCU_FP8_E4M3, s);
    tcu_matmul_forward_fp8_qw(out, pre_gelu, inp, qw, sinv_w, bias, N, IC, OC, gelu, s);
}

void tcu_matmul_forward_fp8_qw(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                               const tsr_fp8 *qw, const float *sw_inv, const tsr_bf16 *bias,
                               int N, int IC, int OC, tsr_gelu_kind gelu, tcu_stream s) {
    if (N < 1 || IC < 1 || OC < 1)
        tcu_matmul_fp8(out, NULL, NULL, NULL, NULL, bias, N, IC, OC, s);
    const size_t nx = (size_t)N * IC;
    unsigned char *p = fp8_scratch_get(256 + round256(nx), s); /* (the weight's codes after it) */
    float *f = (float *)(void *)p;
    float *amax_x = f, *sinv_x = f + 8;
    tsr_fp8 *qx = p + 256;
    tcu_amax_bf16(amax_x, inp, nx, s);
    tcu_fp8_quantize(qx, sinv_x, inp, amax_x, nx, TCU_FP8_E4M3, s);
    tcu_matmul_fp8(pre_gelu ? pre_gelu : out, qx, sinv_x, qw, sw_inv, bias, N, IC, OC, s);
    if (pre_gelu) tcu_gelu_forward(out, pre_gelu, (size_t)N * OC, gelu, s);
}
