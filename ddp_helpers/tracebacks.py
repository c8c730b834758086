"""What a learner sees when a launch fails: their own code and the failing rank's error, not the launcher's.

    from ddp_helpers.tracebacks import learner_frames

Every launcher frame sets ``__tracebackhide__``; :func:`learner_frames` drops those frames from a
traceback, and :func:`install_traceback_filter` makes IPython display the launcher's errors through it.
"""

from __future__ import annotations

import types
from typing import Any


def learner_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback without the frames that set ``__tracebackhide__`` (this launcher's, and
    IPython's own bottom frame): what is left is the learner's code."""
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_locals.get("__tracebackhide__"):
            kept.append(tb)
        tb = tb.tb_next
    head = None
    for entry in reversed(kept):
        head = types.TracebackType(head, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return head


def _show_learner_frames(shell: Any, etype: type[BaseException], value: BaseException,
                         tb: types.TracebackType | None, tb_offset: int | None = None) -> None:
    """IPython handler for launch errors: show the learner's frames and the message (which
    holds the failing rank's own traceback), not the launcher's frames."""
    shell.showtraceback((etype, value, learner_frames(tb)), tb_offset=0)
    return None


def install_traceback_filter(wanted: tuple[type[BaseException], ...]) -> None:
    """In IPython, show tracebacks of the ``wanted`` exception types through :func:`learner_frames`
    (the launcher passes LaunchError and LaunchStopped).

    IPython always prints the innermost frame even when it sets ``__tracebackhide__``
    (IPython/core/ultratb.py, VerboseTB.format_exception_as_a_whole), which would be the
    launcher's ``raise``; a custom exception handler (InteractiveShell.set_custom_exc) for
    these types only leaves it out. Other exceptions keep IPython's own display.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and getattr(shell, "custom_exceptions", None) != wanted:
        shell.set_custom_exc(wanted, _show_learner_frames)
