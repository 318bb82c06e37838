/* ckpt_cmd.c — `tessera ckpt`: list, verify and inspect checkpoints from a login node.
 *
 *   tessera ckpt ls RUN_DIR        one line per step-*.h5: step, size, valid?, which `latest` names
 *   tessera ckpt verify CKPT       root attributes, shapes, every tensor's CRC32C; exit 0 or 2
 *   tessera ckpt inspect CKPT      format, counters, config text, tensor table (no data read)
 * (CKPT: a checkpoint file, a run directory or its `latest`: the file `latest` names)
 *   tessera ckpt export --format hf [--dtype fp32|bf16] [--tokenizer SPEC] CKPT OUT_DIR
 *                                  a transformers directory (src/hf/, docs/hf.md)
 *   tessera ckpt import HF_DIR OUT.h5
 *                                  a transformers directory as a tessera checkpoint (step 0)
 *
 * Local: files are opened with HDF5's default (sec2) driver, MPI is never initialised (but by
 * import, which writes through the checkpoint library as a world of one). Tensors are
 * read in slabs of CHUNK elements, so verifying a large checkpoint needs little memory.
 * Options come from one table per subcommand; the parser and --help are generated from it.
 */
#include "ckpt/ckpt_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_h5.h"
#include "ckpt_internal.h"
#include "model/ckpt_model.h"
#include "cli.h"
#include "common.h"
#include "crc32c.h"
#include "dist/dist.h"
#include "hf/hf.h"
#include "hf/hf_importer.h"

#define CHUNK (1u << 22) /* elements per read while verifying: 16 MiB */

/* ================================ examining one file ================================ */

typedef struct tensor_info {
    char name[256];
    int ndim;
    int64_t shape[CKPT_MAX_NDIM];
    uint64_t numel;
    uint32_t crc_attr, crc_data;
    int has_crc, checked;
} tensor_info;

typedef struct file_report {
    ckpt_meta meta;
    char format[64], created[64], rng[256];
    int64_t version;
    tensor_info *t;
    int n, cap;
    int valid;
    char why[1024]; /* the first problem found */
    uint64_t bytes;
} file_report;

static void problem(file_report *r, const char *fmt, const char *name, const char *detail) {
    if (!r->valid) return; /* keep the first */
    r->valid = 0;
    snprintf(r->why, sizeof r->why, fmt, name, detail);
}

static herr_t collect(hid_t g, const char *name, const H5L_info_t *info, void *arg) {
    (void)info;
    file_report *r = arg;
    hid_t o = H5Oopen(g, name, H5P_DEFAULT);
    if (o < 0) return 0;
    int is_ds = H5Iget_type(o) == H5I_DATASET;
    H5Oclose(o);
    if (!is_ds) return 0;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 32;
        r->t = realloc(r->t, (size_t)r->cap * sizeof *r->t);
        if (!r->t) tsr_die(TSR_EXIT_INTERNAL, "out of memory listing datasets");
    }
    tensor_info *ti = &r->t[r->n++];
    memset(ti, 0, sizeof *ti);
    snprintf(ti->name, sizeof ti->name, "%s", name);
    return 0;
}

/* CRC32C of a whole dataset, read in slabs of CHUNK elements; in *bad its values that are not
 * finite, the first at *first. */
static int crc_dataset(hid_t ds, const tensor_info *ti, uint32_t *crc, uint64_t *bad,
                       uint64_t *first) {
    *bad = 0, *first = ti->numel;
    float *buf = tsr_malloc((size_t)CHUNK * sizeof(float));
    hid_t fs = H5Dget_space(ds);
    int rc = fs < 0 ? -1 : 0;
    uint32_t c = 0;
    for (uint64_t lo = 0; lo < ti->numel && rc == 0; lo += CHUNK) {
        uint64_t hi = lo + CHUNK < ti->numel ? lo + CHUNK : ti->numel;
        hsize_t m = hi - lo;
        hid_t ms = H5Screate_simple(1, &m, NULL);
        if (ms < 0 || ck_select_range(fs, ti->ndim, ti->shape, lo, hi) != 0 ||
            H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) < 0)
            rc = -1;
        else
            c = tsr_crc32c(c, buf, (size_t)m * sizeof(float));
        uint64_t at, k = rc == 0 ? ckpt_nonfinite(buf, m, &at) : 0;
        if (k && !*bad) *first = lo + at;
        *bad += k;
        if (ms >= 0) H5Sclose(ms);
    }
    if (fs >= 0) H5Sclose(fs);
    free(buf);
    *crc = c;
    return rc;
}

/* Fills r; with read_data every tensor's CRC is recomputed. r->valid says whether all is right. */
static void examine(const char *path, file_report *r, int read_data) {
    memset(r, 0, sizeof *r);
    r->valid = 1;
    ck_h5_quiet();
    char why[1024];
    ck_meta_info info;
    /* the root attributes first, by the reader that survives a damaged file (ckpt_meta.c) */
    if (ck_meta_read_file(path, &r->meta, &info, why, sizeof why) != 0) problem(r, "%s%s", "", why);
    snprintf(r->format, sizeof r->format, "%s", info.format[0] ? info.format : "?");
    r->version = info.version;
    snprintf(r->created, sizeof r->created, "%s", info.created[0] ? info.created : "?");
    snprintf(r->rng, sizeof r->rng, "%s", info.rng[0] ? info.rng : "?");
    if (!r->valid && !r->meta.program_version[0]) return; /* metadata unreadable: stop there */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        problem(r, "%scannot open it as HDF5 (missing, truncated or not HDF5)%s", "", "");
        return;
    }
    if (H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, collect, r) < 0)
        problem(r, "%scannot list the datasets (damaged metadata)%s", "", "");
    for (int i = 0; i < r->n; i++) {
        tensor_info *ti = &r->t[i];
        hid_t ds = H5Dopen2(f, ti->name, H5P_DEFAULT);
        if (ds < 0) {
            problem(r, "tensor %s: %s", ti->name, "cannot open the dataset");
            continue;
        }
        hid_t type = H5Dget_type(ds);
        int f32 = type >= 0 && H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4;
        if (type >= 0) H5Tclose(type);
        if (ck_dataset_shape(ds, &ti->ndim, ti->shape) != 0) {
            problem(r, "tensor %s: %s", ti->name, "rank outside 1..4");
            ti->ndim = 0;
        } else if (!f32) {
            problem(r, "tensor %s: %s", ti->name, "not a float32 dataset");
        }
        ti->numel = ti->ndim ? ckpt_numel(ti->ndim, ti->shape) : 0;
        r->bytes += ti->numel * sizeof(float);
        ti->has_crc = ck_attr_read_u32(ds, "crc32c", &ti->crc_attr) == 0;
        if (!ti->has_crc) problem(r, "tensor %s: %s", ti->name, "no crc32c attribute");
        if (read_data && ti->has_crc && f32 && ti->numel) {
            uint64_t bad, first;
            if (crc_dataset(ds, ti, &ti->crc_data, &bad, &first) != 0) {
                problem(r, "tensor %s: %s", ti->name, "reading its data failed");
            } else {
                ti->checked = 1;
                char d[200];
                if (ti->crc_data != ti->crc_attr) {
                    snprintf(d, sizeof d,
                             "CRC32C mismatch: data 0x%08x, attribute crc32c 0x%08x (corrupt)",
                             ti->crc_data, ti->crc_attr);
                    problem(r, "tensor %s: %s", ti->name, d);
                } else if (bad) { /* (written by an older build: this one never commits one) */
                    snprintf(d, sizeof d, "not finite: %llu of its %llu values are NaN or Inf, "
                             "the first at element %llu (a diverged run)", (unsigned long long)bad,
                             (unsigned long long)ti->numel, (unsigned long long)first);
                    problem(r, "tensor %s: %s", ti->name, d);
                }
            }
        }
        H5Dclose(ds);
    }
    H5Fclose(f);
}

static file_report *report_new(void) {
    file_report *r = calloc(1, sizeof *r);
    if (!r) tsr_die(TSR_EXIT_INTERNAL, "out of memory");
    return r;
}

static void report_free(file_report *r) {
    if (!r) return;
    free(r->t);
    free(r);
}

/* ================================ option tables ================================ */

#define MAX_SUB_OPTS 6
typedef struct sub_args {
    const char *operand[2];
    const char *opt[MAX_SUB_OPTS]; /* the values of the subcommand's options, in its table's order */
} sub_args;

typedef struct sub_spec {
    cli_cmd cli;         /* "ckpt NAME": its options (cli.h's rows, one letter, one meaning:
                          * docs/cli.md) and help, parsed by cli_parse */
    int n_operands;
    int (*run)(const sub_args *a);
} sub_spec;

#define HELP_ROW {"help", 'h', NULL, "print this help and exit"}
static const cli_opt help_only[] = {HELP_ROW};

enum {
    EXPORT_FORMAT = 0, EXPORT_DTYPE, EXPORT_TOKENIZER, EXPORT_ARCH, EXPORT_ADAPTER, EXPORT_MERGE,
    EXPORT_OPT_COUNT
};
static const cli_opt export_opts[] = {
    [EXPORT_FORMAT] = {"format", 'f', "FMT", "required: hf (a transformers directory: "
                       "model.safetensors + config.json + tokenizer files)"},
    [EXPORT_DTYPE] = {"dtype", CLI_NO_SHORT('d'), "DTYPE", "fp32 (default, exact) or bf16 (rounded to nearest even)"},
    [EXPORT_TOKENIZER] = {"tokenizer", 't', "SPEC", "gpt2, a directory with encoder.json + vocab.bpe, "
                          "or none (default: the checkpoint's data.tokenizer)"},
    [EXPORT_ARCH] = {"arch", CLI_NO_SHORT('a'), "TYPE", "a RoPE model's model_type: llama, mistral, "
                     "qwen2, qwen3, mixtral, qwen3_moe, olmo2, olmo3, gemma3_text, gemma2, smollm3 or "
                     "gpt_oss "
                     "(default: "
                     "gemma3_text with sandwich norms, GeGLU or the embedding scale (gemma2 "
                     "without qk_norm); smollm3 with no_rope_layers; olmo3 with post "
                     "norms and windows, else olmo2; with experts gpt_oss with sinks or a gpt-oss "
                     "key, qwen3_moe with qk_norm, else "
                     "mixtral; qwen3 with qk_norm, qwen2 with qkv_bias, else llama)"},
    [EXPORT_ADAPTER] = {"adapter", CLI_NO_SHORT('A'), NULL, "a LoRA checkpoint: its adapters "
                        "as a PEFT directory (adapter_config.json + adapter_model.safetensors; "
                        "docs/lora.md)"},
    [EXPORT_MERGE] = {"merge", CLI_NO_SHORT('M'), NULL, "a LoRA checkpoint: its base with the "
                      "adapters merged in, as a transformers directory"},
    [EXPORT_OPT_COUNT] = HELP_ROW,
};
_Static_assert(sizeof export_opts / sizeof export_opts[0] == EXPORT_OPT_COUNT + 1,
               "one row per option, then --help");
_Static_assert(EXPORT_OPT_COUNT <= MAX_SUB_OPTS, "sub_args.opt holds them");
#define N_ROWS(t) ((int)(sizeof t / sizeof t[0]))

static int run_ls(const sub_args *a);
static int run_verify(const sub_args *a);
static int run_inspect(const sub_args *a);
static int run_export(const sub_args *a);
static int run_import(const sub_args *a);

static const sub_spec subs[] = {
    {{"ckpt ls", "RUN_DIR",
      "list the checkpoints of a run: step, size, valid (full CRC check), which one `latest` names",
      help_only, 1, NULL}, 1, run_ls},
    {{"ckpt verify", "CKPT",
      "check one checkpoint (a file, or the one a run directory's `latest` names) for its "
      "attributes, shapes and every tensor's CRC32C (exit 0 valid, 2 invalid)",
      help_only, 1, NULL}, 1, run_verify},
    {{"ckpt inspect", "CKPT",
      "print a checkpoint's (a file, or the one a run directory's `latest` names) format, "
      "counters, config text and tensor table (no data read)",
      help_only, 1, NULL}, 1, run_inspect},
    {{"ckpt export", "CKPT OUT_DIR",
      "write a checkpoint (file, run directory or latest) as a Hugging Face transformers "
      "directory: GPT2LMHeadModel (learned positions), MptForCausalLM (ALiBi) or the Llama family "
      "(RoPE: Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE, OLMo 2, OLMo 3, Gemma 3); docs/hf.md",
      export_opts, N_ROWS(export_opts), NULL}, 2, run_export},
    {{"ckpt import", "HF_DIR OUT.h5",
      "write a Hugging Face transformers directory (config.json + model.safetensors or its "
      "shards) as a tessera checkpoint at step 0, its config from config.json (docs/hf.md)",
      help_only, 1, NULL}, 2, run_import},
};
#define N_SUBS ((int)(sizeof subs / sizeof subs[0]))

/* a subcommand's name as typed after `tessera ckpt` */
static const char *sub_name(const sub_spec *s) { return s->cli.name + strlen("ckpt "); }

static void help_all(FILE *f) {
    fprintf(f,
            "usage: tessera ckpt COMMAND [options] OPERAND...\nInspect and export tessera "
            "checkpoints (docs/checkpoint-format.md, docs/hf.md).\n\ncommands:\n");
    for (int k = 0; k < N_SUBS; k++) {
        char left[64];
        snprintf(left, sizeof left, "%s %s", sub_name(&subs[k]), subs[k].cli.operands);
        fprintf(f, "  %-22s %s\n", left, subs[k].cli.summary);
    }
    fprintf(f, "\n'tessera ckpt COMMAND --help' for a command's options.\nexit codes: %s\n", CLI_EXITS);
}

/* ================================ subcommands ================================ */

static int run_ls(const sub_args *a) {
    const char *run_dir = a->operand[0];
    int64_t *steps;
    int n = ckpt_list_steps(run_dir, &steps);
    if (n < 0) {
        tsr_error("ckpt ls: cannot read the directory %s (does it exist?)", run_dir);
        return TSR_EXIT_DATA;
    }
    char latest[256] = "", why[1024] = "";
    int lr = ckpt_read_latest(run_dir, latest, sizeof latest, why, sizeof why);
    printf("%10s  %-18s %12s  %s\n", "step", "file", "bytes", "status");
    int named_found = 0;
    for (int k = n - 1; k >= 0; k--) { /* oldest first */
        char name[64], path[4200];
        snprintf(name, sizeof name, "step-%08lld.h5", (long long)steps[k]);
        snprintf(path, sizeof path, "%s/%s", run_dir, name);
        struct stat st;
        long long size = stat(path, &st) == 0 ? (long long)st.st_size : -1;
        file_report *r = report_new();
        examine(path, r, 1);
        int is_latest = lr == 1 && strcmp(latest, name) == 0;
        named_found |= is_latest;
        printf(
            "%10lld  %-18s %12lld  %s%s%s%s%s\n", (long long)steps[k], name, size,
            r->valid ? "valid" : "invalid: ", r->valid ? "" : r->why,
            r->valid && r->meta.fingerprints_agreed == 1 ? ", fingerprints agreed" : "",
            is_latest ? "  <- latest" : "",
            (r->valid && r->meta.step != steps[k]) ? "  (note: its step attribute differs)" : "");
        report_free(r);
    }
    if (n == 0) printf("(no checkpoints)\n");
    if (lr == 0 && n > 0)
        printf("note: no `latest` file; a resume takes the newest valid checkpoint\n");
    if (lr < 0) printf("note: %s\n", why);
    if (lr == 1 && !named_found) printf("note: `latest` names %s, which does not exist\n", latest);
    free(steps);
    return 0;
}

/* What a checkpoint says of its fingerprints (docs/health.md): compared between the ranks and
 * agreed when it was saved, not compared, or written before the attribute */
static const char *fingerprints_word(const ckpt_meta *m) {
    if (m->fingerprints_agreed == 1) return "fingerprints agreed";
    if (m->fingerprints_agreed == 0) return "fingerprints not compared";
    return "fingerprints unknown (written before checkpoints recorded them)";
}

/* The checkpoint file of operand CKPT: a file, or a run directory's (or its `latest` file's)
 * choice, said on stdout so that the lines below name what was read. 0 or TSR_EXIT_DATA. */
static int operand_file(const char *in, char *path, size_t n) {
    TSR_CHECK(ckpt_resolve_path(in, path, n));
    if (strcmp(in, path) != 0) printf("%s: `latest` names %s\n", in, path);
    return 0;
}

static int run_verify(const sub_args *a) {
    char path[4096];
    TSR_CHECK(operand_file(a->operand[0], path, sizeof path));
    file_report *r = report_new();
    examine(path, r, 1);
    int rc = 0;
    if (r->valid) {
        printf(
            "%s: valid (step %lld, %d tensors, %llu bytes of tensor data, every CRC32C matches; "
            "%s)\n", path, (long long)r->meta.step, r->n, (unsigned long long)r->bytes,
            fingerprints_word(&r->meta));
    } else {
        tsr_error("%s: invalid: %s", path, r->why);
        rc = TSR_EXIT_DATA;
    }
    report_free(r);
    return rc;
}

/* Each line of text, indented by 4 spaces */
static void print_indented(const char *p) {
    while (*p) {
        const char *e = strchr(p, '\n');
        int len = e ? (int)(e - p) : (int)strlen(p);
        printf("    %.*s\n", len, p);
        p += len + (e ? 1 : 0);
    }
}

static int run_inspect(const sub_args *a) {
    char path[4096];
    TSR_CHECK(operand_file(a->operand[0], path, sizeof path));
    file_report *r = report_new();
    examine(path, r, 0);
    if (!r->valid && r->n == 0 && !r->meta.program_version[0]) {
        tsr_error("%s: %s", path, r->why);
        report_free(r);
        return TSR_EXIT_DATA;
    }
    const ckpt_meta *m = &r->meta;
    printf("file             %s\n", path);
    printf("format           %s version %lld (this program reads %s versions 1 to %d)\n", r->format,
           (long long)r->version, TSR_CKPT_FORMAT, TSR_CKPT_VERSION);
    printf("step             %lld\n", (long long)m->step);
    printf("tokens           %lld\n", (long long)m->tokens);
    printf("data_cursor      %lld\n", (long long)m->data_cursor);
    printf("world_size       %lld\n", (long long)m->world_size);
    printf("global_batch     %lld\n", (long long)m->global_batch);
    printf("seed             %lld\n", (long long)m->seed);
    if (m->optim_step >= 0) printf("optim_step       %lld\n", (long long)m->optim_step);
    printf("rollbacks        %lld (updates skipped %lld)\n", (long long)m->rollbacks,
           (long long)m->updates_skipped);
    printf("skipped_batches  %s\n", m->skipped_batches[0] ? m->skipped_batches : "none");
    if (m->micro_batch > 0) printf("micro_batch      auto, %lld in use\n", (long long)m->micro_batch);
    printf("fingerprints     %s\n", fingerprints_word(m) + strlen("fingerprints "));
    if (m->mix_tokens[0]) printf("mix_tokens      %s\n", m->mix_tokens);
    printf("program_version  %s\n", m->program_version);
    printf("created          %s\n", r->created);
    printf("rng              %s\n", r->rng);
    printf("config:\n");
    print_indented(m->config);
    printf("data_sources:%s\n", m->data_sources[0] ? ""
                                  : r->version < 3 ? " none recorded (format version < 3)"
                                                   : " none (trained on no data: tessera ckpt import)");
    print_indented(m->data_sources);
    printf("tensors (%d, %llu bytes):\n", r->n, (unsigned long long)r->bytes);
    printf("  %-40s %-20s %12s  %s\n", "name", "shape", "numel", "crc32c");
    for (int i = 0; i < r->n; i++) {
        char shape[96];
        ck_shape_str(shape, sizeof shape, r->t[i].ndim, r->t[i].shape);
        char crc[16];
        if (r->t[i].has_crc)
            snprintf(crc, sizeof crc, "0x%08x", r->t[i].crc_attr);
        else
            snprintf(crc, sizeof crc, "-");
        printf("  %-40s %-20s %12llu  %s\n", r->t[i].name, shape, (unsigned long long)r->t[i].numel,
               crc);
    }
    if (!r->valid) printf("problem: %s\n", r->why);
    int rc = r->valid ? 0 : TSR_EXIT_DATA;
    report_free(r);
    return rc;
}

static int run_export(const sub_args *a) {
    const char *fmt = a->opt[EXPORT_FORMAT], *dt = a->opt[EXPORT_DTYPE];
    if (!fmt || strcmp(fmt, "hf") != 0) {
        tsr_error("ckpt export: %s%s%s (accepted: --format hf)", fmt ? "--format " : "",
                  fmt ? fmt : "--format is required", fmt ? " is not a known format" : "");
        return TSR_EXIT_USAGE;
    }
    hf_export_opts o = {.dtype = ST_F32, .tokenizer = a->opt[EXPORT_TOKENIZER], .arch = a->opt[EXPORT_ARCH]};
    if (dt && !strcmp(dt, "bf16")) {
        o.dtype = ST_BF16;
    } else if (dt && strcmp(dt, "fp32") != 0) {
        tsr_error("ckpt export: --dtype %s (accepted: fp32, bf16)", dt);
        return TSR_EXIT_USAGE;
    }
    TSR_CHECK(hf_export_check_opts(&o)); /* a typo in --arch before reading the checkpoint */
    const int adapter = a->opt[EXPORT_ADAPTER] != NULL, merge = a->opt[EXPORT_MERGE] != NULL;
    if (adapter && merge) {
        tsr_error("ckpt export: --adapter and --merge exclude each other (the adapters alone, or "
                  "the base with them merged in)");
        return TSR_EXIT_USAGE;
    }
    tsr_config *cfg = tsr_malloc(sizeof *cfg);
    tsr_model m;
    char file[1200];
    const double t0 = tsr_now();
    /* --adapter writes the adapters alone: the base (lora.base, perhaps not on this machine) is
     * not read, only the layout */
    const ckpt_model_importer *hf = &hf_model_importer;
    int rc = adapter ? ckpt_model_layout(hf, a->operand[0], NULL, 0, 0, cfg, &m, file, sizeof file)
                     : ckpt_model_load(hf, a->operand[0], NULL, 0, 0, cfg, &m, file, sizeof file);
    if (!rc) { /* a LoRA checkpoint says which of the two it wants; another takes neither */
        const int lora = cfg->lora.rank > 0;
        if (lora && !adapter && !merge) {
            tsr_error("ckpt export: %s holds LoRA adapters (lora.rank = %lld): give --adapter "
                      "(a PEFT directory) or --merge (the base with the adapters merged in)",
                      file, (long long)cfg->lora.rank);
            rc = TSR_EXIT_USAGE;
        } else if (!lora && (adapter || merge)) {
            tsr_error("ckpt export: --%s: %s holds no LoRA adapters (lora.rank = 0)",
                      adapter ? "adapter" : "merge", file);
            rc = TSR_EXIT_USAGE;
        }
    }
    if (!rc) {
        printf("exporting %s%s (read in %.2f s)\n", file,
               adapter ? " (its adapters)" : merge ? " (merged)" : "", tsr_now() - t0);
        o.source = file;
        if (adapter) {
            tsr_lora lo;
            rc = ckpt_lora_read(file, cfg, &m, &lo);
            if (!rc) {
                rc = hf_export_adapter(&m, cfg, &lo, a->operand[1], &o);
                lora_free(&lo);
            }
        } else {
            rc = hf_export(&m, cfg, a->operand[1], &o);
        }
        if (!rc) printf("exported %s to %s in %.2f s\n", file, a->operand[1], tsr_now() - t0);
    }
    if (m.params) model_free(&m);
    free(cfg);
    return rc;
}

/* import: m (its config cfg) as checkpoint step 0 of a fresh directory beside out, renamed to
 * out: the checkpoint library's commit (temporary file, fsync, rename) as a world of one. */
static int write_checkpoint(const tsr_model *m, const tsr_config *cfg, const char *out) {
    ckpt_tensor ts[TSR_P_COUNT];
    char names[TSR_P_COUNT][64], dir[4200], step[4300];
    int n = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        if (!p->numel) continue;
        snprintf(names[n], sizeof names[n], "model/%s", p->name);
        ts[n] = (ckpt_tensor){.name = names[n], .ndim = p->ndim, .lo = 0, .hi = p->numel,
                              .data = m->params + p->offset};
        memcpy(ts[n].shape, p->shape, sizeof ts[n].shape);
        n++;
    }
    ckpt_meta *meta = tsr_calloc(1, sizeof *meta);
    meta->world_size = 1, meta->global_batch = cfg->global_batch, meta->seed = cfg->seed;
    FILE *f = fmemopen(meta->config, sizeof meta->config - 1, "w");
    if (f) config_print(f, cfg), fclose(f);
    snprintf(meta->program_version, sizeof meta->program_version, "%s", TSR_VERSION);
    snprintf(dir, sizeof dir, "%s.import-XXXXXX", out);
    int rc = mkdtemp(dir) ? 0 : TSR_EXIT_DATA;
    if (rc) tsr_error("ckpt import: cannot make a directory beside %s: %s", out, strerror(errno));
    if (!rc) rc = ckpt_save(dir, meta, ts, n, 2, step, sizeof step, NULL);
    if (!rc && rename(step, out) != 0) {
        tsr_error("ckpt import: cannot rename %s to %s: %s", step, out, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    if (!rc || access(dir, F_OK) == 0) { /* the directory holds `latest` alone, or nothing */
        snprintf(step, sizeof step, "%s/latest", dir);
        unlink(step);
        rmdir(dir);
    }
    free(meta);
    return rc;
}

static int run_import(const sub_args *a) {
    const char *in = a->operand[0], *out = a->operand[1];
    struct stat st;
    if (!hf_is_dir(in)) {
        tsr_error("ckpt import: %s is not a Hugging Face directory (config.json with "
                  "model.safetensors or its index)", in);
        return TSR_EXIT_DATA;
    }
    if (stat(out, &st) == 0) {
        tsr_error("ckpt import: %s exists: give a new file (nothing is replaced)", out);
        return TSR_EXIT_USAGE;
    }
    tsr_config *cfg = tsr_malloc(sizeof *cfg);
    tsr_model m;
    tsr_dist d;
    int argc = 0;
    char **argv = NULL;
    int rc = ckpt_model_load(&hf_model_importer, in, NULL, 0, 0, cfg, &m, NULL, 0);
    if (!rc) {
        dist_init(&d, &argc, &argv); /* ckpt_save writes through MPI-IO in the MPI build */
        rc = write_checkpoint(&m, cfg, out);
        if (!rc) printf("imported %s: %zu parameters, step 0, as %s\n", in, m.n_params, out);
        model_free(&m);
        dist_finalize();
    }
    free(cfg);
    return rc;
}

/* an option of the subcommand: its value (a flag's "1") at its row's place in a->opt */
static int on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    sub_args *a = ctx;
    int k = 0;
    while (k < c->n_opts && c->opts[k].short_name != ch) k++;
    a->opt[k] = val ? val : "1"; /* (k < MAX_SUB_OPTS: --help never reaches here) */
    return 0;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        help_all(argc < 2 ? stderr : stdout);
        return argc < 2 ? TSR_EXIT_USAGE : 0;
    }
    const sub_spec *s = NULL;
    for (int k = 0; k < N_SUBS; k++)
        if (strcmp(argv[1], sub_name(&subs[k])) == 0) s = &subs[k];
    if (!s) {
        tsr_error("ckpt: unknown command '%s' (see 'tessera ckpt --help')", argv[1]);
        return TSR_EXIT_USAGE;
    }
    sub_args args;
    memset(&args, 0, sizeof args);
    const int sub_argc = argc - 1;
    char **sub_argv = argv + 1;
    int rc = cli_parse(&s->cli, sub_argc, sub_argv, on_opt, &args);
    if (rc) return rc < 0 ? 0 : rc;
    if (sub_argc - optind != s->n_operands) {
        char msg[160];
        snprintf(msg, sizeof msg, "expected %s, got %d operand%s", s->cli.operands, sub_argc - optind,
                 sub_argc - optind == 1 ? "" : "s");
        return cli_usage_error(&s->cli, msg, NULL);
    }
    for (int k = 0; k < s->n_operands; k++) args.operand[k] = sub_argv[optind + k];
    return s->run(&args);
}
