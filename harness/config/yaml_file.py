"""Settings files (sweeps, sites) read as YAML mappings, bounded and without aliases: one reader
for every file a user hands the harness, so each refuses the same bad input the same way."""
from __future__ import annotations

from harness.config.errors import UsageError


YAML_MAX_BYTES = 1 << 20  # a sweep or site file is a page of settings; a MiB is already absurd


def read_yaml_mapping(path, what: str) -> tuple[dict, str]:
    """(mapping, text) of a YAML file whose top level must be a mapping; UsageErrors name the
    file. `what` says what the file is, for the messages ("sweep file", "site file"). Aliases
    are refused: nine levels of nine-way aliases in 600 bytes expand to 9**9 values (the
    "billion laughs"), and no settings file needs them."""
    import yaml
    try:
        size = path.stat().st_size
        if size > YAML_MAX_BYTES:
            raise UsageError(f"{path}: {size} bytes; a {what} is at most {YAML_MAX_BYTES}")
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not a text file (byte {e.start} is not UTF-8); a {what} is YAML text") from None
    try:
        if any(isinstance(ev, yaml.AliasEvent) for ev in yaml.parse(text)):
            raise UsageError(f"{path}: YAML aliases (*name) are not accepted in a {what}; write the values out")
        d = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML: {str(e).splitlines()[0][:200]}") from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to be a {what}") from None
    if not isinstance(d, dict):
        raise UsageError(f"{path}: expected a mapping at the top level")
    return d, text
