/* blas_env.c — see blas_env.h. */
#include "blas_env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common.h"

char *openblas_get_corename(void);

void blas_fix_coretype(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv("TSR_NO_BLAS_REEXEC")) return;
    const char *core = openblas_get_corename();
    if (!core || (strcasecmp(core, "prescott") != 0 && strcasecmp(core, "core2") != 0 &&
                  strcasecmp(core, "katmai") != 0))
        return;
    __builtin_cpu_init();
    const char *want = __builtin_cpu_supports("avx512f")  ? "SkylakeX"
                       : __builtin_cpu_supports("avx2") ? "Haswell"
                                                          : NULL;
    if (!want) return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    setenv("TSR_NO_BLAS_REEXEC", "1", 1); /* never loop */
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slow kernels, the banner shows which core is in use */
    tsr_warn("could not re-execute with OPENBLAS_CORETYPE=%s (%s): BLAS runs its slow generic kernels",
             want, strerror(errno));
}
