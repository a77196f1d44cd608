"""Structured-config schemas shared by every paper, and the hook papers use to add their own.

Every YAML file of a config group starts with a defaults entry that names its schema, e.g.::

    # conf/hardware/fabric_1g.yaml
    defaults:
      - /schema/hardware/coflow_fabric@_here_
      - _self_

so Hydra rejects unknown keys and wrong types while composing. Value checks (a bandwidth must be positive, ...)
live in the dataclass' ``__post_init__`` and run when :func:`mlsys_repro.common.repro.config.compose` turns the composed
config into objects, which is still before anything runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[3]
# In a wheel (``pip install .``) there is no checkout: the build copies ``conf/`` and ``data/`` here (setup.py).
BUNDLED = Path(__file__).resolve().parent / "_bundled"

_GROUPS = ("paper", "trace", "hardware", "policy", "profile", "experiment", "paths")


def installed() -> bool:
    """True when running from an installed wheel (no checkout around the code, bundled ``conf/`` present)."""
    return "MLSYS_REPRO_ROOT" not in os.environ and not (REPO_ROOT / "conf").is_dir() and (BUNDLED / "conf").is_dir()


def repo_root() -> str:
    """Root of the code: the checkout (``MLSYS_REPRO_ROOT`` overrides it, e.g. for tests in a scratch copy), or
    the ``site-packages`` folder holding ``mlsys_repro`` when installed from a wheel."""
    return os.environ.get("MLSYS_REPRO_ROOT", str(REPO_ROOT))


def asset_root() -> str:
    """Folder holding ``conf/`` and ``data/``: the checkout, or the wheel's bundled copy."""
    return str(BUNDLED) if installed() else repo_root()


def work_root() -> str:
    """Where ``results/`` and ``runs/`` go: the checkout, or the current directory when installed."""
    return str(Path.cwd()) if installed() else repo_root()


for _name, _fn in (("repo_root", repo_root), ("asset_root", asset_root), ("work_root", work_root)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _fn)


@dataclass
class PathsConfig:
    """Where data is read and results are written; absolute, resolved from the checkout (from the wheel's bundled
    copy and the current directory when installed, see :func:`installed`)."""

    root: str = "${repo_root:}"
    data_dir: str = "${asset_root:}/data"
    results_dir: str = "${work_root:}/results"
    conf_dir: str = "${asset_root:}/conf"
    # where the smoke and full profiles write (runs/<profile>/<paper>/...): only the default profile writes results/
    runs_dir: str = "${work_root:}/runs"
    # resumable training state (see RunContext.checkpointer); "" turns checkpointing off
    checkpoint_dir: str = "${work_root:}/runs/checkpoints"


@dataclass
class PaperConfig:
    """One reproduced paper (``conf/paper/<key>.yaml``)."""

    key: str = MISSING
    title: str = MISSING
    citation: str = ""
    module: str = MISSING  # python package holding experiments.py and claims.yaml
    claims: str = "claims.yaml"  # relative to the package directory


@dataclass
class TraceConfig:
    """A data source. ``files`` are relative to ``paths.data_dir`` so result hashes do not depend on the host."""

    name: str = MISSING
    loader: str = MISSING  # key in mlsys_repro.common.traces.LOADERS
    files: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass
class ProfileConfig:
    """How big a run is: ``smoke`` for CI, ``default`` for ./reproduce.sh, ``full`` for paper scale on a GPU."""

    name: str = MISSING
    num_seeds: int = MISSING
    description: str = ""

    def __post_init__(self) -> None:
        if self.name not in ("smoke", "default", "full"):
            raise ValueError(f"profile.name must be smoke, default or full, got {self.name!r}")
        if self.num_seeds < 1:
            raise ValueError(f"profile.num_seeds must be >= 1, got {self.num_seeds}")


@dataclass
class ExperimentConfig:
    """One paper artefact (a table or figure), ``conf/experiment/<paper>/<name>.yaml``.

    ``fn`` names the experiment function (``package.module:name``, inside the paper's package) and
    ``params_class`` the dataclass its ``params`` are checked against; ``profiles.<name>`` holds overrides merged
    over this node when that profile is active (e.g. ``profiles.smoke.params.steps: 50``).
    """

    name: str = MISSING
    paper: str = MISSING
    fn: str | None = None
    params_class: str | None = None
    title: str = ""
    policies: list[str] = field(default_factory=list)
    num_seeds: int = "${profile.num_seeds}"  # type: ignore[assignment]
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, Any] = field(default_factory=dict)
    # policy fields a tuning experiment sets itself from its grid (e.g. [lr, ent_coef]): left out of the hash of its
    # policies, so copying its pick into the policy configs does not make its own stored result stale
    tunes: list[str] = field(default_factory=list)


@dataclass
class BaseHardware:
    """Fields every hardware profile has; papers subclass it with their own fields."""

    name: str = MISSING
    kind: str = MISSING
    description: str = ""


@dataclass
class BasePolicy:
    """Fields every policy has; papers subclass it. ``name`` is what the result rows carry."""

    name: str = MISSING
    description: str = ""


def check_range(obj: Any, name: str, *, ge: float | None = None, gt: float | None = None,
                optional: bool = False) -> None:
    """For a dataclass' ``__post_init__``: a ValueError naming ``name`` when its value (or any item of a list value)
    is below ``ge`` or not above ``gt`` (``optional``: ``None`` is allowed). The config step reports it before
    anything runs, with the experiment and the key."""
    v = getattr(obj, name)
    if v is None and optional:
        return
    for x in (v if isinstance(v, (list, tuple)) else [v]):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or (ge is not None and not x >= ge) \
                or (gt is not None and not x > gt):
            bound = " and ".join(b for b in (f">= {ge:g}" if ge is not None else "",
                                             f"> {gt:g}" if gt is not None else "") if b)
            raise ValueError(f"{name} must be {bound}{' or null' if optional else ''}, got {v!r}")


def register_schema(group: str, name: str, node: type) -> type:
    """Store ``node`` as ``/schema/<group>/<name>`` in Hydra's ConfigStore and return it (usable as decorator arg)."""
    root = group.split("/")[0]
    if root not in _GROUPS:
        raise ValueError(f"unknown config group {group!r}; expected one of {_GROUPS}")
    ConfigStore.instance().store(group=f"schema/{group}", name=name, node=node)
    return node


def schema(group: str, name: str):
    """Class decorator form of :func:`register_schema`."""

    def wrap(cls: type) -> type:
        return register_schema(group, name, cls)

    return wrap


def register_base_schemas() -> None:
    register_schema("paths", "default", PathsConfig)
    register_schema("paper", "default", PaperConfig)
    register_schema("trace", "default", TraceConfig)
    register_schema("profile", "default", ProfileConfig)
    register_schema("experiment", "default", ExperimentConfig)
    register_schema("hardware", "base", BaseHardware)
    register_schema("policy", "base", BasePolicy)


register_base_schemas()
