"""Recipe `digit_cnn`: train the digit CNN, export it to ONNX, validate it, install the served variant."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from model_build import digits
from model_build.export import compare_with_framework, onnx_from_torch, onnxruntime_session, run_onnxruntime_batched
from model_build.pipeline import install_file
from serving.model_config import render_onnx_cpu_config, tensor_specs_from_onnx, write_model_config
from serving.spec import ModelSpec, ServingSpec

FP32_ONNX = "fp32.onnx"
TEST_SPLIT = "test_split.npz"
#: Softmax outputs of the same weights in two runtimes: float32 rounding only.
EXPORT_TOLERANCE = 1e-4


def build_digit_cnn(model: ModelSpec, workdir: Path) -> dict[str, Any]:
    import torch

    width = int(model.options.get("width", 16))
    epochs = int(model.options.get("epochs", 40))
    seed = int(model.options.get("seed", 0))
    torch.set_num_threads(2)
    splits = digits.load_digits_splits(seed=seed)
    splits.save(workdir / TEST_SPLIT)
    net = digits.train_digit_cnn(splits, width=width, epochs=epochs, seed=seed)

    def framework(feeds):
        with torch.no_grad():
            return net(torch.from_numpy(feeds[digits.INPUT_NAME])).numpy()

    fp32_path = onnx_from_torch(
        net, [torch.from_numpy(splits.test_images[:2])], workdir / FP32_ONNX,
        input_names=[digits.INPUT_NAME], output_names=[digits.OUTPUT_NAME],
        dynamic_axes={digits.INPUT_NAME: {0: "batch"}, digits.OUTPUT_NAME: {0: "batch"}},
    )
    feeds = {digits.INPUT_NAME: splits.test_images}
    comparison = compare_with_framework(framework, fp32_path, feeds, EXPORT_TOLERANCE, f"{model.name} fp32 export")
    probs = run_onnxruntime_batched(onnxruntime_session(fp32_path), feeds)[0]
    accuracy = digits.top1_accuracy(probs, splits.test_labels)
    return {
        "files": [FP32_ONNX, TEST_SPLIT],
        "served_file": FP32_ONNX,
        "training": {"width": width, "epochs": epochs, "seed": seed, "train_samples": int(len(splits.train_labels))},
        "test_samples": int(len(splits.test_labels)),
        "export": {"max_abs_diff_vs_torch": comparison.max_abs_diff, "tolerance": EXPORT_TOLERANCE},
        "variants": {
            "fp32": {
                "file": FP32_ONNX,
                "size_bytes": fp32_path.stat().st_size,
                "metric": "top1_accuracy",
                "value": accuracy,
            }
        },
    }


def install_onnx_model(model: ModelSpec, serving: ServingSpec, record: dict[str, Any], workdir: Path, repository: Path) -> list[str]:
    """Copy the served variant to <repo>/<model>/1/model.onnx and render its config from the graph."""
    served = workdir / record["served_file"]
    model_dir = repository / model.name
    onnx_dest = model_dir / "1" / "model.onnx"
    install_file(served, onnx_dest)
    inputs, outputs = tensor_specs_from_onnx(onnx_dest)
    write_model_config(model_dir, render_onnx_cpu_config(model, serving, inputs, outputs))
    return [model.name]


def digits_test_accuracy(onnx_path: Path, test_split: Path) -> float:
    images, labels = digits.load_test_split(test_split)
    probs = run_onnxruntime_batched(onnxruntime_session(onnx_path), {digits.INPUT_NAME: images})[0]
    return digits.top1_accuracy(np.asarray(probs), labels)
