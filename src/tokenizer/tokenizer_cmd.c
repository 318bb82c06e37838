/* tokenizer_cmd.c — `tessera tokenizer encode`, `decode`, and the dispatch to `train`.
 *
 * encode prints each FILE's token ids as one line of space-separated decimals (the input of
 * `tessera shard`); decode reads whitespace-separated ids and writes the bytes they stand for.
 * Options come from one table per subcommand: getopt_long's arrays and --help are generated from it.
 */
#include "tokenizer/tokenizer_cmd.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "fsutil.h"
#include "tokenizer/tokenizer.h"

/* bytes of one FILE of encode or decode, read whole (a corpus larger than that is prep's) */
#define TOKCMD_FILE_MAX ((size_t)1 << 30)

static const cli_opt encode_opts[] = {
    {"tokenizer", 't', "SPEC", "gpt2 (default), a directory with encoder.json + vocab.bpe, a Hugging Face tokenizer.json (or its directory), a tiktoken directory (tiktoken.model + tokenizer_config.json: Kimi K2, Moonlight) or o200k_base.tiktoken, or a tessera tokenizer file"},
    {"special", CLI_NO_SHORT('s'), NULL, "recognise special tokens such as <|endoftext|> (a tokenizer.json's added tokens) in the text"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd tokenizer_encode_cli = {
    "tokenizer encode", "FILE...|-",
    "Prints the token ids of each FILE ('-' = stdin) as one line of space-separated decimals.",
    encode_opts, (int)(sizeof encode_opts / sizeof encode_opts[0]), NULL,
};
static const cli_opt decode_opts[] = {
    {"tokenizer", 't', "SPEC", "gpt2 (default), a directory with encoder.json + vocab.bpe, a Hugging Face tokenizer.json (or its directory), a tiktoken directory (tiktoken.model + tokenizer_config.json: Kimi K2, Moonlight) or o200k_base.tiktoken, or a tessera tokenizer file"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd tokenizer_decode_cli = {
    "tokenizer decode", "FILE...|-",
    "Reads whitespace-separated token ids from each FILE ('-' = stdin) and writes their bytes.",
    decode_opts, (int)(sizeof decode_opts / sizeof decode_opts[0]), NULL,
};

typedef struct tok_args {
    const char *spec;
    int special;
} tok_args;

static int tok_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    tok_args *a = ctx;
    (void)c;
    if (ch == 't') a->spec = val;
    if (ch == CLI_NO_SHORT('s')) a->special = 1;
    return 0;
}

/* Options of encode/decode, then at least one FILE. Returns 0, -1 after --help, or TSR_EXIT_USAGE. */
static int cmd_parse(const cli_cmd *c, int argc, char **argv, tok_args *a) {
    int rc = cli_parse(c, argc, argv, tok_on_opt, a);
    if (rc) return rc;
    if (optind >= argc) return cli_usage_error(c, "no input FILE given ('-' reads stdin)", NULL);
    return 0;
}

static int write_all(const void *p, size_t n) {
    if (n && fwrite(p, 1, n, stdout) != n) {
        tsr_error("stdout: write failed: %s", strerror(errno));
        return TSR_EXIT_DATA;
    }
    return 0;
}

static int run_encode(const tsr_tokenizer *tok, const char *path, int special) {
    char *text;
    size_t n, n_ids = 0, cap = 0;
    uint32_t *ids = NULL;
    int rc = fs_read_stream(path, TOKCMD_FILE_MAX, &text, &n);
    if (rc) return rc;
    tokenizer_encode(tok, (const uint8_t *)text, n, special, &ids, &n_ids, &cap);
    free(text);
    char *line = tsr_malloc(11 * n_ids + 2), *o = line;
    for (size_t i = 0; i < n_ids; i++) {
        if (i) *o++ = ' ';
        /* decimal digits of ids[i], written backwards then reversed */
        char d[10];
        int k = 0;
        uint32_t v = ids[i];
        do d[k++] = (char)('0' + v % 10), v /= 10;
        while (v);
        while (k) *o++ = d[--k];
    }
    *o++ = '\n';
    rc = write_all(line, (size_t)(o - line));
    free(line);
    free(ids);
    return rc;
}

static int run_decode(const tsr_tokenizer *tok, const char *path) {
    char *text;
    size_t n;
    int rc = fs_read_stream(path, TOKCMD_FILE_MAX, &text, &n);
    if (rc) return rc;
    size_t n_ids = 0, cap = 1024;
    uint32_t *ids = tsr_malloc(cap * sizeof *ids);
    for (size_t i = 0; i < n;) {
        if (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r') {
            i++;
            continue;
        }
        uint64_t v = 0;
        size_t s = i;
        while (i < n && text[i] >= '0' && text[i] <= '9' && v <= UINT32_MAX) v = v * 10 + (text[i++] - '0');
        if (i == s || v > UINT32_MAX || (i < n && !(text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r'))) {
            tsr_error("%s: byte %zu: expected a token id (a decimal integer), found '%c'", path,
                      i, i < n ? text[i] : '?');
            rc = TSR_EXIT_DATA;
            break;
        }
        if (n_ids == cap) {
            uint32_t *ni = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!ni) tsr_die(TSR_EXIT_INTERNAL, "out of memory decoding %s", path);
            ids = ni;
        }
        ids[n_ids++] = (uint32_t)v;
    }
    free(text);
    if (!rc) {
        size_t need = tokenizer_decode(tok, ids, n_ids, NULL, 0);
        if (need == (size_t)-1) {
            tsr_error("  in %s (vocabulary of %u tokens)", path, tokenizer_vocab_size(tok));
            rc = TSR_EXIT_DATA;
        } else {
            uint8_t *out = tsr_malloc(need ? need : 1);
            tokenizer_decode(tok, ids, n_ids, out, need);
            rc = write_all(out, need);
            free(out);
        }
    }
    free(ids);
    return rc;
}

static int run_sub(int argc, char **argv, int decode) {
    const cli_cmd *c = decode ? &tokenizer_decode_cli : &tokenizer_encode_cli;
    tok_args a = {"gpt2", 0};
    int rc = cmd_parse(c, argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    tsr_tokenizer *tok;
    if ((rc = tokenizer_open(&tok, a.spec))) return rc;
    for (int k = optind; k < argc && !rc; k++)
        rc = decode ? run_decode(tok, argv[k]) : run_encode(tok, argv[k], a.special);
    if (fflush(stdout) != 0 && !rc) {
        tsr_error("stdout: write failed: %s", strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    tokenizer_free(tok);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    static const char *usage =
        "usage: tessera tokenizer encode|decode|train [options] ...\n"
        "  encode   text -> token ids (space-separated decimals, one line per file)\n"
        "  decode   token ids -> text\n"
        "  train    learn a byte-level BPE tokenizer from text\n"
        "'tessera tokenizer SUBCOMMAND --help' describes each; docs/tokenizer.md has the details.\n"
        "\nexit codes: " CLI_EXITS "\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return TSR_EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(sub, "encode")) return run_sub(argc - 1, argv + 1, 0);
    if (!strcmp(sub, "decode")) return run_sub(argc - 1, argv + 1, 1);
    if (!strcmp(sub, "train")) return cmd_tokenizer_train(argc - 1, argv + 1);
    tsr_error("tokenizer: unknown subcommand '%s' (expected encode, decode or train)", sub);
    return TSR_EXIT_USAGE;
}
