"""Validation's two runners, a board and this host, behind one typed protocol (sdk.validation.runners.Runner)."""
from __future__ import annotations

import pytest

from sdk.errors import UnknownBoardError
from sdk.remote.board import Board
from sdk.validation.runners import HostRunner, Runner, open_runner


def test_board_and_host_runner_follow_one_protocol():
    assert isinstance(HostRunner("onnxruntime"), Runner)
    board = open_runner("local")
    assert isinstance(board, Board) and isinstance(board, Runner)
    host = open_runner("host:onnxruntime")
    assert isinstance(host, HostRunner) and host.name == "host:onnxruntime"
    assert open_runner(host) is host


def test_unknown_board_is_the_remote_runners_error():
    with pytest.raises(UnknownBoardError, match="unknown board 'no-such-board'"):
        open_runner("no-such-board")
