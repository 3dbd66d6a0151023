"""The adversarial tier (issue 27): hostile models, data and boards, every signal, planted links.

The real OpenSSH server on loopback and the client HOME are the remote runner's own fixtures
(``tests/remote/conftest.py``), re-exported here so these tests use the same sshd setup.
"""
from tests.remote.conftest import board_profile, client_home, client_key, sshd, sshd_factory  # noqa: F401
