"""Stand-in for the parts of vLLM that OpenRLHF's rollout touches: ``SamplingParams`` and the output types.

Field names follow vLLM (``vllm/sampling_params.py``, ``vllm/outputs.py``,
``vllm/sequence.py``). The V1 output semantics that matter here are
reproduced by :class:`fakemodel.ScriptedLLM`: a request stopped by a stop
token (EOS) keeps that token in ``CompletionOutput.token_ids`` but not in
``text`` (``vllm/v1/engine/detokenizer.py``, ``IncrementalDetokenizer.update``:
the stop token is skipped for detokenization and appended to ``token_ids``
afterwards, unless ``include_stop_str_in_output``).
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__version__ = "0.11.0"


@dataclass
class SamplingParams:
    """SamplingParams mirrors the vLLM fields OpenRLHF sets (``SamplesGenerator._dispatch_prompts_to_vllm``)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logprobs: Optional[int] = None
    stop: List[str] = field(default_factory=list)


@dataclass
class Logprob:
    """Logprob is one token's log probability (``vllm.sequence.Logprob``)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """CompletionOutput is one completion of a request (``vllm.outputs.CompletionOutput``)."""

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None
    stop_reason: Any = None


@dataclass
class RequestOutput:
    """RequestOutput is the output of one request (``vllm.outputs.RequestOutput``)."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Any
    outputs: List[CompletionOutput]
    finished: bool
