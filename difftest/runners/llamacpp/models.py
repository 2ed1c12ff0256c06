"""The tiny seeded GGUF pair of one llama.cpp run, written with the `gguf` package on first use.

A 4-layer Llama target and a 2-layer draft that shares the target's embeddings, first two
layers, final norm and output head (an early exit of the target, so that some drafts are
accepted), both float32, with the vocabulary llama.cpp calls `none` (256 ids, no tokenizer: the
runner speaks token ids). Weights are drawn with numpy from the seed with a wide scale (0.1)
so the greedy stream varies. Nothing is fetched: the files are made here, kept in the cache
folder under the seed and this module's format version, and written atomically (a temp file
renamed into place) so two arms starting together both read a whole file.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from difftest.core.errors import UsageError

VOCAB = 256
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
FFN = 2 * HIDDEN
TARGET_LAYERS = 4
DRAFT_LAYERS = 2
ROPE_BASE = 10000.0
RMS_EPS = 1e-5
CONTEXT = 2048
INIT_SCALE = 0.1
# Bump when the files' content changes: a cache written by an older runner is never read.
FORMAT = "v1"


@dataclass(frozen=True)
class ModelPair:
    """Where the two GGUF files of one seed are."""

    target: Path
    draft: Path


def cache_root(explicit: Path | None = None) -> Path:
    """The folder of the GGUF pairs: the option, else $DIFFTEST_CACHE/llamacpp, else
    $XDG_CACHE_HOME/difftest/llamacpp, else ~/.cache/difftest/llamacpp."""
    if explicit is not None:
        return Path(explicit)
    own = os.environ.get("DIFFTEST_CACHE", "").strip()
    if own:
        return Path(own) / "llamacpp"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) / "difftest" if xdg else Path.home() / ".cache" / "difftest"
    return base / "llamacpp"


def _weights(seed: int) -> dict[str, object]:
    """The target's tensors by GGUF name, numpy float32 in (out, in) layout (ggml's ne reversed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    head = HIDDEN // HEADS

    def dense(rows: int, cols: int) -> object:
        return (rng.standard_normal((rows, cols)) * INIT_SCALE).astype(np.float32)

    def norm() -> object:
        return (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)

    tensors: dict[str, object] = {"token_embd.weight": dense(VOCAB, HIDDEN)}
    for i in range(TARGET_LAYERS):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = norm()
        tensors[p + "attn_q.weight"] = dense(HEADS * head, HIDDEN)
        tensors[p + "attn_k.weight"] = dense(KV_HEADS * head, HIDDEN)
        tensors[p + "attn_v.weight"] = dense(KV_HEADS * head, HIDDEN)
        tensors[p + "attn_output.weight"] = dense(HIDDEN, HEADS * head)
        tensors[p + "ffn_norm.weight"] = norm()
        tensors[p + "ffn_gate.weight"] = dense(FFN, HIDDEN)
        tensors[p + "ffn_up.weight"] = dense(FFN, HIDDEN)
        tensors[p + "ffn_down.weight"] = dense(HIDDEN, FFN)
    tensors["output_norm.weight"] = norm()
    tensors["output.weight"] = dense(VOCAB, HIDDEN)
    return tensors


def _write(path: Path, layers: int, tensors: dict[str, object], name: str) -> None:
    import gguf

    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name(name)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_vocab_size(VOCAB)
    writer.add_tokenizer_model("none")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for key, value in tensors.items():
        if key.startswith("blk.") and int(key.split(".")[1]) >= layers:
            continue
        writer.add_tensor(key, value)  # type: ignore[arg-type]
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def model_pair(seed: int, cache: Path | None = None) -> ModelPair:
    """The pair of `seed`, written into the cache the first time it is asked for."""
    folder = cache_root(cache) / FORMAT / f"seed{seed}"
    pair = ModelPair(folder / "target.gguf", folder / "draft.gguf")
    if pair.target.is_file() and pair.draft.is_file():
        return pair
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tensors = _weights(seed)
        _write(pair.target, TARGET_LAYERS, tensors, f"difftest-target-seed{seed}")
        _write(pair.draft, DRAFT_LAYERS, tensors, f"difftest-draft-seed{seed}")
    except OSError as exc:
        raise UsageError(f"cannot write the GGUF models into {folder}: {exc.strerror or exc} "
                         "(set --cache-dir or DIFFTEST_CACHE to a writable folder)") from None
    return pair
