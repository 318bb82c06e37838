/* config_table.h — internal to src/config: the key table shared by config_load.c (libconfig parsing,
 * --set; config_checks.c its validation, config_doc.c docs/config.md), config_table.c (the table),
 * config_values.c (lookup, defaults, value conversion, formatting) and config_print.c.
 * Not part of the public interface; include config/config.h elsewhere.
 */
#ifndef TSR_CONFIG_TABLE_H
#define TSR_CONFIG_TABLE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "config/config.h"

typedef enum {
    CFGK_INT = 0,  /* int or int64_t field (size tells) */
    CFGK_FLOAT,    /* double */
    CFGK_BOOL,     /* int 0/1 */
    CFGK_STRING,   /* char[size] */
    CFGK_ENUM,     /* int-sized enum, value = index into names */
    CFGK_DURATION, /* tsr_duration */
    CFGK_TYPE_COUNT
} cfgtab_type;

/* What a key does to the model (docs/config.md "Model keys"): every model.* key says, and the
 * adapters' keys that shape what a checkpoint holds (lora.rank, lora.alpha, lora.targets). */
typedef enum {
    CFGR_NONE = 0, /* not a model key */
    CFGR_SHAPE,    /* gives the model its tensors or what they compute: a resume keeps it
                    * (config_model_diff compares it with the checkpoint's) */
    CFGR_RUN,      /* a model.* key of how the model trains, not what it is (activation
                    * checkpointing, the document mask, the initialisation, the auxiliary losses'
                    * weights): a run may change it between checkpoints */
    CFGR_COUNT
} cfgtab_role;

typedef struct cfgtab_key {
    const char *name;      /* dotted: "optim.lr"; at most one level of grouping */
    cfgtab_type type;
    size_t offset, size;   /* of the field in tsr_config */
    const char *def;       /* default, written as on the --set command line; NULL = required */
    const char *example;   /* required keys: an example value in libconfig syntax */
    int64_t ilo, ihi;      /* CFGK_INT range; CFGK_STRING: ilo = minimum length */
    double lo, hi;         /* CFGK_FLOAT range */
    unsigned char lo_open, hi_open; /* float bounds exclusive */
    const char *const *names; /* CFGK_ENUM */
    const char *auto_word;  /* CFGK_INT: this word (bare or quoted) is also accepted and stored
                             * as auto_as, "decided at run time" (micro_batch = auto); NULL = none */
    int64_t auto_as;        /* the value the auto word is stored as (0 unless the key sets it:
                             * where 0 already means something, e.g. off) */
    int n_names;
    const char *doc;       /* one line, markdown */
    /* the model's keys (config_model.c): */
    cfgtab_role role;
    const char *via;       /* CFGR_SHAPE, compared as part of another key's effective value (the
                            * MLP width: expansion_ratio through model.intermediate_size); NULL:
                            * itself */
    int (*applies)(const tsr_config *c); /* CFGR_SHAPE: whether the key takes effect (rope_factor:
                                          * RoPE with a scaling); NULL: always. A key that does
                                          * not apply compares as unused, whatever its value */
    void (*value)(const tsr_config *c, char *buf, size_t n); /* its effective value where a
                                          * derived one stands for it (n_kv_head 0 = n_head);
                                          * NULL: the field */
    void (*layer)(const tsr_model_config *m, int l, char *buf, size_t n); /* a per-layer key:
                                          * layer l's effective value (compared layer by layer) */
} cfgtab_key;

/* The hooks the model rows of the table name (config_model.c): when a key applies, its
 * effective value, a per-layer key's value at a layer. */
int cfgm_rope(const tsr_config *c);
int cfgm_rope_scaled(const tsr_config *c);
int cfgm_llama3(const tsr_config *c);
int cfgm_original_ctx(const tsr_config *c);
int cfgm_yarn(const tsr_config *c);
int cfgm_learned(const tsr_config *c);
int cfgm_gelu_mlp(const tsr_config *c);
int cfgm_qk_norm(const tsr_config *c);
int cfgm_moe(const tsr_config *c);
int cfgm_moe_shared(const tsr_config *c);
int cfgm_gptoss(const tsr_config *c);
int cfgm_sliding(const tsr_config *c);
int cfgm_linear(const tsr_config *c);
int cfgm_mla(const tsr_config *c);
int cfgm_lora(const tsr_config *c);
void cfgm_kv_heads(const tsr_config *c, char *buf, size_t n);
void cfgm_head_size(const tsr_config *c, char *buf, size_t n);
void cfgm_mlp_width(const tsr_config *c, char *buf, size_t n);
void cfgm_expert_width(const tsr_config *c, char *buf, size_t n);
void cfgm_score_scale(const tsr_config *c, char *buf, size_t n);
void cfgm_positions(const tsr_config *c, char *buf, size_t n);
void cfgm_lora_targets(const tsr_config *c, char *buf, size_t n);
void cfgm_layer_kind(const tsr_model_config *m, int l, char *buf, size_t n);
void cfgm_layer_rope(const tsr_model_config *m, int l, char *buf, size_t n);

extern const cfgtab_key cfgtab_keys[];
extern const int cfgtab_n_keys;

/* A value to assign: from a libconfig setting (typed) or from the --set command line (text). */
typedef enum { CFGV_INT = 0, CFGV_FLOAT, CFGV_BOOL, CFGV_STRING, CFGV_TEXT, CFGV_GROUP, CFGV_LIST } cfgtab_vkind;
typedef struct cfgtab_value {
    cfgtab_vkind kind;
    int64_t i;
    double f;
    const char *s;         /* CFGV_STRING, CFGV_TEXT */
} cfgtab_value;

const cfgtab_key *cfgtab_find(const char *name);
/* Nonzero when name is a group ("model"). */
int cfgtab_is_group(const char *name);
/* The key or group closest to an unknown name, or NULL when nothing is close. */
const char *cfgtab_suggest(const char *name);
/* Stores v into the field of k. Returns NULL, or why v is rejected ("expected an integer",
 * "out of range, accepted [0, 1)" ...), written into why when it needs formatting. */
const char *cfgtab_assign(const cfgtab_key *k, tsr_config *cfg, const cfgtab_value *v, char *why,
                          size_t n);
/* Sets every key to its default (required keys to zero). */
void cfgtab_defaults(tsr_config *cfg);
/* "integer", "number", "boolean", "string", "one of learned | alibi", "duration". */
const char *cfgtab_type_name(const cfgtab_key *k, char *buf, size_t n);
/* What the key accepts, for docs/config.md: "[0, 1)", ">= 1", "`cpu`, `cuda`" ... */
const char *cfgtab_accepted(const cfgtab_key *k, char *buf, size_t n);
/* The field's value in libconfig syntax (strings quoted and escaped, floats with a '.' or 'e'). */
void cfgtab_format(const cfgtab_key *k, const tsr_config *cfg, char *buf, size_t n);
/* s as a libconfig string literal: in double quotes, '"' '\\' and control characters escaped. */
void cfgtab_quote(char *buf, size_t n, const char *s);
/* The same, written to f (the list keys' printers: config_mix.c, config_icl.c). */
void cfgtab_print_string(FILE *f, const char *s);
/* A libconfig value shown in an error message. */
void cfgtab_format_value(const cfgtab_value *v, char *buf, size_t n);
/* Shortest text that reads back as exactly v ("0.02", "1e-8", "4"). */
void cfgtab_format_double(char *buf, size_t n, double v);

#endif
