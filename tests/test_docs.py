"""Runs every ```python block of every page under docs/, in order, one namespace per page."""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if "```python" in p.read_text())


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # pages that write files write them here
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    namespace = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
