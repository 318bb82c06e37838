/* dataloader_check.c — a training dataset against the run's model (dataloader_check.h): the ids
 * it holds against model.vocab_size, its document end against the document mask's token. */
#include "data/dataloader_check.h"

#include <stdio.h>

#include "common.h"
#include "data/data.h"
#include "tokenizer/tokenizer.h"

int dataloader_check_ids(const tsr_dataset *ds, const char *path, int vocab) {
    const char *how = NULL;
    const uint32_t top = dataset_max_token_id(ds, &how);
    if (top < (uint32_t)vocab) return 0;
    tsr_error("%s: the dataset holds token ids up to %u (%s; its vocabulary has %u), but "
              "model.vocab_size = %d: the model must cover every token id the data holds (set "
              "model.vocab_size >= %u, or use data of this model's tokenizer)", path, top,
              how ? how : "its vocab_size - 1: the index records no max_token_id and data.verify "
              "= false read no token", dataset_vocab_size(ds), vocab, top + 1);
    return TSR_EXIT_USAGE;
}

/* The vocabulary (the tokenizer that made the data) is larger than the model: said once, naming
 * the ids the model cannot produce (Gemma 3: its tokenizer's <image_soft_token>, 262144). */
static void say_extra_ids(const dataloader_opts *o, const tsr_dataset *ds, const char *path,
                          uint32_t top, const char *how) {
    const uint32_t V = (uint32_t)o->cfg->model.vocab_size, N = dataset_vocab_size(ds);
    char a[96], b[96];
    tokenizer_id_label(o->tok, V, a, sizeof a);
    tokenizer_id_label(o->tok, N - 1, b, sizeof b);
    if (N - V == 1)
        printf("%s: its vocabulary has %u ids, the model %u (model.vocab_size): the model cannot "
               "produce id %u%s, which the data never holds (its largest id: %u, %s)\n", path, N,
               V, V, a, top, how);
    else
        printf("%s: its vocabulary has %u ids, the model %u (model.vocab_size): the model cannot "
               "produce ids %u%s .. %u%s (%u ids), which the data never holds (its largest id: "
               "%u, %s)\n", path, N, V, V, a, N - 1, b, N - V, top, how);
}

/* attn_mask = document over data without recorded segments splits at model.eot_token: the
 * dataset's document end (tessera prep's note) must be that token, or every document would see
 * the ones before it in its sample (exit 1: the recipe and the data disagree). */
static int check_document_end(const dataloader_opts *o, const tsr_dataset *ds, const char *path) {
    const tsr_model_config *m = &o->cfg->model;
    uint64_t end = 0;
    char a[96], b[96];
    if (m->attn_mask != TSR_MASK_DOCUMENT || dataset_has_segments(ds) ||
        dataset_index_note(path, "document_end", &end) != 1 || end == (uint64_t)m->eot_token)
        return 0;
    tokenizer_id_label(o->tok, (uint32_t)end, a, sizeof a);
    tokenizer_id_label(o->tok, (uint32_t)m->eot_token, b, sizeof b);
    tsr_error("%s: its documents end with id %llu%s (tessera prep's document end: the "
              "document_end of its index.tsv), but model.eot_token = %d%s is where "
              "model.attn_mask = \"document\" splits them: the documents would attend to each "
              "other; set model.eot_token = %llu, or prep the data again ending documents with "
              "the recipe's token (tessera prep --eos TOKEN; docs/prep.md)", path,
              (unsigned long long)end, a, m->eot_token, b, (unsigned long long)end);
    return TSR_EXIT_USAGE;
}

int dataloader_check_model(const dataloader_opts *o, const tsr_dataset *ds, const char *path,
                           int first) {
    const char *how = NULL;
    const uint32_t top = dataset_max_token_id(ds, &how);
    const int vocab = o->cfg->model.vocab_size;
    TSR_CHECK(dataloader_check_ids(ds, path, vocab));
    if (first && o->dist->rank == 0 && dataset_vocab_size(ds) > (uint32_t)vocab)
        say_extra_ids(o, ds, path, top, how);
    return check_document_end(o, ds, path);
}
