/* ckpt_h5.c — the file driver, attributes, root metadata and range selections in checkpoint
 * files. */
#include "ckpt_h5.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The MPI build writes one file from every rank at once (MPI-IO); the NO_MPI build links no MPI.
 * An HDF5 of the other kind would build but not work (or not link): refused here, by name. */
#ifdef TSR_NO_MPI
#ifdef H5_HAVE_PARALLEL
#error "NO_MPI=1 needs a serial HDF5; this hdf5.h is a parallel (MPI) build: set HDF5_DIR to a serial HDF5 or install libhdf5-dev (pkg-config hdf5-serial)"
#endif
#else
#ifndef H5_HAVE_PARALLEL
#error "the MPI build writes checkpoints through MPI-IO and needs a parallel HDF5; this hdf5.h is serial: set HDF5_DIR to a parallel HDF5 or install libhdf5-openmpi-dev"
#endif
#include <mpi.h>
#endif

void ck_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

void ck_fapl_driver(hid_t fapl) {
#ifndef TSR_NO_MPI
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
#endif
    H5Pset_sieve_buf_size(fapl, 0);
}

void ck_dxpl_independent(hid_t dxpl) {
#ifndef TSR_NO_MPI
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_INDEPENDENT);
#else
    (void)dxpl; /* sec2: every transfer is this process's own */
#endif
}

static int attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    if (sp < 0) return -1;
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t a = H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = (a < 0 || H5Awrite(a, mtype, v) < 0) ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc;
}

int ck_attr_write_i64(hid_t loc, const char *name, int64_t v) {
    return attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

int ck_attr_write_u32(hid_t loc, const char *name, uint32_t v) {
    return attr_write(loc, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v);
}

int ck_attr_write_str(hid_t loc, const char *name, const char *s) {
    size_t n = strlen(s) + 1; /* the terminating NUL is stored: never an empty type */
    if (n > CK_STR_MAX) return -1;
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    int rc = H5Tset_size(t, n) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 ||
                     H5Tset_cset(t, H5T_CSET_UTF8) < 0
                 ? -1
                 : attr_write(loc, name, t, t, s);
    H5Tclose(t);
    return rc;
}

static int attr_read(hid_t loc, const char *name, hid_t mtype, void *v) {
    if (H5Aexists(loc, name) <= 0) return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t sp = H5Aget_space(a);
    int rc = (sp < 0 || H5Sget_simple_extent_npoints(sp) != 1 || H5Aread(a, mtype, v) < 0) ? -1 : 0;
    if (sp >= 0) H5Sclose(sp);
    H5Aclose(a);
    return rc;
}

static int attr_is_integer(hid_t loc, const char *name) {
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return 0;
    hid_t t = H5Aget_type(a);
    int ok = t >= 0 && H5Tget_class(t) == H5T_INTEGER;
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return ok;
}

int ck_attr_read_i64(hid_t loc, const char *name, int64_t *v) {
    if (H5Aexists(loc, name) <= 0 || !attr_is_integer(loc, name)) return -1;
    return attr_read(loc, name, H5T_NATIVE_INT64, v);
}

int ck_attr_read_u32(hid_t loc, const char *name, uint32_t *v) {
    if (H5Aexists(loc, name) <= 0 || !attr_is_integer(loc, name)) return -1;
    return attr_read(loc, name, H5T_NATIVE_UINT32, v);
}

int ck_attr_read_str(hid_t loc, const char *name, char *buf, size_t cap) {
    if (cap == 0 || H5Aexists(loc, name) <= 0) return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return -1;
    int rc = -1;
    hid_t ft = H5Aget_type(a), sp = H5Aget_space(a), mt = -1;
    size_t n = ft >= 0 ? H5Tget_size(ft) : 0;
    /* a fixed-length string (never variable-length: its bytes live in the global heap), one
     * element, whose stored size is its type's size: the bytes come from the object header */
    if (ft < 0 || sp < 0 || H5Tget_class(ft) != H5T_STRING || H5Tis_variable_str(ft) != 0 ||
        n == 0 || n > CK_STR_MAX || H5Sget_simple_extent_npoints(sp) != 1 ||
        H5Aget_storage_size(a) != (hsize_t)n)
        goto done;
    char *tmp = calloc(n + 1, 1);
    mt = H5Tcopy(H5T_C_S1);
    if (tmp && mt >= 0 && H5Tset_size(mt, n) >= 0 && H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 &&
        H5Tset_cset(mt, H5Tget_cset(ft)) >= 0 && /* HDF5 converts no character set */
        H5Aread(a, mt, tmp) >= 0 && strlen(tmp) < cap) {
        memcpy(buf, tmp, strlen(tmp) + 1);
        rc = 0;
    }
    free(tmp);
done:
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

int ck_select_range(hid_t filespace, int ndim, const int64_t *shape, uint64_t lo, uint64_t hi) {
    ckpt_box boxes[CKPT_MAX_BOXES];
    int nb = flat_range_to_hyperslabs(ndim, shape, lo, hi, boxes);
    if (nb < 0) return -1;
    if (nb == 0) return H5Sselect_none(filespace) < 0 ? -1 : 0;
    for (int b = 0; b < nb; b++) {
        hsize_t start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
        for (int d = 0; d < ndim; d++) start[d] = boxes[b].start[d], count[d] = boxes[b].count[d];
        if (H5Sselect_hyperslab(filespace, b == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL,
                                count, NULL) < 0)
            return -1;
    }
    return 0;
}

int ck_dataset_shape(hid_t ds, int *ndim, int64_t *shape) {
    hid_t sp = H5Dget_space(ds);
    if (sp < 0) return -1;
    int nd = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[H5S_MAX_RANK];
    int rc = -1;
    if (nd >= 1 && nd <= CKPT_MAX_NDIM && H5Sget_simple_extent_dims(sp, dims, NULL) == nd) {
        *ndim = nd;
        for (int d = 0; d < nd; d++) shape[d] = (int64_t)dims[d];
        rc = 0;
    } else if (nd >= 0) {
        *ndim = nd;
    }
    H5Sclose(sp);
    return rc;
}

void ck_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, ")");
}
