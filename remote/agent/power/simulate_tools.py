"""SIMULATION ONLY: fake ``nvpmodel`` and ``jetson_clocks`` for a :class:`.simulate.SimulatedBoard`
tree, so clock locking (:class:`.clocks.ClockLock`, ``--lock-clocks``) can be run and checked on a
machine that is not a Jetson. Nothing here touches real clocks. Runs on Python 3.8.
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Union

from .simulate import LABEL

__all__ = ["write_fake_jetson_tools"]


_NVPMODEL = '''#!{python}
# {label}
# A fake `nvpmodel` for the simulated tree at {root!r}: -q prints the mode, -m N sets it.
# Every call is appended to {log!r}.
import json, os, re, sys
ROOT, LOG = {root!r}, {log!r}
with open(LOG, "a") as f:
    f.write(json.dumps(["nvpmodel"] + sys.argv[1:]) + "\\n")
status = os.path.join(ROOT, "var/lib/nvpmodel/status")
conf = open(os.path.join(ROOT, "etc/nvpmodel.conf")).read()
names = dict((int(i), n) for i, n in re.findall(r"POWER_MODEL\\s+ID=(\\d+)\\s+NAME=([^\\s>]+)", conf))
args = sys.argv[1:]
if args[:1] == ["-q"]:
    mode = int(open(status).read().split(":")[1])
    print("NV Power Mode: %s" % names.get(mode, "?"))
    print(mode)
elif args[:1] == ["-m"] and len(args) > 1:
    mode = int(args[1])
    if mode not in names:
        sys.stderr.write("NVPM ERROR: invalid mode %d\\n" % mode)
        sys.exit(1)
    with open(status, "w") as f:
        f.write("pmode:%04d\\n" % mode)
else:
    sys.stderr.write("usage: nvpmodel [-q] [-m mode]\\n")
    sys.exit(2)
'''

_JETSON_CLOCKS = '''#!{python}
# {label}
# A fake `jetson_clocks` for the simulated tree at {root!r}: pins CPU and GPU minimum clocks to their
# maximum and EMC to its maximum; --store FILE / --restore FILE save and put back what it changes.
# Every call is appended to {log!r}.
import glob, json, os, sys
ROOT, LOG = {root!r}, {log!r}
with open(LOG, "a") as f:
    f.write(json.dumps(["jetson_clocks"] + sys.argv[1:]) + "\\n")
def files():
    out = []
    for c in sorted(glob.glob(os.path.join(ROOT, "sys/devices/system/cpu/cpu[0-9]*/cpufreq"))):
        out.append((os.path.join(c, "scaling_min_freq"), os.path.join(c, "scaling_max_freq")))
        out.append((os.path.join(c, "scaling_cur_freq"), os.path.join(c, "scaling_max_freq")))
    for d in sorted(glob.glob(os.path.join(ROOT, "sys/class/devfreq/*"))):
        out.append((os.path.join(d, "min_freq"), os.path.join(d, "max_freq")))
        out.append((os.path.join(d, "cur_freq"), os.path.join(d, "max_freq")))
    emc = os.path.join(ROOT, "sys/kernel/debug/bpmp/debug/clk/emc")
    out.append((os.path.join(emc, "rate"), os.path.join(emc, "max_rate")))
    return [(a, b) for a, b in out if os.path.exists(a) and os.path.exists(b)]
args = sys.argv[1:]
if args[:1] == ["--store"]:
    with open(args[1], "w") as f:
        for a, _ in files():
            f.write("%s %s\\n" % (a, open(a).read().strip()))
elif args[:1] == ["--restore"]:
    for line in open(args[1]):
        path, value = line.split()
        with open(path, "w") as f:
            f.write(value + "\\n")
elif args[:1] == ["--show"]:
    for a, b in files():
        print("%s %s max %s" % (a, open(a).read().strip(), open(b).read().strip()))
elif not args:
    for a, b in files():
        with open(a, "w") as f:
            f.write(open(b).read())
else:
    sys.stderr.write("usage: jetson_clocks [--show] [--store FILE] [--restore FILE]\\n")
    sys.exit(2)
'''


def write_fake_jetson_tools(bin_dir: Union[str, os.PathLike], root: Union[str, os.PathLike]) -> Path:
    """SIMULATION: write executables ``nvpmodel`` and ``jetson_clocks`` into ``bin_dir`` (put it
    first on PATH) that act on the simulated tree under ``root`` (a :class:`SimulatedBoard`
    layout ``jetson-jp5``/``jetson-jp4``) the way the real tools act on a Jetson, and append every
    call (argv, as a JSON list) to ``bin_dir/calls.log``. Returns that log's path."""
    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    log = bin_dir / "calls.log"
    for name, text in (("nvpmodel", _NVPMODEL), ("jetson_clocks", _JETSON_CLOCKS)):
        path = bin_dir / name
        path.write_text(text.format(python=sys.executable, label=LABEL, root=str(root), log=str(log)))
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return log
