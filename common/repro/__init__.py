"""Runner, result files, claims checker and plotting shared by all papers.

A paper plugs in by

* registering its config schemas with :func:`common.repro.schema.register_schema` (in ``papers/<key>/schemas.py``),
* naming each experiment's function and params dataclass in ``conf/experiment/<key>/<name>.yaml`` (``fn:``,
  ``params_class:``; the function lives in ``papers/<key>/experiments.py``),
* adding ``conf/paper/<key>.yaml``, ``conf/experiment/<key>/*.yaml`` and ``papers/<key>/claims.yaml``.

Nothing in this package knows about a particular paper.
"""

from common.repro.registry import RunContext
from common.repro.results import RESULT_COLUMNS, metric_rows
from common.repro.schema import register_schema

__all__ = ["RESULT_COLUMNS", "RunContext", "metric_rows", "register_schema"]
