#!/usr/bin/python3
"""bench_util.py — small helpers of bench/cpu_vs_torch.sh (standard library only).

  bench_util.py rss OUT -- CMD...        run CMD; write to OUT (JSON) its peak RSS in KiB
                                          (getrusage of the reaped children: the largest process
                                          of its tree), wall and CPU time, and the CPU time other
                                          processes used meanwhile; exit with CMD's status
  bench_util.py torch-args CONFIG.cfg    the PyTorch peer for a tessera effective config
                                          (run_dir/config.cfg): bench/torch_gpt.py (GPT-2 style),
                                          bench/torch_llama.py (pos = rope) or bench/torch_moe.py
                                          (rope and moe_experts > 0), then its options;
                                          refuses what the peer does not model (ALiBi, exact GELU,
                                          QK-norm, RoPE scaling, ...)
  bench_util.py linears CONFIG.cfg       the dense decoder's linear layers of one training step
                                          on one process, one line each for bench/matmul_floor:
                                          "NAME N IC OC COUNT" (N rows per microbatch, COUNT calls
                                          per step); nothing for MoE models
  bench_util.py tessera-result LOG METRICS SKIP RSSFILE
                                          one result object (JSON) from a tessera-train run
  bench_util.py torch-result LOG RSSFILE  one result object (JSON) from a torch_gpt.py run
  bench_util.py quiet SECONDS            wait until the CPUs are idle (at most SECONDS)
  bench_util.py table RESULT.json...      the markdown table (and per-round lines) of the results;
                                          <config>-floor.json files (matmul_floor's output) add
                                          the matmul floor table
"""
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time


def die(msg):
    print("bench_util: " + msg, file=sys.stderr)
    sys.exit(2)


def cpu_busy_s():
    """Busy CPU-seconds of the whole machine so far (all CPUs; /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def cmd_rss(argv):
    if len(argv) < 3 or argv[1] != "--":
        die("usage: rss OUT -- CMD...")
    busy0, t0 = cpu_busy_s(), time.monotonic()
    rc = subprocess.call(argv[2:])
    wall, busy = time.monotonic() - t0, cpu_busy_s() - busy0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = ru.ru_utime + ru.ru_stime
    with open(argv[0], "w") as f:
        json.dump({"maxrss_kib": ru.ru_maxrss, "wall_s": wall, "cpu_s": own,
                   # CPU time other processes took while CMD ran: the disturbance
                   "foreign_cpu_s": max(0.0, busy - own)}, f)
    return rc


def cmd_quiet(argv):
    """Waits until the machine is idle (< 10% of one CPU busy over 2 s) or argv[0] seconds pass;
    prints what it saw."""
    limit, t0 = float(argv[0]), time.monotonic()
    while True:
        b0 = cpu_busy_s()
        time.sleep(2.0)
        busy = (cpu_busy_s() - b0) / 2.0
        waited = time.monotonic() - t0
        if busy < 0.1 or waited >= limit:
            print("%s after %.0f s (%.2f CPUs busy)" % ("quiet" if busy < 0.1 else "NOT quiet", waited, busy))
            return 0


def read_cfg(path):
    """Flattened "group.key" -> raw value string of tessera's libconfig output."""
    out, groups = {}, []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.match(r"^([A-Za-z_][\w]*)\s*[=:]\s*\{$", line)
            if m:
                groups.append(m.group(1))
                continue
            if line.startswith("}"):
                groups.pop()
                continue
            m = re.match(r'^([A-Za-z_][\w]*)\s*[=:]\s*(.*?);?$', line)
            if m:
                out[".".join(groups + [m.group(1)])] = m.group(2).strip().strip('"')
    return out


def steps_of(duration, what):
    m = re.fullmatch(r"([0-9.eE+]+)ba", duration)
    if not m:
        die("%s = %r: only step durations (\"Nba\") are supported by the benchmark" % (what, duration))
    return int(float(m.group(1)))


# The keys of tessera's effective config every PyTorch peer models, then those of each model kind
PEER_COMMON = {"model.attn_mask": "causal", "model.head_dim": "0", "model.qkv_bias": "false",
               "model.qk_norm": "false", "model.activation_checkpointing": "none",
               "optim.schedule": "cosine", "optim.decay_norms_biases": "false",
               "optim.decay_embeddings": "false"}
PEER_GPT = {"model.pos": "learned", "model.bias": "true", "model.gelu": "tanh",
            "model.norm": "layernorm", "model.mlp": "gelu", "model.tie_embeddings": "true"}
PEER_LLAMA = {"model.pos": "rope", "model.bias": "false", "model.norm": "rmsnorm",
              "model.mlp": "swiglu", "model.rope_scaling": "none"}
PEER_MOE = {"model.moe_every": "1", "model.moe_shared_size": "0"}


def kv_heads(c):
    """model.n_kv_head, 0 meaning n_head"""
    return int(c.get("model.n_kv_head", "0")) or int(c["model.n_head"])


def mlp_width(c):
    """The MLP's intermediate size: model.intermediate_size, 0 meaning expansion_ratio x d_model"""
    return int(c.get("model.intermediate_size", "0")) or int(round(float(c["model.expansion_ratio"]) *
                                                                   int(c["model.d_model"])))


def require(c, need, peer):
    for k, v in need.items():
        if c.get(k, "").lower() != v:
            die("%s = %r: the PyTorch peer %s models %s = %s only" % (k, c.get(k), peer, k, v))


def cmd_torch_args(argv):
    """Prints the peer script's name (torch_gpt.py, torch_llama.py or torch_moe.py), then its
    options."""
    c = read_cfg(argv[0])
    llama = c.get("model.pos", "").lower() == "rope"
    moe = int(c.get("model.moe_experts", "0")) > 0
    script = "torch_moe.py" if moe else "torch_llama.py" if llama else "torch_gpt.py"
    require(c, PEER_COMMON, script)
    require(c, PEER_LLAMA if llama or moe else PEER_GPT, script)
    if moe:
        require(c, PEER_MOE, script)
    kvh = kv_heads(c)
    args = [script, "--n-layer", c["model.n_layer"], "--d-model", c["model.d_model"],
            "--n-head", c["model.n_head"], "--vocab", c["model.vocab_size"],
            "--vocab-multiple", c["model.vocab_multiple"], "--init-std", c["model.init_std"],
            "--seq-len", c["seq_len"], "--global-batch", c["global_batch"],
            "--micro-batch", c["micro_batch"], "--seed", c["seed"], "--threads", c["threads"],
            "--lr", c["optim.lr"], "--beta1", c["optim.beta1"], "--beta2", c["optim.beta2"],
            "--eps", c["optim.eps"], "--weight-decay", c["optim.weight_decay"],
            "--grad-clip", c["optim.grad_clip"], "--alpha-f", c["optim.alpha_f"],
            "--warmup", str(steps_of(c["optim.warmup"], "optim.warmup")),
            "--total-steps", str(steps_of(c["max_duration"], "max_duration"))]
    if llama:
        F = mlp_width(c)
        args += ["--n-kv-head", str(kvh), "--intermediate-size", str(F),
                 "--rope-theta", c["model.rope_theta"], "--norm-eps", c["model.norm_eps"]]
        if c["model.tie_embeddings"].lower() == "false":
            args.append("--untied")
        if moe:  # an expert's width: moe_intermediate_size, 0 = the dense MLP's F
            FE = int(c["model.moe_intermediate_size"]) or F
            args += ["--experts", c["model.moe_experts"], "--top-k", c["model.moe_top_k"],
                     "--expert-size", str(FE), "--aux-coef", c["model.moe_aux_loss_coef"],
                     "--z-coef", c["model.moe_z_loss_coef"]]
            if c["model.moe_norm_topk"].lower() == "false":
                args.append("--no-norm-topk")
    else:
        if kvh != int(c["model.n_head"]):
            die("model.n_kv_head = %s: the PyTorch peer torch_gpt.py models n_kv_head = n_head only"
                % c["model.n_kv_head"])
        if int(c.get("model.intermediate_size", "0")):
            die("model.intermediate_size = %s: the PyTorch peer torch_gpt.py takes the MLP width "
                "from expansion_ratio only" % c["model.intermediate_size"])
        args += ["--max-seq-len", c["model.max_seq_len"], "--expansion", c["model.expansion_ratio"]]
    print(" ".join(args))
    return 0


def cmd_linears(argv):
    """The matmuls of decoder.c's dense step (one process): per layer q/k/v in one product, the
    attention output, the MLP's up (gate and up in one for SwiGLU) and down products, and the LM
    head (tied or not, one product over the padded vocabulary). Each runs forward and backward
    once per microbatch."""
    c = read_cfg(argv[0])
    if int(c.get("model.moe_experts", "0")) > 0:
        return 0
    C, NH, L = int(c["model.d_model"]), int(c["model.n_head"]), int(c["model.n_layer"])
    KVH, F = kv_heads(c), mlp_width(c)
    hs = int(c.get("model.head_dim", "0")) or C // NH
    mult = int(c["model.vocab_multiple"])
    Vp = (int(c["model.vocab_size"]) + mult - 1) // mult * mult
    mb, gb = int(c["micro_batch"]), int(c["global_batch"])
    if gb % mb:
        die("global_batch %d is not a multiple of micro_batch %d" % (gb, mb))
    N, steps = mb * int(c["seq_len"]), gb // mb
    up = 2 * F if c.get("model.mlp", "gelu").lower() == "swiglu" else F
    for name, ic, oc, count in (("qkv", C, (NH + 2 * KVH) * hs, L), ("attn_out", NH * hs, C, L),
                                ("mlp_up", C, up, L), ("mlp_down", F, C, L), ("head", C, Vp, 1)):
        print(name, N, ic, oc, count * steps)
    return 0


def read_rss(path):
    with open(path) as f:
        return json.load(f)


def cmd_tessera_result(argv):
    log, metrics, skip, rssfile = argv[0], argv[1], int(argv[2]), argv[3]
    params = tps = core = None
    with open(log) as f:
        for line in f:
            m = re.match(r"params: (\d+) trainable", line)
            if m:
                params = int(m.group(1))
            m = re.search(r"(\d+) tokens/step", line)
            if m and line.startswith("batch:"):
                tps = int(m.group(1))
            m = re.search(r"OpenBLAS core ([A-Za-z0-9_]+)", line)
            if m:
                core = m.group(1)
    times = []
    with open(metrics) as f:
        for line in f:
            d = json.loads(line)
            if "step_time_s" in d:
                times.append(d["step_time_s"])
    if params is None or tps is None or len(times) <= skip:
        die("%s / %s: no parameter count, tokens/step or too few steps" % (log, metrics))
    print(json.dumps({"framework": "tessera", "params": params, "tokens_per_step": tps,
                      "openblas_core": core, "step_times": times[skip:],
                      "proc": read_rss(rssfile)}))
    return 0


def cmd_torch_result(argv):
    log, rssfile = argv
    times, summ = [], None
    with open(log) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            d = json.loads(line)
            if d.get("summary"):
                summ = d
            elif "step_time_s" in d:
                times.append(d["step_time_s"])
    if summ is None:
        die("%s: no summary line" % log)
    print(json.dumps({"framework": "torch", "params": summ["params"],
                      "tokens_per_step": summ["tokens_per_step"], "torch": summ["torch"],
                      "openblas_core": summ["openblas_core"], "step_times": times[summ["skip"]:],
                      "proc": read_rss(rssfile), "vmhwm_kib": summ["vmhwm_kib"],
                      "rss_after_import_kib": summ["rss_after_import_kib"],
                      "env": summ.get("env", {}), "blas_libraries": summ.get("blas_libraries", [])}))
    return 0


def mib(kib):
    return "%.0f MiB" % (kib / 1024.0)


# a run during which other processes used more than this many CPUs on average is marked disturbed
# (quiet runs here: 0.00-0.04)
DISTURBED_CPUS = 0.1


def cmd_table(argv):
    # file names: <config>-<framework>-r<round>.json
    runs = {}
    order = []
    floors = {}
    for path in argv:
        m = re.search(r"([^/]+)-floor\.json$", path)
        if m:
            with open(path) as f:
                floors[m.group(1)] = json.load(f)
            continue
        m = re.search(r"([^/]+)-(tessera|torch)-r(\d+)\.json$", path)
        if not m:
            die("%s: expected <config>-<framework>-r<round>.json" % path)
        cfg, fw, rnd = m.group(1), m.group(2), int(m.group(3))
        with open(path) as f:
            d = json.load(f)
        if cfg not in runs:
            runs[cfg] = {}
            order.append(cfg)
        runs[cfg].setdefault(fw, []).append((rnd, d))
    print("Per run: the steady steps (after the first SKIP), tokens/s from their mean, and how much CPU")
    print("other processes used meanwhile")
    disturbed = 0
    for cfg in order:
        for fw in ("tessera", "torch"):
            for rnd, d in sorted(runs[cfg].get(fw, [])):
                ts = d["step_times"]
                pr = d["proc"]
                other = pr["foreign_cpu_s"] / pr["wall_s"]
                disturbed += other > DISTURBED_CPUS
                print("  %-10s %-7s round %d: %2d steps, mean %.4f s, median %.4f s (min %.4f, max %.4f)"
                      " -> %6.0f tok/s | peak RSS %s | other processes used %.2f CPUs%s" % (
                          cfg, fw, rnd, len(ts), statistics.fmean(ts), statistics.median(ts), min(ts),
                          max(ts), d["tokens_per_step"] / statistics.fmean(ts), mib(pr["maxrss_kib"]),
                          other, "  DISTURBED" if other > DISTURBED_CPUS else ""))
    if disturbed:
        print("WARNING: %d run(s) shared the CPUs with other processes (> %.2f CPUs): their step times, "
              "and the ratio, are not the programs' own; rerun on a quiet machine" % (disturbed, DISTURBED_CPUS))
    print()
    print("| config | params | tokens/step | tessera tok/s | PyTorch tok/s | ratio | "
          "tessera peak RSS | PyTorch peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for cfg in order:
        te, to = runs[cfg].get("tessera", []), runs[cfg].get("torch", [])
        if not te or not to:
            continue
        # steady steps of every round pooled: tokens/s = tokens of those steps / their time
        # (the mean, not the median: step times can be bimodal, and a median then jumps between
        # the modes with the mix while the mean is the throughput a long run gets)
        tps = te[0][1]["tokens_per_step"]
        te_t = statistics.fmean([t for _, d in te for t in d["step_times"]])
        to_t = statistics.fmean([t for _, d in to for t in d["step_times"]])
        te_rss = max(d["proc"]["maxrss_kib"] for _, d in te)
        to_rss = max(d["proc"]["maxrss_kib"] for _, d in to)
        params = te[0][1]["params"]
        if params != to[0][1]["params"]:
            print("WARNING: %s: tessera has %d parameters, PyTorch %d" % (cfg, params, to[0][1]["params"]),
                  file=sys.stderr)
        print("| %s | %.2fM | %d | %.0f | %.0f | %.2f× | %s | %s |" % (
            cfg, params / 1e6, tps, tps / te_t, tps / to_t, to_t / te_t, mib(te_rss), mib(to_rss)))
    if floors:
        print()
        print("Matmul floor (bench/matmul_floor: the step's matmuls through tessera's CPU backend on their")
        print("own, median of the repetitions; PyTorch runs the same products with the same OpenBLAS, so")
        print("its step / this floor bounds the ratio any work outside the matmuls can reach; at the FMA")
        print("peak: what even a perfect fp32 GEMM would leave):")
        print()
        print("| config | matmul GFLOP/step | matmuls alone | GFLOP/s | share of tessera's step | "
              "ratio ceiling | FMA peak | ceiling at the FMA peak |")
        print("|---|---|---|---|---|---|---|---|")
    for cfg in order:
        fl, te, to = floors.get(cfg), runs[cfg].get("tessera", []), runs[cfg].get("torch", [])
        if not fl or not te or not to:
            continue
        te_t = statistics.fmean([t for _, d in te for t in d["step_times"]])
        to_t = statistics.fmean([t for _, d in to for t in d["step_times"]])
        print("| %s | %.1f | %.3f s | %.0f | %.0f%% | %.2f× | %.0f GFLOP/s | %.2f× |" % (
            cfg, fl["gflop"], fl["s"], fl["gflops"], 100 * fl["s"] / te_t, to_t / fl["s"],
            fl["fma_gflops"], to_t / fl["fma_s"]))
    return 0


def main():
    if len(sys.argv) < 2:
        die(__doc__)
    cmds = {"rss": cmd_rss, "quiet": cmd_quiet, "torch-args": cmd_torch_args, "linears": cmd_linears,
            "tessera-result": cmd_tessera_result,
            "torch-result": cmd_torch_result, "table": cmd_table}
    if sys.argv[1] not in cmds:
        die("unknown command %r\n%s" % (sys.argv[1], __doc__))
    return cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
