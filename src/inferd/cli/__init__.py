"""The ``inferd`` command line; the only owner of signal handlers."""
