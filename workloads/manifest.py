"""Dataset manifest: size and checksum of every file, written with the dataset, so staging
(staging/) and loaders can verify copies. crc32 via zlib (fast, streaming)."""
from __future__ import annotations

import json
import zlib
from pathlib import Path

MANIFEST = "manifest.json"
CHUNK = 1 << 20  # bytes per read


def checksum(path: Path) -> str:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return f"crc32:{crc:08x}"


def mismatch(name: str, size: int, crc: int, entry: dict) -> str | None:
    """Why a copy of `name` with this size and crc32 is not the file the manifest `entry`
    describes, or None when it is."""
    got = f"crc32:{crc:08x}"
    if size == entry["bytes"] and got == entry["checksum"]:
        return None
    return f"checksum mismatch for {name}: staged {size} bytes {got}, manifest says {entry['bytes']} bytes {entry['checksum']}"


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
    from harness.errors import DataError

    files = listed_files(root, split, prefix)
    if files is None:
        files = sorted((Path(root) / split).glob(f"{prefix}*{suffix}"))
    if not files:
        raise DataError(f"no data files in {Path(root) / split} (expected {prefix}*{suffix})")
    return files
