/* test_lt_load.c — cuBLASLt is opened at the backend's first call, not with the backend
 * (kernels/cuda/cuda_lt_load.cu): runs on every machine with the CUDA toolkit, no GPU needed.
 *  - the process has no libcublasLt mapped before the first call;
 *  - every cuBLASLt function the backend calls resolves (tcu_lt_missing), and then it is mapped;
 *  - the forwarded calls reach cuBLASLt: its version's major is the header's, its status string is
 *    cuBLAS's own.
 * tests/gpu/test_cuda_train.sh checks that tessera-train --plan with device = cuda opens the backend
 * without it. */
#include <cublasLt.h>
#include <string.h>

#include "cuda_ops.h"
#include "tap.h"

int main(void) {
    tap_plan(4);
    tap_ok(!tap_lib_mapped("libcublasLt"), "no libcublasLt in the process before the first call");
    const char *why = tcu_lt_missing();
    tap_ok(why == NULL && tap_lib_mapped("libcublasLt"),
           "every cuBLASLt function the backend calls resolves (%s), "
           "and the library is mapped then", why ? why : "all found");
    const size_t v = cublasLtGetVersion();
    tap_ok(v / 10000 == CUBLAS_VER_MAJOR, "cublasLtGetVersion through the forward: %zu (header: "
           "major %d)", v, CUBLAS_VER_MAJOR);
    const char *s = cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
    tap_ok(s && s[0] && !strstr(s, "libcublasLt"), "cublasLtGetStatusString is cuBLAS's (not the "
           "loader's message): \"%s\"", s ? s : "(null)");
    return tap_done();
}
