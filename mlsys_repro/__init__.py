"""mlsys-repro: the one import package of the reproductions (issue #20).

``mlsys_repro.common`` holds the shared core (runner, configs, claims checker, simulators, models, traces),
``mlsys_repro.papers.<key>`` one package per reproduced paper.
"""
