"""Twin-test stub of transformers.utils: ``get_json_schema`` follows transformers' rules (json_schema_rules); the rest are stubs."""

import _twin_stub
from json_schema_rules import get_json_schema

_twin_stub.stub_package(__name__, get_json_schema=get_json_schema)
