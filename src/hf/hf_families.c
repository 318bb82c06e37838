/* hf_families.c — the list of the transformers classes tessera knows (hf_family.h): the one
 * place that names every row, and the export's choice of one for a model. A new class is a row in
 * its family's file (a new family: a file of its own), and a line here: in hf_families, and in
 * chosen_first when a model's features name it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hf/hf_llama.h"

/* In the order messages list them ("tessera imports ...", --arch's values). */
const hf_family *const hf_families[] = {
    &hf_gpt2, &hf_mpt,                                                  /* hf_gpt2.c */
    &hf_llama, &hf_mistral, &hf_qwen2, &hf_qwen3,                       /* hf_llama.c */
    &hf_mixtral, &hf_qwen3_moe,                                         /* hf_moe.c */
    &hf_olmo2, &hf_olmo3,                                               /* hf_olmo.c */
    &hf_gemma3, &hf_gemma2,                                             /* hf_gemma.c */
    &hf_smollm3,                                                        /* hf_smollm3.c */
    &hf_qwen3next,                                                      /* hf_qwen3next.c */
    &hf_gptoss,                                                         /* hf_gptoss.c */
    &hf_qwen35, &hf_qwen35_text, &hf_qwen35_moe, &hf_qwen35_moe_text,   /* hf_qwen3next.c */
    &hf_deepseek_v3, &hf_deepseek_v2, &hf_kimi_k2,                      /* hf_deepseek.c */
    NULL,
};

/* The rows an export asks, in this order, whether a RoPE model's features name them (their
 * claims): the first that does is the model's class. */
static const hf_family *const chosen_first[] = {
    &hf_deepseek_v2, &hf_deepseek_v3, &hf_gemma3, &hf_gemma2, &hf_olmo3, &hf_olmo2, &hf_qwen3next, &hf_gptoss, &hf_qwen3_moe,
    &hf_mixtral, &hf_smollm3, &hf_qwen3, &hf_qwen2, &hf_llama,
};

const hf_family *hf_family_named(const char *s) {
    for (const hf_family *const *f = hf_families; *f; f++)
        if (!strcmp(s, (*f)->model_type)) return *f;
    return NULL;
}

void hf_family_list(char *buf, size_t cap, int rope, int quoted, const char *last) {
    size_t n = 0, k = 0, total = 0;
    const char *q = quoted ? "\"" : "";
    for (const hf_family *const *f = hf_families; *f; f++) total += !rope || (*f)->rope;
    buf[0] = 0;
    for (const hf_family *const *f = hf_families; *f && n < cap; f++) {
        if (rope && !(*f)->rope) continue;
        const char *sep = k == 0 ? "" : k + 1 == total ? last : ", ";
        n += (size_t)snprintf(buf + n, cap - n, "%s%s%s%s", sep, q, (*f)->model_type, q);
        k++;
    }
}

/* ---- the export's choice ---- */

/* The Llama family's classes (RoPE, not the hybrids), for the message of a model none holds. */
static void llama_classes(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (const hf_family *const *f = hf_families; *f && n < cap; f++)
        if ((*f)->rope && !(*f)->hybrid)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", (*f)->class_name);
}

/* The first row of chosen_first whose claims name m; *by: the feature that did ("" for none). */
static const hf_family *chosen(const tsr_model *m, const char **by) {
    for (size_t i = 0; i < sizeof chosen_first / sizeof chosen_first[0]; i++) {
        *by = "";
        if (chosen_first[i]->claims(m, by)) return chosen_first[i];
    }
    *by = "";
    return &hf_llama;
}

/* What m lacks for class f (NULL: nothing), into fam when it is written there. */
static const char *need_of(const tsr_model *m, const hf_family *f, char *fam, size_t cap) {
    const char *need = hf_unexported_key(&m->cfg, f);
    if (need) { /* before the class's own needs: the key that keeps this class out */
        snprintf(fam, cap, "%s unset (the class does not hold it: docs/hf.md)", need);
        return fam;
    }
    need = f->need ? f->need(m, f) : NULL;
    if (!need && hf_variants_need(m, f, fam, cap)) need = fam;
    return need ? need : hf_moe_need(m, f);
}

/* The Llama family: which of its classes can hold m (want, or the one its features name). */
static int rope_choose(const tsr_model *m, const hf_family *want, const hf_family **f, char *why,
                       size_t cap) {
    const tsr_model_config *c = &m->cfg;
    if (c->norm != TSR_NORM_RMSNORM || c->mlp == TSR_MLP_GELU) {
        char classes[400];
        llama_classes(classes, sizeof classes);
        snprintf(why, cap, "model.pos = \"rope\" exports to the Llama family (%s), which needs "
                 "model.norm = \"rmsnorm\" and a gated MLP; this model has \"%s\" and \"%s\"",
                 classes, c->norm == TSR_NORM_RMSNORM ? "rmsnorm" : "layernorm",
                 hf_mlp_word[c->mlp]);
        return TSR_EXIT_USAGE;
    }
    const char *by = "";
    char fam[160];
    *f = want ? want : chosen(m, &by);
    const char *need = need_of(m, *f, fam, sizeof fam);
    if (!need) return 0;
    snprintf(why, cap, "%s%s%s (model_type \"%s\")%s needs %s", by, by[0] ? " exports as " : "",
             (*f)->class_name, (*f)->model_type, by[0] ? ", which" : "", need);
    return TSR_EXIT_USAGE;
}

/* The first tensor of m (numel > 0, in the flat buffer) that no row of f's table holds, or NULL:
 * whatever keys a model sets, an export never drops a tensor its class has no place for. */
static const char *untabled(const tsr_model *m, const hf_family *f) {
    int n, held[TSR_P_COUNT] = {0};
    hf_tensor *t = f->ops->table(m, f, &n);
    for (int k = 0; k < n; k++) {
        size_t at, hf, len;
        for (int i = 0; t[k].present && !hf_tensor_runs(&t[k], i, &at, &hf, &len); i++)
            for (int p = 0; p < TSR_P_COUNT; p++) {
                const tsr_param_info *pi = &m->params_info[p];
                held[p] |= pi->numel && !pi->ep && at >= pi->offset && at < pi->offset + pi->numel;
            }
    }
    free(t);
    for (int p = 0; p < TSR_P_COUNT; p++)
        if (m->params_info[p].numel && !m->params_info[p].ep && !held[p])
            return m->params_info[p].name;
    return NULL;
}

/* The class's table must hold every tensor of m (0), else why names the first it lacks. */
static int tabled(const tsr_model *m, const hf_family *f, char *why, size_t cap) {
    const char *lost = untabled(m, f);
    if (!lost) return 0;
    snprintf(why, cap, "%s (model_type \"%s\") has no tensor for this model's %s (a key that "
             "the class does not hold: docs/hf.md)", f->class_name, f->model_type, lost);
    return TSR_EXIT_USAGE;
}

int hf_family_for(const tsr_model *m, const hf_family *want, const hf_family **f, char *why,
                  size_t cap) {
    *f = NULL;
    if (!want && m->cfg.hf_model_type[0]) { /* an import's class (docs/hf.md) */
        want = hf_family_named(m->cfg.hf_model_type);
        if (!want || !want->rope) {
            snprintf(why, cap, "model.hf_model_type = \"%s\" is no model_type of the Llama "
                     "family tessera exports", m->cfg.hf_model_type);
            return TSR_EXIT_USAGE;
        }
    }
    int rc = m->cfg.pos == TSR_POS_ROPE ? rope_choose(m, want, f, why, cap)
                                        : hf_gpt2_choose(m, want, f, why, cap);
    return rc ? rc : tabled(m, *f, why, cap);
}
