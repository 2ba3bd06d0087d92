"""Errors a user can fix: bad options, bad input files.

Entry points print these as one line and exit non-zero; everything else is a bug
and aborts the job with a traceback.
"""

EXIT_OK = 0
EXIT_FAILURE = 1      # unexpected error (a bug, or the machine)
EXIT_USAGE = 2        # bad option or bad input: fix the command line or the file
EXIT_DIVERGED = 3     # loss or parameters became NaN/inf; the last checkpoint is kept
EXIT_REQUEUE = 75     # checkpoint written on SIGTERM/SIGUSR1: requeue the job (EX_TEMPFAIL)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): the shell's status for it, after the checkpoint it writes


def one_line(text: str) -> str:
    """``text`` with its line breaks and other control characters escaped (``\\n``, ``\\r``,
    ``\\x1b``), as ``repr`` writes them: a path holding a newline keeps its error on one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class MpidweError(Exception):
    """A problem the user can fix; the message is one line, shown without traceback (a path
    in it with a newline or another control character is escaped: ``one_line``)."""

    exit_code = EXIT_USAGE

    def __str__(self) -> str:
        return one_line(super().__str__())


class InputError(MpidweError):
    """An input file is missing, unreadable or malformed."""


class ConfigError(MpidweError):
    """An option has an invalid value."""
