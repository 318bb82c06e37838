/* deltanet_shape.h — the shape of a Gated DeltaNet core call (docs/deltanet.md): what the backend
 * table (backend.h) and the CPU core (cpu/cpu_deltanet.h, which says what each dimension means)
 * both take, here so that backend.h needs nothing of cpu/. */
#ifndef TSR_DELTANET_SHAPE_H
#define TSR_DELTANET_SHAPE_H

typedef struct tsr_dn_shape {
    int B, T;
    int HK, HV;  /* query/key heads, value heads (HV a multiple of HK) */
    int dk, dv;  /* head sizes */
    int chunk;   /* the chunked form's chunk length (64 in training) */
} tsr_dn_shape;

#endif
