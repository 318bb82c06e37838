#!/usr/bin/env python3
"""GRPO against a written-out float64 PyTorch reference (docs/rl.md; issue 54).

test_reference.py's tiny Llama, objective = "grpo" through build/tests/ref_dump (the real
trainer: its batched generator makes the rollouts, a reward program scores them, then the
updates), on prompts laid out as `tessera prep --format prompts --pack 8` lays them (each prompt
alone in a window, mask 1, end-of-text padding; prompts.jsonl beside the shards, its count and
CRC32C in index.tsv). The rollouts and rewards are the run's; everything after them is recomputed
here from the dump's rows (context, prompt length, completion length, the rollout's
log-probabilities) and written out:

  reward   = the program's rule (below) + DAPO's overlong penalty
             -p (n - (N - B)) / B for n > N - B (B = grpo.overlong_buffer, p its penalty)
  A_i      = (r_i - mean_g) / (std_g + 1e-6), std unbiased (scale_rewards), or r_i - mean_g
  rho      = exp(logp - old),  l_t = -min(rho A, clip(rho, 1 - eps_lo, 1 + eps_hi) A)
             + beta (exp(ref - logp) - (ref - logp) - 1)
  loss     = sum_i sum_t w_it l_t, w = 1 / (R n_i) (sequence), 1 / sum n (token), 1 / (R N) (constant)

with autograd for the gradients, tessera's clipping and AdamW with its decay groups, grpo.updates
passes per step (the old log-probabilities stay the rollout's). Four runs, ten steps each:
  grpo     sequence aggregation, scaled advantages, symmetric clip 0.2, one update per batch
  dapo     token aggregation, clip-higher 0.28, overlong penalty over the last 3 tokens, dynamic
           sampling, two updates per batch (the second pass's ratios leave 1: the clip acts)
  drgrpo   constant normalisation, unscaled advantages, a KL term (beta 0.05) to the initial
           weights (grpo.reference = initial: stored in run_dir, grpo-reference.bin)
  lora     LoRA on all seven targets (B drawn non-zero by ref_dump), a KL term (beta 0.1) to the base
           with the adapters off (grpo.reference = base)
Checked for each: the rewards and advantages tessera used equal this side's (1e-12, 1e-9); step
1's loss and every gradient within 1e-6 (relative per tensor; the loss 1e-6 absolute, it is near 0
on policy); the ten steps' losses within 1e-6 + 1e-4 |l| and gradient norms within 1e-4 (relative),
the final weights within 1e-4 (relative per tensor); and for dapo that the clip held some tokens,
for the KL runs that the KL term moved the loss.

The reward program (written here): reward = the share of the completion's tokens divisible by 3,
plus 1 when the first token is even; with dapo the first token's parity alone (ties: the groups
dynamic sampling drops).

Run: TESTS=test_grpo bash tests/run.sh
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_reference as R  # noqa: E402
import test_lora as TL  # noqa: E402

np, torch, h5py = R.np, R.torch, R.h5py
F = torch.nn.functional
VOCAB, EOT, P, N, G, PROMPTS = R.VOCAB, R.VOCAB - 1, 8, 6, 4, 24
RUNS = [dict(name="grpo", agg="sequence", scale="true", clip_high=0.2, updates=1),
        dict(name="dapo", agg="token", scale="true", clip_high=0.28, updates=2, overlong=3,
             dynamic="true", parity=True),
        dict(name="drgrpo", agg="constant", scale="false", clip_high=0.2, updates=1, kl=0.05),
        dict(name="lora", agg="sequence", scale="true", clip_high=0.2, updates=1, kl=0.1,
             lora=True)]
CHECKS = 8
PLAN = 1 + CHECKS * len(RUNS)
TOL_STEP1 = 1e-6


def crc32c(data, crc=0):
    """CRC32C (Castagnoli, reflected 0x82F63B78), as tessera's tsr_crc32c"""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def make_prompts(tmp):
    """PROMPTS prompts of 2..P-1 random ids, each alone in a window of P (mask 1, EOT padding)."""
    rng = np.random.RandomState(424242)
    toks, mask = [EOT], [0]
    for _ in range(PROMPTS):
        n = rng.randint(2, P)
        toks += list(rng.randint(0, VOCAB - 1, size=n)) + [EOT] * (P - n)
        mask += [1] * n + [0] * (P - n)
    txt = os.path.join(tmp, "prompts.txt")
    with open(txt, "w") as f:
        for i in range(0, len(toks), 16):
            f.write(" ".join(f"{t}:{m}" for t, m in zip(toks[i:i + 16], mask[i:i + 16])) + "\n")
    out = os.path.join(tmp, "prompts")
    r = subprocess.run([R.TESSERA, "shard", "--out", out, "--vocab", str(VOCAB), "--mask", txt],
                       capture_output=True, text=True)
    if r.returncode == 0:
        recs = "".join(json.dumps({"k": i}) + "\n" for i in range(PROMPTS)).encode()
        open(os.path.join(out, "prompts.jsonl"), "wb").write(recs)
        p = os.path.join(out, "index.tsv")
        lines = open(p).read().split("\n")
        lines[1:1] = [f"# packed_seq_len\t{P}\t(test_grpo.py)", f"# prompts\t{PROMPTS}\t(test_grpo.py)",
                      f"# prompts_crc32c\t{crc32c(recs)}\t(test_grpo.py)"]
        open(p, "w").write("\n".join(lines))
    return out, r


PROGRAM = r'''
import json, sys
parity = len(sys.argv) > 1
for line in sys.stdin:
    q = json.loads(line)
    t = q["tokens"]
    r = (1.0 if t[0] % 2 == 0 else 0.0) if parity else (
        sum(1 for x in t if x % 3 == 0) / len(t) + (1.0 if t[0] % 2 == 0 else 0.0))
    print(json.dumps({"id": q["id"], "reward": r}), flush=True)
'''


def program_reward(toks, parity):
    if parity:
        return 1.0 if toks[0] % 2 == 0 else 0.0
    return sum(1 for x in toks if x % 3 == 0) / len(toks) + (1.0 if toks[0] % 2 == 0 else 0.0)


def write_config(path, run, tmp, data, prog):
    cfg = dict(name="grpo-" + run["name"], grad_clip=R.LLAMA_CLIP, model=R.LLAMA)
    R.write_config(path, cfg, tmp, data)
    text = open(path).read().replace("shuffle = true;", 'shuffle = true;\n  tokenizer = "";')
    open(path, "w").write(text)
    with open(path, "a") as f:
        f.write(f'objective = "grpo";\nsample = {{ tokens = 0; }};\n'
                f'grpo = {{ group_size = {G}; max_new_tokens = {N}; loss_agg = "{run["agg"]}"; '
                f'scale_rewards = {run["scale"]}; clip_high = {run["clip_high"]}; '
                f'updates = {run["updates"]}; overlong_buffer = {run.get("overlong", 0)}; '
                f'dynamic_sampling = {run.get("dynamic", "false")}; kl_coef = {run.get("kl", 0.0)}; '
                f'reference = "{"base" if run.get("lora") else "initial"}"; }};\n'
                f'reward = {{ kind = "command"; command = "{sys.executable} {prog}'
                f'{" parity" if run.get("parity") else ""}"; }};\nguard = {{ window = 0; }};\n')
        if run.get("lora"):
            f.write(f'lora = {{ rank = {TL.RANK}; alpha = {TL.ALPHA}; '
                    f'targets = "{",".join(TL.TARGETS)}"; }};\n')


def read(out, lora):
    d = {}
    with h5py.File(out, "r") as f:
        d["attrs"] = {k: float(v) for k, v in f.attrs.items()}
        groups = ["params", "final"] + (["lora", "final_lora", "step1_lora_grads"] if lora
                                        else ["step1_grads"])
        for g in groups:
            d[g] = {k: f[g][k][()] for k in f[g].keys()}
        for k in ("loss", "lr", "grad_norm"):
            d["train/" + k] = f["train"][k][()]
        for k in ("ctx", "n_prompt", "n", "logp", "reward", "adv"):
            d["grpo/" + k] = f["grpo"][k][()]
    return d


def rows_batch(ctx, np_, n, T):
    """The rows as tessera's grpo_loss.c rows_batch lays them out: inputs, targets (R, T)."""
    R_ = len(n)
    x = torch.full((R_, T), EOT, dtype=torch.long)
    y = torch.full((R_, T), -1, dtype=torch.long)
    for i in range(R_):
        L = 1 + np_[i] + n[i]
        x[i, :L - 1] = torch.as_tensor(ctx[i, :L - 1])
        y[i, np_[i]:L - 1] = torch.as_tensor(ctx[i, np_[i] + 1:L])
    return x, y


def token_logps(model, x, y):
    logits, _ = model(x, y)
    lp = F.log_softmax(logits[..., :VOCAB], dim=-1)
    return lp.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def advantages(r, scale):
    g = r.reshape(-1, G)
    a = g - g.mean(axis=1, keepdims=True)
    if scale:
        a = a / (g.std(axis=1, ddof=1, keepdims=True) + 1e-6)
    return a.reshape(-1)


def grpo_loss(run, policy, reference, x, y, old, n, np_, adv):
    """The step's loss (a torch scalar) and (clipped tokens, kl sum) of a pass."""
    lp = token_logps(policy, x, y)
    R_ = x.shape[0]
    mask = torch.zeros_like(lp)
    o = torch.zeros_like(lp)
    for i in range(R_):
        mask[i, np_[i]:np_[i] + n[i]] = 1
        o[i, np_[i]:np_[i] + n[i]] = torch.as_tensor(old[i, :n[i]], dtype=torch.float64)
    A = torch.as_tensor(adv, dtype=torch.float64).unsqueeze(1)
    rho = torch.exp(lp - o)
    un, cl = rho * A, torch.clamp(rho, 1 - 0.2, 1 + run["clip_high"]) * A
    lt = -torch.minimum(un, cl)
    kl = torch.zeros_like(lt)
    if run.get("kl"):
        with torch.no_grad():
            ref = token_logps(reference, x, y)
        kl = torch.exp(ref - lp) - (ref - lp) - 1
        lt = lt + run["kl"] * kl
    nt = torch.as_tensor(n, dtype=torch.float64).unsqueeze(1)
    if run["agg"] == "sequence":
        w = 1.0 / (R_ * nt)
    elif run["agg"] == "token":
        w = torch.full_like(nt, 1.0 / float(sum(n)))
    else:
        w = torch.full_like(nt, 1.0 / (R_ * N))
    clipped = float(((cl < un) * mask).sum())
    return (w * lt * mask).sum(), clipped, float((kl * mask).sum())


def models(a, d, run):
    policy, reference = R.policy_and_reference(a, d)
    if run.get("lora"):
        adapters = TL.attach(policy, d["lora"], TL.ALPHA / TL.RANK)
        params = [p for ps in adapters.values() for p in ps]
        groups = [{"params": params, "weight_decay": a["weight_decay"]}]
        return policy, reference, adapters, params, groups
    groups = policy.param_groups(a["weight_decay"], bool(a["decay_norms_biases"]),
                                 bool(a["decay_embeddings"]))
    return policy, reference, None, [p for g in groups for p in g["params"]], groups


def check_rewards(tap, name, run, d, a):
    rw, n, ctx, np_ = d["grpo/reward"], d["grpo/n"], d["grpo/ctx"], d["grpo/n_prompt"]
    B, worst, aworst = run.get("overlong", 0), 0.0, 0.0
    for s in range(rw.shape[0]):
        for i in range(rw.shape[1]):
            toks = ctx[s, i, 1 + np_[s, i]:1 + np_[s, i] + n[s, i]]
            want = program_reward(list(toks), run.get("parity"))
            if B and n[s, i] > N - B:
                want -= (n[s, i] - (N - B)) / B
            worst = max(worst, abs(want - rw[s, i]))
        aworst = max(aworst, float(np.max(np.abs(advantages(rw[s], run["scale"] == "true")
                                                 - d["grpo/adv"][s]))))
    tap.ok(worst <= 1e-12, f"{name}: every reward = the program's rule"
                           f"{' + the overlong penalty' if B else ''} (max |diff| {worst:.1e})")
    tap.ok(aworst <= 1e-9, f"{name}: every advantage = the group's (r - mean)"
                           f"{' / (std + 1e-6)' if run['scale'] == 'true' else ''} (max |diff| "
                           f"{aworst:.1e})")


def train(run, a, d, policy, reference, params, groups):
    """The ten steps on the dumped rows; returns per-step losses, norms, step 1's last pass's
    gradients (before clipping), clipped tokens and the KL sum over the steps."""
    opt = torch.optim.AdamW(groups, lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    losses, norms, step1, clipped, kls = [], [], None, 0.0, 0.0
    T = int(a["T"])
    for s in range(int(a["steps"])):
        lr = a["lr"] * R.torch_gpt.lr_multiplier(R.SCHEDULES[int(a["schedule"])], a["alpha_f"], s,
                                                 int(a["warmup_steps"]), int(a["steps"]))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = rows_batch(d["grpo/ctx"][s], d["grpo/n_prompt"][s], d["grpo/n"][s], T)
        adv = advantages(d["grpo/reward"][s], run["scale"] == "true")
        for u in range(run["updates"]):
            opt.zero_grad(set_to_none=False)
            loss, c, kl = grpo_loss(run, policy, reference, x, y, d["grpo/logp"][s],
                                    d["grpo/n"][s], d["grpo/n_prompt"][s], adv)
            loss.backward()
            norm = float(sum(float((p.grad ** 2).sum()) for p in params)) ** 0.5
            if u == 0:
                losses.append(float(loss)), norms.append(norm)
                kls += kl
            clipped += c
            if s == 0 and u == run["updates"] - 1:
                step1 = [p.grad.clone() for p in params]
            R.clip_grads(params, norm, a["grad_clip"])
            opt.step()
    return losses, norms, step1, clipped, kls


def grads_of(policy, adapters, params, step1):
    """step 1's gradients by tessera's tensor names"""
    saved = [p.grad for p in params]
    for p, g in zip(params, step1):
        p.grad = g
    out = ({n: v for n, v in TL.stacked(adapters, grads=True).items()} if adapters
           else {k: v.numpy() for k, v in policy.tessera_tensors(grads=True).items()})
    for p, g in zip(params, saved):
        p.grad = g
    return out


def check_run(tap, run, tmp, data, prog):
    name = "grpo-" + run["name"]
    cfg_path, out = os.path.join(tmp, name + ".cfg"), os.path.join(tmp, name + ".h5")
    write_config(cfg_path, run, tmp, data, prog)
    r = subprocess.run([R.REF_DUMP, cfg_path, out], capture_output=True, text=True, env=R.run_env())
    if not tap.ok(r.returncode == 0, f"{name}: ref_dump exits 0 (rc {r.returncode})"):
        tap.diag((r.stdout + r.stderr)[-3000:])
        return
    d = read(out, run.get("lora"))
    a = d["attrs"]
    check_rewards(tap, name, run, d, a)
    policy, reference, adapters, params, groups = models(a, d, run)
    losses, norms, step1, clipped, kls = train(run, a, d, policy, reference, params, groups)
    got = grads_of(policy, adapters, params, step1)
    want = d["step1_lora_grads"] if run.get("lora") else d["step1_grads"]
    errs = {k: R.rel_err(want[k], got[k]) for k in got}
    worst = max(errs, key=lambda k: errs[k])
    l0 = abs(d["train/loss"][0] - losses[0])
    tap.ok(errs[worst] <= TOL_STEP1 and l0 <= TOL_STEP1,
           f"{name}: step 1's loss {losses[0]:.3e} within {TOL_STEP1:g} (|diff| {l0:.1e}), its "
           f"{len(errs)} gradients rel err <= {TOL_STEP1:g} (worst {worst} {errs[worst]:.1e})")
    le = max(abs(x - y) / (1e-6 + 1e-4 * abs(y)) for x, y in zip(d["train/loss"], losses))
    en = R.rel_err(d["train/grad_norm"], norms)
    tap.ok(le <= 1 and en <= R.TOL_TRAJ, f"{name}: the {len(losses)} steps' losses within 1e-6 + "
                                        f"1e-4|l| ({le:.2f} of it), gradient norms rel err {en:.1e}")
    final = TL.stacked(adapters) if adapters else {k: v.numpy()
                                                   for k, v in policy.tessera_tensors().items()}
    tess = d["final_lora"] if adapters else d["final"]
    fe = {k: R.rel_err(tess[k], final[k]) for k in final}
    fw = max(fe, key=lambda k: fe[k])
    tap.ok(fe[fw] <= R.TOL_TRAJ, f"{name}: the final {len(fe)} tensors rel err <= "
                                 f"{R.TOL_TRAJ:g} (worst {fw} {fe[fw]:.1e})")
    if run["updates"] > 1:
        tap.ok(clipped > 0, f"{name}: the clip held {clipped:.0f} tokens in the second passes")
    elif run.get("kl"):
        tap.ok(kls > 1e-8, f"{name}: the KL term is not 0 (sum over the steps. first passes "
                           f"{kls:.3e})")
    else:
        tap.ok(all(x > 0 for x in norms), f"{name}: every step has a gradient (norms "
                                          + " ".join(f"{x:.3f}" for x in norms[:4]) + " ...)")
    tap.ok(len(losses) == 10, f"{name}: 10 steps")


def body(tap):
    with tempfile.TemporaryDirectory(prefix="tsr-grpo-") as tmp:
        data, r = make_prompts(tmp)
        prog = os.path.join(tmp, "reward.py")
        open(prog, "w").write(PROGRAM)
        if tap.ok(r.returncode == 0, f"the prompts ({PROMPTS}, packed {P})"):
            tap.run_cases(RUNS, lambda run: CHECKS, lambda run: check_run(tap, run, tmp, data, prog))


def main():
    torch.set_default_dtype(torch.float64)
    return R.Tap(PLAN).run_all(body)


if __name__ == "__main__":
    sys.exit(main())
