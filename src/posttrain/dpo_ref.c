/* dpo_ref.c — DPO's precomputed reference: the pass, the stored file, its checks (dpo_ref.h). */
#include "posttrain/dpo_ref.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_ref.h"
#include "model/ckpt_model.h"
#include "common.h"
#include "crc32c.h"
#include "fsutil.h"
#include "posttrain/dpo.h"
#include "telemetry/metrics.h"

#define DPO_REF_KIND "dpo-logps" /* the reference file's kind (checkpoint/ckpt_ref.h) */
#define DPO_REF_MAGIC "TSRDPORF"  /* format 1 (before the reference-file format): still read */
#define DPO_REF_VERSION 1u
#define DPO_REF_TEXT 1024

/* The file's record of what the values belong to. In a reference file its fields from seq_len on
 * are the meta (RECORD); format 1 was this struct itself, then the values, then a CRC32C. */
typedef struct dpo_ref_header {
    char magic[8];
    uint32_t version, seq_len;
    uint64_t n_train, n_val;
    uint32_t train_crc, val_crc;
    char train_path[DPO_REF_TEXT], val_path[DPO_REF_TEXT], init[DPO_REF_TEXT];
} dpo_ref_header;
_Static_assert(sizeof(dpo_ref_header) == 40 + 3 * DPO_REF_TEXT, "dpo_ref_header has no padding");
#define RECORD(h) ((char *)(h) + offsetof(dpo_ref_header, seq_len))
#define RECORD_BYTES ((uint32_t)(sizeof(dpo_ref_header) - offsetof(dpo_ref_header, seq_len)))

/* What this run's reference must be: seq_len, the datasets and their pair counts. */
static void expected_header(const tsr_run *run, dpo_ref_header *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, DPO_REF_MAGIC, 8);
    h->version = DPO_REF_VERSION;
    h->seq_len = (uint32_t)*run->T;
    h->n_train = dataset_n_samples(run->data->train, *run->T) / 2;
    h->train_crc = dataset_index_crc(run->data->train);
    snprintf(h->train_path, sizeof h->train_path, "%s", run->cfg->data.train);
    h->n_val = dpo_val_pairs(run);
    if (run->data->val) {
        h->val_crc = dataset_index_crc(run->data->val);
        snprintf(h->val_path, sizeof h->val_path, "%s", run->cfg->data.val);
    }
}

static void ref_path(const char *dir, char *out, size_t cap) {
    if (tsr_snprintf(out, cap, "%s/%s", dir, DPO_REF_FILE))
        tsr_die(TSR_EXIT_USAGE, "run_dir = \"%s\": too long for the path of %s", dir, DPO_REF_FILE);
}

/* The file's header for this run's values (every rank builds the same one) */
static void file_header(const tsr_run *run, const tsr_dpo_ref *ref, dpo_ref_header *h) {
    expected_header(run, h);
    snprintf(h->init, sizeof h->init, "%s", ref->init);
}

/* The reference file of record h (its values: pairs x 2 doubles, one part, CRC32C *crc) */
static void describe(dpo_ref_header *h, ckpt_ref *r, uint32_t *crc) {
    memset(r, 0, sizeof *r);
    snprintf(r->kind, sizeof r->kind, "%s", DPO_REF_KIND);
    r->elem = sizeof(double), r->parts = 1, r->n = 2 * (h->n_train + h->n_val);
    r->meta = RECORD(h), r->meta_bytes = RECORD_BYTES, r->part_crc = crc;
}

/* The CRC32C of the values, train then validation pairs: the file's one part */
static uint32_t values_crc(const tsr_dpo_ref *ref, const dpo_ref_header *h) {
    uint32_t crc = tsr_crc32c(0, ref->train, (size_t)h->n_train * 2 * sizeof(double));
    if (h->n_val) crc = tsr_crc32c(crc, ref->val, (size_t)h->n_val * 2 * sizeof(double));
    return crc;
}

/* The file's checksum (the run's config records it): of its header and its part's CRC32C */
static uint32_t file_crc(const tsr_dpo_ref *ref, dpo_ref_header *h) {
    uint32_t crc = values_crc(ref, h);
    ckpt_ref r;
    describe(h, &r, &crc);
    return ckpt_ref_checksum(&r);
}

/* rank 0: the reference file (checkpoint/ckpt_ref.h) into path.tmp, fsynced, renamed to path. */
static int write_file(const tsr_run *run, const tsr_dpo_ref *ref, const char *path,
                      uint64_t *bytes) {
    dpo_ref_header h;
    file_header(run, ref, &h);
    char tmp[1300];
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", path)) return TSR_EXIT_DATA;
    uint32_t crc = values_crc(ref, &h), c;
    ckpt_ref r;
    describe(&h, &r, &crc);
    int rc = ckpt_ref_create(tmp);
    if (!rc) rc = ckpt_ref_write_values(tmp, &r, 0, ref->train, 2 * h.n_train, &c);
    if (!rc && h.n_val)
        rc = ckpt_ref_write_values(tmp, &r, 2 * h.n_train, ref->val, 2 * h.n_val, &c);
    if (!rc) rc = ckpt_ref_commit(tmp, path, &r);
    if (rc) {
        tsr_error("%s: cannot write the DPO reference", path);
        unlink(tmp);
        return TSR_EXIT_DATA;
    }
    *bytes = ckpt_ref_file_bytes(&r);
    return 0;
}

/* The record h against this run's (want): "" or the mismatch, in words, into why */
static void check_record(const dpo_ref_header *h, const dpo_ref_header *want, char *why,
                         size_t cap) {
    if (h->seq_len != want->seq_len) {
        snprintf(why, cap, "computed for seq_len %u, this run has seq_len = %u", h->seq_len,
                 want->seq_len);
    } else if (h->train_crc != want->train_crc || h->n_train != want->n_train) {
        snprintf(why, cap, "computed on data.train = \"%.1000s\" (index crc32c:%08x, %llu "
                 "pairs), this run's data.train = \"%.1000s\" is another dataset (index "
                 "crc32c:%08x, %llu pairs)", h->train_path, h->train_crc,
                 (unsigned long long)h->n_train, want->train_path, want->train_crc,
                 (unsigned long long)want->n_train);
    } else if (want->n_val && (h->val_crc != want->val_crc || h->n_val < want->n_val)) {
        snprintf(why, cap, "holds %llu validation pairs of \"%.1000s\" (index crc32c:%08x), "
                 "this run evaluates %llu pairs of data.val = \"%.1000s\" (index crc32c:%08x)",
                 (unsigned long long)h->n_val, h->val_path[0] ? h->val_path : "(none)",
                 h->val_crc, (unsigned long long)want->n_val, want->val_path, want->val_crc);
    }
}

static int refuse(const char *path, const char *why) {
    tsr_error("%s: the stored DPO reference (dpo.reference = \"precomputed\") cannot be used "
              "by this run: %s. It was computed from the initial model at the run's start and "
              "cannot be computed again on a resume (the model has moved on): restore the "
              "run's own file and data, or start a new run_dir", path, why);
    return TSR_EXIT_DATA;
}

/* rank 0: a format-1 file (TSRDPORF; written before the reference-file format) path read and
 * checked against this run (want); the values into ref, its checksum (its trailer's CRC32C,
 * which the checkpoints of its run record) into ref->crc. As read_file. */
static int read_file_v1(tsr_dpo_ref *ref, const char *path,
                        const dpo_ref_header *want) {
    FILE *f = fopen(path, "rb");
    if (!f && errno == ENOENT) return 1;
    if (!f) {
        tsr_error("%s: cannot read the DPO reference: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    dpo_ref_header h;
    const char *bad = NULL;
    char why[3000] = "";
    uint32_t crc = 0, stored = 0;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, DPO_REF_MAGIC, 8) != 0) {
        bad = "not a DPO reference file (no TSR_REF or TSRDPORF header)";
    } else if (h.version != DPO_REF_VERSION) {
        snprintf(why, sizeof why, "format version %u, this program reads %u", h.version,
                 DPO_REF_VERSION);
    } else {
        check_record(&h, want, why, sizeof why);
    }
    h.init[DPO_REF_TEXT - 1] = '\0';
    struct stat st; /* the size the header implies, before anything is allocated for it */
    if (!bad && !why[0] && (fstat(fileno(f), &st) != 0 || h.n_train > ((uint64_t)1 << 40) ||
                            h.n_val > ((uint64_t)1 << 40) ||
                            (uint64_t)st.st_size != sizeof h + (h.n_train + h.n_val) * 16 + 4))
        bad = "its size does not match its header (truncated or extended)";
    if (!bad && !why[0]) {
        ref->train = tsr_malloc((size_t)h.n_train * 2 * sizeof(double));
        ref->val = h.n_val ? tsr_malloc((size_t)h.n_val * 2 * sizeof(double)) : NULL;
        crc = tsr_crc32c(0, &h, sizeof h);
        if (fread(ref->train, 2 * sizeof(double), h.n_train, f) != h.n_train ||
            (h.n_val && fread(ref->val, 2 * sizeof(double), h.n_val, f) != h.n_val) ||
            fread(&stored, sizeof stored, 1, f) != 1 || fgetc(f) != EOF) {
            bad = "its size does not match its header (truncated or extended)";
        } else {
            crc = tsr_crc32c(crc, ref->train, (size_t)h.n_train * 2 * sizeof(double));
            if (h.n_val)
                crc = tsr_crc32c(crc, ref->val, (size_t)h.n_val * 2 * sizeof(double));
            if (crc != stored)
                snprintf(why, sizeof why, "its checksum is crc32c:%08x, it records crc32c:%08x "
                         "(damaged)", crc, stored);
        }
    }
    fclose(f);
    if (bad || why[0]) return refuse(path, bad ? bad : why);
    ref->n_train = h.n_train;
    ref->n_val = h.n_val;
    ref->crc = stored;
    snprintf(ref->init, sizeof ref->init, "%s", h.init);
    return 0;
}


/* rank 0: the reference file path (checkpoint/ckpt_ref.h) read and checked against this run
 * (want); the values into ref, its checksum into ref->crc. As read_file. */
static int read_ref_file(tsr_dpo_ref *ref, const char *path,
                         const dpo_ref_header *want) {
    dpo_ref_header h;
    memset(&h, 0, sizeof h);
    uint32_t part_crc = 0;
    ckpt_ref r;
    describe(&h, &r, &part_crc);
    r.n = 0; /* (any: the record says how many) */
    char why[3000] = "";
    int rc = ckpt_ref_read_header(path, &r, &ref->crc, why, sizeof why);
    if (rc == 1 || rc == TSR_EXIT_DATA) return rc;
    h.init[DPO_REF_TEXT - 1] = h.train_path[DPO_REF_TEXT - 1] = h.val_path[DPO_REF_TEXT - 1] = '\0';
    if (!rc) check_record(&h, want, why, sizeof why);
    if (!rc && !why[0] && r.n != 2 * (h.n_train + h.n_val))
        snprintf(why, sizeof why, "it holds %llu values, its record %llu pairs",
                 (unsigned long long)r.n, (unsigned long long)(h.n_train + h.n_val));
    double *v = NULL;
    if (!rc && !why[0]) {
        v = tsr_malloc((size_t)r.n * sizeof *v);
        rc = ckpt_ref_read_part(path, &r, 0, 0, r.n, v, why, sizeof why);
    }
    if (rc || why[0]) {
        free(v);
        return rc == TSR_EXIT_DATA ? rc : refuse(path, why);
    }
    ref->train = tsr_malloc((size_t)h.n_train * 2 * sizeof(double));
    ref->val = h.n_val ? tsr_malloc((size_t)h.n_val * 2 * sizeof(double)) : NULL;
    memcpy(ref->train, v, (size_t)h.n_train * 2 * sizeof(double));
    if (h.n_val) memcpy(ref->val, v + 2 * h.n_train, (size_t)h.n_val * 2 * sizeof(double));
    free(v);
    ref->n_train = h.n_train;
    ref->n_val = h.n_val;
    snprintf(ref->init, sizeof ref->init, "%s", h.init);
    return 0;
}

/* rank 0: path read and checked against this run (want); the values into ref, its
 * checksum into ref->crc: a reference file, or one of format 1 (TSRDPORF: a run an older
 * build started resumes with it). 0, 1 when the file does not exist, or TSR_EXIT_DATA after
 * naming the file and the mismatch. */
static int read_file(tsr_dpo_ref *ref, const char *path,
                     const dpo_ref_header *want) {
    if (ckpt_ref_is_one(path) == 1) return read_ref_file(ref, path, want);
    return read_file_v1(ref, path, want);
}

/* rank 0, on a resume: the checkpoint's record of the reference it was trained against
 * (dpo.reference_checksum in its config; "" in checkpoints written before the key) */
static void checkpoint_record(const tsr_run *run, char *out, size_t cap) {
    tsr_config *ck = tsr_calloc(1, sizeof *ck);
    out[0] = '\0';
    if (run_resumed_config(run, ck) == 0) snprintf(out, cap, "%s", ck->dpo.reference_checksum);
    free(ck);
}

/* the file beside the checkpoint read */
static void beside_checkpoint(const tsr_run *run, char *out, size_t cap) {
    char ck_dir[1200];
    snprintf(ck_dir, sizeof ck_dir, "%s", run->out->start_load.path);
    char *slash = strrchr(ck_dir, '/');
    if (slash) *slash = '\0';
    else snprintf(ck_dir, sizeof ck_dir, ".");
    ref_path(ck_dir, out, cap);
}

/* The most a stored reference of ref's pairs may hold: the size of a file of either format holding
 * them. tessera wrote the file and read and checked it a moment ago (its size is one of these);
 * the bound keeps one swapped in since from asking for more memory. */
static size_t ref_file_max(const tsr_dpo_ref *ref) {
    dpo_ref_header h;
    memset(&h, 0, sizeof h);
    h.n_train = ref->n_train, h.n_val = ref->n_val;
    uint32_t crc = 0;
    ckpt_ref r;
    describe(&h, &r, &crc);
    uint64_t v1 = sizeof h + (h.n_train + h.n_val) * 16 + 4, now = ckpt_ref_file_bytes(&r);
    return (size_t)(v1 > now ? v1 : now);
}

/* rank 0: the file read beside the resumed checkpoint (holding ref's values) copied into path as
 * it is (its format and so its checksum, which the run's config records, kept), committed by
 * rename */
static int copy_file(const tsr_run *run, const tsr_dpo_ref *ref, const char *path,
                     uint64_t *bytes) {
    char src[1300], tmp[1400];
    beside_checkpoint(run, src, sizeof src);
    char *buf;
    size_t n;
    TSR_CHECK(fs_read_all(src, ref_file_max(ref), &buf, &n));
    FILE *f = fs_open_beside(path, tmp, sizeof tmp);
    int rc = f ? 0 : TSR_EXIT_DATA;
    if (f && fwrite(buf, 1, n, f) != n) {
        tsr_error("%s: cannot write the DPO reference: %s", tmp, strerror(errno));
        fclose(f), unlink(tmp);
        rc = TSR_EXIT_DATA;
    } else if (f) {
        rc = fs_commit_beside(f, tmp, path);
    }
    free(buf);
    *bytes = n;
    return rc;
}

/* rank 0: the resume's file: run_dir's, else the one beside the checkpoint read */
static int load_rank0(const tsr_run *run, tsr_dpo_ref *ref, char *path, size_t cap) {
    dpo_ref_header want;
    expected_header(run, &want);
    char expect[32], cands[2][1300], seen[600] = "";
    checkpoint_record(run, expect, sizeof expect);
    ref_path(run->cfg->run_dir, cands[0], sizeof cands[0]);
    beside_checkpoint(run, cands[1], sizeof cands[1]);
    /* run_dir's file, else the one beside the checkpoint; with the checkpoint's record, the first
     * whose checksum is the one it was trained against */
    for (int k = 0; k < 2; k++) {
        if (k == 1 && strcmp(cands[1], cands[0]) == 0) break;
        int rc = read_file(ref, cands[k], &want);
        if (rc == 1) continue;
        if (rc) return rc;
        char got[32];
        snprintf(got, sizeof got, "crc32c:%08x", ref->crc);
        if (!expect[0] || strcmp(got, expect) == 0) {
            ref->copy = k == 1;
            snprintf(path, cap, "%.1290s", cands[k]);
            return 0;
        }
        size_t o = strlen(seen);
        snprintf(seen + o, sizeof seen - o, "%s%.250s (%s)", o ? ", " : "", cands[k], got);
        free(ref->train), free(ref->val);
        ref->train = ref->val = NULL;
    }
    if (seen[0]) {
        tsr_error("%s was trained against the stored DPO reference %s (dpo.reference_checksum "
                  "in its config), but the reference found is another run's: %s. Restore that "
                  "run's dpo-reference.bin into run_dir, or start a new run_dir",
                  run->out->start_load.path, expect, seen);
        return TSR_EXIT_DATA;
    }
    snprintf(path, cap, "%.1290s", cands[0]);
    tsr_error("%s: missing: this run resumes (from %s) with dpo.reference = \"precomputed\", whose "
              "values were computed from the initial model at the run's start and cannot be "
              "computed again (the model has moved on): restore the file, or start a new run_dir",
              path, run->out->start_load.path);
    return TSR_EXIT_DATA;
}

/* what the run's config (and so every checkpoint) records of the reference: its checksum */
static void record_checksum(const tsr_run *run, tsr_dpo_ref *ref) {
    snprintf(run->cfg->dpo.reference_checksum, sizeof run->cfg->dpo.reference_checksum,
             "crc32c:%08x", ref->crc);
}

/* rank 0's buffer to every rank, in pieces MPI's int count carries */
static void bcast_doubles(double *buf, uint64_t n) {
    const uint64_t piece = (uint64_t)1 << 26;
    for (uint64_t o = 0; o < n; o += piece)
        dist_bcast(buf + o, (size_t)(n - o < piece ? n - o : piece) * sizeof(double), 0);
}

int dpo_ref_load(const tsr_run *run, tsr_dpo_ref *ref) {
    if (!ref->on || strcmp(run->out->start_load.what, "resume") != 0) return 0;
    char path[1300];
    int64_t rc = run->dist->rank == 0 ? load_rank0(run, ref, path, sizeof path) : 0;
    dist_allreduce_sum_i64(&rc, 1); /* rank 0's outcome, on every rank */
    if (rc) return TSR_EXIT_DATA;
    uint64_t n[4] = {ref->n_train, ref->n_val, (uint64_t)ref->copy,
                     ref->crc};
    dist_bcast(n, sizeof n, 0);
    ref->crc = (uint32_t)n[3];
    record_checksum(run, ref);
    dist_bcast(ref->init, sizeof ref->init, 0);
    if (run->dist->rank != 0) {
        ref->n_train = n[0], ref->n_val = n[1], ref->copy = (int)n[2];
        ref->train = tsr_malloc((size_t)n[0] * 2 * sizeof(double));
        ref->val = n[1] ? tsr_malloc((size_t)n[1] * 2 * sizeof(double)) : NULL;
    }
    bcast_doubles(ref->train, 2 * n[0]);
    if (n[1]) bcast_doubles(ref->val, 2 * n[1]);
    ref->loaded = 1;
    if (run->dist->rank == 0)
        printf("dpo reference: read %s (%llu train, %llu validation pairs; computed at the run's "
               "start from %s): not recomputed\n", path, (unsigned long long)n[0],
               (unsigned long long)n[1], ref->init);
    return 0;
}

/* The initial model, in words, for the file's record */
static void describe_init(const tsr_run *run, tsr_dpo_ref *ref) {
    char *s = ref->init;
    const size_t cap = sizeof ref->init;
    if (run->out->start_load.what[0])
        snprintf(s, cap, "%s %.900s", run->out->start_load.what, run->out->start_load.path);
    else
        snprintf(s, cap, "seed %lld", (long long)run->cfg->seed);
    if (run->part->lora_on) {
        size_t o = strlen(s);
        snprintf(s + o, cap - o, "; LoRA base %.40s", run->cfg->lora.base_checksum);
    }
}

static int commit(const tsr_run *run, tsr_dpo_ref *ref, const char *what, double seconds) {
    char path[1300];
    uint64_t bytes = 0;
    ref_path(run->cfg->run_dir, path, sizeof path);
    int64_t rc = run->dist->rank != 0 ? 0 : seconds >= 0 ? write_file(run, ref, path, &bytes)
                                                     : copy_file(run, ref, path, &bytes);
    dist_allreduce_sum_i64(&rc, 1);
    if (rc || run->dist->rank != 0) return rc ? TSR_EXIT_DATA : 0;
    char size[32];
    metrics_human_bytes(size, sizeof size, (double)bytes);
    const double pairs = (double)(ref->n_train + ref->n_val);
    if (seconds >= 0)
        printf("dpo reference: forward-only pass of the initial model over %llu train + %llu "
               "validation pairs in %.2f s (%.1f pairs/s), stored in %s (%s)\n",
               (unsigned long long)ref->n_train, (unsigned long long)ref->n_val,
               seconds, pairs / (seconds > 0 ? seconds : 1e-9), path, size);
    else
        printf("dpo reference: %s written into run_dir as %s (%s)\n", what, path, size);
    if (run->out->metrics) {
        fprintf(run->out->metrics, "{\"event\": \"dpo_reference\", \"action\": \"%s\", \"pairs\": "
                "%llu, \"val_pairs\": %llu, \"seconds\": %.3f, \"bytes\": %llu",
                seconds >= 0 ? "computed" : "copied", (unsigned long long)ref->n_train,
                (unsigned long long)ref->n_val, seconds >= 0 ? seconds : 0.0,
                (unsigned long long)bytes);
        jsonl_end_record(run->out->metrics);
    }
    return 0;
}

int dpo_ref_build(const tsr_run *run, tsr_dpo_ref *ref) {
    if (!ref->on) return 0;
    if (ref->loaded)
        return ref->copy ? commit(run, ref, "the file read beside the resumed checkpoint", -1) : 0;
    double t0 = tsr_now();
    ref->n_train = dataset_n_samples(run->data->train, *run->T) / 2;
    ref->n_val = dpo_val_pairs(run);
    ref->train = tsr_malloc((size_t)ref->n_train * 2 * sizeof(double));
    dpo_reference_logps(run, run->data->train, run->cfg->data.train, ref->n_train, ref->train);
    if (ref->n_val) {
        ref->val = tsr_malloc((size_t)ref->n_val * 2 * sizeof(double));
        dpo_reference_logps(run, run->data->val, run->cfg->data.val, ref->n_val, ref->val);
    }
    describe_init(run, ref);
    dpo_ref_header h;
    file_header(run, ref, &h);
    ref->crc = file_crc(ref, &h); /* (every rank: the same values and header) */
    record_checksum(run, ref);
    TSR_CHECK(commit(run, ref, NULL, tsr_now() - t0));
    /* run_dir/config.cfg was written before the pass, with the checksum still empty: again, so
     * that it names the reference as the checkpoints' configs do */
    int64_t rc = run->dist->rank == 0 ? metrics_save_config(run->cfg) : 0;
    dist_allreduce_sum_i64(&rc, 1); /* rank 0's outcome, on every rank */
    return rc ? TSR_EXIT_DATA : 0;
}

void dpo_ref_free(tsr_dpo_ref *ref) {
    free(ref->train);
    free(ref->val);
    memset(ref, 0, sizeof *ref);
}
