"""The registry of recipes: the `recipe` field of a model in serving.toml names one of these."""
from __future__ import annotations

from model_build.errors import BuildError
from model_build.pipeline import Recipe
from model_build.recipe_digits import build_digit_cnn, install_onnx_model

RECIPES: dict[str, Recipe] = {
    "digit_cnn": Recipe(name="digit_cnn", build=build_digit_cnn, install=install_onnx_model),
}


def recipe_for(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise BuildError(f"unknown recipe {name!r}: known recipes are {sorted(RECIPES)}.") from None
