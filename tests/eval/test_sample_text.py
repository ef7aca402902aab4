"""The generator of the packaged default KL documents: seeded, reproducible, only byte tokens."""

import json

from replayssm_quant.eval.adapters.tiny import tiny_model
from replayssm_quant.eval.sample_text import SAMPLED_FILE, SAMPLED_META, sample_documents


def test_sampling_is_seeded_and_gives_bytes():
    m = tiny_model("qwen3_5", seed=0)
    a = sample_documents(m, num_docs=3, length=40, seed=7)
    assert a == sample_documents(m, num_docs=3, length=40, seed=7)
    assert a != sample_documents(m, num_docs=3, length=40, seed=8)
    assert [len(x) for x in a] == [40] * 3 and len(set(a)) == 3 and all(isinstance(x, bytes) for x in a)


def test_packaged_file_says_how_it_was_made():
    meta = json.loads(SAMPLED_META.read_text())
    rows = [json.loads(line) for line in SAMPLED_FILE.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == meta["docs"] and all(set(r) == {"text"} for r in rows)
    assert all(len(r["text"].encode()) >= meta["length_bytes"] for r in rows)
    assert {"model", "model_hash", "seed", "prompt", "sampling"} <= set(meta)
