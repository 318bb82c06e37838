/* ref_dump — writes what the PyTorch reference test compares, to one HDF5 file.
 *
 *   ref_dump CONFIG OUT.h5 [--init-from PATH] [KEY=VALUE ...]     (single process)
 *
 * With the config's model, data and optimizer, at the initial weights (seed), or with
 * --init-from at the weights of PATH, read as tessera-train --init-from reads it (a checkpoint
 * file, a run directory's latest, or a Hugging Face directory: docs/hf.md; the config's run_dir
 * must hold no checkpoint, which would win as it does for the trainer):
 *   /params/<name>      every parameter tensor at its shape (padded vocab rows included)
 *   /step0/inputs, /step0/targets   (global_batch, T) int32, targets -1 = not counted
 *   /step0/logits       (global_batch, T, Vp) of the first microbatches, before softmax (after
 *                       model.final_logit_softcapping's cap)
 *   /step0/loss         mean loss over counted targets (scalar attribute)
 *   /step0/grads/<name> gradient of that mean loss
 * then `steps` (attribute) optimizer steps from the same weights with the real trainer:
 *   /train/inputs, /train/targets (steps, global_batch, T); /train/loss, lr, grad_norm (steps)
 *   /final/<name>       parameters after the last step
 *   /rope_freqs         (hs/2) the RoPE frequencies the model uses (pos = rope only): the full
 *                       layers'; /rope_local_freqs the sliding layers' (rope_local_theta);
 *                       /ropes (L) 1 where a layer uses RoPE (model.no_rope_layers)
 * With MoE (docs/moe.md), per MoE layer [aux, z, tokens per expert (E)], the losses weighted by
 * each microbatch's share of the counted targets and summed over the microbatches (what the
 * trainer reports as moe_aux, moe_z and the expert load):
 *   /step0/moe (LM, 2+E) of the step-0 pass;  /train/moe (steps, LM, 2+E) of each step
 * With multi-token prediction (model.num_nextn_predict_layers = D > 0, src/model/mtp.h): the root
 * attributes mtp_D, mtp_loss_weight; /step0 attribute mtp_loss and /train/mtp_loss (steps): the
 * mean of the depths' losses (each over the counted targets, as the trainer reports it); and
 * /mtp_layout/<d>/<name> (int64 [block: 0 mtp_layer_w, 1 mtp_layer_n; offset; numel]) where depth
 * d's decoder layer's tensor <name> lies in its row of the blocks.
 * Root attributes describe the model and optimizer so the test builds the same thing: dimensions
 * (V, Vp, C, L, NH, KVH, hs, F, T), architecture switches (alibi, rope, bias, gelu_exact, rmsnorm,
 * swiglu, qkv_bias, qk_norm, tie_embeddings, doc_mask) and numbers (norm_eps, rope_theta,
 * rope_scaling and its factors, eot_token; the positions and soft-caps: rope_kind,
 * rope_local_theta, rope_beta_fast, rope_beta_slow, rope_truncate, partial_rotary_factor,
 * attn_softcap, final_softcap), the MoE keys (E, K, FE, S, LM, moe_every,
 * moe_norm_topk, moe_aux_loss_coef, moe_z_loss_coef, moe_router_bias, moe_expert_bias,
 * moe_act_gptoss, swiglu_limit; E = 0: dense), then the optimizer's.
 * With LoRA (lora.rank > 0, docs/lora.md; the base is the seed's weights) the base has no
 * gradients: /step0/grads is absent, and instead
 *   /lora/<t>_A, /lora/<t>_B   the adapters at the start: A as the trainer made them, B drawn
 *                              N(0, 0.02) here (the trainer's B is 0, which would leave every
 *                              A gradient of step 0 zero: nothing to compare)
 *   /step0/lora_grads/<name>   their gradients;  /final_lora/<name> after the last step
 * and the root attributes lora_rank, lora_alpha. objective = "dpo" opens the config's run_dir
 * before the steps (dpo.reference = precomputed computes and stores its reference there).
 * objective = "grpo" (docs/rl.md; tests/reference/test_grpo.py) has no step 0 (its batches are
 * rollouts); it opens run_dir too (grpo.reference = initial stores the weights there), and writes
 * each step's kept rows (R = global_batch x G of them, ctx_max = P + N):
 *   /grpo/ctx (steps, R, ctx_max) int32, /grpo/n_prompt, /grpo/n (steps, R) int32,
 *   /grpo/logp (steps, R, N) float32 (the rollout's), /grpo/reward, /grpo/adv (steps, R) f64
 *   /step1/grads/<name> (or /step1/lora_grads) the gradients of step 1's last pass
 * with the root attributes G, N, P, ctx_max. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config/config.h"
#include "dist/dist.h"
#include "hf/hf_importer.h"
#include "train/checkpointing.h"
#include "posttrain/grpo_int.h"
#include "posttrain/reward_keeper.h"
#include "train/trainer.h"

#define H5_OK(x)                                                                         \
    do {                                                                                   \
        if ((x) < 0) tsr_die(TSR_EXIT_INTERNAL, "%s:%d: HDF5 call failed: %s", __FILE__,   \
                             __LINE__, #x);                                                \
    } while (0)

static void write_ds(hid_t loc, const char *name, hid_t type, const void *data, int ndim,
                     const hsize_t *dims) {
    hid_t space = H5Screate_simple(ndim, dims, NULL);
    H5_OK(space);
    hid_t ds = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(ds);
    H5_OK(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    H5Dclose(ds);
    H5Sclose(space);
}

static void attr_d(hid_t loc, const char *name, double v) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(a);
    H5_OK(H5Awrite(a, H5T_NATIVE_DOUBLE, &v));
    H5Aclose(a);
    H5Sclose(space);
}

/* LoRA: the adapters (w) or their gradients (g) as group/<t>_A, group/<t>_B */
static void write_lora(hid_t file, const char *group, const tsr_lora *lo, const float *base) {
    hid_t g = H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(g);
    for (int k = 0; k < 2 * TSR_LORA_COUNT; k++) {
        char name[TSR_LORA_NAME];
        int64_t shape[3];
        size_t at, numel;
        if (!lora_tensor(lo, k, name, shape, &at, &numel)) continue;
        hsize_t dims[3] = {(hsize_t)shape[0], (hsize_t)shape[1], (hsize_t)shape[2]};
        write_ds(g, name, H5T_NATIVE_FLOAT, base + at, 3, dims);
    }
    H5Gclose(g);
}

static void write_params(hid_t file, const char *group, const tsr_model *m, const float *base) {
    hid_t g = H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(g);
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        if (!p->numel) continue;
        hsize_t dims[4];
        for (int k = 0; k < p->ndim; k++) dims[k] = (hsize_t)p->shape[k];
        write_ds(g, p->name, H5T_NATIVE_FLOAT, base + p->offset, p->ndim, dims);
    }
    H5Gclose(g);
}

/* The Llama/Qwen architecture keys, resolved (KVH, hs) where the config leaves them 0; with
 * RoPE also the frequencies tessera computed, so the test can check them before using its own. */
/* docs/models.md "Positions": the RoPE variants and soft-capping */
static void write_position_attrs(hid_t f, const tsr_model_config *c) {
    attr_d(f, "rope_kind", c->rope_scaling); /* 0 none, 1 llama3, 2 linear, 3 yarn */
    attr_d(f, "rope_local_theta", c->rope_local_theta);
    attr_d(f, "rope_beta_fast", c->rope_beta_fast);
    attr_d(f, "rope_beta_slow", c->rope_beta_slow);
    attr_d(f, "rope_truncate", c->rope_truncate);
    attr_d(f, "partial_rotary_factor", c->partial_rotary_factor);
    attr_d(f, "attn_softcap", c->attn_logit_softcapping);
    attr_d(f, "final_softcap", c->final_logit_softcapping);
}

static void write_arch_attrs(hid_t f, const tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    attr_d(f, "KVH", m->KVH);
    attr_d(f, "hs", m->hs);
    attr_d(f, "rmsnorm", c->norm == TSR_NORM_RMSNORM);
    attr_d(f, "norm_eps", c->norm_eps);
    attr_d(f, "swiglu", c->mlp == TSR_MLP_SWIGLU);
    attr_d(f, "qkv_bias", c->qkv_bias);
    attr_d(f, "qk_norm", c->qk_norm);
    attr_d(f, "tie_embeddings", c->tie_embeddings);
    attr_d(f, "rope", c->pos == TSR_POS_ROPE);
    attr_d(f, "rope_theta", c->rope_theta);
    attr_d(f, "rope_scaling", c->rope_scaling == TSR_ROPE_SCALING_LLAMA3);
    attr_d(f, "rope_factor", c->rope_factor);
    attr_d(f, "rope_low_freq_factor", c->rope_low_freq_factor);
    attr_d(f, "rope_high_freq_factor", c->rope_high_freq_factor);
    attr_d(f, "rope_original_max_pos", c->rope_original_max_pos);
    attr_d(f, "attn_sinks", c->attn_sinks);
    attr_d(f, "query_pre_attn_scalar", c->query_pre_attn_scalar);
    attr_d(f, "sandwich", c->norm_placement == TSR_NPLACE_SANDWICH);
    attr_d(f, "post", c->norm_placement == TSR_NPLACE_POST);
    attr_d(f, "embed_scale", c->embed_scale == TSR_EMB_SCALE_SQRT_D);
    attr_d(f, "geglu", c->mlp == TSR_MLP_GEGLU_TANH);
    attr_d(f, "qk_proj", c->qk_norm && c->qk_norm_scope == TSR_QKN_PROJECTION);
    int win[4096];
    hsize_t nl = (hsize_t)(m->L < 4096 ? m->L : 4096);
    for (hsize_t l = 0; l < nl; l++) win[l] = config_layer_window(c, (int)l);
    write_ds(f, "windows", H5T_NATIVE_INT, win, 1, &nl); /* each layer's attention window */
    for (hsize_t l = 0; l < nl; l++) win[l] = config_layer_rope(c, (int)l);
    write_ds(f, "ropes", H5T_NATIVE_INT, win, 1, &nl); /* 1: the layer turns q, k by RoPE */
    if (m->rope_freqs) { /* the full layers' table, then the sliding layers' */
        hsize_t n = (hsize_t)(m->hs / 2);
        write_ds(f, "rope_freqs", H5T_NATIVE_FLOAT, m->rope_freqs, 1, &n);
        write_ds(f, "rope_local_freqs", H5T_NATIVE_FLOAT, m->rope_freqs + n, 1, &n);
    }
    write_position_attrs(f, c);
}

/* The mixture-of-experts keys, resolved (FE, LM) */
static void write_moe_attrs(hid_t f, const tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    attr_d(f, "E", m->E);
    attr_d(f, "K", m->K);
    attr_d(f, "FE", m->FE);
    attr_d(f, "S", m->S);
    attr_d(f, "LM", m->LM);
    attr_d(f, "moe_every", c->moe_every);
    attr_d(f, "moe_norm_topk", c->moe_norm_topk);
    attr_d(f, "moe_aux_loss_coef", c->moe_aux_loss_coef);
    attr_d(f, "moe_z_loss_coef", c->moe_z_loss_coef);
    attr_d(f, "moe_router_bias", c->moe_router_bias); /* gpt-oss's (docs/moe.md) */
    attr_d(f, "moe_expert_bias", c->moe_expert_bias);
    attr_d(f, "moe_act_gptoss", c->moe_act == TSR_MOE_ACT_GPTOSS);
    attr_d(f, "swiglu_limit", c->swiglu_limit);
    attr_d(f, "moe_shared_gate", c->moe_shared_gate); /* Qwen3-Next's shared_expert_gate */
}

/* Multi-token prediction: its attributes and where each depth's layer tensors lie (header) */
static void write_mtp_layout(hid_t f, const tsr_model *m) {
    attr_d(f, "mtp_D", m->D);
    attr_d(f, "mtp_loss_weight", m->cfg.mtp_loss_weight);
    if (!m->D) return;
    hid_t g = H5Gcreate2(f, "mtp_layout", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(g);
    for (int d = 0; d < m->D; d++) {
        char name[16];
        snprintf(name, sizeof name, "%d", d);
        hid_t gd = H5Gcreate2(g, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5_OK(gd);
        for (int i = 0; i < TSR_P_COUNT; i++) {
            int64_t v[3];
            const char *tn = model_mtp_layer_tensor(m, d, (tsr_param_id)i, v);
            hsize_t three = 3;
            if (tn) write_ds(gd, tn, H5T_NATIVE_INT64, v, 1, &three);
        }
        H5Gclose(gd);
    }
    H5Gclose(g);
}

/* The LM head's weight: lm_head when the embeddings are untied, else wte */
static const float *head_weights(const tsr_model *m) {
    const tsr_param_info *h = &m->params_info[TSR_P_LMHEAD];
    return m->params + (h->numel ? h->offset : m->params_info[TSR_P_WTE].offset);
}

/* objective = grpo: step s's kept rows into the dump's arrays (see the header) */
static void grpo_rows(const tsr_trainer *t, int s, int32_t *ctx, int32_t *np, int32_t *n,
                      float *logp, double *reward, double *adv) {
    tsr_grpo *g = t->run.objective_state;
    const size_t R = (size_t)t->cfg.global_batch * (size_t)g->G, at = (size_t)s * R;
    for (size_t i = 0; i < R; i++) {
        grpo_row *r = grpo_row_at(g, g->kept, i);
        memcpy(ctx + (at + i) * (size_t)g->ctx_max, grpo_ctx(r), (size_t)g->ctx_max * 4);
        memcpy(logp + (at + i) * (size_t)g->N, grpo_logp(g, r), (size_t)g->N * 4);
        np[at + i] = r->n_prompt, n[at + i] = r->n, reward[at + i] = r->reward, adv[at + i] = r->adv;
    }
}

static void grpo_write(hid_t f, const tsr_trainer *t, int S, const int32_t *ctx, const int32_t *np,
                       const int32_t *n, const float *logp, const double *reward,
                       const double *adv) {
    tsr_grpo *g = t->run.objective_state;
    const hsize_t R = (hsize_t)t->cfg.global_batch * (hsize_t)g->G;
    attr_d(f, "G", g->G), attr_d(f, "N", g->N), attr_d(f, "P", g->P);
    attr_d(f, "ctx_max", g->ctx_max);
    hid_t gg = H5Gcreate2(f, "grpo", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d2[2] = {(hsize_t)S, R}, dc[3] = {(hsize_t)S, R, (hsize_t)g->ctx_max};
    hsize_t dl[3] = {(hsize_t)S, R, (hsize_t)g->N};
    write_ds(gg, "ctx", H5T_NATIVE_INT32, ctx, 3, dc);
    write_ds(gg, "n_prompt", H5T_NATIVE_INT32, np, 2, d2);
    write_ds(gg, "n", H5T_NATIVE_INT32, n, 2, d2);
    write_ds(gg, "logp", H5T_NATIVE_FLOAT, logp, 3, dl);
    write_ds(gg, "reward", H5T_NATIVE_DOUBLE, reward, 2, d2);
    write_ds(gg, "adv", H5T_NATIVE_DOUBLE, adv, 2, d2);
    H5Gclose(gg);
}

int main(int argc, char **argv) {
    /* a reward program's keeper is this executable again (posttrain/reward_keeper.h), as tessera-train's */
    if (argc > 1 && !strcmp(argv[1], REWARD_KEEPER_ARG)) return reward_keeper_main(argc, argv);
    const char *init_from = NULL;
    if (argc >= 5 && !strcmp(argv[3], "--init-from")) {
        init_from = argv[4];
        for (int i = 3; i + 2 <= argc; i++) argv[i] = argv[i + 2]; /* argv[argc] = NULL moves too */
        argc -= 2;
    }
    if (argc < 3 || (argc > 3 && !strncmp(argv[3], "--", 2))) {
        fprintf(stderr, "usage: ref_dump CONFIG OUT.h5 [--init-from PATH] [KEY=VALUE ...]\n");
        return TSR_EXIT_USAGE;
    }
    tsr_dist d;
    dist_init(&d, &argc, &argv);
    tsr_config cfg;
    int rc = config_load(&cfg, argv[1], (const char *const *)argv + 3, argc - 3);
    if (rc) tsr_exit(rc);
    tsr_trainer t;
    const trainer_uses uses = {.importer = &hf_checkpointing_importer}; /* as tessera-train */
    if ((rc = trainer_init(&t, &cfg, &d, 0, &uses))) tsr_exit(rc);
    if (init_from && (rc = checkpointing_resume(&t, NULL, init_from))) tsr_exit(rc);
    tsr_model *m = &t.model;
    int T = t.T, GB = (int)cfg.global_batch, micro = t.micro, Vp = m->Vp;
    hid_t f = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(f);
    attr_d(f, "V", m->V);
    attr_d(f, "Vp", Vp);
    attr_d(f, "C", m->C);
    attr_d(f, "L", m->L);
    attr_d(f, "NH", m->NH);
    attr_d(f, "F", m->F);
    attr_d(f, "T", T);
    attr_d(f, "alibi", cfg.model.pos == TSR_POS_ALIBI);
    attr_d(f, "bias", cfg.model.bias);
    attr_d(f, "gelu_exact", cfg.model.gelu);
    attr_d(f, "doc_mask", cfg.model.attn_mask == TSR_MASK_DOCUMENT);
    write_arch_attrs(f, m);
    write_moe_attrs(f, m);
    write_mtp_layout(f, m);
    attr_d(f, "eot_token", cfg.model.eot_token);
    attr_d(f, "global_batch", GB);
    attr_d(f, "lr", cfg.optim.lr);
    attr_d(f, "beta1", cfg.optim.beta1);
    attr_d(f, "beta2", cfg.optim.beta2);
    attr_d(f, "eps", cfg.optim.eps);
    attr_d(f, "weight_decay", cfg.optim.weight_decay);
    attr_d(f, "grad_clip", cfg.optim.grad_clip);
    attr_d(f, "alpha_f", cfg.optim.alpha_f);
    attr_d(f, "schedule", cfg.optim.schedule);
    attr_d(f, "warmup_steps", (double)t.warmup_steps);
    attr_d(f, "steps", (double)t.total_steps);
    attr_d(f, "decay_norms_biases", cfg.optim.decay_norms_biases);
    attr_d(f, "decay_embeddings", cfg.optim.decay_embeddings);
    write_params(f, "params", m, m->params);
    tsr_lora *lo = t.part.lora_on ? &t.part.lora : NULL;
    if (lo) {
        attr_d(f, "lora_rank", lo->R);
        attr_d(f, "lora_alpha", cfg.lora.alpha);
        for (int k = 1; k < 2 * TSR_LORA_COUNT; k += 2) {
            char name[TSR_LORA_NAME];
            int64_t shape[3];
            size_t at, numel;
            if (!lora_tensor(lo, k, name, shape, &at, &numel)) continue;
            for (size_t i = 0; i < numel; i++)
                lo->w[at + i] = (float)(0.02 * tsr_rand_normal(99, (uint64_t)k, i));
        }
        write_lora(f, "lora", lo, lo->w);
    }

    /* step 0: loss, logits and gradients at the initial weights, over the whole global batch
     * (grpo: none, its batches are rollouts) */
    const int grpo = cfg.objective == TSR_OBJ_GRPO;
    size_t BT = (size_t)GB * T;
    int32_t *inputs = tsr_malloc(BT * sizeof(int32_t)), *targets = tsr_malloc(BT * sizeof(int32_t));
    float *logits = tsr_malloc(BT * (size_t)Vp * sizeof(float));
    int64_t counted = 0;
    for (int i = 0; i < GB && !grpo; i++) {
        int k = dataset_read_sample(t.data.train, T, sampler_index(&t.data.sampler, (uint64_t)i),
                                    inputs + (size_t)i * T, targets + (size_t)i * T);
        if (k < 0) tsr_die(TSR_EXIT_DATA, "ref_dump: cannot read sample %d", i);
        counted += k;
    }
    double loss_sum = 0.0;
    size_t n_moe = (size_t)m->LM * (size_t)(2 + m->E); /* 0 in a dense model */
    double *moe0 = tsr_calloc(n_moe + 1, sizeof(double));
    trainer_ensure_acts(&t); /* what the first trainer_step would do */
    if (lo) memset(lo->g, 0, lo->n * sizeof(float));
    else memset(m->grads, 0, m->n_params * sizeof(float));
    model_mtp_reset(m);
    for (int b = 0; b < GB && !grpo; b += micro) {
        const int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        loss_sum += model_forward(m, in, tg, micro, T);
        model_moe_stats_add(m, tg, micro, T, 1.0f / (float)counted, moe0);
        t.be.ops->matmul_forward(logits + (size_t)b * T * Vp, m->acts.lnf, head_weights(m), NULL,
                              micro * T, m->C, Vp);
        if (m->cfg.final_logit_softcapping > 0) /* the logits as Hugging Face returns them */
            t.be.ops->softcap_forward(logits + (size_t)b * T * Vp, logits + (size_t)b * T * Vp,
                                      micro * T, m->V, Vp, (float)m->cfg.final_logit_softcapping);
        model_backward(m, in, tg, micro, T, 1.0f / (float)counted);
    }
    hsize_t dm[3] = {(hsize_t)t.total_steps, (hsize_t)m->LM, (hsize_t)(2 + m->E)};
    if (!grpo) {
        hid_t g0 = H5Gcreate2(f, "step0", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hsize_t d2[2] = {(hsize_t)GB, (hsize_t)T}, d3[3] = {(hsize_t)GB, (hsize_t)T, (hsize_t)Vp};
        write_ds(g0, "inputs", H5T_NATIVE_INT32, inputs, 2, d2);
        write_ds(g0, "targets", H5T_NATIVE_INT32, targets, 2, d2);
        write_ds(g0, "logits", H5T_NATIVE_FLOAT, logits, 3, d3);
        attr_d(g0, "loss", loss_sum / (double)counted);
        if (m->D) attr_d(g0, "mtp_loss", model_mtp_loss_sum(m) / (double)counted);
        if (n_moe) write_ds(g0, "moe", H5T_NATIVE_DOUBLE, moe0, 2, dm + 1);
        H5Gclose(g0);
    }
    if (lo && !grpo) write_lora(f, "step0/lora_grads", lo, lo->g);
    else if (!grpo) write_params(f, "step0/grads", m, m->grads);

    /* the real trainer from the same weights (trainer_step zeroes the gradients itself); DPO
     * with dpo.reference = precomputed computes its reference here, as tessera-train does before
     * step 1 (posttrain/dpo_ref.h: into the config's run_dir) */
    if ((cfg.objective == TSR_OBJ_DPO || grpo) && (rc = trainer_open_run_dir(&t))) tsr_exit(rc);
    const tsr_grpo *gs = t.run.objective_state; /* (objective = grpo: its state, grpo_int.h) */
    const size_t R = grpo ? (size_t)GB * (size_t)gs->G : 1;
    const size_t cm = grpo ? (size_t)gs->ctx_max : 1, NN = grpo ? (size_t)gs->N : 1;
    const size_t SR = (size_t)t.total_steps * R;
    int32_t *g_ctx = tsr_malloc(SR * cm * 4), *g_np = tsr_malloc(SR * 4), *g_n = tsr_malloc(SR * 4);
    float *g_lp = tsr_malloc(SR * NN * 4);
    double *g_rw = tsr_malloc(SR * 8), *g_adv = tsr_malloc(SR * 8);
    int S = (int)t.total_steps;
    int32_t *all_in = tsr_malloc((size_t)S * BT * sizeof(int32_t));
    int32_t *all_tg = tsr_malloc((size_t)S * BT * sizeof(int32_t));
    double *loss = tsr_calloc((size_t)S, sizeof(double)), *lr = tsr_calloc((size_t)S, sizeof(double));
    double *norm = tsr_calloc((size_t)S, sizeof(double));
    double *mtp = tsr_calloc((size_t)S, sizeof(double));
    double *moe = tsr_calloc((size_t)S * n_moe + 1, sizeof(double));
    for (int s = 0; s < S; s++) {
        tsr_step_stats st;
        trainer_step(&t, &st);
        if (st.exit_code) tsr_exit(st.exit_code);
        if (grpo) grpo_rows(&t, s, g_ctx, g_np, g_n, g_lp, g_rw, g_adv);
        if (grpo && s == 0 && lo) write_lora(f, "step1_lora_grads", lo, lo->g);
        else if (grpo && s == 0) write_params(f, "step1_grads", m, m->grads);
        /* the batch the step used: single rank, so t.data.inputs holds the whole global batch */
        memcpy(all_in + (size_t)s * BT, t.data.inputs, BT * sizeof(int32_t));
        memcpy(all_tg + (size_t)s * BT, t.data.targets, BT * sizeof(int32_t));
        loss[s] = st.loss;
        lr[s] = st.lr;
        norm[s] = st.grad_norm;
        mtp[s] = st.mtp_loss;
        if (n_moe) memcpy(moe + (size_t)s * n_moe, t.out.moe, n_moe * sizeof(double));
    }
    hid_t gt = H5Gcreate2(f, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t ds3[3] = {(hsize_t)S, (hsize_t)GB, (hsize_t)T}, ds1[1] = {(hsize_t)S};
    write_ds(gt, "inputs", H5T_NATIVE_INT32, all_in, 3, ds3);
    write_ds(gt, "targets", H5T_NATIVE_INT32, all_tg, 3, ds3);
    write_ds(gt, "loss", H5T_NATIVE_DOUBLE, loss, 1, ds1);
    write_ds(gt, "lr", H5T_NATIVE_DOUBLE, lr, 1, ds1);
    write_ds(gt, "grad_norm", H5T_NATIVE_DOUBLE, norm, 1, ds1);
    if (n_moe) write_ds(gt, "moe", H5T_NATIVE_DOUBLE, moe, 3, dm);
    if (m->D) write_ds(gt, "mtp_loss", H5T_NATIVE_DOUBLE, mtp, 1, ds1);
    H5Gclose(gt);
    if (grpo) grpo_write(f, &t, S, g_ctx, g_np, g_n, g_lp, g_rw, g_adv);
    free(g_ctx), free(g_np), free(g_n), free(g_lp), free(g_rw), free(g_adv);
    write_params(f, "final", m, m->params);
    if (lo) write_lora(f, "final_lora", lo, lo->w);
    H5Fclose(f);
    printf("ref_dump: wrote %s (%d steps, loss %.6f -> %.6f)\n", argv[2], S, loss[0], loss[S - 1]);
    free(inputs), free(targets), free(logits), free(all_in), free(all_tg), free(loss), free(lr), free(norm);
    free(moe0), free(moe), free(mtp);
    trainer_free(&t);
    tsr_exit(0);
}
