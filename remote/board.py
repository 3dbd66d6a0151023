"""``Board``: the Python API of the remote runner.

::

    from sdk.remote import Board
    with Board("jetson-nx") as board:
        facts = board.check()                      # what the board has (via the agent)
        pushed = board.push("model.onnx")          # content-addressed upload
        result = board.benchmark(pushed, precision="fp16", runs=200, min_seconds=5)
        print(result.stats.p90_ms, result.stats.ci("p90"), result.power.mean_w)

    results = run_fleet(["jetson-nx", "orin-nano"], lambda b: b.benchmark("model.onnx"))

The board needs no SDK: the board-side code is pushed once as a zipapp (``sdk.remote.agent``),
content-addressed like models, and run with the profile's Python. The ``local`` board runs the
same agent through a subprocess, no SSH.
"""
from __future__ import annotations

import json
import os
import queue
import shlex
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .. import errors as _errors
from ..errors import (EdgeSDKError, MissingDependencyError, RemoteCommandError,
                      RemoteError)
from .profiles import BoardProfile, get_profile
from .push import Pushed, push_file, push_model_files
from .cancel import cancel_all, check_cancelled
from .ssh import DEFAULT_BACKOFF_S, DEFAULT_RETRIES, RetryPolicy
from .transport import LocalTransport, SSHTransport, Transport

if TYPE_CHECKING:
    from ..bench import EarlyStop
    from ..result import BenchResult

__all__ = ["Board", "FleetResult", "run_fleet", "agent_zipapp"]

ModelLike = Union[str, os.PathLike, "Pushed", Any]
BENCH_TIMEOUT_PAD_S = 600.0        # added to runs/min_seconds for build time (TensorRT engines take minutes)

_agent_lock = threading.Lock()
_EXTERNAL: Dict[tuple, List[Any]] = {}     # (path, size, mtime) -> the model's external data files
_agent_path: Dict[str, Path] = {}


def agent_zipapp() -> Path:
    """Build (once per process) the board agent zipapp in ``~/.cache/edgesdk/agent``."""
    with _agent_lock:
        if "pyz" not in _agent_path or not _agent_path["pyz"].is_file():
            try:
                from .agent import build_zipapp
            except ImportError as exc:
                raise MissingDependencyError("running models on boards", "sdk.remote.agent",
                                             "reinstall edgesdk (the board agent is missing)") from exc
            dest = Path(os.path.expanduser("~/.cache/edgesdk/agent"))
            dest.mkdir(parents=True, exist_ok=True)
            _agent_path["pyz"] = Path(build_zipapp(dest))
        return _agent_path["pyz"]


def _board_error(board: str, payload: Mapping[str, Any], fallback: str) -> EdgeSDKError:
    """Turn the agent's ``{"error": {type, message, hint}}`` into our exception class of that name."""
    err = payload.get("error") if isinstance(payload, Mapping) else None
    if not isinstance(err, Mapping):
        return RemoteCommandError(fallback, board=board)
    message = str(err.get("message") or fallback)
    hint = err.get("hint")
    cls = getattr(_errors, str(err.get("type")), None)
    if isinstance(cls, type) and issubclass(cls, EdgeSDKError) and cls is not MissingDependencyError:
        if issubclass(cls, RemoteError):
            return cls(message, hint, board=board)
        try:
            return cls(f"{board}: {message}", hint)
        except TypeError:  # a class with another constructor
            pass
    return RemoteCommandError(f"{message} ({err.get('type')})" if err.get("type") else message, hint, board=board)


def _check_finite(board: str, command: str, doc: Any, where: str = "") -> None:
    """Every number of a board's answer is finite (1e999 parses as inf): else ResultFormatError."""
    import math

    if isinstance(doc, float) and not math.isfinite(doc):
        raise _errors.ResultFormatError(
            f"board '{board}': the agent's '{command}' answer holds a non-finite number at {where or 'the top'} "
            f"({doc})", "the board's agent or runtime is broken: check it with 'sdk boards check'")
    if isinstance(doc, dict):
        for k, v in doc.items():
            _check_finite(board, command, v, f"{where}.{k}" if where else str(k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            _check_finite(board, command, v, f"{where}[{i}]")


def bench_timeout_s(runs: int, warmup: int, min_seconds: float, idle_seconds: float,
                    s_per_inference: Optional[float] = None) -> float:
    """How long a benchmark command may run on the board: the build pad, the idle wait, and the runs
    at 0.5 s each, or at three times the seconds per inference the board showed for this model in
    ``infer`` (an emulated aarch64 board takes minutes per inference of a detector)."""
    per_run_s = max(0.5, 3.0 * s_per_inference) if s_per_inference else 0.5
    return BENCH_TIMEOUT_PAD_S + idle_seconds + max(min_seconds, 0) * 3 + (runs + max(warmup, 0)) * per_run_s


def _samples_in(npz: Path) -> int:
    """The number of samples in an inputs file: the largest first dimension of its arrays, read from
    the headers (0 if they cannot be read)."""
    from ..sources import npz_shapes

    try:
        return max((s[0] for s in npz_shapes(npz).values() if s), default=1)
    except (OSError, ValueError, EdgeSDKError, zipfile.BadZipFile):
        return 0


class Board:
    """A board from a profile (name, alias, ``.toml`` path or :class:`BoardProfile`).

    Connects lazily; use as a context manager to close the connection. ``trust_new_host``:
    accept and record an unknown host key (trust on first use). ``progress``: a callback
    ``(bytes_done, bytes_total)`` for uploads. ``retries``: extra attempts for transient failures,
    one budget for the board's whole life (connects and operations draw on the same
    :class:`~sdk.remote.ssh.RetryPolicy`), ``backoff_s`` doubling between them.
    """

    def __init__(self, board: Union[str, BoardProfile], *, trust_new_host: bool = False,
                 progress: Optional[Callable[[int, int], None]] = None, connect_timeout_s: float = 10.0,
                 retries: int = DEFAULT_RETRIES, backoff_s: float = DEFAULT_BACKOFF_S):
        self.profile = board if isinstance(board, BoardProfile) else get_profile(str(board))
        self.name = self.profile.name
        self.trust_new_host = trust_new_host
        self.progress = progress
        self.connect_timeout_s = connect_timeout_s
        self.policy = RetryPolicy(retries, backoff_s)
        self._transport: Optional[Transport] = None
        self._home: Optional[str] = None
        self._agent: Optional[Pushed] = None
        self._s_per_inference: Dict[str, float] = {}   # model sha256 -> seconds one sample took in infer

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> "Board":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def __repr__(self) -> str:
        return f"Board({self.name!r}, host={self.profile.connection.host!r})"

    @property
    def transport(self) -> Transport:
        """The open transport (connects on first use)."""
        if self._transport is None:
            conn = self.profile.connection
            if conn.is_local:
                self._transport = LocalTransport(self.name)
                self._home = self._transport.home
            else:
                from .ssh import SSHConnection, resolve_host

                host = resolve_host(conn.host, port=conn.port, user=conn.user, identity_file=conn.identity_file,
                                    jump=conn.jump, known_hosts=conn.known_hosts)
                self._transport = SSHTransport(SSHConnection(
                    host, board=self.name, trust_new_host=self.trust_new_host,
                    connect_timeout_s=self.connect_timeout_s, policy=self.policy))
            self._transport.open()
        return self._transport

    @property
    def round_trips(self) -> int:
        return self._transport.round_trips if self._transport is not None else 0

    def _set_home(self, home: str) -> None:
        self._home = home

    def _retrying(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` under the board's one :class:`RetryPolicy`; a retry reconnects."""
        return self.policy.call(fn, before_retry=self._drop_transport)

    def _drop_transport(self) -> None:
        if self._transport is not None:
            self._transport.close()   # reconnects on next use

    # -- files -----------------------------------------------------------------------------------
    @property
    def workdir(self) -> str:
        return self.profile.connection.workdir

    def push(self, model: ModelLike, *, kind: str = "models") -> Pushed:
        """Upload a model (path or :class:`sdk.Model`) to ``<workdir>/models/<sha256>.<ext>``,
        skipped when already there and verified. Returns a :class:`Pushed` handle."""
        if isinstance(model, Pushed):
            return model
        with self._local_path(model) as path:
            external = self._external_files(path) if kind == "models" else []
            if external:    # ONNX external data: the model and its files, in one folder on the board
                return self._retrying(lambda: push_model_files(self.transport, path, self.workdir, external,
                                                               progress=self.progress, home_cb=self._set_home))
            return self._retrying(lambda: push_file(self.transport, path, self.workdir, kind=kind,
                                                    progress=self.progress, home_cb=self._set_home))

    @staticmethod
    def _external_files(path: Path) -> List[Any]:
        """``[(location, path)]`` of the files the model loads (ONNX external data), [] for none."""
        from ..formats import detect_format, get_format

        if not path.is_file():
            return []
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _EXTERNAL:
            _EXTERNAL[key] = get_format(detect_format(path)).external_files(path)
        return _EXTERNAL[key]

    @staticmethod
    @contextmanager
    def _local_path(model: Any) -> Iterator[Path]:
        """The file to push: the model's own file, or (an in-memory :class:`sdk.Model`) its bytes in
        a temporary folder removed on every way out, once pushed (nothing is left in $TMPDIR)."""
        if isinstance(model, (str, os.PathLike)):
            yield Path(model)
            return
        path = getattr(model, "path", None)   # sdk.Model
        if path is not None and getattr(model, "_proto", None) is None:
            yield Path(path)
            return
        if hasattr(model, "to_bytes"):
            with tempfile.TemporaryDirectory(prefix="edgesdk-push-") as tmp:
                file = Path(tmp) / f"model.{getattr(model, 'format', 'onnx')}"
                file.write_bytes(model.to_bytes())
                yield file
            return
        raise _errors.InputError(f"cannot push {type(model).__name__}: give a file path or an sdk.Model")

    def _abs(self, path: str) -> str:
        if path.startswith("/"):
            return path
        if self._home is None:
            r = self.transport.run('printf "%s" "$HOME"', timeout_s=60, check=True)
            self._home = r.text().strip()
        rel = path[2:] if path.startswith("~/") else path
        return f"{self._home.rstrip('/')}/{rel}"

    # -- the agent -------------------------------------------------------------------------------
    def _ensure_agent(self) -> Pushed:
        if self._agent is None:
            pyz = agent_zipapp()
            self._agent = self.push(pyz, kind="agent")
        return self._agent

    def _python(self) -> List[str]:
        """The profile's ``[connection] python``; when unset, the interpreter running the SDK for
        the local board (so a venv's packages are the board's), ``python3`` over SSH."""
        given = shlex.split(self.profile.connection.python or "")
        if given:
            return given
        return [sys.executable] if self.profile.connection.is_local else ["python3"]

    def _pick_target(self, pushed: Pushed, target: Optional[str]) -> str:
        """``target``, else the profile's first target that runs the model's format, else the
        format's default target."""
        if target:
            return target
        from ..formats import default_target, detect_format
        from ..targets.registry import first_target_for

        try:    # the suffix says it (an in-memory model's temporary file is gone once pushed)
            fmt = detect_format(Path(pushed.local_path))
        except OSError:
            fmt = "onnx"
        return first_target_for(self.profile.runtime.targets, fmt) or default_target(fmt)

    @property
    def max_answer_bytes(self) -> int:
        """The most the host reads of one agent answer (``[connection] max_answer_mb``, MiB)."""
        return int(float(self.profile.connection.max_answer_mb) * (1 << 20))

    def agent(self, command: str, request: Mapping[str, Any], *, timeout_s: float = 600.0) -> Dict[str, Any]:
        """Run ``<python> <agent.pyz> <command> --request - --watch`` on the board with ``request``
        as one JSON line on stdin, which then stays open (a heartbeat: the agent's watchdog ends the
        job when this process or its SSH channel goes); returns the JSON document it printed,
        read up to :attr:`max_answer_bytes`, every number in it finite. Errors become one line
        naming the board, quoting at most a short excerpt of what it printed."""
        agent = self._ensure_agent()
        argv = self._python() + [self._abs(agent.remote_path), command, "--request", "-", "--watch"]
        body = json.dumps(dict(request)).encode() + b"\n"
        result = self._retrying(lambda: self.transport.run(argv, timeout_s=timeout_s, input=body, hold_stdin=True,
                                                           max_output_bytes=self.max_answer_bytes))
        text = result.text().strip()
        payload: Any = None
        for candidate in (text, text.splitlines()[-1] if text else ""):
            try:
                payload = json.loads(candidate)      # NaN/Infinity parse: refused just below
                break
            except ValueError:
                continue
        if payload is not None:
            _check_finite(self.name, command, payload)
        if result.returncode == 127 or (result.returncode != 0 and payload is None and
                                        b"not found" in result.stderr and not text):
            raise RemoteCommandError(f"'{' '.join(self._python())}' was not found on the board",
                                     "set [connection] python in the board profile", board=self.name)
        if result.returncode != 0:
            raise _board_error(self.name, payload or {},
                               f"the agent's '{command}' failed: {result.error_text()}")
        if not isinstance(payload, dict):
            raise RemoteCommandError(f"the agent's '{command}' printed no JSON ({result.error_text()})",
                                     board=self.name)
        return payload

    def _power_request(self) -> Dict[str, Any]:
        pw = self.profile.power
        return {"sensors": list(pw.sensors) or None, "sysfs_root": pw.sysfs_root}

    # -- public operations -------------------------------------------------------------------------
    def info(self) -> Dict[str, Any]:
        """The ``board`` block of result JSON: name, host, description, hardware."""
        c = self.profile.connection
        return {"name": self.name, "host": c.host, "description": self.profile.description,
                "hardware": dict(vars(self.profile.hardware)), "profile": self.profile.source}

    def check(self) -> Dict[str, Any]:
        """Device facts from the agent: os, python, numpy, runtimes and versions, L4T/JetPack,
        CUDA, TensorRT, power mode, clocks locked, temperatures, power sensors found."""
        pw = self.profile.power
        facts = self.agent("facts", {"sysfs_root": pw.sysfs_root, "sensors": list(pw.sensors) or None},
                           timeout_s=120)
        facts.setdefault("board", self.info())
        return facts

    def cpu(self) -> Tuple[str, List[str]]:
        """The board's CPU as the quantizer takes it (``QuantizeConfig.cpu_arch``/``cpu_flags``): its
        architecture and ``/proc/cpuinfo`` flags, from its facts."""
        facts = self.check()
        return str(facts["machine"]), [str(f) for f in facts.get("cpu_flags") or []]

    def benchmark(self, model: ModelLike, *, target: Optional[str] = None, precision: Optional[str] = None,
                  runs: int = 100, min_seconds: float = 1.0, warmup: int = 10, idle_seconds: float = 1.0,
                  input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                  target_options: Optional[Mapping[str, Any]] = None, timeout_s: Optional[float] = None,
                  samples: bool = False, early_stop: Optional["EarlyStop"] = None, lock_clocks: Any = None,
                  telemetry: Any = True, input_values: Optional[Mapping[str, Any]] = None,
                  carry: Optional[Mapping[str, str]] = None) -> "BenchResult":
        """Push ``model`` (unless already a :class:`Pushed`), then build/load it on the board with
        ``target`` (default: the profile's first that runs the model's format) and measure latency (MLPerf SingleStream: at
        least ``runs`` AND ``min_seconds``, and with ``early_stop`` (:class:`sdk.bench.EarlyStop`)
        until its tail percentile is measured well enough) while sampling power. Returns a
        :class:`sdk.result.BenchResult` (``stats``, ``power``, ``energy``, ``device``, ``board``,
        ``model``, ``transfer``); a malformed answer of the board is a
        :class:`~sdk.errors.ResultFormatError` naming the board. With ``samples=True`` it also
        holds the latency samples in run order (``samples_ms``, at most 20,000, every
        ``samples_stride``-th) and the power trace (``power.trace``: ``[t_s, W]`` on the clock of
        ``window``). ``telemetry``: sample CPU/GPU load, clocks and temperatures during the run
        (True, False or ``{rate_hz}``; in ``result.telemetry``). ``lock_clocks``: on a Jetson, pin
        clocks with nvpmodel + jetson_clocks for the run and restore them after (True or
        ``{power_mode, sudo}``; states and commands in ``result.clock_lock``). ``input_values``:
        arrays of inputs that are not data (``{"sr": np.array(16000)}``), sent with the request.
        ``carry``: ``{output: input}``, each run on the board feeds that output back as the input of
        the next (a recurrent state, as a streaming model runs)."""
        from ..data import values_to_json
        from ..result import BenchResult

        pushed = self.push(model)
        target = self._pick_target(pushed, target)
        precision = precision or self.profile.runtime.precision
        request = {
            "model_path": self._abs(pushed.remote_path), "target": target,
            "target_options": self.profile.runtime.target_options(target, target_options), "precision": precision,
            "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()},
            "runs": runs, "warmup": warmup, "min_seconds": min_seconds, "idle_seconds": idle_seconds,
            "power": self._power_request(), "workdir": self._abs(self.workdir), "samples": bool(samples),
            "telemetry": telemetry, "lock_clocks": lock_clocks or None,
        }
        if input_values:
            request["input_values"] = values_to_json(input_values)
        if carry:
            request["carry"] = dict(carry)
        if early_stop is not None:
            request["early_stop"] = {"percentile": early_stop.percentile,
                                     "max_ci_width_pct": early_stop.max_ci_width_pct}
        timeout = timeout_s or bench_timeout_s(runs, warmup, min_seconds, idle_seconds,
                                               self._s_per_inference.get(pushed.sha256))
        result = BenchResult.from_dict(self.agent("bench", request, timeout_s=timeout), source=f"board '{self.name}'")
        result.board = self.info()
        result.model.update(path=pushed.local_path, sha256=pushed.sha256, remote_path=pushed.remote_path)
        result.transfer = pushed.transfer
        return result

    def infer(self, model: ModelLike, feeds_npz: Union[str, os.PathLike], *, target: Optional[str] = None,
              target_options: Optional[Mapping[str, Any]] = None, timeout_s: float = 900.0,
              compress: bool = False, carry: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
        """Run ``model`` on the board over the inputs in ``feeds_npz`` (one array per input
        name); returns the outputs as a dict of NumPy arrays (name -> array). ``compress``: the
        board writes the outputs deflated (many or large outputs, e.g. exposed intermediate tensors).
        ``carry`` (``{output: input}``): the samples run in order, each fed the state the one before left."""
        import numpy as np

        pushed = self.push(model)
        inputs = self.push(Path(feeds_npz), kind="data")
        target = self._pick_target(pushed, target)
        out_remote = self._abs(f"{self.workdir.rstrip('/')}/data/out-{os.getpid()}-{threading.get_ident()}-"
                               f"{time.monotonic_ns()}.npz")
        t0 = time.monotonic()
        self.agent("infer", {"model_path": self._abs(pushed.remote_path), "target": target,
                             "target_options": self.profile.runtime.target_options(target, target_options),
                             "inputs_npz": self._abs(inputs.remote_path), "outputs_npz": out_remote,
                             "cache_max_bytes": int(self.profile.connection.cache_max_mb * (1 << 20)),
                             **({"compress": True} if compress else {}), **({"carry": dict(carry)} if carry else {})},
                   timeout_s=timeout_s)
        samples = _samples_in(Path(feeds_npz))
        if samples:    # an upper bound (it includes loading the model): it sizes later timeouts
            self._s_per_inference[pushed.sha256] = (time.monotonic() - t0) / samples
        with tempfile.TemporaryDirectory(prefix="edgesdk-infer-") as tmp:
            local = Path(tmp) / "outputs.npz"
            try:
                self.transport.get(out_remote, local)
            finally:
                self.transport.run(["rm", "-f", out_remote], timeout_s=60)
            from ..sources import check_array_file

            check_array_file(local)     # a board's outputs are bounded like any input: headers first
            with np.load(local, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}


    def pipeline(self, spec: Any, data: Any, config: Any = None, *, timeout_s: Optional[float] = None) -> Any:
        """Run a whole pipeline on the board: every stage's model, the user glue files and the input
        images are pushed (content-addressed), then the agent runs every stage and glue step there
        and samples power over the measured run. ``spec``: a :class:`sdk.kernels.pipelines.PipelineSpec`;
        ``data``: a folder of images, a file or a list of files; ``config``: a
        :class:`~sdk.kernels.pipelines.RunConfig`. Returns a :class:`~sdk.kernels.pipelines.PipelineResult`
        (``board`` and ``energy`` filled; outputs, stages and models named as on the host)."""
        from ..kernels.pipelines import RunConfig
        from ..kernels.pipelines.result import PipelineResult
        from ..kernels.pipelines.runner import IMAGE_EXTENSIONS

        cfg = config or RunConfig()
        doc = spec.to_dict()
        local_models = list(spec.models())
        for st in doc["stages"]:
            st["model"] = self._abs(self.push(Path(st["model"])).remote_path)
            for g in st["pre"] + st["post"]:
                if ".py:" in g["step"]:
                    file, _, fn = g["step"].rpartition(":")
                    g["step"] = "%s:%s" % (self._abs(self.push(Path(file), kind="data").remote_path), fn)
        if isinstance(data, (str, os.PathLike)) and Path(data).is_dir():
            files = sorted(f for f in Path(data).iterdir() if f.suffix.lower() in IMAGE_EXTENSIONS)
        elif isinstance(data, (str, os.PathLike)):
            files = [Path(data)]
        else:
            files = [Path(f) for f in data]
        if not files:
            raise _errors.InputError(f"no images in '{data}'", "give a folder of pages or photos")
        for f in files:
            if not f.is_file():
                raise _errors.InputError(f"pipeline input '{f}' does not exist")
        inputs = [{"name": f.name, "path": self._abs(self.push(f, kind="data").remote_path)} for f in files]
        request = {"spec": doc, "inputs": inputs, "frames": cfg.frames, "warmup": cfg.warmup,
                   "overlapped": cfg.overlapped, "queue_depth": cfg.queue_depth, "workdir": self._abs(self.workdir),
                   "power": self._power_request()}
        timeout = timeout_s or (BENCH_TIMEOUT_PAD_S + 30.0 * (cfg.frames + cfg.warmup) * len(doc["stages"]))
        result = PipelineResult.from_dict(self.agent("pipeline", request, timeout_s=timeout),
                                          source=f"board '{self.name}'")
        result.board = self.info()
        for st, local in zip(result.stages, local_models):
            st["model"] = {"path": local, "name": Path(local).name, "remote_path": st["model"]["path"]}
        result.pipeline["spec"] = spec.to_dict()
        return result

    def clean(self) -> Dict[str, Any]:
        """Empty the board's cache (``<workdir>/data`` and ``<workdir>/models``); returns
        ``{workdir, removed_files, removed_bytes}``. Models and data are pushed again when needed."""
        self._agent = None      # pushed again on next use (it lives outside the cleaned folders)
        return self.agent("clean", {"workdir": self._abs(self.workdir)}, timeout_s=300)


@dataclass
class FleetResult:
    """One board's outcome in :func:`run_fleet`: ``value`` or ``error`` (never both)."""

    board: str
    value: Any = None
    error: Optional[BaseException] = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def run_fleet(boards: Sequence[Union[str, BoardProfile, Board]], fn: Callable[[Board], Any], *,
              max_workers: int = 8, on_result: Optional[Callable[[FleetResult], None]] = None,
              **board_kwargs: Any) -> List[FleetResult]:
    """Run ``fn(board)`` on every board concurrently (at most ``max_workers`` at once: Ansible's
    forks). A board that fails does not stop the others: its :class:`FleetResult` carries the error.
    ``on_result(result)`` is called in the calling thread as each board finishes (to stream them).
    Results come back in the order of ``boards``.

    Ctrl-C (KeyboardInterrupt in the calling thread) stops every board job: the commands running
    on the boards get TERM, then KILL (:func:`sdk.remote.cancel.cancel_all`), and the interrupt is
    raised once they are stopped (within about 3 s). The workers are daemon threads, so nothing
    left waiting on a silent board keeps the process alive."""
    if not boards:
        return []
    results: List[Optional[FleetResult]] = [None] * len(boards)
    slots = threading.BoundedSemaphore(max(1, min(max_workers, len(boards))))
    finished: "queue.Queue[int]" = queue.Queue()

    def one(i: int, spec: Union[str, BoardProfile, Board]) -> None:
        start = time.monotonic()
        label = spec.name if isinstance(spec, (Board, BoardProfile)) else str(spec)
        try:
            with slots:
                check_cancelled()
                board = spec if isinstance(spec, Board) else Board(spec, **board_kwargs)
                label = board.name
                with board:
                    value = fn(board)
            results[i] = FleetResult(label, value=value, seconds=time.monotonic() - start)
        except Exception as exc:  # one board's failure is its result, not the fleet's
            results[i] = FleetResult(label, error=exc, seconds=time.monotonic() - start)
        except BaseException as exc:  # cancelled (KeyboardInterrupt in this worker)
            results[i] = FleetResult(label, error=exc, seconds=time.monotonic() - start)
        finally:
            finished.put(i)

    for i, spec in enumerate(boards):
        threading.Thread(target=one, args=(i, spec), name=f"edgesdk-board-{i}", daemon=True).start()
    try:
        for _ in range(len(boards)):
            while True:
                try:
                    i = finished.get(timeout=0.1)
                    break
                except queue.Empty:
                    continue
            done = results[i]
            if on_result is not None and done is not None:
                on_result(done)
    except KeyboardInterrupt:
        cancel_all()
        raise
    return [r for r in results if r is not None]
