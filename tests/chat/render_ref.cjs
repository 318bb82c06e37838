// render_ref.cjs — the reference for tests/chat/test_chat_templates.sh: renders a chat template
// with @huggingface/jinja, exactly as build/tests/test_jinja --render does with ours.
//   node render_ref.cjs JINJA_PACKAGE_DIR TEMPLATE_FILE [CONTEXT.json ...]
// The contexts are JSON objects merged in order. Prints the rendering, or "error: MESSAGE" and
// exits 2 when the template does not parse or raises. TSR_JINJA_NOW: see below.
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
const source = fs.readFileSync(templateFile, "utf8");
const context = {};
for (const f of contextFiles) Object.assign(context, JSON.parse(fs.readFileSync(f, "utf8")));
let out;
try {
  out = new Template(source).render(context);
} catch (e) {
  process.stdout.write(`error: ${e && e.message !== undefined ? e.message : String(e)}\n`);
  process.exit(2);
}
process.stdout.write(out);
