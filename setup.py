"""Build hook only: all metadata lives in pyproject.toml.

It ships ``replayssm_quant_lm_eval.pth`` in the site-packages root (setuptools has no
pyproject setting for a file there): ``build_py`` copies it into the root of ``build_lib``,
so it lands in the wheel root and ``pip install .`` / ``pip install replayssm-quant-*.whl``
put it beside the package. Its one ``import`` line installs the lazy lm-eval hook of
``replayssm_quant/_lm_eval_autoregister.py``, so that ``lm_eval --model replayssm`` finds the
model. Editable installs (``pip install -e .``) do not get it (use ``replayssm-lm-eval``).
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py

PTH = "replayssm_quant_lm_eval.pth"  # at the repository root, beside this file


class build_py(_build_py):
    """setuptools' build_py plus the .pth file in the root of build_lib (and in the sdist)."""

    def _ships_pth(self) -> bool:
        return not getattr(self, "editable_mode", False)

    def run(self):
        super().run()
        if self._ships_pth():
            if not os.path.isfile(PTH):
                raise FileNotFoundError(f"{PTH} is missing from the source tree (cwd {os.getcwd()})")
            self.copy_file(PTH, os.path.join(self.build_lib, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if self._ships_pth():
            outputs.append(os.path.join(self.build_lib, PTH))
        return outputs

    def get_source_files(self):
        # sdist: the .pth is not in a package, so list it here (sdist -> wheel builds need it)
        return super().get_source_files() + [PTH]


setup(cmdclass={"build_py": build_py})
