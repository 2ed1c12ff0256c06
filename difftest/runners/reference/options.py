"""Runner options and their environment defaults, kept free of torch so that bad options fail fast."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from collections.abc import Mapping

from difftest.emit import level_from_env
from difftest.core.corpus import Runner, names_of
from difftest.core.corpus import mutation_from_env as corpus_mutation_from_env
from difftest.core.errors import UsageError
from difftest.core.limits import (MAX_NONDET_SEED, check_draft_lens, check_sampling, check_seed,
                                  check_window)
from difftest.runners.reference.faults import Fault, flipped_mask, parse_fault

# VT_SPEC_TRACE is read by the one rule every producer shares.
trace_level_from_env = level_from_env

LANES: tuple[str, ...] = ("paged", "materialized")
DRAFTERS: tuple[str, ...] = ("dflash1", "dflash2")
FIXTURES: tuple[str, ...] = ("informative", "degenerate")
# Known-wrong speculative samplers (difftest.runners.reference.sampling), in effect only in
# sampled mode (--temperature): the draft's uniform reused by the acceptance test, a residual
# drawn without normalising, top-p on the draft's distribution only, the temperature on the
# draft's only.
SAMPLED_MUTATIONS: tuple[str, ...] = ("noise-reuse", "residual-unnormalised", "top-p-draft-only",
                                      "temperature-draft-only")
# "none", the bug corpus (difftest.core.corpus: the three attention mutations first) and the
# sampled mutations.
MUTATIONS: tuple[str, ...] = ("none", *names_of(Runner.REFERENCE), *SAMPLED_MUTATIONS)
# The wrong attentions every lane has, and every block computation feels.
ATTENTION_MUTATIONS: tuple[str, ...] = ("none", "causal-mask", "skip-kv-write", "stale-seq-lens")
MASK_KINDS: tuple[str, ...] = ("full", "causal", "sliding")
# How the draft block's attention is computed: one softmax over every key, or the keys in chunks
# combined with an online softmax (the flash-decoding shape): equal in exact arithmetic, not in
# float32 rounding.
KERNELS: tuple[str, ...] = ("single", "split")
# The dtype the draft forward runs in (weights, activations, its K/V store); the target stays
# float32 and the block logits are widened back to float32 for selecting and printing.
DRAFT_DTYPES: tuple[str, ...] = ("float32", "bfloat16")

# The id the degenerate fixture drafts at every position: the constant block of the motivating trace.
DEGENERATE_ID = 19
MIN_VOCAB = 32


@dataclass(frozen=True)
class RunnerOptions:
    """Everything that decides what one reference run prints; equal options print equal tokens."""

    lane: str = "paged"
    drafter: str = "dflash2"
    scalars: bool = True
    fixture: str = "informative"
    mutation: str = "none"
    requests: int = 3
    steps: int = 10
    k: int = 4
    vocab: int = 256
    layers: int = 2
    seed: int = 0
    prompt_len: int = 12
    target_layers: int = 2
    topk: int = 4
    attention_kernel: str = "single"
    draft_dtype: str = "float32"
    # Reduce the attention keys in an order drawn afresh each run (as GPU atomics do), so reruns
    # differ by float32 rounding; `nondet_seed` fixes the draw (None: a fresh one per run).
    nondeterministic: bool = False
    nondet_seed: int | None = None
    # A drafter made worse on purpose: seeded Gaussian noise of this standard deviation added to
    # every block logit before drafting (0: none), so fewer drafts survive the verify.
    draft_noise: float = 0.0
    # One mask per draft layer ("full", "causal" or "sliding:W"); empty means every layer "full".
    layer_masks: tuple[str, ...] = field(default=())
    # A planted fault in one draft-forward module (difftest.runners.reference.faults); "" for none.
    fault: str = ""
    # Drafted tokens per step, cycled over the steps (request i starts i entries further): the
    # verify widths a run exercises; empty means k at every step.
    draft_lens: tuple[int, ...] = field(default=())
    # The end-of-sequence id: a request whose committed stream reaches it stops (-1: none).
    eos_id: int = -1
    # Requests after the first begin with the first request's first `shared_prefix` ids, and the
    # paged lane's prefix cache lets them take its pages that hold only those (0: none).
    shared_prefix: int = 0
    # DFlash2 selector scalars, applied to candidate values only when `scalars` is on.
    output_multiplier: float = 0.5
    final_logit_softcapping: float = 30.0
    # Sampled decoding (difftest.runners.reference.sampling): a temperature > 0 samples instead
    # of taking the argmax, with top-p over the tempered distribution; None decodes greedily.
    temperature: float | None = None
    top_p: float = 1.0
    # The sampler's seed (None: drawn from the OS each run, so reruns are fresh draws; the
    # `[spec-config]` line prints the one used). `seed` builds the model and prompts.
    sample_seed: int | None = None
    # Draws per prompt in one run: request `rI~J` is draw J of prompt rI (1: requests `rI`).
    samples: int = 1
    # The target alone: one token per step, no draft (`k=0` verifies).
    no_spec: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise UsageError naming the first bad field, so a caller never gets a torch traceback."""
        for name, allowed in (("lane", LANES), ("drafter", DRAFTERS), ("fixture", FIXTURES),
                              ("mutation", MUTATIONS),
                              ("attention_kernel", KERNELS), ("draft_dtype", DRAFT_DTYPES)):
            value = getattr(self, name)
            if value not in allowed:
                raise UsageError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")
        minimums = {"requests": 1, "steps": 1, "k": 1, "vocab": MIN_VOCAB, "layers": 1,
                    "prompt_len": 1, "target_layers": 1, "topk": 1}
        for name, low in minimums.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise UsageError(f"{name} must be an integer >= {low}, got {value!r}")
        check_seed(self.seed)
        if self.nondet_seed is not None:
            check_seed(self.nondet_seed, "nondet_seed", MAX_NONDET_SEED)
        check_draft_lens(self.draft_lens, self.k)
        if not isinstance(self.eos_id, int) or not -1 <= self.eos_id < self.vocab:
            raise UsageError(f"eos_id must be -1 (none) or an id below vocab ({self.vocab}), "
                             f"got {self.eos_id!r}")
        if not isinstance(self.shared_prefix, int) or not 0 <= self.shared_prefix <= self.prompt_len:
            raise UsageError(f"shared_prefix must be an integer in 0..prompt_len "
                             f"({self.prompt_len}), got {self.shared_prefix!r}")
        if self.topk > self.vocab:
            raise UsageError(f"topk ({self.topk}) cannot exceed vocab ({self.vocab})")
        if self.layer_masks and len(self.layer_masks) != self.layers:
            raise UsageError(f"layer_masks names {len(self.layer_masks)} masks for {self.layers} "
                             "draft layers")
        for text in self.layer_masks:
            parse_mask(text)
        self.planted()
        if not (isinstance(self.draft_noise, (int, float)) and self.draft_noise >= 0
                and self.draft_noise < float("inf")):
            raise UsageError(f"draft_noise must be a finite number >= 0, got {self.draft_noise!r}")
        if not self.output_multiplier > 0 or not self.final_logit_softcapping > 0:
            raise UsageError("output_multiplier and final_logit_softcapping must be > 0")
        self._validate_sampling()

    def _validate_sampling(self) -> None:
        check_sampling(self.temperature, self.top_p, self.sample_seed, self.samples,
                       dash=False, seed_needs_temperature=True)
        t = self.temperature
        if self.eos_id >= 0 and (t is not None or self.no_spec):
            raise UsageError("eos_id is honoured by greedy speculative decoding only: sampled "
                             "decoding and --no-spec run each draw to its --steps budget")
        if self.mutation in SAMPLED_MUTATIONS and t is None:
            raise UsageError(f"mutation {self.mutation!r} is a sampler's: it needs a temperature")

    @property
    def sampled(self) -> bool:
        """Sampled decoding (a temperature), or the target alone: the loop of
        difftest.runners.reference.sampling."""
        return self.temperature is not None or self.no_spec

    def masks(self) -> tuple[tuple[str, int], ...]:
        """(kind, window) per draft layer; window is 0 unless the kind is sliding. A planted
        mask fault changes its one layer's."""
        texts = self.layer_masks or ("full",) * self.layers
        masks = [parse_mask(t) for t in texts]
        fault = self.planted()
        layer = fault.mask_layer() if fault is not None else None
        if layer is not None:
            masks[layer] = (flipped_mask(masks[layer][0]), 0)
        return tuple(masks)

    def planted(self) -> Fault | None:
        """The planted fault, parsed (None: none)."""
        return parse_fault(self.fault, self.layers) if self.fault else None

    def with_(self, **changes: object) -> RunnerOptions:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def parse_mask(text: str) -> tuple[str, int]:
    """`full`, `causal` or `sliding:W` (W >= 1 keys behind the query, itself included)."""
    kind, _, window = text.partition(":")
    if kind in ("full", "causal") and not window:
        return kind, 0
    if kind == "sliding" and window.isdigit() and window.isascii() and len(window) <= 20:
        return kind, check_window(int(window), f"layer mask {text!r}: the window")
    raise UsageError(f"bad layer mask {text!r}; use full, causal or sliding:W with W >= 1")


def lane_from_env(env: Mapping[str, str] | None = None) -> str:
    """vllm.cpp's selection: VT_DFLASH_PAGED=0 picks the materialized lane, anything else paged."""
    env = os.environ if env is None else env
    return "materialized" if env.get("VT_DFLASH_PAGED", "").strip() == "0" else "paged"


def mutation_from_env(env: Mapping[str, str] | None = None) -> str:
    """DIFFTEST_MUTATION names a built-in mutation; unset or empty means none."""
    return corpus_mutation_from_env(MUTATIONS, env)


def fault_from_env(env: Mapping[str, str] | None = None) -> str:
    """DIFFTEST_FAULT plants a per-module fault (MODULE:KIND[:SIZE]); unset or empty: none."""
    env = os.environ if env is None else env
    return env.get("DIFFTEST_FAULT", "").strip()
