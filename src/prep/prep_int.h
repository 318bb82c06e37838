/* prep_int.h — internal to src/prep/prep*.c, `tessera prep` (prep.h): its limits, its options,
 * its inputs and the run's state, and what its files share. prep.c: the options, the output
 * directory and the command's phases; it calls prep_input.c (the inputs and their formats) and
 * prep_stream.c (the inputs streamed through the parallel batches into the writers), and
 * prep_stream.c calls prep_input.c (one way).
 */
#ifndef TSR_PREP_INT_H
#define TSR_PREP_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "chat/chat_config.h"
#include "data/data.h"
#include "json.h"
#include "prep/prep.h"
#include "prep/prep_doc.h"
#include "prep/prep_pack.h"
#include "prep/prep_prompts.h"
#include "runlock.h"
#include "tokenizer/tokenizer.h"

#define DEFAULT_SHARD_TOKENS (1ull << 27) /* as tessera shard: 256 MiB of uint16 tokens */
#define BATCH_BYTES (4u << 20)            /* input bytes per parallel batch */
#define BATCH_ITEMS 16384                 /* items per parallel batch */
#define PART_BYTES (1u << 20) /* a text file is read, and a longer document tokenized, in parts of
                                 so many bytes ($TSR_PREP_PART_BYTES for tests: read_knobs) */
#define MAX_REPORTED 10                   /* bad lines reported one by one */
#define DETECT_LINES 1000                 /* lines read to detect a JSONL file's kind */
#define SPLIT_STREAM 0x7072657053504c54ull /* "prepSPLT": the train/val split's random stream */
#define PROGRESS_TTY_S 0.25               /* redraw interval of the progress bar */
#define PROGRESS_LOG_S 5.0                /* interval of the plain lines ($TSR_PREP_PROGRESS_S) */

typedef struct prep_args {
    const char *out, *tokenizer, *chat_template; /* chat_template: NULL = auto */
    const char *eos_token; /* --eos TOKEN: the document end by name; NULL = the family's */
    prep_format format;
    double val_fraction;
    int64_t seed, shard_tokens, threads, pack; /* pack: T of --pack, 0 = not packed */
    int bos, no_eos, target_prompts, strict, quiet;
    jinja_budget budget; /* --template-steps, --template-memory (0: the defaults) */
    char doc_sep[64];
    size_t doc_sep_len;
} prep_args;

/* ---- the inputs (prep_input.c) ---- */

typedef struct in_file {
    char *path;
    prep_format kind; /* FMT_TEXT, FMT_JSONL, FMT_SFT, FMT_CHAT or FMT_PREF */
    uint64_t size;
    uint64_t invalid_utf8; /* a text file's ill-formed UTF-8 sequences, each encoded as U+FFFD */
} in_file;

typedef struct file_list {
    in_file *v;
    size_t n, cap;
    uint64_t bytes;
    uint64_t skipped; /* files of an earlier tessera dataset met in a walked directory */
} file_list;

/* an INPUT appended to l: a regular file, or every file of a directory as fs_walk finds them */
int prep_collect(file_list *l, const char *path);
/* each file's kind: format, or (auto) detected from its name and its first JSONL lines */
int prep_detect_kinds(file_list *l, prep_format format);
/* --pack takes sft and chat examples only */
int prep_check_pack_kinds(const file_list *l);
/* a JSONL line without its trailing "\n" / "\r\n" (and line 1's UTF-8 byte order mark);
 * whether n bytes are blank */
char *prep_trim_line(char *s, ssize_t *len, uint64_t line_no);
int prep_is_blank(const char *s, size_t n);

/* ---- the run's state ---- */

typedef struct prep_ctx {
    const prep_args *a;
    file_list files;
    tsr_tokenizer *tok;
    char tok_name[4096]; /* what the dataset records: "gpt2", else the tokenizer's absolute path */
    chat_config chat;    /* the tokenizer's tokenizer_config.json, when loaded (have_chat) */
    char chat_path[4096]; /* its path */
    tsr_lock lock;        /* OUT.lock, from before OUT.tmp is made to after it is renamed */
    int have_chat;
    prep_doc_rules rules;
    uint32_t eos, vocab;
    int with_mask, threads, tty;
    int part_val; /* the split of the document whose parts are being consumed */
    size_t part_bytes; /* PART_BYTES, or $TSR_PREP_PART_BYTES */
    double log_every;  /* PROGRESS_LOG_S, or $TSR_PREP_PROGRESS_S */
    char *buf; /* the batch's input bytes */
    size_t buf_len, buf_cap;
    prep_item *items;
    size_t n_items, items_cap;
    json_doc *jd; /* one per thread */
    tsr_dataset_writer *w[2]; /* train, val */
    prep_packer *pk[2];       /* --pack: the packers writing into w[] */
    uint64_t docs[2], tokens[2], targets[2], bad, empty, bytes_done;
    uint64_t dropped, overlong; /* --pack: examples dropped; over-length examples (reported) */
    uint64_t pairs[2], pairs_dropped; /* --format preference: pairs written; pairs dropped */
    uint64_t pair_notes[3];           /* pairs with the same answer twice, with an empty answer */
    uint64_t datasets_skipped;        /* walked files of an earlier tessera dataset (skipped) */
    prompts_side side;        /* --format prompts: the records of the prompts written */
    double t0, t_progress;
} prep_ctx;

/* ---- the stream (prep_stream.c) ---- */

/* the test knobs of the environment: TSR_PREP_PART_BYTES, TSR_PREP_PROGRESS_S */
int prep_read_knobs(prep_ctx *c);
/* the progress bar (a terminal) or line; final: the bar's last redraw */
void prep_progress(prep_ctx *c, int final);
/* every input streamed through the batches into the writers */
int prep_run(prep_ctx *c);

#endif
