"""Stand-in for ``transformers.utils``: ``get_json_schema`` (see json_schema_rules)."""

from json_schema_rules import DocstringParsingException, TypeHintParsingException, get_json_schema

__all__ = ["get_json_schema", "DocstringParsingException", "TypeHintParsingException"]
