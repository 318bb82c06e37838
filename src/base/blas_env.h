/* blas_env.h — make Debian's OpenBLAS use the right kernels on CPUs it does not recognise. */
#ifndef TSR_BLAS_ENV_H
#define TSR_BLAS_ENV_H

/* Debian 12's OpenBLAS 0.3.21 falls back to its generic "Prescott" kernels on newer Xeons (about
 * 5x slower: docs/decisions.md "BLAS core detection"). The core type is read when the library
 * loads, so when OPENBLAS_CORETYPE is unset, a generic core was chosen and the CPU has AVX-512 (or
 * AVX2), this sets OPENBLAS_CORETYPE=SkylakeX (Haswell) and re-executes the program with the same
 * arguments. Call it first in main, before MPI_Init. TSR_NO_BLAS_REEXEC=1 disables it. */
void blas_fix_coretype(char **argv);

#endif
