"""Config schemas of the skeleton paper: the simulated hardware (one server), the policies (the order it serves
waiting jobs in) and the params of each experiment. Registered in Hydra's ConfigStore on import; the value checks in
``__post_init__`` run at compose time, before anything runs, and name the key."""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_repro.common.repro.schema import BaseHardware, BasePolicy, check_range, register_schema

ORDERS = ("fifo", "sjf")  # first come first served | shortest job first (both non-preemptive)


@dataclass
class QueueServer(BaseHardware):
    """One server that works through jobs one at a time at ``service_rate`` work units per second."""

    kind: str = "skeleton_queue"
    service_rate: float = 1.0

    def __post_init__(self) -> None:
        check_range(self, "service_rate", gt=0)


@dataclass
class QueuePolicy(BasePolicy):
    """Which waiting job the server takes next when it frees up."""

    order: str = "fifo"

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"policy order must be one of {ORDERS}, got {self.order!r}")


@dataclass
class HeadlineParams:
    num_jobs: int = 4000  # jobs per seed, from an empty queue
    load: float = 0.8  # offered load: arrival rate x mean job size / service rate

    def __post_init__(self) -> None:
        check_range(self, "num_jobs", ge=1)
        if isinstance(self.load, bool) or not 0 < self.load < 1:
            raise ValueError(f"load must be in (0, 1) (a stable queue), got {self.load!r}")


register_schema("hardware", "skeleton_queue", QueueServer)
register_schema("policy", "skeleton", QueuePolicy)
