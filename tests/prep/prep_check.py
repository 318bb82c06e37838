#!/usr/bin/env python3
"""prep_check.py — fixtures and an independent checker for tests/prep/test_prep.sh.

  prep_check.py gen DIR
      Writes the inputs (text files, JSONL of each kind, with bad lines at known places) and, for
      each, the expected documents: DIR/spec-NAME.json lists every document as segments (indices of
      DIR/seg/seg-NNNNN.txt, each tokenized on its own) with their roles. The shell test tokenizes
      the segment files with `tessera tokenizer encode` (one line of ids per file) into DIR/ids.txt.

  prep_check.py pack PACKED PLAIN T EOS
      Checks the --pack T layout of PACKED against PLAIN, the same input prepped without --pack
      (same seed and val fraction, so the same train/val split; docs/prep.md "Packing"): each shard
      is 1 + m*T tokens starting with an EOT of mask 0; each window (the targets [kT+1, kT+T] of
      sample k) holds whole examples (PLAIN's tokens up to and including each EOT, with PLAIN's
      mask bytes) in input order, then EOT padding of mask 0, and an example goes to the next
      window only when it did not fit the rest of this one; an example longer than T is its first
      T-1 tokens alone in a window, or missing when those hold no target. Prints per split
      "SPLIT windows W examples E truncated X dropped D padding P tokens N exact F" (F: windows
      filled without padding). The mask bytes' bit 1 (has_mask 2) must mark exactly each shard's
      first token, each example's first token and each window's first padding token (the segment
      starts, docs/data-format.md). Exit 0 when everything matches.

  prep_check.py check OUT IDS EOS SPEC... [--bos] [--no-eos] [--target-prompts] [--assign FILE]
      Reads OUT/train and OUT/val with a reader of its own (docs/data-format.md: index.tsv, 64-byte
      headers, uint16/uint32 tokens, then the mask bytes) and checks that the two token streams are
      exactly the expected documents, in input order, each in exactly one split, with the expected
      loss mask. Prints "docs T V tokens T V targets T V"; --assign writes the split of each
      document as a string of 0 (train) and 1 (val). Exit 0 when everything matches.

The rules checked (docs/prep.md): document = [BOS] segments [EOS]; BOS/EOS are <|endoftext|>.
Plain text: no mask channel, unless another input is sft/chat, then every mask byte is 1.
sft: prompt 0, response 1, EOS 1, BOS 0. chat: "ROLE: " 0, content and "\\n" 1 for the assistant
and 0 for other roles, EOS 1 when the last turn is the assistant's. --target-prompts: all 1.
"""
import json
import os
import random
import struct
import sys

import numpy as np

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her all she there would their we him been has when who "
         "will more no if out so said what up its about into than them can only other new some "
         "could time these two may then do first any my now such like our over man me even most "
         "made after also did many before must through back years where much your way well down "
         "should because each just those people Mr how too little state good very make world "
         "still own see men work long get here between both life being under never day same "
         "another know while last might us great old year off come since against go came right "
         "used take three").split()
EXOTIC = ["caf\u00e9", "na\u00efve", "\u65e5\u672c\u8a9e", "\U0001F600", "\u00a92024",
          "tab\there", "quote\"d", "back\\slash", "x\u0000y", "line\nbreak", "<|endoftext|>"]


def sentence(rng, n):
    words = [rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words) + 1), rng.choice(EXOTIC))
    if rng.random() < 0.2:
        words.append(str(rng.randrange(100000)))
    return " ".join(words).capitalize() + rng.choice([".", "!", "?", "..."])


class Gen:
    def __init__(self, root):
        self.root = root
        self.nseg = 0
        os.makedirs(os.path.join(root, "seg"), exist_ok=True)

    def seg(self, text, role):
        """A segment file holding text (UTF-8); returns [index, role] for a spec."""
        path = os.path.join(self.root, "seg", "seg-%05d.txt" % self.nseg)
        with open(path, "wb") as f:
            f.write(text.encode("utf-8"))
        self.nseg += 1
        return [self.nseg - 1, role]

    def spec(self, name, kind, docs):
        with open(os.path.join(self.root, "spec-%s.json" % name), "w") as f:
            json.dump({"kind": kind, "docs": docs}, f)


def gen(root):
    rng = random.Random(12345)
    g = Gen(root)
    # --- a directory of text files: sorted walk, hidden files skipped, empty file not a document
    text_files = {"a.txt": None, "empty.txt": "", "sub/b.txt": None, "sub/deeper/c.txt": None,
                  ".hidden.txt": "hidden", "sub/.git/x.txt": "hidden"}
    docs = []
    for rel in sorted(text_files):  # the order prep walks: a.txt, empty.txt, sub/b.txt, sub/deeper/c.txt
        path = os.path.join(root, "text", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        body = text_files[rel]
        if body is None:
            body = "\n".join(sentence(rng, rng.randint(3, 30)) for _ in range(rng.randint(1, 40)))
            body += "\n" if rng.random() < 0.5 else ""
        with open(path, "wb") as f:
            f.write(body.encode("utf-8"))
        if body and "/." not in "/" + rel:
            docs.append({"kind": "text", "segs": [g.seg(body, "text")]})
    g.spec("text", "text", docs)

    # --- text JSONL with bad lines at known places
    lines, docs, bad = [], [], {}
    for no in range(1, 301):
        if no == 5:
            lines.append('{"text": "unterminated}'); bad[no] = "unterminated string"
        elif no == 9:
            lines.append('{"txt": "typo"}'); bad[no] = 'missing field "text"'
        elif no == 12:
            lines.append('{"text": 42}'); bad[no] = 'field "text" is a number'
        elif no == 20:
            lines.append("   ")  # blank: ignored, not bad
        elif no == 33:
            lines.append('["text", "x"]'); bad[no] = "expected a JSON object"
        elif no == 40:
            lines.append('{"text": ""}')  # empty document: counted, not written
        elif no == 47:
            lines.append('{"text": "a\\x"}'); bad[no] = "invalid escape"
        else:
            t = " ".join(sentence(rng, rng.randint(1, 25)) for _ in range(rng.randint(1, 6)))
            t = "doc %d: %s" % (no, t)
            obj = {"id": no, "meta": {"tags": ["a", 1, None, True, 2.5e-3]}, "text": t}
            lines.append(json.dumps(obj, ensure_ascii=(no % 2 == 0)))
            docs.append({"kind": "text", "segs": [g.seg(t, "text")]})
    with open(os.path.join(root, "corpus.jsonl"), "wb") as f:
        f.write(("\r\n" if False else "\n").join(lines).encode("utf-8") + b"\n")
    g.spec("corpus", "text", docs)
    with open(os.path.join(root, "corpus-bad-lines.txt"), "w") as f:
        for no, why in sorted(bad.items()):
            f.write("%d\t%s\n" % (no, why))

    # --- sft (CRLF line ends, a BOM on line 1)
    lines, docs = [], []
    for k in range(60):
        p = "Question %d: %s\nAnswer:" % (k, sentence(rng, rng.randint(2, 15)))
        r = " " + sentence(rng, rng.randint(1, 20))
        lines.append(json.dumps({"prompt": p, "response": r}))
        docs.append({"kind": "sft", "segs": [g.seg(p, "prompt"), g.seg(r, "target")]})
    with open(os.path.join(root, "sft.jsonl"), "wb") as f:
        f.write(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\r\n")
    g.spec("sft", "sft", docs)

    # --- chat: system/user/assistant turns; some conversations end with the user
    lines, docs = [], []
    for k in range(30):
        msgs = []
        if k % 3 == 0:
            msgs.append({"role": "system", "content": "You are assistant %d." % k})
        for t in range(rng.randint(1, 3)):
            msgs.append({"role": "user", "content": sentence(rng, rng.randint(1, 12))})
            msgs.append({"role": "assistant", "content": sentence(rng, rng.randint(1, 12))})
        if k % 5 == 4:
            msgs.append({"role": "user", "content": "thanks %d" % k})
        lines.append(json.dumps({"messages": msgs, "id": k}))
        segs = []
        for m in msgs:
            is_a = m["role"] == "assistant"
            segs.append(g.seg(m["role"] + ": ", "prompt"))
            segs.append(g.seg(m["content"], "target" if is_a else "prompt"))
            segs.append(g.seg("\n", "target" if is_a else "prompt"))
        docs.append({"kind": "chat", "segs": segs, "ends_assistant": msgs[-1]["role"] == "assistant"})
    with open(os.path.join(root, "chat.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    g.spec("chat", "chat", docs)

    # --- text split with --doc-sep '\n\n' (runs of separators make no empty documents)
    parts = ["para %d %s" % (k, sentence(rng, rng.randint(2, 20))) for k in range(25)]
    body = "\n\n".join(parts[:10]) + "\n\n\n\n" + "\n\n".join(parts[10:]) + "\n\n"
    with open(os.path.join(root, "paras.txt"), "w") as f:
        f.write(body)
    g.spec("paras", "text", [{"kind": "text", "segs": [g.seg(p, "text")]} for p in parts])

    # --- sft pairs of varied lengths for --pack 32: most fit a window of 32 tokens, some are
    # longer with a short prompt (truncated), some have a prompt that alone fills the window
    # (dropped). No spec: the --pack check compares with an unpacked prep of the same file.
    rng = random.Random(4242)
    lines = []
    for k in range(200):
        r = rng.random()
        pw, rw = ((rng.randint(25, 40), rng.randint(1, 5)) if r < 0.06 else
                  (rng.randint(1, 4), rng.randint(25, 40)) if r < 0.12 else
                  (rng.randint(0, 6), rng.randint(0, 7)))
        p = "Q%d:%s" % (k, " " + sentence(rng, pw) if pw else "")
        lines.append(json.dumps({"prompt": p, "response": " " + sentence(rng, rw) if rw else ""}))
    with open(os.path.join(root, "pack.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")


def read_dataset(d):
    """(tokens, mask or None) of the dataset directory d, by docs/data-format.md."""
    has_mask, shards = read_shards(d)
    t = np.concatenate([t for t, _ in shards]) if shards else np.zeros(0, np.int64)
    if not has_mask:
        return t, None
    return t, np.concatenate([m for _, m in shards]) if shards else np.zeros(0, np.uint8)


def read_documents(d, end):
    """(index.tsv's keys and first values, the tokens, the documents: the lists of tokens each
    before an id `end`, the tokens after the last one) of the dataset directory d."""
    meta = dict(l.split()[:2] for l in open(os.path.join(d, "index.tsv")) if len(l.split()) >= 2)
    t, _ = read_dataset(d)
    docs, cur = [], []
    for x in t.tolist():
        if x == end: docs.append(cur); cur = []
        else: cur.append(x)
    return meta, t, docs, cur

def read_shards(d):
    """(has_mask, [(tokens, mask or None)] of each shard of the dataset directory d in order)."""
    rows, meta = [], {}
    with open(os.path.join(d, "index.tsv")) as f:
        lines = [l.split() for l in f if l.strip() and not l.startswith("#")]
    assert lines[0] == ["tessera-dataset", "1"], lines[0]
    assert lines[-1] == ["end"]
    for l in lines[1:-1]:
        if l[0] == "shard":
            rows.append((l[1], int(l[2])))
        elif l[0] == "tokenizer":  # the optional record of the tokenizer that made the dataset
            meta["tokenizer"] = l[1]
        else:
            meta[l[0]] = int(l[1])
    width, has_mask = meta["token_width"], meta["has_mask"]
    shards = []
    for no, (name, n) in enumerate(rows):
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        assert data[:8] == b"TSRSHARD"
        version, hsize, w, flags, vocab, shard_no, nt, toff, moff = struct.unpack_from(
            "<IIIIIIQQQ", data, 8)
        # flags: bit 0 a mask channel, bit 1 its segment starts (has_mask 2)
        assert (version, hsize, w, flags, vocab, shard_no, nt) == \
            (1, 64, width, [0, 1, 3][has_mask], meta["vocab_size"], no, n), (name, version, w, flags, nt)
        assert len(data) == 64 + nt * w + (nt if has_mask else 0), (name, len(data))
        t = np.frombuffer(data, dtype="<u2" if w == 2 else "<u4", count=nt, offset=toff)
        m = np.frombuffer(data, dtype=np.uint8, count=nt, offset=moff) if has_mask else None
        shards.append((t.astype(np.int64), m))
    return has_mask, shards


def expected_doc(doc, ids, eos, bos, no_eos, tp, with_mask):
    toks, mask = [], []
    kind = doc["kind"]
    if bos:
        toks.append(eos); mask.append(1 if kind == "text" or tp else 0)
    for idx, role in doc["segs"]:
        toks += ids[idx]
        mask += [1 if role in ("text", "target") or tp else 0] * len(ids[idx])
    if not no_eos:
        toks.append(eos)
        mask.append(0 if kind == "chat" and not doc["ends_assistant"] and not tp else 1)
    return np.array(toks, np.int64), (np.array(mask, np.uint8) if with_mask else None)


def check(argv):
    flags = {a for a in argv if a.startswith("--") and a != "--assign"}
    assign_file = argv[argv.index("--assign") + 1] if "--assign" in argv else None
    pos = [a for i, a in enumerate(argv) if not a.startswith("--") and
           (i == 0 or argv[i - 1] != "--assign")]
    out, ids_file, eos, specs = pos[0], pos[1], int(pos[2]), pos[3:]
    with open(ids_file) as f:
        ids = [[int(x) for x in line.split()] for line in f]
    docs = []
    for s in specs:
        with open(s) as f:
            docs += json.load(f)["docs"]
    with_mask = any(d["kind"] != "text" for d in docs)
    streams = [read_dataset(os.path.join(out, "train"))]
    streams.append(read_dataset(os.path.join(out, "val")) if os.path.isdir(os.path.join(out, "val"))
                   else (np.zeros(0, np.int64), np.zeros(0, np.uint8) if with_mask else None))
    for s, name in zip(streams, ("train", "val")):
        if (s[1] is not None) != with_mask:
            print("FAIL: %s/%s: mask channel %s, expected %s" % (out, name, s[1] is not None, with_mask))
            return 1
    posn, docs_n, toks_n, targets_n, assign = [0, 0], [0, 0], [0, 0], [0, 0], []
    for k, d in enumerate(docs):
        t, m = expected_doc(d, ids, eos, "--bos" in flags, "--no-eos" in flags,
                            "--target-prompts" in flags, with_mask)
        hit = None
        for sp in (0, 1):
            st, sm = streams[sp]
            p = posn[sp]
            if p + len(t) <= len(st) and np.array_equal(st[p:p + len(t)], t):
                if with_mask and not np.array_equal(sm[p:p + len(t)], m):
                    print("FAIL: document %d (%s): tokens match at %s[%d] but the mask differs:\n"
                          "  got      %s\n  expected %s" % (k, d["kind"], ("train", "val")[sp], p,
                                                            sm[p:p + len(t)].tolist(), m.tolist()))
                    return 1
                hit = sp
                break
        if hit is None:
            print("FAIL: document %d (%s, %d tokens) is at neither train[%d] nor val[%d]\n"
                  "  expected %s\n  train    %s\n  val      %s" % (
                      k, d["kind"], len(t), posn[0], posn[1], t[:24].tolist(),
                      streams[0][0][posn[0]:posn[0] + 24].tolist(),
                      streams[1][0][posn[1]:posn[1] + 24].tolist()))
            return 1
        posn[hit] += len(t)
        docs_n[hit] += 1
        toks_n[hit] += len(t)
        targets_n[hit] += int(m.sum()) if with_mask else len(t)
        assign.append(str(hit))
    for sp, name in ((0, "train"), (1, "val")):
        if posn[sp] != len(streams[sp][0]):
            print("FAIL: %s holds %d tokens after the expected documents" % (
                name, len(streams[sp][0]) - posn[sp]))
            return 1
    if assign_file:
        with open(assign_file, "w") as f:
            f.write("".join(assign) + "\n")
    print("docs %d %d tokens %d %d targets %d %d" % (docs_n[0], docs_n[1], toks_n[0], toks_n[1],
                                                     targets_n[0], targets_n[1]))
    return 0


def split_examples(t, m, eos):
    """The examples of an unpacked stream: its pieces up to and including each EOT."""
    ends = np.flatnonzero(t == eos)
    assert len(t) == 0 or (len(ends) and ends[-1] == len(t) - 1), "stream does not end with EOT"
    starts = np.concatenate(([0], ends[:-1] + 1)) if len(ends) else []
    return [(t[a:b + 1], m[a:b + 1]) for a, b in zip(starts, ends)]


def pack_split(packed_dir, plain_dir, T, eos):
    """Checks one split; returns its counts or raises AssertionError naming the fault."""
    plain = read_dataset(plain_dir) if os.path.isdir(plain_dir) else (np.zeros(0, np.int64),
                                                                         np.zeros(0, np.uint8))
    assert plain[1] is not None, "%s: no mask channel" % plain_dir
    # what --pack must make of each example, by docs/prep.md: whole, truncated or dropped
    want = []
    for t, m in split_examples(plain[0], plain[1], eos):
        if len(t) <= T:
            want.append(("whole", t, m))
        elif m[:T - 1].sum() == 0:
            want.append(("dropped", t, m))
        else:
            want.append(("truncated", t[:T - 1], m[:T - 1]))
    c = dict(windows=0, examples=0, truncated=0, dropped=0, padding=0, tokens=0, exact=0)
    if not os.path.isdir(packed_dir):
        assert all(w[0] == "dropped" for w in want), "%s missing" % packed_dir
        c["dropped"] = len(want)
        return c
    with open(os.path.join(packed_dir, "index.tsv")) as f:
        note = [l.rstrip("\n").split("\t")[:2] for l in f if l.startswith("# packed_seq_len")]
    assert note == [["# packed_seq_len", str(T)]], "index.tsv: packed_seq_len note %s" % note
    has_mask, shards = read_shards(packed_dir)
    assert has_mask == 2, "%s: has_mask %d, expected 2 (the segment starts)" % (packed_dir, has_mask)
    k = 0  # next expected example

    def skip_dropped():
        nonlocal k
        while k < len(want) and want[k][0] == "dropped":
            c["dropped"] += 1
            k += 1

    for sn, (t, mb) in enumerate(shards):
        n = len(t)
        m, starts = mb & 1, np.zeros(n, bool)  # the loss mask; where the segments must start
        starts[0] = True
        c["tokens"] += n
        # whole samples only: 1 + m*T tokens, and every shard but the last the same size
        assert n >= T + 1 and (n - 1) % T == 0, "shard %d: %d tokens is not 1 + m*%d" % (sn, n, T)
        assert sn == len(shards) - 1 or n == len(shards[0][0]), "shard %d: size %d" % (sn, n)
        assert t[0] == eos and m[0] == 0, "shard %d: token 0 is %d (mask %d), not EOT/0" % (
            sn, t[0], m[0])
        c["padding"] += 1
        for w in range((n - 1) // T):
            c["windows"] += 1
            base, pos = 1 + w * T, 0
            where = "shard %d window %d" % (sn, w)
            while pos < T:
                skip_dropped()
                fate, et, em = want[k] if k < len(want) else (None, None, None)
                L = len(et) if et is not None else 0
                at = base + pos
                if fate and pos + L <= T and np.array_equal(t[at:at + L], et):
                    assert np.array_equal(m[at:at + L], em), "%s: example %d: mask %s, want %s" % (
                        where, k, m[at:at + L].tolist(), em.tolist())
                    # every token of the example is a target of this window's sample only, and
                    # the input before its first token (in the same sample) is an EOT
                    samples = {(p - 1) // T for p in range(at, at + L)}
                    assert samples == {w} and t[at - 1] == eos, "%s: example %d crosses" % (where, k)
                    if fate == "truncated":
                        assert pos == 0, "%s: truncated example %d not alone" % (where, k)
                        c["truncated"] += 1
                    c["examples"] += 1
                    starts[at] = True
                    k += 1
                    pos += L
                    if fate == "truncated":
                        break
                    continue
                break
            rest_t, rest_m = t[base + pos:base + T], m[base + pos:base + T]
            assert (rest_t == eos).all() and (rest_m == 0).all(), \
                "%s: at slot %d: neither example %d nor EOT padding: %s / mask %s" % (
                    where, pos, k, rest_t[:12].tolist(), rest_m[:12].tolist())
            assert pos > 0, "%s: holds no example (only padding)" % where
            if pos == T:
                c["exact"] += 1
            else:
                starts[base + pos] = True  # the padding is a segment of its own
            c["padding"] += T - pos
            skip_dropped()
            # greedy: the next example went on only because it did not fit
            if k < len(want) and want[k][0] == "whole" and pos > 0:
                assert len(want[k][1]) > T - pos, "%s: example %d (%d tokens) would fit in %d" % (
                    where, k, len(want[k][1]), T - pos)
        got = (mb & 2) != 0
        assert np.array_equal(got, starts), "shard %d: segment starts at %s, expected at %s" % (
            sn, np.flatnonzero(got)[:12].tolist(), np.flatnonzero(starts)[:12].tolist())
    skip_dropped()
    assert k == len(want), "example %d of %d not in the packed dataset" % (k, len(want))
    return c


def pack(argv):
    packed, plain, T, eos = argv[0], argv[1], int(argv[2]), int(argv[3])
    out = []
    for split in ("train", "val"):
        try:
            c = pack_split(os.path.join(packed, split), os.path.join(plain, split), T, eos)
        except AssertionError as e:
            print("FAIL: %s/%s: %s" % (packed, split, e))
            return 1
        out.append("%s windows %d examples %d truncated %d dropped %d padding %d tokens %d exact %d"
                   % (split, c["windows"], c["examples"], c["truncated"], c["dropped"],
                      c["padding"], c["tokens"], c["exact"]))
    print("; ".join(out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "pack":
        sys.exit(pack(sys.argv[2:]))
    elif len(sys.argv) >= 6 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2:]))
    else:
        print(__doc__)
        sys.exit(2)
