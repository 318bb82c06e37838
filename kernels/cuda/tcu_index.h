/* tcu_index.h — the index arithmetic the CUDA backend (kernels/cuda/: its kernels and host code)
 * and its host emulator (kernels/cuda_emu/) share, written once instead of restated by each: where
 * an element lives in a layout both read or write (the embedding's positions, the KV cache, a
 * decode call's rows, Muon's transposed copy) and the layouts of the scratch both size. Integer
 * arithmetic only: each side's numerics stay its own. Plain C; __host__ __device__ under nvcc
 * (TCU_HD), so kernels call the same functions. */
#ifndef TSR_TCU_INDEX_H
#define TSR_TCU_INDEX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TCU_HD __host__ __device__
#else
#define TCU_HD
#endif

/* the position of row n of B x T in the embedding's wpe (tcu_encoder_forward): pos[n], or n % T
 * without pos */
TCU_HD static inline size_t tcu_encoder_pos(const int32_t *pos, size_t n, int T) {
    return pos ? (size_t)pos[n] : n % (size_t)T;
}

/* Row i of a decode call (tcu_attention_decode_var): its cache slot, position and segment start,
 * from the arrays slot, pos, seg, or without them slot 0, position p0 + i, segment seg0 */
TCU_HD static inline void tcu_decode_row(const int32_t *slot, const int32_t *pos,
                                         const int32_t *seg, int p0, int seg0, int i, int *sl,
                                         int *p, int *sg) {
    *sl = slot ? slot[i] : 0;
    *p = pos ? pos[i] : p0 + i;
    *sg = seg ? seg[i] : seg0;
}

/* The KV cache of one slot and layer (cuda_ops.h tcu_attention_decode, the CPU's decoder_kv.c):
 * keys transposed, kt (KVH, hs, cap), values v (KVH, cap, hs), position p at index p % cap (a
 * ring of cap positions). Element d of key/value head g at position p: */
TCU_HD static inline size_t tcu_kv_key_at(int g, int d, int p, int hs, int cap) {
    return ((size_t)g * hs + d) * cap + p % cap;
}
TCU_HD static inline size_t tcu_kv_value_at(int g, int d, int p, int hs, int cap) {
    return ((size_t)g * cap + p % cap) * hs + d;
}

/* Where Muon's element k of a (rows, cols) row-major matrix goes in its copy (tcu_muon_normalize,
 * tcu_muon_apply): transposed, (cols, rows) row-major; else k */
TCU_HD static inline size_t tcu_muon_at(size_t k, int rows, int cols, int transposed) {
    const size_t i = k / (size_t)cols, j = k % (size_t)cols;
    return transposed ? j * (size_t)rows + i : k;
}

/* LoRA's scratch (tcu_lora_scratch_bytes): t (N,R), xd (N,IC), dz (N,OC) fp32 in that order, each
 * 256-byte aligned; the byte offset of part 0, 1 or 2, or with part 3 the bytes of all three */
static inline size_t tcu_lora_scratch_at(int N, int IC, int OC, int R, int part) {
    const size_t n = (size_t)N, floats[3] = {n * (size_t)R, n * (size_t)IC, n * (size_t)OC};
    size_t at = 0;
    for (int i = 0; i < part; i++) at += (floats[i] * sizeof(float) + 255) / 256 * 256;
    return at;
}

/* The Gated DeltaNet core's chunk (cuda_deltanet.cu; the emulator runs the CPU core at it) */
#define TCU_DN_CHUNK 64
/* the core's backward scratch (tcu_deltanet_backward_scratch_bytes): fp32 dQn, dKn (B HV, T, dk),
 * dS (B HV, dk, dv), F (B HV, TCU_DN_CHUNK, max(dk, dv)) */
static inline size_t tcu_dn_backward_scratch_bytes(int B, int T, int HV, int dk, int dv) {
    const size_t w = (size_t)(dk > dv ? dk : dv), bh = (size_t)B * HV;
    return sizeof(float) * (2 * bh * T * dk + bh * dk * dv + bh * TCU_DN_CHUNK * w);
}

#endif
