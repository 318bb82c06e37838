/* safetensors.h — Hugging Face's safetensors format: a writer and a checking reader, in plain C
 * (no MPI, no HDF5: builds everywhere, NO_MPI=1 included).
 *
 * File = u64 N (little-endian) | N bytes of UTF-8 JSON (the header) | the data buffer.
 * Header: one JSON object. "__metadata__" (optional) maps strings to strings; every other member is
 * a tensor, NAME: {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, with
 * byte offsets relative to the start of the data buffer; data is little-endian, row-major.
 *
 * Writer (st_save): members in the order of the reference implementation (huggingface/safetensors
 * `prepare`: dtype by DEcreasing alignment, then name by byte order; "__metadata__" first), data in
 * the same order without gaps, the header padded with spaces to a multiple of 8 bytes so the data
 * starts 8-byte aligned. Written atomically: PATH.tmp, fsync, rename, fsync of the directory.
 *
 * Reader (st_open) refuses, naming the file and the tensor: a file shorter than 8 bytes; a header
 * length beyond the file or above 100 MB (the reference's limit); a header that is not a JSON
 * object (or not UTF-8); an unknown dtype; a shape or offsets that are not arrays of non-negative
 * integers; an unexpected key in a tensor entry; end - begin != numel * dtype size; offsets beyond
 * the buffer; duplicate names; tensors that overlap, leave a gap or do not start at 0 (sorted by
 * offset the tensors must tile the buffer exactly); bytes after the last tensor (trailing bytes);
 * more than ST_MAX_TENSORS tensors; a path that is not a regular file (fs_open_data). Every check
 * is O(n log n) in the tensors, and so is a lookup by name.
 * A header length that is not a multiple of 8 is accepted, as the reference does (files of early
 * writers were not aligned); the writer always aligns.
 */
#ifndef TSR_SAFETENSORS_H
#define TSR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_NDIM 8
#define ST_MAX_HEADER 100000000ull /* bytes: the reference implementation's MAX_HEADER_SIZE */
#define ST_MAX_TENSORS (1 << 20)  /* tensors in a file, or in an index's weight_map: 11x
                                   * DeepSeek-V3's 91,000 (the header limit admits 1.6 million) */

/* In the reference's order of increasing alignment (the writer sorts by it, decreasing). */
typedef enum {
    ST_BOOL = 0, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32,
    ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_DTYPE_COUNT
} st_dtype;

/* ---- reading ---- */

typedef struct st_entry {
    char *name;
    st_dtype dtype;
    int ndim;                    /* 0 = a scalar */
    int64_t shape[ST_MAX_NDIM];
    uint64_t numel;
    uint64_t begin, end;         /* byte offsets into the data buffer */
} st_entry;

typedef struct st_kv {
    const char *key, *value;
} st_kv;

typedef struct st_file {
    char path[1024];
    int fd;
    uint64_t file_size, header_len, data_start; /* data_start = 8 + header_len */
    st_entry *t;                 /* n entries, in header order */
    st_entry **by_name;          /* the same n, sorted by name (st_find's binary search) */
    int n;
    st_kv *meta;                 /* "__metadata__" members (strings owned by the file) */
    int n_meta;
} st_file;

/* Opens and checks a safetensors file (header rules above). Returns 0, or TSR_EXIT_DATA after
 * tsr_error named the file and the fault; on failure f holds nothing to close. Local. */
int st_open(st_file *f, const char *path);
void st_close(st_file *f);
/* The entry called name, or NULL (a binary search). */
const st_entry *st_find(const st_file *f, const char *name);
/* The __metadata__ value of key, or NULL. */
const char *st_meta(const st_file *f, const char *key);
/* Reads tensor e as float32 into dst (e->numel floats): F32 as is, BF16 and F16 widened exactly.
 * Returns 0, or TSR_EXIT_DATA after tsr_error (another dtype, a short read). */
int st_read_f32(const st_file *f, const st_entry *e, float *dst);
/* The raw bytes of tensor e (end - begin of them) into dst. 0, or TSR_EXIT_DATA after tsr_error. */
int st_read_raw(const st_file *f, const st_entry *e, void *dst);
/* st_read_f32 for weights to start from: a NaN or infinity anywhere in the tensor is refused
 * (TSR_EXIT_DATA), naming the file, the tensor, the element and the value. */
int st_read_f32_finite(const st_file *f, const st_entry *e, float *dst);

/* ---- writing ---- */

typedef struct st_tensor {
    const char *name;
    st_dtype dtype;              /* ST_F32 or ST_BF16 (converted from src on write) */
    int ndim;
    int64_t shape[ST_MAX_NDIM];
    const float *src;            /* row-major at shape; NULL = zeros */
    int transpose;               /* 2-D only: src holds the transpose, (shape[1], shape[0]) */
    float add;                   /* added to every value of src in fp32 (Gemma's norms: -1) */
    /* when set: element k (row-major) is src[index(ctx, k)] (gpt-oss's interleaved experts) */
    uint64_t (*index)(const void *ctx, uint64_t k);
    const void *ctx;
} st_tensor;

/* Writes the n tensors and the metadata pairs to path atomically. Returns 0, or TSR_EXIT_DATA
 * after tsr_error (I/O), or TSR_EXIT_INTERNAL for an invalid request (a duplicate name, an
 * unsupported dtype, a bad shape). */
int st_save(const char *path, const st_tensor *t, int n, const st_kv *meta, int n_meta);

/* ---- dtypes ---- */

const char *st_dtype_name(st_dtype d); /* "F32" */
size_t st_dtype_size(st_dtype d);      /* bytes per element */
/* fp32 -> bf16 rounding to nearest, ties to even (NaN stays a quiet NaN of the same sign;
 * overflow rounds to +-Inf as IEEE does). */
uint16_t st_f32_to_bf16(float x);
float st_bf16_to_f32(uint16_t h);      /* exact */
float st_f16_to_f32(uint16_t h);       /* exact (IEEE binary16, subnormals included) */

#endif
