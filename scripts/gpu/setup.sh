# Source this on the GPU machine from the repository root:
#   source scripts/gpu/setup.sh
# Makes `replayssm_quant` importable without a build (the GPU image has no
# internet), installs carried wheels (.whl/) if present, and points the data at
# the carried copy of the Gutenberg books (.gpu/data/gutenberg).
if [ -n "${RQ_SETUP_DONE:-}" ]; then return 0 2>/dev/null || exit 0; fi
SITE=/tmp/rq_site
rm -rf "$SITE" && mkdir -p "$SITE/replayssm_quant"
cp -r replayssm_quant/. "$SITE/replayssm_quant/"
for d in quant kernels eval; do ln -s "$PWD/$d" "$SITE/replayssm_quant/$d"; done
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/whl/site-packages .whl/*.whl
  # (a path containing "site-packages": datasets/dill hash tables by module path)
  export PYTHONPATH="$SITE:/tmp/whl/site-packages${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
[ -d .gpu/data/gutenberg ] && export REPLAYSSM_GUTENBERG_DIR="$PWD/.gpu/data/gutenberg"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'gpu', torch.cuda.get_device_name(0))"
export RQ_SETUP_DONE=1
