"""Boards and the remote runner: profiles, SSH, push, the board agent, power sampling."""
