"""sdk.atomic: the one atomic write of the project (JSON, reports, models, stats, agent files)."""
from __future__ import annotations

import numpy as np
import pytest

from sdk.atomic import atomic_path, atomic_write


def test_atomic_write_text_bytes_mode(tmp_path):
    p = atomic_write(tmp_path / "sub" / "a.json", '{"x": "é"}\n')
    assert p.read_text(encoding="utf-8") == '{"x": "é"}\n'
    atomic_write(p, b"\x00\x01", mode=0o755)
    assert p.read_bytes() == b"\x00\x01" and (p.stat().st_mode & 0o777) == 0o755
    assert sorted(x.name for x in p.parent.iterdir()) == ["a.json"]  # no temporary file left


def test_failed_write_keeps_the_old_file_and_leaves_nothing(tmp_path):
    p = atomic_write(tmp_path / "stats.npz", b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(p, suffix=".npz") as tmp:
            np.savez(tmp, a=np.arange(3))
            assert tmp.exists() and tmp.suffix == ".npz"
            raise RuntimeError("writer failed midway")
    assert p.read_bytes() == b"old" and [x.name for x in tmp_path.iterdir()] == ["stats.npz"]
    with atomic_path(p, suffix=".npz") as tmp:
        np.savez(tmp, a=np.arange(3))
    with np.load(p) as z:
        assert z["a"].tolist() == [0, 1, 2]
