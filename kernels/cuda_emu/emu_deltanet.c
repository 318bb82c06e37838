/* emu_deltanet.c — the host emulator of cuda_deltanet.cu (emu.h): the Gated DeltaNet core
 * (issue 68). */
#include <stdlib.h>

#include "emu.h"
#include "cpu/cpu_deltanet.h"

size_t tcu_deltanet_ckpt_floats(int B, int T, int HV, int dk, int dv) {
    const tsr_dn_shape sh = {B, T, 1, HV, dk, dv, TCU_DN_CHUNK};
    return cpu_deltanet_ckpt_floats(&sh);
}

/* The CPU core at chunk TCU_DN_CHUNK on the widened bf16 inputs, its output rounded to bf16: the
 * rounding of the kernel's interface (its inner bf16 operands are the SIMT emulator's to check). */
void tcu_deltanet_forward(tsr_bf16 *out, float *state_out, float *ckpt, const tsr_bf16 *q,
                          const tsr_bf16 *k, const tsr_bf16 *v, const float *g, const float *beta,
                          const float *state0, const int32_t *seq, int B, int T, int HK, int HV,
                          int dk, int dv, tcu_stream s) {
    const char *what = "tcu_deltanet_forward";
    REQUIRE(B >= 0 && T >= 0 && HK >= 1 && HV >= HK && HV % HK == 0, what,
            "need B, T >= 0 and HV a multiple of HK >= 1: B=%d T=%d HK=%d HV=%d", B, T, HK, HV);
    REQUIRE(dk >= 16 && dk <= 128 && dk % 16 == 0 && dv >= 16 && dv <= 128 && dv % 16 == 0, what,
            "head sizes dk = %d, dv = %d: the kernel takes multiples of 16 from 16 to 128", dk, dv);
    if (B == 0 || T == 0) return;
    const tsr_dn_shape sh = {B, T, HK, HV, dk, dv, TCU_DN_CHUNK};
    const size_t N = (size_t)B * T, nq = N * HK * dk, nv = N * HV * dv;
    float *qf = emu_host_zeros(nq, what), *kf = emu_host_zeros(nq, what);
    float *vf = emu_host_zeros(nv, what);
    float *o = emu_host_alloc(nv * sizeof *o, what);
    emu_widen_into(qf, q, nq), emu_widen_into(kf, k, nq), emu_widen_into(vf, v, nv);
    cpu_deltanet_forward(o, state_out, ckpt, qf, kf, vf, g, beta, state0, seq, &sh);
    emu_round_into(out, o, nv);
    free(qf), free(kf), free(vf), free(o);
}

/* the kernel's size (tcu_index.h), unused here */
size_t tcu_deltanet_backward_scratch_bytes(int B, int T, int HV, int dk, int dv) {
    return tcu_dn_backward_scratch_bytes(B, T, HV, dk, dv);
}

/* The CPU core's backward on the widened inputs; dq, dk, dv get one rounding of their sums */
void tcu_deltanet_backward(tsr_bf16 *dq, tsr_bf16 *dk, tsr_bf16 *dv, float *dg, float *dbeta,
                           float *dstate0, const tsr_bf16 *dout, const float *dstate_out,
                           const float *ckpt, const tsr_bf16 *q, const tsr_bf16 *k,
                           const tsr_bf16 *v, const float *g, const float *beta,
                           const int32_t *seq, void *scratch, int B, int T, int HK, int HV,
                           int dkd, int dvd, tcu_stream s) {
    const char *what = "tcu_deltanet_backward";
    REQUIRE(B >= 0 && T >= 0 && HK >= 1 && HV >= HK && HV % HK == 0, what,
            "need B, T >= 0 and HV a multiple of HK >= 1: B=%d T=%d HK=%d HV=%d", B, T, HK, HV);
    if (B == 0 || T == 0) return;
    REQUIRE(scratch && ckpt, what, "scratch and ckpt must be given");
    const tsr_dn_shape sh = {B, T, HK, HV, dkd, dvd, TCU_DN_CHUNK};
    const size_t N = (size_t)B * T, nq = N * HK * dkd, nv = N * HV * dvd;
    float *qf = emu_host_zeros(nq, what), *kf = emu_host_zeros(nq, what);
    float *vf = emu_host_zeros(nv, what);
    float *of = emu_host_zeros(nv, what), *gq = emu_host_zeros(nq, what);
    float *gk = emu_host_zeros(nq, what);
    float *gv = emu_host_zeros(nv, what);
    emu_widen_into(qf, q, nq), emu_widen_into(kf, k, nq);
    emu_widen_into(vf, v, nv), emu_widen_into(of, dout, nv);
    cpu_deltanet_backward(gq, gk, gv, dg, dbeta, dstate0, of, dstate_out, ckpt, qf, kf, vf, g,
                          beta, seq, &sh);
    emu_add_round_into(dq, gq, nq), emu_add_round_into(dk, gk, nq), emu_add_round_into(dv, gv, nv);
    free(qf), free(kf), free(vf), free(of), free(gq), free(gk), free(gv);
}
