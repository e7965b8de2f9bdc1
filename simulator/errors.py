"""The simulator's input errors, in a module of their own so that the scenario parser and the trace generators
can both raise them without importing each other."""


class ScenarioError(ValueError):
    """An invalid scenario file or option; the message names the field."""
