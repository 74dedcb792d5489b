"""Several processes as one run, on jaxlib's own distributed runtime.

Process 0 starts jaxlib's coordination service; every process connects a client to it,
makes Gloo TCP collectives over it and builds the process's CPU client on both, so that
`s2s_runtime.xla.client()` sees every process's devices (`global_devices()`) and computes
on its own (`xla.devices()`). A pmap then runs one program over all devices, each process
feeding its local devices (see `s2s_runtime.replicated`). JAXLIB_NOTES.md, "Several
processes", has the jaxlib facts this relies on.

Failures are bounded, never a hang:
- a coordinator that cannot be reached within `timeout` is a DistributedError naming the
  address (probed with a plain TCP connection first: jaxlib's own connect timeout
  terminates the process instead of raising);
- a peer that dies while a collective runs breaks Gloo's TCP connections at once: the
  call raises PeerLostError;
- a peer that stops answering (or dies between steps) misses its heartbeats; after
  `heartbeat_timeout` seconds the coordination service tells every process, and jaxlib
  terminates each of them with a message naming the unhealthy process (a Python callback
  for that event cannot be given: jaxlib 0.10.2 fails to pass it the status);
- processes about to run different programs across processes (a psum against a pmax,
  other shapes or dtypes) would meet in Gloo anyway, which then mixes unrelated buffers
  (wrong results), waits forever, or aborts: before a program first runs, every process
  checks that all run the same one (`agree_on_program`) and raises ProgramMismatchError
  naming the difference, or the process that did not come within `timeout`.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import json
import re
import socket
import threading
import time

from s2s_runtime import quiet_logs, xla  # noqa: F401  (quiet_logs: before jaxlib loads)
from jaxlib import _jax, xla_client


class DistributedError(RuntimeError):
    """The processes of a run could not be set up (or torn down) as one."""


class PeerLostError(RuntimeError):
    """A computation across processes failed because another process went away."""


class ProgramMismatchError(RuntimeError):
    """The processes of a run were about to run different programs across processes, or
    one did not come to run this one in time: raised by each process that checked, before
    any collective of the program ran."""


@dataclasses.dataclass
class _Run:
    address: str
    num_processes: int
    process_id: int
    client: object
    service: object | None
    timeout: float
    # The fingerprints of the programs every process agreed on, how many this process
    # checked (the number its next one is compared under), and the lock checks run under.
    agreed: set = dataclasses.field(default_factory=set)
    checked: int = 0
    checking: threading.Lock = dataclasses.field(default_factory=threading.Lock)


_run: _Run | None = None
_lock = threading.Lock()
_PROBE_INTERVAL_S = 0.1


def initialize(coordinator_address: str, num_processes: int, process_id: int,
               local_device_count: int | None = None, timeout: float = 60.0,
               heartbeat_timeout: float = 10.0) -> None:
    """Joins this process to a run of `num_processes` (see the module docstring); returns
    once every process has joined and the CPU client over all of them exists."""
    global _run
    host, port = _host_and_port(coordinator_address)
    with _lock:
        if _run is not None:
            raise DistributedError(f"this process already joined the run coordinated at {_run.address}")
        try:   # (the plain client for now: only to learn whether the client exists already)
            xla.make_client_with(None)
        except RuntimeError:
            raise DistributedError("the XLA client of this process already exists: start the "
                                   "distributed runtime before the first jit call or device query") from None
        if local_device_count is not None:
            xla.set_num_cpu_devices(local_device_count)
        seconds, heartbeat_seconds = max(1, int(round(timeout))), max(1, int(round(heartbeat_timeout)))
        service = None
        if process_id == 0:
            _check_port_free(host, port, coordinator_address)
            try:
                service = _jax.get_distributed_runtime_service(
                    coordinator_address, num_processes, heartbeat_timeout=heartbeat_seconds,
                    cluster_register_timeout=seconds, shutdown_timeout=seconds)
            except Exception as error:   # jaxlib raises its runtime error with gRPC's text
                raise _service_failed(coordinator_address, error) from None
        _wait_until_reachable(host, port, coordinator_address, process_id, timeout)
        distributed_client = _jax.get_distributed_runtime_client(
            coordinator_address, process_id, rpc_timeout=seconds, init_timeout=seconds,
            shutdown_timeout=seconds, heartbeat_timeout=heartbeat_seconds,
            shutdown_on_destruction=False)
        distributed_client.connect()   # waits for every process to connect (at most `timeout`)
        collectives = _jax.make_gloo_tcp_collectives(distributed_client)
        xla.make_client_with(lambda count: xla_client.make_cpu_client(
            distributed_client=distributed_client, node_id=process_id, num_nodes=num_processes,
            collectives=collectives, num_devices=count))
        _run = _Run(coordinator_address, num_processes, process_id, distributed_client, service, timeout)
    atexit.register(shutdown)
    xla.client()   # every process's devices, exchanged through the coordinator


def shutdown() -> None:
    """Leaves the run: waits (at most the start-up `timeout`) until every process has
    reached its own shutdown, then stops the client and, on process 0, the service. The
    XLA client stays; computations across processes cannot run any more. Also at exit."""
    global _run
    with _lock:
        run, _run = _run, None
    if run is None:
        return
    try:
        run.client.shutdown()
    except Exception as error:   # the others went away first: nothing left to wait for
        raise DistributedError(f"process {run.process_id} could not leave the run cleanly: {error}") from None
    finally:
        if run.service is not None:
            run.service.shutdown()


def global_devices() -> list:
    """Every device of every process in the run (this process's alone without one)."""
    return list(xla.client().devices())


def process_index() -> int:
    return xla.client().process_index()


def process_count() -> int:
    return len({device.process_index for device in xla.client().devices()})


def replica_devices(chosen: list | None, size: int) -> list:
    """The devices a pmap with `size` slices per process runs its replicas on: the first
    `size` of `chosen` (default: this process's devices); across processes, every device
    of the run, each process feeding its own (the caller checked `size` is their count)."""
    if chosen is not None:
        return list(chosen)[:size]
    if process_count() > 1:
        return global_devices()
    return xla.devices()[:size]


def several_processes() -> bool:
    """Whether this process is in a run of several (without making the client)."""
    return _run is not None and _run.num_processes > 1


def replica_count(chosen: list | None, size: int) -> int:
    """How many replicas that pmap has, without making the client (a lowering needs no
    devices): `size`, or `size` per process in a run of several."""
    run = _run
    return size * run.num_processes if run is not None and chosen is None else size


@contextlib.contextmanager
def peer_failures_raised_clearly():
    """Turns XLA's error for a cross-process collective that lost its peer (Gloo's TCP
    connection closed) into a PeerLostError. It surfaces where the results are waited for:
    the call, or, since XLA runs asynchronously, reading or awaiting a result."""
    try:
        yield
    except xla_client.XlaRuntimeError as error:
        if "Gloo" not in str(error):
            raise
        raise PeerLostError(
            f"process {process_index()} of {process_count()}: a collective across processes failed, "
            f"most likely because another process died or was stopped ({error}). Check the other "
            "processes' output; every process of the run must make the same calls") from None


def agree_on_program(program: str | bytes, replicas: list, label: str, aspects: dict[str, list[str]]) -> None:
    """Returns once every process of the run is about to run this same program on `replicas`;
    else raises ProgramMismatchError naming what differs, or the process that did not come
    within the run's `timeout`. Called before a program across processes first runs.

    `program` is its StableHLO text (a deserialized executable's bytes where that is not
    known); `label` names it for messages (`pmap(loss) at train.py:12`); `aspects` says
    what it does in words, each a verb and its items (`{"runs": ["psum"], "passes":
    ["f32[2,4]"]}`), to name a difference. Each process numbers the programs it checks and
    puts its n-th fingerprint (the program's hash, the aspects, the devices) in the
    coordination service's key-value store, then compares every other process's n-th. A
    program all agreed on is not checked again, so processes making the same calls number
    them alike whatever their caches hold, and later calls cost nothing.
    """
    run = _run
    if run is None or run.num_processes == 1:
        return
    fingerprint = json.dumps({"sha256": program_hash(program),
                              "aspects": {**aspects, "runs on": [f"devices {[d.id for d in replicas]}"]}})
    with run.checking:
        if fingerprint in run.agreed:
            return
        run.checked += 1
        number = run.checked
        mine = {**json.loads(fingerprint), "label": label}
        theirs, missing = _published_by_all(run, f"s2s/programs/{number}/", mine)
        problem = _disagreement(run, number, mine, theirs, missing)
        if problem is not None:
            raise ProgramMismatchError(f"process {run.process_id} of {run.num_processes}: {problem}")
        run.agreed.add(fingerprint)


def _disagreement(run: _Run, number: int, mine: dict, theirs: dict[int, dict], missing: list[int]) -> str | None:
    """What is wrong with this process's `number`-th program given the others' fingerprints
    (`theirs`) and the processes that put none (`missing`), in words; None when all agree."""
    label = mine["label"]
    if missing:
        plural = len(missing) > 1
        return (f"{_processes(missing)} did not come to run this process's {_ordinal(number)} program across "
                f"processes, {label} ({_summary(mine['aspects'])}), within {run.timeout:g} s: "
                f"{'they run' if plural else 'it runs'} another program there (or one run before, or none), "
                f"or {'are' if plural else 'is'} still busy elsewhere. Nothing ran: every process must make "
                "the same pmap calls in the same order; a process that needs longer to get there needs a "
                "larger `timeout` in s2s.distributed.initialize")
    differences = []
    for peer, other in theirs.items():
        difference = _difference(peer, mine, other)
        if difference:
            differences.append(f"process {peer}'s is {'the same' if other['label'] == label else other['label']}: "
                               f"{difference}")
    if not differences:
        return None
    # Every process sees a difference too, and raises: none may end (process 0 taking the
    # coordinator with it) while another still reads. A barrier that fails means one ended
    # anyway, which that process's own error explains.
    with contextlib.suppress(xla_client.XlaRuntimeError):
        run.client.wait_at_barrier(f"s2s/programs/{number}/compared", int(run.timeout * 1000))
    return (f"the processes were about to run different programs as their {_ordinal(number)} across processes. "
            f"This process's is {label}; {'; '.join(differences)}. Nothing ran: every process must make the "
            "same pmap calls, in the same order, with arguments of the same shapes and dtypes")


_LOCATION = re.compile(r'\s*\bloc\((?:[^()"]|"(?:[^"\\]|\\.)*")*\)')
_VALUE_NAME = re.compile(r"%[\w$.-]+")


def program_hash(program: str | bytes) -> str:
    """The sha256 of a program, the same for the same computation wherever its source lies
    and whatever its values are called: a text's source locations (`loc(...)`) are left out
    and its values (`%x`) numbered in the order they appear."""
    if isinstance(program, str):
        names: dict[str, str] = {}
        text = _VALUE_NAME.sub(lambda m: names.setdefault(m.group(), f"%{len(names)}"), _LOCATION.sub("", program))
        program = text.encode()
    return hashlib.sha256(program).hexdigest()


def _published_by_all(run: _Run, prefix: str, mine: dict) -> tuple[dict[int, dict], list[int]]:
    """Puts `mine` under `prefix` in the key-value store and reads every other process's:
    ({process: what it put}, the processes that put nothing within the run's timeout)."""
    deadline = time.monotonic() + run.timeout
    others = [p for p in range(run.num_processes) if p != run.process_id]
    try:
        run.client.key_value_set(f"{prefix}{run.process_id}", json.dumps(mine))
        theirs = {}
        for peer in others:
            wait_ms = max(1, int((deadline - time.monotonic()) * 1000))
            theirs[peer] = json.loads(run.client.blocking_key_value_get(f"{prefix}{peer}", wait_ms))
        return theirs, []
    except xla_client.XlaRuntimeError as error:
        if "DEADLINE_EXCEEDED" not in str(error):   # the coordinator, process 0, went away
            raise PeerLostError(f"process {run.process_id} could not compare the program it is about to run "
                                f"with the other processes' through the coordinator at {run.address}: {error}"
                                ) from None
    # A peer may publish between the timeout and this listing: what it put is compared
    # too, never left out as if it had agreed.
    published = {int(key.rsplit("/", 1)[1]): json.loads(value) for key, value in run.client.key_value_dir_get(prefix)}
    return {p: published[p] for p in others if p in published}, [p for p in others if p not in published]


def _difference(peer: int, mine: dict, theirs: dict) -> str | None:
    """What process `peer`'s fingerprint says its program does otherwise than this
    process's, in words; None when they are the same."""
    if mine["sha256"] == theirs["sha256"] and mine["aspects"] == theirs["aspects"]:
        return None
    said = [_contrast(peer, verb, ours, theirs["aspects"].get(verb, []))
            for verb, ours in mine["aspects"].items() if theirs["aspects"].get(verb, []) != ours]
    return "; ".join(said) or (f"process {peer} runs the same collectives on the same arguments but computes "
                               "something else (its StableHLO differs from this process's)")


def _contrast(peer: int, verb: str, ours: list[str], theirs: list[str]) -> str:
    """`process 1 runs pmax where this process runs psum`: of lists as long, the first item
    that differs and where it is; else both lists."""
    if len(ours) == len(theirs) > 1:
        i = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
        return (f"process {peer} {verb} {theirs[i]} where this process {verb} {ours[i]} "
                f"(the {_ordinal(i + 1)} of {len(ours)})")
    return f"process {peer} {verb} {_listed(theirs)} where this process {verb} {_listed(ours)}"


def _summary(aspects: dict[str, list[str]]) -> str:
    return "; ".join(f"{verb} {_listed(items)}" for verb, items in aspects.items())


def _listed(items: list[str], most: int = 6) -> str:
    shown = ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")
    return shown or "nothing"


def _processes(ids: list[int]) -> str:
    return f"process {ids[0]}" if len(ids) == 1 else f"processes {', '.join(map(str, ids))}"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 < 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _host_and_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise DistributedError(f"the coordinator address must be HOST:PORT (like 127.0.0.1:1234), "
                               f"not {address!r}")
    return host.strip("[]"), int(port)


def _check_port_free(host: str, port: int, address: str) -> None:
    """Raises DistributedError when the coordinator's port cannot be bound: jaxlib's service
    fails then too, but sometimes crashes the process (a segfault) on the way."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, port))
    except OSError as error:
        raise _service_failed(address, error) from None


def _service_failed(address: str, error: BaseException) -> DistributedError:
    return DistributedError(f"process 0 could not start the coordination service on {address}: {error}; "
                            "check that the port is free and the host is an address of this machine")


def _wait_until_reachable(host: str, port: int, address: str, process_id: int, timeout: float) -> None:
    """Returns once a TCP connection to the coordinator opens; raises DistributedError
    after `timeout` seconds (the coordinator may start after this process)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
                return
        except OSError as error:
            if time.monotonic() >= deadline:
                raise DistributedError(
                    f"process {process_id} could not reach the coordinator at {address} within "
                    f"{timeout:g} s ({error}); check that process 0 runs with the same "
                    f"coordinator_address, that {host} is an address of its machine, and that "
                    f"port {port} is open between the machines") from None
            time.sleep(_PROBE_INTERVAL_S)
