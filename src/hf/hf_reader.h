/* hf_reader.h — the one reader of a Hugging Face config.json (issue 80): its values typed and
 * bounded, each fault said once naming the file, the key and its value; the vocabulary of a
 * family's check (a value against the run's) and of its fill (a value as a run's model.* key);
 * and the text builder config.json is written with. Every family (hf_family.h) reads and writes
 * config.json through it, so that one fault reads alike in every class.
 */
#ifndef TSR_HF_READER_H
#define TSR_HF_READER_H

#include <stddef.h>

#include "config/config.h"
#include "json.h"

/* The most layers a config.json may give (a model past it: raise it): a bound of the untrusted
 * file, checked when it is read, before a model of that many layers is laid out. */
#define HF_MAX_LAYERS 1024

/* A config.json being read: checked against a run's model, or filled into a run's keys. */
typedef struct hf_reader {
    const char *path;       /* "DIR/config.json", named in every message */
    const json_value *root; /* the file's object (NULL until parsed) */
    int rc;                 /* the first fault's status; later faults are not reported */
    int notes;              /* say the training choices that differ from the model's (a run's import) */
    tsr_config_fill *fill;  /* filling: where the entries go (NULL: checking) */
} hf_reader;

/* A fault: said (unless one was before: only the first is), and its status kept in c->rc. */
void hfr_fault(hf_reader *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Member key of obj, or NULL (obj NULL or not an object: NULL). */
const json_value *hfr_member(const json_value *obj, const char *key);

/* The typed values of obj's key; absent: def (an integer's null too; a string's null is ""); a
 * value of another type is a fault (exit 2) naming it. */
long hfr_int(hf_reader *c, const json_value *obj, const char *key, long def);
double hfr_num(hf_reader *c, const json_value *obj, const char *key, double def);
int hfr_bool(hf_reader *c, const json_value *obj, const char *key, int def);
const char *hfr_str(hf_reader *c, const json_value *obj, const char *key, const char *def);

/* ---- checking: config.json's value against the run's (the run's key named, with the --set
 * that makes the run fit: exit 1; a value no model has: exit 2) ---- */

/* A size or count; note follows the run's value ("(0 = seq_len)"). */
void hfr_same(hf_reader *c, const char *key, long hf, const char *run_key, long run, const char *note);
/* A real (relative 1e-6: a float32 value printed to JSON). */
void hfr_same_num(hf_reader *c, const char *key, double hf, const char *run_key, double run);
void hfr_same_bool(hf_reader *c, const char *key, int hf, const char *run_key, int run);

/* ---- filling: one entry each, the run's key, its value and where config.json says so ---- */

/* run_key = value, from: what config.json says (after "config.json has "). */
void hfr_put(hf_reader *c, int soft, const char *run_key, const char *value, const char *from);
/* A key's value as obj states it, or transformers' default when absent. */
void hfr_put_key(hf_reader *c, int soft, const char *run_key, const json_value *obj,
                 const char *hf_key, const char *value);
/* A size or count of the root (absent: def); below 1 is no model's (exit 2). */
void hfr_put_int(hf_reader *c, int soft, const char *run_key, const char *hf_key, long def);
/* The layer count (absent: def): from 1 to HF_MAX_LAYERS (exit 2). */
void hfr_put_layers(hf_reader *c, const char *run_key, const char *hf_key, long def);
void hfr_put_num(hf_reader *c, const char *run_key, const json_value *obj, const char *hf_key,
                 double def);
void hfr_put_bool(hf_reader *c, const char *run_key, const char *hf_key, int def);
/* A value the model_type implies: from "model_type \"TYPE\" (what)". */
void hfr_put_word(hf_reader *c, const char *run_key, const char *word, const char *model_type,
                  const char *what);

/* ---- writing ---- */

/* config.json's text, written member by member. */
typedef struct hf_text {
    char s[8192];
    size_t n;
    int overflow;
} hf_text;
void hfr_add(hf_text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The shortest decimal that reads back as v, as a JSON float ("1e-05", "500000.0"). */
const char *hfr_double(char *buf, size_t cap, double v);

#endif
