"""Strip machine-specific paths and host names from recorded fixtures before committing them.

    python scripts/scrub_fixture.py SRC DEST [--prefix OLD=NEW ...]

SRC is a session/report JSON or a (gzipped) trace. Interpreter, site-packages and
checkout prefixes become short relative names; the host name is replaced. The
numbers are left exactly as recorded.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

DEFAULT_PREFIXES = [
    (r"/[^\"\s']*/site-packages/", "site-packages/"),
    (r"/[^\"\s']*/bin/python3?(\.\d+)?(?=[\"\s'])", "python3"),
    (r"/[^\"\s']*/(?=gpudoctor-session-)", ""),  # the temporary directory a run's session was written in
]


def scrub(text: str, prefixes: list[tuple[str, str]]) -> str:
    for pattern, replacement in DEFAULT_PREFIXES:
        text = re.sub(pattern, replacement, text)
    for old, new in prefixes:
        text = text.replace(old, new)
    return re.sub(r'("hostname":\s*)"[^"]*"', r'\1"gpu-host"', text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src")
    parser.add_argument("dest")
    parser.add_argument("--prefix", action="append", default=[], metavar="OLD=NEW")
    args = parser.parse_args()
    prefixes = [tuple(p.split("=", 1)) for p in args.prefix]
    src = Path(args.src)
    raw = src.read_bytes()
    zipped = raw[:2] == b"\x1f\x8b"
    text = scrub((gzip.decompress(raw) if zipped else raw).decode(), prefixes)  # type: ignore[arg-type]
    json.loads(text)  # still valid JSON
    data = text.encode()
    Path(args.dest).write_bytes(gzip.compress(data, mtime=0) if zipped else data)


if __name__ == "__main__":
    main()
