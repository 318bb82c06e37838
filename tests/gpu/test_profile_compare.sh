#!/usr/bin/env bash
# bench/gpu/profile_compare.py (issue 25: the profile's runs side by side) on the tables the lent
# H200 gave on 2026-11-26 (tests/gpu/fixtures/profile-h200/: the TSR_PROFILE tables of
# `device.sh profile`'s base, norm-hold, gemm-tune and splitk-any runs of gpt2-124m, cut from
# their logs at the table's header). splitk-any chose the defaults' algorithms, so a copy of it
# named *-again.txt stands for the `again` run (the noise). The fixtures are read, never written.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 5
F=$TSR_ROOT/tests/gpu/fixtures/profile-h200
PC=("$(command -v python3)" "$TSR_ROOT/bench/gpu/profile_compare.py")
sum0=$(cat "$F"/*.txt | sha256sum)

out=$("${PC[@]}" "$F/profile-gpt2-124m.txt" "$F/profile-gpt2-124m-norm-hold.txt" \
      "$F/profile-gpt2-124m-gemm-tune.txt" 2>&1)
r=$?
line=$(grep '^norm-hold ' <<<"$out")
((r == 0)) && grep -q "^no 'again' run" <<<"$out" && grep -q '^base  *63\.448$' <<<"$out" &&
    [[ $line == *"63.013     -0.44 (-0.7%)  layernorm_backward 32768x768 2.551 -> 1.926;"* ]] &&
    grep -q '^gemm-tune  *63\.596  *+0\.15 (+0\.2%)' <<<"$out" && ! grep -q '~' <<<"$out"
tap_check $? "base, norm-hold, gemm-tune: exit $r, forward+backward 63.448 -> 63.013 (-0.44 ms) and 63.596, the held LayerNorm backward named first, no noise marks without again"

cp "$F/profile-gpt2-124m-splitk-any.txt" "$TMP/profile-gpt2-124m-again.txt"
out=$("${PC[@]}" "$F/profile-gpt2-124m.txt" "$F/profile-gpt2-124m-norm-hold.txt" \
      "$F/profile-gpt2-124m-gemm-tune.txt" "$TMP/profile-gpt2-124m-again.txt" 2>&1)
r=$?
nh=$(grep '^norm-hold ' <<<"$out") gt=$(grep '^gemm-tune ' <<<"$out")
((r == 0)) && ! grep -q "^no 'again' run" <<<"$out" &&
    [[ $nh == *"  ~-0.44 (-0.7%)  layernorm_backward 32768x768 2.551 -> 1.926; ~attention_backward 32x1024x12 12.499 -> 12.549"* ]] &&
    [[ $gt == *"  ~+0.15 (+0.2%)  attention_backward 32x1024x12 12.499 -> 13.073; matmul_forward 32768x768x3072 3.737 -> 3.392"* ]]
tap_check $? "with again: changes within twice the base-again difference or 1 % marked '~' (norm-hold's attention, both forward+backward totals), those beyond it not (the held LayerNorm, gemm-tune's attention backward +0.57 ms)"

# every row is read, past "step: gradient norm" (an op name of two spaces) to the table's end:
# the last row changed in a copy of the defaults shows; the same copy unchanged lists its ties
# in name order, whatever Python's hash seed
sed 's/^\(zero  *-  *7  *\)0\.015 /\19.999 /' "$F/profile-gpt2-124m.txt" >"$TMP/profile-gpt2-124m-zero.txt"
cp "$F/profile-gpt2-124m.txt" "$TMP/profile-gpt2-124m-same.txt"
out=$("${PC[@]}" "$F/profile-gpt2-124m.txt" "$TMP/profile-gpt2-124m-zero.txt" 2>&1)
r=$?
s1=$(PYTHONHASHSEED=1 "${PC[@]}" "$F/profile-gpt2-124m.txt" "$TMP/profile-gpt2-124m-same.txt")
s2=$(PYTHONHASHSEED=2 "${PC[@]}" "$F/profile-gpt2-124m.txt" "$TMP/profile-gpt2-124m-same.txt")
((r == 0)) && ! cmp -s "$F/profile-gpt2-124m.txt" "$TMP/profile-gpt2-124m-zero.txt" &&
    grep -q '^zero  .*  zero - 0\.015 -> 9\.999' <<<"$out" && [[ $s1 == "$s2" ]] &&
    grep -q '^same .* +0\.00 (+0\.0%)  attention_backward 32x1024x12 12\.499 -> 12\.499' <<<"$s1"
tap_check $? "the table's last row ('zero', after 'step: gradient norm') read; ties in name order under two hash seeds"

printf 'no table here\n' >"$TMP/empty.txt"
"${PC[@]}" "$F/profile-gpt2-124m.txt" "$TMP/empty.txt" >"$TMP/e1.txt" 2>&1
r1=$?
"${PC[@]}" "$TMP/missing.txt" "$F/profile-gpt2-124m.txt" >"$TMP/e2.txt" 2>&1
r2=$?
((r1 == 2 && r2 == 2)) && grep -q "profile_compare.py: $TMP/empty.txt: no 'TSR_PROFILE device time per op' table" "$TMP/e1.txt" &&
    grep -q "profile_compare.py: $TMP/missing.txt: No such file" "$TMP/e2.txt"
tap_check $? "a file without a table and a missing one: exit 2 naming each (exit $r1, $r2)"

[[ $(cat "$F"/*.txt | sha256sum) == "$sum0" ]]
tap_check $? "the fixtures unchanged"
