"""torch_deltanet.py — the Gated DeltaNet core in float64 PyTorch, the reference of
kernels/cpu/cpu_deltanet.c (docs/deltanet.md), written from the paper (Yang, Kautz, Hatamizadeh,
"Gated Delta Networks: Improving Mamba2 with Delta Rule", ICLR 2025) and Hugging Face's Qwen3-Next
modelling code (torch_recurrent_gated_delta_rule, torch_chunk_gated_delta_rule).

Shapes as HF's: q, k (B, T, HK, dk); v (B, T, HV, dv); g, beta (B, T, HV); states (B, HV, dk, dv).
Value head h reads query/key head h // (HV // HK) (HF's repeat_interleave). q and k are L2
normalised here (eps 1e-6, HF's use_qk_l2norm_in_kernel) and q scaled by 1 / sqrt(dk).
Packed documents (seq, (B, T) ids, contiguous runs) are run one by one: the first document of a
row from state0, every later one from zero; the final state is the last document's.
"""
import torch

EPS = 1e-6


def l2norm(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + EPS)


def _heads(q, k, v, g, beta, dtype):
    """(B, HV, T, .) views in dtype, q and k normalised, grouped and q scaled"""
    rep = v.shape[2] // q.shape[2]
    q = l2norm(q.to(dtype)).repeat_interleave(rep, dim=2) / q.shape[-1] ** 0.5
    k = l2norm(k.to(dtype)).repeat_interleave(rep, dim=2)
    return [x.transpose(1, 2) for x in (q, k, v.to(dtype), g.to(dtype), beta.to(dtype))]


def recurrent(q, k, v, g, beta, state0=None, dtype=torch.float64):
    """the step-by-step form (one document a row): out (B, T, HV, dv), final state"""
    q, k, v, g, beta = _heads(q, k, v, g, beta, dtype)
    B, H, T, dk = k.shape
    S = torch.zeros(B, H, dk, v.shape[-1], dtype=dtype) if state0 is None else state0.to(dtype)
    outs = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        u = v[:, :, t] - (S * k[:, :, t, :, None]).sum(-2)
        S = S + k[:, :, t, :, None] * (beta[:, :, t, None] * u)[..., None, :]
        outs.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(outs, 2).transpose(1, 2), S


def chunked(q, k, v, g, beta, state0=None, chunk=64, dtype=torch.float64):
    """the chunked (WY/UT) form (one document a row): the same function as recurrent() (in
    float32 too: bench/torch_deltanet_peer.py's PyTorch peer)"""
    q, k, v, g, beta = _heads(q, k, v, g, beta, dtype)
    B, H, T, dk = k.shape
    S = torch.zeros(B, H, dk, v.shape[-1], dtype=dtype) if state0 is None else state0.to(dtype)
    outs = []
    for t0 in range(0, T, chunk):
        sl = slice(t0, min(T, t0 + chunk))
        qc, kc, vc, bc, gam = q[:, :, sl], k[:, :, sl], v[:, :, sl], beta[:, :, sl], g[:, :, sl].cumsum(-1)
        n = kc.shape[2]
        decay = (gam[..., :, None] - gam[..., None, :]).tril().exp().tril()  # e^(gam_i - gam_j), j <= i
        A = ((bc[..., None] * kc) @ kc.transpose(-1, -2) * decay).tril(-1)
        eye = torch.eye(n, dtype=dtype)
        rhs = torch.cat([bc[..., None] * vc, bc[..., None] * kc * gam.exp()[..., None]], -1)
        X = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
        vnew = X[..., : vc.shape[-1]] - X[..., vc.shape[-1]:] @ S
        outs.append((qc * gam.exp()[..., None]) @ S + ((qc @ kc.transpose(-1, -2)) * decay) @ vnew)
        last = gam[..., -1:]
        S = S * last.exp()[..., None] + (kc * (last - gam).exp()[..., None]).transpose(-1, -2) @ vnew
    return torch.cat(outs, 2).transpose(1, 2), S


def documents(seq_row):
    """[(start, end)] of the contiguous runs of equal ids of one row"""
    runs, start = [], 0
    for t in range(1, len(seq_row) + 1):
        if t == len(seq_row) or seq_row[t] != seq_row[t - 1]:
            runs.append((start, t))
            start = t
    return runs


def packed(form, q, k, v, g, beta, state0=None, seq=None, **kw):
    """form (recurrent or chunked) over packed documents, run one by one: out, final state"""
    if seq is None:
        return form(q, k, v, g, beta, state0, **kw)
    outs, finals = [], []
    for b in range(q.shape[0]):
        row, S = [], None
        for i, (t0, t1) in enumerate(documents(seq[b].tolist())):
            S0 = None if state0 is None or i > 0 else state0[b: b + 1]
            o, S = form(*(x[b: b + 1, t0:t1] for x in (q, k, v, g, beta)), S0, **kw)
            row.append(o)
        outs.append(torch.cat(row, 1))
        finals.append(S)
    return torch.cat(outs, 0), torch.cat(finals, 0)


PARAMS = ("wqkv", "wz", "wb", "wa", "conv", "dt_bias", "a_log", "normw", "wo")


def layer(x, P, HK, HV, dk, dv, eps=1e-6, form=chunked, **kw):
    """HF's Qwen3NextGatedDeltaNet (one document a row) with tessera's separate projections:
    x (B, T, C) -> out (B, T, C), final state. P: PARAMS, as deltanet_layer.h lays them out."""
    B, T, _ = x.shape
    K, kd = P["conv"].shape[1], HK * dk
    pre = x @ P["wqkv"].T
    conv = torch.nn.functional.conv1d(pre.transpose(1, 2), P["conv"][:, None, :], padding=K - 1,
                                      groups=pre.shape[-1])
    y = torch.nn.functional.silu(conv[..., :T]).transpose(1, 2)
    q, k, v = y[..., :kd], y[..., kd: 2 * kd], y[..., 2 * kd:]
    beta = torch.sigmoid(x @ P["wb"].T)
    g = -P["a_log"].exp() * torch.nn.functional.softplus(x @ P["wa"].T + P["dt_bias"])
    o, S = form(q.reshape(B, T, HK, dk), k.reshape(B, T, HK, dk), v.reshape(B, T, HV, dv), g, beta,
                None, **kw)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps) * P["normw"]
    o = o * torch.nn.functional.silu((x @ P["wz"].T).reshape(B, T, HV, dv))
    return o.reshape(B, T, HV * dv) @ P["wo"].T, S


def layer_packed(x, P, seq=None, **kw):
    """layer() over packed documents, run one by one (the convolution and the state restart)"""
    if seq is None:
        return layer(x, P, **kw)
    outs, finals = [], []
    for b in range(x.shape[0]):
        runs = [layer(x[b: b + 1, t0:t1], P, **kw) for t0, t1 in documents(seq[b].tolist())]
        outs.append(torch.cat([o for o, _ in runs], 1))
        finals.append(runs[-1][1])
    return torch.cat(outs, 0), torch.cat(finals, 0)
