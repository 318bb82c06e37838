/* hf_map.c — tessera's parameters <-> transformers' GPT2LMHeadModel / MptForCausalLM names.
 *
 * tessera stacks per-layer tensors (qkvw (L, 3C, C)) and stores every weight as nn.Linear does,
 * (out, in): y = x W^T. transformers' GPT-2 uses Conv1D, (in, out): y = x W, so its weights are the
 * transposes; MPT uses nn.Linear, same layout as tessera. Both tie the LM head to wte, so no
 * lm_head.weight is written. wte is written with its V real rows (not the Vp padded ones).
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
#include "hf/hf_internal.h"

const char *const hf_model_type[HF_ARCH_COUNT] = {"gpt2", "mpt"};
const char *const hf_class_name[HF_ARCH_COUNT] = {"GPT2LMHeadModel", "MptForCausalLM"};

/* Per tessera parameter: HF names (after "transformer.", %d = layer; NULL = the architecture has
 * no such tensor), whether it is stacked per layer, whether GPT-2 holds its transpose. */
static const struct map_row {
    const char *gpt2, *mpt;
    int per_layer, transpose_gpt2;
} rows[] = {
    [TSR_P_WTE] = {"wte.weight", "wte.weight", 0, 0},
    [TSR_P_WPE] = {"wpe.weight", NULL, 0, 0},
    [TSR_P_LN1W] = {"h.%d.ln_1.weight", "blocks.%d.norm_1.weight", 1, 0},
    [TSR_P_LN1B] = {"h.%d.ln_1.bias", NULL, 1, 0},
    [TSR_P_QKVW] = {"h.%d.attn.c_attn.weight", "blocks.%d.attn.Wqkv.weight", 1, 1},
    [TSR_P_QKVB] = {"h.%d.attn.c_attn.bias", NULL, 1, 0},
    [TSR_P_ATTPROJW] = {"h.%d.attn.c_proj.weight", "blocks.%d.attn.out_proj.weight", 1, 1},
    [TSR_P_ATTPROJB] = {"h.%d.attn.c_proj.bias", NULL, 1, 0},
    [TSR_P_LN2W] = {"h.%d.ln_2.weight", "blocks.%d.norm_2.weight", 1, 0},
    [TSR_P_LN2B] = {"h.%d.ln_2.bias", NULL, 1, 0},
    [TSR_P_FCW] = {"h.%d.mlp.c_fc.weight", "blocks.%d.ffn.up_proj.weight", 1, 1},
    [TSR_P_FCB] = {"h.%d.mlp.c_fc.bias", NULL, 1, 0},
    [TSR_P_FCPROJW] = {"h.%d.mlp.c_proj.weight", "blocks.%d.ffn.down_proj.weight", 1, 1},
    [TSR_P_FCPROJB] = {"h.%d.mlp.c_proj.bias", NULL, 1, 0},
    [TSR_P_LNFW] = {"ln_f.weight", "norm_f.weight", 0, 0},
    [TSR_P_LNFB] = {"ln_f.bias", NULL, 0, 0},
    [TSR_P_QNORMW] = {NULL, NULL, 1, 0},
    [TSR_P_KNORMW] = {NULL, NULL, 1, 0},
    [TSR_P_LMHEAD] = {NULL, NULL, 0, 0},
};
_Static_assert(sizeof rows / sizeof rows[0] == TSR_P_COUNT, "one row per tessera parameter");

int hf_arch_of(const tsr_model *m, hf_arch *a, char *why, size_t cap) {
    const tsr_model_config *c = &m->cfg;
    if (c->pos == TSR_POS_ROPE || c->norm != TSR_NORM_LAYERNORM || c->mlp != TSR_MLP_GELU ||
        m->KVH != m->NH || c->qk_norm || c->qkv_bias || !c->tie_embeddings ||
        m->hs * m->NH != m->C) {
        snprintf(why, cap, "this model (RoPE, RMSNorm, SwiGLU, grouped-query attention, QK-norm, "
                 "a qkv bias, an untied head or a head_dim) has no Hugging Face mapping yet: "
                 "GPT-2 and MPT models export");
        return TSR_EXIT_USAGE;
    }
    if (m->cfg.pos == TSR_POS_LEARNED) { /* GPT-2: any GELU, any MLP width (n_inner); no biases
                                            are written as zeros, which computes the same */
        *a = HF_GPT2;
        return 0;
    }
    *a = HF_MPT;
    if (m->cfg.bias)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, which has no biases, "
                 "but this model has model.bias = true (transformers has no ALiBi model with biases)");
    else if (m->cfg.gelu != TSR_GELU_EXACT)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, whose MLP uses the exact "
                 "GELU, but this model has model.gelu = \"tanh\"");
    else if (m->F != 4 * m->C)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, whose MLP is 4 x d_model "
                 "= %d wide, but this model's is %d (model.expansion_ratio = %g)", 4 * m->C, m->F,
                 m->cfg.expansion_ratio);
    else
        return 0;
    return TSR_EXIT_USAGE;
}

hf_tensor *hf_tensor_table(const tsr_model *m, hf_arch a, int *n) {
    int cap = TSR_P_COUNT * (m->L + 1), k = 0;
    hf_tensor *t = tsr_calloc((size_t)cap, sizeof *t);
    for (int p = 0; p < TSR_P_COUNT; p++) {
        const struct map_row *r = &rows[p];
        const char *fmt = a == HF_GPT2 ? r->gpt2 : r->mpt;
        const tsr_param_info *pi = &m->params_info[p];
        if (!fmt || (p == TSR_P_WPE && !pi->numel)) continue;
        int layers = r->per_layer ? m->L : 1, tr = a == HF_GPT2 && r->transpose_gpt2;
        /* the block: one layer's slice of a stacked tensor, or the whole tensor */
        int ndim = r->per_layer ? pi->ndim - 1 : pi->ndim;
        int64_t d0 = r->per_layer ? pi->shape[1] : pi->shape[0];
        int64_t d1 = ndim == 2 ? (r->per_layer ? pi->shape[2] : pi->shape[1]) : 1;
        if (p == TSR_P_WTE) d0 = m->V; /* the real vocabulary only */
        size_t numel = (size_t)d0 * (size_t)d1;
        for (int l = 0; l < layers; l++, k++) {
            hf_tensor *h = &t[k];
            char suffix[64];
            snprintf(suffix, sizeof suffix, fmt, l);
            snprintf(h->name, sizeof h->name, "transformer.%s", suffix);
            h->ndim = ndim;
            h->shape[0] = tr ? d1 : d0;
            h->shape[1] = tr ? d0 : d1;
            h->present = pi->numel > 0;
            h->numel = numel;
            h->offset = pi->offset + (size_t)l * numel;
            h->transpose = tr;
            h->rows = d0;
            h->cols = d1;
        }
    }
    *n = k;
    return t;
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

