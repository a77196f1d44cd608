"""Slow, obviously-literal quantum-by-quantum simulator of coflowsim's conventions (test oracle only).

It advances every flow one 8 ms quantum at a time and recomputes rates exactly when coflowsim does (admission at
epoch boundaries, any coflow departure), with the same floating-point thresholds (``ZERO = 1e-3``) and visit
orders. The jit-compiled event-driven simulator in :mod:`mlsys_repro.papers.swallow.sim` must give the same coflow
completion times; tests compare the two on small real and random instances. Policies: fifo, scf, ncf, lcf, sebf, dark,
fair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mlsys_repro.papers.swallow.flows import FlowTable

ZERO = 1e-3
# DARK moves a coflow past a queue threshold only when its bytes sent exceed it by more than this fraction (0.01 B
# at 10 MiB). Sizes are whole MiB and shares simple fractions of a port, so "sent == threshold" is common in exact
# arithmetic, and rounding (which depends on the summation order: per quantum here, per event in the jitted
# simulator) must not decide it; an exact tie stays in its queue, as in coflowsim's ``k < size`` on exact sums.
DARK_TIE_REL = 1e-9


@dataclass(frozen=True)
class Clock:
    """coflowsim's clock: a simulated second of ``second_ms`` ms, ``quantum_ms`` steps, online epochs."""

    port_bps: float = 1024.0 * 1048576  # 2**30 bit/s ("1 Gbps")
    second_ms: int = 1024
    quantum_ms: int = 8
    epoch_ms: int = 10240
    end_ms: int = 86400 * 1024


def simulate_reference(ft: FlowTable, policy: str, clock: Clock = Clock()) -> dict[str, np.ndarray]:
    """Run ``policy`` on ``ft``; returns per-coflow ``start_ms``, ``finish_ms`` (NaN if unfinished)."""
    if policy not in ("fifo", "scf", "ncf", "lcf", "sebf", "dark", "fair"):
        raise ValueError(f"unknown policy {policy!r}")
    P, C = ft.num_ports, ft.num_coflows
    cap = clock.port_bps
    q = clock.quantum_ms
    rem = ft.flow_bytes.copy()
    rate = np.zeros(ft.num_flows)
    flow_alive = np.zeros(ft.num_flows, bool)
    sbl = ft.red_bytes.copy()
    red_done = np.zeros(ft.num_reducers, bool)
    sbpr = ft.red_orig_bytes.copy()
    completed = np.zeros(C)  # shuffleBytesCompleted
    start = np.full(C, np.nan)
    finish = np.full(C, np.nan)
    deadline = ft.cof_alpha / (cap / 8.0) * ft.cof_deadline_mult * 1000.0
    active: list[int] = []  # priority list (CoflowSimulator.sortedJobs)
    queues: list[list[int]] = [[] for _ in range(10)]  # DARK
    cur_q = np.zeros(C, np.int64)

    def flows_of(c):
        lo = ft.cof_first_flow[c]
        return range(lo, lo + ft.cof_num_flow[c])

    def reds_of(c):
        lo = ft.cof_first_red[c]
        return range(lo, lo + ft.cof_num_red[c])

    def alive_flows_of_red(r):
        c = ft.red_cof[r]
        return [f for f in flows_of(c) if ft.flow_red[f] == r and flow_alive[f]]

    def lcf_left(c):
        return float(sum(sbpr[r] for r in reds_of(c)))

    def insert(c):
        if policy == "fifo":
            active.append(c)
            return
        idx = 0
        for sj in active:
            if policy == "scf" and ft.cof_scf_key[c] < ft.cof_scf_key[sj]:
                break
            if policy == "ncf" and ft.cof_ncf_key[c] < ft.cof_ncf_key[sj]:
                break
            if policy == "lcf" and lcf_left(c) < lcf_left(sj):
                break
            if policy == "sebf" and ft.cof_alpha[c] < ft.cof_alpha[sj]:
                break
            idx += 1
        active.insert(idx, c)

    def madd_family(cur_time):
        sfree = np.full(P, cap)
        rfree = np.full(P, cap)
        skipped = []
        for c in active:
            for f in flows_of(c):
                rate[f] = 0.0
            sb = np.zeros(P)
            rb = np.zeros(P)
            for r in reds_of(c):
                rb[ft.red_port[r]] = sbl[r] if not red_done[r] else 0.0
            for f in flows_of(c):
                if flow_alive[f]:
                    sb[ft.flow_src[f]] += rem[f]
            if np.any((sb > 0) & (sfree <= ZERO)) or np.any((rb > 0) & (rfree <= ZERO)):
                skipped.append(c)
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                a = max(_jmax(sb * 8 / sfree), _jmax(rb * 8 / rfree))
            su = np.zeros(P)
            ru = np.zeros(P)
            for r in reds_of(c):
                d = ft.red_port[r]
                if rfree[d] <= ZERO:
                    continue
                for f in alive_flows_of_red(r):
                    s = ft.flow_src[f]
                    x = rem[f] * 8 / a
                    if x > sfree[s] or x > rfree[d]:
                        x = min(sfree[s], rfree[d])
                    su[s] += x
                    ru[d] += x
                    rate[f] = x
            sfree -= su
            rfree -= ru
        # skipped coflows share what is left per flow
        ns = np.zeros(P, np.int64)
        nr = np.zeros(P, np.int64)
        for c in skipped:
            for r in reds_of(c):
                d = ft.red_port[r]
                if rfree[d] <= ZERO:
                    continue
                for f in alive_flows_of_red(r):
                    if sfree[ft.flow_src[f]] <= ZERO:
                        continue
                    ns[ft.flow_src[f]] += 1
                    nr[d] += 1
        su = np.zeros(P)
        ru = np.zeros(P)
        for c in skipped:
            for r in reds_of(c):
                d = ft.red_port[r]
                if rfree[d] <= ZERO or nr[d] == 0:
                    continue
                for f in alive_flows_of_red(r):
                    s = ft.flow_src[f]
                    if sfree[s] <= ZERO or ns[s] == 0:
                        continue
                    x = min(sfree[s] / ns[s], rfree[d] / nr[d])
                    if x <= ZERO:
                        x = 0.0
                    rate[f] = x
                    su[s] += x
                    ru[d] += x
        sfree -= su
        rfree -= ru
        # back-fill in coflowsim's "EDF" order (stable sort by (int)(start + deadline - now))
        keys = [_java_int(start[c] + deadline[c] - cur_time) for c in active]
        for _, c in sorted(zip(keys, range(len(active)), strict=True)):
            c = active[c]
            for r in reds_of(c):
                d = ft.red_port[r]
                if rfree[d] <= ZERO:
                    continue
                for f in alive_flows_of_red(r):
                    s = ft.flow_src[f]
                    x = min(sfree[s], rfree[d])
                    if x <= ZERO:
                        x = 0.0
                    rate[f] += x
                    sfree[s] -= x
                    rfree[d] -= x

    def dark_order():
        for i in range(10):
            move = []
            for c in queues[i]:
                size = completed[c]
                target = 0
                k = 1048576.0 * 10
                while k * (1.0 + DARK_TIE_REL) < size:
                    target += 1
                    k *= 10.0
                if cur_q[c] < target:
                    cur_q[c] += 1
                    move.append(c)
            if i + 1 < 10 and move:
                queues[i] = [c for c in queues[i] if c not in move]
                queues[i + 1].extend(move)

    def dark_rates():
        sfree = np.full(P, cap)
        rfree = np.full(P, cap)
        for qq in queues:
            for c in qq:
                ns = np.zeros(P, np.int64)
                nr = np.zeros(P, np.int64)
                for r in reds_of(c):
                    d = ft.red_port[r]
                    fl = alive_flows_of_red(r)
                    if rfree[d] <= ZERO:
                        for f in fl:
                            rate[f] = 0.0
                        continue
                    for f in fl:
                        if sfree[ft.flow_src[f]] <= ZERO:
                            rate[f] = 0.0
                            continue
                        ns[ft.flow_src[f]] += 1
                        nr[d] += 1
                su = np.zeros(P)
                ru = np.zeros(P)
                for r in reds_of(c):
                    d = ft.red_port[r]
                    if rfree[d] <= ZERO or nr[d] == 0:
                        continue
                    for f in alive_flows_of_red(r):
                        s = ft.flow_src[f]
                        if sfree[s] <= ZERO or ns[s] == 0:
                            continue
                        x = min(sfree[s] / ns[s], rfree[d] / nr[d])
                        if x <= ZERO:
                            x = 0.0
                        rate[f] = x
                        su[s] += x
                        ru[d] += x
                sfree -= su
                rfree -= ru

    def recompute(cur_time):
        if policy == "dark":
            dark_order()
            dark_rates()
        elif policy != "fair":
            madd_family(cur_time)

    def step(cur_time) -> bool:
        """One quantum; returns True if some coflow departed."""
        if policy == "fair":
            ns = np.bincount(ft.flow_src[flow_alive], minlength=P)
            nr = np.bincount(ft.flow_dst[flow_alive], minlength=P)
            qb = cap / 8.0 * (1.0 * q / clock.second_ms)
            moved = np.where(flow_alive, np.minimum(qb / np.maximum(nr[ft.flow_dst], 1),
                                                    qb / np.maximum(ns[ft.flow_src], 1)), 0.0)
        else:
            moved = np.where(flow_alive, (rate / 8.0) * (1.0 * q / clock.second_ms), 0.0)
        moved = np.minimum(moved, rem)
        rem[:] -= moved
        newly_dead = flow_alive & (rem <= ZERO)
        flow_alive[newly_dead] = False
        per_red = np.bincount(ft.flow_red, weights=moved, minlength=ft.num_reducers)
        sbl[:] -= per_red
        sbpr[:] = np.maximum(sbpr - per_red, 0.0)
        completed[:] += np.bincount(ft.flow_cof, weights=moved, minlength=C)
        departed = False
        for c in list(active_set):
            for r in reds_of(c):
                if red_done[r]:
                    continue
                if sbl[r] <= ZERO or not alive_flows_of_red(r):
                    red_done[r] = True
            if all(red_done[r] for r in reds_of(c)):
                finish[c] = cur_time + q
                active_set.remove(c)
                if c in active:
                    active.remove(c)
                for qq in queues:
                    if c in qq:
                        qq.remove(c)
                departed = True
        return departed

    active_set: set[int] = set()
    nxt = 0
    t = 0
    E = clock.epoch_ms
    while t < clock.end_ms and (nxt < C or active_set):
        added = 0
        while nxt < C and ft.cof_arrival_ms[nxt] <= t + E:
            c = nxt
            nxt += 1
            start[c] = t
            for f in flows_of(c):
                flow_alive[f] = True
            active_set.add(c)
            if policy == "dark":
                queues[0].append(c)
                cur_q[c] = 0
            elif policy != "fair":
                insert(c)
            added += 1
        if added:
            recompute(t)
        for i in range(0, E, q):
            if not active_set:
                break
            if step(t + i):
                recompute(t + i)
        t += E
    return {"start_ms": start, "finish_ms": finish}


def _jmax(a: np.ndarray) -> float:
    """coflowsim's Utils.max: NaN and non-positive entries never win; floor Double.MIN_VALUE."""
    best = np.finfo(np.float64).smallest_subnormal
    for v in a:
        if v > best:
            best = float(v)
    return best


def _java_int(x: float) -> int:
    """Java's (int) cast of a double: truncation toward zero, saturating."""
    if math.isnan(x):
        return 0
    return int(max(min(math.trunc(x), 2**31 - 1), -(2**31)))
