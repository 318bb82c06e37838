/* prep_doc.h — `tessera prep`'s documents: one input item (a text document or a JSONL line) to
 * its tokens and loss mask. Internal to src/prep/; the rules are documented in docs/prep.md.
 */
#ifndef TSR_PREP_DOC_H
#define TSR_PREP_DOC_H

#include <stddef.h>
#include <stdint.h>

#include "chat/chat_config.h"
#include "json.h"
#include "tokenizer/tokenizer.h"

/* FMT_PREF: {"prompt", "chosen", "rejected"} preference pairs, only when asked for (--format
 * preference); auto never picks it. FMT_PROMPTS: {"prompt"} or {"messages"} with an "answer",
 * the prompts of reinforcement learning (--format prompts; docs/rl.md), never picked by auto. */
typedef enum prep_format {
    FMT_AUTO, FMT_TEXT, FMT_JSONL, FMT_SFT, FMT_CHAT, FMT_PREF, FMT_PROMPTS, FMT_COUNT
} prep_format;

/* One unit of work: a document of a text file or one JSONL line, with its result. A preference
 * line gives two examples, back to back: the chosen one (n_first tokens), then the rejected one. */
typedef struct prep_item {
    size_t file;
    uint64_t line;   /* 1-based line of a JSONL item; 0 for text */
    size_t off, len; /* its bytes in the batch buffer */
    int status;      /* ITEM_OK, ITEM_BAD (err says why), ITEM_EMPTY or ITEM_FATAL (err says why) */
    char err[256];
    uint32_t *tok;
    uint8_t *mask;
    size_t n, cap, mask_cap;
    size_t n_first; /* FMT_PREF: tokens of the chosen example; the rejected one is the rest */
    int part;       /* FMT_TEXT: PART_WHOLE, or the part of a document streamed in parts (a large
                       file: prep_stream.c): PART_FIRST gets the BOS, PART_LAST the EOS, 0
                       neither */
    int pair_note;  /* FMT_PREF: PAIR_SAME (the two answers are one text), PAIR_EMPTY (one of them
                       is empty or white space), or 0 */
} prep_item;
enum { PAIR_SAME = 1, PAIR_EMPTY };
enum { PART_FIRST = 1, PART_LAST = 2, PART_WHOLE = 3 };
/* ITEM_FATAL: the chat template went over its render budget; prep stops (exit 2) */
enum { ITEM_OK, ITEM_BAD, ITEM_EMPTY, ITEM_FATAL };

/* How documents are framed: `bos_id` before each (with `bos`), `eos` after each (unless no_eos):
 * the tokenizer's start and end of a document (tokenizer_eos.h; both <|endoftext|> for GPT-2,
 * which has no start token). chat: the model's chat template for chat lines (chat/chat_render.h),
 * or NULL for the "ROLE: content" format. */
typedef struct prep_doc_rules {
    const tsr_tokenizer *tok;
    uint32_t eos, bos_id;
    int bos, no_eos, target_prompts;
    const chat_config *chat;
    size_t max_prompt_bytes; /* --format prompts: a longer prompt cannot fit --pack (tokenizer_bytes_bound)
                                and is skipped unread; 0 = no bound */
} prep_doc_rules;

/* Tokenizes the it->len bytes at s as a document of the given kind (FMT_TEXT: the bytes are the
 * text; else a JSONL line of that kind) into it->tok / it->mask (n tokens; buffers kept for reuse),
 * setting it->status: ITEM_OK, ITEM_EMPTY (no text), or ITEM_BAD (ITEM_FATAL: the chat template
 * went over its budget) with the reason in it->err.
 * A document is [BOS] segments [EOS], each segment tokenized on its own; masks per docs/prep.md.
 * FMT_PREF: the chosen and the rejected example, each built as an sft line {"prompt", "response":
 * the answer} is, or with a chat template as a chat line of the messages [user: prompt,
 * assistant: the answer]; it->n_first says where the second begins, it->pair_note whether the
 * pair can teach anything (prep warns: the same answer twice, or an empty one).
 * Thread-safe for distinct items and json_docs. */
void prep_tokenize(const prep_doc_rules *r, prep_format kind, const char *s, prep_item *it,
                   json_doc *jd);

#endif
