"""The one error of a site's data, shared by the readers of its files and folders."""


class SiteDataError(ValueError):
    """A site's file or folder cannot be used; the message names it and the problem."""
