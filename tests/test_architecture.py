"""The architecture as tests: which modules may touch Hugging Face libraries, and the import contracts."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"
HF = {"transformers", "tokenizers", "datasets", "huggingface_hub", "safetensors", "accelerate", "gguf"}
# The named adapter modules: the only files that import a Hugging Face library.
ADAPTERS = {
    "models/arch.py", "models/causal_lm.py", "models/pretrained.py", "models/tokenizer.py", "models/trace.py",
    "models/cli.py", "models/fetch.py", "models/known.py", "models/variants.py", "evals/passkey.py", "data/hub.py",
    "models/compiled.py",  # the decode step compiled over transformers' StaticCache
    "kv/cache.py", "kv/layer.py", "kv/attention.py",  # the Cache, its layers and the attention that reads them
    "kv/steady.py",  # the evicting cache's steady step compiled: its static layers and their attention function
    "sparsity/predictor_store.py",  # saves Deja Vu's predictors as safetensors (the format, not transformers)
    "sparsity/speed.py",  # times greedy decode through transformers' DynamicCache
    "accuracy/lm.py",  # lm-eval's LM API over transformers' DynamicCache or our evicting one
}


def hf_imports(path: Path) -> set[str]:
    """Top-level names of the Hugging Face packages ``path`` imports (anywhere in the file)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & HF


def test_only_adapter_modules_import_hugging_face():
    offenders = {str(p.relative_to(SRC)): sorted(hf_imports(p)) for p in SRC.rglob("*.py")
                 if str(p.relative_to(SRC)) not in ADAPTERS and hf_imports(p)}
    assert offenders == {}, f"import Hugging Face libraries only in the adapter modules {sorted(ADAPTERS)}"


def test_the_scanner_sees_an_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from transformers.cache_utils import Cache\n    import tokenizers as t\n")
    assert hf_imports(f) == {"transformers", "tokenizers"}


def test_every_module_opens_with_a_docstring():
    missing = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
               if p.name != "__main__.py" and ast.get_docstring(ast.parse(p.read_text())) is None]
    assert missing == []


def test_import_contracts_hold():
    """The contracts in pyproject.toml ([tool.importlinter]) hold: `lint-imports`, as CI runs it (under a second)."""
    exe = Path(sys.executable).with_name("lint-imports")  # this interpreter's environment, not whatever is on PATH
    if not exe.exists():
        pytest.skip(f"import-linter is not installed beside {sys.executable} (pip install -e '.[test]'): the import "
                    "contracts went unchecked")
    done = subprocess.run([str(exe), "--no-cache"], cwd=SRC.parents[1], capture_output=True, text=True)
    assert "Contracts:" in done.stdout and done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.slow
def test_importing_attnlab_leaves_transformers_as_it_was():
    """No module registers anything with transformers, or flips its switches, when imported: that is done where
    it is used (e.g. variants.register() when a folder is loaded), so importing attnlab never changes another
    library's behaviour."""
    probe = """import importlib, pkgutil
from transformers import AttentionInterface
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
from transformers.utils import logging
import attnlab
def state():
    return (sorted(CONFIG_MAPPING._extra_content), sorted(map(str, MODEL_FOR_CAUSAL_LM_MAPPING._extra_content)),
            sorted(AttentionInterface._global_mapping), logging.is_progress_bar_enabled())
before = state()
for m in pkgutil.walk_packages(attnlab.__path__, "attnlab."):
    if not m.name.endswith("__main__"):
        importlib.import_module(m.name)
print(before == state(), before, state())
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("True"), done.stdout


def test_help_loads_neither_pytorch_nor_transformers():
    """`attnlab --help` and every command's parser build without importing PyTorch or transformers
    (seconds on a small CPU): a capability's cli module imports heavy things inside its commands."""
    probe = ("import sys\nfrom attnlab import cli\ncli.build_parser()\n"
             "print(sorted({'torch', 'transformers', 'numpy'} & {m.split('.')[0] for m in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"building the parser imported {done.stdout.strip()}"


def test_no_module_imports_an_experiment_module_as_a_library():
    """The entry contract for every exp_* module, found by glob (import-linter's wildcards match whole names only,
    so pyproject's `entry` contract covers the cli and experiments modules and this test the exp_* ones): no
    attnlab module imports one; the experiment registry loads them by name. A new experiment needs no edit here."""
    import grimp

    graph = grimp.build_graph("attnlab")
    entries = {m for m in graph.modules if m.rpartition(".")[2].startswith("exp_")}
    assert len(entries) >= 10  # the glob finds them (a renamed convention would empty it)
    importers = sorted((i, m) for m in entries for i in graph.find_modules_that_directly_import(m))
    assert not importers, f"import the experiment through the registry instead: {importers}"


def test_one_file_methods_are_pure():
    """The `pure` contract for the methods that are a file each (kv/policy_*.py, rope/scaling_*.py), found as their
    registries find them (import-linter's wildcards match whole names only): none reaches a Hugging Face library,
    directly or through another module. A new policy or scaling file is covered with no edit here."""
    import pkgutil

    import grimp

    import attnlab.kv
    import attnlab.rope

    graph = grimp.build_graph("attnlab", include_external_packages=True, cache_dir=None)  # never a stale graph
    files = [info.name for pkg, prefix in ((attnlab.kv, "policy_"), (attnlab.rope, "scaling_"))
             for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + ".")
             if info.name.rpartition(".")[2].startswith(prefix)]
    assert len(files) >= 2  # TOVA and YaRN at least: the globs find them
    reached = [(m, hf, graph.find_shortest_chain(m, hf)) for m in files for hf in sorted(HF) if hf in graph.modules
               and graph.find_shortest_chain(m, hf)]
    assert not reached, f"a pure method reaches a Hugging Face library: {reached}"
