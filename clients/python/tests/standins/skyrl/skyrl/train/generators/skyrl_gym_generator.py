"""Stand-in for ``skyrl.train.generators.skyrl_gym_generator`` (SkyRL a9564572, ``skyrl/train/generators/skyrl_gym_generator.py``).

``SkyRLGymGenerator.agent_loop`` as upstream, for the paths without a custom
chat template (multi-turn chat, single-turn token appending, step-wise):

1. ``env_extras["max_turns"] = generator.max_turns``; ``_setup_env_extras``
   hook; ``env_config = getattr(skyrl_gym_cfg, env_class, dict())``;
   ``env = skyrl_gym.make(env_class, env_config=env_config, extras=env_extras)``
   (``make`` sets ``env.spec``).
2. ``chat, _ = env.init(deepcopy(prompt))`` (metadata dropped), then
   ``tokenizer.apply_chat_template(chat, add_generation_prompt=True,
   tokenize=True, return_dict=False, **chat_template_kwargs)``: no tools.
3. Loop while not done: if ``len(input_ids) > max_input_length`` stop with
   ``stop_reason = "length"``; else generate, ``env.step(output)``, template
   the observations against a fixed base conversation, append tokens with
   loss mask 1 for generated tokens and 0 for observation tokens, record
   ``(reward, response_end_idx)``.
4. ``env.get_metrics()``, then ``env.close()``; cut the response at the last
   response end; per-token rewards at each turn's last token;
   ``_post_process_agent_loop_output`` hook.

Env methods run in a ``ThreadPoolExecutor`` when ``max_env_workers > 0``.
An exception from the env propagates: the batch fails and ``env.close`` is
not called (upstream's ``finally`` only ends the inference session).
``generate`` gathers the loops, then applies ``zero_reward_on_non_stop`` and
``apply_overlong_filtering``.
"""

from __future__ import annotations

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Tuple, Union
from uuid import uuid4

import skyrl_gym
from skyrl.train.config import GeneratorConfig, SkyRLGymConfig
from skyrl.train.generators.base import ConversationType, GeneratorInput, GeneratorInterface, GeneratorOutput, TrajectoryID
from skyrl.train.generators.utils import apply_overlong_filtering, get_custom_chat_template, get_generation_prompt_ids, get_rollout_metrics


@dataclass
class TrajectoryOutput:
    """TrajectoryOutput is one agent_loop's result."""

    response_ids: List[int]
    reward: Union[List[float], float]
    stop_reason: str
    loss_mask: List[int]
    prompt_ids: List[int]
    rollout_logprobs: Optional[List[float]]
    env_metrics: Dict[str, Any]


@dataclass
class StepWiseOutput:
    """StepWiseOutput is one agent_loop's result for step-wise training: one TrajectoryOutput per turn."""

    step_outputs: List[TrajectoryOutput]


@dataclass
class AgentLoopState:
    """AgentLoopState is the running state of one trajectory."""

    chat_history: ConversationType
    input_ids: List[int]
    loss_mask: Optional[List[int]]
    response_end_idx: Optional[int]
    done: bool


@dataclass
class TurnOutput:
    """TurnOutput is one turn: the model's output and the env's observation."""

    output: str
    output_ids: List[int]
    new_obs: ConversationType
    obs_ids: List[int]
    reward: Optional[float]
    added_eos: bool = False

    def get_turn_loss_mask(self) -> List[int]:
        """get_turn_loss_mask is 1 per generated token (0 for an added EOS) and 0 per observation token."""
        gen = [1] * len(self.output_ids) if not self.added_eos else [1] * (len(self.output_ids) - 1) + [0]
        return gen + [0] * len(self.obs_ids)


class SkyRLGymGenerator(GeneratorInterface):
    """SkyRLGymGenerator runs one skyrl_gym env per trajectory against an inference engine."""

    def __init__(
        self,
        generator_cfg: GeneratorConfig,
        skyrl_gym_cfg: SkyRLGymConfig,
        inference_engine_client: Any,
        tokenizer: Any,
        policy_model_name: Optional[str] = None,
    ) -> None:
        self.generator_cfg = generator_cfg
        self.skyrl_gym_cfg = skyrl_gym_cfg
        self.inference_engine_client = inference_engine_client
        self.tokenizer = tokenizer
        self.policy_model_name = policy_model_name
        self.max_turns = generator_cfg.max_turns
        self.batched = generator_cfg.batched
        self.use_conversation_multi_turn = generator_cfg.use_conversation_multi_turn
        self.custom_chat_template = get_custom_chat_template(generator_cfg.chat_template)
        self.generation_prompt_ids = get_generation_prompt_ids(tokenizer) if self.use_conversation_multi_turn else None
        if skyrl_gym_cfg.max_env_workers > 0:
            self.env_executor: Optional[ThreadPoolExecutor] = ThreadPoolExecutor(
                max_workers=skyrl_gym_cfg.max_env_workers, thread_name_prefix="skyrl-gym-env-"
            )
        else:
            self.env_executor = None
        self.base_conversation = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "I am a user."},
        ]
        ids = tokenizer.apply_chat_template(
            self.base_conversation, add_generation_prompt=False, tokenize=True, return_dict=False, **generator_cfg.chat_template_kwargs
        )
        if tokenizer.eos_token_id in ids:
            last = len(ids) - 1 - ids[::-1].index(tokenizer.eos_token_id)
            ids = ids[: last + 1]
        self.base_conversation_token_ids = ids

    async def _run_in_executor_if_available(self, func: Any, *args: Any) -> Any:
        if self.env_executor is not None:
            return await asyncio.get_running_loop().run_in_executor(self.env_executor, func, *args)
        return func(*args)

    def _setup_env_extras(self, _env_class: str, env_extras: Dict[str, Any], _sampling_params: Any, _trajectory_id: Any) -> Dict[str, Any]:
        """Hook: subclasses may inject env-specific extras before the env is built."""
        return env_extras

    def _post_process_agent_loop_output(self, agent_loop_output: Any, _env_extras: Dict[str, Any], _trajectory_id: Any) -> Any:
        """Hook: subclasses may transform the output after the rewards are placed."""
        return agent_loop_output

    async def agent_loop(
        self,
        prompt: ConversationType,
        env_class: str,
        env_extras: Dict[str, Any],
        max_tokens: int,
        max_input_length: int,
        sampling_params: Optional[Dict[str, Any]] = None,
        trajectory_id: Optional[TrajectoryID] = None,
        cache_salt: Optional[str] = None,
    ) -> Union[TrajectoryOutput, StepWiseOutput]:
        """agent_loop runs one trajectory (see the module docstring for the order of calls)."""
        session_id = trajectory_id.to_string() if trajectory_id is not None else uuid4().hex
        try:
            env_extras["max_turns"] = self.max_turns
            env_extras = self._setup_env_extras(env_class, env_extras, sampling_params, trajectory_id)
            env_config = getattr(self.skyrl_gym_cfg, env_class, dict())
            env = skyrl_gym.make(env_class, env_config=env_config, extras=env_extras)

            chat_history = copy.deepcopy(prompt)
            chat_history, _ = await self._run_in_executor_if_available(env.init, chat_history)
            initial_input_ids = self.tokenizer.apply_chat_template(
                chat_history, add_generation_prompt=True, tokenize=True, return_dict=False, **self.generator_cfg.chat_template_kwargs
            )
            initial_prompt_length = len(initial_input_ids)
            current_sampling_params = sampling_params if sampling_params is not None else asdict(self.generator_cfg.sampling_params)
            per_step_rewards: List[Tuple[float, Optional[int]]] = []
            is_step_wise = self.generator_cfg.step_wise_trajectories
            step_outputs: List[TrajectoryOutput] = []
            state = AgentLoopState(chat_history=chat_history, input_ids=initial_input_ids, loss_mask=[], response_end_idx=None, done=False)
            stop_reason = "stop"
            new_obs: ConversationType = []

            while not state.done:
                if len(state.input_ids) > max_input_length:
                    stop_reason = "length"
                    break
                if is_step_wise:
                    state.input_ids = self.tokenizer.apply_chat_template(
                        chat_history, add_generation_prompt=True, tokenize=True, return_dict=False, **self.generator_cfg.chat_template_kwargs
                    )
                    state.loss_mask = []
                engine_input = {
                    "prompt_token_ids": [state.input_ids],
                    "session_ids": [session_id],
                    "sampling_params": sampling_params,
                    "cache_salt": cache_salt,
                }
                engine_output = await self.inference_engine_client.generate(engine_input, model=self.policy_model_name)
                output = engine_output["responses"][0]
                output_ids = list(engine_output["response_ids"][0])
                stop_reason = engine_output["stop_reasons"][0]
                stop_strs = current_sampling_params.get("stop", None)
                added_eos = False
                if stop_strs is not None and self.generator_cfg.append_eos_token_after_stop_str_in_multi_turn and self.use_conversation_multi_turn:
                    if output.endswith(tuple(stop_strs)) and output_ids[-1] != self.tokenizer.eos_token_id:
                        output_ids.append(self.tokenizer.eos_token_id)
                        added_eos = True

                step_out = await self._run_in_executor_if_available(env.step, output)
                new_obs = step_out["observations"]
                step_reward: float = step_out["reward"]
                state.done = step_out["done"]
                if step_out.get("postprocessed_action", None) is not None:
                    output = step_out["postprocessed_action"]
                    output_ids = self.tokenizer.encode(output, add_special_tokens=False)
                obs_ids = self.get_obs_ids_from_obs(new_obs, state.done)
                turn = TurnOutput(output=output, output_ids=output_ids, new_obs=new_obs, obs_ids=obs_ids, reward=step_reward, added_eos=added_eos)

                if is_step_wise:
                    step_outputs.append(
                        TrajectoryOutput(
                            response_ids=turn.output_ids + turn.obs_ids,
                            reward=step_reward,
                            stop_reason=stop_reason,
                            loss_mask=turn.get_turn_loss_mask(),
                            prompt_ids=state.input_ids,
                            rollout_logprobs=None,
                            env_metrics=env.get_metrics() if state.done else {},
                        )
                    )
                if self.use_conversation_multi_turn:
                    state = self._update_multiturn(state, turn)
                else:
                    state = self._update_singleturn(state, turn)
                per_step_rewards.append((step_reward, state.response_end_idx))

            env_metrics = env.get_metrics()
            await self._run_in_executor_if_available(env.close)

            prompt_ids = state.input_ids[:initial_prompt_length]
            response_ids: List[int] = []
            loss_mask: List[int] = []
            if not is_step_wise:
                assert state.loss_mask is not None and state.response_end_idx is not None
                end = state.response_end_idx - initial_prompt_length + 1
                assert not any(state.loss_mask[end:]), "loss_mask at index after response end should be all 0"
                loss_mask = state.loss_mask[:end]
                response_ids = state.input_ids[initial_prompt_length : state.response_end_idx + 1]
                per_step_rewards = [(r, idx - initial_prompt_length) for r, idx in per_step_rewards]  # type: ignore[operator]
                assert len(loss_mask) == len(response_ids)

            appended_eos = False
            if not self.use_conversation_multi_turn:
                if stop_reason != "length" and response_ids and response_ids[-1] != self.tokenizer.eos_token_id:
                    response_ids.append(self.tokenizer.eos_token_id)
                    loss_mask.append(1)
                    appended_eos = True

            out: Union[TrajectoryOutput, StepWiseOutput]
            if is_step_wise:
                for so, (r, idx) in zip(step_outputs, per_step_rewards):
                    per_token = [0.0] * len(so.response_ids)
                    per_token[idx] = float(r)  # type: ignore[index]
                    so.reward = per_token
                out = StepWiseOutput(step_outputs=step_outputs)
            else:
                out = TrajectoryOutput(
                    response_ids=response_ids,
                    reward=self._build_per_token_rewards(per_step_rewards, response_ids, appended_eos),
                    stop_reason=stop_reason,
                    loss_mask=loss_mask,
                    prompt_ids=prompt_ids,
                    rollout_logprobs=None,
                    env_metrics=env_metrics,
                )
            return self._post_process_agent_loop_output(out, env_extras, trajectory_id)
        finally:
            await self.inference_engine_client.finish_session(session_id)

    def _build_per_token_rewards(self, per_step_rewards: List[Tuple[float, Optional[int]]], response_ids: List[int], appended_eos: bool) -> List[float]:
        """_build_per_token_rewards puts each turn's reward on its last token (on the appended EOS for the last turn)."""
        rewards = [0.0] * len(response_ids)
        for i, (r, idx) in enumerate(per_step_rewards):
            assert idx is not None
            if idx >= len(response_ids):
                break
            if appended_eos and i == len(per_step_rewards) - 1:
                rewards[-1] = r
            else:
                rewards[idx] += r
        return rewards

    def get_obs_ids_from_obs(self, new_obs: ConversationType, is_done: bool) -> List[int]:
        """get_obs_ids_from_obs templates the observation messages against the fixed base conversation."""
        if self.use_conversation_multi_turn:
            if new_obs:
                ids = self.tokenizer.apply_chat_template(
                    [*self.base_conversation, *new_obs],
                    add_generation_prompt=not is_done,
                    tokenize=True,
                    return_dict=False,
                    **self.generator_cfg.chat_template_kwargs,
                )
                return ids[len(self.base_conversation_token_ids) :]
            return [] if is_done else list(self.generation_prompt_ids or [])
        ids: List[int] = []
        for obs in new_obs:
            ids.extend(self.tokenizer.encode(obs["content"], add_special_tokens=False))
        return ids

    def _update_chat_history(self, chat_history: ConversationType, output: str, new_obs: ConversationType) -> ConversationType:
        if output.endswith(self.tokenizer.eos_token):
            output = output[: -len(self.tokenizer.eos_token)]
        chat_history += [{"role": "assistant", "content": output}]
        if new_obs:
            chat_history += new_obs
        return chat_history

    def _update_multiturn(self, state: AgentLoopState, turn: TurnOutput) -> AgentLoopState:
        state.chat_history = self._update_chat_history(state.chat_history, turn.output, turn.new_obs)
        if self.generator_cfg.step_wise_trajectories:
            state.response_end_idx = len(turn.output_ids) - 1
            state.loss_mask = None
        else:
            assert state.loss_mask is not None
            state.response_end_idx = len(state.input_ids) + len(turn.output_ids) - 1
            state.input_ids += turn.output_ids + turn.obs_ids
            state.loss_mask += turn.get_turn_loss_mask()
        return state

    def _update_singleturn(self, state: AgentLoopState, turn: TurnOutput) -> AgentLoopState:
        assert state.loss_mask is not None
        state.chat_history = self._update_chat_history(state.chat_history, turn.output, turn.new_obs)
        resp = list(turn.output_ids)
        if resp and resp[-1] == self.tokenizer.eos_token_id:
            resp = resp[:-1]
        state.response_end_idx = len(state.input_ids) + len(resp) - 1
        state.input_ids += resp + turn.obs_ids
        state.loss_mask += [1] * len(resp) + [0] * len(turn.obs_ids)
        return state

    def _zero_reward_if_not_stop(self, rewards: List[Any], stop_reasons: List[str]) -> List[Any]:
        for i, reason in enumerate(stop_reasons):
            if reason != "stop":
                rewards[i] = [0.0] * len(rewards[i]) if isinstance(rewards[i], list) else 0.0
        return rewards

    async def generate(self, input_batch: GeneratorInput, disable_tqdm: bool = False) -> GeneratorOutput:
        """generate runs one agent_loop per prompt concurrently and assembles the batch (non-batched mode)."""
        if self.batched:
            raise NotImplementedError("batched generation is not part of the stand-in")
        prompts = input_batch["prompts"]
        env_classes = input_batch["env_classes"]
        env_extras = input_batch["env_extras"] or [{} for _ in prompts]
        trajectory_ids = input_batch.get("trajectory_ids", None)
        sampling_params = input_batch.get("sampling_params", None)
        max_tokens = self.generator_cfg.sampling_params.max_generate_length
        max_input_length = self.generator_cfg.max_input_length
        assert max_input_length is not None
        all_outputs = await asyncio.gather(
            *(
                self.agent_loop(
                    prompts[i],
                    env_classes[i],
                    env_extras[i],
                    max_tokens,
                    max_input_length,
                    sampling_params=sampling_params,
                    trajectory_id=trajectory_ids[i] if trajectory_ids is not None else None,
                )
                for i in range(len(prompts))
            )
        )
        is_last_step: Optional[List[bool]] = None
        out_ids: Optional[List[TrajectoryID]] = None
        if self.generator_cfg.step_wise_trajectories:
            assert trajectory_ids is not None
            flat: List[TrajectoryOutput] = []
            is_last_step, out_ids, classes = [], [], []
            for i, o in enumerate(all_outputs):
                for j, so in enumerate(o.step_outputs):  # type: ignore[union-attr]
                    flat.append(so)
                    is_last_step.append(j == len(o.step_outputs) - 1)  # type: ignore[union-attr]
                    out_ids.append(trajectory_ids[i])
                    classes.append(env_classes[i])
            env_classes = classes
        else:
            flat = list(all_outputs)  # type: ignore[arg-type]
        responses = [o.response_ids for o in flat]
        rewards: List[Any] = [o.reward for o in flat]
        stop_reasons = [o.stop_reason for o in flat]
        loss_masks = [o.loss_mask for o in flat]
        env_metrics = [o.env_metrics for o in flat]
        rollout_metrics = get_rollout_metrics(responses, rewards, env_metrics, env_classes)
        if self.generator_cfg.zero_reward_on_non_stop:
            rewards = self._zero_reward_if_not_stop(rewards, stop_reasons)
        if self.generator_cfg.apply_overlong_filtering:
            loss_masks = apply_overlong_filtering(loss_masks, stop_reasons)
        return {
            "prompt_token_ids": [o.prompt_ids for o in flat],
            "response_ids": responses,
            "rewards": rewards,
            "loss_masks": loss_masks,
            "stop_reasons": stop_reasons,
            "rollout_metrics": rollout_metrics,
            "rollout_logprobs": None,
            "trajectory_ids": out_ids,
            "is_last_step": is_last_step,
            "env_metrics": env_metrics,
        }
