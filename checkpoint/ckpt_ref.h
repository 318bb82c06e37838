/* ckpt_ref.h — reference files: values a run computes once from its starting weights and cannot
 * compute again once the run has moved on, stored in its run directory beside the checkpoints
 * (DPO's precomputed reference log-probabilities, train/dpo_ref.c; GRPO's initial weights for its
 * KL term, rl/grpo_ref.c). One format for both (docs/checkpoint-format.md "Reference files"):
 *
 *   header   magic "TSR_REF\0" (8 bytes), version u32 (1), kind char[16] (what the values are,
 *            '\0'-padded: "dpo-logps", "grpo-initial"), elem u32 (bytes per value: 4 f32, 8 f64),
 *            parts u32 (G >= 1), n u64 (values in all), meta_bytes u32,
 *            then meta (meta_bytes): the owner's record of what the values belong to
 *   values   n values of elem bytes, cut into the G parts in order (part p: the owner's cut)
 *   trailer  part_crc u32[G] (CRC32C of each part's bytes), then crc u32: the CRC32C of the header
 *            and the part CRCs, the file's checksum (what the run's config records)
 *
 * Native byte order (x86-64 and aarch64 are little-endian). A writer creates PATH.tmp, each part is
 * written at its offset (by whichever rank holds it, pwrite), then the header and the trailer; the
 * file is fsynced and renamed into place, and its directory fsynced: a crash leaves the old file or
 * the new, never a part. A reader checks the magic, version, kind, value size, part count, value
 * count, record size, file size and header checksum before it reads values, and each part's CRC
 * as it reads it. Functions are local (no collectives); the I/O ones return 0 or TSR_EXIT_DATA
 * after tsr_error() named the file and the fault.
 */
#ifndef TSR_CKPT_REF_H
#define TSR_CKPT_REF_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_REF_MAGIC "TSR_REF" /* + its '\0': 8 bytes */
#define CKPT_REF_VERSION 1u
#define CKPT_REF_KIND 16
#define CKPT_REF_META_MAX (1u << 20)

/* A reference file's description: what a writer fills, what a reader expects (and gets). */
typedef struct ckpt_ref {
    char kind[CKPT_REF_KIND]; /* '\0'-terminated */
    uint32_t elem;            /* bytes per value */
    uint32_t parts;           /* G >= 1 */
    uint64_t n;               /* values in all */
    void *meta;               /* (meta_bytes) the owner's record */
    uint32_t meta_bytes;
    uint32_t *part_crc;       /* (parts) */
} ckpt_ref;

/* Bytes before the first value, and the file's size. */
size_t ckpt_ref_values_at(const ckpt_ref *r);
uint64_t ckpt_ref_file_bytes(const ckpt_ref *r);

/* The file's checksum: the CRC32C of its header and its part CRCs (r->part_crc filled). */
uint32_t ckpt_ref_checksum(const ckpt_ref *r);

/* tmp created empty (truncated). */
int ckpt_ref_create(const char *tmp);

/* count values (from v) written into tmp from value index `at`, fsynced; *crc = their CRC32C. */
int ckpt_ref_write_values(const char *tmp, const ckpt_ref *r, uint64_t at, const void *v,
                          uint64_t count, uint32_t *crc);

/* The header and the trailer written into tmp (the parts are there), fsynced, tmp renamed to
 * path, the directory fsynced. */
int ckpt_ref_commit(const char *tmp, const char *path, const ckpt_ref *r);

/* Whether path begins with the reference-file magic: 1 yes, 0 no (another format, or too short),
 * -1 when it cannot be opened (errno set). */
int ckpt_ref_is_one(const char *path);

/* path's header and trailer read and checked against want (kind, elem, parts, n, meta_bytes; the
 * size those imply, the header checksum; want->n = 0: any count, the file's into want->n); its meta into want->meta, its part CRCs into
 * want->part_crc, *crc = its checksum. 0; 1 when the file does not exist; -1 when it is not
 * what want describes, with the reason in why (a phrase: "format version 2, this program reads
 * 1"); TSR_EXIT_DATA after an I/O error (reported). */
int ckpt_ref_read_header(const char *path, ckpt_ref *want, uint32_t *crc, char *why, size_t cap);

/* count values of part `part` (from value index at) read into out and checked against the part's
 * CRC (want->part_crc, read by ckpt_ref_read_header). 0, -1 when short or damaged (why), or
 * TSR_EXIT_DATA after an I/O error (reported). */
int ckpt_ref_read_part(const char *path, const ckpt_ref *want, uint32_t part, uint64_t at,
                       uint64_t count, void *out, char *why, size_t cap);

#endif
