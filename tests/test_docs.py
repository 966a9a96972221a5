"""Runs every ```python block of every page under docs/, in order, one namespace per page."""

import pathlib
import re

import pytest

from istjax.data.images import DataNotFoundError

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if "```python" in p.read_text())


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
@pytest.mark.slow
def test_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # pages that write files write them here
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    namespace = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
        except DataNotFoundError as e:  # a page on a data set from ../shared/data, run where it is absent
            pytest.skip(f"{page.name} block {i} reads a data set that is not on this machine: {e}")
