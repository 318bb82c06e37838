/* jinja_parse.c — tokens to a syntax tree, by recursive descent in @huggingface/jinja's order of
 * precedence (lowest first): ternary `a if c else b`, or, and, not, comparisons and `in`,
 * + - ~, * / // %, **, `is` tests, `|` filters, unary + -, calls and members, primaries.
 *
 * Node fields by type (jinja_int.h): IF a=test body alt; FOR a=target b=iterable body
 * alt=else; SET a=target b=value (NULL: block body); MACRO s=name alt=params body;
 * FILTER_STMT a=filter body; CALL a=callee body=args; MEMBER a=object b=property flag=computed;
 * SLICE a:b:c (each may be NULL); UNARY/BINARY s=op a b; FILTER a=operand b=filter (IDENT or
 * CALL); TEST a=operand s=name flag=negated; SELECT a=value b=test; TERNARY a=cond b=then
 * c=else; KWARG s=name a=value; ARRAY/TUPLE body; OBJECT body=keys alt=values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

typedef struct parser {
    jj_arena *a;
    jj_fail_ctx *f;
    const jj_token *t;
    size_t n, cur;
    int depth;
} parser;

static jj_node *parse_expr(parser *p);
static jj_node *parse_any(parser *p);
static jj_node *parse_primary(parser *p);

static _Noreturn void perr(parser *p, const jj_token *t, const char *fmt, const char *arg) {
    jj_fail(p->f, JINJA_ESYNTAX, t->line, t->col, fmt, arg);
}

static const jj_token *peek(const parser *p) { return &p->t[p->cur < p->n ? p->cur : p->n - 1]; }

static jj_node *node(parser *p, jj_node_type type, const jj_token *at) {
    jj_node *nd = jj_alloc(p->a, sizeof *nd);
    nd->type = type;
    nd->line = at->line;
    nd->col = at->col;
    nd->height = 1;
    return nd;
}

static int height_of(const jj_node *nd) { return nd ? nd->height : 0; }

static int list_height(const jj_list *l) {
    int h = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i]->height > h) h = l->v[i]->height;
    return h;
}

/* An expression node whose operands are set: its height, refused past JJ_MAX_EXPR_DEPTH at the
 * node (a chain `1 + 1 + ...` or `x|f|f...` of 20,000 links would end the C stack when
 * evaluated). Returns nd. */
static jj_node *built(parser *p, jj_node *nd) {
    int h = height_of(nd->a);
    if (height_of(nd->b) > h) h = height_of(nd->b);
    if (height_of(nd->c) > h) h = height_of(nd->c);
    if (list_height(&nd->body) > h) h = list_height(&nd->body);
    if (list_height(&nd->alt) > h) h = list_height(&nd->alt);
    nd->height = h + 1;
    if (nd->height > JJ_MAX_EXPR_DEPTH)
        jj_fail(p->f, JINJA_ESYNTAX, nd->line, nd->col, "expression nested too deeply: more than "
                "%d operators, filters, tests, members or calls in one chain", JJ_MAX_EXPR_DEPTH);
    return nd;
}

static void list_push(parser *p, jj_list *l, jj_node *nd) {
    if ((l->n & (l->n - 1)) == 0) { /* capacity doubles at powers of two */
        jj_node **v = jj_alloc(p->a, (l->n ? l->n * 2 : 1) * sizeof *v);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
    }
    l->v[l->n++] = nd;
}

static int is(const parser *p, jj_tok_type t) { return peek(p)->type == t; }
static int is2(const parser *p, jj_tok_type t0, jj_tok_type t1) {
    return p->cur + 1 < p->n && p->t[p->cur].type == t0 && p->t[p->cur + 1].type == t1;
}

static int is_ident(const parser *p, size_t off, const char *name) {
    const jj_token *t = p->cur + off < p->n ? &p->t[p->cur + off] : NULL;
    return t && t->type == TK_IDENT && !strcmp(t->s, name);
}

/* {% name ... with name one of the list (NULL-terminated) */
static int is_statement(const parser *p, const char *const *names) {
    if (!is2(p, TK_OPEN_STMT, TK_IDENT)) return 0;
    for (; *names; names++)
        if (is_ident(p, 1, *names)) return 1;
    return 0;
}

static const jj_token *expect(parser *p, jj_tok_type type, const char *what) {
    const jj_token *t = peek(p);
    if (t->type != type) {
        char m[160];
        snprintf(m, sizeof m, "%s, got %s%s%.40s%s", what, jj_tok_name(t->type),
                 t->n ? " '" : "", t->s, t->n ? "'" : "");
        perr(p, t, "%s", m);
    }
    p->cur++;
    return t;
}

static void expect_ident(parser *p, const char *name) {
    if (!is_ident(p, 0, name)) perr(p, peek(p), "Expected %s", name);
    p->cur++;
}

static void enter(parser *p) {
    if (++p->depth > JJ_MAX_NESTING)
        jj_fail(p->f, JINJA_ESYNTAX, peek(p)->line, peek(p)->col, "blocks, brackets or unary "
                "operators nested too deeply (over %d inside each other)", JJ_MAX_NESTING);
}

/* statements until {% one-of-names %} (not consumed); names[0] is the closing tag */
static void parse_until(parser *p, jj_list *l, const char *const *names) {
    while (!is_statement(p, names)) {
        if (is(p, TK_EOF))
            perr(p, peek(p), "Unexpected end of template: expected {%% %s %%}", names[0]);
        list_push(p, l, parse_any(p));
    }
}

static void end_tag(parser *p, const char *name) {
    expect(p, TK_OPEN_STMT, "Expected {% token");
    expect_ident(p, name);
    expect(p, TK_CLOSE_STMT, "Expected %} token");
}

/* ---- expressions ---- */
static jj_node *expr_sequence(parser *p, int primary) {
    const jj_token *at = peek(p);
    jj_node *first = primary ? parse_primary(p) : parse_expr(p);
    if (!is(p, TK_COMMA)) return first;
    jj_node *tup = node(p, N_TUPLE, at);
    list_push(p, &tup->body, first);
    while (is(p, TK_COMMA)) {
        p->cur++;
        list_push(p, &tup->body, primary ? parse_primary(p) : parse_expr(p));
    }
    return built(p, tup);
}

static void parse_args(parser *p, jj_list *args, int params) {
    expect(p, TK_LPAREN, "Expected opening parenthesis for arguments list");
    int saw_kw = 0;
    while (!is(p, TK_RPAREN)) {
        const jj_token *at = peek(p);
        if (at->type == TK_EOF) perr(p, at, "%s", "Unexpected end of template in an argument list");
        if (at->type == TK_POW || (at->type == TK_MUL && !strcmp(at->s, "*")))
            perr(p, at, "%s", "argument unpacking (* and **) is not supported");
        jj_node *arg = parse_expr(p);
        if (is(p, TK_EQUALS)) {
            p->cur++;
            if (arg->type != N_IDENT)
                perr(p, at, "%s", params ? "Expected identifier for parameter declaration"
                                         : "Expected identifier for keyword argument");
            jj_node *kw = node(p, N_KWARG, at);
            kw->s = arg->s;
            kw->n = arg->n;
            kw->a = parse_expr(p);
            arg = built(p, kw);
        }
        if (params && arg->type != N_IDENT && arg->type != N_KWARG)
            perr(p, at, "%s", "Expected identifier for parameter declaration");
        if (arg->type == N_KWARG) saw_kw = 1;
        else if (saw_kw)
            perr(p, at, "%s", params ? "Non-default argument follows default argument"
                                     : "Positional arguments must come before keyword arguments");
        list_push(p, args, arg);
        if (is(p, TK_COMMA)) p->cur++;
    }
    expect(p, TK_RPAREN, "Expected closing parenthesis for arguments list");
}

static jj_node *member_args(parser *p, const jj_token *at) {
    jj_node *sl[4] = {0};
    size_t k = 0;
    int is_slice = 0;
    while (!is(p, TK_RBRACKET)) {
        if (is(p, TK_EOF)) perr(p, peek(p), "%s", "Unexpected end of template in [ ]");
        if (k == 4) perr(p, at, "%s", "Expected 0-3 arguments for slice expression");
        if (is(p, TK_COLON)) {
            sl[k++] = NULL;
            p->cur++;
            is_slice = 1;
        } else {
            sl[k++] = parse_expr(p);
            if (is(p, TK_COLON)) {
                p->cur++;
                is_slice = 1;
            }
        }
    }
    if (k == 0) perr(p, at, "%s", "Expected at least one argument for member/slice expression");
    if (!is_slice) return sl[0];
    if (k > 3) perr(p, at, "%s", "Expected 0-3 arguments for slice expression");
    jj_node *s = node(p, N_SLICE, at);
    s->a = sl[0];
    s->b = sl[1];
    s->c = sl[2];
    return built(p, s);
}

static jj_node *parse_member(parser *p, jj_node *obj) {
    while (is(p, TK_DOT) || is(p, TK_LBRACKET)) {
        const jj_token *op = &p->t[p->cur++];
        jj_node *m = node(p, N_MEMBER, op);
        m->a = obj;
        m->flag = op->type == TK_LBRACKET;
        if (m->flag) {
            m->b = member_args(p, op);
            expect(p, TK_RBRACKET, "Expected closing square bracket");
        } else {
            const jj_token *at = peek(p);
            m->b = parse_primary(p);
            if (m->b->type != N_IDENT && m->b->type != N_INT)
                perr(p, at, "%s", "Expected identifier or integer following dot operator");
        }
        obj = built(p, m);
    }
    return obj;
}

static jj_node *parse_call(parser *p, jj_node *callee) {
    jj_node *c = node(p, N_CALL, peek(p));
    c->a = callee;
    parse_args(p, &c->body, 0);
    jj_node *e = parse_member(p, built(p, c));
    return is(p, TK_LPAREN) ? parse_call(p, e) : e;
}

static jj_node *parse_call_member(parser *p) {
    jj_node *m = parse_member(p, parse_primary(p));
    return is(p, TK_LPAREN) ? parse_call(p, m) : m;
}

static jj_node *parse_unary_sign(parser *p) {
    const jj_token *t = peek(p);
    if ((t->type == TK_UNARY || t->type == TK_ADD) && (!strcmp(t->s, "-") || !strcmp(t->s, "+"))) {
        p->cur++;
        enter(p);
        jj_node *u = node(p, N_UNARY, t);
        u->s = t->s;
        u->a = parse_unary_sign(p);
        p->depth--;
        return built(p, u);
    }
    return parse_call_member(p);
}

static jj_node *parse_filter(parser *p) {
    jj_node *operand = parse_unary_sign(p);
    while (is(p, TK_PIPE)) {
        const jj_token *at = &p->t[p->cur++];
        jj_node *flt = parse_primary(p);
        if (flt->type != N_IDENT) perr(p, at, "%s", "Expected identifier for the filter");
        if (is(p, TK_LPAREN)) flt = parse_call(p, flt);
        jj_node *f = node(p, N_FILTER, at);
        f->a = operand;
        f->b = flt;
        operand = built(p, f);
    }
    return operand;
}

static jj_node *parse_test(parser *p) {
    jj_node *operand = parse_filter(p);
    while (is_ident(p, 0, "is")) {
        const jj_token *at = &p->t[p->cur++];
        jj_node *t = node(p, N_TEST, at);
        t->flag = is_ident(p, 0, "not");
        if (t->flag) p->cur++;
        jj_node *name = parse_primary(p);
        if (name->type != N_IDENT) perr(p, at, "%s", "Expected identifier for the test");
        t->s = name->s;
        t->n = name->n;
        t->a = operand;
        operand = built(p, t);
    }
    return operand;
}

static jj_node *binary(parser *p, const jj_token *op, const char *s, jj_node *l, jj_node *r) {
    jj_node *b = node(p, N_BINARY, op);
    b->s = s;
    b->a = l;
    b->b = r;
    return built(p, b);
}

static jj_node *parse_power(parser *p) {
    jj_node *l = parse_test(p);
    while (is(p, TK_POW)) {
        const jj_token *op = &p->t[p->cur++];
        l = binary(p, op, op->s, l, parse_test(p));
    }
    return l;
}

static jj_node *parse_mul(parser *p) {
    jj_node *l = parse_power(p);
    while (is(p, TK_MUL)) {
        const jj_token *op = &p->t[p->cur++];
        l = binary(p, op, op->s, l, parse_power(p));
    }
    return l;
}

static jj_node *parse_add(parser *p) {
    jj_node *l = parse_mul(p);
    while (is(p, TK_ADD)) {
        const jj_token *op = &p->t[p->cur++];
        l = binary(p, op, op->s, l, parse_mul(p));
    }
    return l;
}

static jj_node *parse_comparison(parser *p) {
    jj_node *l = parse_add(p);
    for (;;) {
        const jj_token *op = peek(p);
        const char *s;
        if (is_ident(p, 0, "not") && is_ident(p, 1, "in")) {
            s = "not in";
            p->cur += 2;
        } else if (is_ident(p, 0, "in") || op->type == TK_CMP) {
            s = op->s;
            p->cur++;
        } else {
            return l;
        }
        l = binary(p, op, s, l, parse_add(p));
    }
}

static jj_node *parse_not(parser *p) {
    if (!is_ident(p, 0, "not")) return parse_comparison(p);
    const jj_token *op = &p->t[p->cur++];
    enter(p);
    jj_node *u = node(p, N_UNARY, op);
    u->s = "not";
    u->a = parse_not(p);
    p->depth--;
    return built(p, u);
}

static jj_node *parse_and(parser *p) {
    jj_node *l = parse_not(p);
    while (is_ident(p, 0, "and")) {
        const jj_token *op = &p->t[p->cur++];
        l = binary(p, op, "and", l, parse_not(p));
    }
    return l;
}

static jj_node *parse_or(parser *p) {
    jj_node *l = parse_and(p);
    while (is_ident(p, 0, "or")) {
        const jj_token *op = &p->t[p->cur++];
        l = binary(p, op, "or", l, parse_and(p));
    }
    return l;
}

static jj_node *parse_expr(parser *p) {
    enter(p);
    jj_node *a = parse_or(p);
    if (is_ident(p, 0, "if")) {
        const jj_token *at = &p->t[p->cur++];
        jj_node *test = parse_or(p);
        if (is_ident(p, 0, "else")) {
            p->cur++;
            jj_node *t = node(p, N_TERNARY, at);
            t->a = test;
            t->b = a;
            t->c = parse_expr(p);
            a = built(p, t);
        } else {
            jj_node *s = node(p, N_SELECT, at);
            s->a = a;
            s->b = test;
            a = built(p, s);
        }
    }
    p->depth--;
    return a;
}

static jj_node *parse_literal_list(parser *p, const jj_token *t, int object) {
    jj_node *l = node(p, object ? N_OBJECT : N_ARRAY, t);
    jj_tok_type close = object ? TK_RBRACE : TK_RBRACKET;
    while (!is(p, close)) {
        if (is(p, TK_EOF))
            perr(p, t, "Unexpected end of template in a %s literal", object ? "{ }" : "[ ]");
        list_push(p, &l->body, parse_expr(p));
        if (object) {
            expect(p, TK_COLON, "Expected colon between key and value in object literal");
            list_push(p, &l->alt, parse_expr(p));
        }
        if (is(p, TK_COMMA)) p->cur++;
    }
    p->cur++;
    return built(p, l);
}

static jj_node *parse_primary(parser *p) {
    const jj_token *t = peek(p);
    if (t->type == TK_EOF) perr(p, t, "%s", "Unexpected end of template in an expression");
    p->cur++;
    switch (t->type) {
    case TK_NUMBER: {
        jj_node *nd = node(p, strchr(t->s, '.') ? N_FLOAT : N_INT, t);
        nd->num = strtod(t->s, NULL);
        return nd;
    }
    case TK_STRING: {
        jj_buf b;
        jj_buf_init(&b, p->a);
        jj_buf_add(&b, t->s, t->n);
        while (is(p, TK_STRING)) { /* adjacent literals concatenate */
            jj_buf_add(&b, p->t[p->cur].s, p->t[p->cur].n);
            p->cur++;
        }
        jj_node *nd = node(p, N_STR, t);
        nd->s = b.p;
        nd->n = b.n;
        return nd;
    }
    case TK_IDENT: {
        jj_node *nd = node(p, N_IDENT, t);
        nd->s = t->s;
        nd->n = t->n;
        return nd;
    }
    case TK_LPAREN: {
        enter(p);
        jj_node *e = expr_sequence(p, 0);
        expect(p, TK_RPAREN, "Expected closing parenthesis");
        p->depth--;
        return e;
    }
    case TK_LBRACKET:
    case TK_LBRACE: {
        enter(p);
        jj_node *l = parse_literal_list(p, t, t->type == TK_LBRACE);
        p->depth--;
        return l;
    }
    default:
        perr(p, t, "Unexpected token: %s", jj_tok_name(t->type));
    }
}

/* ---- statements ---- */
static jj_node *parse_set(parser *p, const jj_token *at) {
    jj_node *s = node(p, N_SET, at);
    s->a = expr_sequence(p, 0);
    if (is(p, TK_EQUALS)) {
        p->cur++;
        s->b = expr_sequence(p, 0);
    } else {
        static const char *const endset[] = {"endset", NULL};
        expect(p, TK_CLOSE_STMT, "Expected %} token");
        parse_until(p, &s->body, endset);
        expect(p, TK_OPEN_STMT, "Expected {% token");
        expect_ident(p, "endset");
    }
    expect(p, TK_CLOSE_STMT, "Expected closing statement token");
    return s;
}

/* if, then each elif as an N_IF (flag set) alone in the alt of the one before: a chain of any
 * length, built in a loop (an elif is not a nesting level; jj_eval walks the chain in a loop) */
static jj_node *parse_if(parser *p, const jj_token *at) {
    static const char *const stops[] = {"endif", "elif", "else", NULL};
    static const char *const endif[] = {"endif", NULL};
    jj_node *head = node(p, N_IF, at), *nd = head;
    for (;;) {
        nd->a = parse_expr(p);
        expect(p, TK_CLOSE_STMT, "Expected closing statement token");
        parse_until(p, &nd->body, stops);
        if (is_ident(p, 1, "else")) {
            p->cur += 2;
            expect(p, TK_CLOSE_STMT, "Expected closing statement token");
            parse_until(p, &nd->alt, endif);
        }
        if (!is_ident(p, 1, "elif")) return head;
        jj_node *e = node(p, N_IF, &p->t[p->cur + 1]);
        e->flag = true;
        p->cur += 2;
        list_push(p, &nd->alt, e);
        nd = e;
    }
}

static jj_node *parse_for(parser *p, const jj_token *at) {
    static const char *const stops[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    jj_node *nd = node(p, N_FOR, at);
    const jj_token *vt = peek(p);
    nd->a = expr_sequence(p, 1);
    if (nd->a->type != N_IDENT && nd->a->type != N_TUPLE)
        perr(p, vt, "%s", "Expected identifier/tuple for the loop variable");
    if (!is_ident(p, 0, "in"))
        perr(p, peek(p), "%s", "Expected `in` keyword following loop variable");
    p->cur++;
    nd->b = parse_expr(p);
    expect(p, TK_CLOSE_STMT, "Expected closing statement token");
    parse_until(p, &nd->body, stops);
    if (is_ident(p, 1, "else")) {
        p->cur += 2;
        expect(p, TK_CLOSE_STMT, "Expected closing statement token");
        parse_until(p, &nd->alt, endfor);
    }
    return nd;
}

static jj_node *parse_macro(parser *p, const jj_token *at) {
    static const char *const endmacro[] = {"endmacro", NULL};
    jj_node *nd = node(p, N_MACRO, at);
    jj_node *name = parse_primary(p);
    if (name->type != N_IDENT) perr(p, at, "%s", "Expected identifier following macro statement");
    nd->s = name->s;
    nd->n = name->n;
    parse_args(p, &nd->alt, 1);
    expect(p, TK_CLOSE_STMT, "Expected closing statement token");
    parse_until(p, &nd->body, endmacro);
    return nd;
}

static jj_node *parse_filter_stmt(parser *p, const jj_token *at) {
    static const char *const endfilter[] = {"endfilter", NULL};
    jj_node *nd = node(p, N_FILTER_STMT, at);
    jj_node *flt = parse_primary(p);
    if (flt->type != N_IDENT) perr(p, at, "%s", "Expected identifier for the filter");
    nd->a = is(p, TK_LPAREN) ? parse_call(p, flt) : flt;
    expect(p, TK_CLOSE_STMT, "Expected closing statement token");
    parse_until(p, &nd->body, endfilter);
    end_tag(p, "endfilter");
    return nd;
}

static jj_node *parse_statement(parser *p) {
    expect(p, TK_OPEN_STMT, "Expected opening statement token");
    const jj_token *t = peek(p);
    if (t->type != TK_IDENT) perr(p, t, "Unknown statement, got %s", jj_tok_name(t->type));
    p->cur++;
    jj_node *nd;
    if (!strcmp(t->s, "set")) {
        nd = parse_set(p, t);
    } else if (!strcmp(t->s, "if")) {
        nd = parse_if(p, t);
        end_tag(p, "endif");
    } else if (!strcmp(t->s, "for")) {
        nd = parse_for(p, t);
        end_tag(p, "endfor");
    } else if (!strcmp(t->s, "macro")) {
        nd = parse_macro(p, t);
        end_tag(p, "endmacro");
    } else if (!strcmp(t->s, "break") || !strcmp(t->s, "continue")) {
        nd = node(p, t->s[0] == 'b' ? N_BREAK : N_CONTINUE, t);
        expect(p, TK_CLOSE_STMT, "Expected closing statement token");
    } else if (!strcmp(t->s, "filter")) {
        nd = parse_filter_stmt(p, t);
    } else {
        perr(p, t, "Unknown statement type: %s", t->s);
    }
    return nd;
}

static jj_node *parse_any(parser *p) {
    const jj_token *t = peek(p);
    enter(p);
    jj_node *nd;
    switch (t->type) {
    case TK_COMMENT:
        p->cur++;
        nd = node(p, N_COMMENT, t);
        break;
    case TK_TEXT:
        p->cur++;
        nd = node(p, N_STR, t);
        nd->s = t->s;
        nd->n = t->n;
        break;
    case TK_OPEN_STMT:
        nd = parse_statement(p);
        break;
    case TK_OPEN_EXPR:
        p->cur++;
        nd = parse_expr(p);
        expect(p, TK_CLOSE_EXPR, "Expected closing expression token");
        break;
    default:
        perr(p, t, "Unexpected token type: %s", jj_tok_name(t->type));
    }
    p->depth--;
    return nd;
}

jj_list jj_parse(jj_arena *a, jj_fail_ctx *f, const jj_token *toks, size_t count) {
    parser p = {.a = a, .f = f, .t = toks, .n = count};
    jj_list prog = {0};
    while (!is(&p, TK_EOF)) list_push(&p, &prog, parse_any(&p));
    return prog;
}
