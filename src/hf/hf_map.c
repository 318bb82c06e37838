/* hf_map.c — tessera's parameters <-> the tensor names of the Llama family's classes (the rows
 * of hf_llama.c, hf_moe.c, hf_olmo.c, hf_gemma.c, hf_smollm3.c, hf_gptoss.c: hf_llama_table), and
 * what every table shares: a tensor's runs, the atomic file write. GPT-2's and MPT's table is
 * hf_gpt2.c's, Qwen3-Next's hf_qwen3next.c's (its fused projections interleave tessera's tensors:
 * hf_tensor.groups).
 *
 * tessera stacks per-layer tensors (qkvw (L, QKV, C)) and stores every weight as nn.Linear does,
 * (out, in): y = x W^T, as the Llama family does. wte (and an untied lm_head) is written with its
 * V real rows (not the Vp padded ones). The Llama family splits what tessera fuses: qkvw's rows are
 * [q_proj | k_proj | v_proj] (NH hs, KVH hs, KVH hs rows), fcw's [gate_proj | up_proj] (F, F), so
 * each HF tensor is still one contiguous block of tessera's buffer. HF's Llama checkpoints hold q
 * and k already in the rotate-half order tessera's RoPE uses: no permutation.
 * Mixtures of experts (docs/moe.md): a MoE layer's router is routerw[slot] (E, C); expert e's
 * gate / up projections are rows [0, FE) / [FE, 2FE) of expw1[slot, e] and its down projection
 * expw2[slot, e] (C, FE), each again one contiguous block. slot = model_layer_slot: the MoE layers
 * and the dense-MLP layers are stacked apart. GptOssForCausalLM's experts are one tensor per layer
 * for all E, permuted inside the block (transposed, gate/up interleaved): hf_gptoss.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "hf/hf_gptoss.h"
#include "hf/hf_llama.h"

/* The Llama family, in the order of transformers' state dict (module order: what a sharded save
 * follows). part: which rows of the tessera block the tensor is. */
typedef enum {
    PART_ALL = 0, PART_Q, PART_K, PART_V, PART_GATE, PART_UP, PART_EGATE, PART_EUP, PART_VOCAB
} part_kind;
typedef struct llama_row {
    tsr_param_id p;
    const char *fmt; /* after "model.layers.%d."; %d = the expert for expert tensors */
    part_kind part;
} llama_row;
#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const llama_row llama_global_first[] = {{TSR_P_WTE, "model.embed_tokens.weight", PART_VOCAB}},
  llama_attn[] = {
    {TSR_P_SINKS, "self_attn.sinks", PART_ALL}, /* gpt-oss: the module's own parameter first */
    {TSR_P_QKVW, "self_attn.q_proj.weight", PART_Q},     {TSR_P_QKVB, "self_attn.q_proj.bias", PART_Q},
    {TSR_P_QKVW, "self_attn.k_proj.weight", PART_K},     {TSR_P_QKVB, "self_attn.k_proj.bias", PART_K},
    {TSR_P_QKVW, "self_attn.v_proj.weight", PART_V},     {TSR_P_QKVB, "self_attn.v_proj.bias", PART_V},
    {TSR_P_ATTPROJW, "self_attn.o_proj.weight", PART_ALL},
    {TSR_P_ATTPROJB, "self_attn.o_proj.bias", PART_ALL},
    {TSR_P_QNORMW, "self_attn.q_norm.weight", PART_ALL}, {TSR_P_KNORMW, "self_attn.k_norm.weight", PART_ALL},
  },
  llama_mlp[] = { /* a dense-MLP layer */
    {TSR_P_FCW, "mlp.gate_proj.weight", PART_GATE},      {TSR_P_FCB, "mlp.gate_proj.bias", PART_GATE},
    {TSR_P_FCW, "mlp.up_proj.weight", PART_UP},          {TSR_P_FCB, "mlp.up_proj.bias", PART_UP},
    {TSR_P_FCPROJW, "mlp.down_proj.weight", PART_ALL},   {TSR_P_FCPROJB, "mlp.down_proj.bias", PART_ALL},
  },
  llama_norms[] = {
    {TSR_P_LN1W, "input_layernorm.weight", PART_ALL},
    {TSR_P_LN2W, "post_attention_layernorm.weight", PART_ALL},
  },
  /* OLMo 2/3's post norms (no ln1w, ln2w) and Gemma 3's sandwich: HF's post_attention_layernorm
   * is the norm AFTER the attention there (postattnw), not Llama's MLP input norm (ln2w) */
  post_norms[] = {
    {TSR_P_POSTATTNW, "post_attention_layernorm.weight", PART_ALL},
    {TSR_P_POSTMLPW, "post_feedforward_layernorm.weight", PART_ALL},
  },
  sandwich_norms[] = {
    {TSR_P_LN1W, "input_layernorm.weight", PART_ALL},
    {TSR_P_POSTATTNW, "post_attention_layernorm.weight", PART_ALL},
    {TSR_P_LN2W, "pre_feedforward_layernorm.weight", PART_ALL},
    {TSR_P_POSTMLPW, "post_feedforward_layernorm.weight", PART_ALL},
  },
  /* a MoE layer: the router, then per expert (MixtralBlockSparseTop2MLP: w1 w2 w3; Qwen3MoeMLP:
   * gate_proj up_proj down_proj) */
  mixtral_router[] = {{TSR_P_ROUTERW, "block_sparse_moe.gate.weight", PART_ALL}},
  mixtral_expert[] = {
    {TSR_P_EXPW1, "block_sparse_moe.experts.%d.w1.weight", PART_EGATE},
    {TSR_P_EXPW2, "block_sparse_moe.experts.%d.w2.weight", PART_ALL},
    {TSR_P_EXPW1, "block_sparse_moe.experts.%d.w3.weight", PART_EUP},
  },
  qwen3_moe_router[] = {{TSR_P_ROUTERW, "mlp.gate.weight", PART_ALL}},
  qwen3_moe_expert[] = {
    {TSR_P_EXPW1, "mlp.experts.%d.gate_proj.weight", PART_EGATE},
    {TSR_P_EXPW1, "mlp.experts.%d.up_proj.weight", PART_EUP},
    {TSR_P_EXPW2, "mlp.experts.%d.down_proj.weight", PART_ALL},
  },
  llama_global_last[] = {{TSR_P_LNFW, "model.norm.weight", PART_ALL},
                         {TSR_P_LMHEAD, "lm_head.weight", PART_VOCAB}};

/* Rows [*r0, *r0 + *nr) of the block (one layer's or expert's slice, or the whole tensor) that
 * part is. */
static void part_rows(const tsr_model *m, part_kind part, int64_t nrows, int64_t *r0, int64_t *nr) {
    int64_t qd = m->QD, kv = (int64_t)m->KVH * m->hs;
    switch (part) {
    case PART_Q: *r0 = 0, *nr = qd; break;
    case PART_K: *r0 = qd, *nr = kv; break;
    case PART_V: *r0 = qd + kv, *nr = kv; break;
    case PART_GATE: *r0 = 0, *nr = m->F; break;
    case PART_UP: *r0 = m->F, *nr = m->F; break;
    case PART_EGATE: *r0 = 0, *nr = m->FE; break;
    case PART_EUP: *r0 = m->FE, *nr = m->FE; break;
    case PART_VOCAB: *r0 = 0, *nr = m->V; break;
    default: *r0 = 0, *nr = nrows;
    }
}

/* Appends row r of layer l (-1: a global tensor), expert e (-1: not an expert tensor) to t[*k]
 * when m has the tensor there; a norm's weight gets add (hf_family.norm_add). */
static void llama_add(const tsr_model *m, const llama_row *r, int l, int e, float add, hf_tensor *t,
                      int *k) {
    const tsr_param_info *pi = &m->params_info[r->p];
    int per = l >= 0, lead = per + (e >= 0), slot = per ? model_layer_slot(m, r->p, l) : 0;
    if (!pi->numel || slot < 0) return;
    int ndim = pi->ndim - lead;
    int64_t R = pi->shape[lead], cols = ndim == 2 ? pi->shape[lead + 1] : 1, r0, nr;
    size_t block = (size_t)(R * cols); /* one layer's slice, or one expert's of it */
    part_rows(m, r->part, R, &r0, &nr);
    hf_tensor *h = &t[(*k)++];
    char sub[64];
    snprintf(sub, sizeof sub, r->fmt, e);
    if (per) snprintf(h->name, sizeof h->name, "model.layers.%d.%s", l, sub);
    else snprintf(h->name, sizeof h->name, "%s", r->fmt);
    h->ndim = ndim;
    h->shape[0] = nr;
    h->shape[1] = cols;
    h->present = 1;
    h->numel = (size_t)nr * (size_t)cols;
    h->offset = pi->offset + ((size_t)slot * (size_t)(e >= 0 ? m->E : 1) + (size_t)(e >= 0 ? e : 0)) * block +
                (size_t)(r0 * cols);
    h->transpose = 0;
    h->rows = nr;
    h->cols = cols;
    h->add = pi->kind == TSR_PK_NORM ? add : 0.0f;
}

typedef struct row_set {
    const llama_row *r;
    int n;
} row_set;
#define ROWS(a) ((row_set){(a), NROWS(a)})

static void llama_add_rows(const tsr_model *m, row_set rs, int l, int e, float add, hf_tensor *t,
                           int *k) {
    for (int j = 0; j < rs.n; j++) llama_add(m, &rs.r[j], l, e, add, t, k);
}

hf_tensor *hf_llama_table(const tsr_model *m, const hf_family *f, int *n) {
    const int mix = f->experts && f->experts->block_sparse;
    const float add = f->norm_add;
    const row_set router = mix ? ROWS(mixtral_router) : ROWS(qwen3_moe_router);
    const row_set expert = mix ? ROWS(mixtral_expert) : ROWS(qwen3_moe_expert);
    const tsr_norm_placement pl = f->place;
    const row_set norms = pl == TSR_NPLACE_POST ? ROWS(post_norms)
                          : pl == TSR_NPLACE_SANDWICH ? ROWS(sandwich_norms) : ROWS(llama_norms);
    const int per_layer = NROWS(llama_attn) + NROWS(llama_mlp) + NROWS(sandwich_norms) +
                          NROWS(mixtral_router) + NROWS(mixtral_expert) * m->E + 6; /* gpt-oss */
    hf_tensor *t = tsr_calloc((size_t)per_layer * (size_t)m->L + 3, sizeof *t);
    int k = 0;
    llama_add_rows(m, ROWS(llama_global_first), -1, -1, add, t, &k);
    for (int l = 0; l < m->L; l++) {
        llama_add_rows(m, ROWS(llama_attn), l, -1, add, t, &k);
        llama_add_rows(m, ROWS(llama_mlp), l, -1, add, t, &k); /* none in a MoE layer */
        if (f->gptoss) {
            hf_gptoss_moe_rows(m, l, t, &k);
        } else {
            llama_add_rows(m, router, l, -1, add, t, &k); /* none in a dense one */
            for (int e = 0; e < m->E; e++) llama_add_rows(m, expert, l, e, add, t, &k);
        }
        llama_add_rows(m, norms, l, -1, add, t, &k);
    }
    llama_add_rows(m, ROWS(llama_global_last), -1, -1, add, t, &k);
    *n = k;
    return t;
}

int hf_tensor_runs(const hf_tensor *t, int i, size_t *at, size_t *hf, size_t *len) {
    if (!t->groups) {
        if (i > 0) return 1;
        *at = t->offset, *hf = 0, *len = t->numel;
        return 0;
    }
    if (i >= t->groups * t->npieces) return t->groups * t->npieces;
    const int g = i / t->npieces, p = i % t->npieces;
    const size_t cols = (size_t)t->cols;
    int64_t before = 0, group = 0; /* rows of the pieces before p in a group; a group's rows */
    for (int q = 0; q < t->npieces; q++) group += t->piece[q].rows, before += q < p ? t->piece[q].rows : 0;
    *len = (size_t)t->piece[p].rows * cols;
    *at = t->piece[p].offset + (size_t)g * *len;
    *hf = ((size_t)g * (size_t)group + (size_t)before) * cols;
    return 0;
}

int hf_write_file(const char *path, const void *data, size_t n) {
    char tmp[4200];
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", path)) {
        tsr_error("%s: path too long", path);
        return TSR_EXIT_DATA;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = 0;
    if (fd < 0) {
        err = errno;
    } else {
        const char *p = data;
        size_t left = n;
        while (left > 0 && !err) {
            ssize_t k = write(fd, p, left);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) err = k < 0 ? errno : EIO;
            else p += k, left -= (size_t)k;
        }
        if (!err && fsync(fd) != 0) err = errno;
        if (close(fd) != 0 && !err) err = errno;
        if (!err && rename(tmp, path) != 0) err = errno;
    }
    if (err) {
        tsr_error("%s: cannot write it: %s", path, strerror(err));
        unlink(tmp);
        return TSR_EXIT_DATA;
    }
    return fs_sync_parent(path);
}

