/* ckpt_meta.c — a checkpoint's root attributes: writing them with their CRC (meta_crc32c),
 * reading them back without trusting the file, and the identities between the counters
 * (ckpt_h5.h; docs/checkpoint-format.md "Root attributes").
 *
 * Why a reader of its own: format version 1 stored its strings as variable-length attributes,
 * whose bytes HDF5 keeps in a global heap and reads with no checksum and few bounds checks; one
 * flipped bit there made H5HG_read crash (SIGSEGV) or loop, taking the trainer (and, under MPI,
 * every rank) with it. Version 2 stores fixed-length strings (bytes in the object header, read
 * by size) and a CRC32C over every root attribute, so a damaged or edited value is a clear
 * "invalid" instead. Version 3 adds the data_sources attribute (the datasets' identities); a
 * version 2 file is read as before, without it. Version 1 files are still read, in a child process: a crash or a hang there
 * rejects the file and the caller goes on (falls back to an older checkpoint). Only rank 0 forks
 * (ckpt_read.c), and the child calls no MPI and leaves with _exit; memory the interconnect has
 * pinned stays the parent's (Open MPI asks for verbs fork support; kernels >= 5.13 copy pinned
 * pages at fork). A file saved once by this version is version 3 and needs no child.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_h5.h"
#include "ckpt_save.h"
#include "common.h"
#include "crc32c.h"

/* Seconds a version-1 read may take before it counts as hung (a damaged heap can loop). */
#define V1_READ_SECONDS 30

/* That bound; TSR_CKPT_FAULT="v1-read-seconds:S" (test-only) makes it S seconds, 1 to 30: the
 * damaged-heap test need not wait out the 30 s. */
static int v1_read_seconds(void) {
    const char *s = ck_fault("v1-read-seconds");
    const long v = s ? strtol(s, NULL, 10) : 0;
    return v >= 1 && v < V1_READ_SECONDS ? (int)v : V1_READ_SECONDS;
}

typedef struct int_field {
    const char *name;
    size_t off;     /* in ckpt_meta */
    int v1_opt;     /* version 1 files may lack it (written before the field existed) */
    int64_t v1_def; /* then this value */
    int v2_opt;     /* version 2 files may lack it too: then v1_def, which no writer writes, and
                     * meta_crc32c leaves it out (it covers the attributes the file has) */
} int_field;

static const int_field int_fields[] = {
    {"step", offsetof(ckpt_meta, step), 0, 0, 0},
    {"tokens", offsetof(ckpt_meta, tokens), 0, 0, 0},
    {"data_cursor", offsetof(ckpt_meta, data_cursor), 0, 0, 0},
    {"world_size", offsetof(ckpt_meta, world_size), 0, 0, 0},
    {"global_batch", offsetof(ckpt_meta, global_batch), 0, 0, 0},
    {"seed", offsetof(ckpt_meta, seed), 0, 0, 0},
    {"optim_step", offsetof(ckpt_meta, optim_step), 1, -1, 0},
    {"rollbacks", offsetof(ckpt_meta, rollbacks), 1, 0, 0},
    {"updates_skipped", offsetof(ckpt_meta, updates_skipped), 1, 0, 0},
    {"micro_batch_auto", offsetof(ckpt_meta, micro_batch), 1, 0, 0},
    {"fingerprints_agreed", offsetof(ckpt_meta, fingerprints_agreed), 1, -1, 1},
};
#define N_INT ((int)(sizeof int_fields / sizeof int_fields[0]))

typedef struct str_field {
    const char *name;
    size_t off, cap; /* in ckpt_meta */
    int v1_opt;      /* absent in old version 1 files: "" */
    int since;       /* the format version that added it (older files: ""; 0 = every version) */
} str_field;

#define STR_FIELD(attr, member, opt, since) \
    {attr, offsetof(ckpt_meta, member), sizeof((ckpt_meta *)0)->member, opt, since}
static const str_field str_fields[] = {
    STR_FIELD("config", config, 0, 0),
    STR_FIELD("program_version", program_version, 0, 0),
    STR_FIELD("skipped_batches", skipped_batches, 1, 0),
    STR_FIELD("mix_tokens", mix_tokens, 1, 0),
    STR_FIELD("mix_plan", mix_plan, 1, 0),
    STR_FIELD("guard_state", guard_state, 1, 0),
    STR_FIELD("data_sources", data_sources, 1, 3),
};
#define N_STR ((int)(sizeof str_fields / sizeof str_fields[0]))

static int64_t *int_at(ckpt_meta *m, int k) { return (int64_t *)((char *)m + int_fields[k].off); }
static const int64_t *int_of(const ckpt_meta *m, int k) {
    return (const int64_t *)((const char *)m + int_fields[k].off);
}
static char *str_at(ckpt_meta *m, int k) { return (char *)m + str_fields[k].off; }
static const char *str_of(const ckpt_meta *m, int k) {
    return (const char *)m + str_fields[k].off;
}

/* ---- meta_crc32c: the CRC32C of every other root attribute, in order of name, each as
 * name NUL value NUL (integers in decimal, strings as stored) ---- */

typedef struct kv {
    const char *name;
    const char *value;
} kv;

static int by_name(const void *a, const void *b) {
    return strcmp(((const kv *)a)->name, ((const kv *)b)->name);
}

static uint32_t meta_crc(const ckpt_meta *m, const ck_meta_info *info) {
    enum { N = N_INT + N_STR + 4 };
    kv v[N];
    char num[N_INT + 1][24];
    int n = 0;
    snprintf(num[N_INT], sizeof num[N_INT], "%lld", (long long)info->version);
    v[n++] = (kv){"format", info->format};
    v[n++] = (kv){"format_version", num[N_INT]};
    v[n++] = (kv){"created", info->created};
    v[n++] = (kv){"rng", info->rng};
    for (int k = 0; k < N_INT; k++) {
        if (int_fields[k].v2_opt && *int_of(m, k) == int_fields[k].v1_def) continue; /* absent */
        snprintf(num[k], sizeof num[k], "%lld", (long long)*int_of(m, k));
        v[n++] = (kv){int_fields[k].name, num[k]};
    }
    for (int k = 0; k < N_STR; k++) /* (the attributes of its version) */
        if (str_fields[k].since <= info->version) v[n++] = (kv){str_fields[k].name, str_of(m, k)};
    qsort(v, (size_t)n, sizeof v[0], by_name);
    uint32_t c = 0;
    for (int k = 0; k < n; k++) {
        c = tsr_crc32c(c, v[k].name, strlen(v[k].name) + 1);
        c = tsr_crc32c(c, v[k].value, strlen(v[k].value) + 1);
    }
    return c;
}

int ck_meta_write(hid_t file, const ckpt_meta *m, const char *created, char *why, size_t why_cap) {
    ck_meta_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.format, sizeof info.format, "%s", TSR_CKPT_FORMAT);
    info.version = TSR_CKPT_VERSION;
    snprintf(info.created, sizeof info.created, "%s", created);
    snprintf(info.rng, sizeof info.rng, "%s", CKPT_RNG_NOTE);
    for (int k = 0; k < N_STR; k++) {
        size_t len = strnlen(str_of(m, k), str_fields[k].cap);
        if (len >= str_fields[k].cap || len + 1 > CK_STR_MAX) {
            snprintf(why, why_cap, "root attribute %s is %zu bytes, a checkpoint holds at most %u",
                     str_fields[k].name, len, CK_STR_MAX - 1);
            return -1;
        }
    }
    int bad = ck_attr_write_str(file, "format", info.format) ||
              ck_attr_write_i64(file, "format_version", info.version) ||
              ck_attr_write_str(file, "created", info.created) ||
              ck_attr_write_str(file, "rng", info.rng);
    for (int k = 0; k < N_INT && !bad; k++)
        bad = ck_attr_write_i64(file, int_fields[k].name, *int_of(m, k));
    for (int k = 0; k < N_STR && !bad; k++)
        bad = ck_attr_write_str(file, str_fields[k].name, str_of(m, k));
    if (!bad) bad = ck_attr_write_u32(file, "meta_crc32c", meta_crc(m, &info));
    if (bad) snprintf(why, why_cap, "cannot write the root attributes");
    return bad ? -1 : 0;
}

/* The file access of the metadata reads: HDF5's default (sec2) driver, read-only. HDF5 >= 1.10.7
 * takes a file lock and, by default, fails the open where the filesystem has locks disabled
 * (Lustre mounted without flock): ignored here, as the MPI-IO driver of a load never locks. */
static hid_t meta_fapl(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 12, 1) || (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7)
    if (fapl >= 0) H5Pset_file_locking(fapl, 1, 1);
#endif
    return fapl;
}

static hid_t meta_open(const char *path) {
    hid_t fapl = meta_fapl();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl < 0 ? H5P_DEFAULT : fapl);
    if (fapl >= 0) H5Pclose(fapl);
    return f;
}

/* ---- versions 2 and 3: every attribute of the version required (3 added data_sources),
 * strings fixed-length, the CRC must match ---- */

static int read_v2(hid_t f, ckpt_meta *m, ck_meta_info *info, char *why, size_t cap) {
    if (ck_attr_read_str(f, "format", info->format, sizeof info->format) != 0) {
        snprintf(why, cap, "root attribute \"format\" missing or not a fixed-length string");
        return -1;
    }
    for (int k = 0; k < N_INT; k++) {
        if (ck_attr_read_i64(f, int_fields[k].name, int_at(m, k)) == 0) continue;
        if (int_fields[k].v2_opt && H5Aexists(f, int_fields[k].name) == 0) {
            *int_at(m, k) = int_fields[k].v1_def; /* (written before the attribute existed) */
            continue;
        }
        snprintf(why, cap, "missing or non-integer root attribute \"%s\"", int_fields[k].name);
        return -1;
    }
    static const char *const extra[] = {"created", "rng"};
    char *extra_dst[] = {info->created, info->rng};
    size_t extra_cap[] = {sizeof info->created, sizeof info->rng};
    for (int k = 0; k < 2; k++) {
        if (ck_attr_read_str(f, extra[k], extra_dst[k], extra_cap[k]) != 0) {
            snprintf(why, cap, "root attribute \"%s\" missing, not a fixed-length string or over "
                     "%zu bytes", extra[k], extra_cap[k] - 1);
            return -1;
        }
    }
    for (int k = 0; k < N_STR; k++) {
        if (str_fields[k].since > info->version) continue; /* (absent: "") */
        if (ck_attr_read_str(f, str_fields[k].name, str_at(m, k), str_fields[k].cap) != 0) {
            snprintf(why, cap, "root attribute \"%s\" missing, not a fixed-length string or over "
                     "%zu bytes", str_fields[k].name, str_fields[k].cap - 1);
            return -1;
        }
    }
    uint32_t want, got = meta_crc(m, info);
    if (ck_attr_read_u32(f, "meta_crc32c", &want) != 0) {
        snprintf(why, cap, "no integer root attribute \"meta_crc32c\"");
        return -1;
    }
    if (got != want) {
        snprintf(why, cap, "root attributes: CRC32C mismatch: attributes 0x%08x, meta_crc32c "
                 "0x%08x (damaged or edited metadata)", got, want);
        return -1;
    }
    return 0;
}

/* ---- version 1 (variable-length strings), read by a child process ---- */

/* A string attribute, variable- or fixed-length (version 1 wrote variable-length ones). */
static int v1_attr_read_str(hid_t loc, const char *name, char *buf, size_t cap) {
    if (H5Aexists(loc, name) <= 0) return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return -1;
    int rc = -1;
    hid_t ft = H5Aget_type(a), sp = H5Aget_space(a), mt = -1;
    if (ft < 0 || sp < 0 || H5Tget_class(ft) != H5T_STRING ||
        H5Sget_simple_extent_npoints(sp) != 1) {
        /* refused */
    } else if (H5Tis_variable_str(ft) > 0) {
        char *p = NULL;
        mt = H5Tcopy(H5T_C_S1);
        if (mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 &&
            H5Tset_cset(mt, H5Tget_cset(ft)) >= 0 && H5Aread(a, mt, &p) >= 0 && p) {
            size_t n = strnlen(p, cap);
            if (n < cap) memcpy(buf, p, n + 1), rc = 0;
        }
        if (p) H5free_memory(p);
    } else {
        H5Aclose(a);
        H5Sclose(sp);
        H5Tclose(ft);
        return ck_attr_read_str(loc, name, buf, cap);
    }
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

static int read_v1(hid_t f, ckpt_meta *m, ck_meta_info *info, char *why, size_t cap) {
    if (v1_attr_read_str(f, "format", info->format, sizeof info->format) != 0) {
        snprintf(why, cap, "root attribute \"format\" missing or unreadable");
        return -1;
    }
    for (int k = 0; k < N_INT; k++) {
        if (ck_attr_read_i64(f, int_fields[k].name, int_at(m, k)) == 0) continue;
        if (!int_fields[k].v1_opt) {
            snprintf(why, cap, "missing or non-integer root attribute \"%s\"", int_fields[k].name);
            return -1;
        }
        *int_at(m, k) = int_fields[k].v1_def;
    }
    for (int k = 0; k < N_STR; k++) {
        if (v1_attr_read_str(f, str_fields[k].name, str_at(m, k), str_fields[k].cap) == 0)
            continue;
        if (!str_fields[k].v1_opt) {
            snprintf(why, cap, "missing root attribute \"%s\" (or longer than %zu bytes)",
                     str_fields[k].name, str_fields[k].cap - 1);
            return -1;
        }
        str_at(m, k)[0] = '\0';
    }
    if (v1_attr_read_str(f, "created", info->created, sizeof info->created) != 0)
        snprintf(info->created, sizeof info->created, "?");
    if (v1_attr_read_str(f, "rng", info->rng, sizeof info->rng) != 0)
        snprintf(info->rng, sizeof info->rng, "?");
    return 0;
}

typedef struct v1_result {
    int rc;
    char why[1024];
    ck_meta_info info;
    ckpt_meta m;
} v1_result;

static int read_v1_isolated(const char *path, ckpt_meta *m, ck_meta_info *info, char *why,
                            size_t cap) {
    v1_result *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) {
        snprintf(why, cap, "cannot map memory to read its version 1 metadata: %s", strerror(errno));
        return -1;
    }
    memset(r, 0, sizeof *r);
    r->rc = -1;
    const int seconds = v1_read_seconds();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* the child: no MPI, its own read-only open, then _exit */
        /* the parent's handlers are inherited: Open MPI's SIGSEGV/SIGBUS handler printed a
         * "*** Process received signal ***" backtrace from the child (and can deadlock in it, on
         * a damaged heap); a crash here is expected and reported by the parent */
        static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
        sigset_t unblock;
        sigemptyset(&unblock);
        for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++) {
            signal(sigs[k], SIG_DFL);
            sigaddset(&unblock, sigs[k]);
        }
        sigprocmask(SIG_UNBLOCK, &unblock, NULL);
        alarm((unsigned)seconds);
        ck_h5_quiet();
        hid_t f = meta_open(path);
        if (f < 0) {
            snprintf(r->why, sizeof r->why, "cannot open it as HDF5");
            _exit(0);
        }
        r->rc = read_v1(f, &r->m, &r->info, r->why, sizeof r->why);
        _exit(0);
    }
    int rc = -1, status = 0;
    if (pid < 0) {
        snprintf(why, cap, "cannot fork to read its version 1 metadata: %s", strerror(errno));
    } else {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
            snprintf(why, cap, "reading its (format version 1) string attributes did not finish "
                     "in %d s: the file's HDF5 global heap is damaged", seconds);
        } else if (WIFSIGNALED(status)) {
            snprintf(why, cap, "reading its (format version 1) string attributes crashed HDF5 "
                     "(signal %d, %s): the file's global heap is damaged", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        } else if (r->rc != 0) {
            snprintf(why, cap, "%s", r->why);
        } else {
            *m = r->m;
            *info = r->info;
            rc = 0;
        }
    }
    munmap(r, sizeof *r);
    return rc;
}

int ck_meta_read_file(const char *path, ckpt_meta *m, ck_meta_info *info, char *why,
                      size_t why_cap) {
    ck_meta_info own;
    if (!info) info = &own;
    memset(m, 0, sizeof *m);
    memset(info, 0, sizeof *info);
    info->version = -1;
    ck_h5_quiet();
    hid_t f = meta_open(path);
    if (f < 0) {
        snprintf(why, why_cap, "cannot open it as HDF5 (missing, truncated or not HDF5)");
        return -1;
    }
    int rc = -1;
    if (ck_attr_read_i64(f, "format_version", &info->version) != 0) {
        snprintf(why, why_cap, "no integer \"format_version\" root attribute (not a tessera "
                 "checkpoint)");
        info->version = -1;
    } else if (info->version == 2 || info->version == TSR_CKPT_VERSION) {
        rc = read_v2(f, m, info, why, why_cap);
    } else if (info->version == 1) {
        H5Fclose(f); /* the child opens it afresh */
        f = -1;
        int64_t v = info->version;
        rc = read_v1_isolated(path, m, info, why, why_cap);
        info->version = v;
    } else {
        snprintf(why, why_cap, "format_version = %lld, this program reads versions 1 to %d",
                 (long long)info->version, TSR_CKPT_VERSION);
    }
    if (f >= 0) H5Fclose(f);
    if (rc == 0 && strcmp(info->format, TSR_CKPT_FORMAT) != 0) {
        snprintf(why, why_cap, "root attribute format = \"%.60s\", expected \"%s\"", info->format,
                 TSR_CKPT_FORMAT);
        rc = -1;
    }
    if (rc == 0) rc = ck_meta_check(m, why, why_cap);
    return rc;
}

/* ---- the identities between the counters ---- */

int ck_meta_check(const ckpt_meta *m, char *why, size_t cap) {
    static const char *const nonneg[] = {"step", "tokens", "rollbacks", "updates_skipped",
                                         "micro_batch_auto"};
    const int64_t vals[] = {m->step, m->tokens, m->rollbacks, m->updates_skipped, m->micro_batch};
    for (int k = 0; k < 5; k++) {
        if (vals[k] < 0) {
            snprintf(why, cap, "root attribute %s = %lld, expected >= 0", nonneg[k],
                     (long long)vals[k]);
            return -1;
        }
    }
    if (m->world_size < 1 || m->global_batch < 1) {
        snprintf(why, cap, "root attributes world_size = %lld, global_batch = %lld: expected >= 1",
                 (long long)m->world_size, (long long)m->global_batch);
        return -1;
    }
    if (m->fingerprints_agreed < -1 || m->fingerprints_agreed > 1) { /* -1: absent */
        snprintf(why, cap, "root attribute fingerprints_agreed = %lld, expected 0 or 1",
                 (long long)m->fingerprints_agreed);
        return -1;
    }
    if (m->optim_step < -1 || m->optim_step > m->step) { /* -1: absent (version 1) */
        snprintf(why, cap, "root attribute optim_step = %lld, expected 0..step (%lld): updates "
                 "applied never exceed steps taken", (long long)m->optim_step, (long long)m->step);
        return -1;
    }
    int64_t skipped = 0;
    const char *s = m->skipped_batches;
    while (*s) {
        long long lo, hi;
        int used = 0;
        int bad = sscanf(s, "%lld-%lld%n", &lo, &hi, &used) != 2 || lo < 0 || hi < lo ||
                  __builtin_add_overflow(skipped, (int64_t)(hi - lo), &skipped);
        s += bad ? 0 : used;
        if (!bad && *s == ',' && s[1]) s++;
        else if (*s) bad = 1;
        if (bad) {
            snprintf(why, cap, "root attribute skipped_batches = \"%.200s\": expected "
                     "\"lo-hi,lo-hi,...\" with 0 <= lo <= hi", m->skipped_batches);
            return -1;
        }
    }
    int64_t want;
    if (__builtin_add_overflow(m->step, skipped, &want) ||
        __builtin_mul_overflow(want, m->global_batch, &want) || want != m->data_cursor) {
        snprintf(why, cap, "root attribute data_cursor = %lld, expected (step %lld + skipped "
                 "batches %lld) x global_batch %lld = %lld",
                 (long long)m->data_cursor, (long long)m->step, (long long)skipped,
                 (long long)m->global_batch, (long long)want);
        return -1;
    }
    return 0;
}

/* ---- the tensors' crc32c attributes, read without their data ---- */

int ckpt_tensor_crcs(const char *path, const char *const *names, int n, uint32_t *crc, int *have) {
    ck_h5_quiet();
    for (int i = 0; i < n; i++) have[i] = 0, crc[i] = 0;
    hid_t f = meta_open(path);
    if (f < 0) return -1;
    for (int i = 0; i < n; i++) {
        if (H5Lexists(f, names[i], H5P_DEFAULT) <= 0) continue; /* (no intermediate group: 0) */
        hid_t ds = H5Dopen2(f, names[i], H5P_DEFAULT);
        if (ds < 0) continue;
        have[i] = ck_attr_read_u32(ds, "crc32c", &crc[i]) == 0;
        H5Dclose(ds);
    }
    H5Fclose(f);
    return 0;
}
