#!/usr/bin/env bash
# Communicators are split only by the rank mesh (src/mesh/, docs/parallelism.md "The rank mesh"):
# in src/, checkpoint/ and kernels/ no file but src/mesh/* calls dist_group_split or an MPI
# communicator constructor (MPI_Comm_split, _split_type, _create, _create_group, _dup), except
# src/dist/dist.c, which defines dist_group_split (and finds the node's ranks with MPI_Comm_split_type);
# NCCL communicators (ncclCommInitRank, ncclCommInitAll, ncclCommSplit) are made only by the NCCL
# transport, src/gpu/gpu_comm_nccl.c, from a mesh group (its open takes a const tsr_mesh_group *
# and gets its MPI communicator from mesh_group_open); gpu_comm_open takes a mesh group and every
# call passes one (mesh_group(...) or a variable holding it), never a computed color.
# healthcheck/ is a separate program with its own node pairs and is not scanned. First a synthetic
# tree with each kind of finding, then the real tree, which must be clean.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 8

SPLIT='(dist_group_split|MPI_Comm_split|MPI_Comm_split_type|MPI_Comm_create|MPI_Comm_create_group|MPI_Comm_dup)[[:space:]]*\('
NCCL='(ncclCommInitRank|ncclCommInitAll|ncclCommSplit)'

# scan ROOT: prints one line per finding (file:line: text); exits 1 when there is any
scan() {
    local root=$1 dirs=() d
    for d in src checkpoint kernels; do [[ -d $root/$d ]] && dirs+=("$root/$d"); done
    local src=(--include='*.c' --include='*.h' --include='*.cu' --include='*.cpp')
    {
        grep -rnE "${src[@]}" "$SPLIT" "${dirs[@]}" |
            grep -vE "^$root/src/mesh/|^$root/src/dist/dist\.(c|h):"
        grep -rnE "${src[@]}" "$NCCL" "${dirs[@]}" |
            grep -vE "^$root/src/mesh/|^$root/src/gpu/gpu_comm_nccl\.c:"
        grep -rnE "${src[@]}" 'gpu_comm_open\(' "${dirs[@]}" |
            grep -vE "^$root/src/gpu/gpu_comm\.(c|h):" |
            grep -vE 'gpu_comm_open[[:space:]]*\((mesh_group[[:space:]]*\(|[A-Za-z_][A-Za-z_0-9]*[[:space:]]*,)'
        if [[ -f $root/src/gpu/gpu_comm.h ]] &&
            ! grep -q 'gpu_comm \*gpu_comm_open(const tsr_mesh_group \*' "$root/src/gpu/gpu_comm.h"; then
            echo "$root/src/gpu/gpu_comm.h: gpu_comm_open does not take a const tsr_mesh_group *"
        fi
        if [[ -f $root/src/gpu/gpu_comm_nccl.c ]] &&
            ! grep -q 'gpu_comm_direct_open(const tsr_mesh_group \*' "$root/src/gpu/gpu_comm_nccl.c"; then
            echo "$root/src/gpu/gpu_comm_nccl.c: its open does not take a const tsr_mesh_group *"
        fi
    } | sed "s|^$root/||" | grep . && return 1
    return 0
}

# tree DIR: the mesh, dist.c and a transport as they should be
tree() {
    mkdir -p "$1/src/mesh" "$1/src/dist" "$1/src/gpu" "$1/src/model" "$1/checkpoint" "$1/kernels"
    printf 'tsr_group *mesh_group_open(const tsr_mesh_group *g) { return dist_group_split(g->color, g->key); }\n' \
        > "$1/src/mesh/mesh.c"
    printf 'tsr_group *dist_group_split(int color, int key) {\n    MPI_Comm_split(MPI_COMM_WORLD, color, key, &c);\n}\n' \
        > "$1/src/dist/dist.c"
    printf 'gpu_comm *gpu_comm_open(const tsr_mesh_group *g, tcu_stream compute, char *why, size_t n);\n' \
        > "$1/src/gpu/gpu_comm.h"
    printf 'gpu_comm *gpu_comm_direct_open(const tsr_mesh_group *g, tcu_stream s, char *why, size_t n) {\n    c->g = mesh_group_open(g);\n    {"ncclCommInitRank"};\n}\n' \
        > "$1/src/gpu/gpu_comm_nccl.c"
    printf 'x->group = gpu_comm_open(mesh_group(mesh, TSR_MESH_EXPERT), s, why, n);\nr->comm = gpu_comm_open(context, s, why, n);\n' \
        > "$1/src/gpu/gpu_ep.c"
    printf '/* dist_group_split is called by the mesh only */\nvoid f(void);\n' > "$1/src/model/fsdp.c"
}

tree "$TMP/clean"
scan_clean "$TMP/clean" "a tree that splits only in src/mesh/ and src/dist/dist.c passes"

tree "$TMP/cpu"
printf 'void f(void) {\n    f->group = dist_group_split(f->gindex, f->grank);\n}\n' > "$TMP/cpu/src/model/fsdp.c"
printf 'void g(void) { MPI_Comm_dup(MPI_COMM_WORLD, &c); }\n' > "$TMP/cpu/checkpoint/ck.c"
scan_finds "$TMP/cpu" "a dist_group_split outside the mesh fails"
out_has "the findings name the file and line of each split" '^src/model/fsdp.c:2:.*dist_group_split'
out_has "an MPI communicator made elsewhere (MPI_Comm_dup in checkpoint/) is a finding" \
    '^checkpoint/ck.c:1:.*MPI_Comm_dup'

tree "$TMP/gpu"
printf 'x->group = gpu_comm_open(d->rank / ep->EP, d->rank, s, why, n);\n' >> "$TMP/gpu/src/gpu/gpu_ep.c"
printf 'void h(void) { ncclCommInitRank(&c, n, id, r); }\n' > "$TMP/gpu/src/gpu/gpu_ring.c"
scan_finds "$TMP/gpu" "a gpu_comm_open of a computed color fails"
out_has "the finding names the call, and NCCL's communicator made outside its transport" \
    "^src/gpu/gpu_ep.c:3:.*d->rank / ep->EP" "^src/gpu/gpu_ring.c:1:.*ncclCommInitRank"

tree "$TMP/sig"
printf 'gpu_comm *gpu_comm_open(int color, int key, tcu_stream compute, char *why, size_t n);\n' \
    > "$TMP/sig/src/gpu/gpu_comm.h"
scan_finds "$TMP/sig" "a gpu_comm_open that takes a color fails"

scan_clean "$TSR_ROOT" "the real tree: communicators are split only in src/mesh/ (src/dist/dist.c defines the split)"
tap_done
