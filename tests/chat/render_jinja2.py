#!/usr/bin/env python3
"""render_jinja2.py — chat templates rendered the way transformers' apply_chat_template renders them
(Python's jinja2: an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks and the
loopcontrols extension, transformers' tojson filter (json.dumps, ensure_ascii False), its globals
raise_exception and strftime_now), for tests/chat/test_chat_templates.sh; with the three printing
conventions of @huggingface/jinja, which tessera's engine follows (docs/chat-templates.md "Python's
jinja2"): {{ none }} prints nothing (jinja2: None), a list or an object prints as JSON (jinja2: Python's
repr), and an attribute or item of an undefined value is undefined, its tojson null (jinja2: errors).

  render_jinja2.py --pairs LIST

LIST: one rendering a line, "OUT<TAB>TEMPLATE_FILE<TAB>CONTEXT.json[<TAB>CONTEXT.json ...]" as
render_ref.cjs --pairs takes it: the contexts (JSON objects) merged in order are the template's
variables; OUT gets the rendering, or "error: MESSAGE" and a newline when the template does not
parse or raises. TSR_JINJA_NOW (seconds since the epoch, UTC) fixes strftime_now's clock.
"""
import json
import os
import sys
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    if isinstance(x, jinja2.Undefined):  # @huggingface/jinja: null (jinja2: an error)
        x = None
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    now = os.environ.get("TSR_JINJA_NOW")
    t = datetime.fromtimestamp(int(now), tz=timezone.utc) if now else datetime.now()
    return t.strftime(fmt)


def hf_print(value):
    """@huggingface/jinja's printing of None, lists and objects (the others as jinja2 prints them)."""
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return value


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, finalize=hf_print,
                                        undefined=jinja2.ChainableUndefined,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template_file, context_files):
    context = {}
    for f in context_files:
        with open(f, encoding="utf-8") as fh:
            context.update(json.load(fh))
    try:
        with open(template_file, encoding="utf-8", newline="") as fh:
            return env.from_string(fh.read()).render(**context)
    except Exception as e:  # a template error, or a type error inside the template: both reported
        return "error: %s\n" % e


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "--pairs":
        sys.exit("usage: render_jinja2.py --pairs LIST")
    env = environment()
    with open(sys.argv[2], encoding="utf-8") as fh:
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 2:
                continue
            with open(parts[0], "w", encoding="utf-8", newline="") as out:
                out.write(render(env, parts[1], parts[2:]))


if __name__ == "__main__":
    main()
