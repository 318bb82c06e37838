#!/usr/bin/env python3
"""torch_peer.py — the PyTorch peer of bench/gpu/run.sh: one tessera recipe trained in PyTorch
the way a PyTorch user would on one GPU, timed, one JSON line out.

  python3 bench/gpu/torch_peer.py --config configs/gpt2-124m.cfg --set micro_batch=32 \
      --set global_batch=32 [--steps 20] [--warmup 5] [--no-compile]
  /usr/bin/python3 bench/gpu/torch_peer.py --config configs/gpt2-124m.cfg --device cpu --tiny
                                             (the self-check: seconds on the CPU, Debian's torch)
  python3 bench/gpu/torch_peer.py --config configs/mpt-1b.cfg --dry-run
                                             (the resolved shape, N and FLOPs/token; no torch)

The model is tests/reference/torch_gpt.py's GPT (the independent PyTorch twin of tessera's
decoder that the reference test checks tessera against: learned positions + biases + tanh GELU
for GPT-2 recipes, ALiBi + no biases + exact GELU for MPT ones, tied head, cross-entropy over the
real V of the padded Vp logits), or for the Llama-style recipes (model.pos = "rope": Llama 3,
Qwen 2.5 and 3) tests/reference/torch_llama.py's Llama (RMSNorm, RoPE with Llama 3.1's scaling,
grouped-query attention, SwiGLU, optional qkv biases and QK-norm, tied or untied head), built
from the recipe's keys, with the 2026 families' variants torch_llama has (docs/models.md, issue
67): model.norm_placement post (OLMo 2: x + norm(f(x))) and sandwich (Gemma), qk_norm_scope
projection (OLMo 2), no_rope_layers (SmolLM3's NoPE layers), embed_scale sqrt_d_model,
mlp geglu_tanh, final_logit_softcapping, query_pre_attn_scalar (SDPA's scale), rope_scaling
linear, partial_rotary_factor. Gemma's (1 + w) RMSNorm needs nothing: tessera's weight is 1 + w.
Refused, naming the key (exit 2; never silently another model): mixture-of-experts recipes,
sliding-window layers (model.layer_types, sliding_window: Gemma 3, OLMo 3, gpt-oss), attention
sinks, the attention soft-cap, the attention output gate, activation compression and YaRN. bench/torch_gpt.py (the CPU
benchmark's peer) is not used for the model: it models only the GPT-2 form and keeps a T x T mask
buffer in every block. Only its attention is replaced (class swap, same parameters): instead of
the explicit softmax, F.scaled_dot_product_attention,
  - learned positions: is_causal=True, no mask, so SDPA may take its flash kernel;
  - ALiBi: an additive (1, NH, T, T) bias in the compute dtype (-slope_h * (i - j) for j <= i,
    -inf above the diagonal: MPT's ALiBi, which tessera uses too). Flash kernels take no bias,
    so this runs the memory-efficient (or cuDNN) kernel; the default --sdpa-backends for ALiBi
    leaves out the math fallback, which would materialise B x NH x T x T probabilities.
  - RoPE (Llama-style): is_causal=True, no mask; grouped-query heads through SDPA's enable_gqa
    where this torch has it (2.5 and later), else the key/value heads repeated (repeat_kv);
    RoPE's cos and sin computed once per forward and applied in fp32, q and k then cast to the
    compute dtype for SDPA. A recipe's model.attn_mask = "document" is refused: set
    model.attn_mask=causal for both programs (run.sh's SETS).
  The kernels that really ran are read from one profiled step after the timed ones
  ("attention_ops"). On a torch without SDPA (Debian's 1.13) a plain-math stand-in with the same
  arguments is used, so the mask code is still exercised. Before timing, the SDPA attention of
  block 0 is checked against the reference's explicit attention (fp32) on random input
  ("attention_check"; a mismatch is an error).

One optimizer step: global_batch / micro_batch microbatches (forward under bf16 autocast on CUDA,
fp32 on the CPU; the summed cross-entropy of each scaled by 1 / tokens of the step; backward),
global-norm clipping (optim.grad_clip), AdamW (fused=True on CUDA) with the recipe's
lr/betas/eps/weight decay groups. The lr is held at optim.lr (a schedule costs nothing on the GPU).
The model (not the optimizer) goes through torch.compile on CUDA unless --no-compile. Tokens are
uniform random ids made on the device before the loop (the data cannot change a dense step's
work), rotated over 4 batches.

Timing: --warmup steps first (compilation happens in the first), then --steps timed steps, each
between two CUDA events (CPU: time.perf_counter), no host synchronisation inside the loop; the
median step gives tokens/s and MFU; the wall time of all timed steps gives tokens_per_s_wall as a
cross-check. MFU = (6 N + 12 L d T) x tokens/s / peak (docs/mfu.md), N = trainable parameters,
embeddings included, tied head once, padded vocabulary rows excluded (as tessera counts them); the
peak is --peak-flops, else 989.4e12 for H100/H200 and 312e12 for A100 (bf16 dense), 172.5e9 per
thread on the CPU. Peak memory: torch.cuda.max_memory_allocated over the whole run (CPU: VmHWM).

Output: progress on stderr; on stdout exactly one JSON line, with "error" (and exit status 3)
when the run failed (out of memory, say); exit status 2 for a recipe the peer does not model.
"""
import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True  # import the siblings without leaving __pycache__ behind

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# --tiny: the recipe's architecture (positions, bias, GELU) at toy size, for the CPU self-check
# and run.sh's TINY=1 (which passes the same keys to tessera-train: --tiny-sets); a Llama-style
# recipe also gets TINY_ROPE_SETS (grouped-query heads 4:2 of 16, SwiGLU 128)
TINY_SETS = ["model.n_layer=2", "model.d_model=64", "model.n_head=4", "model.vocab_size=512",
             "model.vocab_multiple=64", "model.max_seq_len=64", "seq_len=64", "micro_batch=4",
             "global_batch=4"]
TINY_ROPE_SETS = ["model.n_kv_head=2", "model.head_dim=16", "model.intermediate_size=128"]

# peak dense FLOP/s per device, as src/telemetry/metrics_units.c (docs/mfu.md)
PEAKS = (("H100", 989.4e12), ("H200", 989.4e12), ("A100", 312e12))
CPU_PEAK_PER_THREAD = 172.5e9


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    # registered under its name: torch.compile (dynamo) imports a traced function's module by name
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# bench/bench_util.py: tessera's config reader (standard library only)
bench_util = load_module("bench_util", os.path.join(ROOT, "bench", "bench_util.py"))


def log(msg):
    print("torch_peer: " + msg, file=sys.stderr, flush=True)


class Refused(Exception):
    """A recipe the peer does not model (exit status 2)."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="tessera recipe (configs/*.cfg)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe key as tessera-train --set does (repeatable; applied "
                        "after --tiny)")
    p.add_argument("--tiny", action="store_true", help="toy dimensions: " + " ".join(TINY_SETS))
    p.add_argument("--tiny-sets", action="store_true",
                   help="print the --tiny keys of --config's recipe, one a line, and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="print the resolved shape, N and FLOPs/token as JSON and exit (no torch)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=5, help="optimizer steps before them, not timed")
    p.add_argument("--no-compile", action="store_true", help="eager PyTorch (no torch.compile)")
    p.add_argument("--compile-mode", default="default", help="torch.compile mode (default, max-autotune, ...)")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto",
                   help="autocast dtype; auto = bf16 on CUDA, fp32 on the CPU")
    p.add_argument("--sdpa-backends", default="auto",
                   help="comma list of flash, efficient, cudnn, math allowed to SDPA; auto = all "
                        "for learned positions, efficient,cudnn for ALiBi")
    p.add_argument("--peak-flops", type=float, default=0.0, help="peak FLOP/s for MFU; 0 = from the device")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads); 0 = torch's default")
    p.add_argument("--label", default="", help="model name in the output (default: the config's file name)")
    p.add_argument("--no-check", action="store_true", help="skip the attention check")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    return a


# ---- the recipe ----

def tiny_sets(c):
    """The --tiny keys for a recipe's flattened keys c (the Llama form's extra ones with RoPE; a
    recipe with NoPE layers gets "1,0", so that one of the 2 toy layers has no positions)."""
    rope = c.get("model.pos", "").strip('"').lower() == "rope"
    nope = ["model.no_rope_layers=1,0"] if c.get("model.no_rope_layers", "").strip('"').strip() else []
    return TINY_SETS + (TINY_ROPE_SETS + nope if rope else [])


# keys of tessera's model the peer does not model: refused (exit 2, the key named) when a recipe
# sets one to anything but this value (docs/models.md; MoE is refused by model.moe_experts)
UNMODELLED = (("model.layer_types", ""), ("model.sliding_window", "0"), ("model.attn_sinks", "false"),
              ("model.attn_output_gate", "false"), ("model.attn_logit_softcapping", "0"),
              ("model.activation_compression", "none"))


def refuse_unmodelled(c):
    for key, default in UNMODELLED:
        v = c.get(key, default).strip().strip('"').lower()
        same = v == default or (default == "0" and v.replace(".", "").strip("0") == "")
        if key == "model.layer_types" and v:  # every layer full attention is the default
            same = all(t.strip() == "full_attention" for t in v.split(","))
        if not same:
            raise Refused("%s = %r: the peer does not model it (only %s = %r)" % (key, c[key], key, default))


def rope_pattern(c, L):
    """model.no_rope_layers as one 1/0 per layer (a shorter pattern repeated), () = all RoPE."""
    v = c.get("model.no_rope_layers", "").strip().strip('"')
    if not v:
        return ()
    try:
        pat = [int(x) for x in v.split(",")]
    except ValueError:
        pat = []
    if not pat or any(x not in (0, 1) for x in pat):
        raise Refused("model.no_rope_layers = %r: expected a comma list of 1 and 0" % v)
    return tuple(pat[l % len(pat)] for l in range(L))


def resolve(a):
    """The recipe's flattened keys with --tiny and --set applied, and the peer's shape of it."""
    c = bench_util.read_cfg(a.config)
    for kv in (tiny_sets(c) if a.tiny else []) + a.set:
        if "=" not in kv:
            raise Refused("--set %r: expected KEY=VALUE" % kv)
        k, v = kv.split("=", 1)
        c[k.strip()] = v.strip().strip('"')

    def num(key, default=None, kind=int):
        v = c.get(key)
        if v is None or v == "":
            if default is None:
                raise Refused("%s: required (not in %s nor --set)" % (key, a.config))
            return default
        try:
            return kind(float(v)) if kind is int else kind(v)
        except ValueError:
            raise Refused("%s = %r: not a number" % (key, v))

    def word(key, default):
        return c.get(key, default).lower()

    for key, want in (("model.attn_mask", "causal"), ("model.activation_checkpointing", "none")):
        if word(key, want) != want:
            raise Refused("%s = %r: the peer models %s = %s only" % (key, c[key], key, want))
    if num("model.moe_experts", 0) > 0:
        raise Refused("model.moe_experts = %d: the peer models dense recipes only" % num("model.moe_experts"))
    refuse_unmodelled(c)
    pos, gelu, bias = word("model.pos", "learned"), word("model.gelu", "tanh"), word("model.bias", "true")
    norm, mlp = word("model.norm", "layernorm"), word("model.mlp", "gelu")
    rope = pos == "rope"
    if pos not in ("learned", "alibi", "rope") or gelu not in ("tanh", "exact") or bias not in ("true", "false"):
        raise Refused("model.pos/gelu/bias = %s/%s/%s: unknown" % (pos, gelu, bias))
    if (norm, mlp, bias) not in ((("rmsnorm", "swiglu", "false"), ("rmsnorm", "geglu_tanh", "false"))
                                 if rope else (("layernorm", "gelu", "true"), ("layernorm", "gelu", "false"))):
        raise Refused("model.pos/norm/mlp/bias = %s/%s/%s/%s: the peer models GPT-2 and MPT "
                      "(layernorm, gelu) and the Llama form (rope, rmsnorm, swiglu or geglu_tanh, "
                      "no bias)" % (pos, norm, mlp, bias))
    L, C, NH = num("model.n_layer"), num("model.d_model"), num("model.n_head")
    V, mult = num("model.vocab_size"), num("model.vocab_multiple", 128)
    T = num("seq_len")
    B, GB = num("micro_batch"), num("global_batch")
    if C % NH:
        raise Refused("model.d_model %d is not a multiple of model.n_head %d" % (C, NH))
    if GB % B:
        raise Refused("global_batch %d is not a multiple of micro_batch %d" % (GB, B))
    ratio = num("model.expansion_ratio", 4.0, float)
    F = int(math.floor(ratio * C + 0.5))  # llround, as src/model/model.c
    max_T = num("model.max_seq_len", 0) or T
    if pos == "learned" and max_T < T:
        raise Refused("model.max_seq_len %d < seq_len %d" % (max_T, T))
    KVH, hs = num("model.n_kv_head", 0) or NH, num("model.head_dim", 0) or C // NH
    if NH % KVH:
        raise Refused("model.n_head %d is not a multiple of model.n_kv_head %d" % (NH, KVH))
    if rope:
        F = num("model.intermediate_size", 0) or F
    s = {"L": L, "C": C, "NH": NH, "F": F, "V": V, "Vp": (V + mult - 1) // mult * mult, "T": T,
         "max_T": max_T, "alibi": pos == "alibi", "bias": bias == "true", "gelu_exact": gelu == "exact",
         "rope": rope, "KVH": KVH, "hs": hs,
         "qkv_bias": word("model.qkv_bias", "false") == "true", "qk_norm": word("model.qk_norm", "false") == "true",
         "tie": word("model.tie_embeddings", "true") == "true",
         "norm_eps": num("model.norm_eps", 1e-5, float), "rope_theta": num("model.rope_theta", 10000.0, float),
         "rope_scaling": word("model.rope_scaling", "none"),
         "rope_factor": num("model.rope_factor", 8.0, float),
         "rope_low": num("model.rope_low_freq_factor", 1.0, float),
         "rope_high": num("model.rope_high_freq_factor", 4.0, float),
         "rope_orig": num("model.rope_original_max_pos", 8192),
         "B": B, "global_batch": GB, "grad_accum": GB // B,
         "init_std": num("model.init_std", 0.02, float),
         "lr": num("optim.lr", 6e-4, float), "beta1": num("optim.beta1", 0.9, float),
         "beta2": num("optim.beta2", 0.95, float), "eps": num("optim.eps", 1e-8, float),
         "weight_decay": num("optim.weight_decay", 0.0, float),
         "grad_clip": num("optim.grad_clip", 1.0, float),
         "decay_norms_biases": word("optim.decay_norms_biases", "false") == "true",
         "decay_embeddings": word("optim.decay_embeddings", "false") == "true",
         "seed": num("seed", 42),
         # the 2026 families' variants (docs/models.md), the Llama form only
         "placement": word("model.norm_placement", "pre"), "qk_scope": word("model.qk_norm_scope", "head"),
         "ropes": rope_pattern(c, L), "embed_scale": word("model.embed_scale", "none"),
         "geglu": mlp == "geglu_tanh", "final_softcap": num("model.final_logit_softcapping", 0.0, float),
         "qpas": num("model.query_pre_attn_scalar", 0.0, float),
         "partial": num("model.partial_rotary_factor", 1.0, float)}
    variants = (s["placement"] != "pre" or s["qk_scope"] != "head" or s["ropes"] or s["embed_scale"] != "none"
                or s["final_softcap"] or s["qpas"] or s["partial"] != 1.0)
    if not rope and (KVH != NH or hs * NH != C or s["qkv_bias"] or s["qk_norm"] or not s["tie"] or variants):
        raise Refused("n_kv_head, head_dim, qkv_bias, qk_norm, untied embeddings and the variants "
                      "(norm_placement, qk_norm_scope, no_rope_layers, embed_scale, soft-caps, "
                      "query_pre_attn_scalar, partial_rotary_factor): the peer models them in the "
                      "Llama form (model.pos = rope) only")
    if rope and s["rope_scaling"] not in ("none", "llama3", "linear"):
        raise Refused("model.rope_scaling = %r: the peer models none, llama3 and linear" % s["rope_scaling"])
    for key, v, allowed in (("model.norm_placement", s["placement"], ("pre", "post", "sandwich")),
                            ("model.qk_norm_scope", s["qk_scope"], ("head", "projection")),
                            ("model.embed_scale", s["embed_scale"], ("none", "sqrt_d_model"))):
        if v not in allowed:
            raise Refused("%s = %r: the peer models %s" % (key, v, ", ".join(allowed)))
    s["params"] = counted_params(s)
    # docs/mfu.md: an untied model's input embedding (a lookup, no multiply-add) is left out of N
    s["flops_per_token"] = 6 * (s["params"] - (0 if s["tie"] else V * C)) + 12 * L * NH * hs * T
    s["tokens_per_step"] = GB * T
    return s


def counted_params(s):
    """N as tessera counts it: embeddings in, tied head once, padded rows out (docs/mfu.md)."""
    if s["rope"]:
        C, F, q, kv = s["C"], s["F"], s["NH"] * s["hs"], s["KVH"] * s["hs"]
        qk = (q + kv) if s["qk_scope"] == "projection" else 2 * s["hs"]
        per_layer = ((4 if s["placement"] == "sandwich" else 2) * C  # the RMSNorms (post: 2 after)
                     + C * (q + 2 * kv) + (q + 2 * kv) * s["qkv_bias"]
                     + qk * s["qk_norm"]                          # QK-norm weights
                     + q * C                                      # o_proj
                     + 3 * C * F)                                 # gate, up, down
        return s["V"] * C * (1 if s["tie"] else 2) + s["L"] * per_layer + C
    C, F, b = s["C"], s["F"], 1 if s["bias"] else 0
    per_layer = (2 * C * (1 + b)                 # ln1, ln2
                 + 3 * C * C + b * 3 * C         # qkv
                 + C * C + b * C                 # attention projection
                 + C * F + b * F + F * C + b * C)  # MLP
    return (s["V"] * C + (0 if s["alibi"] else s["max_T"] * C) + s["L"] * per_layer
            + C * (1 + b))                       # final LayerNorm


# ---- the model ----

def sdpa_math(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """F.scaled_dot_product_attention's math, for a torch that lacks it (same arguments)."""
    import torch

    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if is_causal:
        T = q.shape[-2]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    if attn_mask is not None:
        s = s + attn_mask
    return torch.softmax(s, dim=-1) @ v


def attention_bias(tg, NH, T, dtype, device):
    """(1, NH, T, T) additive ALiBi + causal bias: -slope_h * (i - j) for key j <= query i, -inf
    above the diagonal. The relative form (0 on the diagonal) rather than torch_gpt's non-full
    form slope_h * (j - (T-1)), which differs by a per-row constant that softmax ignores: its
    entries reach -slope*(T-1) everywhere, where bf16's spacing (4 at 1024) would swamp the
    differences between neighbouring keys."""
    import torch

    i = torch.arange(T, dtype=torch.float64)
    rel = (i.view(T, 1) - i.view(1, T))                                   # i - j
    b = -tg.alibi_slopes(NH).view(NH, 1, 1) * rel                         # (NH, T, T)
    b = b.masked_fill(rel < 0, float("-inf"))
    return b.unsqueeze(0).to(device=device, dtype=dtype).contiguous()


def make_attention_class(tg, sdpa):
    class SDPAAttention(tg.Attention):
        """torch_gpt's Attention (same qkv / proj parameters) through scaled_dot_product_attention."""

        attn_bias = None  # the (1, NH, T, T) ALiBi + causal bias, set after the model is built

        def forward(self, x, allowed=None):
            if allowed is not None:
                raise NotImplementedError("the peer models model.attn_mask = causal only")
            B, T, C = x.shape
            NH = self.cfg.NH
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, T, NH, C // NH).transpose(1, 2)  # (B, NH, T, hs)
            k = k.view(B, T, NH, C // NH).transpose(1, 2)
            v = v.view(B, T, NH, C // NH).transpose(1, 2)
            if self.cfg.alibi:
                y = sdpa(q, k, v, attn_mask=self.attn_bias)
            else:
                y = sdpa(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    return SDPAAttention


def build_model(tg, s, device, sdpa, bias_dtype):
    import torch

    cfg = tg.GPTConfig(V=s["V"], Vp=s["Vp"], C=s["C"], L=s["L"], NH=s["NH"], F=s["F"],
                       max_T=s["max_T"], alibi=s["alibi"], bias=s["bias"], gelu_exact=s["gelu_exact"])
    torch.manual_seed(s["seed"])
    # build on the device where this torch can (a 1.3B model's init on the CPU takes long)
    if device.type != "cpu" and hasattr(torch.device("cpu"), "__enter__"):
        with device:
            model = tg.GPT(cfg)
    else:
        model = tg.GPT(cfg).to(device)
    cls = make_attention_class(tg, sdpa)
    bias = attention_bias(tg, s["NH"], s["T"], bias_dtype, device) if s["alibi"] else None
    for blk in model.blocks:
        blk.attn.__class__ = cls
        blk.attn.attn_bias = bias
    init_like_tessera(model, s, lambda name, p: "ln" in name.split(".")[-2],
                      ("attn.proj.weight", "mlp.proj.weight"), [model.wte.weight])
    return model


def init_like_tessera(model, s, is_norm, residual, vocab_rows):
    """tessera's initialisation (src/model/model.c): N(0, init_std) matrices and embeddings, the
    residual projections (names ending in `residual`) / sqrt(2L), biases 0, norm weights 1
    (is_norm(name, p)), the padded vocabulary rows of the `vocab_rows` tensors 0."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif is_norm(name, p):
                p.fill_(1.0)
            else:
                std = s["init_std"]
                if name.endswith(residual):
                    std /= math.sqrt(2 * s["L"])
                p.normal_(0.0, std)
        for w in vocab_rows:
            w[s["V"]:].zero_()


def gqa_native(torch, sdpa):
    """True when sdpa is torch's own scaled_dot_product_attention with enable_gqa (torch >= 2.5)."""
    import torch.nn.functional as F

    if sdpa is not getattr(F, "scaled_dot_product_attention", None):
        return False
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return (major, minor) >= (2, 5)


def make_llama_classes(tl, sdpa, gqa):
    """torch_llama's Attention and Llama with the attention through SDPA (is_causal, no mask)."""
    import torch

    class SDPALlamaAttention(tl.Attention):
        """torch_llama's Attention (same parameters) through scaled_dot_product_attention."""

        def forward(self, x, cos, sin, allowed=None):
            if allowed is not None:
                raise NotImplementedError("the peer models model.attn_mask = causal only")
            B, T, _ = x.shape
            c = self.cfg
            q, k, v = self.heads(x, cos, sin)  # RoPE in fp32 (QK-norm's output is fp32 too)
            q, k = q.to(v.dtype), k.to(v.dtype)  # SDPA takes one dtype: the compute dtype
            # Gemma's query_pre_attn_scalar: scores times qpas^-0.5 (SDPA's scale, torch >= 2.1)
            kw = {"scale": c.qpas ** -0.5} if c.qpas else {}
            if gqa:
                y = sdpa(q, k, v, is_causal=True, enable_gqa=c.NH != c.KVH, **kw)
            else:
                n = c.NH // c.KVH
                y = sdpa(q, tl.repeat_kv(k, n), tl.repeat_kv(v, n), is_causal=True, **kw)
            return self.o_proj(y.transpose(1, 2).reshape(B, T, c.NH * c.hs))

    class PeerLlama(tl.Llama):
        """torch_llama's Llama without its (B, T, T) mask: positions 0..T-1, causal attention;
        one RoPE table (every layer full attention: the peer refuses windows), None on a NoPE
        layer (SmolLM3's no_rope_layers); Gemma's embedding scale in the compute dtype."""

        def forward(self, idx, targets=None):
            B, T = idx.shape
            pos = torch.arange(T, device=idx.device).expand(B, T)
            cos, sin = tl.rope_cos_sin(pos, self.inv_freq.float())
            ropes = self.cfg.ropes
            x = self.embed_tokens(idx)
            if self.cfg.embed_scale:
                x = x * math.sqrt(self.cfg.C)
            for l, layer in enumerate(self.layers):
                rope = not ropes or ropes[l]  # (no mask: the SDPA attention is causal)
                x = layer(x, cos if rope else None, sin if rope else None, None)
            return self.head(x, targets)  # (autocast runs the cross-entropy in fp32)

    return SDPALlamaAttention, PeerLlama


def build_llama(tl, s, device, sdpa, gqa):
    """The Llama-style model of s, initialised as tessera's (init_like_tessera)."""
    import torch

    scaling = (tl.RopeScaling(factor=s["rope_factor"], low_freq_factor=s["rope_low"],
                              high_freq_factor=s["rope_high"], original_max_pos=s["rope_orig"])
               if s["rope_scaling"] == "llama3" else
               tl.LinearScaling(factor=s["rope_factor"]) if s["rope_scaling"] == "linear" else None)
    cfg = tl.LlamaConfig(V=s["V"], Vp=s["Vp"], C=s["C"], L=s["L"], NH=s["NH"], KVH=s["KVH"], hs=s["hs"],
                         F=s["F"], norm_eps=s["norm_eps"], rope_theta=s["rope_theta"], rope_scaling=scaling,
                         qkv_bias=s["qkv_bias"], qk_norm=s["qk_norm"], tie_embeddings=s["tie"],
                         qpas=s["qpas"], sandwich=s["placement"] == "sandwich", post=s["placement"] == "post",
                         qk_proj=s["qk_scope"] == "projection", embed_scale=s["embed_scale"] == "sqrt_d_model",
                         geglu=s["geglu"], partial=s["partial"], ropes=s["ropes"],
                         final_softcap=s["final_softcap"])
    attn_cls, model_cls = make_llama_classes(tl, sdpa, gqa)
    torch.manual_seed(s["seed"])
    if device.type != "cpu" and hasattr(torch.device("cpu"), "__enter__"):
        with device:
            model = model_cls(cfg)
    else:
        model = model_cls(cfg).to(device)
    for layer in model.layers:
        layer.self_attn.__class__ = attn_cls
    # the 1-D weights: input_layernorm, post_attention_layernorm, norm, q_norm, k_norm
    init_like_tessera(model, s, lambda name, p: p.dim() == 1, ("o_proj.weight", "down_proj.weight"),
                      [model.embed_tokens.weight] + ([] if model.lm_head is None else [model.lm_head.weight]))
    return model


def check_llama_attention(tl, model, s, device, dtype, sdpa_ctx):
    """Layer 0's SDPA attention (RoPE, GQA) against torch_llama's explicit attention in fp32 on
    random input: relative L2 error. B = 1 and the run's T, dtype and allowed kernels."""
    import torch

    attn = model.layers[0].self_attn
    g = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(1, s["T"], s["C"], generator=g).to(device)
    pos = torch.arange(s["T"], device=device).expand(1, s["T"])
    cos, sin = tl.rope_cos_sin(pos, model.inv_freq.float())
    allowed = torch.ones(s["T"], s["T"], dtype=torch.bool, device=device).tril().expand(1, s["T"], s["T"])
    with torch.no_grad():
        with sdpa_ctx(), autocast(device, dtype):
            y = attn(x, cos, sin).float()
        ref = tl.Attention.forward(attn, x, cos, sin, allowed)  # explicit softmax, fp32
    return float((y - ref).norm() / ref.norm())


def check_llama_model(tl, model, s, device, sdpa_ctx):
    """The peer's whole forward (PeerLlama: its RoPE angles, the layers through SDPA, the head)
    against torch_llama's own (positions and mask built there, the explicit attention), both in
    fp32 on random tokens, B = 1, T = min(the run's T, 128): relative L2 error of the logits."""
    import torch

    T = min(s["T"], 128)
    g = torch.Generator(device="cpu").manual_seed(4321)
    idx = torch.randint(0, s["V"], (1, T), generator=g).to(device)
    sdpa_cls = type(model.layers[0].self_attn)
    with torch.no_grad():
        with sdpa_ctx():
            got = model(idx)[0].float()
        try:
            for layer in model.layers:
                layer.self_attn.__class__ = tl.Attention
            ref = tl.Llama.forward(model, idx)[0].float()
        finally:
            for layer in model.layers:
                layer.self_attn.__class__ = sdpa_cls
    return float((got - ref).norm() / ref.norm())


def check_attention(tg, model, s, device, dtype, sdpa_ctx):
    """Block 0's SDPA attention against torch_gpt's explicit attention in fp32 on random input:
    relative L2 error. B = 1 and the run's T, dtype, bias and allowed kernels."""
    import torch

    attn = model.blocks[0].attn
    g = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(1, s["T"], s["C"], generator=g).to(device)
    with torch.no_grad():
        with sdpa_ctx(), autocast(device, dtype):
            y = attn(x).float()
        ref = tg.Attention.forward(attn, x)  # explicit softmax, non-full ALiBi form, fp32
    return float((y - ref).norm() / ref.norm())


def autocast(device, dtype):
    import contextlib

    import torch

    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def sdpa_setup(s, a, torch, F):
    """(sdpa function, context factory restricting its kernels, description, allowed list)."""
    import contextlib

    if not hasattr(F, "scaled_dot_product_attention"):
        return (sdpa_math, contextlib.nullcontext,
                "math stand-in (torch %s has no scaled_dot_product_attention)" % torch.__version__, [])
    names = a.sdpa_backends
    if names == "auto":
        names = "efficient,cudnn" if s["alibi"] else ""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        SDPBackend = sdpa_kernel = None
    if not names:
        ctx = contextlib.nullcontext
        allowed = ["any"]
    elif sdpa_kernel is None:
        raise Refused("--sdpa-backends needs torch.nn.attention.sdpa_kernel (torch >= 2.3)")
    else:
        table = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
        allowed, backends = [], []
        for n in names.split(","):
            if n not in table:
                raise Refused("--sdpa-backends: %r unknown (flash, efficient, cudnn, math)" % n)
            if hasattr(SDPBackend, table[n]):
                allowed.append(n)
                backends.append(getattr(SDPBackend, table[n]))

        def ctx():
            return sdpa_kernel(backends)
    if s["alibi"]:
        desc = ("SDPA with an additive ALiBi + causal bias (flash kernels take no bias; "
                "allowed: %s)" % ",".join(allowed))
    else:
        desc = "SDPA is_causal=True, no mask (flash path; allowed: %s)" % ",".join(allowed)
    return F.scaled_dot_product_attention, ctx, desc, allowed


def peak_flops(a, device, torch):
    if a.peak_flops > 0:
        return a.peak_flops, "--peak-flops"
    if device.type == "cpu":
        n = torch.get_num_threads()
        return CPU_PEAK_PER_THREAD * n, "cpu: 172.5e9 x %d threads (docs/mfu.md)" % n
    name = torch.cuda.get_device_name(device)
    for key, v in PEAKS:
        if key in name:
            return v, "%s bf16 dense (docs/mfu.md)" % key
    return 0.0, "unknown device %r: give --peak-flops" % name


def attention_ops(prof):
    """Names of the attention ops and kernels a profiled step ran."""
    keys = ("scaled_dot_product", "flash", "fmha", "efficient_attention", "cudnn_attention",
            "attention")
    names = set()
    for e in prof.key_averages():
        n = e.key
        if any(k in n.lower() for k in keys):
            names.add(n if len(n) <= 100 else n[:97] + "...")
    return sorted(names)


def run(a, s, out):
    t_start = time.time()
    import torch
    import torch.nn.functional as F

    tg = load_module("reference_torch_gpt", os.path.join(ROOT, "tests", "reference", "torch_gpt.py"))
    bench_tg = load_module("bench_torch_gpt", os.path.join(ROOT, "bench", "torch_gpt.py"))
    tl = None
    if s["rope"]:  # torch_llama imports its sibling torch_gpt by name
        sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
        tl = load_module("reference_torch_llama", os.path.join(ROOT, "tests", "reference", "torch_llama.py"))

    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("device %s: torch %s sees no CUDA device" % (a.device, torch.__version__))
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if cuda and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if cuda:
        torch.cuda.set_device(device)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}.get(a.dtype, torch.bfloat16 if cuda else torch.float32)
    out.update({"device": torch.cuda.get_device_name(device) if cuda else "cpu (%d threads)" % torch.get_num_threads(),
                "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
                "dtype": "bf16 autocast" if dtype == torch.bfloat16 else "fp32"})

    sdpa, sdpa_ctx, desc, allowed = sdpa_setup(s, a, torch, F)
    if s["rope"]:
        gqa = gqa_native(torch, sdpa)
        if s["KVH"] != s["NH"]:
            desc += "; grouped-query %d:%d %s" % (s["NH"], s["KVH"], "enable_gqa" if gqa else "by repeat_kv")
        model = build_llama(tl, s, device, sdpa, gqa)
    else:
        model = build_model(tg, s, device, sdpa, dtype)
    out["attention"] = desc
    n_all = sum(p.numel() for p in model.parameters())
    # the padded vocabulary rows of the embedding, and of an untied head
    n_counted = n_all - (s["Vp"] - s["V"]) * s["C"] * (1 if s["tie"] else 2)
    if n_counted != s["params"]:
        raise RuntimeError("model has %d counted parameters, the formula %d" % (n_counted, s["params"]))

    if not a.no_check:
        err = (check_llama_attention(tl, model, s, device, dtype, sdpa_ctx) if s["rope"]
               else check_attention(tg, model, s, device, dtype, sdpa_ctx))
        tol = 3e-2 if dtype == torch.bfloat16 else 1e-4
        out["attention_check"] = {"rel_l2": err, "tol": tol}
        log("attention check: rel L2 %.3g vs explicit fp32 attention (tol %g)" % (err, tol))
        if not err <= tol:
            raise RuntimeError("SDPA attention differs from the explicit one: rel L2 %.3g > %g" % (err, tol))
        if s["rope"]:
            err = check_llama_model(tl, model, s, device, sdpa_ctx)
            out["model_check"] = {"rel_l2": err, "tol": 1e-4}
            log("model check: rel L2 %.3g of the fp32 logits vs torch_llama's forward (tol 1e-4)" % err)
            if not err <= 1e-4:
                raise RuntimeError("the peer's forward differs from torch_llama's: rel L2 %.3g > 1e-4" % err)

    if hasattr(torch, "set_float32_matmul_precision"):  # after the check: fp32 leftovers may use TF32
        torch.set_float32_matmul_precision("high")

    class LossOnly(torch.nn.Module):
        """The reference forward returning only the summed loss (no logits leave the graph)."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, idx, targets):
            return self.m(idx, targets)[1]

    step_fn = LossOnly(model)
    compile_on = cuda and not a.no_compile and hasattr(torch, "compile")
    out["compile"] = a.compile_mode if compile_on else False
    if not compile_on:
        out["compile_note"] = ("--no-compile" if a.no_compile else
                               "no torch.compile in this torch" if not hasattr(torch, "compile") else
                               "off on the CPU")
    if compile_on:
        step_fn = torch.compile(step_fn, mode=None if a.compile_mode == "default" else a.compile_mode)

    groups = model.param_groups(s["weight_decay"], s["decay_norms_biases"], s["decay_embeddings"])
    import inspect

    opt_params = inspect.signature(torch.optim.AdamW.__init__).parameters
    kw = {}
    if cuda and "fused" in opt_params:
        kw["fused"] = True
    elif "foreach" in opt_params:
        kw["foreach"] = True
    opt = torch.optim.AdamW(groups, lr=s["lr"], betas=(s["beta1"], s["beta2"]), eps=s["eps"], **kw)
    out["optimizer"] = "AdamW " + ("fused" if kw.get("fused") else "foreach" if kw.get("foreach") else "for-loop")
    clip_kw = {"foreach": True} if "foreach" in inspect.signature(torch.nn.utils.clip_grad_norm_).parameters else {}
    params = [p for p in model.parameters()]

    B, T, accum = s["B"], s["T"], s["grad_accum"]
    g = torch.Generator(device="cpu").manual_seed(s["seed"] + 1)
    data = [torch.randint(0, s["V"], (s["global_batch"], T + 1), generator=g).to(device) for _ in range(4)]
    scale = 1.0 / (s["global_batch"] * T)  # every target counts (no masked tokens)

    def step(k):
        batch = data[k % len(data)]
        opt.zero_grad(set_to_none=True)
        total = None
        with sdpa_ctx():
            for mb in range(accum):
                rows = batch[mb * B:(mb + 1) * B]
                with autocast(device, dtype):
                    loss = step_fn(rows[:, :-1], rows[:, 1:])
                (loss * scale).backward()
                total = loss.detach() if total is None else total + loss.detach()
        if s["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, s["grad_clip"], **clip_kw)
        opt.step()
        return total

    n = a.warmup + a.steps
    losses, times = [], []
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    t_setup = time.time() - t_start
    t_warm = time.time()
    for k in range(n):
        if k == a.warmup:  # the timed steps begin: everything before is done
            if cuda:
                torch.cuda.synchronize(device)
            out["warmup_s"] = time.time() - t_warm
            log("%d warm-up steps in %.1f s%s; timing %d steps" % (
                a.warmup, out["warmup_s"], " (compilation included)" if compile_on else "", a.steps))
            wall0 = time.perf_counter()
        if cuda:
            ev[k][0].record()
        else:
            t0 = time.perf_counter()
        losses.append(step(k))
        if cuda:
            ev[k][1].record()
        else:
            times.append(time.perf_counter() - t0)
        if k == 0:
            if cuda:
                torch.cuda.synchronize(device)
            log("step 1 done (%.1f s after start)" % (time.time() - t_start))
    if cuda:
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - wall0
    if cuda:
        times = [e0.elapsed_time(e1) / 1e3 for e0, e1 in ev]
    loss_vals = [float(x) * scale for x in torch.stack(losses).float().cpu()]
    if not all(math.isfinite(x) for x in loss_vals):
        raise RuntimeError("non-finite loss: %s" % loss_vals)

    # one more step under the profiler: which attention ops and kernels ran
    try:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            step(n)
            if cuda:
                torch.cuda.synchronize(device)
        out["attention_ops"] = attention_ops(prof)
    except Exception as e:  # the profiler is a diagnostic: its failure is reported, not fatal
        out["attention_ops"] = "profiler failed: %s" % str(e).splitlines()[0][:200]

    timed = times[a.warmup:]
    med = statistics.median(timed)
    tps = s["tokens_per_step"] / med
    peak, peak_src = peak_flops(a, device, torch)
    out.update({
        "steps": a.steps, "warmup": a.warmup, "setup_s": round(t_setup, 2),
        "step_ms": med * 1e3, "step_ms_mean": statistics.fmean(timed) * 1e3,
        "step_ms_min": min(timed) * 1e3, "step_ms_max": max(timed) * 1e3,
        "tokens_per_s": tps, "tokens_per_s_wall": s["tokens_per_step"] * a.steps / wall,
        "mfu": s["flops_per_token"] * tps / peak if peak > 0 else None,
        "peak_flops": peak, "peak_flops_source": peak_src,
        "loss_first": loss_vals[0], "loss_last": loss_vals[-1],
    })
    if cuda:
        out["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device)
        out["peak_mem_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
        out["peak_mem_kind"] = "torch.cuda.max_memory_allocated"
    else:
        out["peak_mem_bytes"] = bench_tg.proc_status_kib("VmHWM") * 1024
        out["peak_mem_kind"] = "VmHWM (peak RSS of the process)"
    out["step_ms_all"] = [round(t * 1e3, 3) for t in times]


def variant_desc(s):
    """The 2026 families' variants of s in words ("" for none)."""
    parts = [("%s norms" % s["placement"]) if s["placement"] != "pre" else "",
             ("NoPE on layers %s" % ",".join(str(l) for l, r in enumerate(s["ropes"]) if not r))
             if s["ropes"] and not all(s["ropes"]) else "",
             "embedding x sqrt(d)" if s["embed_scale"] != "none" else "",
             ("final soft-cap %g" % s["final_softcap"]) if s["final_softcap"] else "",
             ("query_pre_attn_scalar %g" % s["qpas"]) if s["qpas"] else "",
             ("partial rotary %g" % s["partial"]) if s["partial"] != 1.0 else ""]
    return "".join(", " + p for p in parts if p)


def main(argv):
    a = parse_args(argv)
    if a.tiny_sets:
        print("\n".join(tiny_sets(bench_util.read_cfg(a.config))))
        return 0
    label = a.label or os.path.splitext(os.path.basename(a.config))[0] + ("-tiny" if a.tiny else "")
    out = {"framework": "torch", "model": label}
    try:
        s = resolve(a)
    except (Refused, OSError, KeyError) as e:
        out["error"] = str(e)
        print(json.dumps(out), flush=True)
        log(str(e))
        return 2
    out.update({"B": s["B"], "T": s["T"], "grad_accum": s["grad_accum"], "params": s["params"],
                "flops_per_token": s["flops_per_token"], "tokens_per_step": s["tokens_per_step"]})
    if a.dry_run:
        out.update({k: s[k] for k in ("L", "C", "NH", "F", "V", "Vp", "max_T", "alibi", "bias", "gelu_exact",
                                      "rope", "KVH", "hs", "qkv_bias", "qk_norm", "tie", "placement",
                                      "qk_scope", "ropes", "embed_scale", "geglu", "final_softcap",
                                      "qpas", "partial")})
        print(json.dumps(out), flush=True)
        return 0
    form = ("ALiBi" if s["alibi"] else "learned positions") if not s["rope"] else (
        "RoPE (%s), %d kv heads of %d, %s %d%s%s, %s head%s" % (
            s["rope_scaling"], s["KVH"], s["hs"], "GeGLU-tanh" if s["geglu"] else "SwiGLU", s["F"],
            ", qkv bias" if s["qkv_bias"] else "",
            ", QK-norm (%s)" % s["qk_scope"] if s["qk_norm"] else "", "tied" if s["tie"] else "untied",
            variant_desc(s)))
    log("%s: %d layers, d %d, %d heads, V %d (Vp %d), %s, B %d x T %d x %d microbatches, N %d" % (
        label, s["L"], s["C"], s["NH"], s["V"], s["Vp"], form, s["B"], s["T"], s["grad_accum"], s["params"]))
    rc = 0
    try:
        run(a, s, out)
    except Refused as e:
        out["error"], rc = str(e), 2
    except Exception as e:  # out of memory, no CUDA, a failed check: one JSON line all the same
        msg = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
        if "out of memory" in str(e).lower():
            msg = "out of memory at B=%d, T=%d (%s)" % (s["B"], s["T"], msg[:300])
        out["error"], rc = msg[:500], 3
    if rc:
        log(out["error"])
    print(json.dumps(out), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
