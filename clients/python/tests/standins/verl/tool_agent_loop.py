"""Stand-in for ``verl/experimental/agent_loop/tool_agent_loop.py`` and the hermes parser of ``tool_parser.py`` (VERL main b178a3cd).

``ToolAgentLoop`` (registered as ``tool_agent``) runs the state machine
PENDING → GENERATING ⇄ PROCESSING_TOOLS → TERMINATED on an ``AgentData``
whose ``request_id`` (uuid4 hex, made in ``run``) names the trajectory:

* PENDING renders ``raw_prompt`` with the tools' schemas
  (``tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True)``);
* GENERATING calls ``server_manager.generate(request_id=..., prompt_ids=...,
  sampling_params=..., image_data=..., video_data=...)``, appends the tokens
  (mask 1, log-probs when given), stops at ``response_length`` or the turn
  limits, else parses hermes tool calls; none ends the trajectory;
* PROCESSING_TOOLS runs every call (up to ``max_parallel_calls``,
  concurrently) as ``tool.create(create_kwargs=row.tools_kwargs[name].create_kwargs)``
  → ``tool.execute(instance_id, args, agent_data=agent_data)`` →
  ``tool.release(instance_id)`` — a new instance per call —, cuts long
  tool texts to ``max_tool_response_length``, renders the tool messages
  without the system prompt and stops if they would reach
  ``response_length``.

The output has ``multi_modal_data`` ``{}``, ``response_logprobs`` None when
no log-probs came back, ``extra_fields`` ``turn_scores`` and
``tool_rewards``; ``reward_score`` stays None (the reward loop scores it).
Interactions are not part of the stand-in.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Dict, List, Tuple
from uuid import uuid4

from .agent_loop import AgentLoopBase, AgentLoopOutput, register
from .tools import ToolResponse, initialize_tools_from_config

PENDING, GENERATING, PROCESSING_TOOLS, TERMINATED = "pending", "generating", "processing_tools", "terminated"


class FunctionCall:
    """FunctionCall is one parsed tool call (arguments as a JSON string)."""

    def __init__(self, name: str, arguments: str) -> None:
        self.name = name
        self.arguments = arguments


class HermesToolParser:
    """HermesToolParser extracts ``<tool_call>{"name", "arguments"}</tool_call>`` blocks from decoded tokens."""

    _re = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    async def extract_tool_calls(self, response_ids: List[int]) -> Tuple[str, List[FunctionCall]]:
        """extract_tool_calls returns the text without the calls and the calls."""
        text = self.tokenizer.decode(response_ids)
        if "<tool_call>" not in text or "</tool_call>" not in text:
            return text, []
        calls = []
        for m in self._re.findall(text):
            try:
                d = json.loads(m)
                calls.append(FunctionCall(name=d["name"], arguments=json.dumps(d["arguments"], ensure_ascii=False)))
            except Exception:
                pass
        return self._re.sub("", text), calls


class AgentData:
    """AgentData is the state of one trajectory; tools receive it as ``agent_data``."""

    def __init__(self, messages: List[Dict[str, Any]], image_data: Any, video_data: Any, metrics: Dict[str, Any], request_id: str, tools_kwargs: Dict[str, Any]) -> None:
        self.messages = messages
        self.image_data = image_data
        self.video_data = video_data
        self.metrics = metrics
        self.request_id = request_id
        self.tools_kwargs = tools_kwargs
        self.prompt_ids: List[int] = []
        self.response_ids: List[int] = []
        self.response_mask: List[int] = []
        self.response_logprobs: List[float] = []
        self.turn_scores: List[float] = []
        self.tool_rewards: List[float] = []
        self.user_turns = 0
        self.assistant_turns = 0
        self.tool_calls: List[FunctionCall] = []
        self.extra_fields: Dict[str, Any] = {}


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """ToolAgentLoop is VERL's multi-turn tool-calling loop."""

    def __init__(self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any, **kwargs: Any) -> None:
        super().__init__(trainer_config, server_manager, tokenizer, processor, **kwargs)
        mt = trainer_config.config.actor_rollout_ref.rollout.multi_turn
        self.max_user_turns = mt.max_user_turns
        self.max_assistant_turns = mt.max_assistant_turns
        self.max_parallel_calls = mt.max_parallel_calls
        self.max_tool_response_length = mt.max_tool_response_length
        self.tool_response_truncate_side = mt.tool_response_truncate_side
        tool_list = initialize_tools_from_config(mt.tool_config_path) if mt.tool_config_path else []
        self.tools = {t.name: t for t in tool_list}
        self.tool_schemas = [t.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for t in tool_list]
        self.tool_parser = HermesToolParser(self.tokenizer)
        self.prompt_length = trainer_config.config.actor_rollout_ref.rollout.prompt_length
        self.response_length = trainer_config.config.actor_rollout_ref.rollout.response_length
        if mt.interaction_config_path:
            raise NotImplementedError("interactions are not part of the stand-in")

    async def run(self, sampling_params: Dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """run plays one trajectory."""
        agent_data = AgentData(
            messages=list(kwargs["raw_prompt"]),
            image_data=None,
            video_data=None,
            metrics={},
            request_id=uuid4().hex,
            tools_kwargs=kwargs.get("tools_kwargs", {}),
        )
        state = PENDING
        while state != TERMINATED:
            if state == PENDING:
                state = await self._handle_pending_state(agent_data, sampling_params)
            elif state == GENERATING:
                state = await self._handle_generating_state(agent_data, sampling_params)
            else:
                state = await self._handle_processing_tools_state(agent_data)
        n = len(agent_data.response_mask)
        response_ids = agent_data.prompt_ids[-n:]
        prompt_ids = agent_data.prompt_ids[: len(agent_data.prompt_ids) - n]
        output = AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=agent_data.response_mask[: self.response_length],
            multi_modal_data={},
            response_logprobs=agent_data.response_logprobs[: self.response_length] if agent_data.response_logprobs else None,
            num_turns=agent_data.user_turns + agent_data.assistant_turns + 1,
            metrics=agent_data.metrics,
            extra_fields={},
        )
        output.extra_fields.update({"turn_scores": agent_data.turn_scores, "tool_rewards": agent_data.tool_rewards})
        return output

    async def _handle_pending_state(self, agent_data: AgentData, sampling_params: Dict[str, Any]) -> str:
        agent_data.prompt_ids = await self.apply_chat_template(agent_data.messages, tools=self.tool_schemas)
        return GENERATING

    async def _handle_generating_state(self, agent_data: AgentData, sampling_params: Dict[str, Any]) -> str:
        output = await self.server_manager.generate(
            request_id=agent_data.request_id,
            prompt_ids=agent_data.prompt_ids,
            sampling_params=sampling_params,
            image_data=agent_data.image_data,
            video_data=agent_data.video_data,
        )
        agent_data.assistant_turns += 1
        agent_data.response_ids = output.token_ids
        agent_data.prompt_ids += agent_data.response_ids
        agent_data.response_mask += [1] * len(agent_data.response_ids)
        if output.log_probs:
            agent_data.response_logprobs += output.log_probs
        if len(agent_data.response_mask) >= self.response_length:
            return TERMINATED
        if self.max_assistant_turns and agent_data.assistant_turns >= self.max_assistant_turns:
            return TERMINATED
        if self.max_user_turns and agent_data.user_turns >= self.max_user_turns:
            return TERMINATED
        _, agent_data.tool_calls = await self.tool_parser.extract_tool_calls(agent_data.response_ids)
        return PROCESSING_TOOLS if agent_data.tool_calls else TERMINATED

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> str:
        calls = agent_data.tool_calls[: self.max_parallel_calls]
        responses = await asyncio.gather(*(self._call_tool(c, agent_data.tools_kwargs, agent_data) for c in calls))
        add_messages = []
        for resp, reward, _ in responses:
            add_messages.append({"role": "tool", "content": resp.text or ""})
            if reward is not None:
                agent_data.tool_rewards.append(reward)
        agent_data.messages.extend(add_messages)
        response_ids = await self.apply_chat_template(add_messages, remove_system_prompt=True)
        if len(agent_data.response_mask) + len(response_ids) >= self.response_length:
            return TERMINATED
        agent_data.prompt_ids += response_ids
        agent_data.response_mask += [0] * len(response_ids)
        if agent_data.response_logprobs:
            agent_data.response_logprobs += [0.0] * len(response_ids)
        agent_data.user_turns += 1
        return GENERATING

    async def _call_tool(self, tool_call: FunctionCall, tools_kwargs: Dict[str, Any], agent_data: AgentData) -> Tuple[ToolResponse, float, Dict[str, Any]]:
        tool, instance_id = None, None
        try:
            tool_args = json.loads(tool_call.arguments)
            tool = self.tools[tool_call.name]
            kwargs = tools_kwargs.get(tool_call.name, {})
            instance_id, _ = await tool.create(create_kwargs=kwargs.get("create_kwargs", {}))
            resp, reward, res = await tool.execute(instance_id, tool_args, agent_data=agent_data)
        except Exception as e:
            return ToolResponse(text=f"Error when executing tool: {e}"), 0.0, {}
        finally:
            if tool and instance_id:
                await tool.release(instance_id)
        text = resp.text
        limit = self.max_tool_response_length
        if text and len(text) > limit:
            if self.tool_response_truncate_side == "left":
                text = text[:limit] + "...(truncated)"
            elif self.tool_response_truncate_side == "right":
                text = "(truncated)..." + text[-limit:]
            else:
                half = limit // 2
                text = text[:half] + "...(truncated)..." + text[-half:]
        return ToolResponse(text=text), reward, res
