#!/usr/bin/env python3
"""TensorBoard event files read by hand (TFRecord framing, both CRC32Cs, the Event and Summary
protobufs), with no TensorBoard installed: what tests/train/test_tensorboard.sh checks the
trainer's run_dir/tb/ with, and tests/reference/test_hf_clients.py imports (runpy) for its
functions (event_files, scalars, read_file, check).

    python3 tb_events.py check RUN_DIR [resumed] | read FILE | corrupt SRC DST data|length | summary RUN_DIR
"""
import glob, json, os, struct, sys

class Bad(Exception):
    pass

TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)

def crc32c(data):  # CRC-32C (Castagnoli), reflected, init and final xor 0xffffffff
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF

assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value

def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def records(path):
    """TFRecord: u64 length, u32 masked crc of the length, data, u32 masked crc of the data."""
    data, off = open(path, "rb").read(), 0
    while off < len(data):
        if len(data) - off < 12:
            raise Bad(f"{path}: truncated record header at byte {off}")
        (n,), (hc,) = struct.unpack("<Q", data[off:off + 8]), struct.unpack("<I", data[off + 8:off + 12])
        if hc != masked(crc32c(data[off:off + 8])):
            raise Bad(f"{path}: length crc mismatch in the record at byte {off}")
        if len(data) - off - 16 < n:
            raise Bad(f"{path}: truncated record at byte {off} ({n} data bytes announced)")
        body = data[off + 12:off + 12 + n]
        (dc,) = struct.unpack("<I", data[off + 12 + n:off + 16 + n])
        if dc != masked(crc32c(body)):
            raise Bad(f"{path}: data crc mismatch in the record at byte {off}")
        yield off, body
        off += 16 + n

def varint(b, i):
    v = shift = 0
    while True:
        if i >= len(b):
            raise Bad("truncated varint")
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i
        if shift > 63:
            raise Bad("varint longer than 10 bytes")

def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt in (1, 5):
            n = 8 if wt == 1 else 4
            if i + n > len(b):
                raise Bad("truncated fixed field")
            v, i = b[i:i + n], i + n
        elif wt == 2:
            n, i = varint(b, i)
            if i + n > len(b):
                raise Bad("truncated length-delimited field")
            v, i = b[i:i + n], i + n
        else:
            raise Bad(f"field {f}: unexpected wire type {wt}")
        yield f, wt, v

def event(b):
    """Event {1 wall_time double, 2 step int64, 3 file_version string, 5 summary Summary};
    Summary {1 repeated Value}; Value {1 tag string, 2 simple_value float}."""
    ev = {"values": []}
    for f, wt, v in fields(b):
        if (f, wt) == (1, 1):
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif (f, wt) == (2, 0):
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif (f, wt) == (3, 2):
            ev["file_version"] = v.decode()
        elif (f, wt) == (5, 2):
            for f2, wt2, val in fields(v):
                if (f2, wt2) != (1, 2):
                    raise Bad(f"Summary: unexpected field {f2} (wire type {wt2})")
                tag = simple = None
                for f3, wt3, x in fields(val):
                    if (f3, wt3) == (1, 2):
                        tag = x.decode()
                    elif (f3, wt3) == (2, 5):
                        simple = struct.unpack("<f", x)[0]
                    else:
                        raise Bad(f"Value: unexpected field {f3} (wire type {wt3})")
                if tag is None or simple is None:
                    raise Bad("Value without tag or simple_value")
                ev["values"].append((tag, simple))
        else:
            raise Bad(f"Event: unexpected field {f} (wire type {wt})")
    return ev

def read_file(path):
    """The events of one file; the first must be {wall_time, file_version "brain.Event:2"}."""
    evs = [event(body) for _, body in records(path)]
    if not evs or evs[0].get("file_version") != "brain.Event:2" or "step" in evs[0] or evs[0]["values"]:
        raise Bad(f"{path}: the first record is not {{wall_time, file_version 'brain.Event:2'}}")
    for ev in evs:
        if not ev.get("wall_time", 0) > 1.5e9:
            raise Bad(f"{path}: an event without a plausible wall_time")
    for ev in evs[1:]:
        if "file_version" in ev or "step" not in ev or not ev["values"]:
            raise Bad(f"{path}: a scalar event without step or values")
    return evs

def event_files(run):
    return sorted(glob.glob(os.path.join(run, "tb", "events.out.tfevents.*")))

def scalars(files):
    """{tag: {step: value}}: the union of the files, later records winning."""
    out = {}
    for path in files:
        for ev in read_file(path)[1:]:
            for tag, v in ev["values"]:
                out.setdefault(tag, {})[ev["step"]] = v
    return out

def last_lines(run):
    """metrics.jsonl's step and eval lines as {step: line}, the last line of a step counting (a
    resumed run may log a step twice); events, checkpoint lines and blank lines are passed over.
    tests/gpu/real_clients.py reads it with this too."""
    train, ev = {}, {}
    for line in open(os.path.join(run, "metrics.jsonl")):
        if not line.strip():
            continue
        d = json.loads(line)
        if "event" in d or "checkpoint" in d or "step" not in d:
            continue
        if "loss" in d:
            train[d["step"]] = d
        elif "val_loss" in d:
            ev[d["step"]] = d
    return train, ev

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]

def ulps(a, b):  # distance of two positive float32 values in float32 steps
    ia, ib = (struct.unpack("<I", struct.pack("<f", v))[0] for v in (a, b))
    return abs(ia - ib)

def check(run, one_process=True):
    files = event_files(run)
    if not files:
        raise Bad(f"{run}/tb: no event file")
    sc = scalars(files)
    train, ev = last_lines(run)
    # metrics.jsonl holds loss, lr, val_loss, val_ppl with 9 significant digits (1 float32 ulp
    # after rounding), tokens_per_s, mfu and step_time_s with 6 (relative 5e-6), tokens exactly
    nine = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm"}
    six = {"train/tokens_per_s": "tokens_per_s", "train/mfu": "mfu", "train/step_time_s": "step_time_s"}
    bad = []
    peaks = {"memory/peak_bytes": "peak_mem_bytes", "memory/peak_rss_bytes": "peak_rss_bytes"}
    for tag in list(nine) + list(six) + list(peaks) + ["train/tokens", "memory/planned_bytes"]:
        if set(sc.get(tag, {})) != set(train):
            bad.append(f"{tag}: steps {sorted(sc.get(tag, {}))} != metrics.jsonl's {sorted(train)}")
    for s, d in train.items():
        for tag, k in nine.items():
            if d[k] is not None and s in sc.get(tag, {}) and ulps(sc[tag][s], f32(d[k])) > 1:
                bad.append(f"step {s} {tag}: {sc[tag][s]!r} vs metrics.jsonl {d[k]!r}")
        for tag, k in six.items():
            if s in sc.get(tag, {}) and not abs(sc[tag][s] - d[k]) <= 1e-5 * abs(d[k]):
                bad.append(f"step {s} {tag}: {sc[tag][s]!r} vs metrics.jsonl {d[k]!r}")
        if s in sc.get("train/tokens", {}) and sc["train/tokens"][s] != f32(d["tokens"]):
            bad.append(f"step {s} train/tokens: {sc['train/tokens'][s]} vs {d['tokens']}")
    mem = set(sc.get("memory/planned_bytes", {}).values())
    if len(mem) != 1 or not min(mem) > 0:
        bad.append(f"memory/planned_bytes: {sorted(mem)} (expected one positive value)")
    # the peaks: as in metrics.jsonl (float32), never falling within one process (a resumed run
    # starts counting again); the CPU allocator's peak is what the
    # plan counts (weights, grads, AdamW, activations; malloc rounding and the sampler's few KiB
    # over it), and the process's resident peak holds at least that
    last = {}
    for s in sorted(train):
        d = train[s]
        for tag, k in peaks.items():
            if s in sc.get(tag, {}) and sc[tag][s] != f32(d[k]):
                bad.append(f"step {s} {tag}: {sc[tag][s]!r} vs metrics.jsonl {d[k]!r}")
            if one_process and not d[k] >= last.get(k, 0):
                bad.append(f"step {s} {k}: {d[k]} fell from {last[k]}")
            last[k] = d[k]
        if mem and not min(mem) <= d["peak_mem_bytes"] <= 1.10 * min(mem):
            bad.append(f"step {s} peak_mem_bytes {d['peak_mem_bytes']} not within 10% over the "
                       f"plan's {min(mem):.0f}")
        if not d["peak_rss_bytes"] >= d["peak_mem_bytes"]:
            bad.append(f"step {s} peak_rss_bytes {d['peak_rss_bytes']} < peak_mem_bytes")
    for tag, k in (("eval/val_loss", "val_loss"), ("eval/val_ppl", "val_ppl")):
        if set(sc.get(tag, {})) != set(ev):
            bad.append(f"{tag}: steps {sorted(sc.get(tag, {}))} != metrics.jsonl's eval steps {sorted(ev)}")
        for s, d in ev.items():
            if s in sc.get(tag, {}) and ulps(sc[tag][s], f32(d[k])) > 1:
                bad.append(f"step {s} {tag}: {sc[tag][s]!r} vs metrics.jsonl {d[k]!r}")
    print(f"# {run}: {len(files)} event file(s), tags {sorted(sc)}, steps {min(train)}..{max(train)}, "
          f"eval steps {sorted(ev)}")
    for b in bad[:10]:
        print("#   " + b)
    return not bad

def corrupt(src, dst, where):
    """Copies src, flipping one bit in the second record (the first step): a data byte or a
    byte of its length."""
    data = bytearray(open(src, "rb").read())
    offs = [off for off, _ in records(src)]
    off = offs[1]
    data[off + 12 + 5 if where == "data" else off + 1] ^= 0x01
    open(dst, "wb").write(data)

def summary(run):
    """The summary `tessera report` must print, recomputed (report.c's definitions)."""
    train, ev = last_lines(run)
    lines = open(os.path.join(run, "metrics.jsonl")).read().splitlines()
    n_train = sum(1 for l in lines if l.strip() and "event" not in json.loads(l) and "loss" in json.loads(l))
    n_eval = sum(1 for l in lines if l.strip() and "event" not in json.loads(l) and "val_loss" in json.loads(l)
                 and "loss" not in json.loads(l))
    steps = sorted(train)
    print(f"run:        {run} (metrics.jsonl: {n_train} step lines, {n_eval} eval lines)")
    print(f"steps:      {len(steps)} (steps {steps[0]}..{steps[-1]})")
    print("tokens:     %.0f" % train[steps[-1]]["tokens"])
    ls = [(s, train[s]["loss"]) for s in steps if train[s]["loss"] is not None]
    mn = min(ls, key=lambda x: x[1])
    print("loss:       first %.6g (step %d), last %.6g (step %d), min %.6g (step %d)" %
          (ls[0][1], ls[0][0], ls[-1][1], ls[-1][0], mn[1], mn[0]))
    e = ev[max(ev)]
    print("val loss:   %.6g (step %d), ppl %.6g" % (e["val_loss"], max(ev), e["val_ppl"]))
    def median(k):
        v = sorted(train[s][k] for s in steps if train[s][k] is not None)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    print("tokens/s:   median %.6g" % median("tokens_per_s"))
    print("mfu:        median %.4g %%" % (100 * median("mfu")))
    t = 0.0
    for s in steps:
        t += train[s]["step_time_s"]
    print("train time: %.6g s (sum of the step times)" % t)
    saves = {}  # the save lines, the later line of a step counting
    for l in lines:
        d = json.loads(l) if l.strip() else {}
        if d.get("checkpoint") == "save" and "event" not in d:
            saves[d["step"]] = d
    if not saves:
        print("checkpoints: none saved (no save lines)")
        return
    ss = [saves[k] for k in sorted(saves)]
    med = lambda v: v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    block = sorted(d.get("blocking_s", d["seconds"]) for d in ss)
    line = ("checkpoints: %d saved (%d in the background); training stopped %.4g s per save "
            "(median; longest %.4g s)" % (len(ss), sum(d.get("async") is True for d in ss),
                                          med(block), block[-1]))
    w = sorted(d["write_s"] for d in ss if "write_s" in d)
    if w:
        line += ", written in %.4g s (median)" % med(w)
    if "bytes" in ss[-1]:
        line += ", %.1f MB each (the last)" % (ss[-1]["bytes"] / 1e6)
    print(line)

def main():
    try:
        cmd = sys.argv[1]
        if cmd == "check":
            sys.exit(0 if check(sys.argv[2], len(sys.argv) < 4) else 1)  # a 3rd argument: resumed
        elif cmd == "read":
            evs = read_file(sys.argv[2])
            print(" ".join(str(ev["step"]) for ev in evs[1:] if any(t == "train/loss" for t, _ in ev["values"])))
        elif cmd == "corrupt":
            corrupt(*sys.argv[2:5])
        elif cmd == "summary":
            summary(sys.argv[2])
    except Bad as e:
        print(f"tb_events.py: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
