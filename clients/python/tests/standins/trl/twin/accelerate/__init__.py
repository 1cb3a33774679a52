"""Twin-test stub of accelerate (see _twin_stub): a version TRL compares against."""

import _twin_stub

_twin_stub.stub_package(__name__, __version__="1.11.0")
