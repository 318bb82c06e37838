/* cuda_lt_load.cu — cuBLASLt opened at its first call, not when tessera-train opens the backend.
 *
 * The backend library (libtessera-cuda-train.so) is opened by every run with device = "cuda",
 * also those that never touch a GPU: --plan and --dry-run on a login node, the recipe checks. Linked
 * against libcublasLt (about 500 MB), each such start ran cuBLASLt's initialisers: 0.55 CPU-s and,
 * on a cold page cache, seconds of reading (docs/cuda.md "cuBLASLt at first use"). Here each
 * cuBLASLt function the backend calls has a definition of the same name and type (cublasLt.h's, so
 * the compiler checks them) that opens libcublasLt.so.<CUBLAS_VER_MAJOR> once (the usual search:
 * LD_LIBRARY_PATH, the CUDA module's paths, the library's rpath to $(CUDA_HOME)/lib64) and calls
 * the real one. Where it cannot be opened, each returns CUBLAS_STATUS_NOT_INITIALIZED and
 * cublasLtGetStatusString says why (the loader's message), which tcu_init's check prints.
 */
#include <cublasLt.h>
#include <dlfcn.h>
#include <mutex>
#include <stdio.h>

#include "cuda_internal.h"

#define LT_STR2(x) #x
#define LT_STR(x) LT_STR2(x)
#define LT_SONAME "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)

static void *lt_lib;
static char lt_why[512];
static std::once_flag lt_once;

static void lt_open(void) {
    lt_lib = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lt_lib) snprintf(lt_why, sizeof lt_why, "cannot load " LT_SONAME ": %s", dlerror());
}

/* the real NAME, or NULL (lt_why says why) */
static void *lt_sym(const char *name) {
    std::call_once(lt_once, lt_open);
    if (!lt_lib) return NULL;
    void *f = dlsym(lt_lib, name);
    if (!f) snprintf(lt_why, sizeof lt_why, LT_SONAME " has no %s", name);
    return f;
}

/* X(return type, value when cuBLASLt is missing, name, parameters, arguments): every function the
 * backend calls (tcu_lt_missing checks the list) */
#define LT_FUNCS(X)                                                                                \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtCreate, (cublasLtHandle_t * h), (h))  \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtDestroy, (cublasLtHandle_t h), (h))   \
    X(size_t, 0, cublasLtGetVersion, (void), ())                                                   \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmul,                               \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,              \
       cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,     \
       const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,              \
       const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsb, cudaStream_t s),                  \
      (h, d, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, wsb, s))                          \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulAlgoConfigGetAttribute,         \
      (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t a, void *buf,       \
       size_t n, size_t *w),                                                                      \
      (algo, a, buf, n, w))                                                                       \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulAlgoGetHeuristic,               \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t Ad,                     \
       cublasLtMatrixLayout_t Bd, cublasLtMatrixLayout_t Cd, cublasLtMatrixLayout_t Dd,           \
       cublasLtMatmulPreference_t p, int want, cublasLtMatmulHeuristicResult_t res[], int *got),  \
      (h, d, Ad, Bd, Cd, Dd, p, want, res, got))                                                  \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulDescCreate,                     \
      (cublasLtMatmulDesc_t * d, cublasComputeType_t c, cudaDataType_t s), (d, c, s))             \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulDescDestroy,                    \
      (cublasLtMatmulDesc_t d), (d))                                                              \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulDescGetAttribute,               \
      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, void *buf, size_t n, size_t *w), \
      (d, a, buf, n, w))                                                                          \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulDescSetAttribute,               \
      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t n),      \
      (d, a, buf, n))                                                                             \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulPreferenceCreate,               \
      (cublasLtMatmulPreference_t * p), (p))                                                      \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulPreferenceDestroy,              \
      (cublasLtMatmulPreference_t p), (p))                                                        \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmulPreferenceSetAttribute,         \
      (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf,     \
       size_t n),                                                                                 \
      (p, a, buf, n))                                                                             \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatrixLayoutCreate,                   \
      (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld),     \
      (l, t, rows, cols, ld))                                                                     \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatrixLayoutDestroy,                  \
      (cublasLtMatrixLayout_t l), (l))                                                            \
    X(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatrixLayoutGetAttribute,             \
      (cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, void *buf, size_t n,          \
       size_t *w),                                                                                \
      (l, a, buf, n, w))

/* each definition looks its real function up once (a function-local static: thread-safe) */
#define LT_FORWARD(ret, missing, name, params, args)                                               \
    ret CUBLASWINAPI name params {                                                                 \
        typedef ret(*fn_t) params;                                                                 \
        static const fn_t real = (fn_t)lt_sym(#name);                                              \
        return real ? real args : missing;                                                         \
    }
LT_FUNCS(LT_FORWARD)

/* the status string from cuBLASLt, or why it could not be opened */
const char *CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
    typedef const char *(*fn_t)(cublasStatus_t);
    static const fn_t real = (fn_t)lt_sym("cublasLtGetStatusString");
    return real ? real(status) : lt_why;
}

#define LT_NAME(ret, missing, name, params, args) #name,
const char *tcu_lt_missing(void) {
    static const char *const names[] = {LT_FUNCS(LT_NAME) "cublasLtGetStatusString"};
    for (const char *n : names)
        if (!lt_sym(n)) return lt_why;
    return NULL;
}
