#!/usr/bin/env bash
# mpi_bundle.sh OUTDIR BINARY... — MPI programs built here and the OpenMPI runtime they need, in one
# relocatable folder for a machine without MPI (the lent GPU machine: tests/gpu/device.sh pack,
# docs/cuda.md "Several ranks on one GPU"). OUTDIR gets:
#   bin/      the BINARYs (libtessera-cuda-train.so beside tessera-train, if named: it is opened
#             from the executable's folder)
#   lib/      every library they, mpirun, orted and the carried plugins load, less those the GPU
#             machine has (SKIP_RE: the C runtime, CUDA's; as device.sh)
#   openmpi/  OpenMPI's prefix, as installed here but relocated (OPAL_PREFIX): bin/mpirun (orterun),
#             orted; its plugins (MCA components) but those of other transports than shared
#             memory (btl vader) and self, and OpenSHMEM's; its help texts; PMIx's plugins and
#             help texts under their own prefix (PMIX_PREFIX)
#   env.sh    to source: OPAL_PREFIX, PMIX_PREFIX, PATH, LD_LIBRARY_PATH (the carried libraries
#             first), OMPI_MCA_btl=self,vader, OMPI_MCA_pml=ob1 and no configuration file of the
#             machine's (there is none there: OMPI_MCA_mca_base_param_files=/dev/null)
# OpenMPI's own files are found from `ompi_info --path` (OpenMPI 4.x: Debian 12's 4.1.4 here), so
# the folder mirrors their layout below its prefix, which OPAL_PREFIX then moves.
# Exit 2 on a missing tool, file or library. (The size that counts is the packed bundle's, which
# device.sh pack checks: the device tool carries 64 MiB in all, the working tree included.)
set -euo pipefail
die() { echo "mpi_bundle.sh: $*" >&2; exit 2; }
(($# >= 2)) || die "usage: mpi_bundle.sh OUTDIR BINARY..."
out=$1
shift
command -v ompi_info >/dev/null || die "no ompi_info on PATH (OpenMPI's runtime is what this packs)"
SKIP_RE='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libgcc_s\.so|libstdc\+\+\.so|libresolv\.so|libutil\.so|libcuda\.so|libnvidia-|libcudart\.so|libcublas|libcublasLt|libnccl|libcudnn|libnvrtc|libnvJitLink)'
# components of other transports (TCP, InfiniBand, OFI, UCX, PSM) and of OpenSHMEM: not carried,
# so that no rank can take another path than shared memory, and none of their libraries come
DROP_RE='^mca_(btl_(tcp|openib|ofi|uct|sm)|mtl_|pml_(ucx|cm|monitoring)|osc_(ucx|pt2pt|monitoring)|atomic_|spml_|sshmem_|memheap_|scoll_|coll_monitoring|vprotocol_)'

paths=$(ompi_info --parsable --path prefix --path pkglibdir --path pkgdatadir --path bindir) # one call: ~1 s each
path_of() { sed -n "s/^path:$1://p" <<<"$paths" | head -1; }
prefix=$(path_of prefix)
pkglibdir=$(path_of pkglibdir) pkgdatadir=$(path_of pkgdatadir) bindir=$(path_of bindir)
[[ -n $prefix && -d $pkglibdir && -d $pkgdatadir ]] || die "ompi_info names no plugin or data folder"
[[ $pkglibdir == "$prefix"/* && $pkgdatadir == "$prefix"/* ]] ||
    die "OpenMPI's folders are not below its prefix $prefix: OPAL_PREFIX cannot move them"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/openmpi/bin"
# The libraries: the closure of the carried files' DT_NEEDED entries (readelf: one process for
# many files, where ldd would run the loader once per file), each found by the loader's cache,
# else by ldd on the file that needs it; those the GPU machine has (SKIP_RE) left out
declare -A cache=() have=()
while read -r name path; do [[ -n ${cache[$name]:-} ]] || cache[$name]=$path; done < \
    <(ldconfig -p | awk '/x86-64/ && $NF ~ /^\// {print $1, $NF}')
needed() { readelf -d "$@" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u; }
carry() { # carry FILE...: the closure of their libraries into lib/
    local todo=("$@") next name path
    while ((${#todo[@]})); do
        next=()
        for name in $(needed "${todo[@]}"); do
            [[ $name =~ $SKIP_RE || -n ${have[$name]:-} ]] && continue
            path=${cache[$name]:-}
            [[ -n $path ]] || path=$(ldd "${todo[@]}" 2>/dev/null | awk -v n="$name" '$1 == n && $3 ~ /^\// {print $3; exit}')
            [[ -n $path && -f $path ]] || die "$name (needed by ${todo[*]}): not found here"
            cp -L "$path" "$out/lib/$name"
            have[$name]=1
            next+=("$out/lib/$name")
        done
        todo=("${next[@]}")
    done
}
files=()
for b in "$@"; do
    [[ -f $b ]] || die "no $b"
    cp -L "$b" "$out/bin/"
    strip --strip-debug "$out/bin/$(basename "$b")"
    files+=("$b")
done
for p in orterun orted; do
    [[ -x $bindir/$p ]] || die "no $bindir/$p (OpenMPI 4's launcher)"
    cp -L "$bindir/$p" "$out/openmpi/bin/$p"
    files+=("$bindir/$p")
done
ln -s orterun "$out/openmpi/bin/mpirun"
# the plugins, at their place below the prefix
plugdir=$out/openmpi/${pkglibdir#"$prefix"/}
mkdir -p "$plugdir"
plugins=()
for f in "$pkglibdir"/*.so; do
    [[ ${f##*/} =~ $DROP_RE ]] || plugins+=("$f")
done
cp -L "${plugins[@]}" "$plugdir/" # one process: the loop above forks none
files+=("${plugins[@]}")
mkdir -p "$out/openmpi/${pkgdatadir#"$prefix"/}"
cp -rL "$pkgdatadir"/. "$out/openmpi/${pkgdatadir#"$prefix"/}/"
# PMIx (OpenMPI's pmix_ext3x component loads libpmix, whose own plugins and help texts sit under
# its prefix): found beside the libpmix carried
carry "${files[@]}"
if [[ -n ${have[libpmix.so.2]:-} ]]; then
    pmix_prefix=$(dirname "$(dirname "$(readlink -f "${cache[libpmix.so.2]:-/nowhere}")")")
    [[ -d $pmix_prefix/lib/pmix ]] || die "no PMIx plugin folder at $pmix_prefix/lib/pmix"
    mkdir -p "$out/pmix/lib" "$out/pmix/share"
    cp -rL "$pmix_prefix/lib/pmix" "$out/pmix/lib/"
    [[ ! -d $pmix_prefix/share/pmix ]] || cp -rL "$pmix_prefix/share/pmix" "$out/pmix/share/"
    carry "$out"/pmix/lib/pmix/*.so
fi
cat >"$out/env.sh" <<'EOF'
# source this: the carried OpenMPI, relocated (mpi_bundle.sh)
_b=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$_b/openmpi PMIX_PREFIX=$_b/pmix PMIX_INSTALL_PREFIX=$_b/pmix
export PATH=$_b/openmpi/bin:$_b/bin:$PATH
export LD_LIBRARY_PATH=$_b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mca_base_param_files=/dev/null
export PMIX_MCA_mca_base_component_path=$_b/pmix/lib/pmix
unset _b
EOF
echo "mpi_bundle.sh: $out ($(du -sm "$out" | cut -f1) MiB uncompressed): $# program(s), $(ls "$out/lib" | wc -l) libraries, $(ls "$plugdir" | wc -l) OpenMPI plugins"
