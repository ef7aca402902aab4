"""The lm-eval plugin's ``draft=ngram:T``: speculative generate_until gives plain greedy's texts and counts its
steps; a bad draft is a one-line error."""

from types import SimpleNamespace

import pytest

pytest.importorskip("lm_eval")

from replayssm_quant.eval.lm_eval_plugin import ReplaySSMLM  # noqa: E402


def _lm(**kw):
    from replayssm_quant.eval.adapters.loading import load_model

    lm = load_model("gdn-demo", dtype="float32")
    return ReplaySSMLM(model=lm.model, tokenizer=lm.tokenizer, pretrained="gdn-demo", device="cpu", batch_size=2,
                       **kw)


def test_draft_generation_equals_plain_generation():
    reqs = [SimpleNamespace(args=(p, {"until": ["\n"], "max_gen_toks": 20}))
            for p in ("copy 1:ab3 2:xy7 3:pq\n", "copy 1:zz 2:k9m 3:a1b2 4:cd\n", "upper 1:ab 2:cd\n")]
    plain = _lm().generate_until(reqs, disable_tqdm=True)
    lm = _lm(draft="ngram:4")
    assert lm.get_model_info()["draft"] == "ngram:4"
    assert lm.generate_until(reqs, disable_tqdm=True) == plain
    st = lm.generation_stats
    assert st["drafted"] > 0 and 0 < st["accepted"] <= st["drafted"]
    assert st["steps"] < st["tokens"]                      # several tokens per model step on the copy prompts


@pytest.mark.parametrize("bad, match", [("ngram:99", r"^replayssm: bad T \(tokens per verify step\) '99'"),
                                        ("medusa:4", r"^replayssm: unknown drafter 'medusa'.*ngram:T\[:N\]")])
def test_bad_draft_is_a_one_line_error(bad, match):
    with pytest.raises(ValueError, match=match):
        _lm(draft=bad)
