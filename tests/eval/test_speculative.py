"""Speculative decoding end to end (eval/speculative.py, DecodeSession.verify / accept): with n-gram drafts the
greedy output is token for token the non-speculative greedy output, on tiny models of every architecture and on
the embedded models; random per-row acceptance patterns (drafts from the reference, corrupted at random) give
the reference logits at every kept position; bad calls fail with one line."""

import random

import pytest
import torch

from replayssm_quant.eval.adapters.tiny import TINY_ARCHS, tiny_model
from replayssm_quant.eval.decode import DecodeSession
from replayssm_quant.eval.speculative import greedy_accept

pytestmark = pytest.mark.filterwarnings("ignore")


def _every_token_prompt(D: int, P: int, seed: int) -> torch.Tensor:
    """``[D, P]`` prompts that hold every token of the tiny vocabulary (so the 1-gram of any generated token has
    a continuation in the prompt: every step drafts), each row a different permutation, tail repeated."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(D):
        perm = torch.randperm(264, generator=g)
        rows.append(torch.cat([perm, perm[:P - 264]]) if P > 264 else perm[:P])
    return torch.stack(rows)


def _greedy(model, variants, ids, n, mask=None, **kw):
    with DecodeSession(model, variants, backend="torch", **kw) as s:
        out = s.generate(ids, n, attention_mask=mask)
        return out, s.spec_stats


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_ngram_speculation_equals_greedy_on_tiny_models(arch):
    model = tiny_model(arch)
    ids = _every_token_prompt(2, 270, seed=1)
    ref, none = _greedy(model, ["fp32"], ids, 12)
    assert none is None
    got, stats = _greedy(model, ["fp32"], ids, 12, draft="ngram:4")
    assert got == ref
    assert all(len(r) == 12 for r in got)
    # every row-step but a row's last drafted (every token of the vocabulary is in the prompt)
    assert stats.drafted >= stats.steps - 2 and stats.steps >= 2 * 11 / 4
    assert stats.emitted == 2 * 11 and stats.accepted == stats.emitted - stats.steps
    assert stats.tokens_per_step == pytest.approx(stats.emitted / stats.steps)


@pytest.mark.parametrize("arch", ["qwen3_5", "nemotron_h", "kimi_linear"])
def test_random_acceptance_patterns_keep_the_reference_logits(arch):
    """Rows keep different numbers of tokens per verify (holes in the attention KV cache, conv states and SSM
    caches rolled back per row): every kept position's logits are the one-token-at-a-time logits."""
    model = tiny_model(arch)
    D, N, T = 3, 12, 5
    ids = torch.randint(0, 256, (D, 9), generator=torch.Generator().manual_seed(2))
    with DecodeSession(model, ["fp32"], backend="torch") as s:
        logits = [s.prefill(ids)]
        ref = [logits[0].argmax(-1)]
        for _ in range(N - 1):
            logits.append(s.step(ref[-1]))
            ref.append(logits[-1].argmax(-1))
    ref_logits = torch.stack(logits, 1)                         # [D, N, vocab]: L_i produced y_i
    ref = torch.stack(ref, 1).tolist()                          # [D, N]
    rng = random.Random(3)
    with DecodeSession(model, ["fp32"], backend="torch", draft=f"ngram:{T}") as s:
        s.prefill(ids)
        pos = [1] * D                                           # tokens emitted per row
        kept = set()
        while min(pos) < N:
            drafts = []
            for r in range(D):
                k = min(rng.randint(0, T - 1), N - pos[r] - 1) if pos[r] < N else 0
                d = list(ref[r][pos[r]:pos[r] + k])
                if d and rng.random() < 0.6:                    # a wrong draft somewhere
                    j = rng.randrange(len(d))
                    d[j] = (d[j] + 1 + rng.randrange(200)) % 256
                drafts.append(d)
            width = 1 + max(map(len, drafts))
            tokens = torch.tensor([[ref[r][pos[r] - 1]] + d + [0] * (width - 1 - len(d))
                                   for r, d in enumerate(drafts)])
            out = s.verify(tokens)
            acc = greedy_accept(drafts, out.argmax(-1).tolist())
            s.accept(torch.tensor([a + 1 for a in acc]))
            kept.add(tuple(acc))
            for r in range(D):
                if pos[r] >= N:
                    continue
                for j in range(acc[r] + 1):
                    assert pos[r] + j < N
                    torch.testing.assert_close(out[r, j], ref_logits[r, pos[r] + j], rtol=1e-4, atol=1e-4)
                pos[r] += acc[r] + 1
        assert len(kept) > 3                                    # the rows kept many different patterns


def _copy_prompts(n: int, target_len: int):
    from replayssm_quant.eval.synthetic_tasks import make_task

    enc = [list(make_task(random.Random(100 + i), "copy", target_len)["prompt"].encode()) for i in range(n)]
    P = max(map(len, enc))
    ids = torch.tensor([[256] * (P - len(e)) + e for e in enc])
    mask = torch.tensor([[0] * (P - len(e)) + [1] * len(e) for e in enc])
    return ids, mask


@pytest.mark.parametrize("name", ["gdn-demo", "mamba2-demo"])
def test_ngram_speculation_equals_greedy_on_the_embedded_models(name):
    from replayssm_quant.eval.adapters.loading import load_model

    model = load_model(name, dtype="float32").model
    ids, mask = _copy_prompts(2, 40)                            # left-padded rows of different lengths
    # fp32 and quantized specs (separate, shared, conventional) side by side; 18 tokens cross 3 windows of 6
    variants = ["fp32", "nvfp4/fp8+sr", "nvfp4+sr", "conventional:fp8+sr"]
    ref, _ = _greedy(model, variants, ids, 18, mask, window=6)
    got, stats = _greedy(model, variants, ids, 18, mask, window=6, draft="ngram:6")
    assert got == ref
    # the models copy the list from the prompt: most drafts are right, several tokens per model step
    assert stats.acceptance_rate > 0.6 and stats.tokens_per_step > 2.5, stats.as_dict()


@pytest.mark.parametrize("variants", [["fp32", "nvfp4/fp8+sr"], ["replay@4:nvfp4+sr", "conventional:fp8+sr"]])
def test_quantized_speculation_equals_its_own_greedy_run(variants):
    """A quantized spec under speculation equals its own non-speculative greedy run (the committed tokens go
    through the same roundings and Philox counters); rows of different variants accept differently."""
    model = tiny_model("qwen3_5")
    ids = _every_token_prompt(2, 270, seed=4)
    ref, _ = _greedy(model, variants, ids, 12, window=3)
    got, stats = _greedy(model, variants, ids, 12, window=3, draft="ngram:3")
    assert got == ref
    assert stats.drafted > 0


def test_bad_calls_fail_with_one_line():
    model = tiny_model("mamba2")
    ids = torch.randint(0, 256, (2, 6))
    with pytest.raises(ValueError, match="takes exec_mode='step'"):
        DecodeSession(model, ["fp32"], draft="ngram:4", exec_mode="chunked")
    with pytest.raises(ValueError, match=r"T \(tokens per verify step\).*T in 2\.\.16"):
        DecodeSession(model, ["fp32"], draft="ngram:99")
    with DecodeSession(model, ["fp32"], backend="torch") as s:
        s.prefill(ids)
        with pytest.raises(RuntimeError, match="needs a draft session"):
            s.verify(ids[:, :2])
    with DecodeSession(model, ["fp32", "fp8+sr"], backend="torch", draft="ngram:3") as s:
        with pytest.raises(RuntimeError, match="prefill"):
            s.verify(ids[:, :2])
        s.prefill(ids)
        with pytest.raises(RuntimeError, match="needs a verify"):
            s.accept(torch.ones(4, dtype=torch.int64))
        with pytest.raises(ValueError, match=r"verify of 4 tokens per row; .* allows 1\.\.3"):
            s.verify(ids[:, :4])
        s.verify(ids[:, :3])
        with pytest.raises(RuntimeError, match="not accepted yet"):
            s.verify(ids[:, :3])
        with pytest.raises(ValueError, match=r"accepted counts must be in 1\.\.3"):
            s.accept(torch.tensor([1, 4, 1, 1]))
        with pytest.raises(ValueError, match=r"accepted counts must be in 1\.\.3"):
            s.accept(torch.tensor([0, 1]))
        with pytest.raises(ValueError, match=r"an int tensor \[4\] or \[2\]"):
            s.accept(torch.ones(3, dtype=torch.int64))
        s.accept(torch.tensor([3, 1]))                          # [D]: the same count for every variant
        assert s.step(ids[:, 0]).shape == (4, 264)


def test_a_draft_longer_than_a_replay_window_is_refused():
    with pytest.raises(ValueError, match=r"ngram:8 verifies 8 tokens per step, more than the replay window L=4 "
                                         r"of replay@4:fp8\+sr: use T <= L"):
        DecodeSession(tiny_model("mamba2"), ["fp32", "replay@4:fp8+sr"], window=16, draft="ngram:8")


def test_triton_speculation_equals_triton_greedy():
    """The Triton kernels (interpreter on CPU): verify / commit kernels under speculation give the step kernels'
    greedy tokens, fp32 and a separate quantized spec side by side."""
    import os

    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("needs TRITON_INTERPRET=1 on a CPU")
    model = tiny_model("qwen3_5")
    ids = _every_token_prompt(1, 264, seed=5)
    with DecodeSession(model, ["fp32", "nvfp4/fp8+sr"], window=4, backend="triton", cuda_graphs=False) as s:
        ref = s.generate(ids, 6)
    with DecodeSession(model, ["fp32", "nvfp4/fp8+sr"], window=4, backend="triton", draft="ngram:3") as s:
        got = s.generate(ids, 6)
        assert s.spec_stats.drafted > 0
    assert got == ref


def test_budgets_of_zero_and_one_token():
    model = tiny_model("mamba2")
    ids = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(6))
    for n in (0, 1):
        ref, _ = _greedy(model, ["fp32"], ids, n)
        got, stats = _greedy(model, ["fp32"], ids, n, draft="ngram:4")
        assert got == ref and [len(r) for r in got] == [n, n]
        assert stats.emitted == 0 and stats.steps == 0
