"""Analyses several checks, the engine and the verdict share, computed from a Session.

Checks read a Session; what more than one of them needs (is the GPU fully used,
what would a step cost without a cause) lives here, so each check states its
own rule and no check imports another.
"""
