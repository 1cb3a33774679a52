"""Stand-in for ``skyrl_gym.error`` (SkyRL a9564572, ``skyrl-gym/skyrl_gym/error.py``)."""


class Error(Exception):
    """Error is the base error of skyrl_gym."""


class RegistrationError(Error):
    """RegistrationError is raised for an invalid or duplicate registration."""
