/* hf_tokjson.c — loading a Hugging Face tokenizer.json (byte-level or SentencePiece-style BPE) with
 * the JSON parser of src/base/json.c. What is accepted is listed in hf_tok.h; every refusal names
 * the file, the key and what was expected. Byte-level vocab strings are mapped (GPT-2's
 * bytes_to_unicode) back to bytes here, so the rest works on bytes; SentencePiece-style ones
 * (model.byte_fallback) are kept as written (key_bytes). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fsutil.h"
#include "json.h"
#include "tokenizer/hf_tok_internal.h"
#include "tokenizer/tokenizer_internal.h"

#define MAX_IDS (1u << 24) /* ids above this are refused (vocabularies to 262K and far beyond) */
#define MIN_SPARSE_IDS (1u << 17) /* ids up to this are allowed however few are given */

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return tsr_hash64(h);
}

static const uint8_t *id_bytes(const hf_tok *t, uint32_t id, size_t *n) {
    *n = t->off[id + 1] - t->off[id];
    return t->blob + t->off[id];
}

uint32_t hf_vocab_find(const hf_tok *t, const uint8_t *p, size_t n) {
    for (uint64_t s = hash_bytes(p, n) & t->vmask;; s = (s + 1) & t->vmask) {
        uint32_t id = t->vslot[s];
        if (id == HF_NONE) return HF_NONE;
        size_t m;
        const uint8_t *q = id_bytes(t, id, &m);
        if (m == n && memcmp(p, q, n) == 0) return id;
    }
}

/* hf_merge_find of a tokenizer with ranks, not merges (the tiktoken format): (l, r) merges when the
 * bytes of l then r are a token, at that token's rank, which is its id. */
static uint32_t rank_merge_find(const hf_tok *t, uint32_t l, uint32_t r, uint32_t *res) {
    uint8_t buf[2 * HF_RANK_TOKEN_MAX];
    size_t nl = t->off[l + 1] - t->off[l], nr = t->off[r + 1] - t->off[r];
    if (nl + nr > t->max_tok_len) return HF_NONE;
    memcpy(buf, t->blob + t->off[l], nl);
    memcpy(buf + nl, t->blob + t->off[r], nr);
    return *res = hf_vocab_find(t, buf, nl + nr);
}

uint32_t hf_merge_find(const hf_tok *t, uint32_t l, uint32_t r, uint32_t *res) {
    if (t->rank_merges) return rank_merge_find(t, l, r, res);
    uint64_t key = (uint64_t)l << 32 | r;
    for (uint64_t s = tsr_hash64(key) & t->mmask;; s = (s + 1) & t->mmask) {
        if (t->mkey[s] == key) {
            *res = t->mres[s];
            return t->mrank[s];
        }
        if (t->mkey[s] == UINT64_MAX) return HF_NONE;
    }
}

/* byte-level mapping undone: code point -> byte, or -1 */
static int unmap_cp(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp < 256 || cp > 256 + 67) return -1;
    int k = (int)(cp - 256), b; /* the k-th byte outside the ranges above, in byte order */
    for (b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        if (!printable && k-- == 0) return b;
    }
    return -1;
}

/* s (byte-level mapped UTF-8) -> bytes in out (cap >= len); returns the byte count or -1. */
static long unmap_str(const char *s, size_t len, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += tsr_utf8_next((const uint8_t *)s + i, len - i, &cp);
        int b = unmap_cp(cp);
        if (b < 0) return -1;
        out[o++] = (uint8_t)b;
    }
    return (long)o;
}

/* A vocab or merge string as bytes: byte-level mapped ones through the map, SentencePiece-style
 * ones (t->spm) as written. Returns the byte count, or -1 (not byte-level text). */
static long key_bytes(const hf_tok *t, const char *s, size_t len, uint8_t *out) {
    if (!t->spm) return unmap_str(s, len, out);
    memcpy(out, s, len);
    return (long)len;
}

static int fail(const char *path, const char *what) {
    tsr_error("%s: %s", path, what);
    return TSR_EXIT_DATA;
}

static int is_type(const json_value *v, const char *type) {
    const json_value *t = json_get(v, "type");
    return t && t->type == JSON_STRING && strcmp(t->str, type) == 0;
}

static int bool_is(const json_value *v, const char *key, int want) {
    const json_value *b = json_get(v, key);
    if (!b || b->type == JSON_NULL) return !want;
    return (b->type == JSON_TRUE) == want && (b->type == JSON_TRUE || b->type == JSON_FALSE);
}

static int is_metaspace(const json_value *v) {
    return v && v->type == JSON_STRING && strcmp(v->str, "\u2581") == 0;
}

/* Replace(String from -> to) */
static int is_replace(const json_value *v, const char *from, int to_metaspace) {
    const json_value *pat = json_get(v, "pattern"), *str = pat ? json_get(pat, "String") : NULL;
    const json_value *c = json_get(v, "content");
    int from_ok = !strcmp(from, " ") ? str && str->type == JSON_STRING && !strcmp(str->str, " ")
                                     : is_metaspace(str);
    return is_type(v, "Replace") && from_ok && c && c->type == JSON_STRING &&
           (to_metaspace ? is_metaspace(c) : !strcmp(c->str, " "));
}

/* A Metaspace pre-tokenizer's or decoder's optional string key (*out NULL when absent or null):
 * 0, or fail() when it is not a string. */
static int opt_string(const json_value *v, const char *key, const char *where, const char *path,
                      const char **out) {
    const json_value *x = json_get(v, key);
    *out = x && x->type == JSON_STRING ? x->str : NULL;
    if (!x || x->type == JSON_NULL || x->type == JSON_STRING) return 0;
    char msg[200];
    tsr_snprintf(msg, sizeof msg, "%s.%s: expected a string", where, key);
    return fail(path, msg);
}

/* The keys of a Metaspace pre-tokenizer or decoder (where: "pre_tokenizer" or "decoder"):
 * replacement (and the old str_rep) "\u2581"; prepend_scheme always (the default), first or never;
 * add_prefix_space true, false or absent; split false or absent in a pre-tokenizer (true: HF
 * tokenizers cuts before every U+2581, so "\u2581\u2581" is never one token, and transformers.js
 * never cuts; refused rather than pick one), either in a decoder (unused). add_prefix_space
 * false means never; absent, the scheme rules, as in HF tokenizers and transformers.js since its
 * PR #1451 (3.7.2 reads absent as false and so never prepends to Mistral's file, whose ids then
 * differ from the model's). Fills *scheme. */
static int metaspace_keys(const json_value *v, const char *where, const char *path, hf_prepend *scheme) {
    char msg[300];
    const json_value *rep = json_get(v, "replacement"), *aps = json_get(v, "add_prefix_space");
    const json_value *split = json_get(v, "split");
    const char *str_rep, *ps;
    TSR_CHECK(opt_string(v, "str_rep", where, path, &str_rep));
    TSR_CHECK(opt_string(v, "prepend_scheme", where, path, &ps));
    if (!is_metaspace(rep) || (str_rep && strcmp(str_rep, "\u2581") != 0)) {
        tsr_snprintf(msg, sizeof msg, "%s.replacement: expected \"\u2581\" (U+2581)", where);
        return fail(path, msg);
    }
    static const char *const names[HF_PREPEND_COUNT] = {"never", "first", "always"};
    _Static_assert(HF_PREPEND_COUNT == 3, "one name per prepend scheme");
    *scheme = HF_PREPEND_ALWAYS;
    for (int k = 0; ps && k < HF_PREPEND_COUNT; k++)
        if (strcmp(ps, names[k]) == 0) *scheme = (hf_prepend)k, ps = NULL;
    if (ps) {
        tsr_snprintf(msg, sizeof msg, "%s.prepend_scheme: '%.40s': expected always, first or never", where, ps);
        return fail(path, msg);
    }
    for (int k = 0; k < 2; k++) {
        const json_value *b = k ? split : aps;
        if (b && b->type != JSON_NULL && b->type != JSON_TRUE && b->type != JSON_FALSE) {
            tsr_snprintf(msg, sizeof msg, "%s.%s: expected true or false", where, k ? "split" : "add_prefix_space");
            return fail(path, msg);
        }
    }
    if (split && split->type == JSON_TRUE && strcmp(where, "pre_tokenizer") == 0)
        return fail(path, "pre_tokenizer.split: true is not supported (HF tokenizers then cuts before "
                          "every \u2581, transformers.js does not; Mistral's files have false)");
    if (aps && aps->type == JSON_FALSE) *scheme = HF_PREPEND_NEVER;
    return 0;
}

/* The SentencePiece-style normalizer and pre-tokenizer (Llama 2, Gemma 3, Mistral); fills prepend,
 * metaspace, ms_prepend. */
static int check_spm_normalizer(hf_tok *t, const json_value *root, const char *path) {
    const json_value *nz = json_get(root, "normalizer"), *pt = json_get(root, "pre_tokenizer");
    const json_value *seq = nz ? json_get(nz, "normalizers") : NULL;
    if (pt && is_type(pt, "Metaspace")) {
        if (nz && nz->type != JSON_NULL)
            return fail(path, "normalizer: expected null with a Metaspace pre_tokenizer (Mistral)");
        t->metaspace = 1;
        return metaspace_keys(pt, "pre_tokenizer", path, &t->ms_prepend);
    }
    if (nz && is_type(nz, "Sequence") && seq && seq->type == JSON_ARRAY && seq->len == 2 &&
        is_type(seq->child, "Prepend") && is_metaspace(json_get(seq->child, "prepend")) &&
        is_replace(seq->child->next, " ", 1))
        t->prepend = 1;
    else if (!nz || !is_replace(nz, " ", 1))
        return fail(path, "normalizer: expected Replace(\" \" -> \"\u2581\"), or Sequence[Prepend(\"\u2581\"), "
                          "that Replace] (SentencePiece-style BPE: Llama 2, Gemma 3), or null with a "
                          "Metaspace pre_tokenizer (Mistral)");
    if (pt && pt->type != JSON_NULL) {
        const json_value *pat = json_get(pt, "pattern"), *str = pat ? json_get(pat, "String") : NULL;
        const json_value *beh = json_get(pt, "behavior");
        if (!is_type(pt, "Split") || !str || str->type != JSON_STRING || strcmp(str->str, " ") ||
            !beh || beh->type != JSON_STRING || strcmp(beh->str, "MergedWithPrevious") ||
            !bool_is(pt, "invert", 0))
            return fail(path, "pre_tokenizer: expected null or Split(String \" \", MergedWithPrevious) "
                              "with a Replace normalizer, or Metaspace with normalizer null");
    }
    return 0;
}

/* The SentencePiece-style decoder; fills strip_first, dec_bytes. Metaspace: U+2581 -> ' ', the
 * first token's leading space dropped when add_prefix_space is true, or absent and prepend_scheme
 * is not never (transformers.js reads only add_prefix_space here), and no byte fallback: <0xXX>
 * decodes as that text. */
static int check_spm_decoder(hf_tok *t, const json_value *root, const char *path) {
    const json_value *dec = json_get(root, "decoder"), *ds = dec ? json_get(dec, "decoders") : NULL;
    if (dec && is_type(dec, "Metaspace")) {
        hf_prepend scheme;
        TSR_CHECK(metaspace_keys(dec, "decoder", path, &scheme));
        t->strip_first = bool_is(dec, "add_prefix_space", 1) || scheme != HF_PREPEND_NEVER;
        return 0;
    }
    const json_value *d = ds && ds->type == JSON_ARRAY ? ds->child : NULL;
    if (!dec || !is_type(dec, "Sequence") || !d || !is_replace(d, "\u2581", 0) ||
        !is_type(d->next, "ByteFallback") || !is_type(d->next->next, "Fuse"))
        return fail(path, "decoder: expected Sequence[Replace(\"\u2581\" -> \" \"), ByteFallback, Fuse, "
                          "Strip(\" \", 1, 0) optional], or Metaspace");
    t->dec_bytes = 1;
    const json_value *st = d->next->next->next;
    if (st) {
        const json_value *c = json_get(st, "content"), *a = json_get(st, "start"), *b = json_get(st, "stop");
        if (!is_type(st, "Strip") || !c || c->type != JSON_STRING || strcmp(c->str, " ") || !a ||
            a->type != JSON_NUMBER || a->num != 1 || !b || b->type != JSON_NUMBER || b->num != 0 || st->next)
            return fail(path, "decoder.decoders[3]: expected Strip(\" \", start 1, stop 0) as the last one");
        t->strip_first = 1;
    }
    return 0;
}

static int check_spm_pipeline(hf_tok *t, const json_value *root, const char *path) {
    TSR_CHECK(check_spm_normalizer(t, root, path));
    return check_spm_decoder(t, root, path);
}

/* pre_tokenizer.pretokenizers[k], sp: a Split with pattern.Regex, behavior Isolated, invert false;
 * its Regex in *re. Returns 0 or fail(). */
static int split_regex(const json_value *sp, int k, const char *path, const char **re) {
    char msg[200];
    const json_value *pat = json_get(sp, "pattern"), *r = pat ? json_get(pat, "Regex") : NULL;
    const json_value *beh = json_get(sp, "behavior");
    *re = r && r->type == JSON_STRING ? r->str : NULL;
    if (is_type(sp, "Split") && *re && beh && beh->type == JSON_STRING && !strcmp(beh->str, "Isolated") &&
        bool_is(sp, "invert", 0))
        return 0;
    tsr_snprintf(msg, sizeof msg, "pre_tokenizer.pretokenizers[%d]: expected Split with pattern.Regex, "
                 "behavior Isolated, invert false", k);
    return fail(path, msg);
}

/* The Splits before ByteLevel in pre_tokenizer.pretokenizers (n of them: 1, or DeepSeek-V3's 3,
 * whose patterns must be its own, in order); fills t->split. */
static int check_splits(hf_tok *t, const json_value *sp, int n, const char *path) {
    char msg[400];
    const char *re;
    for (int k = 0; k < n; k++, sp = sp->next) {
        TSR_CHECK(split_regex(sp, k, path, &re));
        t->split = n == 1 ? hf_split_kind_of(re) : strcmp(re, hf_deepseek_patterns[k]) ? HF_SPLIT_COUNT
                                                                                       : HF_SPLIT_DEEPSEEK_V3;
        if (t->split != HF_SPLIT_COUNT) continue;
        tsr_snprintf(msg, sizeof msg, "pre_tokenizer.pretokenizers[%d].pattern.Regex: unknown pattern "
                     "'%.250s' (known: %s)", k, re, n == 1 ? "Llama 3's, Qwen 2/3's, gpt-oss's"
                                                           : "DeepSeek-V3's three, in its order");
        return fail(path, msg);
    }
    return 0;
}

/* The accepted pipeline around the model; fills split and nfc. */
static int check_pipeline(hf_tok *t, const json_value *root, const char *path) {
    const json_value *nz = json_get(root, "normalizer");
    const json_value *nzs = nz ? json_get(nz, "normalizers") : NULL;
    int empty_seq = is_type(nz, "Sequence") && nzs && nzs->type == JSON_ARRAY && !nzs->len;
    if (nz && nz->type != JSON_NULL && !empty_seq) {
        if (!is_type(nz, "NFC"))
            return fail(path, "normalizer: expected null, an empty Sequence or {\"type\": \"NFC\"} "
                              "(byte-level BPE family)");
        t->nfc = 1;
    }
    const json_value *pt = json_get(root, "pre_tokenizer");
    const json_value *seq = pt ? json_get(pt, "pretokenizers") : NULL;
    if (!pt || !is_type(pt, "Sequence") || !seq || seq->type != JSON_ARRAY || (seq->len != 2 && seq->len != 4))
        return fail(path, "pre_tokenizer: expected Sequence[Split(Regex), ByteLevel(use_regex false)], or "
                          "DeepSeek-V3's Sequence of three Splits and ByteLevel");
    int n_split = (int)seq->len - 1;
    TSR_CHECK(check_splits(t, seq->child, n_split, path));
    const json_value *bl = seq->child;
    for (int k = 0; k < n_split; k++) bl = bl->next;
    if (!is_type(bl, "ByteLevel") || !bool_is(bl, "use_regex", 0) || !bool_is(bl, "add_prefix_space", 0)) {
        char msg[200];
        tsr_snprintf(msg, sizeof msg, "pre_tokenizer.pretokenizers[%d]: expected ByteLevel with use_regex "
                     "false, add_prefix_space false", n_split);
        return fail(path, msg);
    }
    const json_value *dec = json_get(root, "decoder");
    if (!dec || !is_type(dec, "ByteLevel")) return fail(path, "decoder: expected ByteLevel");
    return 0;
}

static void vocab_insert(hf_tok *t, uint32_t id) {
    size_t n;
    const uint8_t *p = id_bytes(t, id, &n);
    uint64_t s = hash_bytes(p, n) & t->vmask;
    while (t->vslot[s] != HF_NONE) s = (s + 1) & t->vmask;
    t->vslot[s] = id;
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* Pass 1 over model.vocab then added_tokens: every id an integer in [0, MAX_IDS); the largest in
 * *max_id, at most 2 x (the ids given) + 1024. Returns 0 or fail(). */
static int vocab_max_id(const json_value *vocab, const json_value *added, const char *path,
                        uint32_t *max_id) {
    char msg[300];
    *max_id = 0;
    for (int pass = 0; pass < 2; pass++)
        for (const json_value *v = pass ? added->child : vocab->child; v; v = v->next) {
            const json_value *idv = pass ? json_get(v, "id") : v;
            double d = idv ? idv->num : -1;
            if (!idv || idv->type != JSON_NUMBER || d < 0 || d >= MAX_IDS || d != (double)(uint32_t)d) {
                tsr_snprintf(msg, sizeof msg, "%s: id of '%.60s': expected an integer in [0, %u)",
                             pass ? "added_tokens" : "model.vocab", pass ? "?" : v->key, MAX_IDS);
                return fail(path, msg);
            }
            if ((uint32_t)d > *max_id) *max_id = (uint32_t)d;
        }
    /* every table is sized by the largest id (about 26 bytes an id): ids must be nearly dense,
     * or a 5 KB file with one id near 2^24 builds 275 MB of tables (real vocabularies have no
     * gaps; up to 131,072 ids are allowed whatever the count: a few MB) */
    uint64_t given = (uint64_t)vocab->len + added->len, most = 2 * given + 1024;
    if (most < MIN_SPARSE_IDS) most = MIN_SPARSE_IDS;
    if ((uint64_t)*max_id + 1 > most) {
        tsr_snprintf(msg, sizeof msg, "the largest id is %u, but model.vocab and added_tokens give "
                     "%llu ids: ids must be nearly dense (at most %llu ids in all: twice those "
                     "given + 1024, or 131072), a sparse id sizes every table by itself", *max_id,
                     (unsigned long long)given, (unsigned long long)most);
        return fail(path, msg);
    }
    return 0;
}

/* Pass 2: src[id] = the JSON value holding id's text (a vocab key, or an added token's content),
 * is_added[id] = which; *total = the bytes of all texts. An id given twice in the vocab, or an
 * added token whose id the vocab gives to another text, is refused. Returns 0 or fail(). */
static int vocab_sources(const hf_tok *t, const json_value *vocab, const json_value *added,
                         const char *path, const json_value **src, uint8_t *is_added, size_t *total) {
    char msg[300];
    *total = 0;
    for (int pass = 0; pass < 2; pass++)
        for (const json_value *v = pass ? added->child : vocab->child; v; v = v->next) {
            uint32_t id = (uint32_t)(pass ? json_get(v, "id")->num : v->num);
            const json_value *c = pass ? json_get(v, "content") : NULL;
            if (pass && (!c || c->type != JSON_STRING || c->len == 0))
                return fail(path, "added_tokens: each needs a non-empty string 'content'");
            if (!pass && src[id]) {
                tsr_snprintf(msg, sizeof msg, "model.vocab: id %u given twice ('%.60s')", id, v->key);
                return fail(path, msg);
            }
            if (pass && src[id] && !is_added[id]) { /* an added token that is also a vocab entry */
                size_t kl = src[id]->key_len;
                uint8_t *tmp = tsr_malloc(kl + 1);
                long bl = key_bytes(t, src[id]->key, kl, tmp);
                /* (a key that is not byte-level text, DeepSeek-V3's <｜begin▁of▁sentence｜>, as written) */
                int same = bl < 0 ? kl == c->len && memcmp(src[id]->key, c->str, kl) == 0
                                  : bl == (long)c->len && memcmp(tmp, c->str, c->len) == 0;
                free(tmp);
                if (!same) {
                    tsr_snprintf(msg, sizeof msg, "added_tokens: '%.60s' has id %u, which the vocab "
                                 "gives to '%.60s'", c->str, id, src[id]->key);
                    return fail(path, msg);
                }
            }
            if (pass && src[id]) continue; /* also a vocab entry (same text): stays one, merges use it */
            src[id] = pass ? c : v;
            is_added[id] = (uint8_t)pass;
            *total += pass ? c->len : v->key_len;
        }
    return 0;
}

/* Every id's bytes into t->blob / t->off (vocab keys through the byte-level map; a key that is
 * not byte-level text kept as written, assigned = 2, never produced by encoding), then the
 * byte-level vocab entries into the lookup table. */
static void vocab_fill(hf_tok *t, const json_value *const *src, const uint8_t *is_added,
                       size_t total) {
    t->blob = tsr_malloc(total + 1);
    t->off = tsr_calloc((size_t)t->n_ids + 1, sizeof *t->off);
    t->assigned = tsr_calloc(t->n_ids, 1);
    uint64_t o = 0;
    for (uint32_t id = 0; id < t->n_ids; id++) {
        t->off[id] = o;
        const json_value *s = src[id];
        if (!s) continue;
        t->assigned[id] = 1;
        if (is_added[id]) {
            memcpy(t->blob + o, s->str, s->len);
            o += s->len;
            continue;
        }
        long bl = key_bytes(t, s->key, s->key_len, t->blob + o);
        if (bl < 0) { /* not byte-level text: kept as written, never produced by encoding */
            memcpy(t->blob + o, s->key, s->key_len);
            o += s->key_len;
            t->assigned[id] = 2;
        } else o += (uint64_t)bl;
    }
    t->off[t->n_ids] = o;
    hf_vocab_index(t, is_added);
}

void hf_vocab_index(hf_tok *t, const uint8_t *skip) {
    uint64_t cap = pow2_at_least(2 * (uint64_t)t->n_ids);
    t->vslot = tsr_malloc(cap * sizeof *t->vslot);
    memset(t->vslot, 0xff, cap * sizeof *t->vslot);
    t->vmask = cap - 1;
    for (uint32_t id = 0; id < t->n_ids; id++)
        if (t->assigned[id] == 1 && !(skip && skip[id])) vocab_insert(t, id);
}

/* t->byte_tok: the token of each single byte; byte-level BPE needs all 256. SentencePiece-style:
 * t->fb, the <0xXX> tokens of byte fallback (a missing one falls back to unk_token). Returns 0 or
 * fail(). */
static int vocab_bytes(hf_tok *t, const char *path) {
    char msg[300];
    if (t->spm) {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->fb[b] = hf_vocab_find(t, (const uint8_t *)name, 6);
        }
        return 0;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_tok[b] = hf_vocab_find(t, &c, 1);
        if (t->byte_tok[b] == HF_NONE) {
            tsr_snprintf(msg, sizeof msg, "model.vocab: no entry for byte 0x%02X (byte-level BPE needs "
                         "all 256)", b);
            return fail(path, msg);
        }
    }
    return 0;
}

static int load_vocab(hf_tok *t, const json_value *vocab, const json_value *added, const char *path) {
    uint32_t max_id;
    TSR_CHECK(vocab_max_id(vocab, added, path, &max_id));
    t->n_ids = max_id + 1;
    const json_value **src = tsr_calloc(t->n_ids, sizeof *src);
    uint8_t *is_added = tsr_calloc(t->n_ids, 1);
    size_t total;
    int rc = vocab_sources(t, vocab, added, path, src, is_added, &total);
    if (!rc) {
        vocab_fill(t, src, is_added, total);
        rc = vocab_bytes(t, path);
    }
    free(src), free(is_added);
    return rc;
}

void hf_added_alloc(hf_tok *t, uint32_t n) {
    t->n_added = n;
    t->added = tsr_calloc(n + 1, sizeof *t->added);
    t->added_len = tsr_calloc(n + 1, sizeof *t->added_len);
    t->added_id = tsr_calloc(n + 1, sizeof *t->added_id);
    t->added_special = tsr_calloc(n + 1, 1);
}

void hf_added_set(hf_tok *t, uint32_t k, const char *text, size_t len, uint32_t id, int special) {
    t->added[k] = tsr_malloc(len + 1);
    memcpy(t->added[k], text, len);
    t->added[k][len] = 0;
    t->added_len[k] = (uint32_t)len;
    t->added_id[k] = id;
    t->added_special[k] = (uint8_t)special;
    t->n_added_plain += !special;
    if (!special && len > t->added_plain_max) t->added_plain_max = (uint32_t)len;
    t->added_first[(uint8_t)text[0]] = 1;
}

static int load_added(hf_tok *t, const json_value *added, const char *path) {
    hf_added_alloc(t, (uint32_t)added->len);
    uint32_t k = 0;
    for (const json_value *v = added->child; v; v = v->next, k++) {
        const json_value *c = json_get(v, "content");
        if (!bool_is(v, "lstrip", 0) || !bool_is(v, "rstrip", 0) || !bool_is(v, "single_word", 0)) {
            char msg[200];
            tsr_snprintf(msg, sizeof msg, "added_tokens: '%.60s': lstrip, rstrip and single_word must "
                         "be false (not supported)", c->str);
            return fail(path, msg);
        }
        hf_added_set(t, k, c->str, c->len, (uint32_t)json_get(v, "id")->num, bool_is(v, "special", 1));
    }
    return 0;
}

/* One merge's two sides: "a b" (split at the first space, as transformers.js) or ["a", "b"]. */
static int merge_sides(const json_value *m, const char **a, size_t *al, const char **b, size_t *bl) {
    if (m->type == JSON_STRING) {
        const char *sp = memchr(m->str, ' ', m->len);
        if (!sp) return -1;
        const char *sp2 = memchr(sp + 1, ' ', m->len - (size_t)(sp + 1 - m->str));
        *a = m->str, *al = (size_t)(sp - m->str);
        *b = sp + 1, *bl = (sp2 ? (size_t)(sp2 - sp - 1) : m->len - *al - 1);
        return 0;
    }
    if (m->type != JSON_ARRAY || m->len != 2 || m->child->type != JSON_STRING ||
        m->child->next->type != JSON_STRING)
        return -1;
    *a = m->child->str, *al = m->child->len, *b = m->child->next->str, *bl = m->child->next->len;
    return 0;
}

static int load_merges(hf_tok *t, const json_value *merges, const char *path) {
    char msg[300];
    uint64_t cap = pow2_at_least(2 * (uint64_t)merges->len + 2);
    t->mkey = tsr_malloc(cap * sizeof *t->mkey);
    memset(t->mkey, 0xff, cap * sizeof *t->mkey);
    t->mrank = tsr_malloc(cap * sizeof *t->mrank);
    t->mres = tsr_malloc(cap * sizeof *t->mres);
    t->mmask = cap - 1;
    uint8_t buf[2048];
    uint32_t rank = 0;
    for (const json_value *m = merges->child; m; m = m->next, rank++) {
        const char *a, *b;
        size_t al, bl;
        long na, nb;
        if (merge_sides(m, &a, &al, &b, &bl) != 0 || al + bl > sizeof buf ||
            (na = key_bytes(t, a, al, buf)) <= 0 || (nb = key_bytes(t, b, bl, buf + na)) <= 0) {
            tsr_snprintf(msg, sizeof msg, "model.merges[%u]: expected \"a b\" or [\"a\", \"b\"] of "
                         "byte-level tokens", rank);
            return fail(path, msg);
        }
        uint32_t l = hf_vocab_find(t, buf, (size_t)na), r = hf_vocab_find(t, buf + na, (size_t)nb);
        uint32_t res = hf_vocab_find(t, buf, (size_t)(na + nb));
        if (l == HF_NONE || r == HF_NONE || res == HF_NONE) {
            tsr_snprintf(msg, sizeof msg, "model.merges[%u]: '%.*s' + '%.*s': %s is not in model.vocab",
                         rank, (int)al, a, (int)bl, b,
                         l == HF_NONE ? "the left side" : r == HF_NONE ? "the right side" : "the result");
            return fail(path, msg);
        }
        uint64_t key = (uint64_t)l << 32 | r, s = tsr_hash64(key) & t->mmask;
        while (t->mkey[s] != UINT64_MAX && t->mkey[s] != key) s = (s + 1) & t->mmask;
        t->mkey[s] = key; /* a repeated pair takes its later rank (transformers.js builds a Map) */
        t->mrank[s] = rank;
        t->mres[s] = res;
    }
    return 0;
}

/* The crossing entries of a SentencePiece-style vocab (t->n_cross, cross_id, cross_at): entries with
 * U+2581 right after another code point, which hf_spm_split must not cut. */
static void find_crossing(hf_tok *t) {
    uint32_t cap = 0;
    for (uint32_t id = 0; id < t->n_ids; id++) {
        if (t->assigned[id] != 1) continue;
        const uint8_t *p = t->blob + t->off[id];
        size_t n = t->off[id + 1] - t->off[id];
        for (size_t i = 1; i < n; i++) {
            if (!hf_metaspace_at(p, n, i) || (i >= 3 && hf_metaspace_at(p, n, i - 3))) continue;
            if (t->n_cross == cap) {
                cap = cap ? 2 * cap : 8;
                t->cross_id = tsr_realloc(t->cross_id, cap * sizeof *t->cross_id);
                t->cross_at = tsr_realloc(t->cross_at, cap * sizeof *t->cross_at);
            }
            t->cross_id[t->n_cross] = id, t->cross_at[t->n_cross++] = (uint32_t)i;
        }
    }
}

static int load_root(hf_tok *t, const json_value *root, const char *path) {
    if (root->type != JSON_OBJECT) return fail(path, "expected a JSON object (a tokenizer.json)");
    const json_value *model = json_get(root, "model");
    if (!model || !is_type(model, "BPE"))
        return fail(path, "model.type: expected \"BPE\" (byte-level BPE: Llama 3, Qwen 2/3)");
    const json_value *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    const json_value *added = json_get(root, "added_tokens");
    if (!vocab || vocab->type != JSON_OBJECT || vocab->len == 0)
        return fail(path, "model.vocab: expected a non-empty object");
    if (!merges || merges->type != JSON_ARRAY) return fail(path, "model.merges: expected an array");
    if (added && added->type != JSON_ARRAY) return fail(path, "added_tokens: expected an array");
    static const json_value no_added = {.type = JSON_ARRAY};
    if (!added) added = &no_added;
    t->spm = bool_is(model, "byte_fallback", 1);
    const json_value *dr = json_get(model, "dropout");
    if (dr && dr->type != JSON_NULL) return fail(path, "model.dropout: expected null");
    t->ignore_merges = bool_is(model, "ignore_merges", 1);
    if (t->spm && t->ignore_merges)
        return fail(path, "model.ignore_merges: true is not supported with byte_fallback");
    int rc = t->spm ? check_spm_pipeline(t, root, path) : check_pipeline(t, root, path);
    if (!rc) rc = load_vocab(t, vocab, added, path);
    if (!rc) rc = load_added(t, added, path);
    if (!rc) rc = load_merges(t, merges, path);
    if (!rc && t->spm) find_crossing(t);
    const json_value *unk = json_get(model, "unk_token");
    t->unk = !rc && unk && unk->type == JSON_STRING
                 ? hf_vocab_find(t, (const uint8_t *)unk->str, unk->len) : HF_NONE;
    return rc;
}

int hf_json_file(const char *path, size_t max, hf_json_load load, void *ctx) {
    size_t n;
    char *text;
    if (fs_read_all(path, max, &text, &n)) return TSR_EXIT_DATA;
    json_doc doc;
    json_doc_init(&doc);
    json_value *root;
    json_error err;
    int rc;
    if (json_parse(&doc, text, n, &root, &err) != 0) {
        tsr_error("%s: not valid JSON at byte %zu: %s", path, err.pos, err.msg);
        rc = TSR_EXIT_DATA;
    } else {
        rc = load(ctx, root, path);
    }
    json_doc_free(&doc);
    free(text);
    return rc;
}

/* hf_json_file's load of a tokenizer.json: the hf_tok into *(hf_tok **)out */
static int load_tok(void *out, const json_value *root, const char *path) {
    hf_tok *t = tsr_calloc(1, sizeof *t);
    int rc = load_root(t, root, path);
    if (rc) hf_tok_free(t);
    else *(hf_tok **)out = t;
    return rc;
}

int hf_tok_load(hf_tok **out, const char *path) {
    *out = NULL;
    return hf_json_file(path, HF_TOKJSON_MAX, load_tok, out);
}

void hf_tok_free(hf_tok *t) {
    if (!t) return;
    for (uint32_t k = 0; k < t->n_added; k++) free(t->added[k]);
    free(t->added), free(t->added_len), free(t->added_id), free(t->added_special);
    free(t->blob), free(t->off), free(t->assigned), free(t->vslot);
    free(t->mkey), free(t->mrank), free(t->mres);
    free(t->cross_id), free(t->cross_at);
    free(t);
}

uint32_t hf_tok_vocab_size(const hf_tok *t) { return t->n_ids; }

uint32_t hf_tok_added_id(const hf_tok *t, const char *content) {
    for (uint32_t k = 0; k < t->n_added; k++)
        if (strcmp(t->added[k], content) == 0) return t->added_id[k];
    return HF_NONE;
}

const char *hf_tok_special_of(const hf_tok *t, uint32_t id) {
    for (uint32_t k = 0; k < t->n_added; k++)
        if (t->added_id[k] == id && t->added_special[k]) return t->added[k];
    return NULL;
}
