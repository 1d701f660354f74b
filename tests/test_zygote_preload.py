"""The sandbox runner's zygote (autograde/sandbox_runner.py) imports, before any student code runs, the transformers
modules the notebook imports at its top level, so that its kernels and its re-check do not each import them again.
It reads the notebook's imports without running it: only installed packages of ZYGOTE_PRELOAD_IF_IMPORTED count,
and a cell that does not parse imports nothing."""
from __future__ import annotations

import json
import subprocess
import sys

import nbformat

from autograde.sandbox_runner import ZYGOTE_PRELOAD_IF_IMPORTED, notebook_imports
from tests.submissions import REPO, released


def _notebook(tmp_path, *sources: str) -> str:
    path = tmp_path / "in.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources]), path)
    return str(path)


def test_only_top_level_imports_of_the_listed_packages_count(tmp_path):
    path = _notebook(tmp_path,
                     "import torch\nimport transformers.models.llama.modeling_llama as llama",
                     "from transformers import LlamaConfig, LlamaForCausalLM\nfrom . import transformers",
                     "if False:\n    import transformers.models.gpt2",          # not at the top level: not run
                     "%matplotlib inline\nimport transformers.models.bert",    # a magic: the cell does not parse
                     "from transformers_evil import x\nimport transformersx")
    assert notebook_imports(path, ("transformers",)) == [
        ("transformers.models.llama.modeling_llama", []), ("transformers", ["LlamaConfig", "LlamaForCausalLM"])]


def test_a_notebook_that_is_not_one_preloads_nothing(tmp_path):
    for text in ("", "[]", '{"cells": 3}', '{"cells": [{"cell_type": "code", "source": [1, 2]}]}',
                 '{"cells": [{"cell_type": "code", "source": "(" }]}'):
        (tmp_path / "in.ipynb").write_text(text)
        assert notebook_imports(str(tmp_path / "in.ipynb"), ("transformers",)) == []
    assert notebook_imports(str(tmp_path / "absent.ipynb"), ("transformers",)) == []


def test_chapter_7s_llama_is_imported_by_the_zygote(tmp_path):
    """What the zygote imports for chapter 7's release loads transformers' Llama, the module its cells use."""
    path = tmp_path / "in.ipynb"
    nbformat.write(released("ch07_llama_gqa"), path)
    imports = notebook_imports(str(path), ZYGOTE_PRELOAD_IF_IMPORTED)
    assert ("transformers", ["LlamaConfig", "LlamaForCausalLM"]) in imports, imports
    code = ("import json, sys\nfrom autograde.sandbox_runner import _preload\n"
            "_preload([tuple(i) for i in json.loads(sys.argv[1])])\n"
            "print('transformers.models.llama.modeling_llama' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code, json.dumps(imports)], cwd=REPO, capture_output=True, text=True,
                         check=True)
    assert run.stdout.split() == ["True"], run.stderr[-2000:]
