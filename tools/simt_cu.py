#!/usr/bin/env python3
"""simt_cu.py SRC.cu OUT.cpp — a CUDA kernel file rewritten for the CPU SIMT emulator
(kernels/cuda_simt/simt.h), every line where it was (a #line directive names SRC, so compiler
messages point into the .cu file):

  NAME<<<grid, block, smem, stream>>>(args)  ->  tcu_simt::launch(NAME, grid, block, smem, stream)(args)
  extern __shared__ [__align__(N)] T x[];    ->  T *x = (T *)tcu_simt::dynamic_smem();
  __shared__ T a[N], b[M], c;                ->  the same, then tcu_simt::shared_block_init(a,
                                                 sizeof a); and b's and c's (NaN at each block's
                                                 start); a __shared__ declaration that does not
                                                 start its line stops the rewrite

NAME may carry template arguments (kernel<8, true>). Anything else is left to the compiler: a
launch this does not recognise stays `<<<`, which g++ rejects, so nothing is skipped silently."""
import re
import sys

LAUNCH = re.compile(r"(\b[A-Za-z_]\w*(?:\s*<[^<>;(){}]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
DYN_SMEM = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w\s]+?)\s+(\w+)\s*\[\s*\]\s*;")
# a static __shared__ declaration at the start of a line: its declarators (names with [dims])
STATIC_SMEM = re.compile(r"^(\s*__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?[^;]*?);", re.M)
DECLARATOR = re.compile(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:,|$)")


def rewrite(src):
    out = LAUNCH.sub(lambda m: "tcu_simt::launch(%s, %s)(" % (m.group(1), m.group(2)), src)
    out = DYN_SMEM.sub(lambda m: "%s *%s = (%s *)tcu_simt::dynamic_smem();"
                       % (m.group(1), m.group(2), m.group(1)), out)

    def poison(m):
        names = DECLARATOR.findall(m.group(1))
        if not names:
            raise SystemExit("simt_cu.py: a __shared__ declaration it cannot read: %s" % m.group(1))
        return m.group(1) + ";" + "".join(
            " tcu_simt::shared_block_init(&%s, sizeof %s);" % (n, n) for n in names)
    out = STATIC_SMEM.sub(poison, out)
    # every __shared__ left outside comments and strings is one of the declarations just handled
    code = re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                  lambda c: re.sub(r"[^\n]", " ", c.group(0)), out, flags=re.S)
    for n, (line, bare) in enumerate(zip(out.split("\n"), code.split("\n")), 1):
        if "__shared__" in bare and "shared_block_init" not in line:
            raise SystemExit("simt_cu.py: line %d: a __shared__ declaration it does not rewrite "
                             "(one a line, at its start): %s" % (n, line.strip()))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: simt_cu.py SRC.cu OUT.cpp")
    src_path, out_path = sys.argv[1], sys.argv[2]
    with open(src_path, encoding="utf-8") as f:
        src = f.read()
    out = rewrite(src)
    if "<<<" in out:
        line = out[: out.index("<<<")].count("\n") + 1
        sys.exit("simt_cu.py: %s:%d: a kernel launch it cannot rewrite" % (src_path, line))
    assert out.count("\n") == src.count("\n"), "the rewrite moved lines"
    with open(out_path, "w", encoding="utf-8") as f:
        f.write('#line 1 "%s"\n' % src_path)
        f.write(out)


if __name__ == "__main__":
    main()
