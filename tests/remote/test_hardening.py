"""Hardening of the remote runner, each case reproduced against real components: a real sshd on
loopback (keys only, never a password), a TCP server that accepts and never speaks SSH, real
board processes (a segfault, a malformed answer), broken profile files, and 8 concurrent
pushers x 3 rounds to one board."""
from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.remote.sshd import needs_sshd, trust
from sdk.errors import AuthenticationError, BoardConnectionError, ConfigError, RemoteCommandError, UnknownBoardError
from sdk.remote.board import Board, run_fleet
from sdk.remote.profiles import get_profile, list_profiles, profile_problems
from sdk.remote.ssh import SSHConnection, resolve_host

ROOT = Path(__file__).resolve().parents[2]


def sdk(*args, input=None, timeout=180, env=None):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          input=input, timeout=timeout, env=env)


def error_lines(text):
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


def fake_python(path: Path, body: str) -> str:
    """A stand-in for the board's Python: a shell script (a real process on the board)."""
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def local_profile(folder: Path, name: str, python: str, workdir: Path) -> str:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.toml").write_text(
        f'name = "{name}"\n[connection]\nhost = "local"\npython = "{python}"\nworkdir = "{workdir}"\n')
    return name


# -- 1. never a password ---------------------------------------------------------------------------
MFA = ["AuthenticationMethods publickey,keyboard-interactive", "KbdInteractiveAuthentication yes", "UsePAM yes",
       "LogLevel DEBUG1"]


@needs_sshd
@pytest.mark.ssh
def test_a_server_that_wants_more_than_a_key_gets_no_prompt_and_no_answer(client_home, sshd_factory, board_profile):
    srv = sshd_factory(extra=MFA)
    trust(client_home, srv)
    name = board_profile("mfa", srv=srv)
    t0 = time.monotonic()
    proc = sdk("boards", "check", name, input="typed-secret\n", timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Password" not in out and "Traceback" not in out and "Fatal Python error" not in out
    errs = error_lines(proc.stderr)
    assert len(errs) == 1 and "keys and ssh-agent only" in errs[0] and "never sends a password" in errs[0], out
    assert time.monotonic() - t0 < 30                      # refused at once, not retried
    log = srv.log.read_text()
    assert "Partial publickey" in log                       # the key was accepted, then more was asked
    assert "method keyboard-interactive" not in log         # ... and nothing was ever answered
    # the Python API says the same, and also with stdin closed
    with pytest.raises(AuthenticationError, match="never sends a password"):
        SSHConnection(resolve_host("127.0.0.1", port=srv.port), board="mfa", retries=3).connect()


# -- 8. a board that accepts TCP but never speaks SSH ---------------------------------------------------
class SilentServer:
    """Accepts TCP connections and never sends a byte (a hung sshd, a wrong port forward)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(conn)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def silent():
    srv = SilentServer()
    yield srv
    srv.close()


@needs_sshd
@pytest.mark.ssh
def test_a_silent_board_costs_the_connect_timeout_plus_one_retry(client_home, board_profile, silent):
    name = board_profile("silent", port=silent.port)
    t0 = time.monotonic()
    with pytest.raises(BoardConnectionError) as exc:
        with Board(name, connect_timeout_s=1.0, backoff_s=0.1) as board:
            board.push(ROOT / "examples" / "digits" / "digits_cnn.onnx")   # retried operation + connect: one budget
    took = time.monotonic() - t0
    assert silent.accepted == 2, silent.accepted          # one attempt and one retry, never nested
    # each attempt waits out its 1 s connect timeout (a lower bound a loaded machine cannot break);
    # the upper bound only catches a hang (a timeout not applied), not slowness: 2 s of waits + slack
    assert took >= 2.0, took
    assert took < 60, f"{took:.1f} s: the connect timeout was not applied (a hang), not mere contention"
    assert str(exc.value).startswith("silent: ")


@needs_sshd
@pytest.mark.ssh
def test_a_fleet_with_a_silent_board_keeps_the_good_one_and_stays_quiet(client_home, board_profile, silent, tmp_path,
                                                                        example_model):
    bad = board_profile("silent", port=silent.port)
    good = local_profile(tmp_path / "boards", "here", sys.executable, tmp_path / "here-wd")
    fleet = tmp_path / "fleet.json"
    t0 = time.monotonic()
    proc = sdk("push", example_model, "-b", bad, "-b", good, "--connect-timeout", "2", "--runs", "20",
               "--min-seconds", "0", "--idle-seconds", "0", "--input-shape", "image=1x1x8x8", "--json", fleet)
    wall = time.monotonic() - t0
    print(f"fleet with one silent board (connect timeout 2 s): {wall:.1f} s wall")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == error_lines(proc.stderr) and len(error_lines(proc.stderr)) == 1, proc.stderr
    assert "silent: timed out after 2 s waiting for the SSH server" in proc.stderr
    data = json.loads(fleet.read_text())
    assert [d["board"]["name"] for d in data] == ["silent", "here"]
    assert "error" in data[0] and data[1]["latency_ms"]["count"] >= 20
    assert silent.accepted == 2
    assert wall < 2 * 2 + 0.5 + 25               # two connect timeouts + backoff + the good board's own run


# -- 6. a malformed agent answer fails its board alone; 10. a segfault says so -----------------------
def test_a_malformed_agent_result_fails_only_that_board(tmp_path, monkeypatch, example_model):
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    local_profile(boards, "bad", fake_python(tmp_path / "fakepy", "echo '{\"foo\": 1}'\n"), tmp_path / "bad-wd")
    local_profile(boards, "good", sys.executable, tmp_path / "good-wd")
    fleet = tmp_path / "fleet.json"
    proc = sdk("push", example_model, "-b", "bad", "-b", "good", "--runs", "20", "--min-seconds", "0",
               "--idle-seconds", "0", "--input-shape", "image=1x1x8x8", "--json", fleet)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "KeyError" not in proc.stderr
    errs = error_lines(proc.stderr)
    assert len(errs) == 1 and errs[0].startswith("error: board 'bad': malformed bench result: latency_ms"), proc.stderr
    data = json.loads(fleet.read_text())
    assert data[0]["error"]["type"] == "ResultFormatError" and data[1]["latency_ms"]["count"] >= 20


def test_a_board_process_killed_by_a_signal_says_which(tmp_path, monkeypatch):
    boards = tmp_path / "boards"
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    local_profile(boards, "crashy", fake_python(tmp_path / "segv", "kill -SEGV $$\n"), tmp_path / "wd")
    with pytest.raises(RemoteCommandError, match="killed by signal SIGSEGV"):
        with Board("crashy") as board:
            board.check()


@needs_sshd
@pytest.mark.ssh
def test_a_segfault_over_ssh_says_which_signal(client_home, sshd, board_profile, tmp_path):
    trust(client_home, sshd)
    name = board_profile("crashy-ssh", extra="")
    prof = (Path(os.environ["EDGESDK_BOARDS_PATH"]) / f"{name}.toml")
    script = fake_python(tmp_path / "segv", "kill -SEGV $$\n")
    prof.write_text(prof.read_text().replace(f'python = "{sys.executable}"', f'python = "{script}"'))
    with pytest.raises(RemoteCommandError, match="killed by signal SIGSEGV"):
        with Board(name) as board:
            board.check()


# -- 4, 5. profiles ---------------------------------------------------------------------------------
def test_a_broken_profile_breaks_only_its_own_board(tmp_path, monkeypatch):
    boards = tmp_path / "boards"
    boards.mkdir()
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    (boards / "broken.toml").write_text("name = [unclosed\n")
    (boards / "nohost.toml").write_text('name = "nohost"\n[connection]\nuser = "me"\n')
    (boards / "emptyhost.toml").write_text('name = "emptyhost"\n[connection]\nhost = "  "\n')
    assert "local" in list_profiles() and get_profile("local").connection.is_local
    problems = [str(e) for e in profile_problems()]
    assert len(problems) == 3 and all(any(f in p for p in problems) for f in ("broken.toml", "nohost.toml",
                                                                             "emptyhost.toml")), problems
    with pytest.raises(ConfigError, match="not valid TOML"):
        get_profile("broken")
    for name in ("nohost", "emptyhost"):           # never this machine under the board's name
        with pytest.raises(ConfigError, match=r'has no host.*host = "local" for this machine'):
            get_profile(name)
    with pytest.raises(UnknownBoardError, match="unreadable profiles: "):
        get_profile("nosuch")
    proc = sdk("boards")
    assert proc.returncode == 0 and "local" in proc.stdout
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 3 and proc.stderr.count("\n") == 3, proc.stderr
    proc = sdk("boards", "show", "broken")
    assert proc.returncode == 2 and len(error_lines(proc.stderr)) == 1 and "not valid TOML" in proc.stderr


def test_bad_profile_does_not_stop_a_local_push(tmp_path, monkeypatch, example_model):
    boards = tmp_path / "boards"
    boards.mkdir()
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    (boards / "broken.toml").write_text("\x00\x01 not toml at all")
    local_profile(boards, "mine", sys.executable, tmp_path / "wd")
    res = run_fleet(["mine"], lambda b: b.benchmark(example_model, runs=5, min_seconds=0, idle_seconds=0,
                                                   input_shapes={"image": [1, 1, 8, 8]}))
    assert res[0].ok, res[0].error


# -- 2. concurrent pushes cannot collide ---------------------------------------------------------------
PUSHER = textwrap.dedent('''
    import sys
    from sdk.remote.push import push_file
    from sdk.remote.ssh import SSHConnection, resolve_host
    from sdk.remote.transport import SSHTransport
    port, workdir, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    with SSHTransport(SSHConnection(resolve_host("127.0.0.1", port=port), board="loop", retries=0)) as tr:
        for f in files:
            p = push_file(tr, f, workdir, kind="models")
            print(p.sha256, p.remote_path, p.skipped, p.resumed_from)
''')


@needs_sshd
@pytest.mark.ssh
def test_eight_concurrent_pushers_three_rounds_never_collide(client_home, sshd, tmp_path):
    import numpy as np

    trust(client_home, sshd)
    wd = tmp_path / "board"
    script = tmp_path / "pusher.py"
    script.write_text(PUSHER)
    failures, runs = [], 0
    t0 = time.monotonic()
    for rnd in range(3):
        models = []
        for k in range(2):   # rounds 0, 1: all push the same new model; round 2: two models, interleaved
            m = tmp_path / f"m{rnd}{k}.onnx"
            m.write_bytes(np.random.default_rng(rnd * 10 + k).integers(0, 256, 6_000_000, dtype=np.uint8).tobytes())
            models.append(m)
        procs = []
        for i in range(8):
            files = [models[0]] if rnd < 2 else [models[i % 2], models[(i + 1) % 2]]
            procs.append(subprocess.Popen([sys.executable, str(script), str(sshd.port), str(wd), *map(str, files)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in procs:
            out, err = p.communicate(timeout=300)
            runs += 1
            if p.returncode != 0:
                failures.append((err.strip().splitlines() or [f"exit {p.returncode}"])[-1])
        for m in models if rnd == 2 else models[:1]:
            sha = hashlib.sha256(m.read_bytes()).hexdigest()
            assert hashlib.sha256((wd / "models" / f"{sha}.onnx").read_bytes()).hexdigest() == sha
    took = time.monotonic() - t0
    print(f"stress: 8 concurrent pushers x 3 rounds: {runs} pushes, {len(failures)} failures, {took:.1f} s")
    assert failures == [], "\n".join(failures)
    leftovers = [p.name for p in (wd / "models").iterdir() if p.name.endswith(".part")]
    assert leftovers == []


# -- SSH security, as a table: changed keys, unknown keys, injection payloads ---------------------------
INJECTIONS = ["$(touch PWNED)", "`touch PWNED`", "; touch PWNED", "| touch PWNED", "&& touch PWNED", "' ; touch PWNED; '",
              '" ; touch PWNED; "', "\n touch PWNED", "$IFS;touch${IFS}PWNED", "*", "../../PWNED", "-rf PWNED",
              "--help", "a b c", "x\\'y", "$(id>PWNED)", ">PWNED", "<PWNED", "~root/PWNED", "%s%n", "\t;touch PWNED",
              "${PWNED:=x}", "!(touch PWNED)"]


def _injection_outcomes(sshd, tmp_path: Path, payloads) -> dict:
    """Each payload as a file name, a workdir and a command argument over real SSH: payload -> None
    when the file was pushed and the argument echoed back byte for byte and nothing ran, else what
    went wrong. A push or command that raises is a failure too (with the error): the payloads are
    plain data, so the only right outcome is that they come through unchanged."""
    from sdk.remote.push import push_file
    from sdk.remote.transport import SSHTransport

    homes = [Path.home(), Path(os.path.expanduser("~root"))]   # where a relative `touch PWNED` would land
    before = {h: (h / "PWNED").exists() for h in homes}
    work = tmp_path / "inj"
    work.mkdir(exist_ok=True)
    outcomes = {}
    with SSHTransport(SSHConnection(resolve_host("127.0.0.1", port=sshd.port), retries=0)) as tr:
        for i, payload in enumerate(payloads):
            f = work / f"m{i}{payload.replace('/', '_')}.onnx"
            f.write_bytes(os.urandom(64))
            wd = work / (f"wd{i} " + payload.replace("/", "_"))
            problems = []
            try:
                pushed = Path(push_file(tr, f, str(wd)).remote_path)
                if not (pushed.is_file() and pushed.read_bytes() == f.read_bytes()):
                    problems.append(f"push: {pushed} is not the file")
            except Exception as exc:  # noqa: BLE001 - any error is recorded as this payload's failure
                problems.append(f"push raised {type(exc).__name__}: {exc}")
            try:
                echoed = tr.run(["printf", "%s", payload]).stdout.decode()
                if echoed != payload:
                    problems.append(f"echoed {echoed!r}")
            except Exception as exc:  # noqa: BLE001
                problems.append(f"run raised {type(exc).__name__}: {exc}")
            outcomes[payload] = "; ".join(problems) or None
    ran = [str(p) for p in tmp_path.rglob("PWNED")] + [str(h / "PWNED") for h in homes
                                                        if (h / "PWNED").exists() and not before[h]]
    if ran:
        outcomes["(side effects)"] = f"a payload ran: {ran}"
    return outcomes


@needs_sshd
@pytest.mark.ssh
def test_the_injection_check_fails_when_arguments_are_not_quoted(client_home, sshd, tmp_path, monkeypatch):
    """Mutation check of the table's injection column: with shlex.quote broken on purpose (the
    transport and push then pass arguments to the shell as written), the same check reports the
    payloads that ran. Only payloads that touch a file under tmp_path are used here."""
    import shlex

    trust(client_home, sshd)
    marker = tmp_path / "PWNED"
    payloads = [f"$(touch {marker})", f"; touch {marker}", "plain"]
    assert _injection_outcomes(sshd, tmp_path, payloads[2:]) == {"plain": None}   # harmless data passes
    monkeypatch.setattr(shlex, "quote", lambda s: s)
    outcomes = _injection_outcomes(sshd, tmp_path, payloads)
    assert marker.exists() and "a payload ran" in outcomes["(side effects)"], outcomes
    assert outcomes[payloads[0]] is not None and outcomes[payloads[1]] is not None, outcomes


@needs_sshd
@pytest.mark.ssh
def test_ssh_security_table(client_home, sshd, tmp_path):
    from tests.remote.sshd import keygen
    from sdk.errors import HostKeyError

    results = {"changed host key": [], "unknown host key": [], "injection": []}
    kh = client_home / ".ssh" / "known_hosts"
    other = keygen(tmp_path / "other")
    kind, b64 = other.with_suffix(".pub").read_text().split()[:2]
    kh.write_text(f"[127.0.0.1]:{sshd.port} {kind} {b64}\n")
    before = kh.read_bytes()
    for i in range(20):                    # changed: refused every time, with or without --trust-new-host
        try:
            SSHConnection(resolve_host("127.0.0.1", port=sshd.port), retries=0, trust_new_host=i % 2 == 1).connect()
            results["changed host key"].append(False)
        except HostKeyError as exc:
            results["changed host key"].append("CHANGED" in str(exc) and kh.read_bytes() == before)
    kh.unlink()
    for _ in range(5):                     # unknown: refused without the opt-in, nothing recorded
        try:
            SSHConnection(resolve_host("127.0.0.1", port=sshd.port), retries=0).connect()
            results["unknown host key"].append(False)
        except HostKeyError:
            results["unknown host key"].append(not kh.exists())
    trust(client_home, sshd)
    outcomes = _injection_outcomes(sshd, tmp_path, INJECTIONS)
    results["injection"] = [why is None for why in outcomes.values()]
    assert [why for why in outcomes.values() if why] == [], outcomes
    print("\nSSH security: tried / handled / failed")
    for cat, oks in results.items():
        print(f"  {cat:<18}{len(oks):>4}{sum(oks):>5}{len(oks) - sum(oks):>4}")
    assert all(all(v) for v in results.values()), results
