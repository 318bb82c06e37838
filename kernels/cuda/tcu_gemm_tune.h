/* tcu_gemm_tune.h — the GEMM algorithm choices kept in a file (TSR_GEMM_TUNE, issue 25 item 4;
 * docs/cuda.md, "GEMM choice by the clock").
 *
 * cuBLASLt's heuristic gives one algorithm per shape; timing its first few answers can find a
 * faster one, but a choice made by a clock can differ from run to run, and with it the bits. So a
 * choice is made once and kept: the table below maps a GEMM's key (op, epilogue, types,
 * transposes, m, n, k, leading dimensions, pointer alignments, workspace: everything the
 * heuristic is asked with) to the chosen algorithm's configuration (algorithm id, tile, stages,
 * split-K count and reduction scheme, swizzle, custom option, inner and cluster shapes, and
 * cuBLASLt's own 64 bytes for it, which NVIDIA documents as serialisable for the same cuBLASLt
 * version), with the times measured when it was chosen. A run that finds its keys in the table runs those
 * algorithms, whatever the clock says: the same bits as the run that chose them.
 *
 * The file is text, one GEMM a line, for people too:
 *   # tessera GEMM choices (TSR_GEMM_TUNE); docs/cuda.md
 *   device <the GPU's name>
 *   cublaslt <cublasLtGetVersion()>
 *   <20 key fields> <9 configuration fields> <the algorithm's 64 bytes, 128 hex digits>
 *   <time of the choice, us> <time of the heuristic's first answer, us>
 * (the column names are in a comment line the writer puts before the entries). Lines starting
 * with # and empty lines are skipped. A file made on another GPU model or cuBLASLt version is
 * refused: its algorithms may not exist there.
 *
 * Plain C on the host, so tests/unit/test_gemm_tune.c checks it on every machine.
 */
#ifndef TCU_GEMM_TUNE_H
#define TCU_GEMM_TUNE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* key: op, epilogue, transa, transb, A/B type, C/D type, m, n, k, lda, ldb, ldc, aux ld, the
 * alignments of A, B, C, bias and aux, workspace bytes, split-K rule (TSR_GEMM_REDUCTION);
 * cfg: algorithm id, tile, stages, split-K count, reduction scheme, CTA swizzle, custom option,
 * inner shape, cluster shape (cuBLASLt's CUBLASLT_ALGO_CONFIG_* values) */
enum { TCU_TUNE_KEY_N = 20, TCU_TUNE_CFG_N = 9, TCU_TUNE_DATA_N = 8 };
extern const char *const tcu_tune_key_names[TCU_TUNE_KEY_N];
extern const char *const tcu_tune_cfg_names[TCU_TUNE_CFG_N];

typedef struct tcu_tune_entry {
    int64_t key[TCU_TUNE_KEY_N];
    int64_t cfg[TCU_TUNE_CFG_N];
    uint64_t data[TCU_TUNE_DATA_N]; /* cublasLtMatmulAlgo_t, matched exactly */
    double us, first_us; /* the choice's time and the heuristic's first answer's, microseconds */
} tcu_tune_entry;

typedef struct tcu_tune_table {
    char device[128];
    int64_t lt_version;
    tcu_tune_entry *e;
    int n, cap;
    int loaded; /* entries read from the file (the first `loaded` of e); the rest were added */
} tcu_tune_table;

/* Starts t for `device` and cuBLASLt `lt_version`, then reads path into it when the file exists
 * (a missing file is an empty table). 0, or -1 with err (n bytes) naming the file, the line and
 * what was expected there: a line that is not 20 + 9 integers, 128 hex
 * digits and two finite times, a key that comes
 * twice, another device or cuBLASLt version than the caller's, a file that cannot be read. On
 * -1 the table is empty. */
int tcu_tune_load(tcu_tune_table *t, const char *path, const char *device, int64_t lt_version,
                  char *err, size_t n);
/* tcu_tune_load, then, when writable, tcu_tune_writable (a run that will save the table):
 * what both backends' tcu_matmul_tune_open do. 0, or -1 with err and an empty table. */
int tcu_tune_open(tcu_tune_table *t, const char *path, const char *device, int64_t lt_version,
                  int writable, char *err, size_t n);
/* The entry whose key is key, or NULL. */
const tcu_tune_entry *tcu_tune_find(const tcu_tune_table *t, const int64_t key[TCU_TUNE_KEY_N]);
/* Adds (or replaces) the entry for key. 0, or -1 when the host cannot grow the table. */
int tcu_tune_add(tcu_tune_table *t, const int64_t key[TCU_TUNE_KEY_N],
                 const int64_t cfg[TCU_TUNE_CFG_N], const uint64_t data[TCU_TUNE_DATA_N],
                 double us, double first_us);
/* Writes every entry to path: a temporary file in the same directory, then rename, then the
 * directory synced, so the old file stays whole until the new one is complete. Two processes
 * writing one file keep the last writer's table: one tuning run per file. 0, or -1 with err
 * naming the file and the system's reason (the old file, if any, untouched). */
int tcu_tune_save(const tcu_tune_table *t, const char *path, char *err, size_t n);
/* Whether path can be written: a temporary file made and removed in its directory (0), or -1
 * with err (a run that times its shapes would find out only at its end). */
int tcu_tune_writable(const char *path, char *err, size_t n);
/* A hash of the table's entries (keys, configurations and algorithms, in order): ranks compare
 * it. */
uint64_t tcu_tune_hash(const tcu_tune_table *t);
/* Frees the entries; the table is empty afterwards. */
void tcu_tune_release(tcu_tune_table *t);

#ifdef __cplusplus
}
#endif

#endif
