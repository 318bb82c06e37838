#!/usr/bin/env bash
# `make` installs system packages only when asked (README "Build"): with every pkg-config module
# hidden (PKG_CONFIG_LIBDIR pointing at an empty directory, so ./INSTALL finds MPI, HDF5, libconfig
# and OpenBLAS missing) and an apt-get and npm on PATH that only record their calls and fail:
#  - a plain `make` and a packager's `make install` (as root) call neither apt-get nor npm, say
#    what is missing (the apt-get line, INSTALL_DEPS=1) and stop non-zero before compiling;
#  - `make check` and `make demo` do call apt-get (they set up a fresh machine), and so does
#    `make INSTALL_DEPS=1`; INSTALL_DEPS=2 is refused.
# Nothing is built or installed: every run stops at the dependency check (BUILD and PREFIX are
# temporary directories, checked empty afterwards).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
if [[ $(id -u) != 0 ]]; then echo "1..0 # SKIP apt-get runs only as root: run as root to test it"; exit 77; fi
tap_plan 8
mkdir -p "$TMP/bin" "$TMP/pc" "$TMP/npm"
for tool in apt-get npm; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/calls.log"\nexit 1\n' "$tool" "$TMP" > "$TMP/bin/$tool"
    chmod +x "$TMP/bin/$tool"
done
mk() { # mk LOG ARGS...: make in the checkout with the deps hidden and the recording tools first
    local log=$1; shift
    rm -f "$TMP/calls.log"
    PATH="$TMP/bin:$PATH" PKG_CONFIG_LIBDIR="$TMP/pc" PKG_CONFIG_PATH= TSR_DATA_DIR="$TMP/npm" \
        make --no-print-directory -C "$TSR_ROOT" BUILD="$TMP/build" "$@" >"$TMP/$log" 2>&1
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

mk demo.txt demo
calls | grep -q "^apt-get update"
tap_check $? "make demo runs apt-get for what is missing (calls: $(calls | tr '\n' ';'))"

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
[[ $_tap_failed == 0 ]] || for f in plain install check demo; do tap_diag "$f:"; sed 's/^/#   /' "$TMP/$f.txt" | tail -8; done
tap_done
