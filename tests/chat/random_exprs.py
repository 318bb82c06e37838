"""random_exprs.py — random Jinja expressions for the differential check in
tests/chat/test_chat_templates.sh: literals, variables, operators, filters, tests, methods and
ternaries nested a few deep, one template file per expression, plus the context they use.
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


def main():
    out, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    for i in range(count):
        with open(os.path.join(out, "e%04d.jinja" % i), "w", encoding="utf-8") as f:
            f.write("{{ %s }}" % expr(rng))
    ctx = {"u": "U", "xs": [3, 1, 2], "d": {"k": "v", "a": 1.5}, "s": "hello World", "f": 2.25}
    with open(os.path.join(out, "context.json"), "w") as f:
        json.dump(ctx, f)


main()
