#!/usr/bin/env bash
# tessera-healthcheck's usage errors about its threads option, no checks run: -t was --threads
# until -t became --tokenizer in every program (docs/cli.md); a prolog still typing -t gets exit 1
# (docs/healthcheck.md "Exit codes": a usage error, no verdict line) and a hint that names the
# option's letter now and what it takes. A missing or bad -j value names --threads and the range.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hc_lib.sh"
tsr_tmpdir
tap_plan 5

# usage ARGS...: runs the checker; its exit status in $rc, stderr in $err, stdout in $out
usage() {
    rc=0
    out=$("$HC" --config "$HC_CFG" "$@" 2>"$TMP/err") || rc=$?
    err=$(<"$TMP/err")
}

hint="tessera-healthcheck: error: unknown option: -t (--threads is -j now: -j N or --threads N) (see 'tessera-healthcheck --help')"
told=0
for args in "-t 4" "-t" "-t0" "-dt 2" "--quick -t 8"; do
    read -ra a <<<"$args"
    usage "${a[@]}"
    if ((rc == 1)) && [[ -z $out && $err == "$hint" ]]; then told=$((told + 1))
    else tap_diag "tessera-healthcheck $args: exit $rc: $err"; fi
done
((told == 5))
tap_check $? "-t, with a value, without, attached, in a cluster: exit 1, nothing on stdout, the hint '-j N or --threads N' ($told of 5)"

usage -j
((rc == 1)) && [[ $err == "tessera-healthcheck: error: option --threads needs a value (see 'tessera-healthcheck --help')" ]]
tap_check $? "-j without a value: exit 1 naming --threads ($err)"

bad=0
for v in abc 0 4097 1.5 -2; do
    usage -j "$v"
    want="tessera-healthcheck: error: --threads '$v': expected an integer in [1, 4096] (see 'tessera-healthcheck --help')"
    if ((rc != 1)) || [[ $err != "$want" ]]; then bad=$((bad + 1)); tap_diag "-j $v: exit $rc: $err"; fi
done
((bad == 0))
tap_check $? "-j abc, 0, 4097, 1.5, -2: exit 1 naming the value and the range [1, 4096]"

# the accepted forms: --version exits before any check, after parsing every option
ok=0
for args in "-j 3" "-j3" "--threads 3" "--threads=3"; do
    read -ra a <<<"$args"
    usage "${a[@]}" --version
    if ((rc == 0)) && [[ $out == "tessera-healthcheck "* ]]; then ok=$((ok + 1)); else tap_diag "$args: exit $rc: $err"; fi
done
((ok == 4))
tap_check $? "-j 3, -j3, --threads 3, --threads=3 are taken ($ok of 4)"

# the help: one line for the option, under -j; the old letter is in neither the help nor the parser
help=$("$HC" --help)
[[ $(grep -c -- '--threads' <<<"$help") == 1 ]] && grep -qE '^  -j, --threads N ' <<<"$help" &&
    ! grep -qE '^  -t,' <<<"$help"
tap_check $? "--help lists '-j, --threads N' once and no -t"
tap_done
