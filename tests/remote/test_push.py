"""Content-addressed push over a real sshd (and the local transport): skip, verify, resume, faults."""
from __future__ import annotations

import hashlib
import os
import time

import pytest

from tests import tiers
from tests.remote.sshd import DropProxy, needs_sshd, trust
from sdk.errors import BoardConnectionError, ModelNotFoundError, TransferError
from sdk.remote.push import file_sha256, push_file
from sdk.remote.ssh import SSHConnection, resolve_host
from sdk.remote.transport import LocalTransport, SSHTransport


def blob(path, size, seed=0):
    import numpy as np

    path.write_bytes(np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes())
    return path


def ssh_transport(port, retries=0):
    return SSHTransport(SSHConnection(resolve_host("127.0.0.1", port=port), board="loop", retries=retries,
                                      backoff_s=0.01, connect_timeout_s=5))


@pytest.fixture
def model_file(tmp_path):
    return blob(tmp_path / "model.onnx", 3_000_000)


@needs_sshd
@pytest.mark.ssh
def test_push_uploads_verifies_then_skips_in_one_round_trip(client_home, sshd, tmp_path, model_file):
    trust(client_home, sshd)
    wd = tmp_path / "board work"
    sha = file_sha256(model_file)
    with ssh_transport(sshd.port) as tr:
        first = push_file(tr, model_file, str(wd))
        assert not first.skipped and first.bytes_sent == model_file.stat().st_size
        assert first.remote_path == f"{wd}/models/{sha}.onnx"
        on_board = wd / "models" / f"{sha}.onnx"
        assert hashlib.sha256(on_board.read_bytes()).hexdigest() == sha
        assert [p.name for p in (wd / "models").iterdir()] == [on_board.name]     # no temp left
        before = tr.round_trips
        again = push_file(tr, model_file, str(wd))
        assert again.skipped and again.bytes_sent == 0 and again.transfer["skipped"] is True
        assert tr.round_trips - before == 1


@needs_sshd
@pytest.mark.ssh
def test_corrupt_copy_on_the_board_is_replaced(client_home, sshd, tmp_path, model_file):
    trust(client_home, sshd)
    wd = tmp_path / "wd"
    with ssh_transport(sshd.port) as tr:
        pushed = push_file(tr, model_file, str(wd))
        final = wd / "models" / os.path.basename(pushed.remote_path)
        data = bytearray(final.read_bytes())
        data[1000] ^= 0xFF
        final.write_bytes(bytes(data))                      # bit rot on the board
        fixed = push_file(tr, model_file, str(wd))
        assert not fixed.skipped
        assert hashlib.sha256(final.read_bytes()).hexdigest() == pushed.sha256


@needs_sshd
@pytest.mark.ssh
def test_cut_mid_transfer_leaves_nothing_corrupt_and_next_push_succeeds(client_home, sshd, tmp_path):
    trust(client_home, sshd)
    model = blob(tmp_path / "big.onnx", 4_000_000, seed=1)
    sha = file_sha256(model)
    wd = tmp_path / "wd"
    final = wd / "models" / f"{sha}.onnx"
    proxy = DropProxy(sshd.port, drop_after=1_500_000)      # the link dies after ~1.5 MB
    trust(client_home, sshd, port=proxy.port)
    try:
        with ssh_transport(proxy.port) as tr:
            with pytest.raises(BoardConnectionError) as exc:
                push_file(tr, model, str(wd))
        assert str(exc.value).startswith("loop: connection lost while uploading big.onnx")
        assert not final.exists()                           # never a corrupt file under the final name
        parts = list(final.parent.glob(final.name + ".*.part"))   # this upload's own part name, if
        assert len(parts) <= 1 and all(p.stat().st_size < model.stat().st_size for p in parts)  # any byte landed
    finally:
        proxy.close()
    with ssh_transport(sshd.port) as tr:
        again = push_file(tr, model, str(wd))
    # the next push resumes from what survived (all of it verified at the end) or redoes it
    assert again.bytes_sent == model.stat().st_size - again.resumed_from
    assert hashlib.sha256(final.read_bytes()).hexdigest() == sha and not any(p.exists() for p in parts)


@needs_sshd
@pytest.mark.ssh
def test_valid_partial_file_is_resumed(client_home, sshd, tmp_path, model_file):
    trust(client_home, sshd)
    sha = file_sha256(model_file)
    part = tmp_path / "wd" / "models" / f"{sha}.onnx.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(model_file.read_bytes()[:1_234_567])   # what an earlier, cut push left
    os.utime(part, (time.time() - 60, time.time() - 60))     # ... a minute ago (a fresh part may be live)
    with ssh_transport(sshd.port) as tr:
        pushed = push_file(tr, model_file, str(tmp_path / "wd"))
    assert pushed.resumed_from == 1_234_567 and pushed.bytes_sent == model_file.stat().st_size - 1_234_567
    assert hashlib.sha256((part.parent / f"{sha}.onnx").read_bytes()).hexdigest() == sha


@needs_sshd
@pytest.mark.ssh
def test_a_fresh_part_of_another_push_is_left_alone(client_home, sshd, tmp_path, model_file):
    trust(client_home, sshd)
    sha = file_sha256(model_file)
    live = tmp_path / "wd" / "models" / f"{sha}.onnx.0123456789abcdef.part"
    live.parent.mkdir(parents=True)
    live.write_bytes(model_file.read_bytes()[:1_000_000])   # another push, writing right now
    with ssh_transport(sshd.port) as tr:
        pushed = push_file(tr, model_file, str(tmp_path / "wd"))
    assert pushed.resumed_from == 0 and live.stat().st_size == 1_000_000    # not taken over
    assert hashlib.sha256((live.parent / f"{sha}.onnx").read_bytes()).hexdigest() == sha


@needs_sshd
@pytest.mark.ssh
def test_bad_partial_file_is_redone_from_zero(client_home, sshd, tmp_path, model_file):
    trust(client_home, sshd)
    sha = file_sha256(model_file)
    part = tmp_path / "wd" / "models" / f"{sha}.onnx.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"garbage" * 1000)                     # a prefix that is not the model's
    os.utime(part, (time.time() - 60, time.time() - 60))
    with ssh_transport(sshd.port) as tr:
        pushed = push_file(tr, model_file, str(tmp_path / "wd"))
    size = model_file.stat().st_size
    assert pushed.bytes_sent == (size - 7000) + size            # the resumed rest, then everything again
    assert hashlib.sha256((part.parent / f"{sha}.onnx").read_bytes()).hexdigest() == sha
    assert not part.exists()


@needs_sshd
@pytest.mark.ssh
def test_shell_metacharacters_in_file_and_folder_names(client_home, sshd, tmp_path):
    trust(client_home, sshd)
    weird = blob(tmp_path / "m o;d$(touch PWNED)`x`'\"el.onnx", 10_000)
    wd = tmp_path / "w d;$(touch PWNED2)&'q\""
    with ssh_transport(sshd.port) as tr:
        pushed = push_file(tr, weird, str(wd))
        assert push_file(tr, weird, str(wd)).skipped
    assert (wd / "models" / f"{pushed.sha256}.onnx").is_file()
    assert not any(p.name.startswith("PWNED") for p in tmp_path.rglob("*"))


@needs_sshd
@pytest.mark.ssh
def test_unwritable_workdir_is_a_clear_error(client_home, sshd, tmp_path, model_file):
    trust(client_home, sshd)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with ssh_transport(sshd.port) as tr:
        with pytest.raises(TransferError, match="loop: cannot create"):
            push_file(tr, model_file, str(blocker / "wd"))


def test_local_transport_push(tmp_path, monkeypatch, model_file):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    with LocalTransport() as tr:
        first = push_file(tr, model_file, "~/board")         # relative to home, like over SSH
        assert first.remote_path == f"{tmp_path}/home/board/models/{first.sha256}.onnx"
        assert open(first.remote_path, "rb").read() == model_file.read_bytes()
        assert push_file(tr, model_file, "~/board").skipped
        with pytest.raises(ModelNotFoundError):
            push_file(tr, tmp_path / "missing.onnx", "~/board")


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs (needs root and mount rights: the ``tmpfs`` tier)."""
    import subprocess

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode:
        tiers.require_or_skip("tmpfs", f"cannot mount a small tmpfs here (needs root): the full-disk case is not "
                                       f"exercised ({proc.stderr.strip()[:200]})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@needs_sshd
@pytest.mark.ssh
def test_full_disk_is_a_clear_error_and_leaves_nothing(client_home, sshd, tmp_path, tiny_disk, model_file):
    trust(client_home, sshd)
    with ssh_transport(sshd.port) as tr:
        with pytest.raises(TransferError, match=r"loop: not enough space on the board for model.onnx: needs 3.0 MB"):
            push_file(tr, model_file, str(tiny_disk / "wd"))
        # a write the server refuses mid-way (the disk filled up after the check)
        with pytest.raises(TransferError, match="disk full"):
            tr.put(model_file, str(tiny_disk / "wd" / "x.part"))
        assert tr.run("echo alive").ok                       # the connection survives a refused write
    assert not list((tiny_disk / "wd" / "models").iterdir())


def _racing_mkdir(bin_dir, planted):
    """A ``mkdir`` on PATH that loses every race: another push makes the folder (or, ``planted``,
    a link to elsewhere) just before it, then it fails as the real one does (EEXIST)."""
    bin_dir.mkdir()
    make = 'ln -s /tmp "$last"' if planted else '/bin/mkdir "$last"'
    (bin_dir / "mkdir").write_text('#!/bin/sh\nfor last; do :; done\ncase "$1" in -p) exec /bin/mkdir "$@";; esac\n'
                                   f'{make}\necho "mkdir: cannot create directory: File exists" >&2\nexit 1\n')
    (bin_dir / "mkdir").chmod(0o755)


@pytest.mark.parametrize("planted", [False, True])
def test_a_folder_made_by_a_concurrent_push_is_used_not_an_error(tmp_path, monkeypatch, model_file, planted):
    """Eight pushers at once onto a fresh workdir (tests/remote/test_hardening.py) raced on creating
    ``models/``: the loser's mkdir failed and its push said "cannot create". Losing that race to a
    real folder is fine; losing it to a link is the planted-link refusal."""
    _racing_mkdir(tmp_path / "bin", planted)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    wd = tmp_path / "board"
    with LocalTransport() as tr:
        if planted:
            with pytest.raises(TransferError, match="refusing to write into .* is a link"):
                push_file(tr, model_file, str(wd))
            assert (wd / "models").is_symlink() and not list(tmp_path.glob("board/models/*.part"))
        else:
            got = push_file(tr, model_file, str(wd))
            assert open(got.remote_path, "rb").read() == model_file.read_bytes()
