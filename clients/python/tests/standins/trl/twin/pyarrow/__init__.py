"""Twin-test stub of pyarrow (see _twin_stub)."""

import _twin_stub

_twin_stub.stub_package(__name__)
