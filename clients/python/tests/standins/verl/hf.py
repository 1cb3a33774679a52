"""A toy Hugging Face tokenizer and processor with the behaviour VERL's agent-loop post-processing relies on.

One token per character. ``pad`` follows ``PreTrainedTokenizerBase.pad`` of
transformers (``tokenization_utils_base.py``): ``padding="max_length"``
pads on ``padding_side`` and never truncates, and an empty ``input_ids``
comes back unchanged as plain lists (VERL then fails on ``.dim()``).
``apply_chat_template`` renders ``<role>content`` per message and records
the ``tools`` it was given, so tests can check the schemas reached the model.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

PAD = 0


class CharTokenizer:
    """CharTokenizer is a one-token-per-character tokenizer with HF's ``pad`` semantics."""

    pad_token_id = PAD
    eos_token_id = 3
    pad_token = "\x00"

    def __init__(self) -> None:
        self.padding_side = "right"
        # tools_seen holds the ``tools`` argument of every apply_chat_template call that had one.
        self.tools_seen: List[List[Dict[str, Any]]] = []

    def render(self, messages: List[Dict[str, Any]], add_generation_prompt: bool = False) -> str:
        """render is the chat template as text."""
        text = "".join(f"<{m.get('role', 'system')}>{m.get('content') or ''}" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def apply_chat_template(
        self, messages: List[Dict[str, Any]], tools: Any = None, add_generation_prompt: bool = False, tokenize: bool = True, **kwargs: Any
    ) -> Any:
        """apply_chat_template renders messages (token ids when tokenize, else text)."""
        if tools:
            self.tools_seen.append(list(tools))
        text = self.render(messages, add_generation_prompt)
        return self.encode(text) if tokenize else text

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        """encode maps each character to its code point."""
        return [ord(c) for c in text]

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        """decode maps ids back to characters, leaving out padding when skip_special_tokens."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i in (PAD, self.eos_token_id)))

    def pad(
        self,
        encoded_inputs: Dict[str, Any],
        padding: Any = True,
        max_length: Optional[int] = None,
        return_tensors: Optional[str] = None,
        return_attention_mask: Optional[bool] = None,
        **kwargs: Any,
    ) -> Dict[str, Any]:
        """pad pads one sequence to max_length like transformers: no truncation, empty input returned as is."""
        ids = encoded_inputs["input_ids"]
        if ids is None or len(ids) == 0:
            if return_attention_mask:
                encoded_inputs["attention_mask"] = []
            return encoded_inputs
        ids = list(ids)
        mask = [1] * len(ids)
        diff = (max_length or len(ids)) - len(ids)
        if padding == "max_length" and diff > 0:
            if self.padding_side == "left":
                ids, mask = [PAD] * diff + ids, [0] * diff + mask
            else:
                ids, mask = ids + [PAD] * diff, mask + [0] * diff
        out: Dict[str, Any] = {"input_ids": ids}
        if return_attention_mask is not False:
            out["attention_mask"] = mask
        if return_tensors == "pt":
            out = {k: torch.tensor(v) for k, v in out.items()}
        return out


class BatchFeature(dict):
    """BatchFeature is the dict a processor returns."""

    def convert_to_tensors(self, tensor_type: str = "pt") -> "BatchFeature":
        """convert_to_tensors is a no-op: the values are tensors already."""
        return self


class CharProcessor:
    """CharProcessor is a text-only multimodal processor over CharTokenizer (a VL model's processor with no images)."""

    class image_processor:
        """image_processor holds the patch size VERL reads."""

        patch_size = 14

    def __init__(self, tokenizer: CharTokenizer) -> None:
        self.tokenizer = tokenizer
        self.chat_template: Optional[str] = None

    def apply_chat_template(self, messages: List[Dict[str, Any]], tools: Any = None, add_generation_prompt: bool = False, tokenize: bool = False, **kwargs: Any) -> Any:
        """apply_chat_template renders like the tokenizer."""
        return self.tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=tokenize)

    def __call__(self, text: List[str], images: Any = None, videos: Any = None, return_tensors: str = "pt", **kwargs: Any) -> BatchFeature:
        """__call__ tokenizes text; images and videos are not supported."""
        if images or videos:
            raise NotImplementedError("CharProcessor is text only")
        ids = torch.tensor([self.tokenizer.encode(text[0])])
        return BatchFeature(input_ids=ids, attention_mask=torch.ones_like(ids))

    def get_rope_index(self, input_ids: torch.Tensor, image_grid_thw: Any = None, video_grid_thw: Any = None, attention_mask: Any = None) -> Any:
        """get_rope_index returns text-only 3-D rope positions (3, batch, seq) like Qwen2-VL's."""
        pos = torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0)
        return pos.unsqueeze(0).expand(3, -1, -1), None
