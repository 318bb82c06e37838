/* mtp.h — multi-token prediction (DeepSeek-V3; docs/models.md "Multi-token prediction"):
 * model.num_nextn_predict_layers = D modules after the model's last layer, trained beside it.
 *
 * Module k (1..D) at position i, from h_{k-1} (the last layer's output, before the final norm,
 * for k = 1; module k - 1's output, before its head's norm, after) and token t_{i+k}:
 *   x = eh_proj [RMSNorm_e(wte[t_{i+k}]) | RMSNorm_h(h_{k-1})]      (C x 2C; the published
 *       checkpoints' column order: the embedding's half first, as vLLM and Megatron-LM read them)
 *   h_k = one decoder layer (the whole model's layer L + k - 1: its mixer and MLP rows) of x
 *   logits = head(RMSNorm_head(h_k))  (the model's own head: wte tied, or lm_head)
 * predicting t_{i+k+1}, the main targets at i + k (counted where the main loss counts them and
 * i + k is in i's document, attn_mask = document); the module's attention runs over the main
 * positions' documents. Its loss is the sum of those losses; the objective adds
 * model.mtp_loss_weight / D times the depths' sums (with the main loss's normaliser). The
 * embedding and the head are the model's (their gradients add to its); the rest are the
 * module's tensors (model.h TSR_P_MTP*). Only training runs them (model_backward): evaluations,
 * generation and the objectives other than lm do not.
 */
#ifndef TSR_MTP_H
#define TSR_MTP_H

#include <stddef.h>
#include <stdint.h>

#include "model/decoder.h"
#include "model/model.h"

/* After the model's forward over tokens, targets (B,T, host) by main (its decoder: the fp32
 * backend's, model_pass.c, or device = "cuda"'s, src/gpu/gpu_mtp.c): the modules' forward and
 * backward on main's backend at loss_scale x mtp_loss_weight / D, their gradients added to the
 * model's (the module tensors, wte, the head), their loss sums to the step's
 * (model_mtp_loss_sum). main's units: unit 0 the root with the frame's tensors, unit L + 1 + d
 * depth d's layer (flat, or gathered from the shards, model_unit_slice). Returns d(objective)/d(the
 * last layer's output) (B,T,C act on main's backend) for the main backward to add (the decoder's
 * pp_dy), or NULL when m has no modules. Call it only where the model has gradients. */
const void *mtp_train(tsr_model *m, const tsr_decoder *main, const int32_t *tokens,
                      const int32_t *targets, int B, int T, float loss_scale);
/* The buffers mtp_train allocated on its backend freed (the next call allocates them again): a
 * device backend's before the device goes (model_mtp_free frees the fp32 backend's). */
void mtp_release(tsr_model *m);

#endif
