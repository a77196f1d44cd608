"""Runner, result files, claims checker and plotting shared by all papers.

A paper plugs in by

* registering its config schemas with :func:`mlsys_repro.common.repro.schema.register_schema` (in
  ``mlsys_repro/papers/<key>/schemas.py``),
* naming each experiment's function and params dataclass in ``conf/experiment/<key>/<name>.yaml`` (``fn:``,
  ``params_class:``; the function lives in ``mlsys_repro/papers/<key>/experiments.py``),
* adding ``conf/paper/<key>.yaml``, ``conf/experiment/<key>/*.yaml`` and ``mlsys_repro/papers/<key>/claims.yaml``.

Nothing in this package knows about a particular paper.
"""

from mlsys_repro.common.repro.registry import RunContext
from mlsys_repro.common.repro.results import RESULT_COLUMNS, metric_rows
from mlsys_repro.common.repro.schema import register_schema

__all__ = ["RESULT_COLUMNS", "RunContext", "metric_rows", "register_schema"]
