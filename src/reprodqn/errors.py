"""The one error type the CLI turns into a single line and a non-zero exit."""


class InputError(Exception):
    """Bad input from the user: a params field, a file, a checkpoint. The message is one line
    that names the field or file and what was expected."""
