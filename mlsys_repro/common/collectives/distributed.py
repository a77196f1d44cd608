"""Run a synchronous step across N real ``jax.distributed`` processes on one machine (paper-agnostic).

    results = launch(2, "tests.papers.petrel.distributed_bsp:bsp_worker", args)

starts ``n_processes`` Python processes; process ``i`` calls ``jax.distributed.initialize`` with the coordinator
bound to ``coordinator_host`` (127.0.0.1 by default: nothing listens on other interfaces), then
``target(ctx, args)`` with a :class:`ProcessContext`, and sends back what it returns (pickled). ``launch`` returns
the results in process order, or raises :class:`DistributedError` with the failing process's output.

CPU collectives go through gloo, which binds to the address the machine's *hostname* resolves to (jax passes it no
interface); :func:`hostname_is_loopback` tells a caller (e.g. a test) whether that address is a loopback one, so
that it can skip instead of opening a port on an external interface.

Inside ``target``, :meth:`ProcessContext.psum` all-reduces a host array over every device of every process
(``jax.shard_map`` + ``lax.psum`` on a one-axis mesh), which is enough to express a BSP step: each process
computes its local gradient, ``psum`` sums them, and every process applies the same update.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class DistributedError(RuntimeError):
    """A process of :func:`launch` failed, timed out or returned nothing."""


def hostname_is_loopback() -> bool:
    """True when every address the hostname resolves to is a loopback address (where gloo will bind)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        return False
    addrs = {info[4][0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ProcessContext:
    """What ``target`` knows about its place in the job."""

    process_id: int
    num_processes: int
    coordinator: str

    @property
    def is_leader(self) -> bool:
        return self.process_id == 0

    def psum(self, x: np.ndarray) -> np.ndarray:
        """Sum of ``x`` over all processes (each process passes its own ``x``; all receive the same sum)."""
        import jax
        from jax import lax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        devices = jax.devices()
        mesh = jax.sharding.Mesh(np.asarray(devices), ("p",))
        local = np.asarray(x)[None].repeat(jax.local_device_count(), axis=0)
        if jax.local_device_count() > 1:  # only the first local device contributes; the others add zeros
            local[1:] = 0
        glob = jax.make_array_from_process_local_data(NamedSharding(mesh, P("p")), local)
        f = jax.jit(jax.shard_map(lambda a: lax.psum(a, "p"), mesh=mesh, in_specs=P("p"), out_specs=P()))
        out = f(glob)
        return np.asarray(out.addressable_data(0))[0]


def launch(n_processes: int, target: str, args: Any = None, *, coordinator_host: str = "127.0.0.1",
           port: int | None = None, local_devices: int = 1, timeout_s: float = 180.0,
           env: dict[str, str] | None = None) -> list[Any]:
    """Run ``target`` (``"package.module:function"``) in ``n_processes`` jax.distributed processes.

    Returns ``[target(ctx_0, args), ..., target(ctx_{n-1}, args)]``. ``args`` and the results must pickle.
    ``local_devices`` > 1 gives each process that many virtual CPU devices.
    """
    if n_processes < 1:
        raise ValueError(f"n_processes must be >= 1, got {n_processes}")
    if ":" not in target:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    port = port or free_port(coordinator_host)
    coord = f"{coordinator_host}:{port}"
    with tempfile.TemporaryDirectory(prefix="jaxdist-") as tmp:
        spec = Path(tmp) / "spec.pkl"
        spec.write_bytes(pickle.dumps({"target": target, "args": args}))
        penv = {**os.environ, **(env or {}), "JAX_PLATFORMS": "cpu"}
        penv.pop("JAX_COORDINATOR_ADDRESS", None)
        flags = penv.get("XLA_FLAGS", "")
        flags = " ".join(f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count"))
        penv["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={local_devices}".strip()
        root = str(Path(__file__).resolve().parents[3])
        penv["PYTHONPATH"] = os.pathsep.join(p for p in (root, penv.get("PYTHONPATH", "")) if p)
        procs, logs = [], []
        for i in range(n_processes):
            log = open(Path(tmp) / f"proc{i}.log", "w+b")  # noqa: SIM115 (closed below)
            logs.append(log)
            cmd = [sys.executable, "-m", "mlsys_repro.common.collectives.distributed", "--spec", str(spec), "--out",
                   str(Path(tmp) / f"out{i}.pkl"), "--coordinator", coord, "--num-processes", str(n_processes),
                   "--process-id", str(i)]
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=penv))
        deadline = time.monotonic() + timeout_s
        try:
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline:
                    raise DistributedError(f"{target}: timed out after {timeout_s:.0f}s\n{_tails(logs)}")
                if any(p.returncode not in (None, 0) for p in procs):
                    break
                time.sleep(0.05)
            bad = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if bad:
                raise DistributedError(f"{target}: process(es) {bad} failed\n{_tails(logs)}")
            results = []
            for i in range(n_processes):
                out = Path(tmp) / f"out{i}.pkl"
                if not out.is_file():
                    raise DistributedError(f"{target}: process {i} returned no result\n{_tails(logs)}")
                results.append(pickle.loads(out.read_bytes()))
            return results
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for log in logs:
                log.close()


def _tails(logs, n: int = 3000) -> str:
    parts = []
    for i, log in enumerate(logs):
        log.flush()
        log.seek(0)
        text = log.read().decode(errors="replace")
        parts.append(f"--- process {i} ---\n{text[-n:]}")
    return "\n".join(parts)


def _worker(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--num-processes", type=int, required=True)
    ap.add_argument("--process-id", type=int, required=True)
    a = ap.parse_args(argv)
    import jax

    jax.distributed.initialize(coordinator_address=a.coordinator, num_processes=a.num_processes,
                               process_id=a.process_id, coordinator_bind_address=a.coordinator)
    try:
        spec = pickle.loads(Path(a.spec).read_bytes())
        mod, fn = spec["target"].split(":")
        f = getattr(importlib.import_module(mod), fn)
        result = f(ProcessContext(a.process_id, a.num_processes, a.coordinator), spec["args"])
        tmp = Path(a.out + ".tmp")
        tmp.write_bytes(pickle.dumps(result))
        tmp.replace(a.out)
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        jax.distributed.shutdown()
    return 0


def psum_check(ctx: ProcessContext, args: Any) -> dict[str, Any]:
    """A ready-made target for smoke tests: every process contributes ``(process_id + 1) * ones(size)``."""
    size = int(args or 4)
    total = ctx.psum(np.full(size, ctx.process_id + 1, dtype=np.float32))
    return {"process_id": ctx.process_id, "num_processes": ctx.num_processes, "sum": total}


if __name__ == "__main__":
    sys.exit(_worker())
