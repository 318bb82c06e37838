/* tcu_fp8_gemm.c — the FP8 GEMM's plan and its rules (tcu_fp8_gemm.h; docs/cuda.md "FP8", the
 * table of the rules and their sources). */
#include "tcu_fp8_gemm.h"

#include <stdio.h>
#include <string.h>

uint32_t tcu_ptr_alignment(const void *p) {
    const uintptr_t addr = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && addr % al != 0) al >>= 1;
    return al;
}

static const char *const type_name[TCU_LT_TYPE_COUNT] = {"bf16", "e4m3", "e5m2", "fp32"};
static const int type_bytes[TCU_LT_TYPE_COUNT] = {2, 1, 1, 4};

static int is_fp8(tcu_lt_type t) { return t == TCU_LT_E4M3 || t == TCU_LT_E5M2; }
static int aligned16(const void *p) { return tcu_ptr_alignment(p) >= 16; }
static int bytes16(int64_t elems, tcu_lt_type t) { return elems * type_bytes[t] % 16 == 0; }

void tcu_fp8_gemm_plan(tcu_fp8_gemm *g, void *out, const void *qx, const float *sx_inv,
                       const void *qw, const float *sw_inv, const void *bias, int N, int IC,
                       int OC, const void *workspace, size_t ws_bytes) {
    memset(g, 0, sizeof *g);
    g->a_type = g->b_type = TCU_LT_E4M3;
    g->c_type = g->d_type = TCU_LT_BF16;
    g->compute = g->scale = TCU_LT_F32;
    g->ta = 'T', g->tb = 'N';
    g->m = OC, g->n = N, g->k = IC;
    g->lda = IC, g->ldb = IC, g->ldc = OC, g->ldd = OC;
    g->alpha = 1.0f, g->beta = 0.0f;
    g->bias_epilogue = bias != NULL && aligned16(bias);
    g->bias_type = TCU_LT_BF16;
    g->a = qw, g->b = qx, g->c = out, g->d = out;
    g->bias = g->bias_epilogue ? bias : NULL;
    g->a_scale = sw_inv, g->b_scale = sx_inv;
    g->workspace = workspace;
    g->ws_heuristic = g->ws_call = ws_bytes;
}

void tcu_fp8_gemm_plan_f32(tcu_fp8_gemm *g, float *out, const void *qx, const float *sx_inv,
                           const void *qw, const float *sw_inv, int N, int IC, int OC,
                           const void *workspace, size_t ws_bytes) {
    tcu_fp8_gemm_plan(g, out, qx, sx_inv, qw, sw_inv, NULL, N, IC, OC, workspace, ws_bytes);
    g->c_type = g->d_type = TCU_LT_F32;
}

/* the types, the compute and scale types, the layout (cuBLAS docs, cublasLtMatmul: "To use FP8
 * kernels, the following set of requirements must be satisfied", and its table of FP8 type
 * combinations) */
static const char *check_types(const tcu_fp8_gemm *g) {
    if (!is_fp8(g->a_type) || !is_fp8(g->b_type) ||
        (g->a_type == TCU_LT_E5M2 && g->b_type == TCU_LT_E5M2))
        return "A and B must be FP8, E4M3 or E5M2 but not both E5M2 (cublasLtMatmul's FP8 type table)";
    if (g->compute != TCU_LT_F32 || g->scale != TCU_LT_F32)
        return "the compute type must be CUBLAS_COMPUTE_32F and the scale type CUDA_R_32F "
               "(cublasLtMatmul's FP8 requirements)";
    if (g->ta != 'T' || g->tb != 'N')
        return "A must be transposed and B not: the \"TN\" layout (cublasLtMatmul's FP8 requirements)";
    if ((g->d_type != TCU_LT_BF16 && g->d_type != TCU_LT_F32) || g->c_type != g->d_type)
        return "D must be bf16 or fp32 and C of D's type (cublasLtMatmul's FP8 type table; an FP8 D "
               "is not planned here)";
    if (g->bias_epilogue && g->bias_type != TCU_LT_BF16)
        return "the BIAS epilogue's vector must be bf16 with FP8 inputs and a bf16 or fp32 D "
               "(cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE; cublasLtMatmul's FP8 type table)";
    return NULL;
}

/* cuBLAS docs, "Tensor Core Usage", which cublasLtMatmul's FP8 requirements make mandatory: the
 * stored rows of A, B, C, D and their leading dimensions a multiple of 16 bytes, the pointers
 * 16-byte aligned; and a layout no smaller than its rows */
static const char *check_layout(const tcu_fp8_gemm *g) {
    if (g->m < 1 || g->n < 1 || g->k < 1) return "m, n and k must be at least 1";
    const int64_t a_rows = g->ta == 'N' ? g->m : g->k, b_rows = g->tb == 'N' ? g->k : g->n;
    if (g->lda < a_rows || g->ldb < b_rows || g->ldc < g->m || g->ldd < g->m)
        return "a leading dimension is smaller than its matrix's stored rows";
    if (!bytes16(a_rows, g->a_type) || !bytes16(b_rows, g->b_type) || !bytes16(g->m, g->c_type) ||
        !bytes16(g->m, g->d_type))
        return "the stored rows of A, B, C and D must be multiples of 16 bytes (cuBLAS docs, Tensor "
               "Core Usage; required for FP8): IC and OC multiples of 16";
    if (!bytes16(g->lda, g->a_type) || !bytes16(g->ldb, g->b_type) ||
        !bytes16(g->ldc, g->c_type) || !bytes16(g->ldd, g->d_type))
        return "the leading dimensions must be multiples of 16 bytes (cuBLAS docs, Tensor Core Usage; "
               "required for FP8)";
    if (!aligned16(g->a) || !aligned16(g->b) || !aligned16(g->c) || !aligned16(g->d))
        return "A, B, C and D must be 16-byte aligned (cublasLtMatmul's FP8 requirements; Tensor "
               "Core Usage)";
    return NULL;
}

/* the settings the heuristic cannot see: C, beta, the bias, the scales, the workspace */
static const char *check_call(const tcu_fp8_gemm *g) {
    if (g->beta != 0.0f)
        return "beta must be 0: C is not read (passed as D, a valid pointer, as torch's scaled_gemm "
               "does); an FP8 GEMM that accumulates is not planned";
    if (g->c == g->d && (g->ldc != g->ldd || g->c_type != g->d_type))
        return "C given as D (in place) needs C's layout to be D's (cublasLtMatmul: in-place needs "
               "Cdesc equal to Ddesc)";
    if (g->bias_epilogue && !aligned16(g->bias))
        return "the BIAS epilogue's vector must be 16-byte aligned (not documented: what "
               "transformer-engine and torch pass; an unaligned bias is added by a kernel instead)";
    if (!g->a_scale || !g->b_scale || !aligned16(g->a_scale) || !aligned16(g->b_scale))
        return "the A and B scale pointers must be device scalars, 16-byte aligned (not documented: "
               "transformer-engine and torch pass separately allocated scales)";
    if (g->fast_accum != 0)
        return "fast accumulation must stay off: fp32 accumulation throughout (CUBLASLT_MATMUL_DESC_FAST_ACCUM 0)";
    if (g->ws_call < g->ws_heuristic)
        return "the call's workspace must be at least the heuristic's limit (cublasLt.h, "
               "cublasLtMatmul: INVALID_VALUE when smaller than the algorithm's)";
    if (g->ws_call > 0 && (!g->workspace || tcu_ptr_alignment(g->workspace) < 256))
        return "a workspace of non-zero size must be a 256-byte aligned device buffer (cudaMalloc's "
               "alignment, as torch and transformer-engine give)";
    return NULL;
}

const char *tcu_fp8_gemm_check(const tcu_fp8_gemm *g) {
    const char *why = check_types(g);
    if (!why) why = check_layout(g);
    if (!why) why = check_call(g);
    return why;
}

char *tcu_fp8_gemm_describe(const tcu_fp8_gemm *g, char *buf, size_t n) {
    const tcu_lt_type t[] = {g->a_type, g->b_type,  g->c_type, g->d_type,
                             g->compute, g->scale, g->bias_type};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if ((unsigned)t[i] >= TCU_LT_TYPE_COUNT) { /* outside the enum: named, not indexed */
            snprintf(buf, n, "(a plan with type %d, not a tcu_lt_type)", (int)t[i]);
            return buf;
        }
    snprintf(buf, n,
             "A %s op %c ld %lld align %u, B %s op %c ld %lld align %u, C %s ld %lld align %u%s, "
             "D %s ld %lld align %u, m=%d n=%d k=%d, compute %s scale %s, alpha %g beta %g, "
             "epilogue %s (bias %s, align %u), A_SCALE align %u, B_SCALE align %u, fast_accum %d, "
             "workspace %zu bytes (heuristic %zu) align %u",
             type_name[g->a_type], g->ta, (long long)g->lda, tcu_ptr_alignment(g->a),
             type_name[g->b_type], g->tb, (long long)g->ldb, tcu_ptr_alignment(g->b),
             type_name[g->c_type], (long long)g->ldc, tcu_ptr_alignment(g->c),
             g->c == g->d ? " (= D)" : "", type_name[g->d_type], (long long)g->ldd,
             tcu_ptr_alignment(g->d), g->m, g->n, g->k, type_name[g->compute], type_name[g->scale],
             g->alpha, g->beta,
             g->bias_epilogue ? "BIAS" : "DEFAULT", type_name[g->bias_type],
             tcu_ptr_alignment(g->bias), tcu_ptr_alignment(g->a_scale),
             tcu_ptr_alignment(g->b_scale), g->fast_accum, g->ws_call, g->ws_heuristic,
             tcu_ptr_alignment(g->workspace));
    return buf;
}
