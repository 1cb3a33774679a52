"""Twin-test stub of vllm (see _twin_stub): only a supported version, which AsyncRolloutWorker checks."""

import _twin_stub

_twin_stub.stub_package(__name__, __version__="0.17.1")
