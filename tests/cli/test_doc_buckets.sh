#!/usr/bin/env bash
# test_doc_buckets.sh — every s3:// location the docs, the recipes, the benchmarks, the examples
# and the job scripts show is one tessera takes (issue 79 item 2: buckets follow S3's naming rules,
# docs/object-storage.md; the benchmarks' and the docs' one-letter buckets had to be renamed, and
# docs/tessera-train.md's hang line still showed s3://b/ds, which tessera refuses with exit 1).
# Each distinct bucket is given to `tessera verify-data s3://BUCKET/p` against an endpoint where
# nothing listens: the location's checks run first (a bucket outside the rules: exit 1, "does not
# follow S3's naming rules"); a taken one goes on to the request, which fails to connect (exit 2).
# A placeholder in capitals (s3://BUCKET/..., s3://B/P), "...", and a shell variable are skipped.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$TSR_ROOT/tests/ports.sh"
tap_plan 2

cd "$TSR_ROOT" || exit 1
files=(README.md docs/*.md bench configs examples jobs)
mapfile -t buckets < <(grep -rhoE 's3://[^/[:space:]`"'\''),;]*' "${files[@]}" 2>/dev/null |
    sed 's|^s3://||' | grep -vE '^([A-Z_]*|\.\.\.|.*\$.*)$' | sort -u)
port=$(free_ports 1) || exit 1 # nothing listens there: the request fails to connect
bad=()
for b in "${buckets[@]}"; do
    out=$(env -i PATH="$PATH" HOME="$TMP" AWS_ACCESS_KEY_ID=K AWS_SECRET_ACCESS_KEY=S \
        AWS_ENDPOINT_URL="http://127.0.0.1:$port" TSR_S3_RETRIES=1 TMPDIR="$TMP" \
        "$TOOL" verify-data "s3://$b/p" 2>&1)
    rc=$?
    ((rc == 2)) && ! grep -q "naming rules" <<<"$out" || bad+=("s3://$b (exit $rc: $(grep -m1 error <<<"$out" | cut -c1-160))")
done
((${#buckets[@]} >= 3 && ${#bad[@]} == 0))
tap_check $? "the ${#buckets[@]} buckets the docs, recipes, benchmarks, examples and job scripts name (${buckets[*]}) are taken (refused: ${bad[*]:-none})"

# the control: the same command refuses a bucket outside the rules, naming them
out=$(env -i PATH="$PATH" HOME="$TMP" AWS_ACCESS_KEY_ID=K AWS_SECRET_ACCESS_KEY=S \
    AWS_ENDPOINT_URL="http://127.0.0.1:$port" "$TOOL" verify-data s3://b/ds 2>&1)
rc=$?
((rc == 1)) && grep -q "does not follow S3's naming rules" <<<"$out"
tap_check $? "the control: s3://b/ds refused with exit 1 naming S3's naming rules (exit $rc)"
