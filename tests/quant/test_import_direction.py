"""quant/ never imports kernels/ (the arrow runs kernels -> quant); the Triton backend of quant.quantize is
registered by kernels on import."""

import ast
import pathlib
import subprocess
import sys

QUANT = pathlib.Path(__file__).resolve().parents[2] / "quant"


def test_no_quant_module_imports_kernels():
    bad = []
    for path in sorted(QUANT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}:{node.lineno} {n}" for n in names if "kernels" in n]
    assert not bad, bad


def test_importing_quant_loads_no_kernels_and_triton_backend_needs_them():
    """quant alone: the torch reference, and backend="triton" refused with what to do; importing kernels registers
    the Triton launchers by module name (imported on first use: importing kernels needs no Triton)."""
    code = ("import sys, torch\n"
            "import replayssm_quant.quant as q\n"
            "assert not [m for m in sys.modules if m.startswith('replayssm_quant.kernels')]\n"
            "x = torch.randn(4, 32)\n"
            "assert q.quantize(x, 'fp16').data.dtype == torch.int16   # auto on the CPU: the torch reference\n"
            "try:\n"
            "    q.quantize(x, 'fp16', backend='triton')\n"
            "except ValueError as e:\n"
            "    assert 'import replayssm_quant.kernels first' in str(e), e\n"
            "else:\n"
            "    raise AssertionError('triton backend without the kernels')\n"
            "import replayssm_quant.kernels   # needs no Triton (a torch-only platform keeps the torch backends)\n"
            "assert 'triton' not in sys.modules\n"
            "assert q.api._ACCELERATED['triton'] == 'replayssm_quant.kernels.quantize'   # imported on first use\n"
            "assert 'replayssm_quant.kernels.quantize' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
