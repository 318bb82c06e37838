/* ring_dump — one layer's ring attention on N MPI ranks, for the PyTorch reference test's
 * ring-attention case (tests/reference/test_reference.py, docs/parallelism.md).
 *
 *   mpirun -np N ring_dump IN.h5 OUT.h5
 *
 * IN (written by the test): attributes B, T, NH, KVH, hs, eot (-1: a causal mask; else
 * attn_mask = document with that end-of-text id), alibi (0/1); datasets qkv (B,T,QKV) and dout
 * (B,T,NH hs) fp32, tokens (B,T) int32 (the documents), slopes (NH) fp32 (with alibi); the
 * layer's variants (ops.h tsr_attn_var), each optional: attributes window, scale, softcap, and
 * sinks (NH) fp32.
 * Every rank takes its zig-zag share of the sequences (model_ring.h), runs the forward and the
 * backward of ring attention over the N ranks (the CPU backend's blocks, merged by their
 * log-sum-exp; keys and values passed round by MPI), and rank 0 writes the whole sequences' results
 * to OUT: out (B,T,NH hs), lse (B,NH,T), dqkv (B,T,QKV), fp32, with sinks dsinks (NH) summed
 * over the ranks; its line on stdout counts the blocks outside a window's band (all ranks). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "dist/dist.h"
#include "model/model.h"
#include "model/model_ring.h"

#define H5_OK(x)                                                                         \
    do {                                                                                   \
        if ((x) < 0) tsr_die(TSR_EXIT_INTERNAL, "%s:%d: HDF5 call failed: %s", __FILE__,   \
                             __LINE__, #x);                                                \
    } while (0)

static double attr_d(hid_t f, const char *name) {
    double v = 0;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    H5_OK(a);
    H5_OK(H5Aread(a, H5T_NATIVE_DOUBLE, &v));
    H5Aclose(a);
    return v;
}
static int attr_i(hid_t f, const char *name) { return (int)attr_d(f, name); }

/* an optional attribute (0 when absent) */
static double attr_opt(hid_t f, const char *name) {
    return H5Aexists(f, name) > 0 ? attr_d(f, name) : 0.0;
}

static void *read_ds(hid_t f, const char *name, hid_t type, size_t bytes) {
    void *p = tsr_malloc(bytes);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    H5_OK(ds);
    H5_OK(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p));
    H5Dclose(ds);
    return p;
}

static void write_ds(hid_t f, const char *name, const float *data, int ndim, const hsize_t *dims) {
    hid_t space = H5Screate_simple(ndim, dims, NULL);
    hid_t ds = H5Dcreate2(f, name, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5_OK(ds);
    H5_OK(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    H5Dclose(ds);
    H5Sclose(space);
}

typedef struct shape {
    int B, T, NH, KVH, hs, eot, alibi, QKV, C;
} shape;

/* rank 0: full (rows sequences of T positions, elem bytes each) from every rank's share */
static void *gather_rows(const tsr_dist *d, const void *mine, int rows, int T, size_t elem) {
    const size_t bytes = (size_t)rows * (size_t)(T / d->world) * elem;
    char *all = tsr_malloc(bytes * (size_t)d->world), *full = tsr_malloc(bytes * (size_t)d->world);
    dist_gather(mine, all, bytes, 0);
    ring_join(full, all, elem, rows, d->world, T);
    free(all);
    return full;
}

int main(int argc, char **argv) {
    tsr_dist d;
    dist_init(&d, &argc, &argv);
    if (argc != 3) tsr_die(TSR_EXIT_USAGE, "usage: ring_dump IN.h5 OUT.h5 (under mpirun)");
    hid_t f = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
    H5_OK(f);
    shape s = {attr_i(f, "B"), attr_i(f, "T"), attr_i(f, "NH"), attr_i(f, "KVH"), attr_i(f, "hs"),
               attr_i(f, "eot"), attr_i(f, "alibi"), 0, 0};
    s.QKV = (s.NH + 2 * s.KVH) * s.hs, s.C = s.NH * s.hs;
    const int B = s.B, T = s.T, N = d.world, Tl = T / N;
    const size_t n = (size_t)B * T, nl = (size_t)B * Tl;
    float *qkv = read_ds(f, "qkv", H5T_NATIVE_FLOAT, n * s.QKV * 4);
    float *dout = read_ds(f, "dout", H5T_NATIVE_FLOAT, n * s.C * 4);
    int32_t *tok = read_ds(f, "tokens", H5T_NATIVE_INT32, n * 4);
    float *slopes = s.alibi ? read_ds(f, "slopes", H5T_NATIVE_FLOAT, (size_t)s.NH * 4) : NULL;
    float *sinks = H5Lexists(f, "sinks", H5P_DEFAULT) > 0
                       ? read_ds(f, "sinks", H5T_NATIVE_FLOAT, (size_t)s.NH * 4)
                       : NULL;
    float *dsinks = tsr_calloc((size_t)s.NH, sizeof(float));
    tsr_attn_var var = {.window = (int)attr_opt(f, "window"), .sinks = sinks, .dsinks = dsinks,
                        .scale = (float)attr_opt(f, "scale"), .softcap = (float)attr_opt(f, "softcap")};
    H5Fclose(f);

    tsr_ring g;
    ring_init_mpi(&g, dist_group_split(0, d.rank));
    tsr_backend be = tsr_fp32_backend(&tsr_cpu_ops);
    ring_stage(&g, tok, tok, B, T, s.eot, NULL);
    tsr_acts a;
    memset(&a, 0, sizeof a);
    size_t bytes[TSR_A_COUNT - TSR_A_RING_KV] = {0}; /* ring_act_plan fills the ring's only */
    const tsr_ring_dims rd = ring_dims_attn(s.NH, s.KVH, s.hs);
    ring_act_plan(&be, N, B, T, &rd, s.eot >= 0, bytes);
    for (int i = 0; i < TSR_A_COUNT - TSR_A_RING_KV; i++)
        if (bytes[i]) a.buf[TSR_A_RING_KV + i] = tsr_calloc(1, bytes[i]);
    if (a.ring_lo) memcpy(a.ring_lo, g.lo, n * 4), memcpy(a.ring_hi, g.hi, n * 4);

    float *lq = tsr_malloc(nl * s.QKV * 4), *ld = tsr_malloc(nl * s.C * 4);
    float *out = tsr_malloc(nl * s.C * 4), *lse = tsr_malloc(nl * s.NH * 4);
    float *dqkv = tsr_malloc(nl * s.QKV * 4);
    ring_split(lq, qkv, (size_t)s.QKV * 4, B, N, g.r, T);
    ring_split(ld, dout, (size_t)s.C * 4, B, N, g.r, T);
    ring_attention_forward(&g, &be, &a, out, lse, lq, slopes, &var, B, T, s.NH, s.KVH, s.hs);
    ring_attention_backward(&g, &be, &a, dqkv, ld, lq, out, lse, slopes, &var, B, T, s.NH, s.KVH,
                            s.hs);
    dist_allreduce_sum_f32(dsinks, (size_t)s.NH);
    int64_t skipped = (int64_t)g.skipped;
    dist_allreduce_sum_i64(&skipped, 1);

    float *fo = gather_rows(&d, out, B, T, (size_t)s.C * 4);
    float *fl = gather_rows(&d, lse, B * s.NH, T, 4);
    float *fd = gather_rows(&d, dqkv, B, T, (size_t)s.QKV * 4);
    if (d.rank == 0) {
        hid_t o = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        H5_OK(o);
        write_ds(o, "out", fo, 3, (hsize_t[]){(hsize_t)B, (hsize_t)T, (hsize_t)s.C});
        write_ds(o, "lse", fl, 3, (hsize_t[]){(hsize_t)B, (hsize_t)s.NH, (hsize_t)T});
        write_ds(o, "dqkv", fd, 3, (hsize_t[]){(hsize_t)B, (hsize_t)T, (hsize_t)s.QKV});
        if (sinks) write_ds(o, "dsinks", dsinks, 1, (hsize_t[]){(hsize_t)s.NH});
        H5Fclose(o);
        printf("ring_dump: %d ranks, %s, wrote %s (%llu bytes sent round the ring by rank 0; "
               "%lld blocks skipped outside the band)\n", N,
               s.eot >= 0 ? "document mask" : "causal", argv[2], (unsigned long long)g.sent,
               (long long)skipped);
    }
    tsr_exit(TSR_EXIT_OK);
}
