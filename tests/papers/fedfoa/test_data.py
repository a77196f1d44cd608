"""Data carving, partitions and the empty-shard / missing-dataset errors."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.papers.fedfoa import data as D
from mlsys_repro.papers.fedfoa.fedssl_runs import DatasetUnavailable, load_data, partitions
from mlsys_repro.papers.fedfoa.schemas import FedSSLParams
from tests.conftest import DATA


def test_carved_sets_are_disjoint_stratified_and_sized():
    d = D.load_ssl_data("cifar10_jpeg", DATA, n_pool=100, n_public=20, n_val=30, n_test=50)
    assert d.pool_x.shape == (100, 32, 32, 3) and d.pool_x.dtype == np.uint8
    assert d.public_x.shape[0] == 20 and d.val_x.shape[0] == 30 and d.test_x.shape[0] == 50
    assert np.bincount(d.pool_y).tolist() == [10] * 10 and np.bincount(d.test_y).tolist() == [5] * 10
    rows = {x.tobytes() for x in d.pool_x}
    assert not rows & {x.tobytes() for x in d.public_x} and not rows & {x.tobytes() for x in d.val_x}
    again = D.load_ssl_data("cifar10_jpeg", DATA, n_pool=100, n_public=20, n_val=30, n_test=50)
    np.testing.assert_array_equal(again.pool_x, d.pool_x)


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="unknown dataset"):
        D.load_ssl_data("svhn", DATA, n_pool=100, n_public=0, n_val=0, n_test=50)
    with pytest.raises(ValueError, match="exceeds"):
        D.load_ssl_data("mnist", DATA, n_pool=59_000, n_public=2_000, n_val=0, n_test=50)


@pytest.mark.parametrize("alpha", [0.0, 0.1, 1.0])
def test_partitions_cover_the_pool_once(alpha):
    labels = np.repeat(np.arange(10), 40)
    idx, counts, hists = partitions(labels, 5, alpha, np.arange(3), min_per_client=5)
    assert idx.shape == (3, 5, 400) and counts.shape == (3, 5)
    for s in range(3):
        got = np.concatenate([idx[s, k, :counts[s, k]] for k in range(5)])
        np.testing.assert_array_equal(np.sort(got), np.arange(400))
        assert hists[s].sum() == 400 and counts[s].min() >= 5
    if alpha == 0.0:
        assert counts.max() - counts.min() <= 1


def test_empty_shards_are_reported():
    with pytest.raises(D.EmptyShardError, match="client 2"):
        D.check_shards(np.array([5, 3, 0, 7]))
    with pytest.raises(D.EmptyShardError, match=r"client 1 \(partition 1\)"):
        D.check_shards(np.array([[5, 3], [4, 0]]))
    D.check_shards(np.array([1, 1]))


def test_missing_fashion_mnist_is_a_clear_skip(monkeypatch, tmp_path):
    class Trace:
        options = {"dataset": "fashion_mnist"}

    monkeypatch.setenv("FASHION_MNIST_DIR", str(tmp_path))
    monkeypatch.setattr(D, "fashion_mnist_dir", lambda data_dir: None)
    with pytest.raises(DatasetUnavailable, match="dataset-fashion-mnist"):
        load_data(Trace(), tmp_path, FedSSLParams())
