"""gpudoctor's built-in checks: one module per check, the module docstring is its page.

Each module declares its check once, with ``@check(...)`` on its function
(gpudoctor.model.check). The registry scans this package for them (modules whose name
starts with ``_`` are helpers), so nothing else lists the built-ins.
"""
