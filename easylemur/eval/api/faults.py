"""What a model endpoint's failure is, for every floor above this one: the client raises these
(`backends/client.py`), the agent protocols and the suite tell them apart (a refusal is the
benchmark's to judge; a lost request is never scored)."""

from easylemur.errors import RunError


class EndpointError(RunError):
    """The endpoint refused the request (an HTTP error other than 5xx and 429)."""


class EndpointLost(EndpointError):
    """The endpoint gave no usable answer on any try (transient faults): the request is lost."""
