"""A toy ChatML tokenizer and a scripted vLLM engine with vLLM V1 output semantics.

:class:`ChatMLTokenizer` behaves like a Hugging Face tokenizer of a ChatML
model (Qwen2.5-Instruct): ``<|im_start|>``, ``<|im_end|>`` and
``<|endoftext|>`` are single special tokens (also when they appear in
text), every other character is one token, and the generation EOS is
``<|im_end|>``.

:class:`ScriptedLLM` stands in for ``vllm.AsyncLLMEngine`` as OpenRLHF's
``RolloutRayActor`` uses it (``generate(prompt, sampling_params,
request_id)`` as an async generator of ``RequestOutput``;
``output_processor.get_num_unfinished_requests()``). The reply is chosen
by a policy from the decoded prompt; the model then ends its turn with
EOS. As in vLLM V1 (``vllm/v1/engine/detokenizer.py``,
``IncrementalDetokenizer.update``), a reply stopped by EOS has the EOS id
as the last entry of ``token_ids`` and not in ``text``
(``finish_reason="stop"``, ``stop_reason=None``); a reply that reaches
``max_tokens`` first is cut there (``finish_reason="length"``, no EOS).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Dict, List, Optional

import torch
from vllm import CompletionOutput, Logprob, RequestOutput

IM_START, IM_END, END_OF_TEXT = 1, 2, 3
SPECIAL = {"<|im_start|>": IM_START, "<|im_end|>": IM_END, "<|endoftext|>": END_OF_TEXT}
CHAR_BASE = 256


class ChatMLTokenizer:
    """ChatMLTokenizer is a Hugging Face-like tokenizer: special tokens are single ids, other characters one id each."""

    eos_token = "<|im_end|>"
    eos_token_id = IM_END
    pad_token_id = END_OF_TEXT

    def encode(self, text: str, add_special_tokens: bool = False) -> List[int]:
        """encode returns the token ids of text."""
        ids: List[int] = []
        i = 0
        while i < len(text):
            for tok, tid in SPECIAL.items():
                if text.startswith(tok, i):
                    ids.append(tid)
                    i += len(tok)
                    break
            else:
                ids.append(CHAR_BASE + ord(text[i]))
                i += 1
        return ids

    def __call__(self, text: Optional[str] = None, add_special_tokens: bool = False, return_tensors: Optional[str] = None) -> Dict[str, Any]:
        """__call__ tokenizes one text: ``input_ids`` is a list, or a (1, n) tensor with ``return_tensors="pt"``."""
        ids = self.encode(text or "")
        if return_tensors == "pt":
            return {"input_ids": torch.tensor([ids], dtype=torch.long)}
        return {"input_ids": ids}

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        """decode turns ids back into text, dropping special tokens when asked."""
        names = {v: k for k, v in SPECIAL.items()}
        out: List[str] = []
        for t in [int(x) for x in ids]:
            if t in names:
                if not skip_special_tokens:
                    out.append(names[t])
            else:
                out.append(chr(t - CHAR_BASE))
        return "".join(out)


class _OutputProcessor:
    """_OutputProcessor counts the requests in flight (vLLM's ``output_processor``)."""

    def __init__(self) -> None:
        self.unfinished = 0

    def get_num_unfinished_requests(self) -> int:
        """get_num_unfinished_requests is the number of requests in flight."""
        return self.unfinished


class ScriptedLLM:
    """ScriptedLLM is a vLLM V1 ``AsyncLLMEngine`` whose replies come from ``policy(prompt_text)``.

    ``prompts`` records the decoded prompt of every request.
    """

    def __init__(self, tokenizer: ChatMLTokenizer, policy: Callable[[str], str]) -> None:
        self.tokenizer = tokenizer
        self.policy = policy
        self.output_processor = _OutputProcessor()
        self.prompts: List[str] = []

    async def generate(self, prompt: Dict[str, Any], sampling_params: Any, request_id: str) -> AsyncIterator[RequestOutput]:
        """generate yields the final RequestOutput of one request."""
        prompt_ids = list(prompt["prompt_token_ids"])
        text_in = self.tokenizer.decode(prompt_ids)
        self.prompts.append(text_in)
        self.output_processor.unfinished += 1
        try:
            await asyncio.sleep(0)
            ids = self.tokenizer.encode(self.policy(text_in)) + [self.tokenizer.eos_token_id]
            limit = sampling_params.max_tokens
            if limit is not None and len(ids) > limit:
                ids, finish = ids[:limit], "length"
                shown = ids
            else:
                finish = "stop"
                shown = ids if sampling_params.include_stop_str_in_output else ids[:-1]
            text = self.tokenizer.decode(shown, skip_special_tokens=sampling_params.skip_special_tokens)
            logprobs = [{t: Logprob(-0.5)} for t in ids] if sampling_params.logprobs is not None else None
            out = CompletionOutput(index=0, text=text, token_ids=ids, cumulative_logprob=None, logprobs=logprobs, finish_reason=finish)
            yield RequestOutput(request_id=request_id, prompt=None, prompt_token_ids=prompt_ids, prompt_logprobs=None, outputs=[out], finished=True)
        finally:
            self.output_processor.unfinished -= 1
