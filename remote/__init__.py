"""Boards and the remote runner: profiles, SSH, push, the board agent, power sampling.

Loaded lazily (paramiko is imported only when a board is reached over SSH)::

    from sdk.remote import Board, run_fleet, list_profiles
    with Board("jetson-nx") as board:
        result = board.benchmark("model.onnx", precision="fp16")
"""
from __future__ import annotations

from .._lazy import lazy_exports

_LAZY = {
    "Board": "sdk.remote.board",
    "FleetResult": "sdk.remote.board",
    "run_fleet": "sdk.remote.board",
    "agent_zipapp": "sdk.remote.board",
    "BoardProfile": "sdk.remote.profiles",
    "Connection": "sdk.remote.profiles",
    "get_profile": "sdk.remote.profiles",
    "list_profiles": "sdk.remote.profiles",
    "load_profile": "sdk.remote.profiles",
    "profile_dirs": "sdk.remote.profiles",
    "Pushed": "sdk.remote.push",
    "push_file": "sdk.remote.push",
    "Transport": "sdk.remote.transport",
    "LocalTransport": "sdk.remote.transport",
    "SSHTransport": "sdk.remote.transport",
    "CommandResult": "sdk.remote.ssh",
    "SSHConnection": "sdk.remote.ssh",
    "SSHHost": "sdk.remote.ssh",
    "resolve_host": "sdk.remote.ssh",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
