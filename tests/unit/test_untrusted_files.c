/* test_untrusted_files.c — files a user hands tessera that lie or are not files (issue 49): each
 * is refused with a message that names the file and quotes the value as given, in bounded time,
 * never waited on.
 *
 *   PEFT adapter directories (hf_read_adapter, src/hf/hf_peft.c), written by hf_export_adapter for
 *   a tiny Llama with r 2, alpha 4 on q_proj and v_proj, then changed: a NaN and an infinity in
 *   adapter_model.safetensors (exit 2, naming the tensor and the element); rank_pattern and
 *   alpha_pattern entries that differ from r and lora_alpha (exit 1, naming the module) and ones
 *   equal to them (read); r as a string, r = 2.0000000001 and r = -1 (exit 2, quoted as written);
 *   another r (exit 1, both named).
 *   config.json (hf_config_check) with vocab_size = -5: exit 2 saying no model has that, never
 *   suggesting --set model.vocab_size=-5; hidden_size as a string, quoted.
 *   A sharded index whose weight_map names 100,000 tensors of a shard holding them, the last one
 *   missing: refused naming it, in a child limited to 10 s of CPU (the checks were quadratic:
 *   about 30 s of CPU; now well under one).
 *   A FIFO or a directory in place of model.safetensors and of a dataset's shard or index.tsv:
 *   refused at once naming what it is, in a child that an alarm would stop after 20 s (open() of a
 *   FIFO blocked for ever; a directory gave "too short").
 *   Files one byte over their bound (sparse: refused by their size, never read): config.json
 *   (HF_CONFIG_MAX), tokenizer.json (HF_TOKJSON_MAX), tokenizer_config.json (CHAT_CONFIG_MAX),
 *   generation_config.json (GEN_CONFIG_MAX), encoder.json and vocab.bpe (GPT2_FILE_MAX): exit 2
 *   naming the file, its size and the bound (they were read whole, however large); a file at its
 *   bound is read; fs_read_all with no bound stops with exit 3 (0 meant unbounded).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chat/chat_config.h"
#include "chat/gen_chat.h"
#include "common.h"
#include "config/config_table.h"
#include "fsutil.h"
#include "data/data.h"
#include "hf/hf.h"
#include "hf/hf_internal.h"
#include "fuzz/fuzz_llama.h"
#include "model/model.h"
#include "model/model_lora.h"
#include "ops.h"
#include "tap.h"
#include "testfs.h"
#include "tokenizer/hf_tok.h"
#include "tokenizer/tokenizer.h"

static char g_tmp[256];

/* the fuzz harnesses' tiny Llama (tests/fuzz/fuzz_llama.h), as fuzz_peft.c adapts it: rank 2, alpha 4 on q, v */
static void tiny_model(tsr_model *m, tsr_config *cfg) {
    fuzz_tiny_llama(cfg);
    cfg->lora.rank = 2;
    cfg->lora.alpha = 4;
    snprintf(cfg->lora.targets, sizeof cfg->lora.targets, "q,v");
    model_init(m, &cfg->model, 16, &tsr_cpu_ops);
    model_alloc_params(m);
}

/* ---- PEFT adapters ---- */

typedef struct peft_fix {
    tsr_config cfg;
    tsr_model m;
    tsr_lora lo;
    char dir[512], config[512], weights[512];
    char *config_text; /* as hf_export_adapter wrote it */
} peft_fix;

static int peft_setup(peft_fix *p) {
    tiny_model(&p->m, &p->cfg);
    lora_init(&p->lo, &p->m, 2, 4.0, 0.0, (1u << TSR_LORA_Q) | (1u << TSR_LORA_V));
    for (size_t i = 0; i < p->lo.n; i++) p->lo.w[i] = (float)i / 64.0f - 0.5f;
    pjoin(p->dir, g_tmp, "peft");
    pjoin(p->config, p->dir, "adapter_config.json");
    pjoin(p->weights, p->dir, "adapter_model.safetensors");
    hf_export_opts o = {.dtype = ST_F32};
    int q = fd_redirect(1, "/dev/null"); /* the exporters say what they wrote: not TAP */
    int rc = hf_export_adapter(&p->m, &p->cfg, &p->lo, p->dir, &o);
    fd_restore(1, q);
    p->config_text = slurp(p->config, NULL);
    return rc == 0 && p->config_text;
}

/* adapter_config.json as written, with `from` replaced by `to` */
static void peft_config_edit(const peft_fix *p, const char *from, const char *to) {
    const char *at = strstr(p->config_text, from);
    if (!at) {
        fprintf(stderr, "test_untrusted_files: no '%s' in adapter_config.json\n", from);
        exit(1);
    }
    size_t n = strlen(p->config_text) + strlen(to) + 1;
    char *t = malloc(n);
    snprintf(t, n, "%.*s%s%s", (int)(at - p->config_text), p->config_text, to, at + strlen(from));
    write_text(p->config, t);
    free(t);
}

/* hf_read_adapter's status, and its message in *msg (captured stderr) */
static int peft_read(peft_fix *p, const char **msg) {
    char base[256];
    cap_begin();
    int rc = hf_read_adapter(p->dir, &p->cfg, &p->lo, base, sizeof base);
    *msg = cap_end();
    return rc;
}

static int expect(int rc, const char *msg, int want_rc, const char *want, const char *not_want) {
    int ok = rc == want_rc && (!want || strstr(msg, want)) && (!not_want || !strstr(msg, not_want));
    if (!ok) tap_diag("exit %d, want %d; message: %s", rc, want_rc, msg);
    return ok;
}

/* adapter_model.safetensors with q_proj's lora_A[element 3] = bad */
static void peft_poison(peft_fix *p, float bad) {
    char name[2][128];
    st_tensor t[4];
    int n = 0;
    for (int k = 0; k < 2 * TSR_LORA_COUNT; k++) {
        char nm[TSR_LORA_NAME];
        int64_t shape[3];
        size_t at, numel;
        if (!lora_tensor(&p->lo, k, nm, shape, &at, &numel)) continue;
        snprintf(name[n % 2], sizeof name[0], "base_model.model.model.layers.0.self_attn.%s_proj.lora_%c.weight",
                 k / 2 == TSR_LORA_Q ? "q" : "v", k % 2 ? 'B' : 'A');
        char *own = strdup(name[n % 2]);
        t[n++] = (st_tensor){.name = own, .dtype = ST_F32, .ndim = 2, .shape = {shape[1], shape[2]},
                             .src = p->lo.w + at};
    }
    float *w = (float *)t[0].src;
    float keep = w[3];
    w[3] = bad;
    st_save(p->weights, t, n, NULL, 0);
    w[3] = keep;
    for (int k = 0; k < n; k++) free((char *)t[k].name);
}

/* an edit of adapter_config.json as written that hf_read_adapter refuses: the exit status, a part
 * of the message and one it must not hold (NULL: none), the check's name */
typedef struct peft_refusal {
    const char *from, *to;
    int rc;
    const char *want, *not_want, *what;
} peft_refusal;

static const peft_refusal pattern_refusals[] = {
    {"\"alpha_pattern\": {}", "\"alpha_pattern\": {\"q_proj\": 8}", TSR_EXIT_USAGE,
     "alpha_pattern gives module \"q_proj\" the alpha 8", NULL,
     "alpha_pattern {q_proj: 8} with lora_alpha 4: refused (exit 1) naming the module"},
    {"\"rank_pattern\": {}", "\"rank_pattern\": {\"model.layers.0.self_attn.v_proj\": 8}", TSR_EXIT_USAGE,
     "rank_pattern gives module \"model.layers.0.self_attn.v_proj\" the rank 8", NULL,
     "rank_pattern with another rank for one module: refused (exit 1) naming it"},
};

static const peft_refusal value_refusals[] = {
    {"\"r\": 2", "\"r\": \"2\"", TSR_EXIT_DATA, "r = \"2\": expected the adapters' rank", "r = -1",
     "r given as a string: exit 2 quoting \"2\" (it was reported as r = -1)"},
    {"\"r\": 2", "\"r\": 2.0000000001", TSR_EXIT_DATA, "r = 2.0000000001: expected", NULL,
     "r = 2.0000000001: exit 2 quoting it (it read \"r = 2 vs rank 2\")"},
    {"\"r\": 2", "\"r\": 4", TSR_EXIT_USAGE, "r = 4, this run has lora.rank = 2", NULL,
     "another rank: exit 1 naming both"},
    {"\"lora_alpha\": 4", "\"lora_alpha\": \"4\"", TSR_EXIT_DATA, "lora_alpha = \"4\": expected a positive number",
     NULL, "lora_alpha as a string: exit 2 quoting it"},
};

/* n checks: each of r[0..n) refused as it says */
static void peft_refusals(peft_fix *p, const peft_refusal *r, int n) {
    for (int i = 0; i < n; i++) {
        const char *msg;
        peft_config_edit(p, r[i].from, r[i].to);
        int rc = peft_read(p, &msg);
        tap_ok(expect(rc, msg, r[i].rc, r[i].want, r[i].not_want), "%s", r[i].what);
    }
}

static void peft_checks(void) {
    peft_fix *p = calloc(1, sizeof *p);
    const char *msg;
    int ok = peft_setup(p);
    tap_ok(ok && peft_read(p, &msg) == 0, "an adapter written by export --adapter reads back");
    peft_poison(p, NAN);
    int rc = peft_read(p, &msg);
    tap_ok(expect(rc, msg, TSR_EXIT_DATA, "q_proj.lora_A.weight\" holds a non-finite value (nan at element 3)", NULL),
           "a NaN in an adapter tensor: exit 2 naming the tensor and the element");
    peft_poison(p, -INFINITY);
    rc = peft_read(p, &msg);
    tap_ok(expect(rc, msg, TSR_EXIT_DATA, "non-finite value (-inf at element 3)", NULL),
           "an infinity in an adapter tensor: exit 2");
    peft_poison(p, 0.25f); /* finite again */
    peft_refusals(p, pattern_refusals, 2);
    peft_config_edit(p, "\"rank_pattern\": {}", "\"rank_pattern\": {\"q_proj\": 2, \"v_proj\": 2}");
    int same_rank = peft_read(p, &msg);
    peft_config_edit(p, "\"alpha_pattern\": {}", "\"alpha_pattern\": {\"v_proj\": 4.0}");
    int same_alpha = peft_read(p, &msg);
    tap_ok(same_rank == 0 && same_alpha == 0, "patterns that repeat r and lora_alpha change nothing: read");
    peft_refusals(p, value_refusals, 4);
    lora_free(&p->lo);
    model_free(&p->m);
    free(p->config_text);
    free(p);
}

/* ---- config.json ---- */

static int config_refused(const tsr_model *m, const char *json, int want_rc, const char *want,
                          const char *not_want) {
    char path[512];
    pjoin(path, g_tmp, "config.json");
    write_text(path, json);
    hf_config hc;
    cap_begin();
    int rc = hf_config_check(path, m, 1, &hc);
    const char *msg = cap_end();
    return expect(rc, msg, want_rc, want, not_want);
}

static void config_checks(void) {
    tsr_model m;
    static tsr_config cfg;
    tiny_model(&m, &cfg);
    const char *head = "{\"model_type\": \"llama\", \"num_hidden_layers\": 1, \"hidden_size\": 8, "
                       "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 4, "
                       "\"intermediate_size\": 8, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000, "
                       "\"max_position_embeddings\": 16, \"tie_word_embeddings\": false";
    char json[1024];
    snprintf(json, sizeof json, "%s, \"vocab_size\": -5}", head);
    tap_ok(config_refused(&m, json, TSR_EXIT_DATA, "vocab_size = -5: no model has that",
                          "--set model.vocab_size=-5"),
           "config.json vocab_size = -5: exit 2, no invalid --set suggested");
    snprintf(json, sizeof json, "%s, \"vocab_size\": 20}", head);
    tap_ok(config_refused(&m, json, TSR_EXIT_USAGE, "set --set model.vocab_size=20", NULL),
           "config.json vocab_size = 20 (run 16): exit 1 suggesting the valid --set");
    snprintf(json, sizeof json, "%s, \"vocab_size\": 16, \"hidden_size\": \"8\"}", head);
    tap_ok(config_refused(&m, json, TSR_EXIT_DATA, "hidden_size = \"8\", expected an integer", NULL),
           "config.json hidden_size as a string: exit 2 quoting \"8\"");
    model_free(&m);
}

/* ---- a large sharded index ---- */

/* In a child limited to `cpu` seconds of CPU (RLIMIT_CPU) or `wall` seconds (alarm): fn's status,
 * or 128 + the signal that stopped it (SIGXCPU: too slow; SIGALRM: blocked). */
static int bounded(int (*fn)(void *), void *arg, int cpu, int wall) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit r = {(rlim_t)cpu, (rlim_t)cpu + 1};
        setrlimit(RLIMIT_CPU, &r);
        alarm((unsigned)wall);
        _exit(fn(arg));
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) continue;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

enum { MAP_N = 100000 };

static int import_dir(void *dir) {
    tsr_model m;
    static tsr_config cfg;
    tiny_model(&m, &cfg);
    hf_import *h = NULL;
    int rc = hf_import_open(&h, dir, &m);
    hf_import_close(h);
    return rc;
}

/* dir/config.json of the tiny model, one shard of MAP_N scalars t0..t{N-1}, and an index naming
 * them all and then "missing" */
static void write_big_index(const char *dir) {
    tsr_model m;
    static tsr_config cfg;
    tiny_model(&m, &cfg);
    hf_export_opts o = {.dtype = ST_F32, .tokenizer = "none"};
    int q = fd_redirect(1, "/dev/null");
    hf_export(&m, &cfg, dir, &o);
    fd_restore(1, q);
    char path[512];
    pjoin(path, dir, "model.safetensors");
    unlink(path);
    st_tensor *t = calloc(MAP_N, sizeof *t);
    char (*names)[16] = calloc(MAP_N, sizeof *names);
    float zero = 0;
    for (int i = 0; i < MAP_N; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        t[i] = (st_tensor){.name = names[i], .dtype = ST_F32, .ndim = 1, .shape = {1}, .src = &zero};
    }
    pjoin(path, dir, "model-00001-of-00001.safetensors");
    st_save(path, t, MAP_N, NULL, 0);
    pjoin(path, dir, "model.safetensors.index.json");
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < MAP_N; i++) fprintf(f, "\"t%d\": \"model-00001-of-00001.safetensors\", ", i);
    fprintf(f, "\"missing\": \"model-00001-of-00001.safetensors\"}}");
    fclose(f);
    free(t);
    free(names);
    model_free(&m);
}

static void index_checks(void) {
    char dir[512];
    pjoin(dir, g_tmp, "bigindex");
    mkdir(dir, 0755);
    write_big_index(dir);
    cap_begin();
    int rc = bounded(import_dir, dir, 10, 300);
    const char *msg = cap_end();
    tap_ok(expect(rc, msg, TSR_EXIT_DATA, "weight_map puts \"missing\" in model-00001-of-00001.safetensors, "
                  "which has no such tensor", NULL),
           "a weight_map of 100,000 tensors: its last, missing one refused within 10 s of CPU (exit %d)", rc);
}

/* ---- a FIFO or a directory in place of a file ---- */

static int st_open_path(void *path) {
    st_file f;
    int rc = st_open(&f, path);
    if (!rc) st_close(&f);
    return rc;
}

static int dataset_open_dir(void *dir) {
    tsr_dataset *ds;
    int rc = dataset_open(&ds, dir, 0);
    if (!rc) dataset_close(ds);
    return rc;
}

static int not_a_file(int (*fn)(void *), const char *arg, const char *what) {
    cap_begin();
    int rc = bounded(fn, (void *)arg, 20, 20);
    const char *msg = cap_end();
    char want[128];
    snprintf(want, sizeof want, "is %s, not a regular file", what);
    return expect(rc, msg, TSR_EXIT_DATA, want, "too short");
}

static void fifo_checks(void) {
    char hf[512], path[512], data[512];
    pjoin(hf, g_tmp, "fifo-hf");
    mkdir(hf, 0755);
    pjoin(path, hf, "model.safetensors");
    mkfifo(path, 0644);
    tap_ok(not_a_file(st_open_path, path, "a FIFO"), "a FIFO as model.safetensors: refused at once, naming it");
    unlink(path);
    mkdir(path, 0755);
    tap_ok(not_a_file(st_open_path, path, "a directory"),
           "a directory as model.safetensors: 'is a directory' (it said 'too short')");
    pjoin(data, g_tmp, "data");
    tsr_dataset_writer *w;
    uint32_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (uint32_t)(i % 50);
    dataset_writer_open(&w, data, 50, 0, 1000);
    dataset_writer_append(w, tok, NULL, 64);
    dataset_writer_close(w);
    pjoin(path, data, "shard-00000.bin");
    unlink(path);
    mkfifo(path, 0644);
    tap_ok(not_a_file(dataset_open_dir, data, "a FIFO"), "a FIFO as a dataset's shard: refused at once, naming it");
    unlink(path);
    pjoin(path, data, "index.tsv");
    unlink(path);
    mkfifo(path, 0644);
    tap_ok(not_a_file(dataset_open_dir, data, "a FIFO"), "a FIFO as a dataset's index.tsv: refused at once");
}

/* ---- sizes: each reader's bound ---- */

/* dir/name: a sparse file of `bytes` bytes (no disk used: the readers refuse it by its size) */
static const char *sparse(const char *dir, const char *name, size_t bytes) {
    static char path[512];
    pjoin(path, dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 || close(fd) != 0) {
        fprintf(stderr, "test_untrusted_files: cannot make %s\n", path);
        exit(1);
    }
    return path;
}

/* msg names path, its size bound + 1 and the bound */
static int over(int rc, int want_rc, const char *msg, const char *path, size_t bound) {
    char want[640];
    snprintf(want, sizeof want, "%s: %zu bytes, larger than %zu bytes, the most this file may hold",
             path, bound + 1, bound);
    return expect(rc, msg, want_rc, want, NULL);
}

static int size_config(size_t bytes, const char **msg) {
    tsr_model m;
    static tsr_config cfg;
    tiny_model(&m, &cfg);
    hf_config hc;
    const char *path = sparse(g_tmp, "config.json", bytes);
    cap_begin();
    int rc = hf_config_check(path, &m, 1, &hc);
    *msg = cap_end();
    model_free(&m);
    return rc;
}

static int size_tokjson(size_t bytes, const char **msg) {
    hf_tok *t = NULL;
    const char *path = sparse(g_tmp, "tokenizer.json", bytes);
    cap_begin();
    int rc = hf_tok_load(&t, path);
    *msg = cap_end();
    if (t) hf_tok_free(t);
    return rc;
}

static int size_chat_config(size_t bytes, const char **msg) {
    chat_config cc;
    jinja_error e;
    const char *path = sparse(g_tmp, "tokenizer_config.json", bytes);
    cap_begin();
    int rc = chat_config_load(path, &cc, &e);
    *msg = cap_end();
    if (rc == JINJA_OK) chat_config_free(&cc);
    return rc == JINJA_ECONTEXT ? TSR_EXIT_DATA : rc;
}

static int size_gen_config(size_t bytes, const char **msg) {
    gen_chat *gc = tsr_calloc(1, sizeof *gc);
    pjoin(gc->path, g_tmp, "tokenizer_config.json");
    sparse(g_tmp, "generation_config.json", bytes);
    int64_t ids[4];
    int n = 0;
    cap_begin();
    int rc = gen_chat_generation_eos(gc, ids, 4, &n);
    *msg = cap_end();
    free(gc);
    return rc;
}

/* encoder.json over its bound, or (vocab = 1) a small encoder.json and vocab.bpe over it */
static int size_gpt2(size_t bytes, int vocab, const char **msg) {
    char enc[512], bpe[512];
    snprintf(enc, sizeof enc, "%s", vocab ? g_tmp : sparse(g_tmp, "encoder.json", bytes));
    if (vocab) pjoin(enc, g_tmp, "encoder.json"), write_text(enc, "{\"a\": 0}");
    snprintf(bpe, sizeof bpe, "%s", vocab ? sparse(g_tmp, "vocab.bpe", bytes) : g_tmp);
    if (!vocab) pjoin(bpe, g_tmp, "vocab.bpe"), write_text(bpe, "#version: 0.2\n");
    tsr_tokenizer *t = NULL;
    cap_begin();
    int rc = tokenizer_load_gpt2(&t, enc, bpe);
    *msg = cap_end();
    if (t) tokenizer_free(t);
    return rc;
}

static int read_unbounded(void *path) {
    char *text;
    size_t n;
    return fs_read_all(path, 0, &text, &n);
}

static void size_checks(void) {
    const char *msg;
    char path[512];
    int rc = size_config(HF_CONFIG_MAX + 1, &msg);
    pjoin(path, g_tmp, "config.json");
    tap_ok(over(rc, TSR_EXIT_DATA, msg, path, HF_CONFIG_MAX), "config.json of 4 MiB + 1: exit 2, its size and the bound said");
    rc = size_config(HF_CONFIG_MAX, &msg); /* read: not JSON (zeros) */
    tap_ok(rc == TSR_EXIT_DATA && strstr(msg, "not valid JSON"), "config.json of 4 MiB: read (then not JSON)");
    rc = size_tokjson(HF_TOKJSON_MAX + 1, &msg);
    pjoin(path, g_tmp, "tokenizer.json");
    tap_ok(over(rc, TSR_EXIT_DATA, msg, path, HF_TOKJSON_MAX), "tokenizer.json of 256 MiB + 1: exit 2, its size and the bound said");
    rc = size_chat_config((size_t)CHAT_CONFIG_MAX + 1, &msg);
    pjoin(path, g_tmp, "tokenizer_config.json");
    tap_ok(over(rc, TSR_EXIT_DATA, msg, path, CHAT_CONFIG_MAX), "tokenizer_config.json of 64 MiB + 1: refused, its size and the bound said");
    rc = size_gen_config((size_t)GEN_CONFIG_MAX + 1, &msg);
    pjoin(path, g_tmp, "generation_config.json");
    tap_ok(over(rc, TSR_EXIT_DATA, msg, path, GEN_CONFIG_MAX), "generation_config.json of 1 MiB + 1: exit 2, its size and the bound said");
    rc = size_gpt2(GPT2_FILE_MAX + 1, 0, &msg);
    pjoin(path, g_tmp, "encoder.json");
    tap_ok(over(rc, TSR_EXIT_DATA, msg, path, GPT2_FILE_MAX), "encoder.json of 64 MiB + 1: exit 2, its size and the bound said");
    rc = size_gpt2(GPT2_FILE_MAX + 1, 1, &msg);
    pjoin(path, g_tmp, "vocab.bpe");
    tap_ok(over(rc, TSR_EXIT_DATA, msg, path, GPT2_FILE_MAX), "vocab.bpe of 64 MiB + 1: exit 2, its size and the bound said");
    cap_begin();
    rc = bounded(read_unbounded, path, 10, 20);
    msg = cap_end();
    tap_ok(rc == TSR_EXIT_INTERNAL && strstr(msg, "read with no bound on its size"), "fs_read_all with no bound: exit 3 (rc %d)", rc);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/test_untrusted_files.XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    cap_set_dir(g_tmp);
    tap_plan(10 + 3 + 1 + 4 + 8);
    peft_checks();
    config_checks();
    index_checks();
    fifo_checks();
    size_checks();
    rm_rf(g_tmp);
    return tap_done();
}
