/* deltanet_layer.h — the Gated DeltaNet token mixer as Hugging Face's Qwen3-Next / Qwen 3.5 define
 * it (Qwen3NextGatedDeltaNet), forward and backward (docs/deltanet.md "The layer"), over a
 * backend's table (kernels/backend.h: its matmul, rmsnorm, copy_rows and dn_* entries). Its
 * buffers are the backend's (float * as storage): the activations, x, out and their gradients of
 * its act type (fp32 on the CPU, bf16 on CUDA), the weights of its weight type, beta, g, rstd,
 * the saved states, the caches and the parameter gradients fp32. The caches (decoding, context
 * parallelism) are the fp32 host backend's only (docs/deltanet.md "CUDA"). The decoder's
 * linear_attention layers call it (src/model/mixer_deltanet.c).
 *
 *   [q|k|v] = silu(causal depthwise conv_K(x Wqkv^T)),  z = x Wz^T,  b = x Wb^T,  a = x Wa^T
 *   beta = sigmoid(b),  g = -exp(A_log) softplus(a + dt_bias)
 *   o = GatedDeltaNet(q, k, v, g, beta)           (kernels/cpu/cpu_deltanet.h; q, k L2-normed)
 *   out = (RMSNorm_eps(o per value head) * normw * silu(z)) Wo^T
 * N = B T rows; CD = 2 HK dk + HV dv, the convolution's channels. */
#ifndef TSR_DELTANET_LAYER_H
#define TSR_DELTANET_LAYER_H

#include <stddef.h>
#include <stdint.h>

struct tsr_backend;

/* the core's chunk in training (docs/deltanet.md; the FLOPs per token count it: docs/mfu.md) */
#define DN_TRAIN_CHUNK 64

typedef struct dn_dims {
    int B, T, C;        /* sequences, positions, model width */
    int HK, HV, dk, dv; /* query/key heads, value heads, their sizes */
    int K;              /* the convolution's kernel (4), 1..16 */
    int chunk;          /* the core's chunk (64) */
    float eps;          /* the gated RMSNorm's */
} dn_dims;

/* adapters on the layer's projections (LoRA, src/model/model_lora.h), run after each base
 * product: fwd adds the adapter's path of in into out (N rows of projection which's output), bwd
 * adds its part of d in into din from dout and in (and its own gradients) */
typedef enum { DN_PROJ_QKV, DN_PROJ_Z, DN_PROJ_B, DN_PROJ_A, DN_PROJ_O } dn_proj;
typedef struct dn_hook {
    void (*fwd)(const struct dn_hook *h, dn_proj which, float *out, const float *in, int N);
    void (*bwd)(const struct dn_hook *h, dn_proj which, float *din, const float *dout,
                const float *in, int N);
    const void *ctx;
    int l; /* the decoder's layer */
} dn_hook;

/* the parameters (the backend's weight type), or their gradients (fp32; any gradient may be
 * NULL: frozen). The projections are separate matrices (Qwen 3.5's in_proj_qkv, in_proj_z,
 * in_proj_b, in_proj_a; Qwen3-Next's fused, per key head interleaved in_proj_qkvz and in_proj_ba
 * split into them on import) */
typedef struct dn_params {
    float *wqkv;          /* (CD, C): rows [q heads (HK dk) | k heads (HK dk) | v heads (HV dv)] */
    float *wz;            /* (HV dv, C) */
    float *wb, *wa;       /* (HV, C) */
    float *conv;          /* (CD, K) */
    float *dt_bias, *a_log; /* (HV) */
    float *normw;         /* (dv), used as is (HF's RMSNormGated: ones at init) */
    float *wo;            /* (C, HV dv) */
    const dn_hook *hook;  /* the weights' adapters, or NULL (unused in gradients) */
} dn_params;

/* what the forward keeps for the backward */
typedef struct dn_acts {
    float *pre, *qkv;       /* (N, CD): the projection, the convolution's output */
    float *q, *k, *v;       /* the core's inputs: (N, HK dk) twice, (N, HV dv) */
    float *z, *core, *normed, *gated; /* (N, HV dv) */
    float *b, *a, *beta, *g; /* (N, HV) */
    float *rstd;            /* (N HV) */
    float *ckpt;            /* the core's saved states */
} dn_acts;

/* what carries a sequence on from one pass to the next (decoding: a prefill, then a token at a
 * time; context parallelism: rank to rank), in place of a KV cache */
typedef struct dn_cache {
    float *state; /* (B, HV, dk, dv): the core's state */
    float *conv;  /* (B, K-1, CD): the convolution's last K-1 inputs, zeros before a document */
} dn_cache;

/* dies naming the dimension when d is not a layer this code runs */
void dn_check(const dn_dims *d);
void dn_acts_alloc(dn_acts *a, const dn_dims *d);
/* the room (4-byte units) of one layer's dn_acts on be (NULL: the fp32 host layout, as
 * dn_acts_alloc's), and the same laid out one after the other from base (the
 * decoder's activation plan, which owns the memory: dn_acts_free is not for them) */
size_t dn_acts_floats(const struct tsr_backend *be, const dn_dims *d);
void dn_acts_at(const struct tsr_backend *be, dn_acts *a, float *base, const dn_dims *d);
void dn_acts_free(dn_acts *a);
/* the bytes of the work slot dn_layer_backward takes (its activation gradients, each a multiple
 * of be's alignment, and the core backward's scratch, be->dn_scratch_bytes): the decoder keeps
 * one with its activations (TSR_A_DNBWD), which every linear layer's backward reuses */
size_t dn_backward_bytes(const struct tsr_backend *be, const dn_dims *d);
/* dies naming what (and be) unless be is the fp32 host backend, whose arrays the caches are: the
 * layer's and the decoder's one test before a pass with caches (decoding, context parallelism) */
void dn_host_only(const struct tsr_backend *be, const char *what);
void dn_cache_alloc(dn_cache *c, const dn_dims *d); /* zeros: a sequence's start */
void dn_cache_free(dn_cache *c);

/* out (N, C) from x (N, C). in: the cache the document in progress at row 0 continues, or NULL
 * (zeros: each row starts a sequence); next: the cache after row T - 1, or NULL; next may be in
 * (a decoding step updates it in place). seq (B, T) the documents (the convolution and the state
 * restart at each start after row 0) or NULL. */
void dn_layer_forward(const struct tsr_backend *be, float *out, const dn_cache *in,
                      dn_cache *next, dn_acts *a, const float *x, const dn_params *p,
                      const int32_t *seq, const dn_dims *d);
/* dx (N, C) +=, grad's parameter gradients += (NULL ones skipped); dout (N, C); dnext the
 * gradient of the forward's next (its state and convolution tail), or NULL (zero); din the
 * gradient of in, +=, or NULL (context parallelism passes both between the ranks: dn_ring.h);
 * in, a, x, p, seq as the forward had them; work dn_backward_bytes(be, d) (or more) bytes of
 * be's memory, aligned as be's buffers, overwritten */
void dn_layer_backward(const struct tsr_backend *be, float *dx, const dn_params *grad,
                       const float *dout, const dn_cache *dnext, dn_cache *din,
                       const dn_cache *in, const dn_acts *a, const float *x, const dn_params *p,
                       const int32_t *seq, void *work, const dn_dims *d);

#endif
