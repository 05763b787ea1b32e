"""Write the published JSON Schemas (gpudoctor/schemas/*.schema.json) from the typed models.

Run after changing gpudoctor/verdict/report_model.py, diff/diff_model.py or sweep/sweep_model.py:

    python scripts/write_schemas.py          # rewrite the files
    python scripts/write_schemas.py --check  # exit 1 when a committed file is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpudoctor import schemas

OUT = Path(schemas.__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a file differs")
    args = parser.parse_args(argv)
    stale = []
    for name, generate in schemas.GENERATED.items():
        path = OUT / name
        want = schemas.text(generate())
        have = path.read_text(encoding="utf-8") if path.exists() else None
        if have == want:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(want, encoding="utf-8")
            print(f"wrote {path.name}", file=sys.stderr)
    if args.check and stale:
        print(f"stale: {', '.join(stale)} (run scripts/write_schemas.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
