/* cuda_matmul.cu — the matmuls of cuda_ops.h through cuBLASLt: tcu_matmul_forward (bias and GELU
 * in the epilogue) and tcu_matmul_backward (dinp, dw by cuBLASLt; dbias by fixed-order kernels).
 *
 * File-wide conventions (cuda_ops.h):
 *   - row-major tensors, the ops.h vocabulary: inp (N,IC), w (OC,IC), out (N,OC);
 *   - bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F, fp32 alpha/beta), bf16 activations;
 *   - backward ACCUMULATES: dinp (bf16) += through beta = 1 on C = D (TSR_GRAD_SET: beta = 0,
 *     dinp written without being read); dw, dbias (fp32) +=;
 *   - every cuBLASLt call and kernel launch on the caller's stream `s`, every call checked.
 * In tcu_matmul_backward each of dinp, dw, dbias may be NULL (that term is skipped: cuda_ops.h), so
 * a frozen weight or an input that needs no gradient costs nothing; the three are independent
 * launches, so each one's bits do not depend on which others run.
 *
 * Row-major to cuBLASLt (column-major): a row-major (R,C) matrix with leading dimension C is, byte
 * for byte, the column-major (C,R) matrix with ld C, i.e. its transpose. So every product is
 * written transposed: out = inp @ w^T (row-major) is out^T = w @ inp^T (column-major), and so on
 * (each op's comment gives its mapping).
 *
 * Algorithm choice and determinism: cublasLtMatmulAlgoGetHeuristic picks one algorithm per
 * (device, op, epilogue, types, transposes, m, n, k, leading dimensions, pointer alignments,
 * workspace size); it is cached in a small static table (lt_cache, LT_CACHE_SIZE entries,
 * mutex-guarded) with the descriptor and layouts built for it (issue 25, item 3: built once per
 * key, not per call; only the bias and aux pointers are set again), so every later call of the
 * same key runs the same algorithm (negative answers are cached too); tcu_shutdown empties it.
 * cuBLASLt is bitwise reproducible run to run for a fixed algorithm and a user-owned workspace (cuBLAS docs, "Results
 * reproducibility"); it has no atomic split-K. Split-K is restricted further to
 * CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: partial sums kept in fp32 in the workspace and reduced in
 * a separate fixed step, never INPLACE/OUTPUT_TYPE (those add partials in the output type: bf16 for
 * out and dinp, which would break "fp32 accumulate"; INPLACE also orders them by counters in the
 * workspace, which we would rather not depend on). Alignments are part of the key because the
 * heuristic depends on them: the same shape at differently aligned addresses may run another
 * algorithm (different bits); a training step reuses the same buffers, so it is reproducible.
 * When the table is full the heuristic is asked every call (it is itself deterministic).
 *
 * Workspace: this file uses tcu_ctx.lt_workspace, at most tcu_ctx.lt_workspace_bytes (whatever
 * tcu_init allocated; NVIDIA recommends 32 MiB on Hopper, 4 MiB before). The heuristic is told
 * that limit (CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES). The bias gradient's partial sums use the
 * norms' process-wide scratch (tcu_norm_partial_scratch: P x OC floats, P <= 512; growing it
 * synchronises the device once). Both are shared: matmuls on two streams at once would race on
 * them (one stream per rank).
 *
 * Shapes and alignment: any N, IC, OC >= 1. The heuristic is told the actual alignment of every
 * pointer (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), so odd shapes and odd offsets get the (slower)
 * algorithms that accept them instead of none. An algorithm cublasLtMatmul refuses with
 * NOT_SUPPORTED on its first call (the heuristic never sees beta, and is not documented to judge
 * the scale pointers) is followed by the heuristic's next answers (lt_next_answer), the first
 * accepted kept for the key.
 * If still no algorithm exists:
 *   - GELU_AUX epilogue (also skipped unless OC % 8 == 0, the aux ld rule): bias epilogue into
 *     pre_gelu, then the GELU kernel (tcu_gelu_forward);
 *   - BIAS epilogue: DEFAULT epilogue, then bias_add_rows_kernel;
 *   - DGELU epilogue (tcu_matmul_backward_dgelu; skipped unless IC % 8 == 0): the plain dinp
 *     GEMM, then the GELU backward kernel in place;
 *   - DEFAULT epilogue: exit naming the op, m/n/k and N/IC/OC.
 */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "cuda_internal.h"
#include "tcu_fp8_gemm.h"
#include "tcu_gemm_tune.h"

/* ---- fixed-order kernels: bias gradient, fallback bias add ------------------------------- */

#define BG_WARPS 8 /* bias gradient: warps per block; warp w sums rows w, w + BG_WARPS, ... */

/* partial[p*OC + c] = sum of dout[n, c] over the rows n of row group p (fp32), the first stage of
 * dbias[c] += sum_n dout[n, c]; tcu_norm_param_grad_reduce adds the P partials in a fixed order.
 * partial (P, OC) fp32 scratch, dout (N,OC) bf16; groups of `rows` rows (tcu_norm_rows_per_group,
 * a function of N only), P = ceil(N / rows).
 * Launch: grid (ceil(OC / (32 W)), P), block 32 * BG_WARPS. Lane l of warp w owns columns
 * c = (blockIdx.x * 32 + l) * W .. +W and sums rows n0 + w, n0 + w + BG_WARPS, ... of the group
 * in order; the BG_WARPS sums of a column are then added in warp order 0..BG_WARPS-1 through
 * shared memory: a fixed order, no atomics, deterministic. Every SM gets blocks whatever OC is
 * (the previous one-block-per-32-columns kernel ran 24 blocks at OC = 768).
 * Preconditions (host): rows >= 1; W == 8: OC % 8 == 0 (VEC: dout 16-byte aligned). */
template <int W, bool VEC>
static __global__ void __launch_bounds__(32 * BG_WARPS)
    bias_grad_row_group_kernel(float *partial, const bf16 *dout, int N, int OC, int rows) {
    __shared__ float sums[BG_WARPS][32 * W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c = (blockIdx.x * 32 + lane) * W;
    const int n0 = blockIdx.y * rows, n1 = min(N, n0 + rows);
    float acc[W];
#pragma unroll
    for (int k = 0; k < W; k++) acc[k] = 0.0f;
    if (c < OC) { /* W == 8: OC % 8 == 0, so the whole pack is inside the row */
        for (int n = n0 + warp; n < n1; n += BG_WARPS) {
            float v[W];
            tcu_load_bf16<W, VEC>(v, dout + (size_t)n * OC + c);
#pragma unroll
            for (int k = 0; k < W; k++) acc[k] += v[k];
        }
    }
#pragma unroll
    for (int k = 0; k < W; k++) sums[warp][lane * W + k] = acc[k];
    __syncthreads();
    for (int j = threadIdx.x; j < 32 * W; j += 32 * BG_WARPS) {
        const int col = blockIdx.x * 32 * W + j;
        if (col >= OC) continue;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < BG_WARPS; w++) s += sums[w][j];
        partial[(size_t)blockIdx.y * OC + col] = s;
    }
}

/* dbias (OC) fp32 += sum_n dout[n, :], dout (N,OC) bf16: the row-group partials above, then the
 * norms' fixed-order reduction of the partials (cuda_internal.h), on stream st. Deterministic. */
static void bias_grad(float *dbias, const bf16 *dout, int N, int OC, cudaStream_t st,
                      const char *what) {
    const int rows = tcu_norm_rows_per_group(N);
    const int P = (N + rows - 1) / rows;
    float *partial = tcu_norm_partial_scratch((size_t)P * OC * sizeof(float), what);
    const bool w8 = OC % 8 == 0;
    const int W = w8 ? 8 : 1;
    const dim3 grid((unsigned)((OC + 32 * W - 1) / (32 * W)), (unsigned)P);
    if (w8 && tcu_aligned16(dout))
        bias_grad_row_group_kernel<8, true><<<grid, 32 * BG_WARPS, 0, st>>>(partial, dout, N, OC,
                                                                            rows);
    else if (w8)
        bias_grad_row_group_kernel<8, false><<<grid, 32 * BG_WARPS, 0, st>>>(partial, dout, N,
                                                                             OC, rows);
    else
        bias_grad_row_group_kernel<1, false><<<grid, 32 * BG_WARPS, 0, st>>>(partial, dout, N,
                                                                             OC, rows);
    TCU_CHECK_LAUNCH("tcu_matmul_backward: bias_grad_row_group_kernel");
    tcu_norm_param_grad_reduce(dbias, NULL, partial, P, OC, (size_t)OC, st,
                               "tcu_matmul_backward: the bias gradient's fixed-order reduction");
}

/* x[n, o] = bf16(x[n, o] + bias[o]): the bias of a matmul whose BIAS epilogue had no algorithm.
 * x (N,OC) bf16 as total = N*OC elements, bias (OC) bf16. Grid-stride, 256 threads. */
static __global__ void bias_add_rows_kernel(bf16 *x, const bf16 *bias, size_t total, int OC) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(bias[i % (size_t)OC]));
}

/* x (N,OC) bf16 += bias (OC) bf16 by bias_add_rows_kernel on stream s: the bias of a GEMM whose
 * BIAS epilogue did not run */
static void bias_add(tsr_bf16 *x, const tsr_bf16 *bias, int N, int OC, const char *what,
                     tcu_stream s) {
    const size_t total = (size_t)N * OC;
    unsigned blocks = tcu_blocks(total, 256);
    const unsigned cap = (unsigned)tcu_context_get(what)->sm_count * 32u;
    if (cap > 0 && blocks > cap) blocks = cap;
    bias_add_rows_kernel<<<blocks, 256, 0, (cudaStream_t)s>>>(
        reinterpret_cast<bf16 *>(x), reinterpret_cast<const bf16 *>(bias), total, OC);
    TCU_CHECK_LAUNCH(what);
}

/* ---- one cuBLASLt matmul: D = alpha op(A) op(B) + beta C, C == D, column-major ------------- */

typedef enum { LT_FWD = 0, LT_DINP, LT_DW, LT_F32, LT_FP8, LT_OP_COUNT } lt_op;
static const char *const lt_op_name[] = {"tcu_matmul_forward", "tcu_matmul_backward (dinp)",
                                         "tcu_matmul_backward (dw)", "tcu_lt_gemm_f32",
                                         "tcu_matmul_fp8"};
static_assert(sizeof lt_op_name / sizeof lt_op_name[0] == LT_OP_COUNT, "lt_op_name vs lt_op");

/* The pointer slots whose alignment the heuristic looks at. */
enum { AL_A = 0, AL_B, AL_C, AL_BIAS, AL_AUX, AL_COUNT };

typedef struct lt_gemm {
    lt_op op;                        /* the cache's key (with the shape, types and transposes) */
    const char *what;                /* the calling op, for messages */
    int N, IC, OC;                   /* the op's own shape, for messages */
    cublasOperation_t ta, tb;        /* op(A), op(B) */
    cudaDataType_t ab_type, cd_type; /* A and B; C and D (the same buffer) */
    int m, n, k;                     /* op(A) (m,k), op(B) (k,n), D (m,n) column-major */
    int lda, ldb, ldc;
    const void *a, *b;
    void *d;                         /* C = D (in place, one layout) */
    float alpha, beta;               /* D = alpha op(A) op(B) + beta C; beta 0: overwrite */
    cublasLtEpilogue_t epi;
    const void *bias;                /* BIAS epilogues: (m) bf16, or NULL */
    void *aux;                       /* GELU_AUX: pre-activation out, DGELU: in; (m,n) ld aux_ld */
    int64_t aux_ld;
    const float *a_scale, *b_scale;  /* FP8: the device scalars cuBLASLt multiplies the product by */
} lt_gemm;

/* A dense GEMM, D (m,n) = op(A) op(B) + beta D, column-major, A and B bf16, no epilogue: the
 * leading dimensions follow from the shapes (lda = rows of A as stored, ldb likewise, ldc = m). */
static lt_gemm lt_gemm_dense(lt_op op, int N, int IC, int OC, cublasOperation_t ta,
                             cublasOperation_t tb, int m, int n, int k, const void *a,
                             const void *b, void *d, cudaDataType_t cd_type, float beta) {
    lt_gemm g;
    memset(&g, 0, sizeof g);
    g.op = op;
    g.what = lt_op_name[op];
    g.N = N, g.IC = IC, g.OC = OC;
    g.ta = ta, g.tb = tb;
    g.ab_type = CUDA_R_16BF, g.cd_type = cd_type;
    g.m = m, g.n = n, g.k = k;
    g.lda = ta == CUBLAS_OP_T ? k : m;
    g.ldb = tb == CUBLAS_OP_T ? n : k;
    g.ldc = m;
    g.a = a, g.b = b, g.d = d;
    g.alpha = 1.0f, g.beta = beta;
    g.epi = CUBLASLT_EPILOGUE_DEFAULT;
    return g;
}

/* The per-call pointers of a descriptor: the bias (BIAS epilogues), the aux output (GELU_AUX) and
 * the FP8 scales; everything else in a descriptor is fixed by the cache key (an FP8 key, by its
 * operand type, always has both scales). */
static void lt_set_pointers(cublasLtMatmulDesc_t desc, const lt_gemm *g) {
    if (g->bias)
        TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &g->bias, sizeof g->bias), g->what);
    if (g->aux)
        TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(
                           desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                           sizeof g->aux), g->what);
    if (g->a_scale)
        TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                      &g->a_scale, sizeof g->a_scale), g->what);
    if (g->b_scale)
        TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                      &g->b_scale, sizeof g->b_scale), g->what);
}

typedef struct lt_key {
    int device;
    int op, epi;
    int ta, tb, ab_type, cd_type;
    int m, n, k;
    int lda, ldb, ldc;
    int64_t aux_ld;
    uint32_t align[AL_COUNT];
    size_t workspace_bytes;
} lt_key;

/* One key's cuBLASLt objects, built on its first call and kept: the matmul descriptor (compute
 * type, transposes, epilogue; the bias and aux pointers are set again on every call), the three
 * layouts, and the heuristic's algorithm (found = 0: none, an answer cached like the others). */
/* where an entry's algorithm came from (TSR_GEMM_TUNE: tcu_matmul_tune_open) */
typedef enum {
    LT_SRC_HEURISTIC = 0, /* the heuristic's first answer (no tuning) */
    LT_SRC_TIMED,         /* the fastest of the heuristic's first answers, timed now */
    LT_SRC_SINGLE,        /* tuning, but the heuristic had one answer: nothing to time */
    LT_SRC_FILE,          /* the file's choice, found among the heuristic's answers */
    LT_SRC_UNMATCHED,     /* the file's choice is not among them: the first answer */
    LT_SRC_UNTIMED,       /* no device memory for a copy of D (beta != 0), or cuBLASLt ran
                             none of the answers: the first answer */
    LT_SRC_MISSING,       /* not in the file, and this process does not time: the first answer */
    LT_SRC_COUNT
} lt_src;
static const char *const lt_src_name[] = {"heuristic", "timed", "single", "file", "unmatched",
                                          "untimed", "not in the file"};
static_assert(sizeof lt_src_name / sizeof lt_src_name[0] == LT_SRC_COUNT, "lt_src_name");

typedef struct lt_entry {
    lt_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lcd;
    int found;
    cublasStatus_t status; /* the heuristic's answer when !found, for the message */
    cublasLtMatmulAlgo_t algo;
    lt_src src;
    int pick, cands;        /* the algorithm's place among the heuristic's answers, their number */
    double us, first_us;    /* tuning: its time and the first answer's (microseconds), or 0 */
    bool by_cfg;            /* LT_SRC_FILE: found by its configuration, not its bytes */
} lt_entry;

#define LT_CACHE_SIZE 128
static lt_entry lt_cache[LT_CACHE_SIZE];
static int lt_cache_n;
static std::mutex lt_cache_mutex; /* held from the lookup to the enqueued cublasLtMatmul */

static bool lt_key_equal(const lt_key *x, const lt_key *y) {
    if (x->device != y->device || x->op != y->op || x->epi != y->epi || x->ta != y->ta ||
        x->tb != y->tb || x->ab_type != y->ab_type || x->cd_type != y->cd_type || x->m != y->m ||
        x->n != y->n || x->k != y->k || x->lda != y->lda || x->ldb != y->ldb ||
        x->ldc != y->ldc || x->aux_ld != y->aux_ld || x->workspace_bytes != y->workspace_bytes)
        return false;
    for (int i = 0; i < AL_COUNT; i++)
        if (x->align[i] != y->align[i]) return false;
    return true;
}

static lt_key lt_key_of(const lt_gemm *g, const tcu_context *ctx) {
    lt_key key;
    memset(&key, 0, sizeof key);
    key.device = ctx->device;
    key.op = (int)g->op;
    key.epi = (int)g->epi;
    key.ta = (int)g->ta, key.tb = (int)g->tb;
    key.ab_type = (int)g->ab_type, key.cd_type = (int)g->cd_type;
    key.m = g->m, key.n = g->n, key.k = g->k;
    key.lda = g->lda, key.ldb = g->ldb, key.ldc = g->ldc;
    key.aux_ld = g->aux ? g->aux_ld : 0;
    key.align[AL_A] = tcu_ptr_alignment(g->a);
    key.align[AL_B] = tcu_ptr_alignment(g->b);
    key.align[AL_C] = tcu_ptr_alignment(g->d);
    key.align[AL_BIAS] = tcu_ptr_alignment(g->bias);
    key.align[AL_AUX] = tcu_ptr_alignment(g->aux);
    key.workspace_bytes = ctx->lt_workspace_bytes;
    return key;
}

/* cuBLASLt with per-matrix scale modes (CUBLASLT_MATMUL_DESC_A_SCALE_MODE: cuBLAS 12.8 on) */
#define LT_SCALE_MODES (CUBLAS_VERSION >= 120800)

/* the split-K schemes the heuristic may pick (tcu_matmul_set_reduction), read when it is asked */
static tcu_reduction lt_reduction = TCU_REDUCTION_COMPUTE;

/* ---- TSR_GEMM_TUNE: the heuristic's first answers timed once, the choice kept in a file ---- */

#define LT_TUNE_TOP 8     /* the heuristic's answers asked for; the usable ones are timed */
#define LT_TUNE_RUNS 5    /* runs between two events, after one untimed: a measurement */
#define LT_TUNE_ROUNDS 3  /* measurements of each answer: their median is its time */
#define LT_TUNE_MARGIN 0.98 /* another answer replaces the first only below 98% of its time */
/* what a shape's first call does (under lt_cache_mutex) */
typedef enum { LT_TUNE_OFF = 0, LT_TUNE_FILE, LT_TUNE_TIME } lt_tune_mode;
static lt_tune_mode lt_tune_mode_now; /* OFF, or tcu_matmul_tune_open's: FILE or TIME */
static tcu_tune_table lt_tune;        /* the file's choices, then those timed here */
/* calls of shapes past the cache (which read the file, never time): not in it, or its algorithm
 * not among the answers */
static long long lt_tune_overflow_missing, lt_tune_overflow_unmatched;

/* tuning off, its table and counts forgotten (under lt_cache_mutex) */
static void lt_tune_reset(void) {
    tcu_tune_release(&lt_tune);
    lt_tune_mode_now = LT_TUNE_OFF;
    lt_tune_overflow_missing = lt_tune_overflow_unmatched = 0;
}

/* the file's key of an entry: lt_key without the device (the file names the GPU model), with the
 * split-K rule (the answers the heuristic may give depend on it) */
static void lt_tune_key(int64_t out[TCU_TUNE_KEY_N], const lt_key *k) {
    const int64_t v[TCU_TUNE_KEY_N] = {
        k->op,  k->epi, k->ta,  k->tb,  k->ab_type, k->cd_type, k->m,        k->n,
        k->k,   k->lda, k->ldb, k->ldc, k->aux_ld,  k->align[AL_A], k->align[AL_B],
        k->align[AL_C], k->align[AL_BIAS], k->align[AL_AUX], (int64_t)k->workspace_bytes,
        (int64_t)lt_reduction};
    memcpy(out, v, sizeof v);
}

static uint32_t algo_config(const cublasLtMatmulAlgo_t *algo,
                            cublasLtMatmulAlgoConfigAttributes_t a, size_t bytes);

/* an algorithm's configuration, in tcu_tune_cfg_names' order (for people: the file matches an
 * algorithm by its bytes) */
static void lt_algo_cfg(int64_t out[TCU_TUNE_CFG_N], const cublasLtMatmulAlgo_t *a) {
    out[0] = (int32_t)algo_config(a, CUBLASLT_ALGO_CONFIG_ID, sizeof(int32_t));
    out[1] = algo_config(a, CUBLASLT_ALGO_CONFIG_TILE_ID, sizeof(uint32_t));
    out[2] = algo_config(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, sizeof(uint32_t));
    out[3] = (int32_t)algo_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, sizeof(int32_t));
    out[4] = algo_config(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, sizeof(uint32_t));
    out[5] = algo_config(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, sizeof(uint32_t));
    out[6] = algo_config(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, sizeof(uint32_t));
    out[7] = (uint16_t)algo_config(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, sizeof(uint16_t));
    out[8] = (uint16_t)algo_config(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, sizeof(uint16_t));
}
static_assert(sizeof(cublasLtMatmulAlgo_t) == TCU_TUNE_DATA_N * sizeof(uint64_t),
              "the file keeps an algorithm's bytes as TCU_TUNE_DATA_N words");

/* One run of g with algorithm algo on stream st (C = D), cuBLASLt's status returned unchecked. */
static cublasStatus_t lt_run(const lt_entry *e, const lt_gemm *g, const cublasLtMatmulAlgo_t *algo,
                             const tcu_context *ctx, cudaStream_t st) {
    const float alpha = g->alpha, beta = g->beta;
    return cublasLtMatmul(ctx->lt, e->desc, &alpha, g->a, e->la, g->b, e->lb, &beta, g->d, e->lcd,
                          g->d, e->lcd, algo, ctx->lt_workspace, ctx->lt_workspace_bytes, st);
}

/* One measurement of one answer on g's own operands: one untimed run, then LT_TUNE_RUNS between
 * two events; microseconds per run, or INFINITY when cuBLASLt refuses to run it (its error
 * cleared, so that no later launch is blamed for it). */
static double lt_time_round(const lt_entry *e, const lt_gemm *g, const cublasLtMatmulAlgo_t *algo,
                            const tcu_context *ctx, cudaStream_t st, cudaEvent_t ev[2]) {
    for (int r = 0; r <= LT_TUNE_RUNS; r++) {
        if (r == 1) TCU_CHECK(cudaEventRecord(ev[0], st), g->what);
        if (lt_run(e, g, algo, ctx, st) != CUBLAS_STATUS_SUCCESS) {
            (void)cudaGetLastError();
            return INFINITY;
        }
    }
    TCU_CHECK(cudaEventRecord(ev[1], st), g->what);
    TCU_CHECK(cudaEventSynchronize(ev[1]), g->what);
    float ms = 0.0f;
    TCU_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]), g->what);
    return 1000.0 * (double)ms / LT_TUNE_RUNS;
}

/* the answers' times (us[0..count)): the median of LT_TUNE_ROUNDS measurements each
 * (lt_time_round), taken in turns, every answer once a round, so that a drift of the clocks or
 * the power over the timing falls on all answers alike (the first H200 file, timed one answer
 * after the other, chose for one shape an algorithm slower in the step than the heuristic's
 * first, docs/cuda.md; whether the order was the cause is not known yet); an answer cuBLASLt
 * refuses in any round is INFINITY and not run again */
static void lt_time_answers(double *us, const lt_entry *e, const lt_gemm *g,
                            const cublasLtMatmulHeuristicResult_t *res, int count,
                            const tcu_context *ctx, cudaStream_t st, cudaEvent_t ev[2]) {
    double t[LT_TUNE_TOP][LT_TUNE_ROUNDS];
    bool refused[LT_TUNE_TOP] = {};
    for (int k = 0; k < LT_TUNE_ROUNDS; k++)
        for (int i = 0; i < count; i++)
            if (!refused[i]) {
                t[i][k] = lt_time_round(e, g, &res[i].algo, ctx, st, ev);
                refused[i] = !std::isfinite(t[i][k]);
            }
    for (int i = 0; i < count; i++) {
        if (refused[i]) { /* in any round: not a candidate */
            us[i] = INFINITY;
            continue;
        }
        std::sort(t[i], t[i] + LT_TUNE_ROUNDS); /* the median: the middle one */
        us[i] = t[i][LT_TUNE_ROUNDS / 2];
    }
}

/* e's algorithm among the heuristic's `count` usable answers res (count >= 1), under mode:
 *  - the file's choice when the file has e's key, found among the answers by its bytes, else by
 *    its configuration where exactly one answer has it (neither: the first answer,
 *    LT_SRC_UNMATCHED);
 *  - else, timing (LT_TUNE_TIME): every answer by lt_time_answers; the fastest replaces the first
 *    only when under LT_TUNE_MARGIN of the first's time (the heuristic's order breaks ties and
 *    near-ties); the choice is added to the table. The timed runs write g's outputs: D and the
 *    GELU aux are written again by the call that follows when beta = 0; with beta != 0 (D
 *    accumulates) D is copied aside first and back after (the host waits for each answer's
 *    events, and for the copy back);
 *  - else (LT_TUNE_FILE: several ranks, or a shape past the cache) the first answer,
 *    LT_SRC_MISSING. */
static void lt_tune_choose(lt_entry *e, const lt_gemm *g,
                           const cublasLtMatmulHeuristicResult_t *res, int count,
                           const tcu_context *ctx, cudaStream_t st, lt_tune_mode mode) {
    const char *what = g->what;
    int64_t key[TCU_TUNE_KEY_N], cfg[TCU_TUNE_CFG_N];
    lt_tune_key(key, &e->key);
    e->algo = res[0].algo, e->pick = 0, e->cands = count;
    const tcu_tune_entry *kept = tcu_tune_find(&lt_tune, key);
    if (kept) { /* by its bytes; else by its configuration where exactly one answer has it */
        int at = -1, same_cfg = 0, cfg_at = -1;
        for (int i = 0; i < count && at < 0; i++) {
            if (memcmp(&res[i].algo, kept->data, sizeof res[i].algo) == 0) at = i;
            lt_algo_cfg(cfg, &res[i].algo);
            if (memcmp(cfg, kept->cfg, sizeof cfg) == 0) same_cfg++, cfg_at = i;
        }
        const bool by_cfg = at < 0 && same_cfg == 1;
        if (by_cfg) at = cfg_at;
        e->src = LT_SRC_UNMATCHED;
        if (at >= 0) {
            e->algo = res[at].algo, e->pick = at, e->src = LT_SRC_FILE, e->by_cfg = by_cfg;
            e->us = kept->us, e->first_us = kept->first_us;
        }
        return;
    }
    if (mode != LT_TUNE_TIME) {
        e->src = LT_SRC_MISSING;
        return;
    }
    if (count == 1) {
        e->src = LT_SRC_SINGLE;
    } else {
        /* D's bytes: column-major (m, n) with leading dimension ldc */
        const size_t dbytes = ((size_t)(g->n - 1) * (size_t)g->ldc + (size_t)g->m) *
                              (g->cd_type == CUDA_R_32F ? 4 : 2);
        void *save = nullptr;
        if (g->beta != 0.0f) {
            save = tcu_try_malloc(dbytes);
            if (!save) {
                e->src = LT_SRC_UNTIMED;
                return;
            }
            TCU_CHECK(cudaMemcpyAsync(save, g->d, dbytes, cudaMemcpyDeviceToDevice, st), what);
        }
        TCU_CHECK(cudaGetLastError(), what); /* none pending: a refused answer's is its own */
        cudaEvent_t ev[2];
        TCU_CHECK(cudaEventCreate(&ev[0]), what);
        TCU_CHECK(cudaEventCreate(&ev[1]), what);
        double us[LT_TUNE_TOP], best = INFINITY;
        lt_time_answers(us, e, g, res, count, ctx, st, ev);
        const double first = us[0];
        int pick = 0;
        for (int i = 0; i < count; i++)
            if (us[i] < best) best = us[i], pick = i;
        TCU_CHECK(cudaEventDestroy(ev[0]), what);
        TCU_CHECK(cudaEventDestroy(ev[1]), what);
        if (save) {
            TCU_CHECK(cudaMemcpyAsync(g->d, save, dbytes, cudaMemcpyDeviceToDevice, st), what);
            TCU_CHECK(cudaStreamSynchronize(st), what);
            tcu_free(save);
        }
        if (!std::isfinite(best)) { /* cuBLASLt ran none of them: the first, not kept */
            e->src = LT_SRC_UNTIMED;
            return;
        }
        if (std::isfinite(first) && best >= LT_TUNE_MARGIN * first) pick = 0, best = first;
        e->algo = res[pick].algo, e->pick = pick, e->src = LT_SRC_TIMED;
        e->us = best, e->first_us = std::isfinite(first) ? first : 0.0;
    }
    lt_algo_cfg(cfg, &e->algo);
    uint64_t data[TCU_TUNE_DATA_N];
    memcpy(data, &e->algo, sizeof data);
    if (tcu_tune_add(&lt_tune, key, cfg, data, e->us, e->first_us))
        tcu_fail(what, "TSR_GEMM_TUNE: out of host memory for the table", __FILE__, __LINE__);
}

/* The heuristic's usable answers for e (at most `want`, in its order) into res, under the
 * workspace limit, the fp32-only split-K rule and the actual pointer alignments; returns their
 * number (0: none) with the heuristic's status in *status. */
static int lt_answers(const lt_entry *e, const tcu_context *ctx, const char *what,
                      cublasLtMatmulHeuristicResult_t *res, int want, cublasStatus_t *status) {
    const uint32_t *align = e->key.align;
    cublasLtMatmulPreference_t pref;
    TCU_CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref), what);
    uint64_t ws = ctx->lt_workspace_bytes;
    /* COMPUTE_TYPE unless tcu_matmul_set_reduction said otherwise: see the top */
    uint32_t reduction = lt_reduction == TCU_REDUCTION_NONE  ? (uint32_t)CUBLASLT_REDUCTION_SCHEME_NONE
                         : lt_reduction == TCU_REDUCTION_ANY ? (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK
                                                             : (uint32_t)CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    TCU_CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(
                       pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), what);
    TCU_CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(
                       pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                       sizeof reduction), what);
    const cublasLtMatmulPreferenceAttributes_t al_attr[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const int al_slot[] = {AL_A, AL_B, AL_C, AL_C}; /* C = D: one pointer */
    for (int i = 0; i < 4; i++)
        TCU_CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &align[al_slot[i]],
                                                            sizeof align[0]), what);
    memset(res, 0, (size_t)want * sizeof *res);
    int count = 0;
    /* NOT_SUPPORTED (and, for some epilogue/shape pairs, INVALID_VALUE) is how the heuristic says
     * "no algorithm": an answer, not a failure; the caller falls back or exits naming the shape. */
    *status = cublasLtMatmulAlgoGetHeuristic(ctx->lt, e->desc, e->la, e->lb, e->lcd, e->lcd, pref,
                                             want, res, &count);
    TCU_CHECK_BLAS(cublasLtMatmulPreferenceDestroy(pref), what);
    if (*status != CUBLAS_STATUS_SUCCESS) {
        if (*status != CUBLAS_STATUS_NOT_SUPPORTED && *status != CUBLAS_STATUS_INVALID_VALUE)
            tcu_fail(what, cublasLtGetStatusString(*status), __FILE__, __LINE__);
        return 0;
    }
    int usable = 0; /* the usable answers, in the heuristic's order */
    for (int i = 0; i < count; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws)
            res[usable++] = res[i];
    if (usable < 1) *status = CUBLAS_STATUS_NOT_SUPPORTED;
    return usable;
}

/* Asks the heuristic for the best algorithm of e; sets e->found, e->algo, e->status. Under
 * TSR_GEMM_TUNE (mode not OFF) the usable ones among its first LT_TUNE_TOP answers go to
 * lt_tune_choose. */
static void lt_heuristic(lt_entry *e, const lt_gemm *g, const tcu_context *ctx,
                         lt_tune_mode mode, cudaStream_t st) {
    const bool tune = mode != LT_TUNE_OFF;
    cublasLtMatmulHeuristicResult_t res[LT_TUNE_TOP];
    const int usable = lt_answers(e, ctx, g->what, res, tune ? LT_TUNE_TOP : 1, &e->status);
    e->found = usable > 0;
    if (!e->found) return;
    e->algo = res[0].algo, e->pick = 0, e->cands = usable;
    if (tune) lt_tune_choose(e, g, res, usable, ctx, st, mode);
}

/* After cublasLtMatmul refused e's algorithm on its first call (CUBLAS_STATUS_NOT_SUPPORTED: the
 * heuristic does not see every pointer, nor beta), the heuristic's other answers among its first
 * LT_TUNE_TOP, run in its order until one is accepted: that one becomes e's algorithm, kept with
 * the entry, so every later call runs it (deterministic: the same answers in the same order).
 * None accepted: e->found = 0 and e->status the last refusal. Returns the last run's status. */
static cublasStatus_t lt_next_answer(lt_entry *e, const lt_gemm *g, const tcu_context *ctx,
                                     cudaStream_t st) {
    cublasLtMatmulHeuristicResult_t res[LT_TUNE_TOP];
    cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED, heur;
    const int count = lt_answers(e, ctx, g->what, res, LT_TUNE_TOP, &heur);
    for (int i = 0; i < count && status != CUBLAS_STATUS_SUCCESS; i++) {
        if (memcmp(&res[i].algo, &e->algo, sizeof e->algo) == 0) continue; /* the refused one */
        status = lt_run(e, g, &res[i].algo, ctx, st);
        if (status == CUBLAS_STATUS_SUCCESS) e->algo = res[i].algo, e->pick = i, e->cands = count;
    }
    if (status != CUBLAS_STATUS_SUCCESS) {
        (void)cudaGetLastError(); /* a refusal launches nothing; no later launch is blamed */
        e->found = 0, e->status = status;
    }
    return status;
}

/* One descriptor attribute as an integer read back from cuBLASLt (-1: it would not say). */
static long long lt_desc_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, size_t bytes) {
    uint64_t v = 0;
    size_t written = 0;
    if (cublasLtMatmulDescGetAttribute(d, a, &v, bytes, &written) != CUBLAS_STATUS_SUCCESS)
        return -1;
    return bytes == 1 ? (long long)(int8_t)v : bytes == 4 ? (long long)(int32_t)v : (long long)v;
}

static long long lt_layout_attr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, size_t bytes) {
    uint64_t v = 0;
    size_t written = 0;
    if (cublasLtMatrixLayoutGetAttribute(l, a, &v, bytes, &written) != CUBLAS_STATUS_SUCCESS)
        return -1;
    return bytes == 4 ? (long long)(int32_t)v : (long long)v;
}

/* e's descriptor and layouts as cuBLASLt holds them (read back, not what we meant to set) and the
 * call's pointers' alignments, into buf: the message of a GEMM cuBLASLt refuses. */
static char *lt_describe(const lt_entry *e, const lt_gemm *g, const tcu_context *ctx, char *buf,
                         size_t n) {
    cublasLtMatmulDesc_t d = e->desc;
    int at = snprintf(buf, n,
        "compute %lld scale %lld transa %lld transb %lld epilogue %lld bias_type %lld "
        "fast_accum %lld a_scale_mode %lld b_scale_mode %lld;",
        lt_desc_attr(d, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, 4), lt_desc_attr(d, CUBLASLT_MATMUL_DESC_SCALE_TYPE, 4),
        lt_desc_attr(d, CUBLASLT_MATMUL_DESC_TRANSA, 4), lt_desc_attr(d, CUBLASLT_MATMUL_DESC_TRANSB, 4),
        lt_desc_attr(d, CUBLASLT_MATMUL_DESC_EPILOGUE, 4), lt_desc_attr(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, 4),
        lt_desc_attr(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, 1),
#if LT_SCALE_MODES
        lt_desc_attr(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, 4), lt_desc_attr(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, 4));
#else
        -1LL, -1LL);
#endif
    const cublasLtMatrixLayout_t lay[] = {e->la, e->lb, e->lcd};
    const char *name[] = {"A", "B", "C=D"};
    for (int i = 0; i < 3 && at > 0 && (size_t)at < n; i++)
        at += snprintf(buf + at, n - (size_t)at, " %s type %lld %lldx%lld ld %lld;", name[i],
                       lt_layout_attr(lay[i], CUBLASLT_MATRIX_LAYOUT_TYPE, 4),
                       lt_layout_attr(lay[i], CUBLASLT_MATRIX_LAYOUT_ROWS, 8),
                       lt_layout_attr(lay[i], CUBLASLT_MATRIX_LAYOUT_COLS, 8),
                       lt_layout_attr(lay[i], CUBLASLT_MATRIX_LAYOUT_LD, 8));
    if (at > 0 && (size_t)at < n)
        snprintf(buf + at, n - (size_t)at,
                 " alignments A %u B %u C=D %u bias %u a_scale %u b_scale %u workspace %u (%zu bytes);"
                 " alpha %g beta %g", tcu_ptr_alignment(g->a), tcu_ptr_alignment(g->b),
                 tcu_ptr_alignment(g->d), tcu_ptr_alignment(g->bias), tcu_ptr_alignment(g->a_scale),
                 tcu_ptr_alignment(g->b_scale), tcu_ptr_alignment(ctx->lt_workspace),
                 ctx->lt_workspace_bytes, g->alpha, g->beta);
    return buf;
}

/* FP8's settings beyond the scale pointers, stated rather than left to their defaults: fast
 * accumulation off (fp32 accumulation throughout) and, where cuBLASLt has scale modes (12.8 on),
 * each scale one fp32 scalar for its whole matrix (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F). */
static void lt_fp8_desc(cublasLtMatmulDesc_t desc, const char *what) {
    const int8_t fast = 0; /* int8_t: cublasLt.h's type for this attribute */
    TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                                  sizeof fast), what);
#if LT_SCALE_MODES
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                                  sizeof mode), what);
    TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                                  sizeof mode), what);
#endif
}

/* Builds e for g: the descriptor with g's fixed attributes, the layouts of the stored matrices
 * (before op: A is (m,k) or, transposed, (k,m)), then the heuristic's algorithm. */
static void lt_entry_build(lt_entry *e, const lt_gemm *g, const lt_key *key,
                           const tcu_context *ctx, lt_tune_mode mode, cudaStream_t st) {
    const char *what = g->what;
    memset(e, 0, sizeof *e);
    e->key = *key;
    TCU_CHECK_BLAS(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    int32_t ta = (int32_t)g->ta, tb = (int32_t)g->tb;
    uint32_t epi = (uint32_t)g->epi;
    TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                  sizeof ta), what);
    TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                  sizeof tb), what);
    TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi), what);
    if (g->bias) {
        int32_t bias_type = CUDA_R_16BF; /* the default for bf16 D; stated, not assumed */
        TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                      &bias_type, sizeof bias_type), what);
    }
    if (g->aux) /* aux data type left at its default: D's type (bf16) */
        TCU_CHECK_BLAS(cublasLtMatmulDescSetAttribute(
                           e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g->aux_ld,
                           sizeof g->aux_ld), what);
    if (g->a_scale) lt_fp8_desc(e->desc, what);
    lt_set_pointers(e->desc, g);
    int a_rows = g->ta == CUBLAS_OP_N ? g->m : g->k, a_cols = g->ta == CUBLAS_OP_N ? g->k : g->m;
    int b_rows = g->tb == CUBLAS_OP_N ? g->k : g->n, b_cols = g->tb == CUBLAS_OP_N ? g->n : g->k;
    TCU_CHECK_BLAS(cublasLtMatrixLayoutCreate(&e->la, g->ab_type, a_rows, a_cols, g->lda), what);
    TCU_CHECK_BLAS(cublasLtMatrixLayoutCreate(&e->lb, g->ab_type, b_rows, b_cols, g->ldb), what);
    TCU_CHECK_BLAS(cublasLtMatrixLayoutCreate(&e->lcd, g->cd_type, g->m, g->n, g->ldc), what);
    lt_heuristic(e, g, ctx, mode, st);
}

static void lt_entry_destroy(lt_entry *e) {
    const char *what = "tcu_matmul: releasing cuBLASLt descriptors";
    TCU_CHECK_BLAS(cublasLtMatrixLayoutDestroy(e->lcd), what);
    TCU_CHECK_BLAS(cublasLtMatrixLayoutDestroy(e->lb), what);
    TCU_CHECK_BLAS(cublasLtMatrixLayoutDestroy(e->la), what);
    TCU_CHECK_BLAS(cublasLtMatmulDescDestroy(e->desc), what);
    memset(e, 0, sizeof *e);
}

/* Runs g on stream s: D = alpha * op(A) op(B) + beta * C (C = D) with g's epilogue, through the
 * cached entry of g's key (built on a miss; when the table is full, built for this call and
 * destroyed after it: the heuristic is itself deterministic).
 * Returns false, having launched nothing, when cuBLASLt has no algorithm for it and allow_none;
 * without allow_none that exits naming the op and the shape. */
static bool lt_matmul(const lt_gemm *g, tcu_stream s, bool allow_none) {
    const char *what = g->what;
    const tcu_context *ctx = tcu_context_get(what);
    const lt_key key = lt_key_of(g, ctx);

    std::unique_lock<std::mutex> lock(lt_cache_mutex);
    lt_entry *e = nullptr, once;
    for (int i = 0; i < lt_cache_n && !e; i++)
        if (lt_key_equal(&lt_cache[i].key, &key)) e = &lt_cache[i];
    const bool miss = e == nullptr, kept = miss && lt_cache_n < LT_CACHE_SIZE;
    if (miss) {
        e = kept ? &lt_cache[lt_cache_n++] : &once;
        /* (a shape the full table cannot keep reads the file but is never timed: it would be,
         * every call) */
        const lt_tune_mode mode = kept || lt_tune_mode_now == LT_TUNE_OFF ? lt_tune_mode_now
                                                                          : LT_TUNE_FILE;
        lt_entry_build(e, g, &key, ctx, mode, (cudaStream_t)s);
        if (!kept && e->found && e->src == LT_SRC_MISSING) lt_tune_overflow_missing++;
        if (!kept && e->found && e->src == LT_SRC_UNMATCHED) lt_tune_overflow_unmatched++;
    }
    cublasStatus_t run = CUBLAS_STATUS_SUCCESS;
    if (e->found) {
        if (!miss) lt_set_pointers(e->desc, g); /* this call's bias and aux */
        run = lt_run(e, g, &e->algo, ctx, (cudaStream_t)s);
        if (run == CUBLAS_STATUS_NOT_SUPPORTED && miss) /* first call: the next answers */
            run = lt_next_answer(e, g, ctx, (cudaStream_t)s);
    }
    const int found = e->found;
    const cublasStatus_t status = e->status;
    char attrs[768] = "";
    if ((found && run != CUBLAS_STATUS_SUCCESS) || (!found && !allow_none))
        lt_describe(e, g, ctx, attrs, sizeof attrs);
    if (miss && !kept) lt_entry_destroy(&once);
    lock.unlock();
    char msg[1024];
    if (found && run != CUBLAS_STATUS_SUCCESS) { /* refused, not as NOT_SUPPORTED on the first call */
        snprintf(msg, sizeof msg, "cublasLtMatmul: %s (m=%d n=%d k=%d); the descriptor: %s",
                 cublasLtGetStatusString(run), g->m, g->n, g->k, attrs);
        tcu_fail(what, msg, __FILE__, __LINE__);
    }
    if (!found && !allow_none) {
        snprintf(msg, sizeof msg,
                 "cuBLASLt has no algorithm for m=%d n=%d k=%d (%s, epilogue %u, "
                 "workspace %zu bytes): %s; the descriptor: %s", g->m, g->n, g->k,
                 g->op == LT_F32 ? "fp32" : tcu_msg("N=%d IC=%d OC=%d", g->N, g->IC, g->OC),
                 (unsigned)g->epi, ctx->lt_workspace_bytes, cublasLtGetStatusString(status), attrs);
        tcu_fail(what, msg, __FILE__, __LINE__);
    }
    return found != 0;
}

/* Destroys every cached descriptor and forgets the algorithms (tcu_shutdown: the next context
 * has a new cuBLASLt handle and may sit on another device). */
static void lt_cache_clear(void) { /* under lt_cache_mutex */
    for (int i = 0; i < lt_cache_n; i++) lt_entry_destroy(&lt_cache[i]);
    lt_cache_n = 0;
}

void tcu_matmul_release(void) {
    std::lock_guard<std::mutex> lock(lt_cache_mutex);
    lt_cache_clear();
    lt_tune_reset();
}

int tcu_matmul_tune_open(const char *path, int timing, char *err, size_t n) {
    const tcu_context *ctx = tcu_context_get("tcu_matmul_tune_open");
    cudaDeviceProp prop;
    TCU_CHECK(cudaGetDeviceProperties(&prop, ctx->device), "tcu_matmul_tune_open");
    std::lock_guard<std::mutex> lock(lt_cache_mutex);
    lt_cache_clear(); /* the algorithms chosen without the file */
    lt_tune_reset();
    if (tcu_tune_open(&lt_tune, path, prop.name, (int64_t)cublasLtGetVersion(), timing, err, n))
        return -1;
    lt_tune_mode_now = timing ? LT_TUNE_TIME : LT_TUNE_FILE;
    return 0;
}

uint64_t tcu_matmul_tune_hash(void) {
    std::lock_guard<std::mutex> lock(lt_cache_mutex);
    return tcu_tune_hash(&lt_tune);
}

void tcu_matmul_tune_stats(tcu_tune_stats *st) {
    std::lock_guard<std::mutex> lock(lt_cache_mutex);
    memset(st, 0, sizeof *st);
    st->loaded = lt_tune.loaded;
    st->added = lt_tune.n - lt_tune.loaded;
    for (int i = 0; i < lt_cache_n; i++) {
        const lt_entry *e = &lt_cache[i];
        if (!e->found) continue;
        st->timed += e->src == LT_SRC_TIMED;
        st->single += e->src == LT_SRC_SINGLE;
        st->from_file += e->src == LT_SRC_FILE;
        st->by_config += e->src == LT_SRC_FILE && e->by_cfg;
        st->unmatched += e->src == LT_SRC_UNMATCHED;
        st->untimed += e->src == LT_SRC_UNTIMED;
        st->missing += e->src == LT_SRC_MISSING;
        if (e->src == LT_SRC_TIMED && e->first_us > 0) st->saved_us += e->first_us - e->us;
    }
    st->overflow_missing = lt_tune_overflow_missing;
    st->overflow_unmatched = lt_tune_overflow_unmatched;

}

int tcu_matmul_tune_save(const char *path, char *err, size_t n) {
    std::lock_guard<std::mutex> lock(lt_cache_mutex);
    if (lt_tune_mode_now != LT_TUNE_TIME || lt_tune.n == lt_tune.loaded) return 0;
    return tcu_tune_save(&lt_tune, path, err, n) ? -1 : 1;
}

void tcu_matmul_set_reduction(tcu_reduction r) {
    if (r != TCU_REDUCTION_COMPUTE && r != TCU_REDUCTION_NONE && r != TCU_REDUCTION_ANY)
        tcu_fail("tcu_matmul_set_reduction", "not a tcu_reduction", __FILE__, __LINE__);
    std::lock_guard<std::mutex> lock(lt_cache_mutex);
    if (r == lt_reduction) return;
    lt_cache_clear(); /* the algorithms chosen under the old rule */
    lt_reduction = r;
}

static const char *reduction_name(uint32_t scheme) {
    switch (scheme) {
    case CUBLASLT_REDUCTION_SCHEME_NONE: return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE: return "inplace";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: return "compute";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE: return "output";
    default: return "other";
    }
}

/* one of an algorithm's configuration attributes (cublasLtMatmulAlgoConfigGetAttribute), 0 when
 * cuBLASLt does not say */
static uint32_t algo_config(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t a,
                            size_t bytes) {
    uint32_t v = 0; /* the attributes are 16- or 32-bit: the low bytes of v */
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, a, &v, bytes, &written) != CUBLAS_STATUS_SUCCESS)
        return 0;
    return v;
}

int tcu_matmul_report(FILE *f) {
    static const char *const rule[] = {"compute", "none", "any"};
    std::lock_guard<std::mutex> lock(lt_cache_mutex);
    int split = 0, none = 0;
    if (f) {
        fprintf(f, "cuBLASLt algorithms in use: %d shape(s) (TSR_GEMM_REDUCTION rule: %s)\n",
                lt_cache_n, rule[lt_reduction]);
        fprintf(f, "%-26s %-18s %4s %5s %5s %6s %7s %9s %7s %8s  %s\n", "op", "m x n x k", "epi",
                "algo", "tile", "stages", "split-K", "reduction", "swizzle", "custom",
                "choice (TSR_GEMM_TUNE)");
    }
    for (int i = 0; i < lt_cache_n; i++) {
        const lt_entry *e = &lt_cache[i];
        char shape[48];
        snprintf(shape, sizeof shape, "%dx%dx%d", e->key.m, e->key.n, e->key.k);
        if (!e->found) {
            none++;
            if (f)
                fprintf(f, "%-26s %-18s %4d none (%s)\n", lt_op_name[e->key.op], shape, e->key.epi,
                        cublasLtGetStatusString(e->status));
            continue;
        }
        const cublasLtMatmulAlgo_t *a = &e->algo;
        uint32_t splitk = algo_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, sizeof(int32_t));
        uint32_t scheme = algo_config(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, sizeof(uint32_t));
        if (splitk > 1) split++;
        char choice[96] = "heuristic's first";
        if (e->src != LT_SRC_HEURISTIC)
            snprintf(choice, sizeof choice, "%s: answer %d of %d%s", lt_src_name[e->src],
                     e->pick + 1, e->cands,
                     e->us > 0 ? tcu_msg(", %.1f us (first %.1f us)", e->us, e->first_us) : "");
        if (f)
            fprintf(f, "%-26s %-18s %4d %5d %5u %6u %7u %9s %7u %8u  %s\n", lt_op_name[e->key.op],
                    shape, e->key.epi, (int32_t)algo_config(a, CUBLASLT_ALGO_CONFIG_ID, sizeof(int32_t)),
                    algo_config(a, CUBLASLT_ALGO_CONFIG_TILE_ID, sizeof(uint32_t)),
                    algo_config(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, sizeof(uint32_t)),
                    splitk ? splitk : 1, splitk > 1 ? reduction_name(scheme) : "-",
                    algo_config(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, sizeof(uint32_t)),
                    algo_config(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, sizeof(uint32_t)), choice);
    }
    if (f)
        fprintf(f, "cuBLASLt: %d shape(s), %d split-K, %d without an algorithm (rule %s)\n",
                lt_cache_n, split, none, rule[lt_reduction]);
    return split;
}

void tcu_lt_gemm_f32(const char *what, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                     int k, float alpha, const float *a, int lda, const float *b, int ldb,
                     float beta, float *d, int ldd, tcu_stream s) {
    lt_gemm g = lt_gemm_dense(LT_F32, 0, 0, 0, ta, tb, m, n, k, a, b, d, CUDA_R_32F, beta);
    g.what = what;
    g.ab_type = CUDA_R_32F;
    g.alpha = alpha;
    g.lda = lda, g.ldb = ldb, g.ldc = ldd;
    lt_matmul(&g, s, false);
}

/* ---- the ops ------------------------------------------------------------------------------- */

/* out = inp @ w^T + bias  [then out = gelu(.), pre_gelu = the argument].
 * out (N,OC) bf16; pre_gelu (N,OC) bf16 or NULL (distinct from out); inp (N,IC) bf16;
 * w (OC,IC) bf16; bias (OC) bf16 or NULL; gelu: the kind applied when pre_gelu is given.
 * cuBLASLt: D (OC,N) ld OC [= out row-major] = op(A) B with A = w stored (IC,OC) ld IC, op T
 * [= w as (OC,IC)]; B = inp stored (IC,N) ld IC, op N; m = OC, n = N, k = IC; beta = 0.
 * Bias (length m = OC, broadcast over the N columns of D) by CUBLASLT_EPILOGUE_BIAS.
 * tanh GELU: CUBLASLT_EPILOGUE_GELU_AUX[_BIAS], whose GELU is the tanh approximation (it matches
 * torch's gelu(approximate="tanh"), which torch's _addmm_activation decomposition uses for it on
 * CUDA); aux = pre_gelu (OC,N) ld OC, so OC % 8 == 0 (the aux ld rule) or the fallback below.
 * exact GELU (or no fused algorithm): bias epilogue into pre_gelu, then tcu_gelu_forward. */
void tcu_matmul_forward(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                        const tsr_bf16 *w, const tsr_bf16 *bias, int N, int IC, int OC,
                        tsr_gelu_kind gelu, tcu_stream s) {
    const char *what = lt_op_name[LT_FWD];
    TCU_REQUIRE_RULE(what, tcu_rule_matmul, N, IC, OC);
    TCU_REQUIRE(out && inp && w, what, "out, inp and w must not be NULL");
    if (pre_gelu) {
        TCU_REQUIRE((unsigned)gelu < (unsigned)TSR_GELU_COUNT, what, "unknown GELU kind");
        TCU_REQUIRE(pre_gelu != out, what, "pre_gelu must not alias out");
    }

    /* row-major out = inp w^T is column-major out^T (OC,N) = w^T-as-stored^T (IC,OC)^T inp (IC,N) */
    lt_gemm g = lt_gemm_dense(LT_FWD, N, IC, OC, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, inp,
                              nullptr, CUDA_R_16BF, 0.0f);
    g.bias = bias;

    /* tanh GELU fused: out = gelu(acc + bias) from the fp32 accumulator, pre_gelu = acc + bias */
    if (pre_gelu && gelu == TSR_GELU_TANH && OC % 8 == 0) {
        g.d = out;
        g.epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        g.aux = pre_gelu;
        g.aux_ld = OC;
        if (lt_matmul(&g, s, true)) return;
        g.aux = NULL;
        g.aux_ld = 0;
    }

    /* plain: matmul (+ bias) into out, or into pre_gelu and then the GELU kernel into out */
    tsr_bf16 *dst = pre_gelu ? pre_gelu : out;
    g.d = dst;
    g.epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (!lt_matmul(&g, s, bias != NULL)) {
        /* no BIAS-epilogue algorithm for this shape: plain matmul, then the bias kernel (rounds
         * to bf16 twice, where the epilogue rounds once) */
        g.epi = CUBLASLT_EPILOGUE_DEFAULT;
        g.bias = NULL;
        lt_matmul(&g, s, false);
        bias_add(dst, bias, N, OC, what, s);
    }
    if (pre_gelu) tcu_gelu_forward(out, pre_gelu, (size_t)N * OC, gelu, s);
}

/* dinp (N,IC) bf16 += dout @ w (mode TSR_GRAD_SET: =);  dw (OC,IC) fp32 += dout^T @ inp;  dbias (OC) fp32 += sum_n dout.
 * Each of dinp, dw, dbias may be NULL (that term skipped); inp may be NULL when dw is, w when dinp
 * is. dout (N,OC) bf16, inp (N,IC) bf16, w (OC,IC) bf16.
 * dinp: D (IC,N) ld IC [= dinp row-major] = A B + D; A = w stored (IC,OC) ld IC, op N [w row-major
 *   is w^T column-major]; B = dout stored (OC,N) ld OC, op N; m = IC, n = N, k = OC; bf16 C = D,
 *   beta = 1 (read, add in fp32, round once); SET: beta = 0 (cuBLASLt does not read C; the same
 *   algorithm, as beta is not part of the heuristic's inputs).
 * dw:   D (IC,OC) ld IC [= dw row-major] = A op(B) + D; A = inp stored (IC,N) ld IC, op N;
 *   B = dout stored (OC,N) ld OC, op T [= dout as (N,OC)]; m = IC, n = OC, k = N; A/B bf16,
 *   C = D fp32, beta = 1.
 * dbias: bias_grad (row-group partials, then a fixed-order sum: deterministic; cuBLASLt's
 *   BGRADA/BGRADB epilogues write the bias gradient, they cannot accumulate into it). */
void tcu_matmul_backward(tsr_bf16 *dinp, float *dw, float *dbias, const tsr_bf16 *dout,
                         const tsr_bf16 *inp, const tsr_bf16 *w, int N, int IC, int OC,
                         tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_matmul_backward";
    TCU_REQUIRE_RULE(what, tcu_rule_matmul_backward, N, IC, OC, dinp, dw, dout, inp, w);

    if (dinp) {
        lt_gemm g = lt_gemm_dense(LT_DINP, N, IC, OC, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, dout,
                                  dinp, CUDA_R_16BF, mode == TSR_GRAD_SET ? 0.0f : 1.0f);
        lt_matmul(&g, s, false);
    }
    if (dw) {
        lt_gemm g = lt_gemm_dense(LT_DW, N, IC, OC, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, dout,
                                  dw, CUDA_R_32F, 1.0f);
        lt_matmul(&g, s, false);
    }
    if (dbias) bias_grad(dbias, reinterpret_cast<const bf16 *>(dout), N, OC, (cudaStream_t)s,
                         what);
}

/* dinp (N,IC) = gelu_tanh'(pre_gelu) * (dout @ w) [written]; dw, dbias += as tcu_matmul_backward.
 * dinp: tcu_matmul_backward's dinp GEMM (D (IC,N) ld IC, beta = 0) with CUBLASLT_EPILOGUE_DGELU,
 *   aux = pre_gelu stored (IC,N) ld IC [= pre_gelu row-major (N,IC)], read: the epilogue multiplies
 *   the fp32 product by the tanh GELU's derivative at aux and rounds once to bf16;
 *   IC % 8 != 0 (the aux ld rule) or no algorithm: the plain GEMM into dinp, then
 *   tcu_gelu_backward(dinp, pre_gelu, dinp) in place (each element read, then written, by one
 *   thread): two roundings, the unfused bits. */
void tcu_matmul_backward_dgelu(tsr_bf16 *dinp, float *dw, float *dbias, const tsr_bf16 *dout,
                               const tsr_bf16 *inp, const tsr_bf16 *w, const tsr_bf16 *pre_gelu,
                               int N, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_matmul_backward_dgelu";
    TCU_REQUIRE_RULE(what, tcu_rule_matmul_dgelu, N, IC, OC, dinp, dout, w, pre_gelu);
    lt_gemm g = lt_gemm_dense(LT_DINP, N, IC, OC, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, dout,
                              dinp, CUDA_R_16BF, 0.0f);
    g.what = what;
    bool fused = false;
    if (IC % 8 == 0) {
        g.epi = CUBLASLT_EPILOGUE_DGELU;
        g.aux = const_cast<tsr_bf16 *>(pre_gelu); /* read by DGELU, never written */
        g.aux_ld = IC;
        fused = lt_matmul(&g, s, true);
    }
    if (!fused) {
        tcu_matmul_backward(dinp, NULL, NULL, dout, NULL, w, N, IC, OC, TSR_GRAD_SET, s);
        tcu_gelu_backward(dinp, pre_gelu, dinp, (size_t)N * IC, TSR_GELU_TANH, TSR_GRAD_SET, s);
    }
    if (dw || dbias) tcu_matmul_backward(NULL, dw, dbias, dout, inp, w, N, IC, OC, TSR_GRAD_SET, s);
}

/* out (N,OC) bf16 = (qx @ qw^T) * sx_inv * sw_inv + bias, qx (N,IC), qw (OC,IC) E4M3 row-major.
 * The call is tcu_fp8_gemm_plan's (src/base/tcu_fp8_gemm.h: the mapping, the "TN" layout,
 * bf16 C = D with beta 0, A_SCALE = sw_inv, B_SCALE = sx_inv, fast accumulation off), refused
 * before cuBLASLt sees it when it breaks one of tcu_fp8_gemm_check's rules, which the emulator
 * applies too. A bias the plan leaves out of the epilogue (not 16-byte aligned), or one whose
 * BIAS epilogue cuBLASLt has no algorithm for, is added by bias_add_rows_kernel after the GEMM
 * (a second bf16 rounding, as tcu_matmul_forward's fallback). */
void tcu_matmul_fp8(tsr_bf16 *out, const tsr_fp8 *qx, const float *sx_inv, const tsr_fp8 *qw,
                    const float *sw_inv, const tsr_bf16 *bias, int N, int IC, int OC,
                    tcu_stream s) {
    const char *what = lt_op_name[LT_FP8];
    TCU_REQUIRE_RULE(what, tcu_rule_matmul, N, IC, OC);
    TCU_REQUIRE(out && qx && qw && sx_inv && sw_inv, what,
                "out, qx, qw, sx_inv and sw_inv must not be NULL");
    const tcu_context *ctx = tcu_context_get(what);
    tcu_fp8_gemm p;
    tcu_fp8_gemm_plan(&p, out, qx, sx_inv, qw, sw_inv, bias, N, IC, OC, ctx->lt_workspace,
                      ctx->lt_workspace_bytes);
    const char *why = tcu_fp8_gemm_check(&p);
    if (why) {
        char msg[1024], desc[640];
        snprintf(msg, sizeof msg, "N=%d IC=%d OC=%d: %s (cuBLASLt's FP8 rules; the call: %s)", N,
                 IC, OC, why, tcu_fp8_gemm_describe(&p, desc, sizeof desc));
        tcu_fail(what, msg, __FILE__, __LINE__);
    }
    lt_gemm g = lt_gemm_dense(LT_FP8, N, IC, OC, CUBLAS_OP_T, CUBLAS_OP_N, p.m, p.n, p.k, p.a,
                              p.b, out, CUDA_R_16BF, p.beta);
    g.ab_type = CUDA_R_8F_E4M3;
    g.a_scale = p.a_scale, g.b_scale = p.b_scale;
    g.bias = p.bias;
    g.epi = p.bias_epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const bool fused = lt_matmul(&g, s, p.bias_epilogue);
    if (!fused) { /* no BIAS algorithm, or none cuBLASLt would run: DEFAULT, then the bias */
        g.bias = NULL, g.epi = CUBLASLT_EPILOGUE_DEFAULT;
        lt_matmul(&g, s, false);
    }
    if (bias && !(fused && p.bias_epilogue)) bias_add(out, bias, N, OC, what, s);
}
