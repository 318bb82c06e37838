/* fuzz_common.h — what every libFuzzer harness of tests/fuzz/ shares (docs/fuzzing.md).
 *
 * Most of tessera's parsers take a path, so a harness writes its input to a file first: one
 * private directory per process (under $TMPDIR, else /tmp), made on first use, its files
 * rewritten for each input and the whole directory removed at exit, so a run leaves nothing.
 * Inputs that hold several files (encoder.json + vocab.bpe, index.tsv + shards, a config + its
 * --set lines) are split at FUZZ_SEP, a separator unlikely in real files (tests/fuzz/fuzz.dict
 * teaches it to the fuzzer).
 */
#ifndef TSR_FUZZ_COMMON_H
#define TSR_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define FUZZ_SEP "\n\x01--8<--\x01\n"
#define FUZZ_MAX_PARTS 8

typedef struct fuzz_part {
    const uint8_t *p;
    size_t n;
} fuzz_part;

/* Mutes tessera's error messages (every rejected input would print one); FUZZ_VERBOSE=1 keeps
 * them, for reading why a saved input is refused. Call from LLVMFuzzerInitialize. */
void fuzz_quiet(void);

/* libFuzzer's entry points. fuzz_common.c defines a default LLVMFuzzerInitialize (weak: a harness
 * that must load something first, such as fuzz_bpe, defines its own) that only calls fuzz_quiet. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* "DIR/name" in this process's private directory (made on first call; removed at exit). The
 * returned string is static per name slot: valid until the next call with the same name. */
const char *fuzz_path(const char *name);
/* This process's private directory (made on first call). */
const char *fuzz_dir(void);
/* Removes fuzz_path(name) if it exists (a file an earlier input wrote that this one lacks). */
void fuzz_unlink(const char *name);
/* Writes n bytes to fuzz_path(name) (truncating it) and returns that path; aborts on I/O error
 * (the harness's fault, not the parser's). */
const char *fuzz_write(const char *name, const uint8_t *p, size_t n);
/* Splits data at FUZZ_SEP into at most max parts (the last one takes the rest); returns the count
 * (>= 1). */
int fuzz_split(const uint8_t *data, size_t n, fuzz_part *parts, int max);

#endif
