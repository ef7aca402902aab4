"""``--model`` values to a (model, tokenizer) pair.

Accepted names:

* ``gdn-demo`` (the default) / ``mamba2-demo``: the embedded models in
  ``eval/default_models/{gdn,mamba2}`` (byte tokenizer saved beside them).
* ``gdn-long`` / ``mamba2-long``: the embedded long-memory models (``eval/default_models/<name>``;
  GDN state behind one layer-0 attention, and pure Mamba-2).
* ``tiny-ARCH`` with ARCH in :data:`~.tiny.TINY_ARCHS`: a tiny random model (smoke runs, tests).
* a local folder or a Hugging Face hub id (``Qwen/Qwen3.5-4B``): ``AutoModelForCausalLM``
  in float32, spread over GPUs with ``device_map="auto"`` when asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .families import SUPPORTED_MODELS
from .tiny import TINY_ARCHS

DEMO_MODELS = {"gdn-demo": "gdn", "mamba2-demo": "mamba2", "gdn-long": "gdn-long", "mamba2-long": "mamba2-long"}
DEFAULT_MODEL = "gdn-demo"
MODEL_FORMS = ("valid --model values: " + ", ".join(DEMO_MODELS) + " (embedded), "
               + ", ".join(f"tiny-{a}" for a in TINY_ARCHS) + " (tiny random), a local model folder, "
               "or a Hugging Face hub id of a supported model (" + SUPPORTED_MODELS + ")")


@dataclass
class LoadedModel:
    """A model ready for :class:`~replayssm_quant.eval.decode.DecodeSession`."""

    name: str
    model: object
    tokenizer: object
    source: str


def default_models_dir() -> Path:
    """``eval/default_models`` (where the embedded models live)."""
    return Path(__file__).resolve().parent.parent / "default_models"


def _first_line(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def load_model(name: str | None, device: str = "cpu", device_map: str | None = None) -> LoadedModel:
    """Load ``name`` (see module doc) in float32, eval mode, on ``device`` (or ``device_map``).

    Raises:
        ValueError: an unknown or unloadable name (one line, listing the valid forms).
    """
    import torch

    name = DEFAULT_MODEL if name is None else name
    if name.startswith("tiny-"):
        arch = name[len("tiny-"):]
        if arch not in TINY_ARCHS:
            raise ValueError(f"unknown tiny model {name!r}; {MODEL_FORMS}")
        from ..models.tokenizer import build_byte_tokenizer
        from .tiny import tiny_model
        return LoadedModel(name, tiny_model(arch).to(device), build_byte_tokenizer(), "tiny random config")
    if name in DEMO_MODELS:
        path = default_models_dir() / DEMO_MODELS[name]
        if not (path / "config.json").is_file():
            raise ValueError(f"embedded model {name!r} is missing ({path} has no config.json); "
                             f"reinstall the package or pass another --model; {MODEL_FORMS}")
        source = str(path)
    else:
        path = Path(name).expanduser()
        if path.exists() and not (path / "config.json").is_file():
            raise ValueError(f"--model {name!r}: folder has no config.json; {MODEL_FORMS}")
        if not path.exists() and (name.count("/") != 1 or name.startswith((".", "/"))):
            raise ValueError(f"unknown model {name!r} (no such folder, not a hub id ORG/NAME); {MODEL_FORMS}")
        source = str(path) if path.exists() else name
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        kw = {"dtype": torch.float32}
        if device_map:
            kw["device_map"] = device_map
        model = AutoModelForCausalLM.from_pretrained(source, **kw)
        tok = AutoTokenizer.from_pretrained(source)
    except Exception as e:  # noqa: BLE001 - any load failure is a user-facing one-liner
        raise ValueError(f"cannot load model {name!r}: {_first_line(e)}; {MODEL_FORMS}") from None
    if not device_map:
        model = model.to(device)
    return LoadedModel(name, model.eval(), tok, source)
