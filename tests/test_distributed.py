"""s2s.distributed: pmap across processes on jaxlib's distributed runtime, on 127.0.0.1.

Each test starts worker processes (this file run as a module: `python -m
tests.test_distributed SCENARIO PROCESS_ID PORT OUT_DIR`), each with a timeout, and checks
what they wrote or printed: 2 processes x 2 CPU devices whose collectives span all 4
devices (against NumPy) and whose data-parallel training step equals the one-process step
on the full batch; a process killed (or stopped) mid-run, after which the other ends with
a clear error within its timeout; a coordinator nobody serves, which fails clearly within
the timeout, one whose port is taken, and one whose peer never comes (jaxlib ends it); `initialize` after the first device query,
refused; the README's two-process example trains as one process does on the full batch;
processes about to run different programs (psum against pmax, other shapes or dtypes,
all_gather against psum) each raise ProgramMismatchError naming the difference, and one
whose peer never comes to its program raises within its timeout. Workers block importing
jax: the multi-process path must not lean on jax's hooks.
"""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest


class _BlockJax:
    def find_spec(self, name, path, target=None):
        if name == "jax" or name.startswith("jax."):
            raise ImportError("jax is blocked in this worker")


if __name__ == "__main__":   # a worker: before s2s and jaxlib load
    sys.meta_path.insert(0, _BlockJax())

import s2s  # noqa: E402
from s2s import lax  # noqa: E402
from s2s_runtime.distributed import _difference, program_hash  # noqa: E402
from tests.helpers import CHECKOUT_PATH  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROCESSES, LOCAL_DEVICES = 2, 2
PER_DEVICE, WIDTH, CLASSES = 3, 5, 4
WORKER_TIMEOUT_S = 60
HEARTBEAT_S = 2
DIVERGED_TIMEOUT_S = 4


# -- the computation every worker runs, and its one-process reference


def loss(params, x, y):
    (W1, b1), (W2, b2) = params
    logits = np.tanh(x @ W1 + b1) @ W2 + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    return -np.mean(np.sum(y * (shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))), axis=1))


def data():
    """Parameters and the global batch: one slice of PER_DEVICE rows per device of the run."""
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((WIDTH, 6)) / 3, rng.standard_normal(6) / 3),
              (rng.standard_normal((6, CLASSES)) / 3, rng.standard_normal(CLASSES) / 3)]
    devices = PROCESSES * LOCAL_DEVICES
    x = rng.standard_normal((devices, PER_DEVICE, WIDTH))
    y = np.eye(CLASSES)[rng.integers(0, CLASSES, (devices, PER_DEVICE))]
    return params, x, y


def with_nans(x):
    """`x` with NaNs on a device of each process, where NumPy's max and min are NaN: Gloo's
    all_reduce skipped them (pmax over [1, nan, 2, 0.5] was 1 across two processes)."""
    x = x.copy()
    x[1, 0, 2] = x[2, 1, :] = np.nan
    return x


def sgd_step(grad_of_loss, params, x, y):
    grads = grad_of_loss(params, x, y)
    return [(W - 0.5 * gW, b - 0.5 * gb) for (W, b), (gW, gb) in zip(params, grads)]


# -- the workers


def _parallel_step(params, x, y):
    return sgd_step(lambda *a: s2s.lax.pmean(s2s.grad(loss)(*a), "batch"), params, x, y)


def _collectives_worker(process_id: int, port: int, out: pathlib.Path) -> None:
    from s2s_runtime import disk_cache
    hits = []   # one per executable: served from the disk cache or compiled
    get_or_compile = disk_cache.get_or_compile
    disk_cache.get_or_compile = lambda *a: hits.append(get_or_compile(*a)) or hits[-1]
    params, x, y = data()
    mine = slice(process_id * LOCAL_DEVICES, (process_id + 1) * LOCAL_DEVICES)   # this process's slices
    total = s2s.pmap(lambda v: lax.psum(v, "i"), "i")(x[mine])
    gathered = s2s.pmap(lambda v: lax.all_gather(v, "i"), "i")(x[mine])
    index = s2s.pmap(lambda v: v[0, 0] * 0 + lax.axis_index("i"), "i")(x[mine])
    step = s2s.pmap(_parallel_step, "batch", in_axes=(None, 0, 0), out_axes=None)
    new_params = step(params, x[mine], y[mine])
    again = s2s.pmap(lambda v: lax.psum(v, "i"), "i")(total)   # a result fed back where it lives
    biggest, smallest = s2s.pmap(lambda v: (lax.pmax(v, "i"), lax.pmin(v, "i")), "i")(with_nans(x)[mine])
    try:
        s2s.distributed.initialize(f"127.0.0.1:{port}", PROCESSES, process_id)
    except s2s.distributed.DistributedError as error:
        assert "already joined the run coordinated at" in str(error)
    else:
        raise AssertionError("a second initialize was accepted")
    assert "mhlo.num_replicas = 4" in s2s.pmap(lambda v: lax.psum(v, "i"), "i").lower(x[mine]).as_text()
    for inside_jit in (s2s.jit(lambda v: s2s.pmap(lambda w: lax.psum(w, "i"), "i")(v)),
                       s2s.grad(lambda v: s2s.pmap(lambda w: lax.psum(w, "i"), "i")(v).sum())):
        try:   # on this process's devices alone its psum would be partial: refused
            inside_jit(x[mine])
        except s2s.StagingError as error:
            assert "runs on this process's devices only" in str(error)
        else:
            raise AssertionError("a pmap inside jit ran on one process's devices")
    jitted = s2s.jit(loss)(params, x[0], y[0])   # jit runs on this process's first device
    assert jitted.device == s2s.local_devices()[0] and np.isclose(float(jitted), loss(params, x[0], y[0]))
    np.savez(out / f"process{process_id}.npz", total=np.asarray(total), gathered=np.asarray(gathered),
             index=np.asarray(index), again=np.asarray(again), biggest=np.asarray(biggest),
             smallest=np.asarray(smallest),
             **{f"param{i}": np.asarray(p) for i, p in enumerate(s2s.tree_leaves(new_params))})
    print("devices", len(s2s.devices()), len(s2s.local_devices()), s2s.local_device_count(),
          "process", s2s.process_index(), s2s.process_count(),
          "local are mine", all(d.process_index == process_id for d in s2s.local_devices()))
    print(f"disk cache hits {sum(hit for _, hit in hits)} of {len(hits)}")


def _peer_lost_worker(process_id: int, how: str) -> None:
    total = s2s.pmap(lambda v: lax.psum(v, "i"), "i")
    x = np.ones((LOCAL_DEVICES, 3))
    total(x).block_until_ready()
    print("first step done", flush=True)
    if process_id == 1:   # killed: its sockets close at once; stopped: it goes silent
        os.kill(os.getpid(), signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    for _ in range(int(WORKER_TIMEOUT_S / 0.05)):   # process 0 goes on until the run breaks
        total(x).block_until_ready()
        time.sleep(0.05)


def _psum(v):
    return lax.psum(v, "i")


def _pmax(v):
    return lax.pmax(v, "i")


def _pmin(v):
    return lax.pmin(v, "i")


def _gather(v):
    return lax.all_gather(v, "i")


def _mismatch_worker(process_id: int) -> None:
    """Each case is a program of its own on each process: both raise at once, saying what
    differs, and nothing ran, so the run goes on; the last is left to end the process."""
    x = np.arange(LOCAL_DEVICES * 4.0).reshape(LOCAL_DEVICES, 4)
    first = process_id == 0
    cases = {"psum against pmax": (_psum if first else _pmax, x),
             "shapes": (_psum, x if first else np.ones((LOCAL_DEVICES, 5))),
             "all_gather against psum": (_gather if first else _psum, x)}
    for case, (fn, arg) in cases.items():
        start = time.monotonic()
        try:
            s2s.pmap(fn, "i")(arg)
        except s2s.distributed.ProgramMismatchError as error:
            print(f"{case} after {time.monotonic() - start:.1f} s: {error}", flush=True)
        else:
            raise AssertionError(f"{case}: the processes ran different programs")
    print("the same program sums", np.asarray(s2s.pmap(_psum, "i")(x)).tolist(), flush=True)
    s2s.pmap(_pmin, "i")(x.astype(np.float32) if first else x)


def _diverged_worker(process_id: int) -> None:
    """Process 0 runs its first program again (agreed on: it goes straight into the
    collective), process 1 a new one, for which it waits for process 0 in vain."""
    x = np.ones((LOCAL_DEVICES, 4))
    s2s.pmap(_psum, "i")(x).block_until_ready()
    print("first step done", flush=True)
    start = time.monotonic()
    try:
        s2s.pmap(_psum if process_id == 0 else _pmax, "i")(x).block_until_ready()
    finally:
        print(f"second step ended after {time.monotonic() - start:.1f} s", flush=True)


def _worker(scenario: str, process_id: int, port: int, out: str) -> None:
    if scenario == "late":   # the client exists before initialize
        s2s.devices()
    timeout = 2.0 if scenario in ("unreachable", "late", "port_in_use", "alone") else 30.0
    if scenario == "diverged" and process_id == 1:   # how long it waits for process 0 to come
        timeout = DIVERGED_TIMEOUT_S
    try:
        s2s.distributed.initialize(f"127.0.0.1:{port}", PROCESSES, process_id, local_device_count=LOCAL_DEVICES,
                                   timeout=timeout, heartbeat_timeout=HEARTBEAT_S)
    except s2s.distributed.DistributedError as error:
        print(f"DistributedError: {error}", flush=True)
        sys.exit(3)
    if scenario == "collectives":
        _collectives_worker(process_id, port, pathlib.Path(out))
    elif scenario in ("killed", "stopped"):
        _peer_lost_worker(process_id, scenario)
    elif scenario == "mismatches":
        _mismatch_worker(process_id)
    elif scenario == "diverged":
        _diverged_worker(process_id)
    assert "jax" not in sys.modules
    s2s.distributed.shutdown()
    print("worker done", flush=True)


# -- the tests


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(scenario: str, process_id: int, port: int, out, **env_extra) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=CHECKOUT_PATH + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_extra)
    env.pop("S2S_NUM_CPU_DEVICES", None)
    return subprocess.Popen([sys.executable, "-m", "tests.test_distributed", scenario, str(process_id), str(port), str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process: subprocess.Popen) -> tuple[int, str, float]:
    """(exit code, output, seconds waited); a worker past its timeout is killed and fails the test."""
    start = time.monotonic()
    try:
        output, _ = process.communicate(timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"a worker hung past {WORKER_TIMEOUT_S} s:\n{output[-3000:]}")
    return process.returncode, output, time.monotonic() - start


def test_two_processes_of_two_devices_compute_as_one_run_of_four(tmp_path):
    """Run twice on one disk cache: compiled, then every executable served from the cache."""
    cache = tmp_path / "cache"
    params, x, y = data()
    expected_params = s2s.tree_leaves(sgd_step(s2s.grad(loss), params, x.reshape(-1, WIDTH),
                                               y.reshape(-1, CLASSES)))
    for served in (False, True):
        port = _free_port()
        workers = [_start("collectives", i, port, tmp_path, S2S_CACHE_DIR=str(cache), S2S_DISK_CACHE="1")
                   for i in range(PROCESSES)]
        for i, worker in enumerate(workers):
            code, output, _ = _finish(worker)
            assert code == 0, output[-4000:]
            assert f"devices 4 2 2 process {i} 2 local are mine True" in output, output[-2000:]
            hits, executables = map(int, output.split("disk cache hits ", 1)[1].split()[::2][:2])
            assert executables >= 6 and hits == (executables if served else 0), output[-2000:]
        for i in range(PROCESSES):
            got = np.load(tmp_path / f"process{i}.npz")
            mine = x[i * LOCAL_DEVICES:(i + 1) * LOCAL_DEVICES]
            np.testing.assert_allclose(got["total"], np.broadcast_to(x.sum(0), mine.shape), rtol=1e-12)
            np.testing.assert_allclose(got["again"], 4 * np.broadcast_to(x.sum(0), mine.shape), rtol=1e-12)
            np.testing.assert_array_equal(got["gathered"], np.broadcast_to(x, (LOCAL_DEVICES, *x.shape)))
            np.testing.assert_array_equal(got["index"], [i * LOCAL_DEVICES, i * LOCAL_DEVICES + 1])
            for name, reduce in (("biggest", np.max), ("smallest", np.min)):
                np.testing.assert_array_equal(got[name], np.broadcast_to(reduce(with_nans(x), 0), mine.shape))
            for j, want in enumerate(expected_params):
                np.testing.assert_allclose(got[f"param{j}"], want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_a_process_lost_mid_run_ends_the_other_with_a_clear_error(tmp_path, how):
    port = _free_port()
    workers = [_start(how, i, port, tmp_path) for i in range(PROCESSES)]
    try:
        code0, output0, waited = _finish(workers[0])
    finally:
        workers[1].kill()   # a stopped one never ends by itself
    output1 = workers[1].communicate()[0]
    assert "first step done" in output1, output1[-2000:]
    assert code0 != 0 and "worker done" not in output0
    if how == "killed":   # the collective running when the peer died breaks at once
        assert "PeerLostError" in output0 and "another process died" in output0, output0[-3000:]
        assert waited < 10, waited
    else:   # the coordinator sees its heartbeats stop and jaxlib ends this process, naming it
        assert "Terminating process because the JAX distributed service detected fatal errors" in output0
        assert "unhealthy (stopped sending heartbeats)" in output0, output0[-3000:]
        assert waited < 10 + 3 * HEARTBEAT_S, waited


def _label(fn) -> str:
    """How a mismatch names a pmap of `fn`: by name and where it is defined."""
    return f"pmap({fn.__name__}) at {fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"


def test_processes_about_to_run_different_programs_both_raise_naming_the_difference(tmp_path):
    """psum against pmax, (2,4) against (2,5), all_gather against psum, then f32 against
    f64 uncaught, which ends both with exit code 1. Before the check, the first two printed
    wrong sums, the third hung and the last aborted both processes in Gloo."""
    port = _free_port()
    workers = [_start("mismatches", i, port, tmp_path) for i in range(PROCESSES)]
    outputs = [_finish(worker) for worker in workers]
    x = np.arange(LOCAL_DEVICES * 4.0).reshape(LOCAL_DEVICES, 4)
    for me, (code, output, _) in enumerate(outputs):
        other = 1 - me

        def contrast(verb: str, by_process: tuple) -> str:
            return f"process {other} {verb} {by_process[other]} where this process {verb} {by_process[me]}"

        expected = {"psum against pmax": contrast("runs", ("psum", "pmax")),
                    "shapes": contrast("passes", ("f64[2,4]", "f64[2,5]")),
                    "all_gather against psum": contrast("runs", ("all_gather", "psum"))}
        for case, difference in expected.items():
            line = output.split(f"{case} after ", 1)[1].split("\n", 1)[0]
            assert float(line.split(" s:", 1)[0]) < 10, line   # at once, not after the check's 30 s
            assert f": process {me} of 2: the processes were about to run different programs" in line, line
            assert f"{difference}. Nothing ran: every process must make the same pmap calls" in line, line
        first = (_psum, _pmax)
        assert (f"This process's is {_label(first[me])}; process {other}'s is {_label(first[other])}: "
                f"{expected['psum against pmax']}.") in output, output[-3000:]
        sums = output.split("the same program sums ", 1)[1].split("\n", 1)[0]
        np.testing.assert_array_equal(np.array(eval(sums)), np.broadcast_to(PROCESSES * x.sum(0), x.shape))
        assert code == 1, output[-3000:]
        traceback = output.split("Traceback", 1)[1].split("ProgramMismatchError: ", 1)
        assert traceback[1].startswith(
            f"process {me} of 2: the processes were about to run different programs as their 5th across "
            f"processes. This process's is {_label(_pmin)}; process {other}'s is the same: "
            f"{contrast('passes', ('f32[2,4]', 'f64[2,4]'))}. Nothing ran"), output[-3000:]
        assert "s2s_runtime/" not in traceback[0], traceback[0]   # no frames of the runtime's


def test_a_process_whose_peer_never_comes_to_its_program_raises_within_its_timeout(tmp_path):
    """Process 1's second program is new, process 0's is the first again: agreed on, so
    process 0 goes into its collective unchecked, and process 1 waits for process 0's
    fingerprint in vain (before the check, both hung in Gloo)."""
    port = _free_port()
    workers = [_start("diverged", i, port, tmp_path) for i in range(PROCESSES)]
    code1, output1, _ = _finish(workers[1])
    code0, output0, _ = _finish(workers[0])
    assert "first step done" in output0 and "first step done" in output1, output0[-2000:] + output1[-2000:]
    waited = float(output1.split("second step ended after ", 1)[1].split(" s", 1)[0])
    assert DIVERGED_TIMEOUT_S <= waited < DIVERGED_TIMEOUT_S + 5, output1[-3000:]
    assert code1 == 1, output1[-3000:]
    assert (f"ProgramMismatchError: process 1 of 2: process 0 did not come to run this process's 2nd program "
            f"across processes, {_label(_pmax)} (runs pmax; passes f64[2,4]; runs on devices [") in output1, output1
    assert f"]), within {DIVERGED_TIMEOUT_S} s: it runs another program there" in output1, output1
    assert code0 == 1 and "PeerLostError" in output0, output0[-3000:]   # its collective lost process 1


def _total(w):
    return lax.psum(w, "i")


def test_a_program_is_fingerprinted_by_what_it_computes_not_by_its_names_or_lines():
    """Processes whose sources lie elsewhere, or name values otherwise, run the same program."""
    x = np.ones((LOCAL_DEVICES, 4))
    text = {fn: s2s.pmap(fn, "i").lower(x).as_text() for fn in (_psum, _total, _pmax)}
    assert text[_psum] != text[_total]
    assert program_hash(text[_psum]) == program_hash(text[_total])
    assert program_hash(text[_psum].replace(str(ROOT), "/elsewhere")) == program_hash(text[_psum])
    assert program_hash(text[_psum]) != program_hash(text[_pmax])
    assert program_hash(s2s.pmap(_psum, "i").lower(x.astype(np.float32)).as_text()) != program_hash(text[_psum])


def test_a_difference_is_named_by_the_first_item_that_differs():
    def fingerprint(sha256: str, **aspects) -> dict:
        return {"sha256": sha256, "aspects": aspects}

    mine = fingerprint("a", runs=["psum", "psum", "pmax"], passes=["f32[2,4]"])
    assert _difference(1, mine, mine) is None
    assert (_difference(1, mine, fingerprint("b", runs=["psum", "pmin", "pmax"], passes=["f32[2,4]"]))
            == "process 1 runs pmin where this process runs psum (the 2nd of 3)")
    assert (_difference(2, mine, fingerprint("b", runs=["psum"], passes=["f32[2,4]", "i32[]"]))
            == "process 2 runs psum where this process runs psum, psum, pmax; "
               "process 2 passes f32[2,4], i32[] where this process passes f32[2,4]")
    assert (_difference(1, mine, {**mine, "sha256": "b"}) == "process 1 runs the same collectives on the same "
            "arguments but computes something else (its StableHLO differs from this process's)")


def test_the_readme_two_process_example_trains_as_one_process_on_the_full_batch(tmp_path):
    readme = (ROOT / "README.md").read_text()
    example = readme.split("**Several processes**", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    assert '"127.0.0.1:8476"' in example
    script = tmp_path / "train.py"
    script.write_text(example.replace('"127.0.0.1:8476"', f'"127.0.0.1:{_free_port()}"'))
    env = dict(os.environ, PYTHONPATH=CHECKOUT_PATH + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("S2S_NUM_CPU_DEVICES", None)
    workers = [subprocess.Popen([sys.executable, str(script), str(i)], cwd=tmp_path, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(PROCESSES)]
    rng = np.random.default_rng(0)   # the example's training, on the full batch in NumPy
    x, y = rng.standard_normal((64, 3)), rng.standard_normal((64, 1))
    W, b = np.zeros((3, 1)), np.zeros(1)
    for _ in range(10):
        r = x @ W + b - y
        W, b = W - 0.1 * 2 * x.T @ r / len(x), b - 0.1 * 2 * r.mean(0)
    for i, worker in enumerate(workers):
        code, output, _ = _finish(worker)
        assert code == 0, output[-3000:]
        assert f"process {i}: loss {np.mean((x @ W + b - y) ** 2):.10f}" in output, output[-2000:]


def test_an_unreachable_coordinator_fails_clearly_within_the_timeout(tmp_path):
    port = _free_port()   # nobody serves it: process 0 never starts
    start = time.monotonic()
    code, output, _ = _finish(_start("unreachable", 1, port, tmp_path))
    assert code == 3, output[-3000:]
    assert f"could not reach the coordinator at 127.0.0.1:{port} within 2 s" in output
    assert "check that process 0 runs with the same coordinator_address" in output
    assert time.monotonic() - start < 15


def test_a_process_that_never_comes_ends_the_coordinator_within_the_timeout(tmp_path):
    start = time.monotonic()
    code, output, _ = _finish(_start("alone", 0, _free_port(), tmp_path))   # process 1 never starts
    assert code == -signal.SIGABRT, output[-3000:]   # jaxlib's own end: it offers no exception here
    assert "Wait_for_all_tasks_to_register" in output and "# of tasks that reached the barrier: 1/2" in output
    assert time.monotonic() - start < 15


def test_a_coordinator_port_in_use_fails_clearly(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output, _ = _finish(_start("port_in_use", 0, port, tmp_path))
    assert code == 3, output[-3000:]
    assert f"process 0 could not start the coordination service on 127.0.0.1:{port}" in output
    assert "check that the port is free" in output


def test_initialize_after_the_first_device_query_is_refused(tmp_path):
    code, output, _ = _finish(_start("late", 0, _free_port(), tmp_path))
    assert code == 3, output[-3000:]
    assert "start the distributed runtime before the first jit call or device query" in output


def test_bad_arguments_are_clear_errors():
    with pytest.raises(s2s.distributed.DistributedError, match="process_id 2 is out of range for 2"):
        s2s.distributed.initialize("127.0.0.1:1", 2, 2)
    with pytest.raises(s2s.distributed.DistributedError, match="num_processes must be an int"):
        s2s.distributed.initialize("127.0.0.1:1", 0, 0)
    with pytest.raises(s2s.distributed.DistributedError, match="must be HOST:PORT"):
        s2s.distributed.initialize("localhost", 2, 1)


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
