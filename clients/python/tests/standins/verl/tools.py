"""Stand-ins for ``verl/tools/base_tool.py``, ``verl/tools/schemas.py`` and ``verl/tools/utils/tool_registry.py`` (VERL main b178a3cd).

* ``BaseTool.__init__(config, tool_schema)`` falls back to
  ``self.get_openai_tool_schema()`` when the tool config has no
  ``tool_schema`` and takes its ``name`` from the schema.
* ``OpenAIFunctionToolSchema`` keeps, like the pydantic model, only
  ``type`` and ``function`` (``name``, ``description``, ``parameters`` with
  ``type``, ``properties`` — each ``type``/``description``/``enum`` — and
  ``required``, ``strict``); ``model_dump(exclude_unset=True,
  exclude_none=True)`` is what ``ToolAgentLoop`` hands the chat template.
* ``initialize_tools_from_config(path)`` reads the YAML file's ``tools``
  list (``class_name``, ``config`` with ``type: native``, optional
  ``tool_schema``) and builds one tool per entry.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Dict, List, Optional, Tuple
from uuid import uuid4



class ToolResponse:
    """ToolResponse mirrors the pydantic model: text, image list, video list."""

    def __init__(self, text: Optional[str] = None, image: Optional[List[Any]] = None, video: Optional[List[Any]] = None) -> None:
        if image is not None and not isinstance(image, list):
            raise ValueError("Image must be a list")
        if video is not None and not isinstance(video, list):
            raise ValueError("Video must be a list")
        self.text = text
        self.image = image
        self.video = video


class _Function:
    """_Function is the ``function`` part of a tool schema."""

    def __init__(self, d: Dict[str, Any]) -> None:
        self.name = str(d["name"])
        self.description = str(d["description"])
        p = d.get("parameters") or {"type": "object", "properties": {}, "required": []}
        self.parameters = {
            "type": str(p["type"]),
            "properties": {
                k: {f: v[f] for f in ("type", "description", "enum") if v.get(f) is not None} for k, v in dict(p["properties"]).items()
            },
            "required": list(p["required"]),
        }
        self.strict = bool(d.get("strict", False))
        self._strict_set = "strict" in d


class OpenAIFunctionToolSchema:
    """OpenAIFunctionToolSchema mirrors the pydantic model of a tool schema."""

    def __init__(self, type: str, function: Dict[str, Any]) -> None:
        self.type = str(type)
        self.function = _Function(function)

    @classmethod
    def model_validate(cls, d: Dict[str, Any]) -> "OpenAIFunctionToolSchema":
        """model_validate builds the schema from its dict form (extra keys are ignored, missing ones fail)."""
        return cls(type=d["type"], function=d["function"])

    def model_dump(self, exclude_unset: bool = False, exclude_none: bool = False) -> Dict[str, Any]:
        """model_dump returns the dict form."""
        fn: Dict[str, Any] = {"name": self.function.name, "description": self.function.description, "parameters": self.function.parameters}
        if self.function._strict_set or not exclude_unset:
            fn["strict"] = self.function.strict
        return {"type": self.type, "function": fn}


class BaseTool:
    """BaseTool mirrors ``verl.tools.base_tool.BaseTool``."""

    def __init__(self, config: Dict[str, Any], tool_schema: Optional[OpenAIFunctionToolSchema]) -> None:
        self.config = config
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        assert self.tool_schema is not None, "Tool schema is not set!"
        self.name = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """get_openai_tool_schema returns the tool's schema."""
        return self.tool_schema

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> Tuple[str, ToolResponse]:
        """create makes a tool instance."""
        return (instance_id or str(uuid4())), ToolResponse()

    async def execute(self, instance_id: str, parameters: Dict[str, Any], **kwargs: Any) -> Tuple[ToolResponse, float, Dict[str, Any]]:
        """execute runs the tool."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """calc_reward returns the instance's reward."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """release frees the instance."""


def get_tool_class(cls_name: str) -> type:
    """get_tool_class imports ``module.Class``."""
    module, _, name = cls_name.rpartition(".")
    return getattr(importlib.import_module(module), name)


def initialize_tools_from_config(tools_config_file: str) -> List[BaseTool]:
    """initialize_tools_from_config builds the native tools of a tool config file."""
    with open(tools_config_file) as f:
        cfg = json.load(f)  # the tests write JSON, a subset of YAML
    tools: List[BaseTool] = []
    for entry in cfg["tools"]:
        if entry["config"]["type"] != "native":
            raise NotImplementedError("only native tools are in the stand-in")
        schema = entry.get("tool_schema")
        tool_cls = get_tool_class(entry["class_name"])
        tools.append(tool_cls(config=dict(entry["config"]), tool_schema=OpenAIFunctionToolSchema.model_validate(schema) if schema else None))
    return tools
