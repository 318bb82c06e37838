/* cpu_moe_route.h — DeepSeekMoE's router, fp32 (docs/moe.md "DeepSeek's router"): sigmoid or
 * softmax scores, the experts chosen greedily, group-limited (DeepSeek-V2) or with V3's correction
 * bias and groups ranked by their two best (noaux_tc), the weights normalised and scaled; the
 * auxiliary losses over the scores normalised per row; and the backward. The grouping by expert
 * and the layout of every output are cpu_moe.c's moe_route's (ops.h); the plain router (softmax,
 * greedy, scale 1) stays that op, whose bits it keeps.
 */
#ifndef TSR_CPU_MOE_ROUTE_H
#define TSR_CPU_MOE_ROUTE_H

#include <stdint.h>

#include "moe_router.h" /* tsr_moe_router */

/* For each row n of logits (N,E): probs[n] = its scores s (sigmoid or softmax), lse[n] = the
 * logsumexp of the logits (the z-loss's); the choice c = s + bias (noaux_tc) or s; with groups
 * (method > 0, n_group > 1) the topk_group groups of highest group score (a group's best c, or
 * with noaux_tc the sum of its two best; ties to the lower group) and only their experts; idx
 * (N,K) the K of highest c among them, descending (ties to the lower expert); wts (N,K) =
 * s[idx], divided by their sum when norm, times scale. offs, rows, slot: the grouping of
 * moe_route. stats[0] = aux = E sum_e (count_e / NK) (sum_n q[n,e] / N), q = s (softmax) or
 * s / sum_e s (sigmoid: DeepSeek-V3's normalised scores, over the batch's rows), stats[1] = z =
 * sum_n lse[n]^2 / N. */
void cpu_moe_route_ds(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                      int32_t *rows, int32_t *slot, float *stats, const float *logits, int N,
                      int E, int K, const tsr_moe_router *r);
/* WRITES dlogits (N,E) from dwts (N,K), the weights' gradient, plus aux_w d(aux)/d(logits) and
 * z_w d(z)/d(logits) (softmax scores only; sigmoid scores have no z-loss); the other arguments
 * as cpu_moe_route_ds wrote them. Sums in double. */
void cpu_moe_router_ds_backward(float *dlogits, const float *dwts, const float *probs,
                                const float *lse, const int32_t *idx, const float *wts,
                                const int32_t *offs, int N, int E, int K,
                                const tsr_moe_router *r, float aux_w, float z_w);

#endif
