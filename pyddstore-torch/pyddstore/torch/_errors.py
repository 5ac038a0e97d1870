"""Exception classes of pyddstore.torch that belong to two builtin families.

Code written for this package catches the first bases (KeyError or
IndexError for a field key or position that a sample lacks, IndexError for
a window outside the dataset); code
written for the original DDStore's torch layer catches ValueError for the
same mistakes. Both work.
"""


class FieldNotFoundError(KeyError, IndexError, ValueError):
    """fields= names keys (KeyError) or positions (IndexError) that the samples
    do not have."""

    def __str__(self):
        # KeyError's __str__ would print the message with quotes around it.
        return str(self.args[0]) if self.args else ""


class WindowRangeError(IndexError, ValueError):
    """A window start outside the rows of the dataset."""
