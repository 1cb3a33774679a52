"""The model side of the TRL stand-ins: a character tokenizer with a tool-calling chat template and a scripted policy.

``ToyTokenizer`` plays a Hugging Face tokenizer as TRL uses it:
``apply_chat_template`` (converting callables in ``tools=`` with
``transformers.utils.get_json_schema``, as transformers does),
``parse_response`` (hermes-style ``<tool_call>{json}</tool_call>`` blocks
into ``tool_calls`` with dict arguments, the shape TRL's ``parse_response``
returns: trl/chat_template_utils.py:1143 at TRL f2cd5771), ``decode`` and
``eos_token_id``. One character is one token, so lengths are easy to
reason about. The template renders the tool schemas, one JSON per line,
in a leading system block, so a test can read back exactly what the model
was shown.

``respond`` plays the model (the vLLM server of AsyncGRPOTrainer, the
generate call of GRPOTrainer): it reads a ``[plan:NAME]`` marker from the
prompt and answers the plan's next turn. Both live in this module so that a
spawned worker process can import them.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

EOS = "\x03"
PAD = "\x00"
REPO = Path(__file__).resolve().parents[5]
SOLUTION = (REPO / "examples" / "calculator_api" / "solution" / "app.py").read_text()
TOOLS_HEADER = "<|system|>Tools:\n"


def call(name: str, **arguments: Any) -> str:
    """call is the model text of one tool call."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


#: PLANS are the scripted behaviours: plan name -> the assistant turns in order (the last one repeats).
PLANS: Dict[str, List[str]] = {
    # writes the reference solution and calls mark_done: reward 1 from the step
    "solve": [call("write_file", filepath="app.py", content=SOLUTION), call("mark_done", message="ok"), "Finished."],
    # writes the solution and stops without mark_done: the reward path evaluates it
    "write": [call("write_file", filepath="app.py", content=SOLUTION), "I wrote app.py."],
    # never calls a tool: the starter code is evaluated
    "idle": ["I will not call any tool."],
    # a sandbox failure (fake server only): the sample is masked
    "sandbox": [call("execute_command", command="__sandbox_fail__"), "Something broke."],
    # 61 commands in one turn: past calculator_api's max_actions (60) on the live server
    "budget": [call("write_file", filepath="app.py", content=SOLUTION) + "".join(call("execute_command", command=f"echo {i}") for i in range(61)), "Out of budget."],
    # writes the solution, then reads it back: the long tool output overflows max_completion_length
    "long": [call("write_file", filepath="app.py", content=SOLUTION), call("read_file", filepath="app.py"), "Read it."],
    # a call with a missing argument and one with an unknown argument, then the solution
    "bad-args": [call("write_file", filepath="app.py") + call("execute_command", command="echo hi", shell="bash"), call("write_file", filepath="app.py", content=SOLUTION), "Fixed."],
}


# _choices counts, per first-turn prompt, how many rollouts have started from it.
_choices: Dict[str, int] = {}


def reset_choices() -> None:
    """reset_choices forgets the rollouts seen so far (call it at the start of a test)."""
    _choices.clear()


def respond(prompt_text: str) -> str:
    """respond is the scripted model: the next turn of the prompt's plan, plus EOS.

    ``[plan:a|b]`` offers alternatives: the k-th rollout that starts from the
    same prompt follows alternative k mod 2 (as sampling would make the
    generations of a group differ) and says so in its first message
    (``[chose:a]``), which later turns read back.
    """
    m = re.search(r"\[plan:([\w|-]+)\]", prompt_text)
    if m is None:
        return "No plan." + EOS
    chosen = re.search(r"\[chose:([\w-]+)\]", prompt_text)
    if chosen:
        plan, prefix = chosen.group(1), ""
    else:
        options = m.group(1).split("|")
        k = _choices.get(prompt_text, 0)
        _choices[prompt_text] = k + 1
        plan = options[k % len(options)]
        prefix = f"[chose:{plan}]"
    turns = PLANS[plan]
    done = prompt_text.count("<|assistant|>") - 1  # the generation prompt opens one more
    return prefix + turns[min(done, len(turns) - 1)] + EOS


class ToyTokenizer:
    """ToyTokenizer is a character-level tokenizer with a tool-calling chat template."""

    eos_token = EOS
    pad_token = PAD
    eos_token_id = ord(EOS)
    pad_token_id = ord(PAD)
    bos_token_id = None
    chat_template = "toy"
    # A tokenizer that can parse its own responses; TRL only adds a response schema when none is set.
    response_schema = {"format": "hermes-style <tool_call> blocks"}
    response_template = None

    def encode(self, text: str) -> List[int]:
        """encode returns one id per character."""
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """decode joins the characters, dropping EOS and padding when skip_special_tokens."""
        chars = [chr(int(i)) for i in ids]
        if skip_special_tokens:
            chars = [c for c in chars if c not in (EOS, PAD)]
        return "".join(chars)

    def batch_decode(self, batch: Sequence[Sequence[int]], skip_special_tokens: bool = False) -> List[str]:
        """batch_decode decodes each sequence."""
        return [self.decode(ids, skip_special_tokens=skip_special_tokens) for ids in batch]

    def apply_chat_template(
        self,
        conversation: Any,
        tools: Optional[Sequence[Any]] = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = False,
        chat_template: Optional[str] = None,
        **kwargs: Any,
    ) -> Any:
        """apply_chat_template renders one conversation or a batch, converting callable tools like transformers."""
        from transformers.utils import get_json_schema

        schemas = None
        if tools is not None:
            schemas = []
            for tool in tools:
                if isinstance(tool, dict):
                    schemas.append(tool)
                elif inspect.isfunction(tool) or inspect.ismethod(tool):
                    schemas.append(get_json_schema(tool))
                else:
                    raise ValueError("tools must be JSON schemas or functions")
        batched = bool(conversation) and isinstance(conversation[0], list)
        convs = conversation if batched else [conversation]
        texts = [self._render(c, schemas, add_generation_prompt) for c in convs]
        if not tokenize:
            return texts if batched else texts[0]
        ids = [self.encode(t) for t in texts]
        if return_dict:
            return {"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]}
        return ids if batched else ids[0]

    def _render(self, messages: Sequence[Dict[str, Any]], schemas: Optional[List[Dict[str, Any]]], add_generation_prompt: bool) -> str:
        out = ""
        if schemas:
            out += TOOLS_HEADER + "\n".join(json.dumps(s, sort_keys=True) for s in schemas) + EOS
        for m in messages:
            role = m["role"]
            content = m.get("content") or ""
            if role == "assistant":
                body = content
                for tc in m.get("tool_calls") or []:
                    fn = tc["function"]
                    body += call(fn["name"], **fn["arguments"])
            elif role == "tool":
                body = "<tool_response>" + str(content) + "</tool_response>"
            else:
                body = content
            out += f"<|{role}|>" + body + EOS
        if add_generation_prompt:
            out += "<|assistant|>"
        return out

    def parse_response(self, ids: Sequence[int], prefix: Optional[Sequence[int]] = None) -> Dict[str, Any]:
        """parse_response turns generated ids into an assistant message; malformed tool-call JSON raises ValueError."""
        text = self.decode(ids, skip_special_tokens=True)
        calls = []
        for block in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S):
            obj = json.loads(block)  # json.JSONDecodeError is a ValueError
            calls.append({"type": "function", "function": {"name": obj["name"], "arguments": obj.get("arguments", {})}})
        content = re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.S)
        msg: Dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = calls
        return msg


def rendered_tools(prompt_text: str) -> List[Dict[str, Any]]:
    """rendered_tools reads back the tool schemas a prompt rendered by ToyTokenizer showed the model."""
    if not prompt_text.startswith(TOOLS_HEADER):
        return []
    block = prompt_text[len(TOOLS_HEADER) : prompt_text.index(EOS)]
    return [json.loads(line) for line in block.splitlines()]


class ScriptedModel:
    """ScriptedModel plays GRPOTrainer's policy model: ``generate`` answers every prompt with :func:`respond`."""

    def __init__(self, max_position_embeddings: int = 1 << 20) -> None:
        self.config = _ModelConfig(max_position_embeddings)
        self.training = True
        self.tokenizer = ToyTokenizer()

    def generate(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int) -> List[List[int]]:
        """generate returns the new token ids for each prompt (at most max_new_tokens)."""
        return [self.tokenizer.encode(respond(self.tokenizer.decode(ids)))[:max_new_tokens] for ids in prompt_ids]


class _ModelConfig:
    """_ModelConfig is the part of a model config TRL's tool loop reads."""

    def __init__(self, max_position_embeddings: int) -> None:
        self.max_position_embeddings = max_position_embeddings
