# sample_measure.awk — does a text read as text? Issue 79 item 16's measure of the demo's sample,
# against a corpus (Brown, the text the demo trains on):
#   awk [-v samples=K] -f tools/sample_measure.awk SAMPLE_1 ... SAMPLE_K CORPUS_FILE...
# The first K files (default 1) are samples, the rest the corpus. A text's words are its runs of
# letters, lowercased; the corpus's word pairs are those adjacent within one of its files. For each
# sample, one line:
#   WORDS PAIRS HITS DISTINCT TOP TOP_N
# its words, its adjacent word pairs (WORDS - 1), how many of those pairs occur in the corpus, its
# distinct words, and its most frequent word with that word's count ("-" and 0 when it has none).
# tests/cli/test_demo.sh judges the demo's sample by it (HITS at least half of PAIRS, DISTINCT at
# least 40 % of WORDS, TOP_N at most 10 %); bench/demo_sample.sh measures many.
function words(s, w) { s = tolower(s); gsub(/[^a-z]+/, " ", s); return split(s, w, " ") }
# (a file's place from its name: an empty file has no first line to count it by)
BEGIN { if (samples == "") samples = 1; for (i = 1; i < ARGC; i++) place[ARGV[i]] = i }
FNR == 1 { file = place[FILENAME]; prev = "" }
file > samples {
    n = words($0, w)
    for (i = 1; i <= n; i++) { if (prev != "") corpus[prev " " w[i]] = 1; prev = w[i] }
    next
}
{ n = words($0, w); for (i = 1; i <= n; i++) s[file, ++ns[file]] = w[i] }
function measure(k,   i, d, hit, top, top_n, c) {
    for (i = 1; i <= ns[k]; i++) {
        if (!c[s[k, i]]++) d++
        if (c[s[k, i]] > top_n) { top_n = c[s[k, i]]; top = s[k, i] }
    }
    for (i = 2; i <= ns[k]; i++) if ((s[k, i - 1] " " s[k, i]) in corpus) hit++
    print ns[k] + 0, (ns[k] > 1 ? ns[k] - 1 : 0), hit + 0, d + 0, (top == "" ? "-" : top), top_n + 0
}
END { for (k = 1; k <= samples; k++) measure(k) }
