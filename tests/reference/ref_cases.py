"""ref_cases.py — the frame of the reference tests of one attention mixer in every model
(test_hybrid.py, test_mla.py): the two datasets, each case run through ref_dump, and torch's own
check that a packed row under the document mask equals its documents run alone. The case's checks
are the test's own; this is test_reference.py's machinery (R) put together once."""
import collections
import os
import tempfile

import test_reference as R  # skips, exit 77, without torch, h5py or the binaries
import torch
from tap import Tap

# A mixer's test: cls(tc, eot=None) its torch model (float64 with .double(); the document mask
# over end-of-text eot; load_tessera(params) loads a dump's tensors); torch_cfg(case) its config;
# param_names(tc) the dump's tensors; doc_checks(tap, name, d, tc, eot, logits) the checks a
# document-mask case makes after step 0.
Mixer = collections.namedtuple("Mixer", "cls torch_cfg param_names doc_checks")

PACKED_EOT = 7
PACKED_ROW = [3, 9, PACKED_EOT, 12, 4, 4, 30, 2, 6, PACKED_EOT, 5, 1, 2, 8]
PACKED_DOCS = ((0, 3), (3, 10), (10, 14))


def model_of(cls, tc, eot=None, params=None):
    """the float64 torch model cls of config tc, with the dump's tensors params when given"""
    m = cls(tc, eot).double()
    if params is not None:
        m.load_tessera(params)
    return m


def check_packed_torch(tap, cls, tc, what):
    """torch alone: a packed row's logits under the document mask equal its documents' alone
    (models cls of config tc, named what in the check). 1 check."""
    packed, alone = model_of(cls, tc, PACKED_EOT), model_of(cls, tc)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in packed.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.3)
        alone.load_state_dict(packed.state_dict())
        row = torch.tensor([PACKED_ROW])
        got, _ = packed(row)
        errs = [R.rel_err(got[:, s:e].numpy(), alone(row[:, s:e])[0].numpy())
                for s, e in PACKED_DOCS]
        whole = R.rel_err(alone(row)[0][:, 3:].numpy(), got[:, 3:].numpy())
    tap.ok(max(errs) <= 1e-12 and whole > 1e-3,
           f"torch: {what}'s row of 3 packed documents gives each document's logits alone: "
           f"max rel err {max(errs):.1e} <= 1e-12 (without the mask: {whole:.1e})")


def run_ref_dump(case, tmp, data_dir, stem=None, extra=""):
    """ref_dump on the case's config over data_dir with the text extra appended, in the files
    tmp/stem.cfg and tmp/stem.h5 (stem: the case's name): (the dump's path, ref_dump's completed
    process, whether it exited 0 and wrote the dump)"""
    stem = stem or case["name"]
    cfg_path, out = os.path.join(tmp, stem + ".cfg"), os.path.join(tmp, stem + ".h5")
    R.write_config(cfg_path, case, tmp, data_dir)
    if extra:
        with open(cfg_path, "a") as f:
            f.write(extra)
    r = R.subprocess.run([*R.WRAP, R.REF_DUMP, cfg_path, out], capture_output=True, text=True,
                         env=R.run_env())
    return out, r, r.returncode == 0 and os.path.exists(out)


def dump_ok(tap, name, r, ok):
    """1 check, named after name (None: no name): run_ref_dump's ok; the tail of ref_dump's
    output when it failed. Returns ok."""
    if not tap.ok(ok, f"{name + ': ' if name else ''}ref_dump exits 0 (rc {r.returncode})"):
        tap.diag((r.stdout + r.stderr)[-3000:])
    return ok


def ref_dump(tap, case, tmp, data_dir, names):
    """ref_dump on the case's config over data_dir: the dump read (None when it failed), which
    holds exactly the tensors names. 2 checks (the second only when the dump was written)."""
    name = case["name"]
    out, r, ok = run_ref_dump(case, tmp, data_dir)
    if not dump_ok(tap, name, r, ok):
        return None
    d = R.read_dump(out)
    tap.ok(sorted(d["params"]) == sorted(names),
           f"{name}: the dump holds exactly the tensors {names}")
    return d


def run_case(tap, mixer, case, tmp, data_dir):
    """ref_dump on the case, then test_reference.py's checks against the mixer's torch model: step
    0, the document case's own checks, the 10 steps' schedule and norms, the final tensors"""
    name, tc = case["name"], mixer.torch_cfg(case)
    names = mixer.param_names(tc)
    d = ref_dump(tap, case, tmp, data_dir, names)
    if d is None:
        return
    eot = R.EOT if "data" in case else None
    shapes = {n: tuple(d["params"][n].shape) for n in names}
    logits, _ = R.check_step0(tap, name, d, tc, names, shapes, model_of(mixer.cls, tc, eot))
    if eot is not None:
        mixer.doc_checks(tap, name, d, tc, eot, logits)
    model = model_of(mixer.cls, tc, eot, d["params"])
    hist = R.torch_train(model, d)
    R.check_schedule_and_norms(tap, name, d, hist)
    R.check_final(tap, name, d, tc, names, model)


def run_cases(tap, prefix, mixer, cases, checks):
    """The plain and the document ("doc", end-of-text R.EOT) datasets (1 check each), then
    run_case for each case on its case["data"] (default plain), which makes checks(case) checks; a
    case whose dataset failed fails them all."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        data = {}
        for dname, eot in (("plain", None), ("doc", R.EOT)):
            data_dir, _, _, r = R.make_dataset(tmp, dname, eot)
            if tap.ok(r.returncode == 0, f"tessera shard --mask writes the {dname} dataset"):
                data[dname] = data_dir
        for case in cases:
            dname = case.get("data", "plain")
            tap.section(checks(case), f"{case['name']} stopped early", run_case,
                        tap, mixer, case, tmp, data.get(dname), when=dname in data)


def main(prefix, mixer, what, cases, checks, torch_checks=()):
    """The whole test in float64: torch_checks (each check(tap) makes 1 check), torch's packed row
    on cases[0]'s model (named what), the datasets, then the cases (temporary files under a
    directory named prefix...). The exit status."""
    torch.set_default_dtype(torch.float64)
    tap = Tap(len(torch_checks) + 1 + 2 + sum(checks(c) for c in cases))
    for check in torch_checks:
        check(tap)
    check_packed_torch(tap, mixer.cls, mixer.torch_cfg(cases[0]), what)
    run_cases(tap, prefix, mixer, cases, checks)
    return tap.status()
