/* hf_peft.c — a LoRA checkpoint's adapters as a PEFT directory (hf.h hf_export_adapter;
 * docs/lora.md): adapter_config.json and adapter_model.safetensors with PEFT's tensor names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "hf/hf.h"
#include "hf/hf_internal.h"
#include "json.h"
#include "model/ckpt_model.h"
#include "model/model_lora.h"

/* the transformers module a target is, and its parent in a decoder layer. The hybrid layers'
 * (Qwen3-Next's linear_attn modules; attn_gate is the gate half of its q_proj) are named but not
 * written yet: hf_arch_of refuses their models, and their B rows will need the HF export's
 * per-key-head order of in_proj_qkvz / in_proj_ba (docs/lora.md) */
static const char *const module_of[TSR_LORA_COUNT] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
    "in_proj_qkvz", "in_proj_ba", "out_proj", "q_proj"};
static const char *const parent_of[TSR_LORA_COUNT] = {
    "self_attn", "self_attn", "self_attn", "self_attn", "mlp", "mlp", "mlp",
    "linear_attn", "linear_attn", "linear_attn", "self_attn"};
/* the targets a PEFT adapter is read into: the Llama family's seven (attn_gate shares q_proj) */
#define PEFT_READ TSR_LORA_QKVZ

/* PEFT's name of layer l's target t adapter matrix (A, or B when is_b) */
static void peft_name(char *buf, size_t cap, int l, int t, int is_b) {
    snprintf(buf, cap, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", l, parent_of[t],
             module_of[t], is_b ? 'B' : 'A');
}

/* adapter_config.json: LoraConfig's fields as PEFT's save_pretrained writes them (sorted keys) */
static int write_config(const char *path, const tsr_config *cfg, const tsr_lora *lo) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) tsr_die(TSR_EXIT_INTERNAL, "open_memstream failed");
    fprintf(f, "{\n  \"alpha_pattern\": {},\n  \"auto_mapping\": null,\n"
               "  \"base_model_name_or_path\": ");
    json_fput_string(f, cfg->lora.base);
    fprintf(f, ",\n  \"bias\": \"none\",\n"
               "  \"fan_in_fan_out\": false,\n  \"inference_mode\": true,\n"
               "  \"init_lora_weights\": true,\n  \"layers_pattern\": null,\n"
               "  \"layers_to_transform\": null,\n  \"lora_alpha\": %.17g,\n"
               "  \"lora_dropout\": %.17g,\n  \"modules_to_save\": null,\n"
               "  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"rank_pattern\": {},\n"
               "  \"revision\": null,\n  \"target_modules\": [",
            cfg->lora.alpha, cfg->lora.dropout, lo->R);
    int n = 0;
    for (int t = 0; t < TSR_LORA_COUNT; t++)
        if (lo->a_at[t] != SIZE_MAX) fprintf(f, "%s\n    \"%s\"", n++ ? "," : "", module_of[t]);
    fprintf(f, "\n  ],\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n"
               "  \"use_rslora\": false\n}\n");
    fclose(f);
    int rc = hf_write_file(path, text, len);
    free(text);
    return rc;
}

int hf_export_adapter(const tsr_model *m, const tsr_config *cfg, const struct tsr_lora *lo,
                      const char *out_dir, const hf_export_opts *o) {
    hf_arch a, want = o->arch ? hf_arch_named(o->arch) : HF_ARCH_COUNT;
    char why[512] = "", path[4300];
    TSR_CHECK(hf_export_check_opts(o));
    if (hf_arch_of(m, want, &a, why, sizeof why) || a < HF_LLAMA) {
        tsr_error("export --adapter: %s", a < HF_LLAMA && !why[0] ? "PEFT adapters are written "
                  "for the Llama family (RoPE models) only so far" : why);
        return TSR_EXIT_USAGE;
    }
    if (tsr_snprintf(path, sizeof path, "%s/adapter_model.safetensors", out_dir) ||
        fs_make_parents(path) != 0) {
        tsr_error("%s: cannot create the output directory", out_dir);
        return TSR_EXIT_DATA;
    }
    int n = 0;
    st_tensor *st = tsr_calloc((size_t)(2 * TSR_LORA_COUNT * lo->L), sizeof *st);
    char(*names)[128] = tsr_calloc((size_t)(2 * TSR_LORA_COUNT * lo->L), sizeof *names);
    for (int l = 0; l < lo->L; l++)
        for (int k = 0; k < 2 * TSR_LORA_COUNT; k++) {
            char name[16];
            int64_t shape[3];
            size_t at, numel;
            if (!lora_tensor(lo, k, name, shape, &at, &numel)) continue;
            const int t = k / 2;
            peft_name(names[n], sizeof names[n], l, t, k % 2);
            st[n] = (st_tensor){.name = names[n], .dtype = o->dtype, .ndim = 2,
                                .shape = {shape[1], shape[2]},
                                .src = lo->w + at + (size_t)l * (numel / (size_t)lo->L)};
            n++;
        }
    st_kv meta[] = {{"format", "pt"}};
    int rc = st_save(path, st, n, meta, 1);
    if (!rc) printf("wrote %s: %d tensors (%d layers x %d), %s\n", path, n, lo->L, n / lo->L,
                    st_dtype_name(o->dtype));
    free(st);
    free(names);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/adapter_config.json", out_dir);
    TSR_CHECK(write_config(path, cfg, lo));
    printf("wrote %s: r %d, lora_alpha %g, base %s (model_type %s)\n", path, lo->R, cfg->lora.alpha,
           cfg->lora.base[0] ? cfg->lora.base : "(none: the seed's weights)", hf_model_type[a]);
    printf("load it with: peft.PeftModel.from_pretrained(base_model, \"%s\")\n", out_dir);
    return 0;
}

int hf_is_peft_dir(const char *path) {
    char p[4300];
    struct stat st;
    return snprintf(p, sizeof p, "%s/adapter_config.json", path) < (int)sizeof p &&
           stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* r: a positive integer equal to the run's lora.rank. Values are quoted as the file gives them. */
static int check_rank(const char *path, const json_value *root, const tsr_lora *lo) {
    const json_value *v = json_get(root, "r");
    char got[96];
    if (!v) {
        tsr_error("%s: no \"r\" (the adapters' rank)", path);
        return TSR_EXIT_DATA;
    }
    json_describe(v, got, sizeof got);
    if (v->type != JSON_NUMBER || v->num < 1 || v->num > 65536 || v->num != floor(v->num)) {
        tsr_error("%s: r = %s: expected the adapters' rank, a whole number from 1 to 65536", path,
                  got);
        return TSR_EXIT_DATA;
    }
    if (v->num != lo->R) {
        tsr_error("%s: r = %s, this run has lora.rank = %d: set lora.rank to the adapter's", path,
                  got, lo->R);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

static int check_alpha(const char *path, const json_value *root, const tsr_config *cfg) {
    const json_value *v = json_get(root, "lora_alpha");
    char got[96], want[40];
    if (!v || v->type != JSON_NUMBER || !(v->num > 0)) {
        tsr_error("%s: lora_alpha = %s: expected a positive number", path,
                  v ? json_describe(v, got, sizeof got) : "(missing)");
        return TSR_EXIT_DATA;
    }
    if (v->num != cfg->lora.alpha) {
        tsr_fmt_shortest(want, sizeof want, cfg->lora.alpha);
        tsr_error("%s: lora_alpha = %s, this run has lora.alpha = %s: set lora.alpha to the "
                  "adapter's", path, json_describe(v, got, sizeof got), want);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* rank_pattern / alpha_pattern: a module's own rank or alpha. tessera's adapters share one r and
 * one alpha, so an entry that differs from r / lora_alpha is refused by name (one that equals
 * them changes nothing); absent, null or {} is the common case. */
static int check_pattern(const char *path, const json_value *root, const char *key,
                         const char *what, double global) {
    const json_value *p = json_get(root, key);
    char got[96], want[40];
    if (!p || p->type == JSON_NULL) return 0;
    if (p->type != JSON_OBJECT) {
        tsr_error("%s: %s = %s: expected an object of module names and %ss", path, key,
                  json_describe(p, got, sizeof got), what);
        return TSR_EXIT_DATA;
    }
    for (const json_value *e = p->child; e; e = e->next) {
        if (e->type == JSON_NUMBER && e->num == global) continue;
        json_value name = {.type = JSON_STRING, .str = e->key, .len = e->key_len};
        char mod[96];
        tsr_fmt_shortest(want, sizeof want, global);
        tsr_error("%s: %s gives module %s the %s %s, but tessera's adapters share one %s (this "
                  "adapter's is %s): per-module %ss are not supported; drop the entry or give it %s",
                  path, key, json_describe(&name, mod, sizeof mod), what,
                  json_describe(e, got, sizeof got), what, want, what, want);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* target_modules: PEFT's module names of this run's lora.targets, no other */
static int check_targets(const char *path, const json_value *root, const tsr_config *cfg,
                         const tsr_lora *lo) {
    const json_value *v = json_get(root, "target_modules");
    char got[96];
    if (!v || v->type != JSON_ARRAY) {
        tsr_error("%s: target_modules is not a list of module names", path);
        return TSR_EXIT_DATA;
    }
    unsigned mask = 0;
    for (const json_value *e = v->child; e; e = e->next) {
        int t = -1;
        for (int k = 0; k < PEFT_READ && e->type == JSON_STRING; k++)
            if (json_str_plain(e) && !strcmp(e->str, module_of[k])) t = k;
        if (t < 0) {
            tsr_error("%s: target module %s is not one of q_proj, k_proj, v_proj, o_proj, "
                      "gate_proj, up_proj, down_proj", path, json_describe(e, got, sizeof got));
            return TSR_EXIT_USAGE;
        }
        mask |= 1u << t;
    }
    if (mask != lo->mask) {
        tsr_error("%s: its target_modules are not this run's lora.targets = \"%s\": set "
                  "lora.targets to the adapter's", path, cfg->lora.targets);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* adapter_config.json against the run's LoRA: the PEFT type, r, lora_alpha, their per-module
 * patterns, rsLoRA and DoRA, target_modules */
static int check_peft_fields(const char *path, const json_value *root, const tsr_config *cfg,
                             const tsr_lora *lo) {
    const json_value *v;
    if (!(v = json_get(root, "peft_type")) || v->type != JSON_STRING || strcmp(v->str, "LORA") != 0) {
        tsr_error("%s: peft_type is not \"LORA\" (expected a PEFT LoRA adapter)", path);
        return TSR_EXIT_DATA;
    }
    TSR_CHECK(check_rank(path, root, lo));
    TSR_CHECK(check_alpha(path, root, cfg));
    TSR_CHECK(check_pattern(path, root, "rank_pattern", "rank", (double)lo->R));
    TSR_CHECK(check_pattern(path, root, "alpha_pattern", "alpha", cfg->lora.alpha));
    if ((v = json_get(root, "use_rslora")) && v->type == JSON_TRUE) {
        tsr_error("%s: use_rslora = true (scale alpha / sqrt(r)) is not supported", path);
        return TSR_EXIT_USAGE;
    }
    if ((v = json_get(root, "use_dora")) && v->type == JSON_TRUE) {
        tsr_error("%s: use_dora = true (DoRA) is not supported", path);
        return TSR_EXIT_USAGE;
    }
    return check_targets(path, root, cfg, lo);
}

/* path (adapter_config.json) read and parsed: 0 with *root an object, or TSR_EXIT_DATA after
 * tsr_error. Free *text and doc after, whatever the status. */
static int read_json(const char *path, json_doc *doc, char **text, json_value **root) {
    size_t len;
    json_error err;
    *text = NULL;
    json_doc_init(doc);
    TSR_CHECK(fs_read_all(path, 1u << 20, text, &len));
    if (json_parse(doc, *text, len, root, &err) != 0) {
        tsr_error("%s: not JSON (%s at byte %zu)", path, err.msg, err.pos);
        return TSR_EXIT_DATA;
    }
    if ((*root)->type != JSON_OBJECT) {
        tsr_error("%s: a JSON %s, expected an object", path, json_type_name((*root)->type));
        return TSR_EXIT_DATA;
    }
    return 0;
}

static int check_peft_config(const char *path, const tsr_config *cfg, const tsr_lora *lo,
                             char *base, size_t cap) {
    char *text;
    json_doc doc;
    json_value *root = NULL;
    int rc = read_json(path, &doc, &text, &root);
    if (!rc) rc = check_peft_fields(path, root, cfg, lo);
    const json_value *v = rc ? NULL : json_get(root, "base_model_name_or_path");
    snprintf(base, cap, "%s", v && json_str_plain(v) ? v->str : "");
    json_doc_free(&doc);
    free(text);
    return rc;
}

int hf_read_adapter(const char *dir, const tsr_config *cfg, struct tsr_lora *lo, char *base,
                    size_t cap) {
    char path[4300];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    TSR_CHECK(check_peft_config(path, cfg, lo, base, cap));
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st_file f;
    TSR_CHECK(st_open(&f, path));
    int rc = 0, n = 0;
    for (int l = 0; l < lo->L && !rc; l++)
        for (int k = 0; k < 2 * TSR_LORA_COUNT && !rc; k++) {
            char name[16], hf[128];
            int64_t shape[3];
            size_t at, numel;
            if (!lora_tensor(lo, k, name, shape, &at, &numel)) continue;
            const int t = k / 2;
            peft_name(hf, sizeof hf, l, t, k % 2);
            const st_entry *e = st_find(&f, hf);
            if (!e) {
                tsr_error("%s: no tensor %s (this run's model and targets need it)", path, hf);
                rc = TSR_EXIT_DATA;
            } else if (e->ndim != 2 || e->shape[0] != shape[1] || e->shape[1] != shape[2]) {
                tsr_error("%s: %s has shape (%lld, %lld), this model needs (%lld, %lld)", path, hf,
                          (long long)e->shape[0], (long long)(e->ndim > 1 ? e->shape[1] : 0),
                          (long long)shape[1], (long long)shape[2]);
                rc = TSR_EXIT_DATA;
            } else {
                rc = st_read_f32_finite(&f, e, lo->w + at + (size_t)l * (numel / (size_t)lo->L));
                n++;
            }
        }
    if (!rc && n != f.n) {
        tsr_error("%s: %d tensors, this run's %d layers and targets take %d (other layers or "
                  "modules: a different model?)", path, f.n, lo->L, n);
        rc = TSR_EXIT_DATA;
    }
    st_close(&f);
    return rc;
}

/* ============================ a PEFT directory as a model ============================ */

/* adapter_config.json's r, lora_alpha and target_modules into cfg's lora keys, and its
 * base_model_name_or_path into base. 0 or TSR_EXIT_DATA after tsr_error. */
static int adapter_keys(const char *path, tsr_config *cfg, char *base, size_t cap) {
    char *text;
    json_doc doc;
    json_value *root = NULL;
    int rc = read_json(path, &doc, &text, &root);
    const json_value *r = rc ? NULL : json_get(root, "r"), *a = rc ? NULL : json_get(root, "lora_alpha");
    const json_value *t = rc ? NULL : json_get(root, "target_modules");
    const json_value *b = rc ? NULL : json_get(root, "base_model_name_or_path");
    if (!rc && (!r || r->type != JSON_NUMBER || !a || a->type != JSON_NUMBER || !t ||
                t->type != JSON_ARRAY)) {
        tsr_error("%s: not a PEFT LoRA adapter_config.json (r, lora_alpha and target_modules)", path);
        rc = TSR_EXIT_DATA;
    } else if (!rc) {
        cfg->lora.rank = (int64_t)r->num;
        cfg->lora.alpha = a->num;
        size_t o = 0;
        cfg->lora.targets[0] = '\0';
        for (const json_value *e = t->child; e; e = e->next)
            for (int k = 0; k < PEFT_READ; k++)
                if (e->type == JSON_STRING && !strcmp(e->str, module_of[k]) && o + 8 < sizeof cfg->lora.targets)
                    o += (size_t)snprintf(cfg->lora.targets + o, sizeof cfg->lora.targets - o, "%s%s",
                                          o ? "," : "", config_lora_target_name(k));
        snprintf(base, cap, "%s", b && json_str_plain(b) ? b->str : "");
    }
    json_doc_free(&doc);
    free(text);
    return rc;
}

int hf_peft_model_load(const char *dir, const char *const *sets, int n_sets, int T,
                       tsr_config *cfg, tsr_model *m) {
    char path[4300], named[1024], base[1024] = "";
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    tsr_config *lk = tsr_calloc(1, sizeof *lk);
    int rc = adapter_keys(path, lk, named, sizeof named);
    for (int i = 0; i < n_sets; i++) /* --set lora.base=PATH names the base */
        if (!strncmp(sets[i], "lora.base=", 10)) snprintf(base, sizeof base, "%s", sets[i] + 10);
    if (!base[0]) snprintf(base, sizeof base, "%s", named);
    struct stat st;
    if (!rc && (!base[0] || stat(base, &st) != 0)) {
        tsr_error("%s: the PEFT adapter's base model \"%s\" (base_model_name_or_path) is not a path "
                  "here: give it with --set lora.base=PATH (a checkpoint, run directory or Hugging "
                  "Face directory)", dir, base);
        rc = TSR_EXIT_DATA;
    }
    const char *keep[64]; /* the base loads without the LoRA keys */
    int nk = 0;
    for (int i = 0; i < n_sets && nk < 64; i++)
        if (strncmp(sets[i], "lora.", 5) != 0) keep[nk++] = sets[i];
    if (!rc) rc = ckpt_model_load(base, keep, nk, T, cfg, m, NULL, 0);
    tsr_lora lo;
    unsigned mask = 0;
    char why[400];
    if (!rc) {
        cfg->lora = lk->lora;
        snprintf(cfg->lora.base, sizeof cfg->lora.base, "%s", base);
        if (config_lora_targets(&cfg->model, cfg->lora.targets, &mask, why, sizeof why)) {
            tsr_error("%s: target_modules: %s", path, why);
            rc = TSR_EXIT_DATA;
        }
    }
    if (!rc) {
        lora_init(&lo, m, (int)cfg->lora.rank, cfg->lora.alpha, 0, mask);
        m->lora = NULL; /* merged below, not run beside the base */
        rc = hf_read_adapter(dir, cfg, &lo, named, sizeof named);
        if (!rc) lora_merge(&lo, lo.w, m);
        lora_free(&lo);
    }
    if (rc && m->params) model_free(m), memset(m, 0, sizeof *m);
    free(lk);
    return rc;
}
