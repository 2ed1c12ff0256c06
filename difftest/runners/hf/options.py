"""The hf runner's options, kept free of torch so that bad options fail before it loads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from difftest.core.errors import UsageError
from difftest.core.faults import Fault, parse_fault_text
from difftest.core.corpus import Runner, names_of
from difftest.core.limits import check_draft_lens, check_sampling, check_seed, check_window

ATTNS: tuple[str, ...] = ("sdpa", "eager")
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
DRAFTERS: tuple[str, ...] = ("assisted", "dflash")
# assisted: how many tokens the draft proposes per verify. constant: always k; heuristic:
# transformers' schedule (k grows by 2 after a verify that took every draft, shrinks by 1 after
# one that did not), so the draft length follows the acceptance.
SCHEDULES: tuple[str, ...] = ("constant", "heuristic")
# broken-mask: the draft's attention mask of the wrong causality (bidirectional for a causal
# draft, causal for DFlash's bidirectional block); sliding-window-4: each draft query sees only
# the 4 most recent keys. Both change only the draft: a lossless verify keeps the output.
# The known-wrong samplers (sampled mode only), the reference runner's four:
# temperature-draft-only (top-p-draft-only): the draft samples at the temperature (top-p) and
# the target verifies at 1, so the output follows the target's untempered (untruncated) law;
# noise-reuse: the acceptance test reuses the uniform that drew the draft token;
# residual-unnormalised: the rejection's token drawn from max(0, p - q) not normalised
# (difftest.runners.hf.wrong_verify).
# The bug corpus's records this runner carries (difftest.core.corpus, difftest.runners.hf.corpus;
# --list-mutations): sliding-window-edge (the draft's --sliding-window one key too wide),
# verify-width-path (the target's verify rows shifted at width 3), broken-mask (above) and the
# control-explicit-mask control (the draft's sdpa given the causal mask as a tensor).
SAMPLED_MUTATIONS: tuple[str, ...] = ("noise-reuse", "residual-unnormalised", "top-p-draft-only",
                                      "temperature-draft-only")
CORPUS_MUTATIONS: tuple[str, ...] = names_of(Runner.HF)
# the mutations that route the draft's attention through a mask of its own (attention.mutated_mask;
# sliding-window-edge only with a --sliding-window: without one it computes the correct run)
ATTENTION_MUTATIONS: tuple[str, ...] = ("broken-mask", "sliding-window-4", "control-explicit-mask")
MUTATIONS: tuple[str, ...] = tuple(dict.fromkeys(("none", *ATTENTION_MUTATIONS,
                                                  *CORPUS_MUTATIONS, *SAMPLED_MUTATIONS)))


@dataclass(frozen=True)
class HFOptions:
    """Everything that decides what one run prints; equal options print equal traces."""

    model: Path | None = None
    assistant: Path | None = None
    attn: str = "sdpa"
    dtype: str = "float32"
    assistant_dtype: str | None = None  # None: the target's dtype
    drafter: str = "assisted"
    requests: int = 3
    max_new_tokens: int = 16
    k: int = 4  # assisted: draft tokens per step; dflash: block rows after the anchor
    confidence: float = 0.0  # assisted: stop drafting below this probability (0: never)
    schedule: str = "constant"  # assisted: draft length per verify (SCHEDULES)
    prompt_len: int = 8
    seed: int = 0
    threads: int = 1
    mutation: str = "none"
    top_k: int = 8
    # A planted fault in one draft module (difftest.runners.hf.faults), MODULE:KIND[:SIZE]; "" for none.
    fault: str = ""
    # Sampled decoding (difftest.runners.hf.sampling): a temperature samples instead of taking
    # the argmax, through transformers' speculative sampling; top-p over the tempered law
    temperature: float | None = None
    top_p: float = 1.0
    # the sampler's seed (torch's global generator, which transformers draws from); None: a
    # fresh seed from the OS each run, printed in [spec-config]
    sample_seed: int | None = None
    samples: int = 1  # draws per prompt in one run, requests rI~J
    no_spec: bool = False  # the target alone: one token per step, nothing drafted
    # the draft's attention sees only the last W keys (its own included); 0: no window
    sliding_window: int = 0
    # drafted tokens per verify, cycled (request i starts i entries on); (): k every verify
    draft_lens: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name, allowed in (("attn", ATTNS), ("dtype", DTYPES), ("drafter", DRAFTERS),
                              ("mutation", MUTATIONS), ("schedule", SCHEDULES)):
            if getattr(self, name) not in allowed:
                raise UsageError(f"unknown {name} {getattr(self, name)!r}; choose one of "
                                 f"{', '.join(allowed)}")
        if self.assistant_dtype is not None and self.assistant_dtype not in DTYPES:
            raise UsageError(f"unknown assistant dtype {self.assistant_dtype!r}; choose one of "
                             f"{', '.join(DTYPES)}")
        for name, low in (("requests", 1), ("max_new_tokens", 1), ("k", 1), ("prompt_len", 1),
                          ("threads", 1), ("top_k", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise UsageError(f"{name.replace('_', '-')} must be an integer >= {low}, "
                                 f"got {value!r}")
        check_seed(self.seed)
        if not 0.0 <= self.confidence < 1.0:
            raise UsageError(f"confidence must be in [0, 1), got {self.confidence!r}")
        if (self.model is None) != (self.assistant is None):
            raise UsageError("give both --model and --assistant, or neither (the built-in pair)")
        for name in ("model", "assistant"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_dir():
                raise UsageError(f"--{name} {path}: not a model directory")
        if self.drafter == "dflash" and self.draft_dtype != self.dtype:
            # transformers hands the target's hidden states to the DFlash drafter as they are
            raise UsageError("the dflash drafter runs in the target's dtype; drop "
                             "--assistant-dtype or use --drafter assisted")

        if self.drafter == "dflash" and (self.schedule != "constant" or self.confidence != 0.0):
            # the runner sets them on the assisted drafter's generation config only; DFlash
            # drafts a whole block every verify, so its [spec-config] says constant and 0
            raise UsageError("--schedule and --confidence apply to the assisted drafter only; "
                             "the dflash drafter drafts a full block every verify (drop them "
                             "or use --drafter assisted)")
        fault = self.planted()
        if fault is not None and fault.kind == "mask":
            if not fault.module.endswith(".self_attn"):
                raise UsageError(f"fault {self.fault!r}: a mask fault applies to an attention "
                                 "module (model.layers.N.self_attn)")
            if self.attn != "sdpa" or self.mutation != "none":
                raise UsageError(f"fault {self.fault!r}: a mask fault needs --attn sdpa and no "
                                 "--mutation (it routes one layer through a changed sdpa mask)")
        self._validate_sampling()
        self._validate_corpus()

    def _validate_corpus(self) -> None:
        """The window, the draft-length cycle and the corpus's own mutations live in the greedy
        assisted loop, with the draft's attention routed through sdpa."""
        if self.sliding_window:
            check_window(self.sliding_window)
        check_draft_lens(self.draft_lens, self.k)
        asked = [name for name, on in (("--sliding-window", self.sliding_window),
                                       ("--draft-lens", self.draft_lens),
                                       (f"mutation {self.mutation!r}",
                                        self.mutation in CORPUS_MUTATIONS
                                        and self.mutation != "broken-mask")) if on]
        if not asked:
            return
        what = " and ".join(asked)
        if self.drafter != "assisted" or self.sampled:
            raise UsageError(f"{what}: for greedy assisted drafting only (--drafter "
                             "assisted, no --temperature or --no-spec)")
        if self.attn != "sdpa" and (self.sliding_window or self.mutation in ATTENTION_MUTATIONS):
            raise UsageError(f"{what}: the draft's attention is routed through sdpa; use "
                             "--attn sdpa")
        if self.draft_lens and (self.schedule != "constant" or self.confidence != 0.0):
            raise UsageError("--draft-lens sets every verify's draft length: drop --schedule "
                             "and --confidence")
        fault = self.planted()
        if self.sliding_window and fault is not None and fault.kind == "mask":
            raise UsageError(f"fault {self.fault!r}: a mask fault needs no --sliding-window")

    @property
    def corpus_run(self) -> bool:
        """A run that prints its `[spec-coverage]` line: a corpus mutation, a window or a
        draft-length cycle in effect (a plain run prints what it always did)."""
        return bool(self.mutation in CORPUS_MUTATIONS or self.sliding_window or self.draft_lens)

    def _validate_sampling(self) -> None:
        check_sampling(self.temperature, self.top_p, self.sample_seed, self.samples,
                       dash=True)
        t = self.temperature
        if self.mutation in SAMPLED_MUTATIONS:
            if t is None or self.no_spec:
                need = ("a temperature (--temperature T)" if t is None
                        else "a draft (drop --no-spec)")
                raise UsageError(f"mutation {self.mutation!r} is a speculative sampler's: it "
                                 f"needs {need}")
            if self.drafter != "assisted":
                raise UsageError(f"mutation {self.mutation!r} needs --drafter assisted (it "
                                 "changes the assistant's sampling or the test of its drafts)")

    @property
    def sampled(self) -> bool:
        """Sampled decoding (a temperature), or the target alone: the loop of
        difftest.runners.hf.sampling."""
        return self.temperature is not None or self.no_spec

    def planted(self) -> Fault | None:
        """The planted fault, parsed (its module is checked against the loaded draft)."""
        return parse_fault_text(self.fault) if self.fault else None

    @property
    def draft_dtype(self) -> str:
        return self.assistant_dtype or self.dtype
