/* json.h — a small strict JSON parser (JSON Lines for `tessera prep`, tokenizer.json, configs, logs).
 *
 * RFC 8259 without extensions: objects, arrays, strings (every escape, \uXXXX with surrogate pairs
 * combined; a lone surrogate, a raw control character or invalid UTF-8 is an error), numbers in
 * the JSON grammar (no leading zeros, no NaN/Infinity, no '+'), true/false/null. Whitespace around
 * the value is allowed; anything else after it is an error. Nesting is limited to JSON_MAX_DEPTH.
 *
 * Parsed values live in a json_doc arena: json_parse() resets it, so the values of one line stay
 * valid until the next json_parse() on the same doc or json_doc_free(). A doc is not shared
 * between threads; use one per thread.
 */
#ifndef TSR_JSON_H
#define TSR_JSON_H

#include <stddef.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 256

typedef enum json_type {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
    JSON_TYPE_COUNT
} json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    double num;             /* JSON_NUMBER */
    const char *str;        /* JSON_STRING: decoded UTF-8, NUL-terminated (may hold \u0000) */
    size_t len;             /* JSON_STRING: bytes in str; ARRAY/OBJECT: number of children */
    const char *key;        /* member of an object: its decoded key (NUL-terminated; may hold
                               \u0000 like str: compare key_len bytes, or json_key_is) */
    size_t key_len;
    json_value *child;      /* ARRAY/OBJECT: first element / member */
    json_value *next;       /* next sibling */
};

typedef struct json_block json_block;
typedef struct json_doc {
    json_block *blocks; /* arena: a list of blocks, reused after a reset */
    json_block *cur;
} json_doc;

typedef struct json_error {
    size_t pos;      /* byte offset of the fault in the line (0-based) */
    char msg[96];    /* what is wrong, e.g. "invalid escape '\q'" */
} json_error;

void json_doc_init(json_doc *d);
void json_doc_free(json_doc *d);

/* Parses the n bytes at s as one JSON value. Returns 0 and sets *root, or -1 and fills *err. */
int json_parse(json_doc *d, const char *s, size_t n, json_value **root, json_error *err);

/* Member `key` of an object (the last one when a key repeats), or NULL (also for non-objects).
 * A member whose key holds \u0000 is never returned for a C name that is a prefix of it. */
const json_value *json_get(const json_value *obj, const char *key);
/* Is member m's key exactly name (all key_len bytes)? */
int json_key_is(const json_value *m, const char *name);
/* Does member m's key hold no \u0000, so that it reads whole as a C string? Readers of formats
 * whose keys name things (tensors, files) refuse one that does not. */
int json_key_plain(const json_value *m);
/* Is v a string holding no \u0000 (str reads whole as a C string)? */
int json_str_plain(const json_value *v);
/* "null", "false", ..., for messages. */
const char *json_type_name(json_type t);
/* v as the file gives it, for messages that quote the input: a number in its shortest exact
 * form ("4", "4.0000000001"), a string quoted and escaped as JSON (cut to about 60 bytes with
 * "..."), true / false / null, "an array of N" or "an object of N members". Returns buf. */
const char *json_describe(const json_value *v, char *buf, size_t cap);
/* Writes s to f as a JSON string: quoted, '"' and '\\' escaped, control bytes as \u00XX. */
void json_fput_string(FILE *f, const char *s);

#endif
