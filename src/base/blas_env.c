/* blas_env.c — see blas_env.h. */
#include "blas_env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common.h"

char *openblas_get_corename(void);

/* OpenBLAS 0.3.21's x86-64 cores with AVX-512 sgemm kernels */
static int core_has_avx512(const char *core) {
    static const char *const names[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcasecmp(core, names[i])) return 1;
    return 0;
}

/* OpenBLAS's generic fallbacks, chosen on CPUs it does not recognise */
static int core_is_generic(const char *core) {
    static const char *const names[] = {"Prescott", "Core2", "Katmai"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcasecmp(core, names[i])) return 1;
    return 0;
}

const char *blas_core_choice(const char *core, int avx512, int avx2) {
    if (!core) return NULL;
    if (avx512) return core_has_avx512(core) ? NULL : "SkylakeX";
    if (avx2 && core_is_generic(core)) return "Haswell";
    return NULL;
}

/* The CPU's AVX-512 and AVX2 support (x86 only: OpenBLAS's core names and Debian's mis-detection
 * are x86's; on aarch64 its own detection stands, docs/site.md) */
#if defined(__x86_64__) || defined(__i386__)
static void cpu_vector_isa(int *avx512, int *avx2) {
    __builtin_cpu_init();
    *avx512 = __builtin_cpu_supports("avx512f");
    *avx2 = __builtin_cpu_supports("avx2");
}
#else
static void cpu_vector_isa(int *avx512, int *avx2) { *avx512 = *avx2 = 0; }
#endif

int blas_core_selection_applies(void) {
#if defined(__x86_64__) || defined(__i386__)
    return 1;
#else
    return 0;
#endif
}

void blas_fix_coretype(char **argv) {
    if (!blas_core_selection_applies() || getenv("OPENBLAS_CORETYPE") ||
        getenv("TSR_NO_BLAS_REEXEC"))
        return;
    int avx512, avx2;
    cpu_vector_isa(&avx512, &avx2);
    const char *want = blas_core_choice(openblas_get_corename(), avx512, avx2);
    if (!want) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("TSR_NO_BLAS_REEXEC", "1", 1); /* never loop */
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slower kernels, the banner shows which core is in use */
    tsr_warn("could not re-execute with OPENBLAS_CORETYPE=%s (%s): BLAS runs its slower kernels",
             want, strerror(errno));
}
