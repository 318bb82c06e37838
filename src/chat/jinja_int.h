/* jinja_int.h — internals of the Jinja subset (src/chat/jinja*.c); not for use outside src/chat.
 *
 * Pipeline: jinja_lex.c (preprocess + tokens) -> jinja_parse.c (AST) -> jinja_eval.c (values,
 * filters in jinja_builtin.c, value helpers and tojson in jinja_value.c). Everything of one
 * compile or one render lives in an arena (jj_arena) freed at once; errors unwind to the public
 * entry point with longjmp (jj_fail), so no function below returns a status.
 *
 * Semantics follow @huggingface/jinja 0.5.11 (docs/chat-templates.md lists the differences):
 * numbers are doubles tagged integer or float, strings are UTF-8 byte strings.
 */
#ifndef TSR_JINJA_INT_H
#define TSR_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>

#include "chat/jinja.h"

/* ---- arena and failure ---- */
typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
    jj_chunk *head;
} jj_arena;

typedef struct jj_fail_ctx {
    jmp_buf jmp;
    jinja_error *err;
    int status;
    int line, col; /* node being evaluated: where a failure without its own position points */
} jj_fail_ctx;

void *jj_alloc(jj_arena *a, size_t n);
char *jj_strdup(jj_arena *a, const char *s, size_t n);
void jj_arena_free(jj_arena *a);
/* Fills the error (status, 1-based line/col, message) and jumps back to the entry point;
 * line 0 means the position of the node being evaluated (f->line, f->col). */
_Noreturn void jj_fail(jj_fail_ctx *f, int status, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* growable byte buffer in the arena */
typedef struct jj_buf {
    jj_arena *a;
    char *p;
    size_t n, cap;
} jj_buf;
void jj_buf_init(jj_buf *b, jj_arena *a);
void jj_buf_add(jj_buf *b, const char *s, size_t n);
void jj_buf_adds(jj_buf *b, const char *s);
void jj_buf_addc(jj_buf *b, char c);

/* ---- UTF-8 helpers: JavaScript's view of characters ---- */
/* Bytes of the JS whitespace (\s) character at s (n bytes available), 0 when none. */
size_t jj_space_at(const char *s, size_t n);
/* Bytes of the JS whitespace character ending at s+n, 0 when none. */
size_t jj_space_before(const char *s, size_t n);
/* Decodes one code point at s (n > 0); sets *len (1 on invalid bytes: the byte itself). */
unsigned jj_utf8_decode(const char *s, size_t n, size_t *len);
void jj_utf8_encode(jj_buf *b, unsigned cp);
/* Number of UTF-16 code units of the string (String.length in JS). */
size_t jj_utf16_len(const char *s, size_t n);

/* ---- tokens ---- */
typedef enum jj_tok_type {
    TK_TEXT, TK_NUMBER, TK_STRING, TK_IDENT, TK_EQUALS, TK_LPAREN, TK_RPAREN, TK_OPEN_STMT,
    TK_CLOSE_STMT, TK_OPEN_EXPR, TK_CLOSE_EXPR, TK_LBRACKET, TK_RBRACKET, TK_LBRACE, TK_RBRACE,
    TK_COMMA, TK_DOT, TK_COLON, TK_PIPE, TK_ADD, TK_MUL, TK_POW, TK_CMP, TK_UNARY, TK_COMMENT,
    TK_EOF, TK_COUNT
} jj_tok_type;

typedef struct jj_token {
    jj_tok_type type;
    const char *s; /* value (decoded for strings), NUL-terminated */
    size_t n;
    int line, col; /* in the original template, 1-based */
} jj_token;

const char *jj_tok_name(jj_tok_type t);
/* Tokens of the template (lstrip_blocks and trim_blocks on, as hf's Template), ending in TK_EOF. */
jj_token *jj_tokenize(jj_arena *a, jj_fail_ctx *f, const char *src, size_t n, size_t *count);

/* ---- AST ---- */
typedef enum jj_node_type {
    N_TEXT, N_IF, N_FOR, N_SET, N_BREAK, N_CONTINUE, N_COMMENT, N_MACRO, N_INT, N_FLOAT, N_STR,
    N_ARRAY, N_TUPLE, N_OBJECT, N_IDENT, N_CALL, N_MEMBER, N_SLICE, N_UNARY, N_BINARY, N_FILTER,
    N_TEST, N_SELECT, N_TERNARY, N_KWARG, N_FILTER_STMT, N_NODE_COUNT
} jj_node_type;

typedef struct jj_node jj_node;
typedef struct jj_list {
    jj_node **v;
    size_t n;
} jj_list;

struct jj_node {
    jj_node_type type;
    int line, col;
    const char *s; /* identifier name, string value, operator ("+", "not in", ...) */
    size_t n;
    double num;    /* N_INT, N_FLOAT */
    bool flag;     /* N_MEMBER: computed; N_TEST: negated */
    jj_node *a, *b, *c; /* operands: see jinja_parse.c for each type */
    jj_list body, alt;  /* statements; N_ARRAY/N_TUPLE/N_CALL args in body; N_OBJECT keys body,
                           values alt */
};

jj_list jj_parse(jj_arena *a, jj_fail_ctx *f, const jj_token *toks, size_t count);

/* ---- values ---- */
typedef enum jj_vtype {
    V_UNDEF, V_NULL, V_BOOL, V_INT, V_FLOAT, V_STR, V_ARRAY, V_TUPLE, V_OBJECT, V_KWARGS, V_NS,
    V_FUNC, V_VTYPE_COUNT
} jj_vtype;

typedef struct jj_value jj_value;
typedef struct jj_map {
    const char **keys;
    size_t *klen;
    jj_value **vals;
    size_t n, cap;
} jj_map;

typedef enum jj_fn {
    FN_NAMESPACE, FN_RAISE, FN_RANGE, FN_STRFTIME, FN_STR_METHOD, FN_OBJ_METHOD, FN_MACRO,
    FN_COUNT
} jj_fn;

struct jj_value {
    jj_vtype t;
    bool b;
    double num;
    const char *s; /* V_STR: bytes (NUL-terminated); V_FUNC: method name */
    size_t n;      /* V_STR length; V_ARRAY/V_TUPLE element count */
    jj_value **items;
    jj_map *map;   /* V_OBJECT, V_KWARGS, V_NS */
    jj_fn fn;
    jj_value *self; /* V_FUNC methods: the receiver */
    const jj_node *macro;
};

const char *jj_type_name(jj_vtype t);
jj_value *jj_new(jj_arena *a, jj_vtype t);
jj_value *jj_str(jj_arena *a, const char *s, size_t n);
jj_value *jj_num(jj_arena *a, jj_vtype t, double x);
jj_value *jj_bool(jj_arena *a, bool b);
jj_value *jj_array(jj_arena *a, jj_value **items, size_t n);
jj_map *jj_map_new(jj_arena *a);
jj_value *jj_map_get(const jj_map *m, const char *k, size_t kn);
void jj_map_set(jj_arena *a, jj_map *m, const char *k, size_t kn, jj_value *v);
bool jj_truthy(const jj_value *v);
bool jj_is_num(const jj_value *v); /* integer or float */
/* JavaScript's String(number). */
void jj_fmt_number(jj_buf *b, double x);
/* RuntimeValue.toString() (what {{ }} prints); fails on functions and tuples as hf does. */
void jj_to_string(jj_fail_ctx *f, jj_buf *b, const jj_value *v);
/* String(value.value) in JS: what '+' and '~' concatenate. */
void jj_raw_string(jj_fail_ctx *f, jj_buf *b, const jj_value *v);
bool jj_loose_eq(jj_fail_ctx *f, jj_arena *a, const jj_value *x, const jj_value *y);
bool jj_strict_eq(const jj_value *x, const jj_value *y);

typedef struct jj_json_opts {
    int indent; /* 0: none */
    bool ensure_ascii, sort_keys, undef_null, custom_sep;
    const char *item_sep, *key_sep;
} jj_json_opts;
void jj_to_json(jj_fail_ctx *f, jj_buf *b, const jj_value *v, const jj_json_opts *o, int depth);

/* ---- evaluation ---- */
typedef struct jj_scope jj_scope;
struct jj_scope {
    jj_map vars;
    jj_scope *parent;
};

typedef struct jj_interp {
    jj_arena *a;
    jj_fail_ctx *f;
    int ctl;           /* 1 break, 2 continue pending */
    int depth;         /* macro call depth */
    long long now;     /* strftime_now's clock (seconds since the epoch) */
} jj_interp;

_Noreturn void jj_rt_fail(jj_interp *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jj_value *jj_eval(jj_interp *in, const jj_node *nd, jj_scope *sc);
jj_value *jj_eval_block(jj_interp *in, const jj_list *l, jj_scope *sc);
jj_value *jj_lookup(jj_scope *sc, const char *name, size_t n);

/* builtins (jinja_builtin.c) */
typedef struct jj_args {
    jj_value **pos;
    size_t npos;
    jj_map *kw; /* NULL when none */
} jj_args;
jj_value *jj_apply_filter(jj_interp *in, jj_value *v, const jj_node *filter, jj_scope *sc);
bool jj_run_test(jj_interp *in, const char *name, const jj_value *v);
jj_value *jj_call(jj_interp *in, jj_value *fn, jj_args *args, jj_scope *sc);
/* Builtin member of a string, object or array (upper, get, length...), or NULL. */
jj_value *jj_builtin_member(jj_interp *in, jj_value *obj, const char *name, size_t n);
void jj_eval_args(jj_interp *in, const jj_list *l, jj_scope *sc, jj_args *out);
jj_value *jj_slice(jj_interp *in, jj_value *obj, jj_value *start, jj_value *stop, jj_value *step);

#endif
