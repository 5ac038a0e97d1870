"""Exception classes of pyddstore and the mapping from libddstore error codes.

Each class also derives from the matching builtin exception so that code
written with ``except KeyError`` / ``except ValueError`` keeps working.
"""

# Error codes of enum dds_error (libddstore/include/ddstore/ddstore.h). The C
# library never renumbers them, so they are safe to hard-code here.
DDS_OK = 0
DDS_EINVAL = -1
DDS_ENOMEM = -2
DDS_ENOENT = -3
DDS_EEXIST = -4
DDS_ERANGE = -5
DDS_EMPI = -6
DDS_EFABRIC = -7
DDS_ENOTSUP = -8
DDS_ESTATE = -9
DDS_EPEER = -10
DDS_ETIMEDOUT = -11
DDS_EIO = -12
DDS_EPROTO = -13
DDS_EOVERFLOW = -14
DDS_EMISMATCH = -15
DDS_EAGAIN = -16

CODE_NAMES = {
    DDS_OK: "DDS_OK",
    DDS_EINVAL: "DDS_EINVAL",
    DDS_ENOMEM: "DDS_ENOMEM",
    DDS_ENOENT: "DDS_ENOENT",
    DDS_EEXIST: "DDS_EEXIST",
    DDS_ERANGE: "DDS_ERANGE",
    DDS_EMPI: "DDS_EMPI",
    DDS_EFABRIC: "DDS_EFABRIC",
    DDS_ENOTSUP: "DDS_ENOTSUP",
    DDS_ESTATE: "DDS_ESTATE",
    DDS_EPEER: "DDS_EPEER",
    DDS_ETIMEDOUT: "DDS_ETIMEDOUT",
    DDS_EIO: "DDS_EIO",
    DDS_EPROTO: "DDS_EPROTO",
    DDS_EOVERFLOW: "DDS_EOVERFLOW",
    DDS_EMISMATCH: "DDS_EMISMATCH",
    DDS_EAGAIN: "DDS_EAGAIN",
}


class DDStoreError(Exception):
    """Base class of every error raised by pyddstore.

    ``code`` is the libddstore error code (a negative ``DDS_E*`` value, see
    ``pyddstore.CODE_NAMES``); ``message`` the text, usually libddstore's
    ``dds_last_error()`` detail.
    """

    def __init__(self, message, code=DDS_EINVAL):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self):
        # KeyError's __str__ would quote the message; every subclass prints
        # the plain text instead.
        return self.message

    def __reduce__(self):
        # Keep `code` across pickling (multiprocessing, mpi4py object
        # collectives); the default would rebuild from args only.
        return (self.__class__, (self.message, self.code))


class DDStoreValueError(DDStoreError, ValueError):
    """Invalid argument: bad name, size, shape, contiguity, or ranks that disagree."""


class DDStoreKeyError(DDStoreError, KeyError, ValueError):
    """Unknown variable name, or a receive buffer that is not registered.

    Also a ValueError: the original DDStore raised ValueError for both.
    """


class DDStoreTypeError(DDStoreError, TypeError):
    """Wrong dtype or wrong kind of object for an array argument."""


class DDStoreDTypeError(DDStoreTypeError, NotImplementedError):
    """A dtype the store cannot hold (complex, strings, objects, records with
    object fields), or an output whose dtype does not match the variable's.

    Also a NotImplementedError: the original DDStore raised that for a dtype
    it did not support.
    """


class DDStoreRangeError(DDStoreError, IndexError, ValueError):
    """Rows out of range, negative indices or offsets.

    Also a ValueError: the original DDStore raised ValueError for a read
    outside the variable, and code written for it catches that.
    """


class DDStoreStateError(DDStoreError, RuntimeError):
    """Call not valid in the store's current state (freed, forked child, reader)."""


class DDStoreNotSupportedError(DDStoreError, NotImplementedError):
    """Method, provider or feature not available in this build or on this machine."""


class DDStoreTimeoutError(DDStoreError, TimeoutError):
    """Waited too long (method-2 handshake, remote peer)."""


_CLASS_OF_CODE = {
    DDS_EINVAL: DDStoreValueError,
    DDS_ENOENT: DDStoreKeyError,
    DDS_EEXIST: DDStoreValueError,
    DDS_ERANGE: DDStoreRangeError,
    DDS_ENOTSUP: DDStoreNotSupportedError,
    DDS_ESTATE: DDStoreStateError,
    DDS_ETIMEDOUT: DDStoreTimeoutError,
    DDS_EOVERFLOW: DDStoreValueError,
    DDS_EMISMATCH: DDStoreValueError,
}


def error_class(code):
    """Return the exception class for libddstore error `code`."""
    return _CLASS_OF_CODE.get(code, DDStoreError)


def make_error(code, message):
    """Build the exception for libddstore error `code` with `message`."""
    return error_class(code)(message, code)


# Every class of this module by name: how another rank's error is raised here
# (a name not in this table: DDStoreError).
_CLASS_OF_NAME = {c.__name__: c for c in (
    DDStoreError, DDStoreValueError, DDStoreKeyError, DDStoreTypeError, DDStoreDTypeError,
    DDStoreRangeError, DDStoreStateError, DDStoreNotSupportedError, DDStoreTimeoutError)}


def verdict(err):
    """What the other ranks of a collective call learn of this rank's error
    `err` (picklable): ``(class name, code, message)``, or None for no error.
    An error that is not a DDStoreError travels as a DDStoreError whose
    message starts with its class name."""
    if err is None:
        return None
    if isinstance(err, DDStoreError):
        return (type(err).__name__, err.code, str(err))
    return (DDStoreError.__name__, DDS_EINVAL, f"{type(err).__name__}: {err}")


def raise_verdict(rank, failed):
    """Raise, on this rank, the error `failed` (a :func:`verdict`) of rank
    `rank`: its class and code, its message prefixed with ``rank <rank>:``."""
    name, code, message = failed
    raise _CLASS_OF_NAME.get(name, DDStoreError)(f"rank {rank}: {message}", code)
