/* prep_prompts.h — `tessera prep --format prompts --pack P`: the records of the prompts of
 * reinforcement learning (docs/rl.md "Prompts"). Each kept JSONL line is written as given to
 * SPLIT/prompts.jsonl beside the split's shards, line k the record of sample k (its "answer" and
 * metadata for the reward); the split's index.tsv notes the line count and the file's CRC32C
 * (data.h DATASET_PROMPTS), so a reader can tell a record file that does not belong. Internal to
 * src/prep/.
 */
#ifndef TSR_PREP_PROMPTS_H
#define TSR_PREP_PROMPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct prompts_side {
    FILE *f[2];            /* train, val: OUT.tmp/SPLIT.prompts.jsonl while prep runs */
    char path[2][4200];
    uint32_t crc[2];
    uint64_t n[2];
    uint32_t stop[4];      /* the ids that end a completion besides end of text (a chat
                            * template's eos_token and end of turn), noted as stop_ids */
    int n_stop;
} prompts_side;

/* Creates the record files in the staging directory tmp (val: the val split's too). Returns 0
 * or TSR_EXIT_DATA after tsr_error(). */
int prompts_side_open(prompts_side *s, const char *tmp, int val);
/* With a chat template: its eos_token and end-of-turn ids (chat/gen_chat.h) into s->stop. */
struct chat_config;
struct tsr_tokenizer;
void prompts_side_stops(prompts_side *s, const struct chat_config *cc,
                        const struct tsr_tokenizer *tok);
/* Appends the line (len bytes, without its newline) as split val's next record. */
int prompts_side_add(prompts_side *s, int val, const char *line, size_t len);
/* After the dataset writers closed: each written split's records moved to SPLIT/prompts.jsonl and
 * its notes added to SPLIT/index.tsv; written[k]: split k exists. 0 or TSR_EXIT_DATA. */
int prompts_side_commit(prompts_side *s, const char *tmp, const int written[2]);
/* Closes what is open (an aborted run: the staging cleanup removes the files). */
void prompts_side_close(prompts_side *s);

#endif
