"""Content-addressed upload: ``<workdir>/<kind>/<sha256>.<ext>`` on the board.

One round trip decides: the file is there and its sha256 (computed on the board) matches ->
nothing is sent. Otherwise the bytes go to ``<final>.<token>.part``, a name of this upload alone
(a part left by a cut push is resumed after claiming it with an atomic ``mv``), the board
verifies the sha256 of the part, and renames it into place atomically (``mv`` within one
folder). Concurrent pushes of the same file never share a part; the bytes are content-addressed,
so a claimed part that its first writer still appends to only ever receives the same bytes at
the same offsets. An interrupted push never leaves a corrupt file under the final name; a part
that fails verification is deleted and the upload redone once from zero.

Nothing is written through a link planted in a shared workdir: the ``<kind>`` folder must be a
real folder inside the workdir (not a link, its resolved path under the workdir's), a stale part
is adopted only when it is a regular file owned by the pushing account with one link, a new part
is created exclusively (``O_EXCL``: never through an existing name), a resumed one is checked
after it is opened (the opened file is the regular file at that name), and a link at the final
name is replaced, never followed.
"""
from __future__ import annotations

import os
import secrets
import shlex
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ..errors import BoardConnectionError, ModelNotFoundError, TransferError
from .transport import SHA256_SH, Transport

__all__ = ["Pushed", "push_file", "push_model_files", "file_sha256", "remote_path_for"]

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
    external_data: List[Dict[str, Any]] = field(default_factory=list)   # files the model loads (ONNX)

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


def _probe_script(final: str, folder: str, root: Optional[str] = None) -> str:
    """One round trip: the board's $HOME, the sha256 of ``final`` when it exists, every part
    file of it (``<final>.<token>.part``, and ``<final>.part`` of older versions) with its size,
    and the free space of ``folder`` (created)."""
    f, d = (shlex.quote(x) for x in (final, folder))
    w = shlex.quote(root if root is not None else (folder.rsplit("/", 1)[0] if "/" in folder else "."))
    return "; ".join([
        SHA256_SH,
        'printf "home=%s\\n" "$HOME"',
        f'if [ -f {f} ] && [ ! -L {f} ]; then printf "final=%s\\n" "$(_sha256 < {f})"; fi',
        'printf "now=%s\\n" "$(date +%s)"',
        f'for p in {f}.*.part {f}.part; do {_OWN_FILE_SH} && printf "part=%s\\t%s\\t%s\\n" "$(wc -c < "$p" | tr -d " ")" '
        '"$(stat -c %Y "$p" 2>/dev/null || date -r "$p" +%s)" "$p"; done',
        # the kind folder: each level below the workdir a real folder (checked before it is used or
        # created: mkdir never runs through a link), and inside the workdir once links are resolved;
        # a mkdir that fails because a concurrent push made the folder first is fine (if a real folder)
        f'_ok=1; if mkdir -p {w}; then for c in {_levels(folder, root)}; do '
        'if [ -L "$c" ] || { [ -e "$c" ] && [ ! -d "$c" ]; }; then _ok=link; break; fi; '
        '{ [ -d "$c" ] || mkdir "$c" 2>/dev/null || { [ -d "$c" ] && [ ! -L "$c" ]; }; } || '
        '{ [ -L "$c" ] && _ok=link || _ok=; break; }; done; else _ok=; fi',
        f'if [ "$_ok" = link ]; then printf "folder_bad=%s\\n" "is a link or not a folder"; '
        f'elif [ -n "$_ok" ]; then case "$(cd {d} && pwd -P)/" in "$(cd {w} && pwd -P)"/*) ;; '
        f'*) printf "folder_bad=%s\\n" "resolves outside the workdir";; esac; fi',
        f'if [ -n "$_ok" ]; then printf "free_kb=%s\\n" "$(df -Pk {d} | awk \'NR==2{{print $4}}\')"; fi',
    ])


def _levels(folder: str, root: Optional[str]) -> str:
    """The folders from just below ``root`` down to ``folder``, shell-quoted (``root/a root/a/b``)."""
    base = (root or "").rstrip("/")
    rel = folder[len(base) + 1:] if base and folder.startswith(base + "/") else None
    if rel is None:
        return shlex.quote(folder)
    parts = [p for p in rel.split("/") if p]
    return " ".join(shlex.quote(f"{base}/{'/'.join(parts[:i + 1])}") for i in range(len(parts)))


#: sh test of ``$p``: a regular file (not a link), owned by this account, one hard link: a part
#: another account planted (a link to a file elsewhere, a hard link, its own file) is not adopted.
_OWN_FILE_SH = '[ -f "$p" ] && [ ! -L "$p" ] && [ -O "$p" ] && [ "$(stat -c %h "$p" 2>/dev/null || echo 1)" = 1 ]'


def _claim_script(candidate: str, part: str) -> str:
    """Take over a part left by another push: an atomic rename, so of several pushes that want it
    one gets it and the others start their own. Prints the size it has now."""
    c, p = shlex.quote(candidate), shlex.quote(part)
    check = _OWN_FILE_SH.replace('"$p"', p)
    return (f'[ ! -L {c} ] && mv -- {c} {p} 2>/dev/null && {{ {check} || {{ rm -f -- {p}; exit 5; }}; }} && '
            f'touch -- {p} && wc -c < {p} | tr -d " "')


def _commit_script(final: str, part: str, sha256: str) -> str:
    """Verify ``part`` and rename it into place. When ``part`` is gone (another push of the same
    bytes claimed it, and commits it), a verified ``final`` is success too; else ``vanished``
    (exit 4). A part with other bytes is removed (``mismatch``, exit 3)."""
    f, p = shlex.quote(final), shlex.quote(part)
    return (f'{SHA256_SH}; h=; if [ -f {p} ] && [ ! -L {p} ]; then h=$(_sha256 < {p} 2>/dev/null) || h=; fi; '
            f'if [ "$h" = {sha256} ] && {{ [ ! -L {f} ] || rm -f -- {f}; }} && mv -f -- {p} {f} 2>/dev/null; '
            'then echo ok; exit 0; fi; '
            f'if [ -f {f} ] && [ ! -L {f} ] && [ "$(_sha256 < {f})" = {sha256} ]; then rm -f {p}; echo ok; exit 0; fi; '
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
              home_cb: Optional[Callable[[str], None]] = None, name: Optional[str] = None) -> Pushed:
    """Upload ``local`` to ``<workdir>/<kind>/<sha256><ext>`` (or ``<workdir>/<kind>/<name>``)
    unless it is there and verified. ``home_cb`` receives the board's ``$HOME`` (learnt in the
    same round trip).

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
    final = remote_path_for(wd, kind, sha, ext) if name is None else f"{folder}/{name}"
    part = f"{final}.{secrets.token_hex(8)}.part"
    start = time.monotonic()

    probe = transport.run(_probe_script(final, folder, wd.rstrip("/") or "/"), timeout_s=120)
    facts = _parse_kv(probe.text())
    home = facts.get("home") or ""
    if home_cb and home:
        home_cb(home)
    absolute = final if final.startswith("/") or not home else f"{home.rstrip('/')}/{final}"
    if "free_kb" not in facts:
        raise TransferError(f"cannot create {folder} on the board ({probe.error_text()})",
                            "check the profile's workdir and its permissions", board=transport.board)
    if "folder_bad" in facts:
        raise TransferError(f"refusing to write into {folder} on the board: it {facts['folder_bad']} "
                            "(a link planted in a shared workdir could aim the upload at any file)",
                            f"remove {folder} on the board (it is a cache) or use a workdir only you can write",
                            board=transport.board)
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


def push_model_files(transport: Transport, local: Union[str, os.PathLike], workdir: str,
                     external: List[Tuple[str, Path]], *, progress: Optional[Progress] = None,
                     home_cb: Optional[Callable[[str], None]] = None) -> Pushed:
    """A model and the files it loads (ONNX external data: ``[(location, path)]``, locations
    inside the model's folder) into one folder ``<workdir>/models/<key>/``, the model under its
    own name and each file at its location, so the runtime finds them as on the host. ``key``
    is the sha256 of the model's and every file's sha256 (content-addressed like a single model:
    other weights, another folder). Each file is uploaded like :func:`push_file` (verified,
    resumable, never through a link). Returns the model's :class:`Pushed` (``external_data``
    lists the files, ``bytes_sent``/``seconds`` cover them all)."""
    import hashlib

    local = Path(local)
    if not local.is_file():
        raise ModelNotFoundError(f"'{local}' does not exist or is not a file")
    shas = [(loc, file_sha256(p)) for loc, p in external]
    h = hashlib.sha256(f"{local.name}\0{file_sha256(local)}\n".encode())
    for loc, sha in shas:
        h.update(f"{loc}\0{sha}\n".encode())
    key = h.hexdigest()
    start = time.monotonic()
    extra = []
    for loc, path in external:
        sub, _, base = loc.rpartition("/")
        got = push_file(transport, path, workdir, kind=f"models/{key}" + (f"/{sub}" if sub else ""), name=base,
                        progress=progress, home_cb=home_cb)
        extra.append(got)
    model = push_file(transport, local, workdir, kind=f"models/{key}", name=local.name, progress=progress,
                      home_cb=home_cb)
    model.external_data = [{"location": loc, "sha256": p.sha256, "size_bytes": p.size_bytes,
                            "remote_path": p.remote_path, "skipped": p.skipped}
                           for (loc, _), p in zip(external, extra)]
    model.bytes_sent += sum(p.bytes_sent for p in extra)
    model.seconds = time.monotonic() - start
    model.skipped = model.skipped and all(p.skipped for p in extra)
    return model


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
            if 0 < int(got) <= size:
                return int(got)
            transport.run(["rm", "-f", part], timeout_s=60)   # nothing usable: the new part is created afresh
            return 0
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
