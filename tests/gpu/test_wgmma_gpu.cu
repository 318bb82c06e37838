/* test_wgmma_gpu.cu — wgmma's layouts on the GPU itself (issue 25, item 2): the three checks of
 * tests/gpu/wgmma_layouts.cuh, which the SIMT emulator's selftest also passes, run on a device of
 * compute capability 9.0 (H100, H200). If the hardware and the emulator both pass, they read the
 * descriptors and fragments the same way, and the emulator's verdict on the wgmma attention
 * kernels (test_gpu_ops_simt) holds for the GPU; if this fails on a GPU, that names the layout to
 * fix before the attention kernels' own checks in test_gpu_ops are read. Exit 77 (a loud skip)
 * without such a device. Built by nvcc (Makefile: build/tests/test_wgmma_gpu); device.sh's `ops`
 * stage runs it before the op test.
 */
#include <cuda_runtime.h>

#include <cstdio>

#include "cuda_ptx.h"
#include "tap.h"
#include "gpu/wgmma_layouts.cuh"

int main() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("# SKIP no CUDA device: wgmma's layouts need an sm_90 GPU\n");
        return 77;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        printf("# SKIP cudaGetDeviceProperties failed\n");
        return 77;
    }
    if (p.major != 9 || p.minor != 0) {
        printf("# SKIP %s is sm_%d%d: wgmma is sm_90a's (H100, H200)\n", p.name, p.major, p.minor);
        return 77;
    }
    tap_plan(3);
    tap_diag("device 0: %s, sm_%d%d", p.name, p.major, p.minor);
    wgmma_layout_checks();
    return tap_done();
}
