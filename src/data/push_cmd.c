/* push_cmd.c — `tessera data push DIR s3://BUCKET/PREFIX`: publishes a prepared dataset to an
 * S3-compatible object store (docs/object-storage.md "Publishing"). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "data/data.h"
#include "data/data_cmd.h"
#include "data/s3.h"

static const cli_opt push_opts[] = {
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd data_push_cli = {
    "data push", "DIR s3://BUCKET/PREFIX",
    "Uploads a dataset to an S3-compatible object store: verified first (as verify-data), then "
    "its shards (and a GRPO prompts dataset's prompts.jsonl), then index.tsv last, so a reader "
    "never finds an index without all its shards. "
    "DIR: a dataset, or the directory tessera prep --out wrote (its train and val datasets go to "
    "PREFIX/train and PREFIX/val). Files over TSR_S3_PART_MB MiB (default 64) go up in multipart "
    "uploads, TSR_S3_CONNECTIONS parts at once (default 8). Endpoint and credentials: AWS_ENDPOINT_URL, AWS_PROFILE, ... "
    "(docs/object-storage.md).",
    push_opts, (int)(sizeof push_opts / sizeof push_opts[0]), NULL,
};

static int push_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    (void)val, (void)ctx;
    return cli_usage_error(c, "unhandled option", ch == 'h' ? "--help" : NULL);
}

/* Uploads dir/name as object name; *multipart counts those that went up in parts. */
static int push_file(tsr_s3 *c, const char *dir, const char *name, int *multipart) {
    char path[4096], err[S3_ERR_LEN];
    int parts = 0;
    if (tsr_snprintf(path, sizeof path, "%s/%s", dir, name)) {
        tsr_error("%s/%s: path too long", dir, name);
        return TSR_EXIT_USAGE;
    }
    if (s3_put_file(c, name, path, &parts, err)) {
        tsr_error("%s", err);
        return TSR_EXIT_DATA;
    }
    *multipart += parts;
    return 0;
}

/* 1 when dir/name is a regular file. */
static int has_file(const char *dir, const char *name) {
    char p[4096];
    struct stat sb;
    return !tsr_snprintf(p, sizeof p, "%s/%s", dir, name) && stat(p, &sb) == 0 &&
           S_ISREG(sb.st_mode);
}

static int is_dataset(const char *dir, const char *sub) {
    char p[4096];
    return !tsr_snprintf(p, sizeof p, "%s%s%s", dir, sub[0] ? "/" : "", sub) &&
           has_file(p, "index.tsv");
}

/* One dataset: verified, its shards, prompts.jsonl when it has one (GRPO prompts), then its
 * index. */
static int push_one(const char *dir, const char *url) {
    tsr_dataset *ds;
    tsr_s3 *c;
    if (dataset_open(&ds, dir, 1)) return TSR_EXIT_DATA;
    int rc = s3_open(&c, url);
    uint64_t bytes = 0;
    int multipart = 0;
    for (int k = 0; !rc && k < dataset_n_shards(ds); k++) {
        rc = push_file(c, dir, dataset_shard_name(ds, k), &multipart);
        bytes += dataset_shard_bytes(ds, k);
    }
    int prompts = !rc && has_file(dir, DATASET_PROMPTS); /* a GRPO prompts dataset's records */
    if (prompts) rc = push_file(c, dir, DATASET_PROMPTS, &multipart);
    if (!rc) rc = push_file(c, dir, "index.tsv", &multipart);
    if (!rc)
        printf("%s: pushed %d shard%s (%llu bytes; %d in multipart uploads)%s and index.tsv to %s\n",
               dir, dataset_n_shards(ds), dataset_n_shards(ds) == 1 ? "" : "s",
               (unsigned long long)bytes, multipart, prompts ? ", " DATASET_PROMPTS : "",
               s3_url(c));
    s3_close(c);
    dataset_close(ds);
    return rc;
}


int data_push(const char *dir, const char *url) {
    int rc = 0;
    if (is_dataset(dir, "") || !is_dataset(dir, "train")) return push_one(dir, url);
    char sub[4096], dst[4096];
    for (int k = 0; k < 2 && !rc; k++) { /* what tessera prep --out DIR writes */
        const char *name = k ? "val" : "train";
        if (k && !is_dataset(dir, "val")) break;
        if (tsr_snprintf(sub, sizeof sub, "%s/%s", dir, name) ||
            tsr_snprintf(dst, sizeof dst, "%s/%s", url, name))
            return TSR_EXIT_USAGE;
        rc = push_one(sub, dst);
    }
    return rc;
}

static int cmd_data_push(int argc, char **argv) {
    int rc = cli_parse(&data_push_cli, argc, argv, push_on_opt, NULL);
    if (rc) return rc < 0 ? 0 : rc;
    if (optind != argc - 2 || !s3_is_url(argv[optind + 1]))
        return cli_usage_error(&data_push_cli, "expected DIR and s3://BUCKET/PREFIX", NULL);
    return data_push(argv[optind], argv[optind + 1]);
}

int cmd_data(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "push") == 0) return cmd_data_push(argc - 1, argv + 1);
    int help = argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    fprintf(help ? stdout : stderr, "%susage: tessera data push DIR s3://BUCKET/PREFIX   (tessera "
            "data push --help)\n", help ? "" : "tessera: error: expected a data command\n");
    return help ? 0 : TSR_EXIT_USAGE;
}
