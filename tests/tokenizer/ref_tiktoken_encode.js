// ref_tiktoken_encode.js — the reference encoder for tokenizers in tiktoken's format: npm tiktoken
// (the Rust tiktoken built to WebAssembly: the same BPE and the same regex engine as Python's
// tiktoken), run on files, printed like `tessera tokenizer encode`: one line per file, the ids
// space-separated.
//   node tests/tokenizer/ref_tiktoken_encode.js [--ordinary] [--decode-to DIR] TIKTOKEN_PKG_DIR
//        (--o200k RANKS_FILE | --kimi MODEL_DIR) FILE...
// TIKTOKEN_PKG_DIR holds npm tiktoken (lite/tiktoken.cjs, encoders/o200k_base.json; ./INSTALL puts it
// in data/npm/tiktoken).
//   --o200k RANKS_FILE  the ranks of RANKS_FILE with o200k_base's pattern and special tokens (the
//                       package's encoders/o200k_base.json: what tiktoken's openai_public gives them)
//   --kimi MODEL_DIR    MODEL_DIR/tiktoken.model with Kimi K2's pattern (KIMI_PAT_STR below) and
//                       special tokens as tokenization_kimi.py builds them from
//                       MODEL_DIR/tokenizer_config.json
// Encoding is encode(text, "all"): every special token in the text is matched, as Kimi's
// encode(allow_special_tokens=True) does; with --ordinary encode_ordinary(text): none is (Kimi's
// allow_special_tokens=False). Each FILE is read as UTF-8 (node: each maximal ill-formed subpart
// becomes one U+FFFD). --decode-to DIR also writes DIR/BASENAME: decode(ids) of each file.
'use strict';
const fs = require('fs');
const path = require('path');
const args = process.argv.slice(2);
const flag = name => (args[0] === name ? (args.shift(), true) : false);
const opt = name => (args[0] === name ? (args.shift(), args.shift()) : null);
const ordinary = flag('--ordinary');
const decodeTo = opt('--decode-to');
const pkg = args.shift();
const o200kFile = opt('--o200k');
const kimiDir = opt('--kimi');
const files = args;
if (!pkg || (!o200kFile && !kimiDir)) {
  process.stderr.write('usage: ref_tiktoken_encode.js [--ordinary] [--decode-to DIR] TIKTOKEN_PKG_DIR ' +
                       '(--o200k RANKS_FILE | --kimi MODEL_DIR) FILE...\n');
  process.exit(1);
}
const { Tiktoken } = require(path.resolve(pkg, 'lite', 'tiktoken.cjs'));

// Kimi K2's pre-tokenizer pattern: TikTokenTokenizer.pat_str of tokenization_kimi.py (moonshotai's
// Kimi-K2 repositories on Hugging Face; Moonlight's tokenization_moonshot.py has the same), verbatim
const KIMI_PAT_STR = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join('|');
const NUM_RESERVED_SPECIAL_TOKENS = 256;

// tokenization_kimi.py's special tokens: the ids after the ranks, named by added_tokens_decoder or
// <|reserved_token_ID|> (num_base_tokens = the number of ranks)
function kimiSpecials(dir, ranks) {
  const nBase = ranks.split('\n').filter(l => l.trim()).length;
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const dec = cfg.added_tokens_decoder || {};
  const specials = {};
  for (let i = nBase; i < nBase + NUM_RESERVED_SPECIAL_TOKENS; i++)
    specials[dec[i] ? dec[i].content : `<|reserved_token_${i}|>`] = i;
  return specials;
}

let enc;
if (o200kFile) {
  const o200k = require(path.resolve(pkg, 'encoders', 'o200k_base.json'));
  enc = new Tiktoken(fs.readFileSync(o200kFile, 'utf8'), o200k.special_tokens, o200k.pat_str);
} else {
  const ranks = fs.readFileSync(path.join(kimiDir, 'tiktoken.model'), 'utf8');
  enc = new Tiktoken(ranks, kimiSpecials(kimiDir, ranks), KIMI_PAT_STR);
}
const out = [];
for (const f of files) {
  const text = fs.readFileSync(f, 'utf8');
  const ids = ordinary ? enc.encode_ordinary(text) : enc.encode(text, 'all');
  out.push(Array.from(ids).join(' ') + '\n');
  if (decodeTo) fs.writeFileSync(path.join(decodeTo, path.basename(f)), Buffer.from(enc.decode(ids)));
}
enc.free();
process.stdout.write(out.join(''));
