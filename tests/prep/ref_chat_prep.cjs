// ref_chat_prep.cjs — the reference for tests/prep/test_prep_chat_template.sh: what transformers.js
// would feed a model for each conversation of a JSONL file. The model's chat_template (from its
// tokenizer_config.json, with the special-token variables bos_token, eos_token, ... as transformers
// passes them) is rendered by @huggingface/jinja with add_generation_prompt false, and the text is
// encoded by transformers.js's tokenizer (npm @lenml/tokenizers) without added BOS/EOS, special
// tokens in the text matched (what apply_chat_template(..., {tokenize: true}) does).
//   node ref_chat_prep.cjs TOKENIZERS_PKG JINJA_PKG MODEL_DIR encode FILE.jsonl
//     one line per conversation: the ids, or "error: MESSAGE" when the template fails
//   node ref_chat_prep.cjs TOKENIZERS_PKG JINJA_PKG MODEL_DIR encode_gen FILE.jsonl
//     the same with add_generation_prompt true (the prompts of reinforcement learning)
//   node ref_chat_prep.cjs TOKENIZERS_PKG JINJA_PKG MODEL_DIR decode FILE
//     one JSON string per line of ids: the decoded text
"use strict";
const fs = require("fs"), path = require("path");
const [tokPkg, jinjaPkg, model, mode, file] = process.argv.slice(2);
const { TokenizerLoader } = require(path.resolve(tokPkg, "dist", "main.js"));
const { Template } = require(path.resolve(jinjaPkg, "dist", "index.cjs"));
const readJson = f => JSON.parse(fs.readFileSync(path.join(model, f), "utf8"));
const cfg = readJson("tokenizer_config.json");
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: readJson("tokenizer.json"), tokenizerConfig: cfg });
const lines = fs.readFileSync(file, "utf8").split("\n").filter(l => l.trim());
if (mode === "decode") {
  for (const l of lines) console.log(JSON.stringify(tok.decode(l.split(" ").map(Number), { clean_up_tokenization_spaces: false })));
  process.exit(0);
}
const vars = {};
for (const k of ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"]) {
  let v = cfg[k];
  if (v && typeof v === "object") v = v.content;
  if (typeof v === "string") vars[k] = v;
}
const tpl = new Template(cfg.chat_template);
for (const l of lines) {
  try {
    const text = tpl.render({ ...vars, ...JSON.parse(l), add_generation_prompt: mode === "encode_gen" });
    console.log(tok.encode(text, { add_special_tokens: false }).join(" "));
  } catch (e) {
    console.log("error: " + String(e.message || e).split("\n")[0]);
  }
}
