"""Boards from an Ansible inventory (read by ansible-core's own InventoryManager): the variable
mapping, and 16 hosts of a YAML inventory on REAL sshd servers on loopback run through
``sdk push --inventory``, ``sdk boards check --inventory`` and ``sdk validate --inventory``."""
from __future__ import annotations

import getpass
import importlib.util
import json
import re
import subprocess
import sys
from typing import Dict, List

import pytest

from tests.remote.sshd import free_port, needs_sshd, trust

needs_ansible = pytest.mark.skipif(importlib.util.find_spec("ansible") is None,
                                   reason="needs ansible-core: pip install 'edgesdk[ansible]'")


def sdk(*args, timeout: float = 600):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


# -- the mapping -------------------------------------------------------------------------------------------
@needs_ansible
def test_ansible_variables_map_onto_board_connections(tmp_path, monkeypatch):
    """INI inventory + group_vars/ + host_vars/ folders, templated values, old spellings, ProxyJump
    and ProxyCommand, a local connection: each lands in the board's connection."""
    from sdk.remote.inventory import inventory_boards

    monkeypatch.delenv("EDGESDK_BOARDS_PATH", raising=False)
    key = tmp_path / "id_lab"
    key.write_text("not a real key, only its path is read here\n")
    (tmp_path / "hosts.ini").write_text(
        "[jetsons]\n"
        "orin1 ansible_host=10.1.0.11 ansible_port=2201 ansible_user=nvidia\n"
        "orin2 ansible_ssh_host=10.1.0.12 ansible_ssh_user=ops ansible_ssh_common_args='-o ProxyJump=jump@bastion:2222'\n"
        "orin3 ansible_ssh_common_args='-o ProxyCommand=\"ssh -W %h:%p -p 2200 -q gate@gw.lab\"'\n"
        "[pis]\n"
        "pi1 ansible_host='{{ inventory_hostname }}.lab' ansible_ssh_extra_args='-J a@hop1,hop2:2022'\n"
        "here ansible_connection=local edgesdk_board=local\n"
        "[nolabel]\n"
        "stray\n"
        "[oldboard]\n"
        "tx1\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "jetsons.yml").write_text(
        f"edgesdk_board: jetson-orin-nx\nansible_python_interpreter: /usr/bin/python3.8\n"
        f"ansible_ssh_private_key_file: {key}\n")
    (tmp_path / "group_vars" / "pis.yml").write_text("edgesdk_board: rpi5\n")
    (tmp_path / "group_vars" / "oldboard.yml").write_text("edgesdk_board: jetson-tx9\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "orin3.yml").write_text("edgesdk_workdir: /data/edgesdk\n")
    boards = {p.name: p for p in inventory_boards(tmp_path / "hosts.ini", "jetsons:pis")}
    assert list(boards) == ["orin1", "orin2", "orin3", "pi1", "here"]
    c = boards["orin1"].connection
    assert (c.host, c.port, c.user, c.identity_file, c.python, c.jump) == \
        ("10.1.0.11", 2201, "nvidia", str(key), "/usr/bin/python3.8", None)
    assert boards["orin1"].runtime.targets == ["tensorrt", "onnxruntime"]   # the jetson-orin-nx profile
    assert "profile jetson-orin-nx" in boards["orin1"].source and "hosts.ini" in boards["orin1"].source
    c = boards["orin2"].connection
    assert (c.host, c.user, c.jump) == ("10.1.0.12", "ops", "jump@bastion:2222")
    c = boards["orin3"].connection
    assert (c.host, c.port, c.jump, c.workdir) == ("orin3", None, "gate@gw.lab:2200", "/data/edgesdk")
    c = boards["pi1"].connection
    assert (c.host, c.jump, c.user) == ("pi1.lab", "a@hop1,hop2:2022", "pi")   # user: the rpi5 profile's
    assert boards["pi1"].runtime.targets[0] == "onnxruntime"
    assert boards["here"].connection.is_local

    from sdk.errors import ConfigError, InputError, UnknownBoardError

    with pytest.raises(ConfigError, match="host\\(s\\) stray have no 'edgesdk_board' variable"):
        inventory_boards(tmp_path / "hosts.ini", "!oldboard")
    with pytest.raises(InputError, match="no host of .* matches --limit 'gpus'.*groups: .*jetsons"):
        inventory_boards(tmp_path / "hosts.ini", "gpus")
    with pytest.raises(UnknownBoardError, match="jetson-tx9"):
        inventory_boards(tmp_path / "hosts.ini", "oldboard")
    (tmp_path / "broken.yml").write_text("all: [1, 2\n")
    with pytest.raises(ConfigError, match="cannot read the inventory .*broken.yml: 'yaml' plugin"):
        inventory_boards(tmp_path / "broken.yml")


# -- 16 hosts on real sshd servers -------------------------------------------------------------------------
@pytest.fixture
def lab(tmp_path, client_home, sshd_factory, monkeypatch) -> Dict[str, object]:
    """A YAML inventory: groups jetsons (j01-j08, edgesdk_board jetson-orin-nx) and pis (p01-p08,
    raspberry-pi-5) under lab, spread over four sshd servers (4 hosts each, own workdirs); j08 is
    reached through j01's server with ProxyJump. Group broken: a dead port; group untrusted: a server
    whose host key is not in known_hosts."""
    monkeypatch.delenv("EDGESDK_BOARDS_PATH", raising=False)
    servers = [sshd_factory() for _ in range(4)]
    for srv in servers:
        trust(client_home, srv)
    stranger = sshd_factory()
    hosts: Dict[str, Dict[str, object]] = {}
    for i in range(16):
        name = f"j{i + 1:02d}" if i < 8 else f"p{i - 7:02d}"
        srv = servers[i % 4]
        hosts[name] = {"ansible_host": "127.0.0.1", "ansible_port": srv.port,
                       "edgesdk_workdir": str(tmp_path / "boards" / name)}
    hosts["j08"]["ansible_ssh_common_args"] = f"-o ProxyJump=127.0.0.1:{servers[0].port}"
    # the board's Python: this one (numpy, onnxruntime); the user: this one (the profiles say pi, nvidia)
    common = {"ansible_python_interpreter": sys.executable, "ansible_user": getpass.getuser()}
    inv = {"all": {"vars": common, "children": {
        "lab": {"children": {
            "jetsons": {"vars": {"edgesdk_board": "jetson-orin-nx"}, "hosts": {h: v for h, v in hosts.items() if h[0] == "j"}},
            "pis": {"vars": {"edgesdk_board": "raspberry-pi-5"}, "hosts": {h: v for h, v in hosts.items() if h[0] == "p"}},
        }},
        "broken": {"hosts": {"dead": {"ansible_host": "127.0.0.1", "ansible_port": free_port(),
                                       "edgesdk_board": "raspberry-pi-5"}}},
        "untrusted": {"hosts": {"stranger": {"ansible_host": "127.0.0.1", "ansible_port": stranger.port,
                                             "edgesdk_board": "raspberry-pi-5",
                                             "edgesdk_workdir": str(tmp_path / "boards" / "stranger")}}},
    }}}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps(inv, indent=1))   # JSON is YAML
    return {"path": path, "hosts": list(hosts)}


def _json_lines(text: str) -> List[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@needs_ansible
@needs_sshd
@pytest.mark.ssh
@pytest.mark.slow
def test_sixteen_inventory_hosts_through_sdk_push(lab, static_conv_model, tmp_path):
    out = tmp_path / "results.jsonl"
    proc = sdk("push", static_conv_model, "--inventory", lab["path"], "--limit", "lab", "--forks", "16",
               "--target", "onnxruntime", "--runs", "3", "--min-seconds", "0.02", "--warmup", "1",
               "--idle-seconds", "0", "--json", out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    docs = _json_lines(out.read_text())
    assert sorted(d["board"]["name"] for d in docs) == sorted(lab["hosts"])
    assert all(d["latency_ms"]["count"] >= 3 and d["target"] == "onnxruntime" for d in docs)
    by_name = {d["board"]["name"]: d for d in docs}
    assert by_name["j01"]["board"]["profile"].endswith("jetson-orin-nx.toml)")
    assert by_name["p01"]["board"]["host"] == "127.0.0.1"
    rows = [line for line in proc.stdout.splitlines() if re.match(r"\d+ +[jp]\d\d +(ok|FAIL) ", line)]
    assert len(rows) == 16 and all(" ok " in r for r in rows), proc.stdout
    assert "16 of 16 boards succeeded" in proc.stdout
    for h in lab["hosts"]:   # each board's own workdir got the model
        assert any((tmp_path / "boards" / h / "models").iterdir())


@needs_ansible
@needs_sshd
@pytest.mark.ssh
def test_a_failed_board_never_stops_the_others(lab, static_conv_model):
    """A dead port and an unknown host key (refused: the policy stays strict) fail their rows; the
    other board runs; exit 1; JSON lines on stdout, the rows on stderr."""
    proc = sdk("push", static_conv_model, "--inventory", lab["path"], "--limit", "broken:untrusted:p02",
               "--target", "onnxruntime", "--runs", "3", "--min-seconds", "0.02", "--idle-seconds", "0",
               "--json", "-")
    assert proc.returncode == 1, proc.stderr[-3000:]
    docs = {d["board"]["name"]: d for d in _json_lines(proc.stdout)}
    assert set(docs) == {"dead", "stranger", "p02"}
    assert "latency_ms" in docs["p02"], docs["p02"]
    assert docs["p02"]["latency_ms"]["count"] >= 3
    assert docs["dead"]["error"]["type"] == "BoardConnectionError"
    assert docs["stranger"]["error"]["type"] == "HostKeyError" and "unknown host key" in docs["stranger"]["error"]["message"]
    assert "1 of 3 boards succeeded; failed: " in proc.stderr and "Traceback" not in proc.stderr
    check = sdk("boards", "check", "--inventory", lab["path"], "--limit", "j01:j02", "--json", "-")
    assert check.returncode == 0, check.stderr
    facts = {d["board"]["name"]: d for d in _json_lines(check.stdout)}
    assert set(facts) == {"j01", "j02"} and all(f["python"] for f in facts.values())


@needs_ansible
def test_inventory_usage_errors_are_one_line(tmp_path, static_conv_model):
    for args, msg in [
        (["--board", "local", "--inventory", tmp_path / "x.yml"], "error: give --board or --inventory, not both"),
        (["--board", "local", "--limit", "jetsons"], "error: --limit (--hosts) needs --inventory"),
        ([], "error: no board given (pass --board NAME (repeatable) or --inventory FILE)"),
        (["--inventory", tmp_path / "x.yml"], f"error: inventory '{tmp_path / 'x.yml'}' does not exist"),
    ]:
        proc = sdk("push", static_conv_model, *args)
        assert proc.returncode == 2 and proc.stderr.strip() == msg, proc.stderr


@needs_ansible
@needs_sshd
@pytest.mark.ssh
@pytest.mark.slow
def test_sdk_validate_takes_an_inventory(lab, static_conv_model, tmp_path):
    import numpy as np

    data = tmp_path / "inputs.npy"
    np.save(data, np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    out = tmp_path / "validate.json"
    proc = sdk("validate", static_conv_model, "--inventory", lab["path"], "--hosts", "p01:p02", "--forks", "2",
               "--data", data, "--json", out, "--quiet")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {d["board"]: d for d in _json_lines(out.read_text())}   # one line per board, as they finish
    assert set(runs) == {"p01", "p02"} and all(r["verdict"] == "pass" for r in runs.values())
    assert all(r["benchmark"]["latency_ms"]["count"] > 0 for r in runs.values())
    rows = [line for line in proc.stdout.splitlines() if re.match(r"\d+ +p0[12] +PASS ", line)]
    assert len(rows) == 2 and "GO: the model ran on every board; no budget was checked" in proc.stdout, proc.stdout
