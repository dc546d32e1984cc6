"""A text corpus assembled offline from the documentation installed with Python packages.

The text embedder needs real sentences for three jobs: checking the ONNX export against the
framework, calibrating INT8 variants, and measuring fidelity and padding on a realistic,
long-tailed length mix. Nothing may be downloaded, so the sentences come from what `pip` already
put on this machine: each installed distribution's long description (`*.dist-info/METADATA`, the
package README) and the `.md`/`.rst` files shipped inside packages. The requirements are pinned,
so the same lock file gives the same corpus.

Pipeline (pure functions, tested without the file system): markup to prose -> sentences ->
filter prose-like ones -> deduplicate -> split train/held-out by a seeded hash of each sentence.
The hash split is stable: adding a document adds sentences to either side but never moves an
existing sentence from train to held-out, so calibration data can never leak into evaluation.
Only `installed_documents`, `TextCorpus.save` and `load_text_corpus` touch the disk; the file's type,
format and reader are contracts.text_corpus's, shared with the perf suites and the tests.
"""
from __future__ import annotations

import email.parser
import hashlib
import os
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

# The corpus file's type and reader are contracts.text_corpus's (the perf suites and the tests read the
# file too); `load_text_corpus` is imported here so the build's name for it keeps working.
from contracts.text_corpus import TextCorpus, load_text_corpus, normalized_key  # noqa: F401
from model_build.errors import BuildError

#: Sentence shape limits: long enough to carry meaning, short enough to be a sentence.
MIN_WORDS = 4
MAX_CHARS = 1200

_FENCED_CODE = re.compile(r"^\s*(```|~~~).*?^\s*(```|~~~)\s*$", re.S | re.M)
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_MD_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_RST_LINK = re.compile(r"`([^`<]+?)\s*<[^>]+>`_+")
_RST_ROLE = re.compile(r":[a-z:]+:`([^`]+)`")
_INLINE_CODE = re.compile(r"`{1,2}([^`]+)`{1,2}_?")
_URL = re.compile(r"https?://\S+|www\.\S+")
_EMPHASIS = re.compile(r"(\*\*|__|\*)(?=\S)(.+?)(?<=\S)\1")
#: A sentence ends at . ! or ? followed by space and an upper-case letter, digit or opening quote.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
#: Abbreviations that end with a period but do not end a sentence.
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "Fig.", "No.", "Dr.", "Mr.", "Mrs.", "al.")


@dataclass(frozen=True)
class SourceDocument:
    """One document: where it came from (for the record) and its raw text."""

    name: str
    text: str


_BULLET = re.compile(r"^\s*([-*+]|\d+\.)\s+")
_BLOCKQUOTE = re.compile(r"^\s*(>\s?)+")
_RULE_OR_HEADER = re.compile(r"^\s*([-=~^*+#]{3,}\s*$|#{1,6}\s)")


def _skip_block(block: str) -> bool:
    """Blocks that are not prose: tables, code, doctests, shell sessions, RST directives."""
    lines = [line for line in block.splitlines() if line.strip()]
    if not lines:
        return True
    if re.match(r"^\s*(\||\+[-=+]+|>>>|\$ |\.\. )", lines[0]):
        return True
    return all(re.match(r"^( {4}|\t)", line) for line in lines)  # indented code block


def _block_items(block: str) -> list[str]:
    """A block's items, one line each: a bullet starts a new item, other lines continue it."""
    items: list[list[str]] = []
    for line in block.splitlines():
        line = _BLOCKQUOTE.sub("", line)
        if not line.strip() or _RULE_OR_HEADER.match(line):
            continue  # RST underline, horizontal rule, Markdown header
        if _BULLET.match(line) or not items:
            items.append([_BULLET.sub("", line)])
        else:
            items[-1].append(line)
    return [" ".join(item) for item in items]


def markup_to_prose(text: str) -> list[str]:
    """Paragraphs of plain prose from Markdown or reStructuredText, markup removed, one line each."""
    text = _FENCED_CODE.sub("\n\n", text.replace("\r\n", "\n"))
    text = _HTML_COMMENT.sub(" ", text)
    # RST: a paragraph ending with "::" introduces a literal block; the sentence ends there.
    text = re.sub(r"::\s*$", ".", text, flags=re.M)
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        if _skip_block(block):
            continue
        for flat in _block_items(block):
            for pattern, repl in (
                (_MD_IMAGE, " "), (_MD_LINK, r"\1"), (_MD_REF_LINK, r"\1"), (_RST_LINK, r"\1"),
                (_RST_ROLE, r"\1"), (_INLINE_CODE, r"\1"), (_HTML_TAG, " "), (_URL, " "), (_EMPHASIS, r"\2"),
            ):
                flat = pattern.sub(repl, flat)
            flat = " ".join(flat.split())
            if flat:
                paragraphs.append(flat)
    return paragraphs


def split_sentences(paragraph: str) -> list[str]:
    """Split one prose paragraph at sentence ends, not at common abbreviations."""
    protected = paragraph
    for i, abbreviation in enumerate(_ABBREVIATIONS):
        protected = protected.replace(abbreviation + " ", f"\x00{i}\x00 ")
    pieces = _SENTENCE_END.split(protected)
    sentences = []
    for piece in pieces:
        for i, abbreviation in enumerate(_ABBREVIATIONS):
            piece = piece.replace(f"\x00{i}\x00", abbreviation)
        piece = piece.strip()
        if piece:
            sentences.append(piece)
    return sentences


def is_prose_sentence(sentence: str) -> bool:
    """Keep sentences that read like prose: enough words, mostly letters, ends like a sentence."""
    if len(sentence) > MAX_CHARS or len(sentence.split()) < MIN_WORDS:
        return False
    if not sentence[0].isupper() or sentence[-1] not in ".!?":
        return False
    letters = sum(c.isalpha() or c.isspace() for c in sentence)
    if letters < 0.8 * len(sentence):
        return False  # code, version tables, paths
    return not re.search(r"[{}\\|]|=>|->|\(\)|__\w+__|\w+\.\w+\(", sentence)


def deduplicate(sentences: Iterable[str]) -> list[str]:
    """First occurrence of each sentence (by `normalized_key`), in input order."""
    seen: dict[str, str] = {}
    for sentence in sentences:
        seen.setdefault(normalized_key(sentence), sentence)
    return list(seen.values())


def sentences_from_documents(documents: Sequence[SourceDocument]) -> list[str]:
    """Unique prose sentences of all documents, in document order (documents sorted by name)."""
    sentences: list[str] = []
    for document in sorted(documents, key=lambda d: d.name):
        for paragraph in markup_to_prose(document.text):
            sentences.extend(s for s in split_sentences(paragraph) if is_prose_sentence(s))
    return deduplicate(sentences)


def split_hash(sentence: str, seed: int) -> float:
    """A number in [0, 1) fixed by the sentence and the seed: decides its side and its order."""
    digest = hashlib.sha256(f"{seed}\x00{normalized_key(sentence)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_train_heldout(
    sentences: Sequence[str],
    heldout_fraction: float,
    seed: int,
    max_train: int | None = None,
    max_heldout: int | None = None,
    sources: Sequence[str] = (),
) -> TextCorpus:
    """Hash each sentence with the seed: below `heldout_fraction` it is held out, else train.

    Each side is ordered by hash and capped, so the caps take a seeded random sample.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise BuildError(f"`heldout_fraction` = {heldout_fraction} must lie strictly between 0 and 1.")
    scored = sorted((split_hash(s, seed), s) for s in deduplicate(sentences))
    heldout = [s for h, s in scored if h < heldout_fraction]
    train = [s for h, s in scored if h >= heldout_fraction]
    # Order within each side by a second hash so a prefix is random, not "lowest split hash".
    train.sort(key=lambda s: split_hash(s, seed + 1))
    heldout.sort(key=lambda s: split_hash(s, seed + 1))
    return TextCorpus(
        train=tuple(train[:max_train]), heldout=tuple(heldout[:max_heldout]), seed=seed,
        heldout_fraction=heldout_fraction, sources=tuple(sources),
    )


def _metadata_description(text: str) -> str:
    """The long description of a METADATA file (its body, or the old `Description:` header)."""
    message = email.parser.Parser().parsestr(text)
    body = message.get_payload()
    if isinstance(body, str) and body.strip():
        return body
    return message.get("Description", "") or ""


def installed_documents(site_packages: Path | None = None) -> list[SourceDocument]:
    """Package READMEs (dist-info METADATA) and `.md`/`.rst` docs in site-packages, sorted by path.

    Licence texts are skipped: they are legal boilerplate repeated across packages.
    """
    root = Path(site_packages or sysconfig.get_paths()["purelib"])
    if not root.is_dir():
        raise BuildError(f"site-packages {root} is not a directory.")
    documents = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            in_dist_info = path.parent.name.endswith(".dist-info")
            if in_dist_info and filename == "METADATA":
                text = _metadata_description(path.read_text(errors="replace"))
            elif not in_dist_info and filename.endswith((".md", ".rst")) and not filename.upper().startswith(("LICENSE", "COPYING")):
                text = path.read_text(errors="replace")
            else:
                continue
            if text.strip():
                documents.append(SourceDocument(str(path.relative_to(root)), text))
    return sorted(documents, key=lambda d: d.name)


def documents_digest(documents: Sequence[SourceDocument]) -> str:
    """sha256 of the documents' names and texts: what a corpus assembled from them depends on (the
    pinned packages' versions do not say it all: an editable install's README, a package added)."""
    digest = hashlib.sha256()
    for document in documents:
        digest.update(document.name.encode() + b"\0" + document.text.encode(errors="replace") + b"\0")
    return digest.hexdigest()


def assemble_text_corpus(
    documents: Sequence[SourceDocument],
    heldout_fraction: float = 0.2,
    seed: int = 0,
    max_train: int | None = 4096,
    max_heldout: int | None = 1024,
) -> TextCorpus:
    """The corpus of `documents`: prose sentences, deduplicated, split and capped (all pure)."""
    sentences = sentences_from_documents(documents)
    return split_train_heldout(
        sentences, heldout_fraction, seed, max_train, max_heldout, sources=sorted(d.name for d in documents)
    )
