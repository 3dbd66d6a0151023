"""No write through a link (issue 27, class 1).

Someone who can write to a shared ``<workdir>`` plants links at every name a push and the board
agent write: a stale ``<sha>.onnx.<token>.part`` that is a symlink (or a hard link) to a file
outside the workdir, a part owned by another account, a link at the final name (to a file and to
a folder), the ``models``/``agent``/``data`` folders themselves as links, and links at the
temporary names of the atomic writer (host caches and reports, the agent's outputs). The file
outside (``victim``) must keep its bytes, nothing may land in the outside folder, and the push
must still deliver a verified model (or refuse with one clear error naming the folder).
Each case runs on a board over a real sshd on loopback and on the ``local`` board."""
from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.tiers import require_or_skip

from sdk.errors import TransferError
from sdk.remote.push import file_sha256, push_file
from sdk.remote.ssh import SSHConnection, resolve_host
from sdk.remote.transport import LocalTransport, SSHTransport
from tests.remote.sshd import SSHD, trust

VICTIM = b"precious bytes outside the workdir\n" * 4


def blob(path: Path, size: int, seed: int = 0) -> Path:
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes())
    return path


@pytest.fixture(params=["ssh", "local"])
def transport(request, tmp_path):
    if request.param == "ssh":
        if SSHD is None:
            require_or_skip("ssh", "no sshd binary found")
        home = request.getfixturevalue("client_home")
        srv = request.getfixturevalue("sshd")
        trust(home, srv)
        tr = SSHTransport(SSHConnection(resolve_host("127.0.0.1", port=srv.port), board="loop", retries=0,
                                        connect_timeout_s=5))
    else:
        tr = LocalTransport("here")
    with tr:
        yield tr


@pytest.fixture
def victim(tmp_path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    v = outside / "victim.txt"
    v.write_bytes(VICTIM)
    old = time.time() - 3600            # looks like a part nobody wrote to for an hour
    os.utime(v, (old, old))
    return v


def _model(tmp_path: Path) -> Path:
    return blob(tmp_path / "model.onnx", 300_000, seed=7)


def _final(wd: Path, model: Path) -> Path:
    return wd / "models" / f"{file_sha256(model)}.onnx"


def _delivered(pushed, model: Path, final: Path) -> None:
    assert final.is_file() and not final.is_symlink()
    assert hashlib.sha256(final.read_bytes()).hexdigest() == file_sha256(model) == pushed.sha256


def test_a_stale_part_that_is_a_symlink_is_not_written_through(transport, tmp_path, victim):
    model, wd = _model(tmp_path), tmp_path / "wd"
    final = _final(wd, model)
    final.parent.mkdir(parents=True)
    link = f"{final}.deadbeefdeadbeef.part"
    os.symlink(victim, link)
    old = time.time() - 3600             # the link itself looks left over from a cut push
    os.utime(link, (old, old), follow_symlinks=False)
    pushed = push_file(transport, model, str(wd))
    assert victim.read_bytes() == VICTIM, "the upload was written through the planted link"
    assert pushed.resumed_from == 0
    _delivered(pushed, model, final)


def test_a_stale_part_that_is_a_hard_link_is_not_adopted(transport, tmp_path, victim):
    model, wd = _model(tmp_path), tmp_path / "wd"
    final = _final(wd, model)
    final.parent.mkdir(parents=True)
    os.link(victim, f"{final}.cafecafecafecafe.part")
    pushed = push_file(transport, model, str(wd))
    assert victim.read_bytes() == VICTIM, "the upload was written into a hard link of a file outside"
    assert pushed.resumed_from == 0
    _delivered(pushed, model, final)


def test_a_stale_part_of_another_account_is_not_adopted(transport, tmp_path):
    if os.geteuid() != 0:   # no file of another account can be planted: check the rule on one that exists
        from sdk.remote.push import _OWN_FILE_SH

        foreign = next(p for p in ("/etc/passwd", "/etc/hostname", "/bin/sh") if os.stat(p).st_uid != os.geteuid())
        assert transport.run(f"p={foreign}; {_OWN_FILE_SH}").returncode != 0
        return
    model, wd = _model(tmp_path), tmp_path / "wd"
    final = _final(wd, model)
    final.parent.mkdir(parents=True)
    foreign = Path(f"{final}.0badc0de0badc0de.part")
    foreign.write_bytes(model.read_bytes()[:100_000])
    os.chown(foreign, 65534, 65534)
    old = time.time() - 3600
    os.utime(foreign, (old, old))
    pushed = push_file(transport, model, str(wd))
    assert pushed.resumed_from == 0 and foreign.exists() and foreign.stat().st_uid == 65534
    _delivered(pushed, model, final)


def test_a_link_at_the_final_name_is_replaced_not_followed(transport, tmp_path, victim):
    model, wd = _model(tmp_path), tmp_path / "wd"
    final = _final(wd, model)
    final.parent.mkdir(parents=True)
    os.symlink(victim, final)
    pushed = push_file(transport, model, str(wd))
    assert victim.read_bytes() == VICTIM
    _delivered(pushed, model, final)


def test_a_link_to_a_folder_at_the_final_name_gets_nothing_moved_into_it(transport, tmp_path, victim):
    model, wd = _model(tmp_path), tmp_path / "wd"
    final = _final(wd, model)
    final.parent.mkdir(parents=True)
    os.symlink(victim.parent, final)
    pushed = push_file(transport, model, str(wd))
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"], "a part was moved into the folder"
    _delivered(pushed, model, final)


@pytest.mark.parametrize("kind", ["models", "agent", "data"])
def test_a_kind_folder_that_is_a_link_is_refused(transport, tmp_path, victim, kind):
    model, wd = _model(tmp_path), tmp_path / "wd"
    wd.mkdir()
    os.symlink(victim.parent, wd / kind)
    with pytest.raises(TransferError, match=f"refusing to write into .*{kind}.*is a link"):
        push_file(transport, model, str(wd), kind=kind)
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]


def test_a_kind_folder_inside_a_linked_subfolder_is_refused(transport, tmp_path, victim):
    """models/<key>/ of a model with external data: a link one level up is caught too."""
    model, wd = _model(tmp_path), tmp_path / "wd"
    (wd / "models").mkdir(parents=True)
    os.symlink(victim.parent, wd / "models" / "k")
    with pytest.raises(TransferError, match="refusing to write into .*models/k/sub"):
        push_file(transport, model, str(wd), kind="models/k/sub", name="m.onnx")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]


# -- the atomic writer: host caches, reports, the agent's outputs -------------------------------------
def _plant_tmp_names(dst: Path, victim: Path) -> None:
    """Links at every temporary name the writer of ``dst`` could pick from this process and thread."""
    for suffix in ("", ".npz", ".part"):
        os.symlink(victim, dst.with_name(".%s.tmp%d-%d%s" % (dst.name, os.getpid(), threading.get_ident(), suffix)))


def test_the_atomic_writer_never_writes_through_a_planted_link(tmp_path, victim):
    from sdk.atomic import atomic_path, atomic_write

    dst = tmp_path / "shared" / "report.json"
    dst.parent.mkdir()
    _plant_tmp_names(dst, victim)
    os.symlink(victim, dst)
    atomic_write(dst, "{}\n")
    assert victim.read_bytes() == VICTIM and dst.read_text() == "{}\n" and not dst.is_symlink()
    stats = tmp_path / "shared" / "stats.npz"
    _plant_tmp_names(stats, victim)
    with atomic_path(stats, suffix=".npz") as tmp:
        np.savez(tmp, a=np.arange(3))
    assert victim.read_bytes() == VICTIM and np.load(stats)["a"].tolist() == [0, 1, 2]
    left = [p.name for p in dst.parent.iterdir() if p.name.startswith(".") and not p.is_symlink()]
    assert left == [], left


def test_the_agents_outputs_are_never_written_through_a_planted_link(tmp_path, victim, example_model):
    from sdk.remote.agent.commands import infer
    from sdk.data import save_npz

    data = tmp_path / "wd" / "data"
    data.mkdir(parents=True)
    inputs = save_npz(data / "in.npz", {"image": np.zeros((2, 1, 8, 8), np.float32)})
    out = data / "out-1.npz"
    _plant_tmp_names(out, victim)
    os.symlink(victim, out)
    doc = infer({"model_path": str(example_model), "inputs_npz": str(inputs), "outputs_npz": str(out)})
    assert victim.read_bytes() == VICTIM
    assert not out.is_symlink() and doc["samples"] == 2
    with np.load(out) as z:
        assert len(z.files) >= 1
