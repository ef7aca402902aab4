# Source this on the GPU machine from the repository root:
#   source scripts/gpu/setup.sh
# Makes `replayssm_quant` importable without a build (the GPU image has no
# internet), installs carried wheels (.whl/) if present, unpacks a carried
# mamba_ssm source tarball, and points the data at the carried copy of the
# Gutenberg books (.gpu/data/gutenberg).
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
# a carried mamba_ssm source tarball: its Triton decode kernel is the bench's Mamba-2 anchor (kernels/mamba_ssm_anchor.py)
MSSM=$(ls .whl/mamba_ssm-*.tar.gz 2>/dev/null | head -n 1)
if [ -n "$MSSM" ]; then
  mkdir -p /tmp/mssm && tar xzf "$MSSM" -C /tmp/mssm
  export REPLAYSSM_MAMBA_SSM_SRC="/tmp/mssm/$(basename "$MSSM" .tar.gz)"
fi
[ -d .gpu/data/gutenberg ] && export REPLAYSSM_GUTENBERG_DIR="$PWD/.gpu/data/gutenberg"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'gpu', torch.cuda.get_device_name(0))"
export RQ_SETUP_DONE=1
