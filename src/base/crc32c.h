/* crc32c.h — CRC32C (Castagnoli) checksums (crc32c.c: the polynomial, the two implementations). */
#ifndef TSR_CRC32C_H
#define TSR_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of a buffer, continuing from crc (start with 0). Used for shard headers, payloads and
 * index files, checkpoint tensors and metadata (checkpoint/), tokenizer files (tokfile.c) and
 * TensorBoard event records (src/telemetry/tboard.c). */
uint32_t tsr_crc32c(uint32_t crc, const void *buf, size_t n);
/* The portable slicing-by-8 implementation (same result); tsr_crc32c uses the SSE4.2 crc32
 * instruction instead when tsr_crc32c_hw() says the CPU has it. For tests and diagnostics. */
uint32_t tsr_crc32c_sw(uint32_t crc, const void *buf, size_t n);
int tsr_crc32c_hw(void);

#endif
