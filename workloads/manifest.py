"""Dataset manifest: size and checksum of every file, written with the dataset, so staging
(staging/) and loaders can verify copies. crc32 via zlib (fast, streaming)."""
from __future__ import annotations

import json
import mmap
import os
import zlib
from pathlib import Path

MANIFEST = "manifest.json"


def file_crc32(path: str | Path) -> tuple[int, int]:
    """(size in bytes, crc32) of a file, over an mmap of it: no copy through a user buffer, and
    zlib releases the GIL while it runs, so another thread's copy can overlap it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if not size:
            return 0, 0
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
            return size, zlib.crc32(m)
    finally:
        os.close(fd)


def checksum(path: Path) -> str:
    return f"crc32:{file_crc32(path)[1]:08x}"


def mismatch(name: str, size: int, crc: int, entry: dict) -> str | None:
    """Why a copy of `name` with this size and crc32 is not the file the manifest `entry`
    describes, or None when it is."""
    got = f"crc32:{crc:08x}"
    if size == entry["bytes"] and got == entry["checksum"]:
        return None
    return f"checksum mismatch for {name}: staged {size} bytes {got}, manifest says {entry['bytes']} bytes {entry['checksum']}"


def short_source(path: str | Path, got: int, want: int) -> str:
    """A source file that ended before the manifest's size for it."""
    return f"source file {path} is shorter than the manifest says ({got} < {want} bytes)"


def write_manifest(root: Path) -> dict:
    files = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != MANIFEST and not p.name.startswith("."):
            files[str(p.relative_to(root))] = {"bytes": p.stat().st_size, "checksum": checksum(p)}
    manifest = {"version": 1, "files": files}
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(root / MANIFEST)
    return manifest


def read_manifest(root: Path) -> dict:
    return json.loads((root / MANIFEST).read_text())


def listed_files(root: Path, split: str, prefix: str) -> list[Path] | None:
    """The split's files named prefix* as the manifest lists them (sorted), or None without a
    manifest. Loaders index this list, so a file that disappears is reported as missing
    instead of silently shifting every later index."""
    path = root / MANIFEST
    if not path.exists():
        return None
    start = f"{split}/{prefix}"
    return [root / name for name in sorted(read_manifest(root)["files"]) if name.startswith(start)]


def split_files(root: Path, split: str, prefix: str, suffix: str) -> list[Path]:
    """The split's sample files: the manifest's list, or (no manifest: e.g. converted real
    data) the files present. None found is a DataError naming the folder."""
    from workloads.errors import DataError

    files = listed_files(root, split, prefix)
    if files is None:
        files = sorted((Path(root) / split).glob(f"{prefix}*{suffix}"))
    if not files:
        raise DataError(f"no data files in {Path(root) / split} (expected {prefix}*{suffix})")
    return files
