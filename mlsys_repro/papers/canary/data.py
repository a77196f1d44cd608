"""Image data for the Canary experiments (the ``canary_images`` trace loader) and the model's exchange layout."""

from __future__ import annotations

from pathlib import Path

from mlsys_repro.common.models.data import ImageData, load_image_data
from mlsys_repro.common.models.small import make_model, pure
from mlsys_repro.common.traces import register_loader
from mlsys_repro.papers.canary.compute_model import Layout, make_layout, profile_layers

SHAPES: dict[str, tuple[int, int, int]] = {"mnist": (28, 28, 1), "fashion_mnist": (28, 28, 1),
                                           "cifar10_jpeg": (32, 32, 3)}


@register_loader("canary_images")
def load_images_trace(cfg, data_dir: Path, n_train: int | None = None, n_test: int | None = None) -> ImageData:
    """The trace's dataset (``options.dataset``), normalised; the test subset is fixed (seed 0)."""
    return load_image_data(cfg.options["dataset"], data_dir, n_train=n_train or None, n_test=n_test, seed=0)


def layout_for_shape(model: str, in_shape: tuple[int, int, int], colayer_bytes: int, piece_elems: int,
                     num_classes: int = 10) -> Layout:
    """Colayers and pieces of ``model`` for inputs of ``in_shape``."""
    apply, params = pure(make_model(model, in_shape, num_classes, seed=0))
    return make_layout(profile_layers(apply, params, in_shape), colayer_bytes, piece_elems)


def model_layout(model: str, data: ImageData, colayer_bytes: int, piece_elems: int) -> Layout:
    """Colayers and pieces of ``model`` built for ``data``'s input shape."""
    return layout_for_shape(model, data.in_shape, colayer_bytes, piece_elems, data.num_classes)


__all__ = ["SHAPES", "layout_for_shape", "load_images_trace", "model_layout"]
