#!/usr/bin/env bash
# The commands the docs show run as shown (issue 48 item 8; the marker: docs/style.md "Docs"):
#  - every shell block marked runnable (```sh runnable) in README.md and docs/*.md runs, the blocks
#    of one file in order in one scratch checkout of their own, each to exit 0: build/ holds the
#    programs (tessera-train through a wrapper that appends --set overrides for a tiny model and
#    2 steps: the commands' options, paths and files are the docs', only the sizes are small),
#    configs/ the recipes, runs/tiny a tiny run of configs/tiny.cfg, and the inputs the
#    blocks name (my_texts/, my_pairs.jsonl, tokens.txt, file.txt, my-eval.cfg) are small fixtures;
#  - the commands in the recipes' header comments give only options their programs have;
#  - every repository path README.md and docs/*.md name in backquotes (`jobs/rl.sbatch`, under
#    jobs/ examples/ src/ tests/ tools/ bench/ configs/) exists; a placeholder in capitals
#    (tests/fuzz/corpus/NAME) and configs/profiles/ (tables still to be measured) are not paths.
source "$(dirname "$0")/../lib.sh"
GPT2=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}/gpt2
[[ -f $GPT2/encoder.json ]] || { echo "GPT-2's files missing ($GPT2): run ./INSTALL --ensure"; exit 77; }
tsr_tmpdir
"$PY3" "$TSR_ROOT/tests/cli/doc_blocks.py" extract "$TMP" "$TSR_ROOT/README.md" "$TSR_ROOT"/docs/*.md >"$TMP/files.txt"
tap_plan $(($(wc -l <"$TMP/files.txt") + 2))

# the scratch checkout each file's blocks run in (made once, copied)
W0=$TMP/w0
mkdir -p "$W0/build" "$W0/bin" "$W0/my_texts" "$W0/data"
for f in "$BUILD"/tessera "$BUILD"/tessera-healthcheck; do ln -s "$f" "$W0/build/"; done
for d in configs examples eval jobs; do ln -s "$TSR_ROOT/$d" "$W0/$d"; done
cat >"$W0/build/tessera-train" <<EOF
#!/usr/bin/env bash
exec "$TRAIN" "\$@" --set max_duration=2ba --set eval_interval=0ba --set sample.tokens=0 \\
    --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set seq_len=32 \\
    --set model.max_seq_len=32 --set global_batch=4 --set micro_batch=2 --set threads=1 \\
    --set eval_samples=4 --set watchdog.window=0
EOF
real_mpirun=$(command -v mpirun)
printf '#!/usr/bin/env bash\nexec bash "%s" "%s" "$@"\n' "$TSR_ROOT/tests/mpi_env.sh" "$real_mpirun" >"$W0/bin/mpirun"
chmod +x "$W0/build/tessera-train" "$W0/bin/mpirun"
"$PY3" - "$W0" <<'PY'
import json, os, random, sys
w = sys.argv[1]
rng = random.Random(1)
things = ["apple", "sky", "grass", "snow", "sea", "sun", "night", "rose"]
colours = ["red", "blue", "green", "white", "black", "yellow"]
for k in range(3):
    with open(os.path.join(w, "my_texts", "part%d.txt" % k), "w") as f:
        for _ in range(120):
            f.write("the %s is %s and the %s is %s .\n" % (rng.choice(things), rng.choice(colours),
                                                          rng.choice(things), rng.choice(colours)))
with open(os.path.join(w, "my_pairs.jsonl"), "w") as f:
    for _ in range(300):
        t = rng.choice(things)
        f.write(json.dumps({"prompt": "q: what colour is the %s ?\na:" % t,
                            "response": " " + rng.choice(colours)}) + "\n")
with open(os.path.join(w, "tokens.txt"), "w") as f:
    f.write(" ".join(str(rng.randrange(50257)) for _ in range(400)) + "\n")
with open(os.path.join(w, "file.txt"), "w") as f:
    f.write("Hello, world.\n")
with open(os.path.join(w, "my-eval.cfg"), "w") as f:
    f.write('data = { val = "data/my-sft/val"; };\neval_samples = 8;\n')
PY
# runs/tiny as configs/tiny.cfg leaves it, on data/brown (here: the fixture's text)
(cd "$W0" && build/tessera prep -q --out data/brown --tokenizer gpt2 --doc-sep '\n' my_texts/ &&
    build/tessera-train --config configs/tiny.cfg --set save_interval=0ba) >"$TMP/setup.txt" 2>&1 ||
    { sed 's/^/# /' "$TMP/setup.txt" | tail -5; echo "# the scratch checkout could not be set up"; exit 1; }
rm -rf "$W0/data/brown"

# each file's runnable blocks, in order, in a copy of the scratch checkout
while read -r file range; do
    w=$TMP/w-$(basename "$file" .md)
    cp -a "$W0" "$w"
    ok=0 ran=""
    for ((b = ${range%-*}; b <= ${range#*-}; b++)); do
        where=$(head -1 "$TMP/$(printf %02d $b).sh" | cut -c3-)
        (cd "$w" && PATH="$w/bin:$PATH" bash -euo pipefail "$TMP/$(printf %02d $b).sh") </dev/null >"$TMP/out.txt" 2>&1 ||
            { ok=1; tap_diag "${where#"$TSR_ROOT"/} failed:"; tail -5 "$TMP/out.txt" | sed 's/^/#   /'; break; }
        ran+=" ${where##*:}"
    done
    tap_check $ok "${file#"$TSR_ROOT"/}: the runnable blocks at lines$ran run"
done <"$TMP/files.txt"

"$PY3" "$TSR_ROOT/tests/cli/doc_blocks.py" options "$BUILD" "$TSR_ROOT"/configs/*.cfg >"$TMP/opts.txt"
rc=$?
sed 's/^/# /' "$TMP/opts.txt" | tail -4
tap_check $rc "the recipes' header commands give only options their programs list in --help"

missing=""
for f in "$TSR_ROOT/README.md" "$TSR_ROOT"/docs/*.md; do
    while read -r p; do
        [[ -e $TSR_ROOT/${p%/} || $p =~ [A-Z]{3} || $p == configs/profiles/* || $p == *'*'* ]] ||
            missing+=" ${f#"$TSR_ROOT"/}: $p;"
    done < <(grep -o '`\(jobs\|examples\|src\|tests\|tools\|bench\|configs\)/[A-Za-z0-9_./*-]*`' "$f" | tr -d '`' | sort -u)
done
[[ -z $missing ]]
tap_check $? "every repository path README.md and docs/*.md name exists (missing:${missing:- none})"
tap_done
