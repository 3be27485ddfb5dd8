"""The ``quiver`` command's exit codes (imports nothing: the console script's entry
point uses them before any command module is loaded)."""

EXIT_OK = 0
EXIT_TROUBLE = 1
"""The command found trouble: an unhealthy store in ``fsck``, a corrupt file met by
``status``, a lock held elsewhere, an unknown or duplicate subscriber."""
EXIT_USAGE = 2
"""Bad flags or option values, a missing or non-Quiver path."""
EXIT_INTERRUPTED = 130
"""128 + SIGINT, the shell's convention for a command stopped by Ctrl-C."""
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a command killed by writing to a closed pipe exits with."""
