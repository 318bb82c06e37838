/* hf_export.c — a tessera model -> a transformers directory (hf.h, docs/hf.md).
 *
 *   OUT/model.safetensors   the weights (F32 or BF16), names and layouts of hf_map.c
 *   OUT/config.json         GPT2Config or MptConfig keys (hf_config.c)
 *   OUT/vocab.json          GPT-2-format tokenizer only: a byte copy of encoder.json
 *   OUT/merges.txt          ... of vocab.bpe
 *   OUT/tokenizer_config.json  GPT2Tokenizer, model_max_length, <|endoftext|> as bos/eos/unk
 *   OUT/tokenizer.json      Hugging Face tokenizer.json (Llama 3, Qwen, ...) only: a byte copy, with
 *                           the tokenizer_config.json found beside it (byte copy) when there is one
 * Each file is written atomically; files already in OUT with other names are left alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "hf/hf.h"
#include "hf/hf_internal.h"
#include "chat/chat_config.h"
#include "tokenizer/tokenizer.h"

typedef struct tok_files {
    int present;          /* tokenizer files to copy */
    int hf;               /* 1: a tokenizer.json (file `json`, and `config` when non-empty) */
    char dir[4096];       /* GPT-2 format: the directory with encoder.json + vocab.bpe */
    char json[4096], config[4096];
    long eot;             /* id of <|endoftext|>, or -1 */
    uint32_t vocab;
    char note[600];       /* why none are written */
} tok_files;

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* A tokenizer.json's files: the JSON itself (spec, or spec/tokenizer.json for a directory) and the
 * tokenizer_config.json beside it if any; the end-of-sequence id is that config's eos_token (else
 * <|endoftext|>, else none), so config.json's eos_token_id is the one transformers' tokenizer has. */
static int resolve_hf(const char *spec, const tsr_tokenizer *tok, tok_files *t) {
    struct stat st;
    int isdir = stat(spec, &st) == 0 && S_ISDIR(st.st_mode);
    int have_cfg = chat_config_find(spec, t->config, sizeof t->config);
    if (have_cfg < 0 ||
        tsr_snprintf(t->json, sizeof t->json, isdir ? "%s/tokenizer.json" : "%s", spec)) {
        tsr_error("export: the tokenizer path \"%.200s...\" is too long", spec);
        return TSR_EXIT_USAGE;
    }
    const char *eos = "<|endoftext|>";
    chat_config cc;
    jinja_error e;
    if (!have_cfg) t->config[0] = 0;
    else if (chat_config_load(t->config, &cc, &e)) {
        tsr_error("export: %s", e.msg);
        return TSR_EXIT_DATA;
    }
    const json_value *v = have_cfg ? json_get(cc.vars, "eos_token") : NULL;
    uint32_t id = tokenizer_special_id(tok, v && v->type == JSON_STRING ? v->str : eos);
    t->eot = id == UINT32_MAX ? -1 : (long)id;
    if (have_cfg) chat_config_free(&cc);
    t->hf = 1;
    return 0;
}

/* spec: "gpt2", a directory with encoder.json + vocab.bpe, a Hugging Face tokenizer.json (or a
 * directory holding one), a tessera tokenizer file, "" or "none". */
static int resolve_tokenizer(const char *spec, const tsr_model *m, tok_files *t) {
    memset(t, 0, sizeof *t);
    t->eot = -1;
    if (!spec || !*spec || !strcmp(spec, "none")) {
        snprintf(t->note, sizeof t->note, "the checkpoint's config has no data.tokenizer%s",
                 spec && *spec ? " (--tokenizer none)" : "");
        return 0;
    }
    struct stat st;
    if (!strcmp(spec, "gpt2")) {
        int rc = tokenizer_gpt2_dir(t->dir, sizeof t->dir);
        if (rc) {
            tsr_error("export: the tokenizer \"gpt2\" (above) cannot be read; give another with "
                      "--tokenizer DIR, or export without tokenizer files: --tokenizer none");
            return rc;
        }
    } else if (stat(spec, &st) == 0 && !S_ISDIR(st.st_mode) && !has_suffix(spec, ".json")) {
        snprintf(t->note, sizeof t->note, "data.tokenizer = \"%.400s\" is a tessera tokenizer file, "
                 "which transformers cannot load (GPT-2-format vocab.json + merges.txt are written "
                 "for \"gpt2\" or a directory with encoder.json + vocab.bpe)", spec);
        return 0;
    } else {
        snprintf(t->dir, sizeof t->dir, "%s", spec);
    }
    tsr_tokenizer *tok = NULL;
    int rc = tokenizer_open(&tok, spec);
    if (rc) {
        tsr_error("export: the tokenizer \"%s\" (above) cannot be read; give another with "
                  "--tokenizer DIR, or export without tokenizer files: --tokenizer none", spec);
        return rc;
    }
    t->vocab = tokenizer_vocab_size(tok);
    uint32_t eot = tokenizer_special_id(tok, "<|endoftext|>");
    t->eot = eot == UINT32_MAX ? -1 : (long)eot;
    rc = tokenizer_is_hf(tok) ? resolve_hf(spec, tok, t) : 0;
    tokenizer_free(tok);
    if (rc) return rc;
    if (t->vocab > (uint32_t)m->V) {
        tsr_error("export: the tokenizer \"%s\" has %u tokens, the model's vocabulary only %d "
                  "(model.vocab_size): it is not this model's tokenizer; give the right one with "
                  "--tokenizer, or --tokenizer none", spec, t->vocab, m->V);
        return TSR_EXIT_USAGE;
    }
    t->present = 1;
    return 0;
}

static int copy_file(const char *from, const char *to) {
    char *data;
    size_t n;
    int rc = fs_read_all(from, 0, &data, &n);
    if (!rc) rc = hf_write_file(to, data, n);
    free(data);
    return rc;
}

static int write_tokenizer(const char *out_dir, const tok_files *t, const tsr_model *m) {
    char from[4300], to[4300];
    if (t->hf) {
        snprintf(to, sizeof to, "%s/tokenizer.json", out_dir);
        TSR_CHECK(copy_file(t->json, to));
        if (!t->config[0]) return 0;
        snprintf(to, sizeof to, "%s/tokenizer_config.json", out_dir);
        return copy_file(t->config, to);
    }
    snprintf(from, sizeof from, "%s/encoder.json", t->dir);
    snprintf(to, sizeof to, "%s/vocab.json", out_dir);
    TSR_CHECK(copy_file(from, to));
    snprintf(from, sizeof from, "%s/vocab.bpe", t->dir);
    snprintf(to, sizeof to, "%s/merges.txt", out_dir);
    TSR_CHECK(copy_file(from, to));
    char text[1024];
    const char *eot = "\"<|endoftext|>\"";
    int k = snprintf(text, sizeof text,
                     "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n"
                     "  \"add_prefix_space\": false,\n  \"add_bos_token\": false,\n"
                     "  \"errors\": \"replace\",\n  \"bos_token\": %s,\n  \"eos_token\": %s,\n"
                     "  \"unk_token\": %s\n}\n",
                     m->maxT, t->eot >= 0 ? eot : "null", t->eot >= 0 ? eot : "null",
                     t->eot >= 0 ? eot : "null");
    snprintf(to, sizeof to, "%s/tokenizer_config.json", out_dir);
    return hf_write_file(to, text, (size_t)k);
}

int hf_export(const tsr_model *m, const tsr_config *cfg, const char *out_dir,
              const hf_export_opts *o) {
    hf_arch a;
    char why[512], path[4300];
    if (hf_arch_of(m, &a, why, sizeof why)) {
        tsr_error("export --format hf: %s; this model has no transformers equivalent", why);
        return TSR_EXIT_USAGE;
    }
    if (o->dtype != ST_F32 && o->dtype != ST_BF16)
        tsr_die(TSR_EXIT_INTERNAL, "hf_export: dtype %s (F32 or BF16 only)", st_dtype_name(o->dtype));
    /* transformers has no document mask for these classes: same weights, plain causal model */
    if (m->cfg.attn_mask == TSR_MASK_DOCUMENT)
        tsr_warn("export --format hf: model.attn_mask = \"document\" exports as a plain causal %s: "
                 "it computes the same as tessera only on inputs of one document (no "
                 "model.eot_token = %d before the last position)", hf_class_name[a],
                 m->cfg.eot_token);
    tok_files tk;
    TSR_CHECK(resolve_tokenizer(o->tokenizer ? o->tokenizer : cfg->data.tokenizer, m, &tk));
    if (tsr_snprintf(path, sizeof path, "%s/model.safetensors", out_dir) || fs_make_parents(path) != 0) {
        tsr_error("%s: cannot create the output directory", out_dir);
        return TSR_EXIT_DATA;
    }

    int n;
    hf_tensor *tab = hf_tensor_table(m, a, &n);
    st_tensor *st = tsr_calloc((size_t)n, sizeof *st);
    uint64_t bytes = 0;
    for (int k = 0; k < n; k++) {
        st[k].name = tab[k].name;
        st[k].dtype = o->dtype;
        st[k].ndim = tab[k].ndim;
        st[k].shape[0] = tab[k].shape[0];
        st[k].shape[1] = tab[k].shape[1];
        st[k].src = tab[k].present ? m->params + tab[k].offset : NULL; /* absent bias: zeros */
        st[k].transpose = tab[k].transpose;
        bytes += tab[k].numel * st_dtype_size(o->dtype);
    }
    st_kv meta[] = {{"format", "pt"}, {"producer", "tessera ckpt export --format hf"},
                    {"source", o->source ? o->source : ""}};
    int rc = st_save(path, st, n, meta, (int)(sizeof meta / sizeof meta[0]));
    free(st);
    free(tab);
    if (rc) return rc;
    printf("wrote %s: %d tensors, %.1f MB of %s (%s; wte: the %d real vocabulary rows of %d)\n",
           path, n, (double)bytes / 1e6, st_dtype_name(o->dtype), hf_class_name[a], m->V, m->Vp);

    snprintf(path, sizeof path, "%s/config.json", out_dir);
    TSR_CHECK(hf_config_write(path, m, a, o->dtype == ST_BF16 ? "bfloat16" : "float32", tk.eot));
    printf("wrote %s: model_type \"%s\", %d layers, d_model %d, %d heads, vocab %d, %s %d\n", path,
           hf_model_type[a], m->L, m->C, m->NH, m->V, a == HF_GPT2 ? "n_positions" : "max_seq_len",
           m->maxT);
    if (tk.present) {
        TSR_CHECK(write_tokenizer(out_dir, &tk, m));
        if (tk.hf)
            printf("wrote %s/tokenizer.json%s: byte copies of %s%s%s (%u tokens, eos_token_id %ld)\n",
                   out_dir, tk.config[0] ? ", tokenizer_config.json" : "", tk.json,
                   tk.config[0] ? " and " : "", tk.config, tk.vocab, tk.eot);
        else
            printf("wrote %s/vocab.json, merges.txt, tokenizer_config.json: GPT-2 BPE from %s (%u "
                   "tokens%s)\n", out_dir, tk.dir, tk.vocab, tk.eot >= 0 ? ", <|endoftext|> = bos/eos" : "");
    } else {
        printf("no tokenizer files written: %s\n", tk.note);
    }
    printf("load it with: transformers.%s.from_pretrained(\"%s\")\n", hf_class_name[a], out_dir);
    return 0;
}
