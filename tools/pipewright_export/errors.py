"""The exporter's errors. The CLI prints `pipewright-export: error: <message>` (one line) and
exits with `exit_code`: 2 for bad input (the user's module, flags or shapes), 1 when the export
itself failed its own check."""


class ExportError(Exception):
    """Bad input: the message names the module, file or flag at fault."""

    exit_code = 2


class CheckFailed(ExportError):
    """The exported nodes do not reproduce the module (a bug or an untraceable module)."""

    exit_code = 1
