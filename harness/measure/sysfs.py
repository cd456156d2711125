"""Reading one value from /proc or /sys: the text, or None where the file is absent or
unreadable (a VM without cpufreq, a kernel without DAMON), so each check says so instead of failing."""
from __future__ import annotations

from pathlib import Path


def read(path: str | Path) -> str | None:
    """The file's text, stripped; None when it cannot be read."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def read_int(path: str | Path) -> int | None:
    """The file's text as an integer; None when unreadable or not one."""
    text = read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
