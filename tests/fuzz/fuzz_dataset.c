/* fuzz_dataset.c — a dataset's index.tsv and its shard headers (src/data/shard.c), as
 * tessera-train opens them (headers always checked; payload CRCs too with verify). Input:
 * index.tsv [FUZZ_SEP shard s0.bin [FUZZ_SEP s1.bin ...]] (the seeds' indexes name s0.bin, ...).
 * A dataset that opens is also read: the first and last sample at two sequence lengths. Each input
 * runs twice: as is, and with every shard's header CRC made right (shard_put_u32 at byte 60), so
 * mutations reach the header fields behind the checksum. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "crc32c.h"
#include "data/data.h"
#include "data/shard_format.h"
#include "fuzz_common.h"

static void read_some(const tsr_dataset *ds, int T) {
    uint64_t n = dataset_n_samples(ds, T);
    if (n == 0) return;
    int32_t *in = malloc((size_t)T * sizeof *in), *tg = malloc((size_t)T * sizeof *tg);
    uint32_t V = dataset_vocab_size(ds);
    uint64_t at[2] = {0, n - 1};
    for (int k = 0; k < 2; k++)
        if (dataset_read_sample(ds, T, at[k], in, tg) >= 0)
            for (int t = 0; t < T; t++)
                if (in[t] < 0 || (uint32_t)in[t] >= V || tg[t] < -1 || (tg[t] >= 0 && (uint32_t)tg[t] >= V))
                    abort(); /* a token the index's vocabulary does not hold came through */
    free(in);
    free(tg);
}

static void open_and_read(void) {
    for (int verify = 0; verify <= 1; verify++) {
        tsr_dataset *ds = NULL;
        if (dataset_open(&ds, fuzz_dir(), verify) != 0) continue;
        read_some(ds, 1);
        read_some(ds, 7);
        dataset_close(ds);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[FUZZ_MAX_PARTS];
    int np = fuzz_split(data, size, part, FUZZ_MAX_PARTS);
    fuzz_write("index.tsv", part[0].p, part[0].n);
    for (int fix = 0; fix <= 1; fix++) {
        int any = 0;
        for (int k = 1; k < FUZZ_MAX_PARTS; k++) {
            char name[16];
            snprintf(name, sizeof name, "s%d.bin", k - 1);
            if (k >= np) {
                fuzz_unlink(name);
                continue;
            }
            if (!fix || part[k].n < SHARD_HEADER_SIZE) {
                fuzz_write(name, part[k].p, part[k].n);
                continue;
            }
            uint8_t *copy = malloc(part[k].n);
            memcpy(copy, part[k].p, part[k].n);
            uint32_t crc = tsr_crc32c(0, copy, SHARD_HEADER_CRC_AT);
            const uint8_t *at = copy + SHARD_HEADER_CRC_AT; /* little-endian u32 */
            uint32_t stored = at[0] | at[1] << 8 | at[2] << 16 | (uint32_t)at[3] << 24;
            if (stored != crc) any = 1;
            shard_put_u32(copy + SHARD_HEADER_CRC_AT, crc);
            fuzz_write(name, copy, part[k].n);
            free(copy);
        }
        if (fix && !any) break; /* every header CRC was right already: the same run again */
        open_and_read();
    }
    return 0;
}
