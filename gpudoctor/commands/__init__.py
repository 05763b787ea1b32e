"""One module per subcommand; each exposes ``register(subparsers)``."""

COMMANDS = ["diagnose", "report", "analyze", "diff", "sweep", "catalog", "demo", "preflight", "attach", "merge"]
