/* hf_config.c — config.json of a transformers directory: written on export, checked on import,
 * read into a run's model.* keys. The driver: it reads the file (hf_reader.h), finds the row of
 * its model_type (hf_family.h) and hands the rest to the row's family (hf_gpt2.c, hf_llama.c, ...,
 * hf_qwen3next.c); what every class shares (the head's tying, quantization_config, the keys
 * around the family's) is here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fsutil.h"
#include "hf/hf.h"
#include "hf/hf_family.h"
#include "json.h"

/* ---- writing ---- */

int hf_config_write(const char *path, const tsr_model *m, const hf_family *f,
                    const char *torch_dtype, long bos, long eos) {
    hf_text b = {.n = 0};
    hfr_add(&b, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", f->class_name,
            f->model_type);
    f->ops->write(&b, m, f);
    hfr_add(&b, "  \"initializer_range\": %.17g,\n  \"tie_word_embeddings\": %s,\n"
            "  \"use_cache\": true,\n", m->cfg.init_std, m->cfg.tie_embeddings ? "true" : "false");
    if (bos >= 0) hfr_add(&b, "  \"bos_token_id\": %ld,\n", bos);
    if (eos >= 0) hfr_add(&b, "  \"eos_token_id\": %ld,\n", eos);
    hfr_add(&b, "  \"torch_dtype\": \"%s\"\n}\n", torch_dtype);
    if (b.overflow) tsr_die(TSR_EXIT_INTERNAL, "config.json: text buffer too small");
    return hf_write_file(path, b.s, b.n);
}

/* ---- reading ---- */

/* config.json read and parsed into c->root (a JSON object), its row in *f: 0, or a fault (exit 2:
 * unreadable, not JSON, not an object, a model_type tessera does not import). The caller frees
 * doc and *text. */
static int open_config(hf_reader *c, json_doc *doc, char **text, const hf_family **f) {
    size_t n;
    json_error err;
    json_value *root = NULL;
    *f = NULL;
    json_doc_init(doc);
    int rc = fs_read_all(c->path, HF_CONFIG_MAX, text, &n);
    if (rc) return c->rc = rc;
    if (json_parse(doc, *text, n, &root, &err) != 0)
        hfr_fault(c, TSR_EXIT_DATA, "not valid JSON: %s at byte %zu", err.msg, err.pos);
    else if (root->type != JSON_OBJECT)
        hfr_fault(c, TSR_EXIT_DATA, "a JSON %s, expected an object", json_type_name(root->type));
    c->root = root;
    const char *mt = c->rc ? "" : hfr_str(c, root, "model_type", "");
    if (!c->rc && !(*f = hf_family_named(mt))) {
        char all[1024];
        hf_family_list(all, sizeof all, 0, 1, " and ");
        hfr_fault(c, TSR_EXIT_DATA, "model_type = \"%s\": tessera imports %s only", mt, all);
    }
    return c->rc;
}

/* quantization_config's fp8 (DeepSeek's published weights): E4M3 in blocks of weight_block_size
 * (two integers from 1 to 65536; [128, 128] in every release), dynamic activations (not read:
 * tessera trains from the dequantised weights). */
static void check_fp8(hf_reader *c, const json_value *q, hf_config *out) {
    const json_value *bs = hfr_member(q, "weight_block_size"), *e;
    const char *fmt = hfr_str(c, q, "fmt", "e4m3");
    char got[96];
    int ok = bs && bs->type == JSON_ARRAY && bs->len == 2, i = 0;
    for (e = ok ? bs->child : NULL; e; e = e->next, i++) {
        ok = ok && e->type == JSON_NUMBER && e->num >= 1 && e->num <= 65536 && e->num == (int64_t)e->num;
        out->fp8_block[i] = ok ? (int64_t)e->num : 0;
    }
    if (!ok && !c->rc)
        hfr_fault(c, TSR_EXIT_DATA, "quantization_config.weight_block_size = %s: expected two "
                  "integers from 1 to 65536 (DeepSeek's [128, 128])",
                  bs ? json_describe(bs, got, sizeof got) : "(absent)");
    if (strcmp(fmt, "e4m3") != 0 && !c->rc)
        hfr_fault(c, TSR_EXIT_DATA, "quantization_config.fmt = \"%s\": tessera reads FP8 weights "
                  "in e4m3 only", fmt);
    out->fp8 = !c->rc;
}

/* quantization_config: absent or null, MXFP4 experts of a class that reads them (gpt-oss's:
 * out->mxfp4; hf_gptoss.h), or block-scaled FP8 weights of one that reads those (DeepSeek's:
 * out->fp8; fp8block.h). */
static void check_quant(hf_reader *c, const hf_family *f, hf_config *out) {
    const json_value *q = hfr_member(c->root, "quantization_config");
    out->mxfp4 = out->fp8 = 0;
    if (!q || q->type == JSON_NULL) return;
    const char *how = hfr_str(c, q, "quant_method", "");
    if (f->mxfp4 && !strcmp(how, "mxfp4"))
        out->mxfp4 = 1;
    else if (f->fp8 && !strcmp(how, "fp8"))
        check_fp8(c, q, out);
    else if (!c->rc)
        hfr_fault(c, TSR_EXIT_DATA, "quantization_config.quant_method = \"%s\": tessera reads "
                  "unquantised weights, gpt-oss's MXFP4 experts (\"mxfp4\") and DeepSeek's "
                  "block-scaled FP8 (\"fp8\") only", how);
}

/* tie_word_embeddings (the text's, where the class nests it) against the run's. */
static void check_tied(hf_reader *c, const tsr_model *m, const hf_family *f, hf_config *out) {
    const json_value *tr = f->nest ? json_get(c->root, f->nest) : NULL; /* (checked) */
    out->tied = hfr_bool(c, tr && json_get(tr, "tie_word_embeddings") ? tr : c->root,
                         "tie_word_embeddings", f->tied);
    if (f->names->head_row)
        hfr_same_bool(c, "tie_word_embeddings", out->tied, "model.tie_embeddings",
                      m->cfg.tie_embeddings);
}

int hf_config_check(const char *path, const tsr_model *m, int notes, hf_config *out) {
    hf_reader c = {.path = path, .notes = notes};
    json_doc doc;
    char *text = NULL;
    const hf_family *f;
    if (open_config(&c, &doc, &text, &f) == 0) {
        out->fam = f;
        f->ops->check(&c, m, f);
        check_quant(&c, f, out);
        check_tied(&c, m, f, out);
    }
    json_doc_free(&doc);
    free(text);
    return c.rc;
}

int hf_config_fill(const char *dir, tsr_config_fill *fill) {
    memset(fill, 0, sizeof *fill);
    if (tsr_snprintf(fill->source, sizeof fill->source, "%s/config.json", dir)) {
        tsr_error("%.200s...: path too long", dir);
        return TSR_EXIT_USAGE;
    }
    hf_reader c = {.path = fill->source, .fill = fill};
    json_doc doc;
    char *text = NULL;
    const hf_family *f;
    if (open_config(&c, &doc, &text, &f) == 0) f->ops->fill(&c, f);
    json_doc_free(&doc);
    free(text);
    return c.rc;
}
