"""The one exception tree of edgesdk.

Every error the SDK raises on purpose derives from :class:`EdgeSDKError`. Errors of third-party
libraries (onnx, onnxruntime, paramiko, TensorRT, ...) are translated where they enter, with
``raise ... from exc``, so a caller catches one base class and the CLI prints one line.

::

    EdgeSDKError
    ├── MissingDependencyError      an optional package is not installed (names the pip command)
    ├── InputError                  bad user input: shapes, dtypes, data files, options
    │   ├── ConfigError             a profile / spec / option file with unknown or bad keys
    │   │   └── UnknownNameError    a name no registry knows (target, format, scheme, sensor, ...)
    │   └── ResultFormatError       a measurement's JSON (a file, a board's answer) is malformed
    ├── ModelError                  the model file itself
    │   ├── ModelNotFoundError
    │   ├── ModelFormatError        not ONNX / not TFLite / truncated
    │   ├── InvalidModelError       parses, but the graph is invalid
    │   └── UnsupportedModelError   valid, but this operation cannot handle it
    │       └── ConversionError     the destination format cannot hold a node (names node, op, why)
    ├── TargetError                 a runtime backend
    │   ├── UnknownTargetError      (also an UnknownNameError)
    │   ├── TargetUnavailableError  runtime missing or broken on this machine
    │   ├── BuildError              model -> artifact failed
    │   └── InferenceError          a session failed to run
    ├── QuantizationError           calibration / QDQ emission
    ├── RemoteError                 boards and SSH
    │   ├── UnknownBoardError
    │   ├── BoardConnectionError    unreachable, timeout, connection reset (transient)
    │   ├── AuthenticationError
    │   ├── HostKeyError            unknown or changed host key
    │   ├── RemoteCommandError      a command on the board failed or hung
    │   └── TransferError           upload / verify failed
    ├── PowerError                  power sensors
    └── ValidationError             a validation run could not be done
"""
from __future__ import annotations

from typing import Optional, Sequence

__all__ = [
    "EdgeSDKError",
    "MissingDependencyError",
    "InputError",
    "ConfigError",
    "ResultFormatError",
    "UnknownNameError",
    "ModelError",
    "ModelNotFoundError",
    "ModelFormatError",
    "InvalidModelError",
    "UnsupportedModelError",
    "ConversionError",
    "TargetError",
    "UnknownTargetError",
    "TargetUnavailableError",
    "BuildError",
    "InferenceError",
    "QuantizationError",
    "RemoteError",
    "UnknownBoardError",
    "BoardConnectionError",
    "AuthenticationError",
    "HostKeyError",
    "RemoteCommandError",
    "TransferError",
    "ProfilingUnavailableError",
    "PowerError",
    "ValidationError",
    "first_line",
]


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its class name when the message is empty: what a
    translated third-party error quotes."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class EdgeSDKError(Exception):
    """Base of every error edgesdk raises on purpose.

    ``message`` says what is wrong; ``hint`` (optional) says how to fix it. ``str(err)`` joins
    both into the one line the CLI prints.
    """

    def __init__(self, message: str, hint: Optional[str] = None):
        self.message = message
        self.hint = hint
        super().__init__(message if not hint else f"{message} ({hint})")


class MissingDependencyError(EdgeSDKError):
    """An optional package is needed for a feature and is not installed."""

    def __init__(self, feature: str, package: str, install: str):
        self.feature = feature
        self.package = package
        super().__init__(
            f"{feature} needs the '{package}' package, which is not installed",
            f"install it with: {install}",
        )


class InputError(EdgeSDKError):
    """Bad user input: an input shape, a dtype, a data file, an option value."""


class ConfigError(InputError):
    """A board profile, spec or configuration file is malformed or has unknown keys."""


class ResultFormatError(InputError):
    """A measurement's JSON (a result file, a board agent's answer) does not follow the result
    schema; the message names where it came from (the file or the board) and the first bad key."""


class UnknownNameError(ConfigError):
    """A name that no registry of its family knows (:class:`sdk.registry.Registry`). Built by
    :meth:`for_name`, it keeps the ``name``, the ``known`` names and the closest one as
    ``suggestion`` (None when none is close); ``(message, hint)`` construction works as for
    every error of the tree (errors coming back from a board are rebuilt that way)."""

    name: Optional[str] = None
    known: Sequence[str] = ()
    suggestion: Optional[str] = None

    @classmethod
    def for_name(cls, family: str, name: str, known: Sequence[str] = (), suggestion: Optional[str] = None,
                 known_label: Optional[str] = None) -> "UnknownNameError":
        """``unknown <family> '<name>' (<known_label>: a, b, c; did you mean '<suggestion>'?)``."""
        label = known_label if known_label is not None else "known %ss" % family
        hint = "%s: %s" % (label, ", ".join(known) or "none")
        if suggestion:
            hint = "%s; did you mean '%s'?" % (hint, suggestion)
        err = cls("unknown %s '%s'" % (family, name), hint)
        err.name, err.known, err.suggestion = name, list(known), suggestion
        return err


class ModelError(EdgeSDKError):
    """A problem with the model file itself."""


class ModelNotFoundError(ModelError):
    pass


class ModelFormatError(ModelError):
    """The file is not a model in a supported format, or is truncated."""


class InvalidModelError(ModelError):
    """The file parses, but the graph is invalid (checker or runtime refuses it)."""


class UnsupportedModelError(ModelError):
    """The model is valid, but the requested operation does not support it."""


class ConversionError(UnsupportedModelError):
    pass


class TargetError(EdgeSDKError):
    """A runtime backend failed."""


class UnknownTargetError(TargetError, UnknownNameError):
    """An unknown target name (a :class:`TargetError` and an :class:`UnknownNameError`)."""


class TargetUnavailableError(TargetError):
    """The target's runtime is missing or broken on this machine."""


class ProfilingUnavailableError(TargetError):
    """The target (or its runtime here) exposes no per-layer profiler; the message says why."""


class BuildError(TargetError):
    """Turning a model into a target artifact failed."""


class InferenceError(TargetError):
    """A session failed while running."""


class QuantizationError(EdgeSDKError):
    pass


class RemoteError(EdgeSDKError):
    """A board or its SSH connection failed. ``board`` names the board when known."""

    def __init__(self, message: str, hint: Optional[str] = None, board: Optional[str] = None):
        self.board = board
        if board and not message.startswith(board):
            message = f"{board}: {message}"
        super().__init__(message, hint)


class UnknownBoardError(RemoteError):
    pass


class BoardConnectionError(RemoteError):
    """Unreachable host, timeout or reset: transient, worth a bounded retry."""


class AuthenticationError(RemoteError):
    pass


class HostKeyError(RemoteError):
    pass


class RemoteCommandError(RemoteError):
    pass


class TransferError(RemoteError):
    pass


class PowerError(EdgeSDKError):
    pass


class ValidationError(EdgeSDKError):
    pass
