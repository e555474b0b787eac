class UserError(Exception):
    """A mistake the user can fix: printed as one clear message, no traceback, exit status 2."""
