class DatasetUserError(Exception):
    """A request the user can fix; the message goes back verbatim in `DatasetReply.error`."""
