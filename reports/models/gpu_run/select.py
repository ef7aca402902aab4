"""Pick, per long-memory arch, the candidate with the best worst-quartile recall (held-out bpb <= 2.1 at
every context), among the tree's current weights ("old") and the two recipes trained in call 1
(/tmp/tlA, /tmp/tlB, if the machine still holds them). Copies the winner into eval/default_models."""
import json, os, shutil, sys

def score(folder):
    try:
        e = json.load(open(os.path.join(folder, "eval.json")))
    except OSError:
        return None
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        return None
    bpb = max(v["bpb"] for v in e["bpb"].values())
    q = [r["accuracy_pct"] for r in e["task_accuracy"]["by_quartile"]]
    return dict(ok=bpb <= 2.1, min_q=min(q), overall=e["task_accuracy"]["overall_pct"], bpb=bpb, q=q)

for arch in ("gdn-long", "mamba2-long"):
    cands = {"old": f"eval/default_models/{arch}", "A": f"/tmp/tlA/{arch}", "B": f"/tmp/tlB/{arch}"}
    scored = {k: score(v) for k, v in cands.items()}
    for k, s in scored.items():
        print(arch, k, s)
    best = max((k for k, s in scored.items() if s and s["ok"]),
               key=lambda k: (scored[k]["min_q"], scored[k]["overall"]))
    print(arch, "CHOSEN", best)
    if best != "old":
        dst = cands["old"]
        for f in os.listdir(dst):
            os.remove(os.path.join(dst, f))
        for f in os.listdir(cands[best]):
            shutil.copy(os.path.join(cands[best], f), dst)
