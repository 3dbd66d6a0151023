"""SSH against a real OpenSSH server on loopback: host keys, config aliases, jump hosts, faults."""
from __future__ import annotations

import os
import shutil

import pytest

from tests.remote.sshd import DropProxy, free_port, keygen, needs_sshd, trust
from sdk.errors import AuthenticationError, BoardConnectionError, ConfigError, HostKeyError, RemoteCommandError
from sdk.remote.ssh import STDERR_KEEP_BYTES, SSHConnection, resolve_host
from sdk.remote.transport import SSHTransport

pytestmark = [needs_sshd, pytest.mark.ssh]


def connect(port, **kw):
    kw.setdefault("retries", 0)
    return SSHConnection(resolve_host("127.0.0.1", port=port), board="loop", **kw)


def test_run_drains_both_streams_and_returns_status(client_home, sshd):
    trust(client_home, sshd)
    with connect(sshd.port) as conn:
        # 3 MB on each stream: a client that does not drain while waiting would hang here; of stderr
        # only the last STDERR_KEEP_BYTES are kept (a board cannot fill the host's memory with it)
        r = conn.run("head -c 3000000 /dev/zero; head -c 2999999 /dev/zero >&2; echo END >&2; exit 7", timeout_s=60)
        assert (r.returncode, len(r.stdout)) == (7, 3000000)
        assert STDERR_KEEP_BYTES <= len(r.stderr) <= 2 * STDERR_KEEP_BYTES and r.stderr.endswith(b"\0END\n"), \
            len(r.stderr)
        r = conn.run("cat", input=b"hello board", timeout_s=10)
        assert r.ok and r.stdout == b"hello board"


def test_command_timeout_is_one_clear_error(client_home, sshd):
    trust(client_home, sshd)
    with connect(sshd.port) as conn:
        with pytest.raises(RemoteCommandError, match="loop: command timed out after 1 s"):
            conn.run("sleep 30", timeout_s=1)
        assert conn.run("echo still-alive").text().strip() == "still-alive"


def test_unknown_host_key_is_refused_then_trusted_on_first_use(client_home, sshd):
    with pytest.raises(HostKeyError) as exc:
        connect(sshd.port).connect()
    assert "unknown host key" in str(exc.value) and "SHA256:" in str(exc.value) and "--trust-new-host" in str(exc.value)
    assert not (client_home / ".ssh" / "known_hosts").exists()
    with connect(sshd.port, trust_new_host=True) as conn:
        assert conn.run("true").ok
    recorded = (client_home / ".ssh" / "known_hosts").read_text()
    assert recorded.startswith(f"[127.0.0.1]:{sshd.port} ssh-ed25519 ")
    with connect(sshd.port) as conn:          # now known: no opt-in needed
        assert conn.run("true").ok


def test_profile_known_hosts_file_is_used_and_recorded(client_home, sshd, tmp_path):
    kh = tmp_path / "lab_known_hosts"
    target = resolve_host("127.0.0.1", port=sshd.port, known_hosts=str(kh))
    with SSHConnection(target, trust_new_host=True, retries=0) as conn:
        assert conn.run("true").ok
    assert kh.read_text().startswith(f"[127.0.0.1]:{sshd.port} ")
    assert not (client_home / ".ssh" / "known_hosts").exists()
    with SSHConnection(resolve_host("127.0.0.1", port=sshd.port, known_hosts=str(kh)), retries=0) as conn:
        assert conn.run("true").ok


def test_changed_host_key_is_always_refused(client_home, sshd, tmp_path):
    other = keygen(tmp_path / "other_host_key")
    kind, b64 = other.with_suffix(".pub").read_text().split()[:2]
    (client_home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{sshd.port} {kind} {b64}\n")
    for trust_new in (False, True):
        with pytest.raises(HostKeyError) as exc:
            connect(sshd.port, trust_new_host=trust_new).connect()
        assert "CHANGED" in str(exc.value) and "ssh-keygen -R" in str(exc.value)


def test_ssh_config_alias_is_applied(client_home, sshd, tmp_path):
    key = client_home / ".ssh" / "lab_key"
    shutil.move(client_home / ".ssh" / "id_ed25519", key)     # only reachable through IdentityFile
    trust(client_home, sshd)
    (client_home / ".ssh" / "config").write_text(
        f"Host nx-lab\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {os.environ.get('USER') or 'root'}\n"
        f"  IdentityFile {key}\n")
    target = resolve_host("nx-lab")
    assert (target.hostname, target.port, target.identity_files) == ("127.0.0.1", sshd.port, [str(key)])
    with SSHConnection(target, retries=0) as conn:
        assert conn.run("echo via-alias").text().strip() == "via-alias"


def test_jump_host_through_direct_tcpip(client_home, sshd, sshd_factory):
    jump = sshd_factory()
    trust(client_home, sshd)
    trust(client_home, jump)
    counter = DropProxy(jump.port)            # counts the connections that reach the jump host
    try:
        (client_home / ".ssh" / "config").write_text(
            f"Host bastion\n  HostName 127.0.0.1\n  Port {counter.port}\n"
            f"Host behind\n  HostName 127.0.0.1\n  Port {sshd.port}\n  ProxyJump bastion\n")
        trust(client_home, jump, port=counter.port)     # the jump is seen on the proxy's port
        target = resolve_host("behind")
        assert target.jump is not None and target.jump.port == counter.port
        with SSHConnection(target, retries=0) as conn:
            assert conn.run("echo behind").text().strip() == "behind"
        assert counter.connections == 1
        # the profile's jump key works the same (user@host:port form)
        target = resolve_host("127.0.0.1", port=sshd.port, jump=f"127.0.0.1:{counter.port}")
        with SSHConnection(target, retries=0) as conn:
            assert conn.run("true").ok
        assert counter.connections == 2
    finally:
        counter.close()


def test_refused_auth_is_one_clear_error(client_home, sshd, tmp_path):
    trust(client_home, sshd)
    stranger = keygen(tmp_path / "stranger")
    for f in ("id_ed25519", "id_ed25519.pub"):
        os.remove(client_home / ".ssh" / f)
    target = resolve_host("127.0.0.1", port=sshd.port, identity_file=str(stranger))
    with pytest.raises(AuthenticationError) as exc:
        SSHConnection(target, board="loop", retries=3, backoff_s=5).connect()   # never retried: fast
    assert str(exc.value).startswith("loop: authentication as")
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_host("127.0.0.1", identity_file=str(tmp_path / "nope"))


def test_unreachable_hosts_are_clear_errors(client_home):
    with pytest.raises(BoardConnectionError, match=r"loop: connection refused by 127\.0\.0\.1:\d+"):
        connect(free_port()).connect()
    with pytest.raises(BoardConnectionError, match="cannot resolve host name"):
        SSHConnection(resolve_host("no-such-board.invalid"), board="loop", retries=0).connect()


def test_transient_failures_are_retried_with_backoff(client_home, sshd):
    proxy = DropProxy(sshd.port, drop_after=0)    # every connection is cut before the banner
    trust(client_home, sshd, port=proxy.port)
    try:
        conn = connect(proxy.port, retries=2, backoff_s=0.01, connect_timeout_s=3)
        with pytest.raises(BoardConnectionError):
            conn.connect()
        assert proxy.connections == 3
    finally:
        proxy.close()


def test_shell_metacharacters_are_quoted(client_home, sshd, tmp_path):
    trust(client_home, sshd)
    weird = tmp_path / "we ird;$(touch PWNED)'\"`*?.txt"
    weird.write_text("x")
    with SSHTransport(connect(sshd.port)) as tr:
        r = tr.run(["cat", str(weird)], timeout_s=10)
        assert r.ok and r.stdout == b"x"
        assert tr.exists(str(weird)) and not tr.exists(str(tmp_path / "PWNED"))
        assert tr.sha256(str(weird)) == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    assert not (tmp_path / "PWNED").exists() and not os.path.exists(os.path.expanduser("~/PWNED"))


def test_host_key_alias_is_the_name_looked_up_and_recorded(client_home, sshd, tmp_path):
    kh = client_home / ".ssh" / "known_hosts"
    (client_home / ".ssh" / "config").write_text(
        f"Host nx\n  HostName 127.0.0.1\n  Port {sshd.port}\n  HostKeyAlias lab-nx\n")
    target = resolve_host("nx")
    assert target.known_hosts_name == "lab-nx"
    trust(client_home, sshd)                      # known as [127.0.0.1]:port only: not the alias
    with pytest.raises(HostKeyError, match="unknown host key for lab-nx"):
        SSHConnection(target, retries=0).connect()
    with SSHConnection(target, trust_new_host=True, retries=0) as conn:
        assert conn.run("echo aliased").text() == "aliased\n"
    kind, b64 = sshd.host_key_pub
    assert kh.read_text().splitlines()[-1] == f"lab-nx {kind} {b64}"      # bare alias, no port
    kh.write_text(f"lab-nx {kind} {b64}\n")        # the alias alone is enough now
    with SSHConnection(resolve_host("nx"), retries=0) as conn:
        assert conn.run("true").ok
    other = keygen(tmp_path / "other_host_key")
    o_kind, o_b64 = other.with_suffix(".pub").read_text().split()[:2]
    kh.write_text(sshd.known_hosts_line() + f"lab-nx {o_kind} {o_b64}\n")  # the alias's key differs
    with pytest.raises(HostKeyError) as exc:
        SSHConnection(resolve_host("nx"), retries=0).connect()
    assert "CHANGED" in str(exc.value) and "ssh-keygen -R 'lab-nx'" in str(exc.value)


def test_user_known_hosts_files_replace_the_default(client_home, sshd, tmp_path):
    trust(client_home, sshd)                       # in ~/.ssh/known_hosts, which the config replaces
    lab = tmp_path / "lab dir"
    lab.mkdir()
    (client_home / ".ssh" / "config").write_text(
        f"Host nx\n  HostName 127.0.0.1\n  Port {sshd.port}\n"
        f"  UserKnownHostsFile ~/.ssh/kh_first \"{lab}/kh_second\"\n"
        f"Host nx-none\n  HostName 127.0.0.1\n  Port {sshd.port}\n  UserKnownHostsFile none\n"
        f"  GlobalKnownHostsFile %d/global_kh\n")
    target = resolve_host("nx")
    assert target.user_known_hosts_files == [str(client_home / ".ssh" / "kh_first"), str(lab / "kh_second")]
    with pytest.raises(HostKeyError, match="unknown host key"):
        SSHConnection(target, retries=0).connect()
    (lab / "kh_second").write_text(sshd.known_hosts_line())      # any of the listed files will do
    with SSHConnection(resolve_host("nx"), retries=0) as conn:
        assert conn.run("true").ok
    (lab / "kh_second").unlink()
    with SSHConnection(resolve_host("nx"), trust_new_host=True, retries=0) as conn:
        assert conn.run("true").ok
    assert (client_home / ".ssh" / "kh_first").read_text() == sshd.known_hosts_line()   # recorded in the first
    # "none": no user file at all; the global one (token %d = home) still counts
    with pytest.raises(HostKeyError, match="unknown host key"):
        SSHConnection(resolve_host("nx-none"), retries=0).connect()
    before = {f.name: f.read_bytes() for f in (client_home / ".ssh").iterdir()}
    with SSHConnection(resolve_host("nx-none"), trust_new_host=True, retries=0) as conn:
        assert conn.run("true").ok                 # trusted for this connection, recorded nowhere
    assert {f.name: f.read_bytes() for f in (client_home / ".ssh").iterdir()} == before
    (client_home / "global_kh").write_text(sshd.known_hosts_line())
    with SSHConnection(resolve_host("nx-none"), retries=0) as conn:
        assert conn.run("true").ok
