/* test_jinja.c — the chat-template Jinja subset (src/chat/jinja.h).
 *
 *   test_jinja                         unit checks (TAP): each construct, hf's quirks, errors with
 *                                      their line:column, malformed templates never crash
 *   test_jinja --render TMPL CTX...    driver for tests/chat/test_chat_templates.sh: renders the
 *                                      template file with the JSON context files (objects, merged
 *                                      in order) to stdout; on an error prints
 *                                      "error: STATUS: LINE:COL: MESSAGE" to stdout and exits 2
 *   test_jinja --render-config TOKENIZER_CONFIG CTX...   the same with the chat_template and
 *                                      special tokens of a tokenizer_config.json (chat_config.h)
 *   test_jinja --render-each CTX TMPL...   each template with the one context into TMPL.out, as
 *                                      --render prints it (exit 1 when a file cannot be read or
 *                                      written; a render error is the file's "error: " line)
 * With TEST_JINJA_STATS set, --render prints the steps and peak bytes the render used to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/chat_config.h"
#include "chat/jinja.h"
#include "tap.h"

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf) *n = len;
    return buf;
}

/* The JSON context files paths[0..n): their documents (docs, texts) and roots (ctx, one slot
 * free before them for a config's variables); 0, or 1 after saying which one failed. */
static int load_contexts(char **paths, int n, json_doc *docs, char **texts, const json_value **ctx) {
    for (int i = 0; i < n; i++) {
        size_t cn;
        json_error je;
        json_value *root;
        json_doc_init(&docs[i]);
        texts[i] = read_file(paths[i], &cn);
        if (!texts[i] || json_parse(&docs[i], texts[i], cn, &root, &je)) {
            fprintf(stderr, "test_jinja: %s: %s\n", paths[i], texts[i] ? je.msg : "cannot read");
            return 1;
        }
        ctx[i + 1] = root;
    }
    return 0;
}

/* Renders the template file (from_config: the chat_template of that tokenizer_config.json) with
 * ctx[1..n] into f: the text, or "error: STATUS: LINE:COL: MESSAGE"; the status (-1: unreadable). */
static int render_to(FILE *f, const char *path, int from_config, const json_value **ctx, int n) {
    size_t len = 0, out_len = 0;
    char *src = from_config ? NULL : read_file(path, &len), *out = NULL;
    if (!from_config && !src) return fprintf(stderr, "test_jinja: cannot read %s\n", path), -1;
    jinja_template *t = NULL;
    jinja_error err;
    chat_config cc = {0};
    int rc;
    if (from_config) {
        rc = chat_config_load(path, &cc, &err);
        if (rc == JINJA_OK && !cc.tpl) rc = JINJA_ECONTEXT, snprintf(err.msg, sizeof err.msg, "no chat_template");
        ctx[0] = cc.vars;
        if (rc == JINJA_OK) rc = jinja_render(cc.tpl, ctx, (size_t)n + 1, &out, &out_len, &err);
    } else {
        rc = jinja_compile(src, len, &t, &err);
        if (rc == JINJA_OK) rc = jinja_render(t, ctx + 1, (size_t)n, &out, &out_len, &err);
    }
    if (rc == JINJA_OK) fwrite(out, 1, out_len, f);
    else fprintf(f, "error: %s: %d:%d: %s\n", jinja_status_name(rc), err.line, err.col, err.msg);
    if (getenv("TEST_JINJA_STATS")) /* what the render used of its budget */
        fprintf(stderr, "steps %llu, peak bytes %llu\n", err.steps, err.peak_bytes);
    free(out);
    jinja_free(t);
    if (from_config) chat_config_free(&cc);
    free(src);
    return rc;
}

/* --render, --render-config: one template, the contexts argv[3..]; --render-each CONTEXT
 * TEMPLATE...: each template with that one context into TEMPLATE.out (one process for many: the
 * random templates of test_chat_templates.sh, 600 starts before) */
static int render_files(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_jinja --render TEMPLATE|--render-config TOKENIZER_CONFIG [CONTEXT.json ...]\n"
                        "       test_jinja --render-each CONTEXT.json TEMPLATE...\n");
        return 1;
    }
    const int each = !strcmp(argv[1], "--render-each"), nctx = each ? 1 : argc - 3;
    json_doc *docs = calloc((size_t)nctx + 1, sizeof *docs);
    const json_value **ctx = calloc((size_t)nctx + 2, sizeof *ctx);
    char **texts = calloc((size_t)nctx + 1, sizeof *texts);
    int rc = docs && ctx && texts ? load_contexts(argv + (each ? 2 : 3), nctx, docs, texts, ctx) : 1;
    for (int i = 3; each && rc != 1 && i < argc; i++) {
        char out[4096];
        snprintf(out, sizeof out, "%s.out", argv[i]);
        FILE *f = fopen(out, "wb");
        if (!f || render_to(f, argv[i], 0, ctx, nctx) < 0) rc = 1;
        if (f && fclose(f) != 0) rc = 1;
    }
    if (!each && rc != 1) rc = render_to(stdout, argv[2], !strcmp(argv[1], "--render-config"), ctx, nctx) == JINJA_OK ? 0 : 2;
    for (int i = 0; i < nctx && docs && texts; i++) {
        json_doc_free(&docs[i]);
        free(texts[i]);
    }
    free(docs);
    free(ctx);
    free(texts);
    return rc;
}

/* ---- unit checks ---- */

/* Renders template t with the JSON object ctx; returns the status, *out (caller frees) set. */
static int render(const char *t, const char *ctx, char **out, jinja_error *err) {
    json_doc doc;
    json_error je;
    json_value *root = NULL;
    jinja_template *tpl = NULL;
    *out = NULL;
    json_doc_init(&doc);
    if (json_parse(&doc, ctx, strlen(ctx), &root, &je)) {
        tap_diag("bad test context %s: %s", ctx, je.msg);
        json_doc_free(&doc);
        return -1;
    }
    size_t n;
    const json_value *c = root;
    int rc = jinja_compile(t, strlen(t), &tpl, err);
    if (rc == JINJA_OK) rc = jinja_render(tpl, &c, 1, out, &n, err);
    jinja_free(tpl);
    json_doc_free(&doc);
    return rc;
}

/* Expected renderings, each produced by @huggingface/jinja 0.5.11 (node, TZ=UTC,
 * TSR_JINJA_NOW=1721952000 through tests/chat/render_ref.cjs); "error: ..." where hf fails. */
static const struct {
    const char *what, *tmpl, *ctx, *want;
} cases[] = {
    {"whitespace control",
     "a  {{- ' b ' -}}  c",
     "{}",
     "a b c"},
    {"trim_blocks drops the newline after a tag",
     "{% if true %}\nx\n{% endif %}\ny",
     "{}",
     "x\ny"},
    {"lstrip_blocks drops indentation before a tag",
     "  {% if true %}y{% endif %}\n  {{ 'z' }}",
     "{}",
     "y  z"},
    {"one trailing newline is dropped",
     "x\n\n",
     "{}",
     "x\n"},
    {"comments, with whitespace control",
     "a {# c #} b {#- c -#} c",
     "{}",
     "a  bc"},
    {"generation markers vanish",
     "a {% generation %}b{%- endgeneration %} c",
     "{}",
     "a b c"},
    {"integer and float arithmetic",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 7 / 2 }} {{ 2 ** 3 }} {{ 2 ** -1 }} {{ 1.5 + 1 }} {{ 1.0 }} {{ 3 * 1.0 }} {{ -0.0 }}",
     "{}",
     "3 -4 1 3.5 8 0.5 2.5 1.0 3.0 -0.0"},
    {"JavaScript number printing",
     "{{ 0.1 + 0.2 }} {{ 10.0 ** 21 }} {{ 2 ** 70 }} {{ 1 / 3 }} {{ 0.000001 }} {{ 1 / 0 }}",
     "{}",
     "0.30000000000000004 1e+21 1.1805916207174113e+21 0.3333333333333333 0.000001 Infinity"},
    {"~ and + concatenate (a float joins as JS prints it)",
     "{{ 'a' ~ 1 ~ 1.0 ~ true ~ [1, 'x'] }} {{ 'a' + 1.0 }} {{ 1 + 'b' }}",
     "{}",
     "a11true1,x a1 1b"},
    {"and/or return operands, not",
     "{{ 1 < 2 and 'x' or 'y' }} {{ not 0 }} {{ none or 'd' }} {{ 0 and 1 }} {{ not [] }}",
     "{}",
     "x true d 0 true"},
    {"in / not in on lists, strings, dicts",
     "{{ 2 in [1, 2] }} {{ 'b' in 'abc' }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' in y }} {{ 'x' not in y }}",
     "{}",
     "true true true true false true"},
    {"== is JavaScript's loose equality",
     "{{ 1 == 1.0 }} {{ '1' == 1 }} {{ none == undefined_name }} {{ [] == '' }} {{ 'a' != 'b' }} {{ true == 1 }}",
     "{}",
     "true true true true true true"},
    {"ternaries chain; a select without else is undefined",
     "[{{ 'a' if false else 'b' if false else 'c' }}][{{ 'x' if false }}]",
     "{}",
     "[c][]"},
    {"is tests",
     "{{ x is defined }} {{ none is none }} {{ 's' is string }} {{ 1.5 is number }} {{ 1 is integer }} {{ {} is mapping }} {{ [] is iterable }} {{ 's' is sequence }} {{ true is boolean }} {{ false is false }} {{ 3 is odd }} {{ 4 is even }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 1 is not string }}",
     "{}",
     "false true true true true true true true true true true true true true true"},
    {"slicing with negative steps and bounds",
     "{{ [1,2,3,4,5][1:4] }} {{ [1,2,3,4,5][::-1] }} {{ [1,2,3,4,5][-2:] }} {{ [1,2,3,4,5][::-2] }} {{ [1,2,3,4,5][3:0:-1] }} {{ 'h\303\251llo'[1:3] }} {{ 'abc'[::-1] }} {{ [1,2,3][5:] }}",
     "{}",
     "[2, 3, 4] [5, 4, 3, 2, 1] [4, 5] [5, 3, 1] [4, 3, 2] \303\251l cba []"},
    {"indexing, negative indexes, undefined members",
     "{{ [1,2,3][-1] }} {{ 'abc'[1] }} [{{ x.y.z }}] [{{ [1][3] }}] {{ d.a }} {{ d['a'] }}",
     "{\"d\": {\"a\": \"A\"}}",
     "3 b [] [] A A"},
    {"dict and list literals print as JSON",
     "{{ {'a': 1, 'b': [true, none, 1.5]} }} {{ [] }} {{ {} }}",
     "{}",
     "{\"a\": 1, \"b\": [true, null, 1.5]} [] {}"},
    {"string filters",
     "{{ '  x y  '|trim }}|{{ 'aBc'|upper }}|{{ 'aBc'|lower }}|{{ 'hello wOrld-x_y'|title }}|{{ 'hello World'|capitalize }}|{{ 'abc'|length }}",
     "{}",
     "x y|ABC|abc|Hello WOrld-X_y|Hello World|3"},
    {"array filters",
     "{{ [3,1,3]|first }} {{ [3,1,3]|last }} {{ [1,2]|reverse|list }} {{ [3,1,3,1]|unique|list }} {{ [1,2]|length }} {{ ['a','b']|join }} {{ ['a','b']|join(', ') }} {{ 'abc'|join('-') }}",
     "{}",
     "3 3 [2, 1] [3, 1] 2 ab a, b a-b-c"},
    {"tojson escapes and options",
     "{{ 'q\"\\\\ \\n\\t\\x01 \303\251'|tojson }} {{ {'b': [1, {'c': none}], 'a': 1.0}|tojson(indent=2) }} {{ '\303\251\360\237\230\200'|tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }} {{ [[], {}]|tojson(indent=2) }}",
     "{}",
     "\"q\\\"\\\\ \\n\\t\\u0001 \303\251\" {\n  \"b\": [\n    1,\n    {\n      \"c\": null\n    }\n  ],\n  \"a\": 1\n} \"\\u00e9\\ud83d\\ude00\" {\"a\":2,\"b\":1} [\n  [],\n  {}\n]"},
    {"default",
     "{{ x|default('d') }} {{ ''|default('e', true) }} {{ ''|default('e') }} [{{ none|default('n') }}] {{ 0|default(5, boolean=true) }}",
     "{}",
     "d e  [] 5"},
    {"items, keys, values, get",
     "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %} {{ d.keys()|join(',') }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'zz') }} [{{ d.get('z') }}] {{ d|length }}",
     "{\"d\": {\"a\": 1, \"b\": 2}}",
     "a=1;b=2; a1b2 a,b [1, 2] 1 zz [] 2"},
    {"int and float filters",
     "{{ '42'|int + 1 }} {{ ' 3.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '2.5e1x'|float }} {{ 5.7|int }} {{ true|int }} {{ 2|float }} {{ -3|abs }} {{ 3|string ~ 'x' }}",
     "{}",
     "43 3 0 7 25.0 5 1 2.0 3 3x"},
    {"string methods",
     "{{ 'a,b,,c'.split(',') }} {{ 'a b  c'.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }} [{{ '\\n x \\n'.strip('\\n') }}] [{{ '  x '.lstrip() }}] [{{ ' x  '.rstrip() }}] {{ 'ab'.upper() }} {{ 'x'.replace('', '-') }}",
     "{}",
     "[\"a\", \"b\", \"\", \"c\"] [\"a\", \"b\", \"c\"] [\"a\", \"b,c\"] bba true true [x] [x ] [ x] AB -x-"},
    {"replace and indent filters",
     "{{ 'a-b-c'|replace('-', '+') }} {{ 'a-b-c'|replace('-', '', 1) }}\n{{ 'l1\\nl2\\n\\nl4'|indent(2) }}\n{{ 'l1\\nl2'|indent(3, true) }}",
     "{}",
     "a+b+c ab-c\nl1\n  l2\n\n  l4\n   l1\n   l2"},
    {"map(attribute) and selectattr/rejectattr",
     "{{ m|map(attribute='role')|join(',') }} {{ m|selectattr('role', 'equalto', 'user')|length }} {{ m|rejectattr('role', 'equalto', 'user')|map(attribute='c')|list }} {{ m|map(attribute='z', default='-')|join }} {{ m|selectattr('c')|length }}",
     "{\"m\": [{\"role\": \"user\", \"c\": 1}, {\"role\": \"bot\", \"c\": 0}, {\"role\": \"user\"}]}",
     "user,bot,user 2 [0] --- 1"},
    {"loop variables",
     "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
     "{}",
     "1032truefalse3b;2121falsefalse3ac;3210falsetrue3b;"},
    {"for: else, if filter, break, continue, objects",
     "{% for x in [] %}no{% else %}empty{% endfor %} {% for x in [1,2,3,4] if x is even %}{{ x }}{% endfor %} {% for x in [1,2,3,4,5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %} {% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}",
     "{}",
     "empty 24 13 ab"},
    {"set in a loop stays in the loop; namespace attributes escape",
     "{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in [1,2,3] %}{% set n = n + x %}{% set ns.n = ns.n + x %}{% endfor %}{{ n }} {{ ns.n }} {{ ns }}",
     "{}",
     "0 6 {\"n\": 6}"},
    {"set block and tuple unpacking",
     "{% set a, b = 1, 2 %}{% set blk %}[{{ a }}{{ b }}]{% endset %}{{ blk|upper }}{{ blk|length }}",
     "{}",
     "[12]4"},
    {"macros with defaults and keyword arguments",
     "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }} {{ m('x', b='y') }}",
     "{}",
     "1B 12 1B3 xy"},
    {"if / elif / else",
     "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %} {% endfor %}",
     "{}",
     "one two other "},
    {"filter blocks",
     "{% filter upper %}abc {{ 'd' }}{% endfilter %}",
     "{}",
     "ABC D"},
    {"JSON context: integers, floats, key order, nesting",
     "{{ a }} {{ b }} {{ a|tojson }} {{ a is integer }} {{ d|tojson }} {{ d['1'] }} {{ l[1].x }}",
     "{\"a\": 1.0, \"b\": 1.5, \"d\": {\"b\": 1, \"2\": 2, \"1\": 3, \"b\": 4}, \"l\": [0, {\"x\": \"X\"}]}",
     "1 1.5 1 true {\"1\": 3, \"2\": 2, \"b\": 4} 3 X"},
    {"keys holding \\u0000 sort by all their bytes (a prefix first)",
     "{{ d|tojson(sort_keys=true) }}",
     "{\"d\": {\"a\\u0000c\": 1, \"a\": 2, \"a\\u0000b\": 3}}",
     "{\"a\": 2, \"a\\u0000b\": 3, \"a\\u0000c\": 1}"},
    {"Unicode case mapping and UTF-16 lengths",
     "{{ '\303\244\303\266\303\274 \303\237 \317\203'|upper }} {{ '\303\200\303\211\316\221'|lower }} {{ 'e\360\237\230\200'|length }} {{ '\303\251t\303\251'|capitalize }} {{ '\344\275\240 \345\245\275'.split() }}",
     "{}",
     "\303\204\303\226\303\234 SS \316\243 \303\240\303\251\316\261 3 \303\211t\303\251 [\"\344\275\240\", \"\345\245\275\"]"},
    {"strftime_now uses TSR_JINJA_NOW",
     "{{ strftime_now('%Y-%m-%d %H:%M %b %B %% %j') }}",
     "{}",
     "2024-07-26 00:00 Jul July % %j"},
    {"sort: stable, reverse, case, attribute paths",
     "{{ [3, 1, 2.5, true]|sort }} {{ ['b', 'A', 'a', 'C']|sort }} {{ ['b', 'A', 'a', 'C']|sort(case_sensitive=true) }} {{ [1, 3, 2]|sort(true) }} {{ m|sort(attribute='k')|map(attribute='n')|join }} {{ m|sort(reverse=true, attribute='k')|map(attribute='n')|join }} {{ m|sort(attribute='l.0')|map(attribute='n')|join }}",
     "{\"m\": [{\"k\": 2, \"n\": \"a\", \"l\": [3]}, {\"k\": 1, \"n\": \"b\", \"l\": [1]}, {\"k\": 2, \"n\": \"c\", \"l\": [2]}]}",
     "[1, true, 2.5, 3] [\"A\", \"a\", \"b\", \"C\"] [\"A\", \"C\", \"a\", \"b\"] [3, 2, 1] bac acb bca"},
    {"dictsort",
     "{{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }} {{ d.dictsort(true) }}",
     "{\"d\": {\"b\": 1, \"a\": 3, \"C\": 2}}",
     "[[\"a\", 3], [\"b\", 1], [\"C\", 2]] [[\"b\", 1], [\"C\", 2], [\"a\", 3]] [[\"C\", 2], [\"b\", 1], [\"a\", 3]] [[\"C\", 2], [\"a\", 3], [\"b\", 1]]"},
    {"sort of mixed types fails",
     "{{ [1, 'a']|sort }}",
     "{}",
     "error: Cannot compare different types: StringValue and IntegerValue\n"},
    {"string escapes: short ones, \\x, \\u and surrogate pairs, adjacent literals",
     "{{ 'a\\tb\\'c\\\"d\\\\e\\x41\\u00e9\\ud83d\\ude00' }} {{ 'x' \"y\" }} {{ \"it's\" }}",
     "{}",
     "a\tb'c\"d\\eA\303\251\360\237\230\200 xy it's"},
    {"namespace from a dict, from pairs, with keywords",
     "{% set a = namespace({'x': 1}, y=2) %}{% set b = namespace([['k', 'v'], 'pq'], k='w') %}{{ a.x }}{{ a.y }} {{ b.k }}{{ b.p }} {{ b }}",
     "{}",
     "12 wq {\"k\": \"w\", \"p\": \"q\"}"},
    {"a for loop unpacks lists only; set unpacks tuples too",
     "{% set p, q = (1, 2) %}{{ p }}{{ q }}{% for a, b in [(1, 2)] %}{{ a }}{% endfor %}",
     "{}",
     "error: Cannot unpack non-iterable type: TupleValue\n"},
    {"last of an empty list fails, as in hf",
     "{{ []|last }}",
     "{}",
     "error: Cannot read properties of undefined (reading 'type')\n"},
    {"negative string indexes count characters; float() reads no inf or nan",
     "{{ 'a\360\237\230\200b'[-1] }}{{ 'a\303\251b'[-2] }} {{ 'inf'|float }} {{ 'nan'|float(1.5) }} {{ ' -2.5e1x'|float }} {{ '0x1A'|float }} {{ '0x1A'|int }}",
     "{}",
     "b\303\251 0.0 1.5 -25.0 0.0 0"},
    {"range and list concatenation",
     "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }} {{ [1] + [2, 3] }}",
     "{}",
     "[0, 1, 2] [1, 3, 5] [3, 2, 1] [1, 2, 3]"},
};

static int renders_as(size_t i) {
    char *out;
    jinja_error err;
    int rc = render(cases[i].tmpl, cases[i].ctx, &out, &err);
    int ok;
    if (!strncmp(cases[i].want, "error: ", 7)) {
        ok = rc != JINJA_OK && rc != -1;
    } else {
        ok = rc == JINJA_OK && !strcmp(out, cases[i].want);
        if (rc != JINJA_OK) tap_diag("%s %d:%d: %s", jinja_status_name(rc), err.line, err.col, err.msg);
        else if (!ok) tap_diag("got  [%s]\n# want [%s]", out, cases[i].want);
    }
    free(out);
    return ok;
}

/* Rendering t with ctx fails with status, at line:col (0: not checked), with msg in the message. */
static int fails(const char *t, const char *ctx, int status, int line, int col, const char *msg) {
    char *out;
    jinja_error err;
    int rc = render(t, ctx, &out, &err);
    free(out);
    int ok = rc == status && err.status == status && (!line || (err.line == line && err.col == col)) &&
             strstr(err.msg, msg) != NULL;
    if (!ok)
        tap_diag("got %s %d:%d '%s', want %s %d:%d '%s'", jinja_status_name(rc), err.line, err.col,
                 err.msg, jinja_status_name(status), line, col, msg);
    return ok;
}

/* Templates that fail: status, position (0:0 not checked) and message, as the reference gives them. */
static const struct {
    const char *what, *tmpl, *ctx;
    int status, line, col;
    const char *msg;
} error_cases[] = {
    {"unclosed if: syntax error at the end, naming endif", "{% if x %}a", "{}", JINJA_ESYNTAX, 1, 12,
     "expected {% endif %}"},
    {"unknown statement at 2:4", "ab\n{% foo %}", "{}", JINJA_ESYNTAX, 2, 4, "Unknown statement type: foo"},
    {"unexpected character at its column", "{{ a $ b }}", "{}", JINJA_ESYNTAX, 1, 6, "Unexpected character: $"},
    {"unterminated string at its opening quote", "x\n  {{ 'abc }}", "{}", JINJA_ESYNTAX, 2, 6,
     "Unexpected end of input"},
    {"missing iterable", "{% for x in %}{% endfor %}", "{}", JINJA_ESYNTAX, 1, 13, "Unexpected token"},
    {"runtime error at the operator", "{{ 1 + none }}", "{}", JINJA_ERUNTIME, 1, 6,
     "Cannot perform operation on null values"},
    {"filter on the wrong type at the pipe", "\n{{ [1]|trim }}", "{}", JINJA_ERUNTIME, 2, 7,
     "Unknown ArrayValue filter: trim"},
    {"calling an undefined name", "{{ foo() }}", "{}", JINJA_ERUNTIME, 1, 7, "not a function: got UndefinedValue"},
    {"raise_exception: its message, status raise", "{% if true %}\n{{ raise_exception('bad ' ~ role) }}{% endif %}",
     "{\"role\": \"x\"}", JINJA_ERAISE, 2, 19, "bad x"},
    {"unknown test", "{{ 1 is foo }}", "{}", JINJA_ERUNTIME, 1, 6, "Unknown test: foo"},
    {"break outside a loop", "a{% break %}", "{}", JINJA_ERUNTIME, 0, 0, "outside a for loop"},
    {"context must be an object", "x", "[1]", JINJA_ECONTEXT, 0, 0, "expected a JSON object"},
    {"context key clashing with a global", "x", "{\"true\": 1}", JINJA_ECONTEXT, 0, 0, "'true' clashes"},
    {"endless macro recursion is stopped", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "{}",
     JINJA_ERUNTIME, 0, 0, "nested too deeply"},
    {"macro called with too many arguments", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{}", JINJA_ERUNTIME,
     0, 0, "takes not more than 1"},
};

/* One compiled template, rendered twice; contexts merge in order (later wins). */
static int reuse_and_merge(void) {
    static const char *const src = "{{ a }}{{ b }}";
    const char *js[3] = {"{\"a\": 1, \"b\": 2}", "{\"b\": 3}", "{\"a\": \"x\"}"};
    json_doc docs[3];
    const json_value *ctx[3];
    json_error je;
    for (int i = 0; i < 3; i++) {
        json_value *v;
        json_doc_init(&docs[i]);
        if (json_parse(&docs[i], js[i], strlen(js[i]), &v, &je)) return 0;
        ctx[i] = v;
    }
    jinja_template *t;
    jinja_error err;
    char *o1 = NULL, *o2 = NULL;
    size_t n1 = 0, n2 = 0;
    int ok = jinja_compile(src, strlen(src), &t, &err) == JINJA_OK &&
             jinja_render(t, ctx, 2, &o1, &n1, &err) == JINJA_OK &&
             jinja_render(t, ctx + 1, 2, &o2, &n2, &err) == JINJA_OK && n1 == 2 &&
             !strcmp(o1, "13") && n2 == 2 && !strcmp(o2, "x3");
    if (!ok) tap_diag("got '%s' and '%s'", o1 ? o1 : "(null)", o2 ? o2 : "(null)");
    free(o1);
    free(o2);
    jinja_free(t);
    for (int i = 0; i < 3; i++) json_doc_free(&docs[i]);
    return ok;
}

/* jinja_render_ex: messages cut to a prefix, add_generation_prompt forced (prep's loss mask
 * renders prefixes of a conversation this way) */
static int overrides(void) {
    const char *src = "{% for m in messages %}{{ m.role }};{% endfor %}{{ add_generation_prompt }}";
    const char *js = "{\"messages\": [{\"role\": \"a\"}, {\"role\": \"b\"}], \"add_generation_prompt\": false}";
    json_doc doc;
    json_value *v;
    json_error je;
    json_doc_init(&doc);
    if (json_parse(&doc, js, strlen(js), &v, &je)) return 0;
    const json_value *ctx = v;
    jinja_template *t;
    jinja_error err;
    char *o[4] = {0};
    size_t n;
    const jinja_overrides ov[4] = {{-1, -1}, {1, 1}, {0, -1}, {5, 0}};
    int ok = jinja_compile(src, strlen(src), &t, &err) == JINJA_OK;
    for (int i = 0; ok && i < 4; i++) ok = jinja_render_ex(t, &ctx, 1, &ov[i], &o[i], &n, &err) == JINJA_OK;
    ok = ok && !strcmp(o[0], "a;b;false") && !strcmp(o[1], "a;true") && !strcmp(o[2], "false") &&
         !strcmp(o[3], "a;b;false");
    if (!ok) tap_diag("got %s | %s | %s | %s (%s)", o[0], o[1], o[2], o[3], err.msg);
    const char *no_msgs = "{\"x\": 1}";
    json_doc_free(&doc);
    json_doc_init(&doc);
    char *bad = NULL;
    if (!json_parse(&doc, no_msgs, strlen(no_msgs), &v, &je)) {
        ctx = v;
        ok = ok && jinja_render_ex(t, &ctx, 1, &ov[1], &bad, &n, &err) == JINJA_ECONTEXT && !bad;
    }
    for (int i = 0; i < 4; i++) free(o[i]);
    jinja_free(t);
    json_doc_free(&doc);
    return ok;
}

/* Writes text as tokenizer_config.json into a private temp directory, and jinja (NULL: none) as
 * the chat_template.jinja beside it (jinja_bytes > 0: a file of that many spaces instead), loads
 * the config and renders messages with it: the rendering, "no template" or "error: STATUS:
 * MESSAGE" (the message after the file's name; FILE stands for a chat_template.jinja's path) in
 * out. */
static void config_render_with(const char *text, const char *jinja, long jinja_bytes, char *out,
                               size_t cap) {
    char dir[] = "/tmp/test_jinja_cfg.XXXXXX", path[64], tpl[64];
    out[0] = '\0';
    if (!mkdtemp(dir)) {
        snprintf(out, cap, "cannot make a temp directory");
        return;
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    snprintf(tpl, sizeof tpl, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "w"), *g = jinja || jinja_bytes ? fopen(tpl, "w") : NULL;
    if (f) fputs(text, f), fclose(f);
    if (g && jinja) fputs(jinja, g);
    for (long i = 0; g && i < jinja_bytes; i++) fputc(' ', g);
    if (g) fclose(g);
    chat_config cc;
    jinja_error err;
    int rc = chat_config_load(path, &cc, &err);
    unlink(path), unlink(tpl), rmdir(dir);
    if (rc != JINJA_OK) {
        const char *m = strstr(err.msg, tpl) ? strstr(err.msg, tpl) + strlen(tpl) : strstr(err.msg, ": ") + 2;
        snprintf(out, cap, "error: %s: %s%s", jinja_status_name(rc), strstr(err.msg, tpl) ? "FILE" : "", m);
        return;
    }
    if (!cc.tpl) {
        snprintf(out, cap, "no template");
        chat_config_free(&cc);
        return;
    }
    const char *conv = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    json_doc doc;
    json_value *v;
    json_error je;
    json_doc_init(&doc);
    json_parse(&doc, conv, strlen(conv), &v, &je);
    const json_value *ctx[2] = {cc.vars, v};
    char *r = NULL;
    size_t n;
    rc = jinja_render(cc.tpl, ctx, 2, &r, &n, &err);
    snprintf(out, cap, "%s%s", rc == JINJA_OK ? r : err.msg,
             strcmp(cc.source, jinja ? tpl : path) ? " (wrong source)" : "");
    free(r);
    json_doc_free(&doc);
    chat_config_free(&cc);
}

static int config_with_is(const char *text, const char *jinja, long jinja_bytes, const char *want) {
    char out[512];
    config_render_with(text, jinja, jinja_bytes, out, sizeof out);
    if (strcmp(out, want)) tap_diag("got '%s', want '%s'", out, want);
    return !strcmp(out, want);
}

static int config_is(const char *text, const char *want) { return config_with_is(text, NULL, 0, want); }

/* Random templates from Jinja fragments: every one compiles and renders or fails with a status
 * and a message; none crashes (ASan build: no memory error either). */
static int fuzz(int rounds) {
    static const char *const parts[] = {
        "{{", "}}", "{%", "%}", "{%-", "-%}", "{#", "#}", " ", "\n", "x", "messages", "[0]", ".role",
        "(", ")", "[", "]", "{", "}", ",", ":", "'s'", "\"t\"", "1", "2.5", "-", "+", "~", "*", "**",
        "//", "%", "|", "trim", "tojson", "length", "is", "not", "defined", "in", "and", "or", "if",
        "else", "elif", "endif", "for", "endfor", "set", "=", "ns", "namespace(", "loop.index",
        "[::-1]", "[1:]", "raise_exception(", "macro", "endmacro", "break", "\\", "\xff", "\xc3"};
    const size_t np = sizeof parts / sizeof parts[0];
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"x\": [1, 2]}";
    unsigned long long seed = 24;
    int bad = 0;
    char t[512];
    for (int r = 0; r < rounds; r++) {
        size_t len = 0;
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        int k = 1 + (int)(seed >> 59);
        for (int i = 0; i < k * 2; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *p = parts[(seed >> 33) % np];
            size_t pl = strlen(p);
            if (len + pl >= sizeof t) break;
            memcpy(t + len, p, pl);
            len += pl;
        }
        t[len] = '\0';
        char *out;
        jinja_error err;
        int rc = render(t, ctx, &out, &err);
        if (rc < 0 || rc >= JINJA_STATUS_COUNT || (rc == JINJA_OK) != (out != NULL) ||
            (rc != JINJA_OK && !err.msg[0])) {
            if (bad++ < 5) tap_diag("template [%s]: status %d, message '%s'", t, rc, err.msg);
        }
        free(out);
    }
    return bad == 0;
}

/* ---- a template is untrusted input (issue 49): bounded depth, values, time and memory ---- */

/* "{{ x" + n times link + " }}" */
static char *chain(const char *head, const char *link, int n) {
    size_t hl = strlen(head), ll = strlen(link);
    char *t = malloc(hl + ll * (size_t)n + 8);
    memcpy(t, head, hl);
    for (int i = 0; i < n; i++) memcpy(t + hl + ll * (size_t)i, link, ll);
    strcpy(t + hl + ll * (size_t)n, " }}");
    return t;
}

static int long_chains_refused(void) {
    static const char *const links[][2] = {{"{{ 1", " + 1"}, {"{{ 'a'", " | trim"}, {"{{ x", ".a"},
                                           {"{{ x", "[0]"}, {"{{ x", " is defined"},
                                           {"{{ 1", " ~ 1"}, {"{{ x", "()"}};
    int ok = 1;
    for (size_t k = 0; k < sizeof links / sizeof links[0]; k++) {
        char *t = chain(links[k][0], links[k][1], 20000);
        /* the 256th link makes the chain 257 high: the error is at its operator */
        int col = (int)(strlen(links[k][0]) + 255 * strlen(links[k][1]) + strspn(links[k][1], " ")) + 1;
        ok &= fails(t, "{}", JINJA_ESYNTAX, 1, col, "expression nested too deeply: more than 256");
        free(t);
        t = chain(links[k][0], links[k][1], 200); /* a long chain that is fine */
        char *out;
        jinja_error err;
        int rc = render(t, "{\"x\": {\"a\": 1}}", &out, &err);
        if (rc == JINJA_ESYNTAX) tap_diag("chain of 200 '%s': %s", links[k][1], err.msg), ok = 0;
        free(out);
        free(t);
    }
    return ok;
}

/* 300 elif branches are a chain, not nesting: the last one renders */
static int many_elifs(void) {
    char *t = malloc(300 * 40 + 64);
    size_t n = (size_t)sprintf(t, "{%% if x == 0 %%}0");
    for (int i = 1; i < 300; i++) n += (size_t)sprintf(t + n, "{%% elif x == %d %%}%d", i, i);
    strcpy(t + n, "{% else %}none{% endif %}");
    char *out;
    jinja_error err;
    int ok = render(t, "{\"x\": 299}", &out, &err) == JINJA_OK && !strcmp(out, "299");
    free(out);
    ok = ok && render(t, "{\"x\": 300}", &out, &err) == JINJA_OK && !strcmp(out, "none");
    if (!ok) tap_diag("%s", err.msg);
    free(out);
    free(t);
    return ok;
}

/* Renders t with the budget b; the status, err filled. */
static int render_budget(const char *t, const jinja_budget *b, jinja_error *err) {
    jinja_template *tpl;
    json_doc doc;
    json_value *v;
    json_error je;
    json_doc_init(&doc);
    json_parse(&doc, "{}", 2, &v, &je);
    const json_value *c = v;
    char *out = NULL;
    size_t n;
    int rc = jinja_compile(t, strlen(t), &tpl, err);
    if (rc == JINJA_OK) {
        jinja_set_budget(tpl, b);
        rc = jinja_render(tpl, &c, 1, &out, &n, err);
        jinja_free(tpl);
    }
    free(out);
    json_doc_free(&doc);
    return rc;
}

/* An iteration that keeps nothing gives its memory back: 200,000 iterations (about 1.7 KB each
 * when kept: 340 MB) in 32 MiB, most of it range()'s list of 200,000 values */
static int loop_memory_released(void) {
    const jinja_budget b = {.steps = 100000000, .bytes = 32u << 20};
    jinja_error err;
    int rc = render_budget("{% for i in range(200000) %}{% if loop.index % 2 %}{{ [i, 'x']|length }}"
                           "{% endif %}{% endfor %}", &b, &err);
    if (rc != JINJA_OK) tap_diag("%s: %s", jinja_status_name(rc), err.msg);
    else tap_diag("200000 iterations: %llu steps, peak %llu bytes", err.steps, err.peak_bytes);
    return rc == JINJA_OK && err.peak_bytes <= (32u << 20);
}

static int over_budget(const char *t, const jinja_budget *b, const char *msg) {
    jinja_error err;
    int rc = render_budget(t, b, &err);
    int ok = rc == JINJA_EBUDGET && strstr(err.msg, msg) && err.line > 0;
    if (!ok) tap_diag("got %s %d:%d '%s', want over budget '%s'", jinja_status_name(rc), err.line,
                      err.col, err.msg, msg);
    return ok;
}

enum { UNTRUSTED_CHECKS = 10 };
static void untrusted_checks(void) {
    tap_ok(long_chains_refused(), "chains of 20,000 operators, filters, members, subscripts, tests, calls: "
           "a syntax error at the 257th link, not a stack overflow; 200 links render");
    tap_ok(many_elifs(), "300 elif branches: a chain, not nesting (the right branch renders)");
    tap_ok(fails("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns|tojson }}", "{}", JINJA_ERUNTIME, 1, 54,
                 "circular structure") &&
               fails("{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}{{ ns.a.a }}{{ ns.a[0].a[0] }}", "{}",
                     JINJA_ERUNTIME, 1, 75, "contains itself"),
           "a namespace holding itself: tojson and printing fail naming the cycle");
    tap_ok(fails("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                 "{{ ns.x }}", "{}", JINJA_ERUNTIME, 1, 99, "nested more than 512 lists or dicts deep") &&
               fails("{% set ns = namespace(x=[]) %}{% for i in range(600) %}{% set ns.x = [ns.x] %}{% endfor %}"
                     "{{ ns.x|tojson }}", "{}", JINJA_ERUNTIME, 0, 0, "nested more than 512"),
           "a list nested 100,000 deep built in a loop: printing it fails at depth 512");
    tap_ok(fails("{% for i in range(1000001) %}{% endfor %}", "{}", JINJA_ERUNTIME, 0, 0,
                 "range() of 1000001 items: at most 1000000"),
           "range() of 10^6 + 1 items: refused before its list is built (docs/limits.md)");
    const jinja_budget none = {0};
    tap_ok(over_budget("{% for i in range(1000000) %}{% endfor %}", &none, "budget of 10000000 steps"),
           "an empty loop of 10^6 iterations goes over the default 10^7 steps");
    tap_ok(loop_memory_released(), "200,000 iterations that keep nothing run in 32 MiB (memory released per iteration)");
    const jinja_budget small = {.bytes = 1u << 20};
    tap_ok(over_budget("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}"
                       "{% endfor %}", &small, "budget of 1048576 bytes"),
           "a loop that keeps what it builds goes over a 1 MiB memory budget");
    const jinja_budget steps = {.steps = 5000};
    tap_ok(over_budget("{% set x = range(1000)|list %}{% for i in range(100) %}{{ 999 in x }}{% endfor %}",
                       &steps, "budget of 5000 steps"),
           "each element `in` visits counts against the steps");
    char deep[4096];
    int n = snprintf(deep, sizeof deep, "{%% macro f(k) %%}");
    for (int i = 0; i < 60; i++) n += snprintf(deep + n, sizeof deep - (size_t)n, "{%% if true %%}");
    n += snprintf(deep + n, sizeof deep - (size_t)n, "{{ f(k) }}");
    for (int i = 0; i < 60; i++) n += snprintf(deep + n, sizeof deep - (size_t)n, "{%% endif %%}");
    snprintf(deep + n, sizeof deep - (size_t)n, "{%% endmacro %%}{{ f(1) }}");
    tap_ok(fails(deep, "{}", JINJA_ERUNTIME, 0, 0, "evaluation nests too deeply (over 4096"),
           "a macro recursing through 60 nested ifs stops at 4096 nested evaluations");
}

static int unit_checks(void) {
    setenv("TZ", "UTC", 1);
    setenv("TSR_JINJA_NOW", "1721952000", 1);
    const size_t ncases = sizeof cases / sizeof cases[0], nerrors = sizeof error_cases / sizeof error_cases[0];
    tap_plan((int)(ncases + nerrors) + 16 + UNTRUSTED_CHECKS);
    for (size_t i = 0; i < ncases; i++) tap_ok(renders_as(i), "%s", cases[i].what);

    /* errors: status, position, message */
    for (size_t i = 0; i < nerrors; i++)
        tap_ok(fails(error_cases[i].tmpl, error_cases[i].ctx, error_cases[i].status, error_cases[i].line,
                     error_cases[i].col, error_cases[i].msg),
               "%s", error_cases[i].what);
    tap_ok(fails("{{ 'x' | trim('a').bar }}", "{}", JINJA_ERUNTIME, 1, 19, "Unknown filter: MemberExpression") &&
               fails("{{ 'x' | trim()() }}", "{}", JINJA_ERUNTIME, 1, 16, "Unknown filter: CallExpression"),
           "a member or a call after a filter call: the reference's error, not a crash (fuzz_chat)");
    char deep[1024] = "{{ "; /* ((( ... 1 ... ))) 300 deep */
    memset(deep + 3, '(', 300);
    memcpy(deep + 303, "1", 1);
    memset(deep + 304, ')', 300);
    memcpy(deep + 604, " }}", 4);
    tap_ok(fails(deep, "{}", JINJA_ESYNTAX, 0, 0, "nested too deeply"), "300 nested parentheses: an error, not a stack overflow");

    tap_ok(fails("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                 "{% endfor %}{{ ns.s|length }}", "{}", JINJA_EBUDGET, 1, 82, "budget of 268435456 bytes"),
           "a string doubling without end stops at the memory budget (at the ~)");
    untrusted_checks();
    tap_ok(reuse_and_merge(), "a compiled template renders twice; later contexts override earlier ones");
    const char *tpl = "\"{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ messages[0].content }}\"";
    char cfg[512];
    snprintf(cfg, sizeof cfg, "{\"chat_template\": %s, \"bos_token\": \"<s>\", \"eos_token\": "
             "{\"content\": \"</s>\", \"lstrip\": false}, \"pad_token\": null}", tpl);
    tap_ok(config_is(cfg, "<s>|</s>|false|hi"),
           "tokenizer_config.json: template string, special tokens as strings or {content}, null left out");
    snprintf(cfg, sizeof cfg, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
             "{\"name\": \"default\", \"template\": %s}], \"eos_token\": \"E\"}", tpl);
    tap_ok(config_is(cfg, "|E|false|hi"), "tokenizer_config.json: the default of named templates");
    tap_ok(config_is("{\"bos_token\": \"<s>\"}", "no template"), "tokenizer_config.json without a chat_template");
    tap_ok(config_is("{\"chat_template\": 5}", "error: context error: chat_template is number, expected a string or a list of {\"name\", \"template\"} with a \"default\""),
           "chat_template of a wrong type: an error naming the file and what was expected");
    tap_ok(config_is("{\"chat_template\": \"{% if %}\"}", "error: syntax error: chat_template, line 1:7: Unexpected token: CloseStatement"),
           "a template that does not parse: a syntax error naming the file and chat_template");
    tap_ok(config_is("{\"chat_template\": ", "error: context error: byte 18: expected a value, found end of line"),
           "a config that is not JSON: the byte where it breaks");
    /* chat_template.jinja beside the config (transformers' precedence: the file over the key) */
    tap_ok(config_with_is("{\"eos_token\": \"E\"}", "J{{ eos_token }}{{ messages[0].content }}", 0, "JEhi"),
           "a config without chat_template, a chat_template.jinja beside it: its template, the config's tokens");
    tap_ok(config_with_is(cfg, "J{{ messages[0].content }}", 0, "Jhi"),
           "a config with its own chat_template and a chat_template.jinja beside it: the file's, as transformers");
    tap_ok(config_with_is("{}", "ab\n{% foo %}", 0, "error: syntax error: FILE, line 2:4: Unknown statement type: foo"),
           "a chat_template.jinja that does not parse: a syntax error naming the file and line:column");
    tap_ok(config_with_is("{}", NULL, (long)CHAT_TEMPLATE_MAX + 1,
                          "error: context error: FILE: cannot read it (above; at most 16777216 bytes)"),
           "a chat_template.jinja over 16 MiB: refused naming the file and the bound");
    tap_ok(overrides(), "jinja_render_ex cuts messages and sets add_generation_prompt; no messages: context error");
    tap_ok(fuzz(3000), "3000 random fragment templates: each renders or fails with a message");
    return tap_done();
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--render") || !strcmp(argv[1], "--render-config") ||
                     !strcmp(argv[1], "--render-each")))
        return render_files(argc, argv);
    return unit_checks();
}
