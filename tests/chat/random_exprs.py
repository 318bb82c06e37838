"""random_exprs.py — random templates for the differential check in
tests/chat/test_chat_templates.sh, one file each, plus the context they use: in turn an
expression (literals, variables, operators, filters, tests, methods, ternaries nested a few
deep), a few statements (for with loop.*, break/continue/else, tuple targets, if/elif/else,
set, namespace, macros) around expressions, and whitespace control (-%}, {{-, comments,
lstrip/trim_blocks, generation tags) between text of spaces, newlines and Unicode spaces.
    python3 random_exprs.py OUT_DIR COUNT SEED
"""
import json
import os
import random
import sys

ATOMS = ["'\u00e9t\u00e9 \U0001F600'", "'STRASSE \u00df'", "'\u4f60\u00a0\u597d'", "1", "0", "-2",
         "2.5", "1.0", "0.0", "'a'", "'Ab c'", "''", "' x '", "'1'", "true", "false", "none",
         "[1, 2, 3]", "[]", "['b', 'a']", "{'k': 1, 'j': [2]}", "{}", "(1, 2)", "u", "xs", "d", "s",
         "f", "d.k", "xs[0]", "xs[-1]", "s[1:]", "xs[::-1]", "missing", "missing.x"]
BINARY = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in",
          "not in", "and", "or"]
FILTERS = ["length", "trim", "upper", "lower", "title", "capitalize", "tojson", "string", "int",
           "float", "abs", "first", "last", "reverse", "list", "join", "unique", "items", "sort",
           "default('z')", "join(', ')", "tojson(indent=2)", "int(9)", "default(7, true)",
           "replace('a', 'b')", "indent(2)", "dictsort", "safe", "sort(reverse=true)"]
TESTS = ["defined", "none", "string", "number", "integer", "mapping", "iterable", "sequence",
         "boolean", "true", "false", "odd", "even", "lower", "upper", "callable"]
METHODS = [".upper()", ".lower()", ".strip()", ".split()", ".split('a')", ".startswith('A')",
           ".endswith('c')", ".replace(' ', '_')", ".title()", ".get('k')", ".items()", ".keys()",
           ".values()", ".length"]


def expr(rng, depth=0):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice(ATOMS)
    sub = lambda: expr(rng, depth + 1)
    if r < 0.55:
        return "(%s %s %s)" % (sub(), rng.choice(BINARY), sub())
    if r < 0.7:
        return "%s|%s" % (sub(), rng.choice(FILTERS))
    if r < 0.78:
        return "(%s is %s%s)" % (sub(), rng.choice(["", "not "]), rng.choice(TESTS))
    if r < 0.86:
        return rng.choice(ATOMS) + rng.choice(METHODS)
    if r < 0.93:
        return "(%s if %s else %s)" % (sub(), sub(), sub())
    return "(not %s)" % sub()


ITERABLES = ["xs", "[1, 2, 3]", "d", "d|items", "s|list", "[]", "xs[::-1]", "range(3)", "'ab'",
             "m"]
LOOP_TAILS = ["", "{% if loop.last %}L{% endif %}", "{% if x == 2 %}{% break %}{% endif %}",
              "{% if loop.first %}{% continue %}{% endif %}"]


def statement(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.35:
        return "{{ %s }}" % expr(rng)
    sub = lambda: statement(rng, depth + 1)
    if r < 0.5:
        return "{%% for x in %s %%}%s{{ loop.index }}{{ x }}%s{%% endfor %%}" % (
            rng.choice(ITERABLES), sub(), rng.choice(LOOP_TAILS))
    if r < 0.6:
        return "{%% for k, v in %s %%}{{ k }}={{ v }}{%% else %%}E{%% endfor %%}" % rng.choice(
            ["d|items", "d.items()", "[[1, 2]]", "xs", "[]"])
    if r < 0.72:
        return "{%% if %s %%}%s{%% elif %s %%}%s{%% else %%}%s{%% endif %%}" % (
            expr(rng), sub(), expr(rng), sub(), sub())
    if r < 0.82:
        return "{%% set v = %s %%}{{ v }}" % expr(rng)
    if r < 0.9:
        return ("{%% set ns = namespace(c=0) %%}{%% for x in %s %%}{%% set ns.c = ns.c + 1 %%}"
                "{%% endfor %%}{{ ns.c }}") % rng.choice(ITERABLES)
    return ("{%% macro mm(a, b=2) %%}[{{ a }}|{{ b }}]{%% endmacro %%}{{ mm(%s) }}"
            "{{ mm(1, b=%s) }}") % (expr(rng), expr(rng))


SPACES = ["", " ", "  ", "\n", "\t", " \n ", "\n\n", "\u00a0", "\u3000", "\r\n", "x", "y z",
          "\u2028"]


def whitespace(rng):
    o, c = lambda: rng.choice(["{%", "{%-"]), lambda: rng.choice(["%}", "-%}"])
    pieces = [
        lambda: "%s if true %s%s%s endif %s" % (o(), c(), rng.choice(SPACES), o(), c()),
        lambda: "%s 'v' %s" % (rng.choice(["{{", "{{-"]), rng.choice(["}}", "-}}"])),
        lambda: "{#%s c %s#}" % (rng.choice(["", "-"]), rng.choice(["", "-"])),
        lambda: "%s generation %s" % (o(), c()),
        lambda: "%s for i in [1, 2] %s%s{{ i }}%s endfor %s" % (o(), c(), rng.choice(SPACES), o(), c()),
    ]
    text = "".join(rng.choice(SPACES) + rng.choice(pieces)() + rng.choice(SPACES)
                   for _ in range(rng.randrange(1, 6)))
    return text + rng.choice(["", "\n", "\n\n"])


def main():
    out, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    kinds = [lambda: "{{ %s }}" % expr(rng),
             lambda: "".join(statement(rng) + rng.choice(["", " ", "\n"]) for _ in range(2)),
             lambda: whitespace(rng)]
    for i in range(count):
        with open(os.path.join(out, "e%04d.jinja" % i), "w", encoding="utf-8", newline="") as f:
            f.write(kinds[i % 3]())
    ctx = {"u": "U", "xs": [3, 1, 2], "d": {"k": "v", "a": 1.5}, "s": "hello World", "f": 2.25,
           "m": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " yo "}]}
    with open(os.path.join(out, "context.json"), "w") as f:
        json.dump(ctx, f)


main()
