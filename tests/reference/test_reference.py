#!/usr/bin/env python3
"""test_reference.py — tessera's fp32 CPU trainer against an independent float64 PyTorch model.

For a GPT-2-style and an MPT-style tiny model (tests/reference/torch_gpt.py), a Llama-3-style, a
Qwen-3-style and a Qwen-2.5-style one (tests/reference/torch_llama.py: RMSNorm, RoPE with and
without Llama 3.1's scaling, SwiGLU, grouped-query attention, QK-norm, an explicit head_dim, qkv
biases, tied and untied heads), on a random dataset written with `tessera shard` (vocab 100, so
Vp = 128 padding rows; a loss mask with zeros, so ignored targets), and for GPT-2, MPT and Llama
again with model.attn_mask = "document" on a dataset with end-of-text tokens inside the rows
(torch: the block-diagonal mask, and learned or RoPE positions restarting after each end-of-text
token), and three mixture-of-experts models (tests/reference/torch_moe.py: top-2 of 4 SwiGLU
experts with the load-balancing and z losses, normalised or raw weights, MoE in every or every
second layer, a shared expert, activation checkpointing):
  step 0 (build/tests/ref_dump's /step0): logits, loss and every parameter gradient at tessera's
          initial weights, torch run in float64 from the dumped /params;
  training: 10 AdamW steps (warmup + cosine lr, weight decay groups, global-norm clipping,
          2 microbatches of gradient accumulation): each step's lr, loss and gradient norm, and the
          parameters after the last step (/final).
With RoPE also tessera's frequencies (/rope_freqs) against torch's; with MoE each step's per-layer
aux and z losses and expert loads, and that no routing decision was near a tie. Before any of it,
six checks of the torch models on their own (RoPE = a complex rotation, GQA = MHA with repeated
key/value heads, a document under the document mask = the document alone; the MoE layer on hand
logits, its dispatch, gradcheck).
Ring attention (context parallelism, docs/parallelism.md): build/tests/ring_dump runs one
layer's attention over 2 and over 4 MPI ranks (each rank's two zig-zag chunks, the key/value
blocks merged by their log-sum-exp in the forward, their gradients passed back round the ring in
the backward); its output, log-sum-exp and dq, dk, dv over the whole sequences against torch's
float64 attention of the unsplit sequences (causal with ALiBi and GQA 4:2 on 2 ranks; the document
mask with documents across chunk and rank edges and MQA on 4; on 4 ranks the layer's variants too:
a window of 3 below the chunk (whole blocks skipped, counted), a scale, a soft cap and sinks,
whose gradient is compared as well).
Metric, per tensor: relative error ||tessera - torch||_2 / ||torch||_2 (|a-b|/|b| for scalars),
torch in float64 taken as exact. Tolerances and their reasons are at TOL_* below and in
docs/reference-test.md. Exact checks: padded logit columns, padded rows of the wte (and lm_head)
gradient and of the final wte (and lm_head) are exactly 0.

Run: TESTS=reference bash tests/run.sh   (needs build/tests/ref_dump and build/tessera: `make`)
Prints TAP; exits 1 if a check fails, 77 (skip) without torch/h5py or the binaries.
"""
import dataclasses
import math
import os
import re
import subprocess
import sys
import tempfile
import traceback
import types

from ref_env import HERE, ROOT, BUILD, TESSERA, REF_DUMP, need_programs, skip

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import h5py
except ImportError as e:  # Debian: apt-get install python3-torch python3-h5py
    skip(f"cannot import {e.name} ({e}); the reference test needs torch, h5py and numpy")

RING_DUMP = os.path.join(BUILD, "tests", "ring_dump")
# TSR_RUN_WRAPPER: a command the two binaries run under, e.g. qemu-aarch64 for the aarch64 cross
# build (tests/install/test_aarch64.sh: this test's CPU side on another architecture)
WRAP = os.environ.get("TSR_RUN_WRAPPER", "").split()
# (ring_dump, an MPI program, is not in that NO_MPI cross build: its cases are not run there)
need_programs(REF_DUMP, TESSERA, *(() if WRAP else (RING_DUMP,)))

sys.path.insert(0, HERE)
import torch_gpt  # noqa: E402
import torch_llama  # noqa: E402
import torch_moe  # noqa: E402

# ---- tolerances (torch float64 is the exact reference; docs/reference-test.md has the numbers) --
# Step 0, relative per tensor. fp32 unit roundoff is 2^-24 = 6e-8; a tiny model's forward and
# backward is a few dozen dependent ops with dot products of length <= 4C = 192, so errors stay
# within ~10 units of roundoff (measured 2e-7 .. 7e-7). 1e-5 leaves more than 10x margin, while
# the smallest injected mistake (GELU tanh <-> exact, LayerNorm eps 1e-6) gives >= 3.6e-4 and
# others (head layout, slopes, mask, scale, loss normalisation) 1e-2 .. 1.
TOL_STEP0 = 1e-5        # logits, loss, every gradient, and the step-0 gradient norm
TOL_TRAIN_LOSS = 1e-5   # each training step's loss (measured <= 3e-8)
# Both sides compute the schedule in double from the same formula: only libm rounding can differ.
TOL_LR = 1e-12
# After step 0 the two runs no longer share their weights. AdamW divides each gradient element by
# its own RMS plus eps = 1e-8, so an element whose gradient is near eps turns fp32 noise of ~1e-9
# into a few-percent difference of its update (d/dg g/(|g|+eps) = eps/(|g|+eps)^2); that weight
# difference then moves the next steps' gradients. Measured: <= 7e-7 on final weights here; with
# init_std 0.02 up to 5e-6 on weights and 1e-5 on a late gradient norm, while torch's norms computed
# AT tessera's own weights after each step agreed to <= 4e-7 (so: drift, not a wrong step). 1e-4
# keeps 10x over the worst seen; each bug injected into the reference (no clipping, decay groups,
# warmup off by one, Adam eps or beta2, per-microbatch mean, GELU form, slopes, scale, layout)
# moves the final weights by >= 3e-4, most by 1e-2 .. 1.
TOL_TRAJ = 1e-4         # gradient norms of steps 1.., and the parameters after the last step
# The k block of qkvb (GPT-2 only) has a gradient that is exactly zero: a bias added to every key
# adds the same q.b to a query's scores, which softmax ignores. torch's float64 gradient there is
# ~1e-18, tessera's fp32 one is rounding noise of ~1e-9 (about 1e-8 of the qkvb gradient, checked at
# step 0), which Adam scales up by 1/eps: after 10 steps tessera's k bias is ~1e-3 where torch's
# is ~1e-11. A relative error of a zero is meaningless, so that block is checked with an absolute
# bound instead: 1e-2, about 10x the measured drift and well under the ~sum(lr) = 0.064 a real
# (consistently signed) gradient would move it.
# With RoPE (qwen2.5's qkv bias) the key bias is turned by the key's position, so its gradient is
# not zero: in column pair i only what the rotation over the sequence changes, the angle
# f_i * (T-1), survives the softmax. The pairs that barely turn drift the same way as the GPT-2 key
# block (measured per pair after 10 steps, qwen2.5: angles 2.7e-3, 4.7e-4, 8e-5 rad -> 4.6e-4,
# 5.4e-4, 1.1e-2 relative, while the pairs turning 0.015 .. 0.47 rad agree to 4e-6 .. 4.3e-5 and
# the faster ones to 5e-7), so the pairs with f_i * (T-1) < 1e-2 rad get the absolute bound and
# all others the relative check with q and v (quiet_k_bias).
TOL_K_BIAS = 1e-2
# tessera keeps the RoPE frequencies in fp32 (computed in double, then rounded): at most half an
# ulp, 2^-24 = 6e-8 relative, from torch's float64 ones.
TOL_FREQ = 1e-7
# MoE routing is discontinuous: a token whose K-th and (K+1)-th router probabilities are closer than
# the fp32 difference of the two runs (~1e-7 at step 0, ~1e-6 after 10 steps of drift) can go to
# different experts in tessera and torch, and every later check would fail for no tessera error.
# The MoE configs use seeds whose smallest such margin, over every row, layer, microbatch and step
# of torch's run, is above TOL_MARGIN (the test checks it, so a failure there is explained).
TOL_MARGIN = 1e-4
# An MoE switch the test must see: without the aux loss, without the z-loss, or with the other
# top-k weighting, some step-0 gradient moves by more than this (10x TOL_STEP0).
MIN_SWITCH_EFFECT = 1e-4

STEPS = 10
SEQ_LEN = 16
GLOBAL_BATCH = 4
MICRO_BATCH = 2
VOCAB = 100                    # padded to Vp = 128 (vocab_multiple = 128)
N_SAMPLES = STEPS * GLOBAL_BATCH  # exactly one epoch: the 40 training rows are a permutation
DATA_SEED = 20240611
EOT = VOCAB - 1                # model.eot_token of the document-mask cases
EOT_RATE = 1 / 6               # ~2.7 end-of-text tokens per row of 16 in their dataset

# Larger than GPT-2's 0.02 so that activations reach the range where the nonlinearities differ:
# at 0.02 the fc inputs are ~0.1 and GELU tanh vs exact changes the step-0 gradients by only 2e-5
# relative; at 0.1 by 4e-4 (40x TOL_STEP0), and attention is far from uniform.
INIT_STD = 0.1
COMMON_OPTIM = dict(lr=1e-2, warmup='"3ba"', schedule='"cosine"', alpha_f=0.1, weight_decay=0.1,
                    beta1=0.9, beta2=0.95, eps=1e-8)
# grad_clip is chosen per model from the measured norms so that some steps clip and some do not.
GPT2_DOC_CLIP = 1.4
MPT_DOC_CLIP = 1.8
LLAMA_CLIP = 3.1
LLAMA_DOC_CLIP = 3.0
QWEN3_CLIP = 2.3
QWEN25_CLIP = 2.6
# Llama 3: RMSNorm eps 1e-5, RoPE theta 500000 with Llama 3.1's scaling, SwiGLU of an explicit
# width (not 4C), 4 query heads on 2 key/value heads, no biases, an untied lm_head. The scaling's
# numbers are not Llama 3.1's (factor 8, low 1, high 4, original context 8192), under which all
# wavelengths of a 12-wide head would be kept: with original context 128, low 2, high 8 the six
# wavelengths 2 pi / theta^(-2i/12) = 6.3, 56, 498, ... are kept (6.3 < 128/8), interpolated
# (16 <= 56 <= 64) and divided by the factor 4 (> 64), and they differ from the defaults so that
# the dump shows each key was read.
LLAMA = dict(n_layer=2, d_model=48, n_head=4, n_kv_head=2, vocab_size=VOCAB, vocab_multiple=128,
             norm='"rmsnorm"', norm_eps=1e-5, pos='"rope"', rope_theta=500000.0,
             rope_scaling='"llama3"', rope_factor=4.0, rope_low_freq_factor=2.0,
             rope_high_freq_factor=8.0, rope_original_max_pos=128, mlp='"swiglu"',
             intermediate_size=80, bias="false", tie_embeddings="false", init_std=INIT_STD)
# Qwen 3: RMSNorm eps 1e-6 also over every q and k head (QK-norm, before RoPE), RoPE theta 1e6
# without scaling, head_dim 16 while d_model / n_head = 8, GQA 4:2, tied embeddings, no biases.
QWEN3 = dict(n_layer=2, d_model=32, n_head=4, n_kv_head=2, head_dim=16, vocab_size=VOCAB,
             vocab_multiple=128, norm='"rmsnorm"', norm_eps=1e-6, pos='"rope"',
             rope_theta=1000000.0, mlp='"swiglu"', intermediate_size=64, bias="false",
             qk_norm="true", tie_embeddings="true", init_std=INIT_STD)
# Qwen 2.5: like Qwen 3 without QK-norm but with q, k, v biases; here multi-query (3 heads, 1 kv).
QWEN25 = dict(n_layer=2, d_model=48, n_head=3, n_kv_head=1, vocab_size=VOCAB, vocab_multiple=128,
              norm='"rmsnorm"', norm_eps=1e-6, pos='"rope"', rope_theta=1000000.0,
              mlp='"swiglu"', intermediate_size=96, bias="false", qkv_bias="true",
              tie_embeddings="true", init_std=INIT_STD)
# Mixtral / Qwen3-MoE style on the Llama above: every layer's MLP is 4 SwiGLU experts of width 32,
# top-2 with normalised weights, the load-balancing loss at 0.01 and the z-loss at 1e-3 on. moe-ckpt
# is the same with activation checkpointing of whole blocks (the routing is recomputed).
MOE = dict(LLAMA, moe_experts=4, moe_top_k=2, moe_intermediate_size=32, moe_norm_topk="true",
           moe_aux_loss_coef=0.01, moe_z_loss_coef=0.001)
# Seeds: routing decides on ~1400 (row, layer) pairs over the 11 passes, so a gap under TOL_MARGIN
# between the K-th and (K+1)-th probability is common (about two seeds in three of 1234..1259 had
# one); these are seeds without one (torch's smallest gap 1.9e-4 here, 2.5e-4 for moe-shared),
# with grad_clip then set from their norms so that some steps clip (the margins are printed).
MOE_CLIP = 2.9
MOE_SEED = 1255
# Qwen2-MoE style on the Qwen 3 above with 4 layers: MoE in layers 1 and 3 (moe_every 2; layers 0
# and 2 keep the dense MLP, so both stacks have 2 slices), raw top-2 weights, a shared expert.
MOE_SHARED = dict(QWEN3, n_layer=4, moe_experts=4, moe_top_k=2, moe_intermediate_size=24,
                  moe_every=2, moe_norm_topk="false", moe_shared_size=16, moe_aux_loss_coef=0.01,
                  moe_z_loss_coef=0.001)
MOE_SHARED_CLIP = 2.3
MOE_SHARED_SEED = 1236
# Qwen3-Next's MoE (Qwen2-MoE's gate): the shared expert's output times sigmoid(x . shgatew) per
# token (model.moe_shared_gate), renormalised top-2 weights, otherwise moe-shared. Seed 1238: the
# smallest routing gap 2.1e-4 (1236, 1239 and 1255 have near-ties, 1237 a gap of 1.0e-4).
MOE_SHGATE = dict(MOE_SHARED, moe_shared_gate="true", moe_norm_topk="true")
MOE_SHGATE_CLIP = 2.3
MOE_SHGATE_SEED = 1238
# Sliding windows (Gemma 3, gpt-oss, OLMo 3 style) on the Llama above: layer 0 sliding with a
# window of 5 of the 16 positions, layer 1 full; under the document mask, so rows see the smaller of
# their window and their document. Sinks (gpt-oss): a learned logit per head and layer, with
# layer_types left out, so sliding_window = 4 applies to both layers, and Gemma's
# query_pre_attn_scalar (scores / sqrt(20) where the head size is 12).
LLAMA_SWA = dict(LLAMA, attn_mask='"document"', eot_token=EOT,
                 layer_types='"sliding_attention, full_attention"', sliding_window=5)
LLAMA_SINKS = dict(LLAMA, attn_sinks="true", sliding_window=4, query_pre_attn_scalar=20.0)
SWA_CLIP = 3.0
SINKS_CLIP = 3.1
# Sandwich norms (Gemma 2/3, model.norm_placement): a norm after the attention and after the MLP
# too (tensors postattnw, postmlpw); their weights start at ones like every norm's, and the 10
# steps move them apart (their gradients differ: a swap of the two would show).
# Layer 0 is checkpointed (block): its backward recomputes the branches' outputs after the rerun.
LLAMA_SANDWICH = dict(LLAMA, norm_placement='"sandwich"', activation_checkpointing='"block"',
                      activation_checkpointing_layers=1)
SANDWICH_CLIP = 2.9
# OLMo 2 (model.norm_placement = post, model.qk_norm_scope = projection): no norm before the
# attention or the MLP, a norm after each (postattnw, postmlpw; no ln1w, ln2w), and QK-norm over
# the whole q (n_head * head_dim) and k (n_kv_head * head_dim) projections before the head split
# (qnormw (L, 48), knormw (L, 24) here: GQA 4:2, so the two widths differ). Layer 0 is
# checkpointed (block): its backward recomputes the identity "norms" and the post-norms.
LLAMA_OLMO2 = dict(LLAMA, norm_placement='"post"', qk_norm="true", qk_norm_scope='"projection"',
                   activation_checkpointing='"block"', activation_checkpointing_layers=1)
OLMO2_CLIP = 2.9
# Gemma 3's block on the Llama above: sandwich norms, QK-norm per head, the token embedding
# times sqrt(d_model) (model.embed_scale; sqrt(48) here, a factor that is not a power of two) and
# GeGLU with the tanh GELU (model.mlp = "geglu_tanh").
LLAMA_GEMMA = dict(LLAMA, norm_placement='"sandwich"', qk_norm="true",
                   embed_scale='"sqrt_d_model"', mlp='"geglu_tanh"')
GEMMA_CLIP = 3.0
# Positions and soft-capping (docs/models.md "Positions"). Gemma 2/3: the attention scores and the
# final logits soft-capped (caps small enough that tanh bends them at these sizes), layer 0
# sliding with its own RoPE base 10000 unscaled (rope_local_theta), layer 1 full with theta 1e6
# and linear scaling by 8.
LLAMA_GEMMA2 = dict(LLAMA, layer_types='"sliding_attention, full_attention"', sliding_window=5,
                    rope_theta=1000000.0, rope_scaling='"linear"', rope_factor=8.0,
                    rope_local_theta=10000.0, attn_logit_softcapping=1.0,
                    final_logit_softcapping=2.0)
GEMMA2_CLIP = 3.0
# gpt-oss's YaRN (factor 32, beta_fast 32, beta_slow 1, truncate false; original context 4096)
# with partial rotary (Qwen3-Next: 0.5 here, 6 of the 12 dimensions of a head turn; YaRN's
# frequencies are over those 6: one kept, one on the ramp, one divided by 32) and SmolLM3's NoPE
# layers (no_rope_layers "1, 0": layer 1 has no positions); q and k times 0.1 ln 32 + 1.
LLAMA_YARN = dict(LLAMA, rope_scaling='"yarn"', rope_factor=32.0, rope_beta_fast=32.0,
                  rope_beta_slow=1.0, rope_truncate="false", rope_original_max_pos=4096,
                  partial_rotary_factor=0.5, no_rope_layers='"1, 0"')
YARN_CLIP = 3.0
CONFIGS = [
    dict(name="gpt2", grad_clip=1.4,
         model=dict(n_layer=2, d_model=32, n_head=4, vocab_size=VOCAB, vocab_multiple=128,
                    max_seq_len=16, pos='"learned"', bias="true", gelu='"tanh"',
                    init_std=INIT_STD)),
    dict(name="mpt", grad_clip=1.8,
         model=dict(n_layer=2, d_model=48, n_head=3, vocab_size=VOCAB, vocab_multiple=128,
                    pos='"alibi"', bias="false", gelu='"exact"', init_std=INIT_STD)),
    # block-diagonal attention: learned positions restart per document, ALiBi needs the mask only
    dict(name="gpt2-doc", grad_clip=GPT2_DOC_CLIP, data="doc",
         model=dict(n_layer=2, d_model=32, n_head=4, vocab_size=VOCAB, vocab_multiple=128,
                    max_seq_len=16, pos='"learned"', bias="true", gelu='"tanh"',
                    init_std=INIT_STD, attn_mask='"document"', eot_token=EOT)),
    dict(name="mpt-doc", grad_clip=MPT_DOC_CLIP, data="doc",
         model=dict(n_layer=2, d_model=48, n_head=3, vocab_size=VOCAB, vocab_multiple=128,
                    pos='"alibi"', bias="false", gelu='"exact"', init_std=INIT_STD,
                    attn_mask='"document"', eot_token=EOT)),
    dict(name="llama", grad_clip=LLAMA_CLIP, model=LLAMA),
    # RoPE positions restart per document
    dict(name="llama-doc", grad_clip=LLAMA_DOC_CLIP, data="doc", seed=1235,
         model=dict(LLAMA, attn_mask='"document"', eot_token=EOT)),
    dict(name="qwen3", grad_clip=QWEN3_CLIP, model=QWEN3),
    # attention variants (docs/models.md): sliding windows per layer type under the document
    # mask, and gpt-oss's sinks with a sliding window on every layer
    dict(name="llama-swa-doc", grad_clip=SWA_CLIP, data="doc", seed=1235, model=LLAMA_SWA),
    dict(name="llama-sinks", grad_clip=SINKS_CLIP, model=LLAMA_SINKS),
    # norm placements (docs/models.md "Norm placements"): Gemma's sandwich norms
    dict(name="llama-sandwich", grad_clip=SANDWICH_CLIP, model=LLAMA_SANDWICH),
    # and OLMo 2's post-norms with QK-norm over the projections
    dict(name="llama-olmo2", grad_clip=OLMO2_CLIP, model=LLAMA_OLMO2),
    # Gemma's scaled embedding with its sandwich norms
    dict(name="llama-gemma", grad_clip=GEMMA_CLIP, model=LLAMA_GEMMA),
    # positions and soft-capping: Gemma 2's caps with Gemma 3's local/global RoPE, and gpt-oss's
    # YaRN with partial rotary and a NoPE layer
    dict(name="llama-gemma2", grad_clip=GEMMA2_CLIP, model=LLAMA_GEMMA2),
    dict(name="llama-yarn", grad_clip=YARN_CLIP, model=LLAMA_YARN),
    dict(name="qwen2.5", grad_clip=QWEN25_CLIP, model=QWEN25),
    # mixture of experts (docs/moe.md; torch_moe.py), seeds with no routing near-tie (TOL_MARGIN)
    dict(name="moe", grad_clip=MOE_CLIP, seed=MOE_SEED, model=MOE),
    dict(name="moe-ckpt", grad_clip=MOE_CLIP, seed=MOE_SEED,
         model=dict(MOE, activation_checkpointing='"block"')),
    dict(name="moe-shared", grad_clip=MOE_SHARED_CLIP, seed=MOE_SHARED_SEED, model=MOE_SHARED),
    dict(name="moe-shgate", grad_clip=MOE_SHGATE_CLIP, seed=MOE_SHGATE_SEED, model=MOE_SHGATE),
]
# TSR_REF_CASES: a comma list of the names above to run (default: all); an unknown name stops it
if os.environ.get("TSR_REF_CASES"):
    _want = os.environ["TSR_REF_CASES"].split(",")
    _unknown = [w for w in _want if w not in [c["name"] for c in CONFIGS]]
    if _unknown:
        sys.exit(f"test_reference.py: TSR_REF_CASES names {_unknown}: expected names of "
                 f"{[c['name'] for c in CONFIGS]}")
    CONFIGS = [c for c in CONFIGS if c["name"] in _want]


# ---- TAP ---------------------------------------------------------------------------------------

from tap import Tap  # noqa: E402  (the script's own directory is on sys.path)


def rel_err(a, b):
    """||a - b||_2 / ||b||_2 in float64; inf for NaN/Inf (so `not err <= tol` fails)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return math.inf
    nb = np.linalg.norm(b)
    d = np.linalg.norm(a - b)
    return d / nb if nb > 0 else (0.0 if d == 0 else math.inf)


# ---- fixtures ----------------------------------------------------------------------------------

def make_dataset(tmp, name, eot=None):
    """Random ids in [0, VOCAB) with a loss mask (about 1 in 5 targets masked out), written with
    `tessera shard --mask` as ID:M. With eot: ids in [0, VOCAB-1) and about EOT_RATE of them
    replaced by eot (so rows hold several documents). Returns (dir, tokens, mask)."""
    rng = np.random.RandomState(DATA_SEED + (1 if eot is not None else 0))
    n = N_SAMPLES * SEQ_LEN + 1
    tokens = rng.randint(0, VOCAB if eot is None else VOCAB - 1, size=n)
    mask = (rng.random_sample(n) >= 0.2).astype(np.int64)
    if eot is not None:
        tokens[rng.random_sample(n) < EOT_RATE] = eot
    txt = os.path.join(tmp, name + ".txt")
    with open(txt, "w") as f:
        for i in range(0, n, 16):
            f.write(" ".join(f"{t}:{m}" for t, m in zip(tokens[i:i + 16], mask[i:i + 16])) + "\n")
    out = os.path.join(tmp, "data-" + name)
    r = subprocess.run([*WRAP, TESSERA, "shard", "--out", out, "--vocab", str(VOCAB), "--mask", txt],
                       capture_output=True, text=True)
    return out, tokens, mask, r


def write_config(path, cfg, tmp, data_dir):
    model = "\n".join(f"  {k} = {v};" for k, v in cfg["model"].items())
    optim = dict(COMMON_OPTIM, grad_clip=cfg["grad_clip"])
    optim = "\n".join(f"  {k} = {v!r};" if isinstance(v, float) else f"  {k} = {v};"
                      for k, v in optim.items())
    with open(path, "w") as f:
        f.write(f"""# {cfg['name']}: written by tests/reference/test_reference.py
run_dir = "{os.path.join(tmp, 'run_' + cfg['name'])}";
seed = {cfg.get("seed", 1234)};
max_duration = "{STEPS}ba";
global_batch = {GLOBAL_BATCH};
micro_batch = {MICRO_BATCH};
seq_len = {SEQ_LEN};
model = {{
{model}
}};
optim = {{
{optim}
}};
data = {{
  train = "{data_dir}";
  shuffle = true;
}};
""")


def run_env():
    env = dict(os.environ)
    if os.geteuid() == 0:  # ref_dump calls MPI_Init; OpenMPI refuses root without these
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def read_dump(path):
    d = {}
    with h5py.File(path, "r") as f:
        d["attrs"] = {k: float(v) for k, v in f.attrs.items()}
        for g in ("params", "step0/grads", "final"):
            d[g] = {k: f[g][k][()] for k in f[g].keys()}
        if "rope_freqs" in f:
            d["rope_freqs"] = f["rope_freqs"][()]
        if "windows" in f:  # each layer's sliding window (0: full attention)
            d["attrs"]["windows"] = tuple(int(w) for w in f["windows"][()])
        if "ropes" in f:  # 1 where the layer uses RoPE
            d["attrs"]["ropes"] = tuple(int(w) for w in f["ropes"][()])
        if "rope_local_freqs" in f:
            d["rope_local_freqs"] = f["rope_local_freqs"][()]
        for k in ("inputs", "targets", "logits"):
            d["step0/" + k] = f["step0"][k][()]
        d["step0/loss"] = float(f["step0"].attrs["loss"])
        for k in ("inputs", "targets", "loss", "lr", "grad_norm"):
            d["train/" + k] = f["train"][k][()]
        for k in ("step0/moe", "train/moe"):
            if k in f:
                d[k] = f[k][()]
    return d


# ---- the torch side ----------------------------------------------------------------------------

def torch_config(a):
    """The torch model's config from a dump's attributes: torch_gpt's GPT (learned positions or
    ALiBi, LayerNorm, GELU) or, with RoPE, torch_llama's Llama (RMSNorm, SwiGLU)."""
    i = lambda k: int(round(a[k]))  # noqa: E731
    if not a["rope"]:
        if a["rmsnorm"] or a["swiglu"] or a["qk_norm"] or a["qkv_bias"] or not a["tie_embeddings"] \
                or i("KVH") != i("NH") or i("hs") * i("NH") != i("C"):
            raise ValueError("no torch model for a GPT/MPT-style dump with Llama/Qwen keys")
        return torch_gpt.GPTConfig(V=i("V"), Vp=i("Vp"), C=i("C"), L=i("L"), NH=i("NH"),
                                   F=i("F"), max_T=i("T"), alibi=bool(a["alibi"]),
                                   bias=bool(a["bias"]), gelu_exact=bool(a["gelu_exact"]))
    if not a["rmsnorm"] or not (a["swiglu"] or a.get("geglu")) or a["bias"]:
        raise ValueError("no torch model for RoPE without RMSNorm and SwiGLU, or with biases")
    scaling = rope_scaling_of(a)
    llama = dict(V=i("V"), Vp=i("Vp"), C=i("C"), L=i("L"), NH=i("NH"), KVH=i("KVH"), hs=i("hs"),
                 F=i("F"), norm_eps=a["norm_eps"], rope_theta=a["rope_theta"],
                 rope_scaling=scaling, qkv_bias=bool(a["qkv_bias"]), qk_norm=bool(a["qk_norm"]),
                 tie_embeddings=bool(a["tie_embeddings"]))
    if not a["E"]:
        return torch_llama.LlamaConfig(**llama, windows=a.get("windows", ()),
                                       sinks=bool(a.get("attn_sinks", 0)),
                                       qpas=a.get("query_pre_attn_scalar", 0.0),
                                       sandwich=bool(a.get("sandwich", 0)),
                                       post=bool(a.get("post", 0)),
                                       qk_proj=bool(a.get("qk_proj", 0)),
                                       embed_scale=bool(a.get("embed_scale", 0)),
                                       geglu=bool(a.get("geglu", 0)),
                                       **position_fields(a))
    return torch_moe.MoEConfig(**llama, E=i("E"), K=i("K"), FE=i("FE"), S=i("S"),
                               moe_every=i("moe_every"), norm_topk=bool(a["moe_norm_topk"]),
                               aux_coef=a["moe_aux_loss_coef"], z_coef=a["moe_z_loss_coef"],
                               shared_gate=bool(a.get("moe_shared_gate", 0)))


def rope_scaling_of(a):
    """The torch RoPE scaling of a dump's rope_kind: None, llama3, linear or yarn."""
    kind = int(round(a.get("rope_kind", a["rope_scaling"])))
    orig = int(round(a["rope_original_max_pos"]))
    if kind == 1:
        return torch_llama.RopeScaling(a["rope_factor"], a["rope_low_freq_factor"],
                                       a["rope_high_freq_factor"], orig)
    if kind == 2:
        return torch_llama.LinearScaling(a["rope_factor"])
    if kind == 3:
        return torch_llama.YarnScaling(a["rope_factor"], a["rope_beta_fast"], a["rope_beta_slow"],
                                       orig, bool(a["rope_truncate"]))
    return None


def position_fields(a):
    """LlamaConfig's positions and soft-capping fields from a dump's attributes."""
    ropes = a.get("ropes", ())
    return dict(rope_local_theta=a.get("rope_local_theta", 0.0),
                partial=a.get("partial_rotary_factor", 1.0),
                ropes=() if all(ropes) else ropes, attn_softcap=a.get("attn_softcap", 0.0),
                final_softcap=a.get("final_softcap", 0.0))


def is_llama(tc):
    return isinstance(tc, torch_llama.LlamaConfig)


def is_moe(tc):
    return isinstance(tc, torch_moe.MoEConfig)


def param_names(tc):
    return (torch_moe if is_moe(tc) else torch_llama if is_llama(tc) else torch_gpt).param_names(tc)


class DocGPT(torch_gpt.GPT):
    """model.attn_mask = "document": a document ends with (and includes) an eot token; a token
    sees the earlier tokens of its own document only (MPT's attn_uses_sequence_id mask), and
    learned positions count from the document's first token."""

    def __init__(self, cfg, eot):
        super().__init__(cfg)
        self.eot = eot

    def forward(self, idx, targets=None):
        B, T = idx.shape
        is_eot = (idx == self.eot).long()
        doc = torch.cumsum(is_eot, dim=1) - is_eot          # eot tokens strictly before t
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        allowed = (doc[:, :, None] == doc[:, None, :]) & causal  # (B,T,T)
        pos = allowed.sum(dim=-1) - 1                        # earlier tokens of the document
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(pos)
        for blk in self.blocks:
            x = x + blk.attn(blk.ln1(x), allowed)
            x = x + blk.mlp(blk.ln2(x))
        logits = F.linear(self.lnf(x), self.wte.weight)
        return logits, torch_gpt.summed_loss(logits, targets, self.cfg.V)


def torch_model(tc, a, doc_mask=None):
    """The float64 torch model of a dump: with the document mask (doc_mask, default the dump's)
    DocGPT or a Llama with an eot id."""
    doc_mask = a.get("doc_mask") if doc_mask is None else doc_mask
    eot = int(round(a["eot_token"])) if doc_mask else None
    if is_moe(tc):
        return torch_moe.MoELlama(tc, eot).double()
    if is_llama(tc):
        return torch_llama.Llama(tc, eot).double()
    return (DocGPT(tc, eot) if doc_mask else torch_gpt.GPT(tc)).double()


def dumped_model(tc, d, doc_mask=None):
    """torch_model of config tc (and the dump's attributes) holding the dump d's initial weights"""
    m = torch_model(tc, d["attrs"], doc_mask)
    m.load_tessera(d["params"])
    return m


def logits_moved(model, inputs, logits):
    """the relative difference of model's logits on inputs from logits"""
    with torch.no_grad():
        return rel_err(model(inputs)[0].numpy(), logits.numpy())


def policy_and_reference(a, d):
    """Post-training's two float64 models of a dump's initial weights: the policy, and the
    reference, frozen (DPO's and GRPO's)."""
    tc = torch_config(a)
    policy, reference = torch_model(tc, a), torch_model(tc, a)
    for m in (policy, reference):
        m.load_tessera(d["params"])
    for p in reference.parameters():
        p.requires_grad_(False)
    return policy, reference


def global_batch_backward(model, inputs, targets, micro):
    """Loss = sum of the counted targets' losses / their count over the WHOLE global batch,
    accumulated microbatch by microbatch as trainer_step does; with MoE plus each microbatch's
    router loss weighted by w = its counted targets / the global batch's (docs/moe.md), with
    multi-token prediction plus its weighted depths' losses over the same count. Returns
    (loss, logits, moe): loss without the router terms, as tessera reports it; moe None, or per
    MoE layer [w-weighted aux, w-weighted z, tokens per expert] summed over the microbatches
    (ref_dump's /step0/moe and /train/moe)."""
    inputs = torch.as_tensor(inputs, dtype=torch.long)
    targets = torch.as_tensor(targets, dtype=torch.long)
    counted = int((targets >= 0).sum())
    loss, logits, moe = 0.0, [], None
    for b in range(0, inputs.shape[0], micro):
        lg, loss_sum = model(inputs[b:b + micro], targets[b:b + micro])
        total = loss_sum / counted
        if getattr(model, "mtp_sum", None) is not None:  # multi-token prediction (torch_mtp.py)
            total = total + model.mtp_weight * model.mtp_sum / counted
        if isinstance(model, torch_moe.MoELlama):
            w = int((targets[b:b + micro] >= 0).sum()) / counted
            total = total + w * model.router_loss()
            mb = model.router_stats() * np.array([w, w] + [1] * model.cfg.E)
            moe = mb if moe is None else moe + mb
        total.backward()
        loss += loss_sum.item() / counted
        logits.append(lg.detach())
    return loss, torch.cat(logits), moe


def grad_norm(model):
    return math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters()
                         if p.grad is not None))  # (none: DeepSeek's correction bias)


def clip_grads(params, norm, clip):
    """trainer.c's clipping: coef = clip / (norm + 1e-6), applied only when norm > clip (clip 0 =
    off; torch.nn.utils.clip_grad_norm_ uses the same coefficient clamped to <= 1). Returns
    whether it clipped."""
    clipped = clip > 0 and norm > clip
    if clipped:
        with torch.no_grad():
            for p in params:
                if p.grad is not None:  # (none: DeepSeek's correction bias)
                    p.grad.mul_(clip / (norm + 1e-6))
    return clipped


SCHEDULES = {0: "cosine", 1: "linear", 2: "constant", 3: "wsd"}  # tsr_sched_kind


def torch_train(model, d, after_step=None):
    """STEPS AdamW steps on the dumped batches. Returns per-step (loss, grad_norm, lr, clipped,
    moe) (moe: global_batch_backward's). after_step(model, moe): called after each AdamW step
    (DeepSeek's bias update, torch_moe.MoELlama.balance)."""
    a = d["attrs"]
    groups = model.param_groups(a["weight_decay"], bool(a["decay_norms_biases"]),
                                bool(a["decay_embeddings"]))
    opt = torch.optim.AdamW(groups, lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    clip = a["grad_clip"]
    hist = []
    for s in range(int(a["steps"])):
        lr = a["lr"] * torch_gpt.lr_multiplier(SCHEDULES[int(a["schedule"])], a["alpha_f"], s,
                                               int(a["warmup_steps"]), int(a["steps"]))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=False)
        loss, _, moe = global_batch_backward(model, d["train/inputs"][s], d["train/targets"][s],
                                             MICRO_BATCH)
        norm = grad_norm(model)
        clipped = clip_grads(model.parameters(), norm, clip)
        opt.step()
        if after_step is not None:
            after_step(model, moe)
        hist.append((loss, norm, lr, clipped, moe))
    return hist


# ---- checks ------------------------------------------------------------------------------------

def check_data(tap, name, d, tokens, mask):
    """Every dumped row is sample k of the token stream (inputs tokens[kT:kT+T], targets the next
    T tokens, -1 where the mask is 0); one epoch's rows are a permutation of the samples; the step-0
    batch is the first training batch."""
    T = SEQ_LEN
    index = {tuple(tokens[k * T:k * T + T]): k for k in range(N_SAMPLES)}
    problems, seen = [], []
    rows = [(f"train step {s} row {b}", d["train/inputs"][s][b], d["train/targets"][s][b])
            for s in range(STEPS) for b in range(GLOBAL_BATCH)]
    for where, inp, tgt in rows:
        k = index.get(tuple(int(x) for x in inp))
        if k is None:
            problems.append(f"{where}: inputs are no sample of the token stream")
            continue
        want = np.where(mask[k * T + 1:k * T + T + 1] == 1, tokens[k * T + 1:k * T + T + 1], -1)
        if not np.array_equal(tgt, want):
            problems.append(f"{where} (sample {k}): targets differ from tokens/mask")
        seen.append(k)
    if sorted(seen) != list(range(N_SAMPLES)) and not problems:
        problems.append(f"one epoch of training rows is not a permutation of the {N_SAMPLES} "
                        f"samples: {sorted(seen)}")
    if not (np.array_equal(d["step0/inputs"], d["train/inputs"][0])
            and np.array_equal(d["step0/targets"], d["train/targets"][0])):
        problems.append("the step-0 batch differs from training step 0's batch")
    masked = int((d["step0/targets"] < 0).sum())
    if masked == 0:
        problems.append("no masked target in the step-0 batch: ignore_index is not exercised")
    tap.diag(f"{name}: step-0 batch has {masked} of {d['step0/targets'].size} targets masked; "
             f"sample order of step 0: {seen[:GLOBAL_BATCH]}")
    for p in problems[:5]:
        tap.diag(p)
    tap.ok(not problems, f"{name}: dumped batches are the dataset's samples with the loss mask, "
                         f"one epoch = a permutation of the {N_SAMPLES} samples")


def config_names(m):
    """The tessera parameter names the config's model dict m must give (what the dump holds)."""
    yes = lambda k, default="false": m.get(k, default) == "true"  # noqa: E731
    if m["pos"] == '"rope"':
        cfg = types.SimpleNamespace(qkv_bias=yes("qkv_bias"), qk_norm=yes("qk_norm"),
                                    tie_embeddings=yes("tie_embeddings", "true"),
                                    sinks=yes("attn_sinks"),
                                    sandwich=m.get("norm_placement") == '"sandwich"',
                                    post=m.get("norm_placement") == '"post"')
        if not m.get("moe_experts"):
            return torch_llama.param_names(cfg)
        return torch_moe.param_names(types.SimpleNamespace(
            **vars(cfg), L=m["n_layer"], moe_every=m.get("moe_every", 1),
            S=m.get("moe_shared_size", 0), shared_gate=yes("moe_shared_gate")))
    return torch_gpt.param_names(types.SimpleNamespace(bias=yes("bias"),
                                                       alibi=m["pos"] == '"alibi"'))


def checks_per_config(cfg):
    m = cfg["model"]
    rope = m["pos"] == '"rope"'
    extra = (1 if cfg.get("data") == "doc" else 0) + (2 if rope else 0)
    extra += 2 if m.get("tie_embeddings") == "false" else 0
    extra += MOE_CHECKS if m.get("moe_experts") else 0
    extra += 1 if any(k in m for k in ("sliding_window", "attn_sinks", "query_pre_attn_scalar",
                                       "norm_placement", "partial_rotary_factor",
                                       "attn_logit_softcapping")) else 0
    return 12 + 2 * len(config_names(m)) + extra


def config_windows(m):
    """Each layer's window from the config's model dict: layer_types (a list or a pattern
    repeated over the layers) with sliding_window, or sliding_window on every layer."""
    W, L = m.get("sliding_window", 0), m["n_layer"]
    types_ = [t.strip() for t in m.get("layer_types", '""').strip('"').split(",") if t.strip()]
    if not types_:
        return [W] * L
    return [W if types_[l % len(types_)] == "sliding_attention" else 0 for l in range(L)]


def want_attrs(cfg):
    """The root attributes a dump of this config must have (ref_dump.c's list)."""
    m = cfg["model"]
    yes = lambda k, default="false": float(m.get(k, default) == "true")  # noqa: E731
    C, NH = m["d_model"], m["n_head"]
    want = dict(V=VOCAB, Vp=128, C=C, L=m["n_layer"], NH=NH,
                KVH=m.get("n_kv_head", NH), hs=m.get("head_dim", C // NH),
                F=m.get("intermediate_size", 4 * C), T=SEQ_LEN,
                alibi=float(m["pos"] == '"alibi"'), rope=float(m["pos"] == '"rope"'),
                bias=yes("bias", "true"), gelu_exact=float(m.get("gelu") == '"exact"'),
                rmsnorm=float(m.get("norm") == '"rmsnorm"'),
                swiglu=float(m.get("mlp") == '"swiglu"'),
                qkv_bias=yes("qkv_bias"), qk_norm=yes("qk_norm"),
                tie_embeddings=yes("tie_embeddings", "true"),
                rope_scaling=float(m.get("rope_scaling") == '"llama3"'),
                global_batch=GLOBAL_BATCH, steps=STEPS, warmup_steps=3,
                grad_clip=cfg["grad_clip"], weight_decay=COMMON_OPTIM["weight_decay"],
                doc_mask=float(m.get("attn_mask") == '"document"'), E=m.get("moe_experts", 0))
    if want["E"]:
        want.update(K=m["moe_top_k"], FE=m["moe_intermediate_size"], S=m.get("moe_shared_size", 0),
                    LM=m["n_layer"] // m.get("moe_every", 1), moe_every=m.get("moe_every", 1),
                    moe_norm_topk=yes("moe_norm_topk", "true"),
                    moe_shared_gate=yes("moe_shared_gate"))
    if m["pos"] == '"rope"':
        want["attn_sinks"] = yes("attn_sinks")
        want["query_pre_attn_scalar"] = m.get("query_pre_attn_scalar", 0)
        want["windows"] = tuple(config_windows(m))
        want["sandwich"] = m.get("norm_placement") == '"sandwich"'
        want["post"] = m.get("norm_placement") == '"post"'
        want["qk_proj"] = yes("qk_norm") and m.get("qk_norm_scope") == '"projection"'
        want["embed_scale"] = m.get("embed_scale") == '"sqrt_d_model"'
        want["geglu"] = m.get("mlp") == '"geglu_tanh"'
        want["rope_kind"] = ['"none"', '"llama3"', '"linear"', '"yarn"'].index(
            m.get("rope_scaling", '"none"'))
        ropes = [t.strip() for t in m.get("no_rope_layers", '""').strip('"').split(",")
                 if t.strip()]
        want["ropes"] = tuple(int(ropes[l % len(ropes)]) if ropes else 1
                              for l in range(m["n_layer"]))
    for k in ("eot_token", "norm_eps", "rope_theta", "rope_factor", "rope_low_freq_factor",
              "rope_high_freq_factor", "rope_original_max_pos", "moe_aux_loss_coef",
              "moe_z_loss_coef", "rope_local_theta", "rope_beta_fast", "rope_beta_slow",
              "partial_rotary_factor"):
        if k in m:
            want[k] = m[k]
    for k, dump_name in (("attn_logit_softcapping", "attn_softcap"),
                         ("final_logit_softcapping", "final_softcap")):
        if k in m:
            want[dump_name] = m[k]
    if "rope_truncate" in m:
        want["rope_truncate"] = yes("rope_truncate", "true")
    return want


def check_dump_describes(tap, cfg, d, tc, names, model):
    """The dump's attributes, tensor names and shapes are those of the config's model."""
    a = d["attrs"]
    bad = [f"{k} = {a.get(k)} (want {v})" for k, v in want_attrs(cfg).items() if a.get(k) != v]
    if sorted(names) != sorted(config_names(cfg["model"])):
        bad.append(f"the torch model has {names}, the config asks for "
                   f"{config_names(cfg['model'])}")
    for g in ("params", "step0/grads", "final"):
        if sorted(d[g]) != sorted(names):
            bad.append(f"/{g} holds {sorted(d[g])}, want {sorted(names)}")
    shapes = {n: tuple(t.shape) for n, t in model.tessera_tensors().items()}
    for g in ("params", "step0/grads", "final"):
        for n in names:
            if n in d[g] and d[g][n].shape != shapes[n]:
                bad.append(f"/{g}/{n} has shape {d[g][n].shape}, want {shapes[n]}")
    for b in bad[:8]:
        tap.diag(b)
    tap.ok(not bad, f"{cfg['name']}: dump attributes, tensor names and shapes match the config")
    return shapes


def check_rope_freqs(tap, name, d, tc):
    """tessera's RoPE frequencies (fp32) are torch's float64 ones rounded; with Llama 3.1's
    scaling, the head has frequencies in each of its three regimes (kept, interpolated, divided
    by the factor), so the scaling is exercised."""
    want = torch_llama.rope_params(tc.hs, tc.rope_theta, tc.rope_scaling, tc.partial)[0].numpy()
    e = freq_err(d.get("rope_freqs"), want, tc.hs)
    if tc.rope_local_theta:  # the sliding layers' table too
        local = torch_llama.rope_params(tc.hs, tc.rope_local_theta, None, tc.partial)[0].numpy()
        e = max(e, freq_err(d.get("rope_local_freqs"), local, tc.hs))
    tap.diag(f"{name}: RoPE frequencies tessera " + " ".join(f"{x:.6g}" for x in d["rope_freqs"]))
    kind = type(tc.rope_scaling).__name__ if tc.rope_scaling else "no"
    tap.ok(e <= TOL_FREQ, f"{name}: the {len(want)} RoPE frequencies (theta {tc.rope_theta:g}, "
                          f"{kind} scaling, local theta {tc.rope_local_theta:g}, partial "
                          f"{tc.partial:g}) max rel err {e:.1e} <= {TOL_FREQ:g} (fp32 rounding)")
    plain = torch_llama.rope_inv_freq(int(round(tc.hs * tc.partial)), tc.rope_theta).numpy()
    if not isinstance(tc.rope_scaling, (torch_llama.RopeScaling, type(None))):
        ratio = plain / want
        tap.ok(np.any(np.abs(ratio - 1) > 1e-3), f"{name}: the {kind} scaling changes the "
               "frequencies (ratios " + " ".join(f"{x:.4g}" for x in ratio) + ")")
        return
    if tc.rope_scaling is None:
        ok = np.array_equal(want, plain)
        tap.ok(ok, f"{name}: no scaling: the frequencies are theta^(-2i/hs)")
        return
    ratio = plain / want
    kept = int(np.sum(ratio == 1))
    divided = int(np.sum(np.isclose(ratio, tc.rope_scaling.factor, rtol=1e-12)))
    between = int(np.sum((ratio > 1) & (ratio < tc.rope_scaling.factor)
                         & ~np.isclose(ratio, tc.rope_scaling.factor, rtol=1e-12)))
    tap.ok(kept and divided and between and kept + divided + between == len(ratio),
           f"{name}: llama3 scaling changes the frequencies: {kept} kept, {between} interpolated, "
           f"{divided} divided by {tc.rope_scaling.factor:g} (ratios "
           + " ".join(f"{x:.4g}" for x in ratio) + ")")


def freq_err(got, want, hs):
    """Max relative error of a dumped (hs/2) table against want (rot/2), whose tail must be 0."""
    if got is None or got.shape != (hs // 2,):
        return math.inf
    n = len(want)
    return math.inf if np.any(got[n:] != 0) else float(np.max(np.abs(got[:n] - want) / want))


def check_pad_rows(tap, name, what, rows, V, Vp):
    tap.ok(not np.any(rows != 0), f"{name}: padded rows {V}..{Vp - 1} of {what} are exactly 0 "
                                  f"(max |x| {np.abs(rows).max() if rows.size else 0:g})")


def quiet_k_bias(tc, names):
    """Columns of qkvb whose gradient is zero, or nearly so, in exact arithmetic (TOL_K_BIAS), or
    None. Without RoPE the whole key block NH*hs .. (NH+KVH)*hs (C .. 2C in a GPT): a bias added
    to every key adds q.b to every score of a query, which softmax ignores. RoPE turns the bias by
    the key's position, so its column pair i gets a gradient of the order of the angle f_i * (T-1)
    it turns over the sequence: the pairs with f_i * (T-1) < 1e-2 rad (see TOL_K_BIAS)."""
    if "qkvb" not in names:
        return None
    hs = tc.hs if is_llama(tc) else tc.C // tc.NH
    NH, KVH = tc.NH, tc.KVH if is_llama(tc) else tc.NH
    quiet = np.ones(hs, dtype=bool)
    if is_llama(tc):
        f = torch_llama.rope_inv_freq(hs, tc.rope_theta, tc.rope_scaling).numpy()
        quiet = np.concatenate([f, f]) * (SEQ_LEN - 1) < 1e-2
    cols = NH * hs + np.flatnonzero(np.tile(quiet, KVH))
    return cols if len(cols) else None


def check_step0(tap, name, d, tc, names, shapes, model):
    """Forward and backward at the initial weights. Returns the torch logits and MoE statistics
    (global_batch_backward's)."""
    model.load_tessera(d["params"])
    model.zero_grad(set_to_none=False)
    loss, logits, moe = global_batch_backward(model, d["step0/inputs"], d["step0/targets"],
                                              MICRO_BATCH)
    V = tc.V
    e = rel_err(d["step0/logits"], logits.numpy())
    tap.ok(e <= TOL_STEP0, f"{name}: step-0 logits (B,T,Vp) rel err {e:.2e} <= {TOL_STEP0:g}")
    pad = d["step0/logits"][..., V:]
    tap.ok(pad.size > 0 and not np.any(pad != 0),
           f"{name}: the {tc.Vp - V} padded logit columns are exactly 0 "
           f"(max |x| {np.abs(pad).max() if pad.size else float('nan'):g})")
    e = abs(d["step0/loss"] - loss) / abs(loss)
    tap.ok(e <= TOL_STEP0, f"{name}: step-0 loss {d['step0/loss']:.7f} vs torch {loss:.7f}: "
                           f"rel err {e:.2e} <= {TOL_STEP0:g}")
    grads = {k: v.numpy() for k, v in model.tessera_tensors(grads=True).items()}
    worst = (0.0, "")
    for n in names:
        e = rel_err(d["step0/grads"][n], grads[n])
        worst = max(worst, (e, n))
        tap.ok(e <= TOL_STEP0, f"{name}: step-0 grad {n} {shapes[n]} rel err {e:.2e} "
                               f"(|g| {np.linalg.norm(grads[n]):.3g}) <= {TOL_STEP0:g}")
    tap.diag(f"{name}: worst step-0 gradient: {worst[1]} at {worst[0]:.2e}")
    kb = quiet_k_bias(tc, names)
    if kb is not None:
        tap.diag(f"{name}: step-0 gradient norm of the {len(kb)} quiet k-bias columns: tessera "
                 f"{np.linalg.norm(d['step0/grads']['qkvb'][:, kb]):.2e}, torch "
                 f"{np.linalg.norm(grads['qkvb'][:, kb]):.2e} (whole qkvb "
                 f"{np.linalg.norm(grads['qkvb']):.2e})")
    check_pad_rows(tap, name, "the wte gradient", d["step0/grads"]["wte"][V:], V, tc.Vp)
    if "lm_head" in names:
        check_pad_rows(tap, name, "the lm_head gradient", d["step0/grads"]["lm_head"][V:], V,
                       tc.Vp)
    return logits, moe


def has_variants(tc):
    return is_llama(tc) and (any(tc.windows) or tc.sinks or tc.qpas or tc.sandwich or tc.post
                             or tc.qk_proj or tc.embed_scale or tc.geglu or tc.attn_softcap
                             or tc.final_softcap or tc.partial != 1.0 or tc.ropes
                             or tc.rope_local_theta)


def check_variants_matter(tap, name, d, tc, logits):
    """Each variant of the case (a layer's window, the sinks, query_pre_attn_scalar, the sandwich
    norms) changes torch's step-0 logits by more than MIN_SWITCH_EFFECT when it is taken away alone
    (the sinks: set to -inf-like -1e30, i.e. no sink; the sandwich norms: the pre-norm block with
    the same ln1w and ln2w; the post-norms: the identity; QK-norm over the projections: per head,
    with weights of ones, what the step-0 weights are)."""
    effects = {}
    for l, W in enumerate(tc.windows):
        if W:
            effects[f"layer {l}'s window {W}"] = dict(windows=tuple(0 if k == l else w
                                                              for k, w in enumerate(tc.windows)))
    if tc.qpas:
        effects[f"query_pre_attn_scalar {tc.qpas:g}"] = dict(qpas=0.0)
    effects.update(position_effects(tc))
    got = {}
    inputs = torch.as_tensor(d["step0/inputs"], dtype=torch.long)
    for what, change in effects.items():
        got[what] = logits_moved(dumped_model(dataclasses.replace(tc, **change), d), inputs, logits)
    if tc.sinks:
        other = dumped_model(tc, d)
        with torch.no_grad():
            for ly in other.layers:
                ly.self_attn.sinks.fill_(-1e30)
        got["the sinks"] = logits_moved(other, inputs, logits)
    if tc.sandwich:  # the same ln1w and ln2w as a pre-norm block: no post-norms
        other = dumped_model(tc, d)
        for ly in other.layers:
            ly.sandwich, ly.post_attention_layernorm = False, ly.pre_feedforward_layernorm
        got["the sandwich norms"] = logits_moved(other, inputs, logits)
    got.update(post_variants_matter(d, tc, inputs, logits))
    tap.ok(got and all(e > MIN_SWITCH_EFFECT for e in got.values()),
           f"{name}: each variant moves the step-0 logits by > {MIN_SWITCH_EFFECT:g}: "
           + ", ".join(f"{w} {e:.1e}" for w, e in got.items()))


def position_effects(tc):
    """check_variants_matter's changes for docs/models.md "Positions": each soft cap off, the
    local RoPE base off (the sliding layers take the full layers' table), linear or YaRN scaling
    off, RoPE over the whole head, RoPE on every layer."""
    effects = {}
    for field, what in (("attn_softcap", "the attention soft cap"),
                        ("final_softcap", "the final soft cap"),
                        ("rope_local_theta", "the local RoPE base")):
        if getattr(tc, field):
            effects[f"{what} {getattr(tc, field):g}"] = {field: 0.0}
    if isinstance(tc.rope_scaling, (torch_llama.LinearScaling, torch_llama.YarnScaling)):
        effects[f"{type(tc.rope_scaling).__name__}"] = dict(rope_scaling=None)
    if tc.partial != 1.0:
        effects[f"partial rotary {tc.partial:g}"] = dict(partial=1.0)
    if tc.ropes:
        effects["the NoPE layers"] = dict(ropes=())
    return effects


def post_variants_matter(d, tc, inputs, logits):
    """check_variants_matter's effects of the part-3 variants: Gemma's embedding scale taken away,
    OLMo 2's post-norms taken away (identity), QK-norm per head (weights of ones) in place of over
    the projections."""
    got = {}
    for what, field in (("the embedding scale", "embed_scale"), ("GeGLU (vs SwiGLU)", "geglu")):
        if getattr(tc, field):
            got[what] = logits_moved(dumped_model(dataclasses.replace(tc, **{field: False}), d), inputs, logits)
    if tc.post:
        other = dumped_model(tc, d)
        for ly in other.layers:
            ly.post_attention_layernorm = ly.post_feedforward_layernorm = torch.nn.Identity()
        got["the post-norms"] = logits_moved(other, inputs, logits)
    if tc.qk_proj:
        other = dumped_model(tc, d)
        for ly in other.layers:
            at = ly.self_attn
            at.qk_proj = False
            at.q_norm = torch_llama.RMSNorm(tc.hs, tc.norm_eps)
            at.k_norm = torch_llama.RMSNorm(tc.hs, tc.norm_eps)
        got["QK-norm over the projections"] = logits_moved(other, inputs, logits)
    return got


def check_doc_mask_matters(tap, name, d, tc, logits):
    """The document-mask case exercises the mask: documents inside rows change the logits."""
    inner = int((d["step0/inputs"][:, :-1] == EOT).sum())
    plain = dumped_model(tc, d, doc_mask=False)
    with torch.no_grad():
        causal_logits, _ = plain(torch.as_tensor(d["step0/inputs"], dtype=torch.long))
    e = rel_err(causal_logits.numpy(), logits.numpy())
    tap.ok(inner > 0 and e > 1e-2, f"{name}: the step-0 batch has {inner} end-of-text tokens "
                                   f"inside rows; plain causal logits differ from the "
                                   f"document-mask ones by {e:.2e} > 1e-2")


def check_schedule_and_norms(tap, name, d, hist):
    """lr per step, clipping, training losses and gradient norms of the 10 steps."""
    lr_t = d["train/lr"]
    e = max(abs(lr_t[s] - h[2]) / h[2] for s, h in enumerate(hist))
    tap.diag(f"{name}: lr per step " + " ".join(f"{x:.5g}" for x in lr_t))
    tap.ok(e <= TOL_LR, f"{name}: lr schedule (warmup 3, cosine to alpha_f 0.1) matches "
                        f"lr_multiplier's formula: max rel err {e:.1e} <= {TOL_LR:g}")
    clip = d["attrs"]["grad_clip"]
    norms_t = d["train/grad_norm"]
    clipped_t = [bool(x > clip) for x in norms_t]
    clipped_torch = [h[3] for h in hist]
    margin = min(abs(x - clip) / clip for x in norms_t)
    tap.diag(f"{name}: grad norms " + " ".join(f"{x:.4f}" for x in norms_t) +
             f" (clip {clip:g}; closest norm {margin:.1%} away from it)")
    tap.ok(any(clipped_t) and not all(clipped_t) and clipped_t == clipped_torch,
           f"{name}: clipping exercised: {sum(clipped_t)} of {len(norms_t)} steps clipped, "
           f"the same steps as torch's")
    el = [abs(lt - h[0]) / abs(h[0]) for lt, h in zip(d["train/loss"], hist)]
    tap.diag(f"{name}: train loss " + " ".join(f"{x:.5f}" for x in d["train/loss"]))
    tap.diag(f"{name}: train loss rel err per step " + " ".join(f"{x:.1e}" for x in el))
    e = max(el) if all(math.isfinite(x) for x in el) else math.inf
    tap.ok(e <= TOL_TRAIN_LOSS, f"{name}: {len(el)} training losses, max rel err {e:.2e} "
                                f"<= {TOL_TRAIN_LOSS:g}")
    en = [abs(nt - h[1]) / h[1] for nt, h in zip(norms_t, hist)]
    en = [x if math.isfinite(x) else math.inf for x in en]
    tap.diag(f"{name}: grad norm rel err per step " + " ".join(f"{x:.1e}" for x in en))
    e0, e1 = en[0], max(en[1:])
    tap.ok(e0 <= TOL_STEP0 and e1 <= TOL_TRAJ,
           f"{name}: gradient norms: step 0 rel err {e0:.2e} <= {TOL_STEP0:g}, "
           f"steps 1..{len(en) - 1} max {e1:.2e} <= {TOL_TRAJ:g}")


def check_final(tap, name, d, tc, names, model):
    """The parameters after the last step; padded vocabulary rows still zero."""
    final = {k: v.numpy() for k, v in model.tessera_tensors().items()}
    worst = (0.0, "")
    for n in names:
        got, want, extra, ok = d["final"][n], final[n], "", True
        kb = quiet_k_bias(tc, names) if n == "qkvb" else None
        if kb is not None:  # those k columns: absolute bound (TOL_K_BIAS); the rest: relative
            kdev = float(np.abs(got[:, kb] - want[:, kb]).max())
            ok = kdev <= TOL_K_BIAS
            extra = (f" (without the {len(kb)} quiet k columns); those max |diff| {kdev:.1e} "
                     f"<= {TOL_K_BIAS:g}")
            got, want = np.delete(got, kb, axis=1), np.delete(want, kb, axis=1)
        e = rel_err(got, want)
        worst = max(worst, (e, n))
        tap.ok(ok and e <= TOL_TRAJ, f"{name}: final {n} after {STEPS} steps rel err {e:.2e} "
                                     f"<= {TOL_TRAJ:g}{extra}")
    tap.diag(f"{name}: worst final parameter: {worst[1]} at {worst[0]:.2e}")
    check_pad_rows(tap, name, "the final wte", d["final"]["wte"][tc.V:], tc.V, tc.Vp)
    if "lm_head" in names:
        check_pad_rows(tap, name, "the final lm_head", d["final"]["lm_head"][tc.V:], tc.V, tc.Vp)


MOE_CHECKS = 4  # per MoE config: check_moe_switches 1, check_moe_run 3


def check_moe_switches(tap, name, d, tc, model):
    """The test can see each MoE switch: the step-0 gradients of torch models without the aux
    loss, without the z-loss, and with the other top-k weighting differ from model's (which has
    just run the step-0 backward) by more than MIN_SWITCH_EFFECT in some tensor."""
    full = {k: v.numpy() for k, v in model.tessera_tensors(grads=True).items()}
    effects = {}
    for what, change in (("no aux loss", dict(aux_coef=0.0)), ("no z-loss", dict(z_coef=0.0)),
                         ("other weighting", dict(norm_topk=not tc.norm_topk))):
        other = torch_moe.MoELlama(dataclasses.replace(tc, **change), model.eot).double()
        other.load_tessera(d["params"])
        global_batch_backward(other, d["step0/inputs"], d["step0/targets"], MICRO_BATCH)
        grads = {k: v.numpy() for k, v in other.tessera_tensors(grads=True).items()}
        effects[what] = max((rel_err(grads[n], full[n]), n) for n in full)
    tap.ok(all(e > MIN_SWITCH_EFFECT for e, _ in effects.values()),
           f"{name}: each MoE switch moves the step-0 gradients by > {MIN_SWITCH_EFFECT:g}: "
           + ", ".join(f"{w} {e:.1e} ({n})" for w, (e, n) in effects.items()))


def moe_errors(got, want):
    """(max relative error of the aux and z columns, whether the expert loads are identical)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return math.inf, False
    e = np.abs(got[..., :2] - want[..., :2]) / np.abs(want[..., :2])
    e = float(e.max()) if np.all(np.isfinite(e)) else math.inf
    return e, bool(np.array_equal(got[..., 2:], want[..., 2:]))


def check_moe_run(tap, name, d, moe0, hist, margin):
    """Routing far from ties in every forward torch ran; tessera's per-layer aux and z losses and
    expert loads at step 0 and in each training step equal torch's."""
    tap.ok(margin > TOL_MARGIN,
           f"{name}: no routing near-tie: smallest gap between the K-th and (K+1)-th router "
           f"probability over all rows, layers, microbatches and steps {margin:.2e} > "
           f"{TOL_MARGIN:g}")
    got0 = d.get("step0/moe")
    tap.diag(f"{name}: step-0 expert loads per MoE layer (tessera): "
             + "; ".join(" ".join(f"{int(c)}" for c in r[2:]) for r in np.atleast_2d(got0)))
    e, same = moe_errors(got0, moe0)
    tap.ok(e <= TOL_STEP0 and same, f"{name}: step-0 aux and z losses per MoE layer rel err "
                                    f"{e:.2e} <= {TOL_STEP0:g}; expert loads identical: {same}")
    e, same = moe_errors(d.get("train/moe"), np.stack([h[4] for h in hist]))
    tap.diag(f"{name}: moe_aux per step " + " ".join(f"{x:.5f}" for x in
                                                   d["train/moe"][:, :, 0].sum(axis=1)))
    tap.diag(f"{name}: moe_z per step " + " ".join(f"{x:.4f}" for x in
                                                 d["train/moe"][:, :, 1].sum(axis=1)))
    tap.ok(e <= TOL_TRAIN_LOSS and same,
           f"{name}: aux and z losses per MoE layer of the {len(hist)} training steps max rel err "
           f"{e:.2e} <= {TOL_TRAIN_LOSS:g}; expert loads identical at every step: {same}")


def run_config(tap, cfg, tmp, data_dir, tokens, mask):
    name = cfg["name"]
    cfg_path = os.path.join(tmp, name + ".cfg")
    out = os.path.join(tmp, name + ".h5")
    write_config(cfg_path, cfg, tmp, data_dir)
    r = subprocess.run([*WRAP, REF_DUMP, cfg_path, out], capture_output=True, text=True, env=run_env())
    if not tap.ok(r.returncode == 0 and os.path.exists(out),
                  f"{name}: ref_dump {os.path.basename(cfg_path)} exits 0 (rc {r.returncode})"):
        tap.diag((r.stdout + r.stderr)[-3000:])
        return False
    d = read_dump(out)
    a = d["attrs"]
    tc = torch_config(a)
    names = param_names(tc)
    model = torch_model(tc, a)
    shapes = check_dump_describes(tap, cfg, d, tc, names, model)
    if is_llama(tc):
        check_rope_freqs(tap, name, d, tc)
    check_data(tap, name, d, tokens, mask)
    logits, moe0 = check_step0(tap, name, d, tc, names, shapes, model)
    if a["doc_mask"]:
        check_doc_mask_matters(tap, name, d, tc, logits)
    if has_variants(tc):
        check_variants_matter(tap, name, d, tc, logits)
    if is_moe(tc):
        check_moe_switches(tap, name, d, tc, model)
        margin0 = model.min_margin()
    model = torch_model(tc, a)
    model.load_tessera(d["params"])
    hist = torch_train(model, d)
    if is_moe(tc):
        check_moe_run(tap, name, d, moe0, hist, min(margin0, model.min_margin()))
    check_schedule_and_norms(tap, name, d, hist)
    check_final(tap, name, d, tc, names, model)
    return True


# ---- the torch Llama and MoE layer on their own -------------------------------------------------

TORCH_SELF_CHECKS = 6
TOL_SELF = 1e-12  # float64 computations of the same thing in another order


def tiny_llama(KVH, eot=None, seed=0, **kw):
    """A random float64 Llama (every weight N(0, 0.3)) for the self-checks."""
    cfg = dict(V=50, Vp=64, C=24, L=2, NH=4, KVH=KVH, hs=8, F=40, norm_eps=1e-5,
               rope_theta=10000.0, rope_scaling=torch_llama.RopeScaling(4.0, 1.0, 4.0, 32),
               qkv_bias=True, qk_norm=True, tie_embeddings=False)
    cfg.update(kw)
    model = torch_llama.Llama(torch_llama.LlamaConfig(**cfg), eot).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)
    return model


def self_check_rope(tap):
    """rotate_half RoPE = multiplying x[i] + i x[i + hs/2] by e^(i p f_i)."""
    g = torch.Generator().manual_seed(1)
    hs = 12
    x = torch.randn(2, 3, 5, hs, generator=g, dtype=torch.float64)
    pos = torch.randint(0, 100, (2, 5), generator=g)
    inv_freq = torch_llama.rope_inv_freq(hs, 500000.0, torch_llama.RopeScaling(4.0, 2.0, 8.0, 128))
    cos, sin = torch_llama.rope_cos_sin(pos, inv_freq)
    got = torch_llama.apply_rope(x, cos, sin)
    z = torch.complex(x[..., :hs // 2], x[..., hs // 2:])
    angle = pos[:, None, :, None].double() * inv_freq
    z = z * torch.polar(torch.ones_like(angle), angle)
    e = float((got - torch.cat((z.real, z.imag), dim=-1)).abs().max())
    tap.ok(e <= TOL_SELF, f"torch: RoPE (rotate_half, cos/sin) equals the complex rotation of "
                          f"(x[i], x[i + hs/2]) by p f_i: max |diff| {e:.1e} <= {TOL_SELF:g}")


def self_check_gqa(tap):
    """GQA with 2 kv heads for 4 query heads = MHA whose key/value heads h are GQA's h // 2 (and
    not h % 2: the check can tell the two groupings apart)."""
    gqa = tiny_llama(KVH=2)
    idx = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want, _ = gqa(idx)
    errs = {}
    for how, head in (("h // 2", lambda h: h // 2), ("h % 2", lambda h: h % 2)):
        mha = tiny_llama(KVH=4)
        mha.load_state_dict({k: v for k, v in gqa.state_dict().items()
                             if "k_proj" not in k and "v_proj" not in k}, strict=False)
        with torch.no_grad():
            for ls, ld in zip(gqa.layers, mha.layers):
                for proj in ("k_proj", "v_proj"):
                    s, t = getattr(ls.self_attn, proj), getattr(ld.self_attn, proj)
                    rows = torch.cat([torch.arange(head(h) * 8, head(h) * 8 + 8) for h in range(4)])
                    t.weight.copy_(s.weight[rows])
                    t.bias.copy_(s.bias[rows])
            got, _ = mha(idx)
        errs[how] = rel_err(got.numpy(), want.numpy())
    tap.ok(errs["h // 2"] <= TOL_SELF and errs["h % 2"] > 1e-3,
           f"torch: GQA (repeat_kv, 4 query heads on 2 kv heads) equals MHA with kv head h // 2 "
           f"repeated: rel err {errs['h // 2']:.1e} <= {TOL_SELF:g} (with h % 2: "
           f"{errs['h % 2']:.1e})")


def self_check_documents(tap):
    """With the document mask, each document's logits are those of the document alone at the
    start of a row (attention stays inside it, RoPE positions restart)."""
    eot = 7
    doc = tiny_llama(KVH=2, eot=eot)
    alone = tiny_llama(KVH=2)
    alone.load_state_dict(doc.state_dict())
    row = torch.tensor([[3, 9, eot, 12, 4, 4, 30, eot, 5, 1, 2, 8]])
    with torch.no_grad():
        got, _ = doc(row)
        errs = []
        for s, e in ((0, 3), (3, 8), (8, 12)):
            want, _ = alone(row[:, s:e])
            errs.append(rel_err(got[:, s:e].numpy(), want.numpy()))
        shifted, _ = alone(row)
    e, diff = max(errs), rel_err(shifted[:, 3:].numpy(), got[:, 3:].numpy())
    tap.ok(e <= TOL_SELF and diff > 1e-3,
           f"torch: with the document mask, each of 3 documents in a row gives the logits of the "
           f"document alone: max rel err {e:.1e} <= {TOL_SELF:g} (causal mask over the row: "
           f"{diff:.1e})")


def self_check_moe_hand(tap):
    """Routing, weights and both router losses on 3 rows of known logits (E 3, K 2; the third row
    ties experts 1 and 2 at the K-th place): probs [4,2,1]/7, [1,2,4]/7, [4,1,1]/6, so
    counts [2,3,1], P = [58,31,37]/126, aux = 3 * (2*58 + 3*31 + 37) / (6*126) = 41/42,
    z = (2 ln(7)^2 + ln(6)^2) / 3; and the gradients with the counts held constant:
    d aux/d logits[n] = (E/N) (diag p_n - p_n p_n^T) f, d z/d logits[n] = (2/N) lse_n p_n."""
    logits = torch.log(torch.tensor([[4.0, 2, 1], [1, 2, 4], [4, 1, 1]])).requires_grad_()
    probs, idx, wts, margin = torch_moe.route(logits, 2, True)
    aux, z, counts = torch_moe.router_losses(logits, probs, idx)
    _, _, raw, _ = torch_moe.route(logits, 2, False)
    want_wts = torch.tensor([[4 / 6, 2 / 6], [4 / 6, 2 / 6], [4 / 5, 1 / 5]])
    want_raw = torch.tensor([[4 / 7, 2 / 7], [4 / 7, 2 / 7], [4 / 6, 1 / 6]])
    errs = [float((wts - want_wts).abs().max()), float((raw - want_raw).abs().max()),
            abs(float(aux) - 41 / 42),
            abs(float(z) - (2 * math.log(7) ** 2 + math.log(6) ** 2) / 3)]
    g_aux, = torch.autograd.grad(aux, logits, retain_graph=True)
    g_z, = torch.autograd.grad(z, logits)
    p, f, E_over_N = probs.detach(), counts / 6, 3 / 3
    want = torch.stack([(torch.diag(r) - torch.outer(r, r)) @ f for r in p]) * E_over_N
    errs.append(float((g_aux - want).abs().max()))
    lse = torch.logsumexp(logits.detach(), dim=-1)
    errs.append(float((g_z - 2 / 3 * lse[:, None] * p).abs().max()))
    routing_ok = idx.tolist() == [[0, 1], [2, 1], [0, 1]] and counts.tolist() == [2, 3, 1] \
        and float(margin[2]) == 0.0
    e = max(errs)
    tap.ok(routing_ok and e <= TOL_SELF,
           f"torch: MoE on hand logits: top-2 {idx.tolist()} (the tie at row 3 to the lower "
           f"expert), normalised and raw weights, aux 41/42, z, and their gradients with constant "
           f"counts: max |diff| {e:.1e} <= {TOL_SELF:g}")


def random_moe(seed, N=8, C=6, E=4, FE=3, S=2):
    """Random float64 inputs and weights (x, router, w1, w2, shw1, shw2) of one MoE layer."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(N, C), (E, C), (E, 2 * FE, C), (E, C, FE), (2 * S, C), (C, S)]
    return [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]


def self_check_moe_dispatch(tap):
    """The loop over experts (index_add of each expert's rows) equals every expert run on every
    row, weighted by a dense (N,E) matrix that holds wts at idx and zeros elsewhere; no row is
    dropped."""
    errs, routed = [], []
    for norm_topk, shared in ((True, False), (False, True)):
        x, router, w1, w2, shw1, shw2 = random_moe(3)
        sh = (shw1, shw2) if shared else (None, None)
        out, _, _, info = torch_moe.moe_forward(x, router, w1, w2, *sh, 2, norm_topk)
        dense = torch.zeros(x.shape[0], router.shape[0]).scatter(1, info.idx, info.wts)
        want = torch_moe.swiglu(x, shw1, shw2) if shared else torch.zeros_like(x)
        for e in range(router.shape[0]):
            want = want + dense[:, e, None] * torch_moe.swiglu(x, w1[e], w2[e])
        errs.append(rel_err(out.detach().numpy(), want.detach().numpy()))
        routed.append(int(info.counts.sum()) == 2 * x.shape[0])
    tap.ok(max(errs) <= TOL_SELF and all(routed),
           f"torch: MoE dispatch (per-expert loop) equals the dense weighted sum over all experts, "
           f"with and without a shared expert, N*K rows routed: rel err {max(errs):.1e} <= "
           f"{TOL_SELF:g}")


def self_check_moe_gradcheck(tap):
    """torch.autograd.gradcheck (finite differences) of the MoE layer's output, aux and z with
    respect to x and every weight, both weightings, shared expert on; the routing margin of the
    rows is far above the finite-difference step, so no expert switches."""
    results, margins = [], []
    for norm_topk in (True, False):
        inputs = random_moe(4)
        margins.append(float(torch_moe.route(inputs[0] @ inputs[1].T, 2, norm_topk)[3].min()))

        def layer(*t, norm_topk=norm_topk):
            out, aux, z, _ = torch_moe.moe_forward(*t, 2, norm_topk)
            return out, aux, z
        results.append(torch.autograd.gradcheck(layer, inputs, eps=1e-6, atol=1e-7, rtol=1e-5,
                                                raise_exception=False))
    tap.ok(all(results) and min(margins) > 1e-3,
           f"torch: gradcheck of the MoE layer (out, aux, z; norm_topk true and false) passes: "
           f"{results}; smallest routing margin {min(margins):.2e} > 1e-3")


def torch_self_checks(tap):
    for check in (self_check_rope, self_check_gqa, self_check_documents, self_check_moe_hand,
                  self_check_moe_dispatch, self_check_moe_gradcheck):
        try:
            check(tap)
        except Exception:
            tap.diag(traceback.format_exc())
            tap.ok(False, f"torch: {check.__name__} raised")


# ---- ring attention (context parallelism) -------------------------------------------------------
# (ranks, B, T, NH, KVH, hs, eot or None, alibi, variants): the ring's cases. fp32 attention of
# rows of 32 with head size 16 against float64: ~1e-7 relative, as a model's step 0 (TOL_STEP0's
# margin). The variants (ops.h tsr_attn_var): a window of 3 below the chunk of 4 (the blocks outside
# the band skipped: ring_dump counts them), a scale, a soft cap, sinks (their gradient checked too).
# (none under TSR_RUN_WRAPPER: ring_dump is an MPI program, not in the NO_MPI cross build)
RING_VARIANTS = dict(window=3, scale=0.3, softcap=1.5, sinks=True)
RING_CASES = [] if WRAP else [(2, 2, 32, 4, 2, 16, None, True, {}),
                              (4, 2, 32, 4, 1, 16, 3, False, {}),
                              (4, 2, 32, 4, 2, 16, 3, True, RING_VARIANTS)]
RING_CHECKS = sum(3 + 2 * bool(c[8]) for c in RING_CASES)


def torch_attention(qkv, tokens, NH, KVH, hs, eot, slopes, window=0, scale=0.0, softcap=0.0,
                    sinks=None):
    """out (B,T,NH hs), lse (B,NH,T) of causal attention over the whole rows, float64; with eot,
    within documents that end with (and include) an eot token; ALiBi with slopes; a sliding
    window (i - window < j), the scores' scale (0: 1 / sqrt(hs)) and soft cap, sinks (NH: a
    logit per head in each row's denominator, lse including it)."""
    B, T, _ = qkv.shape
    q = qkv[:, :, :NH * hs].reshape(B, T, NH, hs).transpose(1, 2)
    k = qkv[:, :, NH * hs:(NH + KVH) * hs].reshape(B, T, KVH, hs).transpose(1, 2)
    v = qkv[:, :, (NH + KVH) * hs:].reshape(B, T, KVH, hs).transpose(1, 2)
    k, v = k.repeat_interleave(NH // KVH, 1), v.repeat_interleave(NH // KVH, 1)
    s = q @ k.transpose(-1, -2) * (scale or 1 / math.sqrt(hs))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(T)
    dist = (i[:, None] - i[None, :]).double()
    if slopes is not None:
        s = s - torch.tensor(slopes, dtype=torch.float64)[None, :, None, None] * dist
    allowed = ((dist >= 0) & ((dist < window) if window else True))[None, None].expand(B, NH, T, T)
    if eot is not None:  # document ids: end-of-text tokens before each position
        doc = torch.cumsum(torch.nn.functional.pad((tokens == eot).long(), (1, 0))[:, :-1], 1)
        allowed = allowed & (doc[:, None, :, None] == doc[:, None, None, :])
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:  # one more column per row: the head's sink, no value
        s = torch.cat([s, sinks[None, :, None, None].expand(B, NH, T, 1)], -1)
    lse = torch.logsumexp(s, -1)
    out = (torch.softmax(s, -1)[..., :T] @ v).transpose(1, 2).reshape(B, T, NH * hs)
    return out, lse


def ring_case(tap, tmp, case):
    N, B, T, NH, KVH, hs, eot, alibi, var = case
    rng = np.random.default_rng(100 + N)
    QKV = (NH + 2 * KVH) * hs
    qkv = rng.standard_normal((B, T, QKV)).astype(np.float32)
    dout = rng.standard_normal((B, T, NH * hs)).astype(np.float32)
    tokens = rng.integers(0, 8, (B, T)).astype(np.int32)
    if eot is not None:  # documents of 5 .. 11 positions: across the chunks of T / 2N = 4
        for b in range(B):
            tokens[b, tokens[b] == eot] = 0
            for t in range(4 + b, T, 7 + b):
                tokens[b, t] = eot
    slopes = np.array([2.0 ** -(h + 1) for h in range(NH)], dtype=np.float32) if alibi else None
    sinks = rng.standard_normal(NH).astype(np.float32) if var.get("sinks") else None
    name = f"ring{N}{'v' if var else ''}"
    with h5py.File(f"{tmp}/{name}_in.h5", "w") as f:
        for k, v in dict(B=B, T=T, NH=NH, KVH=KVH, hs=hs, eot=-1 if eot is None else eot,
                         alibi=int(alibi)).items():
            f.attrs[k] = float(v)
        f["qkv"], f["dout"], f["tokens"] = qkv, dout, tokens
        if alibi:
            f["slopes"] = slopes
        for k in ("window", "scale", "softcap"):
            if var.get(k):
                f.attrs[k] = float(var[k])
        if sinks is not None:
            f["sinks"] = sinks
    mpirun = ["bash", os.path.join(ROOT, "tests", "mpi_env.sh"), "mpirun", "-np", str(N)]
    r = subprocess.run(mpirun + [RING_DUMP, f"{tmp}/{name}_in.h5", f"{tmp}/{name}_out.h5"],
                       capture_output=True, text=True, env=run_env())
    what = (f"ring attention on {N} ranks ({'document mask' if eot is not None else 'causal'}"
            f"{', ALiBi' if alibi else ''}, {NH} query heads on {KVH}"
            f"{''.join(f', {k} {v}' for k, v in var.items())})")
    if r.returncode != 0:
        tap.diag((r.stdout + r.stderr)[-2000:])
        return
    tap.diag(r.stdout.strip())
    with h5py.File(f"{tmp}/{name}_out.h5", "r") as f:
        got = {k: f[k][()] for k in ("out", "lse", "dqkv", "dsinks") if k in f}
    x = torch.tensor(qkv, dtype=torch.float64, requires_grad=True)
    sk = None if sinks is None else torch.tensor(sinks, dtype=torch.float64, requires_grad=True)
    out, lse = torch_attention(x, torch.tensor(tokens), NH, KVH, hs, eot, slopes,
                               var.get("window", 0), var.get("scale", 0.0),
                               var.get("softcap", 0.0), sk)
    out.backward(torch.tensor(dout, dtype=torch.float64))
    wants = [("out", out), ("lse", lse), ("dqkv", x.grad)] + ([("dsinks", sk.grad)] if var else [])
    if var:  # the window below the chunk: whole blocks skipped, not computed and masked
        m = re.search(r"(\d+) blocks skipped", r.stdout)
        tap.ok(m is not None and int(m.group(1)) > 0,
               f"{what}: blocks outside the band skipped ({m.group(1) if m else 'no count'})")
    for key, want in wants:
        e = rel_err(got[key], want.detach().numpy())
        tap.ok(e <= TOL_STEP0, f"{what}: {key} {tuple(got[key].shape)} rel err {e:.2e} against "
                               f"torch's unsplit float64 attention (<= {TOL_STEP0:g})")


def ring_checks(tap, tmp):
    for case in RING_CASES:
        end = tap.n + 3 + 2 * bool(case[8])
        try:
            ring_case(tap, tmp, case)
        except Exception:
            tap.diag(traceback.format_exc())
        tap.fail_until(end, f"ring attention on {case[0]} ranks stopped early")


def main():
    torch.set_default_dtype(torch.float64)
    datasets = {"plain": None, "doc": EOT}  # dataset name -> eot id inside its rows (or none)
    plan = TORCH_SELF_CHECKS + len(datasets) + sum(checks_per_config(c) for c in CONFIGS) + \
        RING_CHECKS
    tap = Tap(plan)
    torch_self_checks(tap)
    with tempfile.TemporaryDirectory(prefix="tsr-ref-") as tmp:
        ring_checks(tap, tmp)
        data = {}
        for dname, eot in datasets.items():
            data_dir, tokens, mask, r = make_dataset(tmp, dname, eot)
            inner = f", {int((tokens == eot).sum())} of them end-of-text" if eot is not None else ""
            if not tap.ok(r.returncode == 0, f"tessera shard --mask writes the {dname} dataset "
                                             f"({len(tokens)} tokens{inner}, vocab {VOCAB})"):
                tap.diag((r.stdout + r.stderr)[-2000:])
                continue
            data[dname] = (data_dir, tokens, mask)
        for cfg in CONFIGS:
            end = tap.n + checks_per_config(cfg)
            dname = cfg.get("data", "plain")
            try:
                if dname in data:
                    run_config(tap, cfg, tmp, *data[dname])
            except Exception:  # report, then account for the checks that did not run
                tap.diag(traceback.format_exc())
            tap.fail_until(end, f"{cfg['name']} stopped early" if dname in data else
                           f"{cfg['name']}: no {dname} dataset")
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
