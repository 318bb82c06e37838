/* prep_prompts.c — the prompts' record files of `tessera prep --format prompts` (prep_prompts.h). */
#include "prep/prep_prompts.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "data/data.h"
#include "chat/gen_chat.h"
#include "prep/prep_pack.h"

static const char *const split_name[2] = {"train", "val"};

static int side_fail(const char *path, const char *what) {
    tsr_error("%s: %s failed: %s", path, what, strerror(errno));
    return TSR_EXIT_DATA;
}

int prompts_side_open(prompts_side *s, const char *tmp, int val) {
    memset(s, 0, sizeof *s);
    for (int k = 0; k < 1 + !!val; k++) {
        if (tsr_snprintf(s->path[k], sizeof s->path[k], "%s/%s.%s", tmp, split_name[k],
                         DATASET_PROMPTS)) {
            tsr_error("%s: path too long", tmp);
            return TSR_EXIT_DATA;
        }
        if (!(s->f[k] = fopen(s->path[k], "wb"))) return side_fail(s->path[k], "create");
    }
    return 0;
}

void prompts_side_stops(prompts_side *s, const chat_config *cc, const tsr_tokenizer *tok) {
    gen_chat gc = {.cc = *cc, .loaded = 1}; /* (a view of prep's: not freed here) */
    const uint32_t ids[3] = {gen_chat_eos_id(&gc, tok), gen_chat_end_of_turn(&gc, tok, NULL, "Hi"),
                             gen_chat_tool_call_end(&gc, tok)};
    for (int k = 0; k < 3; k++) {
        int seen = ids[k] == UINT32_MAX;
        for (int i = 0; i < s->n_stop; i++) seen |= s->stop[i] == ids[k];
        if (!seen) s->stop[s->n_stop++] = ids[k];
    }
}

int prompts_side_add(prompts_side *s, int val, const char *line, size_t len) {
    if (fwrite(line, 1, len, s->f[val]) != len || fputc('\n', s->f[val]) == EOF)
        return side_fail(s->path[val], "write");
    s->crc[val] = tsr_crc32c(tsr_crc32c(s->crc[val], line, len), "\n", 1);
    s->n[val]++;
    return 0;
}

/* split k's file closed, moved into its directory, noted in its index */
static int commit_one(prompts_side *s, const char *tmp, int k) {
    char dir[4300], dst[4400], lines[512];
    FILE *f = s->f[k];
    s->f[k] = NULL;
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    if ((fclose(f) != 0 || bad)) return side_fail(s->path[k], "write");
    snprintf(dir, sizeof dir, "%s/%s", tmp, split_name[k]);
    if (tsr_snprintf(dst, sizeof dst, "%s/%s", dir, DATASET_PROMPTS)) return side_fail(dir, "path");
    if (rename(s->path[k], dst) != 0) return side_fail(dst, "rename");
    int o = snprintf(lines, sizeof lines,
                     "# prompts\t%llu\t(tessera prep --format prompts: sample k's record is line "
                     "k of prompts.jsonl; docs/rl.md)\n# prompts_crc32c\t%u\t(of prompts.jsonl)\n",
                     (unsigned long long)s->n[k], s->crc[k]);
    for (int i = 0; i < s->n_stop; i++) /* "# stop_ids\t128001,128009\t(...)" */
        o += snprintf(lines + o, sizeof lines - (size_t)o, "%s%u", i ? "," : "# stop_ids\t",
                      s->stop[i]);
    if (s->n_stop)
        snprintf(lines + o, sizeof lines - (size_t)o, "\t(the chat template's eos_token and end "
                 "of turn: a completion ends there)\n");
    return pack_note_lines(dir, lines);
}

int prompts_side_commit(prompts_side *s, const char *tmp, const int written[2]) {
    for (int k = 0; k < 2; k++) {
        if (!s->f[k]) continue;
        if (written[k]) TSR_CHECK(commit_one(s, tmp, k));
        else {
            fclose(s->f[k]);
            s->f[k] = NULL;
            unlink(s->path[k]);
        }
    }
    return 0;
}

void prompts_side_close(prompts_side *s) {
    for (int k = 0; k < 2; k++)
        if (s->f[k]) fclose(s->f[k]), s->f[k] = NULL;
}
