"""Checkpoint/resume: a training killed mid-way resumes from its last checkpoint bit-identically."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.repro.checkpoint import Checkpointer
from tests.conftest import ROOT


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "tests.fixtures.chunked_train", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_save_restore_roundtrip_with_typed_key(tmp_path):
    state = {"w": jnp.arange(6.0).reshape(2, 3), "k": jax.random.key(3), "n": jnp.int32(7)}
    ck = Checkpointer(tmp_path / "c")
    ck.save(5, state)
    like = jax.tree.map(jnp.zeros_like, {"w": state["w"], "n": state["n"]}) | {"k": jax.random.key(0)}
    got, step = ck.restore(like)
    assert step == 5
    np.testing.assert_array_equal(got["w"], state["w"])
    np.testing.assert_array_equal(jax.random.key_data(got["k"]), jax.random.key_data(state["k"]))
    assert int(got["n"]) == 7


def test_killed_training_resumes_bit_identically(tmp_path):
    ref = _run("-", str(tmp_path / "ref.npz"))
    assert ref.returncode == 0, ref.stderr
    ck = tmp_path / "ckpt"
    killed = _run(str(ck), str(tmp_path / "never.npz"), "--die-after-chunk", "3")
    assert killed.returncode == -9, (killed.returncode, killed.stderr[-2000:])
    assert not (tmp_path / "never.npz").exists()
    assert Checkpointer(ck).latest_step() == 3
    resumed = _run(str(ck), str(tmp_path / "res.npz"))
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from chunk 3/6" in resumed.stdout  # says that it resumed, and from where
    a, b = np.load(tmp_path / "ref.npz"), np.load(tmp_path / "res.npz")
    for k in ("W", "b", "key", "loss"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # bit-identical, including the loss history
    assert a["loss"][-1] < a["loss"][0]
