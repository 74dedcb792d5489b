"""`s2s.distributed`: one run over several processes (and machines), as `jax.distributed`.

    s2s.distributed.initialize("10.0.0.1:1234", num_processes=2, process_id=i)
    step = s2s.pmap(train_step, "batch", in_axes=(None, 0, 0))
    params = step(params, my_xs, my_ys)    # my_xs: this process's slices, one per local device

Every process calls `initialize` before its first jit call or device query, with the same
address and process count and its own `process_id` (0 runs the coordinator). Afterwards
`s2s.devices()` lists every process's devices, `s2s.local_devices()` this one's; a pmap
maps one slice per local device and its collectives (`psum`, `pmean`, `all_gather` ...)
span all devices of all processes; every process must make the same pmap calls, which each
checks before a program first runs (else ProgramMismatchError, naming what differs). The
runtime is jaxlib's own (coordination service, Gloo collectives over TCP): see
`s2s_runtime.distributed` for what happens when a process cannot join or goes away.
"""
from __future__ import annotations

from s2s.errors import S2SError, api_boundary
from s2s_runtime import distributed as runtime
from s2s_runtime.distributed import PeerLostError, ProgramMismatchError

__all__ = ["DistributedError", "PeerLostError", "ProgramMismatchError", "initialize", "shutdown"]


class DistributedError(S2SError, RuntimeError):
    """The processes of a run could not be set up (or torn down) as one."""

    default_help = ("start every process with the same coordinator_address and num_processes "
                    "and its own process_id, before any jit call or device query")


@api_boundary
def initialize(coordinator_address: str, num_processes: int, process_id: int,
               local_device_count: int | None = None, timeout: float = 60.0,
               heartbeat_timeout: float = 10.0) -> None:
    """Joins this process to a run of `num_processes`; returns once all have joined.

    `coordinator_address` is "host:port" of process 0, which serves it; `local_device_count`
    is how many CPU devices this process has (default: S2S_NUM_CPU_DEVICES or the config's
    num_cpu_devices, else 1). Within `timeout` seconds the coordinator must be reachable
    and every process connected, else DistributedError (or, once the coordinator answered
    but a process never came, jaxlib ends the process with its own message). A process
    that stops sending heartbeats for `heartbeat_timeout` seconds ends the others (jaxlib
    names it); one that dies during a collective makes it raise PeerLostError at once.
    Before a pmap's program first runs, every process checks that all the others run the
    same one (its collectives, the shapes and dtypes of its arguments) and raises
    ProgramMismatchError naming the difference, or a process that did not come to run it
    within `timeout` seconds.
    """
    if not isinstance(coordinator_address, str):
        raise DistributedError(f"coordinator_address must be a 'host:port' string, not {coordinator_address!r}",
                               "write it like '127.0.0.1:1234'")
    for name, value, low in (("num_processes", num_processes, 1), ("process_id", process_id, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise DistributedError(f"{name} must be an int of at least {low}, not {value!r}")
    if process_id >= num_processes:
        raise DistributedError(f"process_id {process_id} is out of range for {num_processes} processes",
                               f"number the processes 0 to {num_processes - 1}")
    if not timeout > 0 or not heartbeat_timeout > 0:
        raise DistributedError(f"timeouts must be positive seconds, not timeout={timeout!r}, "
                               f"heartbeat_timeout={heartbeat_timeout!r}")
    try:
        runtime.initialize(coordinator_address, num_processes, process_id, local_device_count,
                           timeout=timeout, heartbeat_timeout=heartbeat_timeout)
    except (ValueError, RuntimeError) as error:   # runtime.DistributedError, bad device counts
        raise DistributedError(str(error)) from None


@api_boundary
def shutdown() -> None:
    """Leaves the run (waits for the other processes to leave too); also done at exit."""
    try:
        runtime.shutdown()
    except runtime.DistributedError as error:
        raise DistributedError(str(error), "check the other processes' output") from None
