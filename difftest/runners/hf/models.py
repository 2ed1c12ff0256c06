"""The models of one hf run (a local pair, or a tiny seeded random pair built from configs),
and its seeded prompts.

The built-in pair is a 4-layer Llama target and, for assisted generation, a 2-layer draft that
shares the target's embeddings, first two layers, final norm and head (an early exit of the
target, so that some drafts are accepted); for DFlash, a DFlash drafter reading the target's
layers 1 and 3. Weights are drawn with a wide initializer (0.1) so the greedy stream varies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from difftest.core.errors import UsageError
from difftest.core.faults import Fault
from difftest.runners.hf.attention import route_masked_attention
from difftest.runners.hf.faults import plant
from difftest.runners.hf.options import ATTENTION_MUTATIONS, HFOptions

VOCAB = 256
HIDDEN = 64
TARGET_LAYERS = 4
DRAFT_LAYERS = 2
INIT_RANGE = 0.1
MUTATED_ATTN = "difftest-mutated"


def _llama_config(layers: int) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=512, initializer_range=INIT_RANGE,
                       bos_token_id=None, eos_token_id=None, pad_token_id=None,
                       tie_word_embeddings=False)


def builtin_target(options: HFOptions) -> Any:
    from transformers import LlamaForCausalLM

    torch.manual_seed(options.seed)
    return LlamaForCausalLM(_llama_config(TARGET_LAYERS))


def builtin_assisted_draft(target: Any) -> Any:
    from transformers import LlamaForCausalLM

    draft = LlamaForCausalLM(_llama_config(DRAFT_LAYERS))
    state = {name: value for name, value in target.state_dict().items()
             if not name.startswith("model.layers.") or int(name.split(".")[2]) < DRAFT_LAYERS}
    draft.load_state_dict(state)
    return draft


def builtin_dflash_draft(options: HFOptions) -> Any:
    from transformers.models.muse_glimmer_assistant import (MuseGlimmerAssistantConfig,
                                                            MuseGlimmerAssistantModel)

    fields: dict[str, Any] = dict(
        hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=DRAFT_LAYERS,
        num_attention_heads=4, num_key_value_heads=2, head_dim=HIDDEN // 4,
        block_size=options.k + 1, mask_token_id=VOCAB - 1, target_layer_ids=[1, 3],
        sliding_window=512, max_position_embeddings=512, initializer_range=INIT_RANGE,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    config = MuseGlimmerAssistantConfig(**fields)
    torch.manual_seed(options.seed + 1)
    return MuseGlimmerAssistantModel(config)


def load_pair(options: HFOptions, seen: Callable[[Any, int, int], None] | None = None
              ) -> tuple[Any, Any]:
    """(target, draft) in eval mode, with the options' attention and dtypes. `seen(module,
    q_len, k_len)` hears every routed draft attention forward (the corpus's counters)."""
    if options.model is not None and options.assistant is not None:
        from transformers import AutoModel, AutoModelForCausalLM

        target = _load(AutoModelForCausalLM, options.model, "--model")
        loader = AutoModel if options.drafter == "dflash" else AutoModelForCausalLM
        draft = _load(loader, options.assistant, "--assistant")
    else:
        target = builtin_target(options)
        draft = (builtin_dflash_draft(options) if options.drafter == "dflash"
                 else builtin_assisted_draft(target))
    target.set_attn_implementation(options.attn)
    draft.set_attn_implementation(options.attn)
    target.to(getattr(torch, options.dtype)).eval()
    draft.to(getattr(torch, options.draft_dtype)).eval()
    if options.mutation in ATTENTION_MUTATIONS or options.sliding_window:
        # a sampler's mutation is the sampler's, the target's verify width the runner's
        route_masked_attention(draft, MUTATED_ATTN, options.mutation,
                               window=options.sliding_window, seen=seen)
    return target, draft


def _load(loader: Any, folder: Path, flag: str) -> Any:
    """One local model; a folder transformers cannot load is a usage error naming it, in one
    line (exit 2), not the loader's traceback."""
    try:
        return loader.from_pretrained(folder, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any loader failure means the same: not a model
        said = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise UsageError(f"{flag} {folder}: transformers cannot load a model from this folder "
                         f"({type(exc).__name__}: {said})") from None


def prompts(options: HFOptions, vocab: int) -> dict[str, list[int]]:
    """Seeded prompts; request i gets prompt_len + i ids, so requests differ in length too."""
    g = torch.Generator().manual_seed(options.seed + 1000)
    return {f"r{i}": torch.randint(0, vocab, (options.prompt_len + i,), generator=g).tolist()
            for i in range(options.requests)}


def prepare_draft(options: HFOptions, draft: Any) -> Fault | None:
    """The draft as a run uses it: the planted fault (if any) in its weights, and, for the
    assisted drafter, transformers' assistant settings (k, schedule, confidence) on its
    generation config. Greedy and sampled runs alike; the fault planted is returned (its
    `[spec-config]` key)."""
    fault = options.planted()
    if fault is not None:
        plant(draft, fault, options.seed)
    if options.drafter == "assisted":
        config = draft.generation_config
        config.num_assistant_tokens = options.k
        config.num_assistant_tokens_schedule = options.schedule
        config.assistant_confidence_threshold = options.confidence
    return fault
