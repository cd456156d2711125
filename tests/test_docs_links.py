"""The README's and docs/' links to files in the repository resolve. Why: the measurement logs moved
out of the README into docs/ (2026-12-07) and the README points at them; a later move or rename
that leaves a link dangling would pass every other test."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

LINK = re.compile(r"\]\(([^)\s]+)\)")  # markdown [text](target)


def local_targets(md: Path) -> list[str]:
    """Each link target in `md` that names a file in the repository (not a URL, not an anchor)."""
    return [t.split("#")[0] for t in LINK.findall(md.read_text())
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_the_link_finder_sees_a_dangling_link(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("see [a](docs/a.md), [b](https://example.org/b), [c](#here), [d](d.md#part)\n")
    assert local_targets(md) == ["docs/a.md", "d.md"]


def test_every_local_link_in_the_readme_and_docs_resolves():
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert len(files) >= 3  # the README and the two measurement logs
    checked = 0
    for md in files:
        for t in local_targets(md):
            assert (md.parent / t).exists(), f"{md.relative_to(REPO)} links to {t}, which is not there"
            checked += 1
    assert checked >= 2  # the README's links to docs/demo-pairs.md and docs/planner-measured.md
