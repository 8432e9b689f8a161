"""User-facing errors: the CLI turns each into one line on stderr and exit code 2."""


class UsageError(Exception):
    """Bad input that the user can fix; the message names the fix."""


class ConfigError(UsageError, ValueError):
    """An experiment or model config that cannot describe a valid run."""


class MissingResource(UsageError):
    """A corpus or model this machine lacks: ``attnlab demo`` skips experiments that need one."""


def first_line(e: Exception, default: str | None = None) -> str:
    """An exception's first line (else ``default``, else its type), short enough for a one-line error."""
    return str(e).splitlines()[0][:160] if str(e) else default or type(e).__name__
