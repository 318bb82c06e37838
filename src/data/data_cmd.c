/* data_cmd.c — `tessera shard`, `tessera synth` and `tessera verify-data`.
 *
 * Options come from one table per command; getopt_long's arrays and the --help text are both
 * generated from it, so the help cannot drift from the parser.
 */
#include "data/data_cmd.h"
#include "data/synth_arith.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "fsutil.h"
#include "data/data.h"
#include "data/dataloader.h"
#include "data/s3.h"
#include "data/shard_format.h"

#define DEFAULT_SHARD_TOKENS (1ull << 27) /* 256 MiB of uint16 tokens per shard */
#define BATCH 65536                       /* tokens handed to the writer per append */
#define ID_SATURATE 100000000000ull       /* token ids stop accumulating digits here */

/* ================================ tessera shard ================================ */

static const cli_opt shard_opts[] = {
    {"out", 'o', "DIR", "dataset directory to create (must not exist)"},
    {"vocab", CLI_NO_SHORT('v'), "V", "vocabulary size: every token id must be < V (1..2^31)"},
    {"mask", 'm', NULL, "tokens carry a loss mask: write each as ID:1 (a target) or ID:0 (not)"},
    {"shard-tokens", CLI_NO_SHORT('s'), "N", "tokens per shard file (default 134217728)"},
    {"quiet", 'q', NULL, "print nothing on success"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd shard_cli = {
    "shard", "FILE...",
    "Writes token ids from text FILEs (whitespace-separated decimal ids; '-' reads stdin)\n"
    "into a tessera dataset directory.",
    shard_opts, (int)(sizeof shard_opts / sizeof shard_opts[0]), NULL,
};

typedef struct shard_args {
    const char *out;
    int64_t vocab, shard_tokens;
    int mask, quiet;
} shard_args;

static int shard_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    shard_args *a = ctx;
    switch (ch) {
    case 'o': a->out = val; return 0;
    case CLI_NO_SHORT('v'): return cli_number(c, ch, val, 1, INT64_C(1) << 31, &a->vocab);
    case 'm': a->mask = 1; return 0;
    case CLI_NO_SHORT('s'): return cli_number(c, ch, val, 1, INT64_C(1) << 60, &a->shard_tokens);
    case 'q': a->quiet = 1; return 0;
    default: return cli_usage_error(c, "unhandled option", NULL);
    }
}

/* Streaming parser for the token text: state survives buffer boundaries. */
typedef struct tok_parser {
    const char *path;
    int with_mask;
    uint32_t vocab;
    long line;
    int state; /* 0 between tokens, 1 in an id, 2 after ':', 3 after the mask digit */
    uint64_t id;
    uint8_t m;
    uint32_t tok[BATCH];
    uint8_t mask[BATCH];
    size_t n;
    uint64_t total;
    tsr_dataset_writer *w;
} tok_parser;

static int parse_fail(const tok_parser *p, const char *msg, unsigned c) {
    if (c)
        tsr_error("%s:%ld: %s (found '%c', byte 0x%02x)", p->path, p->line, msg,
                  c >= 32 && c < 127 ? (char)c : '?', c);
    else
        tsr_error("%s:%ld: %s", p->path, p->line, msg);
    return TSR_EXIT_DATA;
}

static int parser_flush(tok_parser *p) {
    if (p->n && dataset_writer_append(p->w, p->tok, p->with_mask ? p->mask : NULL, p->n))
        return TSR_EXIT_DATA;
    p->n = 0;
    return 0;
}

static int parser_emit(tok_parser *p) {
    p->tok[p->n] = (uint32_t)p->id;
    p->mask[p->n] = p->m;
    p->total++;
    p->state = 0;
    return ++p->n == BATCH ? parser_flush(p) : 0;
}

static int check_id(const tok_parser *p) {
    if (p->id < p->vocab) return 0;
    char msg[96];
    if (p->id >= ID_SATURATE)
        snprintf(msg, sizeof msg, "token id of 12 or more digits is >= vocab size %u",
                 p->vocab);
    else
        snprintf(msg, sizeof msg, "token id %llu is >= vocab size %u", (unsigned long long)p->id,
                 p->vocab);
    return parse_fail(p, msg, 0);
}

/* End of a token (whitespace or end of file). */
static int parser_end_token(tok_parser *p) {
    if (p->state == 1 && p->with_mask)
        return parse_fail(p, "token has no mask: with --mask write ID:1 or ID:0", 0);
    if (p->state == 2) return parse_fail(p, "':' must be followed by the mask digit 0 or 1", 0);
    if (p->state == 1) {
        if (check_id(p)) return TSR_EXIT_DATA;
        p->m = 1;
    }
    return p->state ? parser_emit(p) : 0;
}

static int parser_char(tok_parser *p, unsigned c) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        int rc = parser_end_token(p);
        if (c == '\n') p->line++;
        return rc;
    }
    if (c >= '0' && c <= '9') {
        unsigned d = c - '0';
        if (p->state == 0) {
            p->state = 1;
            p->id = d;
        } else if (p->state == 1) {
            if (p->id < ID_SATURATE) p->id = p->id * 10 + d; /* saturates: checked at the end */
        } else if (p->state == 2 && d <= 1) {
            p->m = (uint8_t)d;
            p->state = 3;
            return 0;
        } else {
            return parse_fail(p, "the mask after ':' must be the single digit 0 or 1", c);
        }
        return 0;
    }
    if (p->state >= 2)
        return parse_fail(p, "the mask after ':' must be the single digit 0 or 1", c);
    if (c == ':' && p->state == 1) {
        if (!p->with_mask) return parse_fail(p, "ID:M mask syntax needs --mask", c);
        p->state = 2;
        return check_id(p);
    }
    return parse_fail(p, "unexpected character (expected a decimal token id)", c);
}

static int shard_read_file(tok_parser *p, const char *path) {
    int is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        tsr_error("%s: cannot open: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    p->path = is_stdin ? "<stdin>" : path;
    p->line = 1;
    p->state = 0;
    unsigned char buf[1 << 16];
    size_t got;
    int rc = 0;
    while (!rc && (got = fread(buf, 1, sizeof buf, f)) > 0)
        for (size_t k = 0; k < got && !rc; k++) rc = parser_char(p, buf[k]);
    if (!rc && ferror(f)) {
        tsr_error("%s: read failed: %s", p->path, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    if (!rc) rc = parser_end_token(p);
    if (!is_stdin) fclose(f);
    return rc;
}

int cmd_shard(int argc, char **argv) {
    shard_args a = {.shard_tokens = (int64_t)DEFAULT_SHARD_TOKENS};
    int rc = cli_parse(&shard_cli, argc, argv, shard_on_opt, &a);
    if (rc) return rc < 0 ? 0 : rc;
    if (!a.out) return cli_usage_error(&shard_cli, "--out DIR is required", NULL);
    if (!a.vocab) return cli_usage_error(&shard_cli, "--vocab V is required", NULL);
    if (optind >= argc) return cli_usage_error(&shard_cli, "no input FILE given", NULL);
    tok_parser *p = tsr_calloc(1, sizeof *p);
    p->with_mask = a.mask;
    p->vocab = (uint32_t)a.vocab;
    if (fs_make_parents(a.out)) {
        tsr_error("%s: cannot create its parent directory: %s", a.out, strerror(errno));
        free(p);
        return TSR_EXIT_DATA;
    }
    rc = dataset_writer_open(&p->w, a.out, p->vocab, a.mask, (uint64_t)a.shard_tokens);
    for (int k = optind; k < argc && !rc; k++) rc = shard_read_file(p, argv[k]);
    if (!rc) rc = parser_flush(p);
    if (!rc && p->total == 0) {
        tsr_error("shard: the input holds no tokens; no dataset written");
        rc = TSR_EXIT_DATA;
    }
    if (rc) {
        dataset_writer_abort(p->w);
    } else if ((rc = dataset_writer_close(p->w)) == 0 && !a.quiet) {
        uint64_t shards = (p->total + (uint64_t)a.shard_tokens - 1) / (uint64_t)a.shard_tokens;
        printf("shard: wrote %llu tokens in %llu shard%s to %s (vocab %u, %s%s)\n",
               (unsigned long long)p->total, (unsigned long long)shards, shards == 1 ? "" : "s",
               a.out, p->vocab, p->vocab <= 65536 ? "uint16" : "uint32",
               a.mask ? ", with loss mask" : "");
    }
    free(p);
    return rc ? TSR_EXIT_DATA : 0;
}

/* ================================ tessera synth ================================
 * An order-2 Markov chain over ids [0, V-1) plus the end-of-document id V-1:
 *   - each previous token b has K = 8 candidate successors cand[b][j], each drawn as the smaller
 *     of two uniform ids in [0, V-1) (so low ids are more frequent);
 *   - the context (a, b) picks a rotation r(a, b) in [0, K); successor j is cand[b][(r + j) % K]
 *     with probability w_j = (45, 20, 12, 8, 6, 4, 3, 2) %;
 *   - after the first token of a document, each step ends the document with probability 1/256
 *     (emitting V-1); the next document starts from the context (V-1, V-1).
 * A unigram model learns the id frequencies, a bigram model the candidate sets (about ln 8
 * nats), a model that sees two tokens the rotation: its floor is the entropy printed. Every
 * random draw is a hash of (seed, stream, counter), so output depends on the arguments only. */

#define SYNTH_K 8
#define SYNTH_EOD_ODDS 256
static const uint32_t synth_w[SYNTH_K] = {45, 20, 12, 8, 6, 4, 3, 2}; /* percent */
enum { STREAM_CAND = 1, STREAM_ROT = 2, STREAM_TRAIN = 3, STREAM_VAL = 4 };

static uint64_t synth_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t synth_rand(uint64_t seed, uint64_t stream, uint64_t counter) {
    return synth_mix(synth_mix(synth_mix(seed) ^ stream) ^ counter);
}

typedef struct synth_state {
    uint32_t V, eod;
    uint64_t seed, stream; /* stream: STREAM_TRAIN or STREAM_VAL */
    uint32_t *cand;        /* (V, K) */
    uint32_t a, b;         /* the context: the two previous tokens */
    uint64_t doclen, docs;
    double nll;            /* sum of -ln p(token | context) under the true model */
} synth_state;

static void synth_init(synth_state *s, uint32_t V, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->V = V;
    s->eod = V - 1;
    s->seed = seed;
    s->cand = tsr_malloc((size_t)V * SYNTH_K * sizeof *s->cand);
    for (uint64_t k = 0; k < (uint64_t)V * SYNTH_K; k++) {
        uint32_t x = (uint32_t)(synth_rand(seed, STREAM_CAND, 2 * k) % (V - 1));
        uint32_t y = (uint32_t)(synth_rand(seed, STREAM_CAND, 2 * k + 1) % (V - 1));
        s->cand[k] = x < y ? x : y;
    }
}

/* Starts a split: a fresh document and its own token stream. */
static void synth_begin(synth_state *s, uint64_t stream) {
    s->stream = stream;
    s->a = s->b = s->eod;
    s->doclen = s->docs = 0;
    s->nll = 0.0;
}

/* Token at position i of the split; accumulates its -ln p. */
static uint32_t synth_next(synth_state *s, uint64_t i) {
    uint64_t u = synth_rand(s->seed, s->stream, i);
    double p_eod = s->doclen ? 1.0 / SYNTH_EOD_ODDS : 0.0;
    if (s->doclen && (u % SYNTH_EOD_ODDS) == 0) {
        s->nll -= log(p_eod);
        s->a = s->b = s->eod;
        s->doclen = 0;
        s->docs++;
        return s->eod;
    }
    const uint32_t *c = s->cand + (size_t)s->b * SYNTH_K;
    uint32_t rot = (uint32_t)(synth_rand(s->seed, STREAM_ROT, (uint64_t)s->a * s->V + s->b) %
                              SYNTH_K);
    uint32_t pick = (uint32_t)((u / SYNTH_EOD_ODDS) % 100), j = 0, acc = synth_w[0];
    while (pick >= acc) acc += synth_w[++j];
    uint32_t t = c[(rot + j) % SYNTH_K], q = 0;
    for (uint32_t k = 0; k < SYNTH_K; k++)
        if (c[(rot + k) % SYNTH_K] == t) q += synth_w[k];
    s->nll -= log((1.0 - p_eod) * q / 100.0);
    s->a = s->b;
    s->b = t;
    s->doclen++;
    return t;
}

/* Writes n tokens of one split as the dataset `dir`. */
static int synth_split(synth_state *s, const char *dir, uint64_t stream, uint64_t n,
                       uint64_t shard_tokens) {
    tsr_dataset_writer *w;
    if (dataset_writer_open(&w, dir, s->V, 0, shard_tokens)) return TSR_EXIT_DATA;
    synth_begin(s, stream);
    uint32_t *buf = tsr_malloc(BATCH * sizeof *buf);
    int rc = 0;
    for (uint64_t i = 0; i < n && !rc;) {
        size_t k = 0;
        for (; k < BATCH && i < n; k++, i++) buf[k] = synth_next(s, i);
        rc = dataset_writer_append(w, buf, NULL, k);
    }
    free(buf);
    if (rc) {
        dataset_writer_abort(w);
        return TSR_EXIT_DATA;
    }
    return dataset_writer_close(w);
}

static const cli_opt synth_opts[] = {
    {"out", 'o', "DIR", "directory to create, holding the datasets DIR/train and DIR/val"},
    {"vocab", CLI_NO_SHORT('v'), "V", "vocabulary size, 2..1048576; id V-1 ends a document (default 512)"},
    {"tokens", CLI_NO_SHORT('n'), "N", "training tokens (default 2000000)"},
    {"val-tokens", 'e', "N", "validation tokens, 0 = no DIR/val (default N/10)"},
    {"seed", 'S', "SEED", "random seed; same arguments give byte-identical output (default 1)"},
    {"shard-tokens", CLI_NO_SHORT('s'), "N", "tokens per shard file (default 134217728)"},
    {"task", CLI_NO_SHORT('k'), "KIND", "markov (default: token datasets) or arithmetic (JSON Lines "
                              "text: pretrain, sft, prompts and held-out problems; docs/rl.md)"},
    {"examples", CLI_NO_SHORT('x'), "N", "arithmetic: training examples (default 20000)"},
    {"max-operand", CLI_NO_SHORT('m'), "M", "arithmetic: operands 0..M, 1..9999 (default 99)"},
    {"verbose", CLI_NO_SHORT('b'), "F", "arithmetic: the share of SFT responses that run on after "
                                 "the answer, 0..1 (default 0.5)"},
    {"quiet", 'q', NULL, "print nothing on success"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd synth_cli = {
    "synth", "",
    "Writes a deterministic synthetic corpus: documents from a seeded order-2 Markov chain,\n"
    "with a known entropy (the loss a perfect model reaches), for demos and tests. Train and\n"
    "val follow the same chain with independent random streams. --task arithmetic writes\n"
    "sums and differences as JSON Lines text instead (docs/rl.md).",
    synth_opts, (int)(sizeof synth_opts / sizeof synth_opts[0]), NULL,
};

typedef struct synth_args {
    const char *out;
    int64_t vocab, tokens, val_tokens, seed, shard_tokens, examples, max_operand;
    double verbose;
    int quiet, arithmetic;
} synth_args;

static int synth_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    synth_args *a = ctx;
    switch (ch) {
    case 'o': a->out = val; return 0;
    case CLI_NO_SHORT('v'): return cli_number(c, ch, val, 2, 1 << 20, &a->vocab);
    case CLI_NO_SHORT('n'): return cli_number(c, ch, val, 1, INT64_C(1) << 40, &a->tokens);
    case 'e': return cli_number(c, ch, val, 0, INT64_C(1) << 40, &a->val_tokens);
    case 'S': return cli_number(c, ch, val, 0, INT64_MAX, &a->seed);
    case CLI_NO_SHORT('s'): return cli_number(c, ch, val, 1, INT64_C(1) << 60, &a->shard_tokens);
    case 'q': a->quiet = 1; return 0;
    case CLI_NO_SHORT('k'):
        if (strcmp(val, "markov") && strcmp(val, "arithmetic"))
            return cli_usage_error(c, "--task: expected markov or arithmetic, found ", val);
        a->arithmetic = !strcmp(val, "arithmetic");
        return 0;
    case CLI_NO_SHORT('x'): return cli_number(c, ch, val, 1, INT64_C(1) << 32, &a->examples);
    case CLI_NO_SHORT('m'): return cli_number(c, ch, val, 1, 9999, &a->max_operand);
    case CLI_NO_SHORT('b'):
        if (tsr_parse_f64(val, 0.0, 1.0, &a->verbose) == 0) return 0;
        return cli_usage_error(c, "--verbose: expected a number in [0, 1], found ", val);
    default: return cli_usage_error(c, "unhandled option", NULL);
    }
}

/* Writes OUT.tmp/{train,val}, then renames OUT.tmp to OUT. */
static int synth_write(const synth_args *a, synth_state *s, double *train_nll,
                       uint64_t *train_docs) {
    char tmp[4096], sub[4096 + 8];
    struct stat st;
    if (lstat(a->out, &st) == 0) {
        tsr_error("%s: already exists; refusing to overwrite (choose a new --out or remove it)",
                  a->out);
        return TSR_EXIT_DATA;
    }
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", a->out)) {
        tsr_error("%s: path too long", a->out);
        return TSR_EXIT_DATA;
    }
    if (lstat(tmp, &st) == 0 && dataset_split_remove_staging(tmp)) return TSR_EXIT_DATA;
    if (fs_make_parents(tmp) || mkdir(tmp, 0777) != 0) {
        tsr_error("%s: mkdir failed: %s", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    snprintf(sub, sizeof sub, "%s/train", tmp);
    int rc = synth_split(s, sub, STREAM_TRAIN, (uint64_t)a->tokens, (uint64_t)a->shard_tokens);
    *train_nll = s->nll;
    *train_docs = s->docs + (s->doclen > 0);
    snprintf(sub, sizeof sub, "%s/val", tmp);
    if (!rc && a->val_tokens > 0)
        rc = synth_split(s, sub, STREAM_VAL, (uint64_t)a->val_tokens, (uint64_t)a->shard_tokens);
    if (!rc && rename(tmp, a->out) != 0) {
        tsr_error("%s: rename to %s failed: %s", tmp, a->out, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    if (rc) {
        dataset_split_remove_staging(tmp);
        return TSR_EXIT_DATA;
    }
    return fs_sync_parent(a->out);
}

int cmd_synth(int argc, char **argv) {
    synth_args a = {.vocab = 512, .tokens = 2000000, .val_tokens = -1, .seed = 1,
                    .shard_tokens = (int64_t)DEFAULT_SHARD_TOKENS, .examples = 20000,
                    .max_operand = 99, .verbose = 0.5};
    int rc = cli_parse(&synth_cli, argc, argv, synth_on_opt, &a);
    if (rc) return rc < 0 ? 0 : rc;
    if (!a.out) return cli_usage_error(&synth_cli, "--out DIR is required", NULL);
    if (optind < argc) return cli_usage_error(&synth_cli, "unexpected operand: ", argv[optind]);
    if (a.arithmetic)
        return synth_arithmetic(a.out, (uint64_t)a.examples, (int)a.max_operand, a.verbose,
                                (uint64_t)a.seed, a.quiet);
    if (a.val_tokens < 0) a.val_tokens = a.tokens / 10;
    synth_state s;
    synth_init(&s, (uint32_t)a.vocab, (uint64_t)a.seed);
    double nll = 0;
    uint64_t docs = 0;
    rc = synth_write(&a, &s, &nll, &docs);
    free(s.cand);
    if (rc) return TSR_EXIT_DATA;
    if (!a.quiet) {
        uint64_t st = (uint64_t)a.shard_tokens, shards = ((uint64_t)a.tokens + st - 1) / st;
        printf("synth: wrote %s/train (%lld tokens, %llu documents, %llu shard%s) and %s/val (%lld "
               "tokens): vocab %lld, entropy %.4f nats/token (the loss floor; uniform is %.4f)\n",
               a.out, (long long)a.tokens, (unsigned long long)docs, (unsigned long long)shards,
               shards == 1 ? "" : "s", a.out, (long long)a.val_tokens, (long long)a.vocab,
               nll / (double)a.tokens, log((double)a.vocab));
    }
    return 0;
}

/* ================================ tessera verify-data ================================ */

static const cli_opt verify_opts[] = {
    {"seq-len", 'T', "T", "also report the number of samples of length T (default 1024)"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd verify_data_cli = {
    "verify-data", "DIR",
    "Checks a dataset: index, every shard header, payload checksums, token ids < vocab. DIR: a "
    "dataset, or the directory tessera prep --out wrote (its train and val datasets), or "
    "s3://BUCKET/PREFIX, a dataset's prefix or the one tessera data push of such a directory "
    "wrote (each shard fetched into a temporary directory, checked, removed: "
    "docs/object-storage.md).",
    verify_opts, (int)(sizeof verify_opts / sizeof verify_opts[0]), NULL,
};

static int verify_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    if (ch == 'T') return cli_number(c, ch, val, 1, INT32_MAX, ctx);
    return cli_usage_error(c, "unhandled option", NULL);
}

/* 1 when dir/name is a file */
static int has_file(const char *dir, const char *name) {
    char p[4096];
    struct stat sb;
    return !tsr_snprintf(p, sizeof p, "%s/%s", dir, name) && stat(p, &sb) == 0 &&
           S_ISREG(sb.st_mode);
}

static int verify_one(const char *dir, int64_t T) {
    tsr_dataset *ds;
    int rc = dataset_open(&ds, dir, 1);
    if (rc) return rc;
    if (dataset_s3(ds) && (rc = dataloader_fetch_all(ds, 0))) {
        dataset_close(ds);
        return rc;
    }
    uint32_t V = dataset_vocab_size(ds);
    printf("%s: ok: %d shard%s, %llu tokens, vocab %u (%s), loss mask %s, %llu samples of length "
           "%lld%s; checksums verified\n", dir, dataset_n_shards(ds),
           dataset_n_shards(ds) == 1 ? "" : "s", (unsigned long long)dataset_n_tokens(ds), V,
           V <= 65536 ? "uint16" : "uint32", dataset_has_mask(ds) ? "yes" : "no",
           (unsigned long long)dataset_n_samples(ds, (int)T), (long long)T,
           dataset_has_segments(ds) ? ", segment starts recorded" : "");
    dataset_close(ds);
    return 0;
}

/* Whether the dataset location dir has the file `name` (index.tsv, train/index.tsv): a stat, or a
 * HEAD on an object store. 0 with *found set, or an exit status after tsr_error. */
static int has_index(const char *dir, const char *name, int *found) {
    char err[S3_ERR_LEN];
    tsr_s3 *c;
    if (!s3_is_url(dir)) return *found = has_file(dir, name), 0;
    int rc = s3_open(&c, dir);
    if (!rc && (rc = s3_head(c, name, found, err))) tsr_error("%s", err);
    s3_close(c);
    return rc;
}

int cmd_verify_data(int argc, char **argv) {
    int64_t T = 1024;
    int rc = cli_parse(&verify_data_cli, argc, argv, verify_on_opt, &T);
    if (rc) return rc < 0 ? 0 : rc;
    if (optind != argc - 1) return cli_usage_error(&verify_data_cli, "expected exactly one DIR", NULL);
    const char *dir = argv[optind];
    int top = 0, sub = 0, val = 0;
    if ((rc = has_index(dir, "index.tsv", &top)) || (!top && (rc = has_index(dir, "train/index.tsv", &sub))))
        return rc;
    if (!top && !sub && s3_is_url(dir)) {
        tsr_error("%s: no dataset there: neither %s/index.tsv nor %s/train/index.tsv (what tessera "
                  "data push of a prep directory writes) exists", dir, dir, dir);
        return TSR_EXIT_DATA;
    }
    if (top || !sub) return verify_one(dir, T);
    if ((rc = has_index(dir, "val/index.tsv", &val))) return rc;
    /* what `tessera prep --out DIR` writes, or `tessera data push` of it: DIR/train and DIR/val */
    char sub_dir[4096];
    printf("%s: not a dataset (no index.tsv): the datasets tessera prep writes, %s/train%s\n", dir,
           dir, val ? " and val" : "");
    for (int k = 0; k < 1 + val; k++) {
        snprintf(sub_dir, sizeof sub_dir, "%s/%s", dir, k ? "val" : "train");
        rc |= verify_one(sub_dir, T);
    }
    return rc ? TSR_EXIT_DATA : 0;
}
