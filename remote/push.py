"""Content-addressed upload: ``<workdir>/<kind>/<sha256>.<ext>`` on the board.

One round trip decides: the file is there and its sha256 (computed on the board) matches ->
nothing is sent. Otherwise the bytes go to ``<final>.part`` (resumed when a previous push was cut),
the board verifies the sha256 of the part, and renames it into place atomically (``mv`` within one
folder). An interrupted push never leaves a corrupt file under the final name; a part that fails
verification is deleted and the upload redone once from zero.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

from ..errors import ModelNotFoundError, TransferError
from .transport import SHA256_SH, Transport

__all__ = ["Pushed", "push_file", "file_sha256", "remote_path_for"]

Progress = Callable[[int, int], None]
_SHA_CACHE: Dict[tuple, str] = {}


def file_sha256(path: Union[str, os.PathLike]) -> str:
    """Hex sha256 of a local file (cached by path, size and mtime)."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


@dataclass
class Pushed:
    """A file on the board: ``remote_path`` (absolute when the board's home was known),
    ``sha256``, ``size_bytes``; ``transfer``: bytes sent, seconds, skipped, resumed_from."""

    local_path: str
    remote_path: str
    sha256: str
    size_bytes: int
    bytes_sent: int
    seconds: float
    skipped: bool
    resumed_from: int = 0

    @property
    def transfer(self) -> Dict[str, Any]:
        return {"bytes_sent": self.bytes_sent, "seconds": self.seconds, "skipped": self.skipped,
                "resumed_from": self.resumed_from}

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def remote_path_for(workdir: str, kind: str, sha256: str, ext: str) -> str:
    return f"{workdir.rstrip('/')}/{kind}/{sha256}{ext}"


def _home_relative(path: str) -> str:
    """``~/x`` -> ``x``: commands and SFTP both start in the login home, and quoting stops ``~``."""
    if path == "~":
        return "."
    return path[2:] if path.startswith("~/") else path


def _probe_script(final: str, part: str, folder: str) -> str:
    f, p, d = (shlex.quote(x) for x in (final, part, folder))
    return "; ".join([
        SHA256_SH,
        'printf "home=%s\\n" "$HOME"',
        f'if [ -f {f} ]; then printf "final=%s\\n" "$(_sha256 < {f})"; fi',
        f'if [ -f {p} ]; then printf "part=%s\\n" "$(wc -c < {p} | tr -d " ")"; fi',
        f'mkdir -p {d} && printf "free_kb=%s\\n" "$(df -Pk {d} | awk \'NR==2{{print $4}}\')"',
    ])


def _commit_script(final: str, part: str, sha256: str) -> str:
    f, p = shlex.quote(final), shlex.quote(part)
    return (f'{SHA256_SH}; h=$(_sha256 < {p}); if [ "$h" = {sha256} ]; then mv -f {p} {f} && echo ok; '
            f'else rm -f {p}; echo "mismatch $h"; exit 3; fi')


def _parse_kv(text: str) -> Dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def push_file(transport: Transport, local: Union[str, os.PathLike], workdir: str, *, kind: str = "models",
              ext: Optional[str] = None, progress: Optional[Progress] = None, home_cb: Optional[Callable[[str], None]] = None) -> Pushed:
    """Upload ``local`` to ``<workdir>/<kind>/<sha256><ext>`` unless it is there and verified.
    ``home_cb`` receives the board's ``$HOME`` (learnt in the same round trip)."""
    local = Path(local)
    if not local.is_file():
        raise ModelNotFoundError(f"'{local}' does not exist or is not a file")
    sha = file_sha256(local)
    size = local.stat().st_size
    ext = local.suffix if ext is None else ext
    wd = _home_relative(workdir)
    folder = f"{wd.rstrip('/')}/{kind}"
    final = remote_path_for(wd, kind, sha, ext)
    part = final + ".part"
    start = time.monotonic()

    probe = transport.run(_probe_script(final, part, folder), timeout_s=120)
    facts = _parse_kv(probe.text())
    home = facts.get("home") or ""
    if home_cb and home:
        home_cb(home)
    absolute = final if final.startswith("/") or not home else f"{home.rstrip('/')}/{final}"
    if "free_kb" not in facts:
        raise TransferError(f"cannot create {folder} on the board ({probe.error_text()})",
                            "check the profile's workdir and its permissions", board=transport.board)
    if facts.get("final") == sha:
        return Pushed(str(local), absolute, sha, size, 0, time.monotonic() - start, True)

    part_size = int(facts.get("part", "0") or 0)
    offset = part_size if 0 < part_size <= size else 0
    try:
        free = int(facts["free_kb"]) * 1024
    except ValueError:
        free = None
    if free is not None and free < size - offset:
        raise TransferError(f"not enough space on the board for {local.name}: needs {(size - offset) / 1e6:.1f} MB "
                            f"in {folder}, {free / 1e6:.1f} MB free", "free some space (or point workdir elsewhere)",
                            board=transport.board)
    sent = 0
    for attempt in range(2):
        try:
            sent += transport.put(local, part, offset=offset, progress=progress)
        except TransferError:
            transport.run(["rm", "-f", part], timeout_s=60)   # a refused write (disk full): free the space
            raise
        commit = transport.run(_commit_script(final, part, sha), timeout_s=600)
        if commit.ok:
            return Pushed(str(local), absolute, sha, size, sent, time.monotonic() - start, False, offset)
        if offset == 0 or attempt == 1:
            raise TransferError(f"{local.name} arrived corrupt on the board (sha256 {commit.error_text()}, "
                                f"expected {sha}); the partial file was removed", "push again",
                                board=transport.board)
        offset = 0   # the resumed part was bad: redo from zero
    raise AssertionError("unreachable")  # pragma: no cover
