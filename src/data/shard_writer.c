/* shard_writer.c — writes a dataset (docs/data-format.md): shards under DIR.tmp, then the index,
 * fsync, and one rename into place, so a failure never leaves a partial dataset at DIR. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "data/data.h"
#include "data/shard_format.h"


typedef struct shard_rec {
    uint64_t n_tokens;
    uint32_t crc;
} shard_rec;

struct tsr_dataset_writer {
    char *dir, *tmp;      /* the final directory and DIR.tmp */
    uint32_t vocab, width;
    int with_mask;
    uint64_t shard_tokens;
    FILE *f, *mf;         /* the open shard, and its mask side file (copied in at the end) */
    char *path, *mpath;   /* their paths */
    uint64_t cur_n;       /* tokens in the open shard */
    uint32_t crc;         /* running payload CRC of the open shard's tokens */
    shard_rec *recs;      /* finished shards */
    char tokenizer[TOKENIZER_MAX_LEN + 1]; /* recorded in the index when set */
    uint32_t max_id;      /* the largest token id appended (the index's max_token_id) */
    int n_recs, cap_recs;
};

static int io_fail(const char *path, const char *what) {
    tsr_error("%s: %s failed: %s", path, what, strerror(errno));
    return TSR_EXIT_DATA;
}

static int fsync_path(const char *path, int is_dir) {
    int fd = open(path, (is_dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_fail(path, "open for fsync");
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    errno = err;
    /* Some filesystems refuse fsync on directories (EINVAL); the data itself was synced. */
    return (rc != 0 && !(is_dir && (errno == EINVAL || errno == EROFS))) ? io_fail(path, "fsync")
                                                                        : 0;
}

/* Files the writer creates inside DIR.tmp: shard-*.bin, shard-*.bin.mask.tmp, index.tsv. */
static int writer_owned_name(const char *name) {
    size_t n = strlen(name);
    if (strcmp(name, INDEX_NAME) == 0) return 1;
    if (strncmp(name, "shard-", 6) != 0) return 0;
    return (n > 4 && strcmp(name + n - 4, ".bin") == 0) ||
           (n > 13 && strcmp(name + n - 13, ".bin.mask.tmp") == 0);
}

/* Removes DIR.tmp if it only holds files the writer creates; errors if anything else is there. */
static int remove_tmp_dir(const char *tmp) {
    DIR *d = opendir(tmp);
    if (!d) return errno == ENOENT ? 0 : io_fail(tmp, "opendir");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!writer_owned_name(e->d_name)) continue;
        char *p = data_path_join(tmp, e->d_name);
        if (unlink(p) != 0) tsr_warn("%s: unlink failed: %s", p, strerror(errno));
        free(p);
    }
    closedir(d);
    if (rmdir(tmp) != 0) {
        tsr_error("%s: cannot remove the temporary directory: %s (it holds files tessera did not "
                  "write; remove it by hand)", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    return 0;
}

static void writer_free(tsr_dataset_writer *w) {
    if (w->f) fclose(w->f);
    if (w->mf) fclose(w->mf);
    tsr_free_all(w->dir, w->tmp, w->path, w->mpath, w->recs, w);
}

int dataset_writer_open(tsr_dataset_writer **out, const char *dir, uint32_t vocab_size,
                        int with_mask, uint64_t shard_tokens) {
    *out = NULL;
    if (vocab_size < 1 || vocab_size > MAX_VOCAB) {
        tsr_error("%s: vocab size %u out of range [1, %llu]", dir, vocab_size,
                  (unsigned long long)MAX_VOCAB);
        return TSR_EXIT_DATA;
    }
    if (shard_tokens < 1 || shard_tokens > MAX_SHARD_TOKENS) {
        tsr_error("%s: shard size %llu tokens out of range [1, 2^60]", dir,
                  (unsigned long long)shard_tokens);
        return TSR_EXIT_DATA;
    }
    char *d = data_dir_dup(dir);
    struct stat st;
    int found = lstat(d, &st) == 0;
    if (found || errno != ENOENT) {
        tsr_error("%s: %s; refusing to overwrite (choose a new output directory or remove it)",
                  d, found ? "already exists" : strerror(errno));
        free(d);
        return TSR_EXIT_DATA;
    }
    size_t n = strlen(d) + 5;
    char *tmp = tsr_malloc(n);
    snprintf(tmp, n, "%s.tmp", d);
    if (lstat(tmp, &st) == 0) {
        tsr_warn("%s: removing the temporary directory of an interrupted write", tmp);
        if (remove_tmp_dir(tmp)) {
            free(d);
            free(tmp);
            return TSR_EXIT_DATA;
        }
    }
    if (mkdir(tmp, 0777) != 0) {
        int rc = io_fail(tmp, "mkdir");
        free(d);
        free(tmp);
        return rc;
    }
    tsr_dataset_writer *w = tsr_calloc(1, sizeof *w);
    w->dir = d;
    w->tmp = tmp;
    w->vocab = vocab_size;
    w->width = shard_width_for_vocab(vocab_size);
    w->with_mask = with_mask == DATASET_MASK_SEGMENTS ? DATASET_MASK_SEGMENTS : with_mask ? DATASET_MASK : 0;
    w->shard_tokens = shard_tokens;
    *out = w;
    return 0;
}

static int shard_start(tsr_dataset_writer *w) {
    char name[64];
    snprintf(name, sizeof name, "shard-%05d.bin", w->n_recs);
    free(w->path);
    free(w->mpath);
    w->path = data_path_join(w->tmp, name);
    size_t n = strlen(w->path) + 10;
    w->mpath = tsr_malloc(n);
    snprintf(w->mpath, n, "%s.mask.tmp", w->path);
    uint8_t zero[SHARD_HEADER_SIZE] = {0};
    w->f = fopen(w->path, "wb");
    if (!w->f) return io_fail(w->path, "create");
    if (fwrite(zero, 1, sizeof zero, w->f) != sizeof zero) return io_fail(w->path, "write");
    if (w->with_mask) {
        w->mf = fopen(w->mpath, "w+b");
        if (!w->mf) return io_fail(w->mpath, "create");
    }
    w->cur_n = 0;
    w->crc = 0;
    return 0;
}

/* Appends the mask side file to the shard, continuing the payload CRC; removes the side file. */
static int shard_copy_mask(tsr_dataset_writer *w) {
    uint8_t buf[IO_CHUNK];
    if (fflush(w->mf) != 0 || fseek(w->mf, 0, SEEK_SET) != 0) return io_fail(w->mpath, "rewind");
    uint64_t copied = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, w->mf)) > 0) {
        w->crc = tsr_crc32c(w->crc, buf, got);
        if (fwrite(buf, 1, got, w->f) != got) return io_fail(w->path, "write");
        copied += got;
    }
    if (ferror(w->mf)) return io_fail(w->mpath, "read");
    if (copied != w->cur_n) {
        tsr_error("%s: read back %llu mask bytes, wrote %llu", w->mpath,
                  (unsigned long long)copied, (unsigned long long)w->cur_n);
        return TSR_EXIT_DATA;
    }
    fclose(w->mf);
    w->mf = NULL;
    if (unlink(w->mpath) != 0) return io_fail(w->mpath, "unlink");
    return 0;
}

/* Completes the open shard: mask payload, final header, fsync, close. */
static int shard_finish(tsr_dataset_writer *w) {
    if (w->with_mask && shard_copy_mask(w)) return TSR_EXIT_DATA;
    shard_header h = {
        .version = TSR_DATA_VERSION, .header_size = SHARD_HEADER_SIZE, .token_width = w->width,
        .flags = shard_flags(w->with_mask), .vocab_size = w->vocab,
        .shard_no = (uint32_t)w->n_recs, .n_tokens = w->cur_n, .token_offset = SHARD_HEADER_SIZE,
        .mask_offset = w->with_mask ? SHARD_HEADER_SIZE + w->cur_n * w->width : 0,
        .payload_crc = w->crc,
    };
    uint8_t hb[SHARD_HEADER_SIZE];
    shard_header_encode(&h, hb);
    if (fseek(w->f, 0, SEEK_SET) != 0) return io_fail(w->path, "seek");
    if (fwrite(hb, 1, sizeof hb, w->f) != sizeof hb) return io_fail(w->path, "write");
    if (fflush(w->f) != 0) return io_fail(w->path, "write");
    if (fsync(fileno(w->f)) != 0) return io_fail(w->path, "fsync");
    int rc = fclose(w->f);
    w->f = NULL;
    if (rc != 0) return io_fail(w->path, "close");
    if (w->n_recs == w->cap_recs) {
        w->cap_recs = w->cap_recs ? 2 * w->cap_recs : 16;
        shard_rec *nr = tsr_malloc((size_t)w->cap_recs * sizeof *nr);
        if (w->n_recs) memcpy(nr, w->recs, (size_t)w->n_recs * sizeof *nr);
        free(w->recs);
        w->recs = nr;
    }
    w->recs[w->n_recs++] = (shard_rec){.n_tokens = w->cur_n, .crc = w->crc};
    return 0;
}

/* Writes n tokens (and mask bytes) that fit the open shard. */
static int shard_write(tsr_dataset_writer *w, const uint32_t *tokens, const uint8_t *mask,
                       size_t n) {
    uint8_t buf[IO_CHUNK * 4];
    while (n > 0) {
        size_t m = n < IO_CHUNK ? n : IO_CHUNK;
        for (size_t j = 0; j < m; j++) {
            if (w->width == 2) {
                buf[2 * j] = (uint8_t)tokens[j];
                buf[2 * j + 1] = (uint8_t)(tokens[j] >> 8);
            } else {
                shard_put_u32(buf + 4 * j, tokens[j]);
            }
        }
        size_t bytes = m * w->width;
        w->crc = tsr_crc32c(w->crc, buf, bytes);
        if (fwrite(buf, 1, bytes, w->f) != bytes) return io_fail(w->path, "write");
        if (w->with_mask && fwrite(mask, 1, m, w->mf) != m) return io_fail(w->mpath, "write");
        w->cur_n += m;
        tokens += m;
        if (mask) mask += m;
        n -= m;
    }
    return 0;
}

int dataset_writer_append(tsr_dataset_writer *w, const uint32_t *tokens, const uint8_t *mask,
                          size_t n) {
    if (w->with_mask && !mask && n > 0) {
        tsr_error("%s: the dataset has a loss mask, but no mask bytes were given", w->dir);
        return TSR_EXIT_DATA;
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] >= w->vocab) {
            tsr_error("%s: token %u (input position %zu) is >= vocab size %u", w->dir, tokens[i],
                      i, w->vocab);
            return TSR_EXIT_DATA;
        }
        if (tokens[i] > w->max_id) w->max_id = tokens[i];
        if (w->with_mask && mask[i] > shard_mask_max(w->with_mask)) {
            tsr_error("%s: mask byte %u (input position %zu), expected 0 to %u", w->dir, mask[i],
                      i, shard_mask_max(w->with_mask));
            return TSR_EXIT_DATA;
        }
    }
    while (n > 0) {
        if (!w->f && shard_start(w)) return TSR_EXIT_DATA;
        uint64_t room = w->shard_tokens - w->cur_n;
        size_t m = (uint64_t)n < room ? n : (size_t)room;
        if (shard_write(w, tokens, w->with_mask ? mask : NULL, m)) return TSR_EXIT_DATA;
        tokens += m;
        if (w->with_mask) mask += m;
        n -= m;
        if (w->cur_n == w->shard_tokens && shard_finish(w)) return TSR_EXIT_DATA;
    }
    return 0;
}

int dataset_writer_set_tokenizer(tsr_dataset_writer *w, const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] <= ' ' || name[i] == 0x7f) n = SIZE_MAX;
    if (n == 0 || n > TOKENIZER_MAX_LEN) {
        tsr_error("tokenizer \"%.200s\": a dataset records a tokenizer name or path of 1 to %d "
                  "bytes without spaces or control characters", name, TOKENIZER_MAX_LEN);
        return TSR_EXIT_USAGE;
    }
    memcpy(w->tokenizer, name, n + 1);
    return 0;
}

static int writer_write_index(tsr_dataset_writer *w) {
    char *ipath = data_path_join(w->tmp, INDEX_NAME);
    FILE *f = fopen(ipath, "w");
    if (!f) {
        int rc = io_fail(ipath, "create");
        free(ipath);
        return rc;
    }
    uint64_t total = 0;
    for (int k = 0; k < w->n_recs; k++) total += w->recs[k].n_tokens;
    fprintf(f, "%s\t%d\n", INDEX_MAGIC, TSR_DATA_VERSION);
    fprintf(f, "# tessera token dataset; format: docs/data-format.md\n");
    if (total) /* the ids a model must cover: below its vocab_size (docs/data-format.md) */
        fprintf(f, "# max_token_id\t%u\t(the largest token id in the shards)\n", w->max_id);
    fprintf(f, "vocab_size\t%u\ntoken_width\t%u\nhas_mask\t%d\nn_shards\t%d\nn_tokens\t%llu\n",
            w->vocab, w->width, w->with_mask, w->n_recs, (unsigned long long)total);
    if (w->tokenizer[0]) fprintf(f, "tokenizer\t%s\n", w->tokenizer);
    fprintf(f, "# shard\tfile\tn_tokens\tpayload_crc32c\n");
    for (int k = 0; k < w->n_recs; k++)
        fprintf(f, "shard\tshard-%05d.bin\t%llu\t%08x\n", k,
                (unsigned long long)w->recs[k].n_tokens, w->recs[k].crc);
    fprintf(f, "end\n");
    int rc = 0;
    if (fflush(f) != 0 || ferror(f)) rc = io_fail(ipath, "write");
    else if (fsync(fileno(f)) != 0) rc = io_fail(ipath, "fsync");
    if (fclose(f) != 0 && !rc) rc = io_fail(ipath, "close");
    free(ipath);
    return rc;
}

/* The directory that holds `path` ("." when there is no slash). */
static char *parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return data_dir_dup(".");
    if (slash == path) return data_dir_dup("/");
    size_t n = (size_t)(slash - path);
    char *p = tsr_malloc(n + 1);
    memcpy(p, path, n);
    p[n] = '\0';
    return p;
}

static int writer_commit(tsr_dataset_writer *w) {
    if (w->f && shard_finish(w)) return TSR_EXIT_DATA;
    if (writer_write_index(w)) return TSR_EXIT_DATA;
    if (fsync_path(w->tmp, 1)) return TSR_EXIT_DATA;
    struct stat st;
    if (lstat(w->dir, &st) == 0) {
        tsr_error("%s: appeared while the dataset was being written; refusing to overwrite it",
                  w->dir);
        return TSR_EXIT_DATA;
    }
    if (rename(w->tmp, w->dir) != 0) {
        tsr_error("%s: rename to %s failed: %s", w->tmp, w->dir, strerror(errno));
        return TSR_EXIT_DATA;
    }
    char *parent = parent_dir(w->dir);
    int rc = fsync_path(parent, 1);
    free(parent);
    return rc;
}

int dataset_writer_close(tsr_dataset_writer *w) {
    int rc = writer_commit(w);
    if (rc) {
        dataset_writer_abort(w);
        return TSR_EXIT_DATA;
    }
    writer_free(w);
    return 0;
}

void dataset_writer_abort(tsr_dataset_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->mf) fclose(w->mf);
    w->f = w->mf = NULL;
    remove_tmp_dir(w->tmp);
    writer_free(w);
}

int dataset_split_remove_staging(const char *tmp) {
    static const char *const subs[] = {"train", "val", "train.tmp", "val.tmp"};
    char path[4096], file[4096 + 256];
    for (size_t k = 0; k < sizeof subs / sizeof subs[0]; k++) {
        if (tsr_snprintf(path, sizeof path, "%s/%s", tmp, subs[k])) return TSR_EXIT_DATA;
        DIR *d = opendir(path);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (!strncmp(e->d_name, "shard-", 6) || !strcmp(e->d_name, "index.tsv") ||
                !strcmp(e->d_name, DATASET_PROMPTS))
                if (!tsr_snprintf(file, sizeof file, "%s/%s", path, e->d_name)) unlink(file);
        closedir(d);
        rmdir(path);
    }
    for (size_t k = 0; k < 2; k++) /* prep --format prompts: the records being written */
        if (!tsr_snprintf(path, sizeof path, "%s/%s.%s", tmp, subs[k], DATASET_PROMPTS))
            unlink(path);
    if (rmdir(tmp) != 0 && errno != ENOENT) {
        tsr_error("%s: cannot remove: %s (it holds files tessera did not write; remove it by "
                  "hand)", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    return 0;
}
