"""Discrete-event network model: an event heap plus full-duplex NICs with FIFO channels.

Model (the contract every user and test relies on):

* :class:`EventLoop` runs callbacks in simulated time order; events at equal times run in the order they were
  scheduled (a sequence number breaks ties), so a simulation is deterministic.
* A :class:`Network` has ``num_nodes`` nodes with ``num_nics`` NICs each. Every NIC is full duplex: a transmit
  (tx) channel and, facing it on the switch, a receive (rx) port; each carries at most one transfer at a time and
  serves transfers first come, first served (FIFO, no back-filling).
* ``send(src, dst, nbytes, src_nic, dst_nic)`` at time ``now`` queues the message on the sender's tx channel:
  it serialises from ``tx_start = max(now, tx_free)`` for ``nbytes / bw_tx`` seconds. Its head reaches the
  switch ``latency[src, src_nic]`` after ``tx_start``, where it joins the FIFO of the receiver's port:
  ``rx_start = max(head arrival, rx_free)``, and it is delivered at
  ``rx_end = max(rx_start + nbytes / bw_rx, tx_end + latency)`` (cut-through: never before its tail arrives).
  The switch buffers messages waiting for a busy port, so a busy receiver never blocks the sender's other
  messages (no head-of-line blocking at the sender), and incast serialises at the receiver's port.
* A single message therefore takes ``nbytes / min(bw_tx, bw_rx) + latency``.
* The fabric between NICs is non-blocking (a switch port per NIC); which NIC pairs may talk (e.g. BCube levels) is
  the caller's topology, checked with the optional ``can_reach(src, src_nic, dst, dst_nic)`` predicate.

Every transfer is logged (:attr:`Network.log`) so tests can check invariants (no channel carries two transfers at
once, bytes are conserved) and experiments can count bytes on the wire.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


class EventLoop:
    """A heap of ``(time, seq, fn, args)``; :meth:`run` pops events in time order and calls ``fn(*args)``."""

    __slots__ = ("now", "_heap", "_seq", "processed")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., Any], tuple]] = []
        self._seq = 0
        self.processed = 0

    def at(self, t: float, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule ``fn(*args)`` at absolute time ``t`` (>= now)."""
        if not t >= self.now:  # also rejects NaN
            raise ValueError(f"cannot schedule an event at t={t!r} before now={self.now!r}")
        heapq.heappush(self._heap, (t, self._seq, fn, args))
        self._seq += 1

    def after(self, dt: float, fn: Callable[..., Any], *args: Any) -> None:
        """Schedule ``fn(*args)`` ``dt >= 0`` seconds from now."""
        self.at(self.now + dt, fn, *args)

    def run(self, until: float = math.inf) -> float:
        """Process events with time <= ``until``; returns the simulated time reached."""
        heap = self._heap
        while heap and heap[0][0] <= until:
            t, _, fn, args = heapq.heappop(heap)
            self.now = t
            self.processed += 1
            fn(*args)
        if until != math.inf and until > self.now:
            self.now = until
        return self.now

    def __len__(self) -> int:
        return len(self._heap)


@dataclass(slots=True)
class Transfer:
    """One message; ``tx_start..tx_end`` on the sender's channel, ``rx_start..rx_end`` on the receiver's port,
    delivered at ``arrival = rx_end`` (rx fields are filled when the head reaches the switch)."""

    id: int
    src: int
    src_nic: int
    dst: int
    dst_nic: int
    nbytes: int
    submit: float
    tx_start: float
    tx_end: float
    rx_start: float = math.nan
    rx_end: float = math.nan
    tag: Any = None

    @property
    def arrival(self) -> float:
        return self.rx_end


class Network:
    """Nodes x NICs with per-NIC bandwidth (bytes/s) and latency (s); see the module docstring for the model.

    Args:
      loop: the event loop that delivers arrivals.
      bandwidth: bytes/s, scalar or ``[num_nodes, num_nics]``.
      latency: seconds, scalar or ``[num_nodes, num_nics]`` (of the sending NIC's link).
      num_nodes, num_nics: sizes (needed when ``bandwidth`` is a scalar).
      can_reach: optional ``(src, src_nic, dst, dst_nic) -> bool`` topology check; a send it rejects raises.
      keep_log: keep every :class:`Transfer` in :attr:`log` (byte counters are kept regardless).
    """

    def __init__(self, loop: EventLoop, bandwidth: float | np.ndarray, latency: float | np.ndarray = 0.0, *,
                 num_nodes: int | None = None, num_nics: int = 1,
                 can_reach: Callable[[int, int, int, int], bool] | None = None, keep_log: bool = True):
        bw = np.asarray(bandwidth, dtype=np.float64)
        if bw.ndim == 0:
            if num_nodes is None:
                raise ValueError("num_nodes is required when bandwidth is a scalar")
            bw = np.full((num_nodes, num_nics), float(bw))
        if bw.ndim != 2:
            raise ValueError(f"bandwidth must be a scalar or [num_nodes, num_nics], got shape {bw.shape}")
        if not np.all(np.isfinite(bw)) or np.any(bw <= 0):
            raise ValueError("every NIC bandwidth must be finite and > 0 bytes/s")
        lat = np.broadcast_to(np.asarray(latency, dtype=np.float64), bw.shape).copy()
        if not np.all(np.isfinite(lat)) or np.any(lat < 0):
            raise ValueError("every NIC latency must be finite and >= 0 s")
        self.loop = loop
        self.num_nodes, self.num_nics = bw.shape
        self.bandwidth = bw
        self.latency = lat
        self.can_reach = can_reach
        self.keep_log = keep_log
        self._bw = bw.tolist()  # python floats: much faster than numpy scalars in the hot path
        self._lat = lat.tolist()
        self.tx_free = [[0.0] * self.num_nics for _ in range(self.num_nodes)]
        self.rx_free = [[0.0] * self.num_nics for _ in range(self.num_nodes)]
        self.tx_bytes = np.zeros((self.num_nodes, self.num_nics), dtype=np.int64)
        self.rx_bytes = np.zeros((self.num_nodes, self.num_nics), dtype=np.int64)
        self.tx_busy_s = np.zeros((self.num_nodes, self.num_nics))
        self.log: list[Transfer] = []
        self.count = 0

    @property
    def bytes_on_wire(self) -> int:
        """Total bytes sent (each transfer counted once, at its sender)."""
        return int(self.tx_bytes.sum())

    def send(self, src: int, dst: int, nbytes: int, *, src_nic: int = 0, dst_nic: int | None = None,
             tag: Any = None, on_arrival: Callable[..., Any] | None = None, args: tuple = ()) -> Transfer:
        """Queue a transfer now; ``on_arrival(transfer, *args)`` runs at its arrival time. Returns the transfer."""
        dst_nic = src_nic if dst_nic is None else dst_nic
        if src == dst:
            raise ValueError(f"node {src} cannot send to itself over the network")
        if not (0 <= src < self.num_nodes and 0 <= dst < self.num_nodes):
            raise ValueError(f"nodes must be in [0, {self.num_nodes}), got {src} -> {dst}")
        if not (0 <= src_nic < self.num_nics and 0 <= dst_nic < self.num_nics):
            raise ValueError(f"NICs must be in [0, {self.num_nics}), got {src_nic} -> {dst_nic}")
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if self.can_reach is not None and not self.can_reach(src, src_nic, dst, dst_nic):
            raise ValueError(f"topology: node {src} NIC {src_nic} cannot reach node {dst} NIC {dst_nic}")
        now = self.loop.now
        tx = self.tx_free[src]
        start = tx[src_nic] if tx[src_nic] > now else now
        dur = nbytes / self._bw[src][src_nic]
        tx[src_nic] = start + dur
        tr = Transfer(self.count, src, src_nic, dst, dst_nic, nbytes, now, start, start + dur, tag=tag)
        self.count += 1
        self.tx_bytes[src, src_nic] += nbytes
        self.rx_bytes[dst, dst_nic] += nbytes
        self.tx_busy_s[src, src_nic] += dur
        if self.keep_log:
            self.log.append(tr)
        self.loop.at(start + self._lat[src][src_nic], self._head, tr, on_arrival, args)
        return tr

    def _head(self, tr: Transfer, on_arrival, args: tuple) -> None:
        """The message's head reached the switch: queue it on the receiver's port."""
        rx = self.rx_free[tr.dst]
        now = self.loop.now
        start = rx[tr.dst_nic] if rx[tr.dst_nic] > now else now
        end = start + tr.nbytes / self._bw[tr.dst][tr.dst_nic]
        tail = tr.tx_end + self._lat[tr.src][tr.src_nic]
        if tail > end:
            end = tail
        rx[tr.dst_nic] = end
        tr.rx_start, tr.rx_end = start, end
        if on_arrival is not None:
            self.loop.at(end, on_arrival, tr, *args)


def channel_overlaps(log: list[Transfer]) -> list[tuple[Transfer, Transfer]]:
    """Pairs of transfers that used one tx channel or rx port at overlapping times (empty for a valid run)."""
    bad = []
    views = ((lambda t: (t.src, t.src_nic), lambda t: (t.tx_start, t.tx_end)),
             (lambda t: (t.dst, t.dst_nic), lambda t: (t.rx_start, t.rx_end)))
    for key, span in views:
        chans: dict[tuple, list[Transfer]] = {}
        for t in log:
            chans.setdefault(key(t), []).append(t)
        for ts in chans.values():
            ts.sort(key=span)
            for a, b in zip(ts, ts[1:], strict=False):
                if span(b)[0] < span(a)[1] - 1e-12 * max(1.0, abs(span(a)[1])):
                    bad.append((a, b))
    return bad


def gbps_to_bytes_per_s(gbps: float) -> float:
    """Link rate in Gbit/s (10^9 bit/s) to bytes/s."""
    return float(gbps) * 1e9 / 8.0


__all__ = ["EventLoop", "Network", "Transfer", "channel_overlaps", "gbps_to_bytes_per_s"]
