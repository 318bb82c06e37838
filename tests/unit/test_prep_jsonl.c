/* test_prep_jsonl.c — the strict JSON Lines parser of `tessera prep` (src/base/json.c):
 * every escape, surrogate pairs, UTF-8 validation, numbers, nesting, and errors with positions. */
#include <string.h>

#include "json.h"
#include "tap.h"

static json_doc doc;

/* Parses s; returns the root or NULL (err filled). */
static json_value *parse(const char *s, json_error *err) {
    json_value *v = NULL;
    return json_parse(&doc, s, strlen(s), &v, err) == 0 ? v : NULL;
}

/* The decoded string of {"k": <s>} equals want (want_len bytes). */
static int string_is(const char *s, const char *want, size_t want_len) {
    json_error err;
    char line[256];
    snprintf(line, sizeof line, "{\"k\": %s}", s);
    json_value *v = parse(line, &err);
    if (!v) {
        tap_diag("%s: error at %zu: %s", s, err.pos, err.msg);
        return 0;
    }
    const json_value *k = json_get(v, "k");
    return k && k->type == JSON_STRING && k->len == want_len && !memcmp(k->str, want, want_len) &&
           k->str[want_len] == '\0';
}

/* Parsing s fails at byte pos with a message containing what. */
static int fails_at(const char *s, size_t pos, const char *what) {
    json_error err;
    if (parse(s, &err)) {
        tap_diag("%s: parsed, expected an error", s);
        return 0;
    }
    if (err.pos != pos || !strstr(err.msg, what)) {
        tap_diag("%s: error at %zu '%s', expected at %zu containing '%s'", s, err.pos, err.msg,
                 pos, what);
        return 0;
    }
    return 1;
}

static int number_is(const char *s, double want) {
    json_error err;
    json_value *v = parse(s, &err);
    return v && v->type == JSON_NUMBER && v->num == want;
}

int main(void) {
    json_doc_init(&doc);
    tap_plan(40);
    json_error err;

    /* strings */
    {
        json_value *v = parse("{\"a\\u0000b\": 1, \"c\\u0000\": 3}", &err);
        const json_value *m = v ? v->child : NULL;
        tap_ok(m && !json_get(v, "a") && !json_get(v, "c") && !json_key_plain(m) && !json_key_is(m, "a") &&
                   m->key_len == 3,
               "a key holding \\u0000 is kept whole (3 bytes) and never found by its prefix");
        v = parse("{\"a\\u0000b\": 1, \"a\": 2}", &err);
        const json_value *a = v ? json_get(v, "a") : NULL;
        tap_ok(a && a->num == 2 && json_key_plain(a) && json_key_is(a, "a"), "beside it, the key \"a\" is found");
    }
    tap_ok(string_is("\"plain\"", "plain", 5), "plain string");
    tap_ok(string_is("\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"", "\" \\ / \b \f \n \r \t", 15),
           "the eight short escapes");
    tap_ok(string_is("\"\\u00e9\\u20AC\"", "\xC3\xA9\xE2\x82\xAC", 5), "\\u escapes to UTF-8 (2, 3 bytes)");
    tap_ok(string_is("\"\\ud83d\\ude00\"", "\xF0\x9F\x98\x80", 4), "surrogate pair -> U+1F600");
    tap_ok(string_is("\"a\\u0000b\"", "a\0b", 3), "\\u0000 kept inside the string");
    tap_ok(string_is("\"\xE6\x97\xA5\xF0\x9F\x98\x80\"", "\xE6\x97\xA5\xF0\x9F\x98\x80", 7),
           "raw UTF-8 passes through");
    tap_ok(string_is("\"\"", "", 0), "empty string");

    /* numbers and literals */
    tap_ok(number_is("0", 0) && number_is("-0", 0) && number_is("12", 12) &&
               number_is("-3.25", -3.25) && number_is("1e3", 1000) && number_is("2.5E-1", 0.25) &&
               number_is("1E+2", 100),
           "numbers in the JSON grammar");
    {
        json_value *v = parse(" [true, false, null] ", &err);
        tap_ok(v && v->type == JSON_ARRAY && v->len == 3 && v->child->type == JSON_TRUE &&
                   v->child->next->type == JSON_FALSE &&
                   v->child->next->next->type == JSON_NULL,
               "literals in an array, surrounding whitespace allowed");
    }

    /* nesting and lookup */
    {
        json_value *v = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                              "{\"role\":\"assistant\",\"content\":\"yo\",\"x\":{\"y\":[[],{}]}}],"
                              "\"n\":2}", &err);
        const json_value *m = json_get(v, "messages");
        int ok = v && m && m->type == JSON_ARRAY && m->len == 2;
        if (ok) {
            const json_value *second = m->child->next;
            const json_value *role = json_get(second, "role");
            const json_value *x = json_get(second, "x");
            ok = role && !strcmp(role->str, "assistant") && x && x->type == JSON_OBJECT &&
                 json_get(x, "y")->len == 2 && json_get(v, "n")->num == 2 &&
                 json_get(v, "missing") == NULL && json_get(m, "role") == NULL;
        }
        tap_ok(ok, "nested arrays and objects; json_get on objects only");
    }
    {
        json_value *v = parse("{\"a\":1,\"a\":2}", &err);
        tap_ok(v && json_get(v, "a")->num == 2, "a repeated key: the last one wins");
    }
    {
        char deep[2 * JSON_MAX_DEPTH + 8];
        int k = 0;
        for (int i = 0; i < JSON_MAX_DEPTH; i++) deep[k++] = '[';
        for (int i = 0; i < JSON_MAX_DEPTH; i++) deep[k++] = ']';
        deep[k] = '\0';
        tap_ok(parse(deep, &err) != NULL, "nesting of exactly JSON_MAX_DEPTH levels parses");
        memmove(deep + 1, deep, (size_t)k + 1);
        deep[0] = '[';
        deep[k + 1] = ']';
        deep[k + 2] = '\0';
        tap_ok(fails_at(deep, JSON_MAX_DEPTH, "nesting deeper"), "one level deeper fails");
    }

    /* errors, with the byte position of the fault */
    tap_ok(fails_at("{\"text\": \"abc}", 9, "unterminated string"), "unterminated string");
    tap_ok(fails_at("{\"t\": \"a\\qb\"}", 8, "invalid escape '\\q'"), "invalid escape");
    tap_ok(fails_at("{\"t\": \"\\u12G4\"}", 11, "4 hex digits"), "bad \\u hex digit");
    tap_ok(fails_at("{\"t\": \"\\u12\"}", 11, "4 hex digits"), "short \\u escape");
    tap_ok(fails_at("{\"t\": \"\\ud83d\"}", 7, "not followed by a low surrogate"),
           "lone high surrogate");
    tap_ok(fails_at("{\"t\": \"\\ud83dx\"}", 7, "not followed by a low surrogate"),
           "high surrogate followed by a character");
    tap_ok(fails_at("{\"t\": \"\\ud83d\\u0041\"}", 13, "not a low surrogate"),
           "high surrogate followed by a non-surrogate escape");
    tap_ok(fails_at("{\"t\": \"\\ude00\"}", 7, "lone low surrogate"), "lone low surrogate");
    tap_ok(fails_at("{\"t\": \"a\tb\"}", 8, "control character"), "raw tab in a string");
    tap_ok(fails_at("{\"t\": \"a\xC3(\"}", 8, "invalid UTF-8"), "invalid UTF-8 continuation");
    tap_ok(fails_at("{\"t\": \"\xC0\xAF\"}", 7, "invalid UTF-8"), "overlong UTF-8");
    tap_ok(fails_at("{\"t\": \"\xED\xA0\x80\"}", 7, "invalid UTF-8"), "UTF-8-encoded surrogate");
    tap_ok(fails_at("{\"a\":1,}", 7, "member name"), "trailing comma in an object");
    tap_ok(fails_at("[1,2,]", 5, "expected a value"), "trailing comma in an array");
    tap_ok(fails_at("{\"a\" 1}", 5, "expected ':'"), "missing colon");
    tap_ok(fails_at("{\"a\":1 \"b\":2}", 7, "expected ',' or '}'"), "missing comma");
    tap_ok(fails_at("{a:1}", 1, "member name in quotes"), "unquoted key");
    tap_ok(fails_at("{\"a\":01}", 6, "expected ',' or '}', found '1'"),
           "leading zero");
    tap_ok(fails_at("[1.]", 3, "digit after '.'") && fails_at("[1e]", 3, "exponent") &&
               fails_at("[+1]", 1, "expected a value") && fails_at("[-]", 2, "expected a digit"),
           "malformed numbers");
    tap_ok(fails_at("[NaN]", 1, "expected a value") && fails_at("[tru]", 1, "invalid literal"),
           "NaN and truncated literals");
    tap_ok(fails_at("{\"a\":1} x", 8, "after the value"), "garbage after the value");
    tap_ok(fails_at("", 0, "end of line") && fails_at("   ", 3, "end of line"), "empty line");
    tap_ok(fails_at("{\"a\":[1,2", 9, "expected ',' or ']'"), "unclosed array at end of line");
    {
        /* errors and successes reuse the arena: a good line after a bad one parses fine */
        json_value *v = parse("{\"text\": \"again\"}", &err);
        tap_ok(v && !strcmp(json_get(v, "text")->str, "again"), "the doc is reusable after errors");
    }
    tap_ok(!strcmp(json_type_name(JSON_OBJECT), "object") &&
               !strcmp(json_type_name(JSON_NUMBER), "number"),
           "json_type_name");
    json_doc_free(&doc);
    return tap_done();
}
