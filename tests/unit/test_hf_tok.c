/* test_hf_tok.c — Hugging Face tokenizer.json (byte-level BPE): the Split matchers of Llama 3,
 * Qwen 2/3 and gpt-oss against cases whose pieces were produced by node running the reference's
 * JavaScript regex, DeepSeek-V3's three Splits and the tiktoken patterns (o200k_base's, Kimi K2's)
 * against their references' pieces, BPE and added tokens on a tiny handmade tokenizer.json (both merge forms, ignore_merges,
 * ids above 65,535), and load errors naming the file and the fault.
 *   test_hf_tok                         the TAP tests
 *   test_hf_tok --encode JSON FILE...   prints each file's ids on one line (added tokens matched),
 *                                       for tests/tokenizer/test_hf_identity.sh
 *   test_hf_tok --decode-check JSON FILE...  exit 1 unless decode(encode(file)) == file
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "tap.h"
#include "testfs.h"
#include "tokenizer/hf_nfc.h"
#include "tokenizer/hf_tok.h"
#include "tokenizer/tiktoken_tables.h"
#include "unicode_tables.h"

/* ---- the Split matchers: pieces joined by '|' ---- */


/* text, Llama 3 pieces, Qwen 2/3 pieces, gpt-oss (o200k) pieces: from node (String.matchAll with
 * transformers.js's rewriting of each pattern), see tests/tokenizer/ref_hf_encode.js */
static const char *const split_cases[][1 + HF_SPLIT_SINGLE] = {
    {"Hello world",
     "Hello| world", "Hello| world", "Hello| world"},
    {"it's I'M we'Ve 'LL'd x'Re",
     "it|'s| I|'M| we|'Ve| '|LL|'d| x|'Re",
     "it|'s| I|'M| we|'Ve| '|LL|'d| x|'Re",
     "it's| I'M| we'Ve| '|LL'd| x'Re"},
    {"12345678 9",
     "123|456|78| |9", "1|2|3|4|5|6|7|8| |9", "123|456|78| |9"},
    {"a\n\n  b",
     "a|\n\n| | b", "a|\n\n| | b", "a|\n\n| | b"},
    {"x  \n",
     "x|  \n", "x|  \n", "x|  \n"},
    {"...!!\n\nok",
     "...!!\n\n|ok", "...!!\n\n|ok", "...!!\n\n|ok"},
    {" ?",
     " ?", " ?", " ?"},
    {"$x",
     "$x", "$x", "$x"},
    {"\tfoo",
     "\tfoo", "\tfoo", "\tfoo"},
    {"\nfoo",
     "\n|foo", "\n|foo", "\n|foo"},
    {"日本語テキスト",
     "日本語テキスト", "日本語テキスト", "日本語テキスト"},
    {"a   ",
     "a|   ", "a|   ", "a|   "},
    {"\r\n\t x",
     "\r\n|\t| x", "\r\n|\t| x", "\r\n|\t| x"},
    {"don't!\r\n",
     "don|'t|!\r\n", "don|'t|!\r\n", "don't|!\r\n"},
    {"🎉👍🏽 a🎉b",
     "🎉👍🏽| a|🎉b", "🎉👍🏽| a|🎉b", "🎉👍🏽| a|🎉b"},
    {"   leading",
     "  | leading", "  | leading", "  | leading"},
    {"HelloWorld HTTPServer iPhone ABC's",
     "HelloWorld| HTTPServer| iPhone| ABC|'s",
     "HelloWorld| HTTPServer| iPhone| ABC|'s",
     "Hello|World| HTTPServer| i|Phone| ABC's"},
    {"ǅemal Aʰb ABʰCD",
     "ǅemal| Aʰb| ABʰCD", "ǅemal| Aʰb| ABʰCD", "ǅemal| Aʰb| ABʰ|CD"},
    {"e\xcc\x81"" \xcc\x81""ABC !\xcc\x81""x AB\xcc\x81""'s",
     "e|\xcc\x81""| \xcc\x81""|ABC| !\xcc\x81""|x| AB|\xcc\x81""'|s",
     "e|\xcc\x81""| \xcc\x81""|ABC| !\xcc\x81""|x| AB|\xcc\x81""'|s",
     "e\xcc\x81""| \xcc\x81""|ABC| !\xcc\x81""|x| AB\xcc\x81""'s"},
    {"path/to/file !!\n/ :/",
     "path|/to|/file| !!\n|/| :/", "path|/to|/file| !!\n|/| :/", "path|/to|/file| !!\n/| :/"},
};
#define N_SPLIT_CASES (int)(sizeof split_cases / sizeof split_cases[0])

static const char *const split_names[HF_SPLIT_SINGLE] = {"Llama 3", "Qwen 2", "gpt-oss"};

/* text, DeepSeek-V3's pieces (node: its three regexes as transformers.js builds them, each split
 * applied to the pieces of the one before, the text between matches kept), o200k_base's and Kimi
 * K2's as tiktoken splits them (npm tiktoken given every run of the text's code points as a token:
 * each piece is then one token whole, so the ids are the pieces; tests/tokenizer/test_tiktoken.sh) */
static const char *const split_cases_more[][4] = {
    {"abc123def4567 x²",
     "abc|123|def|456|7| x|²",
     "abc|123|def|456|7| x|²",
     "abc|123|def|456|7| x|²"},
    {"日本語のテキスト・カタカナー゠ゔ",
     "日本語のテキスト|・|カタカナー|゠|ゔ",
     "日本語のテキスト|・カタカナー|゠ゔ",
     "日本語|のテキスト|・カタカナー|゠ゔ"},
    {".foo don't (x)y 'tis",
     ".foo| don|'t| (|x|)y| '|tis",
     ".foo| don't| (|x|)y| '|tis",
     ".foo| don't| (|x|)y| '|tis"},
    {"a  1 b\n\n 2",
     "a|  |1| b|\n\n| |2",
     "a| | |1| b|\n\n| |2",
     "a| | |1| b|\n\n| |2"},
    {"x\xcc\x81""y !\xcc\x81""z 🎉👨\xe2\x80\x8d""👩",
     "x\xcc\x81""y| !|\xcc\x81""z| 🎉👨|\xe2\x80\x8d""|👩",
     "x\xcc\x81""y| !\xcc\x81""|z| 🎉👨\xe2\x80\x8d""👩",
     "x\xcc\x81""y| !\xcc\x81""|z| 🎉👨\xe2\x80\x8d""👩"},
    {"\x01""abc \x01""! \xe2\x80\x8d""x",
     "\x01""abc| |\x01""|!| |\xe2\x80\x8d""x",
     "\x01""abc| \x01""!| \xe2\x80\x8d""|x",
     "\x01""abc| \x01""!| \xe2\x80\x8d""|x"},
    {"中a文 ab中cd 中1〇 々々",
     "中|a|文| ab|中|cd| |中|1〇| 々々",
     "中a文| ab中cd| 中|1〇| 々々",
     "中|a|文| ab|中|cd| |中|1〇| |々々"},
    {" \xcc\x81""abc \tfoo",
     " \xcc\x81""abc| |\tfoo",
     " \xcc\x81""abc| |\tfoo",
     " \xcc\x81""abc| |\tfoo"},
    {"!⺀x ⺀y \xf0\x96\xbf\xa2""z",
     "!⺀|x| ⺀|y| \xf0\x96\xbf\xa2""|z",
     "!⺀|x| ⺀|y| \xf0\x96\xbf\xa2""|z",
     "!⺀|x| ⺀|y| \xf0\x96\xbf\xa2""|z"},
    {"it'ſ IT'S x'Re ſs",
     "it|'|ſ| IT|'S| x|'Re| ſs",
     "it'ſ| IT'S| x'Re| ſs",
     "it'ſ| IT'S| x'Re| ſs"},
    {"a\xc2\x85""b \xef\xbb\xbf"" x\xef\xbb\xbf"" y \xc2\x85""\n",
     "a|\xc2\x85""b| \xef\xbb\xbf""| x|\xef\xbb\xbf""| y| |\xc2\x85""|\n",
     "a|\xc2\x85""b| \xef\xbb\xbf""| x|\xef\xbb\xbf""| y| \xc2\x85""\n",
     "a|\xc2\x85""b| \xef\xbb\xbf""| x|\xef\xbb\xbf""| y| \xc2\x85""\n"},
    {"path/to !!\n/ :/",
     "path|/to| !!\n|/| :/",
     "path|/to| !!\n/| :/",
     "path|/to| !!\n|/| :/"},
    {"HelloWorld HTTPServer iPhone",
     "HelloWorld| HTTPServer| iPhone",
     "Hello|World| HTTPServer| i|Phone",
     "Hello|World| HTTPServer| i|Phone"},
    {"12345 ١٢٣٤ Ⅻ½",
     "123|45| |١٢٣|٤| |Ⅻ½",
     "123|45| |١٢٣|٤| |Ⅻ½",
     "123|45| |١٢٣|٤| |Ⅻ½"},
};
#define N_MORE_CASES (int)(sizeof split_cases_more / sizeof split_cases_more[0])
static const hf_split_kind more_kinds[3] = {HF_SPLIT_DEEPSEEK_V3, HF_SPLIT_TT_O200K, HF_SPLIT_TT_KIMI};
static const char *const more_names[3] = {"DeepSeek-V3", "o200k_base (tiktoken)", "Kimi K2 (tiktoken)"};

static void test_split(void) {
    for (int k = 0; k < HF_SPLIT_SINGLE; k++)
        for (int i = 0; i < N_SPLIT_CASES; i++) {
            tap_joined j = {.n = 0};
            const char *t = split_cases[i][0];
            hf_pretok_split((hf_split_kind)k, (const uint8_t *)t, strlen(t), tap_join_piece, &j);
            if (!tap_ok(strcmp(j.s, split_cases[i][1 + k]) == 0, "%s split of \"%s\"",
                        split_names[k], tap_esc(t)))
                tap_diag("got \"%s\", want \"%s\"", tap_esc(j.s), tap_esc(split_cases[i][1 + k]));
        }
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < N_MORE_CASES; i++) {
            tap_joined j = {.n = 0};
            const char *t = split_cases_more[i][0];
            hf_pretok_split(more_kinds[k], (const uint8_t *)t, strlen(t), tap_join_piece, &j);
            if (!tap_ok(strcmp(j.s, split_cases_more[i][1 + k]) == 0, "%s split of \"%s\"",
                        more_names[k], tap_esc(t)))
                tap_diag("got \"%s\", want \"%s\"", tap_esc(j.s), tap_esc(split_cases_more[i][1 + k]));
        }
    /* tiktoken's classes are differences from node's tables: from the same node, or they are wrong */
    tap_ok(strcmp(tsr_tt_node_version, tsr_uc_version) == 0,
           "tiktoken_tables.c (diffs taken against %s) and unicode_tables.c (%s) come from one node",
           tsr_tt_node_version, tsr_uc_version);
}

/* ---- a tiny tokenizer.json ---- */
static const char LLAMA3_RE[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";

/* byte b as GPT-2's bytes_to_unicode maps it, UTF-8, JSON-escaped into out */
static void mapped(int b, char *out) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    unsigned cp = (unsigned)b;
    if (!printable) {
        int k = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) k++;
        cp = 256u + (unsigned)k;
    }
    if (cp == '"' || cp == '\\') sprintf(out, "\\%c", (char)cp);
    else if (cp < 0x80) sprintf(out, "%c", (char)cp);
    else sprintf(out, "%c%c", (char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F)));
}

/* pair_form: merges as ["a","b"] instead of "a b"; extra: text spliced in (JSON) or NULL */
static void write_json(const char *path, int pair_form, int ignore_merges, const char *pattern,
                       const char *normalizer) {
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"version\":\"1.0\",\"added_tokens\":[");
    fprintf(f, "{\"id\":70000,\"content\":\"<|a|>\",\"single_word\":false,\"lstrip\":false,"
               "\"rstrip\":false,\"normalized\":false,\"special\":true},");
    fprintf(f, "{\"id\":70001,\"content\":\"<|a|>x\",\"special\":false},");
    fprintf(f, "{\"id\":70002,\"content\":\"<|b\",\"special\":true}],");
    fprintf(f, "\"normalizer\":%s,", normalizer);
    fprintf(f, "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
               "\"pattern\":{\"Regex\":\"%s\"},\"behavior\":\"Isolated\",\"invert\":false},"
               "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
               "\"use_regex\":false}]},", pattern);
    fprintf(f, "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},");
    fprintf(f, "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"byte_fallback\":false,"
               "\"ignore_merges\":%s,\"vocab\":{", ignore_merges ? "true" : "false");
    char m[8];
    for (int b = 0; b < 256; b++) {
        mapped(b, m);
        fprintf(f, "\"%s\":%d,", m, b);
    }
    fprintf(f, "\"ll\":256,\"he\":257,\"hell\":258,\"\xc4\xa0w\":259,\"hello\":300},\"merges\":[");
    static const char *const mg[][2] = {{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"\xc4\xa0", "w"}};
    for (int i = 0; i < 4; i++) {
        if (pair_form) fprintf(f, "%s[\"%s\",\"%s\"]", i ? "," : "", mg[i][0], mg[i][1]);
        else fprintf(f, "%s\"%s %s\"", i ? "," : "", mg[i][0], mg[i][1]);
    }
    fprintf(f, "]}}");
    fclose(f);
}

static int ids_are(const hf_tok *t, const char *text, int special, const uint32_t *want, size_t n) {
    uint32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    size_t got = hf_tok_encode(t, (const uint8_t *)text, strlen(text), special, &ids, &n_ids, &cap);
    int ok = got == n && n_ids == n && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        char buf[512];
        size_t o = 0;
        for (size_t i = 0; i < n_ids && o + 12 < sizeof buf; i++) o += (size_t)sprintf(buf + o, " %u", ids[i]);
        buf[o] = '\0';
        tap_diag("\"%s\" -> [%s ]", tap_esc(text), buf);
    }
    uint8_t out[256];
    size_t len = hf_tok_decode(t, ids, n_ids, out, sizeof out);
    if (ok && !(len == strlen(text) && memcmp(out, text, len) == 0)) {
        tap_diag("decode(encode(\"%s\")) differs", tap_esc(text));
        ok = 0;
    }
    free(ids);
    return ok;
}

/* encode(text) == want, added tokens matched, without a round trip (normalisation changes text) */
static int ids_eq(const hf_tok *t, const char *text, const uint32_t *want, size_t n) {
    uint32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    hf_tok_encode(t, (const uint8_t *)text, strlen(text), 1, &ids, &n_ids, &cap);
    int ok = n_ids == n && memcmp(ids, want, n * sizeof *ids) == 0;
    if (!ok)
        for (size_t i = 0; i < n_ids; i++) tap_diag("  id %zu: %u", i, ids[i]);
    free(ids);
    return ok;
}

#define IDS(...) (const uint32_t[]){__VA_ARGS__}, sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t)

static void test_tiny(const char *dir) {
    char p1[256], p2[256], p3[256];
    snprintf(p1, sizeof p1, "%s/strings.json", dir);
    snprintf(p2, sizeof p2, "%s/pairs.json", dir);
    snprintf(p3, sizeof p3, "%s/ignore.json", dir);
    write_json(p1, 0, 0, LLAMA3_RE, "null");
    write_json(p2, 1, 0, LLAMA3_RE, "null");
    write_json(p3, 0, 1, LLAMA3_RE, "{\"type\":\"NFC\"}");
    hf_tok *a = NULL, *b = NULL, *c = NULL;
    tap_ok(hf_tok_load(&a, p1) == 0 && hf_tok_load(&b, p2) == 0 && hf_tok_load(&c, p3) == 0,
           "tiny tokenizer.json loads with merges as \"a b\", as [a, b], and with NFC");
    if (!a || !b || !c) {
        hf_tok_free(a), hf_tok_free(b), hf_tok_free(c);
        return;
    }
    tap_ok(hf_tok_vocab_size(a) == 70003 && hf_tok_added_id(a, "<|a|>") == 70000,
           "vocab size counts added tokens (70003); ids above 65,535 are kept");
    tap_ok(ids_are(a, "hello", 1, IDS(258, 'o')), "BPE by rank: hello -> hell o (l l, h e, he ll)");
    tap_ok(ids_are(b, "hello", 1, IDS(258, 'o')), "merges as [a, b] pairs: the same ids");
    tap_ok(ids_are(a, "lll", 1, IDS(256, 'l')), "equal ranks: the leftmost pair merges first (ll l)");
    tap_ok(ids_are(a, "hel wow", 1, IDS(257, 'l', 259, 'o', 'w')), "hel wow -> he l Ġw o w");
    tap_ok(ids_are(c, "hello hello", 1, IDS(300, ' ', 258, 'o')),
           "ignore_merges: a piece found whole in the vocab is its id (hello), ' hello' is merged");
    tap_ok(ids_are(a, "x<|a|>y<|a|>xz", 1, IDS('x', 70000, 'y', 70001, 'z')),
           "added tokens: split out first, the longest at each position (<|a|>x over <|a|>)");
    tap_ok(ids_are(a, "<|b<|a|", 1, IDS(70002, '<', '|', 'a', '|')), "added token prefix is plain text");
    tap_ok(ids_are(a, "x<|a|>y", 0, IDS('x', '<', '|', 'a', '|', '>', 'y')),
           "allow_special 0: added tokens are plain text");
    tap_ok(ids_eq(c, "e\xcc\x81 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 a\xcc\xa3\xcc\x82",
                  IDS(0xc3, 0xa9, ' ', 0xea, 0xb0, 0x81, ' ', 0xe1, 0xba, 0xad)),
           "NFC tokenizer: e+U+0301 -> U+00E9, jamo L V T -> U+AC01, a+U+0323+U+0302 -> U+1EAD");
    tap_ok(ids_eq(a, "e\xcc\x81", IDS('e', 0xcc, 0x81)), "normalizer null: e+U+0301 stays as it is");
    uint8_t out[8];
    const uint32_t bad[] = {500};
    tap_ok(hf_tok_decode(a, bad, 1, out, sizeof out) == (size_t)-1,
           "decode: an unassigned id (500) is an error");
    hf_tok_free(a), hf_tok_free(b), hf_tok_free(c);
}

/* the file's bytes (testfs.h's slurp), or NULL saying which could not be read */
static uint8_t *read_bytes(const char *path, size_t *n) {
    uint8_t *buf = (uint8_t *)slurp(path, n);
    if (!buf) fprintf(stderr, "test_hf_tok: cannot open %s\n", path);
    return buf;
}

/* ---- load errors: status 2 and a message naming the file and the fault ---- */
static int load_err(const char *path, const char *name) {
    hf_tok *t = NULL;
    cap_begin();
    int rc = hf_tok_load(&t, path);
    const char *msg = cap_end();
    int named = strstr(msg, name) != NULL && strstr(msg, path) != NULL;
    if (!named) tap_diag("message: %s", msg);
    hf_tok_free(t);
    return rc == TSR_EXIT_DATA && named && t == NULL;
}

/* dst = src with the first `from` replaced by `to` */
static void variant(const char *src, const char *dst, const char *from, const char *to) {
    size_t n;
    char *t = (char *)read_bytes(src, &n), *at;
    FILE *f = fopen(dst, "w");
    if ((at = strstr(t, from)) != NULL) {
        fwrite(t, 1, (size_t)(at - t), f);
        fputs(to, f);
        fputs(at + strlen(from), f);
    } else tap_diag("variant: '%s' not in %s", from, src);
    fclose(f);
    free(t);
}

static void test_errors(const char *dir) {
    char p[256], good[256];
    snprintf(good, sizeof good, "%s/good.json", dir);
    write_json(good, 0, 0, LLAMA3_RE, "null");
    snprintf(p, sizeof p, "%s/bad_merge.json", dir);
    variant(good, p, "\"he ll\"", "\"he lx\"");
    tap_ok(load_err(p, "model.merges[2]: 'he' + 'lx': the right side is not in model.vocab"),
           "merge with a side missing from the vocab: refused, naming the merge");
    snprintf(p, sizeof p, "%s/lstrip.json", dir);
    variant(good, p, "\"lstrip\":false", "\"lstrip\":true");
    tap_ok(load_err(p, "added_tokens: '<|a|>': lstrip"), "added token with lstrip: refused, naming it");
    snprintf(p, sizeof p, "%s/unigram.json", dir);
    variant(good, p, "\"type\":\"BPE\"", "\"type\":\"Unigram\"");
    tap_ok(load_err(p, "model.type"), "model.type Unigram: refused");
    snprintf(p, sizeof p, "%s/bad_pattern.json", dir);
    write_json(p, 0, 0, "\\\\s+|\\\\w+", "null");
    tap_ok(load_err(p, "unknown pattern '\\s+|\\w+'"), "unknown Split pattern: refused, naming it");
    snprintf(p, sizeof p, "%s/bad_norm.json", dir);
    write_json(p, 0, 0, LLAMA3_RE, "{\"type\":\"NFKC\"}");
    tap_ok(load_err(p, "normalizer"), "normalizer NFKC: refused");
    snprintf(p, sizeof p, "%s/trunc.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"model\": {\"type\": \"BPE\"", f);
    fclose(f);
    tap_ok(load_err(p, "not valid JSON"), "truncated file: refused as invalid JSON");
    snprintf(p, sizeof p, "%s/missing.json", dir);
    tap_ok(load_err(p, "cannot open"), "missing file: refused");
    snprintf(p, sizeof p, "%s/sparse.json", dir); /* one added token's id near 2^24 */
    variant(good, p, "\"id\":70002", "\"id\":16000000");
    tap_ok(load_err(p, "the largest id is 16000000, but model.vocab and added_tokens give 264 ids: ids "
                       "must be nearly dense"),
           "a 5 KB tokenizer.json with one id near 2^24: refused (it built 275 MB of tables)");
}

/* --encode JSON FILE...: ids per file; --decode-check JSON FILE...: exit 1 unless
 * decode(encode(file)) == file for each */
static int run_files(int argc, char **argv, int check) {
    hf_tok *t;
    int rc = hf_tok_load(&t, argv[2]);
    if (rc) return rc;
    for (int i = 3; i < argc && rc == 0; i++) {
        size_t n;
        uint8_t *buf = read_bytes(argv[i], &n);
        if (!buf) {
            rc = 2;
            break;
        }
        uint32_t *ids = NULL;
        size_t n_ids = 0, icap = 0;
        if (hf_tok_encode(t, buf, n, 1, &ids, &n_ids, &icap) == (size_t)-1) rc = 2;
        else if (check) {
            uint8_t *out = malloc(n + 1);
            size_t len = hf_tok_decode(t, ids, n_ids, out, n + 1);
            if (len != n || memcmp(out, buf, n) != 0) rc = 1;
            free(out);
        } else {
            for (size_t k = 0; k < n_ids; k++) printf(k ? " %u" : "%u", ids[k]);
            printf("\n");
        }
        free(ids);
        free(buf);
    }
    hf_tok_free(t);
    return rc;
}

/* --nfc FILE: the file's NFC on stdout (compared with node's normalize by test_hf_identity.sh) */
static int nfc_file(const char *path) {
    size_t n, m;
    uint8_t *buf = read_bytes(path, &n);
    if (!buf) return 2;
    uint8_t *o = hf_nfc(buf, n, &m);
    fwrite(o ? o : buf, 1, o ? m : n, stdout);
    free(o);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "--encode") == 0) return run_files(argc, argv, 0);
    if (argc >= 3 && strcmp(argv[1], "--decode-check") == 0) return run_files(argc, argv, 1);
    if (argc == 3 && strcmp(argv[1], "--nfc") == 0) return nfc_file(argv[2]);
    tap_plan(HF_SPLIT_SINGLE * N_SPLIT_CASES + 3 * N_MORE_CASES + 1 + 13 + 8);
    test_split();
    char dir[64];
    testfs_root(dir, sizeof dir, "hftok"); /* the load errors' stderr is captured there */
    test_tiny(dir);
    test_errors(dir);
    rm_rf(dir);
    return tap_done();
}
