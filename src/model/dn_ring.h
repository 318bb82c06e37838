/* dn_ring.h — the Gated DeltaNet layers under context parallelism (parallel.context = N;
 * docs/deltanet.md "Context parallelism"): no keys and values go round a ring; the state a chunk
 * ends with is the next chunk's initial state.
 *
 * Rank r of the context group holds chunks r and 2N-1-r of the 2N chunks of c = T/2N positions
 * (model_ring.h's zig-zag split), its local rows (B, 2c) being those two chunks one after the
 * other. A linear layer runs each local chunk as B sequences of c positions (dn_layer_forward)
 * in the global order of the chunks: chunk j starts from what chunk j-1 ends with, the core's
 * state (B, HV, dk, dv) and the convolution's last K-1 inputs (B, K-1, CD), received from the
 * rank holding chunk j-1 (zeros for chunk 0, and for a sequence whose document starts at chunk
 * j's first position), and sends what it ends with to the rank holding chunk j+1: a pipeline
 * 0 -> 1 -> .. -> N-1 -> N-1 -> .. -> 0. The backward runs the chunks in the reverse order with
 * the gradients of both passed back. Exact against one rank (the same function; the sums in
 * another order). */
#ifndef TSR_DN_RING_H
#define TSR_DN_RING_H

#include <stddef.h>
#include <stdint.h>

#include "model/deltanet_layer.h"

struct tsr_ring;

/* The floats a layer's activations take for this rank's B x Tl rows (d: B, T = Tl): the two
 * chunks' dn_acts and the convolution tails they started from. */
size_t dn_ring_acts_floats(const dn_dims *d);

/* out (B, Tl, C) from x (B, Tl, C), the layer's activations in acts (dn_ring_acts_floats);
 * seq (B, T) the segment ids of the whole sequences (the document mask) or NULL. Collective over
 * the context group (its MPI group: the CPU model's ring). */
void dn_ring_forward(const struct tsr_backend *be, struct tsr_ring *g, float *out, float *acts,
                     const float *x, const dn_params *p, const int32_t *seq, const dn_dims *d);
/* dx (B, Tl, C) +=, grad += from dout, and the forward's acts, x, p, seq; work the layer's
 * backward slot for B x Tl (dn_backward_bytes: each chunk's backward reuses it). Collective. */
void dn_ring_backward(const struct tsr_backend *be, struct tsr_ring *g, float *dx,
                      const dn_params *grad, const float *dout, float *acts, const float *x,
                      const dn_params *p, const int32_t *seq, void *work, const dn_dims *d);

#endif
