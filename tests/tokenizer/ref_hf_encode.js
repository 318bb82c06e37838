// ref_hf_encode.js — the reference encoder for Hugging Face tokenizer.json files: transformers.js's
// tokenizers as packaged by npm @lenml/tokenizers, run on files, printed like
// `tessera tokenizer encode`: one line per file, the ids space-separated.
//   node tests/tokenizer/ref_hf_encode.js [--decode-to DIR] [--eos-to FILE] TOKENIZERS_PKG_DIR MODEL_PKG_DIR FILE...
// TOKENIZERS_PKG_DIR holds @lenml/tokenizers (package.json, dist/main.js); MODEL_PKG_DIR holds a
// model's tokenizer.json and tokenizer_config.json (./INSTALL puts them in data/npm/chat/MODEL).
// Encoding is tokenizer.encode(text, {add_special_tokens: false}): no BOS/EOS added; added
// tokens in the text (<|eot_id|>, <|im_end|>, ...) are matched, as transformers.js always does.
// Each FILE is read as UTF-8 (node: each maximal ill-formed subpart becomes one U+FFFD).
// --decode-to DIR also writes DIR/BASENAME: tokenizer.decode(ids) of each file, as UTF-8.
// --eos-to FILE also writes the tokenizer's eos_token_id to FILE (one line), from the same load.
//
// One fix is applied to what the package reads: a Metaspace pre_tokenizer or decoder without
// add_prefix_space (the form tokenizers >= 0.19 writes: Mistral's tokenizer.json) gets
// add_prefix_space = (prepend_scheme != "never"), what transformers.js PR #1451 (after 3.7.2)
// does and what HF tokenizers does; 3.7.2 reads the missing key as false and never prepends.
'use strict';
const fs = require('fs');
const path = require('path');
const args = process.argv.slice(2);
const opt = name => (args[0] === name ? (args.shift(), args.shift()) : null);
const decodeTo = opt('--decode-to');
const eosTo = opt('--eos-to');
const [pkg, model, ...files] = args;
const { TokenizerLoader } = require(path.resolve(pkg, 'dist', 'main.js'));
const readJson = f => JSON.parse(fs.readFileSync(path.resolve(model, f), 'utf8'));
const tokenizerJSON = readJson('tokenizer.json');
for (const part of [tokenizerJSON.pre_tokenizer, tokenizerJSON.decoder])
  if (part && part.type === 'Metaspace' && part.add_prefix_space === undefined)
    part.add_prefix_space = part.prepend_scheme !== 'never';
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON,
  tokenizerConfig: readJson('tokenizer_config.json'),
});
if (eosTo) fs.writeFileSync(eosTo, `${tok.eos_token_id}\n`);
const out = [];
for (const f of files) {
  const text = fs.readFileSync(f, 'utf8');
  const ids = tok.encode(text, { add_special_tokens: false });
  out.push(ids.join(' ') + '\n');
  if (decodeTo) fs.writeFileSync(path.join(decodeTo, path.basename(f)), ids.length ? tok.decode(ids) : '');
}
process.stdout.write(out.join(''));
