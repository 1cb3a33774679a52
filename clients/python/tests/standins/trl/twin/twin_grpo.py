"""The policy side of the GRPOTrainer twin: TRL's real GRPOTrainer generating with the scripted policy.

``TwinTokenizer`` is the toy tokenizer passing GRPOTrainer's
``PreTrainedTokenizerBase`` check; ``TwinModel`` answers
``generate(input_ids, attention_mask, generation_config)`` like a Hugging
Face causal LM (prompt and new tokens, right-padded), from the scripted
policy. The model is never trained: the twin stops at
``_generate_and_score_completions``.
"""

from __future__ import annotations

from typing import Any, List

import torch
import transformers

from scripted_policy import PAD, ToyTokenizer, respond


class TwinTokenizer(ToyTokenizer, transformers.PreTrainedTokenizerBase):
    """TwinTokenizer is ToyTokenizer as a (stub) PreTrainedTokenizerBase."""


class _TwinConfig:
    """_TwinConfig is the part of a model config GRPOTrainer reads."""

    model_type = "scripted"
    _name_or_path = "scripted"
    max_position_embeddings = 1 << 20
    tie_word_embeddings = False

    def get_text_config(self) -> "_TwinConfig":
        """get_text_config returns this config (a text-only model)."""
        return self


class TwinModel:
    """TwinModel is a causal LM whose generate answers each prompt with the scripted policy."""

    def __init__(self, max_new_tokens: int) -> None:
        self.config = _TwinConfig()
        self.training = True
        self.is_gradient_checkpointing = False
        self.generation_config = None
        self.max_new_tokens = max_new_tokens
        self.tags: List[str] = []
        self._tok = ToyTokenizer()

    def forward(self, input_ids: Any = None, attention_mask: Any = None, logits_to_keep: Any = None) -> Any:
        """forward is not needed: the twin computes no log-probabilities."""
        raise NotImplementedError

    def add_model_tags(self, tags: List[str]) -> None:
        """add_model_tags records the trainer's tags."""
        self.tags += list(tags)

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generation_config: Any = None, **kwargs: Any) -> torch.Tensor:
        """generate returns the prompts followed by the scripted answers (right-padded)."""
        answers = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            prompt = [i for i, m in zip(ids, mask) if m]
            answers.append(self._tok.encode(respond(self._tok.decode(prompt)))[: self.max_new_tokens])
        width = max(len(a) for a in answers)
        new = torch.full((len(answers), width), ord(PAD), dtype=input_ids.dtype)
        for i, a in enumerate(answers):
            new[i, : len(a)] = torch.tensor(a, dtype=input_ids.dtype)
        return torch.cat([input_ids, new], dim=1)
