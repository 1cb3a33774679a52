"""Stand-in for AsyncGRPOTrainer's rollout worker: what happens to an environment_factory in the spawned process.

Mirrors trl/experimental/async_grpo/async_rollout_worker.py at
f2cd57710ae345ea6428ae95363267fcf38a3dc8 (line numbers are that file's;
v1.9.0 and v1.8.0 drive environments the same way). ``AsyncGRPOTrainer``
(async_grpo_trainer.py:812-830) builds an ``AsyncRolloutWorker`` with
``reward_funcs``, ``tools`` and ``environment_factory`` and starts it:

* ``AsyncRolloutWorker.start`` (972-1010) first checks that the loop kwargs
  pickle (a TypeError otherwise), then spawns a child process (``spawn``
  context, 942) whose ``_child_main`` (242-272) rebuilds ``_AsyncRolloutLoop``
  from the pickled kwargs: the factory really crosses a process boundary.
* ``_AsyncRolloutLoop.__init__`` (287-430) probes one instance per factory:
  ``reset`` required, ``get_reward`` marks the class as a reward source, the
  other public methods are tools; async tools are refused.
* ``_generate_loop`` (468-645) takes an instance from the pool (or the
  factory), calls ``reset(**row)`` and appends a returned string to the
  prompt, builds the tool dict from the instance's methods, runs
  ``_generate_one``; when the rollout completes it awaits ``get_reward()``
  (a coroutine or not) and only then returns the instance to the pool.
* ``_generate_one`` (710-759) re-renders the whole conversation with the
  tools each turn, generates (vLLM ``/v1/completions``; here the scripted
  policy), parses, and runs the tool calls synchronously
  (``_execute_tool_calls``, 761-779: ``tool(**arguments)``, an exception
  becomes ``{"error": ...}``) until a turn has no tool call or
  ``max_tool_calling_iterations`` is reached.
* ``_score_group`` (798-896) calls the reward functions with
  ``completions``, ``prompts``, ``completion_ids`` and the row columns: no
  ``environments``. The environment rewards form one column per class; None
  becomes NaN; a rollout whose every column is NaN gets advantage 0 and is
  left out of the group mean/std.

The reconciliation of re-tokenized turns into training rows is reduced to
the clean-append and fork cases (the toy chat template preserves prefixes).
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing as mp
import pickle
import queue
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ...chat_template_utils import parse_response

Messages = List[Dict[str, Any]]


@dataclass(frozen=True)
class TurnRecord:
    """TurnRecord is one generation call: the whole prompt, the generated ids and their logprobs."""

    prompt_ids: List[int]
    output_ids: List[int]
    output_log_probs: List[float] = field(default_factory=list)


@dataclass
class TrainingSequence:
    """TrainingSequence is one training row of a conversation."""

    input_ids: List[int]
    completion_mask: List[int]
    old_log_probs: List[float]
    rollout_id: str


def _chain_to_sequences(turns: List[TurnRecord], rollout_id: str) -> List[TrainingSequence]:
    """_chain_to_sequences joins a conversation's turns into rows: a turn whose prompt extends the row appends to it, else a new row starts."""
    rows: List[TrainingSequence] = []
    for turn in turns:
        row = rows[-1] if rows else None
        if row is None or turn.prompt_ids[: len(row.input_ids)] != row.input_ids:
            row = TrainingSequence([], [], [], rollout_id)
            rows.append(row)
        context = turn.prompt_ids[len(row.input_ids) :]
        row.input_ids += context + turn.output_ids
        row.completion_mask += [0] * len(context) + [1] * len(turn.output_ids)
        row.old_log_probs += [0.0] * len(context) + list(turn.output_log_probs or [0.0] * len(turn.output_ids))
    return [r for r in rows if any(r.completion_mask)]


@dataclass
class RolloutGroup:
    """RolloutGroup collects the num_generations rollouts of one row until they are scored."""

    prompts: List[Messages]
    reward_kwargs: Dict[str, List[Any]]
    completions: List[Messages]
    completions_ids: List[List[int]]
    completions_sequences: List[List[TrainingSequence]]
    tool_call_counts: List[int]
    tool_failure_counts: List[int]
    model_version: int
    group_id: int
    env_rewards: List[Optional[Tuple[type, Any]]]
    queued_at: float = 0.0


@dataclass
class RolloutSample:
    """RolloutSample is one scored training row, as the trainer reads it from the rollout queue."""

    prompt: Messages
    completion: Messages
    input_ids: List[int]
    completion_mask: List[int]
    old_log_probs: List[float]
    advantage: float
    model_version: int
    group_id: int
    metrics: Dict[str, float]


def _spawn_stop_watcher(rollout_loop: "_AsyncRolloutLoop", stop_event: Any) -> None:
    def _watch() -> None:
        stop_event.wait()
        try:
            rollout_loop._loop.call_soon_threadsafe(rollout_loop._stop_event.set)
        except RuntimeError:
            pass

    threading.Thread(target=_watch, daemon=True, name="grpo-mp-stop-watcher").start()


def _child_main(
    loop_cls: "type[_AsyncRolloutLoop]",
    loop_kwargs: Dict[str, Any],
    samples_queue: Any,
    model_version_value: Any,
    stop_event: Any,
    child_ready_event: Any,
    heartbeat_value: Any,
    failed_event: Any,
    exception_info_queue: Any,
) -> None:
    """_child_main runs in the spawned process: it rebuilds the loop from the pickled kwargs and runs it."""
    rollout_loop = loop_cls(
        **loop_kwargs,
        rollout_buffer=samples_queue,
        model_version_value=model_version_value,
        heartbeat_value=heartbeat_value,
        failed_event=failed_event,
        exception_info_queue=exception_info_queue,
    )
    child_ready_event.set()
    _spawn_stop_watcher(rollout_loop, stop_event)
    try:
        rollout_loop.run()
    except Exception:
        traceback.print_exc()
        raise


class _AsyncRolloutLoop:
    """_AsyncRolloutLoop is the generate-and-score loop that lives in the child process."""

    def __init__(
        self,
        *,
        model_name: str,
        dataset: Any,
        reward_funcs: List[Callable[..., Any]],
        processing_class: Any,
        rollout_buffer: Any,
        model_version_value: Any,
        heartbeat_value: Any,
        failed_event: Any,
        exception_info_queue: Any,
        tools: Optional[List[Callable[..., Any]]] = None,
        environment_factory: Any = None,
        num_generations: int = 8,
        max_inflight_tasks: int = 128,
        queue_maxsize: int = 0,
        vllm_server_url: str = "http://localhost:8000",
        max_tokens: int = 32,
        temperature: float = 1.0,
        request_timeout: int = 120,
        chat_template_kwargs: Optional[Dict[str, Any]] = None,
        max_tool_calling_iterations: Optional[int] = None,
        log_completions: bool = False,
        num_completions_to_print: Optional[int] = None,
        fork_threshold_tokens: int = 1024,
    ) -> None:
        self.model_name = model_name
        self.dataset = dataset
        self._dataset_iter = iter(dataset)
        self.reward_funcs = reward_funcs
        self.reward_func_names = [getattr(f, "__name__", type(f).__name__) for f in reward_funcs]
        self.tokenizer = processing_class
        self.rollout_buffer = rollout_buffer
        self._model_version_value = model_version_value
        self._heartbeat_value = heartbeat_value
        self._failed_event = failed_event
        self._exception_info_queue = exception_info_queue
        self.num_generations = num_generations
        self.max_inflight_tasks = max_inflight_tasks
        self.max_tokens = max_tokens
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.max_tool_calling_iterations = max_tool_calling_iterations

        tools = tools or []
        self._standalone_tools = tools
        self._env_reward_types: List[type] = []
        self._multi_environment = isinstance(environment_factory, dict)
        if environment_factory is None:
            self.environment_factories = None
        elif self._multi_environment:
            self.environment_factories = environment_factory
        else:
            self.environment_factories = {None: environment_factory}
        if self.environment_factories is not None:
            self._env_tools: Dict[Any, List[Callable[..., Any]]] = {}
            self._environment_pool: Dict[Any, List[Any]] = {}
            self.tools = list(tools)
            for name, factory in self.environment_factories.items():
                instance = factory()
                has_reset = False
                methods = []
                for member_name, member in inspect.getmembers(instance, predicate=inspect.ismethod):
                    if member_name == "reset":
                        has_reset = True
                    elif member_name == "get_reward":
                        if type(instance) not in self._env_reward_types:
                            self._env_reward_types.append(type(instance))
                    elif not member_name.startswith("_"):
                        methods.append(member)
                if not has_reset:
                    raise ValueError("Each environment instance returned by `environment_factory` must define a callable `reset`.")
                self._env_tools[name] = tools + methods
                self._environment_pool[name] = [instance]
                self.tools += [m for m in methods if m not in self.tools]
            for env_type in self._env_reward_types:
                self.reward_func_names.append(env_type.__name__)
        else:
            self.tools = tools
        if not self.reward_funcs and not self._env_reward_types:
            raise ValueError("No reward source provided. Pass `reward_funcs`, or an `environment_factory` whose environment defines a `get_reward` method.")
        for tool in self.tools:
            if inspect.iscoroutinefunction(tool):
                raise ValueError("Asynchronous tools are not supported yet.")
        self.chat_template = None
        self._groups_to_score: "asyncio.Queue[Optional[RolloutGroup]]" = asyncio.Queue(maxsize=16)
        self._loop = asyncio.new_event_loop()
        self._stop_event = asyncio.Event()

    @property
    def model_version(self) -> int:
        """model_version is the policy version shared with the trainer."""
        return int(self._model_version_value.value)

    def run(self) -> None:
        """run drives both loops until the stop event; a failure is reported to the parent."""
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._run_loops(stop_event=self._stop_event))
        except BaseException as e:
            try:
                self._exception_info_queue.put_nowait((type(e).__name__, str(e), traceback.format_exc()))
            except Exception:
                pass
            self._failed_event.set()
            raise
        finally:
            self._loop.close()

    async def _run_loops(self, stop_event: asyncio.Event) -> None:
        # Upstream opens an aiohttp session for vLLM here; the scripted policy needs none.
        await asyncio.gather(
            asyncio.create_task(self._generate_loop(stop_event=stop_event)),
            asyncio.create_task(self._score_loop(stop_event=stop_event)),
        )

    async def _generate_loop(self, stop_event: asyncio.Event) -> None:
        pending_groups: Dict[int, RolloutGroup] = {}
        pending_completed: Dict[int, int] = {}
        inflight: Dict["asyncio.Task[Any]", Tuple[int, int, Any, Any, Messages]] = {}
        free_slots = set(range(self.max_inflight_tasks))
        work_iter = self._repeat_iterator()
        try:
            while True:
                self._heartbeat_value.value = time.time()
                while free_slots and not stop_event.is_set():
                    group_id, row = next(work_iter)
                    slot = free_slots.pop()
                    name = row.get("environment") if self._multi_environment else None
                    tools = self._env_tools[name] if self.environment_factories is not None else self.tools
                    environment = None
                    observation = None
                    if self.environment_factories is not None:
                        pool = self._environment_pool[name]
                        environment = pool.pop() if pool else self.environment_factories[name]()
                        reset_kwargs = {k: v for k, v in row.items() if k != "environment"} if self._multi_environment else row
                        observation = environment.reset(**reset_kwargs)
                    prompt = row["prompt"] if "prompt" in row else [{"role": "user", "content": ""}]
                    if observation is not None:
                        last = prompt[-1]
                        prompt = prompt[:-1] + [{**last, "content": last["content"] + observation}]
                    methods = []
                    if environment is not None:
                        methods = [
                            member
                            for member_name, member in inspect.getmembers(environment, predicate=inspect.ismethod)
                            if member_name not in ("reset", "get_reward") and not member_name.startswith("_")
                        ]
                    tool_dict = {tool.__name__: tool for tool in self._standalone_tools + methods}
                    if group_id not in pending_groups:
                        reward_kwargs = {k: [row[k]] * self.num_generations for k in row if k not in {"prompt", "completion", "completion_ids"}}
                        pending_groups[group_id] = RolloutGroup([], reward_kwargs, [], [], [], [], [], self.model_version, group_id, [])
                        pending_completed[group_id] = 0
                    task = asyncio.create_task(self._generate_one(prompt, tool_dict=tool_dict, tools=tools, group_id=group_id))
                    inflight[task] = (group_id, slot, name, environment, prompt)

                if not inflight:
                    if stop_event.is_set():
                        return
                    await asyncio.sleep(0.01)
                    continue
                done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED, timeout=0.1)
                for task in done:
                    group_id, slot, name, environment, prompt = inflight.pop(task)
                    free_slots.add(slot)
                    if task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
                    completion, completion_ids, sequences, n_calls, n_failures = task.result()
                    group = pending_groups[group_id]
                    group.prompts.append(prompt)
                    group.completions.append(completion)
                    group.completions_ids.append(completion_ids)
                    group.completions_sequences.append(sequences)
                    group.tool_call_counts.append(n_calls)
                    group.tool_failure_counts.append(n_failures)
                    if self._env_reward_types:
                        env_type = type(environment)
                        if env_type in self._env_reward_types:
                            get_reward = environment.get_reward
                            reward = await get_reward() if inspect.iscoroutinefunction(get_reward) else get_reward()
                            group.env_rewards.append((env_type, reward))
                        else:
                            group.env_rewards.append(None)
                    if environment is not None:
                        self._environment_pool[name].append(environment)
                    pending_completed[group_id] += 1
                    if pending_completed[group_id] == self.num_generations:
                        group.queued_at = time.monotonic()
                        await self._groups_to_score.put(group)
                        del pending_groups[group_id]
                        del pending_completed[group_id]
        finally:
            for task in inflight:
                task.cancel()
            if inflight:
                await asyncio.gather(*inflight, return_exceptions=True)
            try:
                self._groups_to_score.put_nowait(None)
            except asyncio.QueueFull:
                pass

    async def _score_loop(self, stop_event: asyncio.Event) -> None:
        while not stop_event.is_set():
            self._heartbeat_value.value = time.time()
            try:
                group = await asyncio.wait_for(self._groups_to_score.get(), timeout=0.5)
            except asyncio.TimeoutError:
                continue
            if group is None:
                return
            for sample in await self._score_group(group):
                self.rollout_buffer.put(sample)

    def _repeat_iterator(self) -> Iterator[Tuple[int, Dict[str, Any]]]:
        group_id = 0
        while True:
            try:
                row = next(self._dataset_iter)
            except StopIteration:
                self._dataset_iter = iter(self.dataset)
                row = next(self._dataset_iter)
            for _ in range(self.num_generations):
                yield group_id, row
            group_id += 1

    async def _generate_one(self, prompt: Messages, tool_dict: Dict[str, Callable[..., Any]], tools: List[Callable[..., Any]], group_id: int = 0) -> Any:
        messages = list(prompt)
        rollout_id = uuid.uuid4().hex
        turns: List[TurnRecord] = []
        completion: Messages = []
        completion_ids: List[int] = []
        n_calls = 0
        n_failures = 0
        iteration_num = 0
        while True:
            prompt_ids = self.tokenizer.apply_chat_template(
                messages, return_dict=False, add_generation_prompt=True, tools=tools or None, chat_template=self.chat_template, **self.chat_template_kwargs
            )
            turn_ids, turn_logprobs = await self._generate_one_turn(prompt_ids)
            assistant_message = parse_response(self.tokenizer, turn_ids, prefix=prompt_ids)
            completion.append(assistant_message)
            completion_ids.extend(turn_ids)
            messages.append(assistant_message)
            turns.append(TurnRecord(prompt_ids, turn_ids, turn_logprobs))
            tool_calls = assistant_message.get("tool_calls")
            if tool_calls is None or (self.max_tool_calling_iterations is not None and iteration_num >= self.max_tool_calling_iterations):
                break
            tool_messages, calls, failures = self._execute_tool_calls(tool_calls, tool_dict)
            n_calls += calls
            n_failures += failures
            completion.extend(tool_messages)
            messages.extend(tool_messages)
            iteration_num += 1
        return completion, completion_ids, _chain_to_sequences(turns, rollout_id), n_calls, n_failures

    def _execute_tool_calls(self, tool_calls: List[Dict[str, Any]], tool_dict: Dict[str, Callable[..., Any]]) -> Tuple[List[Dict[str, str]], int, int]:
        tool_messages = []
        n_calls = 0
        n_failures = 0
        for tool_call in tool_calls:
            n_calls += 1
            function = tool_call["function"]
            name = function["name"]
            try:
                result = tool_dict[name](**function.get("arguments", {}))
            except Exception as error:
                n_failures += 1
                result = {"error": str(error)}
            tool_messages.append({"role": "tool", "name": name, "content": str(result)})
        return tool_messages, n_calls, n_failures

    async def _generate_one_turn(self, prompt_ids: List[int]) -> Tuple[List[int], List[float]]:
        # Upstream POSTs prompt_ids to vLLM's /v1/completions with max_tokens; the scripted policy answers here.
        from scripted_policy import respond

        ids = self.tokenizer.encode(respond(self.tokenizer.decode(prompt_ids)))[: self.max_tokens]
        return ids, [-0.5] * len(ids)

    async def _score_group(self, group: RolloutGroup) -> List[RolloutSample]:
        kwargs = dict(completions=group.completions, prompts=group.prompts, completion_ids=group.completions_ids, **group.reward_kwargs)
        all_rewards = list(
            await asyncio.gather(
                *[f(**kwargs) if inspect.iscoroutinefunction(f) else asyncio.to_thread(f, **kwargs) for f in self.reward_funcs]
            )
        )
        for env_type in self._env_reward_types:
            all_rewards.append([r[1] if (r is not None and r[0] is env_type) else None for r in group.env_rewards])
        table = [[r if r is not None else float("nan") for r in row] for row in all_rewards]
        arr = np.array(table, dtype=float)
        all_nan = np.all(np.isnan(arr), axis=0)
        rewards = np.nansum(arr, axis=0)
        rewards[all_nan] = np.nan
        scored = ~np.isnan(rewards)
        advantages = np.zeros_like(rewards)
        if scored.any():
            values = rewards[scored]
            advantages[scored] = (values - values.mean()) / (values.std() + 1e-8)
        samples = []
        for i, (prompt, completion, sequences) in enumerate(zip(group.prompts, group.completions, group.completions_sequences)):
            metrics = {"reward": float(rewards[i]), **{f"rewards/{n}": float(arr[j, i]) for j, n in enumerate(self.reward_func_names)}}
            metrics["tools/call_frequency"] = float(group.tool_call_counts[i])
            for seq in sequences:
                samples.append(
                    RolloutSample(prompt, completion, seq.input_ids, seq.completion_mask, seq.old_log_probs, float(advantages[i]), group.model_version, group.group_id, dict(metrics))
                )
        return samples


class AsyncRolloutWorker:
    """AsyncRolloutWorker is the parent-side controller: it spawns the child running ``_AsyncRolloutLoop``."""

    _loop_cls: "type[_AsyncRolloutLoop]" = _AsyncRolloutLoop

    def __init__(self, *, queue_maxsize: int = 0, child_ready_timeout: int = 300, **loop_kwargs: Any) -> None:
        ctx = mp.get_context("spawn")
        self._mp_ctx = ctx
        self.rollout_buffer = ctx.Queue(maxsize=queue_maxsize)
        self._model_version_value = ctx.Value("i", 0)
        self._stop_event_mp = ctx.Event()
        self._child_ready_event = ctx.Event()
        self._heartbeat_value = ctx.Value("d", 0.0)
        self._failed_event = ctx.Event()
        self._exception_info_queue = ctx.Queue(maxsize=1)
        loop_kwargs["queue_maxsize"] = queue_maxsize
        self._loop_kwargs = loop_kwargs
        self._child_ready_timeout = child_ready_timeout
        self._process: Any = None

    def start(self) -> None:
        """start checks that the kwargs pickle, spawns the child and waits until its loop is built."""
        try:
            pickle.dumps(self._loop_kwargs)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise TypeError(
                "AsyncRolloutWorker forwards reward_funcs / tools / environment_factory to a spawned child process, so they must be picklable."
            ) from e
        self._process = self._mp_ctx.Process(
            target=_child_main,
            args=(
                self._loop_cls,
                self._loop_kwargs,
                self.rollout_buffer,
                self._model_version_value,
                self._stop_event_mp,
                self._child_ready_event,
                self._heartbeat_value,
                self._failed_event,
                self._exception_info_queue,
            ),
            name="grpo-rollout-worker-child",
            daemon=True,
        )
        self._heartbeat_value.value = time.time()
        self._process.start()
        deadline = time.monotonic() + self._child_ready_timeout
        while not self._child_ready_event.wait(timeout=1.0):
            if not self._process.is_alive():
                code = self._process.exitcode
                self._process = None
                raise RuntimeError(f"AsyncRolloutWorker child exited during init (exitcode={code}).")
            if time.monotonic() >= deadline:
                raise RuntimeError("AsyncRolloutWorker child did not signal ready in time.")

    def check_health(self, stale_after_s: float) -> None:
        """check_health raises when the child has failed (with its traceback) or its heartbeat is older than stale_after_s."""
        if self._failed_event.is_set():
            try:
                name, msg, tb = self._exception_info_queue.get_nowait()
            except queue.Empty:
                raise RuntimeError("Rollout worker child has failed") from None
            raise RuntimeError(f"Rollout worker child has failed: {name}: {msg}\n{tb}")
        age = time.time() - self._heartbeat_value.value
        if age > stale_after_s:
            raise RuntimeError(f"Rollout worker heartbeat stale: {age:.0f}s")

    def stop(self) -> None:
        """stop signals the child, waits for it (15 s), then terminates it."""
        if self._process is None:
            return
        self._stop_event_mp.set()
        self._process.join(timeout=15)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)
        self._process = None
