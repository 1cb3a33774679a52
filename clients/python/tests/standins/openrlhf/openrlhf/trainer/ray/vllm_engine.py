"""Stand-in for ``openrlhf.trainer.ray.vllm_engine`` (OpenRLHF v0.11.0, commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7).

``_load_agent_executor`` loads the agent_func file as upstream does
(module name ``agent_module``, must define ``AgentExecutor``, a subclass of
``AgentExecutorBase``, built with no arguments). ``RolloutRayActor`` is the
Ray actor without Ray and without vLLM start-up: it is given the engine
(:class:`fakemodel.ScriptedLLM`) and keeps upstream's ``generate``
(``TokensPrompt``, a deep copy of the sampling params, the last
``RequestOutput`` of the stream) and ``generate_responses`` (one
``executor.execute(..., llm_engine=self, ...)`` per sample, all gathered
with ``asyncio.gather``, so one failing sample fails the prompt's call).
"""

import asyncio
import importlib.util
from copy import deepcopy

from vllm.inputs import TokensPrompt
from vllm.utils import random_uuid

from openrlhf.utils.agent import AgentExecutorBase


def _load_agent_executor(agent_func_path: str) -> AgentExecutorBase:
    assert agent_func_path.endswith(".py"), "Agent path must be a Python file"
    spec = importlib.util.spec_from_file_location("agent_module", agent_func_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, "AgentExecutor"), "Agent module must contain AgentExecutor class"
    executor_cls = module.AgentExecutor
    assert issubclass(executor_cls, AgentExecutorBase), "AgentExecutor must inherit from AgentExecutorBase"
    return executor_cls()


class RolloutRayActor:
    """RolloutRayActor is the rollout actor with an injected engine (upstream builds vLLM in its async __init__)."""

    def __init__(self, llm, agent_func_path: str):
        self.executor = _load_agent_executor(agent_func_path)
        self.llm = llm

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        """generate runs one token-level request and returns its final RequestOutput."""
        prompt = TokensPrompt(prompt_token_ids=prompt_token_ids)
        if multi_modal_data:
            prompt["multi_modal_data"] = multi_modal_data
        final = None
        async for out in self.llm.generate(prompt, deepcopy(sampling_params), request_id=random_uuid()):
            final = out
        return final

    def get_num_unfinished_requests(self) -> int:
        """get_num_unfinished_requests is the engine's number of requests in flight."""
        return self.llm.output_processor.get_num_unfinished_requests()

    async def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples=1, images=None):
        """generate_responses runs num_samples executions of one prompt concurrently."""
        tasks = [
            self.executor.execute(
                prompt=prompt,
                label=label,
                sampling_params=sampling_params,
                max_length=max_length,
                hf_tokenizer=hf_tokenizer,
                llm_engine=self,
                images=images,
            )
            for _ in range(num_samples)
        ]
        return await asyncio.gather(*tasks)
