"""gpudoctor's exit codes (documented in the README).

`diagnose` exits with the workload's own code (128+N when a signal N killed it);
the codes below are gpudoctor's own, chosen from the BSD sysexits range so they
rarely collide with a training script's.
"""

OK = 0
FAIL_ON = 3  # the workload succeeded but --fail-on found findings at that level
ITEM_FAILED = 3  # preflight: a checklist item failed (the same code: "the gate says no")
USAGE = 64  # unknown or conflicting options; gpudoctor's options after the script, rejected by it
BAD_DATA = 65  # corrupt, truncated or foreign session/report/trace file
NOT_FOUND = 66  # script, module or file does not exist
NOT_RUNNABLE = 69  # a directory, a non-Python file, a command that cannot be started; attach: not Linux
INTERNAL = 70  # a gpudoctor bug (please report it)
CANNOT_WRITE = 73  # output directory missing or not writable
OUTPUT_EXISTS = 74  # a report already exists at the requested path (use --force)
DIFFERENT_RUNS = 75  # diff refused: different GPUs or workloads (use --force); merge refused: not one job
TRY_REFUSED = 76  # diagnose --try: the run wrote where a scratch directory cannot contain it (--try-in-place)
NO_PERMISSION = 77  # attach: this user may not read the process (EX_NOPERM)
BAD_POLICY = 78  # preflight policy file unreadable, not TOML, or an unknown key/bad value (EX_CONFIG)
WORKLOAD_UNKNOWN = 1  # the workload's exit status could not be determined

TABLE = [
    (0, "success (the workload's exit code otherwise: diagnose passes it through)"),
    (FAIL_ON, "--fail-on: the workload succeeded but findings reached the level given; preflight: an item failed"),
    (USAGE, ("usage error: unknown or conflicting options, or gpudoctor's options after the script "
            "that the script rejected (they go before it)")),
    (BAD_DATA, "input file is corrupt, truncated, empty, over the limits or not a gpudoctor file"),
    (NOT_FOUND, "script, module or input file not found; attach: no such process"),
    (NOT_RUNNABLE, ("not runnable: a directory, a non-Python file, a command that cannot start, a script that "
                    "does not compile, a package gpudoctor needs is not installed; attach: not possible on this "
                    "platform (not Linux)")),
    (INTERNAL, "internal error in gpudoctor"),
    (CANNOT_WRITE, "output directory cannot be created or written"),
    (OUTPUT_EXISTS, "a report already exists at the output path (nothing was overwritten)"),
    (DIFFERENT_RUNS, ("diff refused: the reports come from different GPUs or workloads; merge refused: the "
                      "sessions are not one job (no ranks, different jobs or world sizes, a rank twice)")),
    (TRY_REFUSED, ("--try refused: the run wrote outside its working directory, where trials in a scratch "
                   "directory would change your files (the diagnosis is written; --try-in-place to allow)")),
    (NO_PERMISSION, "attach: no permission to read that process (run as its user or root)"),
    (BAD_POLICY, "preflight policy unreadable, not TOML, or with an unknown key or a bad value"),
]


class GpudoctorError(Exception):
    """An expected error with a one-line message and an exit code; never a traceback."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
