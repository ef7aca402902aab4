"""Exit with one line naming what is missing when the lm-eval stack is not importable (downstream*.sh)."""

import importlib

NEED = ["lm_eval", "datasets", "pyarrow", "dill", "multiprocess", "xxhash", "sacrebleu", "portalocker",
        "tabulate", "lxml", "colorama", "requests", "urllib3"]

if __name__ == "__main__":
    missing = []
    for m in NEED:
        try:
            importlib.import_module(m)
        except Exception as e:  # noqa: BLE001
            missing.append(f"{m} ({type(e).__name__}: {e})")
    if missing:
        raise SystemExit("missing on this machine (carry their wheels in .whl/): " + "; ".join(missing))
    print("lm-eval stack present")
