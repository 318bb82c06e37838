// ref_hf_encode.js — the reference encoder for Hugging Face tokenizer.json files: transformers.js's
// tokenizers as packaged by npm @lenml/tokenizers, run on files, printed like
// `tessera tokenizer encode`: one line per file, the ids space-separated.
//   node tests/tokenizer/ref_hf_encode.js TOKENIZERS_PKG_DIR MODEL_PKG_DIR FILE...
// TOKENIZERS_PKG_DIR holds @lenml/tokenizers (package.json, dist/main.js); MODEL_PKG_DIR holds a
// model's tokenizer.json and tokenizer_config.json (./INSTALL puts them in data/npm/chat/MODEL).
// Encoding is tokenizer.encode(text, {add_special_tokens: false}): no BOS/EOS added; added
// tokens in the text (<|eot_id|>, <|im_end|>, ...) are matched, as transformers.js always does.
// Each FILE is read as UTF-8 (node: each maximal ill-formed subpart becomes one U+FFFD).
'use strict';
const fs = require('fs');
const path = require('path');
const [pkg, model, ...files] = process.argv.slice(2);
const { TokenizerLoader } = require(path.resolve(pkg, 'dist', 'main.js'));
const readJson = f => JSON.parse(fs.readFileSync(path.resolve(model, f), 'utf8'));
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJson('tokenizer.json'),
  tokenizerConfig: readJson('tokenizer_config.json'),
});
const out = [];
for (const f of files) {
  const text = fs.readFileSync(f, 'utf8');
  out.push(tok.encode(text, { add_special_tokens: false }).join(' ') + '\n');
}
process.stdout.write(out.join(''));
