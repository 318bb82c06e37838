#!/usr/bin/env bash
# test_gpt2_bounds.sh — GPT-2 tokenizer files that lie about their size are refused by name, quickly,
# without allocating what they ask for (issue 21 item 8): encoder.json's ids must be exactly
# 0..N-1 for its N entries, so a 3 KB file with id 2,000,000,000 exits 2 naming the id instead of
# asking for 24 GiB and dying with exit 3. Runs under a 2 GiB address-space limit and a timeout.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 5

# enc DIR 'k: v, ...': an encoder.json of the 256 byte tokens (ids 0..255, GPT-2's byte-to-unicode
# spelling) plus the given extra members, and a vocab.bpe holding only its version line
enc() {
    mkdir -p "$1"
    /usr/bin/python3 - "$1/encoder.json" "$2" "$TSR_ROOT/tests/tokenizer" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3])
from gpt2_bytes import byte_decoder
e = byte_decoder()
body = json.dumps(e, ensure_ascii=False)[:-1]
extra = sys.argv[2]
open(sys.argv[1], "w", encoding="utf-8").write(body + (", " + extra if extra else "") + "}")
PY
    printf '#version: 0.2\n' > "$1/vocab.bpe"
}
# run DIR: encodes a word with the tokenizer in DIR, 2 GiB of address space at most, 60 s at most
run() {
    (ulimit -v 2097152; printf 'hello' | timeout 60 "$TOOL" tokenizer encode --tokenizer "$1" - ) > "$TMP/out" 2>&1
}
# refused NAME MEMBER PATTERN WHAT: encoder.json plus MEMBER (in $TMP/NAME) exits 2, its message
# matching PATTERN; the check says WHAT and the exit
refused() {
    local rc
    enc "$TMP/$1" "$2"
    run "$TMP/$1"
    rc=$?
    [[ $rc == 2 ]] && grep -q "$3" "$TMP/out"
    tap_check $? "$4 (got exit $rc)"
}

enc "$TMP/ok" '"<|endoftext|>": 256'
run "$TMP/ok" && [[ $(cat "$TMP/out") == "104 101 108 108 111" ]]
tap_check $? "a well-formed 257-entry encoder.json loads and encodes ('$(head -c 80 "$TMP/out")')"

enc "$TMP/big" '"<|endoftext|>": 2000000000'
size=$(wc -c < "$TMP/big/encoder.json")
start=$SECONDS
run "$TMP/big"
rc=$?
tap_diag "$(head -3 "$TMP/out")"
[[ $rc == 2 ]] && grep -q "encoder.json: token id 2000000000 is out of range: the file has 257 entries, so the ids must be 0..256" "$TMP/out"
tap_check $? "a $size-byte encoder.json with id 2000000000 exits 2 naming the id and the entry count (got exit $rc in $((SECONDS - start)) s)"

refused gap '"<|endoftext|>": 257' "token id 257 is out of range: the file has 257 entries" \
    "ids with a gap (0..255, 257) exit 2 naming id 257"
refused dup '"<|endoftext|>": 255' "token id 255 appears twice" "a repeated id exits 2 naming it"
refused huge '"<|endoftext|>": 2147483648' "expected a token id (an integer in \[0, 2^31))" \
    "an id of 2^31 is refused as not a token id, exit 2"
tap_done
