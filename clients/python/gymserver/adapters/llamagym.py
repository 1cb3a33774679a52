"""LlamaGym's ``Agent`` on gymserver, with its PPO step rewritten in plain PyTorch.

LlamaGym (github.com/KhoomeiK/LlamaGym) is one abstract class, ``Agent``:
the user implements ``get_system_prompt``, ``format_observation`` and
``extract_action``, and a Gym loop calls ``act`` → ``env.step`` →
``assign_reward`` per turn and ``terminate_episode`` per episode, which
trains once a batch of turns is full. :class:`Agent` here keeps that
constructor and those methods (same names, arguments, return shapes and
semantics) and runs on :class:`gymserver.gym.RemoteEnv`::

    class CalcAgent(Agent):
        def get_system_prompt(self): return "You are a careful engineer."
        def format_observation(self, observation): return observation
        def extract_action(self, response): return response  # the server parses the tool calls

    agent = CalcAgent(model, tokenizer, "cuda:0", ppo_config_dict={"batch_size": 8, "mini_batch_size": 8})
    env = RemoteEnv("calculator_api", url="ws://gym:8080", parser="hermes")
    for episode in range(1000):
        stats = run_episode(env, agent)  # trains when the batch is full

Checked against LlamaGym 92d7827bc11a53441dcd6bcb4d2ddc6daeb542e0 (version
0.1.1, 2024-03-10: ``llamagym/agent.py``, ``examples/blackjack.py``,
``examples/text-world.py``, README) and, for the PPO step, TRL v0.7.11
(0f13e51efab6bea6b51200ea66396a0716d63182: ``trl/trainer/ppo_trainer.py``,
``ppo_config.py``, ``core.py``, ``models/modeling_value_head.py``), the
release LlamaGym's ``poetry.lock`` pins. Upstream LlamaGym cannot run with a
current TRL: TRL v0.12.0 replaced ``PPOTrainer.step(queries, responses,
scores)`` by a dataset-driven trainer and TRL 1.x (v1.9.0, main f2cd5771)
only has ``trl.experimental.ppo.PPOTrainer``, so ``llamagym.Agent.__init__``
fails there. That is why the PPO step lives here.

What is the same as upstream:

* ``Agent(model, tokenizer, device, generate_config_dict=None,
  ppo_config_dict=None)`` with upstream's defaults; attributes ``model``,
  ``tokenizer``, ``device``, ``generate_config_dict``, ``model_ref``,
  ``ppo_config``, ``current_batch``, ``current_episode_messages``,
  ``current_episode_rewards``.
* ``act`` returns None when ``extract_action`` raises, and then the reply is
  not recorded (an ``extract_action`` that returns None records it).
* ``format_episode_for_ppo`` returns one (query, response) pair of token
  tensors per assistant turn and one float16 reward tensor per pair. Sparse
  rewards (all but the last 0) are spread as upstream does it:
  ``rewards[-1] / (len(messages) / 2)`` for every turn.
* ``terminate_episode(train=True)`` adds the episode's turns to the batch
  and returns ``train_batch``'s statistics once ``ppo_config.batch_size``
  turns are collected (else ``{}``); ``train_batch`` trains on the first
  ``batch_size`` turns and keeps the rest for the next batch.
* ``terminate_episode(train=False)`` forgets the episode: this is how
  masked episodes (infrastructure failures) are dropped (upstream's own
  switch, ``llamagym/agent.py`` ``terminate_episode``). :func:`run_episode`
  does it for every episode whose step or evaluation has ``mask`` set.

What differs, and the limits:

* The PPO step (:meth:`Agent.ppo_step`) is plain PyTorch following TRL
  0.7.11's ``PPOTrainer.step``: a linear value head on the model's last
  hidden state, per-token rewards ``-kl_coef * KL`` plus the turn's score on
  its last token, GAE, whitened advantages, the clipped policy loss, the
  clipped value loss, adaptive (or fixed) KL control, minibatches and
  gradient accumulation, Adam. No accelerate, DeepSpeed, PEFT/LoRA handling,
  8-bit models, score scaling or trackers; ``kl_penalty="full"`` is not
  supported. Forward passes run in eval mode (no dropout), as TRL's
  ``batched_forward_pass`` leaves the model.
* ``model`` is a plain Hugging Face-style causal LM, not TRL's
  ``AutoModelForCausalLMWithValueHead``: ``model(input_ids=...,
  attention_mask=..., output_hidden_states=True)`` returning ``.logits`` and
  ``.hidden_states``. The tokenizer needs ``apply_chat_template(messages,
  tokenize=False, add_generation_prompt=...)``, ``__call__(text,
  add_special_tokens=False)["input_ids"]``, ``decode`` and
  ``eos_token_id``.
* Generation (:meth:`Agent.generate`) is a plain PyTorch sampling loop
  without a KV cache (temperature, top-k, top-p, greedy, max_new_tokens);
  override it to use ``model.generate`` or an inference server.
* Prompts are tokenized without adding special tokens (the chat template
  already holds them; upstream adds a second BOS on Llama tokenizers), and
  (query, response) pairs are split by rendering the chat template with and
  without the generation prompt instead of splitting on Llama-2's
  ``[/INST]``. For Llama-2-style templates the pairs are the same.
* When an extraction failed, the next observation is appended to the
  dangling user message instead of adding a second user message in a row,
  which Llama-2-style chat templates reject.
* Tool schemas reach the model through the system message
  (:meth:`Agent.format_tools`, Hermes ``<tool_call>`` format by default);
  call :meth:`Agent.set_tools` with ``info["tools"]`` after ``env.reset``
  (:func:`run_episode` does).

``HAVE_LLAMAGYM`` tells whether ``llamagym`` was importable; then
:class:`Agent` subclasses ``llamagym.Agent`` (it overrides every method and
does not call its constructor, which needs the old TRL). ``HAVE_TORCH``
tells whether PyTorch was importable; without it the Agent only rolls out
(override :meth:`Agent.llm`, end episodes with ``train=False``), and the
methods that need tensors raise a RuntimeError saying so.
"""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..gym import RemoteEnv

try:  # the trainer: subclass its Agent when it is installed
    from llamagym import Agent as _UpstreamAgent

    #: HAVE_LLAMAGYM reports whether llamagym was importable (Agent then subclasses llamagym.Agent).
    HAVE_LLAMAGYM = True
except ImportError:
    HAVE_LLAMAGYM = False

    class _UpstreamAgent(ABC):  # type: ignore[no-redef]
        """_UpstreamAgent is the private base used when llamagym is not installed."""


try:
    import torch

    #: HAVE_TORCH reports whether PyTorch was importable (needed for generation and training).
    HAVE_TORCH = True
except ImportError:
    torch = None  # type: ignore[assignment]
    HAVE_TORCH = False

__all__ = ["Agent", "PPOStepConfig", "run_episode", "HAVE_LLAMAGYM", "HAVE_TORCH"]


def _require_torch(what: str) -> Any:
    """_require_torch returns the torch module, or raises a RuntimeError naming what needs it."""
    if torch is None:
        raise RuntimeError(f"llamagym adapter: {what} needs PyTorch, which is not installed")
    return torch


#: UPSTREAM_GENERATE_CONFIG is LlamaGym's default generate_config_dict.
UPSTREAM_GENERATE_CONFIG: Dict[str, Any] = {"max_new_tokens": 32, "do_sample": True, "top_p": 0.6, "top_k": 0, "temperature": 0.9}
#: UPSTREAM_PPO_CONFIG is LlamaGym's default ppo_config_dict.
UPSTREAM_PPO_CONFIG: Dict[str, Any] = {"batch_size": 16, "mini_batch_size": 16}
#: GENERATE_DEFAULTS are the sampling settings used for keys generate_config_dict leaves out
#: (Hugging Face's GenerationConfig defaults).
GENERATE_DEFAULTS: Dict[str, Any] = {"max_new_tokens": 20, "do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0}


@dataclass
class PPOStepConfig:
    """PPOStepConfig holds the settings of :meth:`Agent.ppo_step`.

    They are the keys of TRL 0.7.11's ``PPOConfig`` the step uses, with
    TRL's defaults and meanings: ``batch_size`` turns per step, split into
    minibatches of ``mini_batch_size`` (one optimizer step per
    ``mini_batch_size * gradient_accumulation_steps`` turns), ``ppo_epochs``
    passes; ``cliprange`` / ``cliprange_value`` clip the policy ratio and
    the value; ``vf_coef`` weighs the value loss; ``gamma`` / ``lam`` are
    GAE's; the KL penalty starts at ``init_kl_coef`` and, with
    ``adap_kl_ctrl``, adapts towards ``target`` over ``horizon``.
    """

    learning_rate: float = 1.41e-5
    batch_size: int = 128
    mini_batch_size: int = 128
    gradient_accumulation_steps: int = 1
    ppo_epochs: int = 4
    gamma: float = 1.0
    lam: float = 0.95
    cliprange: float = 0.2
    cliprange_value: float = 0.2
    vf_coef: float = 0.1
    init_kl_coef: float = 0.2
    adap_kl_ctrl: bool = True
    target: float = 6.0
    horizon: float = 10000.0
    kl_penalty: str = "kl"
    whiten_rewards: bool = False
    max_grad_norm: Optional[float] = None
    ratio_threshold: float = 10.0
    early_stopping: bool = False
    target_kl: float = 1.0
    seed: int = 0

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "PPOStepConfig":
        """from_dict builds a config from a ppo_config_dict, rejecting unknown keys and bad values all at once."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in values if k not in known)
        if unknown:
            raise ValueError(f"ppo_config_dict: unsupported keys {unknown}; supported: {sorted(known)}")
        cfg = cls(**dict(values))
        cfg.validate()
        return cfg

    @property
    def backward_batch_size(self) -> int:
        """backward_batch_size is the number of turns per optimizer step."""
        return self.mini_batch_size * self.gradient_accumulation_steps

    def validate(self) -> None:
        """validate raises one ValueError listing every bad setting."""
        problems = []
        for name in ("batch_size", "mini_batch_size", "gradient_accumulation_steps", "ppo_epochs"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                problems.append(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not problems and self.batch_size % self.backward_batch_size:
            problems.append(
                f"batch_size ({self.batch_size}) must be a multiple of mini_batch_size * gradient_accumulation_steps ({self.backward_batch_size})"
            )
        if self.kl_penalty not in ("kl", "abs", "mse"):
            problems.append(f"kl_penalty must be 'kl', 'abs' or 'mse', got {self.kl_penalty!r}")
        if self.learning_rate <= 0:
            problems.append(f"learning_rate must be positive, got {self.learning_rate}")
        if self.adap_kl_ctrl and (self.target <= 0 or self.horizon <= 0):
            problems.append("target and horizon must be positive with adap_kl_ctrl")
        if problems:
            raise ValueError("ppo_config_dict: " + "; ".join(problems))


def _generate_settings(config: Mapping[str, Any]) -> Dict[str, Any]:
    """_generate_settings turns a generate_config_dict into sampling settings.

    As upstream, a key's prefix up to the last ``/`` is dropped
    (``"generate/top_p"`` is ``top_p``). Unknown keys are an error.
    """
    settings = dict(GENERATE_DEFAULTS)
    unknown = []
    for key, value in config.items():
        name = key.split("/")[-1]
        if name not in settings:
            unknown.append(key)
        settings[name] = value
    if unknown:
        raise ValueError(f"generate_config_dict: unsupported keys {sorted(unknown)}; supported: {sorted(GENERATE_DEFAULTS)}")
    if not isinstance(settings["max_new_tokens"], int) or settings["max_new_tokens"] < 1:
        raise ValueError(f"generate_config_dict: max_new_tokens must be a positive integer, got {settings['max_new_tokens']!r}")
    if settings["do_sample"] and settings["temperature"] <= 0:
        raise ValueError(f"generate_config_dict: temperature must be positive when sampling, got {settings['temperature']!r}")
    return settings


class Agent(_UpstreamAgent):
    """Agent is LlamaGym's Agent with a plain PyTorch PPO step: subclass it and implement the three hooks.

    Args:
        model: a Hugging Face-style causal LM (see the module docstring);
            the policy. A value head is added next to it and a frozen copy
            is the KL reference (``model_ref``). None makes a rollout-only
            agent (override :meth:`llm`; training raises RuntimeError).
        tokenizer: its tokenizer, with a chat template.
        device: where inputs, the value head and sampling go (the model is
            not moved, as upstream).
        generate_config_dict: sampling settings (``max_new_tokens``,
            ``do_sample``, ``temperature``, ``top_k``, ``top_p``; a
            ``"generate/"`` prefix is allowed); upstream's defaults when None.
        ppo_config_dict: :class:`PPOStepConfig` keys; upstream's
            ``{"batch_size": 16, "mini_batch_size": 16}`` when None.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        device: Any,
        generate_config_dict: Optional[Dict[str, Any]] = None,
        ppo_config_dict: Optional[Dict[str, Any]] = None,
    ) -> None:
        # llamagym.Agent.__init__ is not called: it builds TRL's old PPOTrainer.
        if generate_config_dict is None:
            generate_config_dict = dict(UPSTREAM_GENERATE_CONFIG)
        if ppo_config_dict is None:
            ppo_config_dict = dict(UPSTREAM_PPO_CONFIG)
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.generate_config_dict = generate_config_dict
        self.generation = _generate_settings(generate_config_dict)
        self.ppo_config = PPOStepConfig.from_dict(ppo_config_dict)
        self.tools: List[Dict[str, Any]] = []
        self.model_ref: Any = None
        self.value_head: Any = None
        self.optimizer: Any = None
        self.kl_coef = float(self.ppo_config.init_kl_coef)
        self._rng: Any = None
        if torch is not None and model is not None:
            self._setup_policy()

        self.current_batch: Dict[str, List[Any]] = {"queries": [], "responses": [], "rewards": []}
        self.current_episode_messages: List[Dict[str, Any]] = [self._system_message()]
        self.current_episode_rewards: List[float] = []

    def _setup_policy(self) -> None:
        """_setup_policy adds the value head, the frozen reference copy and the optimizer."""
        probe = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        with torch.no_grad():
            out = self.model(input_ids=probe, attention_mask=torch.ones_like(probe), output_hidden_states=True)
        hidden = getattr(out, "hidden_states", None)
        if not hidden:
            raise TypeError("llamagym adapter: model(..., output_hidden_states=True) returned no hidden_states; a causal LM is needed")
        self.value_head = torch.nn.Linear(hidden[-1].shape[-1], 1).to(self.device)
        # The reference is a frozen copy of the policy as it is now (TRL's create_reference_model).
        self.model_ref = copy.deepcopy(self.model)
        for p in self.model_ref.parameters():
            p.requires_grad_(False)
        self.model_ref.eval()
        params = [p for p in self.model.parameters() if p.requires_grad] + list(self.value_head.parameters())
        self.optimizer = torch.optim.Adam(params, lr=self.ppo_config.learning_rate)
        self._rng = torch.Generator().manual_seed(int(self.ppo_config.seed))

    # --- the hooks a subclass implements --------------------------------

    @abstractmethod
    def get_system_prompt(self) -> str:
        """get_system_prompt returns the system message of every episode (tools are appended to it)."""

    @abstractmethod
    def format_observation(self, observation: Any) -> str:
        """format_observation turns an env observation into the user message text."""

    @abstractmethod
    def extract_action(self, response: str) -> Any:
        """extract_action turns the model's reply into an env action; raising makes act return None.

        With RemoteEnv, return the reply itself: the server parses the tool
        calls (the env's ``parser``).
        """

    # --- tools ------------------------------------------------------------

    def format_tools(self, tools: Sequence[Mapping[str, Any]]) -> str:
        """format_tools renders tool schemas for the system message, in the Hermes ``<tool_call>`` format.

        Override it to match another parser (RemoteEnv's ``parser``).
        """
        schemas = "\n".join(json.dumps(t, sort_keys=True) for t in tools)
        return (
            "You can call these tools; their JSON schemas are listed between <tools> and </tools>.\n"
            f"<tools>\n{schemas}\n</tools>\n"
            "To call a tool, write one block per call:\n"
            '<tool_call>\n{"name": "<tool name>", "arguments": {<the arguments as a JSON object>}}\n</tool_call>'
        )

    def set_tools(self, tools: Sequence[Mapping[str, Any]]) -> None:
        """set_tools sets the tool schemas of the coming episode (``info["tools"]`` of ``env.reset``).

        Call it after ``env.reset`` and before the first :meth:`act`: it
        rewrites the episode's system message. Raises RuntimeError once the
        episode has started.
        """
        if len(self.current_episode_messages) > 1:
            raise RuntimeError("set_tools: the episode has started; call it right after env.reset")
        self.tools = [dict(t) for t in tools]
        self.current_episode_messages = [self._system_message()]

    def _system_message(self) -> Dict[str, Any]:
        """_system_message is the system prompt followed by the tools, if any."""
        content = self.get_system_prompt()
        if self.tools:
            content = f"{content}\n\n{self.format_tools(self.tools)}"
        return {"role": "system", "content": content}

    # --- the model ---------------------------------------------------------

    def _encode(self, text: str) -> Any:
        """_encode tokenizes text without adding special tokens (the chat template holds them)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return torch.tensor(list(ids), dtype=torch.long)

    def llm(self, messages: List[Dict[str, str]]) -> str:
        """llm renders the chat with the generation prompt, samples a reply with :meth:`generate` and decodes it."""
        _require_torch("Agent.llm")
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        response_ids, _ = self.generate(self._encode(prompt))
        text = self.tokenizer.decode(response_ids.tolist(), skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return text.strip()

    def generate(self, query_ids: Any) -> Tuple[Any, Any]:
        """generate samples a reply to query_ids and returns ``(response_ids, logprobs)``.

        Both are 1-D CPU tensors; ``logprobs[i]`` is the policy's log-prob
        of ``response_ids[i]`` (before temperature and top-k/top-p). It
        stops after the tokenizer's ``eos_token_id`` (kept) or
        ``max_new_tokens``. Override it to sample elsewhere.
        """
        _require_torch("Agent.generate")
        cfg = self.generation
        eos = getattr(self.tokenizer, "eos_token_id", None)
        ids = query_ids.to(self.device).view(1, -1)
        out: List[int] = []
        logps = []
        with torch.no_grad():
            for _ in range(cfg["max_new_tokens"]):
                logits = self.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, -1].float()
                token = self._pick(logits)
                out.append(token)
                logps.append(torch.log_softmax(logits, dim=-1)[token].cpu())
                if eos is not None and token == eos:
                    break
                ids = torch.cat([ids, torch.tensor([[token]], dtype=ids.dtype, device=ids.device)], dim=1)
        return torch.tensor(out, dtype=torch.long), torch.stack(logps)

    def _pick(self, logits: Any) -> int:
        """_pick chooses the next token: greedy, or sampled after temperature, top-k and top-p (in that order)."""
        cfg = self.generation
        if not cfg["do_sample"]:
            return int(torch.argmax(logits))
        scores = logits.cpu() / float(cfg["temperature"])
        top_k = int(cfg["top_k"] or 0)
        if 0 < top_k < scores.numel():
            kth = torch.topk(scores, top_k).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        top_p = float(cfg["top_p"])
        if top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=True)
            probs = torch.softmax(sorted_scores, dim=-1)
            # Drop a token when the ones before it already reach top_p (the first always stays).
            drop = (torch.cumsum(probs, dim=-1) - probs) > top_p
            scores = scores.index_fill(0, order[drop], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self._rng))

    def response_logprobs(self, query_ids: Any, response_ids: Any) -> Any:
        """response_logprobs returns the current policy's log-prob of each response token (1-D CPU tensor, no grad)."""
        _require_torch("Agent.response_logprobs")
        ids, mask, resp = self._pad([query_ids], [response_ids])
        with torch.no_grad():
            logprobs, _ = self._forward(self.model, ids, mask, values=False)
        return logprobs[0][resp[0].bool()].cpu()

    # --- the episode ---------------------------------------------------------

    def act(self, observation: Any) -> Any:
        """act adds the observation as a user message, asks :meth:`llm` and returns the extracted action.

        When ``extract_action`` raises, act returns None and the reply is
        not recorded (as upstream); the next observation is then appended
        to that user message, so roles keep alternating.
        """
        message = self.format_observation(observation)
        last = self.current_episode_messages[-1]
        if last.get("role") == "user":
            self.current_episode_messages[-1] = {"role": "user", "content": f"{last['content']}\n\n{message}"}
        else:
            self.current_episode_messages += [{"role": "user", "content": message}]

        response = self.llm(self.current_episode_messages)
        try:
            action = self.extract_action(response)
        except Exception:
            return None

        self.current_episode_messages += [{"role": "assistant", "content": response}]
        return action

    def assign_reward(self, reward: float) -> None:
        """assign_reward records the reward of the last step."""
        self.current_episode_rewards.append(reward)

    def format_episode_for_ppo(self, messages: List[Dict[str, Any]], rewards: List[float]) -> Tuple[List[Any], List[Any], List[Any]]:
        """format_episode_for_ppo returns ``(queries, responses, rewards)``, one entry per assistant turn.

        A query is the token ids of the chat before the turn with the
        generation prompt; its response is the rest of the chat rendered up
        to and including the turn (the reply and the template's end-of-turn
        text). Rewards are float16 scalar tensors: with sparse rewards (all
        but the last 0) every turn gets ``rewards[-1] / (len(messages) / 2)``,
        upstream's formula; otherwise the rewards are used as given, one per
        turn (a ValueError when the counts differ).
        """
        _require_torch("Agent.format_episode_for_ppo")
        queries, responses = [], []
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            query = self.tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
            full = self.tokenizer.apply_chat_template(messages[: i + 1], tokenize=False, add_generation_prompt=False)
            response = full[len(query) :] if full.startswith(query) else str(message.get("content") or "")
            queries.append(self._encode(query))
            responses.append(self._encode(response))
        if not queries:
            return [], [], []
        if not rewards:
            raise ValueError("format_episode_for_ppo: the episode has turns but no reward was assigned")

        if all(reward == 0 for reward in rewards[:-1]):
            # Sparse rewards: every turn gets an equal share (upstream's divisor).
            per_turn_reward = float(rewards[-1]) / (len(messages) / 2)
            scores = [torch.tensor(per_turn_reward, dtype=torch.float16)] * len(queries)
        else:
            if len(rewards) != len(queries):
                raise ValueError(f"format_episode_for_ppo: {len(rewards)} dense rewards for {len(queries)} turns")
            scores = [torch.tensor(float(reward), dtype=torch.float16) for reward in rewards]
        return queries, responses, scores

    def terminate_episode(self, train: bool = True) -> Dict[str, Any]:
        """terminate_episode ends the episode and returns the training statistics, or ``{}``.

        With ``train`` the episode's turns join the batch, and once it holds
        ``ppo_config.batch_size`` turns :meth:`train_batch` runs. With
        ``train=False`` the episode is forgotten (how masked episodes are
        dropped).
        """
        messages, rewards = self.current_episode_messages, self.current_episode_rewards
        self.current_episode_messages = [self._system_message()]
        self.current_episode_rewards = []
        if not train:
            return {}

        queries, responses, scores = self.format_episode_for_ppo(messages, rewards)
        self.current_batch["queries"].extend(queries)
        self.current_batch["responses"].extend(responses)
        self.current_batch["rewards"].extend(scores)
        if len(self.current_batch["queries"]) >= self.ppo_config.batch_size:
            return self.train_batch(self.current_batch["queries"], self.current_batch["responses"], self.current_batch["rewards"])
        return {}

    def train_batch(self, batch_queries: List[Any], batch_responses: List[Any], batch_rewards: List[Any]) -> Dict[str, Any]:
        """train_batch runs :meth:`ppo_step` on the first ``batch_size`` turns and keeps the rest as the next batch."""
        _require_torch("Agent.train_batch (the PPO step)")
        size = self.ppo_config.batch_size
        if len(batch_queries) > size:
            queries, responses, rewards = batch_queries[:size], batch_responses[:size], batch_rewards[:size]
            self.current_batch = {"queries": batch_queries[size:], "responses": batch_responses[size:], "rewards": batch_rewards[size:]}
        else:
            queries, responses, rewards = batch_queries, batch_responses, batch_rewards
            self.current_batch = {"queries": [], "responses": [], "rewards": []}

        stats = self.ppo_step(queries, responses, rewards)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return stats

    # --- the PPO step --------------------------------------------------------

    def _pad(self, queries: Sequence[Any], responses: Sequence[Any]) -> Tuple[Any, Any, Any]:
        """_pad right-pads query+response rows; returns input_ids, attention_mask and the response mask.

        The response mask has one column less than the ids: column t marks
        whether token t+1 is a response token, aligned with next-token
        log-probs.
        """
        rows = [torch.cat([q.long().cpu(), r.long().cpu()]) for q, r in zip(queries, responses)]
        width = max(len(r) for r in rows)
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(self.tokenizer, "eos_token_id", None) or 0
        ids = torch.full((len(rows), width), int(pad), dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        resp = torch.zeros((len(rows), width - 1), dtype=torch.float32)
        for i, (row, q, r) in enumerate(zip(rows, queries, responses)):
            ids[i, : len(row)] = row
            attention[i, : len(row)] = 1
            resp[i, len(q) - 1 : len(q) - 1 + len(r)] = 1.0
        return ids.to(self.device), attention.to(self.device), resp.to(self.device)

    def _forward(self, model: Any, ids: Any, attention: Any, values: bool) -> Tuple[Any, Any]:
        """_forward returns next-token log-probs (and the value head's values) for every position but the last."""
        out = model(input_ids=ids, attention_mask=attention, output_hidden_states=values)
        logits = out.logits[:, :-1].float()
        logprobs = torch.gather(torch.log_softmax(logits, dim=-1), 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        if not values:
            return logprobs, None
        hidden = out.hidden_states[-1][:, :-1].to(self.value_head.weight.dtype)
        return logprobs, self.value_head(hidden).squeeze(-1)

    def _kl(self, logprobs: Any, ref_logprobs: Any) -> Any:
        """_kl is the per-token KL penalty of ``kl_penalty``."""
        diff = logprobs - ref_logprobs
        if self.ppo_config.kl_penalty == "abs":
            return diff.abs()
        if self.ppo_config.kl_penalty == "mse":
            return 0.5 * diff.square()
        return diff

    def ppo_step(self, queries: List[Any], responses: List[Any], scores: List[Any]) -> Dict[str, float]:
        """ppo_step runs one PPO optimisation on (query, response, score) turns and returns statistics.

        It is TRL 0.7.11's ``PPOTrainer.step`` in plain PyTorch: old
        log-probs and values from the policy and reference log-probs from
        ``model_ref`` (no grad); per-token rewards ``-kl_coef * KL`` with the
        score added on the response's last token; GAE (``gamma``, ``lam``);
        whitened advantages; ``ppo_epochs`` passes over shuffled minibatches
        minimising the clipped policy loss plus ``vf_coef`` times the
        clipped value loss; then the KL controller update. The statistics
        use TRL's names (``objective/kl``, ``ppo/loss/total``, ...).
        """
        _require_torch("Agent.ppo_step")
        if self.value_head is None:
            raise RuntimeError("llamagym adapter: the PPO step needs a model; this Agent was built with model=None")
        cfg = self.ppo_config
        n = len(queries)
        if n == 0 or len(responses) != n or len(scores) != n:
            raise ValueError(f"ppo_step: need as many queries, responses and scores, at least one; got {n}, {len(responses)}, {len(scores)}")
        for i, (q, r) in enumerate(zip(queries, responses)):
            if len(q) == 0 or len(r) == 0:
                raise ValueError(f"ppo_step: turn {i} has an empty query or response")
        score = torch.tensor([float(s) for s in scores], dtype=torch.float32, device=self.device)
        ids, attention, mask = self._pad(queries, responses)
        self.model.eval()
        kl_coef = self.kl_coef

        with torch.no_grad():
            old_logprobs, old_values, ref_logprobs = [], [], []
            for rows in self._chunks(n):
                lp, v = self._forward(self.model, ids[rows], attention[rows], values=True)
                ref_lp, _ = self._forward(self.model_ref, ids[rows], attention[rows], values=False)
                old_logprobs.append(lp)
                old_values.append(v)
                ref_logprobs.append(ref_lp)
            old_logprobs, old_values, ref_logprobs = torch.cat(old_logprobs), torch.cat(old_values), torch.cat(ref_logprobs)

            kl = self._kl(old_logprobs, ref_logprobs)
            non_score = -kl_coef * kl
            rewards = non_score.clone()
            last = torch.tensor([len(q) - 2 + len(r) for q, r in zip(queries, responses)], device=self.device)
            rewards[torch.arange(n, device=self.device), last] += score
            values, advantages, returns = self._advantages(old_values, rewards, mask)

        all_stats: List[Dict[str, float]] = []
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(n, generator=self._rng).tolist()
            for start in range(0, n, cfg.backward_batch_size):
                backward = order[start : start + cfg.backward_batch_size]
                self.optimizer.zero_grad()
                for mstart in range(0, len(backward), cfg.mini_batch_size):
                    rows = torch.tensor(backward[mstart : mstart + cfg.mini_batch_size], device=self.device)
                    loss, stats = self._minibatch_loss(ids, attention, rows, old_logprobs, values, mask, advantages, returns)
                    (loss / cfg.gradient_accumulation_steps).backward()
                    all_stats.append(stats)
                if cfg.max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(
                        [p for group in self.optimizer.param_groups for p in group["params"]], cfg.max_grad_norm
                    )
                self.optimizer.step()
                self.optimizer.zero_grad()
            if cfg.early_stopping and all_stats[-1]["ppo/policy/policykl"] > 1.5 * cfg.target_kl:
                break

        mean_kl = float((kl * mask).sum(dim=-1).mean())
        if cfg.adap_kl_ctrl:
            error = min(max(mean_kl / cfg.target - 1.0, -0.2), 0.2)
            self.kl_coef *= 1.0 + error * n / cfg.horizon
        out: Dict[str, float] = {k: sum(s[k] for s in all_stats) / len(all_stats) for k in all_stats[0]}
        out.update(
            {
                "objective/kl": mean_kl,
                "objective/kl_coef": kl_coef,
                "objective/entropy": float((-old_logprobs * mask).sum(dim=-1).mean()),
                "ppo/mean_non_score_reward": float(_masked_mean(non_score, mask)),
                "ppo/mean_scores": float(score.mean()),
                "ppo/std_scores": float(score.std()) if n > 1 else 0.0,
                "ppo/learning_rate": float(self.optimizer.param_groups[0]["lr"]),
                "tokens/queries_len_mean": sum(len(q) for q in queries) / n,
                "tokens/responses_len_mean": sum(len(r) for r in responses) / n,
            }
        )
        return out

    def _chunks(self, n: int) -> List[Any]:
        """_chunks splits row indices 0..n-1 into forward batches of mini_batch_size."""
        size = self.ppo_config.mini_batch_size
        return [torch.arange(i, min(i + size, n), device=self.device) for i in range(0, n, size)]

    def _advantages(self, values: Any, rewards: Any, mask: Any) -> Tuple[Any, Any, Any]:
        """_advantages returns masked values, whitened GAE advantages and returns (advantages + values)."""
        cfg = self.ppo_config
        values = values * mask
        rewards = rewards * mask
        if cfg.whiten_rewards:
            rewards = _masked_whiten(rewards, mask, shift_mean=False)
        steps = rewards.shape[-1]
        last_gae = torch.zeros_like(rewards[:, 0])
        reversed_advantages = []
        for t in reversed(range(steps)):
            next_values = values[:, t + 1] if t < steps - 1 else torch.zeros_like(values[:, 0])
            delta = rewards[:, t] + cfg.gamma * next_values - values[:, t]
            last_gae = delta + cfg.gamma * cfg.lam * last_gae
            reversed_advantages.append(last_gae)
        advantages = torch.stack(reversed_advantages[::-1], dim=1)
        returns = advantages + values
        return values, _masked_whiten(advantages, mask).detach(), returns

    def _minibatch_loss(
        self, ids: Any, attention: Any, rows: Any, old_logprobs: Any, values: Any, mask: Any, advantages: Any, returns: Any
    ) -> Tuple[Any, Dict[str, float]]:
        """_minibatch_loss is the clipped PPO loss of the given rows, with its statistics."""
        cfg = self.ppo_config
        logprobs, vpreds = self._forward(self.model, ids[rows], attention[rows], values=True)
        old, val, m, adv, ret = old_logprobs[rows], values[rows], mask[rows], advantages[rows], returns[rows]

        vpred_clipped = torch.max(torch.min(vpreds, val + cfg.cliprange_value), val - cfg.cliprange_value)
        vf_losses1 = (vpreds - ret) ** 2
        vf_losses2 = (vpred_clipped - ret) ** 2
        vf_loss = 0.5 * _masked_mean(torch.max(vf_losses1, vf_losses2), m)

        ratio = torch.exp(logprobs - old)
        pg_losses1 = -adv * ratio
        pg_losses2 = -adv * torch.clamp(ratio, 1.0 - cfg.cliprange, 1.0 + cfg.cliprange)
        pg_loss = _masked_mean(torch.max(pg_losses1, pg_losses2), m)
        loss = pg_loss + cfg.vf_coef * vf_loss
        if float(_masked_mean(ratio, m)) > cfg.ratio_threshold:
            # TRL skips minibatches whose mean ratio explodes.
            loss = loss * 0.0

        stats = {
            "ppo/loss/policy": float(pg_loss),
            "ppo/loss/value": float(cfg.vf_coef * vf_loss),
            "ppo/loss/total": float(loss),
            "ppo/policy/approxkl": float(0.5 * _masked_mean((logprobs - old) ** 2, m)),
            "ppo/policy/policykl": float(_masked_mean(old - logprobs, m)),
            "ppo/policy/clipfrac": float(_masked_mean(torch.gt(pg_losses2, pg_losses1).float(), m)),
            "ppo/policy/advantages_mean": float(_masked_mean(adv, m)),
            "ppo/returns/mean": float(_masked_mean(ret, m)),
            "ppo/val/vpred": float(_masked_mean(vpreds, m)),
            "ppo/val/error": float(_masked_mean((vpreds - ret) ** 2, m)),
            "ppo/val/clipfrac": float(_masked_mean(torch.gt(vf_losses2, vf_losses1).float(), m)),
        }
        return loss, stats


def _masked_mean(values: Any, mask: Any) -> Any:
    """_masked_mean is the mean of values where mask is 1."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def _masked_whiten(values: Any, mask: Any, shift_mean: bool = True) -> Any:
    """_masked_whiten normalises values to mean 0 and variance 1 over the mask (unbiased variance, as TRL)."""
    mean = _masked_mean(values, mask)
    count = float(mask.sum())
    var = _masked_mean((values - mean) ** 2, mask)
    if count > 1:
        var = var * count / (count - 1)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def run_episode(
    env: RemoteEnv,
    agent: Agent,
    *,
    seed: Optional[int] = None,
    options: Optional[Dict[str, Any]] = None,
    max_steps: int = 50,
    train: bool = True,
) -> Dict[str, Any]:
    """run_episode plays one episode of env with agent, LlamaGym's loop plus what gymserver needs.

    It is the README loop (``act`` → ``env.step`` → ``assign_reward`` until
    terminated or truncated, then ``terminate_episode``) with four
    additions: the reset's tool schemas go to :meth:`Agent.set_tools`; after
    ``max_steps`` steps the episode is evaluated and the verdict's reward is
    added to the last step's; an episode whose step or evaluation is masked
    (an infrastructure failure) ends with ``terminate_episode(train=False)``
    and is not trained on; and the session is closed at the end, so its
    sandbox does not wait for the next reset. When anything raises after
    the reset, the episode is dropped the same way and the error propagates.

    Returns ``reward`` (sum), ``steps``, ``terminated``, ``truncated``,
    ``termination_reason`` (``"max_steps"`` when cut here), ``mask``
    (True: dropped) and ``train_stats``.
    """
    if max_steps < 1:
        raise ValueError(f"run_episode: max_steps must be at least 1, got {max_steps}")
    observation, info = env.reset(seed=seed, options=options)
    steps, terminated, truncated, masked, reason = 0, False, False, False, ""
    try:
        agent.set_tools(info.get("tools") or [])
        while True:
            action = agent.act(observation)
            observation, reward, terminated, truncated, step_info = env.step(action)
            steps += 1
            masked = masked or bool(step_info.get("mask"))
            reason = str(step_info.get("termination_reason") or "")
            if not (terminated or truncated) and steps >= max_steps:
                verdict = env.evaluate()
                reward += verdict.reward
                masked = masked or verdict.mask
                truncated, reason = True, "max_steps"
            agent.assign_reward(reward)
            if terminated or truncated:
                break
        total = float(sum(agent.current_episode_rewards))
        stats = agent.terminate_episode(train=train and not masked)
    except BaseException:
        agent.terminate_episode(train=False)
        raise
    finally:
        env.close_session()
    return {
        "reward": total,
        "steps": steps,
        "terminated": terminated,
        "truncated": truncated,
        "termination_reason": reason,
        "mask": masked,
        "train_stats": stats,
    }
