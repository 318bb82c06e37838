// render_ref.cjs — the reference for tests/chat/test_chat_templates.sh: renders a chat template
// with @huggingface/jinja, exactly as build/tests/test_jinja --render does with ours.
//   node render_ref.cjs JINJA_PACKAGE_DIR TEMPLATE_FILE [CONTEXT.json ...]
// The contexts are JSON objects merged in order. Prints the rendering, or "error: MESSAGE" and
// exits 2 when the template does not parse or raises. TSR_JINJA_NOW: see below.
//   node render_ref.cjs JINJA_PACKAGE_DIR --batch CONTEXT.json TEMPLATE_FILE...
// renders each template (one node for all) into TEMPLATE_FILE.ref, the same way.
//   node render_ref.cjs JINJA_PACKAGE_DIR --pairs LIST
// LIST: one rendering a line, "OUT<TAB>TEMPLATE_FILE<TAB>CONTEXT.json[<TAB>CONTEXT.json ...]";
// each is written to OUT as the first form prints it (one node for all).
"use strict";
const fs = require("fs");
const path = require("path");
const [jinjaDir, templateFile, ...contextFiles] = process.argv.slice(2);
if (!jinjaDir || !templateFile) {
  process.stderr.write("usage: node render_ref.cjs JINJA_PACKAGE_DIR TEMPLATE [CONTEXT.json ...]\n");
  process.exit(1);
}
// TSR_JINJA_NOW (seconds since the epoch) fixes strftime_now's clock, as it does for ours
if (process.env.TSR_JINJA_NOW) {
  const fixed = Number(process.env.TSR_JINJA_NOW) * 1000;
  const RealDate = Date;
  global.Date = class extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(fixed);
      else super(...args);
    }
    static now() {
      return fixed;
    }
  };
}
const { Template } = require(path.resolve(jinjaDir, "dist/index.cjs"));
// [true, rendering] or [false, "error: MESSAGE\n"]
function render(file, context) {
  try {
    return [true, new Template(fs.readFileSync(file, "utf8")).render(context)];
  } catch (e) {
    return [false, `error: ${e && e.message !== undefined ? e.message : String(e)}\n`];
  }
}
if (templateFile === "--batch") {
  const [ctxFile, ...files] = contextFiles;
  const ctx = JSON.parse(fs.readFileSync(ctxFile, "utf8"));
  for (const f of files) fs.writeFileSync(f + ".ref", render(f, ctx)[1]);
  process.exit(0);
}
if (templateFile === "--pairs") {
  for (const line of fs.readFileSync(contextFiles[0], "utf8").split("\n")) {
    if (!line) continue;
    const [out, tpl, ...ctxs] = line.split("\t");
    const ctx = {};
    for (const f of ctxs) Object.assign(ctx, JSON.parse(fs.readFileSync(f, "utf8")));
    fs.writeFileSync(out, render(tpl, ctx)[1]);
  }
  process.exit(0);
}
const context = {};
for (const f of contextFiles) Object.assign(context, JSON.parse(fs.readFileSync(f, "utf8")));
const [ok, text] = render(templateFile, context);
process.stdout.write(text);
process.exit(ok ? 0 : 2);
