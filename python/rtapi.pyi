"""Type hints of the rtapi module: a running rtapi instance's HAL from Python, and LinuxCNC-style
user-space components whose pins live in the instance's segment."""

from typing import Any, Callable, Dict, List, Optional, Sequence, Union

__version__: str

HalValue = Union[bool, int, float]

BIT: int
"""Pin, param and signal type `bit` (bool)."""
FLOAT: int
"""Type `float` (64-bit)."""
S32: int
"""Type `s32`."""
U32: int
"""Type `u32`."""
S64: int
"""Type `s64`."""
U64: int
"""Type `u64`."""
IN: int
"""Pin direction: read by the component."""
OUT: int
"""Pin direction: written by the component."""
IO: int
"""Pin direction: read and written."""
RO: int
"""Param access: read-only to other processes."""
RW: int
"""Param access: settable by other processes."""

class Error(Exception):
    """Every failure of the module; the text is the message the `rtapi` CLI prints for the same
    failure (after `rtapi: `)."""

class NotFound(Error):
    """No pin, param, signal or thread of that name."""

class NotWritable(Error):
    """A write refused by HAL's rules, or a value that does not fit the type."""

class Untrusted(Error):
    """A segment that is not to be believed (symlink, other owner, loose mode): never read."""

class Timeout(Error):
    """wait() ran out of time."""

def instances() -> List[str]:
    """Names of the instances with a segment in /dev/shm (live or stale)."""

class Instance:
    """A running instance's HAL, opened read-only with the CLI's trust checks.

    `name` defaults to $RTAPI_INSTANCE, else "default"; `trust_owner` names other users whose
    segments to believe (as `--trust-owner`)."""

    def __init__(self, name: Optional[str] = None, trust_owner: Sequence[str] = ()) -> None: ...
    @property
    def name(self) -> str:
        """The instance's name."""
    @property
    def owner_pid(self) -> int:
        """The owner's pid, from the segment header (for messages)."""
    def owner_alive(self) -> bool:
        """Whether the owner process is alive (its lock on the segment is held)."""
    def generation(self) -> int:
        """The structure generation; it moves with every structural change."""
    def pins(self) -> List[Dict[str, Any]]:
        """Every pin: name, type, dir, value, owner, signal."""
    def pin_values(self) -> List[HalValue]:
        """Pin values in the order of pins() (valid while generation() does not move)."""
    def params(self) -> List[Dict[str, Any]]:
        """Every param: name, type, access, value, owner."""
    def signals(self) -> List[Dict[str, Any]]:
        """Every signal: name, type, value, writer, readers, bidirs."""
    def components(self) -> List[Dict[str, Any]]:
        """Every component: name, pins, params, functions."""
    def threads(self) -> List[Dict[str, Any]]:
        """Every thread: name, period_ns, cpu, priority, flavor, timer, state, functions."""
    def get(self, name: str) -> HalValue:
        """The value of a pin, param or signal."""
    def set(self, name: str, value: Union[HalValue, str], force: bool = False) -> None:
        """Sets a param or unconnected IN pin (setp's rules) or a signal without writer (sets')."""
    def thread_stats(self, name: str) -> Dict[str, Any]:
        """cycles, overruns, latency_min/max/mean/stddev_ns, jitter_max_ns, exec_last/max/mean_ns,
        drift_ns, spikes, histogram {bin_ns, counts, underflow, overflow}, io (None for a thread
        that ran no I/O function; else {periods, calls, last_ns, min_ns, max_ns, mean_ns, errors,
        error_periods}: a Mesa card's hm2 read/write time per period and hm2_eth's packet
        errors)."""
    def wait(
        self,
        name: str,
        until: Union[None, HalValue, Callable[[HalValue], bool]] = None,
        timeout: float = 5.0,
        interval: float = 0.001,
    ) -> HalValue:
        """Waits until the value satisfies `until` (a predicate, a value to reach, or None for any
        change) and returns it; raises Timeout after `timeout` seconds, polling every `interval`
        seconds (kept between 0.1 ms and 1 s). The GIL is released while waiting.

        `timeout` and `interval` are finite numbers of seconds from 0 to 1e9; NaN, infinities,
        negatives and larger numbers raise Error naming the argument."""

class Component:
    """A user-space component: declare pins and params, ready(), then c[name] reads and
    c[name] = value writes them. It leaves the instance at exit() or when its process ends."""

    def __init__(
        self, name: str, instance: Optional[str] = None, trust_owner: Sequence[str] = ()
    ) -> None: ...
    @property
    def name(self) -> str:
        """The component's name (the prefix of its pins)."""
    @property
    def instance(self) -> str:
        """The instance it joins."""
    def getprefix(self) -> str:
        """The name prefix of its pins and params."""
    def newpin(self, name: str, ty: int, dir: int) -> str:
        """Declares pin NAME.name (before ready()); returns its full name."""
    def newparam(self, name: str, ty: int, access: int = ...) -> str:
        """Declares param NAME.name (before ready()); returns its full name."""
    def ready(self) -> None:
        """Joins the running instance with the declared pins and params."""
    def is_ready(self) -> bool:
        """Whether ready() was called and exit() not yet."""
    def exit(self) -> None:
        """Leaves the instance (its pins are unlinked). Idempotent."""
    def pins(self) -> List[str]:
        """Full names of its pins."""
    def params(self) -> List[str]:
        """Full names of its params."""
    def __getitem__(self, key: str) -> HalValue: ...
    def __setitem__(self, key: str, value: Union[HalValue, str]) -> None: ...
    def __enter__(self) -> "Component": ...
    def __exit__(self, *exc: Any) -> bool: ...

def component(
    name: str, instance: Optional[str] = None, trust_owner: Sequence[str] = ()
) -> Component:
    """A new user-space component (LinuxCNC's hal.component)."""
