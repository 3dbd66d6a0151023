"""Content-addressed upload: ``<workdir>/<kind>/<sha256>.<ext>`` on the board.

One round trip decides: the file is there and its sha256 (computed on the board) matches ->
nothing is sent. Otherwise the bytes go to ``<final>.<token>.part``, a name of this upload alone
(a part left by a cut push is resumed after claiming it with an atomic ``mv``), the board
verifies the sha256 of the part, and renames it into place atomically (``mv`` within one
folder). Concurrent pushes of the same file never share a part; the bytes are content-addressed,
so a claimed part that its first writer still appends to only ever receives the same bytes at
the same offsets. An interrupted push never leaves a corrupt file under the final name; a part
that fails verification is deleted and the upload redone once from zero.
"""
from __future__ import annotations

import os
import secrets
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ..errors import BoardConnectionError, ModelNotFoundError, TransferError
from .transport import SHA256_SH, Transport

__all__ = ["Pushed", "push_file", "file_sha256", "remote_path_for"]

Progress = Callable[[int, int], None]
_SHA_CACHE: Dict[tuple, str] = {}
STALE_PART_S = 10       # a part nobody wrote to for this long is left over from a cut push: resumable
_LEFT: Dict[Tuple[str, str], str] = {}     # (board, final) -> the part a cut upload of this process left


def file_sha256(path: Union[str, os.PathLike]) -> str:
    """Hex sha256 of a local file (cached by path, size and mtime)."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        from ..digest import file_sha256 as digest

        _SHA_CACHE[key] = digest(p)
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


def _probe_script(final: str, folder: str) -> str:
    """One round trip: the board's $HOME, the sha256 of ``final`` when it exists, every part
    file of it (``<final>.<token>.part``, and ``<final>.part`` of older versions) with its size,
    and the free space of ``folder`` (created)."""
    f, d = (shlex.quote(x) for x in (final, folder))
    return "; ".join([
        SHA256_SH,
        'printf "home=%s\\n" "$HOME"',
        f'if [ -f {f} ]; then printf "final=%s\\n" "$(_sha256 < {f})"; fi',
        'printf "now=%s\\n" "$(date +%s)"',
        f'for p in {f}.*.part {f}.part; do [ -f "$p" ] && printf "part=%s\\t%s\\t%s\\n" "$(wc -c < "$p" | tr -d " ")" '
        '"$(stat -c %Y "$p" 2>/dev/null || date -r "$p" +%s)" "$p"; done',
        f'mkdir -p {d} && printf "free_kb=%s\\n" "$(df -Pk {d} | awk \'NR==2{{print $4}}\')"',
    ])


def _claim_script(candidate: str, part: str) -> str:
    """Take over a part left by another push: an atomic rename, so of several pushes that want it
    one gets it and the others start their own. Prints the size it has now."""
    c, p = shlex.quote(candidate), shlex.quote(part)
    return f'mv -- {c} {p} 2>/dev/null && touch -- {p} && wc -c < {p} | tr -d " "'


def _commit_script(final: str, part: str, sha256: str) -> str:
    """Verify ``part`` and rename it into place. When ``part`` is gone (another push of the same
    bytes claimed it, and commits it), a verified ``final`` is success too; else ``vanished``
    (exit 4). A part with other bytes is removed (``mismatch``, exit 3)."""
    f, p = shlex.quote(final), shlex.quote(part)
    return (f'{SHA256_SH}; h=$(_sha256 < {p} 2>/dev/null) || h=; '
            f'if [ "$h" = {sha256} ] && mv -f {p} {f} 2>/dev/null; then echo ok; exit 0; fi; '
            f'if [ -f {f} ] && [ "$(_sha256 < {f})" = {sha256} ]; then rm -f {p}; echo ok; exit 0; fi; '
            f'if [ -n "$h" ] && [ -f {p} ]; then rm -f {p}; echo "mismatch $h"; exit 3; fi; '
            'echo vanished; exit 4')


def _parts(text: str, now: Optional[int]) -> List[Tuple[int, str]]:
    """``part=<size>\t<mtime>\t<path>`` lines -> [(size, path)] of the parts nobody has written to
    for ``STALE_PART_S`` (a live upload touches its part with every write), largest first."""
    out = []
    for line in text.splitlines():
        if line.startswith("part="):
            size, mtime, path = (line[len("part="):].split("\t", 2) + ["", ""])[:3]
            if size.isdigit() and mtime.isdigit() and path and now is not None and now - int(mtime) >= STALE_PART_S:
                out.append((int(size), path))
    return sorted(out, reverse=True)


def _parse_kv(text: str) -> Dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def push_file(transport: Transport, local: Union[str, os.PathLike], workdir: str, *, kind: str = "models",
              ext: Optional[str] = None, progress: Optional[Progress] = None,
              home_cb: Optional[Callable[[str], None]] = None) -> Pushed:
    """Upload ``local`` to ``<workdir>/<kind>/<sha256><ext>`` unless it is there and verified.
    ``home_cb`` receives the board's ``$HOME`` (learnt in the same round trip).

    Any number of pushes of the same or different files to one board may run at once: each
    writes its own ``<final>.<token>.part``; a part left by a cut push is resumed by claiming it
    with an atomic rename; the final name only ever receives a verified file (``mv`` in one folder)."""
    local = Path(local)
    if not local.is_file():
        raise ModelNotFoundError(f"'{local}' does not exist or is not a file")
    sha = file_sha256(local)
    size = local.stat().st_size
    ext = local.suffix if ext is None else ext
    wd = _home_relative(workdir)
    folder = f"{wd.rstrip('/')}/{kind}"
    final = remote_path_for(wd, kind, sha, ext)
    part = f"{final}.{secrets.token_hex(8)}.part"
    start = time.monotonic()

    probe = transport.run(_probe_script(final, folder), timeout_s=120)
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
    now = facts.get("now", "")
    candidates = _parts(probe.text(), int(now) if now.isdigit() else None)
    mine = _LEFT.pop((transport.board, final), None)      # our own cut upload: resumable at once
    if mine is not None:
        candidates.insert(0, (size, mine))
    offset = _claim(transport, candidates, part, size)
    _check_space(transport, facts, size - offset, local.name, folder)
    sent, offset = _upload(transport, local, final, part, sha, offset, progress)
    return Pushed(str(local), absolute, sha, size, sent, time.monotonic() - start, False, offset)


def _upload(transport: Transport, local: Path, final: str, part: str, sha: str, offset: int,
            progress: Optional[Progress]) -> Tuple[int, int]:
    """Send ``local`` into ``part`` from ``offset`` and commit it to ``final`` once verified; one
    retry from zero when a resumed part was taken or bad. Returns ``(bytes sent, offset resumed from)``."""
    sent = 0
    for attempt in range(2):
        try:
            sent += transport.put(local, part, offset=offset, progress=progress)
        except TransferError:
            transport.run(["rm", "-f", part], timeout_s=60)   # a refused write (disk full): free the space
            if offset == 0 or attempt == 1:
                raise
            offset = 0      # the claimed part was taken over again before it was opened: start afresh
            continue
        except BoardConnectionError:
            _LEFT[(transport.board, final)] = part             # the link was cut: resume from it next time
            raise
        commit = transport.run(_commit_script(final, part, sha), timeout_s=600)
        if commit.ok:
            return sent, offset
        if (offset == 0 and "vanished" not in commit.text()) or attempt == 1:
            raise TransferError(f"{local.name} arrived corrupt on the board (sha256 {commit.error_text()}, "
                                f"expected {sha}); the partial file was removed", "push again",
                                board=transport.board)
        offset = 0   # the resumed part was bad, or another push's cleanup took it: redo from zero
    raise AssertionError("unreachable")  # pragma: no cover


def _claim(transport: Transport, parts: List[Tuple[int, str]], part: str, size: int) -> int:
    """Resume from the largest part of the same file left on the board, if one can be claimed;
    returns the offset to upload from (0: start afresh)."""
    for have, candidate in parts:
        if not 0 < have <= size:
            continue
        r = transport.run(_claim_script(candidate, part), timeout_s=60)
        got = r.text().strip()
        if r.ok and got.isdigit():
            return int(got) if int(got) <= size else 0
    return 0


def _check_space(transport: Transport, facts: Mapping[str, str], need: int, name: str, folder: str) -> None:
    try:
        free = int(facts["free_kb"]) * 1024
    except ValueError:
        return
    if free < need:
        raise TransferError(f"not enough space on the board for {name}: needs {need / 1e6:.1f} MB "
                            f"in {folder}, {free / 1e6:.1f} MB free", "free some space (or point workdir elsewhere)",
                            board=transport.board)
