"""Twin-test stub of accelerate.utils: one process, so gathering returns its input and nothing is a PEFT model."""

import _twin_stub


def gather(tensor):  # noqa: ANN001, ANN201
    """gather returns tensor: with one process there is nothing to gather."""
    return tensor


def gather_object(obj):  # noqa: ANN001, ANN201
    """gather_object returns obj: with one process there is nothing to gather."""
    return obj


def broadcast_object_list(obj, from_process=0):  # noqa: ANN001, ANN201
    """broadcast_object_list returns obj: with one process there is nothing to broadcast."""
    return obj


def is_peft_model(model) -> bool:  # noqa: ANN001
    """is_peft_model is False: the twin's model is no PEFT model."""
    return False


def set_seed(seed, device_specific=False) -> None:  # noqa: ANN001
    """set_seed does nothing: the scripted model is deterministic."""


_twin_stub.stub_package(
    __name__,
    gather=gather,
    gather_object=gather_object,
    broadcast_object_list=broadcast_object_list,
    is_peft_model=is_peft_model,
    set_seed=set_seed,
)
