/* blas_env.h — make Debian's OpenBLAS use the fastest kernels the CPU runs. */
#ifndef TSR_BLAS_ENV_H
#define TSR_BLAS_ENV_H

/* Debian 12's OpenBLAS 0.3.21 falls back to its generic "Prescott" kernels on newer Xeons (about
 * 5x slower), and gives AMD Zen 4/5, which have AVX-512, its AVX2 "Haswell" kernels (about 1.9x
 * slower than its "SkylakeX" ones on a Zen 5: docs/decisions.md "BLAS core detection"). The core
 * type is read when the library loads, so when OPENBLAS_CORETYPE is unset and blas_core_choice
 * names a better core, this sets OPENBLAS_CORETYPE to it and re-executes the program with the same
 * arguments. Call it first in main, before MPI_Init. TSR_NO_BLAS_REEXEC=1 disables it. */
void blas_fix_coretype(char **argv);

/* 1 where the core selection above applies (x86: the core names and the AVX checks are x86's);
 * 0 elsewhere (aarch64), where blas_fix_coretype does nothing and OpenBLAS's own choice stands. */
int blas_core_selection_applies(void);

/* The core to ask for, given the one OpenBLAS picked (openblas_get_corename) and what the CPU
 * and the OS support: "SkylakeX" on an AVX-512 CPU whose core has no AVX-512 kernels (any but
 * SkylakeX, Cooperlake, SapphireRapids); "Haswell" on an AVX2 CPU given a generic core (Prescott,
 * Core2, Katmai); NULL to keep it (also for core NULL). */
const char *blas_core_choice(const char *core, int avx512, int avx2);

#endif
