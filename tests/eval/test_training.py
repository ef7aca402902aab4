"""The training path of the embedded models: fast GDN/SSD vs the stock transformers code,
tokenizer, data split, batches, and a tiny end-to-end train -> save -> reload -> report run."""

import json
import re
import math
import os

import numpy as np
import pytest
import torch

from replayssm_quant.eval import gutenberg
from replayssm_quant.eval.models import fast_gdn, fast_ssd
from replayssm_quant.eval.models.tokenizer import BOS_ID, EOS_ID, PAD_ID, build_byte_tokenizer
from replayssm_quant.eval.models.training_paths import fast_training_paths
from transformers.models.nemotron_h import modeling_nemotron_h as mn
from transformers.models.qwen3_5 import modeling_qwen3_5 as mq


# --------------------------------------------------------------------------- float64 references

def gdn_reference(q, k, v, g, beta, s0):
    """Token-by-token gated delta rule in float64 (DESIGN.md sec. 2, HF state layout [K, V])."""
    q, k = (x / x.norm(dim=-1, keepdim=True) for x in (q.double(), k.double()))
    q = q * q.shape[-1] ** -0.5
    v, g, beta = v.double(), g.double(), beta.double()
    S = s0.double().clone()
    out = torch.empty(*v.shape, dtype=torch.float64)
    for t in range(q.shape[1]):
        S = S * g[:, t].exp()[..., None, None]
        kt = k[:, t]
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, kt))
        S = S + kt[..., None] * u[..., None, :]
        out[:, t] = torch.einsum("bhkv,bhk->bhv", S, q[:, t])
    return out, S


def ssd_reference(x, dt, A, B, C, D, dt_bias, s0, dt_min):
    """Token-by-token Mamba-2 recurrence in float64: state [b, h, p, n]."""
    x, dt, A, B, C, D = (t.double() for t in (x, dt, A, B, C, D))
    h, g = x.shape[2], B.shape[2]
    B, C = B.repeat_interleave(h // g, 2), C.repeat_interleave(h // g, 2)
    dt = torch.nn.functional.softplus(dt + dt_bias.double()).clamp(min=dt_min)
    S = s0.double().clone()
    y = torch.empty_like(x)
    for t in range(x.shape[1]):
        S = S * (dt[:, t] * A).exp()[..., None, None] + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        y[:, t] = torch.einsum("bhpn,bhn->bhp", S, C[:, t]) + D[:, None] * x[:, t]
    return y, S


@pytest.mark.parametrize("T, chunk", [(1, 16), (37, 16), (100, 32), (64, 64)])
def test_fast_gdn_matches_float64_reference(T, chunk):
    gen = torch.Generator().manual_seed(T)
    B, H, K, V = 2, 3, 16, 24
    r = lambda *s: torch.randn(*s, generator=gen)
    q, k, v = r(B, T, H, K), r(B, T, H, K), r(B, T, H, V)
    g = -torch.rand(B, T, H, generator=gen) * 0.7
    beta = torch.rand(B, T, H, generator=gen)
    s0 = r(B, H, K, V)
    ref_o, ref_s = gdn_reference(q, k, v, g, beta, s0)
    for init in (None, s0):
        o, s = fast_gdn.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk, initial_state=init,
                                               output_final_state=True, use_qk_l2norm_in_kernel=True)
        if init is None:
            ref_o0, ref_s0 = gdn_reference(q, k, v, g, beta, torch.zeros_like(s0))
            torch.testing.assert_close(o.double(), ref_o0, atol=2e-5, rtol=1e-4)
            torch.testing.assert_close(s.double(), ref_s0, atol=2e-5, rtol=1e-4)
        else:
            torch.testing.assert_close(o.double(), ref_o, atol=2e-5, rtol=1e-4)
            torch.testing.assert_close(s.double(), ref_s, atol=2e-5, rtol=1e-4)


def test_fast_paths_stable_under_strong_decay():
    """Per-token log decays near -12 (decay spans e^-700 inside a chunk): no NaN, still exact."""
    gen = torch.Generator().manual_seed(11)
    B, T, H, K, V = 1, 128, 2, 16, 16
    q, k, v = (torch.randn(B, T, H, d, generator=gen) for d in (K, K, V))
    g = -12 * torch.rand(B, T, H, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    o, s = fast_gdn.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, output_final_state=True,
                                           use_qk_l2norm_in_kernel=True)
    ro, rs = gdn_reference(q, k, v, g, beta, torch.zeros(B, H, K, V))
    assert torch.isfinite(o).all() and torch.isfinite(s).all()
    torch.testing.assert_close(o.double(), ro, atol=2e-5, rtol=1e-4)
    x, dt, Bm, Cm = (torch.randn(B, T, *sh, generator=gen) for sh in ((4, 8), (4,), (2, 8), (2, 8)))
    A = -torch.full((4,), 30.0)
    y = fast_ssd.mamba2_chunk_scan(x, dt + 3, A, Bm, Cm, chunk_size=64, dt_softplus=True)
    ry, _ = ssd_reference(x, dt + 3, A, Bm, Cm, torch.zeros(4), torch.zeros(4), torch.zeros(B, 4, 8, 8), 0.0)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), ry, atol=1e-4, rtol=1e-4)


def test_fast_gdn_matches_transformers_and_gradients():
    """Against the model's own torch_chunk_gated_delta_rule: outputs and input gradients."""
    gen = torch.Generator().manual_seed(1)
    B, T, H, K, V = 1, 90, 2, 16, 16
    leaves = [torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen),
              torch.randn(B, T, H, V, generator=gen), -torch.rand(B, T, H, generator=gen),
              torch.rand(B, T, H, generator=gen)]
    w = torch.randn(B, T, H, V, generator=gen)
    outs, grads = [], []
    for fn in (mq.torch_chunk_gated_delta_rule, fast_gdn.chunk_gated_delta_rule):
        xs = [x.clone().requires_grad_() for x in leaves]
        o, _ = fn(*xs, chunk_size=32, use_qk_l2norm_in_kernel=True)
        (o * w).sum().backward()
        outs.append(o.detach())
        grads.append([x.grad for x in xs])
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-4)
    for a, b in zip(grads[0], grads[1]):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-3)


def test_fast_gdn_rejects_packed_sequences():
    x = torch.zeros(1, 4, 1, 8)
    with pytest.raises(ValueError, match="cu_seqlens"):
        fast_gdn.chunk_gated_delta_rule(x, x, x, x[..., 0], x[..., 0], cu_seqlens=torch.tensor([0, 4]))


@pytest.mark.parametrize("T, chunk", [(1, 16), (45, 16), (128, 32)])
def test_fast_ssd_matches_float64_reference_and_transformers(T, chunk):
    gen = torch.Generator().manual_seed(T + 5)
    b, h, p, g, n = 2, 4, 8, 2, 6
    r = lambda *s: torch.randn(*s, generator=gen)
    x, dt, B, C = r(b, T, h, p), r(b, T, h), r(b, T, g, n), r(b, T, g, n)
    A, D, dtb, s0 = -torch.rand(h, generator=gen) * 2, r(h), r(h), r(b, h, p, n)
    lim = (1e-3, float("inf"))
    ref_y, ref_s = ssd_reference(x, dt, A, B, C, D, dtb, s0, lim[0])
    kw = dict(chunk_size=chunk, D=D, dt_bias=dtb, initial_states=s0, dt_softplus=True, dt_limit=lim,
              return_final_states=True)
    y, s = fast_ssd.mamba2_chunk_scan(x, dt, A, B, C, **kw)
    torch.testing.assert_close(y.double(), ref_y, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(s.double(), ref_s, atol=1e-4, rtol=1e-4)
    y2, s2 = mn.mamba2_chunk_scan(x, dt, A, B, C, **kw)
    torch.testing.assert_close(y, y2, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(s, s2, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["gdn", "mamba2", "gdn-long", "mamba2-long"])
def test_fast_paths_give_the_stock_model_loss_and_gradients(arch):
    from transformers.models.mamba2 import modeling_mamba2 as mm

    from replayssm_quant.eval.models.configs import build_model

    model = build_model(arch, "tiny", seed=3)
    x = torch.randint(0, 256, (2, 75), generator=torch.Generator().manual_seed(0))
    origs = (mq.torch_chunk_gated_delta_rule, mn.mamba2_chunk_scan, mm.mamba2_chunk_scan)
    calls = []
    res = []
    for fast in (False, True):
        model.zero_grad()
        with fast_training_paths(fast):
            if fast:
                assert mq.torch_chunk_gated_delta_rule is fast_gdn.chunk_gated_delta_rule
                assert mn.mamba2_chunk_scan is fast_ssd.mamba2_chunk_scan
                assert mm.mamba2_chunk_scan is fast_ssd.mamba2_chunk_scan
                mods = (mq, "torch_chunk_gated_delta_rule"), (mn, "mamba2_chunk_scan"), (mm, "mamba2_chunk_scan")
                for mod, name in mods:   # count the fast calls: the model really takes the fast path
                    fn = getattr(mod, name)
                    setattr(mod, name, lambda *a, _fn=fn, **k: calls.append(1) or _fn(*a, **k))
            loss = model(input_ids=x, labels=x).loss
            loss.backward()
        res.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    assert (mq.torch_chunk_gated_delta_rule, mn.mamba2_chunk_scan, mm.mamba2_chunk_scan) == origs  # restored
    from replayssm_quant.eval.models.configs import ssm_mixers
    assert len(calls) == len(ssm_mixers(model)) > 0
    assert res[0][0] == pytest.approx(res[1][0], abs=1e-5)
    for a, b in zip(res[0][1], res[1][1]):
        torch.testing.assert_close(b, a, atol=1e-5 + 1e-3 * a.abs().max().item(), rtol=1e-3)


# --------------------------------------------------------------------------- tokenizer, data

def test_byte_tokenizer_round_trip_offline(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    build_byte_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (PAD_ID, BOS_ID, EOS_ID)
    text = "Ünïcødé ✓ 中文 \x00\t\r\n~ emoji 🙂 end"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert tok.decode(ids) == text
    all_bytes = bytes(range(256)).decode("latin-1")
    assert tok(all_bytes, add_special_tokens=False)["input_ids"] == list(all_bytes.encode("utf-8"))
    assert tok.decode([104, 105, EOS_ID], skip_special_tokens=True) == "hi"


@pytest.mark.books
def test_gutenberg_split(monkeypatch, tmp_path):
    held, train = gutenberg.heldout_books(), gutenberg.train_books()
    assert [p.name for p in held] == sorted(gutenberg.HELDOUT_BOOKS)
    assert not {p.name for p in held} & {p.name for p in train}
    assert {p.name for p in held} | {p.name for p in train} == {p.name for p in gutenberg.all_books()}
    assert b"\r\n" not in gutenberg.read_book(next(p for p in train if "moby" in p.name))
    monkeypatch.setenv(gutenberg.ENV_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        gutenberg.train_books()
    (tmp_path / "a.txt").write_bytes(b"x" * 100)
    with pytest.raises(FileNotFoundError, match="held-out book"):
        gutenberg.heldout_books()
    assert [p.name for p in gutenberg.train_books()] == ["a.txt"]


def test_batches_mask_prompts_and_mix_books():
    from replayssm_quant.eval.training.data import BatchSampler

    books = [bytes(np.random.default_rng(0).integers(32, 127, 5000, dtype=np.uint8))]
    s = BatchSampler(books, batch_size=8, seq_len=512, task_fraction=0.25, seed=1)
    ids, labels, positions, is_task = s.next_batch()
    assert ids.shape == labels.shape == positions.shape == (8, 512) and is_task.tolist() == [True] * 2 + [False] * 6
    assert torch.equal(ids[~is_task], labels[~is_task])
    assert torch.equal(positions[~is_task], torch.arange(512).expand(6, 512))
    stream = books[0]
    for row in ids[~is_task]:
        assert bytes(row.tolist()) in stream
    for row_ids, row_lab, row_pos in zip(ids[is_task], labels[is_task], positions[is_task]):
        trained = row_lab != -100
        assert torch.equal(row_lab[trained], row_ids[trained])
        text = row_ids.tolist()
        # every example is "[bos] prompt target \n eos"; exactly the target, newline and eos are trained
        ends = [i for i, t in enumerate(text) if t == EOS_ID]
        assert ends, "no complete example in a task row"
        start = 0
        for e in ends:
            ex = text[start:e + 1]
            lab = row_lab[start:e + 1].tolist()
            assert row_pos[start:e + 1].tolist() == list(range(len(ex)))   # each example starts at position 0
            body = bytes(t for t in ex if t < 256).decode()
            prompt, target = body.split("\n")[0] + "\n", body.split("\n")[1]
            n_prompt = len(prompt) + (1 if ex[0] == BOS_ID else 0)
            assert all(x == -100 for x in lab[:n_prompt])
            assert lab[n_prompt:] == ex[n_prompt:]
            task, source = prompt[:-1].split(" ", 1)
            assert target == (source if task == "copy" else source.upper())
            start = e + 1
        assert all(t == PAD_ID for t in text[start:]) and all(x == -100 for x in row_lab[start:].tolist())
        assert row_pos[start:].tolist() == list(range(512 - start))
    again = BatchSampler(books, batch_size=8, seq_len=512, task_fraction=0.25, seed=1).next_batch()
    assert torch.equal(again[0], ids)


def test_recall_batches_train_only_the_values():
    from replayssm_quant.eval.training.data import RECALL_ROW_SLACK, BatchSampler

    books = [bytes(np.random.default_rng(0).integers(32, 127, 9000, dtype=np.uint8))]
    s = BatchSampler(books, batch_size=4, seq_len=1024, task_fraction=0.5, seed=3, task_family="recall")
    assert s.full_task_len == 1024 - RECALL_ROW_SLACK
    ids, labels, positions, is_task = s.next_batch()
    assert is_task.tolist() == [True, True, False, False]
    n_examples = 0
    for row_ids, row_lab, row_pos in zip(ids[is_task], labels[is_task], positions[is_task]):
        text = row_ids.tolist()
        ends = [i for i, t in enumerate(text) if t == EOS_ID]
        start = 0
        for e in ends:
            ex, lab = text[start:e + 1], row_lab[start:e + 1].tolist()
            assert row_pos[start:e + 1].tolist() == list(range(len(ex)))
            body = bytes(t for t in ex if t < 256).decode()
            head, rest = body.split("\n", 1)
            pairs = dict(x.split("=") for x in head[len("recall "):].split(" "))
            trained = bytes(t for t, l in zip(ex, lab) if l != -100 and t < 256).decode()
            asked = re.findall(r"\?([a-z]{2})=(\d{4})\n", rest)
            assert sorted(k for k, _ in asked) == sorted(pairs)                 # every key asked once
            assert all(pairs[k] == v for k, v in asked)
            assert trained == "".join(v + "\n" for _, v in asked)              # only values and newlines
            assert lab[-1] == EOS_ID and all(l == -100 or l == t for t, l in zip(ex, lab))
            n_examples += 1
            start = e + 1
    assert n_examples >= 2
    with pytest.raises(ValueError, match="task family"):
        BatchSampler(books, 4, 1024, task_family="count")
    with pytest.raises(ValueError, match="does not fit"):
        BatchSampler(books, 4, 1024, task_family="recall", max_task_len=1000)


def test_training_curves_legends_stay_outside_the_data(tmp_path):
    import pandas as pd

    from replayssm_quant.eval.model_report import plot_training_curves

    n = 30
    log = pd.DataFrame({"step": range(n), "tokens": np.arange(n) * 1e5, "book_bpb": np.linspace(4, 1.8, n),
                        "val_bpb": np.linspace(4, 1.9, n), "heldout_bpb": np.linspace(4, 1.9, n),
                        "task_loss_nats": np.geomspace(3, 1e-3, n), "task_tok_acc": np.linspace(0, 1, n),
                        "task_exact_tf": np.linspace(0, 1, n)})
    fig = plot_training_curves({"gdn-long": log, "mamba2-long": log}, tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 1000
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 2
    for leg in legends:
        lb = leg.get_window_extent(renderer)
        for ax in fig.axes:
            assert not lb.overlaps(ax.get_window_extent(renderer)), "a legend covers a plot area"
    labels = [t.get_text() for leg in legends for t in leg.get_texts()]
    assert any("exact" in x for x in labels) and any("held-out" in x for x in labels)


def test_report_writes_to_the_current_folder_by_default(tmp_path, monkeypatch):
    """`train-demo --report` with no --report-dir writes ./models_report (not into the package)."""
    from replayssm_quant.cli import main
    from replayssm_quant.eval import model_report

    folder = tmp_path / "models" / "mamba2-long"
    from replayssm_quant.eval.models.configs import build_model
    build_model("mamba2-long", "tiny").save_pretrained(folder)
    pkg_report = model_report.REPO_ROOT / "reports" / "models" / "README.md"
    before = pkg_report.stat().st_mtime_ns if pkg_report.exists() else None
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["train-demo", "--report", "--models-dir", str(tmp_path / "models")]) == 0
    text = (work / "models_report" / "README.md").read_text()
    assert "mamba2-long" in text and "Mamba2ForCausalLM" in text and "none" in text   # no attention
    assert (pkg_report.stat().st_mtime_ns if pkg_report.exists() else None) == before
    assert main(["train-demo", "--report", "--models-dir", str(tmp_path / "models"), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "README.md").exists()


def test_report_training_table_shows_each_models_long_init(tmp_path):
    """The report's training table gives each -long model's recipe from its train_meta.json (task curriculum,
    count share, initial dt upper bound), not one hard-coded init range for every model."""
    from replayssm_quant.eval import model_report
    from replayssm_quant.eval.models.configs import build_model

    for arch, dt_max in (("gdn-long", 1.0), ("mamba2-long", 0.01)):
        folder = tmp_path / "models" / arch
        build_model(arch, "tiny").save_pretrained(folder)
        (folder / "train_meta.json").write_text(json.dumps({"settings": {
            "arch": arch, "task_curriculum": 0.4, "task_count_share": 0.25, "long_dt_max": dt_max}}))
    model_report.write_report(tmp_path / "models", tmp_path / "r", archs=("gdn-long", "mamba2-long"))
    text = (tmp_path / "r" / "README.md").read_text()
    assert "1e-2]" not in text and "dt max" in text
    header = next(ln for ln in text.splitlines() if ln.startswith("| model") and "init dt max" in ln)
    cols = [c.strip() for c in header.strip("|").split("|")]
    rows = {r[0]: dict(zip(cols, r)) for r in
            ([c.strip() for c in ln.strip("|").split("|")] for ln in text.splitlines()
             if ln.startswith("| gdn-long ") or ln.startswith("| mamba2-long "))
            if len(r) == len(cols)}
    assert float(rows["gdn-long"]["init dt max"]) == 1.0 and float(rows["mamba2-long"]["init dt max"]) == 0.01
    assert float(rows["gdn-long"]["task curriculum"]) == 0.4 and float(rows["mamba2-long"]["count share"]) == 0.25


def test_task_length_curriculum():
    from replayssm_quant.eval.training.data import BatchSampler

    books = [bytes(np.random.default_rng(0).integers(32, 127, 20000, dtype=np.uint8))]
    s = BatchSampler(books, batch_size=2, seq_len=4096, task_fraction=0.5, seed=0)
    assert s.max_task_len == s.full_task_len == 2000
    s.set_curriculum(0.0, 0.4)
    assert s.max_task_len == 64
    lens = [s._next_task()["gen_len"] for _ in range(200)]
    assert max(lens) <= 64 and min(lens) >= 4
    s.set_curriculum(0.2, 0.4)
    assert s.max_task_len == round(math.sqrt(64 * 2000))
    s.set_curriculum(0.5, 0.4)
    assert s.max_task_len == 2000 and max(s._next_task()["gen_len"] for _ in range(200)) > 64
    s.set_curriculum(0.0, 0.0)          # no curriculum: full lengths at once
    assert s.max_task_len == 2000


@pytest.mark.parametrize("arch", ["gdn", "mamba2"])
def test_packed_task_examples_do_not_see_each_other_in_attention(arch):
    """With the sampler's position_ids, an attention-only stack scores an example packed after another
    exactly as alone at position 0 (block-diagonal mask, RoPE restarting), i.e. as at evaluation;
    with plain positions the earlier example leaks in."""
    from replayssm_quant.eval.models.configs import build_config
    from replayssm_quant.eval.synthetic_tasks import generate_tasks, training_text
    from transformers import AutoModelForCausalLM

    cfg = build_config(arch, "tiny")
    if arch == "gdn":
        cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
    else:
        cfg.layers_block_type = ["full_attention", "mlp", "full_attention", "mlp"]
        cfg.num_hidden_layers = 4
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    a, b = generate_tasks(2, seed=5, min_len=32, max_len=60)
    ex_a = [BOS_ID] + list(training_text(a)[0]) + [EOS_ID]
    ex_b = [BOS_ID] + list(training_text(b)[0]) + [EOS_ID]
    ids = torch.tensor([ex_a + ex_b])
    pos = torch.tensor([list(range(len(ex_a))) + list(range(len(ex_b)))])
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([ex_b]), use_cache=False).logits[0]
        packed = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0, len(ex_a):]
        leaky = model(input_ids=ids, use_cache=False).logits[0, len(ex_a):]
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=1e-5)
    assert (leaky - alone).abs().max() > 1e-3


def test_loss_parts_task_accuracy():
    from replayssm_quant.eval.training.loop import _loss_parts

    # one task row: two examples (positions restart), answer labels at 2..3 and 6..7; one book row
    labels = torch.full((2, 8), -100)
    labels[0, 2:4] = torch.tensor([5, 6])
    labels[0, 6:8] = torch.tensor([7, 8])
    labels[1] = torch.arange(8)
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3], list(range(8))])
    logits = torch.zeros(2, 8, 16)
    for t, y in [(1, 5), (2, 6), (5, 7), (6, 1)]:       # the second example's last byte is wrong
        logits[0, t, y] = 10.0
    is_task = torch.tensor([True, False])
    loss, book, task, tok_acc, exact = _loss_parts(logits, labels, is_task, positions)
    assert float(tok_acc) == pytest.approx(0.75) and float(exact) == pytest.approx(0.5)
    assert float(book) == pytest.approx(math.log(16), rel=1e-5) and float(task) < float(book)
    n_task, n_book = 4, 7
    assert float(loss) == pytest.approx((float(task) * n_task + float(book) * n_book) / (n_task + n_book), rel=1e-5)
    weighted = _loss_parts(logits, labels, is_task, positions, task_weight=2.0)[0]
    assert float(weighted) == pytest.approx(float(book) + 2.0 * float(task), rel=1e-5)


def test_lr_schedule_warmup_then_cosine():
    from replayssm_quant.eval.training.loop import TrainSettings, _lr_at

    s = TrainSettings(lr=1.0, warmup_frac=0.1, min_lr_ratio=0.1)
    lrs = [_lr_at(p, s) for p in np.linspace(0, 1, 101)]
    assert lrs[0] < 0.01 and max(lrs) == pytest.approx(1.0, abs=0.02) and lrs[-1] == pytest.approx(0.1)
    assert all(a >= b - 1e-12 for a, b in zip(lrs[10:], lrs[11:]))


# --------------------------------------------------------------------------- end to end

@pytest.mark.books
def test_train_save_reload_generate_report(tmp_path, monkeypatch):
    """train-demo on CPU for a few steps: saves a loadable HF folder, evaluates it, writes the report."""
    from replayssm_quant.cli import main
    from replayssm_quant.eval.training.evaluate import greedy_generate
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rc = main(["train-demo", "--arch", "gdn", "--size", "tiny", "--out", str(tmp_path / "runs"), "--minutes", "0",
               "--steps", "6", "--batch-size", "4", "--seq-len", "256", "--no-compile", "--no-progress",
               "--eval-contexts", "128,512", "--eval-max-windows", "3", "--eval-tasks", "4",
               "--eval-task-max-len", "40"])
    assert rc == 0
    folder = tmp_path / "runs" / "gdn"
    for f in ("config.json", "model.safetensors", "tokenizer.json", "train_log.csv", "train_meta.json",
              "eval.json", "task_eval.csv"):
        assert (folder / f).exists(), f
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(folder)
    assert model.config.model_type == "qwen3_5_text" and tok.eos_token_id == EOS_ID
    import pandas as pd

    log = pd.read_csv(folder / "train_log.csv")
    steps = log.dropna(subset=["loss"])
    assert steps["step"].iloc[-1] == 6 and np.isfinite(steps["loss"]).all()
    assert steps["loss"].iloc[-1] < steps["loss"].iloc[0]            # it learns something in 6 steps
    final = log.iloc[-1]                                               # the closing validation row
    assert final["step"] == 6 and 0 < final["val_bpb"] < 8.1 and 0 < final["heldout_bpb"] < 8.1
    meta = json.loads((folder / "train_meta.json").read_text())
    assert 1 <= meta["selected_step"] <= 6 and meta["best_val_bpb"] <= meta["final_val_bpb"] + 1e-9
    ev = json.loads((folder / "eval.json").read_text())
    assert set(ev["bpb"]) == {"128", "512"} and "bpb_tail" in ev["bpb"]["512"]
    assert 0 < ev["bpb"]["128"]["bpb"] < 8.1 and len(ev["task_accuracy"]["by_quartile"]) == 4
    # the recorded reference loss is what the reloaded fp32 model gives
    from replayssm_quant.eval.training.evaluate import reference_loss

    ref = reference_loss(model, gutenberg.heldout_books()[0])
    assert ref["loss_nats"] == pytest.approx(ev["reference"]["loss_nats"], abs=1e-4)
    # batched greedy generation (left padding, cache) equals a naive no-cache greedy loop
    prompts = [b"copy 1:ab 2:cd\n", b"upper 1:xyz 2:q0\n"]
    got = greedy_generate(model, prompts, 12, stop_ids=(EOS_ID,))
    for p, g in zip(prompts, got):
        seq = [BOS_ID] + list(p)
        out = []
        with torch.no_grad():
            for _ in range(12):
                nxt = int(model(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
                if nxt == EOS_ID:
                    break
                seq.append(nxt)
                out.append(nxt)
        assert g == bytes(t for t in out if t < 256)
    # report
    rc = main(["train-demo", "--report", "--models-dir", str(tmp_path / "runs"), "--report-dir", str(tmp_path / "rep")])
    assert rc == 0
    text = (tmp_path / "rep" / "README.md").read_text()
    assert "MISSED by" in text and "mamba2" in text  # untrained: targets missed; mamba2 listed as missing
    assert (tmp_path / "rep" / "training_curves.png").stat().st_size > 1000
    assert (tmp_path / "rep" / "task_accuracy.png").stat().st_size > 1000


def test_cli_errors():
    from replayssm_quant.cli import main

    assert main(["train-demo", "--arch", "gdn"]) == 2                       # no --out
    assert main(["train-demo", "--out", "/tmp/x", "--eval-contexts", "a,b"]) == 2


def test_validation_split_is_disjoint_tail():
    from replayssm_quant.eval.training.data import split_validation

    books = [b"a" * 100 + b"B" * 4, b"c" * 50]
    train, val = split_validation(books, 0.04)
    assert train == [b"a" * 100, b"c" * 48] and val == [b"B" * 4, b"c" * 2]
    assert [t + v for t, v in zip(train, val)] == books
    with pytest.raises(ValueError, match="fraction"):
        split_validation(books, 0.7)


@pytest.mark.books
def test_second_stage_init_from(tmp_path):
    """--init-from: the second stage starts from the first stage's weights and continues its log."""
    import pandas as pd
    from safetensors.torch import load_file

    from replayssm_quant.cli import main

    common = ["--size", "tiny", "--minutes", "0", "--batch-size", "2", "--seq-len", "128", "--no-compile",
              "--no-progress", "--eval-contexts", "64", "--eval-max-windows", "1", "--eval-tasks", "4",
              "--eval-task-max-len", "32", "--keep-last"]
    assert main(["train-demo", "--arch", "mamba2", "--out", str(tmp_path / "s1"), "--steps", "3", *common]) == 0
    s1 = tmp_path / "s1" / "mamba2"
    # lr 0: AdamW changes nothing, so stage 2 must ship exactly the weights it started from
    assert main(["train-demo", "--arch", "mamba2", "--out", str(tmp_path / "s2"), "--steps", "2", "--lr", "0",
                 "--seed", "1", "--init-from", str(s1), *common]) == 0
    s2 = tmp_path / "s2" / "mamba2"
    w1, w2 = load_file(str(s1 / "model.safetensors")), load_file(str(s2 / "model.safetensors"))
    assert w1.keys() == w2.keys() and all(torch.equal(w1[k], w2[k]) for k in w1)
    log1, log2 = pd.read_csv(s1 / "train_log.csv"), pd.read_csv(s2 / "train_log.csv")
    assert log2["step"].tolist()[:len(log1)] == log1["step"].tolist()       # stage 1's rows first
    assert log2["step"].iloc[-1] == 5 and log2["tokens"].iloc[-1] == 5 * 2 * 128
    meta = json.loads((s2 / "train_meta.json").read_text())
    assert meta["steps"] == 5 and meta["stage"]["steps"] == 2 and meta["init_from"]["steps"] == 3
    # a folder of another architecture / size is refused with the difference named
    assert main(["train-demo", "--arch", "gdn", "--out", str(tmp_path / "bad"), "--steps", "1",
                 "--init-from", str(s1), *common]) == 2
    with pytest.raises(ValueError, match="model_type"):
        from replayssm_quant.eval.models.configs import build_model
        from replayssm_quant.eval.training.loop import _init_from
        _init_from(build_model("gdn", "tiny"), s1)
    with pytest.raises(FileNotFoundError, match="config.json"):
        _init_from(build_model("mamba2", "tiny"), tmp_path)


def test_recall_batches_with_counting_train_the_count_ends():
    """count_share: recall examples with a counting filler and plain counting examples; trained bytes are
    the values (recall), the first and last bytes of every count and its newline."""
    from replayssm_quant.eval import synthetic_tasks as st
    from replayssm_quant.eval.training.data import BatchSampler

    books = [bytes(np.random.default_rng(0).integers(32, 127, 9000, dtype=np.uint8))]
    s = BatchSampler(books, batch_size=4, seq_len=2048, task_fraction=0.75, seed=4, task_family="recall",
                     count_share=0.5)
    kinds = {"plain count": 0, "recall, count filler": 0, "recall, word filler": 0}
    for _ in range(3):
        ids, labels, positions, is_task = s.next_batch()
        assert is_task.tolist() == [True, True, True, False]
        for row_ids, row_lab in zip(ids[is_task], labels[is_task]):
            text, lab = row_ids.tolist(), row_lab.tolist()
            start = 0
            for e in [i for i, t in enumerate(text) if t == EOS_ID]:
                ex, el = text[start:e + 1], lab[start:e + 1]
                off = 1 if ex[0] == BOS_ID else 0
                body = bytes(ex[off:-1]).decode()
                trained = "".join(chr(t) if l != -100 else "|" for t, l in zip(ex[off:-1], el[off:-1]))
                m = re.search(r"count (\d+) (\d+)\n([0-9 ]+)\n", body)
                if m:
                    a, b = m.start(3), m.end(3)
                    want = st.count_spans(a, b)
                    for x, y in want:
                        assert trained[x:y] == body[x:y]                      # the count's ends are trained
                    inside = set(range(a, b + 1)) - {i for x, y in want for i in range(x, y)}
                    assert all(trained[i] == "|" for i in inside)             # its middle is not
                    assert _numbers(m[3]) == list(range(int(m[1]), int(m[2]) + 1))
                kind = ("plain count" if body.startswith("count ") else
                        "recall, count filler" if m else "recall, word filler")
                kinds[kind] += 1
                if kind != "plain count":   # every value asked after the filler is trained
                    for v in re.findall(r"\?[a-z]{2}=(\d{4})\n", body):
                        assert v + "\n" in trained
                assert el[-1] == EOS_ID
                start = e + 1
    assert all(n > 0 for n in kinds.values()), kinds
    with pytest.raises(ValueError, match="count_share"):
        BatchSampler(books, 4, 1024, task_family="copy", count_share=0.5)


def _numbers(text):
    return [int(x) for x in text.split(" ")]


def test_long_init_dt_range_and_settings_checks():
    """build_model(dt_range=...): every -long head's dt = softplus(dt_bias) inside the range, spread over
    it; TrainSettings rejects a count share without recall and a dt maximum out of range."""
    from replayssm_quant.eval.models.configs import LONG_DT_RANGE, build_model, ssm_mixers
    from replayssm_quant.eval.training.loop import TrainSettings

    for arch in ("gdn-long", "mamba2-long"):
        dts = torch.cat([torch.nn.functional.softplus(m.dt_bias.double())
                         for _, m in ssm_mixers(build_model(arch, "tiny", seed=0, dt_range=(1e-4, 1.0)))])
        assert dts.min() >= 1e-4 * (1 - 1e-5) and dts.max() <= 1.0 * (1 + 1e-5)
        assert dts.max() > LONG_DT_RANGE[1]                       # beyond the old maximum
    with pytest.raises(ValueError, match="task-count-share"):
        TrainSettings(arch="gdn", task_count_share=0.5).check()
    with pytest.raises(ValueError, match="long-dt-max"):
        TrainSettings(arch="gdn-long", long_dt_max=2.0).check()
    TrainSettings(arch="gdn-long", task_count_share=0.5, long_dt_max=1.0).check()
    for steps in (0, -1):     # not "no cap": a budget-long run the user did not ask for
        with pytest.raises(ValueError, match=rf"--steps must be >= 1 .*got {steps}"):
            TrainSettings(arch="gdn", max_steps=steps).check()


@pytest.mark.books
def test_count_share_run_records_and_reports_the_count_task(tmp_path):
    """train-demo --task-count-share / --long-dt-max on a tiny gdn-long: both settings recorded, the count
    task evaluated (eval.json count_accuracy, count_eval.csv) and listed in the report."""
    from replayssm_quant.cli import main

    assert main(["train-demo", "--arch", "gdn-long", "--size", "tiny", "--out", str(tmp_path / "runs"),
                 "--minutes", "0", "--steps", "2", "--batch-size", "4", "--seq-len", "256", "--no-progress",
                 "--task-fraction", "0.75", "--task-count-share", "0.5", "--long-dt-max", "1",
                 "--eval-contexts", "64", "--eval-max-windows", "1", "--eval-tasks", "4",
                 "--eval-recall-max-dist", "80", "--eval-task-max-len", "24"]) == 0
    folder = tmp_path / "runs" / "gdn-long"
    st = json.loads((folder / "train_meta.json").read_text())["settings"]
    assert st["task_count_share"] == 0.5 and st["long_dt_max"] == 1.0
    ev = json.loads((folder / "eval.json").read_text())
    qs = ev["count_accuracy"]["by_quartile"]
    assert ev["count_accuracy"]["n"] == 4 and [q["quartile"] for q in qs] == ["Q1", "Q2", "Q3", "Q4"]
    assert all(q["gen_len_max"] <= 24 for q in qs) and (folder / "count_eval.csv").exists()
    (folder / "count_eval.csv").unlink()            # --evaluate reads the share from train_meta.json
    assert main(["train-demo", "--evaluate", str(folder), "--no-progress", "--eval-contexts", "64",
                 "--eval-max-windows", "1", "--eval-tasks", "4", "--eval-recall-max-dist", "80",
                 "--eval-task-max-len", "24"]) == 0
    assert (folder / "count_eval.csv").exists()
    assert main(["train-demo", "--report", "--models-dir", str(tmp_path / "runs"), "--report-dir", str(tmp_path / "r")]) == 0
    rows = [ln for ln in (tmp_path / "r" / "README.md").read_text().splitlines() if "| count " in ln]
    assert len(rows) == 4 and all("gdn-long" in r for r in rows)
