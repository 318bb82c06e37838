#!/usr/bin/python3
"""check_llama_peer.py — is bench/torch_llama.py the model tessera trains? (a check, not a timing)

  build/tests/ref_dump CONFIG DUMP.h5 [KEY=VALUE ...]      (tessera: weights, batch, step-0 grads)
  /usr/bin/python3 bench/check_llama_peer.py DUMP.h5 TORCH_LLAMA_OPTIONS...

Loads the initial weights of a tessera ref_dump file (tests/reference/ref_dump.c) into
torch_llama.py's model built from the given options (the options bench_util.py torch-args prints
for the same config, less the script name) in float64, runs step 0's global batch microbatch by
microbatch as the benchmark does, and compares the mean loss and every parameter gradient with
tessera's (fp32). Every tensor of each side must map to one of the other with the same shape.
Exit 0 when the loss agrees within 1e-6 relative and every gradient within 1e-5 relative (norm of
the difference / norm of tessera's; fp32 against float64), else 1. compare() is also
bench/check_moe_peer.py's, with torch_moe.py and the expert tensors.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llama  # noqa: E402

LOSS_TOL = 1e-6  # relative; the fp32 loss of ~2k tokens against float64 (seen: 1e-9)
GRAD_TOL = 1e-5  # relative L2 per tensor; fp32 sums over 2k tokens against float64 (seen: 7e-7)


def torch_name(name, layer):
    """tessera's parameter name (and layer) -> torch_llama.py's parameter name."""
    per_layer = {"ln1w": "input_norm.weight", "qkvw": "qkv.weight", "attprojw": "o_proj.weight",
                 "ln2w": "post_norm.weight", "fcw": "gate_up.weight", "fcprojw": "down_proj.weight"}
    root = {"wte": "wte.weight", "lnfw": "norm.weight", "lm_head": "lm_head.weight"}
    if name in per_layer:
        return "h.%d.%s" % (layer, per_layer[name])
    if name in root:
        return root[name]
    sys.exit("check_llama_peer: tessera tensor %r has no counterpart in torch_llama.py" % name)


def tessera_tensors(group):
    """{torch name: array} of one /params-like group of the dump (per-layer stacks split)."""
    out = {}
    for name, ds in group.items():
        arr = ds[()]
        if name in ("wte", "lnfw", "lm_head"):
            out[torch_name(name, 0)] = arr
        else:
            for layer in range(arr.shape[0]):
                out[torch_name(name, layer)] = arr[layer]
    return out


def rel(a, b):
    d = math.sqrt(float(((a - b) ** 2).sum()))
    n = math.sqrt(float((b ** 2).sum()))
    return d / n if n > 0 else d


def compare(argv, peer, tensors, prog, extra=None):
    """Builds peer's model (peer.parse_args, peer.build) from argv[1:] in float64, loads the
    weights of the dump argv[0] (tensors(group) -> {torch name: array}), runs step 0 and compares;
    returns the exit status. extra, if given, also sees the model after each microbatch
    (extra.microbatch(model, targets, counted)) and compares what it gathered with the dump's
    step0 group (extra.check(group) -> ok)."""
    if len(argv) < 2:
        sys.exit(sys.modules["__main__"].__doc__)
    import h5py
    import torch

    a = peer.parse_args(argv[1:])
    model = peer.build(a).double()
    with h5py.File(argv[0], "r") as f:
        weights = tensors(f["params"])
        grads = tensors(f["step0/grads"])
        inputs = torch.as_tensor(f["step0/inputs"][()], dtype=torch.long)
        targets = torch.as_tensor(f["step0/targets"][()], dtype=torch.long)
        loss_ref = float(f["step0"].attrs["loss"])
        step0 = {k: f["step0"][k][()] for k in f["step0"] if k not in ("grads", "logits")}
    params = dict(model.named_parameters())
    if sorted(params) != sorted(weights):
        sys.exit("%s: the tensors differ: only in torch %s, only in tessera %s" % (
            prog, sorted(set(params) - set(weights)), sorted(set(weights) - set(params))))
    with torch.no_grad():
        for n, p in params.items():
            if tuple(p.shape) != weights[n].shape:
                sys.exit("%s: %s: torch %s, tessera %s" % (prog, n, tuple(p.shape), weights[n].shape))
            p.copy_(torch.as_tensor(weights[n], dtype=torch.float64))
    counted = int((targets >= 0).sum())
    loss_sum = 0.0
    for b in range(0, inputs.shape[0], a.micro_batch):
        loss, raw = model(inputs[b:b + a.micro_batch], targets[b:b + a.micro_batch], 1.0 / counted)
        loss.backward()
        loss_sum += float(raw)
        if extra:
            extra.microbatch(model, targets[b:b + a.micro_batch], counted)
    loss = loss_sum / counted
    ok = abs(loss - loss_ref) <= LOSS_TOL * abs(loss_ref)
    print("loss: torch %.8f, tessera %.8f, relative difference %.2e%s" % (
        loss, loss_ref, abs(loss - loss_ref) / abs(loss_ref), "" if ok else "  FAIL"))
    worst = 0.0
    for n, p in params.items():
        e = rel(p.grad.numpy(), grads[n].astype("float64"))
        worst = max(worst, e)
        if not e <= GRAD_TOL:
            ok = False
            print("gradient of %s: relative difference %.2e  FAIL" % (n, e))
    print("gradients: %d tensors, largest relative difference %.2e (tolerance %.0e)" % (
        len(params), worst, GRAD_TOL))
    if extra:
        ok = extra.check(step0) and ok
    print("same model: %s" % ("yes" if ok else "NO"))
    return 0 if ok else 1


def main(argv):
    return compare(argv, torch_llama, tessera_tensors, "check_llama_peer")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
