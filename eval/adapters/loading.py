"""``--model`` values to a (model, tokenizer) pair.

Accepted names:

* ``gdn-demo`` / ``mamba2-demo``: the embedded models in ``eval/default_models/{gdn,mamba2}``
  (byte tokenizer saved beside them).
* ``gdn-long`` (the default) / ``mamba2-long``: the embedded long-memory models
  (``eval/default_models/<name>``; GDN state behind one layer-0 attention, and pure Mamba-2). The
  default is gdn-long because its state remembers (median head: per-token decay 0.9994, half-life
  ~1.2K tokens; gdn-demo's median head keeps 3e-5 of its state per token), so the default KL report
  shows rounding error building up over position (nvfp4+sr ~3x from positions 16-31 to 128-256 on
  the default settings; flat on gdn-demo), and the default
  ``eval`` stays quick on a laptop CPU (mamba2-long's conventional variants step its 8 Mamba-2 layers
  token by token through transformers' torch path: several times slower there).
* ``tiny-ARCH`` with ARCH in :data:`~.tiny.TINY_ARCHS`: a tiny random model (smoke runs, tests).
* a local folder or a Hugging Face hub id (``Qwen/Qwen3.5-4B``): ``AutoModelForCausalLM``,
  spread over GPUs with ``device_map="auto"`` when asked.

Weights load in ``dtype`` (:mod:`.dtypes`: ``auto`` = the checkpoint's, bf16 for released models and
the embedded ones, float32 for the tiny ones); the SSM states stay float32 whatever the weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .families import SUPPORTED_MODELS
from .tiny import TINY_ARCHS

DEMO_MODELS = {"gdn-demo": "gdn", "mamba2-demo": "mamba2", "gdn-long": "gdn-long", "mamba2-long": "mamba2-long"}
DEFAULT_MODEL = "gdn-long"
MODEL_FORMS = ("valid --model values: " + ", ".join(DEMO_MODELS) + " (embedded), "
               + ", ".join(f"tiny-{a}" for a in TINY_ARCHS) + " (tiny random), a local model folder, "
               "or a Hugging Face hub id of a supported model (" + SUPPORTED_MODELS + ")")


#: named accelerate placements ``--device-map`` takes besides a JSON object
DEVICE_MAP_NAMES = ("auto", "balanced", "balanced_low_0", "sequential")
DEVICE_MAP_FORMS = ("valid --device-map values: " + ", ".join(DEVICE_MAP_NAMES) + " (accelerate spreads the model over "
                    "the GPUs, then the CPU), or a JSON object {module name: device} with devices N / cuda:N, cpu or "
                    "disk, e.g. '{\"model.embed_tokens\": 0, \"model.layers\": \"cpu\", \"model.norm\": 0, "
                    "\"lm_head\": 0}' (cpu / disk blocks of a map that names a GPU are offloaded: they run on the GPU)")


def parse_device_map(text) -> str | dict | None:
    """``--device-map`` (``None`` / empty: one device) as accelerate takes it: a name of
    :data:`DEVICE_MAP_NAMES` or a ``{module name: int | "cuda:N" | "cpu" | "disk"}`` dict (from a JSON object or
    a dict). ``ValueError`` (one line, listing the forms) otherwise."""
    import json

    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    dm = text
    if isinstance(text, str):
        if text.strip() in DEVICE_MAP_NAMES:
            return text.strip()
        try:
            dm = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"unknown --device-map {text!r}; {DEVICE_MAP_FORMS}") from None
    if not isinstance(dm, dict) or not dm:
        raise ValueError(f"--device-map {text!r} is not a name or a non-empty JSON object; {DEVICE_MAP_FORMS}")
    import torch

    for k, v in dm.items():
        ok = (isinstance(v, int) and not isinstance(v, bool) and v >= 0) or v in ("cpu", "disk") or (
            isinstance(v, str) and v.startswith("cuda") and _is_cuda_device(v))
        if not isinstance(k, str) or not ok:
            raise ValueError(f"--device-map: bad device {v!r} for module {k!r}; {DEVICE_MAP_FORMS}")
        gpu = None if v in ("cpu", "disk") else v if isinstance(v, int) else torch.device(v).index or 0
        if gpu is not None and gpu >= torch.cuda.device_count():
            raise ValueError(f"--device-map puts module {k!r} on GPU {gpu}, but {torch.cuda.device_count()} CUDA "
                             "GPU(s) are visible; use cpu / disk entries or a machine with the GPUs")
    return dm


def _is_cuda_device(v: str) -> bool:
    import torch

    try:
        return torch.device(v).type == "cuda"
    except (RuntimeError, ValueError):
        return False


def _offload_folder(device_map) -> str | None:
    """A fresh temporary folder for the ``disk`` blocks of ``device_map`` (None when it has none)."""
    import tempfile

    if isinstance(device_map, dict) and "disk" in device_map.values():
        return tempfile.mkdtemp(prefix="replayssm-offload-")
    return None


def dispatch(model, device_map):
    """Spread an in-memory model over devices as ``from_pretrained(device_map=...)`` would (accelerate hooks;
    a named map through ``infer_auto_device_map``); the tiny random models take ``--device-map`` this way."""
    from accelerate import dispatch_model, infer_auto_device_map

    if isinstance(device_map, str):
        device_map = infer_auto_device_map(model, no_split_module_classes=model._no_split_modules)
    return dispatch_model(model, device_map, offload_dir=_offload_folder(device_map))


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


#: config keys that say where a model was loaded from, not what it is (left out of :func:`model_fingerprint`)
_LOCATION_KEYS = ("_name_or_path", "_commit_hash")


def model_fingerprint(model) -> str:
    """A content hash of ``model``: sha256 (hex, first 16 digits) over its config and every tensor of its state dict.

    Each tensor contributes its name, dtype, shape and raw bytes (moved to the CPU one at a time),
    so a retrained or otherwise changed model gets another hash even under the same name. The config's
    :data:`_LOCATION_KEYS` (where the model was loaded from) are left out: the same model installed or copied
    elsewhere keeps its hash, so a run moved with it still resumes.
    """
    import hashlib
    import json

    import torch

    h = hashlib.sha256()
    cfg = getattr(model, "config", None)
    if cfg is not None:
        d = {k: v for k, v in json.loads(cfg.to_json_string(use_diff=False)).items() if k not in _LOCATION_KEYS}
        h.update(json.dumps(d, sort_keys=True).encode())
    for name, t in sorted(model.state_dict().items()):
        t = t.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.device.type == "meta":                   # offloaded by accelerate: no data here to hash
            continue
        h.update(t.contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _first_line(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


#: transformers' advice printed on every CPU run ("install causal_conv1d / flash-linear-attention"):
#: the fast kernels it names are CUDA-only, and this toolkit's decode path does not use them
_FALLBACK_ADVICE = "is falling back to its reference PyTorch implementation"


class _DropFallbackAdvice:
    """A ``logging`` filter dropping only :data:`_FALLBACK_ADVICE` records."""

    def filter(self, record) -> bool:
        return _FALLBACK_ADVICE not in record.getMessage()


def silence_fallback_advice() -> None:
    """Install the filter on transformers' hub-kernels logger (idempotent; other warnings stay)."""
    import logging

    log = logging.getLogger("transformers.integrations.hub_kernels")
    if not any(isinstance(f, _DropFallbackAdvice) for f in log.filters):
        log.addFilter(_DropFallbackAdvice())


def check_model_name(name: str | None) -> tuple[str, str]:
    """``(name, source)`` of a ``--model`` value, checked without loading anything (so a bad name fails first).

    ``source`` is ``"tiny"``, the embedded model's folder, a local folder or the hub id.

    Raises:
        ValueError: an unknown name, a missing embedded model, a folder without config.json.
    """
    name = DEFAULT_MODEL if name is None else name
    if name.startswith("tiny-"):
        if name[len("tiny-"):] not in TINY_ARCHS:
            raise ValueError(f"unknown tiny model {name!r}; {MODEL_FORMS}")
        return name, "tiny"
    if name in DEMO_MODELS:
        path = default_models_dir() / DEMO_MODELS[name]
        if not (path / "config.json").is_file():
            raise ValueError(f"embedded model {name!r} is missing ({path} has no config.json); "
                             f"reinstall the package or pass another --model; {MODEL_FORMS}")
        return name, str(path)
    path = Path(name).expanduser()
    if path.exists() and not (path / "config.json").is_file():
        raise ValueError(f"--model {name!r}: folder has no config.json; {MODEL_FORMS}")
    if not path.exists() and (name.count("/") != 1 or name.startswith((".", "/"))):
        raise ValueError(f"unknown model {name!r} (no such folder, not a hub id ORG/NAME); {MODEL_FORMS}")
    return name, str(path) if path.exists() else name


def load_model(name: str | None, device: str = "cpu", device_map: str | dict | None = None,
               dtype="float32") -> LoadedModel:
    """Load ``name`` (see module doc) with weights in ``dtype`` (``auto`` = the checkpoint's, ``bfloat16``,
    ``float16``, ``float32`` or a ``torch.dtype``; float32 unless asked: the commands pass their ``--dtype``,
    whose default is auto), eval mode, on ``device`` (or spread by ``device_map``: :func:`parse_device_map`).

    A hub id while the hub cannot be used (:func:`~replayssm_quant.eval.hub.offline_reason`) is
    read from the local cache only: no retries against an unreachable hub.

    Raises:
        ValueError: an unknown or unloadable name (one line, listing the valid forms).
    """
    from .dtypes import parse_weight_dtype

    dtype = parse_weight_dtype(dtype)
    device_map = parse_device_map(device_map)
    silence_fallback_advice()
    name, source = check_model_name(name)
    if source == "tiny":
        from ..models.tokenizer import build_byte_tokenizer
        from .tiny import tiny_model
        model = tiny_model(name[len("tiny-"):]).to(**({} if dtype == "auto" else {"dtype": dtype}))
        model = dispatch(model, device_map) if device_map else model.to(device)
        return LoadedModel(name, model, build_byte_tokenizer(), "tiny random config")
    offline = None
    if not Path(source).exists():
        from ..hub import offline_reason

        offline = offline_reason()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        kw = {"dtype": dtype}
        if device_map:
            kw["device_map"] = device_map
            folder = _offload_folder(device_map)
            if folder:
                kw["offload_folder"] = folder
        model = AutoModelForCausalLM.from_pretrained(source, local_files_only=bool(offline), **kw)
        tok = AutoTokenizer.from_pretrained(source, local_files_only=bool(offline))
    except Exception as e:  # noqa: BLE001 - any load failure is a user-facing one-liner
        if offline:
            raise ValueError(f"cannot load model {name!r}: it is not in the local Hugging Face cache and the hub "
                             f"cannot be used ({offline}); download it where there is a network and pass its "
                             f"folder, or use an embedded model; {MODEL_FORMS}") from None
        raise ValueError(f"cannot load model {name!r}: {_first_line(e)}; {MODEL_FORMS}") from None
    if not device_map:
        model = model.to(device)
    return LoadedModel(name, model.eval(), tok, source)
