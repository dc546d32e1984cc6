"""Installing a built model into the model repository: its own module, outside every recipe's build
sources (`model_build.sources`), so that changing how models are installed re-renders configs (cheap,
every run) without rebuilding any model."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from contracts.rendered_configs import write_rendered_from
from contracts.serving_spec import ModelSpec, ServingSpec
from model_build.pipeline import BuildPaths, Recipe


def install_served(recipe: Recipe, model: ModelSpec, serving: ServingSpec, record: Mapping[str, Any], paths: BuildPaths,
                   config: Path | str, rendered_settings: str) -> list[str]:
    """Install a built model into the repository and note which serving.toml its config was rendered from.

    Both go together, in `build` and in `size-batches`: `serving serve` refuses configs whose note names an
    older version of the same file, so an install without its note would be refused, and a note without
    its install would let stale configs pass.
    """
    installed = recipe.install(model, serving, record, paths.workdir(model.name), paths.repository)
    write_rendered_from(paths.workdir(model.name), config, rendered_settings)
    return installed
