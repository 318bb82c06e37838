/* mla_shape.h — the shapes of a multi-head latent attention call (docs/models.md "DeepSeek"): what
 * the backend table (backend.h) and the CPU kernels (cpu/cpu_mla.h, which say what each array
 * holds) both take, here so that backend.h needs nothing of cpu/. */
#ifndef TSR_MLA_SHAPE_H
#define TSR_MLA_SHAPE_H

#include <stddef.h>
#include <stdint.h>

/* The heads of an MLA layer and its RoPE: NH heads of dn + dr (query, key) and dv (value);
 * interleave: RoPE pairs (2i, 2i+1) (Hugging Face's rope_interleave) instead of (i, i + dr/2),
 * frequency i either way; mscale: cos and sin's factor (YaRN's attention factor, 1 without) */
typedef struct tsr_mla_shape {
    int NH, dn, dr, dv;
    int interleave;
    float mscale;
} tsr_mla_shape;

/* The rows of one decode step or chunk over the compressed caches (cpu_mla_decode): n rows; a
 * slot's cache of cap positions, slot_stride elements from the next slot's. With slot (n, on the
 * backend) row i is the next token of slot slot[i] at position pos[i], its RoPE position rpos[i]
 * (its position in its segment), seeing positions seg[i] .. pos[i]; without (NULL) every row is in
 * slot slot0, row i at position p0 + i, RoPE position rp0 + i, seeing seg0 .. p0 + i. */
typedef struct tsr_mla_rows {
    int n, cap;
    size_t slot_stride;
    const int32_t *slot, *pos, *seg, *rpos;
    int slot0, p0, seg0, rp0;
} tsr_mla_rows;

#endif
