"""Stand-in for ``trl.chat_template_utils.parse_response`` (trl/chat_template_utils.py:1143-1193 at f2cd5771).

Upstream asks the tokenizer to parse the generated ids, strips a trailing
EOS from the content, makes the content a string, fills missing tool-call
arguments with ``{}``, and falls back to the decoded text as plain content
when parsing fails (ValueError/TypeError): a malformed tool call is no tool
call.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


def _validate_tool_calls(tool_calls: Any) -> None:
    """_validate_tool_calls rejects tool calls without a name and gives missing arguments ``{}``."""
    if tool_calls is None:
        return
    if not isinstance(tool_calls, list):
        raise ValueError("tool_calls must be a list")
    for tc in tool_calls:
        fn = tc.get("function", tc) if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError("a tool call needs a name")
        if fn.get("arguments") is None:
            fn["arguments"] = {}


def parse_response(tokenizer: Any, ids: List[int], prefix: Optional[List[int]] = None) -> Dict[str, Any]:
    """parse_response returns the assistant message for generated ids, with ``tool_calls`` when the model called tools."""
    try:
        parsed = tokenizer.parse_response(ids)
        if parsed is None:
            raise ValueError("parse_response returned None")
        if isinstance(parsed.get("content"), str):
            parsed["content"] = parsed["content"].removesuffix(tokenizer.eos_token)
        if not parsed.get("content"):
            parsed["content"] = ""
        if "tool_calls" in parsed:
            _validate_tool_calls(parsed["tool_calls"])
    except (ValueError, TypeError):
        parsed = {"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}
    return parsed
