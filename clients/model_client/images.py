"""Turn image files into the classifier's input: [1, 8, 8] float32 in 0..1, bright digit on dark.

The model was trained on scikit-learn's 8x8 digits (ink bright, background dark). Any PNG is
converted to grayscale, resized to 8x8 with area averaging, scaled to 0..1, and inverted when its
background is light (dark ink on white paper), so a scanned or drawn digit looks like the training data.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from model_client.errors import ClientError

#: Larger images are refused before decoding (decompression-bomb guard).
MAX_IMAGE_PIXELS = 4096 * 4096
MODEL_IMAGE_SIZE = 8


def on_white(img):
    """`img` with any transparency laid over white paper: converting to grayscale dropped the alpha, so a
    digit drawn only in it (black pixels everywhere, opaque where the ink is) read as a blank image (a
    review, 2026-12-07)."""
    from PIL import Image

    if img.mode not in ("RGBA", "LA", "PA") and not (img.mode == "P" and "transparency" in img.info):
        return img
    rgba = img.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)


def image_array_from_png(path: str | Path) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            if img.width * img.height > MAX_IMAGE_PIXELS:
                raise ClientError(
                    f"{path}: image is {img.width}x{img.height}; at most {MAX_IMAGE_PIXELS} pixels are accepted."
                )
            gray = on_white(img).convert("L").resize((MODEL_IMAGE_SIZE, MODEL_IMAGE_SIZE), Image.Resampling.BOX)
    except FileNotFoundError:
        raise ClientError(f"{path}: no such file.") from None
    except UnidentifiedImageError:
        raise ClientError(f"{path}: not a readable image (expected a PNG).") from None
    except IsADirectoryError:
        raise ClientError(f"{path}: is a directory; expected a PNG file.") from None
    except OSError as exc:  # unreadable (permissions), or cut short ("image file is truncated")
        raise ClientError(f"{path}: cannot be read as an image ({exc.strerror or exc}); expected a whole PNG file.") from None
    pixels = np.asarray(gray, dtype=np.float32) / 255.0
    if pixels.mean() > 0.5:  # light background: invert so the ink is bright, as in training
        pixels = 1.0 - pixels
    return pixels[None, :, :]
