"""Chunked teacher forcing through whole models (DecodeSession(exec_mode="chunked").feed) against the step path.

Tiny models of every supported architecture, every spec kind (shared and separate, RNE and SR, an own
window). Both paths run the same model on the same tokens; the model's other layers see T tokens per
forward on one path and one on the other, and the fp32 SSM outputs differ by reassociation, so the
layers' inputs differ at the fp32 ulp level:

* RNE specs: per-position KL within 1e-6 absolute of the step path (plus 1e-3 relative: the tiny models'
  logits are scaled x30 and their KLs reach 0.1 nats, where ulp-level logit differences alone move KL by
  ~1e-5 already in the first window, before any rounding could differ);
* SR specs: the stored checkpoints after every window are the step path's except where a value near a
  rounding threshold moved across it (counted: a handful at most).

fp32 weights isolate the SSM path. With bf16 weights the model's own layers round differently for a
T-token and a 1-token forward (tiny qwen3_5: the fp32 reference's logits differ by 0.5% between the
paths, per-position KLs by up to 1e-3 nats, mean KLs by a few percent), so per-position agreement is
only meaningful with fp32 weights.
"""

import pytest
import torch

from replayssm_quant.eval.adapters.tiny import TINY_ARCHS, tiny_model
from replayssm_quant.eval.decode import DecodeSession
from replayssm_quant.eval.kl_stats import position_metrics

P, N, DOCS, WINDOW = 8, 17, 2, 8              # two windows of 8, then a one-token feed (the step branch)
VARIANTS = ["fp32", "bf16", "nvfp4/fp16", "nvfp4+sr", "replay@4:nvfp4/fp8+sr"]
RNE = ("bf16", "nvfp4/fp16")


def _codes(s):
    """Per (layer, variant): copies of the stored codes of both checkpoints (one for a shared spec): the element
    codes and nvfp4's E4M3 block scales. fp32 scales are values, not rounding decisions: nvfp4's per-head s_enc
    (not stored here) and the row-scaled fp8/int8 decode scale d = amax / M of every state row, which moves by an
    ulp whenever the row's amax does; those are compared as values (:func:`_row_scales`)."""
    out = {}
    for idx, _, _ in s.layers:
        for i, c in enumerate(s.caches(idx)):
            parts = [c.hp] if c.spec.shared else [c.hp, c.lp]
            out[idx, i] = [t.clone() for p in parts for t in (p.data, p.scales)
                           if t is not None and t.dtype != torch.float32]
    return out


def _row_scales(s):
    """Per (layer, variant): the fp32 row scales of the row-scaled checkpoints (empty for other formats)."""
    out = {}
    for idx, _, _ in s.layers:
        for i, c in enumerate(s.caches(idx)):
            parts = [c.hp] if c.spec.shared else [c.hp, c.lp]
            out[idx, i] = [p.scales.clone() for p in parts if p.scales is not None and p.scales.dtype == torch.float32]
    return out


def _kls(model, ids):
    """Per-position KL [variants, DOCS, N] of the step and the chunked path, and both runs' codes."""
    (ls, cs), (lc, cc) = _run(model, ids, "step"), _run(model, ids, "chunked")
    n, tgt = len(VARIANTS), ids[:, P + 1:P + N + 1]
    return (position_metrics(ls.view(n, DOCS, N, -1), tgt)["kl"], position_metrics(lc.view(n, DOCS, N, -1), tgt)["kl"],
            (ls, lc), (cs, cc))


def _run(model, ids, exec_mode):
    with DecodeSession(model, VARIANTS, window=WINDOW, seed=3, backend="torch", exec_mode=exec_mode) as s:
        s.prefill(ids[:, :P])
        C = s.chunk_tokens()
        assert C == WINDOW
        logits, codes = [], []
        for c0 in range(0, N, C):
            logits.append(s.feed(ids[:, P + c0:P + min(c0 + C, N)]))
            codes.append((_codes(s), _row_scales(s)))
        return torch.cat(logits, 1), codes


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_chunked_session_equals_step(arch):
    model = tiny_model(arch, seed=1)
    ids = torch.randint(0, 256, (DOCS, P + N + 1), generator=torch.Generator().manual_seed(2))
    ks, kc, (ls, lc), (cs, cc) = _kls(model, ids)
    assert lc.shape == ls.shape == (len(VARIANTS) * DOCS, N, ls.shape[-1])
    ref_err = ((lc[:DOCS] - ls[:DOCS]).abs().max() / ls[:DOCS].abs().max()).item()
    assert ref_err <= 1e-5, f"{arch}: fp32 reference logits differ by {ref_err:.3g} (relative)"
    report = []
    # row scales: the same values up to fp32 reassociation of the state, except rows whose state differs by a
    # flipped code of an earlier flush (counted like the codes: a handful at most). Reassociation is not one ulp
    # here: a later layer's inputs carry the earlier layers' differences, and tiny mamba2's second layer moves row
    # scales by up to 2.4e-5 relative (tens of rows over 1e-6; measured with OpenBLAS's Haswell and Sandybridge
    # cores), while a flipped code moves its row's scale only if it is the row's amax, by 1/16 to 1/8 for fp8
    for (_, r1), (_, r2) in zip(cs, cc):
        for key in r1:
            for a, b in zip(r1[key], r2[key]):
                rel = ((a - b).abs() / b.abs().clamp_min(1e-30)).flatten()
                moved = int((rel > 1e-4).sum())
                assert moved <= max(2, rel.numel() // 100), (
                    f"{arch} {key}: {moved} of {rel.numel()} row scales differ beyond 1e-4 (max {rel.max().item():.2e})")
    cs, cc = [c for c, _ in cs], [c for c, _ in cc]
    for i, v in enumerate(VARIANTS[1:], 1):
        dkl = (kc[i] - ks[i]).abs()
        flips = [sum(int((a != b).sum()) for key in c1 if key[1] == i for a, b in zip(c1[key], c2[key]))
                 for c1, c2 in zip(cs, cc)]
        total = sum(t.numel() for key, c in cs[0].items() if key[1] == i for t in c)
        report.append(f"{v}: max|dKL| {dkl.max().item():.2e} (KL mean {ks[i].mean().item():.2e}), "
                      f"differing codes per chunk {flips} of {total}")
        assert ks[i].max() > 0, f"{arch} {v}: zero KL, the comparison would be empty"
        if v in RNE:
            bad = dkl > 1e-6 + 1e-3 * ks[i]
            assert not bad.any(), f"{arch} {v}: KL differs from the step path by {dkl.max().item():.3g}; " + "; ".join(report)
        assert max(flips) <= max(8, total // 100), f"{arch} {v}: " + "; ".join(report)
    print(arch, "; ".join(report))


def test_chunked_session_refuses_conventional_and_misaligned_feeds():
    model = tiny_model("mamba2", seed=1)
    with pytest.raises(ValueError, match="replay variants only"):
        DecodeSession(model, ["fp32", "conventional:fp16"], exec_mode="chunked")
    with pytest.raises(ValueError, match="valid: step, chunked"):
        DecodeSession(model, ["fp32"], exec_mode="fast")
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(0))
    with DecodeSession(model, ["fp32", "replay@4:bf16"], window=4, backend="torch", exec_mode="chunked") as s:
        s.prefill(ids[:, :4])
        s.feed(ids[:, 4:6])
        with pytest.raises(ValueError, match="window boundary"):
            s.feed(ids[:, 6:10])
