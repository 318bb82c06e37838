/* jinja_lex.c — template source to tokens, as @huggingface/jinja's lexer.ts does it:
 *   1. preprocess: drop one trailing newline; lstrip_blocks (spaces and tabs before a line's
 *      "{%", "{#" or "{-" go); trim_blocks (the newline after "%}", "#}" or "-}" goes); the
 *      {% generation %} / {% endgeneration %} markers are removed with their whitespace control;
 *   2. tokens: text between tags; in tags identifiers, numbers, strings, operators; "{%-" / "-%}"
 *      trim the whitespace of the text beside them.
 * Every byte of the preprocessed source remembers its offset in the original, so errors and
 * tokens carry the line and column the user wrote. */
#include <stdio.h>
#include <string.h>

#include "chat/jinja_int.h"

typedef struct pp {
    char *s;
    size_t *o; /* original offset of each byte */
    size_t n;
} pp;

typedef struct lexer {
    jj_arena *a;
    jj_fail_ctx *f;
    const char *orig;
    size_t orig_n;
    pp src;
    size_t cur;
    jj_token *toks;
    size_t n, cap;
    size_t lc_off; /* memo for line/column: offset, line and column reached */
    int lc_line, lc_col;
} lexer;

static const char *const tok_names[TK_COUNT] = {
    "Text", "NumericLiteral", "StringLiteral", "Identifier", "Equals", "OpenParen", "CloseParen",
    "OpenStatement", "CloseStatement", "OpenExpression", "CloseExpression", "OpenSquareBracket",
    "CloseSquareBracket", "OpenCurlyBracket", "CloseCurlyBracket", "Comma", "Dot", "Colon", "Pipe",
    "AdditiveBinaryOperator", "MultiplicativeBinaryOperator", "ExponentiationBinaryOperator",
    "ComparisonBinaryOperator", "UnaryOperator", "Comment", "end of template"};

const char *jj_tok_name(jj_tok_type t) { return t < TK_COUNT ? tok_names[t] : "?"; }

static void pp_alloc(lexer *lx, pp *p, size_t cap) {
    p->s = jj_alloc(lx->a, cap + 1);
    p->o = jj_alloc(lx->a, (cap + 1) * sizeof *p->o);
    p->n = 0;
}

static void pp_put(pp *p, const pp *from, size_t i) {
    p->s[p->n] = from->s[i];
    p->o[p->n++] = from->o[i];
}

static void pp_end(pp *p, size_t orig_end) {
    p->s[p->n] = '\0';
    p->o[p->n] = orig_end;
}

/* JS multiline ^: after \n, \r, U+2028 or U+2029 */
static int line_start(const pp *p, size_t i) {
    if (i == 0) return 1;
    char c = p->s[i - 1];
    if (c == '\n' || c == '\r') return 1;
    return i >= 3 && !memcmp(p->s + i - 3, "\xe2\x80", 2) &&
           (p->s[i - 1] == '\xa8' || p->s[i - 1] == '\xa9');
}

static void lstrip_blocks(lexer *lx, pp *p) {
    pp q;
    pp_alloc(lx, &q, p->n);
    for (size_t i = 0; i < p->n;) {
        if (line_start(p, i)) {
            size_t j = i;
            while (j < p->n && (p->s[j] == ' ' || p->s[j] == '\t')) j++;
            if (j + 1 < p->n && p->s[j] == '{' && strchr("#%-", p->s[j + 1]) && p->s[j + 1]) i = j;
        }
        pp_put(&q, p, i++);
        while (i < p->n && !line_start(p, i)) pp_put(&q, p, i++);
    }
    pp_end(&q, p->o[p->n]);
    *p = q;
}

static void trim_blocks(lexer *lx, pp *p) {
    pp q;
    pp_alloc(lx, &q, p->n);
    for (size_t i = 0; i < p->n;) {
        if (i + 2 < p->n && (p->s[i] == '#' || p->s[i] == '%' || p->s[i] == '-') &&
            p->s[i + 1] == '}' && p->s[i + 2] == '\n') {
            pp_put(&q, p, i);
            pp_put(&q, p, i + 1);
            i += 3;
            continue;
        }
        pp_put(&q, p, i++);
    }
    pp_end(&q, p->o[p->n]);
    *p = q;
}

static size_t skip_space(const pp *p, size_t i) {
    size_t k;
    while (i < p->n && (k = jj_space_at(p->s + i, p->n - i))) i += k;
    return i;
}

/* Length of a {%-? \s* (end)?generation \s* -?%} tag at i, 0 when none; sets the two strips. */
static size_t generation_tag(const pp *p, size_t i, int *lstrip, int *rstrip) {
    if (i + 1 >= p->n || p->s[i] != '{' || p->s[i + 1] != '%') return 0;
    size_t j = i + 2;
    *lstrip = j < p->n && p->s[j] == '-';
    j = skip_space(p, j + (size_t)*lstrip);
    if (p->n - j >= 3 && !memcmp(p->s + j, "end", 3)) j += 3;
    if (p->n - j < 10 || memcmp(p->s + j, "generation", 10)) return 0;
    j = skip_space(p, j + 10);
    *rstrip = j < p->n && p->s[j] == '-';
    j += (size_t)*rstrip;
    if (j + 1 >= p->n || p->s[j] != '%' || p->s[j + 1] != '}') return 0;
    return j + 2 - i;
}

static void strip_generation(lexer *lx, pp *p) {
    pp q;
    pp_alloc(lx, &q, p->n);
    size_t last = 0; /* end of the previous match */
    for (size_t i = 0; i < p->n; i++) {
        int ls, rs;
        size_t len = generation_tag(p, i, &ls, &rs);
        if (!len) continue;
        size_t ws = i, k;
        while (ws > last && (k = jj_space_before(p->s + last, ws - last))) ws -= k;
        for (size_t j = last; j < ws; j++) pp_put(&q, p, j);
        if (!ls)
            for (size_t j = ws; j < i; j++) pp_put(&q, p, j);
        size_t end = skip_space(p, i + len);
        if (!rs)
            for (size_t j = i + len; j < end; j++) pp_put(&q, p, j);
        last = end;
        i = end - 1;
    }
    for (size_t j = last; j < p->n; j++) pp_put(&q, p, j);
    pp_end(&q, p->o[p->n]);
    *p = q;
}

static void preprocess(lexer *lx, const char *src, size_t n) {
    pp p;
    pp_alloc(lx, &p, n);
    for (size_t i = 0; i < n; i++) {
        p.s[i] = src[i];
        p.o[i] = i;
    }
    p.n = n;
    if (p.n && p.s[p.n - 1] == '\n') p.n--;
    pp_end(&p, p.n);
    lstrip_blocks(lx, &p);
    trim_blocks(lx, &p);
    strip_generation(lx, &p);
    lx->src = p;
}

/* ---- positions ---- */
static void line_col(lexer *lx, size_t pos, int *line, int *col) {
    size_t off = pos < lx->src.n ? lx->src.o[pos] : lx->orig_n;
    if (off < lx->lc_off) lx->lc_off = 0, lx->lc_line = 1, lx->lc_col = 1;
    for (; lx->lc_off < off && lx->lc_off < lx->orig_n; lx->lc_off++) {
        if (lx->orig[lx->lc_off] == '\n') lx->lc_line++, lx->lc_col = 1;
        else if (((unsigned char)lx->orig[lx->lc_off] & 0xc0) != 0x80) lx->lc_col++;
    }
    *line = lx->lc_line;
    *col = lx->lc_col;
}

static _Noreturn void lex_fail(lexer *lx, size_t pos, const char *what, const char *detail) {
    int line, col;
    line_col(lx, pos, &line, &col);
    jj_fail(lx->f, JINJA_ESYNTAX, line, col, "%s%s", what, detail);
}

static void push(lexer *lx, jj_tok_type t, const char *s, size_t n, size_t pos) {
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jj_token *v = jj_alloc(lx->a, cap * sizeof *v);
        if (lx->n) memcpy(v, lx->toks, lx->n * sizeof *v);
        lx->toks = v;
        lx->cap = cap;
    }
    jj_token *tk = &lx->toks[lx->n++];
    tk->type = t;
    tk->s = jj_strdup(lx->a, s, n);
    tk->n = n;
    line_col(lx, pos, &tk->line, &tk->col);
}

static jj_tok_type last_type(const lexer *lx) { return lx->n ? lx->toks[lx->n - 1].type : TK_EOF; }

/* "{%-" and friends: the text before loses its trailing whitespace (and goes when empty) */
static void strip_trailing(lexer *lx) {
    if (!lx->n || lx->toks[lx->n - 1].type != TK_TEXT) return;
    jj_token *t = &lx->toks[lx->n - 1];
    size_t k;
    while (t->n && (k = jj_space_before(t->s, t->n))) t->n -= k;
    ((char *)t->s)[t->n] = '\0';
    if (t->n == 0) lx->n--;
}

static void skip_leading(lexer *lx) { lx->cur = skip_space(&lx->src, lx->cur); }

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* \xHH or \uHHHH at cur (after the 'x'/'u'): the UTF-16 unit */
static unsigned hex_escape(lexer *lx, int len, char which) {
    const pp *p = &lx->src;
    unsigned v = 0;
    for (int i = 0; i < len; i++) {
        int h = lx->cur + (size_t)i < p->n ? hexval(p->s[lx->cur + (size_t)i]) : -1;
        if (h < 0) {
            char d[16];
            snprintf(d, sizeof d, "\\%c%.*s", which, (int)(p->n - lx->cur < (size_t)len ?
                     p->n - lx->cur : (size_t)len), p->s + lx->cur);
            lex_fail(lx, lx->cur, "Invalid hexadecimal escape sequence: ", d);
        }
        v = v * 16 + (unsigned)h;
    }
    lx->cur += (size_t)len;
    return v;
}

/* hf's ESCAPE_CHARACTERS: \n \t \r \b \f \v \' \" \\ (-1: not one of them) */
static int simple_escape(char e) {
    switch (e) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'b': return '\b';
    case 'f': return '\f';
    case 'v': return '\v';
    case '\'':
    case '"':
    case '\\': return e;
    default: return -1;
    }
}

static void string_literal(lexer *lx, char quote) {
    const pp *p = &lx->src;
    size_t start = lx->cur++;
    jj_buf b;
    jj_buf_init(&b, lx->a);
    jj_buf_add(&b, "", 0);
    unsigned high = 0; /* pending high surrogate from \uD8xx */
    for (;;) {
        if (lx->cur >= p->n) lex_fail(lx, start, "Unexpected end of input", " in a string literal");
        char c = p->s[lx->cur];
        if (c == quote) break;
        unsigned unit = 0;
        int is_unit = 0;
        if (c == '\\') {
            if (++lx->cur >= p->n) lex_fail(lx, start, "Unexpected end of input", "");
            char e = p->s[lx->cur++];
            int simple = simple_escape(e);
            if (e == 'x' || e == 'u') {
                unit = hex_escape(lx, e == 'x' ? 2 : 4, e);
                is_unit = 1;
            } else if (simple >= 0) {
                if (high) jj_utf8_encode(&b, 0xfffd), high = 0;
                jj_buf_addc(&b, (char)simple);
                continue;
            } else {
                char d[2] = {e, 0};
                lex_fail(lx, lx->cur - 1, "Unexpected escaped character: ", d);
            }
        }
        if (is_unit) {
            if (high && unit >= 0xdc00 && unit < 0xe000) {
                jj_utf8_encode(&b, 0x10000 + ((high - 0xd800) << 10) + (unit - 0xdc00));
                high = 0;
            } else {
                if (high) jj_utf8_encode(&b, 0xfffd);
                high = 0;
                if (unit >= 0xd800 && unit < 0xdc00) high = unit;
                else jj_utf8_encode(&b, unit);
            }
            continue;
        }
        if (high) jj_utf8_encode(&b, 0xfffd), high = 0;
        jj_buf_addc(&b, c);
        lx->cur++;
    }
    if (high) jj_utf8_encode(&b, 0xfffd);
    lx->cur++; /* closing quote */
    push(lx, TK_STRING, b.p, b.n, start);
}

static size_t digits(const pp *p, size_t i) {
    while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    return i;
}

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* consumeWhile in hf's lexer fails when a literal or name runs into the end of the input */
static void check_not_end(lexer *lx, size_t end, size_t start) {
    if (end >= lx->src.n) lex_fail(lx, start, "Unexpected end of input", "");
}

/* '-' or '+' after an operator: a signed number literal or a unary operator */
static int unary_sign(lexer *lx) {
    const pp *p = &lx->src;
    char c = p->s[lx->cur];
    jj_tok_type lt = last_type(lx);
    if (lt == TK_TEXT || lt == TK_EOF) {
        char d[2] = {c, 0};
        lex_fail(lx, lx->cur, "Unexpected character: ", d);
    }
    if (lt == TK_IDENT || lt == TK_NUMBER || lt == TK_STRING || lt == TK_RPAREN ||
        lt == TK_RBRACKET)
        return 0;
    size_t start = lx->cur++;
    size_t e = digits(p, lx->cur);
    if (e > lx->cur) check_not_end(lx, e, start);
    if (e > lx->cur && e + 1 < p->n && p->s[e] == '.' && p->s[e + 1] >= '0' && p->s[e + 1] <= '9') {
        e = digits(p, e + 1);
        check_not_end(lx, e, start);
    }
    push(lx, e > lx->cur ? TK_NUMBER : TK_UNARY, p->s + start, e - start, start);
    lx->cur = e;
    return 1;
}

static const struct {
    const char *seq;
    jj_tok_type type;
} op_table[] = {
    {"{%", TK_OPEN_STMT}, {"%}", TK_CLOSE_STMT}, {"{{", TK_OPEN_EXPR}, {"}}", TK_CLOSE_EXPR},
    {"(", TK_LPAREN},     {")", TK_RPAREN},      {"{", TK_LBRACE},     {"}", TK_RBRACE},
    {"[", TK_LBRACKET},   {"]", TK_RBRACKET},    {",", TK_COMMA},      {".", TK_DOT},
    {":", TK_COLON},      {"|", TK_PIPE},        {"<=", TK_CMP},       {">=", TK_CMP},
    {"==", TK_CMP},       {"!=", TK_CMP},        {"<", TK_CMP},        {">", TK_CMP},
    {"+", TK_ADD},        {"-", TK_ADD},         {"~", TK_ADD},        {"**", TK_POW},
    {"*", TK_MUL},        {"//", TK_MUL},        {"/", TK_MUL},        {"%", TK_MUL},
    {"=", TK_EQUALS},
};

static int operator(lexer *lx, int *brace_depth) {
    const pp *p = &lx->src;
    for (size_t i = 0; i < sizeof op_table / sizeof op_table[0]; i++) {
        size_t len = strlen(op_table[i].seq);
        if (op_table[i].type == TK_CLOSE_EXPR && *brace_depth > 0) continue;
        if (p->n - lx->cur < len || memcmp(p->s + lx->cur, op_table[i].seq, len)) continue;
        push(lx, op_table[i].type, op_table[i].seq, len, lx->cur);
        if (op_table[i].type == TK_OPEN_EXPR) *brace_depth = 0;
        else if (op_table[i].type == TK_LBRACE) ++*brace_depth;
        else if (op_table[i].type == TK_RBRACE) --*brace_depth;
        lx->cur += len;
        return 1;
    }
    return 0;
}

static int is_tag_open(const pp *p, size_t i) {
    return i + 1 < p->n && p->s[i] == '{' && (p->s[i + 1] == '%' || p->s[i + 1] == '{' ||
                                              p->s[i + 1] == '#');
}

static void comment(lexer *lx) {
    const pp *p = &lx->src;
    size_t start = lx->cur;
    lx->cur += 2;
    int strip_before = lx->cur < p->n && p->s[lx->cur] == '-';
    if (strip_before) lx->cur++;
    size_t c0 = lx->cur;
    while (!(lx->cur + 1 < p->n && p->s[lx->cur] == '#' && p->s[lx->cur + 1] == '}')) {
        if (lx->cur + 2 >= p->n) lex_fail(lx, start, "Missing end of comment tag", "");
        lx->cur++;
    }
    size_t len = lx->cur - c0;
    int strip_after = len && p->s[lx->cur - 1] == '-';
    if (strip_before) strip_trailing(lx);
    push(lx, TK_COMMENT, p->s + c0, len - (size_t)strip_after, start);
    lx->cur += 2;
    if (strip_after) skip_leading(lx);
}

/* One step of the main loop; returns 0 at the end of the input. */
static int lex_step(lexer *lx, int *brace_depth) {
    const pp *p = &lx->src;
    jj_tok_type lt = last_type(lx);
    if (lt == TK_EOF || lt == TK_CLOSE_STMT || lt == TK_CLOSE_EXPR || lt == TK_COMMENT) {
        size_t s = lx->cur;
        while (lx->cur < p->n && !is_tag_open(p, lx->cur)) lx->cur++;
        if (lx->cur > s) {
            push(lx, TK_TEXT, p->s + s, lx->cur - s, s);
            return 1;
        }
    }
    if (lx->cur >= p->n) return 0;
    if (p->n - lx->cur >= 2 && !memcmp(p->s + lx->cur, "{#", 2)) {
        comment(lx);
        return 1;
    }
    if (p->n - lx->cur >= 3 && (!memcmp(p->s + lx->cur, "{%-", 3) ||
                                !memcmp(p->s + lx->cur, "{{-", 3))) {
        strip_trailing(lx);
        int expr = p->s[lx->cur + 1] == '{';
        push(lx, expr ? TK_OPEN_EXPR : TK_OPEN_STMT, expr ? "{{" : "{%", 2, lx->cur);
        if (expr) *brace_depth = 0;
        lx->cur += 3;
        return 1;
    }
    size_t ws = skip_space(p, lx->cur);
    if (ws > lx->cur) {
        check_not_end(lx, ws, lx->cur);
        lx->cur = ws;
    }
    if (p->n - lx->cur >= 3 && (!memcmp(p->s + lx->cur, "-%}", 3) ||
                                !memcmp(p->s + lx->cur, "-}}", 3))) {
        int expr = p->s[lx->cur + 1] == '}';
        push(lx, expr ? TK_CLOSE_EXPR : TK_CLOSE_STMT, expr ? "}}" : "%}", 2, lx->cur);
        lx->cur += 3;
        skip_leading(lx);
        return 1;
    }
    char c = p->s[lx->cur];
    if ((c == '-' || c == '+') && unary_sign(lx)) return 1;
    if (operator(lx, brace_depth)) return 1;
    if (c == '\'' || c == '"') {
        string_literal(lx, c);
        return 1;
    }
    size_t start = lx->cur;
    if (c >= '0' && c <= '9') {
        size_t e = digits(p, lx->cur);
        check_not_end(lx, e, start);
        if (last_type(lx) != TK_DOT && e + 1 < p->n && p->s[e] == '.' && p->s[e + 1] >= '0' &&
            p->s[e + 1] <= '9') {
            e = digits(p, e + 1);
            check_not_end(lx, e, start);
        }
        push(lx, TK_NUMBER, p->s + start, e - start, start);
        lx->cur = e;
        return 1;
    }
    if (is_word(c)) {
        size_t e = lx->cur;
        while (e < p->n && is_word(p->s[e])) e++;
        check_not_end(lx, e, start);
        push(lx, TK_IDENT, p->s + start, e - start, start);
        lx->cur = e;
        return 1;
    }
    size_t len;
    jj_utf8_decode(p->s + lx->cur, p->n - lx->cur, &len);
    char d[8] = {0};
    memcpy(d, p->s + lx->cur, len);
    lex_fail(lx, lx->cur, "Unexpected character: ", d);
}

jj_token *jj_tokenize(jj_arena *a, jj_fail_ctx *f, const char *src, size_t n, size_t *count) {
    lexer lx = {.a = a, .f = f, .orig = src, .orig_n = n, .lc_line = 1, .lc_col = 1};
    preprocess(&lx, src, n);
    int brace_depth = 0;
    while (lex_step(&lx, &brace_depth)) {}
    push(&lx, TK_EOF, "", 0, lx.src.n);
    *count = lx.n;
    return lx.toks;
}
