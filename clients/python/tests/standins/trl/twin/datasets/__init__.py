"""Twin-test stub of datasets (see _twin_stub)."""

import _twin_stub

_twin_stub.stub_package(__name__)
