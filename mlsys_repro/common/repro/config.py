"""Compose, validate and resolve configs into a :class:`RunSpec` and then a :class:`RunContext`.

``compose_run(overrides)`` is the one way code builds a run: it registers the papers' schemas, runs Hydra's compose
API on ``conf/`` once, converts each group to its dataclass and resolves the experiment (its node with the active
profile merged, its function, its params, its policies, its config hash) into a frozen :class:`RunSpec`, so typos,
wrong types and invalid values all fail here with a :class:`ConfigError` before any work starts. Everything
downstream takes the spec; nothing composes or merges again. ``compose(overrides)`` is the same, returning only the
config (for code that needs no experiment: status lines, listings, paths).

An experiment is registered in its YAML alone::

    experiment:
      name: headline
      fn: mlsys_repro.papers.swallow.experiments:headline          # the function run(ctx) -> rows
      # the dataclass its params: node must fit (optional)
      params_class: mlsys_repro.papers.swallow.schemas:HeadlineParams

``fn`` must live in the paper's package (``paper.module``), whose code the freshness fingerprint covers.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from mlsys_repro.common.repro import registry
from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.common.repro.errors import ConfigError, did_you_mean
from mlsys_repro.common.repro.results import config_hash
from mlsys_repro.common.repro.schema import asset_root, repo_root

CONF_DIR = Path(asset_root()) / "conf"
PROFILES = ("smoke", "default", "full")


def paper_modules(conf_dir: Path | str | None = None) -> dict[str, str]:
    """``{paper key: python package}`` from ``conf/paper/*.yaml`` (the one place a paper is registered;
    ``mlsys_repro.common`` never imports ``mlsys_repro.papers`` by name)."""
    out = {}
    for p in sorted((Path(conf_dir or CONF_DIR) / "paper").glob("*.yaml")):
        doc = yaml.safe_load(p.read_text()) or {}
        if isinstance(doc, dict) and doc.get("module"):
            out[p.stem] = str(doc["module"])
    return out


def register_paper_schemas(conf_dir: Path | str | None = None, only: set[str] | None = None) -> None:
    """Import ``<module>.schemas`` of the papers ``only`` names (every paper of the conf tree when ``None``) so their
    dataclasses are in the ConfigStore."""
    for key, module in paper_modules(conf_dir).items():
        if only is None or key in only:
            _import_schemas(module)


def papers_selected(overrides: Sequence[str]) -> set[str] | None:
    """The papers an override list composes (``experiment=<paper>/<name>``, ``policy=<paper>/<name>``,
    ``paper=<key>``, with or without ``+``), or ``None`` when it names none (then every paper's schemas are
    registered): composing one paper's experiment imports no other paper's code."""
    out: set[str] = set()
    for ov in overrides:
        key, sep, value = str(ov).lstrip("+~").partition("=")
        if not sep or "@" in key:
            continue
        if key in ("experiment", "policy") and "/" in value:
            out.add(value.split("/", 1)[0])
        elif key == "paper" and value:
            out.add(value)
    return out or None


@functools.cache
def _import_schemas(module: str) -> None:
    try:
        importlib.import_module(f"{module}.schemas")
    except ModuleNotFoundError as e:
        if e.name not in (f"{module}.schemas", module):
            raise


@contextmanager
def _hydra(conf_dir: Path):
    """Initialise Hydra on ``conf_dir`` unless an app (``@hydra.main``) already did."""
    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        yield


@dataclass(frozen=True)
class RunSpec:
    """One experiment run, composed and validated once and then passed down read-only.

    Attributes:
      cfg: the full composed config (read-only).
      experiment: the experiment node with the active profile's block merged in (``profiles`` removed; read-only),
        or ``None`` when no experiment is selected.
      fn: the experiment function ``fn(ctx) -> rows``; params: its params dataclass instance (``None`` if it takes
        none); policies: ``{name: policy node}`` in run order (read-only nodes); config_hash: what a stored result
        of this run must carry to be fresh (see :func:`resolved_for_hash`).
    """

    cfg: DictConfig
    experiment: DictConfig | None
    fn: Callable[..., Any] | None
    params: Any
    policies: Mapping[str, DictConfig]
    config_hash: str | None

    @property
    def label(self) -> str:
        return f"{self.experiment.paper}/{self.experiment.name}" if self.experiment is not None else "-"


def compose_run(overrides: Sequence[str] = (), conf_dir: Path | str | None = None,
                schemas: Collection[str] | None = None) -> RunSpec:
    """Compose ``conf/config.yaml`` with ``overrides`` once, validate every group and resolve the experiment into a
    :class:`RunSpec` (raises ConfigError). ``schemas``: the papers whose schemas to register first (default: those
    the overrides name, every paper when they name none); ``()`` for a config that needs no paper's dataclasses
    (paths, profile, a paper's ``conf/paper/<key>.yaml``), so that composing it imports no paper's code."""
    conf_dir = Path(conf_dir) if conf_dir else CONF_DIR
    register_paper_schemas(conf_dir, papers_selected(overrides) if schemas is None else set(schemas))
    try:
        with _hydra(conf_dir):
            cfg = hydra_compose("config", overrides=list(overrides))
            check_experiment_found(cfg, _group_choice(overrides, "experiment"))
    except ConfigError:
        raise
    except Exception as e:  # hydra wraps everything in its own exception types
        raise ConfigError(f"cannot compose config with overrides {list(overrides)}: {_cause(e)}") from e
    cfg.paths.conf_dir = str(conf_dir.resolve())
    pin_explicit_overrides(cfg, overrides)
    return validate(cfg)


def compose(overrides: Sequence[str] = (), conf_dir: Path | str | None = None,
            schemas: Collection[str] | None = None) -> DictConfig:
    """The validated config of :func:`compose_run` (for code that needs the config only)."""
    return compose_run(overrides, conf_dir, schemas).cfg


def _group_choice(overrides: Sequence[str], group: str) -> str | None:
    """The option an override list picks for config group ``group`` (``group=x``, ``+group=x``), else None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # compose reports syntax errors itself
        return None
    picks = [ov.value() for ov in parsed if ov.key_or_group == group and ov.package is None and not ov.is_delete()]
    return str(picks[-1]) if picks and isinstance(picks[-1], str) else None


def experiment_options() -> list[str]:
    """Every ``<paper>/<name>`` that ``experiment=`` accepts on the current search path (Hydra initialised)."""
    loader = GlobalHydra.instance().config_loader()
    out = list(loader.get_group_options("experiment"))
    for paper in loader.list_groups("experiment"):
        out += [f"{paper}/{name}" for name in loader.get_group_options(f"experiment/{paper}")]
    return sorted(out)


def unknown_experiment_message(choice: str, known: Sequence[str]) -> str:
    """``unknown experiment 'p/x' (did you mean 'p/y'?). Known: ...``: the closest of ``known`` (``<paper>/<name>``);
    then the same paper's experiments when ``choice`` names a known paper, else the known papers."""
    paper = choice.split("/", 1)[0]
    same = [k for k in known if k.split("/", 1)[0] == paper]
    close = did_you_mean("experiment", [choice], known).split(". Known: ")[0]
    if same:
        return f"{close}. Known: {', '.join(same)}"
    papers = sorted({k.split("/", 1)[0] for k in known})
    return (f"{close}. Known papers: {', '.join(papers)} (python -m mlsys_repro.common.repro.run_all --list shows "
            "every experiment)")


def check_experiment_found(cfg: DictConfig, choice: str | None) -> None:
    """Raise ConfigError if ``experiment=<choice>`` composed to nothing: the group is optional in config.yaml, so
    Hydra silently drops an experiment name that matches no file (a typo would read "no experiment selected").
    Otherwise give the experiment its identity from the file's path (:func:`name_from_path`)."""
    if choice is None:
        return
    if cfg.get("experiment") is None:
        raise ConfigError(unknown_experiment_message(choice, experiment_options()))
    name_from_path(cfg.experiment, choice)


def name_from_path(exp: DictConfig, choice: str) -> None:
    """Set ``exp.paper`` and ``exp.name`` from the experiment's file, ``conf/experiment/<paper>/<name>.yaml``
    (``choice`` = ``<paper>/<name>``): the path is the one place they are written. A file that still states
    either key must agree with its path (ConfigError otherwise)."""
    if "/" not in choice:
        raise ConfigError(f"experiment {choice!r}: experiment files live at conf/experiment/<paper>/<name>.yaml")
    paper, name = choice.split("/", 1)
    for key, value in (("paper", paper), ("name", name)):
        if not OmegaConf.is_missing(exp, key) and exp.get(key) not in (None, value):
            raise ConfigError(f"experiment {choice}: its file says {key}: {exp.get(key)!r}, its path says "
                              f"{value!r} (drop the key: the path names the experiment)")
        with open_dict(exp):
            exp[key] = value


def pin_explicit_overrides(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Make command-line values beat profile values: the active profile is a default, not a lock.

    An override such as ``experiment.params.max_coflows=20`` is already in ``cfg.experiment``; the profile's block
    (``experiment.profiles.<profile>``) would be merged over it later (:func:`experiment_node`), so the same key is
    removed from that block here. Call it with the overrides of the command line (compose does; so does main.py).
    """
    exp = cfg.get("experiment")
    if exp is None or not exp.get("profiles"):
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:  # hydra's parse errors; compose has already reported real syntax errors
        raise ConfigError(f"cannot parse overrides {list(overrides)}: {_cause(e)}") from e
    block = exp.profiles.get(cfg.profile.name)
    if block is None:
        return
    for ov in parsed:
        key = ov.key_or_group
        if not key.startswith("experiment.") or key.startswith("experiment.profiles"):
            continue
        parts = key.split(".")[1:]
        node = block
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, DictConfig) else None
            if node is None:
                break
        if isinstance(node, DictConfig) and parts[-1] in node:
            with open_dict(node):
                del node[parts[-1]]


def _cause(e: BaseException | None) -> str:
    """One line from an exception chain, naming the offending key where OmegaConf knows it."""
    msgs = []
    while e is not None:
        text = str(e).strip()
        line = text.splitlines()[0] if text else type(e).__name__
        key = getattr(e, "full_key", None)
        if key and key not in line:
            line = f"key '{key}': {line}"
        if "$VALUE" not in line and "$KEY" not in line:
            msgs.append(line)
        e = e.__cause__ or e.__context__
    return " <- ".join(dict.fromkeys(msgs))


def _to_object(node: Any, where: str) -> Any:
    if node is None:
        return None
    try:
        return OmegaConf.to_object(node) if isinstance(node, DictConfig) else node
    except (OmegaConfBaseException, ValueError, TypeError) as e:
        raise ConfigError(f"invalid {where}: {_cause(e)}") from e


def _reject_extra_keys(node: Any, group: str) -> None:
    """A key that a group's dataclass does not declare (``+hardware.port_gbsp=12``) would change the config hash and
    be ignored by the code: a ConfigError naming it."""
    if not isinstance(node, DictConfig):
        return
    t = OmegaConf.get_type(node)
    if not dataclasses.is_dataclass(t):
        return
    names = [f.name for f in dataclasses.fields(t)]
    extra = [k for k in node.keys() if k not in names]
    if extra:
        known = did_you_mean("key", [f"{group}.{k}" for k in extra], [f"{group}.{n}" for n in names])
        raise ConfigError(f"{group}: {known} ({t.__name__} declares no such field)")


def validate(cfg: DictConfig) -> RunSpec:
    """Instantiate every group's dataclass (runs ``__post_init__`` checks), resolve the experiment (its merged node,
    function, params and policies) and return it all as a :class:`RunSpec`. The experiment node is merged once
    here; everything after uses the spec."""
    for group in ("paths", "paper", "trace", "hardware", "policy", "profile"):
        if group in cfg:
            _reject_extra_keys(cfg[group], group)
            _to_object(cfg[group], f"{group} config")
    if cfg.get("experiment") is None:
        OmegaConf.set_readonly(cfg, True)
        return RunSpec(cfg, None, None, None, {}, None)
    exp = experiment_node(cfg)
    fn, params_class = _experiment_function(cfg, exp)
    params = _params(exp, params_class)
    policies = _policy_configs(cfg, exp)  # composes (once per file version) and validates each listed policy
    chash = config_hash(resolved_for_hash(cfg, policies, exp))
    OmegaConf.set_readonly(exp, True)
    OmegaConf.set_readonly(cfg, True)
    return RunSpec(cfg, exp, fn, params, dict(policies), chash)


def experiment_node(cfg: DictConfig) -> DictConfig:
    """The experiment node with the active profile's overrides merged in (``profiles`` removed)."""
    exp = cfg.get("experiment")
    if exp is None:
        raise ConfigError("no experiment selected: pass experiment=<paper>/<name> (see ./reproduce.sh --list)")
    profile = cfg.profile.name
    try:
        node = OmegaConf.to_container(exp, resolve=True)
        profiles = node.pop("profiles", None) or {}
        unknown = [p for p in profiles if p not in PROFILES]
        if unknown:
            raise ConfigError(f"experiment {exp.paper}/{exp.name}: unknown profile names {unknown}")
        merged = OmegaConf.create(node)
        if profiles.get(profile):
            over = OmegaConf.create(profiles[profile])
            bad = [k for k in over if k not in merged]
            if bad:
                raise ConfigError(f"experiment {exp.paper}/{exp.name}: profiles.{profile} sets unknown keys {bad}")
            merged = OmegaConf.merge(merged, over)
        merged.num_seeds = int(merged.num_seeds)
    except OmegaConfBaseException as e:
        raise ConfigError(f"experiment {exp.get('paper')}/{exp.get('name')}: {_cause(e)}") from e
    if merged.paper != cfg.paper.key:
        raise ConfigError(f"experiment {merged.paper}/{merged.name} selected with paper={cfg.paper.key}")
    if merged.num_seeds < 1:
        raise ConfigError(f"experiment {merged.paper}/{merged.name}: num_seeds must be >= 1")
    if "seed" in merged and int(merged.seed) < 0:
        raise ConfigError(f"experiment {merged.paper}/{merged.name}: experiment.seed must be >= 0, got "
                          f"{merged.seed}")
    return merged


def resolve_ref(ref: str, what: str) -> Any:
    """The object a ``package.module:name`` reference names (raises ConfigError naming ``what``)."""
    mod, sep, attr = str(ref).partition(":")
    if not sep or not mod or not attr:
        raise ConfigError(f"{what} must be 'package.module:name', got {ref!r}")
    try:
        obj = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        raise ConfigError(f"{what} {ref!r}: cannot import {mod} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            known = [n for n in dir(obj) if not n.startswith("_")]
            raise ConfigError(f"{what} {ref!r}: {did_you_mean(f'name in {mod}', [part], known)}")
        obj = getattr(obj, part)
    return obj


def _experiment_function(cfg: DictConfig, exp: DictConfig) -> tuple[Callable[..., Any], type | None]:
    """The experiment's function and params dataclass, as its YAML names them (``fn``, ``params_class``)."""
    module = str(cfg.paper.module)
    where = f"experiment {exp.paper}/{exp.name}"
    if not exp.get("fn"):
        if exp.get("params_class"):
            raise ConfigError(f"{where}: params_class is set but fn is not")
        raise ConfigError(f"{where}: its YAML must name its function, fn: {module}.experiments:<function>")
    if not str(exp.fn).startswith(module + ".") and not str(exp.fn).startswith(module + ":"):
        raise ConfigError(f"{where}: fn {exp.fn!r} is outside the paper's package {module} (the freshness "
                          "fingerprint covers only that package)")
    fn = resolve_ref(exp.fn, f"{where}: fn")
    if not callable(fn):
        raise ConfigError(f"{where}: fn {exp.fn!r} is not callable")
    params_class = resolve_ref(exp.params_class, f"{where}: params_class") if exp.get("params_class") else None
    if params_class is not None and not dataclasses.is_dataclass(params_class):
        raise ConfigError(f"{where}: params_class {exp.params_class!r} is not a dataclass")
    return fn, params_class


def _params(exp: DictConfig, params_class: type | None) -> Any:
    if params_class is None:
        if exp.params:
            raise ConfigError(f"experiment {exp.paper}/{exp.name} takes no params, got {list(exp.params)}")
        return None
    try:
        merged = OmegaConf.merge(OmegaConf.structured(params_class), exp.params)
        return OmegaConf.to_object(merged)
    except (OmegaConfBaseException, ValueError, TypeError) as e:
        raise ConfigError(f"experiment {exp.paper}/{exp.name} params: {_cause(e)}") from e


def _policy_configs(cfg: DictConfig, exp: DictConfig) -> dict[str, DictConfig]:
    """The policies to run: the one chosen with ``policy=`` or else the experiment's ``policies`` list."""
    if cfg.get("policy") is not None:
        return {cfg.policy.name: cfg.policy}
    out: dict[str, DictConfig] = {}
    for name in exp.policies:
        pol = policy_node(str(exp.paper), str(name), cfg.paths.conf_dir)
        if pol.name in out:
            raise ConfigError(f"experiment {exp.paper}/{exp.name}: two policies named {pol.name!r}")
        out[str(pol.name)] = pol
    return out


def policy_node(paper: str, name: str, conf_dir: Path | str | None = None) -> DictConfig:
    """The composed, validated config of policy ``conf/policy/<paper>/<name>.yaml`` (read-only, memoised)."""
    conf_dir = Path(conf_dir) if conf_dir else CONF_DIR
    return _policy_node(str(conf_dir.resolve()), paper, name, _stamp(conf_dir / "policy" / paper / f"{name}.yaml"))


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, -1)  # compose reports the missing policy
    return (st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=1024)
def _policy_node(conf_dir: str, paper: str, name: str, stamp: tuple[int, int]) -> DictConfig:
    """One policy's composed and validated node, read-only. Memoised per file version: composing is ~0.5 s of
    Hydra work and every experiment composes its policies twice (validation, then the run context)."""
    pol = compose([f"policy={paper}/{name}"], conf_dir=conf_dir).policy
    OmegaConf.set_readonly(pol, True)
    return pol


# Registration keys: they name code (covered by the code fingerprint), and an unset one hashes as if absent, so
# declaring them changes no stored hash of an experiment that does not set them.
_REGISTRATION_KEYS = ("fn", "params_class")


def resolved_for_hash(cfg: DictConfig, policies: Mapping[str, DictConfig], exp: DictConfig) -> str:
    """The text hashed to decide whether a stored result is up to date (host paths excluded). ``exp`` is the
    experiment node with the profile merged (:func:`experiment_node`)."""
    exp_node = OmegaConf.to_container(exp, resolve=True)
    for k in _REGISTRATION_KEYS:
        if exp_node.get(k) is None:
            exp_node.pop(k, None)
    # the fields a tuning experiment sets itself are not inputs of its result (an empty list hashes as if absent)
    tuned = set(exp_node.pop("tunes", None) or ())
    node = {
        "paper": OmegaConf.to_container(cfg.paper, resolve=True),
        "experiment": exp_node,
        "trace": OmegaConf.to_container(cfg.trace, resolve=True) if cfg.get("trace") else None,
        "hardware": OmegaConf.to_container(cfg.hardware, resolve=True) if cfg.get("hardware") else None,
        "policies": {k: {f: x for f, x in OmegaConf.to_container(v, resolve=True).items() if f not in tuned}
                     for k, v in policies.items()},
        "profile": OmegaConf.to_container(cfg.profile, resolve=True),
    }
    return OmegaConf.to_yaml(OmegaConf.create(node), sort_keys=True)


def build_context(spec: RunSpec, out_dir: Path | None = None, cache: RunCache | None = None) -> registry.RunContext:
    """The experiment's RunContext for ``spec``: dataclass instances of its groups, its seeds, where it writes and
    keeps checkpoints (keyed by config hash and code fingerprint), and the run-scoped ``cache`` it shares with the
    other experiments of this run (a fresh one when ``None``)."""
    exp, cfg = spec.experiment, spec.cfg
    if exp is None:
        raise ConfigError("no experiment selected: pass experiment=<paper>/<name> (see ./reproduce.sh --list)")
    ctx = registry.RunContext(
        paper=exp.paper,
        experiment=exp.name,
        profile=cfg.profile.name,
        num_seeds=int(exp.num_seeds),
        seed=int(exp.seed),
        params=copy.deepcopy(spec.params),
        policies={k: _to_object(v, f"policy {k}") for k, v in spec.policies.items()},
        trace=_to_object(cfg.get("trace"), "trace config"),
        hardware=_to_object(cfg.get("hardware"), "hardware config"),
        data_dir=Path(cfg.paths.data_dir),
        out_dir=Path(out_dir) if out_dir else Path(cfg.paths.results_dir) / exp.paper,
        cfg=cfg,
        checkpoint_dir=(Path(cfg.paths.checkpoint_dir) / exp.paper
                        / f"{exp.name}-{spec.config_hash}-{_code(cfg)}" if cfg.paths.get("checkpoint_dir") else None),
        cache=cache if cache is not None else RunCache(),
    )
    ctx.progress.label = spec.label
    return ctx


def _code(cfg: DictConfig) -> str:
    """The paper's code fingerprint (short): checkpoints are keyed by config hash and code, so a rerun after a code
    change starts afresh instead of resuming numbers half-made by the old code."""
    from mlsys_repro.common.repro.freshness import code_fingerprint

    return code_fingerprint(cfg.paths.root, cfg.paper.module)[0][:12]


def experiments_of(paper: str, conf_dir: Path | str | None = None) -> list[str]:
    """Experiment names of ``paper`` from ``conf/experiment/<paper>/*.yaml``, sorted."""
    d = Path(conf_dir or CONF_DIR) / "experiment" / paper
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def papers_in_conf(conf_dir: Path | str | None = None) -> list[str]:
    d = Path(conf_dir or CONF_DIR) / "paper"
    return sorted(p.stem for p in d.glob("*.yaml"))


__all__ = [
    "CONF_DIR", "ConfigError", "RunSpec", "build_context", "compose", "compose_run", "experiment_node",
    "experiments_of", "paper_modules", "papers_in_conf", "policy_node", "repo_root", "resolve_ref",
]
