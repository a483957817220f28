"""Exceptions of hvd's Python bindings, with Horovod's names (horovod.common.exceptions).

Errors of a collective reach Python from hvd_wait() as a status code and the runtime's message
(hvd_last_error()); `error_from_status` turns them into exceptions:

  INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS   ValueError     the caller passed something wrong
                                                               (bad dtype, splits, root, set)
  FAILED_PRECONDITION                           RuntimeError   not initialized, already shut down,
                                                               a CUDA tensor in a CPU-only build
  UNIMPLEMENTED                                 NotImplementedError
  ABORTED, UNAVAILABLE, DEADLINE_EXCEEDED,      HorovodInternalError
  INTERNAL, CANCELLED, anything else                           the collective failed: a peer died
                                                               or is unreachable, a stall or a
                                                               mismatch between ranks (failed on
                                                               every rank), a shutdown elsewhere

HorovodInternalError is a RuntimeError, as in Horovod, so `except RuntimeError` catches it too.
"""


class HorovodInternalError(RuntimeError):
    """A collective operation failed (a peer failed or left, a mismatch between ranks, a stall).

    In Horovod's elastic mode this is the recoverable error that triggers a reset.
    """


class HostsUpdatedInterrupt(RuntimeError):
    """The job's membership changed (elastic mode: hvdrun --min-np/--max-np). Raised on every
    rank by State.commit()/check_host_updates() when the launcher has published a membership
    newer than the one this session joined; hvd.elastic.run then resets and goes on.
    `skip_sync` is true when the new membership only lost workers (the survivors hold the same
    state, so it need not be broadcast again)."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


# hvd::StatusCode values (runtime/include/hvd/status.h); part of the C ABI.
OK = 0
INVALID_ARGUMENT = 1
NOT_FOUND = 2
ALREADY_EXISTS = 3
DEADLINE_EXCEEDED = 4
UNAVAILABLE = 5
FAILED_PRECONDITION = 6
ABORTED = 7
INTERNAL = 8
UNIMPLEMENTED = 9
CANCELLED = 10

_VALUE_ERRORS = (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS)


def error_from_status(code, message, context=None):
    """The exception for a failed hvd call (status `code`, the runtime's `message`)."""
    text = message or "hvd call failed with status %d" % code
    if context:
        text = "%s: %s" % (context, text)
    if code in _VALUE_ERRORS:
        return ValueError(text)
    if code == FAILED_PRECONDITION:
        return RuntimeError(text)
    if code == UNIMPLEMENTED:
        return NotImplementedError(text)
    return HorovodInternalError(text)
