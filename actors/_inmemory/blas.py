"""BLAS thread control for scans: a chooser that picks, scan by scan, between one core
and BLAS as configured from the measured times of recent scans, and the two ways a scan
gets "one core" (``scan.py`` explains why this machine needs the choice).

- **By default** (``open_store(..., blas_threads=None)``) nothing process-wide is ever
  changed. A scan that should run on one core calls BLAS on row blocks of fewer than
  ``BLAS_SINGLE_BELOW`` floats each, which OpenBLAS runs on the calling thread by its own
  rule (:class:`LeaveThreads`).
- **Opted in** (``blas_threads="auto"``), such a scan holds OpenBLAS's process-wide
  thread count at one while it runs (:class:`BlasThreads`, through :class:`HoldThreads`):
  one call over the whole arena, and every other thread of the process that calls BLAS
  meanwhile runs on one thread too.
"""

from __future__ import annotations

import os
import threading
from typing import Protocol

import attrs
import numpy as np

from protocol import ConfigError
from protocol.checks import shown

__all__ = [
    "BLAS_SINGLE_BELOW",
    "BlasControl",
    "BlasThreads",
    "HoldThreads",
    "LeaveThreads",
    "ThreadChooser",
    "blas_control",
    "blas_threads",
    "cores",
]

#: OpenBLAS 0.3.x runs sgemv on the calling thread below 115200 × GEMM_MULTITHREAD_THRESHOLD
#: (4) = 460 800 elements (seen here: a matvec of 460 800 floats gives CPU time to its
#: worker thread, one of 399 360 never does). A scan below this size is one thread
#: whatever the settings, and a one-core scan of a bigger arena is cut into row blocks
#: under it.
BLAS_SINGLE_BELOW = 400_000


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


class _BlasLibrary(Protocol):
    """What is used of one of threadpoolctl's BLAS library controllers."""

    def info(self) -> dict[str, object]: ...

    def get_num_threads(self) -> int: ...

    def set_num_threads(self, num_threads: int) -> object: ...


class BlasThreads:
    """Holds the BLAS libraries that numpy loaded at one thread while scans run.

    The setting is process-wide, so holders are counted: the first one in saves the
    current counts and sets one thread, the last one out restores them. This uses the
    library controllers of one ``threadpoolctl.ThreadpoolController``, made once:
    ``lib.set_num_threads`` costs about 2 µs here, against about 25 µs for
    ``ThreadpoolController.limit`` and about 470 µs for a fresh ``threadpool_limits``
    (which scans the loaded libraries again each time).

    Other threads of the process that run BLAS while a scan is in flight run on one
    thread too; their previous count comes back when the last scan ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._saved: list[int] = []
        self._single = False
        self._changed = False
        self._libs: list[_BlasLibrary] | None = None

    def libraries(self) -> list[_BlasLibrary]:
        """The BLAS library controllers (loaded lazily, once)."""
        if self._libs is None:
            from threadpoolctl import ThreadpoolController

            controller = ThreadpoolController()
            self._libs = list(controller.select(user_api="blas").lib_controllers)
        return self._libs

    def info(self) -> list[dict[str, object]]:
        """Which BLAS numpy uses and with how many threads (threadpoolctl's view)."""
        return [lib.info() for lib in self.libraries()]

    def acquire(self, single: bool = True) -> bool:
        """Hold the BLAS thread count while a scan runs; return whether it is one.

        With ``single``, the first holder saves the current counts and sets one thread.
        Without it, the counts are left as configured. A holder that joins others gets
        the setting they made, so a scan never changes the count under a running one.
        """
        with self._lock:
            if self._holders == 0:
                libs = self.libraries()
                self._saved = [int(lib.get_num_threads()) for lib in libs]
                self._single = single or all(count == 1 for count in self._saved)
                self._changed = single
                if single:
                    for lib, count in zip(libs, self._saved, strict=True):
                        if count != 1:
                            lib.set_num_threads(1)
            self._holders += 1
            return self._single

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._changed:
                for lib, count in zip(self.libraries(), self._saved, strict=True):
                    if count != 1:
                        lib.set_num_threads(count)


#: The process-wide guard every store opened with ``blas_threads="auto"`` shares.
blas_threads = BlasThreads()


class BlasControl:
    """How a store's scans get "one core" (see the module docstring).

    ``acquire(single)`` is called on the trio thread before a scan and returns whether
    it runs on one core; ``release()`` after it. ``blocks`` says whether a one-core
    scan must call BLAS on row blocks under ``BLAS_SINGLE_BELOW`` floats (nothing else
    keeps OpenBLAS from using its threads), or may make one call.
    """

    blocks: bool = True
    #: What ``open_store``'s ``blas_threads`` was: None or ``"auto"``.
    setting: str | None = None

    def acquire(self, single: bool) -> bool:
        return single

    def release(self) -> None:
        return None


class LeaveThreads(BlasControl):
    """The default: the BLAS thread count is never read or changed."""


class HoldThreads(BlasControl):
    """``blas_threads="auto"``: a one-core scan holds OpenBLAS at one thread, process-wide,
    through the shared :data:`blas_threads` guard."""

    blocks = False
    setting = "auto"

    def acquire(self, single: bool) -> bool:
        return blas_threads.acquire(single)

    def release(self) -> None:
        blas_threads.release()


def blas_control(setting: object) -> BlasControl:
    """The control for ``open_store``'s ``blas_threads`` argument, checked.

    Raises:
        ConfigError: anything but None or ``"auto"``.
    """
    if setting is None:
        return LeaveThreads()
    if isinstance(setting, str) and setting == "auto":
        return HoldThreads()
    raise ConfigError(
        f"blas_threads is {shown(setting)}; expected None (the default: reads never change "
        "the process's BLAS thread count) or 'auto' (a read may hold OpenBLAS at one "
        "thread, for the whole process, while it scans)"
    )


#: The chooser's first probe of the other BLAS setting, and its longest back-off.
PROBE_FIRST = 4
PROBE_EVERY = 16
PROBE_MAX = 256
_WINDOW = 5
#: How much slower than the other setting's median the current one must get to switch
#: without a probe.
SWITCH_MARGIN = 1.5


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


@attrs.define(eq=False)
class _SizeClass:
    """Recent seconds per float of each BLAS setting, for one size class and path."""

    times: tuple[list[float], list[float]] = attrs.field(factory=lambda: ([], []))
    single: bool = False
    probe_in: int = PROBE_FIRST
    probe_every: int = PROBE_EVERY
    #: How many scans ran with each setting (as configured, one thread).
    runs: list[int] = attrs.field(factory=lambda: [0, 0])
    switches: int = 0

    def choose(self) -> bool:
        self.probe_in -= 1
        if self.probe_in <= 0:
            self.probe_in = self.probe_every
            return not self.single
        return self.single

    def record(self, single: bool, per_float: float) -> None:
        self.runs[single] += 1
        was = self.single
        self._record(single, per_float)
        self.switches += was != self.single

    def _record(self, single: bool, per_float: float) -> None:
        window = self.times[single]
        window.append(per_float)
        if len(window) > _WINDOW:
            del window[0]
        other = self.times[not self.single]
        if single != self.single:
            # A probe of the other setting: it wins by beating the current median. Its
            # older samples may date from another load, so only this one is kept.
            if per_float < _median(self.times[self.single] or [np.inf]):
                window[:] = [per_float]
                self.single = single
                self.probe_every = PROBE_EVERY
            else:
                self.probe_every = min(PROBE_MAX, self.probe_every * 2)
            self.probe_in = self.probe_every
        elif other and _median(window) > SWITCH_MARGIN * _median(other):
            # The current setting got clearly slower than the other was last seen:
            # switch, and let the next probe check the way back. The margin keeps
            # preemption (which only ever adds time, and on a loaded machine hits a
            # one-thread scan's p90 about as hard as a stall hits two threads) from
            # flipping the choice back and forth; a real change of load is many times
            # over it (quiet: 1.5x the other way; busy: 5-15x).
            self.single = not single
            self.probe_every = PROBE_EVERY
            self.probe_in = self.probe_every


@attrs.define(eq=False)
class ThreadChooser:
    """Chooses, scan by scan, between BLAS as configured and one BLAS thread.

    On a quiet 2-core machine two OpenBLAS threads read the arena about 1.5× faster than
    one (8192×768: 1.17 against 1.80 ms). When the other core is busy, a two-thread call
    stalls in steps of a scheduler tick (8–28 ms), while one thread slows by about 10%.
    Load comes and goes, so no fixed choice is right: the chooser keeps the last five
    times per float of each setting, per size class (rows × dimensions, by powers of two)
    and per path (inline, or threaded with a batch of so many queries, by powers of
    two), and keeps its setting until that one's median gets 1.5× the other's
    (``SWITCH_MARGIN``: on a loaded machine preemption puts a one-thread scan's p90 near
    a stall, and runs of two preempted scans were seen to flip a window of three). The
    other one is probed now and then (every 16 scans, backing off to 256 while it keeps
    losing; a probe wins by beating the current median), so the choice follows the load
    both ways. A probe that lands on a busy core
    costs one stall, which stays out of the p90 at these intervals. Trio thread only.
    """

    classes: dict[tuple[int, int], _SizeClass] = attrs.field(factory=dict)

    @staticmethod
    def path(batch: int) -> int:
        """The path of a threaded batch of ``batch`` queries (0 is the inline path)."""
        return batch.bit_length()

    def _class(self, floats: int, path: int) -> _SizeClass:
        key = (floats.bit_length(), path)
        found = self.classes.get(key)
        if found is None:
            found = self.classes[key] = _SizeClass()
        return found

    def single(self, floats: int, path: int) -> bool:
        """Whether the next scan of this size on this path should use one BLAS thread
        (now and then a probe of the other setting: record how long it took)."""
        return self._class(floats, path).choose()

    def current(self, floats: int, path: int) -> bool:
        """The setting in use for this size and path, for a scan that is not recorded."""
        found = self.classes.get((floats.bit_length(), path))
        return found is not None and found.single

    def record(self, floats: int, path: int, single: bool, seconds: float) -> None:
        """How long a scan of this size on this path took with this setting."""
        self._class(floats, path).record(single, seconds / max(floats, 1))

    def statistics(self) -> dict[str, dict[str, object]]:
        """Per size class and path: scans run with each setting, switches, the setting
        in use and the median ns per float of each (for benches and debugging)."""
        out: dict[str, dict[str, object]] = {}
        for (bits, path), c in sorted(self.classes.items()):
            name = f"2^{bits - 1} floats, " + (
                "inline" if path == 0 else f"batch ~{1 << (path - 1)}"
            )
            out[name] = {
                "scans_blas_as_configured": c.runs[0],
                "scans_one_blas_thread": c.runs[1],
                "switches": c.switches,
                "now_single": c.single,
                "ns_per_float": [round(_median(t) * 1e9, 4) if t else None for t in c.times],
            }
        return out
