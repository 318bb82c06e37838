/* hf_rope.c — RoPE in a Llama-family config.json: rope_theta and the scaling (rope_scaling, or
 * transformers 5's rope_parameters, flat or per layer type): Llama 3's, linear (the classes with
 * hf_family.rope_linear: Gemma 2 and 3), YaRN (gpt-oss), written, checked and read (hf_llama.h).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "hf/hf_llama.h"

/* max_position_embeddings: the model's context, not the last run's seq_len: model.max_seq_len
 * (an --init-from Hugging Face run takes the base's), else the context Llama 3's RoPE scaling
 * extends to (original x factor), else the run's seq_len. */
int hf_rope_context(const tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    double scaled = c->rope_original_max_pos * c->rope_factor;
    if (c->max_seq_len > 0) return c->max_seq_len;
    int scales = c->rope_scaling == TSR_ROPE_SCALING_LLAMA3 || c->rope_scaling == TSR_ROPE_SCALING_YARN;
    if (scales && scaled > m->maxT && scaled < 1e9) return (int)scaled;
    return m->maxT;
}

/* ---- writing ---- */

void hf_rope_write(hf_text *b, const tsr_model_config *c, const hf_family *f) {
    char x[32], lo[32], hi[32];
    if (c->rope_scaling == TSR_ROPE_SCALING_LLAMA3)
        hfr_add(b, "  \"rope_scaling\": {\n    \"rope_type\": \"llama3\",\n    \"factor\": %s,\n"
                "    \"low_freq_factor\": %s,\n    \"high_freq_factor\": %s,\n"
                "    \"original_max_position_embeddings\": %d\n  },\n",
                hfr_double(x, sizeof x, c->rope_factor),
                hfr_double(lo, sizeof lo, c->rope_low_freq_factor),
                hfr_double(hi, sizeof hi, c->rope_high_freq_factor), c->rope_original_max_pos);
    else if (c->rope_scaling == TSR_ROPE_SCALING_LINEAR)
        hfr_add(b, "  \"rope_scaling\": {\n    \"rope_type\": \"linear\",\n    \"factor\": %s\n  },\n",
                hfr_double(x, sizeof x, c->rope_factor));
    else if (c->rope_scaling == TSR_ROPE_SCALING_YARN) /* gpt-oss (the choice refuses it elsewhere) */
        hfr_add(b, "  \"rope_scaling\": {\n    \"rope_type\": \"yarn\",\n    \"factor\": %s,\n"
                "    \"beta_fast\": %s,\n    \"beta_slow\": %s,\n"
                "    \"original_max_position_embeddings\": %d,\n    \"truncate\": %s\n  },\n",
                hfr_double(x, sizeof x, c->rope_factor), hfr_double(lo, sizeof lo, c->rope_beta_fast),
                hfr_double(hi, sizeof hi, c->rope_beta_slow), c->rope_original_max_pos,
                c->rope_truncate ? "true" : "false");
    else if (f->gptoss) /* GptOssConfig fills its YaRN in place of null (hf_gptoss.h) */
        hfr_add(b, "  \"rope_scaling\": {\n    \"rope_type\": \"default\"\n  },\n");
    else
        hfr_add(b, "  \"rope_scaling\": null,\n");
}

/* ---- where config.json holds it ---- */

const json_value *hf_rope_per_type(const json_value *r, const char *type) {
    const json_value *rp = hfr_member(r, "rope_parameters"), *e = rp ? hfr_member(rp, type) : NULL;
    return e && e->type == JSON_OBJECT ? e : NULL;
}

/* The object holding the (full layers') rope_theta and scaling, and its name: rope_scaling, else
 * transformers 5's rope_parameters (flat, or its full_attention entry) */
static const json_value *rope_object(const json_value *r, const char **key) {
    const json_value *rs = hfr_member(r, *key = "rope_scaling");
    if (rs && rs->type != JSON_NULL) return rs;
    const json_value *full = hf_rope_per_type(r, "full_attention");
    if (full) return *key = "rope_parameters.full_attention", full;
    const json_value *rp = hfr_member(r, "rope_parameters");
    if (rp) *key = "rope_parameters";
    return rp ? rp : rs;
}

double hf_rope_local_base(hf_reader *c, const json_value *r) {
    const json_value *s = hf_rope_per_type(r, "sliding_attention");
    if (!s) return hfr_num(c, r, "rope_local_base_freq", 10000);
    const char *type = hfr_str(c, s, "rope_type", "default");
    if (strcmp(type, "default") != 0)
        hfr_fault(c, TSR_EXIT_DATA, "rope_parameters.sliding_attention.rope_type = \"%s\": tessera "
                  "turns the sliding layers by the plain frequencies only", type);
    return hfr_num(c, s, "rope_theta", 10000);
}

/* ---- checking ---- */

static const char *const scaling_word[] = {"none", "llama3", "linear", "yarn"};

/* rope_scaling of type "linear" (the classes with hf_family.rope_linear): factor = rope_factor. */
static void check_linear(hf_reader *c, const json_value *rs, const char *key,
                         const tsr_model_config *mc) {
    char name[64];
    snprintf(name, sizeof name, "%s.factor", key);
    double v = hfr_num(c, rs, "factor", NAN);
    if (isnan(v)) hfr_fault(c, TSR_EXIT_DATA, "%s is missing (rope_type \"linear\" needs it)", name);
    if (mc->rope_scaling != TSR_ROPE_SCALING_LINEAR)
        hfr_fault(c, TSR_EXIT_USAGE, "%s.rope_type = \"linear\", but this run's model.rope_scaling "
                  "differs: set --set model.rope_scaling=linear --set model.rope_factor=%g", key, v);
    hfr_same_num(c, name, v, "model.rope_factor", mc->rope_factor);
}

/* One scaling key of rope_scaling and the run's model.rope_* double it is (def NAN: required). */
typedef struct scaling_key {
    const char *hf, *run;
    size_t off;
    double def;
} scaling_key;

/* The n keys of a rope_scaling of type `type` (its object rs, named key) and its
 * original_max_position_embeddings (required) against the run's. */
static void same_scaling(hf_reader *c, const json_value *rs, const char *key, const char *type,
                         const scaling_key *k, size_t n, const tsr_model_config *mc) {
    char name[96];
    for (size_t i = 0; i < n; i++) {
        double v = hfr_num(c, rs, k[i].hf, k[i].def);
        snprintf(name, sizeof name, "%s.%s", key, k[i].hf);
        if (isnan(v))
            hfr_fault(c, TSR_EXIT_DATA, "%s is missing (rope_type \"%s\" needs it)", name, type);
        hfr_same_num(c, name, v, k[i].run, *(const double *)((const char *)mc + k[i].off));
    }
    snprintf(name, sizeof name, "%s.original_max_position_embeddings", key);
    long omp = hfr_int(c, rs, "original_max_position_embeddings", -1);
    if (omp < 0) hfr_fault(c, TSR_EXIT_DATA, "%s is missing (rope_type \"%s\" needs it)", name, type);
    hfr_same(c, name, omp, "model.rope_original_max_pos", mc->rope_original_max_pos, "");
}

/* rope_scaling of type "yarn" (gpt-oss): factor, beta_fast, beta_slow,
 * original_max_position_embeddings and truncate against the run's model.rope_* keys; an
 * attention factor of its own (attention_factor, mscale, mscale_all_dim) is refused: tessera's is
 * 0.1 ln(factor) + 1, transformers' default. */
static void check_yarn(hf_reader *c, const json_value *rs, const char *key,
                       const tsr_model_config *mc) {
    static const scaling_key k[] = {
        {"factor", "model.rope_factor", offsetof(tsr_model_config, rope_factor), NAN},
        {"beta_fast", "model.rope_beta_fast", offsetof(tsr_model_config, rope_beta_fast), 32},
        {"beta_slow", "model.rope_beta_slow", offsetof(tsr_model_config, rope_beta_slow), 1},
    };
    static const char *const own[] = {"attention_factor", "mscale", "mscale_all_dim"};
    char name[96];
    if (mc->rope_scaling != TSR_ROPE_SCALING_YARN)
        hfr_fault(c, TSR_EXIT_USAGE, "%s.rope_type = \"yarn\", but this run has model.rope_scaling "
                  "= \"%s\": set --set model.rope_scaling=yarn (and the rope_* keys)", key,
                  scaling_word[mc->rope_scaling]);
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        const json_value *v = hfr_member(rs, own[i]);
        if (v && v->type != JSON_NULL)
            hfr_fault(c, TSR_EXIT_DATA, "%s.%s is set: not supported (tessera's YaRN scales "
                      "attention by 0.1 ln(factor) + 1, transformers' default); only null is "
                      "accepted", key, own[i]);
    }
    same_scaling(c, rs, key, "yarn", k, sizeof k / sizeof k[0], mc);
    snprintf(name, sizeof name, "%s.truncate", key);
    hfr_same_bool(c, name, hfr_bool(c, rs, "truncate", 1), "model.rope_truncate", mc->rope_truncate);
}

/* rope_scaling of type "llama3" against the run's model.rope_* keys. */
static void check_llama3(hf_reader *c, const json_value *rs, const char *key,
                         const tsr_model_config *mc) {
    static const scaling_key k[] = {
        {"factor", "model.rope_factor", offsetof(tsr_model_config, rope_factor), NAN},
        {"low_freq_factor", "model.rope_low_freq_factor",
         offsetof(tsr_model_config, rope_low_freq_factor), NAN},
        {"high_freq_factor", "model.rope_high_freq_factor",
         offsetof(tsr_model_config, rope_high_freq_factor), NAN},
    };
    if (mc->rope_scaling != TSR_ROPE_SCALING_LLAMA3)
        hfr_fault(c, TSR_EXIT_USAGE, "%s.rope_type = \"llama3\", but this run has "
                  "model.rope_scaling = \"none\": set --set model.rope_scaling=llama3 (and the "
                  "rope_* keys)", key);
    same_scaling(c, rs, key, "llama3", k, sizeof k / sizeof k[0], mc);
}

/* A class without a local base (hf_family.local_theta) turns every layer alike: rope_parameters'
 * sliding_attention entry, if any, must be its full_attention one */
static void check_same_types(hf_reader *c, const json_value *r, const hf_family *f) {
    const json_value *s = hf_rope_per_type(r, "sliding_attention");
    const json_value *full = hf_rope_per_type(r, "full_attention");
    if (!s || f->local_theta) return;
    if (!full || hfr_num(c, s, "rope_theta", 10000) != hfr_num(c, full, "rope_theta", 10000) ||
        strcmp(hfr_str(c, s, "rope_type", "default"), hfr_str(c, full, "rope_type", "default")))
        hfr_fault(c, TSR_EXIT_DATA, "rope_parameters: the sliding_attention layers turn otherwise "
                  "than the full_attention ones, which %s does not hold in tessera (one RoPE for "
                  "every layer)", f->class_name);
}

/* The scaling's type (rs: its object, named key; "default" when absent or null). */
static const char *scaling_type(hf_reader *c, const json_value *rs, const char *key,
                                const hf_family *f) {
    if (rs && rs->type != JSON_NULL && rs->type != JSON_OBJECT)
        hfr_fault(c, TSR_EXIT_DATA, "%s is a JSON %s, expected an object or null", key,
                  json_type_name(rs->type));
    else if (rs && rs->type == JSON_OBJECT)
        return hfr_str(c, rs, "rope_type", hfr_str(c, rs, "type", "default"));
    else if (f->gptoss) /* GptOssConfig's own YaRN default; null differs by version */
        hfr_fault(c, TSR_EXIT_DATA, "rope_scaling (or rope_parameters) is absent or null: "
                  "GptOssConfig then fills its own YaRN default (transformers 4.55 reads null as no "
                  "scaling, 5.x as that default); state it, as the published config.json does");
    return "default";
}

void hf_rope_check(hf_reader *c, const json_value *r, const tsr_model_config *mc, const hf_family *f) {
    double theta = hfr_num(c, r, "rope_theta", f->def.theta);
    const char *key;
    const json_value *rs = rope_object(r, &key);
    if (strcmp(key, "rope_scaling") != 0) theta = hfr_num(c, rs, "rope_theta", theta);
    check_same_types(c, r, f);
    const char *type = scaling_type(c, rs, key, f);
    hfr_same_num(c, "rope_theta", theta, "model.rope_theta", mc->rope_theta);
    if (!strcmp(type, "default")) {
        if (mc->rope_scaling != TSR_ROPE_SCALING_NONE)
            hfr_fault(c, TSR_EXIT_USAGE, "%s has no scaling, but this run has model.rope_scaling "
                      "= \"%s\": set --set model.rope_scaling=none", key,
                      scaling_word[mc->rope_scaling]);
    } else if (!strcmp(type, "yarn") && f->gptoss) {
        check_yarn(c, rs, key, mc);
    } else if (!strcmp(type, "linear") && f->rope_linear) {
        check_linear(c, rs, key, mc);
    } else if (strcmp(type, "llama3") != 0) {
        hfr_fault(c, TSR_EXIT_DATA, "%s.rope_type = \"%s\": tessera reads the plain frequencies, "
                  "Llama 3's scaling (\"llama3\"), for Gemma 2 and 3 \"linear\" and for gpt-oss "
                  "\"yarn\" only; dynamic, longrope and the others are not supported for %s", key,
                  type, f->class_name);
    } else {
        check_llama3(c, rs, key, mc);
    }
}

/* ---- filling ---- */

/* A scaling's original_max_position_embeddings (absent: def). */
static void put_original(hf_reader *c, const json_value *rs, long def) {
    char v[32];
    snprintf(v, sizeof v, "%ld", hfr_int(c, rs, "original_max_position_embeddings", def));
    hfr_put_key(c, 0, "model.rope_original_max_pos", rs, "original_max_position_embeddings", v);
}

/* YaRN's keys (gpt-oss; hf_config_check refuses it for a class without it). */
static void fill_yarn(hf_reader *c, const json_value *rs) {
    hfr_put_num(c, "model.rope_factor", rs, "factor", 32);
    hfr_put_num(c, "model.rope_beta_fast", rs, "beta_fast", 32);
    hfr_put_num(c, "model.rope_beta_slow", rs, "beta_slow", 1);
    hfr_put_key(c, 0, "model.rope_truncate", rs, "truncate",
                hfr_bool(c, rs, "truncate", 1) ? "true" : "false");
    put_original(c, rs, 4096);
}

/* Llama 3's keys. */
static void fill_llama3(hf_reader *c, const json_value *rs) {
    hfr_put_num(c, "model.rope_factor", rs, "factor", 8);
    hfr_put_num(c, "model.rope_low_freq_factor", rs, "low_freq_factor", 1);
    hfr_put_num(c, "model.rope_high_freq_factor", rs, "high_freq_factor", 4);
    put_original(c, rs, 8192);
}

/* Another type fills nothing: hf_config_check refuses it by name, as it refuses linear or YaRN for
 * a class without them. */
void hf_rope_fill(hf_reader *c, const hf_family *f) {
    const json_value *r = c->root;
    const char *key;
    const json_value *rs = rope_object(r, &key);
    int obj = rs && rs->type == JSON_OBJECT;
    const char *type = obj ? hfr_str(c, rs, "rope_type", hfr_str(c, rs, "type", "default")) : "default";
    if (obj && hfr_member(rs, "rope_theta")) hfr_put_num(c, "model.rope_theta", rs, "rope_theta", 10000);
    else hfr_put_num(c, "model.rope_theta", r, "rope_theta", f->def.theta);
    char from[96];
    snprintf(from, sizeof from, "%s of type \"%s\"", key, type);
    if (!strcmp(type, "default")) hfr_put(c, 0, "model.rope_scaling", "none", from);
    if (!strcmp(type, "linear")) {
        hfr_put(c, 0, "model.rope_scaling", "linear", from);
        hfr_put_num(c, "model.rope_factor", rs, "factor", 1);
    }
    if (!strcmp(type, "yarn")) {
        hfr_put(c, 0, "model.rope_scaling", "yarn", from);
        fill_yarn(c, rs);
    }
    if (!strcmp(type, "llama3")) {
        hfr_put(c, 0, "model.rope_scaling", "llama3", from);
        fill_llama3(c, rs);
    }
}
