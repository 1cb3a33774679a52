"""transformers' ``get_json_schema`` rules: how a Python callable becomes a tool schema.

It follows the rules of transformers' ``get_json_schema`` (src/transformers/utils/chat_template_utils.py
on transformers main, the 5.x version that skips an implicit ``self``/``cls`` and knows ``Literal``),
which ``apply_chat_template`` applies to every function or bound method in ``tools=``:

* the docstring is required; its description is the text before the first
  ``Args:``/``Returns:``/``Raises:`` heading; ``Args:`` holds one
  ``name: description`` entry per argument (continuation lines are joined);
* every argument but an implicit leading ``self``/``cls`` needs a type hint,
  and every argument needs a description;
* the properties follow ``typing.get_type_hints`` order; an argument without
  a default is required;
* int/float/str/bool/None/Any map to integer/number/string/boolean/null/{},
  other classes to object; ``Optional``/``Union`` to the member types plus
  ``nullable``; ``Literal`` to an enum; ``list[T]`` to an array of T;
  ``dict[K, V]`` to an object with ``additionalProperties``;
* a description ending in ``(choices: [...])`` becomes an ``enum``;
* a ``return`` hint becomes a ``return`` entry (described by ``Returns:``).

This is our own code reproducing those rules, not transformers' source. It
backs ``transformers.utils.get_json_schema`` in the stand-in ``transformers``
package and in the twin tests' stubs.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["get_json_schema", "DocstringParsingException", "TypeHintParsingException"]

_HEADINGS = ("Args:", "Returns:", "Raises:")


class DocstringParsingException(Exception):
    """DocstringParsingException is a docstring get_json_schema cannot use."""


class TypeHintParsingException(Exception):
    """TypeHintParsingException is a type hint get_json_schema cannot express."""


def _sections(doc: str) -> Tuple[str, Dict[str, str], Optional[str]]:
    """_sections splits a Google docstring into description, argument descriptions and the Returns text."""
    first = min((doc.find(h) for h in _HEADINGS if h in doc), default=len(doc))
    description = doc[:first].strip()
    args: Dict[str, str] = {}
    m = re.search(r"\n\s*Args:\n(.*?)(?=Returns:|Raises:|\Z)", doc, re.S)
    if m:
        current = ""
        for line in m.group(1).splitlines():
            if not line.strip():
                continue
            entry = re.match(r"\s*(\w+):\s*(.*)$", line)
            if entry:
                current = entry.group(1)
                args[current] = entry.group(2).strip()
            elif current:
                args[current] = (args[current] + " " + line.strip()).strip()
    returns = None
    r = re.search(r"\n\s*Returns:\n(.*?)(?=Raises:|\Z)", doc, re.S)
    if r:
        returns = " ".join(r.group(1).split())
    return description, args, returns


def _hint_schema(hint: Any) -> Dict[str, Any]:
    """_hint_schema converts one type hint to a JSON schema fragment."""
    basic = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"}, bool: {"type": "boolean"}, type(None): {"type": "null"}}
    if hint is Any:
        return {}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is None:
        return dict(basic.get(hint, {"type": "object"}))
    if origin is typing.Union or origin is types.UnionType:
        members = [_hint_schema(a) for a in args if a is not type(None)]
        if len(members) == 1:
            out = members[0]
        elif all(isinstance(m.get("type"), str) for m in members):
            out = {"type": sorted(m["type"] for m in members)}
        else:
            out = {"anyOf": members}
        if type(None) in args:
            out["nullable"] = True
        return out
    if origin is typing.Literal:
        kinds: List[str] = []
        for a in args:
            kind = basic.get(type(a), {}).get("type")
            if kind and kind not in kinds:
                kinds.append(kind)
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _hint_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if len(args) < 2 or ... in args:
            raise TypeHintParsingException(f"cannot express {hint}")
        return {"type": "array", "prefixItems": [_hint_schema(a) for a in args]}
    if origin is dict:
        out = {"type": "object"}
        if len(args) == 2:
            out["additionalProperties"] = _hint_schema(args[1])
        return out
    raise TypeHintParsingException(f"cannot express {hint}")


def get_json_schema(func: Callable[..., Any]) -> Dict[str, Any]:
    """get_json_schema returns the OpenAI tool schema transformers derives from a callable."""
    name = getattr(func, "__name__", "operation")
    doc = inspect.getdoc(func)
    if not doc:
        raise DocstringParsingException(f"{name} has no docstring")
    description, arg_docs, returns_doc = _sections(doc.strip())
    hints = typing.get_type_hints(func)
    params = list(inspect.signature(func).parameters.values())
    implicit = params[0].name if params and params[0].name in ("self", "cls") and params[0].annotation is inspect.Parameter.empty else None
    required = []
    for p in params:
        if p.name == implicit:
            continue
        if p.annotation is inspect.Parameter.empty:
            raise TypeHintParsingException(f"argument {p.name} of {name} has no type hint")
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    properties = {k: _hint_schema(v) for k, v in hints.items() if k != implicit}
    ret = properties.pop("return", None)
    if ret is not None and returns_doc is not None:
        ret["description"] = returns_doc
    for arg, prop in properties.items():
        if arg not in arg_docs:
            raise DocstringParsingException(f"the docstring of {name} does not describe {arg!r}")
        text = arg_docs[arg]
        choices = re.search(r"\(choices:\s*(.*?)\)\s*$", text, re.I)
        if choices:
            prop["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            text = text[: choices.start()].strip()
        prop["description"] = text
    parameters: Dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    out: Dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if ret is not None:
        out["return"] = ret
    return {"type": "function", "function": out}
