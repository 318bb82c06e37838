/* test_config.c — the config layer: every error class with its message and line, --set, the
 * cross-key checks, config_check_world, durations, the print/load round trip, and that every
 * shipped configs/NAME.cfg loads. Runs with cwd = the repository root (or $TSR_ROOT).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "config/config.h"
#include "config/config_table.h"
#include "tap.h"
#include "testfs.h"

static char tmpdir[256], errpath[300], errbuf[1 << 16];

/* ---- stderr capture ---- */

static int capture_begin(void) { return fd_redirect(2, errpath); }

/* errbuf = all that was captured (testfs.h's cap_end keeps one TAP line's worth) */
static void capture_end(int saved) {
    fd_restore(2, saved);
    FILE *f = fopen(errpath, "r");
    size_t n = f ? fread(errbuf, 1, sizeof errbuf - 1, f) : 0;
    errbuf[n] = '\0';
    if (f) fclose(f);
}

static int load(tsr_config *cfg, const char *path, const char *const *sets, int n) {
    int saved = capture_begin();
    int rc = config_load(cfg, path, sets, n);
    capture_end(saved);
    return rc;
}

/* ok when rc == want and stderr holds every fragment (NULL-terminated list). */
static void expect(int rc, int want, const char *what, ...) __attribute__((sentinel));
static void expect(int rc, int want, const char *what, ...) {
    va_list ap;
    int ok = rc == want;
    const char *missing = NULL;
    va_start(ap, what);
    for (const char *frag; (frag = va_arg(ap, const char *)) != NULL;)
        if (!strstr(errbuf, frag) && !missing) missing = frag, ok = 0;
    va_end(ap);
    if (!tap_ok(ok, "%s", what)) {
        tap_diag("rc = %d (want %d)%s%s%s", rc, want, missing ? "; missing '" : "",
                 missing ? missing : "", missing ? "'" : "");
        tap_diag("stderr: %s", errbuf);
    }
}

/* ---- config files ---- */

/* A valid config; tests replace lines by number (1-based). */
static const char *const base_lines[] = {
    "max_duration = \"100ba\";",        /* 1 */
    "global_batch = 8;",                /* 2 */
    "micro_batch = 2;",                 /* 3 */
    "seq_len = 16;",                    /* 4 */
    "model = {",                        /* 5 */
    "  n_layer = 2;",                   /* 6 */
    "  d_model = 32;",                  /* 7 */
    "  n_head = 4;",                    /* 8 */
    "  vocab_size = 100;",              /* 9 */
    "",                                 /* 10: model extra */
    "};",                               /* 11 */
    "optim = {",                        /* 12 */
    "  lr = 1e-3;",                     /* 13 */
    "",                                 /* 14: optim extra */
    "};",                               /* 15 */
    "data = { train = \"d/train\"; };", /* 16 */
    "",                                 /* 17: top-level extra */
};
#define N_BASE ((int)(sizeof base_lines / sizeof *base_lines))

/* Writes tmpdir/name from base_lines with (line, text) replacements, 0-terminated. */
static const char *write_cfg(const char *name, ...) {
    static char path[512];
    const char *lines[N_BASE];
    memcpy(lines, base_lines, sizeof lines);
    va_list ap;
    va_start(ap, name);
    for (int l; (l = va_arg(ap, int)) != 0;) lines[l - 1] = va_arg(ap, const char *);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < N_BASE; i++) fprintf(f, "%s\n", lines[i]);
    fclose(f);
    return path;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    static char bufs[8][1024];
    static int next;
    char *b = bufs[next++ % 8];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, 1024, f, ap);
    va_end(ap);
    return b;
}

/* Field-by-field equality through the key table; names the first differing key. */
static const char *differs(const tsr_config *a, const tsr_config *b) {
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const cfgtab_key *k = &cfgtab_keys[i];
        if (k->type == CFGK_DURATION) {
            tsr_duration x, y;
            memcpy(&x, (const char *)a + k->offset, sizeof x);
            memcpy(&y, (const char *)b + k->offset, sizeof y);
            if (x.value != y.value || x.unit != y.unit) return k->name;
        } else if (k->type == CFGK_STRING) {
            if (strcmp((const char *)a + k->offset, (const char *)b + k->offset) != 0) return k->name;
        } else if (memcmp((const char *)a + k->offset, (const char *)b + k->offset, k->size) != 0) {
            return k->name;
        }
    }
    return NULL;
}

static int same_config(const tsr_config *a, const tsr_config *b) {
    tsr_config x = *a, y = *b;
    memset(x.source, 0, sizeof x.source);
    memset(y.source, 0, sizeof y.source);
    x.max_duration_set = y.max_duration_set = 0; /* where max_duration came from, not a key */
    const char *d = differs(&x, &y);
    if (d) tap_diag("first difference: %s", d);
    /* every byte, padding included: both were zeroed whole, then filled field by field */
    return !d && memcmp(&x, &y, sizeof x) == 0;
}

static int print_and_reload(const tsr_config *in, tsr_config *out, const char *name) {
    const char *path = fmt("%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    config_print(f, in);
    fclose(f);
    int rc = load(out, path, NULL, 0);
    if (rc) tap_diag("reload of %s: %s", path, errbuf);
    return rc;
}

/* ---- shipped configs ---- */

static char root[1024];
static char cfg_names[64][256];
static int n_cfgs;

static void find_configs(void) {
    const char *env = getenv("TSR_ROOT");
    struct stat st;
    snprintf(root, sizeof root, "%s", stat("configs", &st) == 0 ? "." : env ? env : ".");
    DIR *d = opendir(fmt("%s/configs", root));
    for (struct dirent *e; d && (e = readdir(d)) != NULL && n_cfgs < 64;) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".cfg") == 0)
            snprintf(cfg_names[n_cfgs++], sizeof cfg_names[0], "%s", e->d_name);
    }
    if (d) closedir(d);
}

/* ---- tests ---- */

static void test_basics(void) {
    tsr_config c;
    const char *p = write_cfg("base.cfg", 0);
    int rc = load(&c, p, NULL, 0);
    expect(rc, 0, "a minimal config loads, nothing on stderr", NULL);
    if (errbuf[0]) tap_diag("unexpected stderr: %s", errbuf);
    tap_ok(c.seed == 42 && !strcmp(c.run_dir, "runs/default") && c.keep_last == 2 &&
               c.log_interval == 1 && c.threads == 0 && c.device == TSR_DEVICE_CPU &&
               c.peak_flops == 0 && c.eval_samples == 0 && c.eval_interval.value == 0 &&
               c.eval_interval.unit == TSR_DUR_BATCHES && c.save_interval.value == 0 &&
               c.model.vocab_multiple == 128 && c.model.max_seq_len == 0 &&
               c.model.pos == TSR_POS_LEARNED && c.model.bias == 1 && c.model.expansion_ratio == 4 &&
               c.model.gelu == 0 && c.model.init_std == 0.02 && c.optim.beta1 == 0.9 &&
               c.optim.beta2 == 0.95 && c.optim.eps == 1e-8 && c.optim.weight_decay == 0 &&
               c.optim.grad_clip == 1 && c.optim.warmup.value == 0 &&
               c.optim.schedule == TSR_SCHED_COSINE && c.optim.alpha_f == 0.1 &&
               !c.optim.decay_norms_biases && !c.optim.decay_embeddings && c.data.val[0] == 0 &&
               c.data.shuffle == 1 && c.data.verify == 1 && c.sharding == TSR_SHARD_DDP,
           "defaults of every optional key");
    tap_ok(c.max_duration.value == 100 && c.max_duration.unit == TSR_DUR_BATCHES &&
               c.global_batch == 8 && c.micro_batch == 2 && c.seq_len == 16 && c.model.n_layer == 2 &&
               c.model.d_model == 32 && c.model.n_head == 4 && c.model.vocab_size == 100 &&
               c.optim.lr == 1e-3 && !strcmp(c.data.train, "d/train") && !strcmp(c.source, p),
           "values and source from the file");
}

static void test_file_errors(void) {
    tsr_config c;
    const char *p;
    int rc;

    p = fmt("%s/nonexistent.cfg", tmpdir);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "missing file", fmt("%s: cannot read config: No such file or directory", p), NULL);
    rc = load(&c, tmpdir, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "a directory", fmt("%s: cannot read config: Is a directory", tmpdir), NULL);

    p = write_cfg("syntax.cfg", 17, "a = ;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "syntax error with file:line", fmt("%s:17: syntax error", p), NULL);
    p = write_cfg("dup.cfg", 17, "seed = 1; seed = 2;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "duplicate key is a syntax error with libconfig's text",
           fmt("%s:17: syntax error: duplicate setting name", p), NULL);

    p = write_cfg("mixdup.cfg", 16, "data = { mix = ( { name = \"web\"; path = \"a\"; proportion = 0.5; },", 17,
                  "  { name = \"web\"; path = \"b\"; proportion = 0.5; } ); };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "data.mix: a stream name given twice: file:line of the second, the first's index",
           fmt("%s:17: data.mix[1].name: 'web' is the name of data.mix[0] already: expected a name of its own", p),
           NULL);

    p = write_cfg("unk1.cfg", 10, "  n_layers = 3;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "unknown key in a group, with suggestion",
           fmt("%s:10: unknown key 'model.n_layers' (did you mean 'model.n_layer'?)", p), NULL);
    p = write_cfg("unk2.cfg", 17, "lr = 1.0;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "a grouped key at top level suggests its group",
           fmt("%s:17: unknown key 'lr' (did you mean 'optim.lr'?)", p), NULL);
    p = write_cfg("unk3.cfg", 17, "modle = { x = 1; };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "misspelt group", "unknown key 'modle' (did you mean 'model'?)", NULL);
    p = write_cfg("unk4.cfg", 17, "zzzzzzzzzzzz = 1;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "unknown key far from every key points to the docs",
           fmt("%s:17: unknown key 'zzzzzzzzzzzz' (the keys are listed in docs/config.md)", p), NULL);
    p = write_cfg("unk5.cfg", 10, "  attn = { x = 1; };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "nested group inside a group is unknown", "unknown key 'model.attn'", NULL);

    p = write_cfg("type1.cfg", 6, "  n_layer = \"twelve\";", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "string for an integer",
           fmt("%s:6: model.n_layer = \"twelve\": expected an integer", p), NULL);
    p = write_cfg("type2.cfg", 2, "global_batch = 8.0;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "float for an integer", fmt("%s:2: global_batch = 8.0: expected an integer", p), NULL);
    tap_ok(!strstr(errbuf, "missing required"), "a key with a bad value is not also reported missing");
    p = write_cfg("type3.cfg", 17, "seed = [1, 2];", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "array for an integer", fmt("%s:17: seed = [ ... ]: expected an integer", p), NULL);
    p = write_cfg("type4.cfg", 10, "  bias = 1;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "integer for a boolean", fmt("%s:10: model.bias = 1: expected true or false", p), NULL);
    p = write_cfg("type5.cfg", 16, "data = { train = 5; };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "integer for a string", fmt("%s:16: data.train = 5: expected a string", p), NULL);
    p = write_cfg("type6.cfg", 17, "parallel = 3;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "scalar for a group", fmt("%s:17: parallel = 3: expected a group", p), NULL);
    p = write_cfg("type7.cfg", 16, "data = { train = \"\"; };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "empty required string", "data.train = \"\": must not be empty", NULL);

    p = write_cfg("range1.cfg", 14, "  beta1 = 1.5;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "float out of range",
           fmt("%s:14: optim.beta1 = 1.5: out of range, accepted [0, 1)", p), NULL);
    p = write_cfg("range2.cfg", 4, "seq_len = 0;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "integer out of range",
           fmt("%s:4: seq_len = 0: out of range, accepted [1, 1048576]", p), NULL);
    p = write_cfg("range3.cfg", 13, "  lr = 0.0;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "open lower bound", fmt("%s:13: optim.lr = 0.0: out of range, accepted > 0", p), NULL);
    p = write_cfg("range4.cfg", 17, "keep_last = 1;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "keep_last >= 2", "keep_last = 1: out of range, accepted >= 2", NULL);

    p = write_cfg("enum.cfg", 10, "  pos = \"sinusoidal\";", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "bad enum value", fmt("%s:10: model.pos = \"sinusoidal\": accepted: learned | alibi | rope", p), NULL);
    p = write_cfg("dur1.cfg", 1, "max_duration = \"10 steps\";", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "bad duration",
           fmt("%s:1: max_duration = \"10 steps\": expected a duration like 100ba, 2e9tok or 1ep", p), NULL);
    p = write_cfg("dur2.cfg", 1, "max_duration = 100;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "bare number for a duration",
           fmt("%s:1: max_duration = 100: expected a duration like 100ba", p), NULL);

    p = write_cfg("req1.cfg", 2, "", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "missing required key",
           fmt("%s: missing required key 'global_batch' (integer, e.g. global_batch = 512;)", p), NULL);
    p = write_cfg("req2.cfg", 9, "", 16, "", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "missing required keys in groups, all reported",
           "missing required key 'model.vocab_size' (integer, e.g. model = { vocab_size = 50257; };)",
           "missing required key 'data.train' (string, e.g. data = { train = \"data/train\"; };)", NULL);
    p = write_cfg("multi.cfg", 6, "  n_layer = \"x\";", 14, "  beta2 = 2.0;", 17, "foo = 1;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "every error of a file is reported", fmt("%s:6: model.n_layer", p),
           fmt("%s:14: optim.beta2", p), fmt("%s:17: unknown key 'foo'", p), NULL);

    FILE *inc = fopen(fmt("%s/inc.cfg", tmpdir), "w");
    fprintf(inc, "seed = 5;\nthreads = -1;\n");
    fclose(inc);
    p = write_cfg("include.cfg", 17, "@include \"inc.cfg\"", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "@include resolves next to the config; errors name the included file",
           "inc.cfg:2: threads = -1: out of range, accepted >= 0", NULL);
    p = write_cfg("wrap.cfg", 17, "seed = 3000000000;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "a 64-bit literal without L (libconfig 1.5 wraps it) is refused",
           fmt("%s:17: seed = 3000000000: libconfig reads an integer beyond 32 bits only with an L suffix", p),
           "write 3000000000L", NULL);
    p = write_cfg("wrap2.cfg", 2, "global_batch =\n   8000000000;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "... also with the value on the next line", "global_batch = 8000000000:", NULL);
    p = write_cfg("i64.cfg", 17, "seed = 3000000000L; eval_samples = 1000000000L;", 0);
    rc = load(&c, p, NULL, 0);
    tap_ok(rc == 0 && c.seed == 3000000000LL && c.eval_samples == 1000000000LL, "64-bit integers with L");
    p = write_cfg("intfloat.cfg", 13, "  lr = 1;", 17, "peak_flops = 989.4e12;", 0);
    rc = load(&c, p, NULL, 0);
    tap_ok(rc == 0 && c.optim.lr == 1.0 && c.peak_flops == 989.4e12, "an integer for a float key");
}

static void test_cross(void) {
    tsr_config c;
    const char *p;
    int rc;
    p = write_cfg("x1.cfg", 8, "  n_head = 5;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "d_model % n_head", fmt("%s:7: model.d_model = 32 is not divisible by model.n_head = 5", p), NULL);
    p = write_cfg("x2.cfg", 8, "  n_head = 64;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "n_head > d_model", "model.n_head = 64 is larger than model.d_model = 32",
           "d_model / n_head must be >= 1", NULL);
    p = write_cfg("x3.cfg", 3, "micro_batch = 3;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "global_batch % micro_batch",
           fmt("%s:2: global_batch = 8 is not divisible by micro_batch = 3", p), NULL);
    const char *gb9[] = {"global_batch=9"};
    rc = load(&c, write_cfg("x3b.cfg", 0), gb9, 1);
    expect(rc, TSR_EXIT_USAGE, "a cross-key error names the --set it came from",
           "--set global_batch=9: global_batch = 9 is not divisible by micro_batch = 2", NULL);
    p = write_cfg("x4.cfg", 10, "  max_seq_len = 8;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "learned positions need max_seq_len >= seq_len",
           fmt("%s:10: model.max_seq_len = 8 is smaller than seq_len = 16", p), NULL);
    p = write_cfg("x5.cfg", 10, "  max_seq_len = 8; pos = \"alibi\";", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, 0, "... but alibi does not", NULL);
    p = write_cfg("x6.cfg", 17, "parallel = { sharding = \"hsdp\"; replica_group = 2; };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, 0, "sharding = hsdp with replica_group = 2 loads", NULL);
    expect(c.sharding == TSR_SHARD_HSDP && c.replica_group == 2 ? 0 : 1, 0,
           "... and sets sharding and replica_group", NULL);
    p = write_cfg("x6b.cfg", 17, "parallel = { sharding = \"hsdp\"; replica_group = -1; };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "replica_group < 0 is refused naming the key",
           fmt("%s:17: parallel.replica_group", p), NULL);
    p = write_cfg("x7.cfg", 8, "  n_head = 1;", 17, "device = \"cuda\";", 0); /* (head size 32) */
    rc = load(&c, p, NULL, 0);
    /* a configuration names its device whatever the build (`tessera eval` reads a GPU run's
     * stored config); the trainer refuses what its build cannot do (tests/gpu/test_cuda_train.sh) */
    expect(rc, 0, "device = cuda loads in any build", NULL);
    expect(c.device == TSR_DEVICE_CUDA ? 0 : 1, 0, "... and sets device", NULL);
    /* DPO's reference (docs/dpo.md): full finetuning loads with auto (the trainer resolves it to
     * precomputed), base needs LoRA, and DPO loads with device = cuda */
    p = write_cfg("x7d.cfg", 17, "objective = \"dpo\";", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, 0, "objective = dpo without LoRA loads (dpo.reference = auto)", NULL);
    expect(c.dpo.reference == TSR_DPO_REF_AUTO ? 0 : 1, 0, "... dpo.reference defaults to auto",
           NULL);
    p = write_cfg("x7e.cfg", 17, "objective = \"dpo\"; dpo = { reference = \"base\"; };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "dpo.reference = base without LoRA is refused naming the key",
           fmt("%s:17: dpo.reference = \"base\" needs LoRA (lora.rank > 0)", p), NULL);
    p = write_cfg("x7f.cfg", 8, "  n_head = 1;", 17, "objective = \"dpo\"; device = \"cuda\"; parallel = { sharding = \"zero3\"; };", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, 0, "objective = dpo with device = cuda under zero3 loads", NULL);
    p = write_cfg("x8.cfg", 10, "  expansion_ratio = 2.3;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "MLP width must be whole",
           "model.expansion_ratio = 2.3 with model.d_model = 32 gives an MLP width of 73.6", NULL);
    p = write_cfg("x9.cfg", 17, "eval_interval = \"10ba\";", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "eval_interval needs data.val",
           "eval_interval = \"10ba\" but there is nothing to evaluate", NULL);
    p = write_cfg("x9b.cfg", 10, "  attn_mask = \"document\"; eot_token = 100;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "document mask: eot_token must be a token id, named with file:line",
           "x9b.cfg:10: model.eot_token = 100 is not a token id of model.vocab_size = 100", NULL);
    p = write_cfg("x9d.cfg", 10, "  activation_checkpointing = \"block\"; "
                  "activation_checkpointing_layers = 3;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "activation_checkpointing_layers beyond n_layer, named with file:line",
           "x9d.cfg:10: model.activation_checkpointing_layers = 3 with model.n_layer = 2", NULL);
    p = write_cfg("x9c.cfg", 17, "eval_interval = \"10ba\"; icl_tasks = ({ label = \"a\"; "
                  "type = \"language_modeling\"; path = \"a.jsonl\"; });", 0);
    rc = load(&c, p, NULL, 0);
    tap_ok(rc == 0, "eval_interval with icl_tasks and no data.val is accepted (rc %d)", rc);
    p = write_cfg("x10.cfg", 9, "  vocab_size = 2147483600;", 10, "  vocab_multiple = 128;", 0);
    rc = load(&c, p, NULL, 0);
    expect(rc, TSR_EXIT_USAGE, "padded vocabulary must fit in an int",
           "model.vocab_size = 2147483600 rounded up to a multiple of model.vocab_multiple = 128", NULL);
}

static void test_set(void) {
    tsr_config c;
    const char *p = write_cfg("set.cfg", 0);
    int rc;
    const char *ok_sets[] = {"model.n_layer=6", "optim.lr=3e-4", "data.train=\"q/t\"", "data.val=v/x",
                             "model.pos=alibi", "model.bias=false", "max_duration=2e9tok",
                             "seed=1000000000000", "optim.schedule=\"linear\"", "data.shuffle=TRUE",
                             "eval_interval=\"0.5ep\"", "run_dir=with space/and=equals",
                             "optim.warmup=10ba", "seed=7", "peak_flops=1e15"};
    rc = load(&c, p, ok_sets, (int)(sizeof ok_sets / sizeof *ok_sets));
    tap_ok(rc == 0 && c.model.n_layer == 6 && c.optim.lr == 3e-4 && !strcmp(c.data.train, "q/t") &&
               !strcmp(c.data.val, "v/x") && c.model.pos == TSR_POS_ALIBI && c.model.bias == 0 &&
               c.max_duration.value == 2e9 && c.max_duration.unit == TSR_DUR_TOKENS && c.seed == 7 &&
               c.optim.schedule == TSR_SCHED_LINEAR && c.data.shuffle == 1 &&
               c.eval_interval.value == 0.5 && c.eval_interval.unit == TSR_DUR_EPOCHS &&
               !strcmp(c.run_dir, "with space/and=equals") && c.optim.warmup.value == 10 &&
               c.peak_flops == 1e15,
           "--set of every type, nested, bare and quoted; later wins");
    if (rc) tap_diag("stderr: %s", errbuf);

    const char *s1[] = {"model.n_layer=x"};
    rc = load(&c, p, s1, 1);
    expect(rc, TSR_EXIT_USAGE, "--set wrong type", "--set model.n_layer=x: expected an integer", NULL);
    const char *s2[] = {"nokey=1"};
    rc = load(&c, p, s2, 1);
    expect(rc, TSR_EXIT_USAGE, "--set unknown key", "--set nokey=1: unknown key 'nokey'", NULL);
    const char *s3[] = {"foo"};
    rc = load(&c, p, s3, 1);
    expect(rc, TSR_EXIT_USAGE, "--set without =", "--set foo (expected key=value)", NULL);
    const char *s4[] = {"optim.beta1=1"};
    rc = load(&c, p, s4, 1);
    expect(rc, TSR_EXIT_USAGE, "--set out of range", "--set optim.beta1=1: out of range, accepted [0, 1)", NULL);
    const char *s5[] = {"model.gelu=fast"};
    rc = load(&c, p, s5, 1);
    expect(rc, TSR_EXIT_USAGE, "--set bad enum", "--set model.gelu=fast: accepted: tanh | exact", NULL);
    const char *s6[] = {"model=1"};
    rc = load(&c, p, s6, 1);
    expect(rc, TSR_EXIT_USAGE, "--set of a group", "--set model=1: 'model' is a group", NULL);
    const char *s7[] = {"model.nlayer=3"};
    rc = load(&c, p, s7, 1);
    expect(rc, TSR_EXIT_USAGE, "--set suggests", "unknown key 'model.nlayer' (did you mean 'model.n_layer'?)", NULL);
    const char *s8[] = {"global_batch=8.0", "data.shuffle=yes", "max_duration=10 steps"};
    rc = load(&c, p, s8, 3);
    expect(rc, TSR_EXIT_USAGE, "--set errors: float for int, bad boolean, bad duration",
           "--set global_batch=8.0: expected an integer", "--set data.shuffle=yes: expected true or false",
           "--set max_duration=10 steps: expected a duration like 100ba, 2e9tok or 1ep", NULL);
    const char *s9[] = {"data.train=\"a\\\"b\\\\c\""};
    rc = load(&c, p, s9, 1);
    tap_ok(rc == 0 && !strcmp(c.data.train, "a\"b\\c"), "--set quoted string with escapes");

    p = write_cfg("set_req.cfg", 2, "", 0);
    const char *s10[] = {"global_batch=8"};
    rc = load(&c, p, s10, 1);
    tap_ok(rc == 0 && c.global_batch == 8, "--set supplies a required key");
    const char *all[] = {"max_duration=1ep", "global_batch=4", "micro_batch=4", "seq_len=8",
                         "model.n_layer=1", "model.d_model=8", "model.n_head=2", "model.vocab_size=10",
                         "optim.lr=0.1", "data.train=x"};
    rc = load(&c, NULL, all, (int)(sizeof all / sizeof *all));
    tap_ok(rc == 0 && c.source[0] == '\0' && c.model.d_model == 8, "no file: defaults and --set only");
    rc = load(&c, NULL, all + 1, (int)(sizeof all / sizeof *all) - 1);
    expect(rc, TSR_EXIT_USAGE, "no file, missing key names the --set to add",
           "missing required key 'max_duration' (duration, e.g. --set max_duration=\"10e9tok\")", NULL);
    const char *grpo_cp[] = {"max_duration=1ep", "global_batch=4", "micro_batch=2", "seq_len=8",
                             "model.n_layer=1", "model.d_model=8", "model.n_head=2",
                             "model.vocab_size=10", "optim.lr=0.1", "data.train=x",
                             "objective=grpo", "parallel.context=2"};
    rc = load(&c, NULL, grpo_cp, (int)(sizeof grpo_cp / sizeof *grpo_cp));
    expect(rc, TSR_EXIT_USAGE, "objective = grpo with parallel.context > 1: refused, named",
           "objective = \"grpo\" with context parallelism is not supported yet", NULL);
}

/* the Llama/Qwen architecture keys against each other (config_model_dims) */
static void test_arch(void) {
    tsr_config c;
    const char *p = write_cfg("arch.cfg", 0);
    static const struct { const char *sets[3], *want; } bad[] = {
        {{"model.n_kv_head=3"}, "model.n_kv_head = 3 with model.n_head = 4: it must divide n_head"},
        {{"model.pos=rope", "model.head_dim=7"},
         "--set model.head_dim=7: with model.pos = \"rope\" the head size must be even"},
        {{"model.norm_eps=1e-6"}, "LayerNorm's eps is fixed at 1e-5"},
        {{"model.intermediate_size=2000000000"},
         "model.intermediate_size = 2000000000 is larger than 1073741823"},
        {{"model.pos=rope", "model.rope_scaling=llama3", "model.rope_high_freq_factor=1"},
         "model.rope_high_freq_factor = 1 is not above model.rope_low_freq_factor = 1"},
        {{"model.moe_experts=1"}, "model.moe_experts = 1: a mixture needs at least 2 experts"},
        {{"model.moe_experts=4", "model.moe_top_k=5"},
         "model.moe_top_k = 5 is more than model.moe_experts = 4"},
        {{"model.moe_shared_size=16"},
         "model.moe_shared_size is set, but model.moe_experts = 0 (a dense model)"},
        {{"model.moe_experts=4", "model.moe_every=3"},
         "model.moe_every = 3 with model.n_layer = 2 leaves no MoE layer"},
        /* the GPU's attention kernels' head sizes (kernels/cuda/cuda_shapes.h), at load */
        {{"device=cuda"},
         "arch.cfg:8: device = \"cuda\": head size model.d_model / model.n_head = 32 / 4 = 8 has "
         "no attention kernel on the GPU: it must be 32, 64, 128 or 256"},
        {{"device=cuda", "model.n_head=1", "model.head_dim=48"},
         "--set model.head_dim=48: device = \"cuda\": head size model.head_dim = 48 has no "
         "attention kernel"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int n = 0;
        while (n < 3 && bad[i].sets[n]) n++;
        int rc = load(&c, p, bad[i].sets, n);
        expect(rc, TSR_EXIT_USAGE, fmt("architecture keys refused: %s", bad[i].sets[n - 1]),
               bad[i].want, NULL);
    }
    const char *ok[] = {"model.n_head=5",   "model.head_dim=8",   "model.n_kv_head=1",
                        "model.pos=rope",   "model.norm=rmsnorm", "model.norm_eps=1e-6",
                        "model.mlp=swiglu", "model.intermediate_size=40"};
    int rc = load(&c, p, ok, (int)(sizeof ok / sizeof *ok));
    tsr_model_dims d = {0};
    const char *key;
    char why[400];
    int drc = rc == 0 ? config_model_dims(&c.model, &d, &key, why, sizeof why) : -1;
    tap_ok(rc == 0 && drc == 0 && d.NH == 5 && d.KVH == 1 && d.hs == 8 && d.F == 40,
           "head_dim 8 with d_model 32 and 5 heads (not divisible: fine with head_dim), MQA, "
           "intermediate_size: loads; dims NH %d KVH %d hs %d F %d", d.NH, d.KVH, d.hs, d.F);
    const char *gpu[] = {"device=cuda", "model.n_head=1"};
    rc = load(&c, p, gpu, 2);
    tap_ok(rc == 0 && c.device == TSR_DEVICE_CUDA,
           "device = cuda with head size 32 (d_model 32, one head) loads");
    const char *moe[] = {"model.n_layer=4", "model.moe_experts=8", "model.moe_top_k=2",
                         "model.moe_every=2", "model.moe_shared_size=16"};
    rc = load(&c, p, moe, (int)(sizeof moe / sizeof *moe));
    drc = rc == 0 ? config_model_dims(&c.model, &d, &key, why, sizeof why) : -1;
    tap_ok(rc == 0 && drc == 0 && d.E == 8 && d.K == 2 && d.FE == d.F && d.S == 16 && d.LM == 2,
           "MoE: 8 experts top 2 on every second of 4 layers, the expert width defaulting to the "
           "MLP's, a shared expert: E %d K %d FE %d (F %d) S %d LM %d", d.E, d.K, d.FE, d.F, d.S,
           d.LM);
}

/* parallel.context (docs/parallelism.md): the data x context mesh's checks */
static void test_world_context(tsr_config *c) {
    c->global_batch = 4, c->micro_batch = 2, c->seq_len = 32, c->context = 4;
    int saved = capture_begin();
    int ok = config_check_world(c, 4) == 0 && config_check_world(c, 8) == 0;
    capture_end(saved);
    tap_ok(ok && errbuf[0] == 0, "parallel.context 4, seq_len 32: 4 ranks (1 data rank) and 8 "
                                 "(2 data ranks) fit");
    saved = capture_begin();
    int rc = config_check_world(c, 6);
    capture_end(saved);
    expect(rc, TSR_EXIT_USAGE, "parallel.context not dividing the ranks",
           "parallel.context = 4 does not divide the 6 ranks", NULL);
    c->seq_len = 36;
    saved = capture_begin();
    rc = config_check_world(c, 4);
    capture_end(saved);
    expect(rc, TSR_EXIT_USAGE, "seq_len not divisible by 2 x parallel.context, nearest values named",
           "seq_len = 36 is not divisible by 2 x parallel.context = 8",
           "the nearest valid values are 32 and 40", NULL);
    c->seq_len = 32, c->global_batch = 5;
    saved = capture_begin();
    rc = config_check_world(c, 8);
    capture_end(saved);
    expect(rc, TSR_EXIT_USAGE, "global_batch split over the data ranks, not the ranks",
           "global_batch = 5 is not divisible by the 2 data ranks (8 ranks / parallel.context = 4)",
           NULL);
    c->context = 1;
}

static void test_world(void) {
    tsr_config c;
    memset(&c, 0, sizeof c);
    c.global_batch = 8, c.micro_batch = 2;
    int saved = capture_begin();
    int r1 = config_check_world(&c, 1), r2 = config_check_world(&c, 2), r4 = config_check_world(&c, 4);
    capture_end(saved);
    tap_ok(r1 == 0 && r2 == 0 && r4 == 0 && errbuf[0] == 0, "global_batch 8, micro 2: 1, 2, 4 ranks fit");
    c.global_batch = 6;
    saved = capture_begin();
    int rc = config_check_world(&c, 4);
    capture_end(saved);
    expect(rc, TSR_EXIT_USAGE, "global_batch not divisible by the ranks",
           "global_batch = 6 is not divisible by the 4 ranks: choose a global_batch that is a "
           "multiple of 4 (and of 4 x micro_batch)", NULL);
    saved = capture_begin();
    rc = config_check_world(&c, 2);
    capture_end(saved);
    expect(rc, TSR_EXIT_USAGE, "per-rank batch not divisible by micro_batch",
           "per-rank batch 3 (global_batch 6 / 2 ranks) is not divisible by micro_batch = 2", NULL);
    saved = capture_begin();
    rc = config_check_world(&c, 0);
    capture_end(saved);
    expect(rc, TSR_EXIT_USAGE, "world size 0", "world size 0", NULL);
    test_world_context(&c);
}

static void test_durations(void) {
    tsr_duration d;
    struct { const char *s; double v; tsr_dur_unit u; } good[] = {
        {"100ba", 100, TSR_DUR_BATCHES}, {"2e9tok", 2e9, TSR_DUR_TOKENS}, {"0.5ep", 0.5, TSR_DUR_EPOCHS},
        {"1e3ba", 1000, TSR_DUR_BATCHES}, {"0ba", 0, TSR_DUR_BATCHES}, {".5ep", 0.5, TSR_DUR_EPOCHS},
        {"10e9tok", 1e10, TSR_DUR_TOKENS}, {"1ep", 1, TSR_DUR_EPOCHS}};
    int ok = 1;
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (duration_parse(good[i].s, &d) != 0 || d.value != good[i].v || d.unit != good[i].u)
            ok = 0, tap_diag("parse %s", good[i].s);
    tap_ok(ok, "duration_parse accepts ba, tok, ep with decimal and exponent");
    const char *bad[] = {"", "ba", "10", "10 ba", " 10ba", "10ba ", "-1ba", "+5ba", "1.5ba", "1e-3ba",
                         "10steps", "0x10ba", "infba", "nanep", "1e999tok", "10BA", "e5tok", "1e5",
                         "1..2ep", "5 tok"};
    ok = 1;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (duration_parse(bad[i], &d) == 0) ok = 0, tap_diag("accepted '%s'", bad[i]);
    tap_ok(ok, "duration_parse rejects signs, spaces, fractions of a batch, hex, inf, unknown units");

    struct { tsr_duration d; const char *s; } out[] = {
        {{100, TSR_DUR_BATCHES}, "100ba"}, {{2e9, TSR_DUR_TOKENS}, "2e9tok"}, {{0.5, TSR_DUR_EPOCHS}, "0.5ep"},
        {{4800, TSR_DUR_TOKENS}, "4800tok"}, {{1e10, TSR_DUR_TOKENS}, "1e10tok"}, {{0, TSR_DUR_BATCHES}, "0ba"},
        {{1000000, TSR_DUR_BATCHES}, "1000000ba"}, {{0.1, TSR_DUR_EPOCHS}, "0.1ep"}};
    ok = 1;
    char buf[64];
    for (size_t i = 0; i < sizeof out / sizeof *out; i++) {
        duration_format(buf, sizeof buf, out[i].d);
        if (strcmp(buf, out[i].s) != 0) ok = 0, tap_diag("format gave %s, want %s", buf, out[i].s);
    }
    tap_ok(ok, "duration_format");
    double vals[] = {0, 1, 3, 1e-7, 0.1, 1.0 / 3, 2.5e9, 123456789.123, 1e300};
    ok = 1;
    for (int u = 0; u < TSR_DUR_COUNT; u++)
        for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
            tsr_duration in = {vals[i], (tsr_dur_unit)u};
            if (u == TSR_DUR_BATCHES && (vals[i] != (double)(int64_t)vals[i] || vals[i] > 1e15)) continue;
            duration_format(buf, sizeof buf, in);
            if (duration_parse(buf, &d) != 0 || d.value != in.value || d.unit != in.unit)
                ok = 0, tap_diag("round trip of %.17g unit %d via '%s'", vals[i], u, buf);
        }
    tap_ok(ok, "duration_parse(duration_format(d)) == d");

    struct { tsr_duration d; int64_t gb, T; uint64_t spe; int64_t want; } st[] = {
        {{100, TSR_DUR_BATCHES}, 512, 1024, 0, 100},
        {{2e9, TSR_DUR_TOKENS}, 512, 1024, 0, 3815},            /* 3814.7 rounds up */
        {{5242880, TSR_DUR_TOKENS}, 512, 1024, 0, 10},          /* exactly 10 steps */
        {{5242881, TSR_DUR_TOKENS}, 512, 1024, 0, 11},
        {{1, TSR_DUR_EPOCHS}, 16, 128, 1000, 63},               /* 62.5 rounds up */
        {{0.5, TSR_DUR_EPOCHS}, 10, 128, 1000, 50},
        {{0.1, TSR_DUR_EPOCHS}, 100, 128, 1000, 1},             /* 0.1 x 1000 is 100, not 100.00..01 */
        {{0.3, TSR_DUR_EPOCHS}, 1, 128, 10, 3},                 /* 0.3 x 10 = 3.0000000000000004 */
        {{0, TSR_DUR_BATCHES}, 8, 8, 8, 0}, {{0, TSR_DUR_TOKENS}, 8, 8, 8, 0},
        {{2, TSR_DUR_EPOCHS}, 7, 8, 0, 0},
        {{1, TSR_DUR_BATCHES}, 0, 8, 8, -1},                    /* invalid global_batch */
    };
    ok = 1;
    for (size_t i = 0; i < sizeof st / sizeof *st; i++) {
        int64_t got = duration_to_steps(st[i].d, st[i].gb, st[i].T, st[i].spe);
        if (got != st[i].want) ok = 0, tap_diag("case %zu: %lld steps, want %lld", i, (long long)got, (long long)st[i].want);
    }
    tap_ok(ok, "duration_to_steps rounds up, exact multiples stay exact");
}

static void test_round_trip(void) {
    tsr_config a, b;
    const char *p = write_cfg("rt.cfg", 0);
    const char *sets[] = {"run_dir=runs/q\"uo\\te\nnew\tline \x01 caf\xc3\xa9", "seed=9000000000",
                          "max_duration=0.25ep", "eval_interval=3e9tok", "save_interval=7ba",
                          "save_final=false", "eval_samples=5", "keep_last=5", "log_interval=3",
                          "threads=2",
                          "peak_flops=989.4e12", "model.vocab_multiple=64", "model.max_seq_len=32",
                          "model.pos=alibi", "model.bias=false", "model.expansion_ratio=2.5",
                          "model.gelu=exact", "model.init_std=0.1", "optim.lr=0.0006",
                          "optim.beta1=0.8", "optim.beta2=0.999", "optim.eps=1e-10",
                          "optim.weight_decay=0.1", "optim.grad_clip=0", "optim.warmup=1e6tok",
                          "optim.schedule=constant", "optim.alpha_f=0.3333333333333333",
                          "optim.decay_norms_biases=true", "optim.decay_embeddings=true",
                          "optim.name=muon", "optim.muon.lr=0.02", "optim.muon.momentum=0.9",
                          "optim.muon.nesterov=false", "optim.muon.ns_steps=3",
                          "optim.muon.weight_decay=0.05", "optim.muon.scale=shape",
                          "optim.muon.rms=0.3",
                          "data.val=v", "data.shuffle=false", "data.verify=false"};
    int rc = load(&a, p, sets, (int)(sizeof sets / sizeof *sets));
    if (rc) tap_diag("stderr: %s", errbuf);
    rc = rc ? rc : print_and_reload(&a, &b, "rt_printed.cfg");
    tap_ok(rc == 0 && same_config(&a, &b), "config_print re-loads to an identical config (every key non-default)");
    rc = load(&a, p, NULL, 0);
    rc = rc ? rc : print_and_reload(&a, &b, "rt_printed2.cfg");
    tap_ok(rc == 0 && same_config(&a, &b), "... and with defaults");

    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    config_print(m, &a); /* adamw: the optim.muon group is left out (its keys need muon) */
    fclose(m);
    int adamw_clean = strstr(text, "muon") == NULL;
    free(text);
    tap_ok(adamw_clean, "config_print of an AdamW run leaves the optim.muon group out");
    a.optim.name = TSR_OPTIM_MUON;
    m = open_memstream(&text, &len);
    config_print(m, &a);
    fclose(m);
    int ok = strncmp(text, fmt("# tessera effective config; source: %s\n", p), strlen(p) + 36) == 0;
    ok = ok && strstr(text, "\n  muon = {\n") && strstr(text, "\n  };\n};\n");
    ok = ok && strstr(text, "\nmodel = {\n") && strstr(text, "\noptim = {\n") &&
         strstr(text, "\ndata = {\n") && strstr(text, "\nparallel = {\n") &&
         strstr(text, "  n_layer = 2;\n") && strstr(text, "max_duration = \"100ba\";\n");
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const char *dot = strchr(cfgtab_keys[i].name, '.'), *sub = dot ? strchr(dot + 1, '.') : NULL;
        const char *want = sub ? fmt("\n    %s = ", sub + 1)
                               : fmt("%s%s = ", dot ? "  " : "\n", dot ? dot + 1 : cfgtab_keys[i].name);
        if (!strstr(text, want)) ok = 0, tap_diag("config_print lacks %s", cfgtab_keys[i].name);
    }
    tap_ok(ok, "config_print: source comment, groups and the optim.muon subgroup, every key");
    if (!ok) tap_diag("%s", text);
    free(text);

    const char *wp = fmt("%s/written.cfg", tmpdir);
    int saved = capture_begin();
    rc = config_save(wp, &a);
    capture_end(saved);
    struct stat st;
    int tmp_left = stat(fmt("%s.tmp", wp), &st) == 0;
    rc = rc ? rc : load(&b, wp, NULL, 0);
    tap_ok(rc == 0 && !tmp_left && same_config(&a, &b), "config_save writes a loadable file, no .tmp left");
    saved = capture_begin();
    rc = config_save(fmt("%s/no/such/dir/x.cfg", tmpdir), &a);
    capture_end(saved);
    expect(rc, TSR_EXIT_DATA, "config_save into a missing directory", "cannot write config", NULL);
}

/* a shipped recipe's transformer parameters (no embeddings), and 0 when its batch fits 1, 2 and 4
 * ranks */
static long long blocks_params(const tsr_config *c) {
    long long L = c->model.n_layer, C = c->model.d_model;
    return L * (12 * C * C + 13 * C) + 2 * C;
}
static int fits_1_2_4(const tsr_config *c) {
    int saved = capture_begin();
    int w = config_check_world(c, 1) | config_check_world(c, 2) | config_check_world(c, 4);
    capture_end(saved);
    return w;
}

static void test_shipped(void) {
    for (int i = 0; i < n_cfgs; i++) {
        tsr_config c;
        const char *p = fmt("%s/configs/%s", root, cfg_names[i]);
        int rc = load(&c, p, NULL, 0);
        expect(rc, 0, fmt("configs/%s loads", cfg_names[i]), NULL);
        long long params = blocks_params(&c), V = c.model.vocab_size;
        if (strcmp(cfg_names[i], "tiny.cfg") == 0)
            tap_ok(rc == 0 && params >= 1000000 && params <= 5000000 && fits_1_2_4(&c) == 0 &&
                       c.model.pos == TSR_POS_LEARNED && !strcmp(c.data.train, "data/brown/train") && V == 50257,
                   "tiny.cfg: %lld non-embedding parameters (1M-5M), fits 1, 2 and 4 ranks, "
                   "Brown corpus with GPT-2's vocabulary", params);
        /* make demo's: Brown with the 8192-token BPE the Makefile learns from it (BROWN_BPE_VOCAB) */
        if (strcmp(cfg_names[i], "demo.cfg") == 0)
            tap_ok(rc == 0 && params >= 100000 && params <= 1000000 && fits_1_2_4(&c) == 0 &&
                       !strcmp(c.data.train, "data/brown-bpe/train") &&
                       !strcmp(c.data.tokenizer, "auto") && V == 8192 && c.sample.tokens > 0,
                   "demo.cfg: %lld non-embedding parameters (100k-1M), fits 1, 2 and 4 ranks, "
                   "Brown corpus with its own 8192-token BPE, a sample at the end", params);
    }
}

static void test_table_and_docs(void) {
    int ok = 1;
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const cfgtab_key *k = &cfgtab_keys[i];
        if (!k->doc || !k->doc[0] || (!k->def && !k->example) || (k->def && k->example))
            ok = 0, tap_diag("%s: doc, or exactly one of default and example, missing", k->name);
        if (k->type == CFGK_ENUM && k->n_names < 2) ok = 0, tap_diag("%s: enum without names", k->name);
        for (int j = 0; j < i; j++)
            if (!strcmp(cfgtab_keys[j].name, k->name)) ok = 0, tap_diag("%s twice", k->name);
    }
    tap_ok(ok && cfgtab_n_keys == 209, "key table: %d keys, each documented, unique, default xor example",
           cfgtab_n_keys);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    config_doc_markdown(m);
    fclose(m);
    ok = 1;
    for (int i = 0; i < cfgtab_n_keys; i++)
        if (!strstr(text, fmt("| `%s` |", cfgtab_keys[i].name))) ok = 0, tap_diag("docs lack %s", cfgtab_keys[i].name);
    tap_ok(ok && strstr(text, "## Durations") && strstr(text, "## Checks across keys"),
           "config_doc_markdown: a row per key, durations and cross-key checks");
    free(text);
}

#define N_FIXED 109

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tsr_test_config_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(errpath, sizeof errpath, "%s/stderr.txt", tmpdir);
    find_configs();
    tap_plan(N_FIXED + n_cfgs);
    tap_ok(n_cfgs >= 11, "found %d configs in %s/configs", n_cfgs, root);
    test_basics();
    test_file_errors();
    test_cross();
    test_set();
    test_arch();
    test_world();
    test_durations();
    test_round_trip();
    test_shipped();
    test_table_and_docs();
    if (system(fmt("rm -rf '%s'", tmpdir)) != 0) tap_diag("could not remove %s", tmpdir);
    return tap_done();
}
